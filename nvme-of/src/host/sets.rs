//! Queue sets: I/O queues lent to hosts of their own, so that each set runs
//! on a thread of its own (Linux runs each I/O queue's work on its own CPU,
//! `io_cpu`), while the association's host keeps the admin queue, keep
//! alive and the decisions of recovery.
//!
//! Once the association is up, [`Host::lend`] moves connected I/O queues
//! into a new `Host`, a set, which its thread drives as any host: it
//! submits I/O on them, completes it, retries what the controller lets it
//! retry. What a set cannot mend (a queue lost, a command timed out) it
//! reports as [`HostEvent::Reconnecting`]; the driver hands the error to
//! the association's [`Host::fail_association`], which makes a new
//! association as it would have, and the driver hands each set its new
//! queues with [`Host::adopt`], where it submits again what did not
//! complete. When the association fails for good, [`Host::abandon`] ends
//! the sets with it.

use super::queue::{Command, CommandTable, Commands, Owner, QueueEvent};
use super::{CmdData, Host, HostError, HostEvent, HostQueue, State};
use crate::nvme::{Cqe, Sqe, Status};
use crate::stats::{TxStats, UlpStats};
use crate::time::Instant;
use std::sync::Arc;
use ulp_ddp::{DdpDevice, FlowId, TxSink};

/// What stands in a host's place of a queue another host holds: it holds
/// nothing, sends nothing and is never live.
pub(super) struct Lent(CommandTable<()>);

impl Lent {
    pub(super) fn boxed() -> Box<dyn HostQueue> {
        Box::new(Lent(CommandTable::new(0)))
    }
}

impl HostQueue for Lent {
    fn connected(&mut self, _now: Instant) {}
    fn offload(&mut self, _dev: Arc<dyn DdpDevice>, _flow: FlowId, _threshold: Option<u32>) {}
    fn is_offloaded(&self) -> bool {
        false
    }
    fn ddp_max_transfer(&self) -> Option<u64> {
        None
    }
    fn is_live(&self) -> bool {
        false
    }
    fn submit(&mut self, _: Owner, _: Sqe, _: CmdData, _: Instant) -> Option<u16> {
        None
    }
    fn handle_input(&mut self, data: &[u8], _now: Instant) -> usize {
        data.len()
    }
    fn poll_send(&mut self, _out: &mut dyn TxSink) -> usize {
        0
    }
    fn pending_output(&self) -> usize {
        0
    }
    fn poll_event(&mut self) -> Option<QueueEvent> {
        None
    }
    fn is_closed(&self) -> bool {
        true
    }
    fn transport_closed(&mut self) {}
    fn close(&mut self) {}
    fn stats(&self) -> (UlpStats, TxStats) {
        Default::default()
    }
    fn commands(&self) -> &dyn Commands {
        &self.0
    }
    fn commands_mut(&mut self) -> &mut dyn Commands {
        &mut self.0
    }
    fn abort_all(&mut self) -> Vec<(Command, Option<(Status, Cqe)>)> {
        Vec::new()
    }
}

impl Host {
    /// Lend I/O queues `qids` to a set of their own, for another thread to
    /// drive; it reports [`HostEvent::Ready`] first. None unless the
    /// association is up and each of `qids` is an I/O queue this host
    /// holds with nothing outstanding (the sets, not this host, run I/O).
    pub fn lend(&mut self, qids: &[u16]) -> Option<Host> {
        let held = |q: &u16| {
            let i = usize::from(*q);
            *q > 0
                && i < self.queues.len()
                && !self.lent.contains(q)
                && self.queues[i].commands().outstanding() == 0
        };
        if self.state != State::Ready || qids.is_empty() || !qids.iter().all(held) {
            return None;
        }
        let mut set = Host::new(self.cfg.clone(), self.transport.clone());
        set.set = true;
        set.connect_pending.clear();
        set.queues = (0..self.queues.len()).map(|_| Lent::boxed()).collect();
        set.lent = (0..self.queues.len() as u16).collect();
        for &qid in qids {
            std::mem::swap(&mut self.queues[usize::from(qid)], &mut set.queues[usize::from(qid)]);
            self.lent.insert(qid);
            set.lent.remove(&qid);
        }
        set.take_association(self);
        set.span = tracing::debug_span!(parent: &self.span, "queue set", ?qids);
        set.events.push_back(HostEvent::Ready);
        Some(set)
    }

    /// A set takes the queues `new` was lent on a new association, in
    /// place of those it lost, and submits again what did not complete
    /// ([`HostEvent::Reconnected`]).
    pub fn adopt(&mut self, mut new: Host, now: Instant) {
        self.now = self.now.max(now);
        if !self.set || matches!(self.state, State::Failed | State::Closed) {
            return;
        }
        if self.state == State::Ready {
            // Not told the old association was lost: it is, for this set.
            self.lost_at.get_or_insert(now);
            self.stop_queues();
        }
        self.queues = std::mem::take(&mut new.queues);
        self.lent = std::mem::take(&mut new.lent);
        self.take_association(&new);
        if self.lost_at.take().is_some() {
            self.events.push_back(HostEvent::Reconnected);
            self.resubmit(now);
        } else {
            self.events.push_back(HostEvent::Ready);
        }
    }

    /// What the association is: its controller, namespaces and queues' size.
    fn take_association(&mut self, from: &Host) {
        self.state = State::Ready;
        self.association = from.association;
        self.cntlid = from.cntlid;
        self.cap = from.cap;
        self.vs = from.vs;
        self.cc = from.cc;
        self.ctrl = from.ctrl.clone();
        self.namespaces = from.namespaces.clone();
        self.io_queue_size = from.io_queue_size;
        self.io_connected = from.io_connected;
        self.now = self.now.max(from.now);
    }

    /// Association `which` ([`Host::association`]) is in trouble
    /// elsewhere. On the association's host: a set lost a queue, and a new
    /// association is made, as Linux's error recovery resets the whole
    /// controller for one queue's error. On a set: the association was
    /// lost; it stops its queues and waits to [`adopt`](Host::adopt) new
    /// ones, reporting `Reconnecting` with no error of its own (nothing for
    /// the driver to hand back). Nothing happens if that association is no
    /// longer the one up (news from another thread comes late), or if a new
    /// one is being made already.
    pub fn fail_association(&mut self, error: HostError, which: u64, now: Instant) {
        self.now = self.now.max(now);
        if which != self.association {
            return;
        }
        match self.set {
            true if self.state == State::Ready => {
                tracing::debug!(parent: &self.span, %error, "the association was lost");
                self.lost_at.get_or_insert(now);
                self.begin_reconnect(None, std::time::Duration::ZERO);
            }
            true => {}
            // Being made again already (a late report): let it be.
            false if matches!(self.state, State::Ready | State::Disabling) => self.fail(error),
            false => {}
        }
    }

    /// Which association this host is on (or was, while a new one is
    /// made): it counts the associations made.
    pub fn association(&self) -> u64 {
        self.association
    }

    /// The association failed for good (past ctrl-loss-tmo, say): a set
    /// completes what it holds with an error and reports `Failed`.
    pub fn abandon(&mut self, error: HostError, now: Instant) {
        self.now = self.now.max(now);
        self.give_up(error);
    }

    /// Whether this host is a set of lent queues.
    pub fn is_set(&self) -> bool {
        self.set
    }

    /// Whether this host holds queue `qid` (not lent, not another's).
    pub fn holds(&self, qid: u16) -> bool {
        usize::from(qid) < self.queues.len() && !self.lent.contains(&qid)
    }

    /// The I/O queues this host drives (those it lent are not).
    pub fn io_qids(&self) -> Vec<u16> {
        (1..self.queues.len() as u16).filter(|q| !self.lent.contains(q)).collect()
    }
}
