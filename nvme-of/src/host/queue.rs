//! What the host asks of a transport binding's queue, and the command
//! table every binding keeps.
//!
//! A binding's queue is one transport connection (a TCP connection for
//! NVMe/TCP, a queue pair for NVMe/RDMA): it carries capsules and data and
//! reports completions; what the commands mean is the
//! [`Host`](super::Host)'s business. Its per-command state lives in a
//! [`CommandTable`] indexed by CID, with whatever the binding adds.

use crate::Instant;
use crate::nvme::{Cqe, Sqe, Status};
use crate::stats::{TxStats, UlpStats};
use std::cell::Cell;
use std::sync::Arc;
use ulp_ddp::{DdpDevice, FlowId, IoBuf, SliceSink, TxSink};

/// Which way a command's data moves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dir {
    None,
    ToController,
    FromController,
}

/// Who a command belongs to, so its completion finds its way back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Owner {
    /// A step of bring-up, shutdown or discovery.
    Admin(super::Step),
    KeepAlive,
    Aer,
    /// An Abort of a command that timed out.
    Abort,
    Io(u64),
}

/// Why a queue stopped.
#[derive(Debug, Clone, thiserror::Error)]
pub enum QueueError {
    #[error("transport closed")]
    TransportClosed,
    /// The device reported freeing a mapping this queue did not expect it
    /// to free with this response (a bogus remote invalidation).
    #[error("device freed tag {freed:#x} with the response for CID {cid}")]
    OneShotMismatch { cid: u16, freed: u32 },
    /// The binding's own reason: a malformed PDU, a Terminate, a refused
    /// connection. [`QueueError::downcast_ref`] gets it back.
    #[error(transparent)]
    Transport(Arc<dyn std::error::Error + Send + Sync>),
}

impl QueueError {
    pub fn transport(e: impl std::error::Error + Send + Sync + 'static) -> Self {
        QueueError::Transport(Arc::new(e))
    }

    /// The binding's error, if it is an `E`.
    pub fn downcast_ref<E: std::error::Error + 'static>(&self) -> Option<&E> {
        match self {
            QueueError::Transport(e) => e.downcast_ref(),
            _ => None,
        }
    }
}

impl PartialEq for QueueError {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (QueueError::Transport(a), QueueError::Transport(b)) => a.to_string() == b.to_string(),
            (QueueError::TransportClosed, QueueError::TransportClosed) => true,
            (
                QueueError::OneShotMismatch { cid: a, freed: f },
                QueueError::OneShotMismatch { cid: b, freed: g },
            ) => a == b && f == g,
            _ => false,
        }
    }
}

impl Eq for QueueError {}

/// What a queue reports.
#[derive(Debug)]
pub enum QueueEvent {
    /// The transport-level connection is up: the host may Connect.
    Established,
    Completion {
        cmd: Command,
        status: Status,
        cqe: Cqe,
    },
    Failed(QueueError),
}

/// Data a command moves: the buffer, how many bytes of it, which way.
pub type CmdData = Option<(IoBuf, usize, Dir)>;

/// One queue of one transport binding, sans-IO: bytes in, bytes out.
pub trait HostQueue: Send {
    /// The transport connection is up: start the binding's own setup
    /// (ICReq, an MPA Request). `Established` follows when it is done.
    fn connected(&mut self, now: Instant);
    /// Let `dev` offload this queue's connection `flow` (from when the
    /// binding can hand it over); transfers of `threshold` bytes or more
    /// (the device's own if `None`) are mapped for placement.
    fn offload(&mut self, dev: Arc<dyn DdpDevice>, flow: FlowId, threshold: Option<u32>);
    fn is_offloaded(&self) -> bool;
    /// Largest transfer the offloading device can map, if it limits it.
    fn ddp_max_transfer(&self) -> Option<u64>;
    /// Whether commands may be submitted.
    fn is_live(&self) -> bool;
    /// Send a command with its data: the CID it got, or None when the
    /// queue is full.
    fn submit(&mut self, owner: Owner, sqe: Sqe, data: CmdData, deadline: Instant) -> Option<u16>;
    /// Bytes received; returns how many were taken.
    fn handle_input(&mut self, data: &[u8], now: Instant) -> usize;
    /// Queue bytes to send in `out`; returns how many.
    fn poll_send(&mut self, out: &mut dyn TxSink) -> usize;
    /// Bytes to send, copied into `out`; how many.
    fn poll_transmit(&mut self, out: &mut [u8]) -> usize {
        self.poll_send(&mut SliceSink::new(out))
    }
    fn pending_output(&self) -> usize;
    /// When the binding itself wants `handle_timeout` (connection setup).
    fn poll_timeout(&self) -> Option<Instant> {
        None
    }
    fn handle_timeout(&mut self, _now: Instant) {}
    fn poll_event(&mut self) -> Option<QueueEvent>;
    /// Nothing more will be sent: close the transport.
    fn is_closed(&self) -> bool;
    /// The transport closed under us.
    fn transport_closed(&mut self);
    /// Close without error, after sending what is queued.
    fn close(&mut self);
    /// Work done on received and sent data.
    fn stats(&self) -> (UlpStats, TxStats);
    fn commands(&self) -> &dyn Commands;
    fn commands_mut(&mut self) -> &mut dyn Commands;
    /// The association is going away: drop what is queued to send, and
    /// hand back every outstanding command with the answer it had, if it
    /// had one (a device still holding its buffer).
    fn abort_all(&mut self) -> Vec<(Command, Option<(Status, Cqe)>)>;
}

/// A binding that makes queues for a host.
pub trait Transport: Send + Sync {
    /// Queue `qid` of `size` entries, taking at most `inline` bytes of
    /// in-capsule data.
    fn queue(&self, qid: u16, size: u16, inline: usize) -> Box<dyn HostQueue>;
    fn binding(&self) -> crate::Binding;
}

/// What the host reads from a queue's command table.
pub trait Commands {
    fn outstanding(&self) -> usize;
    fn depth(&self) -> usize;
    /// When to look for overdue commands: no later than the earliest
    /// deadline of a command still waiting for its response, and perhaps
    /// earlier (the command that set it may have been answered since);
    /// [`overdue`](Self::overdue) at that time then finds the real one.
    fn deadline(&self) -> Option<Instant>;
    fn has_owner(&self, owner: Owner) -> bool;
    /// A command still waiting for its response at `now` past its
    /// deadline: its CID and owner.
    fn overdue(&self, now: Instant) -> Option<(u16, Owner)>;
    /// Give command `cid` until `deadline`.
    fn extend(&mut self, cid: u16, deadline: Instant);
}

/// A command as it was submitted: enough to submit it again.
#[derive(Debug)]
pub struct Command {
    pub owner: Owner,
    pub sqe: Sqe,
    pub data: CmdData,
}

impl Command {
    /// The buffer, given back with the completion.
    pub fn buf(self) -> Option<IoBuf> {
        self.data.map(|(b, _, _)| b)
    }
}

/// One outstanding command, with the binding's own state `X`.
#[derive(Debug)]
pub struct Cmd<X> {
    pub owner: Owner,
    /// As submitted, to submit again on a new association.
    pub sqe: Sqe,
    pub buf: Option<IoBuf>,
    pub len: usize,
    pub dir: Dir,
    pub deadline: Instant,
    /// First transport-level failure (a digest or CRC error).
    pub status: Option<Status>,
    /// Answered, waiting for the device to let go before the CID is free.
    pub done: Option<(Status, Cqe)>,
    pub x: X,
}

impl<X> Cmd<X> {
    /// A command as submitted with `data`, carrying the binding's own
    /// state `x`.
    pub fn new(owner: Owner, sqe: Sqe, data: CmdData, deadline: Instant, x: X) -> Self {
        let (buf, len, dir) = match data {
            Some((b, n, d)) => (Some(b), n, d),
            None => (None, 0, Dir::None),
        };
        Cmd { owner, sqe, buf, len, dir, deadline, status: None, done: None, x }
    }

    /// Waiting for its response against a deadline (an AER may wait for
    /// ever).
    fn is_timed(&self) -> bool {
        self.owner != Owner::Aer && self.done.is_none()
    }

    fn into_command(self) -> Command {
        let data = self.buf.map(|b| (b, self.len, self.dir));
        Command { owner: self.owner, sqe: self.sqe, data }
    }
}

/// Commands by CID; a queue of `size` entries has at most `size - 1`
/// outstanding.
///
/// The deadlines are not searched each time the host asks when the next
/// one is: the table keeps a time no later than any of them, lowered as
/// commands come and moved up to the real earliest only when it has
/// passed, as the block layer's request timer is armed for the earliest
/// request and finds on firing what is really due.
pub struct CommandTable<X> {
    slots: Vec<Option<Cmd<X>>>,
    free: Vec<u16>,
    /// No timed command's deadline is earlier; None when none is timed.
    due: Cell<Option<Instant>>,
}

impl<X> CommandTable<X> {
    pub fn new(size: u16) -> Self {
        let depth = size.saturating_sub(1).max(1);
        Self {
            slots: (0..depth).map(|_| None).collect(),
            free: (0..depth).rev().collect(),
            due: Cell::new(None),
        }
    }

    /// Take a free CID for `cmd`.
    pub fn insert(&mut self, cmd: Cmd<X>) -> Option<u16> {
        let cid = self.free.pop()?;
        if cmd.is_timed() {
            self.lower_due(cmd.deadline);
        }
        self.slots[usize::from(cid)] = Some(cmd);
        Some(cid)
    }

    fn lower_due(&self, deadline: Instant) {
        self.due.set(Some(self.due.get().map_or(deadline, |d| d.min(deadline))));
    }

    pub fn get(&self, cid: u16) -> Option<&Cmd<X>> {
        self.slots.get(usize::from(cid)).and_then(Option::as_ref)
    }

    pub fn get_mut(&mut self, cid: u16) -> Option<&mut Cmd<X>> {
        self.slots.get_mut(usize::from(cid)).and_then(Option::as_mut)
    }

    /// A command still waiting for its response.
    pub fn pending_mut(&mut self, cid: u16) -> Option<&mut Cmd<X>> {
        self.get_mut(cid).filter(|c| c.done.is_none())
    }

    /// Free `cid`: its completion, for the host.
    pub fn complete(&mut self, cid: u16, status: Status, cqe: Cqe) -> Option<QueueEvent> {
        let cmd = self.slots.get_mut(usize::from(cid)).and_then(Option::take)?;
        self.free.push(cid);
        Some(QueueEvent::Completion { cmd: cmd.into_command(), status, cqe })
    }

    /// Forget every command, handing each back with its answer, if any.
    pub fn take_all(&mut self) -> Vec<(Command, Option<(Status, Cqe)>)> {
        let mut all = Vec::new();
        for (cid, slot) in self.slots.iter_mut().enumerate() {
            if let Some(c) = slot.take() {
                self.free.push(cid as u16);
                let done = c.done;
                all.push((c.into_command(), done));
            }
        }
        self.due.set(None);
        all
    }
}

impl<X> Commands for CommandTable<X> {
    fn outstanding(&self) -> usize {
        self.slots.len() - self.free.len()
    }

    fn depth(&self) -> usize {
        self.slots.len()
    }

    fn deadline(&self) -> Option<Instant> {
        self.due.get()
    }

    fn has_owner(&self, owner: Owner) -> bool {
        self.slots.iter().flatten().any(|c| c.owner == owner)
    }

    fn overdue(&self, now: Instant) -> Option<(u16, Owner)> {
        if self.due.get().is_none_or(|d| now < d) {
            return None;
        }
        // Due: look at every deadline, and keep the earliest found.
        let timed = self.slots.iter().enumerate().filter_map(|(cid, slot)| {
            slot.as_ref().filter(|c| c.is_timed()).map(|c| (cid as u16, c))
        });
        let mut first = None;
        let mut due = None::<Instant>;
        for (cid, c) in timed {
            if first.is_none() && now >= c.deadline {
                first = Some((cid, c.owner));
            }
            due = Some(due.map_or(c.deadline, |d| d.min(c.deadline)));
        }
        self.due.set(due);
        first
    }

    fn extend(&mut self, cid: u16, deadline: Instant) {
        if let Some(c) = self.pending_mut(cid) {
            c.deadline = deadline;
            self.lower_due(deadline);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nvme::SglDescriptor;

    fn cmd(owner: Owner, at: u64) -> Cmd<()> {
        let sqe = Sqe::new(0, 1, SglDescriptor::default());
        Cmd::new(owner, sqe, None, Instant::from_millis(at), ())
    }

    fn answer(t: &mut CommandTable<()>, cid: u16) {
        t.complete(cid, Status::SUCCESS, Cqe::new(cid, Status::SUCCESS)).expect("pending");
    }

    /// The earliest deadline of the commands still timed, by looking.
    fn earliest(t: &CommandTable<()>) -> Option<Instant> {
        t.slots.iter().flatten().filter(|c| c.is_timed()).map(|c| c.deadline).min()
    }

    #[test]
    fn the_deadline_is_never_later_than_a_pending_command_and_is_found_when_passed() {
        let mut t = CommandTable::new(8);
        let a = t.insert(cmd(Owner::Io(1), 10)).unwrap();
        let b = t.insert(cmd(Owner::Io(2), 30)).unwrap();
        t.insert(cmd(Owner::Aer, 5)).unwrap();
        assert_eq!(t.deadline(), Some(Instant::from_millis(10)), "an AER waits for ever");
        answer(&mut t, a);
        // Answered: the time to look stays, and looking then finds b's.
        assert!(t.deadline() <= earliest(&t));
        assert_eq!(t.overdue(Instant::from_millis(9)), None);
        assert_eq!(t.overdue(Instant::from_millis(10)), None);
        assert_eq!(t.deadline(), Some(Instant::from_millis(30)));
        t.extend(b, Instant::from_millis(20));
        assert_eq!(t.deadline(), Some(Instant::from_millis(20)));
        assert_eq!(t.overdue(Instant::from_millis(20)), Some((b, Owner::Io(2))));
        answer(&mut t, b);
        assert_eq!(t.overdue(Instant::from_millis(21)), None);
        assert_eq!(t.deadline(), None, "only the AER is left");
    }

    #[test]
    fn every_overdue_command_is_found_whatever_was_answered_before() {
        // Commands come and go in a mixed order; at every step the time to
        // look is no later than the earliest deadline, and at that time
        // exactly the commands past theirs are overdue.
        let mut t = CommandTable::new(16);
        let mut x: u64 = 0x2545_f491_4f6c_dd1d;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let mut now = 0;
        let mut pending: Vec<u16> = Vec::new();
        for _ in 0..2_000 {
            match next() % 3 {
                0 | 1 if pending.len() < 15 => {
                    let cid = t.insert(cmd(Owner::Io(0), now + 1 + next() % 50)).unwrap();
                    pending.push(cid);
                }
                _ if !pending.is_empty() => {
                    let cid = pending.swap_remove((next() % pending.len() as u64) as usize);
                    answer(&mut t, cid);
                }
                _ => {}
            }
            now += next() % 4;
            assert!(t.deadline() <= earliest(&t) || earliest(&t).is_none());
            let at = Instant::from_millis(now);
            let due = t.deadline().is_some_and(|d| at >= d);
            let found = if due { t.overdue(at) } else { None };
            let late = pending.iter().any(|&c| t.get(c).unwrap().deadline <= at);
            assert_eq!(found.is_some(), late, "at {now} ms");
            if let Some((cid, _)) = found {
                pending.retain(|&c| c != cid);
                answer(&mut t, cid);
            }
        }
    }
}
