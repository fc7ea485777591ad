//! The CPU clocks a bench run reads: each part's thread clock when the
//! parts run on threads, or the sums the lockstep loop keeps; and the
//! counters at one moment of a run. Reading only; it must never step a
//! part or decide what a reading means.

use crate::driver::valgrind::{Collector, Part};
use nic_backend::NicHandle;
use nvme_of::host::Host;
use nvme_of::{TxStats, UlpStats};
use std::cell::Cell;
use std::rc::Rc;
use ulp_ddp::{DdpDevice, Stats};

pub use crate::driver::cpus::{cpu_ns, thread_cpu_ns};

/// What one read of this thread's CPU clock costs: the time an empty
/// interval between two reads measures (the median of many).
pub fn clock_read_cost() -> i64 {
    let mut v: Vec<i64> = (0..64)
        .map(|_| {
            let a = cpu_ns(libc::CLOCK_THREAD_CPUTIME_ID);
            (cpu_ns(libc::CLOCK_THREAD_CPUTIME_ID) - a) as i64
        })
        .collect();
    v.sort_unstable();
    v[v.len() / 2]
}

/// CPU time in nanoseconds of the host, the host's NIC, the controller,
/// the measuring itself, and the process, at one moment.
#[derive(Clone, Copy, Default)]
pub struct Cpu {
    pub host: i64,
    pub nic: i64,
    pub controller: i64,
    /// Lockstep only: the clock reads and idle sleeps of the loop.
    pub harness: i64,
    pub process: i64,
}

/// What the lockstep loop has added up, and where on the thread's clock
/// the host's step under way began: a mark taken inside that step (as
/// every mark is) counts the host's work so far, which the sums only get
/// once the step returns.
#[derive(Clone, Copy, Default)]
pub struct Tally {
    pub sums: Cpu,
    pub host_since: i64,
}

/// Where a run's CPU times come from.
pub enum Clocks {
    /// The host and its NIC stepped in turn on this thread, the controller
    /// (its NIC in its steps) on a thread of its own: what the host's loop
    /// added up, and the controller's thread clock.
    Threads { tally: Rc<Cell<Tally>>, controller: std::thread::JoinHandle<()> },
    /// Every part stepped in turn on this thread: what the loop added up,
    /// and, under Valgrind, the switch of the part whose events it counts.
    Lockstep(Rc<Cell<Tally>>, Option<Rc<Collector>>),
}

impl Clocks {
    /// The measured window opens, in the host's step (where marks are
    /// taken): after the mark.
    pub fn open(&self) {
        if let Clocks::Lockstep(_, Some(c)) = self {
            c.open(Some(Part::Host));
        }
    }

    /// The measured window closes: before the mark.
    pub fn close(&self) {
        if let Clocks::Lockstep(_, Some(c)) = self {
            c.close();
        }
    }

    /// Read on the host's thread.
    pub fn cpu(&self) -> Cpu {
        let process = cpu_ns(libc::CLOCK_PROCESS_CPUTIME_ID) as i64;
        match self {
            Clocks::Threads { tally, controller } => {
                let Tally { sums, host_since } = tally.get();
                let now = cpu_ns(libc::CLOCK_THREAD_CPUTIME_ID) as i64;
                Cpu {
                    host: sums.host + (now - host_since),
                    controller: thread_cpu_ns(controller).unwrap_or(0) as i64,
                    process,
                    ..sums
                }
            }
            Clocks::Lockstep(tally, _) => {
                let Tally { sums, host_since } = tally.get();
                let now = cpu_ns(libc::CLOCK_THREAD_CPUTIME_ID) as i64;
                Cpu { host: sums.host + (now - host_since), process, ..sums }
            }
        }
    }
}

/// Counters at one moment of the host thread.
#[derive(Clone, Copy)]
pub struct Mark {
    pub cpu: Cpu,
    pub nic: Stats,
    pub ulp: UlpStats,
    pub tx: TxStats,
}

impl Mark {
    pub fn take(host: &Host, nic: &NicHandle, clocks: &Clocks) -> Self {
        let (ulp, tx) = host.stats();
        Mark { cpu: clocks.cpu(), nic: nic.stats(), ulp, tx }
    }
}
