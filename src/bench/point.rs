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
    pub controller_cpu_spread: f64,
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

impl RawTcp {
    /// Of these repetitions' throughputs.
    pub fn of(runs: &[f64]) -> Self {
        use crate::bench::stats::{median, range, spread};
        Self { median: median(runs.to_vec()), spread: spread(runs), range: range(runs) }
    }
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
    ControllerCpuNsPerIo,
    RawTcpBytesPerSec,
}

impl Metric {
    /// The point's median of this measure.
    pub fn of(self, p: &Point) -> f64 {
        match self {
            Metric::BytesPerSec => p.median.bytes_per_sec,
            Metric::HostCpuNsPerIo => p.median.host_cpu_ns_per_io,
            Metric::NicCpuNsPerIo => p.median.nic_cpu_ns_per_io,
            Metric::ControllerCpuNsPerIo => p.median.controller_cpu_ns_per_io,
            Metric::RawTcpBytesPerSec => p.raw_tcp_bytes_per_sec,
        }
    }

    /// The point's spread of this measure over its runs.
    pub fn spread(self, p: &Point) -> f64 {
        match self {
            Metric::BytesPerSec => p.bytes_per_sec_spread,
            Metric::HostCpuNsPerIo => p.host_cpu_spread,
            Metric::NicCpuNsPerIo => p.nic_cpu_spread,
            Metric::ControllerCpuNsPerIo => p.controller_cpu_spread,
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
    /// Over TLS: bytes of records the host decrypted (received) and
    /// encrypted (sent) in software, per I/O.
    pub host_decrypt_bytes_per_io: f64,
    pub host_encrypt_bytes_per_io: f64,
    /// Over TLS: record bytes the host's NIC decrypted and encrypted, per
    /// I/O.
    pub nic_decrypt_bytes_per_io: f64,
    pub nic_encrypt_bytes_per_io: f64,
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
    /// With several jobs, what each did (the figures above are of all of
    /// them together).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub per_job: Vec<JobMeasures>,
}

/// What one job of a run did, or (in a [`Point`]) the medians over its
/// runs: its throughput and the CPU per I/O of its threads (the
/// controller's is its own stack's, the group that served it).
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct JobMeasures {
    pub iops: f64,
    pub bytes_per_sec: f64,
    pub host_cpu_ns_per_io: f64,
    pub nic_cpu_ns_per_io: f64,
    pub controller_cpu_ns_per_io: f64,
}

impl JobMeasures {
    /// Each measure, so statistics can go over all of them alike.
    pub fn each_mut(&mut self) -> [&mut f64; 5] {
        [
            &mut self.iops,
            &mut self.bytes_per_sec,
            &mut self.host_cpu_ns_per_io,
            &mut self.nic_cpu_ns_per_io,
            &mut self.controller_cpu_ns_per_io,
        ]
    }
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
            host_decrypt_bytes_per_io: ulp.tls_decrypt_bytes as f64 / ios,
            host_encrypt_bytes_per_io: (b.tx.tls_encrypt_bytes - a.tx.tls_encrypt_bytes) as f64
                / ios,
            nic_decrypt_bytes_per_io: (b.nic.rx_tls_decrypted_bytes - a.nic.rx_tls_decrypted_bytes)
                as f64
                / ios,
            nic_encrypt_bytes_per_io: (b.nic.tx_tls_encrypted_bytes - a.nic.tx_tls_encrypted_bytes)
                as f64
                / ios,
            nic_placed_bytes_per_io: (b.nic.nic_placed_bytes - a.nic.nic_placed_bytes) as f64 / ios,
            nic_crc_bytes_per_io: ((b.nic.nic_crc_bytes - a.nic.nic_crc_bytes)
                + (b.nic.tx_crc_offloaded_bytes - a.nic.tx_crc_offloaded_bytes))
                as f64
                / ios,
            control_calls_per_io: ulp.control_calls as f64 / ios,
            offload_share: ulp.offload_share(),
            resync_latency_pdus: ulp.resync_latency_pdus(),
            verified_bytes: 0.0,
            per_job: Vec::new(),
        }
    }

    /// The measures of jobs that ran at once, each with the I/Os it did,
    /// and the latencies of all of them together (microseconds).
    /// Throughput adds up; a cost per I/O is the jobs' costs over all their
    /// I/Os; the process's CPU, which every job's marks read, counts once
    /// (the widest of the jobs' windows). One job's measures are its own.
    pub fn of_jobs(jobs: &[(Measures, u64)], latencies: &hdrhistogram::Histogram<u64>) -> Self {
        if let [(one, _)] = jobs {
            return one.clone();
        }
        let ios = jobs.iter().map(|(_, n)| *n).sum::<u64>().max(1) as f64;
        let sum = |f: fn(&Measures) -> f64| jobs.iter().map(|(m, _)| f(m)).sum::<f64>();
        let per_io =
            |f: fn(&Measures) -> f64| jobs.iter().map(|(m, n)| f(m) * *n as f64).sum::<f64>() / ios;
        let widest = jobs.iter().map(|(m, n)| m.process_cpu_ns_per_io * *n as f64);
        let quantile = |q| match latencies.is_empty() {
            true => 0.0,
            false => latencies.value_at_quantile(q) as f64,
        };
        let mut all = Measures {
            iops: sum(|m| m.iops),
            bytes_per_sec: sum(|m| m.bytes_per_sec),
            lat_p50_us: quantile(0.5),
            lat_p99_us: quantile(0.99),
            host_cpu_ns_per_io: per_io(|m| m.host_cpu_ns_per_io),
            nic_cpu_ns_per_io: per_io(|m| m.nic_cpu_ns_per_io),
            controller_cpu_ns_per_io: per_io(|m| m.controller_cpu_ns_per_io),
            harness_cpu_ns_per_io: per_io(|m| m.harness_cpu_ns_per_io),
            process_cpu_ns_per_io: widest.fold(0.0, f64::max) / ios,
            host_copy_bytes_per_io: per_io(|m| m.host_copy_bytes_per_io),
            host_crc_bytes_per_io: per_io(|m| m.host_crc_bytes_per_io),
            host_decrypt_bytes_per_io: per_io(|m| m.host_decrypt_bytes_per_io),
            host_encrypt_bytes_per_io: per_io(|m| m.host_encrypt_bytes_per_io),
            nic_decrypt_bytes_per_io: per_io(|m| m.nic_decrypt_bytes_per_io),
            nic_encrypt_bytes_per_io: per_io(|m| m.nic_encrypt_bytes_per_io),
            nic_placed_bytes_per_io: per_io(|m| m.nic_placed_bytes_per_io),
            nic_crc_bytes_per_io: per_io(|m| m.nic_crc_bytes_per_io),
            control_calls_per_io: per_io(|m| m.control_calls_per_io),
            offload_share: per_io(|m| m.offload_share),
            resync_latency_pdus: per_io(|m| m.resync_latency_pdus),
            verified_bytes: sum(|m| m.verified_bytes),
            per_job: Vec::new(),
        };
        all.per_job = jobs
            .iter()
            .map(|(m, _)| JobMeasures {
                iops: m.iops,
                bytes_per_sec: m.bytes_per_sec,
                host_cpu_ns_per_io: m.host_cpu_ns_per_io,
                nic_cpu_ns_per_io: m.nic_cpu_ns_per_io,
                controller_cpu_ns_per_io: m.controller_cpu_ns_per_io,
            })
            .collect();
        all
    }

    /// Each measure, so statistics can go over all of them alike.
    pub fn each_mut(&mut self) -> [&mut f64; 21] {
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
            &mut self.host_decrypt_bytes_per_io,
            &mut self.host_encrypt_bytes_per_io,
            &mut self.nic_decrypt_bytes_per_io,
            &mut self.nic_encrypt_bytes_per_io,
            &mut self.nic_placed_bytes_per_io,
            &mut self.nic_crc_bytes_per_io,
            &mut self.control_calls_per_io,
            &mut self.offload_share,
            &mut self.resync_latency_pdus,
            &mut self.verified_bytes,
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(iops: f64, host: f64, process: f64) -> Measures {
        Measures {
            iops,
            bytes_per_sec: iops * 4096.0,
            host_cpu_ns_per_io: host,
            process_cpu_ns_per_io: process,
            verified_bytes: 4096.0,
            ..Measures::default()
        }
    }

    #[test]
    fn jobs_add_their_throughput_and_share_their_costs_per_io() {
        let mut lat = hdrhistogram::Histogram::<u64>::new(3).unwrap();
        for us in 1..=100 {
            lat.record(us).unwrap();
        }
        // Job 0 did 300 I/Os at 100 ns of host each, job 1 100 at 200 ns;
        // each read the process clock over its window: 90 us and 100 us.
        let jobs = [(job(3000.0, 100.0, 300.0), 300), (job(1000.0, 200.0, 1000.0), 100)];
        let all = Measures::of_jobs(&jobs, &lat);
        assert_eq!(all.iops, 4000.0);
        assert_eq!(all.bytes_per_sec, 4000.0 * 4096.0);
        assert_eq!(all.host_cpu_ns_per_io, (300.0 * 100.0 + 100.0 * 200.0) / 400.0);
        assert_eq!(all.process_cpu_ns_per_io, 100_000.0 / 400.0, "the widest window, once");
        assert_eq!(all.verified_bytes, 8192.0);
        assert_eq!((all.lat_p50_us, all.lat_p99_us), (50.0, 99.0));
        assert_eq!(all.per_job.len(), 2);
        assert_eq!(all.per_job[1].host_cpu_ns_per_io, 200.0);
        let one = Measures::of_jobs(&jobs[..1], &lat);
        assert_eq!((one.iops, one.per_job.len()), (3000.0, 0), "one job is itself");
    }
}
