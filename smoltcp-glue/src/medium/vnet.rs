//! The virtio-net header a TAP (`IFF_VNET_HDR`) and a packet socket
//! (`PACKET_VNET_HDR`) put before each frame: how the kernel and we tell
//! each other about checksums left to finish and segments left to cut.

use crate::medium::{
    ETHERNET_HEADER, LARGEST_GSO_FRAME, LinkStats, pseudo_header_sum, tcp_ipv4_offsets,
};
use smoltcp::phy::{self, DeviceCapabilities};
use smoltcp::wire::Ipv4Packet;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

/// `struct virtio_net_hdr`, in the host's byte order.
pub(crate) const VNET_HDR: usize = 10;
const VIRTIO_NET_HDR_F_NEEDS_CSUM: u8 = 1;
const VIRTIO_NET_HDR_F_DATA_VALID: u8 = 2;
const VIRTIO_NET_HDR_GSO_TCPV4: u8 = 1;

/// What a medium with a virtio-net header offers the stack, on a link of
/// `mtu`-byte frames: received checksums checked (or vouched for) by the
/// medium, sent ones finished by the kernel, and TCP segments cut by it
/// from frames below the kernel's GSO limit ([`LARGEST_GSO_FRAME`]), each
/// a whole number of MSS (the stack's rule), so that the kernel cuts none
/// on the way and no runt when it must.
pub(crate) fn capabilities(mtu: usize) -> DeviceCapabilities {
    let mut caps = DeviceCapabilities::default();
    caps.medium = phy::Medium::Ethernet;
    caps.max_transmission_unit = mtu;
    caps.checksum.tcp = phy::Checksum::None;
    caps.segmentation.tcpv4 = std::num::NonZeroUsize::new(LARGEST_GSO_FRAME);
    caps
}

/// A frame to send behind a virtio-net header, with one `write` to a TAP
/// or a bound packet socket.
pub struct TxToken<'a> {
    fd: BorrowedFd<'a>,
    buf: &'a mut Vec<u8>,
    /// The link's largest frame: larger ones go as GSO.
    link: usize,
    /// The segment size the stack asked a TSO segment to be cut to.
    gso_size: Option<u16>,
    stats: &'a mut LinkStats,
}

impl<'a> TxToken<'a> {
    pub(crate) fn new(
        fd: BorrowedFd<'a>,
        buf: &'a mut Vec<u8>,
        link: usize,
        stats: &'a mut LinkStats,
    ) -> Self {
        Self { fd, buf, link, gso_size: None, stats }
    }
}

impl phy::TxToken for TxToken<'_> {
    fn set_meta(&mut self, meta: phy::PacketMeta) {
        self.gso_size = meta.segmentation_offload_size.map(u16::from);
    }

    fn consume<R, F: FnOnce(&mut [u8]) -> R>(self, len: usize, f: F) -> R {
        // The stack never asks for more than the largest frame it was told
        // the medium takes; were it to, the frame is sent whole.
        debug_assert!(len <= self.buf.len(), "a {len}-byte frame");
        if self.buf.len() < len {
            self.buf.resize(len, 0);
        }
        let frame = &mut self.buf[..len];
        let r = f(frame);
        send(self.fd, frame, self.link, self.gso_size, self.stats);
        r
    }
}

/// Write `frame` to `fd` behind the virtio-net header that says what is
/// left to the kernel (see [`offload`]), in one `writev` from where the
/// frame lies; counted in `stats`, and dropped if it is too large for the
/// link of `link`-byte frames and no TCP segment to cut, or the kernel
/// refuses it.
pub(crate) fn send(
    fd: BorrowedFd<'_>,
    frame: &mut [u8],
    link: usize,
    gso_size: Option<u16>,
    stats: &mut LinkStats,
) {
    let mut hdr = [0u8; VNET_HDR];
    if !offload(&mut hdr, frame, link, gso_size) {
        stats.tx_dropped += 1;
        tracing::debug!(
            len = frame.len(),
            "a frame larger than the link that is not TCP/IPv4; dropped"
        );
        return;
    }
    let iov = [
        libc::iovec { iov_base: hdr.as_mut_ptr().cast(), iov_len: VNET_HDR },
        libc::iovec { iov_base: frame.as_mut_ptr().cast(), iov_len: frame.len() },
    ];
    // SAFETY: a write of two buffers we own, of their lengths, to a
    // descriptor we borrow.
    if unsafe { libc::writev(fd.as_raw_fd(), iov.as_ptr(), 2) } < 0 {
        stats.tx_dropped += 1;
        let e = io::Error::last_os_error();
        tracing::debug!(error = %e, "frame not sent; dropped");
    } else {
        stats.tx_frames += 1;
        stats.tx_largest = stats.tx_largest.max(frame.len());
    }
}

/// Whether the kernel vouches for the checksum of the frame behind `hdr`:
/// sent by this host, its checksum left for a NIC to finish, or verified.
pub(crate) fn vouched(hdr: &[u8]) -> bool {
    hdr[0] & (VIRTIO_NET_HDR_F_NEEDS_CSUM | VIRTIO_NET_HDR_F_DATA_VALID) != 0
}

/// Fill the virtio-net header `hdr` for `frame`. A TCP/IPv4 segment leaves
/// its checksum to the kernel (the checksum field holds the pseudo-header
/// sum, as a stack handing a NIC a segment leaves it), and one larger than
/// the link's `link`-byte frames goes as GSO, cut to `gso_size` (the
/// stack's) or else to what fits the link. False if a frame too large for
/// the link is not such a segment.
pub(crate) fn offload(
    hdr: &mut [u8],
    frame: &mut [u8],
    link: usize,
    gso_size: Option<u16>,
) -> bool {
    hdr.fill(0);
    let Some((ip_at, tcp_at, payload_at)) = tcp_ipv4_offsets(frame) else {
        return frame.len() <= link;
    };
    let ip = Ipv4Packet::new_unchecked(&frame[ip_at..]);
    let tcp_len = usize::from(ip.total_len()) - (tcp_at - ip_at);
    let sum = pseudo_header_sum(ip.src_addr(), ip.dst_addr(), tcp_len);
    frame[tcp_at + 16..tcp_at + 18].copy_from_slice(&sum.to_be_bytes());
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

#[cfg(test)]
mod tests {
    use super::*;
    use smoltcp::wire::TcpPacket;

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

    /// What AF_XDP receives from a sender on this host: a segment whose
    /// checksum was left partial. It is finished (there is nothing to check
    /// it against, as there is not in the kernel); a full one passes as it
    /// is, and is refused once damaged.
    #[test]
    fn a_partial_checksum_is_finished_on_receipt_and_a_bad_one_refused() {
        let mut hdr = [0u8; VNET_HDR];
        let mut frame = segment(1000);
        assert!(offload(&mut hdr, &mut frame, 1514, None));
        assert!(!verifies(&frame));
        assert!(crate::medium::tcp_checksum_finished(&mut frame));
        assert!(verifies(&frame), "finished");
        let full = frame.clone();
        assert!(crate::medium::tcp_checksum_finished(&mut frame));
        assert_eq!(frame, full, "a full checksum is left alone");
        frame[100] ^= 1;
        assert!(!crate::medium::tcp_checksum_finished(&mut frame));
    }

    /// A TAP's and a veth's `gso_max_size` is 65,536: a frame of that or
    /// more the kernel cuts in software before any device sees it.
    #[test]
    fn segments_handed_to_the_kernel_stay_below_its_gso_limit() {
        for mtu in [1514, 9014, 65535 + ETHERNET_HEADER] {
            let caps = capabilities(mtu);
            assert_eq!(caps.segmentation.tcpv4.map(|n| n.get()), Some(65535), "MTU {mtu}");
        }
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
