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
//!
//! This file holds the association's state and the driver's side of it,
//! and turns what the queues report into the host's steps. The steps live
//! apart: `bring_up` (Connect to CC.SHN, discovery), `recovery` (abort,
//! retry, reconnect, reset), `io` (what users submit), `timer` (the host's
//! own deadlines), `queue` (what a binding's queue is, and the command
//! table every binding keeps), `config` (what a user asks for), `sets`
//! (I/O queues lent to hosts of their own, each for a thread).

mod auth;
mod bring_up;
mod config;
mod io;
mod queue;
mod recovery;
mod sets;
mod step;
mod timer;

pub use config::{
    DEFAULT_COMMAND_TIMEOUT, DEFAULT_CTRL_LOSS_TMO, DEFAULT_RECONNECT_DELAY, DhchapSecrets,
    HostConfig, MAX_RETRIES,
};
pub use io::{Io, IoKind, SubmitError};
pub use queue::{
    Cmd, CmdData, Command, CommandTable, Commands, Dir, HostQueue, Owner, QueueError, QueueEvent,
    Transport,
};
pub use recovery::Recovery;
pub use step::{AuthStep, Step};

use crate::nvme::identify::IdentifyController;
use crate::nvme::log::DiscoveryEntry;
use crate::nvme::{DISCOVERY_NQN, PropertySize, Sqe, Status, admin, property};
use crate::stats::{TxStats, UlpStats};
use crate::time::{Instant, earliest};
use recovery::Retry;
use std::collections::{BTreeSet, HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;
use timer::{Timer, TimerTable};
use tracing::{debug, warn};
use ulp_ddp::{IoBuf, SliceSink, TxSink};

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
    #[error("host {0} is not allowed into the subsystem ({status}): the controller must list this HOSTNQN (nvmet's allowed_hosts, `nvme-ddp controller --allow-host`), or connect with --hostnqn of one it lists", status = Status::CONNECT_INVALID_HOST)]
    HostNotAllowed(String),
    /// The controller asks for DH-HMAC-CHAP and the host has no secret.
    #[error(
        "the controller requires host {0} to authenticate (DH-HMAC-CHAP): give its secret (--dhchap-secret, as nvme connect's)"
    )]
    NoSecret(String),
    /// The host asked the controller to authenticate (a controller
    /// secret), and the controller did not ask for authentication at all.
    #[error(
        "the controller does not authenticate, but --dhchap-ctrl-secret asks it to prove itself; refusing it"
    )]
    ControllerNotAuthenticated,
    /// DH-HMAC-CHAP failed on a queue.
    #[error("authentication failed on queue {qid}: {}", describe_refusal(*refusal))]
    Authentication { qid: u16, refusal: crate::auth::Refusal },
    #[error("controller cannot be used: {0}")]
    Incompatible(String),
    #[error("timed out waiting for {0}")]
    Timeout(&'static str),
    /// Reconnecting failed for ctrl-loss-tmo; the last attempt's error.
    #[error("controller lost: no association for {:.1} s, past ctrl-loss-tmo; the last attempt: {last}", after.as_secs_f64())]
    ControllerLost { after: Duration, last: Box<HostError> },
}

fn describe_refusal(r: crate::auth::Refusal) -> String {
    use crate::auth::{Explanation, Refusal};
    match r {
        Refusal::ByController(Explanation::Failed) => {
            "the controller refused the host's response: the host's secret (--dhchap-secret) is not the one the controller holds for this HOSTNQN".into()
        }
        Refusal::ByController(why) => format!("the controller refused: {why}"),
        Refusal::ByHost(Explanation::Failed) => {
            "the controller did not prove it holds the controller secret (--dhchap-ctrl-secret)".into()
        }
        Refusal::ByHost(why) => format!("the controller's message was wrong: {why}"),
    }
}

impl HostError {
    /// Errors another attempt cannot mend: the host gives up at once,
    /// as Linux does on -EKEYREJECTED and -ENOKEY.
    pub fn is_final(&self) -> bool {
        matches!(
            self,
            HostError::NoSecret(_)
                | HostError::Authentication { .. }
                | HostError::ControllerNotAuthenticated
        )
    }
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
    discovery_genctr: u64,
    /// The host's own deadlines, apart from its commands'.
    timers: TimerTable,
    /// Since when the controller is lost, while reconnecting.
    lost_at: Option<Instant>,
    last_error: Option<HostError>,
    /// Commands waiting to be submitted again, with their queue and how
    /// often they were.
    retry: VecDeque<Retry>,
    /// Tries of the commands submitted again and still outstanding, by
    /// queue and tag.
    tries: HashMap<(u16, u64), u8>,
    /// Commands an Abort was sent for, by queue and CID.
    aborted: Vec<(u16, u16)>,
    recovery: Recovery,
    /// Queues another host holds (lent to a set; in a set, those it was
    /// not lent): inert stand-ins here.
    lent: BTreeSet<u16>,
    /// This host is a set of I/O queues lent by an association's host.
    set: bool,
    /// Associations made so far: which one is up (or was, while another
    /// is being made).
    association: u64,
    /// DH-HMAC-CHAP transactions in progress, by queue.
    auth: HashMap<u16, auth::Transaction>,
    /// Transactions started so far: the next one's T_ID.
    auth_transactions: u16,
    /// The latest time passed in.
    now: Instant,
    span: tracing::Span,
}

/// The admin queue's size (Linux: 32).
const ADMIN_QUEUE_SIZE: u16 = 32;

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
            discovery_genctr: 0,
            timers: TimerTable::default(),
            lost_at: None,
            last_error: None,
            retry: VecDeque::new(),
            tries: HashMap::new(),
            aborted: Vec::new(),
            recovery: Recovery::default(),
            lent: BTreeSet::new(),
            set: false,
            association: 0,
            auth: HashMap::new(),
            auth_transactions: 0,
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
            self.lent.clear();
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
    pub fn poll_send(&mut self, qid: u16, out: &mut dyn TxSink) -> usize {
        let Some(q) = self.queues.get_mut(usize::from(qid)) else { return 0 };
        let n = q.poll_send(out);
        let now = self.now;
        self.drain(qid, now);
        match self.queues.get_mut(usize::from(qid)) {
            Some(q) if n == 0 => q.poll_send(out),
            _ => n,
        }
    }

    /// [`poll_send`](Self::poll_send) into a plain buffer, by copy.
    pub fn poll_transmit(&mut self, qid: u16, out: &mut [u8]) -> usize {
        self.poll_send(qid, &mut SliceSink::new(out))
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

    /// The transport of queue `qid` could not be made (`error` says why):
    /// while reconnecting, one more failed attempt, whose error is the
    /// last one's if the host gives up; otherwise the association fails
    /// with it.
    pub fn connect_failed(
        &mut self,
        qid: u16,
        error: impl std::error::Error + Send + Sync + 'static,
        now: Instant,
    ) {
        self.now = self.now.max(now);
        self.fail(HostError::Queue { qid, error: QueueError::transport(error) });
    }

    pub fn poll_event(&mut self) -> Option<HostEvent> {
        self.events.pop_front()
    }

    pub fn poll_timeout(&self) -> Option<Instant> {
        match self.state {
            State::Failed | State::Closed => None,
            // The queues are gone; only the reconnect is set.
            State::Resetting => self.timers.next_timeout(),
            _ => self.queues.iter().fold(self.timers.next_timeout(), |t, q| {
                earliest(earliest(t, q.commands().deadline()), q.poll_timeout())
            }),
        }
    }

    pub fn handle_timeout(&mut self, now: Instant) {
        self.now = self.now.max(now);
        match self.state {
            State::Failed | State::Closed => return,
            State::Resetting => {
                if self.timers.expire(Timer::Reconnect, now) {
                    self.reconnect(now);
                }
                return;
            }
            _ => {}
        }
        if self.timers.expire(Timer::BringUp, now) {
            return self.fail(HostError::Timeout("the association to come up"));
        }
        for qid in 0..self.queues.len() as u16 {
            if self.queues[usize::from(qid)].poll_timeout().is_some_and(|t| now >= t) {
                self.queues[usize::from(qid)].handle_timeout(now);
                self.drain(qid, now);
            }
        }
        let shutting_down = self.state == State::ShuttingDown;
        if self.timers.expire(Timer::CstsLimit, now) {
            return self.fail(HostError::Timeout(if shutting_down {
                "shutdown"
            } else {
                "CSTS.RDY"
            }));
        }
        if self.timers.expire(Timer::CstsPoll, now) {
            let step = if shutting_down { Step::PollShutdown } else { Step::PollReady };
            self.property_get(step, property::CSTS, PropertySize::Four, now);
        }
        if self.timers.expire(Timer::KeepAlive, now) {
            self.timers.set(Timer::KeepAlive, now + self.cfg.kato / 2);
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
    /// The generation counter (GENCTR) of the discovery log read last.
    pub fn discovery_genctr(&self) -> u64 {
        self.discovery_genctr
    }

    pub fn io_queues(&self) -> u16 {
        self.queues.len() as u16 - 1
    }

    /// Commands that may be outstanding on each I/O queue.
    pub fn queue_depth(&self) -> usize {
        // Asked on every submission: no list of queues made for it.
        let first = (1..self.queues.len()).find(|&q| !self.lent.contains(&(q as u16)));
        first.map_or(0, |q| self.queues[q].commands().depth())
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
                        let e = self.auth_failure(qid, &error);
                        let e = e.unwrap_or(HostError::Queue { qid, error });
                        self.fail(e);
                    }
                }
            }
        }
    }
}
