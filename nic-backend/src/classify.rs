//! The NIC's state behind its lock, and the path of every frame through
//! it: parse and checksum, classify (a handshake to remember, a segment of
//! an offloaded socket, anything else), and hand the segment to its flow.
//!
//! It must never edit a received frame, nor withhold one other than a
//! segment whose checksum is wrong; on transmit it only fills in payload
//! the stack left to it (from a transmit mapping), digests and the
//! checksum, and withholds only a frame that names bytes of no mapping.

use crate::Table;
use crate::config::NicConfig;
use crate::flow::{Env, Socket};
use crate::frame;
use crate::gather::{Filled, Gathers, TxMaps};
use crate::place::Placed;
use smoltcp::phy;
use std::collections::HashMap;
use std::net::SocketAddrV4;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};
use ulp_ddp::{Caps, Stats};

/// Handshake sequence numbers of a connection, from our side.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Isns {
    pub peer: Option<u32>,
    pub local: Option<u32>,
    /// How far the received stream has come (by segments with a right
    /// checksum), while no socket of the device follows it.
    pub rx_seen: u64,
}

/// Connections remembered for their handshakes before the oldest go.
const HANDSHAKES: usize = 4096;

/// Everything the NIC knows, behind [`Shared`]'s lock.
pub(crate) struct State {
    pub cfg: NicConfig,
    /// The medium below finishes transmit checksums.
    pub csum_below: bool,
    /// The medium below verified every received checksum.
    pub verified_below: bool,
    pub handshakes: HashMap<(SocketAddrV4, SocketAddrV4), Isns>,
    /// Offloaded sockets, by `SkHandle::id`.
    pub flows: slab::Slab<Box<dyn Socket>>,
    pub by_key: Table<(SocketAddrV4, SocketAddrV4), usize>,
    pub tx_maps: TxMaps,
    pub stats: Stats,
    /// Received frames a socket rewrites, copied here first.
    pub rx_copy: Vec<u8>,
}

/// The NIC's state, shared by the device and its handle.
pub(crate) struct Shared {
    pub state: Mutex<State>,
    /// Some socket may have data placed: received frames take the DMA path.
    pub placing: AtomicBool,
}

impl Shared {
    pub fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A frame on its way up to the stack: `None` withholds it, otherwise
    /// the payload the NIC placed. `split`: the frame is being copied into
    /// the NIC's ring, so placed bytes may be left out of it.
    pub fn on_rx(&self, frame: &[u8], split: bool) -> Option<Placed> {
        let mut st = self.lock();
        let mut placed = Placed { zero_copy: split && st.cfg.zero_copy, ..Placed::default() };
        st.rx(frame, &mut placed).then_some(placed)
    }

    /// Where the payload a frame's metadata names comes from; `None` if
    /// it names bytes of no mapping (the frame must not go out).
    pub fn resolve(&self, gather: &smoltcp::phy::GatherRanges) -> Option<Gathers> {
        let mut st = self.lock();
        let found = st.tx_maps.resolve(gather);
        if found.is_none() {
            st.stats.tx_gather_refused += 1;
        }
        found
    }

    /// A frame the stack is sending, already written; `gathered` payload
    /// bytes of it the NIC filled in (checksummed here, as they were not
    /// by the stack).
    pub fn on_tx(&self, frame: &mut [u8], filled: Filled) {
        let mut st = self.lock();
        st.stats.tx_gathered_bytes += filled.gathered;
        st.stats.tx_fpdus_framed += filled.fpdus;
        st.tx(frame, filled.bytes > 0);
    }

    /// After a change of sockets or capabilities.
    /// After a change of sockets or capabilities: received frames take
    /// the DMA path while some socket may be placed into or rewrites.
    pub fn update_placing(&self, st: &State) {
        let placing = st.cfg.zero_copy && st.cfg.active.contains(Caps::DDP) && !st.flows.is_empty()
            || st.flows.iter().any(|(_, f)| f.rx_rewrites());
        self.placing.store(placing, Ordering::Relaxed);
    }

    /// Take the frame in `buf[..len]` through the NIC's receive path where
    /// it lies: its length and what was placed of it, or `None` if it was
    /// withheld. A frame the NIC rewrote (TLS it decrypted) is its copy.
    pub fn receive_in_place(
        &self,
        buf: &mut Vec<u8>,
        len: usize,
    ) -> Option<(usize, phy::PacketMeta)> {
        let mut st = self.lock();
        let mut placed =
            Placed { zero_copy: st.cfg.zero_copy, may_rewrite: true, ..Placed::default() };
        if !st.rx(&buf[..len], &mut placed) {
            return None;
        }
        if !placed.rewritten {
            return Some((len, placed.meta()));
        }
        let copy = &st.rx_copy;
        if buf.len() < copy.len() {
            buf.resize(copy.len(), 0);
        }
        buf[..copy.len()].copy_from_slice(copy);
        Some((copy.len(), placed.meta()))
    }

    /// Take frame `rx` through the NIC's receive path and give it to
    /// `deliver` with what was placed of it, or `None` if it was withheld.
    pub fn receive<R>(
        &self,
        rx: impl phy::RxToken,
        deliver: impl FnOnce(Option<(&[u8], &Placed)>) -> R,
    ) -> R {
        rx.consume(|frame| {
            // Under the lock: a rewritten frame is the NIC's copy.
            let mut st = self.lock();
            let mut placed =
                Placed { zero_copy: st.cfg.zero_copy, may_rewrite: true, ..Placed::default() };
            if !st.rx(frame, &mut placed) {
                return deliver(None);
            }
            let frame = if placed.rewritten { &st.rx_copy[..] } else { frame };
            deliver(Some((frame, &placed)))
        })
    }
}

impl State {
    fn rx(&mut self, frame: &[u8], placed: &mut Placed) -> bool {
        let Some(seg) = frame::parse_headers(frame) else { return true };
        let verified = self.cfg.checksum || self.verified_below;
        if !self.verified_below && self.cfg.checksum && !frame::verify(frame, &seg) {
            self.stats.rx_csum_bad += 1;
            self.stats.drop += 1;
            return false;
        }
        if self.cfg.hw.is_empty() {
            return true;
        }
        // Our side of the connection is the destination.
        let key = (seg.dst, seg.src);
        if seg.syn {
            if verified || frame::verify(frame, &seg) {
                forget_released(self, key);
                remember(self, key, |i| i.peer = Some(seg.seq));
            }
            return true;
        }
        let Some(&id) = self.by_key.get(&key) else {
            if seg.payload_len > 0
                && let Some(isn) = self.handshakes.get_mut(&key)
                && let Some(peer) = isn.peer
                && (verified || frame::verify(frame, &seg))
            {
                let end = frame::stream_offset(seg.seq, peer, isn.rx_seen) + seg.payload_len as u64;
                isn.rx_seen = isn.rx_seen.max(end);
            }
            return true;
        };
        // Nothing is placed from a segment that failed its checksum.
        if !verified && !frame::verify(frame, &seg) {
            return true;
        }
        let State { flows, stats, cfg, rx_copy, .. } = self;
        let Some(flow) = flows.get_mut(id) else { return true };
        let (peer_isn, local_isn) = flow.isns();
        if let Some(ack) = seg.ack {
            let off = frame::stream_offset(ack, local_isn, flow.tx_next());
            flow.tx_acked(off);
            if flow.finished() {
                // Let go by its driver, and owed nothing more.
                self.flows.remove(id);
                self.by_key.remove(&key);
                return true;
            }
        }
        if seg.payload_len > 0 {
            let off = frame::stream_offset(seg.seq, peer_isn, flow.rx_next());
            let range = seg.payload_at..seg.payload_at + seg.payload_len;
            placed.base = off;
            placed.frame_at = seg.payload_at;
            let rewrite = placed.may_rewrite && flow.rx_rewrites();
            let mut env = Env { active: cfg.active, stats, placed };
            if rewrite {
                rx_copy.clear();
                rx_copy.extend_from_slice(frame);
                flow.rx_segment_mut(off, &mut rx_copy[range], &mut env);
                env.placed.rewritten = true;
            } else {
                flow.rx_segment(off, &frame[range], &mut env);
            }
        }
        true
    }

    fn tx(&mut self, frame: &mut [u8], gathered: bool) {
        let Some(seg) = frame::parse_headers(frame) else { return };
        let wrote = self.tx_digests(frame, &seg);
        if (wrote || gathered || self.cfg.checksum) && !self.csum_below {
            seg.fix_checksum(frame);
        }
    }

    /// Write the data digests left to the NIC; whether any were written.
    fn tx_digests(&mut self, frame: &mut [u8], seg: &frame::Segment) -> bool {
        if self.cfg.hw.is_empty() {
            return false;
        }
        let key = (seg.src, seg.dst);
        if seg.syn {
            forget_released(self, key);
            remember(self, key, |i| i.local = Some(seg.seq));
            return false;
        }
        let Some(&id) = self.by_key.get(&key) else { return false };
        let State { flows, stats, cfg, .. } = self;
        let Some(flow) = flows.get_mut(id) else { return false };
        if let Some(ack) = seg.ack {
            let (peer_isn, _) = flow.isns();
            flow.rx_acked(frame::stream_offset(ack, peer_isn, flow.rx_next()));
        }
        if seg.payload_len == 0 || !flow.tx_wanted(cfg.active) {
            return false;
        }
        let off = frame::stream_offset(seg.seq, flow.isns().1, flow.tx_next());
        let mut unused = Placed::default();
        let mut env = Env { active: cfg.active, stats, placed: &mut unused };
        let payload = &mut frame[seg.payload_at..seg.payload_at + seg.payload_len];
        flow.tx_segment(off, payload, &mut env)
    }
}

/// A new connection on `key`: a socket its driver let go of that still
/// waited for the old one's last acknowledgment goes.
fn forget_released(st: &mut State, key: (SocketAddrV4, SocketAddrV4)) {
    if let Some(&id) = st.by_key.get(&key)
        && st.flows.get(id).is_some_and(|f| f.released())
    {
        st.flows.remove(id);
        st.by_key.remove(&key);
    }
}

fn remember(st: &mut State, key: (SocketAddrV4, SocketAddrV4), f: impl FnOnce(&mut Isns)) {
    if st.handshakes.len() >= HANDSHAKES && !st.handshakes.contains_key(&key) {
        let keep = &st.by_key;
        st.handshakes.retain(|k, _| keep.contains_key(k));
    }
    f(st.handshakes.entry(key).or_default());
}
