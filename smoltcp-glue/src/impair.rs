//! Seeded impairments on frames, each direction on its own: loss,
//! corruption, duplication, bounded reordering and delay.
//!
//! Frames are held in a queue ordered by release time, so delay and
//! reordering work in simulated time as in real time: a reordered frame is
//! held back by at most the reorder window, and the frames behind it
//! overtake it. Corruption flips one bit past the Ethernet header, which the
//! IP or TCP checksum catches, as on a real link.

use crate::{Medium, WireEnd};
use smoltcp::phy::{self, Device, DeviceCapabilities, PacketMeta, RxToken as _, TxToken as _};
use smoltcp::time::{Duration, Instant};
use std::collections::BTreeMap;

/// What happens to frames going one way.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Profile {
    /// Chance a frame is lost.
    pub loss: f64,
    /// Chance a frame is held back and overtaken.
    pub reorder: f64,
    /// Chance a frame arrives twice.
    pub duplicate: f64,
    /// Chance one bit of a frame flips.
    pub corrupt: f64,
    /// Added to every frame's travel time.
    pub delay: Duration,
    /// Up to this much more, uniformly.
    pub jitter: Duration,
}

impl Profile {
    pub fn is_clean(&self) -> bool {
        *self == Profile::default()
    }
}

/// What the impairments did to one direction.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ImpairStats {
    pub frames: u64,
    pub dropped: u64,
    pub corrupted: u64,
    pub duplicated: u64,
    pub reordered: u64,
}

/// How long a reordered frame is held back.
const REORDER_WINDOW: Duration = Duration::from_micros(500);
/// Frames a direction may hold before transmit pushes back.
const CAPACITY: usize = 4096;

#[derive(Default)]
pub struct Lane {
    profile: Profile,
    /// Frames by (release time in µs, arrival order).
    pending: BTreeMap<(i64, u64), Vec<u8>>,
    pool: Vec<Vec<u8>>,
    stats: ImpairStats,
}

/// A small seeded generator (xorshift64*), so runs repeat exactly.
pub struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Uniform in [0, 1).
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }

    fn chance(&mut self, p: f64) -> bool {
        p > 0.0 && self.unit() < p
    }
}

impl Lane {
    fn take_buf(&mut self) -> Vec<u8> {
        self.pool.pop().unwrap_or_default()
    }

    /// Decide a frame's fate and queue it (or not).
    fn admit(&mut self, mut frame: Vec<u8>, now: Instant, rng: &mut Rng, seq: &mut u64) {
        let p = self.profile;
        self.stats.frames += 1;
        if rng.chance(p.loss) {
            self.stats.dropped += 1;
            self.pool.push(frame);
            return;
        }
        if frame.len() > 14 && rng.chance(p.corrupt) {
            let at = 14 + (rng.next() % (frame.len() as u64 - 14)) as usize;
            frame[at] ^= 1 << (rng.next() % 8);
            self.stats.corrupted += 1;
        }
        let jitter = (p.jitter.total_micros() as f64 * rng.unit()) as u64;
        let mut release = now + p.delay + Duration::from_micros(jitter);
        if rng.chance(p.reorder) {
            release += REORDER_WINDOW;
            self.stats.reordered += 1;
        }
        if rng.chance(p.duplicate) {
            let mut copy = self.take_buf();
            copy.clear();
            copy.extend_from_slice(&frame);
            // The copy arrives right behind the original.
            self.pending.insert((release.total_micros(), *seq + 1), copy);
            self.stats.duplicated += 1;
        }
        self.pending.insert((release.total_micros(), *seq), frame);
        *seq += 2;
    }

    fn pop_due(&mut self, now: Instant) -> Option<Vec<u8>> {
        let (&key, _) = self.pending.first_key_value()?;
        (key.0 <= now.total_micros()).then(|| self.pending.remove(&key)).flatten()
    }

    fn next_release(&self) -> Option<Instant> {
        self.pending.first_key_value().map(|(&(t, _), _)| Instant::from_micros(t))
    }
}

/// A device decorator that impairs received (`rx`) and transmitted (`tx`)
/// frames independently.
pub struct Impairments<D> {
    inner: D,
    rx: Lane,
    tx: Lane,
    rng: Rng,
    seq: u64,
}

impl<D: Device> Impairments<D> {
    pub fn new(inner: D, rx: Profile, tx: Profile, seed: u64) -> Self {
        Self {
            inner,
            rx: Lane { profile: rx, ..Lane::default() },
            tx: Lane { profile: tx, ..Lane::default() },
            rng: Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1),
            seq: 0,
        }
    }

    /// What happened to received and to transmitted frames.
    pub fn stats(&self) -> (ImpairStats, ImpairStats) {
        (self.rx.stats, self.tx.stats)
    }

    pub fn get_ref(&self) -> &D {
        &self.inner
    }

    pub fn get_mut(&mut self) -> &mut D {
        &mut self.inner
    }

    fn pull(&mut self, now: Instant) {
        while let Some((token, _)) = self.inner.receive(now) {
            let mut buf = self.rx.take_buf();
            token.consume(|f| {
                buf.clear();
                buf.extend_from_slice(f);
            });
            self.rx.admit(buf, now, &mut self.rng, &mut self.seq);
        }
    }
}

/// Send every transmitted frame that is due, as far as `inner` takes them.
fn flush<D: Device>(inner: &mut D, tx: &mut Lane, now: Instant) {
    while tx.next_release().is_some_and(|t| t <= now) {
        let Some(token) = inner.transmit(now) else { return };
        if let Some(frame) = tx.pop_due(now) {
            token.consume(frame.len(), |b| b.copy_from_slice(&frame));
            tx.pool.push(frame);
        }
    }
}

/// A received frame: one the impairments held, or (when both directions
/// are clean) the inner device's own.
pub enum RxToken<'a, D: Device + 'a> {
    Held { frame: Vec<u8>, pool: &'a mut Vec<Vec<u8>> },
    Inner(D::RxToken<'a>),
}

/// A frame to send: through the impairments, or straight to the inner device.
pub enum TxToken<'a, D: Device + 'a> {
    Lane { inner: &'a mut D, lane: &'a mut Lane, rng: &'a mut Rng, seq: &'a mut u64, now: Instant },
    Inner(D::TxToken<'a>),
}

impl<D: Device> phy::RxToken for RxToken<'_, D> {
    fn consume<R, F: FnOnce(&[u8]) -> R>(self, f: F) -> R {
        match self {
            RxToken::Held { frame, pool } => {
                let r = f(&frame);
                pool.push(frame);
                r
            }
            RxToken::Inner(t) => t.consume(f),
        }
    }
}

impl<D: Device> phy::TxToken for TxToken<'_, D> {
    /// Passed on when no impairment holds the frame; a held frame goes
    /// down plain (a TSO segment among them is cut by the medium itself).
    fn set_meta(&mut self, meta: phy::PacketMeta) {
        if let TxToken::Inner(t) = self {
            t.set_meta(meta)
        }
    }

    fn consume<R, F: FnOnce(&mut [u8]) -> R>(self, len: usize, f: F) -> R {
        match self {
            TxToken::Lane { inner, lane, rng, seq, now } => {
                let mut buf = lane.take_buf();
                buf.resize(len, 0);
                buf.truncate(len);
                let r = f(&mut buf);
                lane.admit(buf, now, rng, seq);
                flush(inner, lane, now);
                r
            }
            TxToken::Inner(t) => t.consume(len, f),
        }
    }
}

impl<D: Device> Impairments<D> {
    fn clean(&self) -> bool {
        self.rx.profile.is_clean()
            && self.tx.profile.is_clean()
            && self.rx.pending.is_empty()
            && self.tx.pending.is_empty()
    }
}

impl<D: Device> Device for Impairments<D> {
    type RxToken<'a>
        = RxToken<'a, D>
    where
        Self: 'a;
    type TxToken<'a>
        = TxToken<'a, D>
    where
        Self: 'a;

    fn receive(&mut self, now: Instant) -> Option<(RxToken<'_, D>, TxToken<'_, D>)> {
        if self.clean() {
            let (rx, tx) = self.inner.receive(now)?;
            return Some((RxToken::Inner(rx), TxToken::Inner(tx)));
        }
        self.pull(now);
        flush(&mut self.inner, &mut self.tx, now);
        let frame = self.rx.pop_due(now)?;
        let Impairments { inner, rx, tx, rng, seq } = self;
        Some((
            RxToken::Held { frame, pool: &mut rx.pool },
            TxToken::Lane { inner, lane: tx, rng, seq, now },
        ))
    }

    fn transmit(&mut self, now: Instant) -> Option<TxToken<'_, D>> {
        if self.clean() {
            return self.inner.transmit(now).map(TxToken::Inner);
        }
        flush(&mut self.inner, &mut self.tx, now);
        if self.tx.pending.len() >= CAPACITY {
            return None;
        }
        let Impairments { inner, tx, rng, seq, .. } = self;
        Some(TxToken::Lane { inner, lane: tx, rng, seq, now })
    }

    fn capabilities(&self) -> DeviceCapabilities {
        self.inner.capabilities()
    }
}

impl<D> Impairments<D> {
    /// Held frames only move when polled: a sleep ends in time for them.
    fn timeout(&self, timeout: Option<Duration>) -> Option<Duration> {
        let own = [self.rx.next_release(), self.tx.next_release()].into_iter().flatten().min();
        match own {
            Some(_) => Some(timeout.map_or(REORDER_WINDOW, |t| t.min(REORDER_WINDOW))),
            None => timeout,
        }
    }
}

impl<D: Medium> Medium for Impairments<D> {
    fn poll_at(&self) -> Option<Instant> {
        [self.rx.next_release(), self.tx.next_release(), self.inner.poll_at()]
            .into_iter()
            .flatten()
            .min()
    }

    fn flush(&self) {
        self.inner.flush()
    }

    fn wait(&self, timeout: Option<Duration>) {
        self.inner.wait(self.timeout(timeout))
    }

    fn wait_with(&self, also: &WireEnd, timeout: Option<Duration>) {
        self.inner.wait_with(also, self.timeout(timeout))
    }

    fn waker(&self) -> std::task::Waker {
        self.inner.waker()
    }

    fn receive_into(&mut self, now: Instant, buf: &mut Vec<u8>) -> Option<(usize, PacketMeta)> {
        match self.clean() {
            true => self.inner.receive_into(now, buf),
            false => crate::medium::receive_copied(self, now, buf),
        }
    }

    fn transmit_from(&mut self, now: Instant, frame: &mut [u8], meta: PacketMeta) -> bool {
        match self.clean() {
            true => self.inner.transmit_from(now, frame, meta),
            false => crate::medium::transmit_copied(self, now, frame, meta),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::medium::wire::VirtualWire;

    fn send(dev: &mut impl Device, now: Instant, tag: u8) {
        dev.transmit(now).unwrap().consume(64, |b| b.fill(tag));
    }

    fn drain(dev: &mut impl Device, now: Instant) -> Vec<u8> {
        let mut got = Vec::new();
        while let Some((rx, _)) = dev.receive(now) {
            got.push(rx.consume(|f| f[20]));
        }
        got
    }

    #[test]
    fn clean_profile_passes_everything_in_order() {
        let (a, mut b) = VirtualWire::pair(1514, 64);
        let mut a = Impairments::new(a, Profile::default(), Profile::default(), 1);
        let now = Instant::from_millis(0);
        for i in 0..10 {
            send(&mut a, now, i);
        }
        assert_eq!(drain(&mut b, now), (0..10).collect::<Vec<_>>());
    }

    #[test]
    fn delay_holds_frames_until_due() {
        let (mut a, b) = VirtualWire::pair(1514, 64);
        let delayed = Profile { delay: Duration::from_millis(5), ..Profile::default() };
        let mut b2 = Impairments::new(b, delayed, Profile::default(), 1);
        send(&mut a, Instant::from_millis(0), 1);
        assert!(drain(&mut b2, Instant::from_millis(1)).is_empty());
        assert_eq!(b2.poll_at(), Some(Instant::from_millis(6)));
        assert_eq!(drain(&mut b2, Instant::from_millis(6)), vec![1]);
    }

    #[test]
    fn impairments_repeat_with_the_seed_and_match_their_rates() {
        let lossy = Profile { loss: 0.1, duplicate: 0.1, reorder: 0.1, ..Profile::default() };
        let run = |seed| {
            let (a, mut b) = VirtualWire::pair(1514, 20_000);
            let mut a = Impairments::new(a, Profile::default(), lossy, seed);
            let mut got = Vec::new();
            for i in 0..10_000u32 {
                let now = Instant::from_micros(i64::from(i) * 10);
                send(&mut a, now, i as u8);
                got.extend(drain(&mut b, now));
            }
            let end = Instant::from_secs(10);
            a.transmit(end);
            got.extend(drain(&mut b, end));
            (got, a.stats().1)
        };
        let (x, sx) = run(7);
        let (y, sy) = run(7);
        assert_eq!((&x, sx), (&y, sy), "same seed, same run");
        assert_eq!(sx.frames, 10_000);
        for n in [sx.dropped, sx.duplicated, sx.reordered] {
            assert!((800..1200).contains(&n), "{sx:?}");
        }
        assert_eq!(x.len() as u64, sx.frames - sx.dropped + sx.duplicated);
        assert!(x.windows(2).any(|w| w[1] != w[0].wrapping_add(1)), "out of order somewhere");
    }
}
