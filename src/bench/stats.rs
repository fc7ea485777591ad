//! Statistics over a point's runs: medians, ranges and spreads, and the
//! limit a spread must keep for a verdict. Arithmetic only; it must never
//! measure or hold a goal.

use crate::bench::options::Setting;
use crate::bench::point::{Point, Sample};

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

/// A point from the runs of `setting`, with raw TCP's median and spread
/// on its medium.
pub fn summarize(setting: Setting, samples: &[Sample], (raw, raw_spread): (f64, f64)) -> Point {
    let m = |f: fn(&Sample) -> f64| median(samples.iter().map(f).collect());
    let range = |f: fn(&Sample) -> f64| {
        samples.iter().map(f).fold([f64::MAX, f64::MIN], |[lo, hi], x| [lo.min(x), hi.max(x)])
    };
    let of = |f: fn(&Sample) -> f64| samples.iter().map(f).collect::<Vec<f64>>();
    let bytes_per_sec_spread = spread(&of(|s| s.bytes_per_sec));
    let host_cpu_spread = spread(&of(|s| s.host_cpu_ns_per_io));
    Point {
        setting,
        iops: m(|s| s.iops),
        bytes_per_sec: m(|s| s.bytes_per_sec),
        lat_p50_us: m(|s| s.lat_p50_us),
        lat_p99_us: m(|s| s.lat_p99_us),
        host_cpu_ns_per_io: m(|s| s.host_cpu_ns_per_io),
        nic_cpu_ns_per_io: m(|s| s.nic_cpu_ns_per_io),
        controller_cpu_ns_per_io: m(|s| s.controller_cpu_ns_per_io),
        harness_cpu_ns_per_io: m(|s| s.harness_cpu_ns_per_io),
        process_cpu_ns_per_io: m(|s| s.process_cpu_ns_per_io),
        host_copy_bytes_per_io: m(|s| s.host_copy_bytes_per_io),
        host_crc_bytes_per_io: m(|s| s.host_crc_bytes_per_io),
        nic_placed_bytes_per_io: m(|s| s.nic_placed_bytes_per_io),
        nic_crc_bytes_per_io: m(|s| s.nic_crc_bytes_per_io),
        control_calls_per_io: m(|s| s.control_calls_per_io),
        raw_tcp_bytes_per_sec: raw,
        offload_share: m(|s| s.offload_share),
        resync_latency_pdus: m(|s| s.resync_latency_pdus),
        reps: samples.len(),
        iops_range: range(|s| s.iops),
        bytes_per_sec_range: range(|s| s.bytes_per_sec),
        host_cpu_ns_per_io_range: range(|s| s.host_cpu_ns_per_io),
        bytes_per_sec_spread,
        host_cpu_spread,
        nic_cpu_spread: spread(&of(|s| s.nic_cpu_ns_per_io)),
        raw_tcp_spread: raw_spread,
        steady: bytes_per_sec_spread <= SPREAD_LIMIT && host_cpu_spread <= SPREAD_LIMIT,
    }
}
