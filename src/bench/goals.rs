//! Goals the user gives (`bench --goals FILE`), and what the measured
//! points say of each. A goal is a ratio between a measure of one point
//! and a measure of another (or of the same point), with a bound it must
//! keep; it is checked wherever the matrix has both points. The bench holds
//! no goals of its own: they are data, and this module must never add one.
//!
//! A goals file is JSON:
//!
//! ```json
//! { "goals": [
//!   { "what": "read host CPU/IO, all vs none", "metric": "host_cpu_ns_per_io",
//!     "of": { "transport": "tcp", "rw": "read", "bs": "128k", "ddgst": true, "offload": "all" },
//!     "over": { "offload": "none" },
//!     "at_most": 0.4 }
//! ] }
//! ```
//!
//! `of` picks the points whose measure is on top: every setting it names
//! must match. `over` names what differs in the point below: that point is
//! the first one's setting with `over`'s fields put in (none: the same
//! point). `over_metric` compares with another measure of that point (e.g.
//! `raw_tcp_bytes_per_sec`). `metric` is one of `bytes_per_sec`,
//! `host_cpu_ns_per_io`, `nic_cpu_ns_per_io`, `controller_cpu_ns_per_io`,
//! `raw_tcp_bytes_per_sec`, `raw_tcp_wire_bytes_per_sec` (over interfaces,
//! the in-process wire's), or `host_instructions_per_io` (and `nic_`,
//! `controller_`). A CPU metric is judged in instructions on points the
//! instructions meter counted, so one file serves either meter; a goal
//! on throughput is not judged there (Valgrind's is no throughput).
//! Exactly one of `at_most` and `at_least` bounds the ratio.

use crate::bench::options::{Meter, Setting};
use crate::bench::point::{Metric, Point};
use crate::bench::stats::SPREAD_LIMIT;
use crate::driver::transport::TransportType;
use crate::size::{format_size, parse_size};
use crate::workload::Rw;
use serde::{Deserialize, Deserializer, Serialize};
use std::path::{Path, PathBuf};
use ulp_ddp::Caps;

/// The goals of a file, in its order.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Goals {
    pub goals: Vec<Goal>,
}

/// Why a goals file was refused.
#[derive(Debug, thiserror::Error)]
pub enum GoalsError {
    #[error("cannot read goals {}: {source}", path.display())]
    Read { path: PathBuf, source: std::io::Error },
    #[error("goals {}: {source}", path.display())]
    Parse { path: PathBuf, source: serde_json::Error },
    #[error("goal {0:?}: give one of at_most and at_least")]
    Bound(String),
}

/// A ratio of two measures and the bound it must keep.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Goal {
    /// What the output calls it.
    pub what: String,
    /// The measure on top (and below, unless `over_metric` says another).
    pub metric: Metric,
    /// The points whose measure is on top.
    #[serde(default)]
    pub of: Select,
    /// How the point below differs from the one on top.
    #[serde(default)]
    pub over: Select,
    /// The measure below, if not `metric`.
    #[serde(default)]
    pub over_metric: Option<Metric>,
    #[serde(default)]
    pub at_most: Option<f64>,
    #[serde(default)]
    pub at_least: Option<f64>,
}

/// Settings a point must have; each one not given matches any.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Select {
    pub transport: Option<TransportType>,
    pub rw: Option<Rw>,
    /// Bytes, as a number or as people write them ("128k").
    #[serde(default, deserialize_with = "size")]
    pub bs: Option<u32>,
    pub qd: Option<u16>,
    pub jobs: Option<u16>,
    pub mtu: Option<usize>,
    pub ddgst: Option<bool>,
    /// Over TLS 1.3.
    pub tls: Option<bool>,
    /// An offload set by name, as `--offload` takes it ("all", "ddp+crc").
    #[serde(default, deserialize_with = "caps")]
    pub offload: Option<Caps>,
}

impl Select {
    pub fn matches(&self, s: &Setting) -> bool {
        self.put_into(*s) == *s
    }

    /// `s` with the settings given here in place of its own.
    pub fn put_into(&self, s: Setting) -> Setting {
        Setting {
            transport: self.transport.unwrap_or(s.transport),
            bs: self.bs.unwrap_or(s.bs),
            rw: self.rw.unwrap_or(s.rw),
            qd: self.qd.unwrap_or(s.qd),
            jobs: self.jobs.unwrap_or(s.jobs),
            mtu: self.mtu.unwrap_or(s.mtu),
            ddgst: self.ddgst.unwrap_or(s.ddgst),
            tls: self.tls.unwrap_or(s.tls),
            offload: self.offload.unwrap_or(s.offload),
            impair: s.impair,
        }
    }
}

fn size<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u32>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Size {
        Bytes(u32),
        Written(String),
    }
    let bytes = match Size::deserialize(d)? {
        Size::Bytes(n) => u64::from(n),
        Size::Written(s) => parse_size(&s).map_err(serde::de::Error::custom)?,
    };
    u32::try_from(bytes).map(Some).map_err(|_| serde::de::Error::custom("bs: too large"))
}

fn caps<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Caps>, D::Error> {
    let name = String::deserialize(d)?;
    Caps::parse(&name).map(Some).map_err(serde::de::Error::custom)
}

impl Goals {
    /// Read and check a goals file.
    pub fn load(path: &Path) -> Result<Self, GoalsError> {
        let text = std::fs::read_to_string(path)
            .map_err(|source| GoalsError::Read { path: path.into(), source })?;
        Self::parse(&text).map_err(|e| match e {
            GoalsError::Parse { source, .. } => GoalsError::Parse { path: path.into(), source },
            e => e,
        })
    }

    /// Goals from the text of a file.
    pub fn parse(text: &str) -> Result<Self, GoalsError> {
        let goals: Goals = serde_json::from_str(text)
            .map_err(|source| GoalsError::Parse { path: PathBuf::new(), source })?;
        match goals.goals.iter().find(|g| g.at_most.is_some() == g.at_least.is_some()) {
            Some(g) => Err(GoalsError::Bound(g.what.clone())),
            None => Ok(goals),
        }
    }

    /// Check every goal wherever `points` has the two points it needs,
    /// grouped by queue depth and MTU, in the file's order within each.
    pub fn check(&self, points: &[Point]) -> Vec<GoalCheck> {
        let mut out: Vec<(Setting, GoalCheck)> = Vec::new();
        for goal in &self.goals {
            for top in points.iter().filter(|p| goal.of.matches(&p.setting)) {
                let below = goal.over.put_into(top.setting);
                let Some(below) = points.iter().find(|p| p.setting == below) else { continue };
                if let Some(check) = goal.check(top, below) {
                    out.push((top.setting, check));
                }
            }
        }
        out.sort_by_key(|(s, _)| (s.qd, s.mtu));
        out.into_iter().map(|(_, c)| c).collect()
    }
}

impl Goal {
    /// The ratio of `top`'s measure to `below`'s and its verdict; `None`
    /// when `below` has no measure (zero: raw TCP skipped, say).
    fn check(&self, top: &Point, below: &Point) -> Option<GoalCheck> {
        let under = self.over_metric.unwrap_or(self.metric);
        let denominator = under.of(below);
        if denominator <= 0.0 {
            return None;
        }
        let measured = self.metric.of(top) / denominator;
        let spread = self.metric.spread(top).max(under.spread(below));
        let (limit, met) = match (self.at_most, self.at_least) {
            (Some(most), _) => (format!("<= {most}x"), measured <= most),
            (None, Some(least)) => (format!(">= {least}x"), measured >= least),
            (None, None) => return None,
        };
        let s = &top.setting;
        let digest = if s.ddgst { "data digest" } else { "no data digest" };
        let impaired = match s.impair.is_clean() {
            true => String::new(),
            false => format!(", {}", s.impair),
        };
        let jobs = match s.jobs {
            1 => String::new(),
            n => format!(", {n} jobs"),
        };
        let counted = match top.meter {
            Meter::Instructions => ", in instructions",
            Meter::Cpu => "",
        };
        let what = format!(
            "{} ({}, {digest}, qd {}{jobs}, mtu {}{impaired}{counted})",
            self.what,
            format_size(u64::from(s.bs)),
            s.qd,
            s.mtu
        );
        Some(GoalCheck::new(what, limit, measured, spread, met))
    }
}

/// What a goal check found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    Met,
    Missed,
    /// A point it rests on spread more than [`SPREAD_LIMIT`]: the ratio
    /// says nothing either way.
    Inconclusive,
}

/// A goal, checked against measured points.
#[derive(Debug, Clone, Serialize)]
pub struct GoalCheck {
    pub what: String,
    pub limit: String,
    pub measured: f64,
    /// The largest spread among the measurements the ratio rests on.
    pub spread: f64,
    pub verdict: Verdict,
}

impl GoalCheck {
    fn new(what: String, limit: String, measured: f64, spread: f64, met: bool) -> Self {
        let verdict = match (spread <= SPREAD_LIMIT, met) {
            (false, _) => Verdict::Inconclusive,
            (true, true) => Verdict::Met,
            (true, false) => Verdict::Missed,
        };
        Self { what, limit, measured, spread, verdict }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::point::Measures;

    /// The goals shipped with the bench (the ones docs/performance.md reports on).
    const SHIPPED: &str = include_str!("../../benches/goals.json");

    fn point(transport: TransportType, rw: Rw, offload: Caps, cpu: f64, spread: f64) -> Point {
        let setting = Setting {
            transport,
            bs: 128 << 10,
            rw,
            qd: 32,
            mtu: 9000,
            ddgst: true,
            offload,
            ..Setting::default()
        };
        let median = Measures {
            iops: 1.0,
            bytes_per_sec: 1e9,
            host_cpu_ns_per_io: cpu,
            nic_cpu_ns_per_io: 1.0,
            controller_cpu_ns_per_io: 1.0,
            process_cpu_ns_per_io: 1.0,
            ..Measures::default()
        };
        Point {
            setting,
            median,
            reps: 5,
            bytes_per_sec_spread: 0.01,
            host_cpu_spread: spread,
            steady: spread <= SPREAD_LIMIT,
            ..Point::default()
        }
    }

    fn tcp(rw: Rw, offload: Caps, cpu: f64, spread: f64) -> Point {
        point(TransportType::Tcp, rw, offload, cpu, spread)
    }

    /// `p` as the instructions meter counts it: `host` instructions per
    /// I/O, no times.
    fn counted(p: Point, host: f64) -> Point {
        let mut median = p.median.without_times();
        median.counts.host.instructions = host;
        Point { meter: Meter::Instructions, median, host_instructions_spread: Some(0.0002), ..p }
    }

    #[test]
    fn a_cpu_goal_is_judged_in_instructions_on_counted_points_and_throughput_not_at_all() {
        let goals = Goals::parse(SHIPPED).unwrap();
        // CPU says 0.5 (missed), instructions 0.2 (met).
        let all = counted(tcp(Rw::Read, Caps::ALL, 500.0, 0.5), 20_000.0);
        let none = counted(tcp(Rw::Read, Caps::NONE, 1000.0, 0.5), 100_000.0);
        let checks = goals.check(&[all, none]);
        let read = checks.iter().find(|c| c.what.starts_with("read host CPU/IO, all vs none"));
        let read = read.expect("the read CPU goal is judged");
        assert_eq!(read.verdict, Verdict::Met, "{read:?}");
        assert!((read.measured - 0.2).abs() < 1e-9);
        assert!(read.what.contains("in instructions"), "{}", read.what);
        assert!(
            checks.iter().all(|c| !c.what.contains("throughput")),
            "Valgrind's throughput is no throughput: {checks:?}"
        );
    }

    #[test]
    fn a_verdict_on_a_noisy_point_is_inconclusive() {
        let goals = Goals::parse(SHIPPED).unwrap();
        let check_targets = |pts: &[Point]| goals.check(pts);
        let verdict = |spread| {
            let pts =
                [tcp(Rw::Read, Caps::ALL, 30.0, spread), tcp(Rw::Read, Caps::NONE, 100.0, 0.02)];
            check_targets(&pts)[0].verdict
        };
        assert_eq!(verdict(0.05), Verdict::Met);
        assert_eq!(verdict(0.128), Verdict::Inconclusive, "never met on a 12.8% spread");
        let missed = [tcp(Rw::Read, Caps::ALL, 60.0, 0.05), tcp(Rw::Read, Caps::NONE, 100.0, 0.5)];
        assert_eq!(check_targets(&missed)[0].verdict, Verdict::Inconclusive);
        let missed = [tcp(Rw::Read, Caps::ALL, 60.0, 0.05), tcp(Rw::Read, Caps::NONE, 100.0, 0.05)];
        assert_eq!(check_targets(&missed)[0].verdict, Verdict::Missed);
    }

    #[test]
    fn the_shipped_goals_read_as_the_performance_page_reports_them() {
        let pts = [
            tcp(Rw::Read, Caps::NONE, 100.0, 0.05),
            Point { raw_tcp_bytes_per_sec: 2e9, ..tcp(Rw::Read, Caps::ALL, 30.0, 0.05) },
        ];
        let checks = Goals::parse(SHIPPED).unwrap().check(&pts[..1]);
        assert!(checks.is_empty(), "no pair, no check: {checks:?}");
        let checks = Goals::parse(SHIPPED).unwrap().check(&pts);
        let whats: Vec<&str> = checks.iter().map(|c| c.what.as_str()).collect();
        assert_eq!(
            whats,
            [
                "read host CPU/IO, all vs none (128k, data digest, qd 32, mtu 9000)",
                "read throughput, all vs none (128k, data digest, qd 32, mtu 9000)",
                "read throughput with all offloads vs raw TCP (128k, data digest, qd 32, mtu 9000)",
            ]
        );
        assert_eq!(checks[0].limit, "<= 0.4x");
        assert_eq!((checks[1].limit.as_str(), checks[1].verdict), (">= 1.2x", Verdict::Missed));
        assert_eq!((checks[2].measured, checks[2].verdict), (0.5, Verdict::Missed));
    }

    #[test]
    fn a_goal_compares_transports_and_directions_as_the_file_says() {
        let rdma = point(TransportType::Rdma, Rw::Read, Caps::ALL, 20.0, 0.05);
        let pts =
            [rdma, tcp(Rw::Read, Caps::ALL, 40.0, 0.05), tcp(Rw::Write, Caps::CRC, 50.0, 0.05)];
        let mut pts = pts.to_vec();
        pts.push(tcp(Rw::Write, Caps::NONE, 100.0, 0.05));
        let checks = Goals::parse(SHIPPED).unwrap().check(&pts);
        let find = |what: &str| checks.iter().find(|c| c.what.starts_with(what)).unwrap();
        let rdma = find("read host CPU/IO, NVMe/RDMA vs NVMe/TCP");
        assert_eq!((rdma.measured, rdma.verdict), (0.5, Verdict::Met));
        let crc = find("write host CPU/IO, crc vs none");
        assert_eq!((crc.measured, crc.verdict), (0.5, Verdict::Met));
    }

    #[test]
    fn a_goal_compares_jobs_by_the_controller_cpu() {
        let at = |jobs, cpu| {
            let p = tcp(Rw::RandRead, Caps::ALL, 10.0, 0.05);
            let setting = Setting { bs: 4 << 10, jobs, ..p.setting };
            let median = Measures { controller_cpu_ns_per_io: cpu, ..p.median };
            Point { setting, median, controller_cpu_spread: 0.05, ..p }
        };
        let checks = Goals::parse(SHIPPED).unwrap().check(&[at(1, 1000.0), at(2, 1050.0)]);
        let c = checks.iter().find(|c| c.what.starts_with("randread controller CPU/IO")).unwrap();
        assert_eq!(
            c.what,
            "randread controller CPU/IO with a poll group per job, all offloads, 2 jobs vs 1 (4k, data digest, qd 32, 2 jobs, mtu 9000)"
        );
        assert_eq!((c.measured, c.verdict), (1.05, Verdict::Met));
        let checks = Goals::parse(SHIPPED).unwrap().check(&[at(1, 1000.0), at(2, 1200.0)]);
        let c = checks.iter().find(|c| c.what.starts_with("randread controller CPU/IO")).unwrap();
        assert_eq!(c.verdict, Verdict::Missed);
    }

    #[test]
    fn no_goals_no_verdicts() {
        let pts = [tcp(Rw::Read, Caps::ALL, 30.0, 0.05), tcp(Rw::Read, Caps::NONE, 100.0, 0.05)];
        assert!(Goals::default().check(&pts).is_empty());
    }

    #[test]
    fn a_bad_goals_file_is_refused_with_what_is_wrong() {
        let refused = |text: &str| Goals::parse(text).unwrap_err().to_string();
        assert!(
            refused("{\"goals\": [{\"what\": \"x\", \"metric\": \"speed\"}]}").contains("speed")
        );
        let both = "{\"goals\": [{\"what\": \"x\", \"metric\": \"bytes_per_sec\", \"at_most\": 1, \"at_least\": 2}]}";
        assert_eq!(refused(both), "goal \"x\": give one of at_most and at_least");
        let neither = "{\"goals\": [{\"what\": \"y\", \"metric\": \"bytes_per_sec\"}]}";
        assert_eq!(refused(neither), "goal \"y\": give one of at_most and at_least");
        let offload = "{\"goals\": [{\"what\": \"z\", \"metric\": \"bytes_per_sec\", \"of\": {\"offload\": \"turbo\"}, \"at_most\": 1}]}";
        assert!(refused(offload).contains("turbo"));
        let bs = "{\"goals\": [{\"what\": \"z\", \"metric\": \"bytes_per_sec\", \"of\": {\"bs\": \"12q\"}, \"at_most\": 1}]}";
        assert!(refused(bs).contains("unknown unit"));
    }
}
