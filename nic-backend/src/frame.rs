//! Ethernet/IPv4/TCP framing as the NIC sees it: find the TCP segment in a
//! frame, check its checksums, and fix the TCP checksum after the NIC wrote
//! digest bytes into an outgoing segment.

use smoltcp::wire::{
    EthernetFrame, EthernetProtocol, IpAddress, IpProtocol, Ipv4Packet, TcpPacket,
};
use std::net::SocketAddrV4;

/// The TCP segment of a frame.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Segment {
    /// Source and destination as seen in the frame.
    pub src: SocketAddrV4,
    pub dst: SocketAddrV4,
    pub seq: u32,
    pub ack: Option<u32>,
    pub syn: bool,
    /// Where the payload lies in the frame.
    pub payload_at: usize,
    pub payload_len: usize,
    /// Where the TCP header lies in the frame, and the IP addresses, for
    /// recomputing its checksum.
    tcp_at: usize,
    tcp_len: usize,
}

/// The TCP segment in `frame`, from its headers alone (no checksums yet:
/// most frames are not for an offloaded socket and need no more).
/// Fragments are left alone.
pub(crate) fn parse_headers(frame: &[u8]) -> Option<Segment> {
    let eth = EthernetFrame::new_checked(frame).ok()?;
    if eth.ethertype() != EthernetProtocol::Ipv4 {
        return None;
    }
    let ip_at = frame.len() - eth.payload().len();
    let ip = Ipv4Packet::new_checked(eth.payload()).ok()?;
    if ip.next_header() != IpProtocol::Tcp || ip.more_frags() || ip.frag_offset() != 0 {
        return None;
    }
    let ip_payload = ip.payload();
    let tcp_at = ip_at + usize::from(ip.header_len());
    let tcp = TcpPacket::new_checked(ip_payload).ok()?;
    let header_len = usize::from(tcp.header_len());
    Some(Segment {
        src: SocketAddrV4::new(ip.src_addr(), tcp.src_port()),
        dst: SocketAddrV4::new(ip.dst_addr(), tcp.dst_port()),
        seq: tcp.seq_number().0 as u32,
        ack: tcp.ack().then(|| tcp.ack_number().0 as u32),
        syn: tcp.syn(),
        payload_at: tcp_at + header_len,
        payload_len: ip_payload.len() - header_len,
        tcp_at,
        tcp_len: ip_payload.len(),
    })
}

/// Both the IPv4 header checksum and the TCP checksum of `seg` are right.
/// A segment that fails is never used.
pub(crate) fn verify(frame: &[u8], seg: &Segment) -> bool {
    let Ok(eth) = EthernetFrame::new_checked(frame) else { return false };
    let Ok(ip) = Ipv4Packet::new_checked(eth.payload()) else { return false };
    if !ip.verify_checksum() {
        return false;
    }
    let tcp = TcpPacket::new_unchecked(&frame[seg.tcp_at..seg.tcp_at + seg.tcp_len]);
    tcp.verify_checksum(&IpAddress::Ipv4(*seg.src.ip()), &IpAddress::Ipv4(*seg.dst.ip()))
}

impl Segment {
    /// Recompute the TCP checksum after the payload changed.
    pub fn fix_checksum(&self, frame: &mut [u8]) {
        let mut tcp = TcpPacket::new_unchecked(&mut frame[self.tcp_at..self.tcp_at + self.tcp_len]);
        tcp.fill_checksum(&IpAddress::Ipv4(*self.src.ip()), &IpAddress::Ipv4(*self.dst.ip()));
    }
}

/// Turn a 32-bit TCP sequence number into a stream offset: bytes since the
/// first after `isn`, taking the 64-bit offset nearest to `near`.
pub(crate) fn stream_offset(seq: u32, isn: u32, near: u64) -> u64 {
    let rel = seq.wrapping_sub(isn.wrapping_add(1));
    let delta = rel.wrapping_sub(near as u32) as i32;
    near.wrapping_add(delta as i64 as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_unwrap_across_the_sequence_space() {
        assert_eq!(stream_offset(101, 100, 0), 0);
        assert_eq!(stream_offset(1101, 100, 0), 1000);
        // Wrapped past 2^32.
        let isn = u32::MAX - 10;
        let near = (1u64 << 32) + 5;
        assert_eq!(
            stream_offset(isn.wrapping_add(1).wrapping_add(near as u32), isn, near - 100),
            near
        );
        // Old data behind `near` comes out below it.
        assert_eq!(stream_offset(601, 100, 1000), 500);
    }
}
