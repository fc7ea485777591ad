//! The NIC as a smoltcp `Device` decorator, [`OffloadNic`]: it wraps any
//! medium, takes each frame through the NIC on its way up and down, and
//! copies received frames into a ring of its own while some socket may be
//! placed into, leaving placed payload out (header/data split). On the way
//! down it gathers the payload a frame's metadata names from the transmit
//! mappings ([`crate::gather`]) into the frame.
//!
//! It must never reorder frames, and never do protocol work itself: that is
//! the state's and the flows' ([`crate::classify`], [`crate::flow`]).

use crate::Table;
use crate::classify::{Shared, State};
use crate::config::NicConfig;
use crate::handle::NicHandle;
use smoltcp::phy::{self, Device, DeviceCapabilities, GatherRanges, PacketMeta};
use smoltcp::time::Instant;
use smoltcp_glue::{Medium, WireEnd};
use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use ulp_ddp::Stats;

/// The software NIC over device `D`.
pub struct OffloadNic<D> {
    inner: D,
    shared: Arc<Shared>,
    /// `NicConfig::checksum`, fixed at creation; kept here because smoltcp
    /// asks for the capabilities on every poll and they need no lock.
    checksum: bool,
    /// Receive buffers, recycled: the NIC's receive ring.
    ring: RefCell<Vec<Vec<u8>>>,
}

impl<D> OffloadNic<D> {
    pub fn new(inner: D, cfg: NicConfig) -> Self
    where
        D: Device,
    {
        let state = State {
            cfg: NicConfig { active: cfg.active.intersection(cfg.hw), ..cfg },
            // A medium that finishes transmit checksums itself (a TAP with
            // checksum offload) leaves the NIC none to write, and one that
            // checks received ones none to verify.
            csum_below: !inner.capabilities().checksum.tcp.tx(),
            verified_below: !inner.capabilities().checksum.tcp.rx(),
            handshakes: HashMap::new(),
            flows: slab::Slab::new(),
            by_key: Table::default(),
            tx_maps: Default::default(),
            stats: Stats::default(),
            rx_copy: Vec::new(),
        };
        Self {
            inner,
            shared: Arc::new(Shared { state: Mutex::new(state), placing: AtomicBool::new(false) }),
            checksum: cfg.checksum,
            ring: RefCell::default(),
        }
    }

    pub fn handle(&self) -> NicHandle {
        NicHandle::new(self.shared.clone())
    }

    pub fn get_ref(&self) -> &D {
        &self.inner
    }

    pub fn get_mut(&mut self) -> &mut D {
        &mut self.inner
    }
}

impl<D: Medium> OffloadNic<D> {
    /// Move one received frame through the NIC into `slot`, a buffer of
    /// the ring towards the host. False when the medium had none.
    ///
    /// While some socket may be placed into, the frame is read into the
    /// medium's own buffer, which stays in cache, and only what was not
    /// placed goes on into the slot (a NIC's header split: the ring's
    /// buffers, a new one for each frame, are not where the payload should
    /// land first). Otherwise the medium reads the frame straight into the
    /// slot (the DMA), and the NIC does its receive work there.
    pub(crate) fn receive_into(
        &mut self,
        now: Instant,
        mut slot: smoltcp_glue::WireTx<'_>,
    ) -> bool {
        if self.shared.placing.load(Ordering::Relaxed) {
            use phy::TxToken as _;
            let Some((rx, _)) = self.inner.receive(now) else { return false };
            self.shared.receive(rx, |frame| {
                if let Some((frame, placed)) = frame {
                    slot.set_meta(placed.meta());
                    slot.consume(frame.len(), |dst| placed.dma(dst, frame));
                }
            });
            return true;
        }
        let (inner, shared) = (&mut self.inner, &*self.shared);
        let mut came = false;
        slot.fill(|buf| {
            let (len, _) = inner.receive_into(now, buf)?;
            came = true;
            shared.receive_in_place(buf, len)
        });
        came
    }

    /// Whether the medium takes a frame now.
    pub(crate) fn has_room(&mut self, now: Instant) -> bool {
        self.inner.transmit(now).is_some()
    }

    /// Send `frame`, which the host posted with `meta`, from where it
    /// lies: the NIC gathers into it the payload its metadata names and
    /// fills in digests and checksums, and the medium sends it. A frame
    /// that names bytes of no mapping is dropped, not sent stale. False if
    /// the medium had no room, which [`has_room`](Self::has_room) asks
    /// first.
    pub(crate) fn transmit_from(
        &mut self,
        now: Instant,
        frame: &mut [u8],
        mut meta: PacketMeta,
    ) -> bool {
        let gather = std::mem::take(&mut meta.gather);
        let filled = match gather.is_empty() {
            true => Default::default(),
            false => match self.shared.resolve(&gather) {
                Some(g) => g.fill(frame),
                None => return true,
            },
        };
        self.shared.on_tx(frame, filled);
        self.inner.transmit_from(now, frame, meta)
    }
}
/// A received frame on its way to the stack.
pub struct RxToken<'a, T>(Rx<'a, T>);

enum Rx<'a, T> {
    /// In the medium's buffer, the NIC's work done as it goes up (nothing
    /// is placed, so nothing needs saying before the stack looks).
    Through { inner: T, shared: &'a Shared },
    /// In the NIC's receive ring, with what was placed of it; empty if
    /// withheld. The buffer is reused and may be longer than `len`.
    Ring { frame: Vec<u8>, len: usize, meta: PacketMeta, ring: &'a RefCell<Vec<Vec<u8>>> },
}

pub struct TxToken<'a, T> {
    inner: T,
    shared: &'a Shared,
    /// Payload the stack left for the NIC to gather.
    gather: GatherRanges,
}

impl<'a, T> TxToken<'a, T> {
    fn new(inner: T, shared: &'a Shared) -> Self {
        Self { inner, shared, gather: GatherRanges::default() }
    }
}

impl<T: phy::RxToken> phy::RxToken for RxToken<'_, T> {
    fn meta(&self) -> PacketMeta {
        match &self.0 {
            Rx::Through { inner, .. } => inner.meta(),
            Rx::Ring { meta, .. } => *meta,
        }
    }

    fn consume<R, F: FnOnce(&[u8]) -> R>(self, f: F) -> R {
        match self.0 {
            // A withheld frame goes up empty: the stack discards it unparsed.
            Rx::Through { inner, shared } => {
                inner.consume(
                    |frame| if shared.on_rx(frame, false).is_some() { f(frame) } else { f(&[]) },
                )
            }
            Rx::Ring { frame, len, ring, .. } => {
                let r = f(&frame[..len]);
                let mut ring = ring.borrow_mut();
                if ring.len() < RING_BUFFERS {
                    ring.push(frame);
                }
                r
            }
        }
    }
}

impl<T: phy::TxToken> phy::TxToken for TxToken<'_, T> {
    fn set_meta(&mut self, mut meta: PacketMeta) {
        // The NIC gathers; the medium below gets a whole frame.
        self.gather = std::mem::take(&mut meta.gather);
        self.inner.set_meta(meta)
    }

    fn consume<R, F: FnOnce(&mut [u8]) -> R>(self, len: usize, f: F) -> R {
        let shared = self.shared;
        let gathers = match self.gather.is_empty() {
            true => None,
            false => match shared.resolve(&self.gather) {
                Some(g) => Some(g),
                // Bytes of no mapping: the frame is dropped, not sent stale.
                None => return f(&mut vec![0; len]),
            },
        };
        self.inner.consume(len, |frame| {
            let r = f(frame);
            let gathered = gathers.as_ref().map_or_else(Default::default, |g| g.fill(frame));
            shared.on_tx(frame, gathered);
            r
        })
    }
}

/// Receive buffers the ring keeps at most.
const RING_BUFFERS: usize = 64;

impl<D: Device> Device for OffloadNic<D> {
    type RxToken<'a>
        = RxToken<'a, D::RxToken<'a>>
    where
        Self: 'a;
    type TxToken<'a>
        = TxToken<'a, D::TxToken<'a>>
    where
        Self: 'a;

    fn receive(&mut self, now: Instant) -> Option<(Self::RxToken<'_>, Self::TxToken<'_>)> {
        if !self.shared.placing.load(Ordering::Relaxed) {
            let shared = &*self.shared;
            let (rx, tx) = self.inner.receive(now)?;
            return Some((RxToken(Rx::Through { inner: rx, shared }), TxToken::new(tx, shared)));
        }
        let OffloadNic { inner, shared, ring, .. } = self;
        let shared = &**shared;
        let (rx, tx) = inner.receive(now)?;
        let mut frame = ring.borrow_mut().pop().unwrap_or_default();
        let (len, meta) = shared.receive(rx, |got| match got {
            Some((bytes, placed)) => {
                // Grown once, then reused: never zeroed again.
                if frame.len() < bytes.len() {
                    frame.resize(bytes.len(), 0);
                }
                placed.dma(&mut frame[..bytes.len()], bytes);
                (bytes.len(), placed.meta())
            }
            None => (0, PacketMeta::default()),
        });
        Some((RxToken(Rx::Ring { frame, len, meta, ring }), TxToken::new(tx, shared)))
    }

    fn transmit(&mut self, now: Instant) -> Option<Self::TxToken<'_>> {
        let shared = &*self.shared;
        self.inner.transmit(now).map(|tx| TxToken::new(tx, shared))
    }

    fn capabilities(&self) -> DeviceCapabilities {
        let mut caps = self.inner.capabilities();
        if self.checksum {
            caps.checksum.tcp = phy::Checksum::None;
        }
        caps
    }
}

impl<D: Medium> Medium for OffloadNic<D> {
    fn poll_at(&self) -> Option<Instant> {
        self.inner.poll_at()
    }

    fn flush(&self) {
        self.inner.flush()
    }

    fn wait(&self, timeout: Option<smoltcp::time::Duration>) {
        self.inner.wait(timeout)
    }

    fn wait_with(&self, also: &WireEnd, timeout: Option<smoltcp::time::Duration>) {
        self.inner.wait_with(also, timeout)
    }

    fn waker(&self) -> std::task::Waker {
        self.inner.waker()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use smoltcp::phy::{ChecksumCapabilities, RxToken as _, TxToken as _};
    use smoltcp::wire::{
        EthernetAddress, EthernetFrame, EthernetProtocol, EthernetRepr, IpAddress, IpProtocol,
        Ipv4Address, Ipv4Packet, Ipv4Repr, TcpControl, TcpPacket, TcpRepr, TcpSeqNumber,
    };
    use smoltcp_glue::VirtualWire;
    use ulp_ddp::{DdpDevice as _, DdpError};

    const A: Ipv4Address = Ipv4Address::new(198, 18, 0, 2);
    const B: Ipv4Address = Ipv4Address::new(198, 18, 0, 3);

    /// An Ethernet/IPv4/TCP frame from A:4420 to B:50000 carrying
    /// `payload`, its TCP checksum filled in when `checksum` is set and
    /// zero otherwise.
    fn frame(payload: &[u8], checksum: bool) -> Vec<u8> {
        segment((A, 4420), (B, 50000), TcpControl::Psh, payload, checksum)
    }

    fn segment(
        (src, src_port): (Ipv4Address, u16),
        (dst, dst_port): (Ipv4Address, u16),
        control: TcpControl,
        payload: &[u8],
        checksum: bool,
    ) -> Vec<u8> {
        let tcp = TcpRepr {
            src_port,
            dst_port,
            control,
            seq_number: TcpSeqNumber(1000),
            ack_number: Some(TcpSeqNumber(2000)),
            window_len: 1024,
            window_scale: None,
            max_seg_size: None,
            sack_permitted: false,
            sack_ranges: [None; 3],
            timestamp: None,
            payload,
        };
        let ip = Ipv4Repr {
            src_addr: src,
            dst_addr: dst,
            next_header: IpProtocol::Tcp,
            payload_len: tcp.header_len() + payload.len(),
            hop_limit: 64,
        };
        let eth = EthernetRepr {
            src_addr: EthernetAddress([2, 0, 0, 0, 0, 1]),
            dst_addr: EthernetAddress([2, 0, 0, 0, 0, 2]),
            ethertype: EthernetProtocol::Ipv4,
        };
        let mut caps = ChecksumCapabilities::default();
        if !checksum {
            caps.tcp = phy::Checksum::None;
        }
        let mut buf = vec![0u8; eth.buffer_len() + ip.buffer_len() + ip.payload_len];
        let mut f = EthernetFrame::new_unchecked(&mut buf[..]);
        eth.emit(&mut f);
        let mut p = Ipv4Packet::new_unchecked(f.payload_mut());
        ip.emit(&mut p, &caps);
        let mut t = TcpPacket::new_unchecked(p.payload_mut());
        tcp.emit(&mut t, &IpAddress::Ipv4(src), &IpAddress::Ipv4(dst), &caps);
        buf
    }

    /// The payload of the frame `peer` received next, if one came.
    fn payload_at(peer: &mut WireEnd, now: Instant) -> Option<(Vec<u8>, bool)> {
        let (rx, _) = peer.receive(now)?;
        let f = rx.consume(|f| f.to_vec());
        let eth = EthernetFrame::new_checked(&f[..]).unwrap();
        let ip = Ipv4Packet::new_checked(eth.payload()).unwrap();
        let tcp = TcpPacket::new_checked(ip.payload()).unwrap();
        Some((tcp.payload().to_vec(), tcp_checksum_ok(&f)))
    }

    /// Send `frame` through the NIC with the metadata `meta`.
    fn send(nic: &mut OffloadNic<WireEnd>, now: Instant, frame: &[u8], meta: PacketMeta) {
        let mut tx = nic.transmit(now).unwrap();
        tx.set_meta(meta);
        tx.consume(frame.len(), |b| b.copy_from_slice(frame));
    }

    #[test]
    fn gathered_payload_comes_from_the_mapping_and_nothing_goes_out_stale() {
        use smoltcp::phy::Gather;
        use ulp_ddp::{FlowId, IoBuf, NvmeTcpConfig, Role, SgEntry};
        let now = Instant::from_millis(0);
        let (mut peer, end) = VirtualWire::pair(1514, 8);
        let mut nic = OffloadNic::new(end, NicConfig::default());
        let dev = nic.handle();
        // The handshake, both ways, so the NIC takes the socket.
        let syn = segment((A, 4420), (B, 50000), TcpControl::Syn, &[], true);
        send(&mut nic, now, &syn, PacketMeta::default());
        let _ = payload_at(&mut peer, now);
        let syn = segment((B, 50000), (A, 4420), TcpControl::Syn, &[], true);
        peer.transmit(now).unwrap().consume(syn.len(), |b| b.copy_from_slice(&syn));
        let (rx, _) = nic.receive(now).unwrap();
        rx.consume(|_| ());
        let flow = FlowId {
            local: std::net::SocketAddrV4::new(A, 4420),
            remote: std::net::SocketAddrV4::new(B, 50000),
        };
        let config = NvmeTcpConfig {
            role: Role::Controller,
            pfv: 0,
            cpda: 0,
            hpda: 0,
            dgst: 0,
            queue_size: 32,
            rx_start: 0,
            tx_start: 0,
        };
        let sk = dev.sk_add(flow, &config).unwrap();
        assert!(sk.offloads().contains(ulp_ddp::Caps::ZC_TX));

        let buf = IoBuf::from_vec(b"0123456789".to_vec());
        let token = sk.tx_setup(SgEntry { buf: buf.clone(), offset: 2, len: 6 }).unwrap();
        assert!(buf.is_shared(), "the mapping holds the buffer");
        // The stack wrote the header bytes around six it left stale.
        let stale = frame(b"hello-......-end", false);
        let mut meta = PacketMeta::default();
        let g = Gather { start: 6, end: 11, token, token_offset: 1 };
        assert!(meta.gather.push(g));
        send(&mut nic, now, &stale, meta);
        let (payload, summed) = payload_at(&mut peer, now).unwrap();
        assert_eq!(payload, b"hello-34567.-end", "bytes 3..8 of the buffer, at token offset 1");
        assert!(summed, "the NIC summed what it gathered");
        assert_eq!(dev.stats().tx_gathered_bytes, 5);
        assert!(!meta.gather.push(g), "ranges go in order");
        let mut past = PacketMeta::default();
        assert!(past.gather.push(Gather { token_offset: 2, ..g }));
        send(&mut nic, now, &stale, past);
        assert_eq!(payload_at(&mut peer, now), None, "a range past the mapping goes nowhere");

        // Torn down (acknowledged): a segment naming it is dropped, not
        // sent with what the frame held.
        sk.tx_teardown(token);
        assert!(!buf.is_shared());
        send(&mut nic, now, &stale, meta);
        assert_eq!(payload_at(&mut peer, now), None);
        // The socket gone, its mappings stay until torn down: the stack
        // may still be sending (a close after the last data).
        let token = sk.tx_setup(SgEntry { buf: buf.clone(), offset: 0, len: 10 }).unwrap();
        sk.sk_del();
        let mut meta = PacketMeta::default();
        assert!(meta.gather.push(Gather { token, ..g }));
        send(&mut nic, now, &stale, meta);
        let (payload, _) = payload_at(&mut peer, now).unwrap();
        assert_eq!(payload, b"hello-12345.-end");
        sk.tx_teardown(token);
        assert!(!buf.is_shared());
        send(&mut nic, now, &stale, meta);
        assert_eq!(payload_at(&mut peer, now), None);
        let st = dev.stats();
        assert_eq!((st.tx_setup, st.tx_setup_fail), (2, 0));
        assert_eq!((st.tx_teardown, st.tx_gather_refused), (2, 3));
        assert_eq!(sk.tx_setup(SgEntry { buf, offset: 0, len: 1 }), Err(DdpError::NoSocket));
    }

    fn tcp_checksum_ok(frame: &[u8]) -> bool {
        let eth = EthernetFrame::new_checked(frame).unwrap();
        let ip = Ipv4Packet::new_checked(eth.payload()).unwrap();
        let tcp = TcpPacket::new_checked(ip.payload()).unwrap();
        tcp.verify_checksum(&IpAddress::Ipv4(A), &IpAddress::Ipv4(B))
    }

    #[test]
    fn checksum_offload_drops_bad_segments_and_fills_outgoing_ones() {
        let now = Instant::from_millis(0);
        let (mut peer, end) = VirtualWire::pair(1514, 8);
        let mut nic = OffloadNic::new(end, NicConfig::default());
        let stack_caps = nic.capabilities().checksum;
        assert!(
            !stack_caps.tcp.rx() && !stack_caps.tcp.tx(),
            "the stack leaves TCP checksums to the NIC"
        );

        let good = frame(b"hello, world", true);
        let mut bad = good.clone();
        *bad.last_mut().unwrap() ^= 1;
        for f in [&bad, &good] {
            peer.transmit(now).unwrap().consume(f.len(), |b| b.copy_from_slice(f));
        }
        let (rx, _) = nic.receive(now).unwrap();
        assert!(rx.consume(|f| f.is_empty()), "a corrupted segment never reaches the stack");
        let (rx, _) = nic.receive(now).unwrap();
        assert_eq!(rx.consume(|f| f.to_vec()), good, "a good one goes up unchanged");
        assert_eq!(nic.handle().stats().rx_csum_bad, 1);

        // The stack sends with no checksum; what reaches the wire has one.
        let unsummed = frame(b"odd-length payload", false);
        assert!(!tcp_checksum_ok(&unsummed));
        nic.transmit(now).unwrap().consume(unsummed.len(), |b| b.copy_from_slice(&unsummed));
        let (rx, _) = peer.receive(now).unwrap();
        let sent = rx.consume(|f| f.to_vec());
        assert!(tcp_checksum_ok(&sent));
        assert_eq!(sent, frame(b"odd-length payload", true));
    }

    #[test]
    fn without_checksum_offload_the_stack_keeps_its_checksums() {
        let now = Instant::from_millis(0);
        let (mut peer, end) = VirtualWire::pair(1514, 8);
        let mut nic = OffloadNic::new(end, NicConfig { checksum: false, ..NicConfig::default() });
        let tcp = nic.capabilities().checksum.tcp;
        assert!(tcp.rx() && tcp.tx());
        let mut bad = frame(b"hello", true);
        *bad.last_mut().unwrap() ^= 1;
        peer.transmit(now).unwrap().consume(bad.len(), |b| b.copy_from_slice(&bad));
        let (rx, _) = nic.receive(now).unwrap();
        assert_eq!(rx.consume(|f| f.to_vec()), bad, "passed up for the stack to judge");
    }
}
