//! Any Linux network interface through an AF_PACKET socket: the medium for
//! real NICs and veth pairs, no TAP needed.
//!
//! Frames arrive in a TPACKET_V2 ring the kernel shares with us: each is
//! read where the kernel wrote it, and the socket is polled only when the
//! ring is empty. (TPACKET_V3 hands a block over only when it fills or
//! its retire timer fires, a millisecond at the least: fine for capture,
//! a millisecond added to every round trip of a request/response
//! protocol.)
//!
//! Frames leave with one `send` each, behind a virtio-net header
//! (`PACKET_VNET_HDR`), so the socket takes checksum and TCP segmentation
//! offload as a TAP does: the stack leaves TCP checksums to the kernel and
//! hands down segments of up to 64 KiB in one `send`, which the kernel cuts
//! to the stack's segment size where the device asks (a NIC without TSO,
//! and a veth, which takes no segment from user space uncut).
//!
//! A frame the kernel vouches for (its checksum verified by a NIC, or left
//! for a NIC to finish because this host's own stack sent it) goes up as
//! it is; any other TCP segment has its checksum verified here, and a bad
//! one is dropped.
//!
//! A frame larger than a ring slot (up to 64 KiB) is one the kernel merged
//! or never cut: GRO or LRO on a NIC, or TSO from the other end of a veth.
//! The kernel queues it whole on the socket and marks its slot; it is read
//! from there and handed up as it is, large, as a NIC with receive offload
//! would (the software NIC and the stack take any size).
//!
//! The stack has its own MAC address, so the interface is promiscuous for
//! as long as the socket is open; the kernel's own stack drops frames for
//! other hosts, so give the interface no address in the stack's subnet.
//! Needs CAP_NET_RAW.

use crate::medium::sleep::FdSleep;
use crate::medium::vnet::{self, TxToken, VNET_HDR};
use crate::medium::{
    ETHERNET_HEADER, LARGEST_FRAME, LinkStats, Mapping, context, interface_index, interface_mtu,
    setsockopt, tcp_checksum_ok,
};
use crate::{Medium, WireEnd};
use smoltcp::phy::{self, Device, DeviceCapabilities, PacketMeta};
use smoltcp::time::{Duration, Instant};
use std::io;
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU32, Ordering};

/// Bytes of the receive ring, in as many slots as fit: more than the
/// 4 MiB a host reading 128 KiB at queue depth 32 has in flight, in frames
/// of any MTU (a frame the ring has no slot for is dropped, and TCP resends
/// it after a timeout; 1,024 slots of 1,500-byte frames lost reads that
/// way).
const RING_BYTES: usize = 16 << 20;
/// Bytes in one block of the ring, a few frames each.
const RING_BLOCK: usize = 64 << 10;
/// The kernel or the NIC verified the frame's checksum.
const TP_STATUS_CSUM_VALID: u32 = 1 << 7;
/// `sll_pkttype` of a frame this host sent.
const PACKET_OUTGOING: u8 = 4;
/// Socket buffer for frames too large for the ring: a TCP window of 64 KiB
/// segments, each charged at up to twice its size (32 MiB, the kernel
/// doubles it); a frame that finds it full is dropped and TCP resends it.
const LARGE_FRAME_QUEUE: libc::c_int = 16 << 20;

/// An interface opened through AF_PACKET in the current network namespace.
pub struct Packet {
    sock: OwnedFd,
    name: String,
    /// Largest frame, Ethernet header included.
    mtu: usize,
    ring: Ring,
    tx: Vec<u8>,
    /// Where a frame too large for the ring is read into.
    large: Vec<u8>,
    stats: LinkStats,
    sleep: FdSleep,
}

/// The receive ring: `frames` slots of `frame_size` bytes, `per_block` to a
/// block of `block_size` bytes (a slot never straddles two blocks).
struct Ring {
    map: Mapping,
    block_size: usize,
    frame_size: usize,
    per_block: usize,
    frames: usize,
    next: usize,
}

impl Ring {
    fn slot(&self, i: usize) -> *mut u8 {
        let off = i / self.per_block * self.block_size + i % self.per_block * self.frame_size;
        // SAFETY: `i < frames`, so the slot lies inside the mapping.
        unsafe { self.map.base.add(off) }
    }
}

impl Packet {
    /// Attach to interface `name`. `mtu` is the IP MTU; without it, the
    /// interface's is used.
    pub fn open(name: &str, mtu: Option<usize>) -> io::Result<Self> {
        let ifindex = interface_index(name)?;
        let frame = mtu.map_or_else(|| interface_mtu(name), Ok)? + ETHERNET_HEADER;

        let proto = (libc::ETH_P_ALL as u16).to_be();
        // SAFETY: socket returns a new descriptor or -1.
        let fd = unsafe {
            libc::socket(
                libc::AF_PACKET,
                libc::SOCK_RAW | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
                libc::c_int::from(proto),
            )
        };
        if fd < 0 {
            return Err(context(format!("cannot open a packet socket for {name}"))(
                io::Error::last_os_error(),
            ));
        }
        // SAFETY: a descriptor we just opened and nobody else owns.
        let sock = unsafe { OwnedFd::from_raw_fd(fd) };
        let version = libc::tpacket_versions::TPACKET_V2 as libc::c_int;
        setsockopt(fd, libc::SOL_PACKET, libc::PACKET_VERSION, &version)
            .map_err(context("TPACKET_V2"))?;
        setsockopt(fd, libc::SOL_PACKET, libc::PACKET_VNET_HDR, &1i32)
            .map_err(context("PACKET_VNET_HDR"))?;
        // An optimisation a kernel may lack: our own frames are also
        // skipped by type below. (No PACKET_QDISC_BYPASS: its direct path
        // drops a TSO segment the device wants cut in software, as a veth
        // does with one from user space, where the qdisc path cuts it.)
        let _ = setsockopt(fd, libc::SOL_PACKET, libc::PACKET_IGNORE_OUTGOING, &1i32);
        // Frames too large for a slot are queued whole beside the ring.
        setsockopt(fd, libc::SOL_PACKET, libc::PACKET_COPY_THRESH, &1i32)
            .map_err(context("PACKET_COPY_THRESH"))?;
        if setsockopt(fd, libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, &LARGE_FRAME_QUEUE).is_err() {
            let _ = setsockopt(fd, libc::SOL_SOCKET, libc::SO_RCVBUF, &LARGE_FRAME_QUEUE);
        }

        // The kernel puts a slot's frame after its header, its address and
        // a virtio-net header, aligned so that the IP header is.
        let frame_size = (libc::TPACKET2_HDRLEN + 32 + VNET_HDR + frame).next_multiple_of(16);
        // SAFETY: sysconf has no preconditions.
        let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096);
        let block_size = frame_size.max(RING_BLOCK).next_multiple_of(page);
        let per_block = block_size / frame_size;
        let blocks = (RING_BYTES / block_size).max(1);
        let req = libc::tpacket_req {
            tp_block_size: block_size as u32,
            tp_block_nr: blocks as u32,
            tp_frame_size: frame_size as u32,
            tp_frame_nr: (blocks * per_block) as u32,
        };
        setsockopt(fd, libc::SOL_PACKET, libc::PACKET_RX_RING, &req)
            .map_err(context(format!("receive ring of {blocks} x {block_size} bytes")))?;
        let map = Mapping::new(Some(fd), block_size * blocks, 0, false)
            .map_err(context("mapping the receive ring"))?;
        let ring =
            Ring { map, block_size, frame_size, per_block, frames: blocks * per_block, next: 0 };

        // SAFETY: an all-zero sockaddr_ll is valid; we fill what bind reads.
        let mut addr: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        addr.sll_family = libc::AF_PACKET as u16;
        addr.sll_protocol = proto;
        addr.sll_ifindex = ifindex as i32;
        // SAFETY: `addr` is a sockaddr_ll of the length we pass.
        let r = unsafe {
            libc::bind(
                fd,
                (&addr as *const libc::sockaddr_ll).cast(),
                size_of::<libc::sockaddr_ll>() as u32,
            )
        };
        if r < 0 {
            return Err(context(format!("cannot bind to {name}"))(io::Error::last_os_error()));
        }
        // SAFETY: all-zero is a valid packet_mreq.
        let mut mreq: libc::packet_mreq = unsafe { std::mem::zeroed() };
        mreq.mr_ifindex = ifindex as i32;
        mreq.mr_type = libc::PACKET_MR_PROMISC as u16;
        setsockopt(fd, libc::SOL_PACKET, libc::PACKET_ADD_MEMBERSHIP, &mreq)
            .map_err(context(format!("promiscuous mode on {name}")))?;

        Ok(Self {
            sock,
            name: name.into(),
            mtu: frame,
            ring,
            tx: vec![0; LARGEST_FRAME],
            large: vec![0; VNET_HDR + LARGEST_FRAME],
            stats: LinkStats::default(),
            sleep: FdSleep::new()?,
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn stats(&self) -> LinkStats {
        self.stats
    }

    fn fd(&self) -> RawFd {
        self.sock.as_raw_fd()
    }
}

/// A frame in the ring, whose slot goes back to the kernel when the token
/// is dropped, or one read from beside it.
pub struct RxToken<'a> {
    frame: &'a [u8],
    slot: Option<&'a AtomicU32>,
}

impl Drop for RxToken<'_> {
    fn drop(&mut self) {
        if let Some(status) = self.slot {
            status.store(libc::TP_STATUS_KERNEL, Ordering::Release);
        }
    }
}

impl phy::RxToken for RxToken<'_> {
    fn consume<R, F: FnOnce(&[u8]) -> R>(self, f: F) -> R {
        f(self.frame)
    }
}

impl Device for Packet {
    type RxToken<'a> = RxToken<'a>;
    type TxToken<'a> = TxToken<'a>;

    fn receive(&mut self, _now: Instant) -> Option<(RxToken<'_>, TxToken<'_>)> {
        loop {
            let ring = &mut self.ring;
            let slot = ring.slot(ring.next);
            // SAFETY: every slot starts with a tpacket2_hdr whose status
            // word the kernel and we hand the slot over with.
            let status = unsafe { AtomicU32::from_ptr(slot.cast::<u32>()) };
            let s = status.load(Ordering::Acquire);
            if s & libc::TP_STATUS_USER == 0 {
                return None;
            }
            ring.next = (ring.next + 1) % ring.frames;
            // SAFETY: the kernel gave the slot to us (acquire above); its
            // header, address and frame are within `frame_size`.
            let (hdr, pkttype) = unsafe {
                let hdr = &*slot.cast::<libc::tpacket2_hdr>();
                let sll_at = size_of::<libc::tpacket2_hdr>().next_multiple_of(16);
                (hdr, (*slot.add(sll_at).cast::<libc::sockaddr_ll>()).sll_pkttype)
            };
            let (mac, snap, len) = (usize::from(hdr.tp_mac), hdr.tp_snaplen, hdr.tp_len);
            if pkttype == PACKET_OUTGOING || mac + snap as usize > ring.frame_size {
                status.store(libc::TP_STATUS_KERNEL, Ordering::Release);
                continue;
            }
            if s & libc::TP_STATUS_COPY != 0 {
                // The whole frame is the next one queued on the socket.
                status.store(libc::TP_STATUS_KERNEL, Ordering::Release);
                // SAFETY: a receive into the buffer we own, of its length.
                let n = unsafe {
                    libc::recv(
                        self.sock.as_raw_fd(),
                        self.large.as_mut_ptr().cast(),
                        self.large.len(),
                        libc::MSG_DONTWAIT | libc::MSG_TRUNC,
                    )
                };
                let Ok(n) = usize::try_from(n) else { continue };
                if n <= VNET_HDR || n > self.large.len() {
                    self.stats.rx_dropped += 1;
                    continue;
                }
                let frame = &self.large[VNET_HDR..n];
                if !vnet::vouched(&self.large) && !tcp_checksum_ok(frame) {
                    self.stats.rx_dropped += 1;
                    continue;
                }
                self.stats.rx_frames += 1;
                self.stats.rx_largest = self.stats.rx_largest.max(n - VNET_HDR);
                let Packet { sock, tx, large, stats, mtu, .. } = self;
                return Some((
                    RxToken { frame: &large[VNET_HDR..n], slot: None },
                    TxToken::new((*sock).as_fd(), tx, *mtu, stats),
                ));
            }
            if snap < len {
                // Too large for a slot, and no room beside the ring.
                status.store(libc::TP_STATUS_KERNEL, Ordering::Release);
                self.stats.rx_dropped += 1;
                tracing::debug!(iface = %self.name, len, "a frame too large for the ring was lost");
                continue;
            }
            // SAFETY: as above; the frame is ours until `status` is reset.
            let frame = unsafe { std::slice::from_raw_parts(slot.add(mac), snap as usize) };
            let vouched = libc::TP_STATUS_CSUMNOTREADY | TP_STATUS_CSUM_VALID;
            if s & vouched == 0 && !tcp_checksum_ok(frame) {
                status.store(libc::TP_STATUS_KERNEL, Ordering::Release);
                self.stats.rx_dropped += 1;
                continue;
            }
            self.stats.rx_frames += 1;
            self.stats.rx_largest = self.stats.rx_largest.max(frame.len());
            let Packet { sock, tx, stats, mtu, .. } = self;
            return Some((
                RxToken { frame, slot: Some(status) },
                TxToken::new((*sock).as_fd(), tx, *mtu, stats),
            ));
        }
    }

    fn transmit(&mut self, _now: Instant) -> Option<TxToken<'_>> {
        let Packet { sock, tx, stats, mtu, .. } = self;
        Some(TxToken::new((*sock).as_fd(), tx, *mtu, stats))
    }

    fn capabilities(&self) -> DeviceCapabilities {
        vnet::capabilities(self.mtu)
    }
}

impl Medium for Packet {
    fn waker(&self) -> std::task::Waker {
        self.sleep.waker()
    }

    fn wait(&self, timeout: Option<Duration>) {
        self.sleep.sleep(self.fd(), timeout)
    }

    fn wait_with(&self, also: &WireEnd, timeout: Option<Duration>) {
        self.sleep.sleep_with(self.fd(), also, timeout)
    }

    /// Sent from where it lies: the frame's only copy is the kernel's.
    fn transmit_from(&mut self, _now: Instant, frame: &mut [u8], meta: PacketMeta) -> bool {
        let gso = meta.segmentation_offload_size.map(u16::from);
        vnet::send(self.sock.as_fd(), frame, self.mtu, gso, &mut self.stats);
        true
    }
}
