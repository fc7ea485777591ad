//! A Linux TAP device: Ethernet frames to and from the kernel.
//!
//! Non-blocking, one preallocated buffer each way (no allocation per
//! frame), readiness through `poll(2)`. Opening needs CAP_NET_ADMIN or a
//! persistent TAP owned by the user, in the caller's network namespace.
//!
//! Each frame carries a virtio-net header (`IFF_VNET_HDR`), and the TAP
//! takes checksum and TCP segmentation offload (`TUNSETOFFLOAD`), as a NIC
//! does. On transmit the stack computes no TCP checksum (the kernel
//! finishes it where a frame leaves for a device that needs it, and
//! nowhere else) and, told the TAP segments, hands down TCP segments of up
//! to 64 KiB in one `write`, which the kernel cuts to the stack's segment
//! size only where it must (a bridge port or a peer without TSO); another
//! TAP with TSO reads them whole. On receive, frames come up as large as
//! the sender made them; one the kernel vouches for (sent by this host,
//! its checksum left for a NIC, or already verified) goes up as it is,
//! any other TCP segment has its checksum verified here, and a bad one is
//! dropped. The link's MTU still bounds what the other end sends, through
//! the MSS the stack advertises.

use crate::medium::sleep::FdSleep;
use crate::medium::vnet::{self, TxToken, VNET_HDR};
use crate::medium::{
    ETHERNET_HEADER, IfReq, LARGEST_FRAME, LinkStats, interface_mtu, tcp_checksum_ok,
};
use crate::{Medium, WireEnd};
use smoltcp::phy::{self, Device, DeviceCapabilities};
use smoltcp::time::{Duration, Instant};
use std::fs::{File, OpenOptions};
use std::io::{self, Read};
use std::os::fd::{AsFd, AsRawFd, RawFd};
use std::os::unix::fs::OpenOptionsExt;

const TUNSETIFF: libc::c_ulong = 0x4004_54ca;
const TUNSETOFFLOAD: libc::c_ulong = 0x4004_54d0;
const IFF_TAP: libc::c_short = 0x0002;
const IFF_NO_PI: libc::c_short = 0x1000;
const IFF_VNET_HDR: libc::c_short = 0x4000;
const TUN_F_CSUM: libc::c_uint = 0x01;
const TUN_F_TSO4: libc::c_uint = 0x02;

/// A TAP interface opened in the current network namespace.
pub struct Tap {
    file: File,
    name: String,
    /// Largest frame the link carries, Ethernet header included; larger
    /// ones go down as GSO.
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
        req.data[..2].copy_from_slice(&(IFF_TAP | IFF_NO_PI | IFF_VNET_HDR).to_ne_bytes());
        // SAFETY: TUNSETIFF reads an `ifreq` we own, of the size the kernel expects.
        if unsafe { libc::ioctl(file.as_raw_fd(), TUNSETIFF, &mut req as *mut IfReq) } < 0 {
            let e = io::Error::last_os_error();
            return Err(io::Error::new(e.kind(), format!("cannot attach to TAP {name}: {e}")));
        }
        let ip_mtu = match mtu {
            Some(m) => m,
            None => interface_mtu(name)?,
        };
        let offload = TUN_F_CSUM | TUN_F_TSO4;
        // SAFETY: TUNSETOFFLOAD takes its flags by value.
        if unsafe { libc::ioctl(file.as_raw_fd(), TUNSETOFFLOAD, offload as libc::c_ulong) } < 0 {
            let e = io::Error::last_os_error();
            return Err(io::Error::new(e.kind(), format!("TAP {name}: no offloads: {e}")));
        }
        Ok(Self {
            sleep: FdSleep::new()?,
            file,
            name: name.into(),
            mtu: ip_mtu + ETHERNET_HEADER,
            rx: vec![0; VNET_HDR + LARGEST_FRAME],
            rx_len: 0,
            tx: vec![0; VNET_HDR + LARGEST_FRAME],
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

impl phy::RxToken for RxToken<'_> {
    fn consume<R, F: FnOnce(&[u8]) -> R>(self, f: F) -> R {
        f(self.frame)
    }
}

impl Device for Tap {
    type RxToken<'a> = RxToken<'a>;
    type TxToken<'a> = TxToken<'a>;

    fn receive(&mut self, _now: Instant) -> Option<(RxToken<'_>, TxToken<'_>)> {
        loop {
            match (&self.file).read(&mut self.rx) {
                Ok(n) if n > VNET_HDR => self.rx_len = n,
                Ok(_) => return None,
                Err(e) => {
                    if e.kind() != io::ErrorKind::WouldBlock {
                        tracing::debug!(error = %e, "TAP read failed");
                    }
                    return None;
                }
            }
            if !vnet::vouched(&self.rx) && !tcp_checksum_ok(&self.rx[VNET_HDR..self.rx_len]) {
                self.stats.rx_dropped += 1;
                continue;
            }
            self.stats.rx_frames += 1;
            let Tap { file, rx, rx_len, tx, stats, mtu, .. } = self;
            return Some((
                RxToken { frame: &rx[VNET_HDR..*rx_len] },
                TxToken::new((*file).as_fd(), tx, *mtu, stats),
            ));
        }
    }

    fn transmit(&mut self, _now: Instant) -> Option<TxToken<'_>> {
        let Tap { file, tx, stats, mtu, .. } = self;
        Some(TxToken::new((*file).as_fd(), tx, *mtu, stats))
    }

    fn capabilities(&self) -> DeviceCapabilities {
        vnet::capabilities(self.mtu)
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
