//! One offloaded socket as the NIC follows it, whatever its protocol:
//! [`Flow`] holds the state machine every ULP shares, and a [`Protocol`]
//! (NVMe/TCP PDUs in [`nvme_tcp`], MPA FPDUs in [`iwarp`]) says what a
//! unit of the stream is and where its payload goes.
//!
//! Receive: in-sequence segments run through the protocol's tracker. Data
//! of a unit the protocol maps is written into the mapped buffer with its
//! digest computed in the same pass; every range gets a hint. Old segments
//! pass untouched. A gap inside a unit's data is skipped by length; a gap
//! over a header loses the context: the flow hunts for a plausible header,
//! follows its length to a second one, asks the ULP to confirm, and
//! meanwhile follows the chain without offloading (or, where the stream
//! carries markers, takes the next one's word). Nothing is placed or
//! vouched for until the ULP confirmed a header on the chain, and the unit
//! in progress at that moment is not trusted either.
//!
//! Transmit: new bytes run through the protocol's tracker; the digests it
//! computes are written over the zeros the ULP left, and recorded until
//! acknowledged so a retransmitted segment gets them again.
//!
//! It must never place a byte that did not arrive in sequence on a
//! confirmed chain, never write outside a mapping, and never allocate or
//! dispatch dynamically per byte; nor may it know any protocol's layout.

pub(crate) mod iwarp;
pub(crate) mod nvme_tcp;
#[cfg(test)]
mod tests;
pub(crate) mod tls;

use crate::copy::crc32c_append;
use crate::place::{Mapping, Placed};
use crate::track::{Event, Tracker};
use std::any::Any;
use std::collections::VecDeque;
use std::sync::Arc;
use ulp_ddp::{Caps, HintFlags, SkCtx, Stats};

/// Unit starts remembered while waiting for a resync to be confirmed.
const CHAIN_MEMORY: usize = 64;
/// Ask again (at the current unit) after this many unconfirmed ones.
const REREQUEST_AFTER: u32 = 8;

/// The header of `P`'s units.
pub(crate) type Header<P> = <<P as Protocol>::Rx as Tracker>::Header;

/// Digest bytes a transmit step took, for the flow to fill in: where they
/// sit in the step's input, the index of the first within the digest, how
/// many, and the digest.
#[derive(Debug, Clone, Copy)]
pub(crate) struct DigestSpan {
    pub at: usize,
    pub from: usize,
    pub len: usize,
    pub digest: [u8; 4],
}

/// One step of the transmit tracker.
#[derive(Debug)]
pub(crate) struct TxStep {
    pub used: usize,
    /// Call again on the rest of the input.
    pub more: bool,
    pub digest: Option<DigestSpan>,
}

/// A ULP's stream as the NIC reads it: its trackers, its tables of mapped
/// buffers, and what a unit's header means for them. The flow calls these
/// once per event, never per byte.
pub(crate) trait Protocol: Sized + 'static {
    /// The receive tracker.
    type Rx: Tracker;
    /// Where a unit's payload may land (a tag, an STag, a posted receive).
    type Target: Copy + std::fmt::Debug;
    /// A segment that ends inside a header or trailer is hinted at once
    /// (the ULP may read it before the next segment comes), instead of
    /// with the event that completes it.
    const HINT_EARLY: bool;

    fn rx(&mut self) -> &mut Self::Rx;
    /// The length of the unit that would start at `data[0]`, if its
    /// header is here and passes every check the receiver makes.
    fn plausible(&self, data: &[u8]) -> Option<u32>;
    /// Whether the received stream carries markers that point at units.
    fn markers(&self) -> bool {
        false
    }
    /// Where in `data` (at stream offset `at`) a unit starts, by a marker.
    fn marker_hunt(&self, _at: u64, _data: &[u8]) -> Option<usize> {
        None
    }
    /// Whether units like `header` (or any, without one) carry a digest.
    fn digests(&self, header: Option<&Header<Self>>) -> bool;
    /// The running digest of the unit being received.
    fn rx_crc(&mut self) -> &mut u32;
    /// A header starting at `start`: where its payload goes, if anywhere
    /// (with the buffer position of its first byte). Only a `trusted`
    /// header may map anything.
    fn on_header(
        &mut self,
        header: &Header<Self>,
        start: u64,
        trusted: bool,
        ctx: &SkCtx,
        env: &mut Env,
    ) -> Option<(Self::Target, usize)>;
    fn mapping(&self, target: Self::Target) -> Option<&Mapping>;
    /// The unit ended at `end`, its digest `verified` or not. True if the
    /// protocol hinted its bytes itself (taken whole, in one run).
    fn on_end(
        &mut self,
        unit: &Unit<Self>,
        verified: bool,
        end: u64,
        ctx: &SkCtx,
        env: &mut Env,
    ) -> bool;

    /// Whether the NIC must see outgoing segments at all.
    fn tx_wanted(&self, active: Caps) -> bool;
    /// Take outgoing bytes, the first at stream offset `base`; `None` if
    /// our own stream cannot be followed.
    fn tx_step(&mut self, input: &[u8], base: u64, env: &mut Env) -> Option<TxStep>;
}

#[derive(Debug)]
enum Sync {
    /// On real unit boundaries: units that start now are offloaded.
    Synced,
    /// Context lost; scanning. `candidate` is where the header after a
    /// plausible one must be.
    Lost { candidate: Option<u64> },
    /// Following a plausible chain until the ULP confirms a header on it.
    Pending { chain: VecDeque<u64>, since_request: u32 },
}

/// The unit being received.
pub(crate) struct Unit<P: Protocol> {
    pub start: u64,
    pub header: Header<P>,
    /// Started on a confirmed chain: may be placed and vouched for.
    pub trusted: bool,
    /// Where, and at which buffer position, the payload's first byte goes.
    pub place: Option<(P::Target, usize)>,
    pub crc_on: bool,
    /// No byte of this unit was missed.
    pub intact: bool,
    /// Payload bytes placed.
    pub placed: u32,
}

/// What the flow needs from the device for one segment.
pub(crate) struct Env<'a> {
    pub active: Caps,
    pub stats: &'a mut Stats,
    /// Where the NIC records the payload it placed, for the stack.
    pub placed: &'a mut Placed,
}

/// Digests the device wrote and the peer has not acknowledged yet:
/// (stream offset, bytes), in stream order.
type DigestRecords = VecDeque<(u64, [u8; 4])>;

/// One offloaded socket speaking `P`.
pub(crate) struct Flow<P: Protocol> {
    pub ctx: Arc<SkCtx>,
    pub peer_isn: u32,
    pub local_isn: u32,
    pub proto: P,
    rx_next: u64,
    sync: Sync,
    unit: Option<Unit<P>>,
    /// Start of bytes consumed without an event (a header or digest still
    /// gathering); their hint is decided when the event comes.
    undecided: Option<u64>,
    tx_next: u64,
    /// False after our own stream failed to parse: stop touching it.
    tx_ok: bool,
    records: DigestRecords,
}

/// An offloaded socket as the device holds it, whatever its protocol:
/// one virtual call per segment.
pub(crate) trait Socket: Any + Send {
    fn ctx(&self) -> &Arc<SkCtx>;
    /// (peer, local) initial sequence numbers.
    fn isns(&self) -> (u32, u32);
    fn rx_next(&self) -> u64;
    fn tx_next(&self) -> u64;
    /// An in-order or old segment: `payload` at stream offset `off`.
    fn rx_segment(&mut self, off: u64, payload: &[u8], env: &mut Env);
    /// Whether the socket rewrites what it receives (TLS decrypts), and
    /// so must be given each segment in a copy it may change.
    fn rx_rewrites(&self) -> bool {
        false
    }
    /// `rx_segment` on a copy of the segment the stack will get.
    fn rx_segment_mut(&mut self, off: u64, payload: &mut [u8], env: &mut Env) {
        self.rx_segment(off, payload, env)
    }
    /// Whether the receive context is following real unit boundaries.
    #[cfg(test)]
    fn rx_synced(&self) -> bool;
    /// The ULP confirmed that a unit starts at `seq`.
    fn resync(&mut self, seq: u64, stats: &mut Stats) -> bool;
    /// An acknowledgment for everything before stream offset `ack`.
    fn tx_acked(&mut self, ack: u64);
    /// Our own acknowledgment: the stack has every byte before `ack`.
    fn rx_acked(&mut self, ack: u64) {
        let _ = ack;
    }
    /// Whether the driver let the socket go (the NIC may still owe it
    /// something, as retransmitted records to seal).
    fn released(&self) -> bool {
        false
    }
    /// Whether it was let go and the NIC owes it nothing more: the device
    /// may forget it.
    fn finished(&self) -> bool {
        false
    }
    fn tx_wanted(&self, active: Caps) -> bool;
    /// An outgoing segment at stream offset `off`: digests the ULP left
    /// to us written. Returns whether the payload changed.
    fn tx_segment(&mut self, off: u64, payload: &mut [u8], env: &mut Env) -> bool;
}

fn crc_hint(ok: bool) -> HintFlags {
    if ok { HintFlags::CRC_OK } else { HintFlags::NONE }
}

impl<P: Protocol> Flow<P> {
    pub fn new(proto: P, peer_isn: u32, local_isn: u32, rx_start: u64, tx_start: u64) -> Self {
        Self {
            ctx: Arc::new(SkCtx::new()),
            peer_isn,
            local_isn,
            proto,
            rx_next: rx_start,
            sync: Sync::Synced,
            unit: None,
            undecided: None,
            tx_next: tx_start,
            tx_ok: true,
            records: VecDeque::new(),
        }
    }

    // ---- receive ----

    fn lose(&mut self) {
        self.unit = None;
        self.undecided = None;
        self.sync = Sync::Lost { candidate: None };
    }

    /// `n` bytes never arrived in order (they will come as an old
    /// retransmission the device ignores).
    fn rx_gap(&mut self, n: u64) {
        self.undecided = None;
        if matches!(self.sync, Sync::Lost { .. }) {
            return;
        }
        if self.proto.rx().skip(n) {
            if let Some(u) = &mut self.unit {
                u.intact = false;
            }
        } else {
            self.lose();
        }
    }

    /// Tell the ULP how `[start, end)` was handled; whether it now knows.
    fn hint(&self, start: u64, end: u64, flags: HintFlags) -> bool {
        flags == HintFlags::NONE || self.ctx.push_hint(start, end, flags)
    }

    /// Whether the NIC digests units like `header` (or any) from here.
    fn crc_on(&self, header: Option<&Header<P>>, env: &Env) -> bool {
        matches!(self.sync, Sync::Synced)
            && self.proto.digests(header)
            && env.active.contains(Caps::CRC_RX)
    }

    /// The hint for header, PAD and marker bytes of the unit at hand
    /// before its digest is known: vouched if the NIC digests them all.
    fn provisional(&self, env: &Env) -> HintFlags {
        crc_hint(match &self.unit {
            Some(u) => u.crc_on && u.intact,
            None => self.crc_on(None, env),
        })
    }

    /// Find a unit boundary in `data` (at stream offset `at`) after a loss.
    fn regain(&mut self, at: u64, data: &[u8], env: &mut Env) -> Option<usize> {
        if self.proto.markers() {
            let p = self.proto.marker_hunt(at, data)?;
            self.proto.rx().restart(at + p as u64);
            self.sync = Sync::Synced;
            env.stats.resync_marker += 1;
            return Some(p);
        }
        let p = self.hunt(at, data)?;
        let start = at + p as u64;
        self.proto.rx().restart(start);
        self.sync = Sync::Pending { chain: VecDeque::from([start]), since_request: 0 };
        self.ctx.request_resync(start);
        env.stats.resync += 1;
        Some(p)
    }

    fn feed(&mut self, at: u64, data: &[u8], env: &mut Env) {
        let mut pos = 0usize;
        loop {
            if let Sync::Lost { .. } = self.sync {
                let Some(p) = self.regain(at + pos as u64, &data[pos..], env) else { return };
                pos += p;
            }
            let base = at + pos as u64;
            let Ok((n, ev)) = self.proto.rx().next(&data[pos..]) else {
                // Not a header after all: hunt again past this byte.
                self.lose();
                if pos >= data.len() {
                    return;
                }
                pos += 1;
                continue;
            };
            match ev {
                None => {
                    let done = pos + n == data.len();
                    if done && P::HINT_EARLY {
                        // The segment ends inside a header, PAD or trailer:
                        // say now what the NIC did; the trailer's last byte
                        // carries the digest verdict.
                        let from = self.undecided.take().unwrap_or(base);
                        self.hint(from, base + n as u64, self.provisional(env));
                        return;
                    }
                    if n > 0 {
                        self.undecided.get_or_insert(base);
                    }
                    if done {
                        return;
                    }
                }
                Some(Event::Header(h)) => {
                    let start = self.undecided.take().unwrap_or(base);
                    self.on_header(h, start, base + n as u64, env);
                }
                Some(Event::Data { offset, bytes }) => {
                    // The call may have consumed padding before the data.
                    let skip = bytes.as_ptr() as usize - data[pos..].as_ptr() as usize;
                    self.undecided = None;
                    self.on_data(offset, bytes, base + skip as u64, env);
                }
                Some(Event::Marker { inside }) => {
                    // What came before it is settled as far as it can be:
                    // the trailer carries the digest verdict.
                    let flags = self.provisional(env);
                    if let Some(u) = self.undecided.take() {
                        self.hint(u, base, flags);
                    }
                    self.hint(base, base + n as u64, if inside { flags } else { HintFlags::NONE });
                }
                Some(Event::End { digest }) => {
                    let start = self.undecided.take().unwrap_or(base);
                    self.on_end(digest, start, base + n as u64, env);
                }
            }
            pos += n;
        }
    }

    fn on_header(&mut self, header: Header<P>, hint_from: u64, end: u64, env: &mut Env) {
        let start = self.proto.rx().unit_start(hint_from);
        if let Sync::Pending { chain, since_request } = &mut self.sync {
            chain.push_back(start);
            if chain.len() > CHAIN_MEMORY {
                chain.pop_front();
            }
            *since_request += 1;
            if *since_request >= REREQUEST_AFTER {
                *since_request = 0;
                self.ctx.request_resync(start);
                env.stats.resync += 1;
            }
        }
        let trusted = matches!(self.sync, Sync::Synced);
        let crc_on = self.crc_on(Some(&header), env);
        let place = self.proto.on_header(&header, start, trusted, &self.ctx, env);
        self.hint(hint_from, end, crc_hint(crc_on));
        self.unit = Some(Unit { start, header, trusted, place, crc_on, intact: true, placed: 0 });
    }

    fn on_data(&mut self, offset: u32, bytes: &[u8], at: u64, env: &mut Env) {
        let Some(u) = &mut self.unit else { return };
        if !u.trusted {
            return;
        }
        let n = bytes.len() as u64;
        let place = u.place;
        let mut crc = *self.proto.rx_crc();
        let target =
            u.place.and_then(|(t, pos)| Some((self.proto.mapping(t)?, pos + offset as usize)));
        let placed = match target {
            Some((m, pos)) if self.ctx.has_room() => {
                let Some(c) = m.place(pos, bytes, u.crc_on.then_some(crc)) else {
                    debug_assert!(false, "placement past the end of {:?}", u.place);
                    u.trusted = false;
                    return;
                };
                if let Some(c) = c {
                    crc = c;
                    env.stats.nic_crc_bytes += n;
                }
                env.stats.nic_placed_bytes += n;
                true
            }
            _ if u.crc_on => {
                crc = crc32c_append(crc, bytes);
                env.stats.nic_crc_bytes += n;
                false
            }
            _ => false,
        };
        *self.proto.rx_crc() = crc;
        if placed {
            u.placed += n as u32;
        }
        let mut flags = if placed { HintFlags::PLACED } else { HintFlags::NONE };
        if u.crc_on && u.intact {
            flags = flags.union(HintFlags::CRC_OK);
        }
        // The stack may skip placed bytes only if the ULP learns of them.
        if self.hint(at, at + n, flags) && placed && env.placed.push(at, at + n) {
            env.stats.nic_zero_copy_bytes += n;
            if let Some((t, pos)) = place
                && let Some(m) = self.proto.mapping(t)
            {
                env.placed.locate(at, m, pos + offset as usize, n as usize);
            }
        }
    }

    fn on_end(&mut self, digest: Option<u32>, start: u64, end: u64, env: &mut Env) {
        let Some(u) = self.unit.take() else { return };
        let verified = u.crc_on && u.intact && digest == Some(*self.proto.rx_crc());
        if !self.proto.on_end(&u, verified, end, &self.ctx, env) {
            self.hint(start, end, crc_hint(verified));
        }
    }

    /// Look for a plausible header in `data` (at stream offset `at`) whose
    /// successor is plausible too. Returns where the chain continues.
    fn hunt(&mut self, at: u64, data: &[u8]) -> Option<usize> {
        let end = at + data.len() as u64;
        if let Sync::Lost { candidate: Some(c) } = self.sync {
            if c >= end {
                return None;
            }
            self.sync = Sync::Lost { candidate: None };
            if c >= at && self.proto.plausible(&data[(c - at) as usize..]).is_some() {
                return Some((c - at) as usize);
            }
        }
        let min = <P::Rx as Tracker>::MIN_HEADER;
        for p in 0..data.len().saturating_sub(min - 1) {
            let Some(len) = self.proto.plausible(&data[p..]) else { continue };
            let next = p as u64 + u64::from(len);
            if next + min as u64 <= data.len() as u64 {
                if self.proto.plausible(&data[next as usize..]).is_some() {
                    return Some(next as usize);
                }
            } else {
                self.sync = Sync::Lost { candidate: Some(at + next) };
                return None;
            }
        }
        None
    }

    /// Put back into a retransmitted segment (`payload` at stream offset
    /// `off`, partly before `tx_next`) the digests it carried the first
    /// time. Whether any byte changed.
    fn restore_digests(&self, off: u64, payload: &mut [u8], stats: &mut Stats) -> bool {
        if off >= self.tx_next {
            return false;
        }
        let old_end = (off + payload.len() as u64).min(self.tx_next);
        let mut edited = false;
        for &(at, bytes) in self.records.iter().filter(|&&(at, _)| at < old_end && at + 4 > off) {
            for (i, b) in bytes.iter().enumerate() {
                let s = at + i as u64;
                if (off..old_end).contains(&s) {
                    payload[(s - off) as usize] = *b;
                }
            }
            stats.tx_digest_restored += 1;
            edited = true;
        }
        edited
    }
}

impl<P: Protocol> Socket for Flow<P>
where
    Self: Send,
{
    fn ctx(&self) -> &Arc<SkCtx> {
        &self.ctx
    }

    fn isns(&self) -> (u32, u32) {
        (self.peer_isn, self.local_isn)
    }

    fn rx_next(&self) -> u64 {
        self.rx_next
    }

    fn tx_next(&self) -> u64 {
        self.tx_next
    }

    fn rx_segment(&mut self, off: u64, payload: &[u8], env: &mut Env) {
        // A retransmission or duplicate is left untouched.
        let end = off + payload.len() as u64;
        if end <= self.rx_next || payload.is_empty() {
            return;
        }
        let (gap, at, data) = if off < self.rx_next {
            (0, self.rx_next, &payload[(self.rx_next - off) as usize..])
        } else {
            (off - self.rx_next, off, payload)
        };
        self.rx_next = end;
        env.stats.packets += 1;
        env.stats.bytes += data.len() as u64;
        if gap > 0 {
            self.rx_gap(gap);
        }
        self.feed(at, data, env);
    }

    #[cfg(test)]
    fn rx_synced(&self) -> bool {
        matches!(self.sync, Sync::Synced)
    }

    fn resync(&mut self, seq: u64, stats: &mut Stats) -> bool {
        match &self.sync {
            Sync::Pending { chain, .. } if chain.contains(&seq) => {
                // The chain is genuine from `seq` on: offload from the next
                // header (the unit in progress was not tracked as trusted).
                self.sync = Sync::Synced;
                stats.resync_confirmed += 1;
                true
            }
            _ => false,
        }
    }

    fn tx_acked(&mut self, ack: u64) {
        while self.records.front().is_some_and(|&(at, _)| at + 4 <= ack) {
            self.records.pop_front();
        }
    }

    fn tx_wanted(&self, active: Caps) -> bool {
        self.proto.tx_wanted(active)
    }

    fn tx_segment(&mut self, off: u64, payload: &mut [u8], env: &mut Env) -> bool {
        let end = off + payload.len() as u64;
        let mut edited = self.restore_digests(off, payload, env.stats);
        if end <= self.tx_next || !self.tx_ok {
            return edited;
        }
        if off > self.tx_next {
            // Our own stream has no gaps; if it seems to, stop offloading it.
            self.tx_ok = false;
            return edited;
        }
        let mut pos = (self.tx_next - off) as usize;
        self.tx_next = end;
        loop {
            let base = off + pos as u64;
            let Some(step) = self.proto.tx_step(&payload[pos..], base, env) else {
                self.tx_ok = false;
                return edited;
            };
            if let Some(DigestSpan { at, from, len, digest }) = step.digest {
                payload[pos + at..pos + at + len].copy_from_slice(&digest[from..from + len]);
                if from == 0 {
                    self.records.push_back((base + at as u64, digest));
                }
                edited = true;
            }
            pos += step.used;
            if !step.more {
                return edited;
            }
        }
    }
}
