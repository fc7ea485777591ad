//! One host queue: one TCP connection, its command identifiers, and the
//! PDUs that carry its commands, data and completions.
//!
//! The queue knows the transport and, when a device offloads its socket,
//! the ULP DDP side of it: reads are mapped at submission, received data
//! the device placed is not copied again, digests it vouched for are not
//! computed again, and a CID is reused only after its mapping is gone.
//! What the commands mean is the [`Host`](super::Host)'s business.
//! Completions and fatal errors come out as [`QueueEvent`]s.

use crate::ddp::{DataRx, DdpSocket, GapMeter, UlpStats};
use crate::nvme::{Cqe, SglDescriptor, Sqe, Status};
use crate::time::Instant;
use crate::wire::{
    CapsuleCmd, DataPdu, Digests, Direction, Event, Fes, Framer, Framing, Header, IcReq, IcResp,
    PduError, PduRepr, PduType, R2t, TermReq, TxQueue, TxStats,
};
use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;
use ulp_ddp::{DdpDevice, FlowId, IoBuf, NvmeTcpConfig, Role};

/// In-capsule data the admin queue and Fabrics commands may carry.
pub(crate) const ADMIN_INLINE: usize = 8192;

/// Which way a command's data moves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Dir {
    None,
    ToController,
    FromController,
}

/// Who a command belongs to, so its completion finds its way back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Owner {
    /// A step of bring-up, shutdown or discovery.
    Admin(super::Step),
    KeepAlive,
    Aer,
    Io(u64),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    AwaitTransport,
    IcSent,
    Live,
    Closing,
}

/// Why a queue stopped.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QueueError {
    #[error("controller sent a malformed PDU: {0}")]
    Protocol(PduError),
    #[error("controller terminated the connection: {fes} (FEI {fei:#x})")]
    Terminated { fes: Fes, fei: u32 },
    #[error("ICResp refused: {0}")]
    IcResp(&'static str),
    #[error("transport closed")]
    TransportClosed,
    /// The device reported freeing a mapping this queue did not expect it
    /// to free with this response (a bogus remote invalidation).
    #[error("device freed tag {freed} with the response for CID {cid}")]
    OneShotMismatch { cid: u16, freed: u32 },
}

pub(crate) enum QueueEvent {
    Established,
    Completion { owner: Owner, status: Status, cqe: Cqe, buf: Option<IoBuf> },
    Failed(QueueError),
}

/// The mapping state of a command's buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mapped {
    No,
    Classic,
    OneShot,
}

struct Cmd {
    owner: Owner,
    buf: Option<IoBuf>,
    len: usize,
    dir: Dir,
    received: u32,
    requested: u32,
    /// First transport-level failure of this command (a data digest error).
    status: Option<Status>,
    deadline: Instant,
    mapped: Mapped,
    /// Completed, waiting for `teardown_done` before the CID is free.
    done: Option<(Status, Cqe)>,
}

enum Rx {
    Nothing,
    C2h { cid: u16, datao: u32, len: u32, success: bool, ddgst: bool, mapped: bool, data: DataRx },
}

pub(crate) struct Queue {
    pub qid: u16,
    pub phase: Phase,
    framer: Framer,
    tx: TxQueue,
    slots: Vec<Option<Cmd>>,
    free: Vec<u16>,
    digests: Digests,
    maxr2t: u32,
    maxh2cdata: u32,
    cpda: u8,
    inline_max: usize,
    rx: Rx,
    /// Stream offsets: next byte in, next byte out, first byte of the PDU
    /// being received.
    rx_offset: u64,
    tx_offset: u64,
    pdu_start: u64,
    ddp: Option<DdpSocket>,
    ddp_threshold: Option<u32>,
    gaps: GapMeter,
    pub events: VecDeque<QueueEvent>,
    pub stats: UlpStats,
}

impl Queue {
    /// A queue of `size` entries; at most `size - 1` commands are outstanding.
    pub fn new(qid: u16, size: u16, digests: Digests, maxr2t: u32) -> Self {
        let depth = size.saturating_sub(1).max(1);
        Self {
            qid,
            phase: Phase::AwaitTransport,
            framer: Framer::new(Direction::ControllerToHost),
            tx: TxQueue::new(),
            slots: (0..depth).map(|_| None).collect(),
            free: (0..depth).rev().collect(),
            digests,
            maxr2t,
            maxh2cdata: 4096,
            cpda: 0,
            inline_max: ADMIN_INLINE,
            rx: Rx::Nothing,
            rx_offset: 0,
            tx_offset: 0,
            pdu_start: 0,
            ddp: None,
            ddp_threshold: None,
            gaps: GapMeter::default(),
            events: VecDeque::new(),
            stats: UlpStats::default(),
        }
    }

    /// The transport is up: send ICReq.
    pub fn connected(&mut self) {
        let ic = IcReq { pfv: 0, hpda: 0, digests: self.digests, maxr2t: self.maxr2t };
        self.tx.push(Header::IcReq(ic), None);
        self.phase = Phase::IcSent;
    }

    pub fn set_inline_max(&mut self, n: usize) {
        self.inline_max = n;
    }

    /// Let `dev` offload this (idle, connected) queue's socket. Reads of
    /// `threshold` bytes or more (the device's own threshold if `None`) are
    /// mapped for placement.
    pub fn offload(&mut self, dev: Arc<dyn DdpDevice>, flow: FlowId, threshold: Option<u32>) {
        let config = NvmeTcpConfig {
            role: Role::Host,
            pfv: 0,
            cpda: self.cpda,
            hpda: 0,
            dgst: self.digests.bits(),
            queue_size: self.slots.len() as u32 + 1,
            rx_start: self.rx_offset,
            tx_start: self.tx_offset + self.tx.queued() as u64,
        };
        self.ddp = DdpSocket::add(dev, flow, &config);
        if let Some(d) = &self.ddp {
            self.tx.set_ddgst_offload(d.tx_offload());
        }
        self.ddp_threshold = threshold;
    }

    pub fn is_offloaded(&self) -> bool {
        self.ddp.is_some()
    }

    /// Largest transfer the offloading device can map, if it limits it.
    pub fn ddp_max_transfer(&self) -> Option<u64> {
        self.ddp.as_ref().and_then(DdpSocket::max_transfer)
    }

    pub fn outstanding(&self) -> usize {
        self.slots.len() - self.free.len()
    }

    pub fn depth(&self) -> usize {
        self.slots.len()
    }

    pub fn tx_stats(&self) -> TxStats {
        self.tx.stats()
    }

    /// Send a command. Data to the controller goes in the capsule when it
    /// fits, otherwise on R2T; data from the controller arrives in C2HData,
    /// into a buffer the device may place into directly.
    pub fn submit(
        &mut self,
        owner: Owner,
        mut sqe: Sqe,
        data: Option<(IoBuf, usize, Dir)>,
        deadline: Instant,
    ) -> Option<u16> {
        self.poll_ddp();
        let cid = self.free.pop()?;
        let (buf, len, dir) = match data {
            Some((b, n, d)) => (Some(b), n, d),
            None => (None, 0, Dir::None),
        };
        sqe.cid = cid;
        sqe.flags = (sqe.flags & 0x3f) | Sqe::FLAGS_SGL;
        let in_capsule = dir == Dir::ToController && len <= self.inline_max;
        sqe.sgl = if in_capsule {
            SglDescriptor::in_capsule(len as u32)
        } else {
            SglDescriptor::transport(if dir == Dir::None { 0 } else { len as u32 })
        };
        let capsule_data = match (&buf, in_capsule) {
            (Some(b), true) if len > 0 => Some((b.clone(), 0, len)),
            _ => None,
        };
        // A one-shot mapping travels with the capsule: set up before the
        // capsule is queued, live once the device sees it leave.
        let mapped = match (&self.ddp, &buf, dir) {
            (Some(d), Some(b), Dir::FromController) => {
                match d.setup(cid, b, len, true, self.ddp_threshold, &mut self.stats) {
                    Some(true) => Mapped::OneShot,
                    Some(false) => Mapped::Classic,
                    None => Mapped::No,
                }
            }
            _ => Mapped::No,
        };
        self.tx.push(Header::CapsuleCmd(CapsuleCmd { sqe }), capsule_data);
        let requested = if in_capsule { len as u32 } else { 0 };
        self.slots[usize::from(cid)] = Some(Cmd {
            owner,
            buf,
            len,
            dir,
            received: 0,
            requested,
            status: None,
            deadline,
            mapped,
            done: None,
        });
        Some(cid)
    }

    pub fn poll_transmit(&mut self, out: &mut [u8]) -> usize {
        let n = self.tx.poll(out);
        self.tx_offset += n as u64;
        n
    }

    pub fn pending_output(&self) -> usize {
        self.tx.queued()
    }

    /// The earliest command deadline.
    pub fn deadline(&self) -> Option<Instant> {
        self.slots
            .iter()
            .flatten()
            .filter(|c| c.owner != Owner::Aer && c.done.is_none())
            .map(|c| c.deadline)
            .min()
    }

    /// Some command has outlived its deadline.
    pub fn command_overdue(&self, now: Instant) -> bool {
        self.deadline().is_some_and(|d| now >= d)
    }

    /// Close after sending what is queued (and a TermReq, if one is owed).
    pub fn fail(&mut self, e: QueueError) {
        if self.phase == Phase::Closing {
            return;
        }
        if let QueueError::Protocol(pe) = &e
            && pe.wants_term_req()
        {
            let quoted = self.framer.header_bytes();
            let hlen = quoted.get(2).map_or(8, |&h| usize::from(h)).min(quoted.len());
            let quoted = quoted[..hlen].to_vec();
            self.tx
                .push_inline(Header::H2cTermReq(TermReq { fes: pe.fes(), fei: pe.fei() }), &quoted);
        }
        self.close();
        self.events.push_back(QueueEvent::Failed(e));
    }

    /// The queue has nothing more to send and should be closed.
    pub fn is_closed(&self) -> bool {
        self.phase == Phase::Closing && self.tx.is_empty()
    }

    pub fn transport_closed(&mut self) {
        self.tx.clear();
        if self.phase != Phase::Closing {
            self.fail(QueueError::TransportClosed);
        }
    }

    /// Close without error (after shutdown). The device forgets the socket.
    pub fn close(&mut self) {
        self.phase = Phase::Closing;
        if let Some(d) = self.ddp.take() {
            d.remove();
        }
    }

    /// Collect what the device left in the socket's mailbox: mappings it
    /// released, whose commands can now complete and free their CIDs.
    fn poll_ddp(&mut self) {
        let Some(d) = &self.ddp else { return };
        for tag in d.teardown_done(&mut self.stats) {
            if let Some(slot) = self.slots.get_mut(usize::from(tag))
                && let Some(cmd) = slot.as_mut()
                && let Some((status, cqe)) = cmd.done
            {
                cmd.mapped = Mapped::No;
                self.release(tag, status, cqe);
            }
        }
    }

    pub fn handle_input(&mut self, data: &[u8]) -> usize {
        self.poll_ddp();
        let mut at = 0;
        while self.phase != Phase::Closing {
            if self.framer.at_pdu_start() {
                self.pdu_start = self.rx_offset + at as u64;
            }
            let step = self.framer.next(&data[at..]);
            let result = step.and_then(|(n, ev)| {
                at += n;
                match ev {
                    None => Ok(false),
                    Some(ev) => self.on_event(ev, data, at).map(|()| true),
                }
            });
            match result {
                Ok(true) => {}
                Ok(false) => break,
                Err(e) => self.fail(QueueError::Protocol(e)),
            }
        }
        let taken = if self.phase == Phase::Closing { data.len() } else { at };
        self.rx_offset += taken as u64;
        taken
    }

    /// An event from the framer; `input` is the whole slice being parsed
    /// and `end` how far into it the framer has read.
    fn on_event(&mut self, ev: Event<'_>, input: &[u8], end: usize) -> Result<(), PduError> {
        match ev {
            Event::Header(repr) => self.on_header(&repr),
            Event::Data { offset, bytes } => {
                let at =
                    self.rx_offset + (bytes.as_ptr() as usize - input.as_ptr() as usize) as u64;
                self.on_data(offset, bytes, at);
                Ok(())
            }
            Event::End { data_digest } => self.on_end(data_digest, self.rx_offset + end as u64),
        }
    }

    fn cmd(&mut self, cid: u16, ty: PduType, field: u8) -> Result<&mut Cmd, PduError> {
        self.slots
            .get_mut(usize::from(cid))
            .and_then(Option::as_mut)
            .filter(|c| c.done.is_none())
            .ok_or(PduError::BadField { pdu_type: ty, offset: field })
    }

    fn on_header(&mut self, repr: &PduRepr) -> Result<(), PduError> {
        if let Some(d) = &self.ddp {
            d.confirm_resync(self.pdu_start, &mut self.stats);
        }
        match (self.phase, repr.header) {
            (_, Header::C2hTermReq(t)) => {
                self.tx.clear();
                self.fail(QueueError::Terminated { fes: t.fes, fei: t.fei });
                Ok(())
            }
            (Phase::IcSent, Header::IcResp(ic)) => {
                self.on_icresp(ic);
                Ok(())
            }
            (Phase::Live, Header::CapsuleResp(r)) => {
                let cqe = r.cqe;
                // FEI: the CID field of the CQE inside the PDU.
                let cmd = self.cmd(cqe.cid, PduType::CapsuleResp, 20)?;
                let short = cmd.dir == Dir::FromController && (cmd.received as usize) < cmd.len;
                let status = match cmd.status {
                    Some(s) => s,
                    None if short && cqe.status().is_success() => Status::DATA_TRANSFER_ERROR,
                    None => cqe.status(),
                };
                self.finish(cqe.cid, status, cqe, self.pdu_start);
                Ok(())
            }
            (Phase::Live, Header::C2hData(d)) => {
                let ty = PduType::C2hData;
                let cmd = self.cmd(d.cccid, ty, 8)?;
                if cmd.dir != Dir::FromController {
                    return Err(PduError::BadField { pdu_type: ty, offset: 8 });
                }
                if d.datao != cmd.received {
                    return Err(PduError::Sequence(ty));
                }
                let end = u64::from(d.datao) + u64::from(repr.data_len);
                if end > cmd.len as u64 {
                    return Err(PduError::DataOutOfRange(ty));
                }
                if d.last != (end == cmd.len as u64) {
                    return Err(PduError::Sequence(ty));
                }
                let mapped = cmd.mapped != Mapped::No;
                let data = DataRx::new(self.ddp.as_ref(), repr.ddgst);
                self.rx = Rx::C2h {
                    cid: d.cccid,
                    datao: d.datao,
                    len: repr.data_len,
                    success: d.success,
                    ddgst: repr.ddgst,
                    mapped,
                    data,
                };
                Ok(())
            }
            (Phase::Live, Header::R2t(r)) => self.on_r2t(r),
            (_, h) => Err(PduError::Sequence(h.pdu_type())),
        }
    }

    fn on_icresp(&mut self, ic: IcResp) {
        if ic.digests != self.digests {
            return self.fail(QueueError::IcResp("digests differ from those requested"));
        }
        self.maxh2cdata = ic.maxh2cdata;
        self.cpda = ic.cpda;
        self.framer.set_framing(Framing { digests: ic.digests, pda: 0 });
        self.tx.set_framing(Framing { digests: ic.digests, pda: ic.cpda });
        self.phase = Phase::Live;
        self.events.push_back(QueueEvent::Established);
    }

    fn on_r2t(&mut self, r: R2t) -> Result<(), PduError> {
        let ty = PduType::R2t;
        let maxh2cdata = self.maxh2cdata;
        let cmd = self.cmd(r.cccid, ty, 8)?;
        if cmd.dir != Dir::ToController {
            return Err(PduError::BadField { pdu_type: ty, offset: 8 });
        }
        if r.r2to != cmd.requested {
            return Err(PduError::Sequence(ty));
        }
        let end = u64::from(r.r2to) + u64::from(r.r2tl);
        if end > cmd.len as u64 {
            return Err(PduError::DataOutOfRange(ty));
        }
        cmd.requested = end as u32;
        let Some(buf) = cmd.buf.clone() else {
            return Err(PduError::BadField { pdu_type: ty, offset: 8 });
        };
        let mut at = r.r2to;
        while at < end as u32 {
            let n = (end as u32 - at).min(maxh2cdata);
            let last = at + n == end as u32;
            let d = DataPdu { cccid: r.cccid, ttag: r.ttag, datao: at, last, success: false };
            self.tx.push(Header::H2cData(d), Some((buf.clone(), at as usize, n as usize)));
            at += n;
        }
        Ok(())
    }

    fn on_data(&mut self, offset: u32, bytes: &[u8], at: u64) {
        let Rx::C2h { cid, datao, ddgst, mapped, data, .. } = &mut self.rx else { return };
        let Some(Some(cmd)) = self.slots.get(usize::from(*cid)) else { return };
        let dest = cmd.buf.as_ref().map(|b| (b, *datao as usize));
        data.span(self.ddp.as_ref(), *mapped, *ddgst, dest, offset, bytes, at, &mut self.stats);
    }

    fn on_end(&mut self, data_digest: Option<u32>, end: u64) -> Result<(), PduError> {
        let Rx::C2h { cid, datao, len, success, ddgst, mapped, mut data } =
            std::mem::replace(&mut self.rx, Rx::Nothing)
        else {
            if self.ddp.is_some() {
                self.gaps.pdu(None, &mut self.stats);
            }
            return Ok(());
        };
        if self.ddp.is_some() {
            self.gaps.pdu(data.offloadable(mapped), &mut self.stats);
        }
        let Some(Some(cmd)) = self.slots.get_mut(usize::from(cid)) else { return Ok(()) };
        let dest = cmd.buf.as_ref().map(|b| (b, datao as usize));
        if !data.finish(self.ddp.as_ref(), ddgst, data_digest, dest, len, end, &mut self.stats) {
            // The stream is intact; only this command's data is bad.
            cmd.status.get_or_insert(Status::TRANSIENT_TRANSPORT_ERROR);
        }
        cmd.received += len;
        if success {
            let status = cmd.status.unwrap_or(Status::SUCCESS);
            let cqe = Cqe { cid, sqid: self.qid, sqhd: 0xffff, ..Cqe::default() };
            self.finish(cid, status, cqe, self.pdu_start);
        }
        Ok(())
    }

    /// A command's response arrived (the PDU at stream offset `resp`).
    /// Unmapped commands complete at once; a one-shot mapping must have
    /// been freed by the device with exactly this response; a classic
    /// mapping is torn down and the command completes on `teardown_done`.
    fn finish(&mut self, cid: u16, status: Status, cqe: Cqe, resp: u64) {
        let Some(cmd) = self.slots.get_mut(usize::from(cid)).and_then(Option::as_mut) else {
            return;
        };
        let freed = self.ddp.as_ref().and_then(|d| d.sk.ctx.take_freed(resp));
        match (cmd.mapped, freed) {
            (Mapped::OneShot, Some(f)) if f.offset == resp && f.tag == u32::from(cid) => {
                cmd.mapped = Mapped::No;
            }
            (_, Some(f)) => return self.fail(QueueError::OneShotMismatch { cid, freed: f.tag }),
            (Mapped::No, None) => {}
            (Mapped::Classic | Mapped::OneShot, None) => {
                // Classic, or one-shot that the device did not see go by:
                // tear down, and complete once the device lets go.
                cmd.done = Some((status, cqe));
                if let Some(d) = &self.ddp {
                    d.teardown(cid, &mut self.stats);
                }
                return self.poll_ddp();
            }
        }
        self.release(cid, status, cqe);
    }

    fn release(&mut self, cid: u16, status: Status, cqe: Cqe) {
        if let Some(cmd) = self.slots.get_mut(usize::from(cid)).and_then(Option::take) {
            self.free.push(cid);
            self.events.push_back(QueueEvent::Completion {
                owner: cmd.owner,
                status,
                cqe,
                buf: cmd.buf,
            });
        }
    }

    /// Fail every outstanding command (the association is going away).
    pub fn abort_all(&mut self) -> Vec<(Owner, Option<IoBuf>)> {
        let mut out = Vec::new();
        for (cid, slot) in self.slots.iter_mut().enumerate() {
            if let Some(cmd) = slot.take() {
                out.push((cmd.owner, cmd.buf));
                self.free.push(cid as u16);
            }
        }
        out
    }

    /// Commands outstanding for the given owner kind.
    pub fn has_owner(&self, owner: Owner) -> bool {
        self.slots.iter().flatten().any(|c| c.owner == owner)
    }
}

/// Default time a command may take before the association is failed.
pub(crate) const DEFAULT_COMMAND_TIMEOUT: Duration = Duration::from_secs(30);
