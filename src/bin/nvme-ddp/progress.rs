//! The progress line of `host io` and `demo` (fio's `--eta`), and Ctrl-C
//! and SIGTERM, which end a run early with the results so far.
//!
//! It shows progress; it must never change what a run does, other than
//! stopping it when asked to.

use anyhow::{Context, Result};
use nvme_ddp::app::{Progress, Watch};
use nvme_ddp::report::{human_bytes, human_count};
use std::io::IsTerminal;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
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

/// A flag that Ctrl-C (SIGINT) or SIGTERM sets.
pub(crate) fn interrupt_flag() -> Result<Arc<AtomicBool>> {
    let stop = Arc::new(AtomicBool::new(false));
    let flag = stop.clone();
    ctrlc::set_handler(move || flag.store(true, Ordering::Relaxed))
        .context("cannot install the Ctrl-C handler")?;
    Ok(stop)
}

/// Draw progress on stderr and stop the run once `stop` is set.
pub(crate) fn watch(eta: Eta, stop: Arc<AtomicBool>) -> Watch {
    let tty = std::io::stderr().is_terminal();
    let bar = (eta == Eta::Always || (eta == Eta::Auto && tty)).then(|| {
        let bar = indicatif::ProgressBar::new(1000);
        bar.set_style(
            indicatif::ProgressStyle::with_template("{bar:30} {percent:>3}%  {msg}, ETA {eta}")
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        bar
    });
    let mut last_line: Option<Instant> = None;
    Box::new(move |p: &Progress| {
        if let Some(bar) = &bar {
            let msg = line(p);
            bar.set_position((p.done * 1000.0) as u64);
            if tty {
                bar.set_message(msg);
            } else if last_line.is_none_or(|t| t.elapsed() >= Duration::from_secs(1)) {
                last_line = Some(Instant::now());
                let left = bar.eta().as_secs();
                eprintln!("{:>3.0}%  {msg}, ETA {}:{:02}", p.done * 100.0, left / 60, left % 60);
            }
            if p.done >= 1.0 || stop.load(Ordering::Relaxed) {
                bar.finish_and_clear();
            }
        }
        !stop.load(Ordering::Relaxed)
    })
}

fn line(p: &Progress) -> String {
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
