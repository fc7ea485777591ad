//! Results as people read them and as programs read them (JSON).

use crate::size::format_size;
use crate::workload::{IoStats, WorkloadSpec};
use serde::Serialize;

/// One workload phase: what ran and what it did.
#[derive(Debug, Clone, Serialize)]
pub struct PhaseReport {
    pub rw: &'static str,
    pub bs: u32,
    pub qd: usize,
    pub queues: u16,
    pub verify: bool,
    #[serde(flatten)]
    pub stats: IoStats,
}

impl PhaseReport {
    pub fn new(spec: &WorkloadSpec, stats: IoStats, queues: u16, depth: usize) -> Self {
        Self {
            rw: spec.rw.name(),
            bs: spec.bs,
            qd: spec.qd.min(depth),
            queues,
            verify: spec.verify,
            stats,
        }
    }

    /// One line: rw, size, IOPS, throughput, latency percentiles, errors.
    pub fn line(&self) -> String {
        let s = &self.stats;
        let mut line = format!(
            "{:<9} bs={:<5} queues={} qd={}: {:>9.0} IOPS {:>9} /s  lat p50 {} us  p99 {} us  p99.9 {} us  max {} us  ({} I/Os, {} in {:.2} s",
            self.rw,
            format_size(u64::from(self.bs)),
            self.queues,
            self.qd,
            s.iops,
            human_bytes(s.bytes_per_sec),
            s.lat_p50_us,
            s.lat_p99_us,
            s.lat_p999_us,
            s.lat_max_us,
            s.ios,
            human_bytes(s.bytes as f64),
            s.seconds,
        );
        if self.verify && s.verified_bytes > 0 {
            line += &format!(", {} verified", human_bytes(s.verified_bytes as f64));
        }
        if s.errors > 0 || s.verify_failures > 0 {
            line += &format!(", {} errors, {} verify failures", s.errors, s.verify_failures);
        }
        line + ")"
    }
}

/// 1.23 GB, 456 MB: decimal units, as throughput is usually quoted.
pub fn human_bytes(n: f64) -> String {
    match n {
        n if n >= 1e9 => format!("{:.2} GB", n / 1e9),
        n if n >= 1e6 => format!("{:.1} MB", n / 1e6),
        n if n >= 1e3 => format!("{:.1} kB", n / 1e3),
        n => format!("{n:.0} B"),
    }
}
