//! What a bench run found, as written to JSON: the machine it ran on,
//! how it ran, every point, and the user's goals checked against them. It
//! gathers; it must never measure a point or hold a goal.

use crate::bench::clocks::cpu_ns;
use crate::bench::goals::{GoalCheck, Goals};
use crate::bench::options::{BenchOptions, Meter};
use crate::bench::point::Point;
use crate::bench::stats::{SPREAD_LIMIT, spread};
use serde::Serialize;

/// The machine a report was measured on.
#[derive(Debug, Clone, Serialize)]
pub struct Machine {
    pub cpu_model: String,
    pub cores: usize,
    pub kernel: String,
    /// The spread of a fixed copy-and-CRC loop's CPU time over a few runs:
    /// how still this machine holds by itself. No point measured on it can
    /// be expected to hold stiller. Not measured (null) when the run was
    /// interrupted: the user is waiting.
    pub baseline_spread: Option<f64>,
}

/// The spread of the CPU time of a fixed amount of copying and CRC32C
/// (7 runs of 256 MiB each), the work the offloads move.
pub fn baseline_spread() -> f64 {
    let src = vec![0x5au8; 8 << 20];
    let mut dst = vec![0u8; 8 << 20];
    let runs: Vec<f64> = (0..7)
        .map(|_| {
            let t = cpu_ns(libc::CLOCK_THREAD_CPUTIME_ID);
            let mut crc = 0;
            for _ in 0..32 {
                crc = nic_backend::copy_then_crc(&mut dst, &src, crc);
            }
            std::hint::black_box(crc);
            (cpu_ns(libc::CLOCK_THREAD_CPUTIME_ID) - t) as f64
        })
        .collect();
    spread(&runs)
}

impl Machine {
    /// This machine; its baseline spread measured if `measure`.
    pub fn this(measure: bool) -> Self {
        let read = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
        let cpu_model = read("/proc/cpuinfo")
            .lines()
            .find_map(|l| l.strip_prefix("model name").and_then(|r| r.split_once(':')))
            .map_or_else(|| "unknown".into(), |(_, m)| m.trim().to_string());
        let cores = std::thread::available_parallelism().map_or(1, usize::from);
        let kernel = read("/proc/sys/kernel/osrelease").trim().to_string();
        Self { cpu_model, cores, kernel, baseline_spread: measure.then(baseline_spread) }
    }
}

/// Everything one bench run found, as written to JSON.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub machine: Machine,
    /// What the points' costs were counted in.
    pub meter: Meter,
    /// The commit the binary was built from (`-dirty` with local changes).
    pub commit: &'static str,
    /// Seconds measured and warmed up per run, runs per point.
    pub time_s: f64,
    pub warmup_s: f64,
    pub reps: usize,
    pub medium: String,
    /// "lockstep" (one thread) or "threads".
    pub mode: &'static str,
    /// How long the threads polled before sleeping, in microseconds.
    pub busy_poll_us: u64,
    pub spread_limit: f64,
    /// Where the impairments' seeds came from (`--seed`): repetition r
    /// used [`rep_seed`](crate::bench::options::rep_seed)`(seed, r)`.
    pub seed: u64,
    pub points: Vec<Point>,
    /// The goals given, checked against the points (none given: empty).
    #[serde(rename = "targets")]
    pub goals: Vec<GoalCheck>,
}

impl Report {
    /// The report of `points`; `interrupted` skips what would make a user
    /// who stopped the run wait (the machine's baseline).
    pub fn new(o: &BenchOptions, points: Vec<Point>, goals: &Goals, interrupted: bool) -> Self {
        Self {
            // The baseline speaks of CPU time only.
            machine: Machine::this(!interrupted && o.meter == Meter::Cpu),
            meter: o.meter,
            commit: env!("NVME_DDP_COMMIT"),
            time_s: o.duration.as_secs_f64(),
            warmup_s: o.warmup.as_secs_f64(),
            reps: o.reps,
            medium: match &o.link {
                Some((h, c)) => format!("{h},{c}"),
                None => "in-process wire".into(),
            },
            mode: if o.threaded() { "threads" } else { "lockstep" },
            busy_poll_us: o.busy_poll.as_micros() as u64,
            spread_limit: SPREAD_LIMIT,
            seed: o.seed,
            goals: goals.check(&points),
            points,
        }
    }
}
