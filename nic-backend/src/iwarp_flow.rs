//! One offloaded iWARP socket: its STag table and an FPDU tracker for
//! each direction.
//!
//! Receive: in-sequence segments run through the NIC's MPA tracker. The
//! payload of a tagged segment (RDMA Write, Read Response) whose STag is
//! mapped, live, carries the right key and right, and covers the whole
//! range, is written at its TO with the MPA CRC computed in the same pass;
//! so is the payload of a Send whose MSN has a posted receive buffer
//! mapped, at its MO, if it fits. Every range gets a hint. A Send that closes an STag (Send with
//! Invalidate, or the one-shot close) frees the mapping when its last FPDU
//! ends with a good CRC, before the stack sees it, and the ULP is told
//! which STag went. Old segments pass untouched. After a gap over a header
//! the flow finds its place again: from the next MPA marker whose FPDU
//! starts in the data at hand, where the stream carries markers, with
//! nothing to confirm; otherwise it hunts for a plausible FPDU whose
//! successor is plausible too (with CRCs on, whose CRC is right), asks
//! the ULP to confirm, and offloads again once it has.
//!
//! Transmit: FPDUs leave with their CRC trailer zeroed when the ULP left
//! the CRC to us; it is computed and written, and recorded until
//! acknowledged so a retransmitted segment gets it again. An advertised
//! STag goes live when the Send that carries it leaves.

use crate::flow::{DigestRecords, Env, Mapping, admit, forget_acked, restore_digests};
use crate::mpa::{self, Event, Header, Kind, Tracker, marker_head, op};
use crc32c::crc32c_append;
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use ulp_ddp::{
    Access, Caps, HintFlags, IwarpConfig, SgEntry, SkCtx, Stag, StagIo, Stats, TaggedRun,
};

/// FPDU starts remembered while waiting for a resync to be confirmed.
const CHAIN_MEMORY: usize = 64;
/// Ask again (at the current FPDU) after this many unconfirmed ones.
const REREQUEST_AFTER: u32 = 8;

/// A tagged buffer as the device keeps it.
pub(crate) struct StagMapping {
    pub stag: Stag,
    pub map: Mapping,
    pub base: u64,
    pub access: Access,
}

impl StagMapping {
    pub fn new(io: StagIo, arm_at: Option<u64>) -> Option<Self> {
        let len = usize::try_from(io.len()).ok()?;
        io.base.checked_add(io.len())?;
        let entries = io.sgl.into_iter().map(|e| (e.buf, e.offset, e.len)).collect();
        let map = Mapping { entries, len, oneshot: arm_at.is_some(), live: arm_at.is_none() };
        Some(Self { stag: io.stag, map, base: io.base, access: io.access })
    }

    /// Where `len` bytes at tagged offset `to` start in the buffer, if the
    /// whole range lies inside it.
    fn position(&self, to: u64, len: u64) -> Option<usize> {
        let pos = to.checked_sub(self.base)?;
        (pos.checked_add(len)? <= self.map.len as u64).then_some(pos as usize)
    }
}

#[derive(Debug)]
enum Sync {
    Synced,
    /// Context lost; scanning. `candidate` is where the FPDU after a
    /// plausible one must start.
    Lost {
        candidate: Option<u64>,
    },
    /// Following a plausible chain until the ULP confirms an FPDU on it.
    Pending {
        chain: VecDeque<u64>,
        since_request: u32,
    },
}

/// Where a segment's payload may land.
#[derive(Debug, Clone, Copy)]
enum Target {
    /// The STag with this index.
    Stag(u32),
    /// The posted receive for the Send with this MSN.
    Recv(u32),
}

struct RxFpdu {
    start: u64,
    header: Header,
    trusted: bool,
    /// Where, and at which buffer position, the payload's first byte goes.
    place: Option<(Target, usize)>,
    crc_on: bool,
    /// No byte of this FPDU was missed.
    intact: bool,
    /// Payload bytes placed.
    placed: u32,
}

pub(crate) struct IwarpFlow {
    pub config: IwarpConfig,
    pub ctx: Arc<SkCtx>,
    pub peer_isn: u32,
    pub local_isn: u32,
    /// Fixed at sk_add: the ULP leaves MPA CRCs to us on this socket.
    pub tx_crc: bool,
    /// Fixed at sk_add: the ULP may advertise STags that go live with a
    /// Send, so every outgoing FPDU is followed from the first.
    tx_oneshot: bool,
    /// By STag index.
    stags: HashMap<u32, StagMapping>,
    /// Advertised STags not live yet: (offset of the Send that arms
    /// them, STag).
    unarmed: Vec<(u64, Stag)>,
    /// Posted receive buffers, by the MSN of the Send they take.
    recvs: HashMap<u32, Mapping>,
    rx_next: u64,
    rx_tracker: Tracker,
    sync: Sync,
    fpdu: Option<RxFpdu>,
    undecided: Option<u64>,
    tx_next: u64,
    tx_tracker: Tracker,
    tx_ok: bool,
    records: DigestRecords,
}

impl IwarpFlow {
    pub fn new(
        config: IwarpConfig,
        peer_isn: u32,
        local_isn: u32,
        tx_crc: bool,
        tx_oneshot: bool,
    ) -> Self {
        let oneshot = config.oneshot_opcodes;
        Self {
            ctx: Arc::new(SkCtx::new()),
            peer_isn,
            local_isn,
            tx_crc,
            tx_oneshot,
            stags: HashMap::new(),
            unarmed: Vec::new(),
            recvs: HashMap::new(),
            rx_next: config.rx_start,
            rx_tracker: Tracker::new(config.rx_start, config.rx_markers, oneshot),
            sync: Sync::Synced,
            fpdu: None,
            undecided: None,
            tx_next: config.tx_start,
            tx_tracker: Tracker::new(config.tx_start, config.tx_markers, oneshot),
            tx_ok: true,
            records: VecDeque::new(),
            config,
        }
    }

    pub fn rx_next(&self) -> u64 {
        self.rx_next
    }

    pub fn tx_next(&self) -> u64 {
        self.tx_next
    }

    pub fn rx_synced(&self) -> bool {
        matches!(self.sync, Sync::Synced)
    }

    // ---- the STag table ----

    pub fn stags(&self) -> usize {
        self.stags.len()
    }

    pub fn stag_busy(&self, stag: Stag) -> bool {
        self.stags.contains_key(&stag.index())
    }

    /// Map `m`, live now or (advertised) when the Send at `arm_at` leaves.
    pub fn insert_stag(&mut self, m: StagMapping, arm_at: Option<u64>) {
        if let Some(at) = arm_at {
            self.unarmed.push((at, m.stag));
        }
        self.stags.insert(m.stag.index(), m);
    }

    /// Remove `stag` if the table holds exactly it (key included).
    pub fn remove_stag(&mut self, stag: Stag) -> bool {
        match self.stags.get(&stag.index()) {
            Some(m) if m.stag == stag => {
                self.unarmed.retain(|&(_, s)| s != stag);
                self.stags.remove(&stag.index()).is_some()
            }
            _ => false,
        }
    }

    pub fn recvs(&self) -> usize {
        self.recvs.len()
    }

    /// Map the posted receive the Send with `msn` lands in.
    pub fn insert_recv(&mut self, msn: u32, sgl: Vec<SgEntry>) -> Option<()> {
        let len = sgl.iter().map(|e| e.len).sum::<usize>();
        if len == 0 {
            return None;
        }
        let entries = sgl.into_iter().map(|e| (e.buf, e.offset, e.len)).collect();
        self.recvs.insert(msn, Mapping { entries, len, oneshot: false, live: true });
        Some(())
    }

    /// The Send with `msn` went by: its receive, and any older one the
    /// NIC missed, are the ULP's alone now.
    fn retire_recvs(&mut self, msn: u32) {
        self.recvs.retain(|&m, _| (m.wrapping_sub(msn) as i32) > 0);
    }

    /// The mapping tagged data for `stag` at `to` may be placed into, and
    /// the position there, if the table permits it.
    fn permitted(&self, opcode: u8, stag: u32, to: u64, len: u64) -> Option<(u32, usize)> {
        let m = self.stags.get(&Stag(stag).index())?;
        // A Read Response lands in a local sink; a Write needs the right.
        let right = if opcode == op::WRITE { Access::REMOTE_WRITE } else { Access::LOCAL_WRITE };
        if m.stag.0 != stag || !m.map.live || !m.access.contains(right) {
            return None;
        }
        Some((m.stag.index(), m.position(to, len)?))
    }

    // ---- receive ----

    /// An in-order or old segment: `payload` at stream offset `off`.
    pub fn rx_segment(&mut self, off: u64, payload: &[u8], env: &mut Env) {
        let Some((gap, at, data)) = admit(&mut self.rx_next, off, payload, env.stats) else {
            return;
        };
        if gap > 0 {
            self.rx_gap(gap);
        }
        self.feed(at, data, env);
    }

    fn lose(&mut self) {
        self.fpdu = None;
        self.undecided = None;
        self.sync = Sync::Lost { candidate: None };
    }

    fn rx_gap(&mut self, n: u64) {
        self.undecided = None;
        if matches!(self.sync, Sync::Lost { .. }) {
            return;
        }
        if self.rx_tracker.skip(n) {
            if let Some(f) = &mut self.fpdu {
                f.intact = false;
            }
        } else {
            self.lose();
        }
    }

    fn hint(&self, start: u64, end: u64, flags: HintFlags) -> bool {
        flags == HintFlags::NONE || self.ctx.push_hint(start, end, flags)
    }

    fn feed(&mut self, at: u64, data: &[u8], env: &mut Env) {
        let mut pos = 0usize;
        loop {
            if let Sync::Lost { .. } = self.sync {
                let here = at + pos as u64;
                if self.rx_tracker.has_markers() {
                    let Some(p) = self.marker_hunt(here, &data[pos..]) else { return };
                    pos += p;
                    self.rx_tracker.reset_at(at + pos as u64);
                    self.sync = Sync::Synced;
                    env.stats.resync_marker += 1;
                } else {
                    let Some(p) = self.hunt(here, &data[pos..]) else { return };
                    pos += p;
                    let start = at + pos as u64;
                    self.rx_tracker.reset_at(start);
                    self.sync = Sync::Pending { chain: VecDeque::from([start]), since_request: 0 };
                    self.ctx.request_resync(start);
                    env.stats.resync += 1;
                }
            }
            let base = at + pos as u64;
            let (n, ev) = match self.rx_tracker.next(&data[pos..]) {
                Ok(step) => step,
                Err(_) => {
                    self.lose();
                    if pos >= data.len() {
                        return;
                    }
                    pos += 1;
                    continue;
                }
            };
            match ev {
                None if pos + n == data.len() => {
                    // The segment ends inside a header, PAD or trailer:
                    // the ULP may read it before the next one comes, so
                    // say now what the NIC did; the trailer's last byte
                    // carries the CRC verdict.
                    let from = self.undecided.take().unwrap_or(base);
                    self.hint(from, base + n as u64, self.provisional(env));
                    return;
                }
                None => {
                    if n > 0 {
                        self.undecided.get_or_insert(base);
                    }
                }
                Some(Event::Header(h)) => {
                    let start = self.undecided.take().unwrap_or(base);
                    self.on_header(h, start, base + n as u64, env);
                }
                Some(Event::Data { offset, bytes }) => {
                    self.undecided = None;
                    self.on_data(offset, bytes, base, env);
                }
                Some(Event::Marker { inside }) => {
                    // What came before it is settled as far as it can be:
                    // the trailer carries the CRC verdict.
                    let flags = self.provisional(env);
                    if let Some(u) = self.undecided.take() {
                        self.hint(u, base, flags);
                    }
                    self.hint(base, base + n as u64, if inside { flags } else { HintFlags::NONE });
                }
                Some(Event::End { trailer }) => {
                    let start = self.undecided.take().unwrap_or(base);
                    self.on_end(trailer, start, base + n as u64, env);
                }
            }
            pos += n;
        }
    }

    /// The hint for header, PAD and marker bytes of the FPDU at hand
    /// before its CRC is known: vouched if the NIC digests them all.
    fn provisional(&self, env: &Env) -> HintFlags {
        let crc_on = match &self.fpdu {
            Some(f) => f.crc_on && f.intact,
            None => self.crc_active(env),
        };
        if crc_on { HintFlags::CRC_OK } else { HintFlags::NONE }
    }

    fn crc_active(&self, env: &Env) -> bool {
        self.rx_synced() && self.config.crc && env.active.contains(Caps::NVME_TCP_DDGST_RX)
    }

    fn on_header(&mut self, header: Header, hint_from: u64, end: u64, env: &mut Env) {
        let start = self.rx_tracker.fpdu_start();
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
        let crc_on = self.crc_active(env);
        let len = header.payload_len;
        let place = match header.kind {
            _ if !trusted || len == 0 || !env.active.contains(Caps::NVME_TCP) => None,
            Kind::Tagged { stag, to } => {
                let p = self.permitted(header.opcode, stag, to, u64::from(len));
                env.stats.stag_refused += u64::from(p.is_none());
                p.map(|(index, pos)| (Target::Stag(index), pos))
            }
            Kind::Send { msn, mo, .. } => self.recvs.get(&msn).and_then(|m| {
                let fits = (mo as usize).checked_add(len as usize).is_some_and(|e| e <= m.len);
                env.stats.recv_refused += u64::from(!fits);
                fits.then_some((Target::Recv(msn), mo as usize))
            }),
            Kind::Other => None,
        };
        self.hint(hint_from, end, if crc_on { HintFlags::CRC_OK } else { HintFlags::NONE });
        self.fpdu = Some(RxFpdu { start, header, trusted, place, crc_on, intact: true, placed: 0 });
    }

    fn on_data(&mut self, offset: u32, bytes: &[u8], at: u64, env: &mut Env) {
        let Some(f) = &mut self.fpdu else { return };
        if !f.trusted {
            return;
        }
        let n = bytes.len() as u64;
        let crc = self.rx_tracker.crc_mut();
        let target = f.place.and_then(|(t, pos)| {
            let m = match t {
                Target::Stag(index) => self.stags.get(&index).map(|m| &m.map),
                Target::Recv(msn) => self.recvs.get(&msn),
            };
            Some((m?, pos))
        });
        let placed = match target {
            Some((m, pos)) if self.ctx.has_room() => {
                let at_pos = pos + offset as usize;
                let Some(c) = m.place(at_pos, bytes, f.crc_on.then_some(*crc)) else {
                    debug_assert!(false, "placement past the end of {:?}", f.place);
                    f.trusted = false;
                    return;
                };
                if let Some(c) = c {
                    *crc = c;
                    env.stats.nic_crc_bytes += n;
                }
                env.stats.nic_placed_bytes += n;
                true
            }
            _ if f.crc_on => {
                *crc = crc32c_append(*crc, bytes);
                env.stats.nic_crc_bytes += n;
                false
            }
            _ => false,
        };
        if placed {
            f.placed += n as u32;
        }
        let mut flags = if placed { HintFlags::PLACED } else { HintFlags::NONE };
        if f.crc_on && f.intact {
            flags = flags.union(HintFlags::CRC_OK);
        }
        if self.hint(at, at + n, flags) && placed && env.placed.push(at, at + n) {
            env.stats.nic_zero_copy_bytes += n;
        }
    }

    fn on_end(&mut self, trailer: u32, start: u64, end: u64, env: &mut Env) {
        let Some(f) = self.fpdu.take() else { return };
        let verified = f.crc_on && f.intact && trailer == self.rx_tracker.computed();
        if self.consume_whole(&f, verified, end, env) {
            return;
        }
        self.hint(start, end, if verified { HintFlags::CRC_OK } else { HintFlags::NONE });
        let Kind::Send { stag, msn, .. } = f.header.kind else { return };
        if f.trusted && f.header.last {
            self.retire_recvs(msn);
        }
        // One-shot completion: free the STag the message closes before the
        // message goes up, if nothing about the FPDU is in doubt.
        if !(f.header.last && f.header.closes()) {
            return;
        }
        let sound = f.trusted && (verified || (!self.config.crc && f.intact));
        if sound && env.active.contains(Caps::NVME_TCP_ONESHOT) && self.remove_stag(Stag(stag)) {
            self.ctx.freed(f.start, stag);
            env.stats.stag_remote_invalidate += 1;
            env.stats.oneshot_freed += 1;
        }
    }

    /// An RDMA Write FPDU ending at `end` that arrived in this segment
    /// and that the NIC placed entirely and found sound is consumed
    /// whole: one run hint in place of its header, data and trailer
    /// hints, and none of its bytes in the stack's ring.
    fn consume_whole(&self, f: &RxFpdu, verified: bool, end: u64, env: &mut Env) -> bool {
        let h = &f.header;
        let Kind::Tagged { stag, to } = h.kind else { return false };
        let sound = verified || (!self.config.crc && f.intact);
        if !(f.trusted && sound && h.opcode == op::WRITE && h.payload_len > 0)
            || f.placed != h.payload_len
            || self.rx_tracker.has_markers()
            || f.start < env.placed.base
        {
            return false;
        }
        let payload = u64::from(h.payload_len);
        let run = TaggedRun { stag, to, to_end: to.saturating_add(payload), payload };
        let flags =
            HintFlags::PLACED.union(if verified { HintFlags::CRC_OK } else { HintFlags::NONE });
        if !self.ctx.push_run(f.start, end, flags, run) {
            return false;
        }
        env.placed.consume(f.start, end);
        env.stats.whole_fpdus += 1;
        true
    }

    /// Where in `data` (at stream offset `at`) an FPDU starts, by the
    /// first whole marker there whose FPDU starts in `data` too.
    fn marker_hunt(&self, at: u64, data: &[u8]) -> Option<usize> {
        let end = at + data.len() as u64;
        let mut m = self.rx_tracker.next_marker(at);
        while m + 4 <= end {
            let i = (m - at) as usize;
            if let Some(head) = marker_head(m, &data[i..i + 4])
                && (at..=end).contains(&head)
            {
                return Some((head - at) as usize);
            }
            m += 512;
        }
        None
    }

    /// Look for a plausible FPDU in `data` (at stream offset `at`) whose
    /// successor is plausible too. Returns where the chain continues.
    fn hunt(&mut self, at: u64, data: &[u8]) -> Option<usize> {
        let end = at + data.len() as u64;
        if let Sync::Lost { candidate: Some(c) } = self.sync {
            if c >= end {
                return None;
            }
            self.sync = Sync::Lost { candidate: None };
            if c >= at && self.plausible(&data[(c - at) as usize..]).is_some() {
                return Some((c - at) as usize);
            }
        }
        for p in 0..data.len().saturating_sub(3) {
            let Some(len) = self.plausible(&data[p..]) else { continue };
            let next = p as u64 + u64::from(len);
            if next + 4 <= data.len() as u64 {
                if self.plausible(&data[next as usize..]).is_some() {
                    return Some(next as usize);
                }
            } else {
                self.sync = Sync::Lost { candidate: Some(at + next) };
                return None;
            }
        }
        None
    }

    /// The length of the FPDU that would start at `data[0]`, if its header
    /// is here and consistent, and (with CRCs on, when all of it is here)
    /// its CRC is right.
    fn plausible(&self, data: &[u8]) -> Option<u32> {
        let h = mpa::parse(data, self.rx_tracker.oneshot()).ok()?;
        let len = h.fpdu_len as usize;
        if self.config.crc && data.len() >= len {
            let sent = u32::from_le_bytes(data[len - 4..len].try_into().ok()?);
            if crc32c::crc32c(&data[..len - 4]) != sent {
                return None;
            }
        }
        Some(h.fpdu_len)
    }

    /// The ULP confirmed that an FPDU starts at `seq`.
    pub fn resync(&mut self, seq: u64, stats: &mut Stats) -> bool {
        match &self.sync {
            Sync::Pending { chain, .. } if chain.contains(&seq) => {
                self.sync = Sync::Synced;
                stats.resync_confirmed += 1;
                true
            }
            _ => false,
        }
    }

    // ---- transmit ----

    pub fn tx_acked(&mut self, ack: u64) {
        forget_acked(&mut self.records, ack);
    }

    /// Whether the NIC needs to see outgoing segments at all: to write
    /// CRCs, or to follow FPDU boundaries for the Sends that arm
    /// advertised STags (skipping a segment would lose them).
    pub fn tx_wanted(&self) -> bool {
        self.tx_crc || self.tx_oneshot
    }

    /// An outgoing segment at stream offset `off`: CRCs written, advertised
    /// STags armed. Returns whether the payload changed.
    pub fn tx_segment(&mut self, off: u64, payload: &mut [u8], env: &mut Env) -> bool {
        let end = off + payload.len() as u64;
        let mut edited = restore_digests(&self.records, self.tx_next, off, payload, env.stats);
        if end <= self.tx_next || !self.tx_ok {
            return edited;
        }
        if off > self.tx_next {
            self.tx_ok = false;
            return edited;
        }
        let mut pos = (self.tx_next - off) as usize;
        self.tx_next = end;
        loop {
            let base = off + pos as u64;
            let (n, more) = match self.tx_tracker.next(&payload[pos..]) {
                // Short of the end only when a marker comes next.
                Ok((n, None)) => (n, pos + n < payload.len()),
                Ok((n, Some(Event::Marker { .. }))) => (n, true),
                Ok((n, Some(Event::Header(h)))) => {
                    if h.is_send() {
                        self.arm(base, env.stats);
                    }
                    (n, true)
                }
                Ok((n, Some(Event::Data { bytes, .. }))) => {
                    if self.tx_crc {
                        let crc = self.tx_tracker.crc_mut();
                        *crc = crc32c_append(*crc, bytes);
                        env.stats.tx_crc_offloaded_bytes += bytes.len() as u64;
                    }
                    (n, true)
                }
                Ok((n, Some(Event::End { .. }))) => (n, true),
                Err(_) => {
                    self.tx_ok = false;
                    return edited;
                }
            };
            // The trailer the ULP left zeroed gets the CRC, which is final
            // once the trailer starts.
            if self.tx_crc
                && let Some((at, from, k)) = self.tx_tracker.trailer_span()
            {
                let crc = self.tx_tracker.computed().to_le_bytes();
                payload[pos + at..pos + at + k].copy_from_slice(&crc[from..from + k]);
                if from == 0 {
                    self.records.push_back((base + at as u64, crc));
                }
                edited = true;
            }
            pos += n;
            if !more {
                return edited;
            }
        }
    }

    /// Advertised STags waiting for the Send at `send_at` go live.
    fn arm(&mut self, send_at: u64, stats: &mut Stats) {
        let stags = &mut self.stags;
        self.unarmed.retain(|&(at, stag)| {
            if at != send_at {
                return true;
            }
            if let Some(m) = stags.get_mut(&stag.index()) {
                m.map.live = true;
                stats.oneshot_armed += 1;
            }
            false
        });
    }
}
