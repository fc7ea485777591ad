//! The progress line of `host io` and `demo` (fio's `--eta`), and Ctrl-C
//! and SIGTERM, which end a run early with the results so far.
//!
//! It shows progress; it must never change what a run does, other than
//! stopping it when asked to.

use anyhow::{Context, Result};
use nvme_ddp::app::{Progress, Watch};
use nvme_ddp::report::{human_bytes, human_count};
use std::io::IsTerminal;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// When to show the progress line, as fio's `--eta`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Eta {
    /// On a terminal only.
    Auto,
    /// Always, as plain lines once a second when stderr is not a terminal.
    Always,
    Never,
}

/// The flag Ctrl-C (SIGINT) or SIGTERM sets, the same one however often
/// asked for. A second signal, once the first has been seen, exits at
/// once: the user has waited long enough.
pub(crate) fn interrupt_flag() -> Result<Arc<AtomicBool>> {
    // Held while the handler is installed: threads asking at once (the
    // jobs of `io --jobs`) install it once.
    static FLAG: Mutex<Option<Arc<AtomicBool>>> = Mutex::new(None);
    let mut installed = FLAG.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(flag) = installed.as_ref() {
        return Ok(flag.clone());
    }
    let stop = Arc::new(AtomicBool::new(false));
    let flag = stop.clone();
    let mut first: Option<Instant> = None;
    ctrlc::set_handler(move || {
        flag.store(true, Ordering::Relaxed);
        // One signal may come twice at once (timeout(1) sends it to the
        // process and to its group): a second is the user's only later.
        match first {
            None => first = Some(Instant::now()),
            Some(t) if t.elapsed() >= Duration::from_millis(100) => {
                eprintln!("error: interrupted again; exiting without waiting");
                std::process::exit(130);
            }
            Some(_) => {}
        }
    })
    .context("cannot install the Ctrl-C handler")?;
    Ok(installed.insert(stop).clone())
}

/// Draw progress on stderr.
pub(crate) fn watch(eta: Eta) -> Option<Watch> {
    let tty = std::io::stderr().is_terminal();
    if !(eta == Eta::Always || (eta == Eta::Auto && tty)) {
        return None;
    }
    // Cleared however the run ends, Ctrl-C included.
    let bar = indicatif::ProgressBar::new(1000).with_finish(indicatif::ProgressFinish::AndClear);
    bar.set_style(
        indicatif::ProgressStyle::with_template("{bar:30} {percent:>3}%  {msg}, ETA {eta}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    let mut last_line: Option<Instant> = None;
    Some(Box::new(move |p: &Progress| {
        let msg = line(p);
        bar.set_position((p.done * 1000.0) as u64);
        if tty {
            bar.set_message(msg);
        } else if last_line.is_none_or(|t| t.elapsed() >= Duration::from_secs(1)) {
            last_line = Some(Instant::now());
            let left = bar.eta().as_secs();
            eprintln!("{:>3.0}%  {msg}, ETA {}:{:02}", p.done * 100.0, left / 60, left % 60);
        }
        if p.done >= 1.0 {
            bar.finish_and_clear();
        }
    }))
}

/// What an interrupted run's results are of.
pub(crate) fn so_far(abandoned: u64) -> String {
    match abandoned {
        0 => "the results above are of what ran till then".into(),
        n => format!(
            "the results above are of what ran till then, without the {n} I/O{} still in flight",
            if n == 1 { "" } else { "s" },
        ),
    }
}

fn line(p: &Progress) -> String {
    if p.reconnecting {
        return format!("{} ({} of {}): association lost, reconnecting", p.rw, p.phase, p.phases);
    }
    format!(
        "{} ({} of {}): {} IOPS, {}/s",
        p.rw,
        p.phase,
        p.phases,
        human_count(p.stats.iops),
        human_bytes(p.stats.bytes_per_sec)
    )
}

/// CPU time this process has used, user and system.
pub(crate) fn cpu_times() -> (Duration, Duration) {
    // SAFETY: getrusage only writes the struct it is given.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) };
    let t = |tv: libc::timeval| {
        Duration::from_secs(tv.tv_sec as u64) + Duration::from_micros(tv.tv_usec as u64)
    };
    (t(u.ru_utime), t(u.ru_stime))
}
