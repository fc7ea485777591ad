//! The NVMe/RDMA host queue: one iWARP queue pair. Capsules go out as
//! Sends; responses come back as Sends (with Invalidate); data moves by the
//! controller's RDMA Writes into, and RDMA Reads from, buffers this side
//! registers and names in keyed SGLs.
//!
//! Two ways to register, counted as driver-NIC control calls per I/O:
//! classic (fast register, Send, and a local invalidate once the response
//! is in: three) and one-shot (one request that registers and sends, the
//! controller's Send with Invalidate closing it: one).

use crate::{RdmaError, duration, instant, work};
use iwarp::{
    Access, Device, Event, Pd, Qp, QpConfig, QpState, RecvWr, SendOp, SendWr, Stag, WcOpcode,
    WcStatus,
};
use nvme_of::host::{
    Cmd, CmdData, Command, CommandTable, Commands, Dir, Host, HostConfig, HostQueue, Owner,
    QueueError, QueueEvent, Transport,
};
use nvme_of::nvme::{Cqe, SglDescriptor, Sqe, Status};
use nvme_of::{Binding, Instant, TxStats, UlpStats};
use std::collections::VecDeque;
use std::sync::Arc;
use ulp_ddp::{DdpDevice, FlowId, IoBuf, SgEntry, TxSink, sgl};

use crate::cm::{CmAccept, CmRequest, RECFMT, parse_reject};

/// How long a queue holds its Connect after the MPA Reply: Linux siw
/// misses bytes that arrive before it hooks the socket (the accept race);
/// measured, 50 ms clears it.
pub const REPLY_SETTLE: std::time::Duration = std::time::Duration::from_millis(50);

/// The NVMe/RDMA binding for a host: its memory (one STag table for every
/// queue), how its queue pairs connect, and how it registers buffers.
#[derive(Debug, Clone)]
pub struct Rdma {
    pub dev: Device,
    pub pd: Pd,
    /// MPA CRC, markers and the one-shot opcodes are asked for here.
    pub qp: QpConfig,
    /// Register and send in one call; the response closes the STag.
    pub oneshot: bool,
}

impl Rdma {
    /// A binding with its own memory, asking for MPA CRCs when `crc`.
    /// Each queue waits [`REPLY_SETTLE`] after the MPA Reply before its
    /// Connect, as a Linux siw target needs.
    pub fn new(crc: bool, oneshot: bool) -> Self {
        let dev = Device::new();
        let pd = dev.alloc_pd();
        let qp = QpConfig { crc, reply_settle: REPLY_SETTLE, ..QpConfig::new(pd) };
        Self { dev, pd, qp, oneshot }
    }

    /// FPDUs cut for a path MTU.
    pub fn path_mtu(mut self, mtu: usize) -> Self {
        self.qp = self.qp.path_mtu(mtu);
        self
    }
}

impl Transport for Rdma {
    fn queue(&self, qid: u16, size: u16, inline: usize) -> Box<dyn HostQueue> {
        Box::new(Queue::new(self.clone(), qid, size, inline))
    }

    fn binding(&self) -> Binding {
        Binding::RDMA
    }
}

/// A host over NVMe/RDMA.
pub fn new(cfg: HostConfig, rdma: Rdma) -> Host {
    Host::new(cfg, Arc::new(rdma))
}

/// What NVMe/RDMA keeps per command: the STag its data is under.
#[derive(Debug)]
struct RdmaCmd {
    stag: Option<Stag>,
}

/// A work request id: the CID, and what the request was.
const WR_LOCAL_INV: u64 = 1 << 32;

struct Queue {
    rdma: Rdma,
    qid: u16,
    size: u16,
    inline_max: usize,
    qp: Option<Qp>,
    established: bool,
    closing: bool,
    failed: bool,
    cmds: CommandTable<RdmaCmd>,
    /// The memory region of each CID; each registration takes a new key.
    stags: Vec<Stag>,
    /// The SQE of each CID's capsule.
    heads: Vec<IoBuf>,
    /// Receive buffers for responses, by work request id.
    responses: Vec<IoBuf>,
    attach: Option<(Arc<dyn DdpDevice>, FlowId)>,
    events: VecDeque<QueueEvent>,
    /// Commands whose data went under an STag.
    registered: u64,
}

impl Queue {
    fn new(rdma: Rdma, qid: u16, size: u16, inline_max: usize) -> Self {
        let cmds = CommandTable::new(size);
        let depth = cmds.depth();
        let stags = (0..depth).map(|_| rdma.dev.alloc_mr(rdma.pd)).collect();
        Self {
            qid,
            size,
            inline_max,
            qp: None,
            established: false,
            closing: false,
            failed: false,
            cmds,
            stags,
            heads: (0..depth).map(|_| IoBuf::new(Sqe::LEN)).collect(),
            responses: (0..usize::from(size)).map(|_| IoBuf::new(Cqe::LEN)).collect(),
            attach: None,
            events: VecDeque::new(),
            registered: 0,
            rdma,
        }
    }

    fn fail(&mut self, e: RdmaError) {
        if self.failed || self.closing {
            return;
        }
        tracing::debug!(qid = self.qid, error = %e, "NVMe/RDMA queue failed");
        self.failed = true;
        if let Some(qp) = &mut self.qp {
            qp.disconnect();
        }
        self.events.push_back(QueueEvent::Failed(QueueError::transport(e)));
    }

    fn post(&mut self, wr_id: u64, signaled: bool, op: SendOp) -> Result<(), RdmaError> {
        let qp = self.qp.as_mut().ok_or(RdmaError::NotConnected)?;
        qp.post_send(SendWr { wr_id, signaled, op }).map_err(RdmaError::Verbs)
    }

    fn post_response_recv(&mut self, slot: usize) {
        let Some(qp) = &mut self.qp else { return };
        let sgl = sgl![SgEntry { buf: self.responses[slot].clone(), offset: 0, len: Cqe::LEN }];
        if let Err(e) = qp.post_recv(RecvWr { wr_id: slot as u64, sgl }) {
            self.fail(RdmaError::Verbs(e));
        }
    }

    /// Connection events and completions the QP has for us.
    fn process(&mut self) {
        while let Some(ev) = self.qp.as_mut().and_then(Qp::poll_event) {
            match ev {
                Event::Established { private_data } => match CmAccept::parse(&private_data) {
                    Some(a) if a.recfmt == RECFMT => {
                        self.established = true;
                        self.events.push_back(QueueEvent::Established);
                    }
                    _ => self.fail(RdmaError::BadAccept),
                },
                Event::Rejected { private_data } => {
                    self.fail(RdmaError::Rejected(parse_reject(&private_data)))
                }
                Event::Down(d) => self.fail(RdmaError::down(d)),
                Event::ConnectRequest { .. } => {}
            }
        }
        while let Some(wc) = self.qp.as_mut().and_then(Qp::poll_cq) {
            match (wc.opcode, wc.status) {
                (_, WcStatus::Flushed) => {}
                (WcOpcode::Recv, WcStatus::Success) => self.on_response(&wc),
                (WcOpcode::LocalInv, WcStatus::Success) => {
                    let cid = wc.wr_id as u16;
                    if let Some((status, cqe)) = self.cmds.get(cid).and_then(|c| c.done) {
                        self.events.extend(self.cmds.complete(cid, status, cqe));
                    }
                }
                (_, WcStatus::Success) => {}
                (op, status) => self.fail(RdmaError::Completion(op, status)),
            }
        }
    }

    /// A response capsule landed in receive `wc.wr_id`.
    fn on_response(&mut self, wc: &iwarp::Wc) {
        let slot = wc.wr_id as usize;
        let Some(buf) = self.responses.get(slot) else { return };
        if wc.byte_len as usize != Cqe::LEN {
            return self.fail(RdmaError::BadResponse("a response that is not one CQE"));
        }
        let mut raw = [0u8; Cqe::LEN];
        raw.copy_from_slice(&buf.lock()[..Cqe::LEN]);
        self.post_response_recv(slot);
        let cqe = Cqe::parse(&raw);
        let cid = cqe.cid;
        let Some(cmd) = self.cmds.pending_mut(cid) else {
            return self.fail(RdmaError::BadResponse("a response for no command"));
        };
        let status = cmd.status.unwrap_or(cqe.status());
        // The STag the response closed must be the command's own.
        let stag = cmd.x.stag.take();
        match (stag, wc.invalidated) {
            (Some(s), Some(freed)) if s == freed => {}
            (_, Some(freed)) => {
                let e = QueueError::OneShotMismatch { cid, freed: freed.0 };
                self.failed = true;
                return self.events.push_back(QueueEvent::Failed(e));
            }
            (Some(s), None) => {
                // Still valid: invalidate it, and complete when that is done.
                cmd.done = Some((status, cqe));
                let op = SendOp::LocalInv { stag: s };
                if let Err(e) = self.post(WR_LOCAL_INV | u64::from(cid), true, op) {
                    self.fail(e);
                }
                return;
            }
            (None, None) => {}
        }
        self.events.extend(self.cmds.complete(cid, status, cqe));
    }
}

impl HostQueue for Queue {
    /// Send the MPA Request with the queue's sizes; the responses' receive
    /// buffers are posted first.
    fn connected(&mut self, now: Instant) {
        let req =
            CmRequest { recfmt: RECFMT, qid: self.qid, hrqsize: self.size, hsqsize: self.size - 1 };
        let mut cfg = self.rdma.qp.clone();
        // Room for a registration, a Send and a local invalidate per command.
        cfg.sq_depth = cfg.sq_depth.max(3 * usize::from(self.size));
        cfg.rq_depth = cfg.rq_depth.max(usize::from(self.size));
        match Qp::connect(&self.rdma.dev, cfg, &req.emit(), duration(now)) {
            Ok(qp) => self.qp = Some(qp),
            Err(e) => return self.fail(RdmaError::Verbs(e)),
        }
        for slot in 0..self.responses.len() {
            self.post_response_recv(slot);
        }
        if let (Some((dev, flow)), Some(qp)) = (self.attach.take(), &mut self.qp) {
            qp.offload(dev, flow);
        }
    }

    fn offload(&mut self, dev: Arc<dyn DdpDevice>, flow: FlowId, _threshold: Option<u32>) {
        match &mut self.qp {
            Some(qp) if *qp.state() == QpState::AwaitReply => qp.offload(dev, flow),
            Some(_) => tracing::debug!(qid = self.qid, "too late to offload a running QP"),
            None => self.attach = Some((dev, flow)),
        }
    }

    fn is_offloaded(&self) -> bool {
        self.qp.as_ref().is_some_and(Qp::is_offloaded)
    }

    fn ddp_max_transfer(&self) -> Option<u64> {
        None
    }

    fn is_live(&self) -> bool {
        self.established && !self.closing && !self.failed
    }

    fn submit(
        &mut self,
        owner: Owner,
        mut sqe: Sqe,
        data: CmdData,
        deadline: Instant,
    ) -> Option<u16> {
        let (buf, len, dir) = match data {
            Some((b, n, d)) if n > 0 => (Some(b), n, d),
            _ => (None, 0, Dir::None),
        };
        let x = RdmaCmd { stag: None };
        let cmd =
            Cmd { owner, sqe, buf: buf.clone(), len, dir, deadline, status: None, done: None, x };
        let cid = self.cmds.insert(cmd)?;
        let slot = usize::from(cid);
        sqe.cid = cid;
        sqe.flags = (sqe.flags & 0x3f) | Sqe::FLAGS_SGL;
        let head = SgEntry { buf: self.heads[slot].clone(), offset: 0, len: Sqe::LEN };
        let send = |sgl| SendOp::Send { sgl, solicited: false, invalidate: None };
        let posted = match buf {
            None => {
                sqe.sgl = SglDescriptor::keyed(0, 0, 0, false);
                emit(&head.buf, &sqe);
                self.post(u64::from(cid), false, send(sgl![head]))
            }
            Some(b) if dir == Dir::ToController && len <= self.inline_max => {
                sqe.sgl = SglDescriptor::in_capsule(len as u32);
                emit(&head.buf, &sqe);
                let data = SgEntry { buf: b, offset: 0, len };
                self.post(u64::from(cid), false, send(sgl![head, data]))
            }
            Some(b) => {
                let stag = self.stags[slot].next_key();
                self.stags[slot] = stag;
                self.registered += 1;
                let access = match dir {
                    Dir::FromController => Access::LOCAL_WRITE | Access::REMOTE_WRITE,
                    _ => Access::REMOTE_READ,
                };
                // Linux names the buffer by its address; any tagged offset does.
                let iova = (u64::from(self.qid) << 48) | (u64::from(cid) << 32);
                let oneshot = self.rdma.oneshot;
                sqe.sgl = SglDescriptor::keyed(iova, len as u32, stag.0, oneshot);
                emit(&head.buf, &sqe);
                if let Some(c) = self.cmds.get_mut(cid) {
                    c.x.stag = Some(stag);
                }
                let region = sgl![SgEntry { buf: b, offset: 0, len }];
                if oneshot {
                    let op = SendOp::Advertise {
                        stag,
                        region,
                        iova,
                        access,
                        sgl: sgl![head],
                        solicited: false,
                    };
                    self.post(u64::from(cid), false, op)
                } else {
                    let reg = SendOp::FastReg { stag, sgl: region, iova, access };
                    self.post(u64::from(cid), false, reg)
                        .and_then(|()| self.post(u64::from(cid), false, send(sgl![head])))
                }
            }
        };
        if let Err(e) = posted {
            self.fail(e);
        }
        Some(cid)
    }

    fn handle_input(&mut self, data: &[u8], _now: Instant) -> usize {
        match &mut self.qp {
            Some(qp) => qp.handle_input(data),
            None => return data.len(),
        }
        self.process();
        data.len()
    }

    fn poll_send(&mut self, out: &mut dyn TxSink) -> usize {
        let n = self.qp.as_mut().map_or(0, |qp| qp.poll_send(out));
        self.process();
        n
    }

    fn pending_output(&self) -> usize {
        usize::from(self.qp.as_ref().is_some_and(Qp::has_output))
    }

    fn poll_timeout(&self) -> Option<Instant> {
        self.qp.as_ref()?.poll_timeout().map(instant)
    }

    fn handle_timeout(&mut self, now: Instant) {
        if let Some(qp) = &mut self.qp {
            qp.handle_timeout(duration(now));
        }
        self.process();
    }

    fn poll_event(&mut self) -> Option<QueueEvent> {
        self.events.pop_front()
    }

    fn is_closed(&self) -> bool {
        match &self.qp {
            Some(qp) => qp.close_action().is_some() && !qp.has_output(),
            None => self.closing || self.failed,
        }
    }

    fn transport_closed(&mut self) {
        if let Some(qp) = &mut self.qp {
            qp.transport_closed();
        }
        if !self.closing && !self.failed {
            self.failed = true;
            self.events.push_back(QueueEvent::Failed(QueueError::TransportClosed));
        }
        self.process();
    }

    fn close(&mut self) {
        self.closing = true;
        if let Some(qp) = &mut self.qp {
            qp.disconnect();
        }
    }

    fn stats(&self) -> (UlpStats, TxStats) {
        let (mut rx, tx) = self.qp.as_ref().map(|qp| work(&qp.stats())).unwrap_or_default();
        rx.ddp_ios = self.registered;
        (rx, tx)
    }

    fn commands(&self) -> &dyn Commands {
        &self.cmds
    }

    fn commands_mut(&mut self) -> &mut dyn Commands {
        &mut self.cmds
    }

    fn abort_all(&mut self) -> Vec<(Command, Option<(Status, Cqe)>)> {
        self.cmds.take_all()
    }
}

fn emit(head: &IoBuf, sqe: &Sqe) {
    let mut raw = [0u8; Sqe::LEN];
    sqe.emit(&mut raw);
    head.lock()[..Sqe::LEN].copy_from_slice(&raw);
}
