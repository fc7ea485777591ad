//! Raw smoltcp TCP throughput: one stack sends for a while, the other takes
//! the bytes out of its receive ring without copying them. The ceiling
//! NVMe/TCP on the same medium is measured against.

use crate::clock::Clock;
use crate::userspace::to_smol;
use nic_backend::NicEngine;
use smoltcp::wire::Ipv4Cidr;
use smoltcp_glue::{Medium, Stack, StackConfig, VirtualWire};
use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

const SENDER: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 3);
const RECEIVER: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 2);
const PORT: u16 = 5001;

/// Bytes per second over a fresh in-process wire at IP MTU `mtu`.
pub fn wire_throughput(mtu: usize, duration: Duration) -> Result<f64, String> {
    let (a, b) = VirtualWire::pair(mtu + 14, 512);
    throughput(a, b, duration)
}

/// Bytes per second from a stack on `tx` to one on `rx`, each on its own
/// thread, measured over `duration` once connected.
pub fn throughput<T: Medium, R: Medium + Send + 'static>(
    tx: T,
    rx: R,
    duration: Duration,
) -> Result<f64, String> {
    let clock = Clock::new();
    let now = to_smol(clock.now());
    let mut receiver = Stack::new(rx, StackConfig::new(Ipv4Cidr::new(RECEIVER, 24)), now);
    let mut sender = Stack::new(tx, StackConfig::new(Ipv4Cidr::new(SENDER, 24)), now);
    receiver.listen(PORT, 1).map_err(|e| e.to_string())?;
    let stop = Arc::new(AtomicBool::new(false));
    let flag = stop.clone();
    let rx = std::thread::spawn(move || {
        let mut conn = None;
        while !flag.load(Ordering::Relaxed) {
            let now = to_smol(clock.now());
            let mut progress = receiver.poll(now);
            if conn.is_none() {
                conn = receiver.accept();
            }
            if let Some(c) = &mut conn {
                progress |= receiver.recv(c, |b| b.len()) > 0;
            }
            progress |= receiver.poll(now);
            if !progress {
                let at = receiver
                    .poll_at(now)
                    .map(|t| t.min(now + smoltcp::time::Duration::from_millis(10)));
                receiver.wait(now, at);
            }
        }
    });
    let mut conn = sender.connect(SocketAddrV4::new(RECEIVER, PORT)).map_err(|e| e.to_string())?;
    let mut started = None;
    let mut sent = 0u64;
    let give_up = clock.now() + Duration::from_secs(30);
    let result = loop {
        let t = clock.now();
        if t > give_up {
            break Err("no connection".to_string());
        }
        if let Some((t0, acked0)) = started
            && t.saturating_since(t0) >= duration
        {
            // Count what the receiver has, not what sits in our ring.
            let acked = sent - sender.send_queue(&conn) as u64;
            break Ok((acked - acked0) as f64 / t.saturating_since(t0).as_secs_f64());
        }
        let now = to_smol(t);
        let mut progress = sender.poll(now);
        if sender.is_established(&conn) {
            if started.is_none() {
                started = Some((t, sent - sender.send_queue(&conn) as u64));
            }
            let n = sender.send(&mut conn, |free| free.len());
            sent += n as u64;
            progress |= n > 0;
        }
        progress |= sender.poll(now);
        if !progress {
            let at =
                sender.poll_at(now).map(|t| t.min(now + smoltcp::time::Duration::from_millis(10)));
            sender.wait(now, at);
        }
    };
    stop.store(true, Ordering::Relaxed);
    rx.join().map_err(|_| "receiver panicked".to_string())?;
    result
}

/// Bytes per second from a stack on `tx` to one on `rx`, the receiver's NIC
/// `nic` (whose ring `rx` is) between them, all three stepped in turn on
/// this thread, as the bench's lockstep runs are.
pub fn lockstep<T: Medium, R: Medium, N: Medium>(
    tx: T,
    rx: R,
    mut nic: NicEngine<N>,
    duration: Duration,
) -> Result<f64, String> {
    let clock = Clock::new();
    let now = to_smol(clock.now());
    let mut receiver = Stack::new(rx, StackConfig::new(Ipv4Cidr::new(RECEIVER, 24)), now);
    let mut sender = Stack::new(tx, StackConfig::new(Ipv4Cidr::new(SENDER, 24)), now);
    receiver.listen(PORT, 1).map_err(|e| e.to_string())?;
    let mut conn = sender.connect(SocketAddrV4::new(RECEIVER, PORT)).map_err(|e| e.to_string())?;
    let mut accepted = None;
    let mut started = None;
    let mut sent = 0u64;
    let give_up = clock.now() + Duration::from_secs(30);
    loop {
        let t = clock.now();
        if t > give_up {
            return Err("no connection".to_string());
        }
        if let Some((t0, acked0)) = started
            && t.saturating_since(t0) >= duration
        {
            let acked = sent - sender.send_queue(&conn) as u64;
            return Ok((acked - acked0) as f64 / t.saturating_since(t0).as_secs_f64());
        }
        let now = to_smol(t);
        sender.poll(now);
        if sender.is_established(&conn) {
            if started.is_none() {
                started = Some((t, sent - sender.send_queue(&conn) as u64));
            }
            sent += sender.send(&mut conn, |free| free.len()) as u64;
            sender.poll(now);
        }
        nic.step(now);
        receiver.poll(now);
        if accepted.is_none() {
            accepted = receiver.accept();
        }
        if let Some(c) = &mut accepted {
            receiver.recv(c, |b| b.len());
        }
        receiver.poll(now);
        nic.step(now);
    }
}
