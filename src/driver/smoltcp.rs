//! NVMe/TCP over smoltcp. A [`HostSide`] and a [`ControllerSide`] each own
//! a stack; a step polls it and moves bytes between its sockets and the
//! sans-IO host or controller. Run each side on its own thread in real time
//! ([`run_host`], [`serve`]), or both in one thread in simulated time
//! ([`run_simulated`]), where time jumps to the next deadline and a lost
//! frame costs microseconds, not a one-second retransmission timeout.
//!
//! It moves bytes and time only; it must never interpret NVMe (that is
//! the sans-IO host's and controller's) or decide what a run does.

use crate::app::HostApp;
use crate::driver::clock::Clock;
use crate::driver::transport::Listener;
use nic_backend::{NicConfig, NicHandle, OffloadNic};
use nvme_of::TxStats;
use nvme_of::UlpStats;
use nvme_of::controller::ControllerQueue;
use nvme_of::controller::Target;
use nvme_of::host::Host;
use smoltcp::time::Instant as SmolInstant;
use smoltcp_glue::stack::StackError;
use smoltcp_glue::{Capture, Impairments, Medium, PcapFile, Profile, Stack, TcpConn};
use std::collections::BTreeMap;
use std::net::SocketAddrV4;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use ulp_ddp::{DdpDevice, FlowId};

/// What every stack runs on: the software NIC, over a capture of what it
/// sees (disabled unless asked for), over impairments on received frames,
/// over the medium.
pub type Chain<M> = OffloadNic<Capture<Impairments<M>>>;

/// Wrap `medium` in the standard decorators, the NIC starting with
/// `offload` active. Returns the NIC's handle too.
pub fn chain<M: Medium>(
    medium: M,
    rx: Profile,
    seed: u64,
    pcap: Option<&std::path::Path>,
    offload: ulp_ddp::Caps,
) -> std::io::Result<(Chain<M>, NicHandle)> {
    let dev = Impairments::new(medium, rx, Profile::default(), seed);
    let captured = Capture::new(dev, pcap.map(PcapFile::create).transpose()?);
    let nic = OffloadNic::new(captured, NicConfig { active: offload, ..NicConfig::default() });
    let handle = nic.handle();
    Ok((nic, handle))
}

/// The sans-IO code's clock reading for a smoltcp instant.
pub fn to_nvme(t: SmolInstant) -> nvme_of::Instant {
    nvme_of::Instant::from_micros(t.total_micros().max(0) as u64)
}

pub fn to_smol(t: nvme_of::Instant) -> SmolInstant {
    SmolInstant::from_micros(t.as_micros() as i64)
}

/// smoltcp's time in the sans-IO code's (never before its epoch).
pub fn from_smol(t: SmolInstant) -> nvme_of::Instant {
    nvme_of::Instant::from_micros(t.total_micros().max(0) as u64)
}

/// Why a run over smoltcp stopped.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error(transparent)]
    Stack(#[from] StackError),
    #[error("nothing left to do, but the run is not finished (simulated time {0:?})")]
    Stuck(Duration),
    #[error("the run did not finish within its limit of {} s", .0.as_secs())]
    Timeout(Duration),
    #[error("the run did not finish within its limit of {} s of simulated time", .0.as_secs())]
    SimulatedTimeout(Duration),
    #[error("cannot connect to {addr}: {why}")]
    Connect { addr: SocketAddrV4, why: ConnectError },
}

/// Why a connection to the controller was not made.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    #[error("connection refused (answered with a reset: nothing listens on that port)")]
    Refused,
    #[error("no answer in {} s (no controller at that address, or none reachable)", .0.as_secs())]
    NoAnswer(Duration),
}

/// Host timeouts that survive smoltcp's recovery from loss on an impaired
/// wire (the demo's and the bench's): its retransmission timeout doubles
/// on each repeat, so a few losses in a row outlast Linux's 5 s keep alive.
pub const IMPAIRED_KATO: Duration = Duration::from_secs(30);
pub const IMPAIRED_IO_TIMEOUT: Duration = Duration::from_secs(120);

/// How long a host waits for a TCP connection to its controller, as over
/// kernel TCP.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

struct QueueConn {
    conn: TcpConn,
    /// When the connection was opened, until it is up.
    opened: nvme_of::Instant,
    up: bool,
    closed: bool,
}

/// A host on a smoltcp stack, its I/O queues offloaded to `ddp` if given.
pub struct HostSide<D: Medium> {
    pub stack: Stack<D>,
    pub host: Host,
    remote: SocketAddrV4,
    queues: BTreeMap<u16, QueueConn>,
    /// Connections reset, to forget after the next poll.
    retired: Vec<TcpConn>,
    ddp: Option<Arc<dyn DdpDevice>>,
}

impl<D: Medium> HostSide<D> {
    pub fn new(
        stack: Stack<D>,
        host: Host,
        remote: SocketAddrV4,
        ddp: Option<Arc<dyn DdpDevice>>,
    ) -> Self {
        Self { stack, host, remote, queues: BTreeMap::new(), retired: Vec::new(), ddp }
    }

    /// The TCP connection of queue `qid`, once opened.
    pub fn conn(&self, qid: u16) -> Option<&TcpConn> {
        self.queues.get(&qid).map(|q| &q.conn)
    }

    /// One turn: poll the stack, open and feed connections, let the app
    /// react. Returns whether anything happened.
    pub fn step(&mut self, app: &mut dyn HostApp, now: SmolInstant) -> Result<bool, RunError> {
        let t = to_nvme(now);
        let mut progress = self.stack.poll(now);
        for conn in self.retired.drain(..) {
            self.stack.release(conn);
        }
        while let Some(qid) = self.host.poll_connect() {
            let conn = self.stack.connect(self.remote)?;
            let q = QueueConn { conn, opened: t, up: false, closed: false };
            let old = self.queues.insert(qid, q);
            // A connection left from a lost association: reset it, and
            // forget it once the reset is out.
            if let Some(old) = old {
                self.stack.abort(&old.conn);
                self.retired.push(old.conn);
            }
            progress = true;
        }
        if self.host.poll_timeout().is_some_and(|d| t >= d) {
            self.host.handle_timeout(t);
            progress = true;
        }
        progress |= self.pump(t)?;
        while let Some(ev) = self.host.poll_event() {
            app.on_event(&mut self.host, ev, t);
            progress = true;
        }
        app.on_poll(&mut self.host, t);
        progress |= self.pump(t)?;
        progress |= self.stack.poll(now);
        Ok(progress)
    }

    fn pump(&mut self, t: nvme_of::Instant) -> Result<bool, RunError> {
        let mut progress = false;
        let (stack, host) = (&mut self.stack, &mut self.host);
        for (&qid, q) in self.queues.iter_mut().filter(|(_, q)| !q.closed) {
            if !q.up {
                if stack.is_established(&q.conn) {
                    host.connected(qid, t);
                    if let (Some(dev), Some((local, remote))) =
                        (&self.ddp, stack.endpoints(&q.conn))
                    {
                        host.attach_ddp(qid, dev.clone(), FlowId { local, remote });
                    }
                    q.up = true;
                    progress = true;
                } else if stack.is_finished(&q.conn) || t >= q.opened + CONNECT_TIMEOUT {
                    let why = match stack.is_finished(&q.conn) {
                        true => ConnectError::Refused,
                        false => ConnectError::NoAnswer(CONNECT_TIMEOUT),
                    };
                    // While reconnecting it is one more failed attempt for
                    // the host to retry; at first it is the answer.
                    let error = RunError::Connect { addr: self.remote, why };
                    if !host.is_reconnecting() {
                        return Err(error);
                    }
                    stack.abort(&q.conn);
                    host.connect_failed(qid, error, t);
                    q.closed = true;
                    progress = true;
                    continue;
                } else {
                    continue;
                }
            }
            progress |= stack.recv(&mut q.conn, |b| host.handle_input(qid, b, t)) > 0;
            progress |= stack.send(&mut q.conn, |out| host.poll_send(qid, out)) > 0;
            if host.is_closed(qid) && host.pending_output(qid) == 0 {
                stack.close(&q.conn);
                q.closed = true;
                progress = true;
            } else if stack.is_finished(&q.conn) {
                host.transport_closed(qid, t);
                stack.close(&q.conn);
                q.closed = true;
                progress = true;
            }
        }
        Ok(progress)
    }

    pub fn poll_at(&mut self, now: SmolInstant) -> Option<SmolInstant> {
        let h = self.host.poll_timeout().map(to_smol);
        let connects = self.queues.values().filter(|q| !q.up && !q.closed);
        let connect = connects.map(|q| to_smol(q.opened + CONNECT_TIMEOUT)).min();
        [self.stack.poll_at(now), h, connect].into_iter().flatten().min()
    }

    /// Everything the host said has left the send rings.
    pub fn flushed(&self) -> bool {
        self.queues.values().all(|q| q.closed || self.stack.send_queue(&q.conn) == 0)
    }
}

struct CtrlConn {
    conn: TcpConn,
    ep: Box<dyn ControllerQueue>,
    /// When our side closed: its socket is forgotten once the close is
    /// done, or [`LINGER`] after this if the peer never finishes it.
    closed: Option<SmolInstant>,
}

/// How long a closed connection may wait for the peer to finish the close
/// (ACK our FIN, send its own) before it is reset.
const LINGER: smoltcp::time::Duration = smoltcp::time::Duration::from_secs(5);

/// A controller on a smoltcp stack, listening on one port, its I/O queues
/// offloaded to `ddp` if given.
pub struct ControllerSide<D: Medium> {
    pub stack: Stack<D>,
    target: Arc<Target>,
    listener: Listener,
    conns: Vec<CtrlConn>,
    ddp: Option<Arc<dyn DdpDevice>>,
    /// Work of connections that have closed.
    closed_stats: (UlpStats, TxStats),
    /// Connections accepted.
    accepted: u64,
}

impl<D: Medium> ControllerSide<D> {
    pub fn new(
        mut stack: Stack<D>,
        target: Arc<Target>,
        port: u16,
        ddp: Option<Arc<dyn DdpDevice>>,
    ) -> Result<Self, RunError> {
        stack.listen(port, 16)?;
        Ok(Self {
            stack,
            target,
            listener: Listener::default(),
            conns: Vec::new(),
            ddp,
            closed_stats: Default::default(),
            accepted: 0,
        })
    }

    /// Serve this transport instead of NVMe/TCP.
    pub fn with_listener(mut self, listener: Listener) -> Self {
        self.listener = listener;
        self
    }

    /// What the controller's I/O queue connections did on their side of the
    /// offload: received data and sent data.
    pub fn stats(&self) -> (UlpStats, TxStats) {
        let (mut rx, mut tx) = self.closed_stats;
        for c in self.conns.iter().filter(|c| c.ep.qid().is_some_and(|q| q > 0)) {
            let (r, t) = c.ep.stats();
            rx.add(&r);
            tx.add(&t);
        }
        (rx, tx)
    }

    pub fn target(&self) -> &Arc<Target> {
        &self.target
    }

    /// Connections accepted so far.
    pub fn accepted(&self) -> u64 {
        self.accepted
    }

    /// Connections held now, their sockets' states.
    pub fn connections(&self) -> Vec<smoltcp::socket::tcp::State> {
        self.conns.iter().map(|c| self.stack.state(&c.conn)).collect()
    }

    pub fn step(&mut self, now: SmolInstant) -> bool {
        let t = to_nvme(now);
        let mut progress = self.stack.poll(now);
        let local = std::net::IpAddr::V4(self.stack.config().ip.address());
        while let Some(conn) = self.stack.accept() {
            if !self.target.admit_connection(self.conns.len()) {
                self.stack.abort(&conn);
                // The RST goes out with this poll; the socket is gone after.
                self.stack.poll(now);
                self.stack.release(conn);
                progress = true;
                continue;
            }
            let mut ep = self.listener.accept(self.target.clone(), Some(local), t);
            // Storage that answers later wakes this stack's loop alone.
            ep.wake_with(self.stack.device().waker());
            if let (Some(dev), Some((local, remote))) = (&self.ddp, self.stack.endpoints(&conn)) {
                ep.attach_ddp(dev.clone(), FlowId { local, remote });
            }
            self.conns.push(CtrlConn { conn, ep, closed: None });
            self.accepted += 1;
            progress = true;
        }
        let stack = &mut self.stack;
        for c in self.conns.iter_mut().filter(|c| c.closed.is_none()) {
            if c.ep.poll_timeout().is_some_and(|d| t >= d) {
                c.ep.handle_timeout(t);
            }
            progress |= stack.recv(&mut c.conn, |b| c.ep.handle_input(b, t)) > 0;
            progress |= stack.send(&mut c.conn, |out| c.ep.poll_send(out)) > 0;
            // Input refused for want of output room may go in now.
            progress |= stack.recv(&mut c.conn, |b| c.ep.handle_input(b, t)) > 0;
            if c.ep.is_closed() {
                stack.close(&c.conn);
                c.ep.transport_closed();
                c.closed = Some(now);
                progress = true;
            } else if stack.is_finished(&c.conn) {
                c.ep.transport_closed();
                stack.close(&c.conn);
                c.closed = Some(now);
                progress = true;
            }
        }
        // Forget connections whose close is done. TIME-WAIT is done for
        // us: smoltcp would hold the socket and both its rings there for
        // ten seconds, so a storm of short connections would hold their
        // rings by the thousand; a FIN the peer sends again meets a reset,
        // which ends its close as well. A peer that never finishes the
        // close (an ACK or a FIN that never comes) is reset after LINGER.
        use smoltcp::socket::tcp::State;
        let mut aborted = false;
        for c in &self.conns {
            if c.closed.is_some_and(|at| now >= at + LINGER)
                && !matches!(self.stack.state(&c.conn), State::Closed | State::TimeWait)
            {
                self.stack.abort(&c.conn);
                aborted = true;
            }
        }
        if aborted {
            // The resets go out before their sockets are forgotten.
            self.stack.poll(now);
            progress = true;
        }
        let gone: Vec<usize> = (0..self.conns.len())
            .filter(|&i| {
                let c = &self.conns[i];
                c.closed.is_some()
                    && matches!(self.stack.state(&c.conn), State::Closed | State::TimeWait)
            })
            .collect();
        for i in gone.into_iter().rev() {
            let c = self.conns.swap_remove(i);
            if c.ep.qid().is_some_and(|q| q > 0) {
                let (r, t) = c.ep.stats();
                self.closed_stats.0.add(&r);
                self.closed_stats.1.add(&t);
            }
            self.stack.release(c.conn);
        }
        progress | self.stack.poll(now)
    }

    pub fn poll_at(&mut self, now: SmolInstant) -> Option<SmolInstant> {
        let conns = self.conns.iter().filter_map(|c| c.ep.poll_timeout()).map(to_smol).min();
        let linger = self.conns.iter().filter_map(|c| c.closed).map(|at| at + LINGER).min();
        [self.stack.poll_at(now), conns, linger].into_iter().flatten().min()
    }
}

/// The far side of a simulated run: something that moves when stepped.
pub trait Peer {
    fn step(&mut self, now: SmolInstant) -> bool;
    fn poll_at(&mut self, now: SmolInstant) -> Option<SmolInstant>;
}

impl<D: Medium> Peer for ControllerSide<D> {
    fn step(&mut self, now: SmolInstant) -> bool {
        ControllerSide::step(self, now)
    }

    fn poll_at(&mut self, now: SmolInstant) -> Option<SmolInstant> {
        ControllerSide::poll_at(self, now)
    }
}

/// Run a host side in real time until `app` is done.
pub fn run_host<D: Medium>(
    side: &mut HostSide<D>,
    app: &mut dyn HostApp,
    clock: &Clock,
    limit: Duration,
    busy_poll: Duration,
) -> Result<(), RunError> {
    let start = clock.now();
    let mut idle = Idle::new(busy_poll);
    loop {
        let now = to_smol(clock.now());
        let progress = side.step(app, now)?;
        if app.is_done() && side.flushed() {
            return Ok(());
        }
        if clock.now().saturating_since(start) > limit {
            return Err(RunError::Timeout(limit));
        }
        if idle.may_sleep(progress) {
            // Not past the tick: the app looks at its stop flag each turn.
            let cap = now + smoltcp::time::Duration::from_millis(50);
            let at = side.poll_at(now);
            side.stack.wait(now, Some(at.map_or(cap, |a| a.min(cap))));
        }
    }
}

/// When a real-time loop with nothing to do may sleep: at once, or, when
/// busy polling, only after `busy` without progress (a sleep and the
/// wake-up after it cost more than a short spin where replies come fast).
pub(crate) struct Idle {
    busy: Duration,
    since: Option<std::time::Instant>,
}

impl Idle {
    pub(crate) fn new(busy: Duration) -> Self {
        Self { busy, since: None }
    }

    pub(crate) fn may_sleep(&mut self, progress: bool) -> bool {
        if progress {
            self.since = None;
            return false;
        }
        if self.busy.is_zero() {
            return true;
        }
        let since = *self.since.get_or_insert_with(std::time::Instant::now);
        if since.elapsed() < self.busy {
            std::hint::spin_loop();
            return false;
        }
        self.since = None;
        true
    }
}

/// Serve a controller side in real time until `stop` is set.
pub fn serve<D: Medium>(
    side: &mut ControllerSide<D>,
    clock: &Clock,
    stop: &AtomicBool,
    busy_poll: Duration,
) {
    serve_one(side, clock, stop, busy_poll);
}

/// Serve one target on several sides, the stacks of the queues of one
/// multi-queue link, each on its own thread (pinned to `cpus`, round
/// robin, if any are given), until `stop` is set (which a thread that
/// cannot start sets, to end the others).
pub fn serve_queues<D: Medium + Send>(
    sides: &mut [ControllerSide<D>],
    clock: &Clock,
    stop: &AtomicBool,
    busy_poll: Duration,
    cpus: &[usize],
) -> std::io::Result<()> {
    std::thread::scope(|scope| {
        for (i, side) in sides.iter_mut().enumerate() {
            // Each queue's thread on a CPU of its own, round robin.
            let cpu = (!cpus.is_empty()).then(|| cpus[i % cpus.len()]);
            let run = move || {
                if let Some(cpu) = cpu
                    && let Err(e) = crate::driver::cpus::pin(cpu)
                {
                    tracing::warn!(queue = i, cpu, error = %e, "cannot pin the queue's thread");
                }
                serve_one(side, clock, stop, busy_poll)
            };
            let started =
                std::thread::Builder::new().name(format!("queue {i}")).spawn_scoped(scope, run);
            if let Err(e) = started {
                stop.store(true, Ordering::Relaxed);
                return Err(e);
            }
        }
        Ok(())
    })
}

fn serve_one<D: Medium>(
    side: &mut ControllerSide<D>,
    clock: &Clock,
    stop: &AtomicBool,
    busy_poll: Duration,
) {
    let mut idle = Idle::new(busy_poll);
    while !stop.load(Ordering::Relaxed) {
        let now = to_smol(clock.now());
        if idle.may_sleep(side.step(now)) {
            let at = side.poll_at(now);
            let cap = now + smoltcp::time::Duration::from_millis(50);
            side.stack.wait(now, Some(at.map_or(cap, |a| a.min(cap))));
        }
    }
}

/// Run host and controller in one thread, time jumping to the next deadline
/// whenever neither side can move. Returns the simulated time it took.
pub fn run_simulated<H: Medium>(
    host: &mut HostSide<H>,
    ctrl: &mut dyn Peer,
    app: &mut dyn HostApp,
    limit: Duration,
) -> Result<Duration, RunError> {
    let start = SmolInstant::from_secs(1);
    let mut now = start;
    let mut idle_turns = 0;
    loop {
        let a = host.step(app, now)?;
        let b = ctrl.step(now);
        let elapsed = Duration::from_micros((now - start).total_micros());
        if app.is_done() && host.flushed() {
            return Ok(elapsed);
        }
        if elapsed > limit {
            return Err(RunError::SimulatedTimeout(limit));
        }
        if a || b {
            idle_turns = 0;
            continue;
        }
        match [host.poll_at(now), ctrl.poll_at(now)].into_iter().flatten().min() {
            Some(t) if t > now => now = t,
            // Due now and still nothing moved: nudge time so timers fire.
            Some(_) if idle_turns < 3 => idle_turns += 1,
            Some(_) => now += smoltcp::time::Duration::from_micros(1),
            None => return Err(RunError::Stuck(elapsed)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Idle;
    use std::time::Duration;

    #[test]
    fn without_busy_polling_an_idle_loop_sleeps_at_once() {
        let mut idle = Idle::new(Duration::ZERO);
        assert!(idle.may_sleep(false));
        assert!(!idle.may_sleep(true), "never after progress");
    }

    #[test]
    fn busy_polling_keeps_an_idle_loop_awake_until_the_time_is_up() {
        // Long enough that no scheduler delay ends it.
        let mut idle = Idle::new(Duration::from_secs(60));
        assert!(!idle.may_sleep(false));
        assert!(!idle.may_sleep(false));
        // Progress starts the count again.
        assert!(!idle.may_sleep(true));
        assert!(!idle.may_sleep(false));
        let mut idle = Idle::new(Duration::from_millis(1));
        idle.may_sleep(false);
        std::thread::sleep(Duration::from_millis(5));
        assert!(idle.may_sleep(false), "1 ms without progress");
    }
}
