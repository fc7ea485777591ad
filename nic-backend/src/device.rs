//! The NIC as a smoltcp `Device` decorator, [`OffloadNic`]: it wraps any
//! medium, takes each frame through the NIC on its way up and down, and
//! copies received frames into a ring of its own while some socket may be
//! placed into, leaving placed payload out (header/data split).
//!
//! It must never reorder frames, and never do protocol work itself: that is
//! the state's and the flows' ([`crate::classify`], [`crate::flow`]).

use crate::classify::{Shared, State};
use crate::config::NicConfig;
use crate::handle::NicHandle;
use smoltcp::phy::{self, Device, DeviceCapabilities, PacketMeta};
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
            by_key: HashMap::new(),
            stats: Stats::default(),
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

impl<D: Device> OffloadNic<D> {
    /// Move one received frame through the NIC into `slot`, a transmit
    /// token of the ring towards the host. False when the medium had none.
    pub(crate) fn receive_into<T: phy::TxToken>(&mut self, now: Instant, mut slot: T) -> bool {
        let Some((rx, _)) = self.inner.receive(now) else { return false };
        self.shared.receive(rx, |frame| {
            if let Some((frame, placed)) = frame {
                slot.set_meta(placed.meta());
                slot.consume(frame.len(), |dst| placed.dma(dst, frame));
            }
        });
        true
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
    fn set_meta(&mut self, meta: PacketMeta) {
        self.inner.set_meta(meta)
    }

    fn consume<R, F: FnOnce(&mut [u8]) -> R>(self, len: usize, f: F) -> R {
        let shared = self.shared;
        self.inner.consume(len, |frame| {
            let r = f(frame);
            shared.on_tx(frame);
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
            return Some((
                RxToken(Rx::Through { inner: rx, shared }),
                TxToken { inner: tx, shared },
            ));
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
        Some((RxToken(Rx::Ring { frame, len, meta, ring }), TxToken { inner: tx, shared }))
    }

    fn transmit(&mut self, now: Instant) -> Option<Self::TxToken<'_>> {
        let shared = &*self.shared;
        self.inner.transmit(now).map(|tx| TxToken { inner: tx, shared })
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
    use ulp_ddp::DdpDevice as _;

    const A: Ipv4Address = Ipv4Address::new(198, 18, 0, 2);
    const B: Ipv4Address = Ipv4Address::new(198, 18, 0, 3);

    /// An Ethernet/IPv4/TCP frame carrying `payload`, its TCP checksum
    /// filled in when `checksum` is set and zero otherwise.
    fn frame(payload: &[u8], checksum: bool) -> Vec<u8> {
        let tcp = TcpRepr {
            src_port: 4420,
            dst_port: 50000,
            control: TcpControl::Psh,
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
            src_addr: A,
            dst_addr: B,
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
        tcp.emit(&mut t, &IpAddress::Ipv4(A), &IpAddress::Ipv4(B), &caps);
        buf
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
