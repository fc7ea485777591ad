//! `nvme-ddp bench`: the offload matrix, as a table, JSON and charts.
//!
//! It parses, runs and prints; it must never hold goals of its own (they
//! come from `--goals FILE`) or measure anything the library does not.

use anyhow::{Context, Result, bail};
use clap::Args;
use nvme_ddp::bench::error::MeterError;
use nvme_ddp::bench::goals::{Goals, Verdict};
use nvme_ddp::bench::matrix::{Matrix, Next, raw_tcp_run, rounds, run_rep};
use nvme_ddp::bench::meter;
use nvme_ddp::bench::options::{BenchOptions, Impair, Meter};
use nvme_ddp::bench::report::Report;
use nvme_ddp::bench::stats::SPREAD_LIMIT;
use nvme_ddp::driver::transport::TransportType;
use nvme_ddp::driver::valgrind::Part;
use nvme_ddp::plot;
use nvme_ddp::size::format_size;
use nvme_ddp::workload::Rw;
use smoltcp_glue::{LinkName, Via};
use std::path::PathBuf;
use std::time::Duration;
use ulp_ddp::Caps;

use crate::args::{
    List, existing_iface, list, on_off, parse_busy_poll, parse_bytes, parse_chance, parse_jobs,
    parse_on_off, parse_qd, parse_queues, parse_rw, parse_seconds, parse_via, parse_whole,
};
use crate::progress::interrupt_flag;
use std::io::Write;

/// Throughput is shown in MiB/s, as the charts show it and sizes read.
const MIB: f64 = 1048576.0;
use std::sync::atomic::Ordering;

#[derive(Args, Debug)]
pub(crate) struct BenchArgs {
    /// Block sizes, e.g. 4k,128k (default: 4k,32k,128k,1M).
    #[arg(long, value_parser = |s: &str| list(s, |w| parse_bytes(w).and_then(|n| u32::try_from(n).map_err(|_| format!("{w}: too large")))))]
    bs: Option<List<u32>>,
    /// Directions: read, write (default both).
    #[arg(long, value_parser = |s: &str| list(s, parse_rw))]
    rw: Option<List<Rw>>,
    /// Queue depths, each 1 to 1024 (default 1,32).
    #[arg(long, value_parser = |s: &str| list(s, parse_qd))]
    qd: Option<List<u16>>,
    /// Data digest: on, off, or on,off to compare (default on; a bare
    /// --ddgst is on).
    #[arg(long, num_args = 0..=1, default_missing_value = "on", value_parser = |s: &str| list(s, parse_on_off))]
    ddgst: Option<List<bool>>,
    /// NVMe/TCP over TLS 1.3 (in software, with a fresh PSK): on, off, or
    /// on,off to compare (default off; a bare --tls is on).
    #[arg(long, num_args = 0..=1, default_missing_value = "on", value_parser = |s: &str| list(s, parse_on_off))]
    tls: Option<List<bool>>,
    /// Offload sets, e.g. none,crc,ddp,all (the default); a set is one of
    /// none, all, classic, crc, ddp, crc-rx, crc-tx, oneshot, zc-tx, tls,
    /// tls-rx, tls-tx, or several joined by '+' (ddp+crc).
    #[arg(long, value_parser = |s: &str| list(s, Caps::parse))]
    offload: Option<List<Caps>>,
    /// Transports: tcp, rdma, or tcp,rdma to compare them on the same
    /// matrix (default tcp).
    #[arg(long, value_parser = |s: &str| list(s, |w| TransportType::parse(w).map_err(|e| e.to_string())))]
    transport: Option<List<TransportType>>,
    /// IP MTUs of the in-process wire (default 1500,9000).
    #[arg(long, value_parser = |s: &str| list(s, |w| w.parse::<usize>().map_err(|e| format!("{w}: {e}"))))]
    mtu: Option<List<usize>>,
    /// Chances a frame is lost, each direction, as `demo --loss` takes
    /// one: a list to sweep, e.g. 0,0.001,0.005,0.01,0.02 (default 0).
    /// Applied in this process to the frames each end receives, on the
    /// in-process wire and over --tap/--iface alike (there, on top of
    /// whatever the link itself does); raw TCP runs under the same.
    #[arg(long, value_parser = |s: &str| list(s, parse_chance))]
    loss: Option<List<f64>>,
    /// Chances a frame is held back and overtaken, each direction: a list
    /// to sweep (default 0).
    #[arg(long, value_parser = |s: &str| list(s, parse_chance))]
    reorder: Option<List<f64>>,
    /// Chances a frame arrives twice, each direction: a list to sweep
    /// (default 0).
    #[arg(long, value_parser = |s: &str| list(s, parse_chance))]
    duplicate: Option<List<f64>>,
    /// Seed of the impairments: repetition r of every point uses a seed
    /// made from this and r, so repetitions differ and bench runs repeat.
    #[arg(long, default_value_t = 1, value_parser = parse_whole::<u64>)]
    seed: u64,
    /// I/O queues, 1 to 128.
    #[arg(long, default_value = "1", value_parser = parse_queues)]
    queues: u16,
    /// Jobs at once (fio's numjobs), e.g. 1,2,4 to compare (default 1):
    /// each a host with its wire (or its queue of the TAPs, which need as
    /// many) against a controller stack, a poll group, of its own; every
    /// job's host, NIC and controller on its own thread in lockstep (or on
    /// two threads with --threads). Reported per job and in total.
    #[arg(long, value_parser = |s: &str| list(s, parse_jobs))]
    jobs: Option<List<u16>>,
    /// Runs per point (reported as median and spread), at least 1.
    #[arg(long, default_value = "5", value_parser = clap::value_parser!(u16).range(1..))]
    reps: u16,
    /// Seconds measured per run.
    #[arg(long, default_value = "1", value_parser = parse_seconds)]
    time: Duration,
    /// Seconds of warm-up per run.
    #[arg(long, default_value = "0.2", value_parser = parse_seconds)]
    warmup: Duration,
    /// Run each side on a thread of its own, the host with its NIC and the
    /// controller with its own, instead of all three in lockstep on one
    /// thread (the default on the in-process wire, and the one whose
    /// numbers hold still); the NIC's CPU is still counted apart, by the
    /// thread's clock around its steps. Over interfaces they always run so.
    #[arg(long)]
    threads: bool,
    /// Run over two TAP devices, HOSTTAP,CTRLTAP (e.g. tap1,tap0 after
    /// `net up`, inside the namespace) instead of the in-process wire.
    #[arg(long, value_parser = parse_tap_pair, conflicts_with = "iface")]
    tap: Option<(String, String)>,
    /// Run over two interfaces, HOSTIF,CTRLIF (e.g. veth1,veth0 after
    /// `net up`, inside the namespace), through AF_XDP or AF_PACKET (see
    /// --via).
    #[arg(long, value_parser = parse_iface_pair)]
    iface: Option<(String, String)>,
    /// How --iface reaches the interfaces: auto, xdp or packet.
    #[arg(long, requires = "iface", value_parser = parse_via)]
    via: Option<Via>,
    /// On threads (and over TAPs or interfaces), keep polling this many
    /// microseconds after the last progress before sleeping.
    #[arg(long, value_name = "USECS", value_parser = parse_busy_poll)]
    busy_poll: Option<Duration>,
    /// Write the points as JSON to this file.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Check the points against the goals in this JSON file (ratios of
    /// one point's measure to another's, each with a bound; see
    /// benches/goals.json) and print a verdict on each.
    #[arg(long, value_name = "FILE")]
    goals: Option<PathBuf>,
    /// Write charts (SVG and PNG) into this directory.
    #[arg(long)]
    plot: Option<PathBuf>,
    /// Skip measuring raw TCP (reported as 0; for profiling).
    #[arg(long)]
    no_raw: bool,
    /// What costs are counted in: cpu (CPU time, what a user pays on this
    /// machine) or instructions (instructions, memory accesses, cache
    /// misses and mispredicted branches per I/O and part, counted by
    /// Valgrind under a fixed cache model: the same run after run, and on
    /// machines whose CPUs offer the same extensions; about 500 times slower; one job in lockstep on the
    /// in-process wire).
    #[arg(long, default_value = "cpu", value_parser = Meter::parse)]
    meter: Meter,
    /// Measure this many I/Os a run (after a warm-up of a quarter as
    /// many, at least two queues' worth) instead of --time seconds. The
    /// instructions meter counts 16 MiB worth by default, 64 to 1024 I/Os.
    #[arg(long, value_parser = parse_ios)]
    ios: Option<u64>,
    /// Under Valgrind, as the instructions meter starts it: collect this
    /// part's events only.
    #[arg(long, hide = true, value_parser = Part::parse, requires = "measured")]
    collect: Option<Part>,
    /// Run only this repetition (its seeds), once.
    #[arg(long, hide = true, requires = "collect")]
    rep: Option<usize>,
    /// Where a run under Valgrind writes what it measured.
    #[arg(long, hide = true, requires = "collect")]
    measured: Option<PathBuf>,
}

/// A count of I/Os: 1 to a million.
fn parse_ios(s: &str) -> Result<u64, String> {
    match s.parse::<u64>() {
        Ok(n) if (1..=1_000_000).contains(&n) => Ok(n),
        _ => Err(format!("{s:?}: give a number of I/Os, 1 to 1000000")),
    }
}

pub(crate) fn run(a: BenchArgs) -> Result<()> {
    let d = BenchOptions::default();
    let link = match (a.tap.clone(), a.iface.clone()) {
        (Some((h, c)), _) => Some((LinkName::Tap(h), LinkName::Tap(c))),
        (_, Some((h, c))) => {
            let via = a.via.unwrap_or_default();
            Some((LinkName::Iface(h, via), LinkName::Iface(c, via)))
        }
        _ => None,
    };
    if link.is_some() && a.mtu.is_some() {
        bail!("--mtu: over --tap or --iface the links' MTU is used; set it on the interfaces");
    }
    // The instructions meter counts on the in-process wire: say so before
    // opening any interface.
    if a.meter == Meter::Instructions && link.is_some() {
        return Err(MeterError::Unsupported("--tap/--iface").into());
    }
    // Fail on a path that cannot be written before the matrix runs, not after.
    if let Some(dir) = &a.plot {
        plot::prepare(dir).context("--plot")?;
    }
    let goals = match &a.goals {
        Some(path) => Goals::load(path)?,
        None => Goals::default(),
    };
    if a.time.is_zero() {
        bail!("--time must be more than 0 seconds");
    }
    let o = BenchOptions {
        bs: a.bs.map_or(d.bs, |l| l.0),
        rw: a.rw.map_or(d.rw, |l| l.0),
        qd: a.qd.map_or(d.qd, |l| l.0),
        ddgst: a.ddgst.map_or(d.ddgst, |l| l.0),
        tls: a.tls.map_or(d.tls, |l| l.0),
        offload: a.offload.map_or(d.offload, |l| l.0),
        transport: a.transport.map_or(d.transport, |l| l.0),
        // Over TAPs or interfaces, they decide the MTU.
        mtu: match &link {
            Some((h, _)) => {
                vec![h.open(None).with_context(|| format!("opening {h}"))?.ip_mtu()]
            }
            None => a.mtu.map_or(d.mtu, |l| l.0),
        },
        queues: a.queues,
        jobs: a.jobs.map_or(d.jobs, |l| l.0),
        reps: usize::from(a.reps),
        warmup: a.warmup,
        duration: a.time,
        threads: a.threads,
        link,
        busy_poll: a.busy_poll.unwrap_or_default(),
        loss: a.loss.map_or(d.loss, |l| l.0),
        reorder: a.reorder.map_or(d.reorder, |l| l.0),
        duplicate: a.duplicate.map_or(d.duplicate, |l| l.0),
        seed: a.seed,
        ios: a.ios,
        meter: a.meter,
        collect: a.collect,
    };
    if let (Some(part), Some(out)) = (a.collect, &a.measured) {
        let stop = interrupt_flag()?;
        return Ok(meter::child(&o, part, a.rep.unwrap_or(0), out, &stop)?);
    }
    if o.meter == Meter::Instructions {
        meter::check(&o)?;
    }
    if o.bs.iter().any(|&b| b == 0 || b % 512 != 0) {
        bail!("block sizes must be multiples of 512");
    }
    if o.link.is_none() && o.mtu.iter().any(|&m| !(576..=65521).contains(&m)) {
        bail!("MTUs must be within 576..=65521");
    }
    // Fail on a path that cannot be written before the matrix runs, not
    // after; and only once every argument is known good.
    let mut json = match &a.json {
        Some(path) => Some((
            std::fs::File::create(path)
                .with_context(|| format!("cannot write {}", path.display()))?,
            path,
        )),
        None => None,
    };
    let points = o.settings();
    let bar = indicatif::ProgressBar::new((points.len() * o.reps) as u64);
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "{bar:40} {pos}/{len} runs, {elapsed} elapsed, ~{eta} left  {msg}",
        )
        .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    // Ctrl-C or SIGTERM ends the matrix in the run under way (its round is
    // left out), and a point that fails ends it too (a lossy one that gave
    // up, say); the rounds measured are still reported and written.
    let stop = interrupt_flag()?;
    let reps = o.reps.max(1);
    let Matrix { points: out, rounds, failed } = rounds(
        &points,
        reps,
        !a.no_raw,
        |p, rep| run_rep(p, &o, rep, &stop),
        |mtu, impair, rep| raw_tcp_run(&o, mtu, impair, rep, &stop),
        |next| match next {
            Next::Raw { mtu, impair } => {
                bar.set_message(format!("raw TCP at mtu {mtu}{}", impaired(impair)))
            }
            Next::Point { setting: p, rep } => bar.set_message(format!(
                "{} {} bs={} qd={} mtu={} ddgst={} offload={}{} (round {} of {reps})",
                transport_name(p),
                p.rw.name(),
                format_size(u64::from(p.bs)),
                p.qd,
                p.mtu,
                on_off(p.ddgst),
                p.offload,
                impaired(p.impair),
                rep + 1,
            )),
            Next::Done => bar.inc(1),
        },
    );
    bar.finish_and_clear();
    let impaired_matrix = o.impairments().iter().any(|i| !i.is_clean());
    // The impairment's columns, when the matrix has any.
    let wire = |l: &str, r: &str, d: &str| match impaired_matrix {
        true => format!("{l:>6} {r:>6} {d:>6} | "),
        false => String::new(),
    };
    let pct = |v: f64| format!("{:.2}", v * 100.0);
    // The jobs' column, when the matrix has more than one job anywhere.
    let several = o.jobs.iter().any(|&j| j > 1);
    let jobs = |j: &str| match several {
        true => format!("{j:>4} "),
        false => String::new(),
    };
    // Over interfaces, the in-process wire's raw TCP, measured alongside.
    let beside_wire = |v: &dyn std::fmt::Display| match o.link.is_some() && !a.no_raw {
        true => format!(" {v:>9}"),
        false => String::new(),
    };
    if o.meter == Meter::Instructions {
        print_counted(&out, &wire, &pct);
    } else {
        println!(
            "{:<4} {:<5} {:>5} {:>3} {}{:>5} {:>5} {:>7} | {}{:>9} {:>6} {:>9} {:>7} {:>8} | {:>9} {:>6} {:>8} {:>9} | {:>8} {:>8} {:>8} {:>8} {:>7} {:>5} | {:>9}{}",
            "tr",
            "rw",
            "bs",
            "qd",
            jobs("jobs"),
            "mtu",
            "ddgst",
            "offload",
            wire("loss%", "reord%", "dup%"),
            "MiB/s",
            "+-%",
            "IOPS",
            "p50 us",
            "p99 us",
            "host ns/IO",
            "+-%",
            "NIC ns/IO",
            "ctrl ns/IO",
            "copy/IO",
            "crc/IO",
            "placed/IO",
            "nicCRC/IO",
            "placed%",
            "calls",
            "raw MiB/s",
            beside_wire(&"wire raw"),
        );
        for p in &out {
            println!(
                "{:<4} {:<5} {:>5} {:>3} {}{:>5} {:>5} {:>7} | {}{:>9.1} {:>6.1} {:>9.0} {:>7.0} {:>8.0} | {:>9.0} {:>6.1} {:>8.0} {:>9.0} | {:>8.0} {:>8.0} {:>8.0} {:>8.0} {:>7.1} {:>5.1} | {:>9.1}{}{}",
                transport_name(&p.setting),
                p.setting.rw.name(),
                format_size(u64::from(p.setting.bs)),
                p.setting.qd,
                jobs(&p.setting.jobs.to_string()),
                p.setting.mtu,
                on_off(p.setting.ddgst),
                p.setting.offload.to_string(),
                wire(
                    &pct(p.setting.impair.loss),
                    &pct(p.setting.impair.reorder),
                    &pct(p.setting.impair.duplicate)
                ),
                p.median.bytes_per_sec / MIB,
                p.bytes_per_sec_spread * 100.0,
                p.median.iops,
                p.median.lat_p50_us,
                p.median.lat_p99_us,
                p.median.host_cpu_ns_per_io,
                p.host_cpu_spread * 100.0,
                p.median.nic_cpu_ns_per_io,
                p.median.controller_cpu_ns_per_io,
                p.median.host_copy_bytes_per_io,
                p.median.host_crc_bytes_per_io,
                p.median.nic_placed_bytes_per_io,
                p.median.nic_crc_bytes_per_io,
                p.median.offload_share * 100.0,
                p.median.control_calls_per_io,
                p.raw_tcp_bytes_per_sec / MIB,
                beside_wire(&format!("{:.1}", p.raw_tcp_wire_bytes_per_sec / MIB)),
                if p.steady { "" } else { "  noisy" },
            );
            for (j, m) in p.median.per_job.iter().enumerate() {
                println!(
                    "    job {j}: {:.1} MiB/s, {:.0} IOPS; CPU per I/O: host {:.0} ns, NIC {:.0} ns, controller {:.0} ns",
                    m.bytes_per_sec / MIB,
                    m.iops,
                    m.host_cpu_ns_per_io,
                    m.nic_cpu_ns_per_io,
                    m.controller_cpu_ns_per_io
                );
            }
        }
    }
    if out.iter().any(|p| !p.steady) {
        println!(
            "noisy: a spread (max - min over median of {} runs) above {:.0}%, or fewer runs; no verdict rests on it",
            o.reps,
            SPREAD_LIMIT * 100.0
        );
    }
    let report = Report::new(&o, out, &goals, stop.load(Ordering::Relaxed));
    if let Some(spread) = report.machine.baseline_spread {
        println!(
            "this machine: a fixed copy-and-CRC loop spreads {:.0}% over 7 runs by itself",
            spread * 100.0
        );
    }
    if !report.goals.is_empty() {
        println!();
        for t in &report.goals {
            let verdict = match t.verdict {
                Verdict::Met => "met",
                Verdict::Missed => "MISSED",
                Verdict::Inconclusive => "inconclusive",
            };
            println!(
                "target {}: {} (measured {:.2}x, spread {:.0}%) {verdict}",
                t.what,
                t.limit,
                t.measured,
                t.spread * 100.0
            );
        }
    }
    if let Some((file, path)) = &mut json {
        file.write_all(serde_json::to_string_pretty(&report)?.as_bytes())
            .with_context(|| format!("writing {}", path.display()))?;
    }
    let out = report.points;
    if let Some(dir) = &a.plot {
        let files = plot::charts(&out, dir)?;
        if !files.iter().any(|f| f.extension().is_some_and(|e| e == "png")) {
            eprintln!(
                "note: no TrueType font found (install fonts-dejavu-core); PNG charts skipped, SVG written"
            );
        }
        for f in files {
            println!("chart: {}", f.display());
        }
    }
    if let Some(e) = failed {
        bail!(
            "{e}; stopped in round {} of {reps}, the results above are of the runs made",
            rounds + 1
        );
    }
    if stop.load(Ordering::Relaxed) {
        bail!(
            "interrupted in round {} of {reps}; the results above are of the runs made",
            rounds + 1
        );
    }
    Ok(())
}

/// The instructions meter's table: per I/O, each part's instructions and
/// the host's memory traffic, misses and estimated cycles, then the
/// counters; each part of a point on a line of its own below it.
fn print_counted(
    out: &[nvme_ddp::bench::point::Point],
    wire: &dyn Fn(&str, &str, &str) -> String,
    pct: &dyn Fn(f64) -> String,
) {
    println!(
        "{:<4} {:<5} {:>5} {:>3} {:>5} {:>5} {:>7} | {}{:>10} {:>6} {:>10} {:>10} | {:>8} {:>8} {:>8} {:>10} | {:>8} {:>8} {:>8} {:>7} | {:>10}",
        "tr",
        "rw",
        "bs",
        "qd",
        "mtu",
        "ddgst",
        "offload",
        wire("loss%", "reord%", "dup%"),
        "host Ir/IO",
        "+-%",
        "NIC Ir/IO",
        "ctrl Ir/IO",
        "L1m/IO",
        "LLm/IO",
        "Bm/IO",
        "cycles/IO",
        "copy/IO",
        "crc/IO",
        "placed/IO",
        "placed%",
        "rawrx Ir/IO",
    );
    for p in out {
        let (m, c) = (&p.median, &p.median.counts);
        println!(
            "{:<4} {:<5} {:>5} {:>3} {:>5} {:>5} {:>7} | {}{:>10.0} {:>6.2} {:>10.0} {:>10.0} | {:>8.0} {:>8.0} {:>8.0} {:>10.0} | {:>8.0} {:>8.0} {:>8.0} {:>7.1} | {:>10.0}{}",
            transport_name(&p.setting),
            p.setting.rw.name(),
            format_size(u64::from(p.setting.bs)),
            p.setting.qd,
            p.setting.mtu,
            on_off(p.setting.ddgst),
            p.setting.offload.to_string(),
            wire(
                &pct(p.setting.impair.loss),
                &pct(p.setting.impair.reorder),
                &pct(p.setting.impair.duplicate)
            ),
            c.host.instructions,
            p.host_instructions_spread.unwrap_or(0.0) * 100.0,
            c.nic.instructions,
            c.controller.instructions,
            c.host.l1_misses,
            c.host.ll_misses,
            c.host.branch_misses,
            c.host.est_cycles,
            m.host_copy_bytes_per_io,
            m.host_crc_bytes_per_io,
            m.nic_placed_bytes_per_io,
            m.offload_share * 100.0,
            p.raw_tcp.receiver.instructions,
            if p.steady { "" } else { "  noisy" },
        );
        let parts = [("host", &c.host), ("NIC", &c.nic), ("controller", &c.controller)];
        let raw =
            [("raw TCP sender", &p.raw_tcp.sender), ("raw TCP receiver", &p.raw_tcp.receiver)];
        for (name, c) in parts.into_iter().chain(raw.into_iter().filter(|(_, c)| !c.is_empty())) {
            println!(
                "    {name}: {:.0} instructions, {:.0} data reads, {:.0} writes, {:.0} L1 misses, {:.0} LL misses, {:.0} mispredicted branches, {:.0} est. cycles per I/O",
                c.instructions,
                c.data_reads,
                c.data_writes,
                c.l1_misses,
                c.ll_misses,
                c.branch_misses,
                c.est_cycles
            );
        }
    }
    println!(
        "counted by Valgrind (Callgrind; 32 KiB L1s, 8 MiB LL): exact, run after run, for this binary; CPU time is what a user pays (--meter cpu)"
    );
}

/// ` loss=0.01 reorder=0 duplicate=0` for an impaired wire, or nothing.
fn impaired(i: Impair) -> String {
    match i.is_clean() {
        true => String::new(),
        false => format!(" {i}"),
    }
}

/// `HOSTTAP,CTRLTAP`, both interfaces that exist here.
fn parse_tap_pair(s: &str) -> Result<(String, String), String> {
    let (h, c) = s.split_once(',').ok_or("--tap takes HOSTTAP,CTRLTAP (e.g. tap1,tap0)")?;
    Ok((existing_iface(h)?, existing_iface(c)?))
}

/// `HOSTIF,CTRLIF`, both interfaces that exist here.
fn parse_iface_pair(s: &str) -> Result<(String, String), String> {
    let (h, c) = s.split_once(',').ok_or("--iface takes HOSTIF,CTRLIF (e.g. veth1,veth0)")?;
    Ok((existing_iface(h)?, existing_iface(c)?))
}

/// The transport column: `tls` for NVMe/TCP over TLS.
fn transport_name(s: &nvme_ddp::bench::options::Setting) -> &'static str {
    if s.tls { "tls" } else { s.transport.name() }
}
