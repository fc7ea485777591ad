//! NVMe/TCP and NVMe/RDMA (iWARP) over the kernel's TCP: non-blocking
//! sockets (mio) driving the sans-IO host and controller. A controller
//! server spreads its connections over poll groups, a thread each; a host
//! run drives every queue of one host, or (`sets`) its admin queue while
//! sets of its I/O queues run on threads of their own.
//!
//! It moves bytes and time only; it must never interpret NVMe (that is
//! the sans-IO host's and controller's) or decide what a run does.

mod sets;

pub use sets::{QueueSet, SetRun, run_host_sets};

use crate::app::HostApp;
use crate::driver::clock::Clock;
use crate::driver::cpus;
use crate::driver::endpoint::{ControllerEnd, Endpoint, HostEnd};
use crate::driver::transport::Listener;
use mio::net::{TcpListener, TcpStream};
use mio::{Events, Interest, Poll, Token};
use nvme_of::controller::ControllerQueue;
use nvme_of::controller::Target;
use nvme_of::host::Host;
use std::collections::HashMap;
use std::io::{self, ErrorKind, Read, Write};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;
use tracing::{debug, info, warn};

const BUF: usize = 256 * 1024;
/// The longest the loop sleeps before looking at its stop flag.
const TICK: Duration = Duration::from_millis(50);
/// How long a host waits for a TCP connection to its controller.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// One end of a byte stream with what is waiting to go in and out.
pub(crate) struct Pipe {
    rx: Vec<u8>,
    rx_start: usize,
    rx_end: usize,
    tx: Vec<u8>,
    tx_start: usize,
    tx_end: usize,
    readable: bool,
    writable: bool,
    eof: bool,
}

impl Pipe {
    fn new() -> Self {
        Self {
            rx: vec![0; BUF],
            rx_start: 0,
            rx_end: 0,
            tx: vec![0; BUF],
            tx_start: 0,
            tx_end: 0,
            readable: true,
            writable: true,
            eof: false,
        }
    }

    /// Move bytes between the socket and an endpoint until neither side
    /// makes progress.
    fn pump(&mut self, sock: &mut TcpStream, end: &mut dyn Endpoint) -> io::Result<()> {
        loop {
            let mut progress = false;
            if self.readable && self.rx_end < self.rx.len() && !self.eof {
                match sock.read(&mut self.rx[self.rx_end..]) {
                    Ok(0) => self.eof = true,
                    Ok(n) => {
                        self.rx_end += n;
                        progress = true;
                    }
                    Err(e) if e.kind() == ErrorKind::WouldBlock => self.readable = false,
                    Err(e) if e.kind() == ErrorKind::Interrupted => {}
                    Err(e) => return Err(e),
                }
            }
            if self.rx_start < self.rx_end {
                let n = end.input(&self.rx[self.rx_start..self.rx_end]);
                self.rx_start += n;
                progress |= n > 0;
                if self.rx_start == self.rx_end {
                    (self.rx_start, self.rx_end) = (0, 0);
                } else if self.rx_end == self.rx.len() && self.rx_start > 0 {
                    self.rx.copy_within(self.rx_start..self.rx_end, 0);
                    (self.rx_start, self.rx_end) = (0, self.rx_end - self.rx_start);
                }
            }
            if self.tx_start == self.tx_end {
                // The end may stop at each PDU's end: gather a buffer full.
                (self.tx_start, self.tx_end) = (0, 0);
                while self.tx_end < self.tx.len() {
                    let n = end.output(&mut self.tx[self.tx_end..]);
                    if n == 0 {
                        break;
                    }
                    self.tx_end += n;
                }
                progress |= self.tx_end > 0;
            }
            if self.writable && self.tx_start < self.tx_end {
                match sock.write(&self.tx[self.tx_start..self.tx_end]) {
                    Ok(n) => {
                        self.tx_start += n;
                        progress |= n > 0;
                    }
                    Err(e) if e.kind() == ErrorKind::WouldBlock => self.writable = false,
                    Err(e) if e.kind() == ErrorKind::Interrupted => {}
                    Err(e) => return Err(e),
                }
            }
            if !progress {
                return Ok(());
            }
        }
    }

    fn flushed(&self) -> bool {
        self.tx_start == self.tx_end
    }
}

/// A controller listening on kernel TCP. An acceptor thread hands each new
/// connection to the least loaded of its poll groups: threads that each
/// own their connections, sockets and poll, as SPDK's poll groups and
/// nvmet-tcp's per-CPU work do, so that nothing of one connection is
/// touched by two threads.
pub struct ControllerServer {
    stop: Arc<AtomicBool>,
    acceptor: Option<JoinHandle<io::Result<()>>>,
    groups: Vec<JoinHandle<io::Result<GroupStats>>>,
    /// What the groups hold, as the acceptor sees them.
    doors: Arc<Vec<Group>>,
    local: Vec<SocketAddr>,
}

/// What a poll group did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GroupStats {
    /// The CPU it was pinned to, if any.
    pub cpu: Option<usize>,
    /// Connections it accepted.
    pub connections: u64,
    /// I/O queues it served (those it accepted and kept, and those moved
    /// to it).
    pub io_queues: u64,
    /// CPU time its thread used.
    pub cpu_time: Duration,
}

/// What reaches a poll group from outside.
enum Arrival {
    /// A connection just accepted.
    New(TcpStream, SocketAddr),
    /// An I/O queue another group accepted, moved here once its Connect
    /// said it was one, to even out the groups' I/O queues.
    Moved(Box<CtrlConn>),
}

/// A poll group, as the acceptor and the other groups see it.
struct Group {
    arrivals: mpsc::Sender<Arrival>,
    waker: Arc<mio::Waker>,
    /// Connections it holds now.
    load: AtomicUsize,
    /// I/O queues among them.
    io_queues: AtomicUsize,
    /// Connections the acceptor handed it so far.
    accepted: AtomicU64,
}

impl Group {
    fn send(&self, arrival: Arrival) {
        if self.arrivals.send(arrival).is_ok() {
            let _ = self.waker.wake();
        }
    }
}

impl ControllerServer {
    /// Listen on every address and serve `target` with one poll group
    /// until stopped, making each connection with `listener` (NVMe/TCP or
    /// NVMe/RDMA).
    pub fn spawn(
        target: Arc<Target>,
        listen: &[SocketAddr],
        listener: Listener,
    ) -> io::Result<Self> {
        Self::spawn_until(target, listen, listener, Arc::new(AtomicBool::new(false)), &[None])
    }

    /// As [`Self::spawn`], with a poll group per entry of `groups` (pinned
    /// to that CPU, if given), serving until `stop` is set.
    pub fn spawn_until(
        target: Arc<Target>,
        listen: &[SocketAddr],
        listener: Listener,
        stop: Arc<AtomicBool>,
        groups: &[Option<usize>],
    ) -> io::Result<Self> {
        let mut listeners = Vec::new();
        for addr in listen {
            let l = TcpListener::bind(*addr)
                .map_err(|e| io::Error::new(e.kind(), format!("cannot listen on {addr}: {e}")))?;
            listeners.push(l);
        }
        let local =
            listeners.iter().map(TcpListener::local_addr).collect::<io::Result<Vec<_>>>()?;
        let mut server = Self {
            stop: stop.clone(),
            acceptor: None,
            groups: Vec::new(),
            doors: Arc::default(),
            local,
        };
        let groups = if groups.is_empty() { &[None][..] } else { groups };
        let mut doors = Vec::new();
        let mut loops = Vec::new();
        for (index, &cpu) in groups.iter().enumerate() {
            let poll = Poll::new()?;
            let waker = Arc::new(mio::Waker::new(poll.registry(), WAKE)?);
            let (tx, arrivals) = mpsc::channel();
            let (load, io_queues) = (AtomicUsize::new(0), AtomicUsize::new(0));
            let accepted = AtomicU64::new(0);
            doors.push(Group { arrivals: tx, waker: waker.clone(), load, io_queues, accepted });
            let (target, listener) = (target.clone(), listener.clone());
            loops.push((index, cpu, poll, waker, arrivals, target, listener));
        }
        let doors = Arc::new(doors);
        let placing = Arc::new(Mutex::new(()));
        for (index, cpu, poll, waker, arrivals, target, listener) in loops {
            let group = GroupLoop {
                index,
                cpu,
                target,
                listener,
                poll,
                waker,
                arrivals,
                groups: doors.clone(),
                placing: placing.clone(),
            };
            let flag = stop.clone();
            let thread = std::thread::Builder::new()
                .name(format!("nvme-ctrl-{index}"))
                .spawn(move || group.run(&flag))?;
            server.groups.push(thread);
        }
        server.doors = doors.clone();
        let flag = stop.clone();
        server.acceptor = Some(
            std::thread::Builder::new()
                .name("nvme-accept".into())
                .spawn(move || accept_loop(target, listeners, doors, &flag))?,
        );
        Ok(server)
    }

    /// Connections the poll groups hold now.
    pub fn connections(&self) -> usize {
        self.doors.iter().map(|g| g.load.load(Ordering::Relaxed)).sum()
    }

    /// Connections accepted and handed to a poll group so far.
    pub fn accepted(&self) -> u64 {
        self.doors.iter().map(|g| g.accepted.load(Ordering::Relaxed)).sum()
    }

    /// The addresses actually listened on (port 0 resolved).
    pub fn local_addrs(&self) -> &[SocketAddr] {
        &self.local
    }

    /// Stop serving and wait for the threads.
    pub fn stop(mut self) -> io::Result<Vec<GroupStats>> {
        self.stop.store(true, Ordering::Relaxed);
        self.join()
    }

    /// Wait for the threads (they end when the stop flag is set); what
    /// each poll group did.
    pub fn join(&mut self) -> io::Result<Vec<GroupStats>> {
        let panicked = || io::Error::other("controller thread panicked");
        let accepted = match self.acceptor.take().map(JoinHandle::join) {
            Some(Err(_)) => Err(panicked()),
            Some(Ok(r)) => r,
            None => Ok(()),
        };
        let mut stats = Vec::new();
        for thread in self.groups.drain(..) {
            stats.push(thread.join().map_err(|_| panicked())??);
        }
        accepted.map(|()| stats)
    }
}

impl Drop for ControllerServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        let _ = self.join();
    }
}

/// The token of a poll group's waker: new connections, and storage that
/// answered.
const WAKE: Token = Token(usize::MAX);

/// A waker for the storage: it wakes the loop out of `poll`.
struct MioWake(Arc<mio::Waker>);

impl std::task::Wake for MioWake {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        if let Err(e) = self.0.wake() {
            warn!(error = %e, "cannot wake the controller loop");
        }
    }
}

struct CtrlConn {
    sock: TcpStream,
    pipe: Pipe,
    conn: Box<dyn ControllerQueue>,
    peer: SocketAddr,
    /// Counted as an I/O queue of its group (after its Connect).
    io_queue: bool,
}

/// Accept connections on every listener and hand each to the least loaded
/// poll group, until `stop` is set.
fn accept_loop(
    target: Arc<Target>,
    mut listeners: Vec<TcpListener>,
    groups: Arc<Vec<Group>>,
    stop: &AtomicBool,
) -> io::Result<()> {
    let mut poll = Poll::new()?;
    let mut events = Events::with_capacity(16);
    for (i, l) in listeners.iter_mut().enumerate() {
        poll.registry().register(l, Token(i), Interest::READABLE)?;
    }
    while !stop.load(Ordering::Relaxed) {
        match poll.poll(&mut events, Some(TICK)) {
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            r => r?,
        }
        for ev in &events {
            let Some(l) = listeners.get_mut(ev.token().0) else { continue };
            loop {
                let (sock, peer) = match l.accept() {
                    Ok(accepted) => accepted,
                    Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                    Err(e) => {
                        warn!(error = %e, "accept failed");
                        break;
                    }
                };
                let held = groups.iter().map(|g| g.load.load(Ordering::Relaxed)).sum();
                if !target.admit_connection(held) {
                    // Dropped: the kernel closes it.
                    info!(%peer, "connection refused: too many at once");
                    continue;
                }
                let Some((index, group)) =
                    groups.iter().enumerate().min_by_key(|(_, g)| g.load.load(Ordering::Relaxed))
                else {
                    continue;
                };
                group.load.fetch_add(1, Ordering::Relaxed);
                group.accepted.fetch_add(1, Ordering::Relaxed);
                info!(%peer, group = index, "connection accepted");
                group.send(Arrival::New(sock, peer));
            }
        }
    }
    Ok(())
}

/// A poll group: its thread serves the connections the acceptor hands it,
/// each from its socket to its sans-IO end and back, and collects what
/// storage answered them (the storage wakes this group alone). A
/// connection whose Connect makes it an I/O queue moves to the group with
/// the fewest, as Linux spreads I/O queues over CPUs: admin and discovery
/// queues are idle, so connections alone say little of a group's load.
struct GroupLoop {
    index: usize,
    cpu: Option<usize>,
    target: Arc<Target>,
    listener: Listener,
    poll: Poll,
    waker: Arc<mio::Waker>,
    arrivals: mpsc::Receiver<Arrival>,
    groups: Arc<Vec<Group>>,
    /// Held while an I/O queue is placed: two groups placing at once
    /// would each count the other's queue as not there yet.
    placing: Arc<Mutex<()>>,
}

impl GroupLoop {
    /// Connection `token` was just connected as an I/O queue: it stays,
    /// or moves to the group with the fewest I/O queues if that one has
    /// fewer than this one would. Nothing of it is in the storage's hands
    /// yet (the host sends no I/O before its Connect completes).
    /// Returns whether it stayed.
    fn place_io_queue(&self, token: usize, conns: &mut HashMap<usize, CtrlConn>) -> bool {
        let _placing = self.placing.lock().unwrap_or_else(PoisonError::into_inner);
        let me = &self.groups[self.index];
        let count = |g: &Group| g.io_queues.load(Ordering::Relaxed);
        let least = (0..self.groups.len()).min_by_key(|&i| count(&self.groups[i]));
        let to = match least {
            Some(i) if i != self.index && count(&self.groups[i]) < count(me) => i,
            _ => {
                me.io_queues.fetch_add(1, Ordering::Relaxed);
                return true;
            }
        };
        let Some(mut c) = conns.remove(&token) else { return false };
        let _ = self.poll.registry().deregister(&mut c.sock);
        let there = &self.groups[to];
        me.load.fetch_sub(1, Ordering::Relaxed);
        there.load.fetch_add(1, Ordering::Relaxed);
        there.io_queues.fetch_add(1, Ordering::Relaxed);
        debug!(peer = %c.peer, qid = ?c.conn.qid(), from = self.index, to, "I/O queue moved");
        there.send(Arrival::Moved(Box::new(c)));
        false
    }

    /// Serve until `stop` is set; returns what the group did.
    fn run(mut self, stop: &AtomicBool) -> io::Result<GroupStats> {
        if let Some(cpu) = self.cpu
            && let Err(e) = cpus::pin(cpu)
        {
            warn!(group = self.index, cpu, error = %e, "cannot pin the poll group");
        }
        let clock = Clock::new();
        let mut events = Events::with_capacity(256);
        let storage: std::task::Waker = Arc::new(MioWake(self.waker.clone())).into();
        let mut conns: HashMap<usize, CtrlConn> = HashMap::new();
        let (mut next, mut served) = (0usize, 0u64);
        let (mut placed, mut io_queues) = (Vec::new(), 0u64);
        while !stop.load(Ordering::Relaxed) {
            let now = clock.now();
            let deadline = conns.values().filter_map(|c| c.conn.poll_timeout()).min();
            let timeout = deadline.map_or(TICK, |d| d.saturating_since(now).min(TICK));
            match self.poll.poll(&mut events, Some(timeout)) {
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                r => r?,
            }
            for ev in &events {
                if ev.token() == WAKE {
                    // New connections, or answers to collect (the
                    // connections' timers say so).
                } else if let Some(c) = conns.get_mut(&ev.token().0) {
                    c.pipe.readable |= ev.is_readable() || ev.is_read_closed() || ev.is_error();
                    c.pipe.writable |= ev.is_writable();
                }
            }
            while let Ok(arrival) = self.arrivals.try_recv() {
                let me = &self.groups[self.index];
                let (mut c, token) = match arrival {
                    Arrival::New(sock, peer) => {
                        let _ = sock.set_nodelay(true);
                        let local = sock.local_addr().ok().map(|a| a.ip());
                        let conn = self.listener.accept(self.target.clone(), local, clock.now());
                        served += 1;
                        let c = CtrlConn { sock, pipe: Pipe::new(), conn, peer, io_queue: false };
                        (Box::new(c), next)
                    }
                    Arrival::Moved(c) => {
                        io_queues += 1;
                        (c, next)
                    }
                };
                next += 1;
                let interest = Interest::READABLE | Interest::WRITABLE;
                if let Err(e) = self.poll.registry().register(&mut c.sock, Token(token), interest) {
                    warn!(peer = %c.peer, error = %e, "cannot register connection");
                    me.load.fetch_sub(1, Ordering::Relaxed);
                    me.io_queues.fetch_sub(usize::from(c.io_queue), Ordering::Relaxed);
                    continue;
                }
                c.conn.wake_with(storage.clone());
                // Moved with bytes waiting in either direction: go round.
                (c.pipe.readable, c.pipe.writable) = (true, true);
                conns.insert(token, *c);
            }
            let now = clock.now();
            let mut gone = Vec::new();
            for (&token, c) in conns.iter_mut() {
                if c.conn.poll_timeout().is_some_and(|t| now >= t) {
                    c.conn.handle_timeout(now);
                }
                let CtrlConn { sock, pipe, conn, .. } = c;
                let result = pipe.pump(sock, &mut ControllerEnd { conn: conn.as_mut(), now });
                let finished = (conn.is_closed() && pipe.flushed()) || pipe.eof;
                if let Err(e) = &result {
                    debug!(peer = %c.peer, error = %e, "connection error");
                }
                if result.is_err() || finished {
                    gone.push(token);
                } else if !c.io_queue && c.conn.qid().is_some_and(|q| q > 0) {
                    c.io_queue = true;
                    placed.push(token);
                }
            }
            for token in placed.drain(..) {
                io_queues += u64::from(self.place_io_queue(token, &mut conns));
            }
            for token in gone {
                let Some(mut c) = conns.remove(&token) else { continue };
                let me = &self.groups[self.index];
                me.load.fetch_sub(1, Ordering::Relaxed);
                me.io_queues.fetch_sub(usize::from(c.io_queue), Ordering::Relaxed);
                c.conn.transport_closed();
                let _ = self.poll.registry().deregister(&mut c.sock);
                let _ = c.sock.shutdown(std::net::Shutdown::Both);
                match c.conn.close_reason().filter(|r| r.is_abnormal()) {
                    None => debug!(peer = %c.peer, qid = ?c.conn.qid(), "connection closed"),
                    Some(reason) => {
                        warn!(peer = %c.peer, qid = ?c.conn.qid(), %reason, "connection closed")
                    }
                }
            }
        }
        // Stopped: the connections still held close, and a controller whose
        // admin queue one was goes with it (a host that closed a moment ago
        // and one that did not are alike to a controller shutting down).
        let held = conns.into_values().map(Box::new).chain(
            std::iter::from_fn(|| self.arrivals.try_recv().ok()).filter_map(|a| match a {
                Arrival::Moved(c) => Some(c),
                Arrival::New(..) => None,
            }),
        );
        for mut c in held {
            c.conn.transport_closed();
            let _ = c.sock.shutdown(std::net::Shutdown::Both);
        }
        let cpu_time = Duration::from_nanos(cpus::cpu_ns(libc::CLOCK_THREAD_CPUTIME_ID));
        Ok(GroupStats { cpu: self.cpu, connections: served, io_queues, cpu_time })
    }
}

/// Errors of a host run over kernel TCP.
#[derive(Debug, thiserror::Error)]
pub enum HostRunError {
    // The io::Error is shown in the message, not chained as a source, so
    // that `{:#}` does not print it twice.
    #[error("cannot connect to {addr}: {error}")]
    Connect { addr: SocketAddr, error: io::Error },
    #[error("queue {qid}: {error}")]
    Io { qid: u16, error: io::Error },
    #[error("the run did not finish within its limit of {} s", .0.as_secs())]
    Timeout(Duration),
    #[error("a queue set's thread panicked")]
    Panicked,
    /// The controller granted fewer I/O queues than there are sets to
    /// deal them to.
    #[error(
        "the controller granted {granted} I/O queues, fewer than the {sets} threads asked for; give as many CPUs as queues at most"
    )]
    TooFewQueues { granted: u16, sets: usize },
}

/// A connection to the controller failed. While reconnecting it is one
/// more failed attempt for the host to retry; at first it is the answer.
fn connect_failed(
    host: &mut Host,
    addr: SocketAddr,
    qid: u16,
    error: io::Error,
    now: nvme_of::Instant,
) -> Result<(), HostRunError> {
    let error = HostRunError::Connect { addr, error };
    if !host.is_reconnecting() {
        return Err(error);
    }
    host.connect_failed(qid, error, now);
    Ok(())
}

/// The sockets of a host's queues, by queue, each with its pipe, those
/// still connecting, and the poll that watches them.
pub(crate) struct HostSockets {
    poll: Poll,
    events: Events,
    socks: HashMap<u16, (TcpStream, Pipe, bool)>,
    /// Connections under way, and when each gives up. They never block the
    /// loop: an app may end the run (Ctrl-C) while one waits for an answer.
    connecting: HashMap<u16, (TcpStream, nvme_of::Instant)>,
}

impl HostSockets {
    pub(crate) fn new() -> io::Result<Self> {
        Ok(Self {
            poll: Poll::new()?,
            events: Events::with_capacity(64),
            socks: HashMap::new(),
            connecting: HashMap::new(),
        })
    }

    /// A waker that ends the wait of this loop's poll from another thread.
    pub(crate) fn waker(&self) -> io::Result<mio::Waker> {
        mio::Waker::new(self.poll.registry(), WAKE)
    }

    /// Open a connection to `addr` for each queue the host names, and
    /// settle the connections under way.
    pub(crate) fn connect(
        &mut self,
        addr: SocketAddr,
        host: &mut Host,
        now: nvme_of::Instant,
    ) -> Result<(), HostRunError> {
        while let Some(qid) = host.poll_connect() {
            // A socket left from a lost association goes (dropped, closed).
            self.socks.remove(&qid);
            let mut sock = match TcpStream::connect(addr) {
                Ok(sock) => sock,
                Err(error) => {
                    connect_failed(host, addr, qid, error, now)?;
                    continue;
                }
            };
            self.poll
                .registry()
                .register(
                    &mut sock,
                    Token(usize::from(qid)),
                    Interest::READABLE | Interest::WRITABLE,
                )
                .map_err(|error| HostRunError::Io { qid, error })?;
            self.connecting.insert(qid, (sock, now + CONNECT_TIMEOUT));
        }
        let mut answered = Vec::new();
        for (&qid, (sock, deadline)) in &self.connecting {
            let error = match (sock.take_error(), sock.peer_addr()) {
                (Ok(Some(e)) | Err(e), _) => Some(e),
                (Ok(None), Ok(_)) => None,
                (Ok(None), Err(e)) if e.kind() == ErrorKind::NotConnected => {
                    if now < *deadline {
                        continue;
                    }
                    let wait = CONNECT_TIMEOUT.as_secs();
                    Some(io::Error::new(ErrorKind::TimedOut, format!("no answer in {wait} s")))
                }
                (Ok(None), Err(e)) => Some(e),
            };
            answered.push((qid, error));
        }
        for (qid, error) in answered {
            let Some((mut sock, _)) = self.connecting.remove(&qid) else { continue };
            if let Some(error) = error {
                let _ = self.poll.registry().deregister(&mut sock);
                connect_failed(host, addr, qid, error, now)?;
                continue;
            }
            sock.set_nodelay(true).map_err(|error| HostRunError::Io { qid, error })?;
            host.connected(qid, now);
            self.socks.insert(qid, (sock, Pipe::new(), true));
        }
        Ok(())
    }

    /// Move bytes between each open socket and its queue; close those the
    /// host is done with, or whose connection ended.
    pub(crate) fn pump(&mut self, host: &mut Host, now: nvme_of::Instant) {
        let mut closed = Vec::new();
        for (&qid, (sock, pipe, open)) in self.socks.iter_mut() {
            if !*open {
                continue;
            }
            let r = pipe.pump(sock, &mut HostEnd { host, qid, now });
            if r.is_err() || pipe.eof || (host.is_closed(qid) && pipe.flushed()) {
                closed.push(qid);
            }
        }
        for qid in closed {
            if let Some((sock, _, open)) = self.socks.get_mut(&qid) {
                *open = false;
                let _ = self.poll.registry().deregister(sock);
                let _ = sock.shutdown(std::net::Shutdown::Both);
                host.transport_closed(qid, now);
            }
        }
    }

    /// Nothing is waiting to be sent on an open socket.
    pub(crate) fn flushed(&self) -> bool {
        self.socks.values().all(|(_, p, open)| !*open || p.flushed())
    }

    /// Flush what the host queued last (a shutdown), dropping connections
    /// still under way.
    pub(crate) fn finish(&mut self, host: &mut Host, now: nvme_of::Instant) {
        self.connecting.clear();
        for (&qid, (sock, pipe, open)) in self.socks.iter_mut() {
            if *open {
                let _ = pipe.pump(sock, &mut HostEnd { host, qid, now });
            }
        }
    }

    /// Wait until a socket is ready, the host's next deadline, or a tick;
    /// not at all while output waits on a socket that can take it.
    pub(crate) fn wait(&mut self, host: &Host, clock: &Clock) -> Result<(), HostRunError> {
        let busy = self
            .socks
            .iter()
            .any(|(&q, (_, p, open))| *open && p.writable && host.pending_output(q) > 0);
        let timeout = if busy {
            Duration::ZERO
        } else {
            host.poll_timeout().map_or(TICK, |t| t.saturating_since(clock.now()).min(TICK))
        };
        match self.poll.poll(&mut self.events, Some(timeout)) {
            Err(e) if e.kind() == ErrorKind::Interrupted => return Ok(()),
            r => r.map_err(|error| HostRunError::Io { qid: 0, error })?,
        }
        for ev in &self.events {
            if let Some((_, pipe, _)) = self.socks.get_mut(&(ev.token().0 as u16)) {
                pipe.readable |= ev.is_readable() || ev.is_read_closed() || ev.is_error();
                pipe.writable |= ev.is_writable();
            }
        }
        Ok(())
    }

    /// Hand the open sockets of `qids` over, for another loop to drive.
    pub(crate) fn take(&mut self, qids: &[u16]) -> Vec<(u16, TcpStream, Pipe)> {
        let mut out = Vec::new();
        for qid in qids {
            if let Some((mut sock, pipe, true)) = self.socks.remove(qid) {
                let _ = self.poll.registry().deregister(&mut sock);
                out.push((*qid, sock, pipe));
            }
        }
        out
    }

    /// Drive sockets another loop handed over.
    pub(crate) fn adopt(&mut self, socks: Vec<(u16, TcpStream, Pipe)>) -> io::Result<()> {
        for (qid, mut sock, mut pipe) in socks {
            let interest = Interest::READABLE | Interest::WRITABLE;
            self.poll.registry().register(&mut sock, Token(usize::from(qid)), interest)?;
            // Whatever came meanwhile is read on the next turn.
            (pipe.readable, pipe.writable) = (true, true);
            self.socks.insert(qid, (sock, pipe, true));
        }
        Ok(())
    }
}

/// Run `app` on `host` over kernel TCP connections to `addr` until the app
/// is done (or `limit` passes).
pub fn run_host(
    addr: SocketAddr,
    host: &mut Host,
    app: &mut dyn HostApp,
    limit: Duration,
) -> Result<(), HostRunError> {
    let clock = Clock::new();
    let mut socks = HostSockets::new().map_err(|error| HostRunError::Io { qid: 0, error })?;
    let start = clock.now();
    loop {
        let now = clock.now();
        if now.saturating_since(start) > limit {
            return Err(HostRunError::Timeout(limit));
        }
        socks.connect(addr, host, now)?;
        if host.poll_timeout().is_some_and(|t| now >= t) {
            host.handle_timeout(now);
        }
        socks.pump(host, now);
        while let Some(ev) = host.poll_event() {
            app.on_event(host, ev, now);
        }
        app.on_poll(host, now);
        if app.is_done() && socks.flushed() {
            socks.finish(host, now);
            return Ok(());
        }
        socks.wait(host, &clock)?;
    }
}
