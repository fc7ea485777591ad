//! The host's I/O path allocates nothing once warm, as a driver posting
//! work requests allocates nothing: a work request's scatter list, the
//! registration it makes, the source of the Read Request that fetches
//! the data, the receive reposted for the next response are all held in
//! place. Counted by a global allocator, on this thread, in the host's
//! calls only (the controller and the harness allocate as they like).

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use iwarp::{Device, QpConfig};
use nvme_of::controller::{Target, TargetConfig};
use nvme_of::host::{HostConfig, HostEvent, Io, IoKind};
use nvme_of::namespace::Namespace;
use nvme_of::pair::{Pair, pattern};
use nvme_rdma::host::Rdma;
use nvme_storage::RamNamespace;
use std::sync::Arc;
use ulp_ddp::IoBuf;

struct Counting;

thread_local! {
    /// Allocations made on this thread while counting; None when not.
    static COUNT: Cell<Option<u64>> = const { Cell::new(None) };
}

fn note() {
    let _ = COUNT.try_with(|c| c.set(c.get().map(|n| n + 1)));
}

// SAFETY: every call goes to the system allocator with the caller's
// arguments; counting touches only a thread-local cell, never the heap.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note();
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note();
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note();
        unsafe { System.realloc(ptr, layout, new_size) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

/// `f`'s result, and the allocations it made on this thread.
fn counted<R>(f: impl FnOnce() -> R) -> (R, u64) {
    COUNT.with(|c| c.set(Some(0)));
    let r = f();
    let n = COUNT.with(|c| c.replace(None)).unwrap_or(0);
    (r, n)
}

const SUBNQN: &str = "nqn.2026-11.io.nvme-ddp:rdma-allocations";
const QID: u16 = 1;

fn pair(crc: bool, oneshot: bool) -> Pair {
    let ns: Arc<dyn Namespace> = Arc::new(RamNamespace::new(16 << 20, 512).unwrap());
    let cfg = TargetConfig { subnqn: SUBNQN.into(), queue_size: 128, ..TargetConfig::default() };
    let target = Target::new(cfg, vec![ns]).unwrap();
    let dev = Device::new();
    let qp = QpConfig::new(dev.alloc_pd());
    let acceptor = Arc::new(nvme_rdma::controller::Rdma { dev, qp });
    let host = HostConfig { subnqn: SUBNQN.into(), queue_depth: 32, ..HostConfig::default() };
    let mut p = Pair::new(nvme_rdma::host::new(host, Rdma::new(crc, oneshot)), acceptor, target);
    p.chunk = 9000;
    p.ready();
    p
}

/// Run `io` to completion, moving the bytes by hand so that only the
/// host's calls are counted; the host's allocations.
fn host_allocations(p: &mut Pair, io: Io, wire: &mut [u8], backlog: &mut Vec<u8>) -> u64 {
    let (tag, now) = (io.tag, p.now);
    let (submitted, mut n) = counted(|| p.host.submit(QID, io, now));
    submitted.expect("submitted");
    let conn = p.conns.get_mut(&QID).expect("the I/O queue's connection");
    for _ in 0..10_000 {
        let (k, a) = counted(|| p.host.poll_transmit(QID, wire));
        n += a;
        backlog.extend_from_slice(&wire[..k]);
        let taken = conn.handle_input(backlog, now);
        backlog.drain(..taken);
        let k = conn.poll_transmit(wire);
        let mut at = 0;
        while at < k {
            let (used, a) = counted(|| p.host.handle_input(QID, &wire[at..k], now));
            n += a;
            if used == 0 {
                break;
            }
            at += used;
        }
        let (ev, a) = counted(|| p.host.poll_event());
        n += a;
        match ev {
            Some(HostEvent::Completion { tag: t, status, .. }) if t == tag => {
                assert!(status.is_success(), "{status:?}");
                return n;
            }
            Some(ev) => panic!("unexpected {ev:?}"),
            None => {}
        }
    }
    panic!("no completion");
}

#[test]
fn a_warm_host_allocates_nothing_per_write_or_read() {
    for (crc, oneshot) in [(false, false), (true, true)] {
        let mut p = pair(crc, oneshot);
        let mut wire = vec![0u8; p.chunk];
        let mut backlog = Vec::with_capacity(1 << 20);
        let data = IoBuf::from_vec(pattern(128 << 10, 7));
        let back = IoBuf::new(128 << 10);
        let io = |kind, slba: u64, buf: &IoBuf| Io {
            kind,
            nsid: 1,
            slba,
            nlb: 256,
            buf: Some(buf.clone()),
            tag: slba,
        };
        // Warm: queues, rings and tables at their working sizes.
        for i in 0..8 {
            host_allocations(&mut p, io(IoKind::Write, i * 256, &data), &mut wire, &mut backlog);
            host_allocations(&mut p, io(IoKind::Read, i * 256, &back), &mut wire, &mut backlog);
        }
        let (mut writes, mut reads) = (0, 0);
        for i in 8..24 {
            let w = io(IoKind::Write, i * 256, &data);
            writes += host_allocations(&mut p, w, &mut wire, &mut backlog);
            let r = io(IoKind::Read, i * 256, &back);
            reads += host_allocations(&mut p, r, &mut wire, &mut backlog);
        }
        assert_eq!((writes, reads), (0, 0), "crc {crc} one-shot {oneshot}: 16 writes, 16 reads");
        assert!(back.to_vec() == data.to_vec(), "the last read brought back what was written");
    }
}
