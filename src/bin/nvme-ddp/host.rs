//! `nvme-ddp host`: connect to a controller and identify, discover or run I/O.
//!
//! It parses and prints; connecting is `session`'s, and this file must
//! never import `admin`'s helpers the other way round.

use anyhow::{Context, Result, bail};
use clap::{Args, Subcommand};
use nvme_ddp::app::IoApp;
use nvme_ddp::driver::cpus;
use nvme_ddp::report::{PhaseReport, RecoveryReport, granted_notes, human_bytes, human_count};
use nvme_ddp::size::format_size;
use nvme_ddp::workload::{IoStats, Limit, Rw, WorkloadSpec};
use std::time::Duration;

use crate::admin::{self, GetLogArgs, IdNsArgs, resolve_nqn};
use crate::args::{
    List, parse_bytes, parse_cpus, parse_jobs, parse_nsid, parse_percent, parse_rw, parse_seconds,
    parse_whole,
};
use crate::progress::{cpu_times, so_far, watch};
use crate::session::{ConnectArgs, host_config, run_app, run_sets};

/// Options of `host`: how to connect, then the verb.
#[derive(Args, Debug)]
pub(crate) struct HostArgs {
    #[command(flatten)]
    pub(crate) conn: ConnectArgs,
    #[command(subcommand)]
    action: HostAction,
}

#[derive(Subcommand, Debug)]
enum HostAction {
    /// Print the controller's identity and namespaces in brief.
    Identify,
    /// Print the discovery log (as `get-log discovery`).
    Discover,
    /// List the namespaces of the subsystem, or of every subsystem
    /// discovery lists (as `nvme list`).
    List,
    /// Print the Identify Controller data (as `nvme id-ctrl`).
    IdCtrl,
    /// Print a namespace's Identify Namespace data (as `nvme id-ns`).
    IdNs(IdNsArgs),
    /// Print a log page: error, smart, discovery, or one by identifier.
    GetLog(GetLogArgs),
    /// Run an I/O workload and print IOPS, throughput and latency.
    Io(IoArgs),
}

#[derive(Args, Debug)]
struct IoArgs {
    /// Access pattern, as fio's: read, write, randread, randwrite, rw
    /// (or readwrite: sequential, mixed) or randrw (random, mixed).
    #[arg(long, default_value = "read", value_parser = parse_rw)]
    rw: Rw,
    /// Percent of a mixed workload's I/Os that read (fio's rwmixread).
    #[arg(long, default_value = "50", value_parser = parse_percent)]
    rwmixread: u8,
    /// Bytes per I/O.
    #[arg(long, default_value = "4k", value_parser = parse_bytes)]
    bs: u64,
    /// Total bytes to transfer, at most the namespace (default: the whole
    /// namespace once).
    #[arg(long, value_parser = parse_bytes, conflicts_with = "time")]
    size: Option<u64>,
    /// Run for this many seconds instead.
    #[arg(long, value_parser = parse_seconds)]
    time: Option<Duration>,
    /// Namespace to use (default: the first).
    #[arg(short = 'n', long = "namespace-id", visible_alias = "nsid", value_parser = parse_nsid)]
    nsid: Option<u32>,
    /// Write a pattern and check it when reading back.
    #[arg(long)]
    verify: bool,
    /// Seed of the data pattern and of random offsets.
    #[arg(long, default_value_t = 1, value_parser = parse_whole::<u64>)]
    seed: u64,
    /// Run this many jobs at once (fio's numjobs), each a thread with an
    /// association of its own, over kernel TCP; job J's random offsets
    /// come from seed + J.
    #[arg(long, default_value_t = 1, value_parser = parse_jobs)]
    jobs: u16,
    /// Run the I/O queues in sets, a thread each pinned to one of these
    /// CPUs (e.g. 0-3 or 0,2), as Linux runs each queue's work on its own
    /// CPU; the admin queue and keep alive stay on the main thread. The
    /// pass is shared out: each set moves its part of the bytes. Over
    /// kernel TCP.
    #[arg(long, value_parser = parse_cpus)]
    cpus: Option<List<usize>>,
}

pub(crate) fn run(args: HostArgs) -> Result<()> {
    let a = &args.conn;
    a.check()?;
    match &args.action {
        HostAction::Discover => admin::print_discovery(a)?,
        HostAction::List => admin::list(a)?,
        HostAction::IdCtrl => admin::id_ctrl(a)?,
        HostAction::IdNs(ns) => admin::id_ns(a, ns)?,
        HostAction::GetLog(log) => admin::get_log(a, log)?,
        HostAction::Identify => {
            let app = admin::admin(a, resolve_nqn(a)?, |_| Vec::new(), "Identify")?;
            let c = app.controller.context("no Identify Controller data")?;
            let v = app.version;
            if a.json {
                let ns: Vec<_> = app
                    .namespaces
                    .iter()
                    .map(|n| serde_json::json!({"nsid": n.nsid, "blocks": n.blocks, "block_size": n.block_size}))
                    .collect();
                let j = serde_json::json!({
                    "subnqn": c.subnqn, "cntlid": c.cntlid, "sn": c.sn, "mn": c.mn, "fr": c.fr,
                    "version": format!("{}.{}.{}", v >> 16, (v >> 8) & 0xff, v & 0xff),
                    "mdts": c.mdts, "maxcmd": c.maxcmd, "nn": c.nn, "ioccsz": c.ioccsz, "kas": c.kas,
                    "io_queues": app.io_queues, "queue_depth": app.queue_depth, "namespaces": ns,
                });
                println!("{}", serde_json::to_string_pretty(&j)?);
            } else {
                println!("subnqn  : {}", c.subnqn);
                println!("cntlid  : {}", c.cntlid);
                println!("sn / mn : {} / {} (fr {})", c.sn, c.mn, c.fr);
                println!("version : {}.{}.{}", v >> 16, (v >> 8) & 0xff, v & 0xff);
                println!(
                    "mdts    : {}  maxcmd: {}  ioccsz: {}  kas: {}",
                    c.mdts, c.maxcmd, c.ioccsz, c.kas
                );
                println!("queues  : {} I/O x {} deep", app.io_queues, app.queue_depth);
                for n in &app.namespaces {
                    let bytes = n.blocks * u64::from(n.block_size);
                    println!(
                        "nsid {:<4}: {} blocks of {} B ({})",
                        n.nsid,
                        n.blocks,
                        n.block_size,
                        human_bytes(bytes as f64)
                    );
                }
            }
        }
        HostAction::Io(io) => io_run(a, io)?,
    }
    Ok(())
}

fn io_run(a: &ConnectArgs, io: &IoArgs) -> Result<()> {
    if io.jobs > 1 && a.link_name().is_some() {
        bail!(
            "--jobs runs over kernel TCP: a TAP or interface takes one stack; run a process per job"
        );
    }
    if let Some(List(cpus)) = &io.cpus {
        if a.link_name().is_some() {
            bail!("--cpus runs the queues over kernel TCP: a TAP or interface takes one stack");
        }
        if io.jobs > 1 {
            bail!("--cpus spreads one association's queues; with --jobs, each job is one thread");
        }
        let allowed = cpus::allowed()?;
        if let Some(c) = cpus.iter().find(|c| !allowed.contains(c)) {
            bail!("--cpus: this process may not run on CPU {c} (it may on {allowed:?})");
        }
    }
    let bs = u32::try_from(io.bs).ok().filter(|&b| b > 0).context("--bs must be 1..4G")?;
    let limit = match (io.size, io.time) {
        (_, Some(t)) if !t.is_zero() => Limit::Time(t),
        (_, Some(_)) => bail!("--time must be more than 0 seconds"),
        (Some(0), None) => bail!("--size 0 transfers nothing"),
        (Some(n), None) if n % u64::from(bs) != 0 => {
            bail!("--size {} is not a multiple of --bs {}", format_size(n), format_size(io.bs))
        }
        (Some(n), None) => Limit::Bytes(n),
        (None, None) => Limit::Namespace,
    };
    let spec = WorkloadSpec {
        rw: io.rw,
        bs,
        limit,
        qd: usize::from(a.qd),
        rwmixread: io.rwmixread,
        verify: io.verify,
        seed: io.seed,
        nsid: io.nsid,
        part: (0, 1),
    };
    let nqn = resolve_nqn(a)?;
    if io.jobs > 1 {
        return jobs_run(a, io, spec, nqn);
    }
    if let Some(List(cpus)) = &io.cpus {
        return sets_run(a, spec, nqn, cpus);
    }
    let mut app = IoApp::new([spec]);
    if let Some(w) = watch(a.eta) {
        app = app.with_watch(w);
    }
    let cpu0 = cpu_times();
    let t0 = std::time::Instant::now();
    let result = run_app(a, host_config(a, nqn), &mut app, Duration::from_secs(30 * 24 * 3600));
    let (cpu1, wall) = (cpu_times(), t0.elapsed().as_secs_f64().max(1e-9));
    let share = |a: Duration, b: Duration| (b - a).as_secs_f64() / wall * 100.0;
    let (user_pct, sys_pct) = (share(cpu0.0, cpu1.0), share(cpu0.1, cpu1.1));
    let offload = result.as_ref().ok().cloned().flatten();
    let reports: Vec<PhaseReport> = app
        .results
        .iter()
        .map(|(spec, stats)| PhaseReport::new(spec, stats.clone(), app.io_queues, app.queue_depth))
        .collect();
    if a.json {
        let j = serde_json::json!({
            "phases": reports, "offload": offload, "interrupted": app.interrupted,
            "abandoned": app.abandoned,
            "recovery": app.recovery,
            "cpu": { "user_pct": user_pct, "sys_pct": sys_pct },
        });
        println!("{}", serde_json::to_string_pretty(&j)?);
    } else if !reports.is_empty() {
        for note in granted_notes(a.qd, app.queue_depth, a.queues, app.io_queues) {
            println!("{note}");
        }
        for r in &reports {
            for line in r.lines() {
                println!("{line}");
            }
        }
        println!("  cpu: usr {user_pct:.1}%, sys {sys_pct:.1}% of one core");
        println!("  {}", app.recovery.line());
        for line in offload.iter().flat_map(|o| o.lines("host")) {
            println!("  {line}");
        }
    }
    result?;
    if app.interrupted {
        bail!("interrupted; {}", so_far(app.abandoned));
    }
    Ok(())
}

/// `io --cpus LIST`: one association, its I/O queues dealt round robin
/// into a set per CPU (as many as there are queues at most), each set's
/// thread pinned to its CPU and moving its part of the pass; then the
/// phase as one, and each set's share with its thread's CPU per I/O.
fn sets_run(a: &ConnectArgs, spec: WorkloadSpec, nqn: String, cpus: &[usize]) -> Result<()> {
    let n = cpus.len().min(usize::from(a.queues));
    let mut watch = watch(a.eta);
    let mut apps: Vec<IoApp> = (0..n)
        .map(|i| {
            let app = IoApp::new([WorkloadSpec { part: (i as u32, n as u32), ..spec.clone() }]);
            // The progress line follows the first set.
            match watch.take() {
                Some(w) => app.with_watch(w),
                None => app,
            }
        })
        .collect();
    let cpu0 = cpu_times();
    let t0 = std::time::Instant::now();
    let sets = apps.iter_mut().zip(cpus).map(|(app, &cpu)| (app, Some(cpu))).collect();
    let result = run_sets(a, host_config(a, nqn), sets, Duration::from_secs(30 * 24 * 3600));
    let (cpu1, wall) = (cpu_times(), t0.elapsed().as_secs_f64().max(1e-9));
    let share = |a: Duration, b: Duration| (b - a).as_secs_f64() / wall * 100.0;
    let (user_pct, sys_pct) = (share(cpu0.0, cpu1.0), share(cpu0.1, cpu1.1));
    let (mut recovery, runs) = match result {
        Ok((r, runs)) => (RecoveryReport::from(r), runs),
        Err(e) => (RecoveryReport::default(), Err(e)?),
    };
    for app in &apps {
        recovery.retried += app.recovery.retried;
    }
    let parts: Vec<_> = apps
        .iter()
        .filter_map(|app| Some((&app.results.first()?.1, app.latencies.first()?)))
        .collect();
    let phase = apps[0].results.first().map(|(spec, _)| {
        let all = IoStats::of_jobs(&parts);
        PhaseReport::new(
            &WorkloadSpec { part: (0, 1), ..spec.clone() },
            all,
            a.queues,
            apps[0].queue_depth,
        )
    });
    let each: Vec<_> = apps
        .iter()
        .zip(&runs)
        .zip(cpus)
        .map(|((app, run), cpu)| {
            let ios = app.results.first().map_or(0, |(_, s)| s.ios);
            let iops = app.results.first().map_or(0.0, |(_, s)| s.iops);
            let per_io = run.cpu.as_nanos() as f64 / ios.max(1) as f64;
            (*cpu, run.qids.clone(), ios, iops, per_io)
        })
        .collect();
    let interrupted = apps.iter().any(|a| a.interrupted);
    let abandoned: u64 = apps.iter().map(|a| a.abandoned).sum();
    if a.json {
        let sets: Vec<_> = each
            .iter()
            .map(|(cpu, qids, ios, iops, per_io)| serde_json::json!({"cpu": cpu, "qids": qids, "ios": ios, "iops": iops, "host_cpu_ns_per_io": per_io}))
            .collect();
        let j = serde_json::json!({
            "phases": phase.iter().collect::<Vec<_>>(), "sets": sets, "interrupted": interrupted,
            "abandoned": abandoned, "recovery": recovery,
            "cpu": { "user_pct": user_pct, "sys_pct": sys_pct },
        });
        println!("{}", serde_json::to_string_pretty(&j)?);
    } else if let Some(p) = &phase {
        for note in granted_notes(a.qd, apps[0].queue_depth, a.queues, p.queues) {
            println!("{note}");
        }
        for line in p.lines() {
            println!("{line}");
        }
        for (cpu, qids, ios, iops, per_io) in &each {
            println!(
                "  queues {qids:?} on CPU {cpu}: {} IOPS, {ios} I/Os, {per_io:.0} ns of its thread's CPU per I/O",
                human_count(*iops)
            );
        }
        println!("  cpu: usr {user_pct:.1}%, sys {sys_pct:.1}% of one core");
        println!("  {}", recovery.line());
    }
    if let Some(e) = apps.iter().find_map(nvme_ddp::app::HostApp::error) {
        bail!("{e}");
    }
    if interrupted {
        bail!("interrupted; {}", so_far(abandoned));
    }
    Ok(())
}

/// `io --jobs N`: N hosts, a thread and an association each, the same
/// workload (random offsets seeded apart), then each job's results and
/// their sum, with each job's CPU per I/O from its thread's clock.
fn jobs_run(a: &ConnectArgs, io: &IoArgs, spec: WorkloadSpec, nqn: String) -> Result<()> {
    let thread_ns = || cpus::cpu_ns(libc::CLOCK_THREAD_CPUTIME_ID);
    let limit = Duration::from_secs(30 * 24 * 3600);
    let runs: Vec<(IoApp, Result<()>, u64)> = std::thread::scope(|s| {
        let jobs: Vec<_> = (0..u64::from(io.jobs))
            .map(|job| {
                let spec = WorkloadSpec { seed: spec.seed.wrapping_add(job), ..spec.clone() };
                let cfg = host_config(a, nqn.clone());
                s.spawn(move || {
                    let mut app = IoApp::new([spec]);
                    let t0 = thread_ns();
                    let result = run_app(a, cfg, &mut app, limit).map(|_| ());
                    (app, result, thread_ns() - t0)
                })
            })
            .collect();
        jobs.into_iter().map(|j| j.join().expect("a job thread")).collect()
    });
    let mut total = (0u64, 0u64, 0f64, 0f64);
    let mut jobs = Vec::new();
    for (job, (app, _, cpu_ns)) in runs.iter().enumerate() {
        let Some((spec, stats)) = app.results.first() else { continue };
        let report = PhaseReport::new(spec, stats.clone(), app.io_queues, app.queue_depth);
        let per_io = *cpu_ns as f64 / stats.ios.max(1) as f64;
        total = (
            total.0 + stats.ios,
            total.1 + stats.bytes,
            total.2 + stats.iops,
            total.3 + stats.bytes_per_sec,
        );
        jobs.push((job, report, per_io));
    }
    if a.json {
        let list: Vec<_> = jobs
            .iter()
            .map(|(job, r, per_io)| serde_json::json!({"job": job, "phase": r, "host_cpu_ns_per_io": per_io}))
            .collect();
        let interrupted = runs.iter().any(|(app, ..)| app.interrupted);
        let j = serde_json::json!({
            "jobs": list,
            "total": {"ios": total.0, "bytes": total.1, "iops": total.2, "bytes_per_sec": total.3},
            "interrupted": interrupted,
        });
        println!("{}", serde_json::to_string_pretty(&j)?);
    } else {
        for (job, r, per_io) in &jobs {
            let mut lines = r.lines().into_iter();
            if let Some(head) = lines.next() {
                println!("job {job}: {head}");
            }
            for line in lines {
                println!("  {line}");
            }
            println!("    cpu: {:.0} ns per I/O (the job's thread)", per_io);
        }
        println!(
            "all {} jobs: {} IOPS, {}/s, {} in {} I/Os",
            io.jobs,
            human_count(total.2),
            human_bytes(total.3),
            human_bytes(total.1 as f64),
            total.0
        );
    }
    for (job, (_, result, _)) in runs.iter().enumerate() {
        if let Err(e) = result {
            bail!("job {job}: {e:#}");
        }
    }
    if let Some((app, ..)) = runs.iter().find(|(app, ..)| app.interrupted) {
        bail!("interrupted; {}", so_far(app.abandoned));
    }
    Ok(())
}
