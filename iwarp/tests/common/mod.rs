//! Two endpoints in memory: each with its own device, a QP, and the
//! bytes between them moved by hand, in pieces of a chosen size.

#![allow(dead_code)]

use std::time::Duration;

use iwarp::wire::{Ctrl, DdpHeader, Event as Fpdu, FpduFramer, Opcode, emit_fpdu};
use iwarp::{Access, Device, Event, Pd, Qp, QpConfig, RecvWr, SendOp, SendWr, Stag, Wc};
use ulp_ddp::{IoBuf, SgEntry, Sgl, sgl};

pub const T0: Duration = Duration::ZERO;

pub struct Side {
    pub dev: Device,
    pub pd: Pd,
    pub qp: Qp,
    /// Every byte this side sent, in order.
    pub sent: Vec<u8>,
}

pub struct Pair {
    pub a: Side,
    pub b: Side,
    /// Largest piece moved at once.
    pub piece: usize,
}

pub fn cfg(pd: Pd, crc: bool) -> QpConfig {
    let mut c = QpConfig::new(pd);
    c.crc = crc;
    c
}

impl Pair {
    /// `a` connects to `b`; `b` accepts. `tweak` adjusts each side's config.
    pub fn connect(crc: bool, tweak: impl Fn(&mut QpConfig, bool)) -> Pair {
        let (da, db) = (Device::new(), Device::new());
        let (pa, pb) = (da.alloc_pd(), db.alloc_pd());
        let (mut ca, mut cb) = (cfg(pa, crc), cfg(pb, false));
        tweak(&mut ca, true);
        tweak(&mut cb, false);
        let qa = Qp::connect(&da, ca, b"hello from a", T0).unwrap();
        let qb = Qp::listen(&db, cb, T0);
        let mut p = Pair {
            a: Side { dev: da, pd: pa, qp: qa, sent: Vec::new() },
            b: Side { dev: db, pd: pb, qp: qb, sent: Vec::new() },
            piece: 1 << 20,
        };
        p.pump();
        match p.b.qp.poll_event() {
            Some(Event::ConnectRequest { private_data, .. }) => {
                assert_eq!(private_data, b"hello from a")
            }
            other => panic!("expected a connect request, got {other:?}"),
        }
        p.b.qp.accept(b"welcome").unwrap();
        p.pump();
        assert_eq!(
            p.a.qp.poll_event(),
            Some(Event::Established { private_data: b"welcome".to_vec() })
        );
        assert!(matches!(p.b.qp.poll_event(), Some(Event::Established { .. })));
        p
    }

    /// Move bytes both ways until neither side has any.
    pub fn pump(&mut self) {
        let mut buf = vec![0; self.piece];
        while move_bytes(&mut self.a, &mut self.b, &mut buf)
            | move_bytes(&mut self.b, &mut self.a, &mut buf)
        {}
    }
}

/// Everything `from` has to send, to `to`; whether there was any.
fn move_bytes(from: &mut Side, to: &mut Side, buf: &mut [u8]) -> bool {
    let mut moved = false;
    loop {
        let n = from.qp.poll_transmit(buf);
        if n == 0 {
            return moved;
        }
        moved = true;
        from.sent.extend_from_slice(&buf[..n]);
        to.qp.handle_input(&buf[..n]);
    }
}

impl Side {
    pub fn cq(&mut self) -> Vec<Wc> {
        std::iter::from_fn(|| self.qp.poll_cq()).collect()
    }

    pub fn events(&mut self) -> Vec<Event> {
        std::iter::from_fn(|| self.qp.poll_event()).collect()
    }

    /// Register `len` bytes of a fresh buffer filled with `fill`.
    pub fn mr(&self, len: usize, fill: u8, iova: u64, access: Access) -> (Stag, IoBuf) {
        let buf = IoBuf::from_vec(vec![fill; len]);
        let stag = self.dev.reg_mr(self.pd, whole(&buf), iova, access).unwrap();
        (stag, buf)
    }

    pub fn post_recv(&mut self, wr_id: u64, len: usize) -> IoBuf {
        let buf = IoBuf::new(len);
        self.qp.post_recv(RecvWr { wr_id, sgl: whole(&buf) }).unwrap();
        buf
    }

    pub fn post(&mut self, wr_id: u64, op: SendOp) {
        self.qp.post_send(SendWr { wr_id, signaled: true, op }).unwrap();
    }

    /// Bytes this side sent after connection setup.
    pub fn fpdus(&self) -> Vec<(DdpHeader, Vec<u8>)> {
        let start = mpa_len(&self.sent);
        parse_fpdus(&self.sent[start..], self.qp.crc(), self.qp.markers().1)
    }
}

pub fn whole(buf: &IoBuf) -> Sgl {
    sgl![SgEntry { buf: buf.clone(), offset: 0, len: buf.len() }]
}

pub fn bytes(len: usize, seed: u8) -> IoBuf {
    IoBuf::from_vec((0..len).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed)).collect())
}

/// Length of the MPA frame at the start of `b`.
pub fn mpa_len(b: &[u8]) -> usize {
    iwarp::wire::MpaFrame::parse_prefix(b).unwrap().unwrap().1
}

/// Split a stream of FPDUs into headers and payloads.
pub fn parse_fpdus(mut b: &[u8], crc: bool, markers: bool) -> Vec<(DdpHeader, Vec<u8>)> {
    let mut f = FpduFramer::new(crc).start(0, markers);
    let mut out: Vec<(DdpHeader, Vec<u8>)> = Vec::new();
    loop {
        let (n, ev) = f.next(b).unwrap();
        b = &b[n..];
        match ev {
            None => return out,
            Some(Fpdu::Header { header, .. }) => out.push((header, Vec::new())),
            Some(Fpdu::Data { bytes, .. }) => out.last_mut().unwrap().1.extend_from_slice(bytes),
            Some(Fpdu::End) => {}
        }
    }
}

pub fn fpdu(h: DdpHeader, payload: &[u8], crc: bool) -> Vec<u8> {
    let mut v = Vec::new();
    emit_fpdu(&h, payload, crc, &mut v);
    v
}

pub fn untagged(opcode: Opcode, last: bool, inval: u32, qn: u32, msn: u32, mo: u32) -> DdpHeader {
    DdpHeader::Untagged { ctrl: Ctrl { last, opcode }, inval_stag: inval, qn, msn, mo }
}

pub fn tagged(opcode: Opcode, last: bool, stag: u32, to: u64) -> DdpHeader {
    DdpHeader::Tagged { ctrl: Ctrl { last, opcode }, stag, to }
}

pub fn hex(s: &str) -> Vec<u8> {
    let s: String = s.split_whitespace().collect();
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
}
