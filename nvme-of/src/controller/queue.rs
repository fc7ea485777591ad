//! One controller queue as the core sees it, whatever carries it: the
//! queue a Connect bound, the commands it holds, and what each command
//! leads to. The transport binding receives capsules, fetches host data
//! when asked ([`Action::Fetch`]) and sends what [`Action::Respond`] says.

use super::transport::CloseReason;
use super::{AssocRef, Hot, Target, lock};
use crate::Binding;
use crate::binding::DataSgl;
use crate::namespace::Answers;
use crate::nvme::log::ErrorLogEntry;
use crate::nvme::{Cqe, SglType, Sqe, Status, admin};
use crate::pool::BufPool;
use crate::time::Instant;
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use tracing::trace;
use ulp_ddp::{IoBuf, SgEntry};

/// The queue a Connect bound a connection to.
pub(crate) struct Queue {
    pub assoc: AssocRef,
    /// What its commands read of the association, without the lock.
    pub hot: Arc<Hot>,
    pub qid: u16,
    pub size: u32,
    pub sq_flow_control: bool,
    pub sqhd: u16,
    pub cntlid: u16,
    /// The controller's reset count when this queue connected: an I/O
    /// queue from before a reset is deleted.
    pub generation: u32,
    /// DH-HMAC-CHAP on this queue, when its host must authenticate.
    pub auth: Option<crate::auth::CtrlAuth>,
}

impl Queue {
    /// An I/O queue whose controller was reset (CC.EN cleared) since it
    /// connected: its state is gone, and its connection is to close.
    pub fn deleted(&self) -> bool {
        self.qid > 0 && self.hot.generation() != self.generation
    }

    /// The host must authenticate this queue and has not (yet).
    pub fn unauthenticated(&self) -> bool {
        self.auth.as_ref().is_some_and(|a| !a.authenticated())
    }
}

/// Data that came with a command: a buffer and how many bytes of it.
pub(crate) type Data = Option<(IoBuf, usize)>;

/// Data a command answers with: bytes of a buffer of ours, or of the
/// namespace's own memory when it lent them.
pub(crate) type Reply = Option<SgEntry>;

/// An I/O the storage has not answered yet (`io` hands it over and
/// collects the answers).
pub(crate) struct StorageIo {
    pub sqe: Sqe,
    /// A Read's data, sent when the storage has filled it.
    pub data: Reply,
    /// Bytes a Read or Write moves, for the counters.
    pub bytes: u64,
    /// Answers still owed (a Flush of every namespace asks each).
    pub owed: usize,
    pub failed: bool,
}

/// What executing a command led to.
pub(crate) enum Outcome {
    Complete {
        status: Status,
        result: u64,
        data: Reply,
    },
    /// The command needs this many bytes from the host first.
    NeedData(u32),
    /// Completed later (Asynchronous Event Request).
    Hold,
    /// Handed to the storage; completes when it answers.
    Pending,
}

impl Outcome {
    pub fn status(status: Status) -> Self {
        Outcome::Complete { status, result: 0, data: None }
    }

    pub fn ok() -> Self {
        Self::status(Status::SUCCESS)
    }
}

/// What the binding does with a command next.
#[derive(Debug)]
pub enum Action {
    /// Send `data` to the host (if any, and only on success), then `cqe`.
    Respond { cqe: Cqe, data: Reply },
    /// Fetch this many bytes of host data (R2T, RDMA Read), then
    /// [`CtrlQueue::resume`] the command with them.
    Fetch(u32),
    /// Nothing to send now: an Asynchronous Event Request, or an I/O the
    /// storage answers later ([`CtrlQueue::storage_answer`]).
    Hold,
}

/// Where a command's data is, as its SGL says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DataPtr {
    InCapsule,
    /// Moved by the transport: the binding's own kind of data block.
    Remote,
    /// A descriptor this transport does not take.
    Invalid,
}

/// The core of one controller connection.
pub struct CtrlQueue {
    pub(crate) target: Arc<Target>,
    pub(crate) local_addr: Option<IpAddr>,
    pub(crate) binding: Binding,
    pub(crate) queue: Option<Queue>,
    pub(crate) pool: BufPool,
    /// Commands not completed yet, by CID.
    waiting: HashMap<u16, (Waiting, Sqe)>,
    /// I/Os with the storage, by CID.
    pub(crate) storage: HashMap<u16, StorageIo>,
    /// Where the storage answers them.
    pub(crate) answers: Arc<Answers>,
    /// Until the queue is connected (and authenticated, where its host
    /// must): when the connection is given up.
    pub(crate) connect_by: Option<Instant>,
}

/// Why a command has not completed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Waiting {
    /// Its data is being fetched from the host.
    HostData,
    /// An Asynchronous Event Request, held until an event.
    Event,
    /// The storage has it.
    Storage,
}

impl CtrlQueue {
    /// A connection just accepted. `local_addr` is our address on it, which
    /// the discovery log reports when the port listens on any address.
    pub fn new(target: Arc<Target>, local_addr: Option<IpAddr>, binding: Binding) -> Self {
        Self {
            local_addr,
            binding,
            queue: None,
            pool: BufPool::default(),
            waiting: HashMap::new(),
            storage: HashMap::new(),
            answers: Answers::new(target.waker.clone()),
            target,
            connect_by: None,
        }
    }

    /// Storage answers for this queue wake `waker` instead of the
    /// target's. Before any command: answers already promised keep the
    /// waker they were promised with.
    pub fn wake_with(&mut self, waker: std::task::Waker) {
        self.answers = Answers::new(Arc::new(std::sync::Mutex::new(Some(waker))));
    }

    /// The binding accepted this connection at `now`: unless it connects a
    /// queue within the target's connect timeout, it is closed (as a peer
    /// that never sends ICReq or Connect would otherwise hold it for ever).
    pub fn accepted(&mut self, now: Instant) {
        self.connect_by = Some(now + self.target.config().connect_timeout);
    }

    pub fn target(&self) -> &Arc<Target> {
        &self.target
    }

    /// The queue this connection serves, once connected.
    pub fn qid(&self) -> Option<u16> {
        self.queue.as_ref().map(|q| q.qid)
    }

    /// Entries of the connected queue.
    pub fn size(&self) -> Option<u32> {
        self.queue.as_ref().map(|q| q.size)
    }

    /// Whether SQ flow control is on (it is until a Connect turns it off).
    pub fn sq_flow_control(&self) -> bool {
        self.queue.as_ref().is_none_or(|q| q.sq_flow_control)
    }

    /// A buffer for command data, reused when one is free.
    pub fn buffer(&mut self, len: usize) -> IoBuf {
        self.pool.get(len)
    }

    /// A capsule arrived: any command counts as keep alive traffic.
    pub fn traffic(&self, now: Instant) {
        if let Some(q) = &self.queue {
            q.hot.traffic(now);
        }
    }

    /// A command whose capsule (and in-capsule data) arrived whole;
    /// `fail` is a transport-level failure already known (a digest error,
    /// too much in-capsule data).
    pub fn submit(&mut self, sqe: &Sqe, data: Data, fail: Option<Status>, now: Instant) -> Action {
        if let Some(q) = &mut self.queue {
            q.sqhd = ((u32::from(q.sqhd) + 1) % q.size) as u16;
        }
        // A CID must be unique among a queue's outstanding commands, and a
        // controller may fail one that is not with Command ID Conflict
        // (03h), though it need not look (Linux nvmet does not). A held
        // AER yields its CID: SPDK's initiator, detaching, aborts its AERs
        // on its own side without a word to us and reuses their CIDs for
        // the Property Get and Set of an orderly shutdown (its own target
        // serves that). An AER has no data in flight and nothing to tell
        // but an event, so the new command loses nothing by taking its
        // CID. A command with data or storage work in flight keeps the
        // check: two commands on one CID would mix their transfers.
        match self.waiting.get(&sqe.cid) {
            Some((Waiting::Event, _)) => {
                self.waiting.remove(&sqe.cid);
            }
            Some(_) => return self.respond(sqe, Outcome::status(Status::COMMAND_ID_CONFLICT)),
            None => {}
        }
        if let Some(q) = &self.queue
            && self.waiting.len() + 1 >= q.size as usize
        {
            return self.respond(sqe, Outcome::status(Status::COMMAND_SEQUENCE_ERROR));
        }
        self.run(sqe, data, fail, now)
    }

    /// The host data an [`Action::Fetch`] asked for arrived (or could not
    /// be fetched: `fail`).
    pub fn resume(&mut self, sqe: &Sqe, data: Data, fail: Option<Status>, now: Instant) -> Action {
        self.waiting.remove(&sqe.cid);
        self.run(sqe, data, fail, now)
    }

    fn run(&mut self, sqe: &Sqe, data: Data, fail: Option<Status>, now: Instant) -> Action {
        let outcome = match fail {
            Some(status) => Outcome::status(status),
            None => self.execute(sqe, data, now),
        };
        self.respond(sqe, outcome)
    }

    fn execute(&mut self, sqe: &Sqe, data: Data, now: Instant) -> Outcome {
        if sqe.opcode == admin::FABRICS {
            return self.fabrics(sqe, data, now);
        }
        let Some(q) = &self.queue else {
            return Outcome::status(Status::COMMAND_SEQUENCE_ERROR);
        };
        if q.unauthenticated() {
            return Outcome::status(Status::AUTH_REQUIRED);
        }
        if sqe.flags & 0x3 != 0 || sqe.flags & 0xc0 != Sqe::FLAGS_SGL {
            // Fused operations are not supported; fabrics data pointers are SGLs.
            return Outcome::status(Status::INVALID_FIELD);
        }
        if q.qid == 0 { self.admin(sqe, data, now) } else { self.io(sqe, data) }
    }

    /// Turn an outcome into what the binding does next.
    fn respond(&mut self, sqe: &Sqe, outcome: Outcome) -> Action {
        let (status, result, data) = match outcome {
            Outcome::Complete { status, result, data } => (status, result, data),
            Outcome::Hold => {
                self.waiting.insert(sqe.cid, (Waiting::Event, *sqe));
                return Action::Hold;
            }
            Outcome::Pending => {
                self.waiting.insert(sqe.cid, (Waiting::Storage, *sqe));
                return Action::Hold;
            }
            Outcome::NeedData(len) => {
                self.waiting.insert(sqe.cid, (Waiting::HostData, *sqe));
                return Action::Fetch(len);
            }
        };
        let cid = sqe.cid;
        self.waiting.remove(&cid);
        let (sqid, sqhd) = match &self.queue {
            Some(q) => (q.qid, if q.sq_flow_control { q.sqhd } else { 0xffff }),
            None => (0, 0),
        };
        if !status.is_success() {
            trace!(cid, opcode = sqe.opcode, %status, "command failed");
            if let Some(q) = &self.queue {
                let entry = ErrorLogEntry {
                    sqid,
                    cid,
                    status: status.to_field(),
                    nsid: sqe.nsid,
                    lba: sqe.slba(),
                    trtype: self.binding.trtype,
                    ..Default::default()
                };
                lock(&q.assoc).record_error(entry);
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
        let data = data.filter(|d| d.len > 0 && status.is_success());
        Action::Respond { cqe, data }
    }

    /// AERs held on this queue.
    pub(crate) fn held_aers(&self) -> usize {
        self.waiting.values().filter(|(w, _)| *w == Waiting::Event).count()
    }

    /// The queue was deleted under its commands (a controller reset):
    /// each one still waiting (for host data, the storage or an event)
    /// completes as Command Aborted due to SQ Deletion. An answer the
    /// storage gives later is dropped.
    pub fn abort_outstanding(&mut self) -> Vec<(Sqe, Action)> {
        self.storage.clear();
        let mut cmds: Vec<Sqe> = self.waiting.values().map(|&(_, sqe)| sqe).collect();
        cmds.sort_by_key(|sqe| sqe.cid);
        cmds.into_iter()
            .map(|sqe| (sqe, self.respond(&sqe, Outcome::status(Status::ABORTED_SQ_DELETION))))
            .collect()
    }

    /// Whether the storage has answered an I/O [`storage_answer`](Self::storage_answer)
    /// has not collected.
    pub fn storage_ready(&self) -> bool {
        self.answers.is_ready()
    }

    /// The next command the storage finished, and what the binding does
    /// with it.
    pub fn storage_answer(&mut self) -> Option<(Sqe, Action)> {
        while let Some((cid, result)) = self.answers.take() {
            let Some(sqe) = self.storage.get(&cid).map(|io| io.sqe) else { continue };
            if let Some(outcome) = self.answered(cid, result) {
                return Some((sqe, self.respond(&sqe, outcome)));
            }
        }
        None
    }

    /// Bind this connection to a queue (a successful Connect).
    pub(crate) fn bind(&mut self, queue: Queue) {
        self.queue = Some(queue);
    }

    /// Where `sqe`'s data is.
    pub(crate) fn data_ptr(&self, sqe: &Sqe) -> DataPtr {
        match (sqe.sgl.kind(), self.binding.data_sgl) {
            (SglType::InCapsule, _) => DataPtr::InCapsule,
            (SglType::Transport, DataSgl::Transport) | (SglType::Keyed, DataSgl::Keyed) => {
                DataPtr::Remote
            }
            _ => DataPtr::Invalid,
        }
    }

    /// The host data a command needs: in the capsule, or (None) still to
    /// be fetched. The SGL must describe at least `len` bytes; the rest is
    /// ignored (SGLS bit 18). Linux sends Dataset Management a whole page
    /// of ranges whatever the number of ranges, as Linux's nvmet accepts.
    pub(crate) fn host_data(&self, sqe: &Sqe, data: Data, len: usize) -> Result<Data, Status> {
        let sgl_len = sqe.sgl.data_len() as usize;
        match (self.data_ptr(sqe), data) {
            (DataPtr::InCapsule, _) if sqe.sgl.addr != 0 => Err(Status::SGL_OFFSET_INVALID),
            (DataPtr::InCapsule, Some((buf, n))) if n == sgl_len && n >= len => Ok(Some((buf, n))),
            (DataPtr::InCapsule, _) => Err(Status::DATA_SGL_LENGTH_INVALID),
            (DataPtr::Remote, _) if sgl_len < len => Err(Status::DATA_SGL_LENGTH_INVALID),
            (DataPtr::Remote, Some((buf, n))) if n == len => Ok(Some((buf, n))),
            (DataPtr::Remote, Some(_)) => Err(Status::INVALID_FIELD),
            (DataPtr::Remote, None) => Ok(None),
            (DataPtr::Invalid, _) => Err(Status::SGL_DESCRIPTOR_TYPE_INVALID),
        }
    }

    /// When [`handle_timeout`](Self::handle_timeout) should next run: at
    /// once for a deleted queue or an answer from the storage to collect,
    /// else at the keep alive deadline.
    pub fn poll_timeout(&self) -> Option<Instant> {
        if self.storage_ready() { Some(Instant::ZERO) } else { self.timer() }
    }

    /// When the queue's timers next need [`handle_timeout`](Self::handle_timeout):
    /// at once for a deleted queue, else at the keep alive deadline.
    pub fn timer(&self) -> Option<Instant> {
        let Some(q) = self.queue.as_ref() else { return self.connect_by };
        if q.deleted() || q.auth.as_ref().is_some_and(|a| a.failed().is_some()) {
            Some(Instant::ZERO)
        } else {
            crate::earliest(self.connect_by, q.hot.ka_deadline())
        }
    }

    /// Enforce this queue's timers, and say why it must close if one
    /// expired: no queue connected in time ([`CloseReason::ConnectTimeout`]);
    /// the keep alive timeout of its controller, which is then gone
    /// ([`CloseReason::KeepAliveExpired`] on the admin queue,
    /// [`CloseReason::ControllerGone`] on an I/O queue, whose outstanding
    /// commands the binding aborts); or a reset that deleted the queue
    /// (`ControllerGone` too).
    pub fn handle_timeout(&mut self, now: Instant) -> Option<CloseReason> {
        if let Some(q) = &self.queue
            && let Some(why) = q.auth.as_ref().and_then(|a| a.failed())
        {
            // The admin queue failing ends the controller and its other
            // queues, as in nvmet; an I/O queue failing ends itself only,
            // so a peer that merely knows a HOSTNQN and a CNTLID cannot
            // take down a controller it never authenticated to.
            if q.qid == 0 {
                let a = lock(&q.assoc);
                a.set_dead();
                self.target.remove_association(a.cntlid);
            }
            return Some(CloseReason::AuthenticationFailed(why));
        }
        // Until it is connected, and authenticated where its host must be,
        // a connection has the connect timeout (cleared once it is).
        if self.connect_by.is_some_and(|t| now >= t) {
            self.connect_by = None;
            self.target.counters.connect_timeouts.fetch_add(1, Ordering::Relaxed);
            tracing::info!("no queue connected in time; closing the connection");
            return Some(CloseReason::ConnectTimeout);
        }
        let q = self.queue.as_ref()?;
        if !q.deleted() && q.hot.ka_deadline().is_none_or(|t| now < t) && !q.hot.dead() {
            return None;
        }
        let (expired, cntlid) = {
            let mut a = lock(&q.assoc);
            if q.deleted() {
                tracing::debug!(
                    cntlid = q.cntlid,
                    qid = q.qid,
                    "controller reset; I/O queue deleted"
                );
                return Some(CloseReason::ControllerGone);
            }
            (a.expired(now), a.cntlid)
        };
        if !expired {
            return None;
        }
        tracing::warn!(
            cntlid,
            qid = q.qid,
            "keep alive timer expired; tearing down the controller"
        );
        self.target.remove_association(cntlid);
        Some(if q.qid == 0 { CloseReason::KeepAliveExpired } else { CloseReason::ControllerGone })
    }

    /// The transport closed: release the controller if this was its
    /// admin queue.
    pub fn transport_closed(&mut self) {
        if let Some(q) = &self.queue {
            let mut a = lock(&q.assoc);
            if a.hot.generation() == q.generation {
                a.connected.remove(&q.qid);
            }
            if q.qid == 0 {
                if !a.hot.dead() {
                    tracing::info!(cntlid = a.cntlid, hostnqn = %a.hostnqn, "host disconnected");
                }
                a.set_dead();
                self.target.remove_association(a.cntlid);
            }
        }
    }
}
