//! Every way a peer's bytes can be refused, each with the Terminate it
//! earns byte for byte (RFC 5040 §7.2, RFC 5041 §7.2, RFC 5044 §8), and
//! the memory it targeted untouched.

mod common;

use common::*;
use iwarp::wire::{
    DdpHeader, Opcode, ReadRequest, ReadRequestPacket, TermLayer, TermLayout, Terminate,
    TerminatePacket,
};
use iwarp::{Access, Close, Down, Event, QpState, SendOp, Stag, WcStatus};
use ulp_ddp::IoBuf;

/// An established pair whose responder `b` has: `w`, 4096 bytes of 0xee
/// at TO 0x1000 granting remote write; `r`, 4096 bytes at TO 0 granting
/// remote read; `o`, a region of another PD; one 64-byte receive posted.
struct Target {
    p: Pair,
    w: Stag,
    w_mem: IoBuf,
    r: Stag,
    o: Stag,
}

fn target(crc: bool, layout: TermLayout, ird: u16) -> Target {
    let mut p = Pair::connect(crc, |c, active| {
        c.term_layout = layout;
        if !active {
            c.ird = ird;
        } else {
            c.ord = ird;
        }
    });
    let (w, w_mem) = p.b.mr(4096, 0xee, 0x1000, Access::REMOTE_WRITE);
    let (r, _) = p.b.mr(4096, 0, 0, Access::REMOTE_READ);
    let other = p.b.dev.alloc_pd();
    let o =
        p.b.dev
            .reg_mr(other, whole(&IoBuf::new(64)), 0, Access::REMOTE_WRITE | Access::REMOTE_READ)
            .unwrap();
    p.b.post_recv(1, 64);
    Target { p, w, w_mem, r, o }
}

/// Feed `bytes` to the responder; the Terminate FPDU it sends back (the
/// whole FPDU) and its body.
fn refuse(t: &mut Target, bytes: &[u8]) -> (Vec<u8>, Vec<u8>) {
    let b = &mut t.p.b;
    b.qp.handle_input(bytes);
    let mut out = vec![0; 4096];
    let n = b.qp.poll_transmit(&mut out);
    out.truncate(n);
    let fpdus = parse_fpdus(&out, b.qp.crc(), false);
    assert_eq!(fpdus.len(), 1, "exactly one FPDU: the Terminate");
    let (h, body) = fpdus.into_iter().next().unwrap();
    assert_eq!(h, untagged(Opcode::Terminate, true, 0, 2, 1, 0), "QN 2, MSN 1, MO 0");
    let events = b.events();
    assert!(matches!(events[..], [Event::Down(Down::TerminateSent(_))]), "{events:?}");
    assert_eq!(b.qp.close_action(), Some(Close::Graceful));
    assert_eq!(*b.qp.state(), QpState::Error);
    (out, body)
}

/// The body a Terminate with these fields and a quoted `segment` has.
fn quoting(hdr: &str, segment: &[u8], rdmap: bool) -> Vec<u8> {
    let mut want = hex(hdr);
    let ulpdu = u16::from_be_bytes([segment[0], segment[1]]);
    want.extend(ulpdu.to_be_bytes());
    let ctrl = DdpHeader::peek(&segment[2..4], false).unwrap();
    want.extend(&segment[2..2 + ctrl.opcode.header_len()]);
    if rdmap {
        want.extend(&segment[20..20 + ReadRequest::LEN]);
    }
    want
}

fn send(msn: u32, qn: u32, mo: u32, len: usize) -> Vec<u8> {
    fpdu(untagged(Opcode::Send, true, 0, qn, msn, mo), &vec![0x5a; len], false)
}

fn write(stag: u32, to: u64, len: usize) -> Vec<u8> {
    fpdu(tagged(Opcode::Write, true, stag, to), &vec![0x5a; len], false)
}

fn read_request(msn: u32, src: Stag, to: u64, size: u32) -> Vec<u8> {
    let r = ReadRequest { sink_stag: 0x0100_0001, sink_to: 0, size, src_stag: src.0, src_to: to };
    let mut body = vec![0; r.buffer_len()];
    r.emit(&mut ReadRequestPacket::new_unchecked(&mut body));
    fpdu(untagged(Opcode::ReadRequest, true, 0, 1, msn, 0), &body, false)
}

#[test]
fn untagged_refusals() {
    // MSN 2 before MSN 1, the whole FPDU byte for byte (CRC off: zeros).
    let mut t = target(false, TermLayout::Rfc5040, 16);
    let (whole_fpdu, _) = refuse(&mut t, &send(2, 0, 0, 0));
    assert_eq!(
        whole_fpdu,
        hex("002a 4147 00000000 00000002 00000001 00000000
             12 03 c0 00 0012 4143 00000000 00000000 00000002 00000000
             00000000")
    );

    let cases: [(&str, Vec<u8>, &str); 4] = [
        ("wrong QN", send(1, 1, 0, 0), "12 01 c0 00"),
        ("first segment at MO 8", send(1, 0, 8, 4), "12 04 c0 00"),
        ("longer than the receive", send(1, 0, 0, 100), "12 05 c0 00"),
        (
            "Read Request of 27 bytes",
            fpdu(untagged(Opcode::ReadRequest, true, 0, 1, 1, 0), &[0; 27], false),
            "12 05 c0 00",
        ),
    ];
    for (what, seg, hdr) in cases {
        let mut t = target(false, TermLayout::Rfc5040, 16);
        let (_, body) = refuse(&mut t, &seg);
        assert_eq!(body, quoting(hdr, &seg, false), "{what}");
    }
    // Too long: the receive completes with a length error, untouched.
    let mut t = target(false, TermLayout::Rfc5040, 16);
    refuse(&mut t, &send(1, 0, 0, 100));
    let wc = t.p.b.cq();
    assert_eq!((wc[0].wr_id, wc[0].status), (1, WcStatus::LocalLength));
    // No receive posted: DDP / untagged / MSN with no buffer.
    let mut t = target(false, TermLayout::Rfc5040, 16);
    let seg = send(1, 0, 0, 4);
    t.p.b.qp.handle_input(&seg);
    let (_, body) = refuse(&mut t, &send(2, 0, 0, 4));
    assert_eq!(body, quoting("12 02 c0 00", &send(2, 0, 0, 4), false));
}

#[test]
fn tagged_refusals_touch_nothing() {
    let t0 = target(false, TermLayout::Rfc5040, 16);
    let (w, r, o) = (t0.w, t0.r, t0.o);
    let cases: [(&str, Vec<u8>, &str); 6] = [
        ("no such STag", write(0x4200, 0x1000, 16), "11 00 c0 00"),
        ("stale key", write(w.next_key().0, 0x1000, 16), "11 00 c0 00"),
        ("another PD", write(o.0, 0, 16), "11 02 c0 00"),
        ("no remote write right", write(r.0, 0, 16), "11 00 c0 00"),
        ("past the end", write(w.0, 0x1000 + 4090, 16), "11 01 c0 00"),
        ("TO wraps", write(w.0, u64::MAX - 4, 16), "11 03 c0 00"),
    ];
    for (what, seg, hdr) in cases {
        let mut t = target(false, TermLayout::Rfc5040, 16);
        // Same registrations in every fresh target.
        assert_eq!((t.w, t.r, t.o), (w, r, o));
        let (_, body) = refuse(&mut t, &seg);
        assert_eq!(body, quoting(hdr, &seg, false), "{what}");
        assert!(t.w_mem.to_vec().iter().all(|&b| b == 0xee), "{what}: no byte touched");
    }
    // A Write in bounds lands; a zero-length Write is not checked (RTR).
    let mut t = target(false, TermLayout::Rfc5040, 16);
    t.p.b.qp.handle_input(&write(w.0, 0x1000 + 4080, 16));
    t.p.b.qp.handle_input(&write(0x4200, 0, 0));
    assert_eq!(t.w_mem.to_vec()[4080..], [0x5a; 16]);
    assert!(!t.p.b.qp.has_output());
}

#[test]
fn read_request_refusals() {
    let t0 = target(false, TermLayout::Rfc5040, 16);
    let (w, r, o) = (t0.w, t0.r, t0.o);
    let cases: [(&str, Vec<u8>, &str); 4] = [
        ("no such STag", read_request(1, Stag(0x4200), 0, 16), "01 00 e0 00"),
        ("no remote read right", read_request(1, w, 0x1000, 16), "01 02 e0 00"),
        ("past the end", read_request(1, r, 4000, 100), "01 01 e0 00"),
        ("another PD", read_request(1, o, 0, 16), "01 03 e0 00"),
    ];
    for (what, seg, hdr) in cases {
        let mut t = target(false, TermLayout::Rfc5040, 16);
        let (_, body) = refuse(&mut t, &seg);
        assert_eq!(body, quoting(hdr, &seg, true), "{what}");
    }
    // More Read Requests than the IRD: RDMAP / remote operation /
    // catastrophic, as siw.
    let mut t = target(false, TermLayout::Rfc5040, 2);
    assert_eq!(t.p.b.qp.ird_ord().0, 2);
    t.p.b.qp.handle_input(&read_request(1, r, 0, 16));
    t.p.b.qp.handle_input(&read_request(2, r, 0, 16));
    let third = read_request(3, r, 0, 16);
    let (_, body) = refuse(&mut t, &third);
    assert_eq!(body, quoting("02 07 e0 00", &third, true));
}

#[test]
fn send_with_invalidate_refusals() {
    let inv =
        |stag: u32| fpdu(untagged(Opcode::SendInvalidate, true, stag, 0, 1, 0), &[1, 2], false);
    for (what, pick, hdr) in [("unknown STag", 0, "02 09 c0 00"), ("another PD", 1, "01 09 c0 00")]
    {
        let mut t = target(false, TermLayout::Rfc5040, 16);
        let stag = if pick == 0 { 0x4200 } else { t.o.0 };
        let seg = inv(stag);
        let (_, body) = refuse(&mut t, &seg);
        assert_eq!(body, quoting(hdr, &seg, false), "{what}");
        let wc = t.p.b.cq();
        assert_eq!((wc[0].status, wc[0].invalidated), (WcStatus::RemoteInvalidate, None), "{what}");
        assert!(pick == 0 || t.p.b.dev.is_valid(t.o), "another PD's STag stays valid");
    }
}

#[test]
fn malformed_segments() {
    let raw = |b: &str| hex(b);
    let cases = [
        ("opcode 8", raw("0012 4148 00000000 00000000 00000001 00000000 00000000"), "02 06 00 00"),
        (
            "DDP version 2, untagged",
            raw("0012 4243 00000000 00000000 00000001 00000000 00000000"),
            "12 06 00 00",
        ),
        (
            "DDP version 2, tagged",
            raw("000e c240 00000001 0000000000000000 00000000"),
            "11 04 00 00",
        ),
        (
            "RDMAP version 0",
            raw("0012 4103 00000000 00000000 00000001 00000000 00000000"),
            "02 05 00 00",
        ),
        ("tagged Send", raw("000e c143 00000001 0000000000000000 00000000"), "02 06 00 00"),
        (
            "shorter than its header",
            raw("0010 4143 00000000 00000000 00000001 0000 00000000"),
            "02 ff 00 00",
        ),
    ];
    for (what, seg, hdr) in cases {
        let mut t = target(false, TermLayout::Rfc5040, 16);
        let (_, body) = refuse(&mut t, &seg);
        assert_eq!(body, hex(hdr), "{what}");
    }
    // A Read Response nobody asked for.
    let mut t = target(false, TermLayout::Rfc5040, 16);
    let seg = fpdu(tagged(Opcode::ReadResponse, true, 7, 0), &[1; 8], false);
    let (_, body) = refuse(&mut t, &seg);
    assert_eq!(body, quoting("02 06 c0 00", &seg, false));
}

#[test]
fn crc_errors_in_both_layouts() {
    for (layout, hdr) in
        [(TermLayout::Rfc5040, "20 02 00 00"), (TermLayout::LinuxX86, "02 02 00 00")]
    {
        let mut t = target(true, layout, 16);
        let mut seg = fpdu(untagged(Opcode::Send, true, 0, 0, 1, 0), &[9; 8], true);
        seg[21] ^= 0x01;
        let (_, body) = refuse(&mut t, &seg);
        assert_eq!(body, hex(hdr), "{layout:?}");
    }
    // CRC off: the trailer is not looked at.
    let mut t = target(false, TermLayout::Rfc5040, 16);
    let mut seg = fpdu(untagged(Opcode::Send, true, 0, 0, 1, 0), &[9; 8], false);
    seg[28..].copy_from_slice(&[1, 2, 3, 4]);
    t.p.b.qp.handle_input(&seg);
    assert_eq!(t.p.b.cq()[0].status, WcStatus::Success);
}

/// The requester checks Read Responses against its outstanding Read.
#[test]
fn read_responses_must_match_the_request() {
    let cases = [
        ("wrong STag", 1, 0, 16, "11 00 c0 00"),
        ("wrong TO", 0, 8, 16, "11 01 c0 00"),
        ("too long", 0, 0, 17, "11 01 c0 00"),
    ];
    for (what, stag_off, to_off, len, hdr) in cases {
        let mut p = Pair::connect(false, |_, _| {});
        let (sink, mem) = p.a.mr(16, 0x77, 0x5000, Access::LOCAL_WRITE | Access::REMOTE_WRITE);
        p.a.post(1, SendOp::Read { sink, sink_to: 0x5000, len: 16, stag: Stag(0x100), to: 0 });
        let _ = p.a.qp.poll_transmit(&mut [0; 256]);
        let seg = fpdu(
            tagged(Opcode::ReadResponse, true, sink.0 + stag_off, 0x5000 + to_off),
            &vec![1; len],
            false,
        );
        p.a.qp.handle_input(&seg);
        let mut out = vec![0; 256];
        let n = p.a.qp.poll_transmit(&mut out);
        let (h, body) = parse_fpdus(&out[..n], false, false).pop().unwrap();
        assert_eq!(h.ctrl().opcode, Opcode::Terminate, "{what}");
        assert_eq!(body, quoting(hdr, &seg, false), "{what}");
        assert_eq!(mem.to_vec(), [0x77; 16], "{what}: nothing placed");
        let wc = p.a.cq();
        assert_eq!((wc[0].wr_id, wc[0].status), (1, WcStatus::Flushed), "{what}");
    }
}

#[test]
fn a_terminate_received_ends_the_stream_without_an_answer() {
    for layout in [TermLayout::Rfc5040, TermLayout::LinuxX86] {
        let mut t = target(false, layout, 16);
        let mut term = Terminate::new(TermLayer::Ddp, 1, 0);
        term.seg_len = Some(0x1e);
        term.ddp_header = Some(hex("c140 00004201 0000000000001000"));
        let mut body = vec![0; term.buffer_len()];
        term.emit(&mut TerminatePacket::new_unchecked(&mut body), layout);
        t.p.b.qp.handle_input(&fpdu(untagged(Opcode::Terminate, true, 0, 2, 1, 0), &body, false));
        assert_eq!(t.p.b.events(), [Event::Down(Down::TerminateReceived(term))]);
        assert_eq!(t.p.b.qp.close_action(), Some(Close::Graceful));
        assert_eq!(t.p.b.qp.poll_transmit(&mut [0; 64]), 0, "no Terminate for a Terminate");
        assert_eq!(t.p.b.cq()[0].status, WcStatus::Flushed);
    }
}
