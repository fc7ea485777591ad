//! The host: one association with a controller, made of an admin queue
//! and I/O queues, each its own transport connection (a TCP connection, a
//! queue pair), made by a [`Transport`] binding.
//!
//! [`Host`] runs the bring-up a Linux host runs (Connect, CAP, CC.EN,
//! CSTS.RDY, VS, Identify, Number of Queues, I/O queue Connects, AER,
//! namespace scan), keeps the association alive, submits I/O, and shuts down
//! with CC.SHN. It is sans-IO: the driver opens a transport for every queue
//! [`Host::poll_connect`] names, feeds bytes to [`Host::handle_input`],
//! writes what [`Host::poll_transmit`] produces, and keeps time with
//! [`Host::poll_timeout`] / [`Host::handle_timeout`]. Results come out of
//! [`Host::poll_event`].

mod queue;

pub use queue::{
    Cmd, CmdData, Command, CommandTable, Commands, Dir, HostQueue, Owner, QueueError, QueueEvent,
    Transport,
};

use crate::nvme::identify::{self, IdentifyController, IdentifyNamespace, cns};
use crate::nvme::log::{DiscoveryEntry, GetLogPage, lid};
use crate::nvme::{
    ConnectData, Cqe, DISCOVERY_NQN, FabricsCommand, PropertySize, Sqe, Status, admin, fid, io,
    property,
};
use crate::stats::{Digests, TxStats, UlpStats};
use crate::time::{Instant, earliest};
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;
use tracing::{debug, info, warn};
use ulp_ddp::IoBuf;

/// What a host asks of a controller.
#[derive(Debug, Clone)]
pub struct HostConfig {
    /// The subsystem to connect to; the discovery NQN runs discovery instead.
    pub subnqn: String,
    pub hostnqn: String,
    pub hostid: [u8; 16],
    /// Integrity checks to ask for (digests on TCP, MPA CRC on RDMA).
    pub digests: Digests,
    /// I/O queues to ask for.
    pub io_queues: u16,
    /// Commands outstanding per I/O queue (the queue gets one entry more).
    pub queue_depth: u16,
    /// Keep alive timeout; zero for none.
    pub kato: Duration,
    /// How long a command may take before it is aborted, and then the
    /// association reset.
    pub command_timeout: Duration,
    /// How long to wait before each attempt to reconnect a lost
    /// association (Linux's `reconnect_delay`).
    pub reconnect_delay: Duration,
    /// How long a lost association is retried before its commands fail;
    /// zero fails at once, `None` retries forever (Linux's
    /// `ctrl_loss_tmo`, -1 for forever).
    pub ctrl_loss_tmo: Option<Duration>,
    /// R2Ts the controller may have outstanding per command, 0-based
    /// (NVMe/TCP).
    pub maxr2t: u32,
    /// Ask for SQ flow control to be disabled (lets controllers use SUCCESS).
    pub disable_sq_flow_control: bool,
    /// Map reads of at least this many bytes when a device offloads the
    /// queue; `None` takes the device's own threshold.
    pub ddp_threshold: Option<u32>,
}

impl Default for HostConfig {
    fn default() -> Self {
        Self {
            subnqn: DISCOVERY_NQN.into(),
            hostnqn: "nqn.2014-08.org.nvmexpress:uuid:5f0d2c44-6a1e-4c8b-9d3e-000000000000".into(),
            hostid: [0x5f, 0x0d, 0x2c, 0x44, 0x6a, 0x1e, 0x4c, 0x8b, 0x9d, 0x3e, 0, 0, 0, 0, 0, 0],
            digests: Digests::NONE,
            io_queues: 1,
            queue_depth: 32,
            kato: Duration::from_secs(5),
            command_timeout: DEFAULT_COMMAND_TIMEOUT,
            reconnect_delay: DEFAULT_RECONNECT_DELAY,
            ctrl_loss_tmo: Some(DEFAULT_CTRL_LOSS_TMO),
            maxr2t: 0,
            disable_sq_flow_control: false,
            ddp_threshold: None,
        }
    }
}

/// Default time a command may take before it is aborted (Linux's
/// `io_timeout`).
pub const DEFAULT_COMMAND_TIMEOUT: Duration = Duration::from_secs(30);
/// Linux's defaults for reconnecting a lost association.
pub const DEFAULT_RECONNECT_DELAY: Duration = Duration::from_secs(10);
pub const DEFAULT_CTRL_LOSS_TMO: Duration = Duration::from_secs(600);
/// Times a command is submitted again before its failure stands (Linux's
/// `nvme_core.max_retries`).
pub const MAX_RETRIES: u8 = 5;

/// Steps of bring-up, discovery and shutdown, each one admin command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    Connect,
    GetCap,
    WriteCc,
    EnableCc,
    PollReady,
    GetVs,
    IdentifyController,
    SetQueues,
    ConnectIo,
    NsList,
    IdentifyNs(u32),
    DiscoveryHeader,
    DiscoveryEntries,
    Shutdown,
    PollShutdown,
    /// CC.EN cleared for a reset the host asked for.
    Disable,
}

impl Step {
    fn name(self) -> &'static str {
        match self {
            Step::Connect => "Connect",
            Step::GetCap => "Property Get CAP",
            Step::WriteCc | Step::EnableCc => "Property Set CC",
            Step::PollReady | Step::PollShutdown => "Property Get CSTS",
            Step::GetVs => "Property Get VS",
            Step::IdentifyController => "Identify Controller",
            Step::SetQueues => "Set Features (Number of Queues)",
            Step::ConnectIo => "Connect (I/O queue)",
            Step::NsList => "Identify Active Namespace List",
            Step::IdentifyNs(_) => "Identify Namespace",
            Step::DiscoveryHeader | Step::DiscoveryEntries => "Get Log Page (Discovery)",
            Step::Shutdown => "Property Set CC.SHN",
            Step::Disable => "Property Set CC.EN=0",
        }
    }
}

/// Why an association failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HostError {
    #[error("queue {qid}: {error}")]
    Queue { qid: u16, error: QueueError },
    #[error("{step} failed: {status}")]
    Refused { step: &'static str, status: Status },
    /// Connect named a subsystem the controller does not have (Connect
    /// Invalid Parameters pointing at SUBNQN).
    #[error("subsystem {0} not found (the controller refused Connect: {status})", status = Status::CONNECT_INVALID_PARAMETERS)]
    NoSuchSubsystem(String),
    /// The subsystem does not let this host in (Connect Invalid Host).
    #[error("host {0} is not allowed into the subsystem ({status})", status = Status::CONNECT_INVALID_HOST)]
    HostNotAllowed(String),
    #[error("controller cannot be used: {0}")]
    Incompatible(String),
    #[error("timed out waiting for {0}")]
    Timeout(&'static str),
    /// Reconnecting failed for ctrl-loss-tmo; the last attempt's error.
    #[error("controller lost: no association for {after:?} (ctrl-loss-tmo); last error: {last}")]
    ControllerLost { after: Duration, last: Box<HostError> },
}

/// A namespace the host found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NamespaceInfo {
    pub nsid: u32,
    /// Size (NSZE) and blocks in use (NUSE).
    pub blocks: u64,
    pub used: u64,
    pub block_size: u32,
}

/// What the host has to say.
#[derive(Debug)]
pub enum HostEvent {
    /// Bring-up finished; I/O may be submitted.
    Ready,
    /// Discovery finished with these log entries; the host then shuts down.
    Discovered(Vec<DiscoveryEntry>),
    /// An I/O completed; `buf` is the buffer it was submitted with.
    Completion { qid: u16, tag: u64, status: Status, buf: Option<IoBuf> },
    /// An Asynchronous Event Request completed with this DW0.
    AsyncEvent(u32),
    /// The association was lost (`error`), or reset as asked (`None`);
    /// the host makes a new one after `delay` and submits the commands that
    /// did not complete again there.
    Reconnecting { error: Option<HostError>, delay: Duration },
    /// A new association is up, with the same namespaces.
    Reconnected,
    /// The association failed for good. Every command that had not
    /// completed has completed first, with an error status.
    Failed(HostError),
    /// Shutdown finished; every queue is closed.
    Closed,
}

/// The I/O commands a host can submit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IoKind {
    Read,
    Write,
    /// A Write with Force Unit Access: durable when it completes.
    WriteFua,
    Flush,
    WriteZeroes,
    /// Dataset Management with the Deallocate attribute, one range.
    Deallocate,
}

/// One I/O to submit.
#[derive(Debug, Clone)]
pub struct Io {
    pub kind: IoKind,
    pub nsid: u32,
    pub slba: u64,
    pub nlb: u32,
    /// Read into / write from the first `nlb * block size` bytes.
    pub buf: Option<IoBuf>,
    /// Comes back with the completion.
    pub tag: u64,
}

/// Why an I/O could not be submitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SubmitError {
    #[error("the host is not ready for I/O")]
    NotReady,
    #[error("no I/O queue {0}")]
    NoQueue(u16),
    #[error("queue is full")]
    QueueFull,
    #[error("no namespace {0}")]
    NoNamespace(u32),
    #[error("transfer of {0} bytes exceeds the controller's maximum")]
    TooLarge(u64),
    #[error("buffer too small for the transfer")]
    BufferTooSmall,
}

/// How often recovery ran, for users to see.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Recovery {
    /// New associations made after one was lost.
    pub reconnects: u64,
    /// Commands submitted again: after a lost association, or after an
    /// error the controller allowed to be retried (DNR clear).
    pub retried: u64,
    /// Abort commands sent for commands that timed out.
    pub aborts: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    BringUp,
    Ready,
    /// Lost: waiting to reconnect.
    Resetting,
    /// A reset the host asked for: I/O queues gone, CC.EN being cleared.
    Disabling,
    ShuttingDown,
    Failed,
    Closed,
}

/// A host's association with one controller.
pub struct Host {
    cfg: HostConfig,
    transport: Arc<dyn Transport>,
    discovery: bool,
    state: State,
    queues: Vec<Box<dyn HostQueue>>,
    connect_pending: VecDeque<u16>,
    events: VecDeque<HostEvent>,
    cntlid: u16,
    cap: u64,
    vs: u32,
    cc: u32,
    ctrl: Option<IdentifyController>,
    namespaces: Vec<NamespaceInfo>,
    ns_pending: VecDeque<u32>,
    io_queue_size: u16,
    io_connected: u16,
    discovery_numrec: u64,
    /// When to ask again for CSTS (waiting for RDY or SHST).
    repoll: Option<(Instant, Step)>,
    poll_deadline: Option<Instant>,
    keep_alive: Option<(Instant, Duration)>,
    /// Bring-up must finish by then (a transport connect has no command
    /// deadline of its own).
    bring_up_deadline: Option<Instant>,
    /// Since when the controller is lost, while reconnecting.
    lost_at: Option<Instant>,
    last_error: Option<HostError>,
    reconnect_at: Option<Instant>,
    /// Commands waiting to be submitted again, with their queue and how
    /// often they were.
    retry: VecDeque<Retry>,
    /// Tries of the commands submitted again and still outstanding, by
    /// queue and tag.
    tries: HashMap<(u16, u64), u8>,
    /// Commands an Abort was sent for, by queue and CID.
    aborted: Vec<(u16, u16)>,
    recovery: Recovery,
    /// The latest time passed in.
    now: Instant,
    span: tracing::Span,
}

/// A command to submit again.
#[derive(Debug)]
struct Retry {
    qid: u16,
    tag: u64,
    cmd: Command,
    tries: u8,
}

/// The admin queue's size (Linux: 32).
const ADMIN_QUEUE_SIZE: u16 = 32;
/// How often CSTS is read while waiting for it to change.
const CSTS_POLL: Duration = Duration::from_millis(2);
/// How long shutdown may take (Linux's default shutdown_timeout).
const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(5);

impl Host {
    /// A host whose queues `transport` makes.
    pub fn new(cfg: HostConfig, transport: Arc<dyn Transport>) -> Self {
        let discovery = cfg.subnqn == DISCOVERY_NQN;
        let span = tracing::debug_span!("host", subnqn = %cfg.subnqn);
        let admin = transport.queue(0, ADMIN_QUEUE_SIZE, transport.binding().admin_inline);
        Self {
            cfg,
            transport,
            discovery,
            state: State::BringUp,
            queues: vec![admin],
            connect_pending: VecDeque::from([0]),
            events: VecDeque::new(),
            cntlid: 0,
            cap: 0,
            vs: 0,
            cc: 0,
            ctrl: None,
            namespaces: Vec::new(),
            ns_pending: VecDeque::new(),
            io_queue_size: 0,
            io_connected: 0,
            discovery_numrec: 0,
            repoll: None,
            poll_deadline: None,
            keep_alive: None,
            bring_up_deadline: None,
            lost_at: None,
            last_error: None,
            reconnect_at: None,
            retry: VecDeque::new(),
            tries: HashMap::new(),
            aborted: Vec::new(),
            recovery: Recovery::default(),
            now: Instant::ZERO,
            span,
        }
    }

    pub fn config(&self) -> &HostConfig {
        &self.cfg
    }

    /// A queue that needs a transport connection to the controller. A
    /// driver still holding a transport for that queue closes it: it
    /// belonged to an association that was lost.
    pub fn poll_connect(&mut self) -> Option<u16> {
        let qid = self.connect_pending.pop_front()?;
        if qid == 0 && self.lost_at.is_some() {
            // A new association: the old queues go now, when the driver
            // replaces their transports, so no old byte reaches a new queue.
            let binding = self.transport.binding();
            self.queues = vec![self.transport.queue(0, ADMIN_QUEUE_SIZE, binding.admin_inline)];
        }
        Some(qid)
    }

    /// The transport of queue `qid` is up.
    pub fn connected(&mut self, qid: u16, now: Instant) {
        self.now = self.now.max(now);
        if let Some(q) = self.queues.get_mut(usize::from(qid)) {
            q.connected(now);
        }
        self.drain(qid, now);
    }

    /// The binding this host's queues speak.
    pub fn binding(&self) -> crate::Binding {
        self.transport.binding()
    }

    /// A device may offload queue `qid`'s connection, `flow`. The admin
    /// queue never is; an I/O queue is from when its binding says (NVMe/TCP
    /// once the queue's Connect completes, NVMe/RDMA from its first FPDU).
    pub fn attach_ddp(
        &mut self,
        qid: u16,
        dev: std::sync::Arc<dyn ulp_ddp::DdpDevice>,
        flow: ulp_ddp::FlowId,
    ) {
        let threshold = self.cfg.ddp_threshold;
        if let Some(q) = self.queues.get_mut(usize::from(qid)).filter(|_| qid > 0) {
            q.offload(dev, flow, threshold);
        }
    }

    /// Whether a device offloads queue `qid`.
    pub fn is_offloaded(&self, qid: u16) -> bool {
        self.queues.get(usize::from(qid)).is_some_and(|q| q.is_offloaded())
    }

    /// Bytes received on queue `qid`; returns how many were taken.
    pub fn handle_input(&mut self, qid: u16, data: &[u8], now: Instant) -> usize {
        self.now = self.now.max(now);
        let Some(q) = self.queues.get_mut(usize::from(qid)) else { return data.len() };
        let n = q.handle_input(data, now);
        self.drain(qid, now);
        n
    }

    /// Bytes for queue `qid`'s transport. Sending may complete local work
    /// (an RDMA binding's registrations and invalidations), whose results
    /// are acted on at the time last passed in.
    pub fn poll_transmit(&mut self, qid: u16, out: &mut [u8]) -> usize {
        let Some(q) = self.queues.get_mut(usize::from(qid)) else { return 0 };
        let n = q.poll_transmit(out);
        let now = self.now;
        self.drain(qid, now);
        match self.queues.get_mut(usize::from(qid)) {
            Some(q) if n == 0 => q.poll_transmit(out),
            _ => n,
        }
    }

    pub fn pending_output(&self, qid: u16) -> usize {
        self.queues.get(usize::from(qid)).map_or(0, |q| q.pending_output())
    }

    /// Queue `qid` has nothing more to send: close its transport.
    pub fn is_closed(&self, qid: u16) -> bool {
        self.queues.get(usize::from(qid)).is_none_or(|q| q.is_closed())
    }

    /// The transport of queue `qid` closed under us.
    pub fn transport_closed(&mut self, qid: u16, now: Instant) {
        self.now = self.now.max(now);
        if let Some(q) = self.queues.get_mut(usize::from(qid)) {
            q.transport_closed();
        }
        self.drain(qid, now);
    }

    pub fn poll_event(&mut self) -> Option<HostEvent> {
        self.events.pop_front()
    }

    pub fn poll_timeout(&self) -> Option<Instant> {
        match self.state {
            State::Failed | State::Closed => return None,
            State::Resetting => return self.reconnect_at,
            _ => {}
        }
        let mut t = self.repoll.map(|(t, _)| t);
        t = earliest(t, self.keep_alive.map(|(t, _)| t));
        t = earliest(t, self.bring_up_deadline);
        for q in &self.queues {
            t = earliest(t, q.commands().deadline());
            t = earliest(t, q.poll_timeout());
        }
        t
    }

    pub fn handle_timeout(&mut self, now: Instant) {
        self.now = self.now.max(now);
        match self.state {
            State::Failed | State::Closed => return,
            State::Resetting => {
                if self.reconnect_at.is_some_and(|t| now >= t) {
                    self.reconnect(now);
                }
                return;
            }
            _ => {}
        }
        if self.bring_up_deadline.is_some_and(|t| now >= t) {
            return self.fail(HostError::Timeout("the association to come up"));
        }
        for qid in 0..self.queues.len() as u16 {
            if self.queues[usize::from(qid)].poll_timeout().is_some_and(|t| now >= t) {
                self.queues[usize::from(qid)].handle_timeout(now);
                self.drain(qid, now);
            }
        }
        if let Some((t, step)) = self.repoll
            && now >= t
        {
            self.repoll = None;
            if self.poll_deadline.is_some_and(|d| now >= d) {
                return self.fail(HostError::Timeout(if step == Step::PollReady {
                    "CSTS.RDY"
                } else {
                    "shutdown"
                }));
            }
            self.property_get(step, property::CSTS, PropertySize::Four, now);
        }
        if let Some((t, period)) = self.keep_alive
            && now >= t
        {
            self.keep_alive = Some((now + period, period));
            if !self.queues[0].commands().has_owner(Owner::KeepAlive) {
                // Unanswered within KATO, the controller is taken for dead
                // (Linux times the keep alive out after KATO too).
                let sqe = Sqe::new(admin::KEEP_ALIVE, 0, Default::default());
                self.admin_cmd_until(Owner::KeepAlive, sqe, None, now + self.cfg.kato);
            }
        }
        let overdue = (0..self.queues.len() as u16).find_map(|qid| {
            let (cid, owner) = self.queues[usize::from(qid)].commands().overdue(now)?;
            Some((qid, cid, owner))
        });
        if let Some((qid, cid, owner)) = overdue {
            self.timed_out(qid, cid, owner, now);
        }
    }

    /// Command `cid` on queue `qid` did not complete in time. An I/O is
    /// aborted first and given another command timeout; anything else,
    /// or an I/O already aborted, resets the association.
    fn timed_out(&mut self, qid: u16, cid: u16, owner: Owner, now: Instant) {
        let abortable = qid > 0
            && matches!(owner, Owner::Io(_))
            && self.state == State::Ready
            && !self.aborted.contains(&(qid, cid));
        if !abortable {
            warn!(parent: &self.span, qid, cid, ?owner, "command timed out");
            return self.fail(HostError::Timeout(match owner {
                Owner::KeepAlive => "a keep alive",
                _ => "a command completion",
            }));
        }
        warn!(parent: &self.span, qid, cid, "command timed out, aborting it");
        self.aborted.push((qid, cid));
        self.recovery.aborts += 1;
        let mut sqe = Sqe::new(admin::ABORT, 0, Default::default());
        sqe.cdw10 = u32::from(qid) | u32::from(cid) << 16;
        self.admin_cmd(Owner::Abort, sqe, None, now);
        self.queues[usize::from(qid)].commands_mut().extend(cid, now + self.cfg.command_timeout);
    }

    /// Shut the association down: close the I/O queues, then CC.SHN on the
    /// admin queue, then close it. `Closed` follows.
    pub fn shutdown(&mut self, now: Instant) {
        self.now = self.now.max(now);
        match self.state {
            State::Ready | State::BringUp if self.queues[0].is_live() && self.cntlid != 0 => {
                self.state = State::ShuttingDown;
                for q in &mut self.queues[1..] {
                    q.close();
                }
                self.keep_alive = None;
                let cc = (self.cc & !property::CC_SHN_MASK) | property::CC_SHN_NORMAL;
                self.property_set(Step::Shutdown, property::CC, cc, now);
            }
            State::Failed | State::Closed => {}
            _ => self.close_all(),
        }
    }

    /// Reset the controller, as `nvme reset` does: the I/O queues go (what
    /// is in flight waits), CC.EN is cleared, the admin queue goes, and a
    /// new association is made at once; the waiting commands are then
    /// submitted again. Returns false unless the host is ready.
    pub fn reset_controller(&mut self, now: Instant) -> bool {
        self.now = self.now.max(now);
        if self.state != State::Ready {
            return false;
        }
        info!(parent: &self.span, "resetting the controller");
        self.keep_alive = None;
        for qid in 1..self.queues.len() as u16 {
            self.stop_queue(qid);
        }
        self.state = State::Disabling;
        self.property_set(Step::Disable, property::CC, self.cc & !property::CC_EN, now);
        true
    }

    pub fn is_ready(&self) -> bool {
        self.state == State::Ready
    }

    /// Whether a lost association is being made again.
    pub fn is_reconnecting(&self) -> bool {
        self.lost_at.is_some() && !matches!(self.state, State::Failed | State::Closed)
    }

    /// How often the host recovered, and what it did to.
    pub fn recovery(&self) -> Recovery {
        self.recovery
    }

    /// Identify Controller data, once read.
    pub fn controller(&self) -> Option<&IdentifyController> {
        self.ctrl.as_ref()
    }

    pub fn cntlid(&self) -> u16 {
        self.cntlid
    }

    /// Controller version (VS).
    pub fn version(&self) -> u32 {
        self.vs
    }

    /// Controller capabilities (CAP).
    pub fn capabilities(&self) -> u64 {
        self.cap
    }

    pub fn namespaces(&self) -> &[NamespaceInfo] {
        &self.namespaces
    }

    /// I/O queues in use (qids 1..=n).
    pub fn io_queues(&self) -> u16 {
        self.queues.len() as u16 - 1
    }

    /// Commands that may be outstanding on each I/O queue.
    pub fn queue_depth(&self) -> usize {
        self.queues.get(1).map_or(0, |q| q.commands().depth())
    }

    pub fn outstanding(&self, qid: u16) -> usize {
        self.queues.get(usize::from(qid)).map_or(0, |q| q.commands().outstanding())
    }

    /// Work counters summed over the I/O queues (the admin queue's few
    /// bytes are not what an offload is about).
    pub fn stats(&self) -> (UlpStats, TxStats) {
        let mut rx = UlpStats::default();
        let mut tx = TxStats::default();
        for q in &self.queues[1..] {
            let (r, t) = q.stats();
            rx.add(&r);
            tx.add(&t);
        }
        (rx, tx)
    }

    /// Largest transfer an I/O may have: what the controller takes (MDTS)
    /// and, where a device offloads the I/O queues, what one of its
    /// mappings holds, so that every read can be placed (Linux caps
    /// `max_hw_sectors` the same way when it offloads a controller).
    /// Callers split larger transfers, as the block layer does.
    pub fn max_transfer(&self) -> Option<u64> {
        let mdts = self.ctrl.as_ref().map_or(0, |c| c.mdts);
        let mpsmin = (self.cap >> 48) & 0xf;
        let mdts = (mdts > 0).then(|| 1u64 << (12 + mpsmin + u64::from(mdts)).min(40));
        let ddp = self.queues.iter().skip(1).filter_map(|q| q.ddp_max_transfer()).min();
        [mdts, ddp].into_iter().flatten().min()
    }

    /// Submit an I/O on queue `qid` (1..=io_queues).
    pub fn submit(&mut self, qid: u16, io: Io, now: Instant) -> Result<(), SubmitError> {
        self.now = self.now.max(now);
        if self.state != State::Ready {
            return Err(SubmitError::NotReady);
        }
        if qid == 0 || usize::from(qid) >= self.queues.len() {
            return Err(SubmitError::NoQueue(qid));
        }
        let ns = *self
            .namespaces
            .iter()
            .find(|n| n.nsid == io.nsid)
            .ok_or(SubmitError::NoNamespace(io.nsid))?;
        let len = u64::from(io.nlb) * u64::from(ns.block_size);
        let mut sqe = Sqe::rw(io::READ, io.nsid, io.slba, io.nlb, Default::default());
        let data = match io.kind {
            IoKind::Read | IoKind::Write | IoKind::WriteFua => {
                if self.max_transfer().is_some_and(|m| len > m) {
                    return Err(SubmitError::TooLarge(len));
                }
                let buf = io.buf.clone().ok_or(SubmitError::BufferTooSmall)?;
                if (buf.len() as u64) < len {
                    return Err(SubmitError::BufferTooSmall);
                }
                let (opcode, dir) = match io.kind {
                    IoKind::Read => (io::READ, Dir::FromController),
                    _ => (io::WRITE, Dir::ToController),
                };
                sqe.opcode = opcode;
                if io.kind == IoKind::WriteFua {
                    sqe.cdw12 |= Sqe::FUA;
                }
                Some((buf, len as usize, dir))
            }
            IoKind::Flush => {
                sqe = Sqe::new(io::FLUSH, io.nsid, Default::default());
                None
            }
            IoKind::WriteZeroes => {
                sqe.opcode = io::WRITE_ZEROES;
                None
            }
            IoKind::Deallocate => {
                sqe = Sqe::new(io::DATASET_MANAGEMENT, io.nsid, Default::default());
                // One range (NR 0), Attribute - Deallocate.
                sqe.cdw11 = 1 << 2;
                let mut range = vec![0u8; 16];
                range[4..8].copy_from_slice(&io.nlb.to_le_bytes());
                range[8..16].copy_from_slice(&io.slba.to_le_bytes());
                Some((IoBuf::from_vec(range), 16, Dir::ToController))
            }
        };
        let deadline = now + self.cfg.command_timeout;
        let q = &mut self.queues[usize::from(qid)];
        if !q.is_live() {
            return Err(SubmitError::NotReady);
        }
        q.submit(Owner::Io(io.tag), sqe, data, deadline).map(drop).ok_or(SubmitError::QueueFull)
    }

    /// Submit an admin command (Identify, Get Log Page, ...) that reads
    /// `len` bytes from the controller, or none. It completes as a
    /// [`HostEvent::Completion`] on queue 0 with `tag`, the data in `buf`.
    pub fn submit_admin(
        &mut self,
        sqe: Sqe,
        len: usize,
        tag: u64,
        now: Instant,
    ) -> Result<(), SubmitError> {
        self.now = self.now.max(now);
        if self.state != State::Ready {
            return Err(SubmitError::NotReady);
        }
        let data = (len > 0).then(|| (IoBuf::new(len), len, Dir::FromController));
        let deadline = now + self.cfg.command_timeout;
        self.queues[0]
            .submit(Owner::Io(tag), sqe, data, deadline)
            .map(drop)
            .ok_or(SubmitError::QueueFull)
    }

    fn admin_cmd(
        &mut self,
        owner: Owner,
        sqe: Sqe,
        data: Option<(IoBuf, usize, Dir)>,
        now: Instant,
    ) {
        self.admin_cmd_until(owner, sqe, data, now + self.cfg.command_timeout);
    }

    fn admin_cmd_until(&mut self, owner: Owner, sqe: Sqe, data: CmdData, deadline: Instant) {
        if self.queues[0].submit(owner, sqe, data, deadline).is_none() {
            self.fail(HostError::Incompatible("admin queue full".into()));
        }
    }

    fn step(&mut self, step: Step, sqe: Sqe, data: Option<(IoBuf, usize, Dir)>, now: Instant) {
        self.admin_cmd(Owner::Admin(step), sqe, data, now);
    }

    fn property_get(&mut self, step: Step, offset: u32, size: PropertySize, now: Instant) {
        let sqe = FabricsCommand::PropertyGet { size, offset }.to_sqe(Default::default());
        self.step(step, sqe, None, now);
    }

    fn property_set(&mut self, step: Step, offset: u32, value: u32, now: Instant) {
        if offset == property::CC {
            self.cc = value;
        }
        let cmd = FabricsCommand::PropertySet {
            size: PropertySize::Four,
            offset,
            value: u64::from(value),
        };
        self.step(step, cmd.to_sqe(Default::default()), None, now);
    }

    fn identify(&mut self, step: Step, cns: u8, nsid: u32, now: Instant) {
        let sqe = identify::command(cns, nsid);
        let buf = IoBuf::new(identify::IDENTIFY_LEN);
        self.step(step, sqe, Some((buf, identify::IDENTIFY_LEN, Dir::FromController)), now);
    }

    fn get_log(&mut self, step: Step, lid: u8, lpo: u64, len: usize, now: Instant) {
        let sqe = GetLogPage { lid, lsp: 0, rae: false, len: len as u64, lpo }.to_sqe();
        self.step(step, sqe, Some((IoBuf::new(len), len, Dir::FromController)), now);
    }

    fn connect(&mut self, qid: u16, sqsize: u16, now: Instant) {
        let kato =
            if qid == 0 { self.cfg.kato.as_millis().min(u128::from(u32::MAX)) as u32 } else { 0 };
        let cattr = if self.cfg.disable_sq_flow_control {
            FabricsCommand::CATTR_DISABLE_SQ_FLOW_CONTROL
        } else {
            0
        };
        let cmd = FabricsCommand::Connect { recfmt: 0, qid, sqsize, cattr, kato };
        let data = ConnectData {
            hostid: self.cfg.hostid,
            cntlid: if qid == 0 { ConnectData::DYNAMIC_CNTLID } else { self.cntlid },
            subnqn: self.cfg.subnqn.clone(),
            hostnqn: self.cfg.hostnqn.clone(),
        };
        let mut raw = [0u8; ConnectData::LEN];
        data.emit(&mut raw);
        let buf = IoBuf::from_vec(raw.to_vec());
        let owner = Owner::Admin(if qid == 0 { Step::Connect } else { Step::ConnectIo });
        let deadline = now + self.cfg.command_timeout;
        let sqe = cmd.to_sqe(Default::default());
        let q = &mut self.queues[usize::from(qid)];
        if q.submit(owner, sqe, Some((buf, ConnectData::LEN, Dir::ToController)), deadline)
            .is_none()
        {
            self.fail(HostError::Incompatible("queue full at Connect".into()));
        }
    }

    /// Act on what queue `qid` reported.
    fn drain(&mut self, qid: u16, now: Instant) {
        while let Some(ev) = self.queues.get_mut(usize::from(qid)).and_then(|q| q.poll_event()) {
            match ev {
                QueueEvent::Established => {
                    let size = if qid == 0 { ADMIN_QUEUE_SIZE } else { self.io_queue_size };
                    self.connect(qid, size - 1, now);
                }
                QueueEvent::Completion { cmd, status, cqe } => match cmd.owner {
                    Owner::Io(tag) => self.completed(qid, tag, cmd, status, cqe, now),
                    // The host's own commands of an association that is gone.
                    _ if matches!(self.state, State::Resetting | State::Failed | State::Closed) => {
                    }
                    Owner::Abort => {
                        // DW0 bit 0 clear: the command was aborted and
                        // completes (Abort Requested) on its own queue.
                        let aborted = status.is_success() && cqe.dw0 & 1 == 0;
                        debug!(parent: &self.span, %status, aborted, "abort completed");
                    }
                    Owner::Aer => {
                        if status.is_success() {
                            self.events.push_back(HostEvent::AsyncEvent(cqe.dw0));
                            self.admin_cmd(
                                Owner::Aer,
                                Sqe::new(admin::ASYNC_EVENT_REQUEST, 0, Default::default()),
                                None,
                                now,
                            );
                        }
                    }
                    Owner::KeepAlive => {
                        if !status.is_success() {
                            warn!(parent: &self.span, %status, "keep alive failed");
                        }
                    }
                    Owner::Admin(step) => {
                        let result = cqe.result64();
                        if let Err(e) = self.advance(qid, step, status, result, cmd.buf(), now) {
                            self.fail(e);
                        }
                    }
                },
                QueueEvent::Failed(error) => {
                    let expected = matches!(self.state, State::ShuttingDown | State::Closed)
                        && error == QueueError::TransportClosed;
                    if !expected {
                        self.fail(HostError::Queue { qid, error });
                    }
                }
            }
        }
    }

    /// I/O `tag` completed on queue `qid`. An error the controller lets us
    /// retry (DNR clear) is submitted again, up to [`MAX_RETRIES`] times,
    /// as Linux does.
    fn completed(
        &mut self,
        qid: u16,
        tag: u64,
        cmd: Command,
        status: Status,
        cqe: Cqe,
        now: Instant,
    ) {
        self.aborted.retain(|&(q, c)| (q, c) != (qid, cqe.cid));
        let tries =
            if self.tries.is_empty() { 0 } else { self.tries.remove(&(qid, tag)).unwrap_or(0) };
        let retry = qid > 0 && !status.is_success() && !status.is_dnr() && tries < MAX_RETRIES;
        if retry && self.state == State::Ready {
            debug!(parent: &self.span, qid, %status, tries, "retrying a failed command");
            self.retry.push_back(Retry { qid, tag, cmd, tries: tries + 1 });
        } else {
            self.events.push_back(HostEvent::Completion { qid, tag, status, buf: cmd.buf() });
        }
        if !self.retry.is_empty() && self.state == State::Ready {
            self.resubmit(now);
        }
    }

    /// Submit waiting retries while their queues have room.
    fn resubmit(&mut self, now: Instant) {
        let io_queues = self.io_queues();
        while let Some(r) = self.retry.pop_front() {
            // The new association may have fewer I/O queues.
            let qid = if r.qid == 0 || io_queues == 0 { 0 } else { (r.qid - 1) % io_queues + 1 };
            let Command { owner, sqe, data } = r.cmd;
            let q = &mut self.queues[usize::from(qid)];
            let deadline = now + self.cfg.command_timeout;
            if q.submit(owner, sqe, data.clone(), deadline).is_none() {
                // Full: the next completion makes room.
                self.retry.push_front(Retry { cmd: Command { owner, sqe, data }, ..r });
                return;
            }
            self.tries.insert((qid, r.tag), r.tries);
            self.recovery.retried += 1;
        }
    }

    /// The next bring-up, discovery or shutdown step after `step` completed.
    fn advance(
        &mut self,
        qid: u16,
        step: Step,
        status: Status,
        result: u64,
        buf: Option<IoBuf>,
        now: Instant,
    ) -> Result<(), HostError> {
        if !status.is_success() {
            let subnqn_refused = (result >> 16) & 0xff == 1
                && result & 0xffff == u64::from(ConnectData::OFFSET_SUBNQN);
            return Err(match step {
                Step::Connect | Step::ConnectIo
                    if status == Status::CONNECT_INVALID_PARAMETERS && subnqn_refused =>
                {
                    HostError::NoSuchSubsystem(self.cfg.subnqn.clone())
                }
                Step::Connect | Step::ConnectIo if status == Status::CONNECT_INVALID_HOST => {
                    HostError::HostNotAllowed(self.cfg.hostnqn.clone())
                }
                _ => HostError::Refused { step: step.name(), status },
            });
        }
        let page = |buf: &Option<IoBuf>| buf.as_ref().map(IoBuf::to_vec).unwrap_or_default();
        match step {
            Step::Connect => {
                self.cntlid = result as u16;
                debug!(parent: &self.span, cntlid = self.cntlid, "admin queue connected");
                self.property_get(Step::GetCap, property::CAP, PropertySize::Eight, now);
            }
            Step::GetCap => {
                self.cap = result;
                if (self.cap >> 48) & 0xf != 0 {
                    return Err(HostError::Incompatible("CAP.MPSMIN above 4 KiB".into()));
                }
                // EN clear first, as Linux does, then EN.
                self.property_set(
                    Step::WriteCc,
                    property::CC,
                    property::CC_ENABLE & !property::CC_EN,
                    now,
                );
            }
            Step::WriteCc => {
                self.property_set(Step::EnableCc, property::CC, property::CC_ENABLE, now)
            }
            Step::EnableCc => {
                let timeout = Duration::from_millis(property::cap_timeout_ms(self.cap).max(500));
                self.poll_deadline = Some(now + timeout);
                self.property_get(Step::PollReady, property::CSTS, PropertySize::Four, now);
            }
            Step::PollReady => {
                let csts = result as u32;
                if csts & property::CSTS_CFS != 0 {
                    return Err(HostError::Incompatible(
                        "controller fatal status while enabling".into(),
                    ));
                }
                if csts & property::CSTS_RDY == 0 {
                    self.repoll = Some((now + CSTS_POLL, Step::PollReady));
                    return Ok(());
                }
                self.poll_deadline = None;
                self.property_get(Step::GetVs, property::VS, PropertySize::Four, now);
            }
            Step::GetVs => {
                self.vs = result as u32;
                self.identify(Step::IdentifyController, cns::CONTROLLER, 0, now);
            }
            Step::IdentifyController => {
                let id = IdentifyController::parse(&page(&buf)).ok_or_else(|| {
                    HostError::Incompatible("short Identify Controller data".into())
                })?;
                self.check_controller(&id)?;
                if self.cfg.kato > Duration::ZERO && id.kas > 0 {
                    let period = self.cfg.kato / 2;
                    self.keep_alive = Some((now + period, period));
                }
                self.ctrl = Some(id);
                if self.discovery {
                    self.get_log(Step::DiscoveryHeader, lid::DISCOVERY, 0, 1024, now);
                } else {
                    let n = u32::from(self.cfg.io_queues.max(1)) - 1;
                    let mut sqe = Sqe::new(admin::SET_FEATURES, 0, Default::default());
                    sqe.cdw10 = u32::from(fid::NUMBER_OF_QUEUES);
                    sqe.cdw11 = n | (n << 16);
                    self.step(Step::SetQueues, sqe, None, now);
                }
            }
            Step::SetQueues => {
                let granted = (result as u16).min((result >> 16) as u16).saturating_add(1);
                let n = self.cfg.io_queues.max(1).min(granted);
                let mqes = property::cap_mqes(self.cap).saturating_add(1).max(2);
                let maxcmd = self.ctrl.as_ref().map_or(0, |c| c.maxcmd);
                let mut size = self.cfg.queue_depth.saturating_add(1).min(mqes);
                if maxcmd >= 2 {
                    size = size.min(maxcmd);
                }
                self.io_queue_size = size.max(2);
                let inline =
                    self.ctrl.as_ref().map_or(0, |c| (c.ioccsz as usize * 16).saturating_sub(64));
                for qid in 1..=n {
                    self.queues.push(self.transport.queue(qid, self.io_queue_size, inline));
                    self.connect_pending.push_back(qid);
                }
                debug!(parent: &self.span, queues = n, size = self.io_queue_size, "connecting I/O queues");
            }
            Step::ConnectIo => {
                self.io_connected += 1;
                debug!(parent: &self.span, qid, "I/O queue connected");
                if self.io_connected == self.io_queues() {
                    self.admin_cmd(
                        Owner::Aer,
                        Sqe::new(admin::ASYNC_EVENT_REQUEST, 0, Default::default()),
                        None,
                        now,
                    );
                    self.identify(Step::NsList, cns::ACTIVE_NS_LIST, 0, now);
                }
            }
            Step::NsList => {
                self.ns_pending = identify::parse_ns_list(&page(&buf)).into();
                self.next_namespace(now);
            }
            Step::IdentifyNs(nsid) => {
                if let Some(ns) = IdentifyNamespace::parse(&page(&buf))
                    && ns.ncap > 0
                    && (512..=65536).contains(&ns.block_size())
                {
                    let block_size = ns.block_size() as u32;
                    self.namespaces.push(NamespaceInfo {
                        nsid,
                        blocks: ns.nsze,
                        used: ns.nuse,
                        block_size,
                    });
                }
                self.next_namespace(now);
            }
            Step::DiscoveryHeader => {
                let (_, numrec) =
                    crate::nvme::log::parse_discovery_header(&page(&buf)).unwrap_or((0, 0));
                self.discovery_numrec = numrec.min(1024);
                if self.discovery_numrec == 0 {
                    self.events.push_back(HostEvent::Discovered(Vec::new()));
                    self.shutdown(now);
                } else {
                    let len = self.discovery_numrec as usize * DiscoveryEntry::LEN;
                    self.get_log(
                        Step::DiscoveryEntries,
                        lid::DISCOVERY,
                        DiscoveryEntry::LEN as u64,
                        len,
                        now,
                    );
                }
            }
            Step::DiscoveryEntries => {
                let raw = page(&buf);
                let entries =
                    raw.chunks(DiscoveryEntry::LEN).filter_map(DiscoveryEntry::parse).collect();
                self.events.push_back(HostEvent::Discovered(entries));
                self.shutdown(now);
            }
            Step::Disable => self.begin_reconnect(None, Duration::ZERO),
            Step::Shutdown => {
                self.poll_deadline = Some(now + SHUTDOWN_TIMEOUT);
                self.property_get(Step::PollShutdown, property::CSTS, PropertySize::Four, now);
            }
            Step::PollShutdown => {
                let done = result as u32 & property::CSTS_SHST_MASK == property::CSTS_SHST_COMPLETE;
                if done {
                    self.close_all();
                } else {
                    self.repoll = Some((now + CSTS_POLL, Step::PollShutdown));
                }
            }
        }
        Ok(())
    }

    fn next_namespace(&mut self, now: Instant) {
        match self.ns_pending.pop_front() {
            Some(nsid) => self.identify(Step::IdentifyNs(nsid), cns::NAMESPACE, nsid, now),
            None => {
                info!(parent: &self.span, cntlid = self.cntlid, queues = self.io_queues(), namespaces = self.namespaces.len(), "ready");
                self.state = State::Ready;
                self.bring_up_deadline = None;
                if self.lost_at.take().is_some() {
                    self.recovery.reconnects += 1;
                    self.last_error = None;
                    self.events.push_back(HostEvent::Reconnected);
                    self.resubmit(now);
                } else {
                    self.events.push_back(HostEvent::Ready);
                }
            }
        }
    }

    /// Refuse controllers a Linux host would refuse.
    fn check_controller(&self, id: &IdentifyController) -> Result<(), HostError> {
        let bad = |why: String| Err(HostError::Incompatible(why));
        if id.cntlid != self.cntlid {
            return bad(format!(
                "Identify CNTLID {} differs from Connect's {}",
                id.cntlid, self.cntlid
            ));
        }
        if id.icdoff != 0 {
            return bad("in-capsule data offset (ICDOFF) is not 0".into());
        }
        if id.sgls & 0x3 == 0 {
            return bad("controller does not support SGLs".into());
        }
        if self.discovery {
            if id.cntrltype != identify::CNTRLTYPE_DISCOVERY && id.subnqn != DISCOVERY_NQN {
                return bad("not a discovery controller".into());
            }
        } else if id.ioccsz < 4 || id.iorcsz < 1 {
            return bad(format!(
                "capsule sizes IOCCSZ {} / IORCSZ {} too small",
                id.ioccsz, id.iorcsz
            ));
        }
        Ok(())
    }

    /// The association failed. Once it has been up, it is reset and made
    /// again (until ctrl-loss-tmo); a first bring-up fails for good, as a
    /// Linux `nvme connect` does.
    fn fail(&mut self, e: HostError) {
        let live_once = match self.state {
            State::Failed | State::Closed | State::Resetting => return,
            State::Ready | State::Disabling => true,
            State::BringUp => self.lost_at.is_some(),
            State::ShuttingDown => false,
        };
        if live_once && self.cfg.ctrl_loss_tmo != Some(Duration::ZERO) {
            warn!(parent: &self.span, error = %e, "association lost");
            self.last_error = Some(e.clone());
            self.begin_reconnect(Some(e), self.cfg.reconnect_delay);
        } else {
            self.give_up(e);
        }
    }

    /// Tear the association down and make a new one after `delay`;
    /// commands that did not complete wait to be submitted again.
    fn begin_reconnect(&mut self, error: Option<HostError>, delay: Duration) {
        let now = self.now;
        self.lost_at.get_or_insert(now);
        debug!(parent: &self.span, ?delay, "reconnecting");
        self.stop_queues();
        self.state = State::Resetting;
        self.reconnect_at = Some(now + delay);
        self.events.push_back(HostEvent::Reconnecting { error, delay });
    }

    /// Stop every queue and forget the association's timers.
    fn stop_queues(&mut self) {
        self.repoll = None;
        self.poll_deadline = None;
        self.keep_alive = None;
        self.bring_up_deadline = None;
        self.connect_pending.clear();
        self.aborted.clear();
        for qid in 0..self.queues.len() as u16 {
            self.stop_queue(qid);
        }
        self.tries.clear();
    }

    /// Abort queue `qid` and close its transport. I/O that did not
    /// complete waits for a new association (past its retries it fails);
    /// the host's own commands are made again by bring-up.
    fn stop_queue(&mut self, qid: u16) {
        let q = &mut self.queues[usize::from(qid)];
        let cmds = q.abort_all();
        q.close();
        for (cmd, answered) in cmds {
            let Owner::Io(tag) = cmd.owner else { continue };
            let tries = self.tries.remove(&(qid, tag)).unwrap_or(0);
            if answered.is_none() && qid > 0 && tries < MAX_RETRIES {
                self.retry.push_back(Retry { qid, tag, cmd, tries: tries + 1 });
            } else {
                let status = answered.map_or(Status::HOST_ABORTED, |(s, _)| s);
                let buf = cmd.buf();
                self.events.push_back(HostEvent::Completion { qid, tag, status, buf });
            }
        }
    }

    /// Time to try a new association, unless ctrl-loss-tmo has passed.
    fn reconnect(&mut self, now: Instant) {
        self.reconnect_at = None;
        let lost = now.saturating_since(self.lost_at.unwrap_or(now));
        if self.cfg.ctrl_loss_tmo.is_some_and(|tmo| lost >= tmo) {
            let last = Box::new(self.last_error.take().unwrap_or(HostError::Timeout("reconnect")));
            return self.give_up(HostError::ControllerLost { after: lost, last });
        }
        info!(parent: &self.span, ?lost, "reconnecting");
        self.connect_pending = VecDeque::from([0]);
        self.cntlid = 0;
        self.io_connected = 0;
        self.namespaces.clear();
        self.ns_pending.clear();
        self.state = State::BringUp;
        self.bring_up_deadline = Some(now + self.cfg.command_timeout);
    }

    /// Fail for good: every command not yet completed completes with an
    /// error first.
    fn give_up(&mut self, e: HostError) {
        if matches!(self.state, State::Failed | State::Closed) {
            return;
        }
        info!(parent: &self.span, error = %e, "association failed");
        self.stop_queues();
        self.fail_retries();
        self.state = State::Failed;
        self.events.push_back(HostEvent::Failed(e));
    }

    fn fail_retries(&mut self) {
        for r in std::mem::take(&mut self.retry) {
            let buf = r.cmd.buf();
            let (qid, tag, status) = (r.qid, r.tag, Status::HOST_PATH_ERROR);
            self.events.push_back(HostEvent::Completion { qid, tag, status, buf });
        }
    }

    fn close_all(&mut self) {
        self.stop_queues();
        self.fail_retries();
        self.reconnect_at = None;
        self.state = State::Closed;
        self.events.push_back(HostEvent::Closed);
    }
}
