//! What a host run does once its association is up: identify, discover, or
//! run workloads. The same apps run over kernel TCP and over smoltcp; the
//! drivers only move bytes and time.
//!
//! Apps decide what a run does; they must never touch a socket, a device
//! or the clock (the driver hands them `now`).

use crate::report::RecoveryReport;
use crate::workload::{IoStats, Workload, WorkloadSpec};
use hdrhistogram::Histogram;
use nvme_of::Instant;
use nvme_of::host::{Host, HostError, HostEvent, NamespaceInfo};
use nvme_of::nvme::identify::IdentifyController;
use nvme_of::nvme::log::DiscoveryEntry;
use nvme_of::nvme::{Sqe, Status};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// A host-side program driven by a transport driver.
pub trait HostApp {
    /// React to a host event: submit more I/O, shut down, record results.
    fn on_event(&mut self, host: &mut Host, event: HostEvent, now: Instant);
    /// Called on every turn of the driver's loop.
    fn on_poll(&mut self, _host: &mut Host, _now: Instant) {}
    /// The run is over: the association closed or failed.
    fn is_done(&self) -> bool;
    /// Why the run failed, if it did.
    fn error(&self) -> Option<String>;
    /// The user asked to stop (Ctrl-C): end the run soon with what it did
    /// so far. By default the association ends at once.
    fn interrupt(&mut self, host: &mut Host, now: Instant) {
        host.close(now);
    }
}

/// An app that is interrupted once `stop` is set (by Ctrl-C, on another
/// thread); the flag is looked at on every turn of the driver's loop.
pub struct Stoppable<'a, A: HostApp + ?Sized = dyn HostApp> {
    app: &'a mut A,
    stop: &'a AtomicBool,
    /// The app was interrupted.
    pub stopped: bool,
}

impl<'a, A: HostApp + ?Sized> Stoppable<'a, A> {
    pub fn new(app: &'a mut A, stop: &'a AtomicBool) -> Self {
        Self { app, stop, stopped: false }
    }
}

impl<A: HostApp + ?Sized> HostApp for Stoppable<'_, A> {
    fn on_event(&mut self, host: &mut Host, event: HostEvent, now: Instant) {
        self.app.on_event(host, event, now);
    }

    fn on_poll(&mut self, host: &mut Host, now: Instant) {
        if !self.stopped && self.stop.load(Ordering::Relaxed) {
            self.stopped = true;
            self.app.interrupt(host, now);
        }
        self.app.on_poll(host, now);
    }

    fn is_done(&self) -> bool {
        self.app.is_done()
    }

    fn error(&self) -> Option<String> {
        self.app.error()
    }

    fn interrupt(&mut self, host: &mut Host, now: Instant) {
        self.stopped = true;
        self.app.interrupt(host, now);
    }
}

/// Bring up, read the controller's identity and namespaces, run admin
/// commands (Identify, Get Log Page) one after another, shut down.
#[derive(Default)]
pub struct AdminApp {
    pub controller: Option<IdentifyController>,
    pub namespaces: Vec<NamespaceInfo>,
    pub io_queues: u16,
    pub queue_depth: usize,
    pub version: u32,
    /// The commands to run, chosen once the controller is known.
    plan: Option<Plan>,
    /// Each command still to run and the bytes it reads.
    commands: VecDeque<(Sqe, usize)>,
    /// Each command's status and the data it returned, in order.
    pub replies: Vec<(Status, Vec<u8>)>,
    done: bool,
    error: Option<String>,
}

/// Chooses an [`AdminApp`]'s commands, and the bytes each reads, from what
/// bring-up found (the namespaces, the controller's identity).
pub type Plan = Box<dyn FnOnce(&Host) -> Vec<(Sqe, usize)> + Send>;

impl AdminApp {
    pub fn new(plan: impl FnOnce(&Host) -> Vec<(Sqe, usize)> + Send + 'static) -> Self {
        Self { plan: Some(Box::new(plan)), ..Self::default() }
    }

    /// Submit the next command, or shut down after the last.
    fn next(&mut self, host: &mut Host, now: Instant) {
        let Some((sqe, len)) = self.commands.pop_front() else { return host.shutdown(now) };
        if let Err(e) = host.submit_admin(sqe, len, self.replies.len() as u64, now) {
            self.error = Some(format!("admin command {:#04x}: {e}", sqe.opcode));
            host.shutdown(now);
        }
    }
}

impl HostApp for AdminApp {
    fn on_event(&mut self, host: &mut Host, event: HostEvent, now: Instant) {
        match event {
            HostEvent::Ready => {
                self.controller = host.controller().cloned();
                self.namespaces = host.namespaces().to_vec();
                self.io_queues = host.io_queues();
                self.queue_depth = host.queue_depth();
                self.version = host.version();
                self.commands = self.plan.take().map(|plan| plan(host)).unwrap_or_default().into();
                self.next(host, now);
            }
            HostEvent::Completion { qid: 0, status, buf, .. } => {
                self.replies.push((status, buf.map(|b| b.to_vec()).unwrap_or_default()));
                self.next(host, now);
            }
            HostEvent::Closed => self.done = true,
            HostEvent::Failed(e) => {
                self.error.get_or_insert_with(|| e.to_string());
                self.done = true;
            }
            _ => {}
        }
    }

    fn is_done(&self) -> bool {
        self.done
    }

    fn error(&self) -> Option<String> {
        self.error.clone()
    }
}

/// Read the discovery log of a discovery controller.
#[derive(Default)]
pub struct DiscoverApp {
    pub entries: Option<Vec<DiscoveryEntry>>,
    /// The log's generation counter.
    pub genctr: u64,
    done: bool,
    error: Option<HostError>,
}

impl HostApp for DiscoverApp {
    fn on_event(&mut self, host: &mut Host, event: HostEvent, _now: Instant) {
        match event {
            HostEvent::Discovered(e) => {
                self.entries = Some(e);
                self.genctr = host.discovery_genctr();
            }
            HostEvent::Closed => self.done = true,
            HostEvent::Failed(e) => {
                self.error = Some(e);
                self.done = true;
            }
            _ => {}
        }
    }

    fn is_done(&self) -> bool {
        self.done
    }

    fn error(&self) -> Option<String> {
        self.error.as_ref().map(ToString::to_string)
    }
}

/// Where an I/O run stands.
#[derive(Debug, Clone)]
pub struct Progress {
    /// The phase running (1-based), of how many.
    pub phase: usize,
    pub phases: usize,
    pub rw: &'static str,
    /// The share of the phase's bytes or time spent, 0 to 1.
    pub done: f64,
    /// What the phase did so far.
    pub stats: IoStats,
    /// The association is lost and the host is making it again: no I/O
    /// moves meanwhile.
    pub reconnecting: bool,
}

/// Called with the progress about ten times a second.
pub type Watch = Box<dyn FnMut(&Progress) + Send>;

/// Run workloads one after another (a write pass, then a verified read
/// pass, say), then shut down.
pub struct IoApp {
    phases: VecDeque<WorkloadSpec>,
    watch: Option<Watch>,
    next_watch: Instant,
    /// The run was interrupted: the results are of what ran till then.
    pub interrupted: bool,
    /// After an interrupt, when I/O still in flight is given up on.
    give_up_at: Option<Instant>,
    /// I/Os given up on in flight, when an interrupted run could not wait.
    pub abandoned: u64,
    current: Option<Workload>,
    pub results: Vec<(WorkloadSpec, IoStats)>,
    /// Each phase's latencies of reads and of writes, to be merged with
    /// other jobs'.
    pub latencies: Vec<[Histogram<u64>; 2]>,
    pub namespace: Option<NamespaceInfo>,
    pub io_queues: u16,
    pub queue_depth: usize,
    /// What the host's error recovery did so far.
    pub recovery: RecoveryReport,
    /// Since when the association has been lost, and the last attempt's
    /// error, while the host makes it again.
    lost: Option<(Instant, Option<String>)>,
    done: bool,
    error: Option<String>,
}

impl IoApp {
    pub fn new(phases: impl IntoIterator<Item = WorkloadSpec>) -> Self {
        Self {
            phases: phases.into_iter().collect(),
            watch: None,
            next_watch: Instant::ZERO,
            interrupted: false,
            give_up_at: None,
            abandoned: 0,
            current: None,
            results: Vec::new(),
            latencies: Vec::new(),
            namespace: None,
            io_queues: 0,
            queue_depth: 0,
            recovery: RecoveryReport::default(),
            lost: None,
            done: false,
            error: None,
        }
    }

    /// Call `watch` about ten times a second with the progress made.
    pub fn with_watch(mut self, watch: Watch) -> Self {
        self.watch = Some(watch);
        self
    }

    /// How far the run is, for a progress line.
    pub fn progress(&self, now: Instant) -> Option<Progress> {
        let w = self.current.as_ref()?;
        Some(Progress {
            phase: self.results.len() + 1,
            phases: self.results.len() + 1 + self.phases.len(),
            rw: w.spec().rw.name(),
            done: w.done_fraction(now),
            stats: w.stats(),
            reconnecting: self.lost.is_some(),
        })
    }

    /// How long an interrupted run waits for the I/O in flight before it
    /// gives up on it: well within the second a user waits after Ctrl-C.
    pub const GRACE: Duration = Duration::from_millis(500);

    /// End the phase running with what it did so far; what is in flight
    /// is left out.
    fn end_phase(&mut self) {
        if let Some(w) = self.current.take() {
            self.abandoned += w.in_flight() as u64;
            self.record(&w);
        }
    }

    /// What phase `w` did.
    fn record(&mut self, w: &Workload) {
        self.results.push((w.spec().clone(), w.stats()));
        self.latencies.push(w.latencies_by_kind().clone());
    }

    /// End the run now: the phase running ends as it stands and the
    /// association goes without waiting on the controller.
    fn end_now(&mut self, host: &mut Host, now: Instant) {
        self.end_phase();
        self.phases.clear();
        host.close(now);
    }
    fn fail(&mut self, host: &mut Host, why: String, now: Instant) {
        self.error.get_or_insert(why);
        host.shutdown(now);
    }

    /// Start the next phase, or shut down when there is none.
    fn next_phase(&mut self, host: &mut Host, now: Instant) {
        if let Some(w) = self.current.take() {
            if let Some(e) = w.first_error() {
                self.error.get_or_insert_with(|| e.to_string());
            }
            self.record(&w);
        }
        if self.error.is_some() {
            return host.shutdown(now);
        }
        match self.phases.pop_front() {
            Some(spec) => match Workload::new(spec, host) {
                Ok(w) => {
                    self.current = Some(w);
                    self.pump(host, now);
                }
                Err(e) => self.fail(host, e.to_string(), now),
            },
            None => host.shutdown(now),
        }
    }

    /// A timed run ends at its time, as fio's runtime does, even with the
    /// association lost and the host still making it again; having done
    /// no I/O since, it did not do what was asked, and says why.
    fn time_up_without_association(&mut self, host: &mut Host, now: Instant) {
        let Some((since, last)) = &self.lost else { return };
        let Some(w) = self.current.as_ref().filter(|w| w.time_is_up(now)) else { return };
        let (n, lost_for) = (w.in_flight(), now.saturating_since(*since).as_secs_f64());
        let mut why = format!(
            "the run's time was up with no association, lost for its last {lost_for:.1} s; \
             {n} I/O{} in flight given up",
            if n == 1 { "" } else { "s" }
        );
        if let Some(last) = last {
            why += &format!(" (the last error: {last})");
        }
        self.error.get_or_insert(why);
        self.end_now(host, now);
    }

    fn pump(&mut self, host: &mut Host, now: Instant) {
        let Some(w) = &mut self.current else { return };
        if let Err(e) = w.fill(host, now) {
            return self.fail(host, format!("submit failed: {e}"), now);
        }
        if w.done(now) {
            self.next_phase(host, now);
        }
    }
}

impl HostApp for IoApp {
    fn on_event(&mut self, host: &mut Host, event: HostEvent, now: Instant) {
        self.recovery = host.recovery().into();
        match event {
            HostEvent::Ready => {
                self.namespace = host.namespaces().first().copied();
                self.io_queues = host.io_queues();
                self.queue_depth = host.queue_depth();
                self.next_phase(host, now);
            }
            HostEvent::Completion { tag, status, .. } => {
                if let Some(w) = &mut self.current {
                    w.complete(tag, status, now);
                }
                self.pump(host, now);
            }
            HostEvent::Closed => {
                // Closed under a phase that was neither finished, failed
                // nor interrupted: the run did not do what was asked.
                if self.error.is_none() && !self.interrupted && self.current.is_some() {
                    self.error = Some("the association closed before the run finished".into());
                    self.end_phase();
                }
                self.done = true;
            }
            HostEvent::Failed(e) => {
                // The association's failure is the cause; the I/O that
                // failed with it, if any, the consequence.
                let running = self.current.as_ref().and_then(Workload::first_error);
                let io = running.map(str::to_owned).or(self.error.take());
                self.end_phase();
                self.error = Some(match io {
                    Some(io) => format!("{e}; the I/O in flight failed with it ({io})"),
                    None => e.to_string(),
                });
                self.done = true;
            }
            // Commands that did not complete are the host's to submit
            // again; new ones wait until the association is back.
            HostEvent::Reconnected => {
                self.lost = None;
                self.pump(host, now);
            }
            HostEvent::Reconnecting { error, .. } => {
                let since = self.lost.take().map_or(now, |(t, _)| t);
                self.lost = Some((since, error.map(|e| e.to_string())));
            }
            HostEvent::Discovered(_) | HostEvent::AsyncEvent(_) => {}
        }
    }

    fn on_poll(&mut self, host: &mut Host, now: Instant) {
        if self.give_up_at.is_some_and(|t| now >= t) && !self.done {
            self.give_up_at = None;
            self.end_now(host, now);
        }
        self.time_up_without_association(host, now);
        self.pump(host, now);
        if now >= self.next_watch
            && let Some(progress) = self.progress(now)
            && let Some(watch) = &mut self.watch
        {
            self.next_watch = now + Duration::from_millis(100);
            watch(&progress);
        }
    }

    /// Stop issuing I/O: the phase running ends once what is in flight
    /// completes, or after [`Self::GRACE`] without it, and the phases
    /// after it are dropped. Without an association (connecting, or
    /// reconnecting after a loss) the run ends at once.
    fn interrupt(&mut self, host: &mut Host, now: Instant) {
        self.interrupted = true;
        self.phases.clear();
        match &mut self.current {
            Some(w) if host.is_ready() => {
                w.stop();
                self.give_up_at = Some(now + Self::GRACE);
                self.pump(host, now);
            }
            _ => self.end_now(host, now),
        }
    }

    fn is_done(&self) -> bool {
        self.done
    }

    fn error(&self) -> Option<String> {
        self.error.clone()
    }
}
