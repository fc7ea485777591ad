//! What a point measured: one run's measures ([`Measures`]), a point's
//! medians and spreads over its runs ([`Point`]), and the measures a goal
//! may compare ([`Metric`]). Plain data; it must never run anything or
//! hold a limit.

use crate::bench::clocks::{Cpu, Mark};
use crate::bench::options::Setting;
use crate::workload::IoStats;
use serde::{Deserialize, Serialize};

/// One point of the matrix: what ran and the medians of what it did.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Point {
    /// What ran (written as its fields: transport, bs, rw, ...).
    #[serde(flatten)]
    pub setting: Setting,
    /// The medians over the runs (written as their fields: iops, ...).
    #[serde(flatten)]
    pub median: Measures,
    /// Raw smoltcp TCP throughput on the same medium, MTU and impairments.
    pub raw_tcp_bytes_per_sec: f64,
    pub reps: usize,
    /// [min, max] over the repetitions.
    pub iops_range: [f64; 2],
    pub bytes_per_sec_range: [f64; 2],
    pub host_cpu_ns_per_io_range: [f64; 2],
    pub lat_p99_us_range: [f64; 2],
    pub offload_share_range: [f64; 2],
    pub raw_tcp_bytes_per_sec_range: [f64; 2],
    /// (max - min) / median over the repetitions.
    pub bytes_per_sec_spread: f64,
    pub host_cpu_spread: f64,
    pub nic_cpu_spread: f64,
    pub raw_tcp_spread: f64,
    /// Both spreads (throughput, host CPU) are within
    /// [`SPREAD_LIMIT`](crate::bench::stats::SPREAD_LIMIT): a goal may be
    /// judged on this point.
    pub steady: bool,
}

/// Raw TCP's throughput over its repetitions on one medium, MTU and
/// impairment: the median, the spread and [min, max].
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct RawTcp {
    pub median: f64,
    pub spread: f64,
    pub range: [f64; 2],
}

/// A measure of a point whose spread over the runs is known, so a goal
/// comparing it can tell a verdict from noise. In goal files, by its JSON
/// field name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Metric {
    BytesPerSec,
    HostCpuNsPerIo,
    NicCpuNsPerIo,
    RawTcpBytesPerSec,
}

impl Metric {
    /// The point's median of this measure.
    pub fn of(self, p: &Point) -> f64 {
        match self {
            Metric::BytesPerSec => p.median.bytes_per_sec,
            Metric::HostCpuNsPerIo => p.median.host_cpu_ns_per_io,
            Metric::NicCpuNsPerIo => p.median.nic_cpu_ns_per_io,
            Metric::RawTcpBytesPerSec => p.raw_tcp_bytes_per_sec,
        }
    }

    /// The point's spread of this measure over its runs.
    pub fn spread(self, p: &Point) -> f64 {
        match self {
            Metric::BytesPerSec => p.bytes_per_sec_spread,
            Metric::HostCpuNsPerIo => p.host_cpu_spread,
            Metric::NicCpuNsPerIo => p.nic_cpu_spread,
            Metric::RawTcpBytesPerSec => p.raw_tcp_spread,
        }
    }
}

/// What one run of a point did, or (in a [`Point`]) the medians over its
/// runs.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Measures {
    pub iops: f64,
    pub bytes_per_sec: f64,
    pub lat_p50_us: f64,
    pub lat_p99_us: f64,
    /// CPU time per I/O of the host's thread (the NIC's work is not on it).
    pub host_cpu_ns_per_io: f64,
    /// CPU time per I/O of the host's NIC thread.
    pub nic_cpu_ns_per_io: f64,
    /// CPU time per I/O of the controller, its own NIC included.
    pub controller_cpu_ns_per_io: f64,
    /// In lockstep, CPU time per I/O of the measuring itself (clock reads,
    /// sleeps while every part waits for a timer).
    pub harness_cpu_ns_per_io: f64,
    /// CPU time per I/O of the whole process: the four above and anything
    /// else that ran (it should be nothing much).
    pub process_cpu_ns_per_io: f64,
    /// Data bytes the host copied (into buffers on receive, into the send
    /// ring on transmit) and digested, per I/O.
    pub host_copy_bytes_per_io: f64,
    pub host_crc_bytes_per_io: f64,
    pub nic_placed_bytes_per_io: f64,
    /// Receive and transmit data bytes the NIC digested, per I/O.
    pub nic_crc_bytes_per_io: f64,
    pub control_calls_per_io: f64,
    /// The share of the data bytes the host received that the NIC had
    /// placed (placed / received; zero when it received none).
    pub offload_share: f64,
    pub resync_latency_pdus: f64,
    /// Bytes the warm-up read and found equal to what the namespace holds
    /// (reads only; the measurement checks nothing).
    pub verified_bytes: f64,
}

impl Measures {
    /// What the I/O `s` cost between the marks `a` and `b`.
    pub fn between(s: &IoStats, a: &Mark, b: &Mark) -> Self {
        let ios = s.ios.max(1) as f64;
        let ulp = b.ulp.since(&a.ulp);
        let cpu = |f: fn(&Cpu) -> i64| (f(&b.cpu) - f(&a.cpu)) as f64 / ios;
        Measures {
            iops: s.iops,
            bytes_per_sec: s.bytes_per_sec,
            lat_p50_us: s.lat_p50_us as f64,
            lat_p99_us: s.lat_p99_us as f64,
            host_cpu_ns_per_io: cpu(|c| c.host),
            nic_cpu_ns_per_io: cpu(|c| c.nic),
            controller_cpu_ns_per_io: cpu(|c| c.controller),
            harness_cpu_ns_per_io: cpu(|c| c.harness),
            process_cpu_ns_per_io: cpu(|c| c.process),
            host_copy_bytes_per_io: ((ulp.copy_bytes + b.tx.data_bytes - a.tx.data_bytes) as f64)
                / ios,
            host_crc_bytes_per_io: ((ulp.crc_bytes + b.tx.crc_bytes - a.tx.crc_bytes) as f64) / ios,
            nic_placed_bytes_per_io: (b.nic.nic_placed_bytes - a.nic.nic_placed_bytes) as f64 / ios,
            nic_crc_bytes_per_io: ((b.nic.nic_crc_bytes - a.nic.nic_crc_bytes)
                + (b.nic.tx_crc_offloaded_bytes - a.nic.tx_crc_offloaded_bytes))
                as f64
                / ios,
            control_calls_per_io: ulp.control_calls as f64 / ios,
            offload_share: ulp.offload_share(),
            resync_latency_pdus: ulp.resync_latency_pdus(),
            verified_bytes: 0.0,
        }
    }

    /// Each measure, so statistics can go over all of them alike.
    pub fn each_mut(&mut self) -> [&mut f64; 17] {
        [
            &mut self.iops,
            &mut self.bytes_per_sec,
            &mut self.lat_p50_us,
            &mut self.lat_p99_us,
            &mut self.host_cpu_ns_per_io,
            &mut self.nic_cpu_ns_per_io,
            &mut self.controller_cpu_ns_per_io,
            &mut self.harness_cpu_ns_per_io,
            &mut self.process_cpu_ns_per_io,
            &mut self.host_copy_bytes_per_io,
            &mut self.host_crc_bytes_per_io,
            &mut self.nic_placed_bytes_per_io,
            &mut self.nic_crc_bytes_per_io,
            &mut self.control_calls_per_io,
            &mut self.offload_share,
            &mut self.resync_latency_pdus,
            &mut self.verified_bytes,
        ]
    }
}
