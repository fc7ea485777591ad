//! The embedded default: host and controller in one process over an
//! in-process wire with a RAM namespace. A write pass over the namespace,
//! then a verified read pass, then a report.
//!
//! It wires the parts and runs them; it must never measure on its own
//! (savings are measured by [`crate::bench`]) or print (the CLI shows its report).

use crate::app::{HostApp, IoApp, Stoppable, Watch};
use crate::bench::error::BenchError;
use crate::bench::matrix::run_point;
use crate::bench::options::{BenchOptions, Meter, Setting};
use crate::bench::point::{Point, RawTcp};
use crate::bench::stats::SPREAD_LIMIT;
use crate::driver::clock::Clock;
use crate::driver::smoltcp::{
    Chain, ControllerSide, HostSide, IMPAIRED_IO_TIMEOUT, IMPAIRED_KATO, RunError, chain, run_host,
    run_simulated, serve, to_smol,
};
use crate::driver::transport::{TlsConfig, TransportType};
use crate::report::{OffloadReport, PhaseReport, RecoveryReport, human_bytes};
use crate::workload::{IoStats, Limit, Rw, WorkloadSpec};
use nic_backend::NicHandle;
use nvme_of::controller::{Port, Target, TargetConfig};
use nvme_of::host::HostConfig;
use nvme_of::namespace::Namespace;
use nvme_of::{Digests, TxStats, UlpStats};
use nvme_storage::RamNamespace;
use serde::Serialize;
use smoltcp::wire::Ipv4Cidr;
use smoltcp_glue::{ImpairStats, Profile, Stack, StackConfig, VirtualWire, WireEnd, WireStats};
use std::net::{Ipv4Addr, SocketAddrV4};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;
use ulp_ddp::{Caps, DdpDevice, Stats};

pub const CONTROLLER_IP: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 2);
pub const HOST_IP: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 3);
pub const NQN: &str = "nqn.2026-11.io.nvme-ddp:demo";
pub const PORT: u16 = 4420;

/// How to run the demo.
#[derive(Debug, Clone)]
pub struct DemoOptions {
    /// Namespace size, and bytes per pass.
    pub size: u64,
    pub bs: u32,
    pub qd: u16,
    pub queues: u16,
    /// IP MTU of the wire.
    pub mtu: usize,
    pub digests: Digests,
    /// Applied to frames arriving at each end.
    pub impair: Profile,
    pub seed: u64,
    /// Capture the host's frames here.
    pub pcap: Option<PathBuf>,
    /// One thread in simulated time instead of a thread each in real time.
    pub simulated: bool,
    /// Offloads active on both NICs.
    pub offload: Caps,
    /// Map transfers from this size (default: the NIC's threshold, 32 KiB).
    pub ddp_threshold: Option<u32>,
    /// Keep alive timeout and command timeout of the host.
    pub kato: Duration,
    pub io_timeout: Duration,
    /// NVMe/TCP, or NVMe/RDMA over iWARP.
    pub transport: TransportType,
    /// NVMe/TCP over TLS 1.3 (the NICs take the records over where the
    /// offloads have tls-rx/tls-tx).
    pub tls: bool,
    /// Also measure what the offloads save against a software-only run.
    pub baseline: bool,
    /// What the savings' costs are counted in (the instructions meter
    /// counts one job).
    pub meter: Meter,
    /// Jobs at once (fio's numjobs): each a host with its own wire against
    /// a controller stack of its own, the one target shared; each writes
    /// and reads back the whole namespace.
    pub jobs: u16,
}

impl DemoOptions {
    /// The host's timeouts on an impaired wire ([`IMPAIRED_KATO`]).
    pub const IMPAIRED_KATO: Duration = IMPAIRED_KATO;
    pub const IMPAIRED_IO_TIMEOUT: Duration = IMPAIRED_IO_TIMEOUT;
}

impl Default for DemoOptions {
    fn default() -> Self {
        Self {
            size: 256 << 20,
            bs: 128 << 10,
            qd: 32,
            queues: 2,
            mtu: 9000,
            digests: Digests::NONE,
            impair: Profile::default(),
            seed: 1,
            pcap: None,
            simulated: false,
            offload: Caps::ALL,
            ddp_threshold: None,
            kato: Duration::from_secs(5),
            io_timeout: Duration::from_secs(30),
            transport: TransportType::Tcp,
            tls: false,
            baseline: false,
            meter: Meter::Cpu,
            jobs: 1,
        }
    }
}

/// Frames and bytes each way on the wire.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct WireReport {
    pub h2c_frames: u64,
    pub h2c_bytes: u64,
    pub c2h_frames: u64,
    pub c2h_bytes: u64,
}

#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct ImpairReport {
    pub frames: u64,
    pub dropped: u64,
    pub corrupted: u64,
    pub duplicated: u64,
    pub reordered: u64,
}

impl From<ImpairStats> for ImpairReport {
    fn from(s: ImpairStats) -> Self {
        Self {
            frames: s.frames,
            dropped: s.dropped,
            corrupted: s.corrupted,
            duplicated: s.duplicated,
            reordered: s.reordered,
        }
    }
}

/// What the demo did.
#[derive(Debug, Clone, Serialize)]
pub struct DemoReport {
    pub transport: TransportType,
    /// Over TLS 1.3.
    pub tls: bool,
    pub size: u64,
    pub mtu: usize,
    pub hdgst: bool,
    pub ddgst: bool,
    pub simulated: bool,
    /// Wall-clock seconds (or simulated seconds when simulated).
    pub seconds: f64,
    pub phases: Vec<PhaseReport>,
    pub wire: WireReport,
    /// Frames impaired on their way to the controller / to the host.
    pub impaired_h2c: ImpairReport,
    pub impaired_c2h: ImpairReport,
    /// The host side's offload counters.
    pub offload: OffloadReport,
    /// The controller side's (its "host_*" counters count the controller's
    /// own copy and digest work).
    pub controller_offload: OffloadReport,
    /// What the offloads saved, if asked for and there were any.
    pub savings: Option<Savings>,
    /// What the host's error recovery did (all zero when no fault was
    /// fatal).
    pub recovery: RecoveryReport,
    /// The run was cut short (Ctrl-C): the phases are what ran till then.
    pub interrupted: bool,
    /// I/Os in flight an interrupted run did not wait for.
    pub abandoned: u64,
    /// What the controller granted: I/O queues, commands per queue.
    pub io_queues: u16,
    pub queue_depth: usize,
    /// Jobs that ran at once; with more than one, the figures above are of
    /// all of them together, and each job's phases are here.
    pub jobs: u16,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub per_job: Vec<Vec<PhaseReport>>,
    /// Read bytes the RAM namespace lent rather than copied, and bytes it
    /// copied because a write came to a chunk a read still held.
    pub namespace_lent_bytes: u64,
    pub namespace_copied_on_write_bytes: u64,
    #[serde(skip)]
    pub error: Option<String>,
}

pub type DemoDevice = Chain<WireEnd>;

#[derive(Debug, thiserror::Error)]
pub enum DemoError {
    #[error("{0}")]
    Setup(String),
    #[error(transparent)]
    Run(#[from] RunError),
    #[error("controller thread panicked")]
    Panicked,
    /// Measuring what the offloads saved failed.
    #[error(transparent)]
    Savings(#[from] BenchError),
}

fn device(
    o: &DemoOptions,
    end: WireEnd,
    seed: u64,
    pcap: Option<&PathBuf>,
) -> Result<(DemoDevice, NicHandle), DemoError> {
    chain(end, o.impair, seed, pcap.map(PathBuf::as_path), o.offload)
        .map_err(|e| DemoError::Setup(e.to_string()))
}

/// The two sides of the demo and their NICs.
pub struct Demo {
    pub host: HostSide<DemoDevice>,
    pub ctrl: ControllerSide<DemoDevice>,
    pub host_nic: NicHandle,
    pub ctrl_nic: NicHandle,
    /// The namespace the controller serves.
    pub namespace: Arc<RamNamespace>,
}

/// The two sides of the demo, wired together.
pub fn build(o: &DemoOptions) -> Result<Demo, DemoError> {
    let (target, ram) = target(o)?;
    build_job(o, &target, 0, ram)
}

/// The target every job's controller serves: one RAM namespace, which is
/// returned too.
fn target(o: &DemoOptions) -> Result<(Arc<Target>, Arc<RamNamespace>), DemoError> {
    let ram =
        Arc::new(RamNamespace::new(o.size, 512).map_err(|e| DemoError::Setup(e.to_string()))?);
    let ns: Arc<dyn Namespace> = ram.clone();
    let port = Port { traddr: CONTROLLER_IP.to_string(), trsvcid: PORT.to_string(), portid: 1 };
    let cfg = TargetConfig {
        subnqn: NQN.into(),
        port: Some(port),
        ddp_threshold: o.ddp_threshold,
        ..TargetConfig::default()
    };
    // Both ends are ours: the controller's queues take the depth asked
    // for (a queue holds one entry fewer than its size).
    let cfg = TargetConfig { queue_size: cfg.queue_size.max(o.qd.saturating_add(1)), ..cfg };
    let target = Target::new(cfg, vec![ns]).map_err(|e| DemoError::Setup(e.to_string()))?;
    Ok((target, ram))
}

/// Job `job`'s two sides over a wire of its own, its controller serving
/// `target`; its impairments seeded with `seed + 2 job` (the host's end)
/// and one more (the controller's). Only the first job's frames are
/// captured.
fn build_job(
    o: &DemoOptions,
    target: &Arc<Target>,
    job: u16,
    namespace: Arc<RamNamespace>,
) -> Result<Demo, DemoError> {
    let (h, c) = VirtualWire::pair(o.mtu + 14, 512);
    let now = to_smol(nvme_of::Instant::ZERO);
    let seed = o.seed.wrapping_add(2 * u64::from(job));
    let pcap = o.pcap.as_ref().filter(|_| job == 0);
    let (hdev, host_nic) = device(o, h, seed, pcap)?;
    let (cdev, ctrl_nic) = device(o, c, seed.wrapping_add(1), None)?;
    let hstack = Stack::new(hdev, StackConfig::new(Ipv4Cidr::new(HOST_IP, 24)), now);
    let cstack = Stack::new(cdev, StackConfig::new(Ipv4Cidr::new(CONTROLLER_IP, 24)), now);
    let host_cfg = HostConfig {
        subnqn: NQN.into(),
        digests: o.digests,
        io_queues: o.queues,
        queue_depth: o.qd,
        ddp_threshold: o.ddp_threshold,
        kato: o.kato,
        command_timeout: o.io_timeout,
        ..HostConfig::default()
    };
    let remote = SocketAddrV4::new(CONTROLLER_IP, PORT);
    let hdev: Arc<dyn DdpDevice> = Arc::new(host_nic.clone());
    let cdev: Arc<dyn DdpDevice> = Arc::new(ctrl_nic.clone());
    let oneshot = o.offload.contains(Caps::ONESHOT);
    let tls = match o.tls {
        true => Some(TlsConfig::embedded().map_err(|e| DemoError::Setup(e.to_string()))?),
        false => None,
    };
    let mut listener = o.transport.listener(o.mtu);
    if let Some(t) = &tls {
        listener = listener.with_tls(t.port()).map_err(|e| DemoError::Setup(e.to_string()))?;
    }
    let host = o.transport.host_with(host_cfg, oneshot, o.mtu, tls.as_ref());
    let host = HostSide::new(hstack, host, remote, Some(hdev));
    let ctrl =
        ControllerSide::new(cstack, target.clone(), PORT, Some(cdev))?.with_listener(listener);
    Ok(Demo { host, ctrl, host_nic, ctrl_nic, namespace })
}

/// A write pass over the namespace, then a verified read pass.
pub fn passes(o: &DemoOptions) -> Vec<WorkloadSpec> {
    let spec = |rw| WorkloadSpec {
        rw,
        bs: o.bs,
        limit: Limit::Bytes(o.size),
        qd: usize::from(o.qd),
        rwmixread: 50,
        verify: true,
        seed: o.seed,
        nsid: None,
        part: (0, 1),
    };
    vec![spec(Rw::Write), spec(Rw::Read)]
}

/// Run the demo, each of its jobs on threads of its own; `watch`, if
/// given, sees the first job's progress. Setting `stop` (Ctrl-C) ends it
/// early with the results so far.
pub fn run(
    o: &DemoOptions,
    mut watch: Option<Watch>,
    stop: &AtomicBool,
) -> Result<DemoReport, DemoError> {
    let (target, ram) = target(o)?;
    let runs = match o.jobs {
        0 | 1 => vec![run_job(o, build_job(o, &target, 0, ram.clone())?, watch, stop)?],
        jobs => std::thread::scope(|scope| {
            let mut threads = Vec::new();
            for job in 0..jobs {
                let demo = build_job(o, &target, job, ram.clone())?;
                let watch = watch.take();
                let thread = std::thread::Builder::new()
                    .name(format!("demo job {job}"))
                    .spawn_scoped(scope, move || run_job(o, demo, watch, stop))
                    .map_err(|e| DemoError::Setup(e.to_string()))?;
                threads.push(thread);
            }
            let joined = threads.into_iter().map(|t| t.join().map_err(|_| DemoError::Panicked));
            joined.map(|run| run?).collect::<Result<Vec<_>, _>>()
        })?,
    };
    let mut report = report(o, runs);
    let lending = ram.stats();
    report.namespace_lent_bytes = lending.lent_bytes;
    report.namespace_copied_on_write_bytes = lending.copied_on_write_bytes;
    if o.baseline && o.offload != Caps::NONE && !report.interrupted && report.error.is_none() {
        report.savings = match savings(o, stop) {
            Err(BenchError::Interrupted) => {
                report.interrupted = true;
                None
            }
            r => Some(r?),
        };
    }
    Ok(report)
}

/// What one job of the demo left: its time, the counters of its wire,
/// NICs and queues, and its app's results.
struct JobRun {
    seconds: f64,
    h2c: WireStats,
    c2h: WireStats,
    impaired_h2c: ImpairStats,
    impaired_c2h: ImpairStats,
    host: Counters,
    ctrl: Counters,
    app: IoApp,
}

/// A side's offloads and counters: its NIC's and its queues'.
struct Counters {
    caps: Caps,
    nic: Stats,
    ulp: UlpStats,
    tx: TxStats,
}

impl Counters {
    fn add(&mut self, o: &Counters) {
        self.nic += &o.nic;
        self.ulp.add(&o.ulp);
        self.tx.add(&o.tx);
    }
}

/// Run one job: its host on this thread and its controller on another,
/// in real time, or both on this one in simulated time.
fn run_job(
    o: &DemoOptions,
    demo: Demo,
    watch: Option<Watch>,
    stop: &AtomicBool,
) -> Result<JobRun, DemoError> {
    let Demo { mut host, mut ctrl, host_nic, ctrl_nic, .. } = demo;
    let mut io = IoApp::new(passes(o));
    if let Some(w) = watch {
        io = io.with_watch(w);
    }
    let app = &mut Stoppable::new(&mut io, stop);
    let limit = Duration::from_secs(3600);
    let seconds = if o.simulated {
        run_simulated(&mut host, &mut ctrl, app, limit)?.as_secs_f64()
    } else {
        let clock = Clock::new();
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::Builder::new()
            .name("nvme-ctrl".into())
            .spawn(move || {
                serve(&mut ctrl, &clock, &flag, Duration::ZERO);
                ctrl
            })
            .map_err(|e| DemoError::Setup(e.to_string()))?;
        let result = run_host(&mut host, app, &clock, limit, Duration::ZERO);
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        ctrl = thread.join().map_err(|_| DemoError::Panicked)?;
        result?;
        clock.now().as_micros() as f64 / 1e6
    };
    let hw = host.stack.device().get_ref().get_ref();
    let cw = ctrl.stack.device().get_ref().get_ref();
    let (host_ulp, host_tx) = host.host.stats();
    let (ctrl_ulp, ctrl_tx) = ctrl.stats();
    Ok(JobRun {
        seconds,
        h2c: hw.get_ref().tx_stats(),
        c2h: hw.get_ref().rx_stats(),
        impaired_h2c: cw.stats().0,
        impaired_c2h: hw.stats().0,
        host: Counters {
            caps: host_nic.caps().1,
            nic: host_nic.stats(),
            ulp: host_ulp,
            tx: host_tx,
        },
        ctrl: Counters {
            caps: ctrl_nic.caps().1,
            nic: ctrl_nic.stats(),
            ulp: ctrl_ulp,
            tx: ctrl_tx,
        },
        app: io,
    })
}

/// The report of the jobs that ran: with one, its own; with several, what
/// they did together (their counters added up, each phase as fio's group
/// reporting gives it) and each one's phases.
fn report(o: &DemoOptions, runs: Vec<JobRun>) -> DemoReport {
    let mut runs = runs.into_iter();
    let mut all = runs.next().expect("a job ran");
    let first_phases = phases(&all.app);
    let mut per_job = vec![first_phases.clone()];
    let mut apps = Vec::new();
    for (job, r) in (1..).zip(runs) {
        all.seconds = all.seconds.max(r.seconds);
        for (a, b) in [(&mut all.h2c, r.h2c), (&mut all.c2h, r.c2h)] {
            a.frames += b.frames;
            a.bytes += b.bytes;
        }
        for (a, b) in
            [(&mut all.impaired_h2c, r.impaired_h2c), (&mut all.impaired_c2h, r.impaired_c2h)]
        {
            a.frames += b.frames;
            a.dropped += b.dropped;
            a.corrupted += b.corrupted;
            a.duplicated += b.duplicated;
            a.reordered += b.reordered;
        }
        all.host.add(&r.host);
        all.ctrl.add(&r.ctrl);
        per_job.push(phases(&r.app));
        apps.push((job, r.app));
    }
    let first = &all.app;
    let mut recovery = first.recovery;
    let (mut interrupted, mut abandoned) = (first.interrupted, first.abandoned);
    let mut error = first.error();
    for (job, app) in &apps {
        let r = app.recovery;
        recovery.lost += r.lost;
        recovery.attempts += r.attempts;
        recovery.reconnects += r.reconnects;
        recovery.retried += r.retried;
        recovery.aborts += r.aborts;
        interrupted |= app.interrupted;
        abandoned += app.abandoned;
        error = error.or_else(|| app.error().map(|e| format!("job {job}: {e}")));
    }
    let every: Vec<&IoApp> = std::iter::once(first).chain(apps.iter().map(|(_, a)| a)).collect();
    let phases = match every.len() {
        1 => first_phases,
        _ => {
            let n = every.iter().map(|a| a.results.len()).max().unwrap_or(0);
            (0..n)
                .filter_map(|i| {
                    let stats: Vec<_> = every
                        .iter()
                        .filter_map(|a| Some((&a.results.get(i)?.1, a.latencies.get(i)?)))
                        .collect();
                    let spec = every.iter().find_map(|a| a.results.get(i).map(|(s, _)| s))?;
                    let all = IoStats::of_jobs(&stats);
                    Some(PhaseReport::new(spec, all, first.io_queues, first.queue_depth))
                })
                .collect()
        }
    };
    let jobs = per_job.len() as u16;
    DemoReport {
        transport: o.transport,
        tls: o.tls,
        size: o.size,
        mtu: o.mtu,
        hdgst: o.digests.header,
        ddgst: o.digests.data,
        simulated: o.simulated,
        seconds: all.seconds,
        phases,
        wire: WireReport {
            h2c_frames: all.h2c.frames,
            h2c_bytes: all.h2c.bytes,
            c2h_frames: all.c2h.frames,
            c2h_bytes: all.c2h.bytes,
        },
        impaired_h2c: all.impaired_h2c.into(),
        impaired_c2h: all.impaired_c2h.into(),
        offload: OffloadReport::new(all.host.caps, all.host.nic, all.host.ulp, all.host.tx),
        controller_offload: OffloadReport::controller(
            all.ctrl.caps,
            all.ctrl.nic,
            all.ctrl.ulp,
            all.ctrl.tx,
        ),
        savings: None,
        recovery,
        interrupted,
        abandoned,
        io_queues: first.io_queues,
        queue_depth: first.queue_depth,
        jobs,
        per_job: if jobs > 1 { per_job } else { Vec::new() },
        namespace_lent_bytes: 0,
        namespace_copied_on_write_bytes: 0,
        error,
    }
}

/// The phases an app ran, as reported.
fn phases(app: &IoApp) -> Vec<PhaseReport> {
    let (queues, depth) = (app.io_queues, app.queue_depth);
    app.results
        .iter()
        .map(|(spec, stats)| PhaseReport::new(spec, stats.clone(), queues, depth))
        .collect()
}

/// What the offloads saved: the demo's I/O (half reads, half writes, at
/// its block size, queue depth, MTU and data digest) measured as the
/// bench measures, with the demo's offloads and with none, one after the
/// other on fresh stacks over a clean wire.
#[derive(Debug, Clone, Serialize)]
pub struct Savings {
    pub offloaded: Point,
    pub software: Point,
}

impl Savings {
    /// Runs of each, and how long each measures.
    const REPS: usize = 3;
    const TIME: Duration = Duration::from_millis(300);

    /// One line: host CPU (or instructions), copies and CRC per I/O, with
    /// and without, as measured on a clean wire; `impaired` says the run
    /// it follows was not, so its own counters differ.
    pub fn line(&self, impaired: bool) -> String {
        let (a, b) = (&self.offloaded, &self.software);
        let counted = b.meter == Meter::Instructions;
        let cost = |p: &Point| match counted {
            true => p.median.counts.host.instructions,
            false => p.median.host_cpu_ns_per_io / 1e3,
        };
        let spread = |p: &Point| match counted {
            true => p.host_instructions_spread.unwrap_or(0.0),
            false => p.host_cpu_spread,
        };
        let change = match cost(b) {
            0.0 => String::new(),
            base => format!(" ({:+.0}%)", (cost(a) / base - 1.0) * 100.0),
        };
        let (what, how) = match counted {
            true => ("host instructions", "counted by Valgrind"),
            false => ("host CPU", "measured alongside"),
        };
        let show = |p: &Point| match counted {
            true => format!("{:.1}k", cost(p) / 1e3),
            false => format!("{:.1} us", cost(p)),
        };
        let bytes = |n: f64| human_bytes(n.round());
        let lead = match impaired {
            true => {
                "on a clean wire (not this run's impaired one, whose counters are above), offloads save"
            }
            false => "offloads saved",
        };
        let pct = |p: &Point| match counted {
            true => format!("{:.2}%", spread(p) * 100.0),
            false => format!("{:.0}%", spread(p) * 100.0),
        };
        format!(
            "{lead}: {what} {} -> {} per I/O{change}, copies {} -> {}, CRC {} -> {} per I/O (against no offload, {how} on a clean wire: {} {}, {} runs each, spread {} without offloads, {} with)",
            show(b),
            show(a),
            bytes(b.median.host_copy_bytes_per_io),
            bytes(a.median.host_copy_bytes_per_io),
            bytes(b.median.host_crc_bytes_per_io),
            bytes(a.median.host_crc_bytes_per_io),
            b.setting.rw.name(),
            crate::size::format_size(u64::from(b.setting.bs)),
            b.reps,
            pct(b),
            pct(a),
        ) + match spread(b).max(spread(a)) > SPREAD_LIMIT {
            true => "; too noisy for these figures to be relied on",
            false => "",
        }
    }
}

/// Measure [`Savings`] for the demo's settings; setting `stop` ends it
/// with [`BenchError::Interrupted`].
pub fn savings(o: &DemoOptions, stop: &AtomicBool) -> Result<Savings, BenchError> {
    // Counts repeat: two runs show that they do.
    let reps = match o.meter {
        Meter::Cpu => Savings::REPS,
        Meter::Instructions => 2,
    };
    let bench = BenchOptions {
        reps,
        warmup: Duration::from_millis(100),
        duration: Savings::TIME,
        meter: o.meter,
        ..BenchOptions::default()
    };
    let jobs = match o.meter {
        Meter::Cpu => o.jobs.max(1),
        Meter::Instructions => 1,
    };
    let setting = |offload| Setting {
        transport: o.transport,
        bs: o.bs,
        rw: Rw::RandRw,
        qd: o.qd,
        jobs,
        mtu: o.mtu,
        ddgst: o.digests.data,
        tls: o.tls,
        offload,
        ..Setting::default()
    };
    let point = |offload| run_point(&setting(offload), &bench, RawTcp::default(), stop, || {});
    Ok(Savings { offloaded: point(o.offload)?, software: point(Caps::NONE)? })
}
