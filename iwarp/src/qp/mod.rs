//! A queue pair: one iWARP connection, sans-IO. Stream bytes in
//! (`handle_input`), stream bytes out (`poll_transmit`), time in, a
//! deadline out; work requests in, completions and connection events out.
//!
//! The connection manager lives here too (`connect`, `listen`, `accept`,
//! `reject`): an MPA exchange is the first bytes of the same TCP stream.
//! `setup` does MPA, `rx` the receive path and every check a peer's
//! bytes must pass, `tx` turns work requests into FPDUs.

mod offload;
mod rx;
mod setup;
mod tx;

pub use offload::QpStats;

use std::collections::VecDeque;
use std::time::Duration;

use ulp_ddp::{SgEntry, Sgl};

use crate::mr::{Access, Device, MrError, Pd, Stag};
use crate::wire::{FpduFramer, IrdOrd, TermLayer, TermLayout, Terminate, WireError};

/// The ready-to-receive message a peer-to-peer initiator sends first
/// (RFC 6581 §7.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rtr {
    /// A zero-length Send.
    Send,
    /// A zero-length RDMA Write.
    Write,
    /// A zero-length RDMA Read Request (answered with a zero-length Read
    /// Response).
    Read,
}

/// How a QP connects and what it allows.
#[derive(Debug, Clone)]
pub struct QpConfig {
    pub pd: Pd,
    /// Inbound RDMA Read Requests this side serves at once. Both default
    /// to 128, what Linux siw offers (its `max_qp_rd_atom`): a Linux
    /// nvme-rdma host asks for IRD 128 and nvmet-rdma takes it as its ORD,
    /// so a target may pull the data of a whole queue of writes at once.
    pub ird: u16,
    /// Outbound RDMA Read Requests this side has outstanding at once.
    pub ord: u16,
    /// Ask for MPA CRCs (either side asking turns them on).
    pub crc: bool,
    /// Active side: ask for peer-to-peer setup with this RTR. The passive
    /// side takes what the initiator offers.
    pub p2p: Option<Rtr>,
    /// The TCP segment payload size FPDUs are cut to (MULPDU follows);
    /// see [`QpConfig::path_mtu`].
    pub emss: usize,
    pub sq_depth: usize,
    pub rq_depth: usize,
    /// How Terminates are read and written (Linux siw swaps fields).
    pub term_layout: TermLayout,
    /// Ask for MPA markers in what the peer sends (the M bit). Linux siw
    /// rejects a Request that asks; a NIC finds its place after a loss
    /// by them.
    pub markers: bool,
    /// Offer (or accept) the one-shot opcodes 0x8 and 0xC through the MPA
    /// private data; used only when the peer does too.
    pub oneshot_opcodes: bool,
    /// How long the initiator waits for the MPA Reply (siw: 10 s).
    pub reply_timeout: Duration,
    /// How long the responder waits for the MPA Request (siw: 5 s).
    pub request_timeout: Duration,
    /// Active side: how long to hold the first FPDU after the Reply.
    /// Linux siw sends its Reply before it hooks the socket's receive
    /// upcall, and bytes that land in between wait until more arrive
    /// (the accept race); 50 ms clears it. Zero sends at once.
    pub reply_settle: Duration,
}

impl QpConfig {
    /// Cut FPDUs for a path MTU: IPv4 and TCP headers with timestamps
    /// take 52 bytes of each packet.
    pub fn path_mtu(mut self, mtu: usize) -> Self {
        self.emss = mtu.saturating_sub(52);
        self
    }

    pub fn new(pd: Pd) -> Self {
        Self {
            pd,
            ird: 128,
            ord: 128,
            crc: false,
            p2p: None,
            emss: 1448,
            sq_depth: 256,
            rq_depth: 256,
            term_layout: TermLayout::Rfc5040,
            markers: false,
            oneshot_opcodes: false,
            reply_timeout: Duration::from_secs(10),
            request_timeout: Duration::from_secs(5),
            reply_settle: Duration::ZERO,
        }
    }
}

/// A send-queue work request.
#[derive(Debug, Clone)]
pub struct SendWr {
    pub wr_id: u64,
    /// Complete into the CQ when done (errors always complete).
    pub signaled: bool,
    pub op: SendOp,
}

#[derive(Debug, Clone)]
pub enum SendOp {
    /// Send `sgl`; with `invalidate`, the peer invalidates that STag
    /// before it completes the receive.
    Send { sgl: Sgl, solicited: bool, invalidate: Option<Stag> },
    /// RDMA Write `sgl` to the peer's `stag` at `to`.
    Write { sgl: Sgl, stag: Stag, to: u64 },
    /// RDMA Read `len` bytes from the peer's `stag` at `to` into the local
    /// `sink` (which must grant local and remote write, as iWARP asks).
    Read { sink: Stag, sink_to: u64, len: u32, stag: Stag, to: u64 },
    /// Fast register: make `stag` (an allocated index, new key) valid.
    FastReg { stag: Stag, sgl: Sgl, iova: u64, access: Access },
    /// One-shot initiation: fast register `stag` over `region` and send
    /// `sgl`, which tells the peer about it, in one request. Under a NIC
    /// with one-shot offload the STag goes live there as the Send leaves,
    /// and the peer's Send with Invalidate frees it there.
    Advertise { stag: Stag, region: Sgl, iova: u64, access: Access, sgl: Sgl, solicited: bool },
    /// Local invalidate.
    LocalInv { stag: Stag },
}

/// A posted receive buffer for one Send.
#[derive(Debug, Clone)]
pub struct RecvWr {
    pub wr_id: u64,
    pub sgl: Sgl,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WcOpcode {
    Send,
    RdmaWrite,
    RdmaRead,
    FastReg,
    LocalInv,
    Recv,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WcStatus {
    Success,
    /// A Send longer than the posted buffer.
    LocalLength,
    /// The peer refused an access to its memory (its Terminate said so).
    RemoteAccess,
    /// The peer terminated the stream for another reason.
    RemoteOperation,
    /// A Send with Invalidate named an STag that cannot be invalidated.
    RemoteInvalidate,
    /// A local memory registration failed.
    LocalProtection,
    /// The QP went down before this request ran.
    Flushed,
}

/// A completion.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Wc {
    pub wr_id: u64,
    pub opcode: WcOpcode,
    pub status: WcStatus,
    /// Bytes received (receives) or moved (reads, sends, writes).
    pub byte_len: u32,
    /// A Send with Invalidate: the STag invalidated before completion.
    pub invalidated: Option<Stag>,
    /// A Send with Solicited Event.
    pub solicited: bool,
    /// A one-shot advertisement (opcode 0x8): the STag the peer offered.
    pub advertised: Option<Stag>,
}

/// What the connection manager reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// Passive side: an MPA Request arrived; `accept` or `reject` it.
    ConnectRequest { rev: u8, ird_ord: Option<IrdOrd>, crc: bool, private_data: Vec<u8> },
    /// The connection is up (for the initiator, with the Reply's data).
    Established { private_data: Vec<u8> },
    /// The responder rejected the connection.
    Rejected { private_data: Vec<u8> },
    /// The QP left service, and why.
    Down(Down),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Down {
    /// A clean close, by either side.
    Closed,
    /// This side aborted.
    Aborted,
    /// This side sent a Terminate.
    TerminateSent(Terminate),
    /// The peer sent one.
    TerminateReceived(Terminate),
    /// Connection setup failed.
    Setup(SetupError),
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SetupError {
    #[error("malformed MPA frame: {0}")]
    Mpa(#[from] WireError),
    #[error("an MPA {0} where none belongs")]
    Unexpected(&'static str),
    #[error("bytes from the initiator before the MPA Reply")]
    EarlyData,
    #[error("a revision 2 Reply without the enhanced flag")]
    NotEnhanced,
    #[error("no MPA {0} before the timeout")]
    Timeout(&'static str),
    #[error("the first FPDU is not the agreed RTR")]
    NoMatchingRtr,
}

/// Errors from posting work.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VerbsError {
    #[error("the QP is not connected")]
    NotConnected,
    #[error("the queue is full")]
    QueueFull,
    #[error("a scatter-gather entry is outside its buffer")]
    BadSgl,
    #[error("the connection negotiated no outbound RDMA Reads (ORD 0)")]
    NoReads,
    #[error("local memory: {0}")]
    Local(#[from] MrError),
    #[error("private data of {0} bytes is too long")]
    PrivateData(usize),
}

/// How the caller should end the transport when the QP is done with it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Close {
    /// Send what is queued, then FIN.
    Graceful,
    /// RST.
    Abortive,
}

/// Where the QP is in its life.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum QpState {
    /// Active: MPA Request sent, waiting for the Reply.
    AwaitReply,
    /// Passive: waiting for the MPA Request.
    AwaitRequest,
    /// Passive: the Request is in; the ULP decides.
    AwaitAccept,
    /// Passive, peer-to-peer: Reply sent, waiting for the RTR.
    AwaitRtr(Rtr),
    /// Ready to send (and receive).
    Rts,
    /// A clean close was asked: the send queue drains, then FIN.
    Closing,
    /// Stopped (a Terminate, a failed setup, a reject, an abort); what
    /// is queued to send is the last of it.
    Error,
    Closed,
}

/// An outbound Read in flight, answered by Read Responses in order.
#[derive(Debug, Clone)]
struct Outbound {
    /// None for a Read RTR (nothing completes).
    wr_id: Option<u64>,
    signaled: bool,
    sink: Stag,
    sink_to: u64,
    len: u32,
    got: u32,
}

/// An inbound Read Request being answered.
#[derive(Debug)]
struct Inbound {
    sink: u32,
    sink_to: u64,
    len: u32,
    /// The source's pieces, looked up once when the request was
    /// accepted: the response holds the memory, as siw's holds a
    /// reference to it, rather than finding it again for every FPDU.
    src: Sgl,
    sent: u32,
}

/// The initiator's pause between the Reply and its first FPDU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Hold {
    Off,
    /// The Reply is in; the pause starts at the next `handle_timeout`
    /// (input carries no time).
    Start,
    Until(Duration),
}

pub struct Qp {
    dev: Device,
    cfg: QpConfig,
    state: QpState,
    deadline: Option<Duration>,
    /// Initiator: FPDUs held after the Reply ([`QpConfig::reply_settle`]).
    hold: Hold,
    /// Negotiated after setup.
    crc: bool,
    /// Both ends agreed to the one-shot opcodes.
    oneshot: bool,
    ird: u16,
    ord: u16,
    /// Setup bytes gathered until an MPA frame is whole.
    mpa: Vec<u8>,
    /// Passive: the Request being decided on.
    request: Option<crate::wire::MpaFrame>,
    framer: FpduFramer,
    rx: rx::RxState,
    tx: tx::TxState,
    sq: VecDeque<SendWr>,
    /// Posted receives, and whether each is mapped on the NIC.
    rq: VecDeque<(RecvWr, bool)>,
    orq: VecDeque<Outbound>,
    irq: VecDeque<Inbound>,
    cq: VecDeque<Wc>,
    events: VecDeque<Event>,
    close: Option<Close>,
    /// A Terminate queued to go out before the close.
    terminate: Option<Terminate>,
    offload: offload::Offload,
    /// Stream offset of the next received byte.
    rx_off: u64,
    /// Initiator: where FPDUs start on transmit, until the offload is
    /// handed over (after the Reply has been taken in).
    pending_tx_start: Option<u64>,
    hints: Vec<(u64, u64, ulp_ddp::RxHint)>,
    /// The end of the last run of whole FPDUs the NIC consumed, checked.
    run_end: u64,
    stats: QpStats,
}

impl std::fmt::Debug for Qp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Qp").field("state", &self.state).field("crc", &self.crc).finish()
    }
}

impl Qp {
    fn new(dev: &Device, cfg: QpConfig, state: QpState) -> Self {
        Self {
            dev: dev.clone(),
            state,
            deadline: None,
            hold: Hold::Off,
            crc: false,
            oneshot: false,
            ird: cfg.ird,
            ord: cfg.ord,
            mpa: Vec::new(),
            request: None,
            framer: FpduFramer::new(false),
            rx: rx::RxState::default(),
            tx: tx::TxState::new(cfg.emss),
            sq: VecDeque::new(),
            rq: VecDeque::new(),
            orq: VecDeque::new(),
            irq: VecDeque::new(),
            cq: VecDeque::new(),
            events: VecDeque::new(),
            close: None,
            terminate: None,
            offload: offload::Offload::Off,
            rx_off: 0,
            pending_tx_start: None,
            hints: Vec::new(),
            run_end: 0,
            stats: QpStats::default(),
            cfg,
        }
    }

    pub fn state(&self) -> &QpState {
        &self.state
    }

    pub fn pd(&self) -> Pd {
        self.cfg.pd
    }

    /// Whether FPDUs carry CRCs (known once connected).
    pub fn crc(&self) -> bool {
        self.crc
    }

    /// The negotiated (IRD, ORD).
    /// How one-shot advertise and close travel on this connection: the
    /// patent's opcodes 0x8 and 0xC (both ends agreed), or standard Sends
    /// and Send with Invalidate.
    pub fn oneshot_opcodes(&self) -> bool {
        self.oneshot
    }

    pub fn ird_ord(&self) -> (u16, u16) {
        (self.ird, self.ord)
    }

    /// The largest ULPDU an FPDU carries.
    /// MPA markers in what this side receives, and in what it sends.
    pub fn markers(&self) -> (bool, bool) {
        (self.framer.markers().is_some(), self.tx.markers().is_some())
    }

    pub fn mulpdu(&self) -> usize {
        self.tx.mulpdu
    }

    /// The next connection event.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// The next completion.
    pub fn poll_cq(&mut self) -> Option<Wc> {
        self.cq.pop_front()
    }

    /// When `handle_timeout` wants to run.
    pub fn poll_timeout(&self) -> Option<Duration> {
        let hold = match self.hold {
            Hold::Off => None,
            Hold::Start => Some(Duration::ZERO),
            Hold::Until(t) => Some(t),
        };
        [self.deadline, hold].into_iter().flatten().min()
    }

    pub fn handle_timeout(&mut self, now: Duration) {
        match self.hold {
            Hold::Start => self.hold = Hold::Until(now + self.cfg.reply_settle),
            Hold::Until(t) if now >= t => self.hold = Hold::Off,
            _ => {}
        }
        if self.deadline.is_some_and(|d| now >= d) {
            self.deadline = None;
            let what = match self.state {
                QpState::AwaitReply => "Reply",
                QpState::AwaitRequest => "Request",
                _ => return,
            };
            self.fail_setup(SetupError::Timeout(what), Close::Abortive);
        }
    }

    /// Once set, the caller ends the transport this way after draining
    /// `poll_transmit`.
    pub fn close_action(&self) -> Option<Close> {
        self.close
    }

    /// Post a receive buffer. Allowed before connecting, as verbs allow.
    pub fn post_recv(&mut self, wr: RecvWr) -> Result<(), VerbsError> {
        self.post_recv_as(wr, false)
    }

    /// Post a receive buffer and map it on this QP's NIC, which then
    /// places the Send that lands in it (it knows the Send by the MSN the
    /// receive will take), as it places tagged data.
    pub fn post_recv_placed(&mut self, wr: RecvWr) -> Result<(), VerbsError> {
        self.post_recv_as(wr, true)
    }

    fn post_recv_as(&mut self, wr: RecvWr, placed: bool) -> Result<(), VerbsError> {
        if matches!(self.state, QpState::Error | QpState::Closed) {
            return Err(VerbsError::NotConnected);
        }
        if self.rq.len() >= self.cfg.rq_depth {
            return Err(VerbsError::QueueFull);
        }
        check_sgl(&wr.sgl)?;
        if placed {
            let msn = self.recv_msn(self.rq.len());
            self.nic_recv(msn, &wr.sgl);
        }
        self.rq.push_back((wr, placed));
        Ok(())
    }

    /// The MSN of the Send that will land in the receive at `rq[i]`.
    fn recv_msn(&self, i: usize) -> u32 {
        // An open Send and a Send RTR still to come take theirs first.
        let rtr = self.state == QpState::AwaitRtr(Rtr::Send) && !self.rx.open();
        let ahead = u32::from(self.rx.open()) + u32::from(rtr) + i as u32;
        self.rx.next_msn(0).wrapping_add(ahead)
    }

    /// Post a send-queue work request; requests run in order.
    pub fn post_send(&mut self, wr: SendWr) -> Result<(), VerbsError> {
        if self.state != QpState::Rts {
            return Err(VerbsError::NotConnected);
        }
        if self.sq.len() >= self.cfg.sq_depth {
            return Err(VerbsError::QueueFull);
        }
        match &wr.op {
            SendOp::Send { sgl, .. } | SendOp::Write { sgl, .. } => {
                check_sgl(sgl)?;
                if crate::mr::sgl_len(sgl) > u64::from(u32::MAX) {
                    return Err(VerbsError::BadSgl);
                }
            }
            SendOp::FastReg { sgl, .. } => check_sgl(sgl)?,
            SendOp::Advertise { region, sgl, .. } => {
                check_sgl(region)?;
                check_sgl(sgl)?;
                if crate::mr::sgl_len(sgl) > u64::from(u32::MAX) {
                    return Err(VerbsError::BadSgl);
                }
            }
            SendOp::Read { .. } if self.ord == 0 => return Err(VerbsError::NoReads),
            SendOp::Read { sink, sink_to, len, .. } => {
                // The peer's Read Responses address the sink by STag; a
                // FastReg posted ahead may make it valid (verbs chain them).
                let chained = self
                    .sq
                    .iter()
                    .any(|w| matches!(&w.op, SendOp::FastReg { stag, .. } if stag == sink));
                if !chained {
                    self.dev.check(self.cfg.pd, *sink, *sink_to, u64::from(*len), SINK_ACCESS)?;
                }
            }
            SendOp::LocalInv { .. } => {}
        }
        self.sq.push_back(wr);
        self.stats.control_calls += 1;
        Ok(())
    }

    /// Register `sgl` for the peer at tagged offset `iova` (`ib_reg_mr`),
    /// now, and with this QP's NIC if it has one: the STag.
    pub fn reg_mr(&mut self, sgl: Sgl, iova: u64, access: Access) -> Result<Stag, VerbsError> {
        check_sgl(&sgl)?;
        let stag = self.dev.reg_mr(self.cfg.pd, sgl, iova, access)?;
        self.nic_register(stag, access);
        self.stats.control_calls += 1;
        Ok(stag)
    }

    /// Close cleanly: what is posted still goes out, then FIN.
    pub fn disconnect(&mut self) {
        match self.state {
            QpState::Rts => {
                self.state = QpState::Closing;
                self.maybe_closed_clean();
            }
            QpState::Closing | QpState::Error | QpState::Closed => {}
            _ => self.fail_setup_quietly(Close::Graceful),
        }
    }

    /// Close abortively: everything outstanding is flushed, RST.
    pub fn abort(&mut self) {
        if self.state == QpState::Closed {
            return;
        }
        self.terminate = None;
        self.go_down(Down::Aborted, Close::Abortive);
        self.tx.clear();
        self.state = QpState::Closed;
    }

    /// The transport is gone (the peer's FIN or RST, or ours done).
    pub fn transport_closed(&mut self) {
        if self.state == QpState::Closed {
            return;
        }
        if !matches!(self.state, QpState::Error) {
            self.go_down(Down::Closed, Close::Graceful);
        }
        self.flush();
        self.state = QpState::Closed;
    }

    /// Stop: report `why`, flush every outstanding request, and ask the
    /// caller to end the transport.
    fn go_down(&mut self, why: Down, close: Close) {
        if !matches!(self.state, QpState::Error | QpState::Closed) {
            self.events.push_back(Event::Down(why));
        }
        self.state = QpState::Error;
        self.deadline = None;
        self.flush();
        self.close.get_or_insert(close);
    }

    /// Complete everything outstanding with `Flushed`.
    fn flush(&mut self) {
        let flushed = |wr_id, opcode| Wc {
            wr_id,
            opcode,
            status: WcStatus::Flushed,
            byte_len: 0,
            invalidated: None,
            solicited: false,
            advertised: None,
        };
        if let Some(wr) = self.tx.abandon() {
            self.cq.push_back(flushed(wr.wr_id, opcode_of(&wr.op)));
        }
        if let Some(wc) = self.tx.cut_framed() {
            self.cq.push_back(flushed(wc.wr_id, wc.opcode));
        }
        for o in self.orq.drain(..) {
            if let Some(id) = o.wr_id {
                self.cq.push_back(flushed(id, WcOpcode::RdmaRead));
            }
        }
        for wr in self.sq.drain(..) {
            self.cq.push_back(flushed(wr.wr_id, opcode_of(&wr.op)));
        }
        if let Some(r) = self.rx.abandon() {
            self.cq.push_back(flushed(r.wr_id, WcOpcode::Recv));
        }
        for (r, _) in self.rq.drain(..) {
            self.cq.push_back(flushed(r.wr_id, WcOpcode::Recv));
        }
        self.irq.clear();
    }

    /// Terminate the stream: queue the Terminate (it goes out after the
    /// FPDU in progress), report it, flush, then close.
    fn fail(&mut self, t: Terminate) {
        tracing::debug!(layer = ?t.layer, etype = t.etype, code = t.code, "iwarp: terminate");
        if matches!(self.state, QpState::Error | QpState::Closed) {
            return;
        }
        self.terminate = Some(t.clone());
        self.go_down(Down::TerminateSent(t), Close::Graceful);
    }

    /// After a clean close was asked: FIN once nothing is left to send.
    fn maybe_closed_clean(&mut self) {
        if self.state == QpState::Closing
            && self.sq.is_empty()
            && self.irq.is_empty()
            && self.orq.is_empty()
            && self.tx.idle()
        {
            self.close.get_or_insert(Close::Graceful);
        }
    }
}

/// What a Read's sink must grant: iWARP Read Responses are tagged writes.
const SINK_ACCESS: Access = Access::LOCAL_WRITE.union(Access::REMOTE_WRITE);

fn opcode_of(op: &SendOp) -> WcOpcode {
    match op {
        SendOp::Send { .. } | SendOp::Advertise { .. } => WcOpcode::Send,
        SendOp::Write { .. } => WcOpcode::RdmaWrite,
        SendOp::Read { .. } => WcOpcode::RdmaRead,
        SendOp::FastReg { .. } => WcOpcode::FastReg,
        SendOp::LocalInv { .. } => WcOpcode::LocalInv,
    }
}

fn check_sgl(sgl: &[SgEntry]) -> Result<(), VerbsError> {
    if sgl.iter().all(SgEntry::in_bounds) { Ok(()) } else { Err(VerbsError::BadSgl) }
}

/// The Terminate for a peer's malformed bytes.
fn wire_terminate(e: WireError) -> Terminate {
    let (layer, etype, code) = e.terminate().unwrap_or((TermLayer::Llp, 0, 4));
    Terminate::new(layer, etype, code)
}
