//! One bench job's host app: warm up with every read checked, meet the
//! run's other jobs, measure one workload window, then shut down.

use crate::app::HostApp;
use crate::bench::clocks::{Clocks, Mark};
use crate::bench::error::BenchError;
use crate::bench::point::Measures;
use crate::workload::{Limit, Workload, WorkloadSpec};
use hdrhistogram::Histogram;
use nic_backend::NicHandle;
use nvme_of::host::{Host, HostEvent};
use std::sync::atomic::{AtomicUsize, Ordering};

pub(super) enum Phase {
    Warmup(Workload),
    /// Warmed up, waiting for the other jobs to be.
    Waiting(Workload),
    Measure(Workload, Box<Mark>),
    Over,
}

/// Where the jobs of a run meet between warm-up and measurement, so that
/// they measure at the same time; a job that fails opens it for good, and
/// the others give up.
pub(super) struct Gate {
    jobs: usize,
    arrived: AtomicUsize,
    /// The first job that failed (`usize::MAX`: none).
    broken: AtomicUsize,
}

impl Gate {
    pub(super) fn new(jobs: usize) -> Self {
        Self { jobs, arrived: AtomicUsize::new(0), broken: AtomicUsize::new(usize::MAX) }
    }

    fn arrive(&self) {
        self.arrived.fetch_add(1, Ordering::AcqRel);
    }

    fn is_open(&self) -> bool {
        self.arrived.load(Ordering::Acquire) >= self.jobs
    }

    fn is_broken(&self) -> bool {
        self.first_broken().is_some()
    }

    pub(super) fn first_broken(&self) -> Option<usize> {
        Some(self.broken.load(Ordering::Acquire)).filter(|&j| j != usize::MAX)
    }

    /// Job `job` failed.
    pub(super) fn breaks(&self, job: usize) {
        let _ = self.broken.compare_exchange(usize::MAX, job, Ordering::AcqRel, Ordering::Acquire);
    }
}

/// What one job's measured phase did.
pub(super) struct Sample {
    pub measures: Measures,
    pub ios: u64,
    pub latencies: Histogram<u64>,
}

/// Warm up, wait for the run's other jobs, then measure one workload,
/// then shut down.
pub(super) struct BenchApp<'a> {
    pub nic: NicHandle,
    pub clocks: &'a Clocks,
    pub gate: &'a Gate,
    pub spec: WorkloadSpec,
    pub warmup: Limit,
    pub phase: Phase,
    pub sample: Option<Sample>,
    /// Bytes the warm-up verified.
    pub verified: u64,
    pub error: Option<String>,
    pub done: bool,
}

impl BenchApp<'_> {
    fn pump(&mut self, host: &mut Host, now: nvme_of::Instant) {
        let w = match &mut self.phase {
            Phase::Warmup(w) | Phase::Measure(w, _) => w,
            Phase::Waiting(_) => return self.measure(host, now),
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
                self.verified = w.stats().verified_bytes;
                self.gate.arrive();
                self.phase = Phase::Waiting(w);
                self.measure(host, now);
            }
            Phase::Measure(w, start) => {
                self.clocks.close();
                let end = Mark::take(host, &self.nic, self.clocks);
                if let Some(e) = w.first_error() {
                    self.error.get_or_insert(e.to_string());
                }
                let verified_bytes = self.verified as f64;
                let stats = w.stats();
                self.sample = Some(Sample {
                    measures: Measures {
                        verified_bytes,
                        ..Measures::between(&stats, &start, &end)
                    },
                    ios: stats.ios,
                    latencies: w.latencies(),
                });
                host.shutdown(now);
            }
            Phase::Waiting(_) | Phase::Over => {}
        }
    }

    /// Start measuring once every job of the run has warmed up.
    fn measure(&mut self, host: &mut Host, now: nvme_of::Instant) {
        if self.gate.is_broken() {
            self.error.get_or_insert(BenchError::OtherJob.to_string());
            self.phase = Phase::Over;
            return host.shutdown(now);
        }
        if !self.gate.is_open() {
            return;
        }
        let Phase::Waiting(warmup) = std::mem::replace(&mut self.phase, Phase::Over) else {
            return;
        };
        // With the warm-up's buffers: the window allocates none.
        match Workload::after(self.spec.clone(), host, warmup) {
            Ok(m) => {
                let mark = Mark::take(host, &self.nic, self.clocks);
                self.clocks.open();
                self.phase = Phase::Measure(m, Box::new(mark));
                self.pump(host, now);
            }
            Err(e) => {
                self.error.get_or_insert(e.to_string());
                self.phase = Phase::Over;
                host.shutdown(now);
            }
        }
    }
}

impl HostApp for BenchApp<'_> {
    fn on_event(&mut self, host: &mut Host, event: HostEvent, now: nvme_of::Instant) {
        match event {
            // The warm-up checks every block it reads against the pattern
            // the namespace holds, under the same impairments and offloads
            // as the measurement, which pays for no check.
            HostEvent::Ready => match Workload::new(
                WorkloadSpec { limit: self.warmup, verify: true, ..self.spec.clone() },
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
