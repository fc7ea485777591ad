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
use std::sync::mpsc::{self, Receiver, Sender};
use std::time::Duration;
use tracing::warn;

/// One set: its I/O queues, the app that runs on them, and the CPU its
/// thread is pinned to, if any.
pub struct QueueSet<'a> {
    pub qids: Vec<u16>,
    pub app: &'a mut (dyn HostApp + Send),
    pub cpu: Option<usize>,
}

/// What a set's thread did: its host (its counters, its recovery) and the
/// CPU time of its thread.
pub struct SetRun {
    pub host: Host,
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
    /// A set's app is done.
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

/// Run `host`'s association over kernel TCP connections to `addr`, its
/// I/O queues in `sets`, each on a thread of its own running its app,
/// until every app is done; then shut the association down. Returns what
/// each set's thread did. Setting `stop` before the association is up
/// interrupts the apps (once it is, they watch it themselves).
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
    std::thread::scope(|scope| {
        let mut waiting: Vec<Option<QueueSet<'_>>> = sets.into_iter().map(Some).collect();
        let qids: Vec<Vec<u16>> = waiting.iter().flatten().map(|s| s.qids.clone()).collect();
        let mut workers: Vec<Worker> = Vec::new();
        let mut threads = Vec::new();
        let (mut done, mut shut, mut over) = (0, false, false);
        loop {
            let now = clock.now();
            if now.saturating_since(start) > limit {
                return Err(HostRunError::Timeout(limit));
            }
            if stop.load(Ordering::Relaxed) && workers.is_empty() && !over {
                for set in waiting.iter_mut().flatten() {
                    set.app.interrupt(host, now);
                }
                host.close(now);
            }
            socks.connect(addr, host, now)?;
            if host.poll_timeout().is_some_and(|t| now >= t) {
                host.handle_timeout(now);
            }
            socks.pump(host, now);
            while let Some(ev) = host.poll_event() {
                match ev {
                    HostEvent::Ready | HostEvent::Reconnected => {
                        for (i, qids) in qids.iter().enumerate() {
                            let Some(lent) = host.lend(qids) else { continue };
                            let sockets = socks.take(qids);
                            match workers.get(i) {
                                Some(w) => w.tell(ToSet::Adopt(Box::new(lent), sockets)),
                                None => {
                                    let Some(set) = waiting[i].take() else { continue };
                                    let (tx, rx) = mpsc::channel();
                                    let mut own = HostSockets::new().map_err(io)?;
                                    own.adopt(sockets).map_err(io)?;
                                    let wake = Arc::new(own.waker().map_err(io)?);
                                    workers.push(Worker { tx, waker: wake });
                                    let (to_us, us) = (from_tx.clone(), waker.clone());
                                    let run = move || {
                                        let run = run_set(lent, own, set, rx, &to_us, &us);
                                        // Done, however it ended.
                                        let _ = to_us.send(FromSet::Done);
                                        let _ = us.wake();
                                        run
                                    };
                                    let name = format!("queue set {i}");
                                    let thread = std::thread::Builder::new()
                                        .name(name)
                                        .spawn_scoped(scope, run)
                                        .map_err(io)?;
                                    threads.push(thread);
                                }
                            }
                        }
                    }
                    HostEvent::Reconnecting { error: Some(e), .. } => {
                        let which = host.association();
                        workers.iter().for_each(|w| w.tell(ToSet::Lost(e.clone(), which)));
                    }
                    HostEvent::Failed(e) => {
                        workers.iter().for_each(|w| w.tell(ToSet::Abandon(e.clone())));
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
            if !shut && !workers.is_empty() && done == workers.len() {
                host.shutdown(now);
                shut = true;
            }
            if over && done == workers.len() && socks.flushed() {
                socks.finish(host, now);
                break;
            }
            socks.wait(host, &clock)?;
        }
        drop(workers);
        threads.into_iter().map(|t| t.join().unwrap_or(Err(HostRunError::Panicked))).collect()
    })
}

/// A set's thread: drive its queues and its app until the app is done.
fn run_set(
    mut set: Host,
    mut socks: HostSockets,
    queues: QueueSet<'_>,
    news: Receiver<ToSet>,
    tell: &Sender<FromSet>,
    wake: &mio::Waker,
) -> Result<SetRun, HostRunError> {
    if let Some(cpu) = queues.cpu
        && let Err(e) = cpus::pin(cpu)
    {
        warn!(cpu, error = %e, "cannot pin a queue set's thread");
    }
    let app = queues.app;
    let clock = Clock::new();
    let told = |msg| {
        let _ = tell.send(msg);
        let _ = wake.wake();
    };
    loop {
        let now = clock.now();
        while let Ok(msg) = news.try_recv() {
            match msg {
                ToSet::Adopt(new, sockets) => {
                    socks.adopt(sockets).map_err(|error| HostRunError::Io { qid: 0, error })?;
                    set.adopt(*new, now);
                }
                ToSet::Lost(e, which) => set.fail_association(e, which, now),
                ToSet::Abandon(e) => set.abandon(e, now),
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
            return Ok(SetRun { host: set, cpu });
        }
        socks.wait(&set, &clock)?;
    }
}
