//! Where Ethernet frames come from and go to.

pub(crate) mod bpf;
pub mod link;
pub mod packet;
pub(crate) mod sleep;
pub mod tap;
pub(crate) mod vnet;
pub mod wire;
pub mod xdp;

use smoltcp::phy::{Device, PacketMeta, RxToken as _, TxToken as _};
use smoltcp::time::Instant;
use smoltcp::wire::{
    EthernetFrame, EthernetProtocol, IpProtocol, Ipv4Address, Ipv4Packet, TcpPacket, checksum,
};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

pub(crate) const ETHERNET_HEADER: usize = 14;
/// The largest frame: an IPv4 packet of 64 KiB in an Ethernet header.
pub(crate) const LARGEST_FRAME: usize = 65535 + ETHERNET_HEADER;
/// The largest TCP segment handed to the kernel to cut (GSO), Ethernet
/// header included. One of the device's `gso_max_size` (65,536 on a TAP
/// or a veth, and no TAP takes more) or more the kernel cuts in software
/// before it goes anywhere, as `validate_xmit_skb` does, so that a TAP
/// with TSO on the other side of a bridge reads seven 9,014-byte frames
/// and a runt where one frame was written.
pub(crate) const LARGEST_GSO_FRAME: usize = 65535;

/// Frames a Linux interface medium carried, and those lost on the way: a
/// send the kernel could not take (its queue was full), a frame too large
/// to receive with no room left to queue it. The largest frame each way,
/// Ethernet header included, says whether TCP segments crossed whole: a
/// segment the kernel cut arrives no larger than the link's MTU.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LinkStats {
    pub rx_frames: u64,
    pub rx_dropped: u64,
    pub rx_largest: usize,
    pub tx_frames: u64,
    pub tx_dropped: u64,
    pub tx_largest: usize,
}

#[repr(C)]
pub(crate) struct IfReq {
    pub(crate) name: [libc::c_char; libc::IFNAMSIZ],
    /// `ifr_flags` or `ifr_mtu`, depending on the request.
    pub(crate) data: [u8; 24],
}

impl IfReq {
    pub(crate) fn new(name: &str) -> io::Result<Self> {
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

/// [`Medium::receive_into`](crate::Medium::receive_into) by a copy: the
/// next frame `dev` receives, copied to the start of `buf` (grown if need
/// be).
pub(crate) fn receive_copied<D: Device + ?Sized>(
    dev: &mut D,
    now: Instant,
    buf: &mut Vec<u8>,
) -> Option<(usize, PacketMeta)> {
    let (rx, _) = dev.receive(now)?;
    let meta = rx.meta();
    let len = rx.consume(|frame| {
        if buf.len() < frame.len() {
            buf.resize(frame.len(), 0);
        }
        buf[..frame.len()].copy_from_slice(frame);
        frame.len()
    });
    Some((len, meta))
}

/// [`Medium::transmit_from`](crate::Medium::transmit_from) by a copy into
/// one of `dev`'s transmit tokens.
pub(crate) fn transmit_copied<D: Device + ?Sized>(
    dev: &mut D,
    now: Instant,
    frame: &[u8],
    meta: PacketMeta,
) -> bool {
    let Some(mut tx) = dev.transmit(now) else { return false };
    tx.set_meta(meta);
    tx.consume(frame.len(), |buf| buf.copy_from_slice(frame));
    true
}

/// Set socket option `opt` at `level` to `val`.
pub(crate) fn setsockopt<T>(
    fd: RawFd,
    level: libc::c_int,
    opt: libc::c_int,
    val: &T,
) -> io::Result<()> {
    // SAFETY: `val` is a live value of the size we pass.
    let r = unsafe {
        libc::setsockopt(fd, level, opt, (val as *const T).cast(), size_of::<T>() as u32)
    };
    if r < 0 { Err(io::Error::last_os_error()) } else { Ok(()) }
}

/// An error that says what was being done when it happened.
pub(crate) fn context(what: impl std::fmt::Display) -> impl FnOnce(io::Error) -> io::Error {
    move |e| io::Error::new(e.kind(), format!("{what}: {e}"))
}

/// A memory mapping, unmapped on drop: of `fd` at `offset`, shared with
/// the kernel, or anonymous memory without one.
pub(crate) struct Mapping {
    pub(crate) base: *mut u8,
    pub(crate) len: usize,
}

// SAFETY: a mapping belongs to its medium alone; the kernel's side of it is
// handed over through the medium's ring indices or slot status words.
unsafe impl Send for Mapping {}

impl Mapping {
    /// Map `len` bytes; `populate` faults them all in now rather than on
    /// first touch.
    pub(crate) fn new(
        fd: Option<RawFd>,
        len: usize,
        offset: u64,
        populate: bool,
    ) -> io::Result<Self> {
        let (mut flags, fd) = match fd {
            Some(fd) => (libc::MAP_SHARED, fd),
            None => (libc::MAP_PRIVATE | libc::MAP_ANONYMOUS, -1),
        };
        if populate {
            flags |= libc::MAP_POPULATE;
        }
        // SAFETY: a fresh mapping at an address of the kernel's choosing.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                flags,
                fd,
                offset as libc::off_t,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Self { base: base.cast(), len })
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: the mapping we made, of this length.
        unsafe { libc::munmap(self.base.cast(), self.len) };
    }
}

/// Ask the kernel about interface `name` with `request` (SIOCGIF*), on a
/// datagram socket of its own; the `ifreq` the kernel filled.
fn interface_ioctl(name: &str, request: libc::c_ulong) -> io::Result<IfReq> {
    let mut req = IfReq::new(name)?;
    // SAFETY: a plain datagram socket, owned below.
    let sock = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if sock < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a descriptor we just opened, closed when this drops.
    let sock = unsafe { OwnedFd::from_raw_fd(sock) };
    // SAFETY: the request fills the `ifreq` we own.
    if unsafe { libc::ioctl(sock.as_raw_fd(), request, &mut req as *mut IfReq) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(req)
}

/// The IP MTU of interface `name` (SIOCGIFMTU).
pub(crate) fn interface_mtu(name: &str) -> io::Result<usize> {
    let data = interface_ioctl(name, libc::SIOCGIFMTU)?.data;
    let mtu = i32::from_ne_bytes([data[0], data[1], data[2], data[3]]);
    usize::try_from(mtu).map_err(|_| io::Error::other("negative MTU"))
}

/// Whether interface `name` is administratively up (SIOCGIFFLAGS).
fn interface_up(name: &str) -> io::Result<bool> {
    let data = interface_ioctl(name, libc::SIOCGIFFLAGS)?.data;
    Ok(libc::c_short::from_ne_bytes([data[0], data[1]]) & libc::IFF_UP as libc::c_short != 0)
}

/// The index of interface `name`, which must exist and be up.
pub(crate) fn interface_index(name: &str) -> io::Result<u32> {
    let c_name = std::ffi::CString::new(name)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "bad interface name"))?;
    // SAFETY: a NUL-terminated name.
    let ifindex = unsafe { libc::if_nametoindex(c_name.as_ptr()) };
    if ifindex == 0 {
        return Err(io::Error::new(io::ErrorKind::NotFound, format!("no interface {name}")));
    }
    if !interface_up(name)? {
        return Err(io::Error::other(format!("interface {name} is down (ip link set {name} up)")));
    }
    Ok(ifindex)
}

/// Whether a frame's TCP checksum is right; true for anything but a
/// well-formed TCP/IPv4 segment (the stack judges those).
pub(crate) fn tcp_checksum_ok(frame: &[u8]) -> bool {
    let Some((src, dst, tcp)) = tcp_segment(frame) else { return true };
    TcpPacket::new_unchecked(&frame[tcp]).verify_checksum(&src.into(), &dst.into())
}

/// The sum of a TCP/IPv4 pseudo-header, folded, not complemented: what a
/// sender that leaves the checksum to a NIC puts in the checksum field.
pub(crate) fn pseudo_header_sum(src: Ipv4Address, dst: Ipv4Address, tcp_len: usize) -> u16 {
    checksum::pseudo_header_v4(&src, &dst, IpProtocol::Tcp, tcp_len as u32)
}

/// Whether a received frame may go up: anything but a well-formed
/// TCP/IPv4 segment, a segment whose checksum verifies, or one whose
/// checksum was left for a NIC to finish, which is finished here. A medium
/// that loses the kernel's word on the checksum (AF_XDP) sees the last
/// from senders on this host: Linux's TCP across a veth or a bridge, or a
/// guest through a TAP, leave the pseudo-header sum in the field. A
/// corrupted segment passes for one of those only if its field happens to
/// hold exactly that sum (one in 65,536).
pub(crate) fn tcp_checksum_finished(frame: &mut [u8]) -> bool {
    let Some((src, dst, tcp)) = tcp_segment(frame) else { return true };
    let len = tcp.len();
    let mut tcp = TcpPacket::new_unchecked(&mut frame[tcp]);
    if tcp.verify_checksum(&src.into(), &dst.into()) {
        return true;
    }
    if tcp.checksum() != pseudo_header_sum(src, dst, len) {
        return false;
    }
    tcp.fill_checksum(&src.into(), &dst.into());
    true
}

/// The addresses of a well-formed TCP/IPv4 frame and where its TCP
/// segment lies.
fn tcp_segment(frame: &[u8]) -> Option<(Ipv4Address, Ipv4Address, std::ops::Range<usize>)> {
    let (ip_at, tcp_at, _) = tcp_ipv4_offsets(frame)?;
    let ip = Ipv4Packet::new_unchecked(&frame[ip_at..]);
    Some((ip.src_addr(), ip.dst_addr(), tcp_at..ip_at + usize::from(ip.total_len())))
}

/// Where the IP header, the TCP header and the payload of a well-formed
/// TCP/IPv4 frame start.
pub(crate) fn tcp_ipv4_offsets(frame: &[u8]) -> Option<(usize, usize, usize)> {
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
