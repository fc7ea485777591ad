//! One bench run in this process: a point's jobs on fresh stacks and
//! media, each a warm-up and then a measured window, with the host, its
//! NIC and the controller in lockstep on one thread or on threads of
//! their own; and raw TCP on the same medium. It measures and returns
//! samples; it must never judge them (that is
//! [`goals`](crate::bench::goals)'s, against the user's file).

use crate::app::{HostApp, Stoppable};
use crate::bench::clocks::{Clocks, Tally, clock_read_cost, cpu_ns};
use crate::bench::error::BenchError;
use crate::bench::job::{BenchApp, Gate, Phase, Sample};
use crate::bench::options::{BenchOptions, Impair, Setting, rep_seed};
use crate::bench::point::{Measures, RawRun};
use crate::driver::clock::{Clock, TurnClock};
use crate::driver::rawtcp::{self, RawTcpError, Window};
use crate::driver::smoltcp::{
    ControllerSide, HostSide, IMPAIRED_IO_TIMEOUT, IMPAIRED_KATO, Idle, RunError, chain, from_smol,
    serve, to_smol,
};
use crate::driver::transport::TlsConfig;
use crate::driver::valgrind::{Collector, Part, collect};
use crate::workload::{Limit, Rw, WorkloadSpec, fill_pattern};
use hdrhistogram::Histogram;
use nic_backend::NicEngine;
use nvme_of::Digests;
use nvme_of::controller::{Target, TargetConfig};
use nvme_of::host::HostConfig;
use nvme_of::namespace::Namespace;
use nvme_storage::RamNamespace;
use smoltcp::wire::Ipv4Cidr;
use smoltcp_glue::{Link, LinkName, Medium, Profile, Stack, StackConfig, VirtualWire};
use std::cell::Cell;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use ulp_ddp::{Caps, DdpDevice};

const HOST_IP: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 3);
const CONTROLLER_IP: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 2);
const NQN: &str = "nqn.2026-11.io.nvme-ddp:bench";
const PORT: u16 = 4420;
/// Bytes of each TCP send and receive ring of every stack a run measures,
/// raw TCP's too: a ring bounds what a stack sends in one burst, and so
/// how much of a burst is still in cache when its receiver takes it.
const TCP_RING: usize = 8 << 20;

/// Bytes raw TCP moves in a window counted by Valgrind.
pub const RAW_WINDOW: u64 = 16 << 20;

/// The seed of the pattern the namespace holds for reads to be checked
/// against.
const PATTERN_SEED: u64 = 1;

/// Fill `ns` with the workload's pattern for `seed`, as a write pass with
/// verification on would have left it.
fn fill_namespace(ns: &RamNamespace, seed: u64) -> std::io::Result<()> {
    let mut chunk = vec![0u8; 1 << 20];
    for at in (0..ns.size()).step_by(chunk.len()) {
        let n = chunk.len().min((ns.size() - at) as usize);
        fill_pattern(&mut chunk[..n], seed, at);
        ns.write_at(at, &chunk[..n])?;
    }
    Ok(())
}

/// A seed for this run's stacks: a fresh one each run.
fn fresh_seed() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(1, |d| d.as_nanos() as u64)
}

/// One run of `p`: a job over each pair of media (host's, controller's),
/// all at once, against one target. Job j's impairments are seeded with
/// `seed + 2j` (the host's end) and `seed + 2j + 1` (the controller's), as
/// the demo seeds them.
fn run_once<M: Medium + Send + 'static>(
    pairs: Vec<(M, M)>,
    p: &Setting,
    o: &BenchOptions,
    seed: u64,
    stop: &AtomicBool,
) -> Result<Measures, BenchError> {
    let jobs = pairs.len() as u64;
    let per_job = u64::from(p.bs) * u64::from(p.qd) * u64::from(o.queues) * 4;
    // A window of I/Os reads or writes from the namespace's start, as its
    // warm-up does: no more than they need (Valgrind fills it slowly).
    let size = match o.window_ios(p) {
        Some((warmup, measured)) => {
            (warmup.max(measured) * u64::from(p.bs)).max(per_job * jobs).next_multiple_of(1 << 20)
        }
        None => (64u64 << 20).max(per_job * jobs),
    };
    let ram = RamNamespace::new(size, 512)?;
    if matches!(p.rw, Rw::Read | Rw::RandRead) {
        fill_namespace(&ram, PATTERN_SEED)?;
    }
    let ns: Arc<dyn Namespace> = Arc::new(ram);
    let cfg = TargetConfig { subnqn: NQN.into(), ..TargetConfig::default() };
    let target = Target::new(cfg, vec![ns])?;
    let pairs_len = pairs.len();
    let gate = Gate::new(pairs_len);
    let job = |j: u64, (h, c): (M, M)| {
        let job = Job { index: j as usize, of: pairs_len, seed: seed.wrapping_add(2 * j) };
        let run = run_job(h, c, p, o, job, target.clone(), &gate, stop);
        if run.is_err() {
            gate.breaks(j as usize);
        }
        run
    };
    let runs: Vec<Result<Sample, BenchError>> = match pairs.len() {
        1 => pairs.into_iter().map(|pair| job(0, pair)).collect(),
        _ => std::thread::scope(|scope| {
            let mut threads = Vec::new();
            for (j, pair) in (0..).zip(pairs) {
                let job = &job;
                let name = format!("bench job {j}");
                let spawned = std::thread::Builder::new()
                    .name(name)
                    .spawn_scoped(scope, move || job(j, pair));
                match spawned {
                    Ok(t) => threads.push(t),
                    Err(e) => {
                        gate.breaks(j as usize);
                        return Err(BenchError::Io(e));
                    }
                }
            }
            let joined = threads.into_iter().map(|t| t.join().unwrap_or(Err(BenchError::OtherJob)));
            Ok(joined.collect())
        })?,
    };
    // The error of the job that failed first, not the others' giving up.
    let first = gate.first_broken();
    let mut samples = Vec::new();
    let mut latencies = Histogram::new(3).expect("3 significant figures");
    for (j, run) in runs.into_iter().enumerate() {
        match run {
            Ok(s) => {
                let _ = latencies.add(&s.latencies);
                samples.push((s.measures, s.ios));
            }
            Err(e) if first.is_none_or(|f| f == j) => return Err(e),
            Err(_) => {}
        }
    }
    Ok(Measures::of_jobs(&samples, &latencies))
}

/// Which job of a run, and the seed of its impairments.
#[derive(Clone, Copy)]
struct Job {
    index: usize,
    of: usize,
    seed: u64,
}

/// One job of a run: a host, its NIC and a controller stack of its own
/// over `host_m` and `ctrl_m`, serving `target`, which other jobs may
/// share; measured when every job has warmed up (`gate`).
#[allow(clippy::too_many_arguments)]
fn run_job<M: Medium + Send + 'static>(
    host_m: M,
    ctrl_m: M,
    p: &Setting,
    o: &BenchOptions,
    Job { index, of, seed }: Job,
    target: Arc<Target>,
    gate: &Gate,
    stop: &AtomicBool,
) -> Result<Sample, BenchError> {
    let caps = p.offload;
    let impair = p.impair.profile();
    let (hdev, hnic) = chain(host_m, impair, seed, None, caps)?;
    let (cdev, cnic) = chain(ctrl_m, impair, seed.wrapping_add(1), None, caps)?;
    let clock = Clock::new();
    // Counted by Valgrind, time starts at zero and passes by the turn
    // (see `lockstep`), however long Valgrind takes to set the run up.
    let now = match o.collect {
        Some(_) => to_smol(nvme_of::Instant::ZERO),
        None => to_smol(clock.now()),
    };
    // Jobs on the queues of one TAP share its address: their ports differ.
    // Counted by Valgrind, a run repeats itself: no fresh seed.
    let stack_seed = match o.collect {
        Some(_) => seed,
        None => fresh_seed().wrapping_add(seed),
    };
    let hcfg = StackConfig {
        seed: stack_seed,
        rx_buffer: TCP_RING,
        tx_buffer: TCP_RING,
        // The jobs' hosts on the queues of one TAP connect from ports it
        // steers back to their own queue (on the wire it changes nothing).
        queue: (of > 1).then_some((index, of)),
        ..StackConfig::new(Ipv4Cidr::new(HOST_IP, 24))
    };
    let ccfg = StackConfig {
        seed: stack_seed ^ 0x5a5a,
        rx_buffer: TCP_RING,
        tx_buffer: TCP_RING,
        ..StackConfig::new(Ipv4Cidr::new(CONTROLLER_IP, 24))
    };
    let host_cfg = HostConfig {
        subnqn: NQN.into(),
        digests: Digests { header: false, data: p.ddgst },
        io_queues: o.queues,
        queue_depth: p.qd,
        ..HostConfig::default()
    };
    // smoltcp recovers from loss slowly: the demo's timeouts for an
    // impaired wire.
    let host_cfg = match p.impair.is_clean() {
        true => host_cfg,
        false => {
            HostConfig { kato: IMPAIRED_KATO, command_timeout: IMPAIRED_IO_TIMEOUT, ..host_cfg }
        }
    };
    let hddp: Arc<dyn DdpDevice> = Arc::new(hnic.clone());
    let cddp: Arc<dyn DdpDevice> = Arc::new(cnic);
    let remote = SocketAddrV4::new(CONTROLLER_IP, PORT);
    let cstack = Stack::new(cdev, ccfg, now);
    // Over TLS, both ends hold a fresh PSK.
    let tls = match p.tls {
        true => Some(TlsConfig::embedded().map_err(|e| std::io::Error::other(e.to_string()))?),
        false => None,
    };
    let mut listener = p.transport.listener(p.mtu);
    if let Some(t) = &tls {
        listener = listener.with_tls(t.port()).map_err(|e| std::io::Error::other(e.to_string()))?;
    }
    let mut ctrl = ControllerSide::new(cstack, target, PORT, Some(cddp))?.with_listener(listener);
    let oneshot = caps.contains(Caps::ONESHOT);
    let (warmup, limit) = match o.window_ios(p) {
        Some((warmup, measured)) => {
            let bytes = |ios| Limit::Bytes(ios * u64::from(p.bs));
            (bytes(warmup), bytes(measured))
        }
        None => (Limit::Time(o.warmup), Limit::Time(o.duration)),
    };
    let spec = WorkloadSpec {
        rw: p.rw,
        bs: p.bs,
        limit,
        qd: usize::from(p.qd),
        rwmixread: 50,
        verify: false,
        seed: PATTERN_SEED,
        nsid: None,
        part: (0, 1),
    };
    let app = |clocks| BenchApp {
        nic: hnic,
        clocks,
        gate,
        spec,
        warmup,
        phase: Phase::Over,
        sample: None,
        verified: 0,
        error: None,
        done: false,
    };
    // Valgrind runs some 500 times slower.
    let limit = Duration::from_secs(if o.collect.is_some() { 1200 } else { 120 });
    // The host's stack runs on the NIC's descriptor ring.
    let (error, sample) = if o.threaded() {
        let (ring, mut nic) = NicEngine::new(hdev);
        let mut host = HostSide::new(
            Stack::new(ring, hcfg, now),
            p.transport.host_with(host_cfg, oneshot, p.mtu, tls.as_ref()),
            remote,
            Some(hddp),
        );
        let served = Arc::new(AtomicBool::new(false));
        let flag = served.clone();
        let busy_poll = o.busy_poll;
        let controller = std::thread::Builder::new()
            .name("bench-ctrl".into())
            .spawn(move || serve(&mut ctrl, &clock, &flag, busy_poll))?;
        let tally = Rc::new(Cell::new(Tally::default()));
        let clocks = Clocks::Threads { tally: tally.clone(), controller };
        let mut app = app(&clocks);
        let mut stoppable = Stoppable::new(&mut app, stop);
        let result = host_with_nic(
            (&mut host, &mut nic),
            &mut stoppable,
            &clock,
            &tally,
            limit,
            o.busy_poll,
        );
        let stopped = stoppable.stopped;
        let (error, sample) = (app.error, app.sample);
        served.store(true, Ordering::Relaxed);
        if let Clocks::Threads { controller, .. } = clocks {
            let _ = controller.join();
        }
        result?;
        if stopped {
            return Err(BenchError::Interrupted);
        }
        (error, sample)
    } else {
        let (ring, mut nic) = NicEngine::new(hdev);
        let mut host = HostSide::new(
            Stack::new(ring, hcfg, now),
            p.transport.host_with(host_cfg, oneshot, p.mtu, tls.as_ref()),
            remote,
            Some(hddp),
        );
        let tally = Rc::new(Cell::new(Tally::default()));
        let collector = o.collect.map(|part| Rc::new(Collector::new(part)));
        let clocks = Clocks::Lockstep(tally.clone(), collector.clone());
        let mut app = app(&clocks);
        let mut stoppable = Stoppable::new(&mut app, stop);
        let parts = Lockstep { host: &mut host, nic: &mut nic, ctrl: &mut ctrl };
        lockstep(parts, &mut stoppable, &clock, &tally, collector.as_deref(), limit)?;
        if stoppable.stopped {
            return Err(BenchError::Interrupted);
        }
        (app.error, app.sample)
    };
    if let Some(e) = error {
        return Err(BenchError::Host(e));
    }
    sample.ok_or(BenchError::NoMeasurement)
}

/// Run the host and its NIC in turn on this thread, in real time, until
/// the app is done, sleeping on the NIC's port when neither has anything
/// to do; each one's CPU time added into `tally`, as [`lockstep`] adds it
/// up, so that the NIC's work is counted apart though it runs on the
/// host's thread. The controller runs with its NIC on a thread of its
/// own: a side a thread, no hand-off between threads inside one side.
fn host_with_nic<H: Medium, N: Medium>(
    (host, nic): (&mut HostSide<H>, &mut NicEngine<N>),
    app: &mut dyn HostApp,
    clock: &Clock,
    tally: &Cell<Tally>,
    limit: Duration,
    busy_poll: Duration,
) -> Result<(), BenchError> {
    let read = clock_read_cost();
    let cpu = || cpu_ns(libc::CLOCK_THREAD_CPUTIME_ID) as i64;
    let start = clock.now();
    let mut idle = Idle::new(busy_poll);
    let mut t0 = cpu();
    loop {
        let now = to_smol(clock.now());
        tally.set(Tally { host_since: t0, ..tally.get() });
        let a = host.step(app, now)?;
        let t1 = cpu();
        let b = nic.step(now);
        let t2 = cpu();
        let Tally { sums: mut s, host_since } = tally.get();
        s.host += t1 - t0 - read;
        s.nic += t2 - t1 - read;
        s.harness += 2 * read;
        t0 = t2;
        if app.is_done() && host.flushed() {
            tally.set(Tally { sums: s, host_since });
            return Ok(());
        }
        if clock.now().saturating_since(start) > limit {
            return Err(BenchError::Run(RunError::Timeout(limit)));
        }
        if idle.may_sleep(a || b) {
            // The app looks at its stop flag each turn: not past the tick.
            let cap = now + smoltcp::time::Duration::from_millis(50);
            let at = [host.poll_at(now), nic.poll_at(), Some(cap)].into_iter().flatten().min();
            let at = at.unwrap_or(cap);
            if at > now {
                nic.wait(Some(at - now));
            }
            // Sleeping is the NIC's: it waits on its port and its ring.
            t0 = cpu();
            s.nic += t0 - t2;
        }
        tally.set(Tally { sums: s, host_since });
    }
}

/// The parts a lockstep run steps in turn.
struct Lockstep<'a, H: Medium, N: Medium, C: Medium> {
    host: &'a mut HostSide<H>,
    nic: &'a mut NicEngine<N>,
    ctrl: &'a mut ControllerSide<C>,
}

/// Run host, the host's NIC and the controller in turn on this thread, in
/// real time, until the app is done, adding each one's CPU time into
/// `tally`. No scheduler decides who runs when, so a point's figures repeat
/// from run to run. Each part's interval between two reads of the thread's
/// CPU clock holds one read's cost, which is taken out and counted as the
/// harness's; so are the sleeps while every part waits for a timer. Under
/// Valgrind, `collector` is told which part each step is.
fn lockstep<H: Medium, N: Medium, C: Medium>(
    Lockstep { host, nic, ctrl }: Lockstep<'_, H, N, C>,
    app: &mut dyn HostApp,
    clock: &Clock,
    tally: &Cell<Tally>,
    collector: Option<&Collector>,
    limit: Duration,
) -> Result<(), BenchError> {
    let read = clock_read_cost();
    let cpu = || cpu_ns(libc::CLOCK_THREAD_CPUTIME_ID) as i64;
    let enter = |part| collect(collector, part);
    let start = clock.now();
    // Counted by Valgrind, the parts see time pass by the turn, from zero.
    let mut turns = collector.map(|_| TurnClock::starting(nvme_of::Instant::ZERO));
    let mut t0 = cpu();
    loop {
        let now = to_smol(turns.map_or_else(|| clock.now(), |t| t.now()));
        tally.set(Tally { host_since: t0, ..tally.get() });
        enter(Some(Part::Host));
        let a = host.step(app, now)?;
        enter(None);
        let t1 = cpu();
        enter(Some(Part::Nic));
        let b = nic.step(now);
        enter(None);
        let t2 = cpu();
        enter(Some(Part::Controller));
        let c = ctrl.step(now);
        enter(None);
        let t3 = cpu();
        let Tally { sums: mut s, host_since } = tally.get();
        s.host += t1 - t0 - read;
        s.nic += t2 - t1 - read;
        s.controller += t3 - t2 - read;
        s.harness += 3 * read;
        t0 = t3;
        if app.is_done() && host.flushed() {
            tally.set(Tally { sums: s, host_since });
            return Ok(());
        }
        if clock.now().saturating_since(start) > limit {
            return Err(BenchError::GaveUp(limit));
        }
        if !(a || b || c) {
            // Everything waits for a timer (a delayed ACK, a keep-alive).
            let at = [host.poll_at(now), nic.poll_at(), ctrl.poll_at(now)];
            let at = at.into_iter().flatten().min().unwrap_or(now);
            match &mut turns {
                Some(t) => t.wait_until(from_smol(at)),
                None if at > now => {
                    let d = (at - now).min(smoltcp::time::Duration::from_millis(10));
                    std::thread::sleep(Duration::from_micros(d.total_micros()));
                }
                None => {}
            }
            t0 = cpu();
            s.harness += t0 - t3;
        }
        if let Some(t) = &mut turns {
            t.turn();
        }
        tally.set(Tally { sums: s, host_since });
    }
}

/// Fresh media for one run: a pair (host's, controller's) for each of
/// `jobs` jobs, the in-process wire's or the queues of the links'.
fn media(o: &BenchOptions, mtu: usize, jobs: u16) -> Result<Media, BenchError> {
    let jobs = usize::from(jobs.max(1));
    match &o.link {
        None => Ok(Media::Wire((0..jobs).map(|_| VirtualWire::pair(mtu + 14, 512)).collect())),
        Some((h, c)) => {
            let open = |l: &LinkName| {
                match jobs {
                    1 => l.open(None).map(|l| vec![l]),
                    n => l.open_queues(None, n),
                }
                .map_err(|source| BenchError::Link { name: l.to_string(), source })
            };
            Ok(Media::Link(open(h)?.into_iter().zip(open(c)?).collect()))
        }
    }
}

enum Media {
    Wire(Vec<(smoltcp_glue::WireEnd, smoltcp_glue::WireEnd)>),
    Link(Vec<(Link, Link)>),
}

/// Repetition `rep` of point `p` in this process, on fresh stacks, its
/// impairments seeded with [`rep_seed`]`(o.seed, rep)`.
pub fn run_rep(
    p: &Setting,
    o: &BenchOptions,
    rep: usize,
    stop: &AtomicBool,
) -> Result<Measures, BenchError> {
    if stop.load(Ordering::Relaxed) {
        return Err(BenchError::Interrupted);
    }
    let seed = rep_seed(o.seed, rep);
    match media(o, p.mtu, p.jobs)? {
        Media::Wire(pairs) => run_once(pairs, p, o, seed, stop),
        Media::Link(pairs) => run_once(pairs, p, o, seed, stop),
    }
}

/// Repetition `rep` of raw TCP in this process, on the bench's medium at
/// `mtu` under `impair` (seeded per repetition as the NVMe runs are),
/// through the same NIC (checksum offload, no ULP offload), between
/// stacks with the same rings: bytes a second.
pub fn raw_tcp(
    o: &BenchOptions,
    mtu: usize,
    impair: Impair,
    rep: usize,
    stop: &AtomicBool,
) -> Result<RawRun, BenchError> {
    let (bytes_per_sec, _) = raw_tcp_window(o, mtu, impair, rep, stop)?;
    // Over interfaces, the in-process wire's raw TCP too, side by side: a
    // ceiling measured minutes apart on a machine whose speed drifts says
    // little about what the interfaces cost.
    let wire_bytes_per_sec = match o.link {
        Some(_) => {
            raw_tcp_window(&BenchOptions { link: None, ..o.clone() }, mtu, impair, rep, stop)?.0
        }
        None => 0.0,
    };
    Ok(RawRun { bytes_per_sec, wire_bytes_per_sec, ..RawRun::default() })
}

/// One raw TCP run in this process: bytes a second and bytes measured.
/// Under Valgrind (`o.collect`) it moves [`RAW_WINDOW`] bytes, its ends
/// counted by their steps.
pub(crate) fn raw_tcp_window(
    o: &BenchOptions,
    mtu: usize,
    impair: Impair,
    rep: usize,
    stop: &AtomicBool,
) -> Result<(f64, u64), BenchError> {
    // As in the NVMe runs: the receiver (the host) has its NIC behind a
    // ring, on a thread or in lockstep.
    fn through_nic<M: Medium + Send + 'static>(
        a: M,
        b: M,
        o: &BenchOptions,
        (impair, seed): (Profile, u64),
        stop: &AtomicBool,
    ) -> Result<(f64, u64), BenchError> {
        let (a, _) = chain(a, impair, seed.wrapping_add(1), None, Caps::NONE)?;
        let (b, _) = chain(b, impair, seed, None, Caps::NONE)?;
        let d = o.duration.max(Duration::from_millis(100));
        if o.threaded() {
            Ok((rawtcp::throughput(a, NicEngine::new(b), TCP_RING, d, stop)?, 0))
        } else {
            let (ring, nic) = NicEngine::new(b);
            let collector = o.collect.map(Collector::new);
            let window = match collector {
                Some(_) => Window::Bytes(RAW_WINDOW),
                None => Window::Time(d),
            };
            let c = collector.as_ref();
            Ok(rawtcp::lockstep(a, ring, nic, TCP_RING, window, c, stop)?)
        }
    }
    if stop.load(Ordering::Relaxed) {
        return Err(BenchError::Interrupted);
    }
    let how = (impair.profile(), rep_seed(o.seed, rep));
    match media(o, mtu, 1)? {
        Media::Wire(mut v) => {
            let (a, b) = v.remove(0);
            through_nic(a, b, o, how, stop)
        }
        Media::Link(mut v) => {
            let (a, b) = v.remove(0);
            through_nic(a, b, o, how, stop)
        }
    }
    .map_err(|e| match e {
        BenchError::RawTcp(RawTcpError::Interrupted) => BenchError::Interrupted,
        e => e,
    })
}
