//! A Linux TAP device: Ethernet frames to and from the kernel.
//!
//! Non-blocking, one preallocated buffer each way (no allocation per
//! frame), readiness through `poll(2)`. Opening needs CAP_NET_ADMIN or a
//! persistent TAP owned by the user, in the caller's network namespace.

use crate::medium::sleep::FdSleep;
use crate::medium::{IfReq, LinkStats, interface_mtu};
use crate::{Medium, WireEnd};
use smoltcp::phy::{self, Device, DeviceCapabilities};
use smoltcp::time::{Duration, Instant};
use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::fs::OpenOptionsExt;

const TUNSETIFF: libc::c_ulong = 0x4004_54ca;
const IFF_TAP: libc::c_short = 0x0002;
const IFF_NO_PI: libc::c_short = 0x1000;
const ETHERNET_HEADER: usize = 14;

/// A TAP interface opened in the current network namespace.
pub struct Tap {
    file: File,
    name: String,
    mtu: usize,
    rx: Vec<u8>,
    rx_len: usize,
    tx: Vec<u8>,
    stats: LinkStats,
    sleep: FdSleep,
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
        Ok(Self {
            sleep: FdSleep::new()?,
            file,
            name: name.into(),
            mtu: frame,
            rx: vec![0; frame],
            rx_len: 0,
            tx: vec![0; frame],
            stats: LinkStats::default(),
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn stats(&self) -> LinkStats {
        self.stats
    }

    fn fd(&self) -> RawFd {
        self.file.as_raw_fd()
    }
}

pub struct RxToken<'a> {
    frame: &'a [u8],
}

pub struct TxToken<'a> {
    file: &'a File,
    buf: &'a mut Vec<u8>,
    stats: &'a mut LinkStats,
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

impl Medium for Tap {
    /// Rings the bell `wait` listens for too.
    fn waker(&self) -> std::task::Waker {
        self.sleep.waker()
    }

    fn wait(&self, timeout: Option<Duration>) {
        self.sleep.sleep(self.fd(), timeout)
    }

    fn wait_with(&self, also: &WireEnd, timeout: Option<Duration>) {
        self.sleep.sleep_with(self.fd(), also, timeout)
    }
}
