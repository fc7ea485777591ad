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
use crate::medium::{IfReq, LinkStats, interface_mtu, tcp_checksum_ok};
use crate::{Medium, WireEnd};
use smoltcp::phy::{self, Device, DeviceCapabilities};
use smoltcp::time::{Duration, Instant};
use smoltcp::wire::{EthernetFrame, EthernetProtocol, IpProtocol, Ipv4Packet, TcpPacket};
use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::num::NonZeroUsize;
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::fs::OpenOptionsExt;

const TUNSETIFF: libc::c_ulong = 0x4004_54ca;
const TUNSETOFFLOAD: libc::c_ulong = 0x4004_54d0;
const IFF_TAP: libc::c_short = 0x0002;
const IFF_NO_PI: libc::c_short = 0x1000;
const IFF_VNET_HDR: libc::c_short = 0x4000;
const TUN_F_CSUM: libc::c_uint = 0x01;
const TUN_F_TSO4: libc::c_uint = 0x02;
const ETHERNET_HEADER: usize = 14;
/// The largest frame: an IPv4 packet of 64 KiB in an Ethernet header.
const LARGEST_FRAME: usize = 65535 + ETHERNET_HEADER;

/// `struct virtio_net_hdr`, in the host's byte order (a TAP's default).
const VNET_HDR: usize = 10;
const VIRTIO_NET_HDR_F_NEEDS_CSUM: u8 = 1;
const VIRTIO_NET_HDR_F_DATA_VALID: u8 = 2;
const VIRTIO_NET_HDR_GSO_TCPV4: u8 = 1;

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

pub struct TxToken<'a> {
    file: &'a File,
    buf: &'a mut Vec<u8>,
    /// The link's largest frame: larger ones go as GSO.
    link: usize,
    /// The segment size the stack asked a TSO segment to be cut to.
    gso_size: Option<u16>,
    stats: &'a mut LinkStats,
}

impl phy::RxToken for RxToken<'_> {
    fn consume<R, F: FnOnce(&[u8]) -> R>(self, f: F) -> R {
        f(self.frame)
    }
}

impl phy::TxToken for TxToken<'_> {
    fn set_meta(&mut self, meta: phy::PacketMeta) {
        self.gso_size = meta.segmentation_offload_size.map(u16::from);
    }

    fn consume<R, F: FnOnce(&mut [u8]) -> R>(self, len: usize, f: F) -> R {
        // The stack never asks for more than the largest frame it was told
        // the TAP takes; were it to, the frame is sent whole.
        debug_assert!(VNET_HDR + len <= self.buf.len(), "a {len}-byte frame on a TAP");
        if self.buf.len() < VNET_HDR + len {
            self.buf.resize(VNET_HDR + len, 0);
        }
        let (hdr, frame) = self.buf[..VNET_HDR + len].split_at_mut(VNET_HDR);
        let r = f(frame);
        if !offload(hdr, frame, self.link, self.gso_size) {
            self.stats.tx_dropped += 1;
            tracing::debug!(len, "a frame larger than the link that is not TCP/IPv4; dropped");
            return r;
        }
        match (&*self.file).write(&self.buf[..VNET_HDR + len]) {
            Ok(_) => self.stats.tx_frames += 1,
            Err(e) => {
                self.stats.tx_dropped += 1;
                tracing::debug!(error = %e, "TAP write failed; frame dropped");
            }
        }
        r
    }
}

/// Fill the virtio-net header `hdr` for `frame`. A TCP/IPv4 segment leaves
/// its checksum to the kernel (the checksum field holds the pseudo-header
/// sum, as a stack handing a NIC a segment leaves it), and one larger than
/// the link's `link`-byte frames goes as GSO, cut to `gso_size` (the
/// stack's) or else to what fits the link. False if a frame too large for
/// the link is not such a segment.
fn offload(hdr: &mut [u8], frame: &mut [u8], link: usize, gso_size: Option<u16>) -> bool {
    hdr.fill(0);
    let Some((ip_at, tcp_at, payload_at)) = tcp_ipv4_offsets(frame) else {
        return frame.len() <= link;
    };
    let ip = &frame[ip_at..];
    let tcp_len = usize::from(u16::from_be_bytes([ip[2], ip[3]])) - (tcp_at - ip_at);
    let mut sum = u32::from(u8::from(IpProtocol::Tcp)) + tcp_len as u32;
    for word in ip[12..20].chunks_exact(2) {
        sum += u32::from(u16::from_be_bytes([word[0], word[1]]));
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    frame[tcp_at + 16..tcp_at + 18].copy_from_slice(&(sum as u16).to_be_bytes());
    hdr[0] = VIRTIO_NET_HDR_F_NEEDS_CSUM;
    hdr[6..8].copy_from_slice(&(tcp_at as u16).to_ne_bytes());
    hdr[8..10].copy_from_slice(&16u16.to_ne_bytes());
    if frame.len() > link {
        let fits = (link - ETHERNET_HEADER).saturating_sub(payload_at - ip_at);
        let mss = gso_size.map_or(fits, usize::from).min(fits);
        if mss == 0 {
            return false;
        }
        hdr[1] = VIRTIO_NET_HDR_GSO_TCPV4;
        hdr[2..4].copy_from_slice(&(payload_at as u16).to_ne_bytes());
        hdr[4..6].copy_from_slice(&(mss as u16).to_ne_bytes());
    }
    true
}

/// Where the IP header, the TCP header and the payload of a TCP/IPv4
/// frame start.
fn tcp_ipv4_offsets(frame: &[u8]) -> Option<(usize, usize, usize)> {
    let eth = EthernetFrame::new_checked(frame).ok()?;
    if eth.ethertype() != EthernetProtocol::Ipv4 {
        return None;
    }
    let ip = Ipv4Packet::new_checked(eth.payload()).ok()?;
    if ip.next_header() != IpProtocol::Tcp {
        return None;
    }
    let tcp = TcpPacket::new_checked(ip.payload()).ok()?;
    let tcp_at = ETHERNET_HEADER + usize::from(ip.header_len());
    Some((ETHERNET_HEADER, tcp_at, tcp_at + usize::from(tcp.header_len())))
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
            let vouched = VIRTIO_NET_HDR_F_NEEDS_CSUM | VIRTIO_NET_HDR_F_DATA_VALID;
            if self.rx[0] & vouched == 0 && !tcp_checksum_ok(&self.rx[VNET_HDR..self.rx_len]) {
                self.stats.rx_dropped += 1;
                continue;
            }
            self.stats.rx_frames += 1;
            let Tap { file, rx, rx_len, tx, stats, mtu, .. } = self;
            return Some((
                RxToken { frame: &rx[VNET_HDR..*rx_len] },
                TxToken { file, buf: tx, link: *mtu, gso_size: None, stats },
            ));
        }
    }

    fn transmit(&mut self, _now: Instant) -> Option<TxToken<'_>> {
        let Tap { file, tx, stats, mtu, .. } = self;
        Some(TxToken { file, buf: tx, link: *mtu, gso_size: None, stats })
    }

    fn capabilities(&self) -> DeviceCapabilities {
        let mut caps = DeviceCapabilities::default();
        caps.medium = phy::Medium::Ethernet;
        caps.max_transmission_unit = self.mtu;
        caps.checksum.tcp = phy::Checksum::None;
        caps.segmentation.tcpv4 = NonZeroUsize::new(LARGEST_FRAME);
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

#[cfg(test)]
mod tests {
    use super::*;

    /// An Ethernet frame with a TCP/IPv4 segment of `payload` bytes.
    fn segment(payload: usize) -> Vec<u8> {
        let mut f = vec![0u8; ETHERNET_HEADER + 20 + 20 + payload];
        f[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
        let ip = &mut f[ETHERNET_HEADER..];
        ip[0] = 0x45;
        ip[2..4].copy_from_slice(&((40 + payload) as u16).to_be_bytes());
        ip[8] = 64;
        ip[9] = 6;
        ip[12..16].copy_from_slice(&[198, 18, 0, 3]);
        ip[16..20].copy_from_slice(&[198, 18, 0, 2]);
        let tcp = &mut ip[20..];
        tcp[12] = 5 << 4;
        for (i, b) in tcp[20..].iter_mut().enumerate() {
            *b = i as u8;
        }
        f
    }

    /// What a NIC (or the kernel) does with a partial checksum: sum the
    /// TCP segment from `csum_start`, seeded by the field, and store it.
    fn complete(hdr: &[u8], frame: &mut [u8]) {
        let start = usize::from(u16::from_ne_bytes([hdr[6], hdr[7]]));
        let at = start + usize::from(u16::from_ne_bytes([hdr[8], hdr[9]]));
        let mut sum: u32 = frame[start..]
            .chunks(2)
            .map(|w| u32::from(u16::from_be_bytes([w[0], *w.get(1).unwrap_or(&0)])))
            .sum();
        while sum > 0xffff {
            sum = (sum & 0xffff) + (sum >> 16);
        }
        frame[at..at + 2].copy_from_slice(&(!(sum as u16)).to_be_bytes());
    }

    fn verifies(frame: &[u8]) -> bool {
        let ip = Ipv4Packet::new_checked(&frame[ETHERNET_HEADER..]).unwrap();
        let tcp = TcpPacket::new_checked(ip.payload()).unwrap();
        tcp.verify_checksum(&ip.src_addr().into(), &ip.dst_addr().into())
    }

    #[test]
    fn a_segment_leaves_its_checksum_partial_and_a_large_one_goes_as_gso() {
        let mut hdr = [0xffu8; VNET_HDR];
        let mut small = segment(100);
        assert!(offload(&mut hdr, &mut small, 1514, None));
        assert_eq!((hdr[0], hdr[1]), (VIRTIO_NET_HDR_F_NEEDS_CSUM, 0));
        assert_eq!(u16::from_ne_bytes([hdr[6], hdr[7]]), 34);
        assert_eq!(u16::from_ne_bytes([hdr[8], hdr[9]]), 16);
        assert!(!verifies(&small));
        complete(&hdr, &mut small);
        assert!(verifies(&small), "the pseudo-header sum seeds a checksum that verifies");

        let mut large = segment(20_000);
        assert!(offload(&mut hdr, &mut large, 1514, Some(1000)));
        assert_eq!(hdr[1], VIRTIO_NET_HDR_GSO_TCPV4);
        assert_eq!(u16::from_ne_bytes([hdr[2], hdr[3]]), 54, "headers up to the payload");
        assert_eq!(u16::from_ne_bytes([hdr[4], hdr[5]]), 1000, "the stack's segment size");
        // Without one, what fits the link; never more than fits.
        assert!(offload(&mut hdr, &mut segment(20_000), 1514, None));
        assert_eq!(u16::from_ne_bytes([hdr[4], hdr[5]]), 1460);
        assert!(offload(&mut hdr, &mut segment(20_000), 1514, Some(9000)));
        assert_eq!(u16::from_ne_bytes([hdr[4], hdr[5]]), 1460);
        complete(&hdr, &mut large);
        assert!(verifies(&large));
    }

    #[test]
    fn a_frame_too_large_for_the_link_that_is_not_tcp_is_refused() {
        let mut hdr = [0u8; VNET_HDR];
        let mut arp = vec![0u8; 2000];
        arp[12..14].copy_from_slice(&0x0806u16.to_be_bytes());
        assert!(!offload(&mut hdr, &mut arp, 1514, None));
        assert!(offload(&mut hdr, &mut arp[..60], 1514, None));
        assert_eq!(hdr, [0; VNET_HDR], "nothing to offload");
    }
}
