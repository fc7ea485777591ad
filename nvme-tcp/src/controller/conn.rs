//! One TCP connection of the controller: ICReq/ICResp, then the commands of
//! one queue (admin or I/O), their data transfers and their completions.
//!
//! Sans-IO: the driver feeds received bytes to [`Connection::handle_input`],
//! writes what [`Connection::poll_transmit`] produces, calls
//! [`Connection::handle_timeout`] at [`Connection::poll_timeout`], and
//! closes the transport once [`Connection::is_closed`].

use super::{AssocRef, Target, lock};
use crate::nvme::log::ErrorLogEntry;
use crate::nvme::{Cqe, Sqe, Status, admin};
use crate::pool::BufPool;
use crate::time::Instant;
use crate::wire::{
    CapsuleResp, DataPdu, Digests, Direction, Event, Fes, Framer, Framing, Header, IcReq, IcResp,
    PduError, PduRepr, PduType, R2t, TermReq, TxQueue, crc32c_append,
};
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;
use tracing::{debug, trace, warn};
use ulp_ddp::IoBuf;

/// Stop taking new PDUs while this much is waiting to be sent: a host that
/// does not read its completions is slowed by TCP, not by our memory.
const TX_HIGH_WATER: usize = 4 << 20;
/// In-capsule data the admin queue and Fabrics commands accept.
const ADMIN_INLINE: usize = 8192;

/// Why a connection ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CloseReason {
    /// The host sent a TermReq.
    HostTerminated { fes: Fes, fei: u32 },
    /// The host broke the protocol; a C2HTermReq went back unless the bad
    /// PDU was itself a TermReq.
    ProtocolError(PduError),
    /// The keep alive timer of the controller expired.
    KeepAliveExpired,
    /// The controller this queue belongs to went away.
    ControllerGone,
    /// The transport closed.
    TransportClosed,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    AwaitIcReq,
    Live,
    /// Sending what is queued (perhaps a TermReq), then close.
    Closing,
}

/// The queue a Connect bound this connection to.
pub(crate) struct Queue {
    pub assoc: AssocRef,
    pub qid: u16,
    pub size: u32,
    pub sq_flow_control: bool,
    pub sqhd: u16,
    pub cntlid: u16,
}

/// Where the data of the PDU being received goes.
enum Rx {
    Nothing,
    /// In-capsule data of a command; `buf` is None when it is being discarded
    /// because the command already failed.
    Capsule {
        sqe: Sqe,
        buf: Option<IoBuf>,
        len: usize,
        fail: Option<Status>,
        crc: u32,
    },
    /// H2CData for transfer `ttag`, of which R2T `r2t` is being answered.
    H2c {
        ttag: u16,
        r2t: usize,
        datao: u32,
        len: u32,
        crc: u32,
    },
}

/// An R2T sent and not yet answered in full.
struct R2tState {
    start: u32,
    end: u32,
    next: u32,
}

/// Host data a command is waiting for (R2T / H2CData), keyed by TTAG.
struct Xfer {
    sqe: Sqe,
    buf: IoBuf,
    total: u32,
    requested: u32,
    received: u32,
    r2ts: Vec<R2tState>,
    digest_error: bool,
}

/// Data that came with a command: a buffer and how many bytes of it.
pub(crate) type Data = Option<(IoBuf, usize)>;

/// What executing a command led to.
pub(crate) enum Outcome {
    Complete {
        status: Status,
        result: u64,
        data: Option<(IoBuf, usize)>,
    },
    /// The command needs this many bytes from the host first (R2T).
    NeedData(u32),
    /// Completed later (Asynchronous Event Request).
    Hold,
}

impl Outcome {
    pub fn status(status: Status) -> Self {
        Outcome::Complete { status, result: 0, data: None }
    }

    pub fn ok() -> Self {
        Self::status(Status::SUCCESS)
    }
}

/// The controller end of one NVMe/TCP connection.
pub struct Connection {
    pub(crate) target: Arc<Target>,
    pub(crate) local_addr: Option<IpAddr>,
    phase: Phase,
    framer: Framer,
    tx: TxQueue,
    pub(crate) maxr2t: u32,
    pub(crate) queue: Option<Queue>,
    rx: Rx,
    /// Commands waiting for host data (by TTAG) or held (AERs), by CID.
    waiting: HashMap<u16, Option<u16>>,
    xfers: slab::Slab<Xfer>,
    pub(crate) pool: BufPool,
    close: Option<CloseReason>,
    span: tracing::Span,
}

impl Connection {
    /// A connection just accepted. `local_addr` is our address on it, which
    /// the discovery log reports when the port listens on any address.
    pub fn new(target: Arc<Target>, local_addr: Option<IpAddr>) -> Self {
        let span = tracing::debug_span!("ctrl_conn", qid = tracing::field::Empty);
        Self {
            target,
            local_addr,
            phase: Phase::AwaitIcReq,
            framer: Framer::new(Direction::HostToController),
            tx: TxQueue::new(),
            maxr2t: 0,
            queue: None,
            rx: Rx::Nothing,
            waiting: HashMap::new(),
            xfers: slab::Slab::new(),
            pool: BufPool::default(),
            close: None,
            span,
        }
    }

    /// The queue this connection serves, once connected.
    pub fn qid(&self) -> Option<u16> {
        self.queue.as_ref().map(|q| q.qid)
    }

    pub fn close_reason(&self) -> Option<&CloseReason> {
        self.close.as_ref()
    }

    /// Nothing more will be sent: the driver closes the transport.
    pub fn is_closed(&self) -> bool {
        self.phase == Phase::Closing && self.tx.is_empty()
    }

    /// Feed bytes received from the host. Returns how many were taken;
    /// fewer than offered when too much output is waiting: offer the rest
    /// again after transmitting.
    pub fn handle_input(&mut self, data: &[u8], now: Instant) -> usize {
        let span = self.span.clone();
        let _enter = span.enter();
        let mut at = 0;
        while self.phase != Phase::Closing {
            if self.framer.at_pdu_start() && self.tx.queued() > TX_HIGH_WATER {
                return at;
            }
            let step = self.framer.next(&data[at..]);
            let result = step.and_then(|(n, ev)| {
                at += n;
                match ev {
                    None => Ok(false),
                    Some(ev) => self.on_event(ev, now).map(|()| true),
                }
            });
            match result {
                Ok(true) => {}
                Ok(false) => break,
                Err(e) => self.fatal(e),
            }
        }
        if self.phase == Phase::Closing { data.len() } else { at }
    }

    /// Write pending output into `out`; returns the number of bytes.
    pub fn poll_transmit(&mut self, out: &mut [u8]) -> usize {
        self.tx.poll(out)
    }

    /// Bytes waiting to be sent.
    pub fn pending_output(&self) -> usize {
        self.tx.queued()
    }

    /// When [`handle_timeout`](Self::handle_timeout) should next run.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let q = self.queue.as_ref()?;
        lock(&q.assoc).ka_deadline
    }

    /// Enforce the keep alive timeout of this queue's controller.
    pub fn handle_timeout(&mut self, now: Instant) {
        let Some(q) = &self.queue else { return };
        let (expired, cntlid) = {
            let mut a = lock(&q.assoc);
            (a.expired(now), a.cntlid)
        };
        if expired && self.phase != Phase::Closing {
            let reason = if q.qid == 0 {
                CloseReason::KeepAliveExpired
            } else {
                CloseReason::ControllerGone
            };
            warn!(parent: &self.span, cntlid, "keep alive timer expired; tearing down the controller");
            self.target.remove_association(cntlid);
            self.shut(reason);
        }
    }

    /// The transport closed under us: release the controller if this was
    /// its admin queue.
    pub fn transport_closed(&mut self) {
        if let Some(q) = &self.queue {
            let mut a = lock(&q.assoc);
            a.connected.remove(&q.qid);
            if q.qid == 0 {
                a.dead = true;
                self.target.remove_association(a.cntlid);
            }
        }
        if self.close.is_none() {
            self.close = Some(CloseReason::TransportClosed);
        }
        self.phase = Phase::Closing;
        self.tx.clear();
    }

    fn shut(&mut self, reason: CloseReason) {
        if self.close.is_none() {
            self.close = Some(reason);
        }
        self.phase = Phase::Closing;
    }

    /// A fatal transport error: answer with a C2HTermReq (unless the
    /// offending PDU was a TermReq), then close.
    fn fatal(&mut self, e: PduError) {
        debug!(parent: &self.span, error = %e, fes = ?e.fes(), fei = e.fei(), "fatal PDU error");
        if e.wants_term_req() {
            let hlen = self.framer.header_bytes().get(2).map_or(8, |&h| usize::from(h));
            let quoted = &self.framer.header_bytes()[..hlen.min(self.framer.header_bytes().len())];
            let t = TermReq { fes: e.fes(), fei: e.fei() };
            self.tx.push_inline(Header::C2hTermReq(t), quoted);
        }
        self.shut(CloseReason::ProtocolError(e));
    }

    fn on_event(&mut self, ev: Event<'_>, now: Instant) -> Result<(), PduError> {
        match ev {
            Event::Header(repr) => self.on_header(repr, now),
            Event::Data { offset, bytes } => {
                self.on_data(offset, bytes);
                Ok(())
            }
            Event::End { data_digest } => self.on_end(data_digest, now),
        }
    }

    fn on_header(&mut self, repr: PduRepr, now: Instant) -> Result<(), PduError> {
        match (self.phase, repr.header) {
            (_, Header::H2cTermReq(t)) => {
                debug!(parent: &self.span, fes = %t.fes, fei = t.fei, "host terminated the connection");
                self.tx.clear();
                self.shut(CloseReason::HostTerminated { fes: t.fes, fei: t.fei });
                Ok(())
            }
            (Phase::AwaitIcReq, Header::IcReq(ic)) => {
                self.on_icreq(ic);
                Ok(())
            }
            (Phase::Live, Header::CapsuleCmd(c)) => {
                self.on_capsule_header(c.sqe, &repr, now);
                Ok(())
            }
            (Phase::Live, Header::H2cData(d)) => self.on_h2c_header(d, &repr),
            (_, h) => Err(PduError::Sequence(h.pdu_type())),
        }
    }

    fn on_icreq(&mut self, ic: IcReq) {
        let cfg = self.target.config();
        // Mirror the digests the host asked for, ask for no alignment
        // (Linux hosts refuse CPDA != 0), and honour the host's HPDA.
        let digests = ic.digests;
        let resp = IcResp { pfv: 0, cpda: 0, digests, maxh2cdata: cfg.maxh2cdata };
        self.tx.push(Header::IcResp(resp), None);
        self.tx.set_framing(Framing { digests, pda: ic.hpda });
        self.framer.set_framing(Framing { digests, pda: 0 });
        self.maxr2t = ic.maxr2t;
        self.phase = Phase::Live;
        trace!(parent: &self.span, ?digests, hpda = ic.hpda, maxr2t = ic.maxr2t, "ICReq accepted");
    }

    fn on_capsule_header(&mut self, sqe: Sqe, repr: &PduRepr, now: Instant) {
        if let Some(q) = &self.queue {
            lock(&q.assoc).traffic(now);
        }
        let len = repr.data_len as usize;
        let admin_limit =
            self.queue.as_ref().is_none_or(|q| q.qid == 0) || sqe.opcode == admin::FABRICS;
        let limit =
            if admin_limit { ADMIN_INLINE } else { self.target.config().inline_data_size as usize };
        let (buf, fail) = match len {
            0 => (None, None),
            n if n > limit => (None, Some(Status::DATA_SGL_LENGTH_INVALID)),
            n => (Some(self.pool.get(n)), None),
        };
        self.rx = Rx::Capsule { sqe, buf, len, fail, crc: 0 };
    }

    fn on_h2c_header(&mut self, d: DataPdu, repr: &PduRepr) -> Result<(), PduError> {
        let ty = PduType::H2cData;
        let xfer = self
            .xfers
            .get(usize::from(d.ttag))
            .ok_or(PduError::BadField { pdu_type: ty, offset: 10 })?;
        if d.cccid != xfer.sqe.cid {
            return Err(PduError::BadField { pdu_type: ty, offset: 8 });
        }
        if repr.data_len > self.target.config().maxh2cdata {
            return Err(PduError::DataLimitExceeded(ty));
        }
        let (datao, len) = (d.datao, repr.data_len);
        let r2t = xfer.r2ts.iter().position(|r| r.start <= datao && datao < r.end);
        let Some(i) = r2t else { return Err(PduError::DataOutOfRange(ty)) };
        let r = &xfer.r2ts[i];
        if datao != r.next {
            return Err(PduError::Sequence(ty));
        }
        let end = u64::from(datao) + u64::from(len);
        if end > u64::from(r.end) {
            return Err(PduError::DataOutOfRange(ty));
        }
        if d.last != (end == u64::from(r.end)) {
            return Err(PduError::Sequence(ty));
        }
        self.rx = Rx::H2c { ttag: d.ttag, r2t: i, datao, len, crc: 0 };
        Ok(())
    }

    fn on_data(&mut self, offset: u32, bytes: &[u8]) {
        let ddgst = self.framer.current().is_some_and(|r| r.ddgst);
        match &mut self.rx {
            Rx::Capsule { buf: Some(buf), crc, .. } => {
                let at = offset as usize;
                buf.lock()[at..at + bytes.len()].copy_from_slice(bytes);
                if ddgst {
                    *crc = crc32c_append(*crc, bytes);
                }
            }
            Rx::H2c { ttag, datao, crc, .. } => {
                if let Some(x) = self.xfers.get(usize::from(*ttag)) {
                    let at = (*datao + offset) as usize;
                    x.buf.lock()[at..at + bytes.len()].copy_from_slice(bytes);
                }
                if ddgst {
                    *crc = crc32c_append(*crc, bytes);
                }
            }
            Rx::Capsule { buf: None, .. } | Rx::Nothing => {}
        }
    }

    fn on_end(&mut self, data_digest: Option<u32>, now: Instant) -> Result<(), PduError> {
        match std::mem::replace(&mut self.rx, Rx::Nothing) {
            Rx::Nothing => Ok(()),
            Rx::Capsule { sqe, buf, len, fail, crc } => {
                if let Some(q) = &mut self.queue {
                    q.sqhd = ((u32::from(q.sqhd) + 1) % q.size) as u16;
                }
                let fail = fail.or(match data_digest {
                    Some(d) if d != crc => Some(Status::TRANSIENT_TRANSPORT_ERROR),
                    _ => None,
                });
                self.submit(sqe, buf.map(|b| (b, len)), fail, now);
                Ok(())
            }
            Rx::H2c { ttag, r2t, datao, len, crc } => {
                let Some(x) = self.xfers.get_mut(usize::from(ttag)) else { return Ok(()) };
                if data_digest.is_some_and(|d| d != crc) {
                    x.digest_error = true;
                }
                x.received += len;
                x.r2ts[r2t].next = datao + len;
                if x.r2ts[r2t].next == x.r2ts[r2t].end {
                    x.r2ts.remove(r2t);
                }
                if x.received < x.total {
                    self.send_r2ts(ttag);
                    return Ok(());
                }
                let x = self.xfers.remove(usize::from(ttag));
                self.waiting.remove(&x.sqe.cid);
                let fail = x.digest_error.then_some(Status::TRANSIENT_TRANSPORT_ERROR);
                self.submit(x.sqe, Some((x.buf, x.total as usize)), fail, now);
                Ok(())
            }
        }
    }

    /// A command whose capsule (and in-capsule data) arrived whole.
    fn submit(&mut self, sqe: Sqe, data: Data, fail: Option<Status>, now: Instant) {
        let cid = sqe.cid;
        if self.waiting.contains_key(&cid) {
            return self.finish(&sqe, Outcome::status(Status::COMMAND_ID_CONFLICT));
        }
        if let Some(q) = &self.queue
            && self.waiting.len() + 1 >= q.size as usize
        {
            return self.finish(&sqe, Outcome::status(Status::COMMAND_SEQUENCE_ERROR));
        }
        let outcome = match fail {
            Some(status) => Outcome::status(status),
            None => self.execute(&sqe, data, now),
        };
        self.finish(&sqe, outcome);
    }

    fn execute(&mut self, sqe: &Sqe, data: Data, now: Instant) -> Outcome {
        if sqe.opcode == admin::FABRICS {
            return self.fabrics(sqe, data, now);
        }
        let Some(q) = &self.queue else {
            return Outcome::status(Status::COMMAND_SEQUENCE_ERROR);
        };
        if sqe.flags & 0x3 != 0 || sqe.flags & 0xc0 != Sqe::FLAGS_SGL {
            // Fused operations are not supported; fabrics data pointers are SGLs.
            return Outcome::status(Status::INVALID_FIELD);
        }
        if q.qid == 0 { self.admin(sqe, data, now) } else { self.io(sqe, data) }
    }

    /// Act on an outcome: send the completion, fetch data, or hold.
    fn finish(&mut self, sqe: &Sqe, outcome: Outcome) {
        match outcome {
            Outcome::Complete { status, result, data } => self.complete(sqe, status, result, data),
            Outcome::Hold => {
                self.waiting.insert(sqe.cid, None);
            }
            Outcome::NeedData(len) => {
                let buf = self.pool.get(len as usize);
                let x = Xfer {
                    sqe: *sqe,
                    buf,
                    total: len,
                    requested: 0,
                    received: 0,
                    r2ts: Vec::new(),
                    digest_error: false,
                };
                let ttag = self.xfers.insert(x);
                match u16::try_from(ttag) {
                    Ok(ttag) if ttag != 0xffff => {
                        self.waiting.insert(sqe.cid, Some(ttag));
                        self.send_r2ts(ttag);
                    }
                    _ => {
                        self.xfers.remove(ttag);
                        self.complete(sqe, Status::COMMAND_SEQUENCE_ERROR, 0, None);
                    }
                }
            }
        }
    }

    /// Ask for more of a transfer: at most MAXR2T + 1 R2Ts outstanding, each
    /// at most the configured R2T length.
    fn send_r2ts(&mut self, ttag: u16) {
        let r2t_len = self.target.config().r2t_len;
        let max = self.maxr2t.saturating_add(1) as usize;
        let Some(x) = self.xfers.get_mut(usize::from(ttag)) else { return };
        while x.r2ts.len() < max && x.requested < x.total {
            let r2tl = (x.total - x.requested).min(r2t_len);
            let r2t = R2t { cccid: x.sqe.cid, ttag, r2to: x.requested, r2tl };
            x.r2ts.push(R2tState {
                start: x.requested,
                end: x.requested + r2tl,
                next: x.requested,
            });
            x.requested += r2tl;
            self.tx.push(Header::R2t(r2t), None);
        }
    }

    /// Send a command's data (C2HData PDUs) and its completion. With SQ flow
    /// control disabled and a plain success, the last C2HData carries
    /// SUCCESS and replaces the CapsuleResp.
    pub(crate) fn complete(
        &mut self,
        sqe: &Sqe,
        status: Status,
        result: u64,
        data: Option<(IoBuf, usize)>,
    ) {
        let cid = sqe.cid;
        self.waiting.remove(&cid);
        let (sqid, sqhd, flow) = match &self.queue {
            Some(q) => (q.qid, if q.sq_flow_control { q.sqhd } else { 0xffff }, q.sq_flow_control),
            None => (0, 0, true),
        };
        if !status.is_success() {
            trace!(parent: &self.span, cid, opcode = sqe.opcode, %status, "command failed");
            if let Some(q) = &self.queue {
                let entry = ErrorLogEntry {
                    sqid,
                    cid,
                    status: status.to_field(),
                    nsid: sqe.nsid,
                    lba: sqe.slba(),
                    ..Default::default()
                };
                lock(&q.assoc).record_error(entry);
            }
        }
        let cfg = self.target.config();
        let success_flag = cfg.c2h_success && !flow && status.is_success() && result == 0;
        if let Some((buf, len)) = data.filter(|d| d.1 > 0 && status.is_success()) {
            let chunk = cfg.c2h_data_len as usize;
            let mut at = 0;
            while at < len {
                let n = chunk.min(len - at);
                let last = at + n == len;
                let d = DataPdu {
                    cccid: cid,
                    ttag: 0,
                    datao: at as u32,
                    last,
                    success: last && success_flag,
                };
                self.tx.push(Header::C2hData(d), Some((buf.clone(), at, n)));
                at += n;
            }
            if success_flag {
                return;
            }
        }
        let cqe = Cqe {
            dw0: result as u32,
            dw1: (result >> 32) as u32,
            sqhd,
            sqid,
            cid,
            status: status.to_field(),
        };
        self.tx.push(Header::CapsuleResp(CapsuleResp { cqe }), None);
    }

    /// AERs held on this queue.
    pub(crate) fn held_aers(&self) -> usize {
        self.waiting.values().filter(|t| t.is_none()).count()
    }

    /// Bind this connection to a queue (a successful Connect).
    pub(crate) fn bind(&mut self, queue: Queue) {
        self.span.record("qid", queue.qid);
        self.queue = Some(queue);
    }

    /// Digests in force on this connection.
    pub fn digests(&self) -> Digests {
        self.framer.framing().digests
    }
}
