//! An in-process Ethernet wire: two ends joined by two frame queues,
//! usable across threads. A full queue pushes back (`transmit` returns
//! `None`, and smoltcp keeps its data) instead of dropping. Frame buffers
//! are recycled, so a frame costs no allocation.
//!
//! The queues are lock-free: with host and controller on two threads, a
//! mutex around them was contended on every frame and its futex calls cost
//! more than the protocol work. Threads meet only when one sleeps, and a
//! sleeper is woken once, when what it waits for has happened.
//!
//! Each frame travels with its smoltcp `PacketMeta`, so a wire also serves
//! as the descriptor ring between a NIC and its host: the NIC's receive
//! metadata (what it placed) reaches the stack with the frame. One thread
//! may sleep on two ends at once ([`Medium::wait_with`]), as a NIC serving
//! its host ring and its port does.

use crate::Medium;
use crossbeam_queue::ArrayQueue;
use smoltcp::phy::{self, Device, DeviceCapabilities, PacketMeta};
use smoltcp::time::{Duration, Instant};
use std::cell::{Cell, RefCell};
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering, fence};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::Thread;

/// Frames and bytes that crossed one direction of the wire.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WireStats {
    pub frames: u64,
    pub bytes: u64,
}

/// A frame in flight: its buffer (reused, so possibly longer), its length
/// and its metadata.
struct Frame {
    buf: Vec<u8>,
    len: usize,
    meta: PacketMeta,
}

/// One direction of the wire.
struct Lane {
    /// Room for replies beyond the capacity `transmit` keeps to: see
    /// [`WireEnd::receive`].
    frames: ArrayQueue<Frame>,
    /// Buffers of frames received, for the sender to reuse. They cross in
    /// batches, as a driver's page pool recycles them, because a buffer
    /// handed across one by one costs a cache-line transfer each time.
    free: Mutex<Vec<Vec<u8>>>,
    sent_frames: AtomicU64,
    sent_bytes: AtomicU64,
}

impl Lane {
    fn new(capacity: usize) -> Self {
        Self {
            frames: ArrayQueue::new(capacity * 4),
            free: Mutex::new(Vec::new()),
            sent_frames: AtomicU64::new(0),
            sent_bytes: AtomicU64::new(0),
        }
    }

    fn stats(&self) -> WireStats {
        WireStats {
            frames: self.sent_frames.load(Ordering::Relaxed),
            bytes: self.sent_bytes.load(Ordering::Relaxed),
        }
    }
}

/// What an end sleeps for in [`Medium::wait`].
const AWAKE: u8 = 0;
/// Until a frame arrives.
const SLEEP_RX: u8 = 1;
/// Until a frame arrives or its full outgoing lane drains to half.
const SLEEP_RX_OR_ROOM: u8 = 2;

/// How a sleeping end is woken.
#[derive(Clone)]
pub(crate) enum Wake {
    /// The sleeping thread is parked.
    Thread(Thread),
    /// The sleeping thread polls this eventfd (with other descriptors).
    EventFd(Arc<OwnedFd>),
}

impl Wake {
    fn ring(&self) {
        match self {
            Wake::Thread(t) => t.unpark(),
            Wake::EventFd(fd) => {
                let one = 1u64.to_ne_bytes();
                // SAFETY: an 8-byte write to an eventfd we hold open.
                unsafe { libc::write(fd.as_raw_fd(), one.as_ptr().cast(), one.len()) };
            }
        }
    }
}

/// Rings from any thread, for work done off the sleeping thread.
impl std::task::Wake for Wake {
    fn wake(self: Arc<Self>) {
        self.ring()
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.ring()
    }
}

/// One end's side of sleeping and waking.
#[derive(Default)]
struct Sleeper {
    state: AtomicU8,
    wake: Mutex<Option<Wake>>,
    /// A transmit was refused since this end last slept.
    refused: AtomicBool,
}

impl Sleeper {
    /// Wake the end if it sleeps in `state` (one of `from`).
    fn wake(&self, from: &[u8]) {
        let s = self.state.load(Ordering::SeqCst);
        if from.contains(&s)
            && self.state.compare_exchange(s, AWAKE, Ordering::SeqCst, Ordering::SeqCst).is_ok()
            && let Some(w) = &*self.wake.lock().unwrap_or_else(PoisonError::into_inner)
        {
            w.ring();
        }
    }
}

struct Shared {
    /// Lane `i` carries frames towards end `i`.
    lanes: [Lane; 2],
    /// `sleepers[i]` is end `i`'s.
    sleepers: [Sleeper; 2],
    capacity: usize,
    /// What the ends tell their stacks: the MTU, and the checksums and
    /// segmentation the stacks leave to the device.
    caps: DeviceCapabilities,
}

impl Shared {
    /// A frame was queued towards `end`: wake it if it sleeps. The fence
    /// pairs with the sleeper's, so either it sees the frame or we see it
    /// asleep.
    fn arrived(&self, end: usize) {
        fence(Ordering::SeqCst);
        self.sleepers[end].wake(&[SLEEP_RX, SLEEP_RX_OR_ROOM]);
    }

    /// `end` took a frame off its lane: wake the sender if it waits for room
    /// and half the lane is free again. Waking it on every freed slot would
    /// cost a context switch per frame; a NIC driver restarts a stopped
    /// queue only once enough descriptors are free for the same reason.
    fn drained(&self, end: usize) {
        fence(Ordering::SeqCst);
        let sender = &self.sleepers[1 - end];
        if sender.state.load(Ordering::SeqCst) == SLEEP_RX_OR_ROOM
            && self.lanes[end].frames.len() <= self.capacity / 2
        {
            sender.wake(&[SLEEP_RX_OR_ROOM]);
        }
    }
}

/// Constructor of wire pairs.
pub struct VirtualWire;

impl VirtualWire {
    /// A wire for Ethernet frames of up to `mtu` bytes (IP MTU + 14), each
    /// direction holding at most `capacity` frames in flight.
    pub fn pair(mtu: usize, capacity: usize) -> (WireEnd, WireEnd) {
        let mut caps = DeviceCapabilities::default();
        caps.medium = phy::Medium::Ethernet;
        caps.max_transmission_unit = mtu;
        Self::with_caps(caps, capacity)
    }

    /// A pair whose ends tell their stacks what a NIC takes care of
    /// (checksums, segmentation) and how large a frame may be, from the
    /// NIC's own `caps`: the ring between a NIC and its host. Each frame
    /// keeps its metadata on the way (a TSO segment's size).
    pub fn ring(caps: &DeviceCapabilities, capacity: usize) -> (WireEnd, WireEnd) {
        Self::with_caps(caps.clone(), capacity)
    }

    fn with_caps(caps: DeviceCapabilities, capacity: usize) -> (WireEnd, WireEnd) {
        let capacity = capacity.max(1);
        let shared = Arc::new(Shared {
            lanes: [Lane::new(capacity), Lane::new(capacity)],
            sleepers: Default::default(),
            capacity,
            caps,
        });
        let end = |shared, side| WireEnd {
            shared,
            side,
            used: RefCell::default(),
            spare: RefCell::default(),
            unsignalled: Cell::new(0),
        };
        (end(shared.clone(), 0), end(shared, 1))
    }
}

/// Buffers moved between an end and a lane's free pool at a time.
const RECYCLE_BATCH: usize = 32;
/// Frames sent before the peer is signalled without a flush.
const WAKE_BATCH: usize = 16;

/// One end of a [`VirtualWire`].
pub struct WireEnd {
    shared: Arc<Shared>,
    side: usize,
    /// Buffers of frames received, not yet handed back to the sender.
    used: RefCell<Vec<Vec<u8>>>,
    /// Buffers taken from the free pool, to send in.
    spare: RefCell<Vec<Vec<u8>>>,
    /// Frames sent since the peer was last signalled.
    unsignalled: Cell<usize>,
}

impl WireEnd {
    /// Frames and bytes this end has received.
    pub fn rx_stats(&self) -> WireStats {
        self.shared.lanes[self.side].stats()
    }

    /// Frames and bytes this end has sent.
    pub fn tx_stats(&self) -> WireStats {
        self.shared.lanes[1 - self.side].stats()
    }

    /// Frames waiting to be received at this end.
    pub fn queued(&self) -> usize {
        self.shared.lanes[self.side].frames.len()
    }

    /// A buffer to send in: one the peer handed back, or a new one.
    #[inline(always)]
    fn spare(&self) -> Vec<u8> {
        let mut spare = self.spare.borrow_mut();
        if spare.is_empty() {
            let pool = &self.shared.lanes[1 - self.side].free;
            std::mem::swap(&mut *spare, &mut *pool.lock().unwrap_or_else(PoisonError::into_inner));
        }
        spare.pop().unwrap_or_default()
    }

    /// Hand the buffer of a frame received back to the sender, in batches.
    #[inline(always)]
    fn recycle(&self, buf: Vec<u8>) {
        let mut used = self.used.borrow_mut();
        used.push(buf);
        if used.len() >= RECYCLE_BATCH {
            let pool = &self.shared.lanes[self.side].free;
            pool.lock().unwrap_or_else(PoisonError::into_inner).append(&mut used);
        }
    }

    /// Signal the peer about frames sent since the last signal.
    pub fn flush(&self) {
        if self.unsignalled.replace(0) > 0 {
            self.shared.arrived(1 - self.side);
        }
    }
}

pub struct RxToken<'a> {
    end: &'a WireEnd,
    frame: Frame,
}

pub struct TxToken<'a> {
    end: &'a WireEnd,
    meta: PacketMeta,
}

impl phy::RxToken for RxToken<'_> {
    fn meta(&self) -> PacketMeta {
        self.frame.meta
    }

    fn consume<R, F: FnOnce(&[u8]) -> R>(self, f: F) -> R {
        let r = f(&self.frame.buf[..self.frame.len]);
        self.end.recycle(self.frame.buf);
        r
    }
}

impl phy::TxToken for TxToken<'_> {
    fn set_meta(&mut self, meta: PacketMeta) {
        self.meta = meta;
    }

    fn consume<R, F: FnOnce(&mut [u8]) -> R>(self, len: usize, f: F) -> R {
        let mut buf = self.end.spare();
        // Reused buffers are not zeroed: the stack writes every byte. A
        // buffer only grows, so it is zeroed once, when it first does.
        if buf.len() < len {
            buf.resize(len, 0);
        }
        let r = f(&mut buf[..len]);
        self.send(buf, len);
        r
    }
}

impl TxToken<'_> {
    /// Send a frame `f` writes into a buffer of the lane's (from its start,
    /// growing it as it needs) and measures, with the metadata it gives;
    /// nothing if it gives none. For a sender that fills the buffer from
    /// elsewhere without knowing the frame's length first: a NIC whose
    /// port reads it there.
    pub fn fill(mut self, f: impl FnOnce(&mut Vec<u8>) -> Option<(usize, PacketMeta)>) -> bool {
        let mut buf = self.end.spare();
        match f(&mut buf) {
            Some((len, meta)) => {
                self.meta = meta;
                self.send(buf, len);
                true
            }
            None => {
                self.end.spare.borrow_mut().push(buf);
                false
            }
        }
    }

    /// Queue `buf[..len]` towards the peer.
    #[inline(always)]
    fn send(self, buf: Vec<u8>, len: usize) {
        let lane = &self.end.shared.lanes[1 - self.end.side];
        // Only replies can find the lane past its capacity, and never by
        // more than the capacity again; were it ever full, the frame would
        // be lost on the wire like any other, for TCP to recover.
        if lane.frames.push(Frame { buf, len, meta: self.meta }).is_ok() {
            lane.sent_frames.fetch_add(1, Ordering::Relaxed);
            lane.sent_bytes.fetch_add(len as u64, Ordering::Relaxed);
        }
        // Signal the peer once per burst, as a driver rings its doorbell
        // once per batch of descriptors (`xmit_more`): at a flush, before
        // this end sleeps, or every few frames of a long burst. A wake-up
        // per frame would cost a context switch per frame.
        let n = self.end.unsignalled.get() + 1;
        if n >= WAKE_BATCH.min(self.end.shared.capacity / 2).max(1) {
            self.end.flush();
        } else {
            self.end.unsignalled.set(n);
        }
    }
}

impl Device for WireEnd {
    type RxToken<'a> = RxToken<'a>;
    type TxToken<'a> = TxToken<'a>;

    fn receive(&mut self, _now: Instant) -> Option<(RxToken<'_>, TxToken<'_>)> {
        let frame = self.shared.lanes[self.side].frames.pop()?;
        self.shared.drained(self.side);
        // The reply token may exceed the queue's capacity by the one frame a
        // received frame can provoke; refusing it could deadlock both ends.
        let reply = TxToken { end: self, meta: PacketMeta::default() };
        Some((RxToken { end: self, frame }, reply))
    }

    fn transmit(&mut self, _now: Instant) -> Option<TxToken<'_>> {
        let full = self.shared.lanes[1 - self.side].frames.len() >= self.shared.capacity;
        if full {
            self.shared.sleepers[self.side].refused.store(true, Ordering::Relaxed);
        }
        (!full).then_some(TxToken { end: self, meta: PacketMeta::default() })
    }

    fn capabilities(&self) -> DeviceCapabilities {
        self.shared.caps.clone()
    }
}

impl WireEnd {
    /// Say that this end's thread is about to sleep, to be woken by `wake`
    /// when a frame arrives (or, after a refused transmit, when the lane
    /// out drains to half). Returns true, and arms nothing, if there is no
    /// need to sleep. Every `arm` is followed by a [`disarm`](Self::disarm).
    pub(crate) fn arm(&self, wake: &Wake) -> bool {
        self.flush();
        let shared = &*self.shared;
        let me = &shared.sleepers[self.side];
        let refused = me.refused.swap(false, Ordering::Relaxed);
        let ready = || {
            !shared.lanes[self.side].frames.is_empty()
                || (refused && shared.lanes[1 - self.side].frames.len() <= shared.capacity / 2)
        };
        if ready() {
            return true;
        }
        *me.wake.lock().unwrap_or_else(PoisonError::into_inner) = Some(wake.clone());
        me.state.store(if refused { SLEEP_RX_OR_ROOM } else { SLEEP_RX }, Ordering::SeqCst);
        // Pairs with the waker's fence: a frame queued before we said we
        // sleep is seen here.
        fence(Ordering::SeqCst);
        ready()
    }

    /// This end's thread is awake again.
    pub(crate) fn disarm(&self) {
        self.shared.sleepers[self.side].state.store(AWAKE, Ordering::SeqCst);
    }
}

fn park(timeout: Option<Duration>) {
    let t = timeout.map_or(std::time::Duration::from_millis(100), |t| {
        std::time::Duration::from_micros(t.total_micros())
    });
    std::thread::park_timeout(t);
}

impl Drop for WireEnd {
    fn drop(&mut self) {
        self.flush();
    }
}

impl Medium for WireEnd {
    fn flush(&self) {
        WireEnd::flush(self)
    }

    /// Unparks the thread that asks, which is the one that waits.
    fn waker(&self) -> std::task::Waker {
        Arc::new(Wake::Thread(std::thread::current())).into()
    }

    fn wait(&self, timeout: Option<Duration>) {
        if !self.arm(&Wake::Thread(std::thread::current())) {
            park(timeout);
        }
        self.disarm();
    }

    fn wait_with(&self, also: &WireEnd, timeout: Option<Duration>) {
        let wake = Wake::Thread(std::thread::current());
        if !self.arm(&wake) && !also.arm(&wake) {
            park(timeout);
        }
        self.disarm();
        also.disarm();
    }

    /// The frame's own buffer, traded for `buf`, which goes back to the
    /// sender in its place: no copy.
    fn receive_into(&mut self, _now: Instant, buf: &mut Vec<u8>) -> Option<(usize, PacketMeta)> {
        let mut frame = self.shared.lanes[self.side].frames.pop()?;
        self.shared.drained(self.side);
        std::mem::swap(buf, &mut frame.buf);
        self.recycle(frame.buf);
        Some((frame.len, frame.meta))
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

    #[test]
    fn a_blocked_sender_wakes_when_half_the_lane_is_free() {
        let (mut a, mut b) = VirtualWire::pair(1514, 8);
        let now = Instant::from_millis(0);
        let woke = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = woke.clone();
        let t = std::thread::spawn(move || {
            while let Some(tx) = a.transmit(now) {
                tx.consume(60, |buf| buf.fill(1));
            }
            a.wait(Some(Duration::from_secs(10)));
            flag.store(true, std::sync::atomic::Ordering::SeqCst);
        });
        while b.queued() < 8 {
            std::thread::yield_now();
        }
        // Let the sender fall asleep, then free one slot: not enough.
        std::thread::sleep(std::time::Duration::from_millis(50));
        b.receive(now).unwrap().0.consume(|_| ());
        std::thread::sleep(std::time::Duration::from_millis(50));
        assert!(!woke.load(std::sync::atomic::Ordering::SeqCst), "woken with one slot free");
        for _ in 0..3 {
            b.receive(now).unwrap().0.consume(|_| ());
        }
        let start = std::time::Instant::now();
        t.join().unwrap();
        assert!(start.elapsed() < std::time::Duration::from_secs(5), "not woken at half");
    }
}
