//! Raw smoltcp TCP throughput over the in-process wire: one stack sends,
//! the other takes the bytes out of its receive ring without copying them.
//! The ceiling NVMe/TCP on the same wire is measured against.

use crate::clock::Clock;
use crate::userspace::to_smol;
use smoltcp::wire::Ipv4Cidr;
use smoltcp_glue::{Stack, StackConfig, VirtualWire};
use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::Duration;

/// Bytes per second of a one-way transfer of `bytes` at IP MTU `mtu`, each
/// stack on its own thread, in real time.
pub fn throughput(mtu: usize, bytes: u64) -> Result<f64, String> {
    let (a, b) = VirtualWire::pair(mtu + 14, 512);
    let clock = Clock::new();
    let now = to_smol(clock.now());
    let rx_ip = Ipv4Addr::new(198, 18, 0, 2);
    let mut receiver = Stack::new(b, StackConfig::new(Ipv4Cidr::new(rx_ip, 24)), now);
    let mut sender =
        Stack::new(a, StackConfig::new(Ipv4Cidr::new(Ipv4Addr::new(198, 18, 0, 3), 24)), now);
    receiver.listen(5001, 1).map_err(|e| e.to_string())?;
    let deadline = Duration::from_secs(120);
    let rx = std::thread::spawn(move || -> Result<(), String> {
        let mut conn = None;
        let mut got = 0u64;
        while got < bytes {
            let now = to_smol(clock.now());
            if now.total_micros() as u128 > deadline.as_micros() {
                return Err("receiver timed out".into());
            }
            let mut progress = receiver.poll(now);
            if conn.is_none() {
                conn = receiver.accept();
            }
            if let Some(c) = &mut conn {
                let n = receiver.recv(c, |b| b.len());
                got += n as u64;
                progress |= n > 0;
            }
            progress |= receiver.poll(now);
            if !progress {
                let at = receiver.poll_at(now);
                receiver.wait(now, at);
            }
        }
        Ok(())
    });
    let mut conn = sender.connect(SocketAddrV4::new(rx_ip, 5001)).map_err(|e| e.to_string())?;
    let mut sent = 0u64;
    let mut started = None;
    while sent < bytes {
        let now = to_smol(clock.now());
        if now.total_micros() as u128 > deadline.as_micros() {
            return Err("sender timed out".into());
        }
        let mut progress = sender.poll(now);
        if sender.is_established(&conn) {
            started.get_or_insert(clock.now());
            let n = sender.send(&mut conn, |free| free.len().min((bytes - sent) as usize));
            sent += n as u64;
            progress |= n > 0;
        }
        progress |= sender.poll(now);
        if !progress {
            let at = sender.poll_at(now);
            sender.wait(now, at);
        }
    }
    // Let the last bytes drain while the receiver counts them.
    while !rx.is_finished() {
        let now = to_smol(clock.now());
        if !sender.poll(now) {
            let at = sender.poll_at(now);
            sender.wait(now, at.map(|t| t.min(now + smoltcp::time::Duration::from_millis(1))));
        }
    }
    rx.join().map_err(|_| "receiver panicked".to_string())??;
    let start = started.ok_or("never connected")?;
    let secs = clock.now().saturating_since(start).as_secs_f64();
    Ok(bytes as f64 / secs)
}
