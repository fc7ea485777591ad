//! A host whose I/O queues run in sets over kernel TCP, a thread each (as
//! Linux runs each I/O queue's work on its `io_cpu`): this thread keeps the
//! admin queue, keep alive and recovery; each set's thread its queues'
//! sockets, command tables and app.
//!
//! The association comes up here with every queue connected; the I/O
//! queues are then lent ([`Host::lend`]) with their sockets to the sets'
//! threads. News goes both ways by channel, each waking the other's poll:
//! a set's trouble to this thread (which makes a new association), a lost
//! or failed association to the sets, and a new association's queues to
//! them.

use super::{HostRunError, HostSockets, Pipe};
use crate::app::HostApp;
use crate::driver::clock::Clock;
use crate::driver::cpus;
use mio::net::TcpStream;
use nvme_of::host::{Host, HostError, HostEvent};
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, Sender, TryRecvError};
use std::time::Duration;
use tracing::warn;

/// One set: the app that runs on its I/O queues, and the CPU its thread
/// is pinned to, if any. The queues are dealt out at each association.
pub struct QueueSet<'a> {
    pub app: &'a mut (dyn HostApp + Send),
    pub cpu: Option<usize>,
}

/// What a set's thread did: its host (its counters, its recovery), the
/// I/O queues it had last, and the CPU time of its thread.
pub struct SetRun {
    pub host: Host,
    pub qids: Vec<u16>,
    pub cpu: Duration,
}

/// What a set's thread hears.
enum ToSet {
    /// The queues of a new association, with their sockets.
    Adopt(Box<Host>, Vec<(u16, TcpStream, Pipe)>),
    /// Association `which` was lost.
    Lost(HostError, u64),
    /// The association failed for good.
    Abandon(HostError),
}

/// What the association's thread hears.
enum FromSet {
    /// A set lost a queue of association `which`.
    Trouble(HostError, u64),
    /// A set's thread is done (its app finished, or it failed).
    Done,
}

/// A set's thread, as the association's thread reaches it.
struct Worker {
    tx: Sender<ToSet>,
    waker: Arc<mio::Waker>,
}

impl Worker {
    fn tell(&self, msg: ToSet) {
        // A thread that has ended hears nothing, and needs to.
        if self.tx.send(msg).is_ok()
            && let Err(e) = self.waker.wake()
        {
            warn!(error = %e, "cannot wake a queue set's thread");
        }
    }
}

/// Says a set's thread is done when it ends, however it ends (a panic
/// too), so that the association's thread never waits for it in vain.
struct DoneGuard {
    tx: Sender<FromSet>,
    waker: Arc<mio::Waker>,
}

impl Drop for DoneGuard {
    fn drop(&mut self) {
        let _ = self.tx.send(FromSet::Done);
        let _ = self.waker.wake();
    }
}

/// Deal `qids` round robin into `n` sets; None if some set would get none.
fn deal(qids: &[u16], n: usize) -> Option<Vec<Vec<u16>>> {
    (qids.len() >= n && n > 0)
        .then(|| (0..n).map(|i| qids.iter().copied().skip(i).step_by(n).collect()).collect())
}

/// Run `host`'s association over kernel TCP connections to `addr`, its
/// I/O queues dealt round robin into `sets`, each on a thread of its own
/// running its app, until every app is done; then shut the association
/// down. Returns what each set's thread did. Setting `stop` before the
/// association is up interrupts the apps (once it is, they watch it
/// themselves). An association with fewer I/O queues than sets fails the
/// run.
pub fn run_host_sets(
    addr: SocketAddr,
    host: &mut Host,
    sets: Vec<QueueSet<'_>>,
    stop: &AtomicBool,
    limit: Duration,
) -> Result<Vec<SetRun>, HostRunError> {
    let io = |error| HostRunError::Io { qid: 0, error };
    let clock = Clock::new();
    let mut socks = HostSockets::new().map_err(io)?;
    let waker = Arc::new(socks.waker().map_err(io)?);
    let (from_tx, from_rx) = mpsc::channel();
    let start = clock.now();
    let n = sets.len();
    std::thread::scope(|scope| {
        let mut waiting: Vec<Option<QueueSet<'_>>> = sets.into_iter().map(Some).collect();
        let mut workers: Vec<Option<Worker>> = (0..n).map(|_| None).collect();
        let mut threads = Vec::new();
        let (mut done, mut shut, mut over) = (0, false, false);
        let mut failure = None;
        let run = loop {
            let now = clock.now();
            if now.saturating_since(start) > limit {
                break Err(HostRunError::Timeout(limit));
            }
            if stop.load(Ordering::Relaxed) && threads.is_empty() && !over {
                for set in waiting.iter_mut().flatten() {
                    set.app.interrupt(host, now);
                }
                host.close(now);
            }
            if let Err(e) = socks.connect(addr, host, now) {
                break Err(e);
            }
            if host.poll_timeout().is_some_and(|t| now >= t) {
                host.handle_timeout(now);
            }
            socks.pump(host, now);
            while let Some(ev) = host.poll_event() {
                match ev {
                    HostEvent::Ready | HostEvent::Reconnected => {
                        let Some(dealt) = deal(&host.io_qids(), n) else {
                            let (granted, sets) = (host.io_queues(), n);
                            let e = HostRunError::TooFewQueues { granted, sets };
                            let why = HostError::Incompatible(e.to_string());
                            workers
                                .iter()
                                .flatten()
                                .for_each(|w| w.tell(ToSet::Abandon(why.clone())));
                            failure = Some(e);
                            host.close(now);
                            continue;
                        };
                        for (i, qids) in dealt.iter().enumerate() {
                            let Some(lent) = host.lend(qids) else { continue };
                            let sockets = socks.take(qids);
                            if let Some(w) = &workers[i] {
                                w.tell(ToSet::Adopt(Box::new(lent), sockets));
                                continue;
                            }
                            let Some(set) = waiting[i].take() else { continue };
                            match start_set(scope, i, lent, sockets, set, clock, &from_tx, &waker) {
                                Ok((worker, thread)) => {
                                    workers[i] = Some(worker);
                                    threads.push(thread);
                                }
                                Err(e) => failure = Some(e),
                            }
                        }
                    }
                    HostEvent::Reconnecting { error: Some(e), .. } => {
                        let which = host.association();
                        for w in workers.iter().flatten() {
                            w.tell(ToSet::Lost(e.clone(), which));
                        }
                    }
                    HostEvent::Failed(e) => {
                        workers.iter().flatten().for_each(|w| w.tell(ToSet::Abandon(e.clone())));
                        // Sets that never started hear of it here.
                        for set in waiting.iter_mut().flatten() {
                            set.app.on_event(host, HostEvent::Failed(e.clone()), now);
                        }
                        over = true;
                    }
                    HostEvent::Closed => {
                        for set in waiting.iter_mut().flatten() {
                            set.app.on_event(host, HostEvent::Closed, now);
                        }
                        over = true;
                    }
                    _ => {}
                }
            }
            while let Ok(news) = from_rx.try_recv() {
                match news {
                    FromSet::Trouble(e, which) => host.fail_association(e, which, now),
                    FromSet::Done => done += 1,
                }
            }
            // The I/O queues go first (the sets close them), then the
            // association, as Linux deletes its I/O queues before CC.SHN.
            if !shut && !threads.is_empty() && done == threads.len() {
                host.shutdown(now);
                shut = true;
            }
            if over && done == threads.len() && socks.flushed() {
                socks.finish(host, now);
                break Ok(());
            }
            if let Err(e) = socks.wait(host, &clock) {
                break Err(e);
            }
        };
        // The sets' threads end when they hear nothing more (a failure
        // here drops the channels) or their apps are done.
        drop(workers);
        let runs: Vec<_> =
            threads.into_iter().map(|t| t.join().unwrap_or(Err(HostRunError::Panicked))).collect();
        run?;
        if let Some(e) = failure {
            return Err(e);
        }
        runs.into_iter().collect()
    })
}

/// Start set `i`'s thread on the queues `lent` and their sockets.
#[allow(clippy::too_many_arguments)]
fn start_set<'scope, 'env>(
    scope: &'scope std::thread::Scope<'scope, 'env>,
    i: usize,
    lent: Host,
    sockets: Vec<(u16, TcpStream, Pipe)>,
    set: QueueSet<'env>,
    clock: Clock,
    tell: &Sender<FromSet>,
    wake: &Arc<mio::Waker>,
) -> Result<
    (Worker, std::thread::ScopedJoinHandle<'scope, Result<SetRun, HostRunError>>),
    HostRunError,
> {
    let io = |error| HostRunError::Io { qid: 0, error };
    let (tx, rx) = mpsc::channel();
    let mut own = HostSockets::new().map_err(io)?;
    own.adopt(sockets).map_err(io)?;
    let worker = Worker { tx, waker: Arc::new(own.waker().map_err(io)?) };
    let guard = DoneGuard { tx: tell.clone(), waker: wake.clone() };
    let (to_us, us) = (tell.clone(), wake.clone());
    let run = move || {
        let _done = guard;
        run_set(lent, own, set, rx, &to_us, &us, clock)
    };
    let thread = std::thread::Builder::new()
        .name(format!("queue set {i}"))
        .spawn_scoped(scope, run)
        .map_err(io)?;
    Ok((worker, thread))
}

/// A set's thread: drive its queues and its app until the app is done, or
/// the association's thread is gone.
fn run_set(
    mut set: Host,
    mut socks: HostSockets,
    queues: QueueSet<'_>,
    news: Receiver<ToSet>,
    tell: &Sender<FromSet>,
    wake: &mio::Waker,
    clock: Clock,
) -> Result<SetRun, HostRunError> {
    if let Some(cpu) = queues.cpu
        && let Err(e) = cpus::pin(cpu)
    {
        warn!(cpu, error = %e, "cannot pin a queue set's thread");
    }
    let app = queues.app;
    let mut qids = set.io_qids();
    let told = |msg| {
        let _ = tell.send(msg);
        let _ = wake.wake();
    };
    let mut orphaned = false;
    loop {
        let now = clock.now();
        loop {
            match news.try_recv() {
                Ok(ToSet::Adopt(new, sockets)) => {
                    socks.adopt(sockets).map_err(|error| HostRunError::Io { qid: 0, error })?;
                    set.adopt(*new, now);
                    qids = set.io_qids();
                }
                Ok(ToSet::Lost(e, which)) => set.fail_association(e, which, now),
                Ok(ToSet::Abandon(e)) => set.abandon(e, now),
                Err(TryRecvError::Empty) => break,
                Err(TryRecvError::Disconnected) => {
                    // The association's thread ended: nothing more comes.
                    if !orphaned {
                        orphaned = true;
                        set.close(now);
                    }
                    break;
                }
            }
        }
        if set.poll_timeout().is_some_and(|t| now >= t) {
            set.handle_timeout(now);
        }
        socks.pump(&mut set, now);
        while let Some(ev) = set.poll_event() {
            if let HostEvent::Reconnecting { error: Some(e), .. } = &ev {
                told(FromSet::Trouble(e.clone(), set.association()));
            }
            app.on_event(&mut set, ev, now);
        }
        app.on_poll(&mut set, now);
        if app.is_done() && socks.flushed() {
            socks.finish(&mut set, now);
            let cpu = Duration::from_nanos(cpus::cpu_ns(libc::CLOCK_THREAD_CPUTIME_ID));
            return Ok(SetRun { host: set, qids, cpu });
        }
        socks.wait(&set, &clock)?;
    }
}

#[cfg(test)]
mod tests {
    use super::deal;

    #[test]
    fn queues_are_dealt_round_robin_and_never_to_no_set() {
        assert_eq!(deal(&[1, 2, 3, 4, 5], 2), Some(vec![vec![1, 3, 5], vec![2, 4]]));
        assert_eq!(deal(&[1, 2], 2), Some(vec![vec![1], vec![2]]));
        assert_eq!(deal(&[1], 2), None, "a set with no queue cannot do its part");
        assert_eq!(deal(&[1, 2], 0), None);
    }
}
