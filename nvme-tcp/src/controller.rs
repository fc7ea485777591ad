//! One TCP connection of the controller: ICReq/ICResp, then the capsules
//! of one queue (admin or I/O), their data transfers (R2T/H2CData,
//! C2HData) and their completions. What the commands mean is the core's
//! ([`CtrlQueue`]); this is the NVMe/TCP binding around it.
//!
//! Sans-IO: the driver feeds received bytes to [`Connection::handle_input`],
//! writes what [`Connection::poll_transmit`] produces, calls
//! [`Connection::handle_timeout`] at [`Connection::poll_timeout`], and
//! closes the transport once [`Connection::is_closed`] (the
//! [`ControllerQueue`] the core defines).

use crate::ddp::{DataRx, DdpSocket};
use crate::tls::record::HANDSHAKE_RECORD;
use crate::wire::{
    CapsuleResp, DataPdu, Digests, Direction, Event, Fes, Framer, Framing, Header, IcReq, IcResp,
    PduError, PduRepr, PduType, R2t, TermReq, TxQueue, TxStats,
};
use nvme_of::controller::{Action, CloseReason, ControllerQueue, CtrlQueue, Target, Transport};
use nvme_of::nvme::{Cqe, Sqe, Status, admin};
use nvme_of::{Binding, Instant, UlpStats};
use std::net::IpAddr;
use std::sync::Arc;
use tracing::{debug, trace};
use ulp_ddp::{DdpDevice, FlowId, IoBuf, NvmeTcpConfig, Role, SgEntry, TxSink, ZeroCopyTx};

/// Stop taking new PDUs while this much is waiting to be sent: a host that
/// does not read its completions is slowed by TCP, not by our memory.
const TX_HIGH_WATER: usize = 4 << 20;
/// In-capsule data the admin queue and Fabrics commands accept.
const ADMIN_INLINE: usize = Binding::TCP.admin_inline;

/// Why an NVMe/TCP controller connection closed, beyond what every
/// transport shares ([`CloseReason::Transport`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConnError {
    /// The host broke the protocol; a C2HTermReq went back unless the bad
    /// PDU was itself a TermReq.
    #[error("host sent a malformed PDU: {0}")]
    Protocol(PduError),
    /// The host sent a TermReq.
    #[error("host terminated the connection: {fes} (FEI {fei:#x})")]
    Terminated { fes: Fes, fei: u32 },
    /// The host's first bytes were a TLS handshake record on a port that
    /// takes no TLS.
    #[error(
        "the host began TLS (a ClientHello) on a port without TLS: give the port TLS \
         (--tls required|optional --tls-key), or connect without --tls"
    )]
    TlsOnClearPort,
}

/// The NVMe/TCP binding for a controller.
#[derive(Debug, Clone, Copy, Default)]
pub struct Tcp;

impl Transport for Tcp {
    fn accept(
        &self,
        target: Arc<Target>,
        local_addr: Option<IpAddr>,
        now: Instant,
    ) -> Box<dyn ControllerQueue> {
        let mut c = Connection::new(target, local_addr);
        c.core.accepted(now);
        Box::new(c)
    }

    fn binding(&self) -> Binding {
        Binding::TCP
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    AwaitIcReq,
    Live,
    /// Sending what is queued (perhaps a TermReq), then close.
    Closing,
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
        ddgst: bool,
        data: DataRx,
    },
    /// H2CData for transfer `ttag`, of which R2T `r2t` is being answered.
    H2c {
        ttag: u16,
        r2t: usize,
        datao: u32,
        len: u32,
        ddgst: bool,
        data: DataRx,
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
    /// The device places this transfer's data (by TTAG).
    mapped: bool,
    /// Done; the TTAG stays taken until the device lets go of its mapping.
    retired: bool,
}

/// The controller end of one NVMe/TCP connection.
pub struct Connection {
    pub(crate) core: CtrlQueue,
    phase: Phase,
    framer: Framer,
    tx: TxQueue,
    maxr2t: u32,
    rx: Rx,
    /// Commands waiting for host data, by TTAG.
    xfers: slab::Slab<Xfer>,
    close: Option<CloseReason>,
    /// Stream offsets: first byte of the input being parsed, the byte the
    /// parser has reached in it, next byte out.
    rx_offset: u64,
    rx_at: u64,
    tx_offset: u64,
    /// A device that may offload this connection once it is an I/O queue.
    attach: Option<(Arc<dyn DdpDevice>, FlowId)>,
    ddp: Option<DdpSocket>,
    /// Data goes out by reference, gathered by the device; kept past the
    /// socket's removal until the connection is dropped (its transport
    /// done sending).
    zc: Option<ZeroCopyTx>,
    stats: UlpStats,
    span: tracing::Span,
}

impl Connection {
    /// A connection just accepted. `local_addr` is our address on it, which
    /// the discovery log reports when the port listens on any address.
    pub fn new(target: Arc<Target>, local_addr: Option<IpAddr>) -> Self {
        Self::with_binding(target, local_addr, Binding::TCP)
    }

    /// A connection whose discovery log entries say `binding`'s TREQ and
    /// TSAS (a port with TLS).
    pub fn with_binding(target: Arc<Target>, local_addr: Option<IpAddr>, binding: Binding) -> Self {
        let span = tracing::debug_span!("ctrl_conn", qid = tracing::field::Empty);
        Self {
            core: CtrlQueue::new(target, local_addr, binding),
            phase: Phase::AwaitIcReq,
            framer: Framer::new(Direction::HostToController),
            tx: TxQueue::new(),
            maxr2t: 0,
            rx: Rx::Nothing,
            xfers: slab::Slab::new(),
            close: None,
            rx_offset: 0,
            rx_at: 0,
            tx_offset: 0,
            attach: None,
            ddp: None,
            zc: None,
            stats: UlpStats::default(),
            span,
        }
    }

    /// After a successful I/O queue Connect: hand the socket to the device.
    fn offload(&mut self) {
        let (Some(qid), Some(size), None) = (self.core.qid(), self.core.size(), &self.ddp) else {
            return;
        };
        if qid == 0 {
            return;
        }
        let Some((dev, flow)) = self.attach.take() else { return };
        let tx = self.tx.framing();
        let config = NvmeTcpConfig {
            role: Role::Controller,
            pfv: 0,
            cpda: 0,
            hpda: tx.pda,
            dgst: tx.digests.bits(),
            queue_size: size,
            rx_start: self.rx_at,
            tx_start: self.tx_offset + self.tx.queued() as u64,
        };
        self.ddp = DdpSocket::add(dev, flow, &config);
        if let Some(d) = &self.ddp {
            self.tx.set_ddgst_offload(d.tx_offload());
            self.zc = d.zero_copy_tx();
        }
    }

    /// Mappings the device released: their TTAGs are free again.
    fn poll_ddp(&mut self) {
        let Some(d) = &self.ddp else { return };
        for ttag in d.teardown_done(&mut self.stats) {
            if self.xfers.get(usize::from(ttag)).is_some_and(|x| x.retired) {
                self.xfers.remove(usize::from(ttag));
            }
        }
    }

    fn tx_full(&self) -> bool {
        self.tx.queued() > TX_HIGH_WATER
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
        // A ClientHello where ICReq belongs: the host wants TLS.
        self.shut(CloseReason::transport(match e {
            PduError::BadType(HANDSHAKE_RECORD) if self.phase == Phase::AwaitIcReq => {
                ConnError::TlsOnClearPort
            }
            e => ConnError::Protocol(e),
        }));
    }

    /// An event from the framer; `input` is the slice being parsed and
    /// `end` how far into it the framer has read.
    fn on_event(
        &mut self,
        ev: Event<'_>,
        input: &[u8],
        end: usize,
        now: Instant,
    ) -> Result<(), PduError> {
        let end = self.rx_offset + end as u64;
        self.rx_at = end;
        match ev {
            Event::Header(repr) => {
                if let Some(d) = &self.ddp {
                    // The header (and its digest) ends here; the PDU began before it.
                    let hd = if repr.hdgst { 4 } else { 0 };
                    d.confirm_resync(end - (repr.hlen() + hd) as u64, &mut self.stats);
                }
                self.on_header(repr, now)
            }
            Event::Data { offset, bytes } => {
                let at =
                    self.rx_offset + (bytes.as_ptr() as usize - input.as_ptr() as usize) as u64;
                self.on_data(offset, bytes, at);
                Ok(())
            }
            Event::End { data_digest } => self.on_end(data_digest, end, now),
        }
    }

    fn on_header(&mut self, repr: PduRepr, now: Instant) -> Result<(), PduError> {
        match (self.phase, repr.header) {
            (_, Header::H2cTermReq(t)) => {
                debug!(parent: &self.span, fes = %t.fes, fei = t.fei, "host terminated the connection");
                self.tx.clear();
                self.shut(CloseReason::transport(ConnError::Terminated { fes: t.fes, fei: t.fei }));
                Ok(())
            }
            (Phase::AwaitIcReq, Header::IcReq(ic)) => {
                self.on_icreq(ic);
                Ok(())
            }
            (Phase::Live, Header::CapsuleCmd(c)) => self.on_capsule_header(c.sqe, &repr, now),
            (Phase::Live, Header::H2cData(d)) => self.on_h2c_header(d, &repr),
            (_, h) => Err(PduError::Sequence(h.pdu_type())),
        }
    }

    fn on_icreq(&mut self, ic: IcReq) {
        let cfg = self.core.target().config();
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

    fn on_capsule_header(
        &mut self,
        sqe: Sqe,
        repr: &PduRepr,
        now: Instant,
    ) -> Result<(), PduError> {
        // In-capsule data past the limit fails the command (its bytes are
        // read and dropped); past MAXH2CDATA, the largest PDU data this
        // controller takes at all, the PDU is refused at its header and
        // the connection ends, so that a peer's PLEN never holds it.
        if repr.data_len > self.core.target().config().maxh2cdata {
            return Err(PduError::DataLimitExceeded(PduType::CapsuleCmd));
        }
        self.core.traffic(now);
        let len = repr.data_len as usize;
        let (buf, fail) = match len {
            0 => (None, None),
            n if n > self.inline_limit(&sqe) => (None, Some(Status::DATA_SGL_LENGTH_INVALID)),
            n => (Some(self.core.buffer(n)), None),
        };
        let data = DataRx::new(self.ddp.as_ref(), repr.ddgst);
        self.rx = Rx::Capsule { sqe, buf, len, fail, ddgst: repr.ddgst, data };
        Ok(())
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
        if repr.data_len > self.core.target().config().maxh2cdata {
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
        let data = DataRx::new(self.ddp.as_ref(), repr.ddgst);
        self.rx = Rx::H2c { ttag: d.ttag, r2t: i, datao, len, ddgst: repr.ddgst, data };
        Ok(())
    }

    fn on_data(&mut self, offset: u32, bytes: &[u8], at: u64) {
        let ddp = self.ddp.as_ref();
        match &mut self.rx {
            Rx::Capsule { buf, ddgst, data, .. } => {
                let dest = buf.as_ref().map(|b| (b, 0));
                data.span(ddp, false, *ddgst, dest, offset, bytes, at, &mut self.stats);
            }
            Rx::H2c { ttag, datao, ddgst, data, .. } => {
                let x = self.xfers.get(usize::from(*ttag));
                let dest = x.map(|x| (&x.buf, *datao as usize));
                let mapped = x.is_some_and(|x| x.mapped);
                data.span(ddp, mapped, *ddgst, dest, offset, bytes, at, &mut self.stats);
            }
            Rx::Nothing => {}
        }
    }

    fn on_end(&mut self, data_digest: Option<u32>, end: u64, now: Instant) -> Result<(), PduError> {
        let ddp = self.ddp.as_ref();
        match std::mem::replace(&mut self.rx, Rx::Nothing) {
            Rx::Nothing => Ok(()),
            Rx::Capsule { sqe, buf, len, fail, ddgst, mut data } => {
                let dest = buf.as_ref().map(|b| (b, 0));
                let digest_ok =
                    data.finish(ddp, ddgst, data_digest, dest, len as u32, end, &mut self.stats);
                let fail = fail.or((!digest_ok).then_some(Status::TRANSIENT_TRANSPORT_ERROR));
                self.submit(sqe, buf.map(|b| (b, len)), fail, now);
                Ok(())
            }
            Rx::H2c { ttag, r2t, datao, len, ddgst, mut data } => {
                let Some(x) = self.xfers.get_mut(usize::from(ttag)) else { return Ok(()) };
                let dest = Some((&x.buf, datao as usize));
                if !data.finish(ddp, ddgst, data_digest, dest, len, end, &mut self.stats) {
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
                let (sqe, buf, total, mapped) = (x.sqe, x.buf.clone(), x.total, x.mapped);
                let fail = x.digest_error.then_some(Status::TRANSIENT_TRANSPORT_ERROR);
                if mapped {
                    // Keep the TTAG until the device has let go of it.
                    x.retired = true;
                    if let Some(d) = &self.ddp {
                        d.teardown(ttag, &mut self.stats);
                    }
                } else {
                    self.xfers.remove(usize::from(ttag));
                }
                let action = self.core.resume(&sqe, Some((buf, total as usize)), fail, now);
                self.act(&sqe, action, now);
                self.poll_ddp();
                Ok(())
            }
        }
    }

    /// In-capsule data `sqe` may carry: the admin queue's limit for Fabrics
    /// commands and anything before Connect, the I/O queues' (IOCCSZ).
    fn inline_limit(&self, sqe: &Sqe) -> usize {
        let admin = self.core.qid().is_none_or(|q| q == 0) || sqe.opcode == admin::FABRICS;
        if admin { ADMIN_INLINE } else { self.core.target().config().inline_data_size as usize }
    }

    /// A command whose capsule (and in-capsule data) arrived whole.
    fn submit(
        &mut self,
        sqe: Sqe,
        data: Option<(IoBuf, usize)>,
        fail: Option<Status>,
        now: Instant,
    ) {
        let named = self.core.qid().is_some();
        let action = self.core.submit(&sqe, data, fail, now);
        // Once, when Connect names the queue: a span's fields are appended
        // each time they are recorded.
        if !named && let Some(qid) = self.core.qid() {
            self.span.record("qid", qid);
        }
        self.act(&sqe, action, now);
        if self.ddp.is_none() && self.attach.is_some() {
            self.offload();
        }
    }

    /// Do what the core said: send the response, or ask for the data.
    fn act(&mut self, sqe: &Sqe, action: Action, now: Instant) {
        match action {
            Action::Respond { cqe, data } => self.respond(cqe, data),
            Action::Hold => {}
            Action::Fetch(len) => self.fetch(sqe, len, now),
        }
    }

    /// Ask the host for `len` bytes of a command's data under a new TTAG.
    fn fetch(&mut self, sqe: &Sqe, len: u32, now: Instant) {
        let buf = self.core.buffer(len as usize);
        let x = Xfer {
            sqe: *sqe,
            buf,
            total: len,
            requested: 0,
            received: 0,
            r2ts: Vec::new(),
            digest_error: false,
            mapped: false,
            retired: false,
        };
        let ttag = self.xfers.insert(x);
        let Some(ttag) = u16::try_from(ttag).ok().filter(|&t| t != 0xffff) else {
            self.xfers.remove(ttag);
            let fail = Some(Status::COMMAND_SEQUENCE_ERROR);
            let action = self.core.resume(sqe, None, fail, now);
            return self.act(sqe, action, now);
        };
        // Let the device place the data by TTAG.
        if let (Some(d), Some(x)) = (&self.ddp, self.xfers.get_mut(usize::from(ttag))) {
            let threshold = self.core.target().config().ddp_threshold;
            x.mapped =
                d.setup(ttag, &x.buf, len as usize, false, threshold, &mut self.stats).is_some();
        }
        self.send_r2ts(ttag);
    }

    /// Ask for more of a transfer: at most MAXR2T + 1 R2Ts outstanding, each
    /// at most the configured R2T length.
    fn send_r2ts(&mut self, ttag: u16) {
        let r2t_len = self.core.target().config().r2t_len;
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
    fn respond(&mut self, cqe: Cqe, data: Option<SgEntry>) {
        let cfg = self.core.target().config();
        let success_flag = cfg.c2h_success
            && !self.core.sq_flow_control()
            && cqe.status().is_success()
            && cqe.result64() == 0;
        if let Some(SgEntry { buf, offset, len }) = data {
            let chunk = cfg.c2h_data_len as usize;
            let mut at = 0;
            while at < len {
                let n = chunk.min(len - at);
                let last = at + n == len;
                let d = DataPdu {
                    cccid: cqe.cid,
                    ttag: 0,
                    datao: at as u32,
                    last,
                    success: last && success_flag,
                };
                self.tx.push(Header::C2hData(d), Some((buf.clone(), offset + at, n)));
                at += n;
            }
            if success_flag {
                return;
            }
        }
        self.tx.push(Header::CapsuleResp(CapsuleResp { cqe }), None);
    }

    /// Digests in force on this connection.
    pub fn digests(&self) -> Digests {
        self.framer.framing().digests
    }
}

impl ControllerQueue for Connection {
    fn wake_with(&mut self, waker: std::task::Waker) {
        self.core.wake_with(waker);
    }

    /// A device may offload this connection (`flow`, from our side) once a
    /// Connect makes it an I/O queue. Admin queues are never offloaded.
    fn attach_ddp(&mut self, dev: Arc<dyn DdpDevice>, flow: FlowId) {
        self.attach = Some((dev, flow));
    }

    fn is_offloaded(&self) -> bool {
        self.ddp.is_some()
    }

    /// Feed bytes received from the host. Returns how many were taken;
    /// fewer than offered when too much output is waiting: offer the rest
    /// again after transmitting.
    fn handle_input(&mut self, data: &[u8], now: Instant) -> usize {
        let span = self.span.clone();
        let _enter = span.enter();
        self.poll_ddp();
        let mut at = 0;
        while self.phase != Phase::Closing {
            if self.framer.at_pdu_start() && self.tx_full() {
                break;
            }
            let step = self.framer.next(&data[at..]);
            let result = step.and_then(|(n, ev)| {
                at += n;
                match ev {
                    None => Ok(false),
                    Some(ev) => self.on_event(ev, data, at, now).map(|()| true),
                }
            });
            match result {
                Ok(true) => {}
                Ok(false) => break,
                Err(e) => self.fatal(e),
            }
        }
        let taken = if self.phase == Phase::Closing { data.len() } else { at };
        self.rx_offset += taken as u64;
        taken
    }

    /// Queue pending output in `out`; returns the number of bytes.
    fn poll_send(&mut self, out: &mut dyn TxSink) -> usize {
        let n = self.tx.poll_send(out, self.zc.as_mut());
        self.tx_offset += n as u64;
        n
    }

    /// Bytes waiting to be sent.
    fn pending_output(&self) -> usize {
        self.tx.queued()
    }

    /// When [`handle_timeout`](Self::handle_timeout) should next run. Storage
    /// answers wait while the send queue is full, as input does.
    fn poll_timeout(&self) -> Option<Instant> {
        if self.phase == Phase::Closing {
            return None;
        }
        if self.core.storage_ready() && !self.tx_full() {
            return Some(Instant::ZERO);
        }
        self.core.timer()
    }

    /// Complete the commands the storage answered, and enforce the keep
    /// alive timeout of this queue's controller.
    fn handle_timeout(&mut self, now: Instant) {
        if self.phase == Phase::Closing {
            return;
        }
        while !self.tx_full() && self.phase != Phase::Closing {
            let Some((sqe, action)) = self.core.storage_answer() else { break };
            self.act(&sqe, action, now);
        }
        match self.core.handle_timeout(now) {
            Some(CloseReason::ControllerGone) => {
                for (sqe, action) in self.core.abort_outstanding() {
                    self.act(&sqe, action, now);
                }
                self.shut(CloseReason::ControllerGone)
            }
            Some(why) => self.shut(why),
            None => {}
        }
    }

    /// Nothing more will be sent: the driver closes the transport.
    fn is_closed(&self) -> bool {
        self.phase == Phase::Closing && self.tx.is_empty()
    }

    /// The transport closed under us: release the controller if this was
    /// its admin queue.
    fn transport_closed(&mut self) {
        self.core.transport_closed();
        if self.close.is_none() {
            self.close = Some(CloseReason::TransportClosed);
        }
        self.phase = Phase::Closing;
        self.tx.clear();
        if let Some(d) = self.ddp.take() {
            d.remove();
        }
    }

    /// The queue this connection serves, once connected.
    fn qid(&self) -> Option<u16> {
        self.core.qid()
    }

    /// What this connection did on its side of the offload: received data
    /// and sent data.
    fn stats(&self) -> (UlpStats, TxStats) {
        (self.stats, self.tx.stats())
    }

    fn close_reason(&self) -> Option<&CloseReason> {
        self.close.as_ref()
    }
}
