//! The NVMe/TCP host queue: one TCP connection, the PDUs that carry its
//! commands, data and completions.
//!
//! The queue knows the transport and, when a device offloads its socket,
//! the ULP DDP side of it: reads are mapped at submission, received data
//! the device placed is not copied again, digests it vouched for are not
//! computed again, and a CID is reused only after its mapping is gone.
//! What the commands mean is the [`Host`]'s business; completions and
//! fatal errors go back to it as [`QueueEvent`]s.

use crate::ddp::{DataRx, DdpSocket, GapMeter};
use crate::wire::{
    CapsuleCmd, DataPdu, Digests, Direction, Event, Fes, Framer, Framing, Header, IcReq, IcResp,
    PduError, PduRepr, PduType, R2t, TermReq, TxQueue, TxStats,
};
use nvme_of::host::{
    Cmd, CmdData, Command, CommandTable, Commands, Dir, Host, HostConfig, HostQueue, Owner,
    QueueError, QueueEvent, Step, Transport,
};
use nvme_of::nvme::{Cqe, SglDescriptor, Sqe, Status};
use nvme_of::{Binding, Instant, UlpStats};
use std::collections::VecDeque;
use std::sync::Arc;
use ulp_ddp::{DdpDevice, FlowId, NvmeTcpConfig, Role, TxSink, ZeroCopyTx};

/// The NVMe/TCP binding for a host: queues that ask for `digests` and
/// allow the controller `maxr2t + 1` R2Ts per command.
#[derive(Debug, Clone, Copy, Default)]
pub struct Tcp {
    pub digests: Digests,
    pub maxr2t: u32,
}

impl Transport for Tcp {
    fn queue(&self, qid: u16, size: u16, inline: usize) -> Box<dyn HostQueue> {
        Box::new(Queue::new(qid, size, self.digests, self.maxr2t, inline))
    }

    fn binding(&self) -> Binding {
        Binding::TCP
    }
}

/// A host over NVMe/TCP, asking for the digests and MAXR2T in `cfg`.
pub fn new(cfg: HostConfig) -> Host {
    let tcp = Tcp { digests: cfg.digests, maxr2t: cfg.maxr2t };
    Host::new(cfg, Arc::new(tcp))
}

/// Why an NVMe/TCP queue stopped, beyond what every transport shares.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TcpError {
    #[error("controller sent a malformed PDU: {0}")]
    Protocol(PduError),
    #[error("controller terminated the connection: {fes} (FEI {fei:#x})")]
    Terminated { fes: Fes, fei: u32 },
    #[error("ICResp refused: {0}")]
    IcResp(&'static str),
    /// The connection closed with our ICReq unanswered: what a port that
    /// requires TLS does to a host in the clear.
    #[error(
        "the controller closed the connection without answering ICReq: if its port \
         requires TLS, connect with --tls and --tls-key"
    )]
    ClosedBeforeIcResp,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    AwaitTransport,
    IcSent,
    Live,
    Closing,
}

/// The mapping state of a command's buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mapped {
    No,
    Classic,
    OneShot,
}

/// What NVMe/TCP keeps per command.
#[derive(Debug)]
struct TcpCmd {
    received: u32,
    requested: u32,
    mapped: Mapped,
}

enum Rx {
    Nothing,
    C2h { cid: u16, datao: u32, len: u32, success: bool, ddgst: bool, mapped: bool, data: DataRx },
}

struct Queue {
    qid: u16,
    phase: Phase,
    framer: Framer,
    tx: TxQueue,
    cmds: CommandTable<TcpCmd>,
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
    /// Data goes out by reference, gathered by the device; kept past the
    /// socket's removal until the queue is dropped (its transport done).
    zc: Option<ZeroCopyTx>,
    ddp_threshold: Option<u32>,
    /// A device to hand the socket to once the queue's Connect completes,
    /// when the digests and alignment are settled and the queue is idle.
    attach: Option<(Arc<dyn DdpDevice>, FlowId)>,
    connect_done: bool,
    gaps: GapMeter,
    events: VecDeque<QueueEvent>,
    stats: UlpStats,
}

impl Queue {
    /// A queue of `size` entries; at most `size - 1` commands are outstanding.
    fn new(qid: u16, size: u16, digests: Digests, maxr2t: u32, inline_max: usize) -> Self {
        Self {
            qid,
            phase: Phase::AwaitTransport,
            framer: Framer::new(Direction::ControllerToHost),
            tx: TxQueue::new(),
            cmds: CommandTable::new(size),
            digests,
            maxr2t,
            maxh2cdata: 4096,
            cpda: 0,
            inline_max,
            rx: Rx::Nothing,
            rx_offset: 0,
            tx_offset: 0,
            pdu_start: 0,
            ddp: None,
            zc: None,
            ddp_threshold: None,
            attach: None,
            connect_done: false,
            gaps: GapMeter::default(),
            events: VecDeque::new(),
            stats: UlpStats::default(),
        }
    }

    /// Close after sending what is queued (and a TermReq, if one is owed).
    fn fail(&mut self, e: TcpError) {
        if self.phase == Phase::Closing {
            return;
        }
        if let TcpError::Protocol(pe) = &e
            && pe.wants_term_req()
        {
            let quoted = self.framer.header_bytes();
            let hlen = quoted.get(2).map_or(8, |&h| usize::from(h)).min(quoted.len());
            let quoted = quoted[..hlen].to_vec();
            // Nothing queued before matters now; the TermReq goes alone.
            self.tx.clear();
            self.tx
                .push_inline(Header::H2cTermReq(TermReq { fes: pe.fes(), fei: pe.fei() }), &quoted);
        }
        self.stop(QueueError::transport(e));
    }

    fn stop(&mut self, e: QueueError) {
        if self.phase == Phase::Closing {
            return;
        }
        self.close();
        self.events.push_back(QueueEvent::Failed(e));
    }

    /// Collect what the device left in the socket's mailbox: mappings it
    /// released, whose commands can now complete and free their CIDs.
    fn poll_ddp(&mut self) {
        let Some(d) = &self.ddp else { return };
        for tag in d.teardown_done(&mut self.stats) {
            if let Some(cmd) = self.cmds.get_mut(tag)
                && let Some((status, cqe)) = cmd.done
            {
                cmd.x.mapped = Mapped::No;
                self.release(tag, status, cqe);
            }
        }
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

    fn cmd(&mut self, cid: u16, ty: PduType, field: u8) -> Result<&mut Cmd<TcpCmd>, PduError> {
        self.cmds.pending_mut(cid).ok_or(PduError::BadField { pdu_type: ty, offset: field })
    }

    fn on_header(&mut self, repr: &PduRepr) -> Result<(), PduError> {
        if let Some(d) = &self.ddp {
            d.confirm_resync(self.pdu_start, &mut self.stats);
        }
        match (self.phase, repr.header) {
            (_, Header::C2hTermReq(t)) => {
                self.tx.clear();
                self.fail(TcpError::Terminated { fes: t.fes, fei: t.fei });
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
                let short = cmd.dir == Dir::FromController && (cmd.x.received as usize) < cmd.len;
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
                if d.datao != cmd.x.received {
                    return Err(PduError::Sequence(ty));
                }
                let end = u64::from(d.datao) + u64::from(repr.data_len);
                if end > cmd.len as u64 {
                    return Err(PduError::DataOutOfRange(ty));
                }
                if d.last != (end == cmd.len as u64) {
                    return Err(PduError::Sequence(ty));
                }
                let mapped = cmd.x.mapped != Mapped::No;
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
            return self.fail(TcpError::IcResp("digests differ from those requested"));
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
        if r.r2to != cmd.x.requested {
            return Err(PduError::Sequence(ty));
        }
        let end = u64::from(r.r2to) + u64::from(r.r2tl);
        if end > cmd.len as u64 {
            return Err(PduError::DataOutOfRange(ty));
        }
        cmd.x.requested = end as u32;
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
        let Some(cmd) = self.cmds.get(*cid) else { return };
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
        let Some(cmd) = self.cmds.get_mut(cid) else { return Ok(()) };
        let dest = cmd.buf.as_ref().map(|b| (b, datao as usize));
        if !data.finish(self.ddp.as_ref(), ddgst, data_digest, dest, len, end, &mut self.stats) {
            // The stream is intact; only this command's data is bad.
            cmd.status.get_or_insert(Status::TRANSIENT_TRANSPORT_ERROR);
        }
        cmd.x.received += len;
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
        let Some(cmd) = self.cmds.get_mut(cid) else { return };
        let freed = self.ddp.as_ref().and_then(|d| d.ctx.take_freed(resp));
        match (cmd.x.mapped, freed) {
            (Mapped::OneShot, Some(f)) if f.offset == resp && f.tag == u32::from(cid) => {
                cmd.x.mapped = Mapped::No;
            }
            (_, Some(f)) => return self.stop(QueueError::OneShotMismatch { cid, freed: f.tag }),
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
        let connect = Owner::Admin(Step::ConnectIo);
        if status.is_success() && self.cmds.get(cid).is_some_and(|c| c.owner == connect) {
            self.connect_done = true;
        }
        self.events.extend(self.cmds.complete(cid, status, cqe));
    }

    /// Hand the socket to the device: it is idle between PDUs.
    fn start_offload(&mut self) {
        let Some((dev, flow)) = self.attach.take() else { return };
        let config = NvmeTcpConfig {
            role: Role::Host,
            pfv: 0,
            cpda: self.cpda,
            hpda: 0,
            dgst: self.digests.bits(),
            queue_size: self.cmds.depth() as u32 + 1,
            rx_start: self.rx_offset,
            tx_start: self.tx_offset + self.tx.queued() as u64,
        };
        self.ddp = DdpSocket::add(dev, flow, &config);
        if let Some(d) = &self.ddp {
            self.tx.set_ddgst_offload(d.tx_offload());
            self.zc = d.zero_copy_tx();
        }
    }
}

impl HostQueue for Queue {
    /// The transport is up: send ICReq.
    fn connected(&mut self, _now: Instant) {
        let ic = IcReq { pfv: 0, hpda: 0, digests: self.digests, maxr2t: self.maxr2t };
        self.tx.push(Header::IcReq(ic), None);
        self.phase = Phase::IcSent;
    }

    fn offload(&mut self, dev: Arc<dyn DdpDevice>, flow: FlowId, threshold: Option<u32>) {
        self.attach = Some((dev, flow));
        self.ddp_threshold = threshold;
        if self.connect_done {
            self.start_offload();
        }
    }

    fn is_offloaded(&self) -> bool {
        self.ddp.is_some()
    }

    fn ddp_max_transfer(&self) -> Option<u64> {
        self.ddp.as_ref().and_then(DdpSocket::max_transfer)
    }

    fn is_live(&self) -> bool {
        self.phase == Phase::Live
    }

    /// Data to the controller goes in the capsule when it fits, otherwise
    /// on R2T; data from the controller arrives in C2HData, into a buffer
    /// the device may place into directly.
    fn submit(
        &mut self,
        owner: Owner,
        mut sqe: Sqe,
        data: CmdData,
        deadline: Instant,
    ) -> Option<u16> {
        self.poll_ddp();
        let x = TcpCmd { received: 0, requested: 0, mapped: Mapped::No };
        let mut cmd = Cmd::new(owner, sqe, data, deadline, x);
        let (buf, len, dir) = (cmd.buf.clone(), cmd.len, cmd.dir);
        let in_capsule = dir == Dir::ToController && len <= self.inline_max;
        if in_capsule {
            cmd.x.requested = len as u32;
        }
        let cid = self.cmds.insert(cmd)?;
        sqe.cid = cid;
        sqe.flags = (sqe.flags & 0x3f) | Sqe::FLAGS_SGL;
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
        if let (Some(d), Some(b), Dir::FromController) = (&self.ddp, &buf, dir) {
            let mapped = match d.setup(cid, b, len, true, self.ddp_threshold, &mut self.stats) {
                Some(true) => Mapped::OneShot,
                Some(false) => Mapped::Classic,
                None => Mapped::No,
            };
            if let Some(c) = self.cmds.get_mut(cid) {
                c.x.mapped = mapped;
            }
        }
        self.tx.push(Header::CapsuleCmd(CapsuleCmd { sqe }), capsule_data);
        Some(cid)
    }

    fn handle_input(&mut self, data: &[u8], _now: Instant) -> usize {
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
                Err(e) => self.fail(TcpError::Protocol(e)),
            }
        }
        let taken = if self.phase == Phase::Closing { data.len() } else { at };
        self.rx_offset += taken as u64;
        if self.connect_done && self.ddp.is_none() && self.phase == Phase::Live {
            self.start_offload();
        }
        taken
    }

    fn poll_send(&mut self, out: &mut dyn TxSink) -> usize {
        let n = self.tx.poll_send(out, self.zc.as_mut());
        self.tx_offset += n as u64;
        n
    }

    fn pending_output(&self) -> usize {
        self.tx.queued()
    }

    fn poll_event(&mut self) -> Option<QueueEvent> {
        self.events.pop_front()
    }

    fn is_closed(&self) -> bool {
        self.phase == Phase::Closing && self.tx.is_empty()
    }

    fn transport_closed(&mut self) {
        self.tx.clear();
        match self.phase {
            Phase::Closing => {}
            Phase::IcSent => self.stop(QueueError::transport(TcpError::ClosedBeforeIcResp)),
            _ => self.stop(QueueError::TransportClosed),
        }
    }

    /// The device forgets the socket.
    fn close(&mut self) {
        self.phase = Phase::Closing;
        if let Some(d) = self.ddp.take() {
            d.remove();
        }
    }

    fn stats(&self) -> (UlpStats, TxStats) {
        (self.stats, self.tx.stats())
    }

    fn commands(&self) -> &dyn Commands {
        &self.cmds
    }

    fn commands_mut(&mut self) -> &mut dyn Commands {
        &mut self.cmds
    }

    fn abort_all(&mut self) -> Vec<(Command, Option<(Status, Cqe)>)> {
        // Unsent capsules must not reach the controller after their
        // commands are handed back; a TermReq of a queue that already
        // stopped itself still goes.
        if self.phase != Phase::Closing {
            self.tx.clear();
        }
        self.cmds.take_all()
    }
}
