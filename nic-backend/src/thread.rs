//! The NIC on a thread of its own, as the device it models: it takes frames
//! off its port as they arrive, does its receive work (checksums,
//! placement, digests), and DMAs what is left into a descriptor ring the
//! host's stack reads; the other way it takes the frames the host posted,
//! fills in digests and checksums, and sends them.
//!
//! Its work is then CPU time of its own, read from the thread's CPU clock
//! and none of it lands on the host's threads: the host pays for what a
//! host with this NIC would pay for, the ring included.

use crate::OffloadNic;
use smoltcp::phy::Device;
use smoltcp::time::{Duration, Instant};
use smoltcp_glue::{Medium, VirtualWire, WireEnd};
use std::os::unix::thread::JoinHandleExt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;

/// Frames each way the descriptor ring holds.
const RING_FRAMES: usize = 256;
/// Frames moved one way before looking the other way.
const BUDGET: usize = 64;
/// Longest sleep, so that a stop is noticed.
const NAP: Duration = Duration::from_millis(20);

/// The NIC with its descriptor ring: what a thread of its own, or a
/// caller's loop, drives.
pub struct NicEngine<D> {
    nic: OffloadNic<D>,
    ring: WireEnd,
}

impl<D: Medium> NicEngine<D> {
    /// The engine around `nic`, and the host's end of its descriptor ring:
    /// the device the host's stack runs on.
    pub fn new(nic: OffloadNic<D>) -> (WireEnd, Self) {
        let caps = nic.capabilities();
        let (host, ring) = VirtualWire::ring(&caps, RING_FRAMES);
        (host, Self { nic, ring })
    }

    /// Move what can be moved each way, as the device does on its own;
    /// whether anything was.
    pub fn step(&mut self, now: Instant) -> bool {
        let (nic, ring) = (&mut self.nic, &mut self.ring);
        let mut progress = false;
        for _ in 0..BUDGET {
            let Some(slot) = ring.transmit(now) else { break };
            if !nic.receive_into(now, slot) {
                break;
            }
            progress = true;
        }
        for _ in 0..BUDGET {
            if ring.queued() == 0 {
                break;
            }
            let Some(mut out) = nic.transmit(now) else { break };
            let Some((posted, _)) = ring.receive(now) else { break };
            // A TSO segment keeps its segment size on the way down.
            smoltcp::phy::TxToken::set_meta(&mut out, smoltcp::phy::RxToken::meta(&posted));
            smoltcp::phy::RxToken::consume(posted, |frame| {
                smoltcp::phy::TxToken::consume(out, frame.len(), |buf| buf.copy_from_slice(frame))
            });
            progress = true;
        }
        ring.flush();
        nic.flush();
        progress
    }

    /// When the medium next needs a step on its own (a delayed frame).
    pub fn poll_at(&self) -> Option<Instant> {
        self.nic.poll_at()
    }

    /// Sleep until a frame arrives either way, or `timeout` passes.
    pub fn wait(&self, timeout: Option<Duration>) {
        self.nic.wait_with(&self.ring, timeout)
    }
}

/// A NIC running on its own thread until dropped.
pub struct NicThread {
    stop: Arc<AtomicBool>,
    join: Option<JoinHandle<()>>,
}

impl NicThread {
    /// Run `nic` on a new thread. Returns the host's end of its descriptor
    /// ring, the device the host's stack runs on.
    pub fn spawn<D: Medium + Send + 'static>(
        nic: OffloadNic<D>,
    ) -> std::io::Result<(WireEnd, NicThread)> {
        let (host, mut engine) = NicEngine::new(nic);
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let join = std::thread::Builder::new().name("nic".into()).spawn(move || {
            let start = std::time::Instant::now();
            while !flag.load(Ordering::Relaxed) {
                let now = Instant::from_micros(start.elapsed().as_micros() as i64);
                if !engine.step(now) {
                    let timeout = engine
                        .poll_at()
                        .map_or(NAP, |t| if t > now { (t - now).min(NAP) } else { Duration::ZERO });
                    if timeout > Duration::ZERO {
                        engine.wait(Some(timeout));
                    }
                }
            }
        })?;
        Ok((host, NicThread { stop, join: Some(join) }))
    }

    /// CPU time the NIC has used, in nanoseconds.
    pub fn cpu_ns(&self) -> u64 {
        self.join.as_ref().and_then(thread_cpu_ns).unwrap_or(0)
    }
}

/// CPU time a running thread has used, in nanoseconds (its
/// `pthread_getcpuclockid` clock). `None` if it cannot be read.
pub fn thread_cpu_ns<T>(thread: &JoinHandle<T>) -> Option<u64> {
    let mut clock: libc::clockid_t = 0;
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: a handle not yet joined names a thread that still exists (a
    // finished one's clock still reads); both calls write only what we pass.
    let ok = unsafe {
        libc::pthread_getcpuclockid(thread.as_pthread_t(), &mut clock) == 0
            && libc::clock_gettime(clock, &mut ts) == 0
    };
    ok.then(|| ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64)
}

impl Drop for NicThread {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(join) = self.join.take() {
            join.thread().unpark();
            let _ = join.join();
        }
    }
}
