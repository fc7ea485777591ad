//! The deterministic test bed: a [`Host`] and a controller of one binding
//! joined by in-memory byte streams, with time under the caller's control
//! (quinn-proto's pair, for NVMe over Fabrics).
//!
//! Every step moves bytes both ways until nothing moves; between steps
//! time jumps to the next deadline either side asks for, so a test of a
//! keep alive timeout or of ctrl-loss-tmo runs in microseconds and never
//! depends on the machine's speed. It is generic over the bindings
//! (`nvme-tcp`, `nvme-rdma`, and [`Loopback`], which moves capsules with
//! no transport of its own) and is used by their tests and fuzz targets.
//! It is not part of the API: nothing outside tests and fuzzing drives it.

mod loopback;

pub use loopback::{LOOPBACK, LoopError, Loopback};

use crate::controller::{self, CloseReason, ControllerQueue, Target, TargetConfig};
use crate::host::{self, Host, HostConfig, HostError, HostEvent, Io, IoKind};
use crate::namespace::Namespace;
use crate::nvme::Status;
use crate::time::Instant;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use ulp_ddp::IoBuf;

/// The subsystem NQN the pair's targets serve, unless a test names another.
pub const SUBNQN: &str = "nqn.2026-11.io.nvme-ddp:test";

/// Sees (and may change) the bytes of one transfer on queue `qid`.
pub type Filter = Box<dyn FnMut(u16, &mut Vec<u8>)>;

/// A host and a controller of one binding, joined in memory.
pub struct Pair {
    pub host: Host,
    /// Sets of I/O queues the host lent ([`Pair::lend`]), each with what
    /// it reported; a queue's bytes go to whichever host holds it.
    pub sets: Vec<(Host, Vec<HostEvent>)>,
    pub target: Arc<Target>,
    /// How the controller side makes its connections.
    pub acceptor: Arc<dyn controller::Transport>,
    /// The controller end of each queue's connection.
    pub conns: BTreeMap<u16, Box<dyn ControllerQueue>>,
    pub now: Instant,
    /// What the host reported, in order.
    pub events: Vec<HostEvent>,
    /// Applied to every chunk going host -> controller.
    pub h2c_filter: Option<Filter>,
    /// Applied to every chunk going controller -> host.
    pub c2h_filter: Option<Filter>,
    /// Bytes per transfer: small values exercise arbitrary segmentation.
    pub chunk: usize,
    /// Each queue whose connection closed, in order, and why the
    /// controller's side closed (None: the host closed first).
    pub closed: Vec<(u16, Option<CloseReason>)>,
    /// No controller listens: every transport connect is refused.
    pub refuse: bool,
    /// Bytes a controller did not take yet (it takes no input while its
    /// output is full), by queue.
    backlog: BTreeMap<u16, Vec<u8>>,
}

/// A target serving [`SUBNQN`] with the one namespace `ns`.
pub fn target(cfg: TargetConfig, ns: Arc<dyn Namespace>) -> Arc<Target> {
    match Target::new(TargetConfig { subnqn: SUBNQN.into(), ..cfg }, vec![ns]) {
        Ok(t) => t,
        Err(e) => panic!("the pair's target: {e}"),
    }
}

impl Pair {
    /// `host` against `target`, whose connections `acceptor` makes.
    pub fn new(host: Host, acceptor: Arc<dyn controller::Transport>, target: Arc<Target>) -> Self {
        Self {
            host,
            sets: Vec::new(),
            target,
            acceptor,
            conns: BTreeMap::new(),
            now: Instant::from_millis(1_000),
            events: Vec::new(),
            h2c_filter: None,
            c2h_filter: None,
            chunk: 64 * 1024,
            closed: Vec::new(),
            refuse: false,
            backlog: BTreeMap::new(),
        }
    }

    /// A host and controller of one binding that is both sides' transport.
    pub fn with<B>(cfg: HostConfig, binding: B, target: Arc<Target>) -> Self
    where
        B: host::Transport + controller::Transport + 'static,
    {
        let binding = Arc::new(binding);
        Self::new(Host::new(cfg, binding.clone()), binding, target)
    }

    /// Move bytes both ways until nothing moves; returns whether anything did.
    pub fn step(&mut self) -> bool {
        let mut moved = false;
        // Controller timers that are due (a deleted queue closes at once).
        for c in self.conns.values_mut() {
            if c.poll_timeout().is_some_and(|t| self.now >= t) {
                c.handle_timeout(self.now);
                moved = true;
            }
        }
        while let Some(qid) = self.host.poll_connect() {
            moved = true;
            self.backlog.remove(&qid);
            if self.refuse {
                self.conns.remove(&qid);
                self.host.transport_closed(qid, self.now);
                continue;
            }
            let conn = self.acceptor.accept(self.target.clone(), None, self.now);
            self.conns.insert(qid, conn);
            self.host.connected(qid, self.now);
        }
        let qids: Vec<u16> = self.conns.keys().copied().collect();
        let mut buf = vec![0u8; self.chunk];
        for qid in qids {
            moved |= self.send_to_controller(qid, &mut buf);
            moved |= self.send_to_host(qid, &mut buf);
            moved |= self.close_if_done(qid, &mut buf);
        }
        while let Some(ev) = self.host.poll_event() {
            self.events.push(ev);
            moved = true;
        }
        for (set, events) in &mut self.sets {
            while let Some(ev) = set.poll_event() {
                events.push(ev);
                moved = true;
            }
        }
        moved
    }

    /// The host that holds queue `qid`: a set it was lent to, or the host.
    fn holder(&mut self, qid: u16) -> &mut Host {
        match self.sets.iter().position(|(s, _)| s.holds(qid)) {
            Some(i) => &mut self.sets[i].0,
            None => &mut self.host,
        }
    }

    /// Lend I/O queues `qids` to a new set; its index in [`Pair::sets`].
    pub fn lend(&mut self, qids: &[u16]) -> usize {
        let set = self.host.lend(qids).unwrap_or_else(|| panic!("cannot lend {qids:?}"));
        self.sets.push((set, Vec::new()));
        self.sets.len() - 1
    }

    /// What the host sends on `qid`, as far as its controller takes it.
    fn send_to_controller(&mut self, qid: u16, buf: &mut [u8]) -> bool {
        let n = self.holder(qid).poll_transmit(qid, buf);
        let backlog = self.backlog.entry(qid).or_default();
        if n > 0 {
            let mut bytes = buf[..n].to_vec();
            if let Some(f) = &mut self.h2c_filter {
                f(qid, &mut bytes);
            }
            backlog.extend_from_slice(&bytes);
        }
        let Some(conn) = self.conns.get_mut(&qid) else { return n > 0 };
        let taken = if backlog.is_empty() { 0 } else { conn.handle_input(backlog, self.now) };
        backlog.drain(..taken);
        n > 0 || taken > 0
    }

    /// What the controller sends on `qid`, all of it taken by the host.
    fn send_to_host(&mut self, qid: u16, buf: &mut [u8]) -> bool {
        let Some(conn) = self.conns.get_mut(&qid) else { return false };
        let n = conn.poll_transmit(buf);
        if n == 0 {
            return false;
        }
        let mut bytes = buf[..n].to_vec();
        if let Some(f) = &mut self.c2h_filter {
            f(qid, &mut bytes);
        }
        let mut at = 0;
        let now = self.now;
        while at < bytes.len() {
            let k = self.holder(qid).handle_input(qid, &bytes[at..], now);
            if k == 0 {
                break;
            }
            at += k;
        }
        true
    }

    /// Close `qid`'s connection once either end is done with it.
    fn close_if_done(&mut self, qid: u16, buf: &mut [u8]) -> bool {
        let Some(conn) = self.conns.get_mut(&qid) else { return false };
        let closed_ctrl = conn.is_closed();
        if !closed_ctrl && !self.holder(qid).is_closed(qid) {
            return false;
        }
        // Flush what the host still had (a TermReq) before closing.
        let n = self.holder(qid).poll_transmit(qid, buf);
        let Some(conn) = self.conns.get_mut(&qid) else { return false };
        if n > 0 && !closed_ctrl {
            conn.handle_input(&buf[..n], self.now);
        }
        let reason = conn.close_reason().filter(|_| closed_ctrl).cloned();
        conn.transport_closed();
        let now = self.now;
        self.holder(qid).transport_closed(qid, now);
        self.conns.remove(&qid);
        self.backlog.remove(&qid);
        self.closed.push((qid, reason));
        true
    }

    /// The earliest deadline of either side.
    pub fn next_deadline(&self) -> Option<Instant> {
        let conns = self.conns.values().filter_map(|c| c.poll_timeout());
        let sets = self.sets.iter().filter_map(|(s, _)| s.poll_timeout());
        self.host.poll_timeout().into_iter().chain(conns).chain(sets).min()
    }

    /// Fire every timer due at `now` on both sides.
    pub fn fire_timers(&mut self) {
        self.host.handle_timeout(self.now);
        for (set, _) in &mut self.sets {
            set.handle_timeout(self.now);
        }
        for c in self.conns.values_mut() {
            c.handle_timeout(self.now);
        }
    }

    /// Run until quiet, then jump to the next deadline; stop when `done`
    /// says so or nothing is left to happen.
    pub fn run_until(&mut self, mut done: impl FnMut(&[HostEvent]) -> bool) {
        for _ in 0..1_000_000 {
            while self.step() {}
            if done(&self.events) {
                return;
            }
            let Some(t) = self.next_deadline() else { return };
            self.now = self.now.max(t);
            self.fire_timers();
        }
        panic!("did not settle");
    }

    /// Run with time passing for `d`.
    pub fn run_for(&mut self, d: Duration) {
        let end = self.now + d;
        loop {
            while self.step() {}
            match self.next_deadline() {
                Some(t) if t <= end => self.now = self.now.max(t),
                _ => {
                    self.now = end;
                    return;
                }
            }
            self.fire_timers();
        }
    }

    /// Run until bring-up finishes, and insist it succeeded.
    pub fn ready(&mut self) {
        self.run_until(|ev| {
            ev.iter().any(|e| matches!(e, HostEvent::Ready | HostEvent::Failed(_)))
        });
        assert!(self.host.is_ready(), "events: {:?}", self.events);
    }

    /// Why the association failed for good, if it did.
    pub fn failure(&self) -> Option<&HostError> {
        self.events.iter().find_map(|e| if let HostEvent::Failed(e) = e { Some(e) } else { None })
    }

    /// Why the first association was lost (the host then reconnects).
    pub fn loss(&self) -> Option<&HostError> {
        self.events.iter().find_map(|e| match e {
            HostEvent::Reconnecting { error: Some(e), .. } | HostEvent::Failed(e) => Some(e),
            _ => None,
        })
    }

    /// Cut queue `qid`'s transport, as a dead link or peer does.
    pub fn cut(&mut self, qid: u16) {
        self.conns.remove(&qid);
        self.backlog.remove(&qid);
        let now = self.now;
        self.holder(qid).transport_closed(qid, now);
    }

    /// Every completion of `tag` so far.
    pub fn completions(&self, tag: u64) -> Vec<Status> {
        self.events
            .iter()
            .filter_map(|e| match e {
                HostEvent::Completion { tag: t, status, .. } if *t == tag => Some(*status),
                _ => None,
            })
            .collect()
    }

    /// Submit `io` on queue `qid` and run until it completes.
    pub fn submit_and_wait(&mut self, qid: u16, io: Io) -> Status {
        let tag = io.tag;
        if let Err(e) = self.host.submit(qid, io, self.now) {
            panic!("submit: {e}");
        }
        self.run_until(|ev| {
            ev.iter().any(|e| matches!(e, HostEvent::Completion { tag: t, .. } if *t == tag))
        });
        let i = self
            .events
            .iter()
            .position(|e| matches!(e, HostEvent::Completion { tag: t, .. } if *t == tag));
        match i.map(|i| self.events.remove(i)) {
            Some(HostEvent::Completion { status, .. }) => status,
            _ => panic!("no completion; events {:?}", self.events),
        }
    }

    /// Submit one I/O on namespace 1 and run until it completes.
    pub fn io(
        &mut self,
        qid: u16,
        kind: IoKind,
        slba: u64,
        nlb: u32,
        buf: Option<IoBuf>,
    ) -> Status {
        let tag = self.now.as_micros() ^ slba;
        self.submit_and_wait(qid, Io { kind, nsid: 1, slba, nlb, buf, tag })
    }
}

/// Bytes that differ from seed to seed, for data a test reads back.
pub fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}
