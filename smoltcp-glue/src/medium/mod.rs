//! Where Ethernet frames come from and go to.

pub mod link;
pub mod packet;
pub(crate) mod sleep;
pub mod tap;
pub(crate) mod vnet;
pub mod wire;

use smoltcp::wire::{EthernetFrame, EthernetProtocol, IpProtocol, Ipv4Packet, TcpPacket};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

pub(crate) const ETHERNET_HEADER: usize = 14;
/// The largest frame: an IPv4 packet of 64 KiB in an Ethernet header.
pub(crate) const LARGEST_FRAME: usize = 65535 + ETHERNET_HEADER;

/// Frames a Linux interface medium carried, and those lost on the way: a
/// send the kernel could not take (its queue was full), a frame too large
/// to receive with no room left to queue it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LinkStats {
    pub rx_frames: u64,
    pub rx_dropped: u64,
    pub tx_frames: u64,
    pub tx_dropped: u64,
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
pub(crate) fn interface_up(name: &str) -> io::Result<bool> {
    let data = interface_ioctl(name, libc::SIOCGIFFLAGS)?.data;
    Ok(libc::c_short::from_ne_bytes([data[0], data[1]]) & libc::IFF_UP as libc::c_short != 0)
}

/// Whether a frame's TCP checksum is right; true for anything but a
/// well-formed TCP/IPv4 segment (the stack judges those).
pub(crate) fn tcp_checksum_ok(frame: &[u8]) -> bool {
    let Ok(eth) = EthernetFrame::new_checked(frame) else { return true };
    if eth.ethertype() != EthernetProtocol::Ipv4 {
        return true;
    }
    let Ok(ip) = Ipv4Packet::new_checked(eth.payload()) else { return true };
    if ip.next_header() != IpProtocol::Tcp {
        return true;
    }
    let Ok(tcp) = TcpPacket::new_checked(ip.payload()) else { return true };
    tcp.verify_checksum(&ip.src_addr().into(), &ip.dst_addr().into())
}
