//! iWARP as a [`Protocol`]: MPA FPDUs and their DDP/RDMAP headers followed
//! by the NIC's own tracker ([`crate::mpa`]), the STag table and the posted
//! receives.
//!
//! Receive: the payload of a tagged segment (RDMA Write, Read Response)
//! whose STag is mapped, live, carries the right key and right, and covers
//! the whole range, is written at its TO; so is the payload of a Send
//! whose MSN has a posted receive buffer mapped, at its MO, if it fits. A
//! Send that closes an STag (Send with Invalidate, or the one-shot close)
//! frees the mapping when its last FPDU ends with a good CRC, before the
//! stack sees it, and the ULP is told which STag went. An RDMA Write the
//! NIC took on entirely is reported as one run. Where the stream carries
//! MPA markers, they show the way back after a loss.
//!
//! Transmit: FPDUs leave with their CRC trailer zeroed when the ULP left
//! the CRC to us; it is computed and written. An advertised STag goes live
//! when the Send that carries it leaves.
//!
//! It must never place into an STag without the key and the right, nor
//! outside its range; and it does not depend on the iWARP crate.

use super::{DigestSpan, Env, Flow, Protocol, TxStep, Unit};
use crate::Table;
use crate::copy::crc32c_append;
use crate::mpa::{self, Header, Kind, Tracker, marker_head, op};
use crate::place::Mapping;
use crate::track::{Event, Tracker as _};
use ulp_ddp::{Access, Caps, HintFlags, IwarpConfig, Sgl, SkCtx, Stag, StagIo, Stats, TaggedRun};

/// A tagged buffer as the device keeps it.
pub(crate) struct StagMapping {
    pub stag: Stag,
    pub map: Mapping,
    pub base: u64,
    pub access: Access,
}

impl StagMapping {
    pub fn new(io: StagIo, arm_at: Option<u64>) -> Option<Self> {
        usize::try_from(io.len()).ok()?;
        io.base.checked_add(io.len())?;
        let map = Mapping::new(io.sgl, arm_at.is_some(), arm_at.is_none());
        Some(Self { stag: io.stag, map, base: io.base, access: io.access })
    }

    /// Where `len` bytes at tagged offset `to` start in the buffer, if the
    /// whole range lies inside it.
    fn position(&self, to: u64, len: u64) -> Option<usize> {
        let pos = to.checked_sub(self.base)?;
        (pos.checked_add(len)? <= self.map.len as u64).then_some(pos as usize)
    }
}

/// Where a segment's payload may land.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Target {
    /// The STag with this index.
    Stag(u32),
    /// The posted receive for the Send with this MSN.
    Recv(u32),
}

/// The iWARP side of an offloaded socket.
pub(crate) struct Iwarp {
    /// MPA CRCs are in use.
    crc: bool,
    /// Fixed at sk_add: the ULP leaves MPA CRCs to us on this socket.
    tx_crc: bool,
    /// Fixed at sk_add: the ULP may advertise STags that go live with a
    /// Send, so every outgoing FPDU is followed from the first.
    tx_oneshot: bool,
    /// By STag index.
    stags: Table<u32, StagMapping>,
    /// Advertised STags not live yet: (offset of the Send that arms
    /// them, STag).
    unarmed: Vec<(u64, Stag)>,
    /// Posted receive buffers, by the MSN of the Send they take.
    recvs: Table<u32, Mapping>,
    rx: Tracker,
    tx: Tracker,
}

impl Iwarp {
    pub fn flow(
        config: IwarpConfig,
        peer_isn: u32,
        local_isn: u32,
        tx_crc: bool,
        tx_oneshot: bool,
    ) -> Flow<Self> {
        let oneshot = config.oneshot_opcodes;
        let proto = Self {
            crc: config.crc,
            tx_crc,
            tx_oneshot,
            stags: Table::default(),
            unarmed: Vec::new(),
            recvs: Table::default(),
            rx: Tracker::new(config.rx_start, config.rx_markers, oneshot),
            tx: Tracker::new(config.tx_start, config.tx_markers, oneshot),
        };
        Flow::new(proto, peer_isn, local_isn, config.rx_start, config.tx_start)
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
    pub fn insert_recv(&mut self, msn: u32, sgl: Sgl) -> Option<()> {
        let m = Mapping::new(sgl, false, true);
        if m.len == 0 {
            return None;
        }
        self.recvs.insert(msn, m);
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

    /// An RDMA Write FPDU ending at `end` that arrived in this segment
    /// and that the NIC placed entirely and found sound is consumed
    /// whole: one run hint in place of its header, data and trailer
    /// hints, and none of its bytes in the stack's ring.
    fn consume_whole(
        &self,
        f: &Unit<Self>,
        verified: bool,
        end: u64,
        ctx: &SkCtx,
        env: &mut Env,
    ) -> bool {
        let h = &f.header;
        let Kind::Tagged { stag, to } = h.kind else { return false };
        let sound = verified || (!self.crc && f.intact);
        if !(f.trusted && sound && h.opcode == op::WRITE && h.payload_len > 0)
            || f.placed != h.payload_len
            || self.rx.has_markers()
            || f.start < env.placed.base
        {
            return false;
        }
        let payload = u64::from(h.payload_len);
        let run = TaggedRun { stag, to, to_end: to.saturating_add(payload), payload };
        let flags =
            HintFlags::PLACED.union(if verified { HintFlags::CRC_OK } else { HintFlags::NONE });
        if !ctx.push_run(f.start, end, flags, run) {
            return false;
        }
        env.placed.consume(f.start, end);
        env.stats.whole_fpdus += 1;
        true
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

impl Protocol for Iwarp {
    type Rx = Tracker;
    type Target = Target;
    const HINT_EARLY: bool = true;

    fn markers(&self) -> bool {
        self.rx.has_markers()
    }

    /// The first whole marker in `data` whose FPDU starts in `data` too.
    fn marker_hunt(&self, at: u64, data: &[u8]) -> Option<usize> {
        let end = at + data.len() as u64;
        let mut m = self.rx.next_marker(at);
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

    /// With CRCs on, when all of the FPDU is here, its CRC must be right.
    fn plausible(&self, data: &[u8]) -> Option<u32> {
        let h = mpa::parse(data, self.rx.oneshot()).ok()?;
        let len = h.fpdu_len as usize;
        if self.crc && data.len() >= len {
            let sent = u32::from_le_bytes(data[len - 4..len].try_into().ok()?);
            if crate::copy::crc32c(&data[..len - 4]) != sent {
                return None;
            }
        }
        Some(h.fpdu_len)
    }

    fn rx(&mut self) -> &mut Tracker {
        &mut self.rx
    }

    fn digests(&self, _header: Option<&Header>) -> bool {
        self.crc
    }

    fn rx_crc(&mut self) -> &mut u32 {
        self.rx.crc_mut()
    }

    fn on_header(
        &mut self,
        header: &Header,
        _start: u64,
        trusted: bool,
        _ctx: &SkCtx,
        env: &mut Env,
    ) -> Option<(Target, usize)> {
        let len = header.payload_len;
        match header.kind {
            _ if !trusted || len == 0 || !env.active.contains(Caps::DDP) => None,
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
        }
    }

    fn mapping(&self, target: Target) -> Option<&Mapping> {
        match target {
            Target::Stag(index) => self.stags.get(&index).map(|m| &m.map),
            Target::Recv(msn) => self.recvs.get(&msn),
        }
    }

    fn on_end(
        &mut self,
        f: &Unit<Self>,
        verified: bool,
        end: u64,
        ctx: &SkCtx,
        env: &mut Env,
    ) -> bool {
        if self.consume_whole(f, verified, end, ctx, env) {
            return true;
        }
        let Kind::Send { stag, msn, .. } = f.header.kind else { return false };
        if f.trusted && f.header.last {
            self.retire_recvs(msn);
        }
        // One-shot completion: free the STag the message closes before the
        // message goes up, if nothing about the FPDU is in doubt.
        let sound = f.trusted && (verified || (!self.crc && f.intact));
        if f.header.last
            && f.header.closes()
            && sound
            && env.active.contains(Caps::ONESHOT)
            && self.remove_stag(Stag(stag))
        {
            ctx.freed(f.start, stag);
            env.stats.stag_remote_invalidate += 1;
            env.stats.oneshot_freed += 1;
        }
        false
    }

    /// To write CRCs, or to follow FPDU boundaries for the Sends that arm
    /// advertised STags (skipping a segment would lose them).
    fn tx_wanted(&self, _active: Caps) -> bool {
        self.tx_crc || self.tx_oneshot
    }

    fn tx_step(&mut self, input: &[u8], base: u64, env: &mut Env) -> Option<TxStep> {
        let (used, ev) = self.tx.next(input).ok()?;
        let more = match ev {
            // Short of the end only when a marker comes next.
            None => used < input.len(),
            Some(Event::Header(h)) => {
                if h.is_send() {
                    self.arm(base, env.stats);
                }
                true
            }
            Some(Event::Data { bytes, .. }) => {
                if self.tx_crc {
                    let crc = self.tx.crc_mut();
                    *crc = crc32c_append(*crc, bytes);
                    env.stats.tx_crc_offloaded_bytes += bytes.len() as u64;
                }
                true
            }
            Some(Event::Marker { .. } | Event::End { .. }) => true,
        };
        // The trailer the ULP left zeroed gets the CRC, which is final
        // once the trailer starts.
        let digest = self.tx.trailer_span().filter(|_| self.tx_crc).map(|(at, from, len)| {
            DigestSpan { at, from, len, digest: self.tx.computed().to_le_bytes() }
        });
        Some(TxStep { used, more, digest })
    }
}
