//! One controller queue pair: the MPA Request with the host's queue sizes,
//! then capsules from Sends. What the commands mean is the core's
//! ([`CtrlQueue`]); this binding fetches host data with RDMA Reads into
//! buffers it registers, writes controller data with RDMA Writes into the
//! host's keyed buffers, and answers with a Send, or a Send with
//! Invalidate when the host's SGL asked for it (type 0x4F).

use crate::cm::{self, CmAccept, CmRejectStatus, CmRequest};
use crate::{RdmaError, duration, instant, work};
use iwarp::{
    Access, Device, Event, Qp, QpConfig, RecvWr, SendOp, SendWr, Stag, Wc, WcOpcode, WcStatus,
};
use nvme_of::controller::{Action, CloseReason, ControllerQueue, CtrlQueue, Target, Transport};
use nvme_of::nvme::{Cqe, SglType, Sqe, Status};
use nvme_of::{Binding, Instant, TxStats, UlpStats};
use std::net::IpAddr;
use std::sync::Arc;
use ulp_ddp::{DdpDevice, FlowId, IoBuf, SgEntry, TxSink, sgl};

/// Most entries an admin queue may have (Linux's NVME_AQ_DEPTH).
const ADMIN_QUEUE_SIZE: u32 = 32;
/// Work request ids: receives are numbered from 0; reads carry this bit.
const WR_FETCH: u64 = 1 << 40;

/// Why an NVMe/RDMA controller connection closed, beyond what every
/// transport shares ([`CloseReason::Transport`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConnError {
    /// The host's queue request was refused with this status.
    #[error("refused the host's queue: {0}")]
    Rejected(CmRejectStatus),
    /// The queue pair left service (a Terminate either way, a failed
    /// setup, the host closing).
    #[error("{0}")]
    Down(RdmaError),
    /// A capsule shorter than an SQE.
    #[error("host sent a capsule shorter than an SQE")]
    BadCapsule,
}

/// The NVMe/RDMA binding for a controller: its memory, and how its queue
/// pairs answer (the CRC follows what each host asks).
#[derive(Debug, Clone)]
pub struct Rdma {
    pub dev: Device,
    pub qp: QpConfig,
}

impl Transport for Rdma {
    fn accept(
        &self,
        target: Arc<Target>,
        local_addr: Option<IpAddr>,
        now: Instant,
    ) -> Box<dyn ControllerQueue> {
        Box::new(Connection::new(target, local_addr, &self.dev, self.qp.clone(), now))
    }

    fn binding(&self) -> Binding {
        Binding::RDMA
    }
}

/// Host data being read for a command.
struct Fetch {
    sqe: Sqe,
    buf: IoBuf,
    len: u32,
}

/// The controller end of one NVMe/RDMA queue pair.
pub struct Connection {
    core: CtrlQueue,
    qp: Qp,
    /// Receive buffers, by work request id: the SQE and in-capsule data.
    recvs: Vec<(IoBuf, IoBuf)>,
    /// Reads in flight, and the memory region each read slot uses.
    fetches: Vec<Option<Fetch>>,
    fetch_stags: Vec<Stag>,
    dev: Device,
    attach: Option<(Arc<dyn DdpDevice>, FlowId)>,
    close: Option<CloseReason>,
}

impl Connection {
    /// A TCP connection just accepted: wait for the MPA Request. `qp`
    /// says how to answer it (CRC, markers, one-shot opcodes); `dev` is
    /// the controller's memory.
    pub fn new(
        target: Arc<Target>,
        local_addr: Option<IpAddr>,
        dev: &Device,
        qp: QpConfig,
        now: Instant,
    ) -> Self {
        let mut core = CtrlQueue::new(target, local_addr, Binding::RDMA);
        core.accepted(now);
        Self {
            core,
            qp: Qp::listen(dev, qp, duration(now)),
            recvs: Vec::new(),
            fetches: Vec::new(),
            fetch_stags: Vec::new(),
            dev: dev.clone(),
            attach: None,
            close: None,
        }
    }

    fn shut(&mut self, why: CloseReason) {
        self.close.get_or_insert(why);
        self.qp.disconnect();
    }

    fn process(&mut self, now: Instant) {
        while let Some(ev) = self.qp.poll_event() {
            match ev {
                Event::ConnectRequest { private_data, .. } => self.on_request(&private_data),
                Event::Down(d) => {
                    self.close
                        .get_or_insert(CloseReason::transport(ConnError::Down(RdmaError::down(d))));
                }
                Event::Established { .. } | Event::Rejected { .. } => {}
            }
        }
        while let Some(wc) = self.qp.poll_cq() {
            match (wc.opcode, wc.status) {
                (WcOpcode::Recv, WcStatus::Success) => self.on_capsule(&wc, now),
                (WcOpcode::RdmaRead, _) if wc.wr_id & WR_FETCH != 0 => self.on_fetched(&wc, now),
                _ => {}
            }
        }
    }

    /// The host asks for a queue: check its sizes, post a receive for
    /// every entry, accept.
    fn on_request(&mut self, pd: &[u8]) {
        let req = match CmRequest::parse(pd) {
            Ok(r) => r,
            Err(sts) => return self.reject(sts),
        };
        let size = u32::from(req.hsqsize) + 1;
        let max = if req.qid == 0 {
            ADMIN_QUEUE_SIZE
        } else {
            u32::from(self.core.target().config().queue_size.min(Binding::RDMA.max_queue_size))
        };
        if size > max || req.hsqsize == 0 {
            return self.reject(CmRejectStatus::InvalidHsqsize);
        }
        // Capsules on the admin queue are bare SQEs, as Linux posts them.
        let inline = match req.qid {
            0 => Binding::RDMA.admin_inline,
            _ => self.core.target().config().inline_data_size as usize,
        };
        self.recvs = (0..size).map(|_| (IoBuf::new(Sqe::LEN), IoBuf::new(inline))).collect();
        for slot in 0..self.recvs.len() {
            self.post_recv(slot);
        }
        if req.qid > 0
            && let Some((dev, flow)) = self.attach.take()
        {
            self.qp.offload(dev, flow);
        }
        let accept = CmAccept { recfmt: cm::RECFMT, crqsize: size as u16 };
        if let Err(e) = self.qp.accept(&accept.emit()) {
            self.shut(CloseReason::transport(ConnError::Down(RdmaError::Verbs(e))));
        }
        tracing::debug!(qid = req.qid, size, "NVMe/RDMA queue accepted");
    }

    fn reject(&mut self, sts: CmRejectStatus) {
        tracing::debug!(%sts, "NVMe/RDMA queue rejected");
        self.close.get_or_insert(CloseReason::transport(ConnError::Rejected(sts)));
        if self.qp.reject(&cm::emit_reject(sts)).is_err() {
            self.qp.abort();
        }
    }

    fn post_recv(&mut self, slot: usize) {
        let (head, data) = &self.recvs[slot];
        let mut sgl = sgl![SgEntry { buf: head.clone(), offset: 0, len: Sqe::LEN }];
        if !data.is_empty() {
            sgl.push(SgEntry { buf: data.clone(), offset: 0, len: data.len() });
        }
        if let Err(e) = self.qp.post_recv(RecvWr { wr_id: slot as u64, sgl }) {
            self.shut(CloseReason::transport(ConnError::Down(RdmaError::Verbs(e))));
        }
    }

    fn post(&mut self, wr_id: u64, signaled: bool, op: SendOp) {
        if let Err(e) = self.qp.post_send(SendWr { wr_id, signaled, op }) {
            self.shut(CloseReason::transport(ConnError::Down(RdmaError::Verbs(e))));
        }
    }

    /// A capsule landed in receive `wc.wr_id`.
    fn on_capsule(&mut self, wc: &Wc, now: Instant) {
        let slot = wc.wr_id as usize;
        let Some((head, data)) = self.recvs.get(slot).cloned() else { return };
        let len = wc.byte_len as usize;
        if len < Sqe::LEN {
            return self.shut(CloseReason::transport(ConnError::BadCapsule));
        }
        let mut raw = [0u8; Sqe::LEN];
        raw.copy_from_slice(&head.lock()[..Sqe::LEN]);
        let sqe = Sqe::parse(&raw);
        let data = (len > Sqe::LEN).then_some((data, len - Sqe::LEN));
        self.core.traffic(now);
        let action = self.core.submit(&sqe, data, None, now);
        self.act(&sqe, action, now);
        // A command still holding the in-capsule data (the storage has
        // not answered its write) keeps that buffer; the slot gets a new one.
        let data = &mut self.recvs[slot].1;
        if data.is_shared() {
            *data = IoBuf::new(data.len());
        }
        self.post_recv(slot);
    }

    fn act(&mut self, sqe: &Sqe, action: Action, now: Instant) {
        match action {
            Action::Respond { cqe, data } => self.respond(sqe, cqe, data),
            Action::Fetch(len) => self.fetch(sqe, len, now),
            Action::Hold => {}
        }
    }

    /// Write the command's data into the host's buffer, then the response.
    fn respond(&mut self, sqe: &Sqe, cqe: Cqe, data: Option<SgEntry>) {
        let keyed = sqe.sgl.kind() == SglType::Keyed;
        if let Some(data) = data.filter(|_| keyed) {
            let op = SendOp::Write { sgl: sgl![data], stag: Stag(sqe.sgl.key()), to: sqe.sgl.addr };
            self.post(0, false, op);
        }
        let mut raw = [0u8; Cqe::LEN];
        cqe.emit(&mut raw);
        let sgl = sgl![SgEntry { buf: IoBuf::from_vec(raw.to_vec()), offset: 0, len: Cqe::LEN }];
        let invalidate = (keyed && sqe.sgl.invalidate()).then(|| Stag(sqe.sgl.key()));
        self.post(0, false, SendOp::Send { sgl, solicited: false, invalidate });
    }

    /// Read `len` bytes of host data from the command's keyed buffer into
    /// one of ours, registered for the read.
    fn fetch(&mut self, sqe: &Sqe, len: u32, now: Instant) {
        let slot = match self.fetches.iter().position(Option::is_none) {
            Some(i) => i,
            None => {
                self.fetches.push(None);
                self.fetch_stags.push(self.dev.alloc_mr(self.qp.pd()));
                self.fetches.len() - 1
            }
        };
        let sink = self.fetch_stags[slot].next_key();
        self.fetch_stags[slot] = sink;
        let buf = self.core.buffer(len as usize);
        let region = sgl![SgEntry { buf: buf.clone(), offset: 0, len: len as usize }];
        let access = Access::LOCAL_WRITE | Access::REMOTE_WRITE;
        self.post(0, false, SendOp::FastReg { stag: sink, sgl: region, iova: 0, access });
        let read =
            SendOp::Read { sink, sink_to: 0, len, stag: Stag(sqe.sgl.key()), to: sqe.sgl.addr };
        if let Err(e) =
            self.qp.post_send(SendWr { wr_id: WR_FETCH | slot as u64, signaled: true, op: read })
        {
            // Reads not negotiated (ORD 0) or the queue is full: the
            // command fails, the queue goes on.
            tracing::debug!(error = %e, "RDMA Read not posted");
            self.post(0, false, SendOp::LocalInv { stag: sink });
            let action = self.core.resume(sqe, None, Some(Status::DATA_TRANSFER_ERROR), now);
            return self.act(sqe, action, now);
        }
        self.fetches[slot] = Some(Fetch { sqe: *sqe, buf, len });
    }

    fn on_fetched(&mut self, wc: &Wc, now: Instant) {
        let slot = (wc.wr_id & !WR_FETCH) as usize;
        let Some(f) = self.fetches.get_mut(slot).and_then(Option::take) else { return };
        if wc.status == WcStatus::Flushed {
            // The queue pair is down; nothing more goes out.
            return;
        }
        self.post(0, false, SendOp::LocalInv { stag: self.fetch_stags[slot] });
        let fail = (wc.status != WcStatus::Success).then_some(Status::DATA_TRANSFER_ERROR);
        let action = self.core.resume(&f.sqe, Some((f.buf, f.len as usize)), fail, now);
        self.act(&f.sqe, action, now);
    }
}

impl ControllerQueue for Connection {
    fn wake_with(&mut self, waker: std::task::Waker) {
        self.core.wake_with(waker);
    }

    /// A device may offload this connection (`flow`, from our side) if
    /// the host asks for an I/O queue. Admin queues are never offloaded.
    fn attach_ddp(&mut self, dev: Arc<dyn DdpDevice>, flow: FlowId) {
        self.attach = Some((dev, flow));
    }

    fn is_offloaded(&self) -> bool {
        self.qp.is_offloaded()
    }

    fn handle_input(&mut self, data: &[u8], now: Instant) -> usize {
        self.qp.handle_input(data);
        self.process(now);
        data.len()
    }

    fn poll_send(&mut self, out: &mut dyn TxSink) -> usize {
        self.qp.poll_send(out)
    }

    fn pending_output(&self) -> usize {
        usize::from(self.qp.has_output())
    }

    fn poll_timeout(&self) -> Option<Instant> {
        let qp = self.qp.poll_timeout().map(instant);
        let core = if self.close.is_none() { self.core.poll_timeout() } else { None };
        nvme_of::earliest(qp, core)
    }

    fn handle_timeout(&mut self, now: Instant) {
        self.qp.handle_timeout(duration(now));
        if self.close.is_none()
            && let Some(why) = self.core.handle_timeout(now)
        {
            if matches!(why, CloseReason::ControllerGone) {
                for (sqe, action) in self.core.abort_outstanding() {
                    self.act(&sqe, action, now);
                }
            }
            self.shut(why);
        }
        while self.close.is_none() {
            let Some((sqe, action)) = self.core.storage_answer() else { break };
            self.act(&sqe, action, now);
        }
        self.process(now);
    }

    /// Nothing more will be sent: the driver closes the transport.
    fn is_closed(&self) -> bool {
        self.qp.close_action().is_some() && !self.qp.has_output()
    }

    /// The transport closed under us: release the controller if this was
    /// its admin queue.
    fn transport_closed(&mut self) {
        self.core.transport_closed();
        self.close.get_or_insert(CloseReason::TransportClosed);
        self.qp.transport_closed();
    }

    fn qid(&self) -> Option<u16> {
        self.core.qid()
    }

    /// What this connection did on received and sent data.
    fn stats(&self) -> (UlpStats, TxStats) {
        work(&self.qp.stats())
    }

    fn close_reason(&self) -> Option<&CloseReason> {
        self.close.as_ref()
    }
}
