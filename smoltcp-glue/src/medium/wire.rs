//! An in-process Ethernet wire: two ends joined by two bounded frame
//! queues, usable across threads. A full queue pushes back (`transmit`
//! returns `None`, and smoltcp keeps its data) instead of dropping.
//! Frame buffers are recycled, so a frame costs no allocation.

use crate::Medium;
use smoltcp::phy::{self, Device, DeviceCapabilities};
use smoltcp::time::{Duration, Instant};
use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};

/// Frames and bytes that crossed one direction of the wire.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WireStats {
    pub frames: u64,
    pub bytes: u64,
}

#[derive(Default)]
struct Lane {
    frames: VecDeque<Vec<u8>>,
    stats: WireStats,
}

#[derive(Default)]
struct State {
    /// Lane `i` carries frames towards end `i`.
    lanes: [Lane; 2],
    free: Vec<Vec<u8>>,
    /// Threads blocked in `wait`: only then is a wake-up (a syscall) needed.
    waiters: usize,
}

struct Shared {
    state: Mutex<State>,
    changed: Condvar,
    mtu: usize,
    capacity: usize,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Release the lock, waking waiters if there are any. Waiters register
    /// under the same lock before sleeping, so no wake-up is lost.
    fn release(&self, state: MutexGuard<'_, State>) {
        let wake = state.waiters > 0;
        drop(state);
        if wake {
            self.changed.notify_all();
        }
    }
}

/// Constructor of wire pairs.
pub struct VirtualWire;

impl VirtualWire {
    /// A wire for Ethernet frames of up to `mtu` bytes (IP MTU + 14), each
    /// direction holding at most `capacity` frames in flight.
    pub fn pair(mtu: usize, capacity: usize) -> (WireEnd, WireEnd) {
        let shared = Arc::new(Shared {
            state: Mutex::new(State::default()),
            changed: Condvar::new(),
            mtu,
            capacity: capacity.max(1),
        });
        (WireEnd { shared: shared.clone(), side: 0 }, WireEnd { shared, side: 1 })
    }
}

/// One end of a [`VirtualWire`].
pub struct WireEnd {
    shared: Arc<Shared>,
    side: usize,
}

impl WireEnd {
    /// Frames and bytes this end has received.
    pub fn rx_stats(&self) -> WireStats {
        self.shared.lock().lanes[self.side].stats
    }

    /// Frames and bytes this end has sent.
    pub fn tx_stats(&self) -> WireStats {
        self.shared.lock().lanes[1 - self.side].stats
    }

    /// Frames waiting to be received at this end.
    pub fn queued(&self) -> usize {
        self.shared.lock().lanes[self.side].frames.len()
    }
}

pub struct RxToken<'a> {
    end: &'a WireEnd,
    frame: Vec<u8>,
}

pub struct TxToken<'a> {
    end: &'a WireEnd,
}

impl phy::RxToken for RxToken<'_> {
    fn consume<R, F: FnOnce(&[u8]) -> R>(self, f: F) -> R {
        let r = f(&self.frame);
        let mut state = self.end.shared.lock();
        state.free.push(self.frame);
        self.end.shared.release(state);
        r
    }
}

impl phy::TxToken for TxToken<'_> {
    fn consume<R, F: FnOnce(&mut [u8]) -> R>(self, len: usize, f: F) -> R {
        let shared = &self.end.shared;
        let mut buf = shared.lock().free.pop().unwrap_or_default();
        // Reused buffers are not zeroed: the stack writes every byte.
        if buf.len() < len {
            buf.resize(len, 0);
        } else {
            buf.truncate(len);
        }
        let r = f(&mut buf);
        let mut state = shared.lock();
        let lane = &mut state.lanes[1 - self.end.side];
        lane.stats.frames += 1;
        lane.stats.bytes += len as u64;
        lane.frames.push_back(buf);
        shared.release(state);
        r
    }
}

impl Device for WireEnd {
    type RxToken<'a> = RxToken<'a>;
    type TxToken<'a> = TxToken<'a>;

    fn receive(&mut self, _now: Instant) -> Option<(RxToken<'_>, TxToken<'_>)> {
        let frame = self.shared.lock().lanes[self.side].frames.pop_front()?;
        // The reply token may exceed the queue's capacity by the one frame a
        // received frame can provoke; refusing it could deadlock both ends.
        Some((RxToken { end: self, frame }, TxToken { end: self }))
    }

    fn transmit(&mut self, _now: Instant) -> Option<TxToken<'_>> {
        let full = self.shared.lock().lanes[1 - self.side].frames.len() >= self.shared.capacity;
        (!full).then_some(TxToken { end: self })
    }

    fn capabilities(&self) -> DeviceCapabilities {
        let mut caps = DeviceCapabilities::default();
        caps.medium = phy::Medium::Ethernet;
        caps.max_transmission_unit = self.shared.mtu;
        caps
    }
}

impl Medium for WireEnd {
    fn wait(&self, timeout: Option<Duration>) {
        let mut state = self.shared.lock();
        if !state.lanes[self.side].frames.is_empty() {
            return;
        }
        let t = timeout.map_or(std::time::Duration::from_millis(100), |t| {
            std::time::Duration::from_micros(t.total_micros())
        });
        // Any change (a frame for us, or room freed on our way out) wakes us.
        state.waiters += 1;
        let (mut state, _) =
            self.shared.changed.wait_timeout(state, t).unwrap_or_else(PoisonError::into_inner);
        state.waiters -= 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use smoltcp::phy::{RxToken as _, TxToken as _};

    #[test]
    fn frames_cross_and_full_queues_push_back() {
        let (mut a, mut b) = VirtualWire::pair(1514, 2);
        let now = Instant::from_millis(0);
        for i in 0..2u8 {
            a.transmit(now).unwrap().consume(60, |buf| buf.fill(i));
        }
        assert!(a.transmit(now).is_none(), "third frame pushes back");
        let (rx, _) = b.receive(now).unwrap();
        assert_eq!(rx.consume(|f| f.to_vec()), vec![0; 60]);
        assert!(a.transmit(now).is_some(), "room again");
        assert_eq!(a.tx_stats(), WireStats { frames: 2, bytes: 120 });
        assert_eq!(b.rx_stats(), WireStats { frames: 2, bytes: 120 });
        let (rx, _) = b.receive(now).unwrap();
        assert_eq!(rx.consume(|f| f[0]), 1);
        assert!(b.receive(now).is_none());
    }

    #[test]
    fn wait_wakes_on_a_frame_from_another_thread() {
        let (mut a, b) = VirtualWire::pair(1514, 8);
        let t = std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(20));
            a.transmit(Instant::from_millis(0)).unwrap().consume(60, |buf| buf.fill(7));
        });
        let start = std::time::Instant::now();
        while b.queued() == 0 {
            b.wait(Some(Duration::from_secs(5)));
        }
        assert!(start.elapsed() < std::time::Duration::from_secs(5));
        t.join().unwrap();
    }
}
