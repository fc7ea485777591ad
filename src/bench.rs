//! `nvme-ddp bench`: what do the offloads save?
//!
//! A matrix of workloads (block size, direction, queue depth, data digest,
//! offload set, MTU), each point run `reps` times on fresh stacks over the
//! in-process wire (or a pair of TAP devices). The host, the host's NIC and
//! the controller (with its NIC) run in lockstep on one thread, with the
//! thread's CPU clock read between them, or (`threads`, and always over
//! TAP) on a thread each, with each thread's clock read. Per run: a
//! warm-up, then a measured phase: the host's CPU is what a host with this
//! NIC pays, the NIC's is what hardware would do instead, and the
//! process's CPU time is read too, as a check that the parts account for
//! all of it. Points are reported as medians with their spread.

use crate::app::HostApp;
use crate::driver::clock::Clock;
use crate::driver::rawtcp;
use crate::driver::smoltcp::{ControllerSide, HostSide, chain, run_host, serve, to_smol};
use crate::driver::transport::TransportType;
use crate::workload::{IoStats, Limit, Rw, Workload, WorkloadSpec};
use nic_backend::{NicEngine, NicHandle, NicThread, thread_cpu_ns};
use nvme_of::UlpStats;
use nvme_of::controller::{Target, TargetConfig};
use nvme_of::host::{Host, HostConfig, HostEvent};
use nvme_of::namespace::Namespace;
use nvme_of::{Digests, TxStats};
use nvme_storage::RamNamespace;
use serde::Serialize;
use smoltcp::wire::Ipv4Cidr;
use smoltcp_glue::{Link, LinkName, Medium, Profile, Stack, StackConfig, VirtualWire};
use std::cell::Cell;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;
use ulp_ddp::{Caps, DdpDevice, Stats};

const HOST_IP: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 3);
const CONTROLLER_IP: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 2);
const NQN: &str = "nqn.2026-11.io.nvme-ddp:bench";
const PORT: u16 = 4420;

/// The offload sets the bench compares by default.
pub const OFFLOAD_SETS: [Caps; 4] = [Caps::NONE, Caps::CRC, Caps::NVME_TCP, Caps::ALL];

/// What to measure.
#[derive(Debug, Clone)]
pub struct BenchOptions {
    pub bs: Vec<u32>,
    pub rw: Vec<Rw>,
    pub qd: Vec<u16>,
    pub ddgst: Vec<bool>,
    pub offload: Vec<Caps>,
    pub mtu: Vec<usize>,
    /// NVMe/TCP, NVMe/RDMA, or both on the same matrix.
    pub transport: Vec<TransportType>,
    pub queues: u16,
    pub reps: usize,
    pub warmup: Duration,
    pub duration: Duration,
    /// Run over these interfaces (host's, controller's: TAPs, or any
    /// through AF_XDP or AF_PACKET) instead of the in-process wire; their
    /// MTU is the interfaces'.
    pub link: Option<(LinkName, LinkName)>,
    /// Host, NIC and controller on threads of their own instead of in
    /// lockstep on one thread (over TAP they always are).
    pub threads: bool,
    /// On threads, how long host and controller poll after their last
    /// progress before they sleep (zero: at once).
    pub busy_poll: Duration,
}

impl BenchOptions {
    /// Whether the parts run on threads of their own.
    pub fn threaded(&self) -> bool {
        self.threads || self.link.is_some()
    }
}

impl Default for BenchOptions {
    /// The default matrix: about a quarter of an hour on two cores, each
    /// point run long enough and often enough to hold within 10%.
    fn default() -> Self {
        Self {
            bs: vec![4 << 10, 32 << 10, 128 << 10, 1 << 20],
            rw: vec![Rw::Read, Rw::Write],
            qd: vec![1, 32],
            ddgst: vec![true],
            offload: OFFLOAD_SETS.to_vec(),
            mtu: vec![1500, 9000],
            transport: vec![TransportType::Tcp],
            queues: 1,
            reps: 5,
            warmup: Duration::from_millis(200),
            duration: Duration::from_secs(1),
            link: None,
            busy_poll: Duration::ZERO,
            threads: false,
        }
    }
}

/// One point of the matrix: what ran and the medians of what it did.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Point {
    pub transport: &'static str,
    pub bs: u32,
    pub rw: &'static str,
    pub qd: u16,
    pub mtu: usize,
    pub ddgst: bool,
    pub offload: String,
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
    /// Raw smoltcp TCP throughput on the same medium and MTU.
    pub raw_tcp_bytes_per_sec: f64,
    pub offload_share: f64,
    pub resync_latency_pdus: f64,
    pub reps: usize,
    /// [min, max] over the repetitions.
    pub iops_range: [f64; 2],
    pub bytes_per_sec_range: [f64; 2],
    pub host_cpu_ns_per_io_range: [f64; 2],
    /// (max - min) / median over the repetitions.
    pub bytes_per_sec_spread: f64,
    pub host_cpu_spread: f64,
    pub nic_cpu_spread: f64,
    pub raw_tcp_spread: f64,
    /// Both spreads (throughput, host CPU) are within [`SPREAD_LIMIT`]: a
    /// target may be judged on this point.
    pub steady: bool,
}

/// The most a point's spread may be for a verdict on it.
pub const SPREAD_LIMIT: f64 = 0.10;

/// One run of one point.
#[derive(Debug, Clone, Default)]
struct Sample {
    iops: f64,
    bytes_per_sec: f64,
    lat_p50_us: f64,
    lat_p99_us: f64,
    host_cpu_ns_per_io: f64,
    nic_cpu_ns_per_io: f64,
    controller_cpu_ns_per_io: f64,
    harness_cpu_ns_per_io: f64,
    process_cpu_ns_per_io: f64,
    host_copy_bytes_per_io: f64,
    host_crc_bytes_per_io: f64,
    nic_placed_bytes_per_io: f64,
    nic_crc_bytes_per_io: f64,
    control_calls_per_io: f64,
    offload_share: f64,
    resync_latency_pdus: f64,
}

/// CPU time used so far by this thread or this process, in nanoseconds.
pub fn cpu_ns(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes the timespec we own.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// CPU time in nanoseconds of the host, the host's NIC, the controller,
/// the measuring itself, and the process, at one moment.
#[derive(Clone, Copy, Default)]
struct Cpu {
    host: i64,
    nic: i64,
    controller: i64,
    /// Lockstep only: the clock reads and idle sleeps of the loop.
    harness: i64,
    process: i64,
}

/// Where a run's CPU times come from.
enum Clocks {
    /// Each part on a thread of its own: their CPU clocks.
    Threads { nic: NicThread, controller: std::thread::JoinHandle<()> },
    /// Every part stepped in turn on this thread: what the loop added up.
    Lockstep(Rc<Cell<Cpu>>),
}

impl Clocks {
    /// Read on the host's thread.
    fn cpu(&self) -> Cpu {
        let process = cpu_ns(libc::CLOCK_PROCESS_CPUTIME_ID) as i64;
        match self {
            Clocks::Threads { nic, controller } => Cpu {
                host: cpu_ns(libc::CLOCK_THREAD_CPUTIME_ID) as i64,
                nic: nic.cpu_ns() as i64,
                controller: thread_cpu_ns(controller).unwrap_or(0) as i64,
                harness: 0,
                process,
            },
            Clocks::Lockstep(sums) => Cpu { process, ..sums.get() },
        }
    }
}

/// Counters at one moment of the host thread.
#[derive(Clone, Copy)]
struct Mark {
    cpu: Cpu,
    nic: Stats,
    ulp: UlpStats,
    tx: TxStats,
}

impl Mark {
    fn take(host: &Host, nic: &NicHandle, clocks: &Clocks) -> Self {
        let (ulp, tx) = host.stats();
        Mark { cpu: clocks.cpu(), nic: nic.stats(), ulp, tx }
    }
}

enum Phase {
    Warmup(Workload),
    Measure(Workload, Box<Mark>),
    Over,
}

/// Warm up, then measure one workload, then shut down.
struct BenchApp<'a> {
    nic: NicHandle,
    clocks: &'a Clocks,
    spec: WorkloadSpec,
    warmup: Duration,
    phase: Phase,
    sample: Option<Sample>,
    error: Option<String>,
    done: bool,
}

impl BenchApp<'_> {
    fn pump(&mut self, host: &mut Host, now: nvme_of::Instant) {
        let w = match &mut self.phase {
            Phase::Warmup(w) | Phase::Measure(w, _) => w,
            Phase::Over => return,
        };
        if let Err(e) = w.fill(host, now) {
            self.error.get_or_insert(format!("submit failed: {e}"));
            self.phase = Phase::Over;
            return host.shutdown(now);
        }
        if !w.done(now) {
            return;
        }
        match std::mem::replace(&mut self.phase, Phase::Over) {
            Phase::Warmup(w) => {
                if let Some(e) = w.first_error() {
                    self.error.get_or_insert(e.to_string());
                    return host.shutdown(now);
                }
                match Workload::new(self.spec.clone(), host) {
                    Ok(m) => {
                        let mark = Mark::take(host, &self.nic, self.clocks);
                        self.phase = Phase::Measure(m, Box::new(mark));
                        self.pump(host, now);
                    }
                    Err(e) => {
                        self.error.get_or_insert(e.to_string());
                        host.shutdown(now);
                    }
                }
            }
            Phase::Measure(w, start) => {
                let end = Mark::take(host, &self.nic, self.clocks);
                if let Some(e) = w.first_error() {
                    self.error.get_or_insert(e.to_string());
                }
                self.sample = Some(sample(&w.stats(), &start, &end));
                host.shutdown(now);
            }
            Phase::Over => {}
        }
    }
}

fn sample(s: &IoStats, a: &Mark, b: &Mark) -> Sample {
    let ios = s.ios.max(1) as f64;
    let ulp = b.ulp.since(&a.ulp);
    let cpu = |f: fn(&Cpu) -> i64| (f(&b.cpu) - f(&a.cpu)) as f64 / ios;
    Sample {
        iops: s.iops,
        bytes_per_sec: s.bytes_per_sec,
        lat_p50_us: s.lat_p50_us as f64,
        lat_p99_us: s.lat_p99_us as f64,
        host_cpu_ns_per_io: cpu(|c| c.host),
        nic_cpu_ns_per_io: cpu(|c| c.nic),
        controller_cpu_ns_per_io: cpu(|c| c.controller),
        harness_cpu_ns_per_io: cpu(|c| c.harness),
        process_cpu_ns_per_io: cpu(|c| c.process),
        host_copy_bytes_per_io: ((ulp.copy_bytes + b.tx.data_bytes - a.tx.data_bytes) as f64) / ios,
        host_crc_bytes_per_io: ((ulp.crc_bytes + b.tx.crc_bytes - a.tx.crc_bytes) as f64) / ios,
        nic_placed_bytes_per_io: (b.nic.nic_placed_bytes - a.nic.nic_placed_bytes) as f64 / ios,
        nic_crc_bytes_per_io: ((b.nic.nic_crc_bytes - a.nic.nic_crc_bytes)
            + (b.nic.tx_crc_offloaded_bytes - a.nic.tx_crc_offloaded_bytes))
            as f64
            / ios,
        control_calls_per_io: ulp.control_calls as f64 / ios,
        offload_share: ulp.offload_share(),
        resync_latency_pdus: ulp.resync_latency_pdus(),
    }
}

impl HostApp for BenchApp<'_> {
    fn on_event(&mut self, host: &mut Host, event: HostEvent, now: nvme_of::Instant) {
        match event {
            HostEvent::Ready => match Workload::new(
                WorkloadSpec { limit: Limit::Time(self.warmup), ..self.spec.clone() },
                host,
            ) {
                Ok(w) => {
                    self.phase = Phase::Warmup(w);
                    self.pump(host, now);
                }
                Err(e) => {
                    self.error = Some(e.to_string());
                    host.shutdown(now);
                }
            },
            HostEvent::Completion { tag, status, .. } => {
                if let Phase::Warmup(w) | Phase::Measure(w, _) = &mut self.phase {
                    w.complete(tag, status, now);
                }
                self.pump(host, now);
            }
            HostEvent::Closed => self.done = true,
            HostEvent::Failed(e) => {
                self.error.get_or_insert(e.to_string());
                self.done = true;
            }
            _ => {}
        }
    }

    fn on_poll(&mut self, host: &mut Host, now: nvme_of::Instant) {
        self.pump(host, now);
    }

    fn is_done(&self) -> bool {
        self.done
    }

    fn error(&self) -> Option<String> {
        self.error.clone()
    }
}

/// The point being run.
#[derive(Debug, Clone, Copy)]
pub struct Spec {
    pub transport: TransportType,
    pub bs: u32,
    pub rw: Rw,
    pub qd: u16,
    pub mtu: usize,
    pub ddgst: bool,
    pub offload: Caps,
}

fn fresh_seed() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(1, |d| d.as_nanos() as u64)
}

/// One run of `p` over a pair of media (host's, controller's).
fn run_once<M: Medium + Send + 'static>(
    host_m: M,
    ctrl_m: M,
    p: &Spec,
    o: &BenchOptions,
) -> Result<Sample, String> {
    let size = (64u64 << 20).max(u64::from(p.bs) * u64::from(p.qd) * u64::from(o.queues) * 4);
    let ns: Arc<dyn Namespace> = Arc::new(RamNamespace::new(size, 512).map_err(|e| e.to_string())?);
    let cfg = TargetConfig { subnqn: NQN.into(), ..TargetConfig::default() };
    let target = Target::new(cfg, vec![ns]).map_err(|e| e.to_string())?;
    let caps = p.offload;
    let (hdev, hnic) =
        chain(host_m, Profile::default(), 1, None, caps).map_err(|e| e.to_string())?;
    let (cdev, cnic) =
        chain(ctrl_m, Profile::default(), 2, None, caps).map_err(|e| e.to_string())?;
    let clock = Clock::new();
    let now = to_smol(clock.now());
    let seed = fresh_seed();
    let hcfg = StackConfig {
        seed,
        rx_buffer: 8 << 20,
        tx_buffer: 8 << 20,
        ..StackConfig::new(Ipv4Cidr::new(HOST_IP, 24))
    };
    let ccfg = StackConfig {
        seed: seed ^ 0x5a5a,
        rx_buffer: 8 << 20,
        tx_buffer: 8 << 20,
        ..StackConfig::new(Ipv4Cidr::new(CONTROLLER_IP, 24))
    };
    let host_cfg = HostConfig {
        subnqn: NQN.into(),
        digests: Digests { header: false, data: p.ddgst },
        io_queues: o.queues,
        queue_depth: p.qd,
        ..HostConfig::default()
    };
    let hddp: Arc<dyn DdpDevice> = Arc::new(hnic.clone());
    let cddp: Arc<dyn DdpDevice> = Arc::new(cnic);
    let remote = SocketAddrV4::new(CONTROLLER_IP, PORT);
    let cstack = Stack::new(cdev, ccfg, now);
    let mut ctrl = ControllerSide::new(cstack, target, PORT, Some(cddp))
        .map_err(|e| e.to_string())?
        .with_listener(p.transport.listener(p.mtu));
    let oneshot = caps.contains(Caps::NVME_TCP_ONESHOT);
    let spec = WorkloadSpec {
        rw: p.rw,
        bs: p.bs,
        limit: Limit::Time(o.duration),
        qd: usize::from(p.qd),
        verify: false,
        seed: 1,
        nsid: None,
    };
    let app = |clocks| BenchApp {
        nic: hnic,
        clocks,
        spec,
        warmup: o.warmup,
        phase: Phase::Over,
        sample: None,
        error: None,
        done: false,
    };
    let limit = Duration::from_secs(120);
    // The host's stack runs on the NIC's descriptor ring.
    let (error, sample) = if o.threaded() {
        let (ring, nic) = NicThread::spawn(hdev).map_err(|e| e.to_string())?;
        let mut host = HostSide::new(
            Stack::new(ring, hcfg, now),
            p.transport.host(host_cfg, oneshot, p.mtu),
            remote,
            Some(hddp),
        );
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let busy_poll = o.busy_poll;
        let controller = std::thread::Builder::new()
            .name("bench-ctrl".into())
            .spawn(move || serve(&mut ctrl, &clock, &flag, busy_poll))
            .map_err(|e| e.to_string())?;
        let clocks = Clocks::Threads { nic, controller };
        let mut app = app(&clocks);
        let result = run_host(&mut host, &mut app, &clock, limit, o.busy_poll);
        let (error, sample) = (app.error, app.sample);
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Clocks::Threads { controller, .. } = clocks {
            let _ = controller.join();
        }
        result.map_err(|e| e.to_string())?;
        (error, sample)
    } else {
        let (ring, mut nic) = NicEngine::new(hdev);
        let mut host = HostSide::new(
            Stack::new(ring, hcfg, now),
            p.transport.host(host_cfg, oneshot, p.mtu),
            remote,
            Some(hddp),
        );
        let sums = Rc::new(Cell::new(Cpu::default()));
        let clocks = Clocks::Lockstep(sums.clone());
        let mut app = app(&clocks);
        lockstep(&mut host, &mut nic, &mut ctrl, &mut app, &clock, &sums, limit)?;
        (app.error, app.sample)
    };
    if let Some(e) = error {
        return Err(e);
    }
    sample.ok_or_else(|| "no measurement".into())
}

/// What one read of this thread's CPU clock costs: the time an empty
/// interval between two reads measures (the median of many).
fn clock_read_cost() -> i64 {
    let mut v: Vec<i64> = (0..64)
        .map(|_| {
            let a = cpu_ns(libc::CLOCK_THREAD_CPUTIME_ID);
            (cpu_ns(libc::CLOCK_THREAD_CPUTIME_ID) - a) as i64
        })
        .collect();
    v.sort_unstable();
    v[v.len() / 2]
}

/// Run host, the host's NIC and the controller in turn on this thread, in
/// real time, until the app is done, adding each one's CPU time into
/// `sums`. No scheduler decides who runs when, so a point's figures repeat
/// from run to run. Each part's interval between two reads of the thread's
/// CPU clock holds one read's cost, which is taken out and counted as the
/// harness's; so are the sleeps while every part waits for a timer.
fn lockstep<H: Medium, N: Medium, C: Medium>(
    host: &mut HostSide<H>,
    nic: &mut NicEngine<N>,
    ctrl: &mut ControllerSide<C>,
    app: &mut dyn HostApp,
    clock: &Clock,
    sums: &Cell<Cpu>,
    limit: Duration,
) -> Result<(), String> {
    let read = clock_read_cost();
    let cpu = || cpu_ns(libc::CLOCK_THREAD_CPUTIME_ID) as i64;
    let start = clock.now();
    let mut t0 = cpu();
    loop {
        let now = to_smol(clock.now());
        let a = host.step(app, now).map_err(|e| e.to_string())?;
        let t1 = cpu();
        let b = nic.step(now);
        let t2 = cpu();
        let c = ctrl.step(now);
        let t3 = cpu();
        let mut s = sums.get();
        s.host += t1 - t0 - read;
        s.nic += t2 - t1 - read;
        s.controller += t3 - t2 - read;
        s.harness += 3 * read;
        t0 = t3;
        if app.is_done() && host.flushed() {
            sums.set(s);
            return Ok(());
        }
        if clock.now().saturating_since(start) > limit {
            return Err(format!("gave up after {limit:?}"));
        }
        if !(a || b || c) {
            // Everything waits for a timer (a delayed ACK, a keep-alive).
            let at = [host.poll_at(now), nic.poll_at(), ctrl.poll_at(now)];
            let at = at.into_iter().flatten().min().unwrap_or(now);
            if at > now {
                let d = (at - now).min(smoltcp::time::Duration::from_millis(10));
                std::thread::sleep(Duration::from_micros(d.total_micros()));
            }
            t0 = cpu();
            s.harness += t0 - t3;
        }
        sums.set(s);
    }
}

/// A fresh pair of media for one run.
fn media(o: &BenchOptions, mtu: usize) -> Result<Media, String> {
    match &o.link {
        None => {
            let (h, c) = VirtualWire::pair(mtu + 14, 512);
            Ok(Media::Wire(h, c))
        }
        Some((h, c)) => {
            let h = h.open(None).map_err(|e| format!("{h}: {e}"))?;
            let c = c.open(None).map_err(|e| format!("{c}: {e}"))?;
            Ok(Media::Link(h, c))
        }
    }
}

enum Media {
    Wire(smoltcp_glue::WireEnd, smoltcp_glue::WireEnd),
    Link(Link, Link),
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => 0.0,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

fn spread(v: &[f64]) -> f64 {
    let m = median(v.to_vec());
    let (lo, hi) = v.iter().fold((f64::MAX, f64::MIN), |(lo, hi), &x| (lo.min(x), hi.max(x)));
    if m > 0.0 { (hi - lo) / m } else { 0.0 }
}

/// Every point of the matrix, in order.
pub fn points(o: &BenchOptions) -> Vec<Spec> {
    let mut v = Vec::new();
    for &transport in &o.transport {
        for &rw in &o.rw {
            for &ddgst in &o.ddgst {
                for &mtu in &o.mtu {
                    for &qd in &o.qd {
                        for &bs in &o.bs {
                            for &offload in &o.offload {
                                v.push(Spec { transport, bs, rw, qd, mtu, ddgst, offload });
                            }
                        }
                    }
                }
            }
        }
    }
    v
}

/// Raw TCP throughput on the bench's medium at `mtu`, through the same NIC
/// (checksum offload, no ULP offload): median of `reps`, and spread.
pub fn raw_tcp(o: &BenchOptions, mtu: usize) -> Result<(f64, f64), String> {
    // As in the NVMe runs: the receiver (the host) has its NIC behind a
    // ring, on a thread or in lockstep.
    fn through_nic<M: Medium + Send + 'static>(
        a: M,
        b: M,
        d: Duration,
        threads: bool,
    ) -> Result<f64, String> {
        let (a, _) =
            chain(a, Profile::default(), 1, None, Caps::NONE).map_err(|e| e.to_string())?;
        let (b, _) =
            chain(b, Profile::default(), 2, None, Caps::NONE).map_err(|e| e.to_string())?;
        if threads {
            let (ring, _nic) = NicThread::spawn(b).map_err(|e| e.to_string())?;
            rawtcp::throughput(a, ring, d)
        } else {
            let (ring, nic) = NicEngine::new(b);
            rawtcp::lockstep(a, ring, nic, d)
        }
    }
    let d = o.duration.max(Duration::from_millis(100));
    let mut v = Vec::new();
    for _ in 0..o.reps.max(1) {
        v.push(match media(o, mtu)? {
            Media::Wire(a, b) => through_nic(a, b, d, o.threaded())?,
            Media::Link(a, b) => through_nic(a, b, d, o.threaded())?,
        });
    }
    Ok((median(v.clone()), spread(&v)))
}

/// Run one point `reps` times; `tick` is called after each run.
pub fn run_point(
    p: &Spec,
    o: &BenchOptions,
    (raw, raw_spread): (f64, f64),
    mut tick: impl FnMut(),
) -> Result<Point, String> {
    let mut samples = Vec::new();
    for _ in 0..o.reps.max(1) {
        let s = match media(o, p.mtu)? {
            Media::Wire(h, c) => run_once(h, c, p, o),
            Media::Link(h, c) => run_once(h, c, p, o),
        }
        .map_err(|e| {
            format!(
                "{} {} bs={} qd={} mtu={} ddgst={} offload={}: {e}",
                p.transport.name(),
                p.rw.name(),
                p.bs,
                p.qd,
                p.mtu,
                p.ddgst,
                p.offload
            )
        })?;
        samples.push(s);
        tick();
    }
    let m = |f: fn(&Sample) -> f64| median(samples.iter().map(f).collect());
    let range = |f: fn(&Sample) -> f64| {
        samples.iter().map(f).fold([f64::MAX, f64::MIN], |[lo, hi], x| [lo.min(x), hi.max(x)])
    };
    let thr: Vec<f64> = samples.iter().map(|s| s.bytes_per_sec).collect();
    let cpu: Vec<f64> = samples.iter().map(|s| s.host_cpu_ns_per_io).collect();
    let nic: Vec<f64> = samples.iter().map(|s| s.nic_cpu_ns_per_io).collect();
    let (bytes_per_sec_spread, host_cpu_spread) = (spread(&thr), spread(&cpu));
    Ok(Point {
        transport: p.transport.name(),
        bs: p.bs,
        rw: p.rw.name(),
        qd: p.qd,
        mtu: p.mtu,
        ddgst: p.ddgst,
        offload: p.offload.to_string(),
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
        nic_cpu_spread: spread(&nic),
        raw_tcp_spread: raw_spread,
        steady: bytes_per_sec_spread <= SPREAD_LIMIT && host_cpu_spread <= SPREAD_LIMIT,
    })
}

/// What a target check found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    Met,
    Missed,
    /// A point it rests on spread more than [`SPREAD_LIMIT`]: the ratio
    /// says nothing either way.
    Inconclusive,
}

/// A target from the issue, checked against measured points.
#[derive(Debug, Clone, Serialize)]
pub struct TargetCheck {
    pub what: String,
    pub limit: String,
    pub measured: f64,
    /// The largest spread among the measurements the ratio rests on.
    pub spread: f64,
    pub verdict: Verdict,
}

impl TargetCheck {
    fn new(what: String, limit: String, measured: f64, spreads: &[f64], met: bool) -> Self {
        let spread = spreads.iter().copied().fold(0.0, f64::max);
        let verdict = match (spread <= SPREAD_LIMIT, met) {
            (false, _) => Verdict::Inconclusive,
            (true, true) => Verdict::Met,
            (true, false) => Verdict::Missed,
        };
        Self { what, limit, measured, spread, verdict }
    }

    fn at_most(what: String, measured: f64, limit: f64, spreads: &[f64]) -> Self {
        Self::new(what, format!("<= {limit}x"), measured, spreads, measured <= limit)
    }

    fn at_least(what: String, measured: f64, limit: f64, spreads: &[f64]) -> Self {
        Self::new(what, format!(">= {limit}x"), measured, spreads, measured >= limit)
    }
}

/// Check the offload targets wherever the matrix has the points they need.
pub fn check_targets(points: &[Point]) -> Vec<TargetCheck> {
    let find_on = |transport: &str, rw: &str, offload: &str, qd: u16, mtu: usize| {
        points.iter().find(|p| {
            p.transport == transport
                && p.rw == rw
                && p.bs == 128 << 10
                && p.ddgst
                && p.offload == offload
                && p.qd == qd
                && p.mtu == mtu
        })
    };
    let find = |rw: &str, offload: &str, qd: u16, mtu: usize| find_on("tcp", rw, offload, qd, mtu);
    let mut out = Vec::new();
    let mut settings: Vec<(u16, usize)> = points.iter().map(|p| (p.qd, p.mtu)).collect();
    settings.sort_unstable();
    settings.dedup();
    for (qd, mtu) in settings {
        let at = format!("128k, data digest, qd {qd}, mtu {mtu}");
        if let (Some(all), Some(none)) =
            (find("read", "all", qd, mtu), find("read", "none", qd, mtu))
        {
            let cpu = all.host_cpu_ns_per_io / none.host_cpu_ns_per_io.max(1.0);
            out.push(TargetCheck::at_most(
                format!("read host CPU/IO, all vs none ({at})"),
                cpu,
                0.4,
                &[all.host_cpu_spread, none.host_cpu_spread],
            ));
            let thr = all.bytes_per_sec / none.bytes_per_sec.max(1.0);
            out.push(TargetCheck::at_least(
                format!("read throughput, all vs none ({at})"),
                thr,
                1.2,
                &[all.bytes_per_sec_spread, none.bytes_per_sec_spread],
            ));
            if all.raw_tcp_bytes_per_sec > 0.0 {
                let raw = all.bytes_per_sec / all.raw_tcp_bytes_per_sec;
                let what = format!("read throughput with all offloads vs raw TCP ({at})");
                let spreads = [all.bytes_per_sec_spread, all.raw_tcp_spread];
                out.push(TargetCheck::at_least(what, raw, 0.8, &spreads));
            }
        }
        if let (Some(rdma), Some(tcp)) =
            (find_on("rdma", "read", "all", qd, mtu), find("read", "all", qd, mtu))
        {
            let cpu = rdma.host_cpu_ns_per_io / tcp.host_cpu_ns_per_io.max(1.0);
            out.push(TargetCheck::at_most(
                format!("read host CPU/IO, NVMe/RDMA vs NVMe/TCP, all offloads ({at})"),
                cpu,
                1.0,
                &[rdma.host_cpu_spread, tcp.host_cpu_spread],
            ));
        }
        if let (Some(crc), Some(none)) =
            (find("write", "crc", qd, mtu), find("write", "none", qd, mtu))
        {
            let cpu = crc.host_cpu_ns_per_io / none.host_cpu_ns_per_io.max(1.0);
            out.push(TargetCheck::at_most(
                format!("write host CPU/IO, crc vs none ({at})"),
                cpu,
                0.6,
                &[crc.host_cpu_spread, none.host_cpu_spread],
            ));
        }
    }
    out
}

/// The machine a report was measured on.
#[derive(Debug, Clone, Serialize)]
pub struct Machine {
    pub cpu_model: String,
    pub cores: usize,
    pub kernel: String,
    /// The spread of a fixed copy-and-CRC loop's CPU time over a few runs:
    /// how still this machine holds by itself. No point measured on it can
    /// be expected to hold stiller.
    pub baseline_spread: f64,
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
    pub fn this() -> Self {
        let read = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
        let cpu_model = read("/proc/cpuinfo")
            .lines()
            .find_map(|l| l.strip_prefix("model name").and_then(|r| r.split_once(':')))
            .map_or_else(|| "unknown".into(), |(_, m)| m.trim().to_string());
        let cores = std::thread::available_parallelism().map_or(1, usize::from);
        let kernel = read("/proc/sys/kernel/osrelease").trim().to_string();
        Self { cpu_model, cores, kernel, baseline_spread: baseline_spread() }
    }
}

/// Everything one bench run found, as written to JSON.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub machine: Machine,
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
    pub points: Vec<Point>,
    pub targets: Vec<TargetCheck>,
}

impl Report {
    pub fn new(o: &BenchOptions, points: Vec<Point>) -> Self {
        Self {
            machine: Machine::this(),
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
            targets: check_targets(&points),
            points,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn point(rw: &'static str, offload: &'static str, cpu: f64, spread: f64) -> Point {
        Point {
            transport: "tcp",
            bs: 128 << 10,
            rw,
            qd: 32,
            mtu: 9000,
            ddgst: true,
            offload: offload.into(),
            iops: 1.0,
            bytes_per_sec: 1e9,
            host_cpu_ns_per_io: cpu,
            nic_cpu_ns_per_io: 1.0,
            controller_cpu_ns_per_io: 1.0,
            process_cpu_ns_per_io: 1.0,
            reps: 5,
            bytes_per_sec_spread: 0.01,
            host_cpu_spread: spread,
            steady: spread <= SPREAD_LIMIT,
            ..Point::default()
        }
    }

    #[test]
    fn a_verdict_on_a_noisy_point_is_inconclusive() {
        let verdict = |spread| {
            let pts = [point("read", "all", 30.0, spread), point("read", "none", 100.0, 0.02)];
            check_targets(&pts)[0].verdict
        };
        assert_eq!(verdict(0.05), Verdict::Met);
        assert_eq!(verdict(0.128), Verdict::Inconclusive, "never met on a 12.8% spread");
        let missed = [point("read", "all", 60.0, 0.05), point("read", "none", 100.0, 0.5)];
        assert_eq!(check_targets(&missed)[0].verdict, Verdict::Inconclusive);
        let missed = [point("read", "all", 60.0, 0.05), point("read", "none", 100.0, 0.05)];
        assert_eq!(check_targets(&missed)[0].verdict, Verdict::Missed);
    }
}
