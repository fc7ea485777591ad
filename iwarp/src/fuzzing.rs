//! Entry point for the `iwarp_rx` fuzz target (`fuzz/`) and for the test
//! that replays its corpus. Not part of the API.
//!
//! Input: a flags byte (bit 0 CRC, bit 1 start from a bare listening QP,
//! bit 2 siw's Terminate layout, bit 3 ask for MPA markers), a piece
//! size, then the stream a peer
//! sends, cut into pieces of that size. The QP under test has regions at
//! STags 0x101 (remote write), 0x201 (remote read and write, also the
//! sink of an outbound Read), 0x301 (remote write, another PD's) and
//! three posted receives; every buffer has canaries around its region.

use std::time::Duration;

use ulp_ddp::{IoBuf, SgEntry, Sgl, sgl};

use crate::{Access, Device, Event, Qp, QpConfig, RecvWr, SendOp, SendWr, Stag};

const GUARD: usize = 64;
const CANARY: u8 = 0xee;

fn guarded(len: usize) -> (IoBuf, Sgl) {
    let buf = IoBuf::from_vec(vec![CANARY; len + 2 * GUARD]);
    let sgl = sgl![SgEntry { buf: buf.clone(), offset: GUARD, len }];
    (buf, sgl)
}

fn guards_hold(buf: &IoBuf) -> bool {
    let b = buf.lock();
    let n = b.len();
    b[..GUARD].iter().chain(&b[n - GUARD..]).all(|&x| x == CANARY)
}

/// Run one input; panics only if an invariant breaks.
pub fn rx(data: &[u8]) {
    let _ = run(data);
}

fn run(data: &[u8]) -> Option<()> {
    let (flags, piece, stream) = match data {
        [f, p, rest @ ..] => (*f, usize::from(*p).max(1), rest),
        _ => return None,
    };
    let now = Duration::ZERO;
    let dev = Device::new();
    let pd = dev.alloc_pd();
    let mut cfg = QpConfig::new(pd);
    cfg.crc = flags & 1 != 0;
    cfg.ird = 2;
    cfg.ord = 2;
    if flags & 4 != 0 {
        cfg.term_layout = crate::wire::TermLayout::LinuxX86;
    }
    cfg.markers = flags & 8 != 0;
    let mut bufs = Vec::new();
    let mut region = |pd, access| {
        let (buf, sgl) = guarded(256);
        bufs.push(buf);
        dev.reg_mr(pd, sgl, 0x1000, access).ok()
    };
    let w = region(pd, Access::REMOTE_WRITE)?;
    let rw = region(pd, Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ)?;
    region(dev.alloc_pd(), Access::REMOTE_WRITE)?;
    debug_assert_eq!((w, rw), (Stag(0x101), Stag(0x201)));

    let mut qp = if flags & 2 != 0 { Qp::listen(&dev, cfg, now) } else { established(&dev, cfg)? };
    for i in 0..3 {
        let (buf, sgl) = guarded(64);
        bufs.push(buf);
        let _ = qp.post_recv(RecvWr { wr_id: i, sgl });
    }
    let read = SendOp::Read { sink: rw, sink_to: 0x1000, len: 200, stag: Stag(0x4201), to: 0 };
    let _ = qp.post_send(SendWr { wr_id: 9, signaled: true, op: read });
    let mut out = vec![0; 1500];
    while qp.poll_transmit(&mut out) > 0 {}
    for chunk in stream.chunks(piece) {
        qp.handle_input(chunk);
        while let Some(ev) = qp.poll_event() {
            if let Event::ConnectRequest { .. } = ev {
                let _ = qp.accept(b"fuzz");
            }
        }
        while qp.poll_transmit(&mut out) > 0 {}
        while qp.poll_cq().is_some() {}
    }
    qp.disconnect();
    while qp.poll_transmit(&mut out) > 0 {}
    qp.transport_closed();
    while qp.poll_cq().is_some() {}
    assert!(bufs.iter().all(guards_hold), "a byte landed outside a region");
    Some(())
}

/// A QP past setup: the passive side of an in-memory exchange.
fn established(dev: &Device, cfg: QpConfig) -> Option<Qp> {
    let now = Duration::ZERO;
    let peer_dev = Device::new();
    let mut peer = Qp::connect(&peer_dev, QpConfig::new(peer_dev.alloc_pd()), &[], now).ok()?;
    let mut qp = Qp::listen(dev, cfg, now);
    let mut buf = vec![0; 600];
    let n = peer.poll_transmit(&mut buf);
    qp.handle_input(&buf[..n]);
    let _ = qp.poll_event();
    qp.accept(&[]).ok()?;
    let _ = qp.poll_event();
    while qp.poll_transmit(&mut buf) > 0 {}
    Some(qp)
}
