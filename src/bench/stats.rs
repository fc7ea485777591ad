//! Statistics over a point's runs: medians, ranges and spreads, and the
//! limit a spread must keep for a verdict. Arithmetic only; it must never
//! measure or hold a goal.

use crate::bench::options::{Meter, Setting};
use crate::bench::point::{Counts, JobMeasures, Measures, Point, RawCounts, RawRun, RawTcp};

/// The most a point's spread may be for a verdict on it.
pub const SPREAD_LIMIT: f64 = 0.10;

pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => 0.0,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// (max - min) / median; zero when the median is not positive.
pub fn spread(v: &[f64]) -> f64 {
    let m = median(v.to_vec());
    let (lo, hi) = v.iter().fold((f64::MAX, f64::MIN), |(lo, hi), &x| (lo.min(x), hi.max(x)));
    if m > 0.0 { (hi - lo) / m } else { 0.0 }
}

/// [min, max] of `v` ([0, 0] when empty).
pub fn range(v: &[f64]) -> [f64; 2] {
    match v.is_empty() {
        true => [0.0; 2],
        false => v.iter().fold([f64::MAX, f64::MIN], |[lo, hi], &x| [lo.min(x), hi.max(x)]),
    }
}

/// The median of each of Valgrind's measures over `runs`.
pub fn median_counts(runs: &[Counts]) -> Counts {
    let mut m = Counts::default();
    for (i, v) in m.each_mut().into_iter().enumerate() {
        *v = median(runs.iter().map(|c| c.each()[i]).collect());
    }
    m
}

/// Raw TCP over its repetitions on one medium, MTU and impairment.
pub fn raw_tcp(runs: &[RawRun]) -> RawTcp {
    let rates: Vec<f64> = runs.iter().map(|r| r.bytes_per_sec).collect();
    let wire: Vec<f64> = runs.iter().map(|r| r.wire_bytes_per_sec).collect();
    let end = |f: fn(&RawCounts) -> Counts| {
        median_counts(&runs.iter().map(|r| f(&r.per_byte)).collect::<Vec<_>>())
    };
    RawTcp {
        median: median(rates.clone()),
        spread: spread(&rates),
        range: range(&rates),
        per_byte: RawCounts { sender: end(|c| c.sender), receiver: end(|c| c.receiver) },
        wire_median: median(wire.clone()),
        wire_spread: spread(&wire),
    }
}

/// A point from the runs of `setting`, with raw TCP's on its medium.
pub fn summarize(setting: Setting, runs: &[Measures], raw: RawTcp) -> Point {
    let of = |f: fn(&Measures) -> f64| runs.iter().map(f).collect::<Vec<f64>>();
    let range = |f: fn(&Measures) -> f64| range(&of(f));
    let mut median_of = Measures::default();
    for (i, m) in median_of.each_mut().into_iter().enumerate() {
        *m = median(runs.iter().map(|r| *r.clone().each_mut()[i]).collect());
    }
    // Job j's medians over the runs.
    let jobs = runs.iter().map(|r| r.per_job.len()).min().unwrap_or(0);
    median_of.per_job = (0..jobs)
        .map(|j| {
            let mut job = JobMeasures::default();
            for (i, m) in job.each_mut().into_iter().enumerate() {
                *m = median(runs.iter().map(|r| *r.per_job[j].clone().each_mut()[i]).collect());
            }
            job
        })
        .collect();
    let bytes_per_sec_spread = spread(&of(|r| r.bytes_per_sec));
    let host_cpu_spread = spread(&of(|r| r.host_cpu_ns_per_io));
    let meter = match median_of.counts.is_empty() {
        true => Meter::Cpu,
        false => Meter::Instructions,
    };
    let counted = |f: fn(&Measures) -> f64| (meter == Meter::Instructions).then(|| spread(&of(f)));
    let host_instructions_spread = counted(|r| r.counts.host.instructions);
    let steady = match host_instructions_spread {
        None => bytes_per_sec_spread <= SPREAD_LIMIT && host_cpu_spread <= SPREAD_LIMIT,
        Some(s) => s <= SPREAD_LIMIT,
    };
    Point {
        setting,
        meter,
        raw_tcp: raw.per_byte.scaled(f64::from(setting.bs)),
        median: median_of,
        raw_tcp_bytes_per_sec: raw.median,
        raw_tcp_wire_bytes_per_sec: raw.wire_median,
        reps: runs.len(),
        iops_range: range(|r| r.iops),
        bytes_per_sec_range: range(|r| r.bytes_per_sec),
        host_cpu_ns_per_io_range: range(|r| r.host_cpu_ns_per_io),
        lat_p99_us_range: range(|r| r.lat_p99_us),
        offload_share_range: range(|r| r.offload_share),
        raw_tcp_bytes_per_sec_range: raw.range,
        bytes_per_sec_spread,
        host_cpu_spread,
        nic_cpu_spread: spread(&of(|r| r.nic_cpu_ns_per_io)),
        controller_cpu_spread: spread(&of(|r| r.controller_cpu_ns_per_io)),
        raw_tcp_spread: raw.spread,
        raw_tcp_wire_spread: raw.wire_spread,
        host_instructions_spread,
        host_instructions_range: host_instructions_spread
            .map(|_| range(|r| r.counts.host.instructions)),
        nic_instructions_spread: counted(|r| r.counts.nic.instructions),
        controller_instructions_spread: counted(|r| r.counts.controller.instructions),
        steady,
    }
}
