//! Ethernet/IPv4/TCP framing as the NIC sees it: find the TCP segment in a
//! frame, check its checksums, and fix the TCP checksum after the NIC wrote
//! digest bytes into an outgoing segment.

use smoltcp::wire::{EthernetFrame, EthernetProtocol, IpProtocol, Ipv4Packet, TcpPacket};
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
    seg.tcp_sum(&frame[seg.tcp_at..seg.tcp_at + seg.tcp_len]) == 0xffff
}

impl Segment {
    /// Recompute the TCP checksum after the payload changed.
    pub fn fix_checksum(&self, frame: &mut [u8]) {
        let tcp = &mut frame[self.tcp_at..self.tcp_at + self.tcp_len];
        tcp[TCP_CHECKSUM..TCP_CHECKSUM + 2].fill(0);
        let sum = !self.tcp_sum(tcp);
        tcp[TCP_CHECKSUM..TCP_CHECKSUM + 2].copy_from_slice(&sum.to_be_bytes());
    }

    /// The ones'-complement sum of the TCP segment `tcp` with its pseudo
    /// header (RFC 793, RFC 1071), folded to 16 bits.
    fn tcp_sum(&self, tcp: &[u8]) -> u16 {
        let (s, d) = (self.src.ip().octets(), self.dst.ip().octets());
        let pseudo = u64::from(u16::from_be_bytes([s[0], s[1]]))
            + u64::from(u16::from_be_bytes([s[2], s[3]]))
            + u64::from(u16::from_be_bytes([d[0], d[1]]))
            + u64::from(u16::from_be_bytes([d[2], d[3]]))
            + 6
            + tcp.len() as u64;
        fold(pseudo + u64::from(ones_sum(tcp)))
    }
}

/// Where the checksum sits in a TCP header.
const TCP_CHECKSUM: usize = 16;

/// The ones'-complement sum of `data` as big-endian 16-bit words, folded
/// to 16 bits. It adds 32-bit words into a 64-bit accumulator, which
/// cannot overflow for any frame, eight bytes at a time: a few times
/// faster than a word at a time, as a NIC's checksum engine would be.
pub(crate) fn ones_sum(data: &[u8]) -> u16 {
    let (chunks, rest) = data.as_chunks::<8>();
    let mut acc: u64 = 0;
    for c in chunks {
        let v = u64::from_ne_bytes(*c);
        acc += (v & 0xffff_ffff) + (v >> 32);
    }
    let (pairs, odd) = rest.as_chunks::<2>();
    for p in pairs {
        acc += u64::from(u16::from_ne_bytes(*p));
    }
    if let Some(&b) = odd.first() {
        acc += u64::from(u16::from_ne_bytes([b, 0]));
    }
    // Summed in native order; one swap at the end gives network order
    // (RFC 1071, section 2 (B)).
    u16::from_be(fold(acc))
}

fn fold(mut acc: u64) -> u16 {
    while acc > 0xffff {
        acc = (acc & 0xffff) + (acc >> 16);
    }
    acc as u16
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
    fn ones_sum_agrees_with_smoltcp_at_every_length_and_alignment() {
        use smoltcp::wire::{IpAddress, Ipv4Address};
        let bytes: Vec<u8> = (0..2100u32).map(|i| (i * 131 + i / 7) as u8).collect();
        let (a, b) = (Ipv4Address::new(198, 18, 0, 2), Ipv4Address::new(198, 18, 0, 3));
        for start in 0..9 {
            for len in [20, 21, 22, 23, 27, 64, 1001, 2000] {
                let mut tcp = bytes[start..start + len].to_vec();
                tcp[12] = 0x50; // data offset 5: a plausible header
                let seg = Segment {
                    src: SocketAddrV4::new(a, 1),
                    dst: SocketAddrV4::new(b, 2),
                    seq: 0,
                    ack: None,
                    syn: false,
                    payload_at: 0,
                    payload_len: 0,
                    tcp_at: 0,
                    tcp_len: len,
                };
                let mut ours = tcp.clone();
                seg.fix_checksum(&mut ours);
                let mut theirs = tcp.clone();
                TcpPacket::new_unchecked(&mut theirs[..])
                    .fill_checksum(&IpAddress::Ipv4(a), &IpAddress::Ipv4(b));
                assert_eq!(ours, theirs, "start {start} len {len}");
                assert_eq!(seg.tcp_sum(&ours), 0xffff);
                ours[len - 1] ^= 1;
                assert_ne!(seg.tcp_sum(&ours), 0xffff);
            }
        }
    }

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
