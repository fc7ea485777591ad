//! The instructions meter: each run's parts counted by Valgrind.
//!
//! CPU time moves with the machine and with whatever else it runs;
//! instructions do not. For each repetition of a point, this process runs
//! the same point once per part (host, NIC, controller; raw TCP's sender
//! and receiver) as a child of its own binary under Callgrind, started
//! with collection off. The child runs in lockstep on one thread with
//! fixed seeds and a window of so many I/Os, and switches collection on
//! only while that part steps inside the window
//! ([`Collector`](crate::driver::valgrind::Collector)). What Callgrind
//! counted is then exactly that part's work in the window; divided by the
//! I/Os the child measured, it is the part's cost per I/O.
//!
//! Callgrind's cache model is fixed (not this machine's caches: 32 KiB
//! 8-way first-level caches, an 8 MiB 16-way last level, 64-byte lines),
//! so the counts of one binary repeat from run to run, and on any machine
//! whose CPU offers the same instruction-set extensions (glibc and
//! OpenSSL pick their copy and AES code by them, as Valgrind reports
//! them). The parent starts processes and reads their output; the child's
//! side ([`child`]) runs one point through [`run`],
//! like any run, and never counts anything itself.

use crate::bench::error::{BenchError, MeterError};
use crate::bench::options::{BenchOptions, Impair, Meter, Setting};
use crate::bench::point::{Counts, Measures, PartCounts, RawCounts, RawRun};
use crate::bench::run;
use crate::driver::valgrind::{CLIENT_REQUESTS, Part};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// How Callgrind runs a child: collection off until the child switches it
/// on, the cache and branch models on, the cache fixed.
const CALLGRIND: [&str; 8] = [
    "--tool=callgrind",
    "--quiet",
    "--collect-atstart=no",
    "--cache-sim=yes",
    "--branch-sim=yes",
    "--I1=32768,8,64",
    "--D1=32768,8,64",
    "--LL=8388608,16,64",
];

/// Check, before any work, that this build and machine can count
/// instructions, and that `o` asks for what counts repeat on.
pub fn check(o: &BenchOptions) -> Result<(), MeterError> {
    if o.link.is_some() {
        return Err(MeterError::Unsupported("--tap/--iface"));
    }
    if o.threads {
        return Err(MeterError::Unsupported("--threads"));
    }
    if o.jobs.iter().any(|&j| j > 1) {
        return Err(MeterError::Unsupported("--jobs"));
    }
    let valgrind = Command::new("valgrind")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    Err(MeterError::Missing(match (valgrind, CLIENT_REQUESTS) {
        (true, true) => return Ok(()),
        (false, true) => "Valgrind: apt-get install valgrind",
        (true, false) => {
            "a build with Valgrind's client requests: apt-get install libclang-dev && cargo build --release --features valgrind"
        }
        (false, false) => {
            "Valgrind and a build with its client requests: apt-get install valgrind libclang-dev && cargo build --release --features valgrind"
        }
    }))
}

/// What a child measured of raw TCP: the bytes its window moved.
#[derive(Debug, Serialize, Deserialize)]
struct RawMeasured {
    bytes: u64,
}

/// What runs of one point must agree on to count the same work: I/Os, and
/// the bytes copied, digested and placed and the calls to the NIC.
fn same_work(a: &Measures, b: &Measures) -> Option<&'static str> {
    let each = |m: &Measures| {
        [
            ("I/Os", m.ios),
            ("bytes copied", m.host_copy_bytes_per_io),
            ("bytes digested", m.host_crc_bytes_per_io),
            ("bytes placed", m.nic_placed_bytes_per_io),
            ("control calls", m.control_calls_per_io),
        ]
    };
    each(a).into_iter().zip(each(b)).find(|((_, x), (_, y))| x != y).map(|((what, _), _)| what)
}

/// Repetition `rep` of point `p`: the host's run's measures, with each
/// part's counts per I/O, and no times (under Valgrind they would time
/// Valgrind).
pub fn run_rep(
    p: &Setting,
    o: &BenchOptions,
    rep: usize,
    stop: &AtomicBool,
) -> Result<Measures, BenchError> {
    let args = point_args(p, o, rep);
    let (total, host) = counted::<Measures>(Part::Host, &args, stop)?;
    let ios = host.ios.max(1.0);
    let mut counts = PartCounts { host: total.scaled(1.0 / ios), ..PartCounts::default() };
    for (part, slot) in [(Part::Nic, &mut counts.nic), (Part::Controller, &mut counts.controller)] {
        let (total, m) = counted::<Measures>(part, &args, stop)?;
        if let Some(what) = same_work(&m, &host) {
            return Err(MeterError::Diverged { part, what }.into());
        }
        *slot = total.scaled(1.0 / ios);
    }
    Ok(Measures { counts, ..host.without_times() })
}

/// Repetition `rep` of raw TCP at `mtu` under `impair`: its ends' counts
/// per byte.
pub fn raw_run(
    o: &BenchOptions,
    mtu: usize,
    impair: Impair,
    rep: usize,
    stop: &AtomicBool,
) -> Result<RawRun, BenchError> {
    let args = raw_args(o, mtu, impair, rep);
    let (sender, m) = counted::<RawMeasured>(Part::Sender, &args, stop)?;
    let (receiver, n) = counted::<RawMeasured>(Part::Receiver, &args, stop)?;
    let per_byte = |c: Counts, m: &RawMeasured| c.scaled(1.0 / m.bytes.max(1) as f64);
    // Under Valgrind, raw TCP's throughput would be Valgrind's.
    Ok(RawRun {
        bytes_per_sec: 0.0,
        per_byte: RawCounts { sender: per_byte(sender, &m), receiver: per_byte(receiver, &n) },
        ..RawRun::default()
    })
}

/// In a child: run what `o` and `part` name, once, as repetition `rep`,
/// collecting `part`'s events, and write what it measured to `out`.
pub fn child(
    o: &BenchOptions,
    part: Part,
    rep: usize,
    out: &Path,
    stop: &AtomicBool,
) -> Result<(), BenchError> {
    let json = match part {
        Part::Host | Part::Nic | Part::Controller => {
            let [p] = o.settings()[..] else {
                return Err(MeterError::Child { part, why: "not one point".into() }.into());
            };
            serde_json::to_string(&run::run_rep(&p, o, rep, stop)?)
        }
        Part::Sender | Part::Receiver => {
            let (Some(&mtu), Some(&impair)) = (o.mtu.first(), o.impairments().first()) else {
                return Err(MeterError::Child { part, why: "no MTU".into() }.into());
            };
            let (_, bytes) = run::raw_tcp_window(o, mtu, impair, rep, stop)?;
            serde_json::to_string(&RawMeasured { bytes })
        }
    };
    let json = json.map_err(std::io::Error::other)?;
    std::fs::write(out, json)?;
    Ok(())
}

/// The bench arguments that run point `p` once, as repetition `rep`.
fn point_args(p: &Setting, o: &BenchOptions, rep: usize) -> Vec<String> {
    let on = |b: bool| if b { "on" } else { "off" }.to_string();
    let mut args: Vec<String> = [
        ("--transport", p.transport.name().to_string()),
        ("--rw", p.rw.name().to_string()),
        ("--bs", p.bs.to_string()),
        ("--qd", p.qd.to_string()),
        ("--ddgst", on(p.ddgst)),
        ("--tls", on(p.tls)),
        ("--offload", p.offload.to_string()),
        ("--queues", o.queues.to_string()),
    ]
    .into_iter()
    .flat_map(|(k, v)| [k.to_string(), v])
    .collect();
    if let Some((_, n)) = o.window_ios(p) {
        args.extend(["--ios".into(), n.to_string()]);
    }
    args.extend(raw_args(o, p.mtu, p.impair, rep));
    args
}

/// The bench arguments that run raw TCP once (and a point's common ones).
fn raw_args(o: &BenchOptions, mtu: usize, impair: Impair, rep: usize) -> Vec<String> {
    [
        ("--mtu", mtu.to_string()),
        ("--loss", impair.loss.to_string()),
        ("--reorder", impair.reorder.to_string()),
        ("--duplicate", impair.duplicate.to_string()),
        ("--seed", o.seed.to_string()),
        ("--meter", Meter::Instructions.name().to_string()),
        ("--rep", rep.to_string()),
    ]
    .into_iter()
    .flat_map(|(k, v)| [k.to_string(), v])
    .collect()
}

/// A directory of this process's own, removed when dropped.
struct Scratch(PathBuf);

impl Scratch {
    fn new() -> std::io::Result<Self> {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("nvme-ddp-meter-{}-{n}", std::process::id()));
        std::fs::create_dir_all(&dir)?;
        Ok(Self(dir))
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Run `nvme-ddp bench ARGS` under Callgrind collecting `part`: what it
/// counted in all, and what the child measured.
fn counted<T: for<'de> Deserialize<'de>>(
    part: Part,
    args: &[String],
    stop: &AtomicBool,
) -> Result<(Counts, T), BenchError> {
    let fail = |why: String| MeterError::Child { part, why };
    let scratch = Scratch::new()?;
    let (out, measured) = (scratch.0.join("callgrind.out"), scratch.0.join("measured.json"));
    let exe = std::env::current_exe()?;
    let ran = Command::new("valgrind")
        .args(CALLGRIND)
        .arg(format!("--callgrind-out-file={}", out.display()))
        .arg(exe)
        .arg("bench")
        .args(args)
        .args(["--collect", part.name()])
        .arg("--measured")
        .arg(&measured)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()?;
    if stop.load(Ordering::Relaxed) {
        return Err(BenchError::Interrupted);
    }
    if !ran.status.success() {
        let text = String::from_utf8_lossy(&ran.stderr);
        let last = text.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("no output");
        return Err(fail(format!("{} ({})", last.trim(), ran.status)).into());
    }
    let text =
        std::fs::read_to_string(&out).map_err(|e| fail(format!("{}: {e}", out.display())))?;
    let counts = parse_callgrind(&text).map_err(fail)?;
    let json = std::fs::read_to_string(&measured)
        .map_err(|e| fail(format!("{}: {e}", measured.display())))?;
    let m = serde_json::from_str(&json).map_err(|e| fail(format!("its measures: {e}")))?;
    Ok((counts, m))
}

/// What a Callgrind output file counted in all: its `events:` line names
/// the columns of its `totals:` (or `summary:`) line, whose trailing zeros
/// may be left out.
pub fn parse_callgrind(text: &str) -> Result<Counts, String> {
    let field = |key: &str| text.lines().find_map(|l| l.strip_prefix(key));
    let events: Vec<&str> = field("events:").ok_or("no events line")?.split_whitespace().collect();
    let totals = field("totals:").or_else(|| field("summary:")).ok_or("no totals line")?;
    let totals: Vec<u64> = totals
        .split_whitespace()
        .map(|v| v.parse().map_err(|_| format!("{v:?} is not a count")))
        .collect::<Result<_, _>>()?;
    let get = |name: &str| -> Result<f64, String> {
        let i = events.iter().position(|e| *e == name).ok_or(format!("no {name} event"))?;
        Ok(totals.get(i).copied().unwrap_or(0) as f64)
    };
    let accesses = get("Ir")? + get("Dr")? + get("Dw")?;
    let l1 = get("I1mr")? + get("D1mr")? + get("D1mw")?;
    let ll = get("ILmr")? + get("DLmr")? + get("DLmw")?;
    Ok(Counts {
        instructions: get("Ir")?,
        data_reads: get("Dr")?,
        data_writes: get("Dw")?,
        l1_misses: l1,
        ll_misses: ll,
        branch_misses: get("Bcm")? + get("Bim")?,
        est_cycles: (accesses - l1) + 5.0 * (l1 - ll) + 35.0 * ll,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_callgrind_file_gives_its_totals_by_event_name() {
        let text = "version: 1\ncreator: callgrind-3.19.0\n\
            events: Ir Dr Dw I1mr D1mr D1mw ILmr DLmr DLmw Bc Bcm Bi Bim\n\
            fl=(1) x.rs\nfn=(1) f\n3 10 2\n\
            summary: 1000 300 200 10 20 5 1 4 2 150 7 30 3\ntotals: 1000 300 200 10 20 5 1 4 2 150 7 30 3\n";
        let c = parse_callgrind(text).unwrap();
        assert_eq!((c.instructions, c.data_reads, c.data_writes), (1000.0, 300.0, 200.0));
        assert_eq!((c.l1_misses, c.ll_misses, c.branch_misses), (35.0, 7.0, 10.0));
        // 1500 accesses: 1465 first-level hits, 28 last-level hits, 7 from memory.
        assert_eq!(c.est_cycles, 1465.0 + 5.0 * 28.0 + 35.0 * 7.0);
    }

    #[test]
    fn trailing_zeros_left_out_count_as_zero_and_garbage_is_refused() {
        let text = "events: Ir Dr Dw I1mr D1mr D1mw ILmr DLmr DLmw Bc Bcm Bi Bim\ntotals: 0\n";
        assert_eq!(parse_callgrind(text).unwrap(), Counts::default());
        assert!(parse_callgrind("totals: 5\n").is_err(), "no events line");
        let text = "events: Ir Dr\ntotals: 5 x\n";
        assert!(parse_callgrind(text).unwrap_err().contains("not a count"));
        let text = "events: Ir\ntotals: 5\n";
        assert!(parse_callgrind(text).unwrap_err().contains("no Dr event"));
    }
}
