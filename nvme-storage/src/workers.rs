//! Threads that run blocking storage calls off the poll loop.

use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};

type Job = Box<dyn FnOnce() + Send>;

/// Up to `depth` threads taking jobs in order, so that as many blocking
/// calls run at once as there are I/Os in flight, up to `depth`. Threads
/// start when jobs outnumber idle threads and stay for later jobs; they
/// end once the pool is dropped and the queue is empty.
pub struct Workers {
    shared: Arc<Shared>,
    depth: usize,
}

struct Shared {
    state: Mutex<State>,
    work: Condvar,
}

#[derive(Default)]
struct State {
    jobs: VecDeque<Job>,
    threads: usize,
    idle: usize,
    closed: bool,
}

impl Workers {
    /// A pool of at most `depth` threads (at least one).
    pub fn new(depth: usize) -> Self {
        let shared = Arc::new(Shared { state: Mutex::default(), work: Condvar::new() });
        Self { shared, depth: depth.max(1) }
    }

    /// Most jobs that run at once.
    pub fn depth(&self) -> usize {
        self.depth
    }

    /// Threads started so far.
    pub fn threads(&self) -> usize {
        self.shared.lock().threads
    }

    /// Run `job` on a worker thread.
    pub fn run(&self, job: impl FnOnce() + Send + 'static) {
        let mut s = self.shared.lock();
        s.jobs.push_back(Box::new(job));
        if s.jobs.len() > s.idle && s.threads < self.depth {
            let shared = self.shared.clone();
            let spawned = std::thread::Builder::new()
                .name("nvme-storage".into())
                .spawn(move || shared.serve());
            match spawned {
                Ok(_) => s.threads += 1,
                // Fewer threads only means fewer I/Os at once; with none,
                // the job runs here rather than never.
                Err(e) if s.threads == 0 => {
                    tracing::warn!(error = %e, "cannot start a storage thread; I/O runs inline");
                    let job = s.jobs.pop_back();
                    drop(s);
                    if let Some(job) = job {
                        job();
                    }
                    return;
                }
                Err(e) => tracing::debug!(error = %e, "cannot start another storage thread"),
            }
        }
        drop(s);
        self.shared.work.notify_one();
    }
}

impl Drop for Workers {
    fn drop(&mut self) {
        self.shared.lock().closed = true;
        self.shared.work.notify_all();
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn serve(&self) {
        let mut s = self.lock();
        loop {
            if let Some(job) = s.jobs.pop_front() {
                drop(s);
                job();
                s = self.lock();
            } else if s.closed {
                s.threads -= 1;
                return;
            } else {
                s.idle += 1;
                s = self.work.wait(s).unwrap_or_else(PoisonError::into_inner);
                s.idle -= 1;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Barrier;
    use std::sync::mpsc;
    use std::time::Duration;

    #[test]
    fn depth_jobs_run_at_once_and_no_more_threads_start() {
        // Each job waits for all four: they finish only if four run at once.
        let pool = Workers::new(4);
        let barrier = Arc::new(Barrier::new(4));
        let (tx, rx) = mpsc::channel();
        for i in 0..4 {
            let (barrier, tx) = (barrier.clone(), tx.clone());
            pool.run(move || {
                barrier.wait();
                tx.send(i).unwrap();
            });
        }
        let mut got: Vec<i32> =
            (0..4).map(|_| rx.recv_timeout(Duration::from_secs(60)).unwrap()).collect();
        got.sort();
        assert_eq!(got, [0, 1, 2, 3]);
        // Later jobs reuse the threads.
        for i in 0..16 {
            let tx = tx.clone();
            pool.run(move || tx.send(i).unwrap());
        }
        for _ in 0..16 {
            rx.recv_timeout(Duration::from_secs(60)).unwrap();
        }
        assert_eq!(pool.threads(), 4);
    }

    #[test]
    fn queued_jobs_still_run_after_the_pool_is_dropped() {
        let pool = Workers::new(1);
        let (tx, rx) = mpsc::channel();
        for i in 0..8 {
            let tx = tx.clone();
            pool.run(move || tx.send(i).unwrap());
        }
        drop(pool);
        let got: Vec<i32> =
            (0..8).map(|_| rx.recv_timeout(Duration::from_secs(60)).unwrap()).collect();
        assert_eq!(got, (0..8).collect::<Vec<_>>());
    }
}
