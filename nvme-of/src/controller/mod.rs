//! The controller side: an NVM subsystem with its namespaces and a
//! discovery controller, served one queue at a time.
//!
//! A [`Target`] holds what every connection shares (configuration,
//! namespaces, the controllers hosts have created); a [`CtrlQueue`] is
//! the core of one connection, whatever transport carries it; a binding's
//! [`ControllerQueue`] carries it (`transport`). Admin and I/O command
//! execution live in `admin` and `io`.

mod access;
mod admin;
mod auth;
mod io;
mod queue;
mod transport;

pub use access::{Access, HostKeys};
pub use queue::{Action, CtrlQueue};
pub use transport::{CloseReason, ControllerQueue, Transport};

use crate::namespace::Namespace;
use crate::nvme::log::ErrorLogEntry;
use crate::nvme::{DISCOVERY_NQN, NQN_MAX_LEN};
use crate::time::Instant;
use crossbeam_utils::CachePadded;
use std::collections::{BTreeSet, HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::Waker;
use std::time::Duration;
use thread_local::ThreadLocal;

/// Where the target listens, as the discovery log reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Port {
    /// Transport address; an unspecified address ("0.0.0.0") is replaced by
    /// the local address of the connection asking.
    pub traddr: String,
    pub trsvcid: String,
    pub portid: u16,
}

/// What a target offers hosts.
#[derive(Debug, Clone)]
pub struct TargetConfig {
    pub subnqn: String,
    pub serial: String,
    pub model: String,
    pub firmware: String,
    /// In-capsule data an I/O queue command may carry (IOCCSZ = (64 + this) / 16).
    pub inline_data_size: u32,
    /// Entries per queue (CAP.MQES + 1), also MAXCMD.
    pub queue_size: u16,
    /// I/O queues a host may create.
    pub max_io_queues: u16,
    /// Largest data transfer, as 2^MDTS 4 KiB pages.
    pub mdts: u8,
    /// MAXH2CDATA announced in ICResp (NVMe/TCP, as the four below).
    pub maxh2cdata: u32,
    /// Most bytes one R2T asks for.
    pub r2t_len: u32,
    /// Most bytes one C2HData PDU carries.
    pub c2h_data_len: u32,
    /// Set SUCCESS on a read's last C2HData instead of sending a CapsuleResp,
    /// where the specification allows it (SQ flow control disabled).
    pub c2h_success: bool,
    /// Where the target listens, for the discovery log.
    pub port: Option<Port>,
    /// Map host writes of at least this many bytes for placement when a
    /// device offloads the connection; `None` takes the device's threshold.
    pub ddp_threshold: Option<u32>,
    /// A connection that has not connected a queue (ICReq or MPA, then
    /// Connect) this long after it was accepted is closed.
    pub connect_timeout: std::time::Duration,
    /// Connections a listener holds at once; one more is closed as soon as
    /// it is accepted (and counted).
    pub max_connections: usize,
    /// Which hosts may connect, and what they must prove. The default
    /// lets any host in unauthenticated, for the embedded uses; the
    /// `controller` command starts from none, as nvmet and SPDK do.
    pub access: Access,
}

impl Default for TargetConfig {
    fn default() -> Self {
        Self {
            subnqn: "nqn.2026-11.io.nvme-ddp:target".into(),
            serial: default_serial(),
            model: "nvme-ddp".into(),
            firmware: env!("CARGO_PKG_VERSION").into(),
            inline_data_size: 16384,
            queue_size: 128,
            max_io_queues: 64,
            mdts: 10,
            maxh2cdata: 0x40_0000,
            r2t_len: 0x10_0000,
            c2h_data_len: 0x2_0000,
            c2h_success: true,
            port: None,
            ddp_threshold: None,
            connect_timeout: std::time::Duration::from_secs(30),
            max_connections: 256,
            access: Access::any_host(),
        }
    }
}

/// A serial number that differs between runs, so that two targets never
/// present the same namespace identifiers: random bits (the standard
/// library's per-process hash keys, drawn from the OS), not a clock, which
/// nothing here reads.
fn default_serial() -> String {
    use std::hash::{BuildHasher, Hasher};
    let r = std::collections::hash_map::RandomState::new().build_hasher().finish();
    format!("{:010x}{:04x}", r & 0xff_ffff_ffff, std::process::id() & 0xffff)
}

/// A configuration the target cannot serve.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("subsystem NQN {0:?} must be 1..=223 bytes and not the discovery NQN")]
    BadNqn(String),
    #[error("a target needs at least one namespace")]
    NoNamespaces,
    #[error("queue size {0} must be 2..=4096")]
    BadQueueSize(u16),
    #[error("MAXH2CDATA {0} must be at least 4096 and a multiple of 4")]
    BadMaxH2cData(u32),
    #[error("{0} must be at least 4096")]
    TooSmall(&'static str),
    #[error("{0} must be more than zero")]
    Zero(&'static str),
}

/// Counters behind the SMART log and the controller's report.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub io: IoCounters,
    pub media_errors: AtomicU64,
    pub connect_timeouts: AtomicU64,
    pub connections_refused: AtomicU64,
    pub hosts_refused: AtomicU64,
}

/// What I/O commands completed, counted per thread that serves them (a
/// poll group, a queue's stack) and summed when read, as Linux keeps its
/// I/O statistics per CPU: no two groups write one cache line per I/O.
#[derive(Debug, Default)]
pub(crate) struct IoCounters(ThreadLocal<CachePadded<IoShard>>);

#[derive(Debug, Default)]
struct IoShard {
    reads: AtomicU64,
    bytes_read: AtomicU64,
    writes: AtomicU64,
    bytes_written: AtomicU64,
}

/// Reads and writes completed, and their bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct IoCounts {
    pub reads: u64,
    pub bytes_read: u64,
    pub writes: u64,
    pub bytes_written: u64,
}

impl IoCounters {
    pub fn read(&self, bytes: u64) {
        let s = self.0.get_or_default();
        bump(&s.reads, 1);
        bump(&s.bytes_read, bytes);
    }

    pub fn written(&self, bytes: u64) {
        let s = self.0.get_or_default();
        bump(&s.writes, 1);
        bump(&s.bytes_written, bytes);
    }

    /// Every thread's counts, summed.
    pub fn sum(&self) -> IoCounts {
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        self.0.iter().fold(IoCounts::default(), |t, s| IoCounts {
            reads: t.reads + get(&s.reads),
            bytes_read: t.bytes_read + get(&s.bytes_read),
            writes: t.writes + get(&s.writes),
            bytes_written: t.bytes_written + get(&s.bytes_written),
        })
    }
}

/// Add to a counter only this thread writes: a load and a store, no
/// locked read-modify-write.
fn bump(a: &AtomicU64, n: u64) {
    a.store(a.load(Ordering::Relaxed) + n, Ordering::Relaxed);
}

/// A snapshot of what the target has done.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TargetStats {
    pub bytes_read: u64,
    pub bytes_written: u64,
    pub reads: u64,
    pub writes: u64,
    pub media_errors: u64,
    pub controllers: usize,
    /// Connections closed for not connecting a queue in time.
    pub connect_timeouts: u64,
    /// Connections closed on arrival, over `max_connections`.
    pub connections_refused: u64,
    /// Connects refused: the host is not on the allow-list.
    pub hosts_refused: u64,
    /// Times the live controllers' locks were taken: bring-up, admin
    /// commands and timers take them; I/O commands do not, so queues of
    /// one controller in different poll groups never contend per I/O.
    pub association_locks: u64,
}

/// What every connection of one target shares.
pub struct Target {
    config: TargetConfig,
    namespaces: Vec<Arc<dyn Namespace>>,
    assocs: Mutex<Associations>,
    counters: Counters,
    /// Wakes the driver when storage answers later.
    waker: Arc<Mutex<Option<Waker>>>,
}

#[derive(Default)]
struct Associations {
    /// Each controller, and what its commands read without its lock.
    by_cntlid: HashMap<u16, (AssocRef, Arc<Hot>)>,
    next: u16,
}

impl Target {
    /// Namespaces get NSIDs 1, 2, ... in order.
    pub fn new(
        config: TargetConfig,
        namespaces: Vec<Arc<dyn Namespace>>,
    ) -> Result<Arc<Self>, ConfigError> {
        let nqn = &config.subnqn;
        if nqn.is_empty() || nqn.len() > NQN_MAX_LEN || nqn == DISCOVERY_NQN {
            return Err(ConfigError::BadNqn(nqn.clone()));
        }
        if namespaces.is_empty() {
            return Err(ConfigError::NoNamespaces);
        }
        if config.max_connections == 0 {
            return Err(ConfigError::Zero("max_connections"));
        }
        if config.connect_timeout.is_zero() {
            return Err(ConfigError::Zero("connect_timeout"));
        }
        if !(2..=4096).contains(&config.queue_size) {
            return Err(ConfigError::BadQueueSize(config.queue_size));
        }
        if config.maxh2cdata < 4096 || !config.maxh2cdata.is_multiple_of(4) {
            return Err(ConfigError::BadMaxH2cData(config.maxh2cdata));
        }
        if config.r2t_len < 4096 {
            return Err(ConfigError::TooSmall("R2T length"));
        }
        if config.c2h_data_len < 4096 {
            return Err(ConfigError::TooSmall("C2HData length"));
        }
        Ok(Arc::new(Self {
            config,
            namespaces,
            assocs: Mutex::new(Associations { next: 1, ..Default::default() }),
            counters: Counters::default(),
            waker: Arc::default(),
        }))
    }

    pub fn config(&self) -> &TargetConfig {
        &self.config
    }

    pub fn subnqn(&self) -> &str {
        &self.config.subnqn
    }

    pub fn namespaces(&self) -> &[Arc<dyn Namespace>] {
        &self.namespaces
    }

    /// How storage that answers later wakes the driver serving this
    /// target's connections, so that it runs their `handle_timeout`.
    pub fn set_waker(&self, waker: Waker) {
        *self.waker.lock().unwrap_or_else(PoisonError::into_inner) = Some(waker);
    }

    /// A listener holding `held` connections got one more: whether it may
    /// keep it (else it is counted as refused, and the listener closes it).
    pub fn admit_connection(&self, held: usize) -> bool {
        let ok = held < self.config.max_connections;
        if !ok {
            self.counters.connections_refused.fetch_add(1, Ordering::Relaxed);
            tracing::debug!(limit = self.config.max_connections, "too many connections; closing");
        }
        ok
    }

    pub fn stats(&self) -> TargetStats {
        let c = &self.counters;
        let io = c.io.sum();
        let assocs = self.lock_assocs();
        TargetStats {
            bytes_read: io.bytes_read,
            bytes_written: io.bytes_written,
            reads: io.reads,
            writes: io.writes,
            media_errors: c.media_errors.load(Ordering::Relaxed),
            controllers: assocs.by_cntlid.len(),
            association_locks: (assocs.by_cntlid.values())
                .map(|(_, hot)| hot.locks.load(Ordering::Relaxed))
                .sum(),
            connect_timeouts: c.connect_timeouts.load(Ordering::Relaxed),
            connections_refused: c.connections_refused.load(Ordering::Relaxed),
            hosts_refused: c.hosts_refused.load(Ordering::Relaxed),
        }
    }

    /// Largest data transfer in bytes (MDTS).
    pub(crate) fn max_transfer(&self) -> u64 {
        4096u64 << self.config.mdts.min(20)
    }

    fn lock_assocs(&self) -> MutexGuard<'_, Associations> {
        self.assocs.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A new controller for a host, with a CNTLID unique in the subsystem.
    pub(crate) fn create_association(&self, assoc: Association) -> Option<AssocRef> {
        let mut table = self.lock_assocs();
        for _ in 0..0xffef {
            let id = table.next;
            table.next = if id >= 0xffef { 1 } else { id + 1 };
            if let std::collections::hash_map::Entry::Vacant(slot) = table.by_cntlid.entry(id) {
                let hot = assoc.hot.clone();
                let a = Arc::new(Mutex::new(Association { cntlid: id, ..assoc }));
                slot.insert((a.clone(), hot));
                return Some(a);
            }
        }
        None
    }

    pub(crate) fn find_association(&self, cntlid: u16) -> Option<AssocRef> {
        self.lock_assocs().by_cntlid.get(&cntlid).map(|(a, _)| a.clone())
    }

    pub(crate) fn remove_association(&self, cntlid: u16) {
        self.lock_assocs().by_cntlid.remove(&cntlid);
    }
}

pub(crate) type AssocRef = Arc<Mutex<Association>>;

pub(crate) fn lock(a: &AssocRef) -> MutexGuard<'_, Association> {
    let guard = a.lock().unwrap_or_else(PoisonError::into_inner);
    guard.hot.locks.fetch_add(1, Ordering::Relaxed);
    guard
}

/// What every command of an association reads, apart from its lock, so
/// that its queues, served by different poll groups, share no lock per
/// I/O (Linux's nvmet reads these without one too). Written under the
/// association's lock, read without it.
#[derive(Debug)]
pub(crate) struct Hot {
    /// Controller resets (CC.EN 1 to 0) so far.
    generation: AtomicU32,
    /// CSTS.RDY.
    ready: AtomicBool,
    /// The volatile write cache is on.
    vwc: AtomicBool,
    /// The admin queue is gone or the keep alive timer expired: every
    /// queue of this controller closes.
    dead: AtomicBool,
    /// When the association expires unless a command arrives, in the
    /// sans-IO clock's microseconds; `u64::MAX` for never.
    ka_deadline: AtomicU64,
    /// The keep alive timeout in microseconds; 0 for none.
    kato: AtomicU64,
    /// Times the association's lock was taken: users see that I/O takes
    /// none.
    locks: AtomicU64,
}

impl Default for Hot {
    fn default() -> Self {
        Self {
            generation: AtomicU32::new(0),
            ready: AtomicBool::new(false),
            vwc: AtomicBool::new(true),
            dead: AtomicBool::new(false),
            ka_deadline: AtomicU64::new(u64::MAX),
            kato: AtomicU64::new(0),
            locks: AtomicU64::new(0),
        }
    }
}

impl Hot {
    pub fn generation(&self) -> u32 {
        self.generation.load(Ordering::Acquire)
    }

    pub fn ready(&self) -> bool {
        self.ready.load(Ordering::Acquire)
    }

    pub fn vwc(&self) -> bool {
        self.vwc.load(Ordering::Relaxed)
    }

    pub fn dead(&self) -> bool {
        self.dead.load(Ordering::Acquire)
    }

    pub fn ka_deadline(&self) -> Option<Instant> {
        match self.ka_deadline.load(Ordering::Relaxed) {
            u64::MAX => None,
            us => Some(Instant::from_micros(us)),
        }
    }

    /// A command arrived at `now`: the keep alive deadline moves to `now +
    /// kato` (CTRATT.TBKAS). Stored only once it has moved by a
    /// millisecond, so that queues on several CPUs rarely write the line
    /// they all read.
    pub fn traffic(&self, now: Instant) {
        let kato = self.kato.load(Ordering::Relaxed);
        if kato == 0 {
            return;
        }
        let due = now.as_micros().saturating_add(kato);
        let at = self.ka_deadline.load(Ordering::Relaxed);
        if at != u64::MAX && due > at.saturating_add(1000) {
            self.ka_deadline.fetch_max(due, Ordering::Relaxed);
        }
    }
}

/// One controller: the state an admin queue and its I/O queues share.
#[derive(Debug, Default)]
pub(crate) struct Association {
    pub cntlid: u16,
    pub discovery: bool,
    pub subnqn: String,
    pub hostnqn: String,
    pub hostid: [u8; 16],
    pub cc: u32,
    /// CSTS; its RDY bit is mirrored in `hot` (see [`Self::set_csts`]).
    csts: u32,
    /// Keep alive timeout; `None` when the host asked for none (see
    /// [`Self::set_kato`]).
    kato: Option<Duration>,
    /// I/O queues granted by Set Features (Number of Queues); 0 until asked.
    pub io_queues: u16,
    pub connected: BTreeSet<u16>,
    /// The admin queue has authenticated, or the host need not: I/O
    /// queues may connect.
    pub authenticated: bool,
    /// Asynchronous Event Configuration.
    pub aec: u32,
    /// Values of features that only need remembering (arbitration, power
    /// management, temperature threshold, error recovery, write atomicity).
    pub plain_features: HashMap<u8, u32>,
    pub errors: VecDeque<ErrorLogEntry>,
    pub error_count: u64,
    /// What every command reads, without this lock.
    pub hot: Arc<Hot>,
}

impl Association {
    const ERROR_LOG_ENTRIES: usize = 64;

    /// Any command counts as keep alive traffic (CTRATT.TBKAS).
    pub fn traffic(&self, now: Instant) {
        self.hot.traffic(now);
    }

    pub fn kato(&self) -> Option<Duration> {
        self.kato
    }

    /// The keep alive timeout, its timer started at `now`; `None` for none.
    pub fn set_kato(&mut self, kato: Option<Duration>, now: Instant) {
        self.kato = kato;
        let us = |d: Duration| u64::try_from(d.as_micros()).unwrap_or(u64::MAX - 1);
        self.hot.kato.store(kato.map_or(0, us), Ordering::Relaxed);
        let at = kato.map_or(u64::MAX, |k| now.as_micros().saturating_add(us(k)));
        self.hot.ka_deadline.store(at, Ordering::Relaxed);
    }

    /// No keep alive timeout until [`set_kato`](Self::set_kato) starts it
    /// again (while the host authenticates).
    pub fn pause_keep_alive(&self) {
        self.hot.ka_deadline.store(u64::MAX, Ordering::Relaxed);
    }

    /// Check the keep alive timer; an expired one kills the controller.
    pub fn expired(&mut self, now: Instant) -> bool {
        if self.hot.ka_deadline().is_some_and(|d| now >= d) {
            self.set_dead();
            self.set_csts(self.csts | crate::nvme::property::CSTS_CFS);
        }
        self.hot.dead()
    }

    pub fn csts(&self) -> u32 {
        self.csts
    }

    /// CSTS, its RDY bit mirrored for the queues to read without the lock.
    pub fn set_csts(&mut self, csts: u32) {
        self.csts = csts;
        let rdy = csts & crate::nvme::property::CSTS_RDY != 0;
        self.hot.ready.store(rdy, Ordering::Release);
    }

    /// The controller was reset: its I/O queues are deleted.
    pub fn bump_generation(&self) {
        self.hot.generation.fetch_add(1, Ordering::AcqRel);
    }

    pub fn set_dead(&self) {
        self.hot.dead.store(true, Ordering::Release);
    }

    pub fn set_vwc(&self, on: bool) {
        self.hot.vwc.store(on, Ordering::Relaxed);
    }

    pub fn record_error(&mut self, mut entry: ErrorLogEntry) {
        self.error_count += 1;
        entry.error_count = self.error_count;
        self.errors.push_front(entry);
        self.errors.truncate(Self::ERROR_LOG_ENTRIES);
    }

    pub fn ready(&self) -> bool {
        self.hot.ready()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn io_counted_on_several_threads_sums_to_all_of_it() {
        let c = IoCounters::default();
        std::thread::scope(|s| {
            for t in 0..4u64 {
                let c = &c;
                s.spawn(move || {
                    for _ in 0..1000 {
                        c.read(4096);
                        c.written(512 * (t + 1));
                    }
                });
            }
        });
        // A thread that ended left its counts behind.
        let sum = c.sum();
        assert_eq!((sum.reads, sum.bytes_read), (4000, 4000 * 4096));
        assert_eq!((sum.writes, sum.bytes_written), (4000, 1000 * 512 * (1 + 2 + 3 + 4)));
        c.read(1);
        assert_eq!(c.sum().reads, 4001);
    }
}
