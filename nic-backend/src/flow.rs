//! One offloaded socket: its configuration, its tag table, and a PDU
//! tracker for each direction.
//!
//! Receive: in-sequence segments run through the NIC's PDU tracker. Data of
//! a C2HData (host) or H2CData (controller) PDU whose tag is mapped is written into
//! the mapped buffer with its digest computed in the same pass; every range
//! gets a hint. Old segments pass untouched. A gap inside a PDU's data is
//! skipped by length; a gap over a header loses the context: the tracker
//! hunts for a plausible header, follows its PLEN to a second one, asks the
//! ULP to confirm, and meanwhile follows the chain without offloading.
//! Nothing is placed or vouched for until the ULP confirmed a header on the
//! chain, and the PDU in progress at that moment is not trusted either.
//!
//! Transmit: new bytes run through a tracker; data digests of outgoing data
//! PDUs are computed and written over the zeros the ULP left, and recorded
//! until acknowledged so a retransmitted segment gets them again. A one-shot
//! mapping goes live when its command capsule leaves.

use crate::copy::copy_then_crc;
use crate::pdu::{self, Direction, Event, Header, Kind, Tracker};
use crc32c::crc32c_append;
use smoltcp::phy::PlacedRanges;
use std::collections::VecDeque;
use std::sync::Arc;
use ulp_ddp::{Caps, HintFlags, IoBuf, NvmeTcpConfig, Role, SkCtx, Stats};

/// Headers passed while waiting for a resync to be confirmed.
const CHAIN_MEMORY: usize = 64;
/// Ask again (at the current header) after this many unconfirmed PDUs.
const REREQUEST_AFTER: u32 = 8;
/// Plausible PDUs are at most this long (a 4 MiB transfer and change).
const MAX_PLAUSIBLE_PLEN: u32 = (16 << 20) + 256;
/// Types whose headers carry digests: the ones a hunt may trust.
const DIGESTIBLE: [u8; 5] = [
    pdu::ty::CAPSULE_CMD,
    pdu::ty::CAPSULE_RESP,
    pdu::ty::H2C_DATA,
    pdu::ty::C2H_DATA,
    pdu::ty::R2T,
];

/// A tag's buffers, as the device keeps them.
pub(crate) struct Mapping {
    /// (buffer, offset, length), contiguous runs merged.
    pub entries: Vec<(IoBuf, usize, usize)>,
    pub len: usize,
    pub oneshot: bool,
    /// One-shot mappings go live when their capsule leaves.
    pub live: bool,
}

impl Mapping {
    /// Write `src` at byte `pos` of the mapping, continuing `crc` over it
    /// when `crc` is given. `None` if the bytes do not fit: the caller
    /// checked at the PDU header that they do, so that is a bug, and the
    /// bytes are then left to the ULP as unplaced.
    pub fn place(&self, pos: usize, src: &[u8], mut crc: Option<u32>) -> Option<Option<u32>> {
        let mut entry_start = 0;
        let mut done = 0;
        for (buf, off, len) in &self.entries {
            if done == src.len() {
                break;
            }
            let at = pos + done;
            if at >= entry_start + len {
                entry_start += len;
                continue;
            }
            let in_entry = at - entry_start;
            let k = (len - in_entry).min(src.len() - done);
            let mut g = buf.lock();
            let dst = g.get_mut(off + in_entry..off + in_entry + k)?;
            let s = &src[done..done + k];
            crc = match crc {
                Some(c) => Some(copy_then_crc(dst, s, c)),
                None => {
                    dst.copy_from_slice(s);
                    None
                }
            };
            done += k;
            entry_start += len;
        }
        (done == src.len()).then_some(crc)
    }
}

#[derive(Debug)]
enum Sync {
    /// On real PDU boundaries: PDUs that start now are offloaded.
    Synced,
    /// Context lost; scanning. `candidate` is where the header after a
    /// plausible one must be.
    Lost { candidate: Option<u64> },
    /// Following a plausible chain until the ULP confirms a header on it.
    Pending { chain: VecDeque<u64>, since_request: u32 },
}

struct RxPdu {
    start: u64,
    /// Started on a confirmed chain: may be placed and vouched for.
    trusted: bool,
    place: Option<(u16, u32)>,
    crc_on: bool,
    crc: u32,
    /// No byte of this PDU's data was missed.
    intact: bool,
    free_at_end: Option<u16>,
}

struct RxTrack {
    next: u64,
    tracker: Tracker,
    sync: Sync,
    pdu: Option<RxPdu>,
    /// Start of bytes consumed without an event (a header or digest still
    /// gathering); their hint is decided when the event comes.
    undecided: Option<u64>,
}

struct TxTrack {
    next: u64,
    tracker: Tracker,
    /// False after our own stream failed to parse: stop touching it.
    ok: bool,
    crc_on: bool,
    crc: u32,
    /// Digests sent and not yet acknowledged: (stream offset, bytes).
    records: DigestRecords,
}

/// What the flow needs from the device for one segment.
pub(crate) struct Env<'a> {
    pub active: Caps,
    pub stats: &'a mut Stats,
    /// Where the NIC records the payload it placed, for the stack.
    pub placed: &'a mut Placed,
}

/// Payload of one received segment that the NIC placed, as ranges of its
/// TCP payload: the stack does not copy these bytes (`PacketMeta::placed`).
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Placed {
    /// Stream offset of the segment's first payload byte.
    pub base: u64,
    /// Where the payload starts in the frame.
    pub frame_at: usize,
    pub ranges: PlacedRanges,
    /// Placed bytes may be kept out of the ring.
    pub zero_copy: bool,
}

impl Placed {
    /// Copy `frame` into `dst`, which is as long, except the bytes placed:
    /// the DMA of a device that splits header from data.
    pub fn dma(&self, dst: &mut [u8], frame: &[u8]) {
        let mut at = 0;
        for r in self.ranges.iter() {
            let (start, end) = (self.frame_at + r.start, self.frame_at + r.end);
            dst[at..start].copy_from_slice(&frame[at..start]);
            at = end;
        }
        dst[at..].copy_from_slice(&frame[at..]);
    }

    /// The metadata that tells the stack what not to copy.
    pub fn meta(&self) -> smoltcp::phy::PacketMeta {
        let mut meta = smoltcp::phy::PacketMeta::default();
        meta.placed = self.ranges;
        meta
    }

    /// Stream bytes `[start, end)` were placed and the ULP was told so.
    /// Ranges that do not fit are left out: the stack copies them too,
    /// which the ULP never reads, and which is always correct.
    pub fn push(&mut self, start: u64, end: u64) -> bool {
        let Some((a, b)) = self.in_segment(start, end) else {
            debug_assert!(false, "a segment payload is shorter than 64 KiB");
            return false;
        };
        self.zero_copy && self.ranges.push(a, b)
    }

    /// Stream bytes `[start, end)` of this segment, in place of the placed
    /// ranges inside them, were consumed whole and the ULP was told so.
    pub fn consume(&mut self, start: u64, end: u64) -> bool {
        let Some((a, b)) = self.in_segment(start, end).filter(|_| self.zero_copy) else {
            return false;
        };
        self.ranges.truncate_from(a);
        self.ranges.push(a, b)
    }

    /// Stream bytes `[start, end)` as offsets into this segment's payload.
    fn in_segment(&self, start: u64, end: u64) -> Option<(u16, u16)> {
        let at = |x: u64| x.checked_sub(self.base).and_then(|d| u16::try_from(d).ok());
        Some((at(start)?, at(end)?))
    }
}

pub(crate) struct Flow {
    pub config: NvmeTcpConfig,
    pub ctx: Arc<SkCtx>,
    pub peer_isn: u32,
    pub local_isn: u32,
    /// Fixed at sk_add: the ULP leaves data digests to us on this socket.
    pub tx_crc: bool,
    table: Vec<Option<Mapping>>,
    rx: RxTrack,
    tx: TxTrack,
}

impl Flow {
    pub fn new(
        config: NvmeTcpConfig,
        peer_isn: u32,
        local_isn: u32,
        tx_crc: bool,
        table_len: usize,
    ) -> Self {
        let (rx_dir, tx_dir) = match config.role {
            Role::Host => (Direction::ControllerToHost, Direction::HostToController),
            Role::Controller => (Direction::HostToController, Direction::ControllerToHost),
        };
        let digests = (
            config.dgst & NvmeTcpConfig::DGST_HEADER != 0,
            config.dgst & NvmeTcpConfig::DGST_DATA != 0,
        );
        let rx_tracker = Tracker::new(rx_dir, digests);
        let tx_tracker = Tracker::new(tx_dir, digests);
        Self {
            ctx: Arc::new(SkCtx::new()),
            peer_isn,
            local_isn,
            tx_crc,
            table: (0..table_len).map(|_| None).collect(),
            rx: RxTrack {
                next: config.rx_start,
                tracker: rx_tracker,
                sync: Sync::Synced,
                pdu: None,
                undecided: None,
            },
            tx: TxTrack {
                next: config.tx_start,
                tracker: tx_tracker,
                ok: true,
                crc_on: false,
                crc: 0,
                records: VecDeque::new(),
            },
            config,
        }
    }

    pub fn rx_next(&self) -> u64 {
        self.rx.next
    }

    pub fn tx_next(&self) -> u64 {
        self.tx.next
    }

    // ---- the tag table ----

    pub fn mapping(&self, tag: u16) -> Option<&Mapping> {
        self.table.get(usize::from(tag)).and_then(Option::as_ref)
    }

    pub fn slot(&mut self, tag: u16) -> Option<&mut Option<Mapping>> {
        self.table.get_mut(usize::from(tag))
    }

    fn free(&mut self, tag: u16, offset: u64, stats: &mut Stats) {
        if let Some(slot) = self.table.get_mut(usize::from(tag))
            && slot.take().is_some()
        {
            self.ctx.freed(offset, u32::from(tag));
            stats.oneshot_freed += 1;
        }
    }

    // ---- receive ----

    /// An in-order or old segment: `payload` at stream offset `off`.
    pub fn rx_segment(&mut self, off: u64, payload: &[u8], env: &mut Env) {
        let Some((gap, at, data)) = admit(&mut self.rx.next, off, payload, env.stats) else {
            return;
        };
        if gap > 0 {
            self.rx_gap(gap);
        }
        self.feed(at, data, env);
    }

    fn lose(&mut self) {
        self.rx.tracker.reset();
        self.rx.pdu = None;
        self.rx.undecided = None;
        self.rx.sync = Sync::Lost { candidate: None };
    }

    /// `n` bytes never arrived in order (they will come as an old
    /// retransmission the device ignores).
    fn rx_gap(&mut self, n: u64) {
        self.rx.undecided = None;
        match self.rx.sync {
            Sync::Lost { .. } => {}
            Sync::Synced | Sync::Pending { .. } => {
                if self.rx.tracker.skip(n) {
                    if let Some(p) = &mut self.rx.pdu {
                        p.intact = false;
                    }
                } else {
                    self.lose();
                }
            }
        }
    }

    /// Tell the ULP how `[start, end)` was handled; whether it now knows.
    fn hint(&self, start: u64, end: u64, flags: HintFlags) -> bool {
        flags == HintFlags::NONE || self.ctx.push_hint(start, end, flags)
    }

    fn feed(&mut self, at: u64, data: &[u8], env: &mut Env) {
        let mut pos = 0usize;
        loop {
            if let Sync::Lost { .. } = self.rx.sync {
                match self.hunt(at + pos as u64, &data[pos..]) {
                    Some(p) => {
                        pos += p;
                        let start = at + pos as u64;
                        self.rx.tracker.reset();
                        self.rx.sync =
                            Sync::Pending { chain: VecDeque::from([start]), since_request: 0 };
                        self.ctx.request_resync(start);
                        env.stats.resync += 1;
                    }
                    None => return,
                }
            }
            let base = at + pos as u64;
            let (n, ev) = match self.rx.tracker.next(&data[pos..]) {
                Ok(step) => step,
                Err(_) => {
                    // Not a header after all: hunt again past this byte.
                    self.lose();
                    if pos >= data.len() {
                        return;
                    }
                    pos += 1;
                    continue;
                }
            };
            match ev {
                None => {
                    if n > 0 {
                        self.rx.undecided.get_or_insert(base);
                    }
                    return;
                }
                Some(Event::Header(repr)) => {
                    let start = self.rx.undecided.take().unwrap_or(base);
                    self.on_header(&repr, start, base + n as u64, env);
                }
                Some(Event::Data { offset, bytes }) => {
                    // The call may have consumed padding before the data.
                    let skip = bytes.as_ptr() as usize - data[pos..].as_ptr() as usize;
                    let data_at = base + skip as u64;
                    self.rx.undecided = None;
                    self.on_data(offset, bytes, data_at, env);
                }
                Some(Event::End { data_digest }) => {
                    let start = self.rx.undecided.take().unwrap_or(base);
                    self.on_end(data_digest, start, base + n as u64, env);
                }
            }
            pos += n;
        }
    }

    fn on_header(&mut self, repr: &Header, start: u64, end: u64, env: &mut Env) {
        if let Sync::Pending { chain, since_request } = &mut self.rx.sync {
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
        let trusted = matches!(self.rx.sync, Sync::Synced);
        let crc_on = trusted && repr.ddgst && env.active.contains(Caps::NVME_TCP_DDGST_RX);
        let mut pdu =
            RxPdu { start, trusted, place: None, crc_on, crc: 0, intact: true, free_at_end: None };
        if trusted {
            let ddp = env.active.contains(Caps::NVME_TCP);
            match (self.config.role, repr.kind) {
                (Role::Host, Kind::C2hData { cccid, datao, success }) => {
                    if let Some(m) = self.mapping(cccid).filter(|m| m.live) {
                        let fits = u64::from(datao) + u64::from(repr.data_len) <= m.len as u64;
                        if ddp && fits {
                            pdu.place = Some((cccid, datao));
                        }
                        if success && m.oneshot {
                            pdu.free_at_end = Some(cccid);
                        }
                    }
                }
                (Role::Host, Kind::CapsuleResp { cid })
                    if self.mapping(cid).is_some_and(|m| m.oneshot) =>
                {
                    self.free(cid, start, env.stats);
                }
                (Role::Controller, Kind::H2cData { ttag, datao }) => {
                    if let Some(m) = self.mapping(ttag).filter(|m| m.live) {
                        let fits = u64::from(datao) + u64::from(repr.data_len) <= m.len as u64;
                        if ddp && fits {
                            pdu.place = Some((ttag, datao));
                        }
                    }
                }
                _ => {}
            }
        }
        self.hint(start, end, if crc_on { HintFlags::CRC_OK } else { HintFlags::NONE });
        self.rx.pdu = Some(pdu);
    }

    fn on_data(&mut self, offset: u32, bytes: &[u8], at: u64, env: &mut Env) {
        let Some(pdu) = &mut self.rx.pdu else { return };
        if !pdu.trusted {
            return;
        }
        let n = bytes.len() as u64;
        let mapping = pdu.place.and_then(|(tag, datao)| {
            let m = self.table.get(usize::from(tag)).and_then(Option::as_ref)?;
            Some((m, (datao + offset) as usize))
        });
        let placed = match mapping {
            Some((m, pos)) if self.ctx.has_room() => {
                let Some(crc) = m.place(pos, bytes, pdu.crc_on.then_some(pdu.crc)) else {
                    debug_assert!(false, "placement past the end of mapping {:?}", pdu.place);
                    pdu.trusted = false;
                    return;
                };
                if let Some(c) = crc {
                    pdu.crc = c;
                    env.stats.nic_crc_bytes += n;
                }
                env.stats.nic_placed_bytes += n;
                true
            }
            _ if pdu.crc_on => {
                pdu.crc = crc32c_append(pdu.crc, bytes);
                env.stats.nic_crc_bytes += n;
                false
            }
            _ => false,
        };
        let mut flags = if placed { HintFlags::PLACED } else { HintFlags::NONE };
        if pdu.crc_on && pdu.intact {
            flags = flags.union(HintFlags::CRC_OK);
        }
        // The stack may skip placed bytes only if the ULP learns of them.
        if self.hint(at, at + n, flags) && placed && env.placed.push(at, at + n) {
            env.stats.nic_zero_copy_bytes += n;
        }
    }

    fn on_end(&mut self, data_digest: Option<u32>, start: u64, end: u64, env: &mut Env) {
        let Some(pdu) = self.rx.pdu.take() else { return };
        let verified = pdu.crc_on && pdu.intact && data_digest == Some(pdu.crc);
        self.hint(start, end, if verified { HintFlags::CRC_OK } else { HintFlags::NONE });
        if let Some(tag) = pdu.free_at_end {
            self.free(tag, pdu.start, env.stats);
        }
    }

    /// Look for a plausible header in `data` (at stream offset `at`) whose
    /// successor is plausible too. Returns where the chain continues.
    fn hunt(&mut self, at: u64, data: &[u8]) -> Option<usize> {
        let end = at + data.len() as u64;
        if let Sync::Lost { candidate: Some(c) } = self.rx.sync {
            if c >= end {
                return None;
            }
            self.rx.sync = Sync::Lost { candidate: None };
            if c >= at && self.plausible(&data[(c - at) as usize..]).is_some() {
                return Some((c - at) as usize);
            }
        }
        for p in 0..data.len().saturating_sub(7) {
            // Cheap first look: a type that carries digests.
            if !DIGESTIBLE.contains(&data[p]) {
                continue;
            }
            let Some(plen) = self.plausible(&data[p..]) else { continue };
            let next = p as u64 + u64::from(plen);
            if next + 8 <= data.len() as u64 {
                if self.plausible(&data[next as usize..]).is_some() {
                    return Some(next as usize);
                }
            } else {
                self.rx.sync = Sync::Lost { candidate: Some(at + next) };
                return None;
            }
        }
        None
    }

    /// PLEN of the PDU that would start at `data[0]`, if its whole header is
    /// here and passes every check the receiver makes (including the header
    /// digest, when header digests are on).
    fn plausible(&self, data: &[u8]) -> Option<u32> {
        if !DIGESTIBLE.contains(data.first()?) {
            return None;
        }
        let t = &self.rx.tracker;
        let h = pdu::parse(data, t.direction(), t.digests()).ok()?;
        (h.plen <= MAX_PLAUSIBLE_PLEN).then_some(h.plen)
    }

    /// The ULP confirmed that a PDU starts at `seq`.
    pub fn resync(&mut self, seq: u64, stats: &mut Stats) -> bool {
        match &self.rx.sync {
            Sync::Pending { chain, .. } if chain.contains(&seq) => {
                // The chain is genuine from `seq` on: offload from the next
                // header (the PDU in progress was not tracked as trusted).
                self.rx.sync = Sync::Synced;
                stats.resync_confirmed += 1;
                true
            }
            _ => false,
        }
    }

    /// Whether the receive context is following real PDU boundaries.
    pub fn rx_synced(&self) -> bool {
        matches!(self.rx.sync, Sync::Synced)
    }

    // ---- transmit ----

    /// An acknowledgment for everything before stream offset `ack`.
    pub fn tx_acked(&mut self, ack: u64) {
        forget_acked(&mut self.tx.records, ack);
    }

    /// An outgoing segment at stream offset `off`. Fills data digests the
    /// ULP left to us; returns whether the payload changed.
    pub fn tx_segment(&mut self, off: u64, payload: &mut [u8], env: &mut Env) -> bool {
        let end = off + payload.len() as u64;
        let mut edited = restore_digests(&self.tx.records, self.tx.next, off, payload, env.stats);
        if end <= self.tx.next || !self.tx.ok {
            return edited;
        }
        if off > self.tx.next {
            // Our own stream has no gaps; if it seems to, stop offloading it.
            self.tx.ok = false;
            return edited;
        }
        let mut pos = (self.tx.next - off) as usize;
        self.tx.next = end;
        loop {
            // Inside a digest we fill: how many of its bytes are still to come.
            let digest_left =
                self.tx.tracker.remaining().filter(|&r| self.tx.crc_on && (1..=4).contains(&r));
            let base = off + pos as u64;
            let (n, header, more) = match self.tx.tracker.next(&payload[pos..]) {
                Ok((n, None)) => (n, None, false),
                Ok((n, Some(Event::Header(repr)))) => (n, Some(repr), true),
                Ok((n, Some(Event::Data { bytes, .. }))) => {
                    if self.tx.crc_on {
                        self.tx.crc = crc32c_append(self.tx.crc, bytes);
                        env.stats.tx_crc_offloaded_bytes += bytes.len() as u64;
                    }
                    (n, None, true)
                }
                Ok((n, Some(Event::End { .. }))) => (n, None, true),
                Err(_) => {
                    self.tx.ok = false;
                    return edited;
                }
            };
            if let Some(left) = digest_left
                && n > 0
            {
                let k = n.min(left as usize);
                let from = 4 - left as usize;
                let digest = self.tx.crc.to_le_bytes();
                payload[pos..pos + k].copy_from_slice(&digest[from..from + k]);
                if from == 0 {
                    self.tx.records.push_back((base, digest));
                }
                edited = true;
            }
            if let Some(repr) = header {
                self.on_tx_header(&repr, env);
            }
            pos += n;
            if !more {
                return edited;
            }
        }
    }

    fn on_tx_header(&mut self, repr: &Header, env: &mut Env) {
        self.tx.crc_on = self.tx_crc && repr.ddgst;
        self.tx.crc = 0;
        if let (Role::Host, Kind::CapsuleCmd { cid }) = (self.config.role, repr.kind)
            && env.active.contains(Caps::NVME_TCP_ONESHOT)
            && let Some(Some(m)) = self.table.get_mut(usize::from(cid))
            && m.oneshot
            && !m.live
        {
            m.live = true;
            env.stats.oneshot_armed += 1;
        }
    }
}

/// Digests the device wrote and the peer has not acknowledged yet:
/// (stream offset, bytes), in stream order.
pub(crate) type DigestRecords = VecDeque<(u64, [u8; 4])>;

/// Put back into a retransmitted segment (`payload` at stream offset
/// `off`, partly before `tx_next`) the digests it carried the first time.
/// Whether any byte changed.
pub(crate) fn restore_digests(
    records: &DigestRecords,
    tx_next: u64,
    off: u64,
    payload: &mut [u8],
    stats: &mut Stats,
) -> bool {
    if off >= tx_next {
        return false;
    }
    let old_end = (off + payload.len() as u64).min(tx_next);
    let mut edited = false;
    for &(at, bytes) in records.iter().filter(|&&(at, _)| at < old_end && at + 4 > off) {
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

/// Drop the records the peer acknowledged (everything before `ack`).
pub(crate) fn forget_acked(records: &mut DigestRecords, ack: u64) {
    while records.front().is_some_and(|&(at, _)| at + 4 <= ack) {
        records.pop_front();
    }
}

/// A received segment (`payload` at stream offset `off`) against `next`,
/// the offset expected: `None` for a retransmission or duplicate, which
/// the device leaves untouched; otherwise the bytes never seen before
/// missing ahead of it, and the new bytes with their offset. Advances
/// `next` and counts the segment.
pub(crate) fn admit<'a>(
    next: &mut u64,
    off: u64,
    payload: &'a [u8],
    stats: &mut Stats,
) -> Option<(u64, u64, &'a [u8])> {
    let end = off + payload.len() as u64;
    if end <= *next || payload.is_empty() {
        return None;
    }
    let (gap, at, data) = if off < *next {
        (0, *next, &payload[(*next - off) as usize..])
    } else {
        (off - *next, off, payload)
    };
    *next = end;
    stats.packets += 1;
    stats.bytes += data.len() as u64;
    Some((gap, at, data))
}
