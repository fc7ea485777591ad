//! Sleeping on a descriptor frames arrive on, with a bell: an eventfd that
//! other threads ring (storage answering) and that an in-process wire this
//! thread also serves rings when a frame lands on it.

use crate::WireEnd;
use crate::medium::wire::Wake;
use smoltcp::time::Duration;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::Arc;

pub(crate) struct FdSleep {
    bell: Arc<OwnedFd>,
}

impl FdSleep {
    pub(crate) fn new() -> io::Result<Self> {
        // SAFETY: eventfd returns a new descriptor or -1.
        let bell = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if bell < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `bell` is a descriptor we just opened and nobody else owns.
        Ok(Self { bell: Arc::new(unsafe { OwnedFd::from_raw_fd(bell) }) })
    }

    /// Sleep until `fd` is readable, the bell rings, or `timeout` passes
    /// (100 ms without one).
    pub(crate) fn sleep(&self, fd: RawFd, timeout: Option<Duration>) {
        let bell = self.bell.as_raw_fd();
        let mut fds = [
            libc::pollfd { fd, events: libc::POLLIN, revents: 0 },
            libc::pollfd { fd: bell, events: libc::POLLIN, revents: 0 },
        ];
        let ms = timeout.map_or(100, |t| t.total_millis().min(i32::MAX as u64) as i32);
        // SAFETY: pollfds we own.
        unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, ms) };
        if fds[1].revents & libc::POLLIN != 0 {
            let mut count = [0u8; 8];
            // SAFETY: an 8-byte read from our non-blocking eventfd.
            unsafe { libc::read(bell, count.as_mut_ptr().cast(), count.len()) };
        }
    }

    /// Like [`sleep`](Self::sleep), and a frame arriving at `also` rings
    /// the bell.
    pub(crate) fn sleep_with(&self, fd: RawFd, also: &WireEnd, timeout: Option<Duration>) {
        if !also.arm(&Wake::EventFd(self.bell.clone())) {
            self.sleep(fd, timeout);
        }
        also.disarm();
    }

    /// Rings the bell from any thread.
    pub(crate) fn waker(&self) -> std::task::Waker {
        Arc::new(Wake::EventFd(self.bell.clone())).into()
    }
}
