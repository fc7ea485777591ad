//! Two QPs in memory with controlled time: every opcode, segmentation,
//! RTRs, Read ordering, Send with Invalidate, closes and timeouts.

mod common;

use std::time::Duration;

use common::*;
use iwarp::wire::{DdpHeader, Opcode};
use iwarp::{
    Access, Close, Device, Down, Event, Qp, QpState, Rtr, SendOp, SetupError, Stag, Wc, WcOpcode,
    WcStatus,
};
use ulp_ddp::{SgEntry, Sgl, sgl};

fn remote_rw() -> Access {
    Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ
}

fn ok(wr_id: u64, opcode: WcOpcode, byte_len: u32) -> Wc {
    Wc {
        wr_id,
        opcode,
        status: WcStatus::Success,
        byte_len,
        invalidated: None,
        solicited: false,
        advertised: None,
    }
}

#[test]
fn setup_negotiates_crc_ird_ord_and_private_data() {
    for crc in [false, true] {
        let p = Pair::connect(crc, |c, active| {
            (c.ird, c.ord) = if active { (8, 4) } else { (2, 16) };
        });
        assert_eq!(p.a.qp.crc(), crc);
        assert_eq!(p.b.qp.crc(), crc, "either side asking turns CRC on");
        // The responder serves what the initiator issues and issues no
        // more than the initiator serves.
        assert_eq!(p.b.qp.ird_ord(), (4, 8));
        assert_eq!(p.a.qp.ird_ord(), (8, 4));
        // The Request on the wire: enhanced revision 2, C as asked, no M.
        assert_eq!(&p.a.sent[..16], b"MPA ID Req Frame");
        assert_eq!(p.a.sent[16], 0x10 | if crc { 0x40 } else { 0 });
        assert_eq!(&p.a.sent[17..24], [2, 0, 16, 0, 8, 0, 4]);
        assert_eq!(*p.a.qp.state(), QpState::Rts);
    }
}

/// Every data-moving opcode, with CRC on and off, each checked on both
/// sides: bytes placed, completions, and what crossed the wire.
#[test]
fn every_opcode_with_and_without_crc() {
    for crc in [false, true] {
        let mut p = Pair::connect(crc, |_, _| {});
        let (b_stag, b_mem) = p.b.mr(8192, 0, 0x10_0000, remote_rw());
        let (inv_stag, _) = p.b.mr(64, 0, 0, remote_rw());
        let (inv2_stag, _) = p.b.mr(64, 0, 0, remote_rw());
        let recvs: Vec<_> = (0..4).map(|i| p.b.post_recv(100 + i, 4096)).collect();
        let msg = bytes(3000, 1);
        p.a.post(1, SendOp::Send { sgl: whole(&msg), solicited: false, invalidate: None });
        p.a.post(2, SendOp::Send { sgl: whole(&bytes(10, 2)), solicited: true, invalidate: None });
        let inv = |s| Some(Stag(s));
        p.a.post(
            3,
            SendOp::Send {
                sgl: whole(&bytes(0, 0)),
                solicited: false,
                invalidate: inv(inv_stag.0),
            },
        );
        p.a.post(
            4,
            SendOp::Send {
                sgl: whole(&bytes(5, 4)),
                solicited: true,
                invalidate: inv(inv2_stag.0),
            },
        );
        let data = bytes(5000, 9);
        p.a.post(5, SendOp::Write { sgl: whole(&data), stag: b_stag, to: 0x10_0100 });
        let (sink, sink_mem) = p.a.mr(5000, 0, 0x2000, Access::LOCAL_WRITE | Access::REMOTE_WRITE);
        p.a.post(6, SendOp::Read { sink, sink_to: 0x2000, len: 5000, stag: b_stag, to: 0x10_0100 });
        p.pump();

        assert_eq!(
            p.a.cq(),
            [
                ok(1, WcOpcode::Send, 3000),
                ok(2, WcOpcode::Send, 10),
                ok(3, WcOpcode::Send, 0),
                ok(4, WcOpcode::Send, 5),
                ok(5, WcOpcode::RdmaWrite, 5000),
                ok(6, WcOpcode::RdmaRead, 5000),
            ]
        );
        let wcs = p.b.cq();
        let recv = |wr_id, len, inv: Option<Stag>, se| Wc {
            invalidated: inv,
            solicited: se,
            ..ok(wr_id, WcOpcode::Recv, len)
        };
        assert_eq!(
            wcs,
            [
                recv(100, 3000, None, false),
                recv(101, 10, None, true),
                recv(102, 0, Some(inv_stag), false),
                recv(103, 5, Some(inv2_stag), true),
            ]
        );
        assert_eq!(&recvs[0].to_vec()[..3000], &msg.to_vec()[..]);
        assert_eq!(&b_mem.to_vec()[0x100..0x100 + 5000], &data.to_vec()[..]);
        assert_eq!(sink_mem.to_vec(), data.to_vec(), "read back what was written");
        assert!(!p.b.dev.is_valid(inv_stag) && !p.b.dev.is_valid(inv2_stag));

        // The opcodes and MSNs on the wire, in order.
        let ops: Vec<_> = p.a.fpdus().iter().map(|(h, _)| h.ctrl().opcode).collect();
        use Opcode::*;
        assert_eq!(
            ops,
            [
                Send,
                Send,
                Send,
                SendSe,
                SendInvalidate,
                SendSeInvalidate,
                Write,
                Write,
                Write,
                Write,
                ReadRequest
            ]
        );
        let b_ops: Vec<_> = p.b.fpdus().iter().map(|(h, _)| h.ctrl().opcode).collect();
        assert_eq!(b_ops, [ReadResponse; 4]);
    }
}

/// FPDUs are cut at MULPDU: each fits one TCP segment of the EMSS, MOs
/// and TOs advance by what the previous segment carried, only the last
/// has L.
#[test]
fn segmentation_at_mulpdu() {
    for mtu in [576, 1500, 9000] {
        let emss = mtu - 52;
        let mut p = Pair::connect(true, |c, _| *c = c.clone().path_mtu(mtu));
        let (b_stag, _) = p.b.mr(20000, 0, 0, remote_rw());
        p.b.post_recv(1, 20000);
        p.a.post(
            1,
            SendOp::Send { sgl: whole(&bytes(10000, 3)), solicited: false, invalidate: None },
        );
        p.a.post(2, SendOp::Write { sgl: whole(&bytes(10000, 3)), stag: b_stag, to: 7 });
        p.pump();
        let mulpdu = iwarp::wire::mulpdu(emss);
        assert_eq!(p.a.qp.mulpdu(), mulpdu);
        let fpdus = p.a.fpdus();
        let (mut mo, mut to) = (0u32, 7u64);
        for (h, payload) in &fpdus {
            assert!(iwarp::wire::fpdu_len(h.buffer_len() + payload.len()) <= emss);
            match *h {
                DdpHeader::Untagged { ctrl, mo: m, msn, .. } => {
                    assert_eq!((m, msn), (mo, 1));
                    mo += payload.len() as u32;
                    assert_eq!(ctrl.last, mo == 10000);
                    assert!(ctrl.last || payload.len() == mulpdu - 18);
                }
                DdpHeader::Tagged { ctrl, to: t, .. } => {
                    assert_eq!(t, to);
                    to += payload.len() as u64;
                    assert_eq!(ctrl.last, to == 10007);
                    assert!(ctrl.last || payload.len() == mulpdu - 14);
                }
            }
        }
        assert_eq!((mo, to), (10000, 10007));
        assert_eq!(
            fpdus.len(),
            10000usize.div_ceil(mulpdu - 18) + 10000usize.div_ceil(mulpdu - 14)
        );
        assert_eq!(p.b.cq(), [Wc { ..ok(1, WcOpcode::Recv, 10000) }]);
    }
}

/// The initiator's byte stream, replayed into a fresh responder cut into
/// two pieces at every byte, and in pieces of every size up to 64: the
/// same bytes land and the same completions come, CRC on and off.
#[test]
fn fpdus_cut_at_every_byte() {
    for (crc, markers) in [(false, false), (true, false), (false, true), (true, true)] {
        let run = |cuts: &dyn Fn(&[u8]) -> Vec<Vec<u8>>| {
            let mut p = Pair::connect(crc, |c, _| c.markers = markers);
            p.piece = 7;
            let (stag, mem) = p.b.mr(4096, 0, 0, remote_rw());
            let (inv, _) = p.b.mr(16, 0, 0, remote_rw());
            let recvs: Vec<_> = (0..3).map(|i| p.b.post_recv(i, 1024)).collect();
            // The recorded stream from the first run goes to a fresh side;
            // with markers, three land in it.
            p.a.post(
                1,
                SendOp::Send { sgl: whole(&bytes(1000, 1)), solicited: false, invalidate: None },
            );
            p.a.post(2, SendOp::Write { sgl: whole(&bytes(100, 2)), stag, to: 1000 });
            p.a.post(
                3,
                SendOp::Send { sgl: whole(&bytes(3, 3)), solicited: true, invalidate: Some(inv) },
            );
            p.a.post(4, SendOp::Write { sgl: whole(&bytes(1, 4)), stag, to: 0 });
            p.a.post(
                5,
                SendOp::Send { sgl: whole(&bytes(0, 5)), solicited: false, invalidate: None },
            );
            // Let a emit without b seeing it, then feed b in the given cuts.
            let mut stream = Vec::new();
            let mut buf = [0u8; 512];
            loop {
                let n = p.a.qp.poll_transmit(&mut buf);
                if n == 0 {
                    break;
                }
                stream.extend_from_slice(&buf[..n]);
            }
            for piece in cuts(&stream) {
                p.b.qp.handle_input(&piece);
            }
            let data: Vec<_> = recvs.iter().map(|r| r.to_vec()).collect();
            (p.b.cq(), data, mem.to_vec(), p.b.events(), stream.len())
        };
        let whole_run = run(&|s| vec![s.to_vec()]);
        assert_eq!(whole_run.0.len(), 3, "three receives complete");
        assert!(whole_run.3.is_empty(), "no Terminate");
        let len = whole_run.4;
        assert!(!markers || len > 2 * 512, "the stream crosses marker positions");
        for k in 0..=len {
            let r = run(&|s| vec![s[..k].to_vec(), s[k..].to_vec()]);
            assert_eq!(r, whole_run, "crc {crc}, markers {markers}, cut at {k}");
        }
        for piece in 1..=64 {
            let r = run(&|s| s.chunks(piece).map(<[u8]>::to_vec).collect());
            assert_eq!(r, whole_run, "crc {crc}, markers {markers}, pieces of {piece}");
        }
    }
}

/// An initiator that says it will issue thousands of Reads at once gets a
/// responder that serves 128, siw's limit: what a peer can make a
/// connection hold in queued Read Requests stays bounded.
#[test]
fn the_responder_serves_no_more_reads_at_once_than_a_device_would() {
    let p = Pair::connect(false, |c, active| {
        (c.ird, c.ord) = if active { (8, 16_000) } else { (2, 16) };
    });
    assert_eq!(p.b.qp.ird_ord(), (128, 8));
    // The Reply tells the initiator so: IRD 128, ORD 8.
    assert_eq!(&p.b.sent[20..24], [0, 128, 0, 8]);
    assert_eq!(p.a.qp.ird_ord(), (8, 128));
}

#[test]
fn peer_to_peer_rtr_variants() {
    for rtr in [Rtr::Write, Rtr::Read, Rtr::Send] {
        for crc in [false, true] {
            let mut p = Pair::connect(crc, |c, _| c.p2p = Some(rtr));
            // The first FPDU is the RTR, as RFC 6581 and siw send it.
            let first = &p.a.fpdus()[0];
            match rtr {
                Rtr::Write => assert_eq!(first.0, tagged(Opcode::Write, true, 1, 0)),
                Rtr::Read => {
                    assert_eq!(first.0, untagged(Opcode::ReadRequest, true, 0, 1, 1, 0));
                    assert_eq!(
                        first.1,
                        hex("00000001 0000000000000000 00000000 00000001 0000000000000000")
                    );
                    // Answered with a zero-length Read Response to STag 1.
                    assert_eq!(p.b.fpdus()[0].0, tagged(Opcode::ReadResponse, true, 1, 0));
                }
                Rtr::Send => assert_eq!(first.0, untagged(Opcode::Send, true, 0, 0, 1, 0)),
            }
            // Reply words: P2P echoed and the RTR picked, IRD and ORD 128.
            let reply = &p.b.sent[20..24];
            let want = match rtr {
                Rtr::Write => [0x80, 0x80, 0x80, 0x80],
                Rtr::Read => [0x80, 0x80, 0x40, 0x80],
                Rtr::Send => [0xc0, 0x80, 0x00, 0x80],
            };
            assert_eq!(reply, want, "{rtr:?}");
            // The RTR consumed nothing the ULP posted; traffic flows.
            let r = p.b.post_recv(9, 16);
            p.a.post(
                1,
                SendOp::Send { sgl: whole(&bytes(16, 7)), solicited: false, invalidate: None },
            );
            p.pump();
            assert_eq!(p.b.cq(), [ok(9, WcOpcode::Recv, 16)]);
            assert_eq!(r.to_vec(), bytes(16, 7).to_vec());
            // A Send RTR took MSN 1; the ULP's first Send is MSN 2.
            let last = p.a.fpdus().last().unwrap().0;
            let msn = if rtr == Rtr::Send { 2 } else { 1 };
            assert_eq!(last, untagged(Opcode::Send, true, 0, 0, msn, 0));
        }
    }
}

#[test]
fn a_responder_waiting_for_an_rtr_refuses_anything_else() {
    let da = Device::new();
    let pd = da.alloc_pd();
    let mut a = Qp::connect(&da, cfg(pd, false), &[], T0).unwrap();
    let db = Device::new();
    let mut b = Qp::listen(&db, cfg(db.alloc_pd(), false), T0);
    let mut buf = vec![0; 4096];
    let n = a.poll_transmit(&mut buf);
    // Rewrite the Request's IRD word to ask for P2P with a Write RTR.
    buf[20] |= 0x80;
    buf[22] |= 0x80;
    b.handle_input(&buf[..n]);
    assert!(matches!(b.poll_event(), Some(Event::ConnectRequest { .. })));
    b.accept(&[]).unwrap();
    let _ = b.poll_transmit(&mut buf);
    // A Send where the Write RTR belongs.
    b.handle_input(&fpdu(untagged(Opcode::Send, true, 0, 0, 1, 0), &[], false));
    let n = b.poll_transmit(&mut buf);
    assert_eq!(&buf[20..24], hex("20 07 00 00"), "LLP / MPA / no matching RTR");
    assert_eq!(n, 28);
    assert!(matches!(b.poll_event(), Some(Event::Down(Down::TerminateSent(_)))));
}

/// Outbound Reads stop at the ORD and complete in order; the responder
/// answers them in order.
#[test]
fn reads_in_order_within_the_ord() {
    let mut p = Pair::connect(false, |c, active| {
        (c.ird, c.ord) = if active { (4, 2) } else { (8, 8) };
    });
    assert_eq!(p.a.qp.ird_ord().1, 2);
    let (src, _) = p.b.mr(4096, 0, 0, remote_rw());
    p.b.dev.write(p.b.pd, src, 0, &bytes(4096, 5).to_vec(), Access::REMOTE_WRITE).unwrap();
    let sinks: Vec<_> = (0..4)
        .map(|i| p.a.mr(1024, 0, 0x9000 * (i + 1), Access::LOCAL_WRITE | Access::REMOTE_WRITE))
        .collect();
    for (i, (sink, _)) in sinks.iter().enumerate() {
        let (to, sink_to) = (1024 * i as u64, 0x9000 * (i as u64 + 1));
        p.a.post(i as u64, SendOp::Read { sink: *sink, sink_to, len: 1024, stag: src, to });
    }
    // Before any response: two Read Requests on the wire, no more.
    let mut buf = vec![0; 1 << 16];
    let mut n = 0;
    while let k @ 1.. = p.a.qp.poll_transmit(&mut buf[n..]) {
        n += k;
    }
    let reqs = parse_fpdus(&buf[..n], false, false);
    assert_eq!(reqs.len(), 2);
    assert!(!p.a.qp.has_output());
    p.a.sent.extend_from_slice(&buf[..n]);
    p.b.qp.handle_input(&buf[..n]);
    p.pump();
    assert_eq!(p.a.cq(), (0..4).map(|i| ok(i, WcOpcode::RdmaRead, 1024)).collect::<Vec<_>>());
    for (i, (_, mem)) in sinks.iter().enumerate() {
        assert_eq!(mem.to_vec(), bytes(4096, 5).to_vec()[1024 * i..1024 * (i + 1)]);
    }
    // MSNs of Read Requests count on their own queue.
    let msns: Vec<_> =
        p.a.fpdus()
            .iter()
            .map(|(h, _)| match h {
                DdpHeader::Untagged { qn: 1, msn, .. } => *msn,
                _ => 0,
            })
            .collect();
    assert_eq!(msns, [1, 2, 3, 4]);
}

/// Send with Invalidate: the STag is invalid by the time the completion
/// can be polled, the completion names it, and a second use of the STag
/// is refused with no byte touched.
#[test]
fn send_with_invalidate_then_a_second_use_is_refused() {
    let mut p = Pair::connect(false, |_, _| {});
    let (stag, mem) = p.b.mr(4096, 0xee, 0, remote_rw());
    p.b.post_recv(1, 64);
    p.a.post(1, SendOp::Write { sgl: whole(&bytes(100, 1)), stag, to: 0 });
    p.a.post(
        2,
        SendOp::Send { sgl: whole(&bytes(16, 2)), solicited: false, invalidate: Some(stag) },
    );
    p.pump();
    assert!(!p.b.dev.is_valid(stag), "invalid before the completion is polled");
    let wc = p.b.qp.poll_cq().unwrap();
    assert_eq!((wc.status, wc.invalidated), (WcStatus::Success, Some(stag)));
    // A Write to the same STag now: Terminate, DDP / tagged / invalid STag.
    let before = mem.to_vec();
    p.a.post(3, SendOp::Write { sgl: whole(&bytes(100, 3)), stag, to: 0 });
    p.pump();
    assert_eq!(mem.to_vec(), before);
    let (h, body) = p.b.fpdus().pop().unwrap();
    assert_eq!(h, untagged(Opcode::Terminate, true, 0, 2, 1, 0));
    assert_eq!(&body[..6], hex("11 00 c0 00 0072"));
    assert!(matches!(p.a.events()[..], [Event::Down(Down::TerminateReceived(_))]));
    assert_eq!(p.a.qp.close_action(), Some(Close::Graceful));
    assert_eq!(p.b.qp.close_action(), Some(Close::Graceful));
    // Reusing the index needs a registration, which moves the key.
    let again = p.b.dev.alloc_mr(p.b.pd);
    assert_ne!(again, stag);
}

#[test]
fn fast_register_and_local_invalidate_run_in_queue_order() {
    let mut p = Pair::connect(false, |_, _| {});
    let stag = p.b.dev.alloc_mr(p.b.pd);
    let mem = ulp_ddp::IoBuf::new(256);
    let key1 = stag.next_key();
    let sgl = sgl![SgEntry { buf: mem.clone(), offset: 0, len: 256 }];
    p.b.post(1, SendOp::FastReg { stag: key1, sgl, iova: 0x100, access: remote_rw() });
    p.b.post(2, SendOp::Send { sgl: Sgl::new(), solicited: false, invalidate: None });
    p.a.post_recv(9, 16);
    p.pump();
    assert!(p.b.dev.is_valid(key1));
    p.a.post(3, SendOp::Write { sgl: whole(&bytes(8, 8)), stag: key1, to: 0x100 });
    p.pump();
    assert_eq!(mem.to_vec()[..8], bytes(8, 8).to_vec()[..]);
    p.b.post(4, SendOp::LocalInv { stag: key1 });
    p.b.post(5, SendOp::LocalInv { stag: key1 });
    p.pump();
    let wcs = p.b.cq();
    assert_eq!(
        wcs[..3],
        [ok(1, WcOpcode::FastReg, 0), ok(2, WcOpcode::Send, 0), ok(4, WcOpcode::LocalInv, 0)]
    );
    assert_eq!(wcs[3].status, WcStatus::LocalProtection, "invalidated once only");
}

#[test]
fn a_clean_close_sends_what_is_posted_and_an_abort_flushes() {
    let mut p = Pair::connect(false, |_, _| {});
    p.b.post_recv(1, 64);
    p.b.post_recv(2, 64);
    p.a.post(1, SendOp::Send { sgl: whole(&bytes(64, 1)), solicited: false, invalidate: None });
    p.a.qp.disconnect();
    assert_eq!(p.a.qp.close_action(), None, "not before the Send left");
    assert!(p.a.qp.post_recv(iwarp::RecvWr { wr_id: 7, sgl: Sgl::new() }).is_ok());
    p.pump();
    assert_eq!(p.a.qp.close_action(), Some(Close::Graceful));
    assert_eq!(p.b.cq(), [ok(1, WcOpcode::Recv, 64)]);
    // The FIN reaches b.
    p.b.qp.transport_closed();
    assert_eq!(p.b.events(), [Event::Down(Down::Closed)]);
    assert_eq!(
        p.b.cq().iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(),
        [(2, WcStatus::Flushed)]
    );
    p.a.qp.transport_closed();
    assert_eq!(
        p.a.cq().iter().map(|w| w.status).collect::<Vec<_>>(),
        [WcStatus::Success, WcStatus::Flushed]
    );

    let mut p = Pair::connect(false, |_, _| {});
    p.a.qp.post_recv(iwarp::RecvWr { wr_id: 5, sgl: Sgl::new() }).unwrap();
    p.a.post(1, SendOp::Send { sgl: whole(&bytes(64, 1)), solicited: false, invalidate: None });
    p.a.qp.abort();
    assert_eq!(p.a.qp.close_action(), Some(Close::Abortive));
    assert_eq!(p.a.events(), [Event::Down(Down::Aborted)]);
    let flushed: Vec<_> = p.a.cq().iter().map(|w| (w.wr_id, w.status)).collect();
    assert_eq!(flushed, [(1, WcStatus::Flushed), (5, WcStatus::Flushed)]);
    assert_eq!(p.a.qp.poll_transmit(&mut [0; 64]), 0, "nothing leaves after an abort");
}

#[test]
fn setup_timeouts_follow_the_clock() {
    let dev = Device::new();
    let pd = dev.alloc_pd();
    let mut a = Qp::connect(&dev, cfg(pd, false), &[], T0).unwrap();
    assert_eq!(a.poll_timeout(), Some(Duration::from_secs(10)));
    a.handle_timeout(Duration::from_millis(9999));
    assert_eq!(a.poll_event(), None);
    a.handle_timeout(Duration::from_secs(10));
    assert_eq!(a.poll_event(), Some(Event::Down(Down::Setup(SetupError::Timeout("Reply")))));
    assert_eq!(a.close_action(), Some(Close::Abortive));

    let mut b = Qp::listen(&dev, cfg(pd, false), Duration::from_secs(100));
    b.handle_timeout(Duration::from_secs(104));
    assert_eq!(b.poll_event(), None);
    b.handle_timeout(Duration::from_secs(105));
    assert_eq!(b.poll_event(), Some(Event::Down(Down::Setup(SetupError::Timeout("Request")))));
}

/// siw's accept race: an initiator told to settle sends nothing after the
/// Reply until its clock has moved on that far, then sends what was posted.
#[test]
fn an_initiator_holds_its_first_fpdu_for_the_reply_settle_time() {
    let settle = Duration::from_millis(50);
    let mut p = Pair::connect(false, |c, active| {
        if active {
            c.reply_settle = settle;
        }
    });
    let inbox = p.b.post_recv(1, 64);
    p.a.post(7, SendOp::Send { sgl: whole(&bytes(32, 3)), solicited: false, invalidate: None });
    p.pump();
    assert!(p.a.fpdus().is_empty(), "held until the clock moves");
    assert_eq!(p.a.qp.poll_timeout(), Some(T0), "asks for the time at once");
    let t1 = Duration::from_secs(3);
    p.a.qp.handle_timeout(t1);
    assert_eq!(p.a.qp.poll_timeout(), Some(t1 + settle));
    p.pump();
    assert!(p.a.fpdus().is_empty());
    p.a.qp.handle_timeout(t1 + settle - Duration::from_millis(1));
    p.pump();
    assert!(p.a.fpdus().is_empty());
    p.a.qp.handle_timeout(t1 + settle);
    assert_eq!(p.a.qp.poll_timeout(), None);
    p.pump();
    assert_eq!(p.a.fpdus().len(), 1);
    assert_eq!(p.b.cq(), vec![ok(1, WcOpcode::Recv, 32)]);
    assert_eq!(inbox.lock()[..32], bytes(32, 3).lock()[..]);
}

#[test]
fn refuses_early_data_and_garbage() {
    let dev = Device::new();
    let pd = dev.alloc_pd();
    let request = |flags: u8, extra: &[u8]| {
        let mut b = b"MPA ID Req Frame".to_vec();
        b.extend([flags, 2, 0, 4, 0, 16, 0, 16]);
        b.extend_from_slice(extra);
        b
    };
    // Bytes right behind the Request: the initiator did not wait.
    let mut b = Qp::listen(&dev, cfg(pd, false), T0);
    b.handle_input(&request(0x10, &[0, 0x12]));
    assert_eq!(b.poll_event(), Some(Event::Down(Down::Setup(SetupError::EarlyData))));
    // Not an MPA frame at all.
    let mut b = Qp::listen(&dev, cfg(pd, false), T0);
    b.handle_input(b"GET / HTTP/1.1\r\n");
    assert!(matches!(b.poll_event(), Some(Event::Down(Down::Setup(SetupError::Mpa(_))))));
}

/// M is per direction (RFC 5044 §7.1): each side gets markers in what it
/// receives if it asked, every 512 octets from its first FPDU, each one
/// pointing back at the FPDU it sits in; data and CRCs come through.
#[test]
fn markers_go_each_way_they_were_asked_for() {
    for (a_asks, b_asks) in [(true, false), (false, true), (true, true)] {
        let mut p =
            Pair::connect(true, |c, active| c.markers = if active { a_asks } else { b_asks });
        assert_eq!(p.a.sent[16] & 0x80 != 0, a_asks, "M in the Request");
        assert_eq!(p.a.qp.markers(), (a_asks, b_asks));
        assert_eq!(p.b.qp.markers(), (b_asks, a_asks));
        // MULPDU leaves room for the markers.
        let mulpdu =
            |m| if m { iwarp::wire::marker::mulpdu(1448) } else { iwarp::wire::mulpdu(1448) };
        assert_eq!(p.a.qp.mulpdu(), mulpdu(b_asks));
        assert_eq!(p.b.qp.mulpdu(), mulpdu(a_asks));
        let (b_stag, b_mem) = p.b.mr(20000, 0, 0, remote_rw());
        let (a_stag, a_mem) = p.a.mr(20000, 0, 0, remote_rw());
        let recv = p.b.post_recv(1, 5000);
        let (msg, data) = (bytes(5000, 1), bytes(20000, 2));
        p.a.post(1, SendOp::Send { sgl: whole(&msg), solicited: false, invalidate: None });
        p.a.post(2, SendOp::Write { sgl: whole(&data), stag: b_stag, to: 0 });
        p.b.post(3, SendOp::Write { sgl: whole(&data), stag: a_stag, to: 0 });
        p.pump();
        assert_eq!(p.a.cq(), [ok(1, WcOpcode::Send, 5000), ok(2, WcOpcode::RdmaWrite, 20000)]);
        assert_eq!(p.b.cq(), [ok(1, WcOpcode::Recv, 5000), ok(3, WcOpcode::RdmaWrite, 20000)]);
        assert_eq!(recv.to_vec(), msg.to_vec());
        assert_eq!(b_mem.to_vec(), data.to_vec());
        assert_eq!(a_mem.to_vec(), data.to_vec());
        // On the wire: a marker every 512 octets of each direction that
        // asked, none in the other; each points back at its FPDU.
        for (side, marked) in [(&p.a, b_asks), (&p.b, a_asks)] {
            let start = mpa_len(&side.sent);
            let stream = &side.sent[start..];
            let fpdus = side.fpdus();
            let mut starts = Vec::new();
            let mut at = 0;
            while at < stream.len() {
                if marked && at % 512 == 0 {
                    at += 4;
                    continue;
                }
                starts.push(at);
                let ulpdu = usize::from(u16::from_be_bytes([stream[at], stream[at + 1]]));
                let body = 2 + ulpdu + (4 - (2 + ulpdu) % 4) % 4 + 4;
                // Markers inside the FPDU: the one right behind its trailer
                // belongs to the next.
                let mut end = at;
                for _ in 0..body {
                    end += if marked && end % 512 == 0 { 5 } else { 1 };
                }
                at = end;
            }
            assert_eq!(starts.len(), fpdus.len());
            if marked {
                for m in (0..stream.len()).step_by(512) {
                    let ptr = usize::from(u16::from_be_bytes([stream[m + 2], stream[m + 3]]));
                    if starts.contains(&(m + 4)) {
                        assert_eq!(ptr, 0, "the marker in front of an FPDU at {m}");
                    } else {
                        let head = starts.iter().copied().rfind(|&s| s < m).unwrap();
                        assert_eq!(ptr, m - head, "the marker at {m}");
                    }
                }
            }
        }
    }
}

#[test]
fn a_reject_carries_private_data_back() {
    let dev = Device::new();
    let pd = dev.alloc_pd();
    let mut a = Qp::connect(&dev, cfg(pd, false), b"req", T0).unwrap();
    let mut b = Qp::listen(&dev, cfg(pd, false), T0);
    let mut buf = [0; 512];
    let n = a.poll_transmit(&mut buf);
    b.handle_input(&buf[..n]);
    assert!(matches!(b.poll_event(), Some(Event::ConnectRequest { .. })));
    b.reject(&hex("0000 0400")).unwrap();
    let n = b.poll_transmit(&mut buf);
    assert_eq!(&buf[16..n], hex("30 02 0008 0000 0000 0000 0400"));
    a.handle_input(&buf[..n]);
    assert_eq!(a.poll_event(), Some(Event::Rejected { private_data: hex("0000 0400") }));
    assert_eq!(a.close_action(), Some(Close::Graceful));
    assert!(
        a.post_send(iwarp::SendWr {
            wr_id: 0,
            signaled: true,
            op: SendOp::LocalInv { stag: Stag(1) }
        })
        .is_err()
    );
}
