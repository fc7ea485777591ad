//! What a point measured: one run's measures ([`Measures`]), a point's
//! medians and spreads over its runs ([`Point`]), and the measures a goal
//! may compare ([`Metric`]). Plain data; it must never run anything or
//! hold a limit.

use crate::bench::clocks::{Cpu, Mark};
use crate::bench::options::{Meter, Setting};
use crate::workload::IoStats;
use serde::ser::SerializeMap;
use serde::{Deserialize, Serialize, Serializer};

/// One point of the matrix: what ran and the medians of what it did.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Point {
    /// What ran (written as its fields: transport, bs, rw, ...).
    #[serde(flatten)]
    pub setting: Setting,
    /// What the costs were counted in: CPU time, or (under Valgrind)
    /// instructions and what its cache model saw.
    pub meter: Meter,
    /// The medians over the runs (written as their fields: iops, ...).
    #[serde(flatten)]
    pub median: Measures,
    /// Raw smoltcp TCP throughput on the same medium, MTU and impairments.
    pub raw_tcp_bytes_per_sec: f64,
    /// Over interfaces (`--tap`, `--iface`): raw TCP on the in-process
    /// wire at the same MTU and impairments, measured in the same rounds,
    /// what the interfaces' raw TCP is held against.
    #[serde(skip_serializing_if = "is_zero")]
    pub raw_tcp_wire_bytes_per_sec: f64,
    /// Instructions meter: what raw TCP's sender and receiver did to move
    /// as many bytes as one I/O of this point moves (medians; written as
    /// `raw_tcp_sender_instructions_per_io`, ...).
    #[serde(flatten, skip_serializing_if = "RawCounts::is_empty")]
    pub raw_tcp: RawCounts,
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
    #[serde(skip_serializing_if = "is_zero")]
    pub raw_tcp_wire_spread: f64,
    /// Instructions meter: [min, max] of the host's instructions per I/O,
    /// and each part's (max - min) / median over the repetitions.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host_instructions_range: Option<[f64; 2]>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host_instructions_spread: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nic_instructions_spread: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub controller_instructions_spread: Option<f64>,
    /// The spreads a verdict rests on are within
    /// [`SPREAD_LIMIT`](crate::bench::stats::SPREAD_LIMIT) (CPU meter:
    /// throughput and host CPU; instructions meter: host instructions): a
    /// goal may be judged on this point.
    pub steady: bool,
}

/// What Valgrind counted of one part's work, per I/O (or, for raw TCP
/// while it is measured, per byte): Callgrind's events under a fixed
/// cache model (see [`meter`](crate::bench::meter)).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Counts {
    /// Instructions executed (Ir).
    pub instructions: f64,
    /// Data reads and writes (Dr, Dw).
    pub data_reads: f64,
    pub data_writes: f64,
    /// First-level misses, instruction and data (I1mr + D1mr + D1mw).
    pub l1_misses: f64,
    /// Last-level misses (ILmr + DLmr + DLmw).
    pub ll_misses: f64,
    /// Mispredicted branches, conditional and indirect (Bcm + Bim).
    pub branch_misses: f64,
    /// Estimated cycles: a first-level hit 1, a last-level hit 5, memory
    /// 35 (gungraun's estimate, so the two tables read alike).
    pub est_cycles: f64,
}

impl Counts {
    /// The names of the measures, as JSON writes them after a part's
    /// name (`host_instructions_per_io`).
    pub const NAMES: [&'static str; 7] = [
        "instructions",
        "data_reads",
        "data_writes",
        "l1_misses",
        "ll_misses",
        "branch_misses",
        "est_cycles",
    ];

    pub fn each(&self) -> [f64; 7] {
        [
            self.instructions,
            self.data_reads,
            self.data_writes,
            self.l1_misses,
            self.ll_misses,
            self.branch_misses,
            self.est_cycles,
        ]
    }

    pub fn each_mut(&mut self) -> [&mut f64; 7] {
        [
            &mut self.instructions,
            &mut self.data_reads,
            &mut self.data_writes,
            &mut self.l1_misses,
            &mut self.ll_misses,
            &mut self.branch_misses,
            &mut self.est_cycles,
        ]
    }

    /// Each measure times `k`.
    pub fn scaled(mut self, k: f64) -> Self {
        self.each_mut().into_iter().for_each(|v| *v *= k);
        self
    }

    pub fn is_empty(&self) -> bool {
        self.each().iter().all(|&v| v == 0.0)
    }
}

/// Write `parts` flat into a map: `{name}_{measure}_per_io` for each.
fn write_parts<S: SerializeMap>(map: &mut S, parts: &[(&str, &Counts)]) -> Result<(), S::Error> {
    for (name, c) in parts {
        for (measure, v) in Counts::NAMES.iter().zip(c.each()) {
            map.serialize_entry(&format!("{name}_{measure}_per_io"), &v)?;
        }
    }
    Ok(())
}

/// Instructions meter: what each NVMe part did per I/O.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct PartCounts {
    pub host: Counts,
    pub nic: Counts,
    pub controller: Counts,
}

impl PartCounts {
    pub fn is_empty(&self) -> bool {
        [self.host, self.nic, self.controller].iter().all(Counts::is_empty)
    }
}

impl Serialize for PartCounts {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(None)?;
        let parts = [("host", &self.host), ("nic", &self.nic), ("controller", &self.controller)];
        write_parts(&mut map, &parts)?;
        map.end()
    }
}

/// Instructions meter: what raw TCP's sender and receiver did.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct RawCounts {
    pub sender: Counts,
    pub receiver: Counts,
}

impl RawCounts {
    pub fn is_empty(&self) -> bool {
        self.sender.is_empty() && self.receiver.is_empty()
    }

    pub fn scaled(self, k: f64) -> Self {
        Self { sender: self.sender.scaled(k), receiver: self.receiver.scaled(k) }
    }
}

impl Serialize for RawCounts {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(None)?;
        let parts = [("raw_tcp_sender", &self.sender), ("raw_tcp_receiver", &self.receiver)];
        write_parts(&mut map, &parts)?;
        map.end()
    }
}

/// One run of raw TCP: its throughput and, under the instructions meter,
/// what its ends did per byte.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct RawRun {
    pub bytes_per_sec: f64,
    pub per_byte: RawCounts,
    /// Over interfaces, raw TCP on the in-process wire right after.
    pub wire_bytes_per_sec: f64,
}

fn is_zero(v: &f64) -> bool {
    *v == 0.0
}

/// Raw TCP's throughput over its repetitions on one medium, MTU and
/// impairment: the median, the spread and [min, max]; and the medians of
/// its ends' counts per byte.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct RawTcp {
    pub median: f64,
    pub spread: f64,
    pub range: [f64; 2],
    pub per_byte: RawCounts,
    /// The in-process wire's median and spread beside interfaces (zero on
    /// the wire itself).
    pub wire_median: f64,
    pub wire_spread: f64,
}

/// A measure of a point whose spread over the runs is known, so a goal
/// comparing it can tell a verdict from noise. In goal files, by its JSON
/// field name.
///
/// A part's cost is counted by the meter the point was measured with: a
/// goal on `host_cpu_ns_per_io` is judged in instructions on a point
/// measured with the instructions meter, so one goals file serves both.
/// The `*_instructions_per_io` names ask for instructions alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Metric {
    BytesPerSec,
    HostCpuNsPerIo,
    NicCpuNsPerIo,
    ControllerCpuNsPerIo,
    RawTcpBytesPerSec,
    RawTcpWireBytesPerSec,
    HostInstructionsPerIo,
    NicInstructionsPerIo,
    ControllerInstructionsPerIo,
}

impl Metric {
    /// The point's median of this measure (zero where its meter did not
    /// measure it).
    pub fn of(self, p: &Point) -> f64 {
        let counted = |c: &Counts| c.instructions;
        let c = &p.median.counts;
        match (self, p.meter) {
            (Metric::BytesPerSec, _) => p.median.bytes_per_sec,
            (Metric::RawTcpBytesPerSec, _) => p.raw_tcp_bytes_per_sec,
            (Metric::RawTcpWireBytesPerSec, _) => p.raw_tcp_wire_bytes_per_sec,
            (Metric::HostCpuNsPerIo, Meter::Cpu) => p.median.host_cpu_ns_per_io,
            (Metric::NicCpuNsPerIo, Meter::Cpu) => p.median.nic_cpu_ns_per_io,
            (Metric::ControllerCpuNsPerIo, Meter::Cpu) => p.median.controller_cpu_ns_per_io,
            (Metric::HostCpuNsPerIo | Metric::HostInstructionsPerIo, _) => counted(&c.host),
            (Metric::NicCpuNsPerIo | Metric::NicInstructionsPerIo, _) => counted(&c.nic),
            (Metric::ControllerCpuNsPerIo | Metric::ControllerInstructionsPerIo, _) => {
                counted(&c.controller)
            }
        }
    }

    /// The point's spread of this measure over its runs.
    pub fn spread(self, p: &Point) -> f64 {
        match (self, p.meter) {
            (Metric::BytesPerSec, _) => p.bytes_per_sec_spread,
            (Metric::RawTcpBytesPerSec, _) => p.raw_tcp_spread,
            (Metric::RawTcpWireBytesPerSec, _) => p.raw_tcp_wire_spread,
            (Metric::HostCpuNsPerIo, Meter::Cpu) => p.host_cpu_spread,
            (Metric::NicCpuNsPerIo, Meter::Cpu) => p.nic_cpu_spread,
            (Metric::ControllerCpuNsPerIo, Meter::Cpu) => p.controller_cpu_spread,
            (Metric::HostCpuNsPerIo | Metric::HostInstructionsPerIo, _) => {
                p.host_instructions_spread.unwrap_or(0.0)
            }
            (Metric::NicCpuNsPerIo | Metric::NicInstructionsPerIo, _) => {
                p.nic_instructions_spread.unwrap_or(0.0)
            }
            (Metric::ControllerCpuNsPerIo | Metric::ControllerInstructionsPerIo, _) => {
                p.controller_instructions_spread.unwrap_or(0.0)
            }
        }
    }
}

/// What one run of a point did, or (in a [`Point`]) the medians over its
/// runs.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Measures {
    /// I/Os measured.
    pub ios: f64,
    pub iops: f64,
    pub bytes_per_sec: f64,
    pub lat_p50_us: f64,
    pub lat_p99_us: f64,
    /// CPU time per I/O of the host (the NIC's work is not in it).
    pub host_cpu_ns_per_io: f64,
    /// CPU time per I/O of the host's NIC.
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
    /// Instructions meter: what each part did per I/O (written as
    /// `host_instructions_per_io`, ...). The CPU times, throughput and
    /// latencies above are then zero: under Valgrind they would measure
    /// Valgrind.
    #[serde(flatten, skip_serializing_if = "PartCounts::is_empty", skip_deserializing)]
    pub counts: PartCounts,
    /// With several jobs, what each did (the figures above are of all of
    /// them together).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub per_job: Vec<JobMeasures>,
}

/// What one job of a run did, or (in a [`Point`]) the medians over its
/// runs: its throughput and the CPU per I/O of its threads (the
/// controller's is its own stack's, the group that served it).
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize)]
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
            ios: s.ios as f64,
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
            counts: PartCounts::default(),
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
            ios,
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
            counts: PartCounts::default(),
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

    /// These measures without what time measures (throughput, latency,
    /// CPU time): a run under Valgrind would have timed Valgrind.
    pub fn without_times(self) -> Self {
        Measures {
            iops: 0.0,
            bytes_per_sec: 0.0,
            lat_p50_us: 0.0,
            lat_p99_us: 0.0,
            host_cpu_ns_per_io: 0.0,
            nic_cpu_ns_per_io: 0.0,
            controller_cpu_ns_per_io: 0.0,
            harness_cpu_ns_per_io: 0.0,
            process_cpu_ns_per_io: 0.0,
            per_job: Vec::new(),
            ..self
        }
    }

    /// Each measure, so statistics can go over all of them alike.
    pub fn each_mut(&mut self) -> Vec<&mut f64> {
        let PartCounts { host, nic, controller } = &mut self.counts;
        let counts = [host, nic, controller].into_iter().flat_map(Counts::each_mut);
        [
            &mut self.ios,
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
        .into_iter()
        .chain(counts)
        .collect()
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
