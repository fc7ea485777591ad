//! A Linux TAP device: Ethernet frames to and from the kernel.
//!
//! Non-blocking, one preallocated buffer each way (no allocation per
//! frame), readiness through `poll(2)`. Opening needs CAP_NET_ADMIN or a
//! persistent TAP owned by the user, in the caller's network namespace.

use crate::medium::wire::Wake;
use crate::{Medium, WireEnd};
use smoltcp::phy::{self, Device, DeviceCapabilities};
use smoltcp::time::{Duration, Instant};
use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::fs::OpenOptionsExt;
use std::sync::Arc;

const TUNSETIFF: libc::c_ulong = 0x4004_54ca;
const IFF_TAP: libc::c_short = 0x0002;
const IFF_NO_PI: libc::c_short = 0x1000;
const ETHERNET_HEADER: usize = 14;

#[repr(C)]
struct IfReq {
    name: [libc::c_char; libc::IFNAMSIZ],
    /// `ifr_flags` or `ifr_mtu`, depending on the request.
    data: [u8; 24],
}

impl IfReq {
    fn new(name: &str) -> io::Result<Self> {
        if name.is_empty() || name.len() >= libc::IFNAMSIZ || name.contains('\0') {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("bad interface name {name:?}"),
            ));
        }
        let mut req = IfReq { name: [0; libc::IFNAMSIZ], data: [0; 24] };
        for (d, s) in req.name.iter_mut().zip(name.bytes()) {
            *d = s as libc::c_char;
        }
        Ok(req)
    }
}

/// Frames the TAP device could not take (the kernel's queue was full).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TapStats {
    pub rx_frames: u64,
    pub tx_frames: u64,
    pub tx_dropped: u64,
}

/// A TAP interface opened in the current network namespace.
pub struct Tap {
    file: File,
    name: String,
    mtu: usize,
    rx: Vec<u8>,
    rx_len: usize,
    tx: Vec<u8>,
    stats: TapStats,
    /// Rung by another end this thread serves, while it sleeps on the TAP
    /// ([`Medium::wait_with`]).
    bell: Arc<OwnedFd>,
}

impl Tap {
    /// Attach to TAP interface `name` (created if it does not exist and we
    /// may). `mtu` is the IP MTU; without it, the interface's is used.
    pub fn open(name: &str, mtu: Option<usize>) -> io::Result<Self> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_NONBLOCK)
            .open("/dev/net/tun")
            .map_err(|e| io::Error::new(e.kind(), format!("cannot open /dev/net/tun: {e}")))?;
        let mut req = IfReq::new(name)?;
        req.data[..2].copy_from_slice(&(IFF_TAP | IFF_NO_PI).to_ne_bytes());
        // SAFETY: TUNSETIFF reads an `ifreq` we own, of the size the kernel expects.
        if unsafe { libc::ioctl(file.as_raw_fd(), TUNSETIFF, &mut req as *mut IfReq) } < 0 {
            let e = io::Error::last_os_error();
            return Err(io::Error::new(e.kind(), format!("cannot attach to TAP {name}: {e}")));
        }
        let ip_mtu = match mtu {
            Some(m) => m,
            None => interface_mtu(name)?,
        };
        let frame = ip_mtu + ETHERNET_HEADER;
        // SAFETY: eventfd returns a new descriptor or -1.
        let bell = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if bell < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `bell` is a descriptor we just opened and nobody else owns.
        let bell = Arc::new(unsafe { OwnedFd::from_raw_fd(bell) });
        Ok(Self {
            bell,
            file,
            name: name.into(),
            mtu: frame,
            rx: vec![0; frame],
            rx_len: 0,
            tx: vec![0; frame],
            stats: TapStats::default(),
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn stats(&self) -> TapStats {
        self.stats
    }

    fn fd(&self) -> RawFd {
        self.file.as_raw_fd()
    }
}

/// The IP MTU of interface `name` (SIOCGIFMTU).
fn interface_mtu(name: &str) -> io::Result<usize> {
    // SAFETY: a plain datagram socket, closed below.
    let sock = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM, 0) };
    if sock < 0 {
        return Err(io::Error::last_os_error());
    }
    let mut req = IfReq::new(name)?;
    // SAFETY: SIOCGIFMTU fills the `ifreq` we own.
    let r = unsafe { libc::ioctl(sock, libc::SIOCGIFMTU, &mut req as *mut IfReq) };
    let err = io::Error::last_os_error();
    // SAFETY: `sock` is ours.
    unsafe { libc::close(sock) };
    if r < 0 {
        return Err(err);
    }
    let mtu = i32::from_ne_bytes([req.data[0], req.data[1], req.data[2], req.data[3]]);
    usize::try_from(mtu).map_err(|_| io::Error::other("negative MTU"))
}

pub struct RxToken<'a> {
    frame: &'a [u8],
}

pub struct TxToken<'a> {
    file: &'a File,
    buf: &'a mut Vec<u8>,
    stats: &'a mut TapStats,
}

impl phy::RxToken for RxToken<'_> {
    fn consume<R, F: FnOnce(&[u8]) -> R>(self, f: F) -> R {
        f(self.frame)
    }
}

impl phy::TxToken for TxToken<'_> {
    fn consume<R, F: FnOnce(&mut [u8]) -> R>(self, len: usize, f: F) -> R {
        // The stack never asks for more than the MTU it was told; were it
        // to, the frame is sent whole, never cut short.
        debug_assert!(len <= self.buf.len(), "a {len}-byte frame on a smaller TAP MTU");
        if self.buf.len() < len {
            self.buf.resize(len, 0);
        }
        let r = f(&mut self.buf[..len]);
        match (&*self.file).write(&self.buf[..len]) {
            Ok(_) => self.stats.tx_frames += 1,
            Err(e) => {
                self.stats.tx_dropped += 1;
                tracing::debug!(error = %e, "TAP write failed; frame dropped");
            }
        }
        r
    }
}

impl Device for Tap {
    type RxToken<'a> = RxToken<'a>;
    type TxToken<'a> = TxToken<'a>;

    fn receive(&mut self, _now: Instant) -> Option<(RxToken<'_>, TxToken<'_>)> {
        match (&self.file).read(&mut self.rx) {
            Ok(n) if n > 0 => self.rx_len = n,
            Ok(_) => return None,
            Err(e) => {
                if e.kind() != io::ErrorKind::WouldBlock {
                    tracing::debug!(error = %e, "TAP read failed");
                }
                return None;
            }
        }
        self.stats.rx_frames += 1;
        let Tap { file, rx, rx_len, tx, stats, .. } = self;
        Some((RxToken { frame: &rx[..*rx_len] }, TxToken { file, buf: tx, stats }))
    }

    fn transmit(&mut self, _now: Instant) -> Option<TxToken<'_>> {
        let Tap { file, tx, stats, .. } = self;
        Some(TxToken { file, buf: tx, stats })
    }

    fn capabilities(&self) -> DeviceCapabilities {
        let mut caps = DeviceCapabilities::default();
        caps.medium = phy::Medium::Ethernet;
        caps.max_transmission_unit = self.mtu;
        caps
    }
}

fn poll_in(fds: &mut [libc::pollfd], timeout: Option<Duration>) {
    let ms = timeout.map_or(100, |t| t.total_millis().min(i32::MAX as u64) as i32);
    // SAFETY: pollfds we own.
    unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, ms) };
}

impl Tap {
    /// Sleep until a frame comes, the bell rings, or `timeout` passes.
    fn sleep(&self, timeout: Option<Duration>) {
        let bell = self.bell.as_raw_fd();
        let mut fds = [
            libc::pollfd { fd: self.fd(), events: libc::POLLIN, revents: 0 },
            libc::pollfd { fd: bell, events: libc::POLLIN, revents: 0 },
        ];
        poll_in(&mut fds, timeout);
        if fds[1].revents & libc::POLLIN != 0 {
            let mut count = [0u8; 8];
            // SAFETY: an 8-byte read from our non-blocking eventfd.
            unsafe { libc::read(bell, count.as_mut_ptr().cast(), count.len()) };
        }
    }
}

impl Medium for Tap {
    /// Rings the bell `wait` listens for too.
    fn waker(&self) -> std::task::Waker {
        Arc::new(Wake::EventFd(self.bell.clone())).into()
    }

    fn wait(&self, timeout: Option<Duration>) {
        self.sleep(timeout)
    }

    fn wait_with(&self, also: &WireEnd, timeout: Option<Duration>) {
        if !also.arm(&Wake::EventFd(self.bell.clone())) {
            self.sleep(timeout);
        }
        also.disarm();
    }
}
