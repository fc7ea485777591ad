//! NVMe/TCP as a [`Protocol`]: PDUs followed by the NIC's own tracker
//! ([`crate::pdu`]), and the tag table the ULP maps commands' buffers
//! into.
//!
//! Receive: data of a C2HData (host) or H2CData (controller) PDU whose
//! tag is mapped and live, and fits, goes to the mapping at DATAO. A
//! one-shot mapping is freed by its CapsuleResp, or by the last C2HData
//! with SUCCESS when that PDU ends. Transmit: data digests of outgoing data
//! PDUs are computed for the ULP that left them to us, and a one-shot
//! mapping goes live when its command capsule leaves.
//!
//! It must never place for a tag that is not mapped and live, nor past the
//! end of its mapping; and it does not depend on the NVMe/TCP crate.

use super::{DigestSpan, Env, Flow, Protocol, TxStep, Unit};
use crate::copy::crc32c_append;
use crate::pdu::{self, Direction, Header, Kind, Tracker};
use crate::place::Mapping;
use crate::track::{Event, Tracker as _};
use ulp_ddp::{Caps, NvmeTcpConfig, Role, SkCtx, Stats};

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

/// The NVMe/TCP side of an offloaded socket.
pub(crate) struct NvmeTcp {
    role: Role,
    /// Fixed at sk_add: the ULP leaves data digests to us on this socket.
    tx_crc: bool,
    table: Vec<Option<Mapping>>,
    rx: Tracker,
    /// Data digest so far of the PDU being received.
    rx_crc: u32,
    /// The one-shot tag the PDU being received frees when it ends.
    free_at_end: Option<u16>,
    tx: Tracker,
    /// The outgoing PDU's data digest is ours to write, and so far.
    tx_crc_on: bool,
    tx_crc_value: u32,
}

impl NvmeTcp {
    /// A host's socket with data digests, no transmit digest offload and
    /// `queue_size` tags, its received PDUs from stream offset
    /// `rx_start`: what the tests and fuzz targets drive.
    pub fn host_flow(queue_size: u32, rx_start: u64) -> Flow<Self> {
        let config = NvmeTcpConfig {
            role: Role::Host,
            pfv: 0,
            cpda: 0,
            hpda: 0,
            dgst: NvmeTcpConfig::DGST_DATA,
            queue_size,
            rx_start,
            tx_start: 0,
        };
        Self::flow(config, 0, 0, false, queue_size as usize)
    }

    /// A socket with a tag table of `table_len` entries.
    pub fn flow(
        config: NvmeTcpConfig,
        peer_isn: u32,
        local_isn: u32,
        tx_crc: bool,
        table_len: usize,
    ) -> Flow<Self> {
        let (rx_dir, tx_dir) = match config.role {
            Role::Host => (Direction::ControllerToHost, Direction::HostToController),
            Role::Controller => (Direction::HostToController, Direction::ControllerToHost),
        };
        let digests = (
            config.dgst & NvmeTcpConfig::DGST_HEADER != 0,
            config.dgst & NvmeTcpConfig::DGST_DATA != 0,
        );
        let proto = Self {
            role: config.role,
            tx_crc,
            table: (0..table_len).map(|_| None).collect(),
            rx: Tracker::new(rx_dir, digests),
            rx_crc: 0,
            free_at_end: None,
            tx: Tracker::new(tx_dir, digests),
            tx_crc_on: false,
            tx_crc_value: 0,
        };
        Flow::new(proto, peer_isn, local_isn, config.rx_start, config.tx_start)
    }

    /// The slot of `tag`, if the table has one.
    pub fn slot(&mut self, tag: u16) -> Option<&mut Option<Mapping>> {
        self.table.get_mut(usize::from(tag))
    }

    fn mapped(&self, tag: u16) -> Option<&Mapping> {
        self.table.get(usize::from(tag)).and_then(Option::as_ref)
    }

    /// The one-shot mapping of `tag` was freed by the PDU at `offset`.
    fn free(&mut self, tag: u16, offset: u64, ctx: &SkCtx, stats: &mut Stats) {
        if let Some(slot) = self.slot(tag)
            && slot.take().is_some()
        {
            ctx.freed(offset, u32::from(tag));
            stats.oneshot_freed += 1;
        }
    }

    /// Where data of `data_len` bytes for `tag` at `datao` goes, if the
    /// tag is mapped, live, and the data fits.
    fn fits(&self, tag: u16, datao: u32, data_len: u32, ddp: bool) -> Option<(u16, usize)> {
        let m = self.mapped(tag).filter(|m| m.live)?;
        let fits = u64::from(datao) + u64::from(data_len) <= m.len as u64;
        (ddp && fits).then_some((tag, datao as usize))
    }
}

impl Protocol for NvmeTcp {
    type Rx = Tracker;
    type Target = u16;
    const HINT_EARLY: bool = false;

    fn rx(&mut self) -> &mut Tracker {
        &mut self.rx
    }

    /// Including the header digest, when header digests are on.
    fn plausible(&self, data: &[u8]) -> Option<u32> {
        if !DIGESTIBLE.contains(data.first()?) {
            return None;
        }
        let h = pdu::parse(data, self.rx.direction(), self.rx.digests()).ok()?;
        (h.plen <= MAX_PLAUSIBLE_PLEN).then_some(h.plen)
    }

    fn digests(&self, header: Option<&Header>) -> bool {
        header.is_some_and(|h| h.ddgst)
    }

    fn rx_crc(&mut self) -> &mut u32 {
        &mut self.rx_crc
    }

    fn on_header(
        &mut self,
        header: &Header,
        start: u64,
        trusted: bool,
        ctx: &SkCtx,
        env: &mut Env,
    ) -> Option<(u16, usize)> {
        self.rx_crc = 0;
        self.free_at_end = None;
        if !trusted {
            return None;
        }
        let ddp = env.active.contains(Caps::DDP);
        match (self.role, header.kind) {
            (Role::Host, Kind::C2hData { cccid, datao, success }) => {
                if success && self.mapped(cccid).is_some_and(|m| m.live && m.oneshot) {
                    self.free_at_end = Some(cccid);
                }
                self.fits(cccid, datao, header.data_len, ddp)
            }
            (Role::Host, Kind::CapsuleResp { cid })
                if self.mapped(cid).is_some_and(|m| m.oneshot) =>
            {
                self.free(cid, start, ctx, env.stats);
                None
            }
            (Role::Controller, Kind::H2cData { ttag, datao }) => {
                self.fits(ttag, datao, header.data_len, ddp)
            }
            _ => None,
        }
    }

    fn mapping(&self, tag: u16) -> Option<&Mapping> {
        self.mapped(tag)
    }

    fn on_end(&mut self, unit: &Unit<Self>, _: bool, _: u64, ctx: &SkCtx, env: &mut Env) -> bool {
        if let Some(tag) = self.free_at_end.take() {
            self.free(tag, unit.start, ctx, env.stats);
        }
        false
    }

    fn tx_wanted(&self, active: Caps) -> bool {
        self.tx_crc || (self.role == Role::Host && active.contains(Caps::ONESHOT))
    }

    fn tx_step(&mut self, input: &[u8], _base: u64, env: &mut Env) -> Option<TxStep> {
        // Inside a digest we fill: how many of its bytes are still to come.
        let digest_left = self.tx.remaining().filter(|&r| self.tx_crc_on && (1..=4).contains(&r));
        let (used, ev) = self.tx.next(input).ok()?;
        let more = match ev {
            None => false,
            Some(Event::Header(h)) => {
                self.on_tx_header(&h, env);
                true
            }
            Some(Event::Data { bytes, .. }) => {
                if self.tx_crc_on {
                    self.tx_crc_value = crc32c_append(self.tx_crc_value, bytes);
                    env.stats.tx_crc_offloaded_bytes += bytes.len() as u64;
                }
                true
            }
            Some(Event::Marker { .. } | Event::End { .. }) => true,
        };
        let digest = digest_left.filter(|_| used > 0).map(|left| DigestSpan {
            at: 0,
            from: 4 - left as usize,
            len: used.min(left as usize),
            digest: self.tx_crc_value.to_le_bytes(),
        });
        Some(TxStep { used, more, digest })
    }
}

impl NvmeTcp {
    fn on_tx_header(&mut self, header: &Header, env: &mut Env) {
        self.tx_crc_on = self.tx_crc && header.ddgst;
        self.tx_crc_value = 0;
        if let (Role::Host, Kind::CapsuleCmd { cid }) = (self.role, header.kind)
            && env.active.contains(Caps::ONESHOT)
            && let Some(Some(m)) = self.table.get_mut(usize::from(cid))
            && m.oneshot
            && !m.live
        {
            m.live = true;
            env.stats.oneshot_armed += 1;
        }
    }
}
