//! The iWARP engine, unchanged, over two transports: kernel TCP on
//! loopback and smoltcp on the in-process wire. The same workload runs on
//! each: connection setup with private data (CRC on, peer-to-peer with a
//! Read RTR), a 1 MiB RDMA Write, a 1 MiB RDMA Read, a run of Sends of
//! every size up to 4 KiB, a Send with Invalidate, a refused Write that
//! earns a Terminate on a second connection, and clean closes.
//!
//! On smoltcp each end has the software NIC under its stack, offloads on
//! or off, and the link may lose, reorder and duplicate frames: tagged
//! placement, MPA CRC offload both ways and the one-shot STag paths are
//! checked against the software path and against a hostile peer.

mod link;

use link::*;

use iwarp::{Access, Down, Event, Qp, RecvWr, SendOp, SendWr, Stag, Wc, WcStatus};
use nic_backend::NicConfig;
use smoltcp_glue::Profile;
use ulp_ddp::{Caps, DdpDevice, IoBuf, SgEntry};

#[test]
fn over_kernel_tcp_on_loopback() {
    workload(&mut Kernel::new());
    refused(&mut Kernel::new());
}

#[test]
fn over_smoltcp_on_the_in_process_wire() {
    workload(&mut Smol::new());
    refused(&mut Smol::new());
}

// ---- the software NIC under both ends ----

const KIB64: usize = 64 << 10;

/// A NIC doing `caps`.
fn nic_doing(caps: Caps) -> NicConfig {
    NicConfig { active: caps, ..nic() }
}

fn post(qp: &mut Qp, wr_id: u64, op: SendOp) {
    qp.post_send(SendWr { wr_id, signaled: true, op }).unwrap();
}

/// Register `buf[off..off + len]` through `qp` (so its NIC learns of it)
/// at tagged offset 0x10_0000 with `access`; the STag.
fn reg(qp: &mut Qp, buf: &IoBuf, off: usize, len: usize, access: Access) -> Stag {
    qp.reg_mr(ulp_ddp::sgl![SgEntry { buf: buf.clone(), offset: off, len }], 0x10_0000, access)
        .unwrap()
}

/// Whether two buffers hold the same bytes (without printing megabytes).
fn same(a: &IoBuf, b: &IoBuf) -> bool {
    let (a, b) = (a.to_vec(), b.to_vec());
    if let Some(i) = a.iter().zip(&b).position(|(x, y)| x != y) {
        let n = a[i..].iter().zip(&b[i..]).take_while(|(x, y)| x != y).count();
        eprintln!(
            "first difference at byte {i} of {}, {n} bytes long: {:?} vs {:?}",
            a.len(),
            &a[i..i + 8.min(n)],
            &b[i..i + 8.min(n)]
        );
    }
    a == b
}

fn wait_wcs(link: &mut dyn Link, a: &mut Qp, b: &mut Qp, na: usize, nb: usize) -> [Vec<Wc>; 2] {
    let (mut wa, mut wb) = (Vec::new(), Vec::new());
    run(link, a, b, |a, b| drain(a, &mut wa) >= na && drain(b, &mut wb) >= nb);
    [wa, wb]
}

/// Run until b has received a's answer (a's own completions dropped):
/// b's receive completion for it.
fn answered(link: &mut dyn Link, a: &mut Qp, b: &mut Qp) -> Wc {
    let mut wb = Vec::new();
    run(link, a, b, |a, b| {
        while a.poll_cq().is_some() {}
        drain(b, &mut wb);
        wb.iter().any(|w| w.opcode == iwarp::WcOpcode::Recv)
    });
    wb.into_iter().find(|w| w.opcode == iwarp::WcOpcode::Recv).expect("an answer")
}

#[test]
fn tagged_payload_skips_the_host_with_offloads_and_not_without() {
    const MIB: usize = 1 << 20;
    let mut data = Vec::new();
    for (caps, markers) in [(Caps::ALL, false), (Caps::NONE, false), (Caps::ALL, true)] {
        let mut link = Smol::with([nic_doing(caps); 2], Profile::default());
        let (ea, eb) = (end(), end());
        let (mut a, mut b) = connect_with(&mut link, &ea, &eb, |c, _| c.markers = markers);
        assert_eq!(a.markers(), (markers, markers));
        let rw = Access::LOCAL_WRITE | Access::REMOTE_WRITE;
        let b_sink = IoBuf::new(MIB);
        let b_stag = reg(&mut b, &b_sink, 0, MIB, rw);
        let a_sink = IoBuf::new(MIB);
        let a_stag = reg(&mut a, &a_sink, 0, MIB, rw);
        let b_src = pattern(MIB, 5);
        let src = eb.dev.reg_mr(eb.pd, sgl(&b_src), 0, Access::REMOTE_READ).unwrap();
        let written = pattern(MIB, 7);
        post(&mut a, 1, SendOp::Write { sgl: sgl(&written), stag: b_stag, to: 0x10_0000 });
        let read =
            SendOp::Read { sink: a_stag, sink_to: 0x10_0000, len: MIB as u32, stag: src, to: 0 };
        post(&mut a, 2, read);
        let [wa, wb] = wait_wcs(&mut link, &mut a, &mut b, 2, 0);
        assert!(wa.iter().chain(&wb).all(|w| w.status == WcStatus::Success), "{wa:?} {wb:?}");
        assert!(same(&b_sink, &written), "RDMA Write with {caps}");
        assert!(same(&a_sink, &b_src), "RDMA Read with {caps}");
        let (sa, sb) = (a.stats(), b.stats());
        let tx_crc = link.nics[0].stats().tx_crc_offloaded_bytes;
        eprintln!("{caps}, markers {markers}: a {sa:?}\n  b {sb:?}");
        for s in [sa, sb] {
            assert_eq!(s.tagged_bytes, MIB as u64);
            if caps == Caps::ALL {
                assert_eq!((s.placed_bytes, s.copy_bytes), (MIB as u64, 0), "no copy");
                assert_eq!(s.crc_bytes, 0, "no CRC on the host");
                assert!(s.nic_crc_bytes >= MIB as u64);
            } else {
                assert_eq!((s.placed_bytes, s.copy_bytes), (0, MIB as u64));
                assert!(s.crc_bytes >= MIB as u64 && s.nic_crc_bytes == 0);
            }
        }
        // a's NIC wrote the CRCs of a's Write; b's NIC checked them.
        assert_eq!(tx_crc >= MIB as u64, caps == Caps::ALL);
        // Without markers a's NIC cut the Write into FPDUs itself, and b's
        // the Read Response.
        for nic in &link.nics {
            let framed = nic.stats().tx_fpdus_framed;
            assert_eq!(framed as usize >= MIB / 1460, caps == Caps::ALL && !markers, "{framed}");
        }
        // Segments start at FPDUs, so b's NIC took the Write's FPDUs whole
        // and b's QP walked none of them; not with markers, which it
        // leaves to the QP.
        let whole = link.nics[1].stats().whole_fpdus;
        // At an IP MTU of 1500 an FPDU carries under 1460 bytes; a few
        // straddle segments (a window or the send ring's end cut them).
        assert_eq!(
            whole as usize >= MIB / 1460 * 9 / 10,
            caps == Caps::ALL && !markers,
            "{whole} whole"
        );
        data.push((b_sink.to_vec(), a_sink.to_vec()));
    }
    assert!(data.iter().all(|d| *d == data[0]), "identical data every way");
}

/// A message the NIC would cut into FPDUs goes out by copy where the
/// transport cannot take references, framed by the engine from the same
/// description: byte for byte the FPDUs the engine builds itself when the
/// NIC does not gather (both leave the CRCs to the NIC).
#[test]
fn a_message_the_nic_would_frame_is_framed_by_copy_where_references_cannot_go() {
    let mut wire = Vec::new();
    for caps in [Caps::ALL, Caps::ALL.without(Caps::ZC_TX)] {
        let mut link = Smol::with([nic_doing(caps); 2], Profile::default());
        let (ea, eb) = (end(), end());
        let (mut a, mut b) = connect(&mut link, &ea, &eb);
        let sink = IoBuf::new(KIB64);
        let stag = reg(&mut b, &sink, 0, KIB64, Access::LOCAL_WRITE | Access::REMOTE_WRITE);
        let data = pattern(KIB64, 3);
        post(&mut a, 1, SendOp::Write { sgl: sgl(&data), stag, to: 0x10_0000 });
        // Straight from the QP into a buffer, not through the link.
        let mut out = vec![0u8; 2 * KIB64];
        let n = a.poll_transmit(&mut out);
        wire.push(out[..n].to_vec());
        // One mapping for the whole message, given back at once: nothing
        // went by reference, and nothing is counted so.
        let nic = link.nics[0].stats();
        let mapped = if caps == Caps::ALL { 1 } else { 0 };
        assert_eq!((nic.tx_setup, nic.tx_teardown), (mapped, mapped), "{caps}");
        assert_eq!(a.stats().tx_zero_copy_bytes, 0, "{caps}");
    }
    assert!(wire[0].len() > KIB64, "{} bytes", wire[0].len());
    assert!(wire[0] == wire[1], "the same FPDUs");
}

/// A transport that takes `room` bytes a call, by copy or by reference,
/// and notes where it was told records end.
struct Recorder {
    room: usize,
    offset: u64,
    by_reference: u64,
    ends: Vec<u64>,
}

impl ulp_ddp::TxSink for Recorder {
    fn room(&self) -> usize {
        self.room
    }
    fn write(&mut self, bytes: &[u8]) -> usize {
        let n = bytes.len().min(self.room);
        (self.room, self.offset) = (self.room - n, self.offset + n as u64);
        n
    }
    fn write_by_reference(&mut self, len: usize, _token: u64, _token_offset: u64) -> usize {
        let n = len.min(self.room);
        (self.room, self.offset) = (self.room - n, self.offset + n as u64);
        self.by_reference += n as u64;
        n
    }
    fn end_record(&mut self) {
        self.ends.push(self.offset);
    }
    fn end_records(&mut self, len: usize, stride: usize) {
        let start = self.offset - len as u64;
        self.ends.extend((1..=len / stride).map(|j| start + (j * stride) as u64));
    }
    fn offset(&self) -> u64 {
        self.offset
    }
    fn acked(&self) -> u64 {
        0
    }
}

/// The message the NIC frames reaches its transport by reference, in
/// pieces as room allows (most ending inside an FPDU), and every FPDU of
/// it ends a record exactly where it ends: the short last one too.
#[test]
fn a_message_the_nic_frames_ends_a_record_at_every_fpdu() {
    let mut link = Smol::with([nic_doing(Caps::ALL); 2], Profile::default());
    let (ea, eb) = (end(), end());
    let (mut a, mut b) = connect(&mut link, &ea, &eb);
    let sink = IoBuf::new(KIB64);
    let stag = reg(&mut b, &sink, 0, KIB64, Access::LOCAL_WRITE | Access::REMOTE_WRITE);
    let len = KIB64 - 1000;
    post(&mut a, 1, SendOp::Write { sgl: sgl(&pattern(len, 4)), stag, to: 0x10_0000 });
    let mut out = Recorder { room: 0, offset: 0, by_reference: 0, ends: Vec::new() };
    while a.poll_cq().is_none() {
        out.room = 1000;
        a.poll_send(&mut out);
    }
    let framed = out.offset;
    assert_eq!(out.by_reference, framed, "all of it by reference");
    // Ends told twice, or before anything was queued, end nothing new.
    out.ends.dedup();
    out.ends.retain(|&e| e > 0);
    // FPDUs of one length, the last shorter: where each ends.
    let fpdu = out.ends[0];
    assert!(fpdu > 1000 && !framed.is_multiple_of(fpdu), "{fpdu} {framed}");
    let mut want: Vec<u64> = (1..).map(|i| i * fpdu).take_while(|&e| e < framed).collect();
    want.push(framed);
    assert_eq!(out.ends, want);
}

/// Where the NIC gathers, a message shorter than a page (a capsule's
/// SQE, a CQE, a short Write) is copied into its FPDUs, as Linux siw
/// copies it: mapping it and unmapping it on its ACK would cost more. A
/// page or more goes by reference, in FPDUs cut at MULPDU as ever.
#[test]
fn only_messages_of_a_page_or_more_go_by_reference() {
    let mut link = Smol::with([nic_doing(Caps::ALL); 2], Profile::default());
    let (ea, eb) = (end(), end());
    let (mut a, mut b) = connect(&mut link, &ea, &eb);
    let mut out = Recorder { room: 0, offset: 0, by_reference: 0, ends: Vec::new() };
    for (wr, len, by_reference) in [(1, 64, 0), (2, 4095, 0), (3, 4096, 4096), (4, 20_000, 20_000)]
    {
        let mapped = link.nics[0].stats().tx_setup;
        let before = (out.by_reference, a.stats().tx_zero_copy_bytes);
        post(
            &mut a,
            wr,
            SendOp::Send { sgl: sgl(&pattern(len, 5)), solicited: false, invalidate: None },
        );
        out.room = 1 << 20;
        a.poll_send(&mut out);
        assert_eq!(out.by_reference - before.0, by_reference, "a Send of {len} bytes");
        assert_eq!(a.stats().tx_zero_copy_bytes - before.1, by_reference, "{len}");
        let maps = link.nics[0].stats().tx_setup - mapped;
        assert_eq!(maps, u64::from(by_reference > 0), "{len}");
    }
    // Writes too: one under a page is copied though it takes more than
    // one FPDU (MULPDU about 1400 here), one of a page the NIC frames.
    let sink = IoBuf::new(KIB64);
    let stag = reg(&mut b, &sink, 0, KIB64, Access::LOCAL_WRITE | Access::REMOTE_WRITE);
    for (wr, len, framed) in [(5, 3000, false), (6, 4096, true)] {
        let mapped = link.nics[0].stats().tx_setup;
        let before = out.by_reference;
        post(&mut a, wr, SendOp::Write { sgl: sgl(&pattern(len, 6)), stag, to: 0x10_0000 });
        out.room = 1 << 20;
        a.poll_send(&mut out);
        assert_eq!(out.by_reference > before, framed, "a Write of {len} bytes");
        assert_eq!(link.nics[0].stats().tx_setup - mapped, u64::from(framed), "{len}");
    }
}

/// A signaled Write the NIC frames completes once all of it is handed to
/// the transport, not when it is queued (the buffer is the caller's again
/// then, where it went by copy); and flushed, not lost, if the queue pair
/// goes down before.
#[test]
fn a_write_the_nic_frames_completes_when_it_is_all_handed_over() {
    for abort in [false, true] {
        let mut link = Smol::with([nic_doing(Caps::ALL); 2], Profile::default());
        let (ea, eb) = (end(), end());
        let (mut a, mut b) = connect(&mut link, &ea, &eb);
        let sink = IoBuf::new(KIB64);
        let stag = reg(&mut b, &sink, 0, KIB64, Access::LOCAL_WRITE | Access::REMOTE_WRITE);
        let data = pattern(KIB64, 9);
        post(&mut a, 7, SendOp::Write { sgl: sgl(&data), stag, to: 0x10_0000 });
        let mut out = vec![0u8; 2 * KIB64];
        assert_eq!(a.poll_transmit(&mut out[..10_000]), 10_000);
        assert!(a.poll_cq().is_none(), "not all of it handed over");
        if abort {
            a.abort();
            let wc = a.poll_cq().expect("flushed");
            assert_eq!((wc.wr_id, wc.status), (7, WcStatus::Flushed));
        } else {
            let n = a.poll_transmit(&mut out);
            assert!(n > KIB64 - 10_000, "{n}");
            let wc = a.poll_cq().expect("completed");
            assert_eq!((wc.wr_id, wc.status, wc.byte_len), (7, WcStatus::Success, KIB64 as u32));
        }
    }
}

/// Sends into receives posted to be placed: with offloads the NIC writes
/// them at their MO (markers or not) and the host neither copies nor
/// digests them; a receive posted the ordinary way is copied; without
/// offloads everything is. Identical data every way.
#[test]
fn sends_land_in_receives_the_nic_was_given() {
    const N: usize = 6;
    const SIZE: usize = 8192;
    let mut data = Vec::new();
    for (caps, markers) in [(Caps::ALL, false), (Caps::ALL, true), (Caps::NONE, false)] {
        let mut link = Smol::with([nic_doing(caps); 2], Profile::default());
        let (ea, eb) = (end(), end());
        let (mut a, mut b) = connect_with(&mut link, &ea, &eb, |c, _| c.markers = markers);
        let recvs: Vec<IoBuf> = (0..N).map(|_| IoBuf::new(SIZE)).collect();
        for (i, r) in recvs.iter().enumerate() {
            let wr = RecvWr { wr_id: i as u64, sgl: sgl(r) };
            // The third is an ordinary receive: no NIC behind it.
            if i == 2 { b.post_recv(wr) } else { b.post_recv_placed(wr) }.unwrap();
        }
        for i in 0..N {
            let msg = SendOp::Send {
                sgl: sgl(&pattern(SIZE, i as u8)),
                solicited: false,
                invalidate: None,
            };
            post(&mut a, i as u64, msg);
        }
        let [_, wb] = wait_wcs(&mut link, &mut a, &mut b, N, N);
        assert!(wb.iter().all(|w| w.status == WcStatus::Success && w.byte_len == SIZE as u32));
        for (i, r) in recvs.iter().enumerate() {
            assert!(same(r, &pattern(SIZE, i as u8)), "{caps}: receive {i}");
        }
        let (s, nic) = (b.stats(), link.nics[1].stats());
        let total = (N * SIZE) as u64;
        assert_eq!(s.send_bytes, total);
        if caps == Caps::ALL {
            assert_eq!(nic.recv_setup, N as u64 - 1, "{caps}");
            assert_eq!(
                (s.placed_bytes, s.copy_bytes),
                (total - SIZE as u64, SIZE as u64),
                "{caps}"
            );
            assert_eq!(s.crc_bytes, 0, "{caps}, markers {markers}: no CRC on the host");
        } else {
            assert_eq!((nic.recv_setup, s.placed_bytes, s.copy_bytes), (0, 0, total));
        }
        data.push(recvs.iter().map(IoBuf::to_vec).collect::<Vec<_>>());
    }
    assert!(data.iter().all(|d| *d == data[0]));
}

/// A Send longer than the receive mapped for it: the NIC places none of
/// it and nothing around the buffer changes; the QP answers as RFC 5041
/// says (untagged, message too long).
#[test]
fn a_send_too_long_for_its_placed_receive_lands_nowhere() {
    let mut link = Smol::with([nic(); 2], Profile::default());
    let (ea, eb) = (end(), end());
    let (mut a, mut b) = connect(&mut link, &ea, &eb);
    let buf = IoBuf::from_vec(vec![CANARY; GUARD + 100 + GUARD]);
    let wr = RecvWr {
        wr_id: 1,
        sgl: ulp_ddp::sgl![SgEntry { buf: buf.clone(), offset: GUARD, len: 100 }],
    };
    b.post_recv_placed(wr).unwrap();
    post(
        &mut a,
        1,
        SendOp::Send { sgl: sgl(&pattern(4000, 3)), solicited: false, invalidate: None },
    );
    let mut got = None;
    run(&mut link, &mut a, &mut b, |a, _| {
        got = got.take().or_else(|| a.poll_event());
        got.is_some()
    });
    let Some(Event::Down(Down::TerminateReceived(t))) = got else { panic!("{got:?}") };
    assert_eq!((t.layer as u8, t.etype, t.code), (1, 2, 5));
    assert!(buf.to_vec().iter().all(|&x| x == CANARY), "nothing placed");
    let nic = link.nics[1].stats();
    // Refused once per FPDU: the 4000 bytes came in three.
    assert_eq!((nic.recv_setup, nic.recv_refused, nic.nic_placed_bytes), (1, 3, 0));
}

/// `ios` I/Os in the manner of NVMe over RDMA: b (the host) makes a
/// 64 KiB buffer known to a (the controller), which writes it and
/// answers. One-shot: b advertises in one request and a's answer closes
/// the STag. Classic: b registers, sends, and invalidates it after the
/// answer. Returns b's control calls per I/O and its NIC's counters.
fn io_round(oneshot: bool, ios: usize, offers: [bool; 2], to_b: Profile) -> (f64, ulp_ddp::Stats) {
    let mut link = Smol::with([nic(); 2], to_b);
    let (ea, eb) = (end(), end());
    let (mut a, mut b) = connect_with(&mut link, &ea, &eb, |c, active| {
        c.oneshot_opcodes = offers[usize::from(!active)]
    });
    let patent = offers == [true; 2];
    assert_eq!((a.oneshot_opcodes(), b.oneshot_opcodes()), (patent, patent), "{offers:?}");
    let answers: Vec<IoBuf> = (0..ios).map(|_| IoBuf::new(16)).collect();
    let commands: Vec<IoBuf> = (0..ios).map(|_| IoBuf::new(16)).collect();
    for (i, r) in answers.iter().enumerate() {
        b.post_recv(RecvWr { wr_id: 100 + i as u64, sgl: sgl(r) }).unwrap();
    }
    for (i, c) in commands.iter().enumerate() {
        a.post_recv(RecvWr { wr_id: 200 + i as u64, sgl: sgl(c) }).unwrap();
    }
    let calls_before = b.stats().control_calls;
    let rw = Access::LOCAL_WRITE | Access::REMOTE_WRITE;
    for (i, command) in commands.iter().enumerate() {
        let buf = IoBuf::new(KIB64);
        let stag = eb.dev.alloc_mr(eb.pd).next_key();
        let region = sgl(&buf);
        let cmd = IoBuf::from_vec(stag.0.to_be_bytes().repeat(4));
        if oneshot {
            let op = SendOp::Advertise {
                stag,
                region,
                iova: 0,
                access: rw,
                sgl: sgl(&cmd),
                solicited: false,
            };
            post(&mut b, 1, op);
        } else {
            post(&mut b, 1, SendOp::FastReg { stag, sgl: region, iova: 0, access: rw });
            post(&mut b, 2, SendOp::Send { sgl: sgl(&cmd), solicited: false, invalidate: None });
        }
        // a: the command names the STag; write it, then answer.
        let [got, _] = wait_wcs(&mut link, &mut a, &mut b, 1, 0);
        assert_eq!(got[0].status, WcStatus::Success);
        // Opcode 0x8 names the STag in its header, where agreed.
        assert_eq!(got[0].advertised, (oneshot && patent).then_some(stag));
        let named = Stag(u32::from_be_bytes(command.to_vec()[..4].try_into().unwrap()));
        assert_eq!(named, stag);
        let payload = pattern(KIB64, i as u8);
        post(&mut a, 3, SendOp::Write { sgl: sgl(&payload), stag: named, to: 0 });
        let close = oneshot.then_some(named);
        post(&mut a, 4, SendOp::Send { sgl: sgl(&answers[0]), solicited: true, invalidate: close });
        let answer = answered(&mut link, &mut a, &mut b);
        // The driver's own check: the STag closed is the one advertised.
        assert_eq!(answer.invalidated, close);
        if !oneshot {
            post(&mut b, 5, SendOp::LocalInv { stag });
        }
        assert!(same(&buf, &payload), "I/O {i}");
        assert!(!oneshot || !eb.dev.is_valid(stag), "closed by a");
    }
    run(&mut link, &mut a, &mut b, |_, b| !b.has_output());
    let per_io = (b.stats().control_calls - calls_before) as f64 / ios as f64;
    (per_io, link.nics[1].stats())
}

#[test]
fn one_shot_stags_take_one_control_call_per_io_and_classic_three() {
    let (classic, cs) = io_round(false, 8, [false; 2], Profile::default());
    let (oneshot, os) = io_round(true, 8, [false; 2], Profile::default());
    eprintln!("classic {classic} calls/IO {cs:?}\none-shot {oneshot} calls/IO {os:?}");
    assert_eq!((classic, oneshot), (3.0, 1.0));
    // Both placed every byte; only one-shot let the NIC arm and free.
    for s in [cs, os] {
        assert!(s.nic_placed_bytes >= 8 * KIB64 as u64, "{s:?}");
    }
    assert_eq!((cs.oneshot_armed, cs.stag_remote_invalidate, cs.stag_invalidate), (0, 0, 8));
    assert_eq!((os.oneshot_armed, os.stag_remote_invalidate, os.stag_invalidate), (8, 8, 0));
}

/// Under loss the NIC lets some closing Sends pass (out of step after a
/// loss, or the Send came again as a retransmission): the QP then drops
/// the NIC's copy of the STag itself. A copy left behind refused every
/// later advertisement of its index, and placement faded out with them.
#[test]
fn a_close_the_nic_let_pass_still_frees_its_stag() {
    const IOS: u64 = 64;
    let lossy = Profile { loss: 0.02, ..Profile::default() };
    let (_, s) = io_round(true, IOS as usize, [true; 2], lossy);
    assert!(s.stag_remote_invalidate < IOS, "the NIC let no close pass: {s:?}");
    assert_eq!(s.stag_remote_invalidate + s.stag_invalidate, IOS, "each STag freed once: {s:?}");
    assert_eq!((s.stag_setup, s.stag_setup_fail), (IOS, 0), "{s:?}");
}

/// Writes in the manner of NVMe over RDMA: b (the host) makes a
/// read-only buffer known to a (the controller), which reads it and
/// answers, closing the STag: one-shot with the patent's opcodes, or
/// classic with the standard ones. The NIC's part in an STag is placing
/// into it, so b's NIC is told of none of these, nor of a read-only STag
/// registered and invalidated locally: b's QP answers the Read Requests
/// and frees the STags itself, while b's NIC still frames and gathers
/// every Read Response. a's NIC, as ever, places them into a's sink.
#[test]
fn a_read_only_stag_stays_with_the_qp_and_its_reads_are_still_gathered() {
    const IOS: usize = 4;
    for oneshot in [true, false] {
        let mut link = Smol::with([nic(); 2], Profile::default());
        let (ea, eb) = (end(), end());
        let (mut a, mut b) = connect_with(&mut link, &ea, &eb, |c, _| c.oneshot_opcodes = oneshot);
        let sink_buf = IoBuf::new(KIB64);
        let sink = reg(&mut a, &sink_buf, 0, KIB64, Access::LOCAL_WRITE | Access::REMOTE_WRITE);
        let access = Access::REMOTE_READ;
        for i in 0..IOS {
            let data = pattern(KIB64, i as u8);
            let stag = eb.dev.alloc_mr(eb.pd).next_key();
            let (answer, command) = (IoBuf::new(16), IoBuf::new(16));
            b.post_recv(RecvWr { wr_id: 7, sgl: sgl(&answer) }).unwrap();
            a.post_recv(RecvWr { wr_id: 8, sgl: sgl(&command) }).unwrap();
            let (region, cmd) = (sgl(&data), sgl(&IoBuf::new(16)));
            if oneshot {
                let op =
                    SendOp::Advertise { stag, region, iova: 0, access, sgl: cmd, solicited: false };
                post(&mut b, 1, op);
            } else {
                post(&mut b, 1, SendOp::FastReg { stag, sgl: region, iova: 0, access });
                post(&mut b, 2, SendOp::Send { sgl: cmd, solicited: false, invalidate: None });
            }
            let [got, _] = wait_wcs(&mut link, &mut a, &mut b, 1, 0);
            assert_eq!(got[0].status, WcStatus::Success);
            // a reads the buffer into its sink, then answers, closing it.
            let read = SendOp::Read { sink, sink_to: 0x10_0000, len: KIB64 as u32, stag, to: 0 };
            post(&mut a, 3, read);
            let [got, _] = wait_wcs(&mut link, &mut a, &mut b, 1, 0);
            assert_eq!(got[0].status, WcStatus::Success, "I/O {i}: {got:?}");
            assert!(same(&sink_buf, &data), "I/O {i}");
            let close = Some(stag);
            let op = SendOp::Send { sgl: ulp_ddp::Sgl::new(), solicited: false, invalidate: close };
            post(&mut a, 4, op);
            let answer = answered(&mut link, &mut a, &mut b);
            assert_eq!((answer.status, answer.invalidated), (WcStatus::Success, close));
            assert!(!eb.dev.is_valid(stag), "I/O {i}: closed by a, in b's QP");
        }
        // Registered and invalidated locally, never told either.
        let stag = eb.dev.alloc_mr(eb.pd).next_key();
        let region = sgl(&IoBuf::new(4096));
        post(&mut b, 5, SendOp::FastReg { stag, sgl: region, iova: 0, access });
        post(&mut b, 6, SendOp::LocalInv { stag });
        let [_, got] = wait_wcs(&mut link, &mut a, &mut b, 0, 2);
        assert!(got.iter().all(|w| w.status == WcStatus::Success), "{got:?}");
        assert!(!eb.dev.is_valid(stag));
        run(&mut link, &mut a, &mut b, |_, b| !b.has_output());
        let s = link.nics[1].stats();
        let told = (s.stag_setup, s.oneshot_armed, s.stag_remote_invalidate, s.stag_invalidate);
        assert_eq!(told, (0, 0, 0, 0), "one-shot {oneshot}: {s:?}");
        let bytes = (IOS * KIB64) as u64;
        assert_eq!(s.tx_gathered_bytes, bytes, "one-shot {oneshot}: {s:?}");
        // At least an FPDU for each MSS of payload (MTU 1500).
        assert!(s.tx_fpdus_framed >= bytes / 1460, "one-shot {oneshot}: {s:?}");
        let s = link.nics[0].stats();
        assert_eq!((s.stag_setup, s.nic_placed_bytes), (1, bytes), "a's sink: {s:?}");
    }
}

#[test]
fn a_close_of_another_stag_is_reported_as_what_it_freed() {
    let mut link = Smol::with([nic(); 2], Profile::default());
    let (ea, eb) = (end(), end());
    let (mut a, mut b) = connect(&mut link, &ea, &eb);
    let rw = Access::LOCAL_WRITE | Access::REMOTE_WRITE;
    let other = IoBuf::new(4096);
    let other_stag = reg(&mut b, &other, 0, 4096, rw);
    let buf = IoBuf::new(4096);
    let stag = eb.dev.alloc_mr(eb.pd).next_key();
    let answer = IoBuf::new(16);
    b.post_recv(RecvWr { wr_id: 7, sgl: sgl(&answer) }).unwrap();
    let cmd = IoBuf::new(16);
    a.post_recv(RecvWr { wr_id: 8, sgl: sgl(&cmd) }).unwrap();
    let op = SendOp::Advertise {
        stag,
        region: sgl(&buf),
        iova: 0,
        access: rw,
        sgl: sgl(&cmd),
        solicited: false,
    };
    post(&mut b, 1, op);
    wait_wcs(&mut link, &mut a, &mut b, 1, 1);
    assert_eq!(cmd.to_vec().len(), 16);
    // a answers the command by closing the wrong STag (b's other buffer).
    let inval = Some(other_stag);
    post(&mut a, 2, SendOp::Send { sgl: ulp_ddp::Sgl::new(), solicited: false, invalidate: inval });
    let mut wb = Vec::new();
    run(&mut link, &mut a, &mut b, |_, b| drain(b, &mut wb) > 0);
    let got = wb[0].invalidated;
    assert_eq!(got, Some(other_stag), "the NIC and the QP report what was freed");
    assert_ne!(got, Some(stag), "the driver sees the mismatch");
    assert!(eb.dev.is_valid(stag), "the advertised STag is still there");
    assert_eq!(link.nics[1].stats().stag_remote_invalidate, 1);
    // The driver fails the connection: a fatal protocol violation.
    b.abort();
    run(&mut link, &mut a, &mut b, |a, _| *a.state() == iwarp::QpState::Closed);
}

/// b's buffer: `GUARD` canary bytes either side of `LEN` bytes mapped.
const GUARD: usize = 256;
const LEN: usize = 8192;
const CANARY: u8 = 0xee;

#[test]
fn a_hostile_peer_gets_nothing_placed_and_the_rfc_terminate() {
    let rw = Access::LOCAL_WRITE | Access::REMOTE_WRITE;
    // (what a does, the Terminate's layer/type/code, the NIC refused it).
    type Attack = fn(Stag, Stag, Stag, Stag) -> (SendOp, (u8, u8, u8), bool);
    let attacks: [(&str, Attack); 6] = [
        ("unknown STag", |_, _, _, _| (write(Stag(0x7777_0001), 0x10_0000, 64), (1, 1, 0), true)),
        ("stale key", |s, _, _, _| (write(s.next_key(), 0x10_0000, 64), (1, 1, 0), true)),
        ("no remote-write right", |_, r, _, _| (write(r, 0x10_0000, 64), (1, 1, 0), true)),
        ("TO past the end", |s, _, _, _| {
            (write(s, 0x10_0000 + LEN as u64 - 8, 64), (1, 1, 1), true)
        }),
        ("after its invalidation", |_, _, gone, _| (write(gone, 0x10_0000, 64), (1, 1, 0), true)),
        ("invalidate someone else's STag", |_, _, _, foreign| {
            let op = SendOp::Send {
                sgl: ulp_ddp::Sgl::new(),
                solicited: false,
                invalidate: Some(foreign),
            };
            (op, (0, 1, 9), false)
        }),
    ];
    for (what, attack) in attacks {
        let mut link = Smol::with([nic(); 2], Profile::default());
        let (ea, eb) = (end(), end());
        let (mut a, mut b) = connect(&mut link, &ea, &eb);
        let buf = IoBuf::from_vec(vec![CANARY; GUARD + LEN + GUARD]);
        let stag = reg(&mut b, &buf, GUARD, LEN, rw);
        let ro = reg(&mut b, &buf, GUARD, LEN, Access::REMOTE_READ);
        let gone = reg(&mut b, &buf, GUARD, LEN, rw);
        post(&mut b, 0, SendOp::LocalInv { stag: gone });
        let other_pd = eb.dev.alloc_pd();
        let foreign = eb.dev.reg_mr(other_pd, sgl(&IoBuf::new(64)), 0, rw).unwrap();
        b.post_recv(RecvWr { wr_id: 1, sgl: sgl(&IoBuf::new(64)) }).unwrap();
        let (op, (layer, etype, code), refused) = attack(stag, ro, gone, foreign);
        // b's send queue runs its local requests before a's bytes come.
        run(&mut link, &mut a, &mut b, |_, b| !b.has_output());
        post(&mut a, 9, op);
        let mut got = None;
        run(&mut link, &mut a, &mut b, |a, _| {
            got = got.take().or_else(|| a.poll_event());
            got.is_some()
        });
        let Some(Event::Down(Down::TerminateReceived(t))) = got else { panic!("{what}: {got:?}") };
        assert_eq!((t.layer as u8, t.etype, t.code), (layer, etype, code), "{what}");
        assert!(buf.to_vec().iter().all(|&b| b == CANARY), "{what}: a byte changed");
        let nic = link.nics[1].stats();
        assert_eq!(nic.nic_placed_bytes, 0, "{what}");
        assert_eq!(nic.stag_refused, u64::from(refused), "{what}");
        assert!(eb.dev.is_valid(foreign), "{what}");
    }
}

fn write(stag: Stag, to: u64, len: usize) -> SendOp {
    SendOp::Write { sgl: sgl(&pattern(len, 1)), stag, to }
}

/// Loss, reordering and duplicates, with and without MPA markers in what
/// `b` receives: every byte lands, and the NIC keeps placing, finding its
/// place again by speculation the QP confirms, or by markers.
#[test]
fn loss_reorder_and_duplicates_keep_every_byte_and_place_most() {
    let rw = Access::LOCAL_WRITE | Access::REMOTE_WRITE;
    let profiles = [
        ("loss", Profile { loss: 0.02, ..Profile::default() }),
        ("reorder", Profile { reorder: 0.05, ..Profile::default() }),
        ("duplicate", Profile { duplicate: 0.05, ..Profile::default() }),
        ("all three", Profile { loss: 0.01, reorder: 0.02, duplicate: 0.02, ..Profile::default() }),
    ];
    for markers in [false, true] {
        for (what, profile) in profiles {
            let mut link = Smol::with([nic(); 2], profile);
            let (ea, eb) = (end(), end());
            let (mut a, mut b) =
                connect_with(&mut link, &ea, &eb, |c, active| c.markers = !active && markers);
            assert_eq!(b.markers(), (markers, false));
            const TOTAL: usize = 1 << 20;
            let sink = IoBuf::new(TOTAL);
            let stag = reg(&mut b, &sink, 0, TOTAL, rw);
            let data = pattern(TOTAL, 11);
            for (i, at) in (0..TOTAL).step_by(KIB64).enumerate() {
                let piece = ulp_ddp::sgl![SgEntry { buf: data.clone(), offset: at, len: KIB64 }];
                post(
                    &mut a,
                    i as u64,
                    SendOp::Write { sgl: piece, stag, to: 0x10_0000 + at as u64 },
                );
            }
            // A Send behind the Writes completes once they all landed.
            b.post_recv(RecvWr { wr_id: 1, sgl: ulp_ddp::Sgl::new() }).unwrap();
            post(
                &mut a,
                99,
                SendOp::Send { sgl: ulp_ddp::Sgl::new(), solicited: false, invalidate: None },
            );
            wait_wcs(&mut link, &mut a, &mut b, TOTAL / KIB64 + 1, 1);
            let what = format!("{what}, markers {markers}");
            assert!(same(&sink, &data), "{what}: every byte");
            let (s, nic) = (b.stats(), link.nics[1].stats());
            assert_eq!(s.placed_bytes + s.copy_bytes, TOTAL as u64, "{what}");
            eprintln!(
                "{what}: {:.1}% placed, {:.1}% of CRCs vouched by the NIC, {} resyncs \
                 ({} confirmed), {} from markers",
                100.0 * s.placed_bytes as f64 / TOTAL as f64,
                100.0 * s.nic_crc_bytes as f64 / TOTAL as f64,
                nic.resync,
                nic.resync_confirmed,
                nic.resync_marker,
            );
            assert!(s.placed_bytes > 0, "{what}: the NIC kept placing");
            if markers {
                // Markers leave nothing to speculate about.
                assert_eq!(nic.resync, 0, "{what}");
            } else {
                assert_eq!(nic.resync_marker, 0, "{what}");
            }
            if profile.loss > 0.0 {
                let found = if markers { nic.resync_marker } else { nic.resync_confirmed };
                assert!(found > 0, "{what}: the NIC lost its place and found it");
            }
        }
    }
}

#[test]
fn the_patents_opcodes_are_used_only_when_both_ends_offered_them() {
    // Both offered: opcodes 0x8 and 0xC on the wire, same semantics.
    let (calls, s) = io_round(true, 4, [true; 2], Profile::default());
    assert_eq!(calls, 1.0);
    assert_eq!((s.oneshot_armed, s.stag_remote_invalidate, s.stag_refused), (4, 4, 0));
    // One side offered, the other is a standard peer (as Linux siw):
    // standard Sends and Send with Invalidate, still one call per I/O.
    for offers in [[true, false], [false, true]] {
        let (calls, s) = io_round(true, 4, offers, Profile::default());
        assert_eq!(calls, 1.0);
        assert_eq!((s.oneshot_armed, s.stag_remote_invalidate), (4, 4), "{offers:?}");
    }
}
