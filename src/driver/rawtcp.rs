//! Raw smoltcp TCP throughput: one stack sends for a while, the other takes
//! the bytes out of its receive ring without copying them. The ceiling
//! NVMe/TCP on the same medium is measured against.
//!
//! It measures plain TCP only; it must never carry NVMe or judge its
//! result.

use crate::driver::clock::{Clock, TurnClock};
use crate::driver::smoltcp::{from_smol, to_smol};
use crate::driver::valgrind::{Collector, Part, collect};
use nic_backend::{NicConfig, NicEngine, OffloadNic};
use smoltcp::time::Instant as SmolInstant;
use smoltcp::wire::Ipv4Cidr;
use smoltcp_glue::stack::StackError;
use smoltcp_glue::{Medium, Stack, StackConfig, TcpConn, VirtualWire};
use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// Why a raw TCP measurement failed.
#[derive(Debug, thiserror::Error)]
pub enum RawTcpError {
    /// The receiver could not listen or the sender could not connect.
    #[error(transparent)]
    Stack(#[from] StackError),
    #[error("no connection")]
    NoConnection,
    #[error("receiver panicked")]
    ReceiverPanicked,
    /// Stopped (Ctrl-C) before the measurement was over.
    #[error("interrupted")]
    Interrupted,
}

const SENDER: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 3);
const RECEIVER: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 2);
const PORT: u16 = 5001;

/// Bytes per second over a fresh in-process wire at IP MTU `mtu`, the
/// receiver behind a NIC with checksum offload, with the stack's default
/// rings.
pub fn wire_throughput(mtu: usize, duration: Duration) -> Result<f64, RawTcpError> {
    let (a, b) = VirtualWire::pair(mtu + 14, 512);
    let (ring, nic) = NicEngine::new(OffloadNic::new(b, NicConfig::default()));
    let buffers = StackConfig::new(Ipv4Cidr::new(SENDER, 24)).tx_buffer;
    throughput(a, (ring, nic), buffers, duration, &AtomicBool::new(false))
}

/// How much a measurement measures, once connected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Window {
    Time(Duration),
    /// At least this many bytes acknowledged.
    Bytes(u64),
}

/// What one turn of the sender came to.
enum Turn {
    /// The measurement is over: bytes per second, and bytes.
    Done(f64, u64),
    /// Still measuring; whether anything moved.
    Going(bool),
}

/// The sending side of a measurement: fills its send ring as fast as the
/// stack drains it, and counts what the receiver acknowledged.
struct Sender<T: Medium> {
    stack: Stack<T>,
    conn: TcpConn,
    window: Window,
    give_up: nvme_of::Instant,
    /// The send ring was written once.
    filled: bool,
    /// When the connection was up, and what had been acknowledged then.
    started: Option<(nvme_of::Instant, u64)>,
    sent: u64,
}

impl<T: Medium> Sender<T> {
    fn new(tx: T, ring: usize, clock: &Clock, window: Window) -> Result<Self, RawTcpError> {
        let now = to_smol(clock.now());
        let mut stack = Stack::new(tx, config(SENDER, ring), now);
        let conn = stack.connect(SocketAddrV4::new(RECEIVER, PORT))?;
        let give_up = clock.now() + Duration::from_secs(30);
        Ok(Self { stack, conn, window, give_up, filled: false, started: None, sent: 0 })
    }

    /// Bytes the receiver has (not what sits in our ring).
    fn acked(&self) -> u64 {
        self.sent - self.stack.send_queue(&self.conn) as u64
    }

    /// One turn at time `t`.
    fn turn(&mut self, t: nvme_of::Instant) -> Result<Turn, RawTcpError> {
        if t > self.give_up {
            return Err(RawTcpError::NoConnection);
        }
        if let Some((t0, acked0)) = self.started {
            let (elapsed, bytes) = (t.saturating_since(t0), self.acked() - acked0);
            let over = match self.window {
                Window::Time(d) => elapsed >= d,
                Window::Bytes(n) => bytes >= n,
            };
            if over {
                return Ok(Turn::Done(bytes as f64 / elapsed.as_secs_f64().max(1e-9), bytes));
            }
        }
        let now = to_smol(t);
        let mut progress = self.stack.poll(now);
        if self.stack.is_established(&self.conn) {
            if !self.filled {
                // The ring is memory nothing wrote yet: read, it is the
                // kernel's zero page, always in cache. Write it once, as
                // an application would have, so what goes out comes from
                // memory; it is sent again and again from there. In a
                // turn of its own: the measurement starts at the next.
                self.stack.send_with(&mut self.conn, |free| {
                    free.fill(0x5a);
                    0
                });
                self.filled = true;
                return Ok(Turn::Going(true));
            }
            if self.started.is_none() {
                self.started = Some((t, self.acked()));
            }
            let n = self.stack.send_with(&mut self.conn, |free| free.len());
            self.sent += n as u64;
            progress |= n > 0;
        }
        progress |= self.stack.poll(now);
        Ok(Turn::Going(progress))
    }
}

/// A receiver that takes every byte out of its ring without copying it.
/// Whether anything moved, and the bytes taken.
fn receive<R: Medium>(
    receiver: &mut Stack<R>,
    conn: &mut Option<TcpConn>,
    now: SmolInstant,
) -> (bool, usize) {
    let progress = receiver.poll(now);
    if conn.is_none() {
        *conn = receiver.accept();
    }
    let got = conn.as_mut().map_or(0, |c| receiver.recv(c, |b| b.len()));
    (progress | (got > 0) | receiver.poll(now), got)
}

/// A stack at `ip` whose TCP send and receive rings are `ring` bytes each.
fn config(ip: Ipv4Addr, ring: usize) -> StackConfig {
    StackConfig { rx_buffer: ring, tx_buffer: ring, ..StackConfig::new(Ipv4Cidr::new(ip, 24)) }
}

/// A listening receiver on `rx` and a sender on `tx` connecting to it.
type Ends<T, R> = (Clock, Stack<R>, Sender<T>);

fn ends<T: Medium, R: Medium>(
    tx: T,
    rx: R,
    ring: usize,
    window: Window,
) -> Result<Ends<T, R>, RawTcpError> {
    let clock = Clock::new();
    let now = to_smol(clock.now());
    let mut receiver = Stack::new(rx, config(RECEIVER, ring), now);
    receiver.listen(PORT, 1)?;
    let sender = Sender::new(tx, ring, &clock, window)?;
    Ok((clock, receiver, sender))
}

/// Longest sleep while waiting.
const NAP: smoltcp::time::Duration = smoltcp::time::Duration::from_millis(10);

/// Bytes per second from a stack on `tx` to one on `rx`, the ring of the
/// receiver's NIC `nic`, the sender on this thread and the receiver with
/// its NIC on another (as the bench's hosts run), with TCP rings of
/// `ring` bytes, measured over `duration` once connected, unless `stop`
/// is set.
pub fn throughput<T: Medium, R: Medium + Send + 'static, N: Medium + Send + 'static>(
    tx: T,
    (rx, mut nic): (R, NicEngine<N>),
    ring: usize,
    duration: Duration,
    stop: &AtomicBool,
) -> Result<f64, RawTcpError> {
    let (clock, mut receiver, mut sender) = ends(tx, rx, ring, Window::Time(duration))?;
    let done = Arc::new(AtomicBool::new(false));
    let flag = done.clone();
    let rx = std::thread::spawn(move || {
        let mut conn = None;
        while !flag.load(Ordering::Relaxed) {
            let now = to_smol(clock.now());
            let received = receive(&mut receiver, &mut conn, now).0;
            if !(nic.step(now) | received) {
                let at = [receiver.poll_at(now), nic.poll_at()].into_iter().flatten().min();
                let at = at.map_or(now + NAP, |t| t.min(now + NAP));
                if at > now {
                    nic.wait(Some(at - now));
                }
            }
        }
    });
    let result = loop {
        if stop.load(Ordering::Relaxed) {
            break Err(RawTcpError::Interrupted);
        }
        let t = clock.now();
        match sender.turn(t) {
            Err(e) => break Err(e),
            Ok(Turn::Done(rate, _)) => break Ok(rate),
            Ok(Turn::Going(true)) => {}
            Ok(Turn::Going(false)) => {
                let now = to_smol(t);
                let at = sender.stack.poll_at(now).map(|t| t.min(now + NAP));
                sender.stack.wait(now, at);
            }
        }
    };
    done.store(true, Ordering::Relaxed);
    rx.join().map_err(|_| RawTcpError::ReceiverPanicked)?;
    result
}

/// Bytes per second from a stack on `tx` to one on `rx`, and the bytes
/// measured, the receiver's NIC `nic` (whose ring `rx` is) between them,
/// all three stepped in turn on this thread, as the bench's lockstep runs
/// are; with TCP rings of `ring` bytes, over `window`; unless `stop` is
/// set.
///
/// Under Valgrind, `collector` is told which end each step is, and the
/// ends see time pass by the turn. Its window opens at the turn after the
/// sender's measurement started and closes when it ends; the bytes
/// measured are then those the receiver took inside it, which in steady
/// state are those the sender put on the wire inside it too (what it
/// acknowledged lags by a turn's worth).
pub fn lockstep<T: Medium, R: Medium, N: Medium>(
    tx: T,
    rx: R,
    mut nic: NicEngine<N>,
    ring: usize,
    window: Window,
    collector: Option<&Collector>,
    stop: &AtomicBool,
) -> Result<(f64, u64), RawTcpError> {
    let (clock, mut receiver, mut sender) = ends(tx, rx, ring, window)?;
    let mut conn = None;
    // Bytes the receiver took since Valgrind's window opened.
    let mut counted: Option<u64> = None;
    let mut turns = collector.map(|_| TurnClock::starting(clock.now()));
    loop {
        if stop.load(Ordering::Relaxed) {
            return Err(RawTcpError::Interrupted);
        }
        let t = turns.map_or_else(|| clock.now(), |t| t.now());
        let now = to_smol(t);
        collect(collector, Some(Part::Sender));
        let turn = sender.turn(t)?;
        collect(collector, None);
        let mut moved = match turn {
            Turn::Going(moved) => moved,
            Turn::Done(rate, bytes) => {
                if let Some(c) = collector {
                    c.close();
                }
                return Ok((rate, counted.unwrap_or(bytes)));
            }
        };
        moved |= nic.step(now);
        collect(collector, Some(Part::Receiver));
        let (received, got) = receive(&mut receiver, &mut conn, now);
        collect(collector, None);
        moved |= received | nic.step(now);
        if let Some(n) = &mut counted {
            *n += got as u64;
        }
        if let (Some(c), Some(_), None) = (collector, sender.started, counted) {
            c.open(None);
            counted = Some(0);
        }
        if let Some(t) = &mut turns {
            if !moved {
                let at = [sender.stack.poll_at(now), receiver.poll_at(now), nic.poll_at()];
                if let Some(at) = at.into_iter().flatten().min() {
                    t.wait_until(from_smol(at));
                }
            }
            t.turn();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The rings a measurement is given are the rings its stacks have: the
    /// sender's first burst fills exactly its send ring.
    #[test]
    fn a_measurement_runs_on_the_rings_it_is_given() {
        for ring in [64 << 10, 3 << 20] {
            let (a, b) = VirtualWire::pair(9014, 512);
            let (clock, mut receiver, mut sender) =
                ends(a, b, ring, Window::Time(Duration::from_secs(5))).unwrap();
            let mut conn = None;
            while sender.sent == 0 {
                let t = clock.now();
                assert!(matches!(sender.turn(t), Ok(Turn::Going(_))));
                receive(&mut receiver, &mut conn, to_smol(t));
            }
            assert_eq!(sender.sent, ring as u64, "ring of {ring} bytes");
        }
    }

    /// What the sender sends was written: not the zero page that memory
    /// no one wrote reads as, which would never leave the cache.
    #[test]
    fn the_sender_sends_bytes_from_memory_it_wrote() {
        let (a, b) = VirtualWire::pair(9014, 512);
        let (clock, mut receiver, mut sender) =
            ends(a, b, 1 << 20, Window::Time(Duration::from_secs(5))).unwrap();
        let (mut conn, mut got) = (None, Vec::new());
        while got.len() < 256 << 10 {
            let t = clock.now();
            assert!(matches!(sender.turn(t), Ok(Turn::Going(_))));
            receiver.poll(to_smol(t));
            conn = conn.or_else(|| receiver.accept());
            if let Some(c) = &mut conn {
                receiver.recv(c, |bytes| {
                    got.extend_from_slice(bytes);
                    bytes.len()
                });
            }
        }
        assert!(got.iter().all(|&b| b == 0x5a));
    }
}
