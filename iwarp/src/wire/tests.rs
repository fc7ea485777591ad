//! Byte fixtures for every iWARP header, four tests each: construct (the
//! view's setters make the bytes), deconstruct (its accessors read them),
//! parse (the repr from the bytes) and emit (the bytes from the repr, over
//! a buffer of 0xa5 so every byte is seen written).
//!
//! The fixtures are written out by hand from the layouts of RFC 5044,
//! RFC 6581, RFC 5041 and RFC 5040, not produced by the code under test;
//! where one exists they are the bytes of a Linux capture (the reference's
//! NVMe/RDMA exchange with siw). The one CRC was computed apart, with a
//! bitwise CRC32C.

use super::*;

/// Bytes from hex, white space ignored.
pub(super) fn hex(s: &str) -> Vec<u8> {
    let s: String = s.split_whitespace().collect();
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
}

/// A buffer for `emit` to write over: every byte of it must be written.
fn dirty(len: usize) -> Vec<u8> {
    vec![0xa5; len]
}

/// RFC 5044 §7.1 / RFC 6581 §7.1: Linux's host asking nvmet-rdma for its
/// admin queue: enhanced, revision 2, PD_Length 36, IRD 128 / ORD 0, then
/// the NVMe/RDMA CM request (recfmt 0, qid 0, hrqsize 32, hsqsize 31).
pub(super) mod mpa_frame {
    use super::*;

    pub(in crate::wire) fn bytes() -> Vec<u8> {
        let mut b = b"MPA ID Req Frame".to_vec();
        b.extend(hex("10 02 0024  0080 0000  0000 0000 2000 1f00"));
        b.resize(56, 0);
        b
    }

    /// The NVMe/RDMA CM request Linux's host sends for its admin queue
    /// (recfmt 0, qid 0, hrqsize 32, hsqsize 31, 24 reserved bytes).
    fn cm_req() -> Vec<u8> {
        let mut v = hex("0000 0000 2000 1f00");
        v.resize(32, 0);
        v
    }

    pub(in crate::wire) fn repr() -> MpaFrame {
        MpaFrame {
            kind: MpaKind::Request,
            markers: false,
            crc: false,
            reject: false,
            enhanced: true,
            rev: 2,
            ird_ord: Some(IrdOrd { ird: 128, ..IrdOrd::default() }),
            private_data: cm_req(),
        }
    }

    #[test]
    fn construct() {
        let mut b = vec![0; 56];
        let mut p = MpaPacket::new_unchecked(&mut b);
        p.set_key(MpaKind::Request.key());
        p.set_enhanced(true);
        p.set_rev(2);
        p.set_pd_length(36);
        let pd = p.private_data_mut();
        IrdOrdPacket::new_unchecked(&mut pd[..4]).set_ird(128);
        pd[4..].copy_from_slice(&cm_req());
        assert_eq!(b, bytes());
    }

    #[test]
    fn deconstruct() {
        let b = bytes();
        let p = MpaPacket::new_checked(&b).unwrap();
        assert_eq!(p.key(), b"MPA ID Req Frame");
        assert_eq!(p.flags(), 0x10);
        assert_eq!((p.markers(), p.crc(), p.reject(), p.enhanced()), (false, false, false, true));
        assert_eq!((p.rev(), p.pd_length()), (2, 36));
        assert_eq!(p.private_data()[..4], hex("0080 0000"));
        assert_eq!(p.private_data()[4..], cm_req());
        // PD_Length says 36: a buffer one short of that is refused.
        assert_eq!(MpaPacket::new_checked(&b[..55]), Err(WireError::Truncated));
        assert_eq!(MpaPacket::new_checked(&b[..19]), Err(WireError::Truncated));
    }

    #[test]
    fn parse() {
        let b = bytes();
        assert_eq!(MpaFrame::parse(&MpaPacket::new_checked(&b).unwrap()), Ok(repr()));
        assert_eq!(MpaFrame::parse(&MpaPacket::new_unchecked(&b[..40])), Err(WireError::Truncated));
    }

    #[test]
    fn emit() {
        let r = repr();
        let mut out = dirty(r.buffer_len());
        r.emit(&mut MpaPacket::new_unchecked(&mut out));
        assert_eq!(out, bytes());
    }
}

/// RFC 6581 §7.1: the IRD/ORD words of siw's Reply to a peer-to-peer
/// Request with a Write RTR: A in the IRD word, C and ORD 16 in the ORD's.
mod ird_ord {
    use super::*;

    const BYTES: [u8; 4] = [0x80, 0x00, 0x80, 0x10];
    const REPR: IrdOrd =
        IrdOrd { ird: 0, ord: 16, p2p: true, send_rtr: false, write_rtr: true, read_rtr: false };

    #[test]
    fn construct() {
        let mut b = [0; 4];
        let mut p = IrdOrdPacket::new_unchecked(&mut b);
        p.set_ord(16);
        p.set_p2p(true);
        p.set_write_rtr(true);
        assert_eq!(b, BYTES);
        // The values keep to their 14 bits, the flags keep theirs.
        let mut p = IrdOrdPacket::new_unchecked(&mut b);
        p.set_ird(0xffff);
        assert_eq!(b, [0xbf, 0xff, 0x80, 0x10]);
    }

    #[test]
    fn deconstruct() {
        let p = IrdOrdPacket::new_checked(&BYTES).unwrap();
        assert_eq!((p.ird(), p.ord()), (0, 16));
        assert_eq!(
            (p.p2p(), p.send_rtr(), p.write_rtr(), p.read_rtr()),
            (true, false, true, false)
        );
        assert_eq!(IrdOrdPacket::new_checked(&BYTES[..3]), Err(WireError::NoIrdOrd));
    }

    #[test]
    fn parse() {
        assert_eq!(IrdOrd::parse(&IrdOrdPacket::new_unchecked(&BYTES)), Ok(REPR));
        // B and D: a zero-length Send and a zero-length Read as RTR.
        let io = IrdOrd::parse(&IrdOrdPacket::new_unchecked(&[0x40, 0x01, 0x40, 0x02])).unwrap();
        assert_eq!((io.send_rtr, io.read_rtr, io.ird, io.ord), (true, true, 1, 2));
    }

    #[test]
    fn emit() {
        let mut out = dirty(REPR.buffer_len());
        REPR.emit(&mut IrdOrdPacket::new_unchecked(&mut out));
        assert_eq!(out, BYTES);
    }
}

/// RFC 5044 §7.2: a Send of one byte (0x5a) with CRC: ULPDU_Length 19,
/// the 18-byte untagged header and the byte, three bytes of PAD to the
/// 4-byte boundary, and the CRC32C's little-endian bytes.
mod fpdu {
    use super::*;

    const ULPDU: &str = "4143 00000000 00000000 00000001 00000000 5a";

    fn bytes() -> Vec<u8> {
        hex(&format!("0013 {ULPDU} 000000 13cd73e4"))
    }

    #[test]
    fn construct() {
        let mut b = vec![0; 28];
        let mut p = FpduPacket::new_unchecked(&mut b);
        p.set_ulpdu_length(19);
        p.ulpdu_mut().copy_from_slice(&hex(ULPDU));
        p.fill_crc();
        assert_eq!(b, bytes());
    }

    #[test]
    fn deconstruct() {
        let b = bytes();
        let p = FpduPacket::new_checked(&b).unwrap();
        assert_eq!(p.ulpdu_length(), 19);
        assert_eq!(p.ulpdu(), hex(ULPDU));
        assert_eq!(p.pad(), [0, 0, 0]);
        assert_eq!(p.crc(), 0xe473_cd13);
        assert_eq!(p.compute_crc(), 0xe473_cd13);
        assert_eq!(FpduPacket::new_checked(&b[..27]), Err(WireError::Truncated));
        assert_eq!(FpduPacket::new_checked(&b[..1]), Err(WireError::Truncated));
    }

    #[test]
    fn parse() {
        let mut b = bytes();
        let want = Ok(FpduRepr { ulpdu_len: 19 });
        assert_eq!(FpduRepr::parse(&FpduPacket::new_unchecked(&b), true), want);
        // One flipped payload bit: refused with CRC on, taken with it off.
        b[20] ^= 1;
        assert_eq!(FpduRepr::parse(&FpduPacket::new_unchecked(&b), true), Err(WireError::BadCrc));
        assert_eq!(FpduRepr::parse(&FpduPacket::new_unchecked(&b), false), want);
    }

    #[test]
    fn emit() {
        let r = FpduRepr { ulpdu_len: 19 };
        let mut out = dirty(r.buffer_len());
        let mut p = FpduPacket::new_unchecked(&mut out);
        p.set_ulpdu_length(19);
        p.ulpdu_mut().copy_from_slice(&hex(ULPDU));
        r.emit(&mut p, true);
        assert_eq!(out, bytes());
        // CRC off: the trailer is zeros.
        r.emit(&mut FpduPacket::new_unchecked(&mut out), false);
        assert_eq!(out[24..], [0; 4]);
        // The transmit path builds the same FPDU from the header repr.
        let h = DdpHeader::parse(&hex(ULPDU)).unwrap();
        let mut v = Vec::new();
        emit_fpdu(&h, &[0x5a], true, &mut v);
        assert_eq!(v, bytes());
    }
}

/// RFC 5041 §4.1 and RFC 5040 §4.2: the control bytes of the last
/// segment of a Read Response (T, L, DV 1; RV 1, opcode 2).
mod ctrl {
    use super::*;

    const BYTES: [u8; 2] = [0xc1, 0x42];
    const REPR: Ctrl = Ctrl { last: true, opcode: Opcode::ReadResponse };

    #[test]
    fn construct() {
        let mut b = [0; 2];
        let mut p = CtrlPacket::new_unchecked(&mut b);
        p.set_tagged(true);
        p.set_last(true);
        p.set_dv(1);
        p.set_rv(1);
        p.set_opcode(2);
        assert_eq!(b, BYTES);
    }

    #[test]
    fn deconstruct() {
        let p = CtrlPacket::new_checked(&BYTES).unwrap();
        assert_eq!((p.tagged(), p.last(), p.dv(), p.rv(), p.opcode()), (true, true, 1, 1, 2));
        assert_eq!(
            CtrlPacket::new_checked(&BYTES[..1]),
            Err(WireError::ShortUlpdu { len: 1, need: 2 })
        );
    }

    #[test]
    fn parse() {
        assert_eq!(Ctrl::parse(&CtrlPacket::new_unchecked(&BYTES), false), Ok(REPR));
        // A middle segment of a Send: L and T clear.
        let send = Ctrl::parse(&CtrlPacket::new_unchecked(&[0x01, 0x43]), false);
        assert_eq!(send, Ok(Ctrl { last: false, opcode: Opcode::Send }));
        // Opcode 8 only where the one-shot opcodes were agreed to.
        let adv = CtrlPacket::new_unchecked([0x41, 0x48]);
        assert_eq!(Ctrl::parse(&adv, false), Err(WireError::BadOpcode(8)));
        assert_eq!(Ctrl::parse(&adv, true).map(|c| c.opcode), Ok(Opcode::SendAdvertise));
    }

    #[test]
    fn emit() {
        let mut out = dirty(REPR.buffer_len());
        REPR.emit(&mut CtrlPacket::new_unchecked(&mut out));
        assert_eq!(out, BYTES);
    }
}

/// RFC 5041 §4.2: the tagged header of the capture's Read Response, last
/// segment, to the target's sink STag and TO.
mod tagged {
    use super::*;

    const HEADER: &str = "c142 842e7201 ff29a58f50051000";
    const REPR: DdpHeader = DdpHeader::Tagged {
        ctrl: Ctrl { last: true, opcode: Opcode::ReadResponse },
        stag: 0x842e_7201,
        to: 0xff29_a58f_5005_1000,
    };

    #[test]
    fn construct() {
        let mut b = vec![0; 14];
        let mut p = TaggedPacket::new_unchecked(&mut b);
        REPR.ctrl().emit(&mut p.ctrl_mut());
        p.set_stag(0x842e_7201);
        p.set_to(0xff29_a58f_5005_1000);
        assert_eq!(b, hex(HEADER));
    }

    #[test]
    fn deconstruct() {
        let b = hex(&format!("{HEADER} 0102"));
        let p = TaggedPacket::new_checked(&b).unwrap();
        assert_eq!(p.ctrl().opcode(), 2);
        assert_eq!((p.stag(), p.to()), (0x842e_7201, 0xff29_a58f_5005_1000));
        assert_eq!(p.payload(), [1, 2]);
        let short = TaggedPacket::new_checked(&b[..13]);
        assert_eq!(short, Err(WireError::ShortUlpdu { len: 13, need: 14 }));
    }

    #[test]
    fn parse() {
        let b = hex(HEADER);
        assert_eq!(DdpHeader::parse_tagged(&TaggedPacket::new_unchecked(&b), false), Ok(REPR));
        assert_eq!(DdpHeader::parse(&b), Ok(REPR));
        // An untagged opcode in a tagged view (T set too) is refused.
        let send = hex("c143 00000000 0000000000000000");
        let p = TaggedPacket::new_unchecked(&send);
        assert_eq!(DdpHeader::parse_tagged(&p, false), Err(WireError::BadOpcode(3)));
    }

    #[test]
    fn emit() {
        let mut out = dirty(REPR.buffer_len());
        REPR.emit(&mut out);
        assert_eq!(out, hex(HEADER));
    }
}

/// RFC 5041 §4.3 with RFC 5040 §4.1's Invalidate STag: the capture's Send
/// with Invalidate carrying the host's key, QN 0, MSN 1, MO 0.
mod untagged {
    use super::*;

    const HEADER: &str = "4144 7fe79101 00000000 00000001 00000000";
    const REPR: DdpHeader = DdpHeader::Untagged {
        ctrl: Ctrl { last: true, opcode: Opcode::SendInvalidate },
        inval_stag: 0x7fe7_9101,
        qn: 0,
        msn: 1,
        mo: 0,
    };

    #[test]
    fn construct() {
        let mut b = vec![0; 18];
        let mut p = UntaggedPacket::new_unchecked(&mut b);
        REPR.ctrl().emit(&mut p.ctrl_mut());
        p.set_inval_stag(0x7fe7_9101);
        p.set_qn(0);
        p.set_msn(1);
        p.set_mo(0);
        assert_eq!(b, hex(HEADER));
    }

    #[test]
    fn deconstruct() {
        // A middle segment of a Send instead, so that no field is zero.
        let b = hex("0143 00000001 00000002 00000003 00000590 5a");
        let p = UntaggedPacket::new_checked(&b).unwrap();
        assert_eq!((p.ctrl().last(), p.ctrl().opcode()), (false, 3));
        assert_eq!((p.inval_stag(), p.qn(), p.msn(), p.mo()), (1, 2, 3, 0x590));
        assert_eq!(p.payload(), [0x5a]);
        let short = UntaggedPacket::new_checked(&b[..17]);
        assert_eq!(short, Err(WireError::ShortUlpdu { len: 17, need: 18 }));
    }

    #[test]
    fn parse() {
        let b = hex(HEADER);
        assert_eq!(DdpHeader::parse_untagged(&UntaggedPacket::new_unchecked(&b), false), Ok(REPR));
        assert_eq!(DdpHeader::parse(&b), Ok(REPR));
    }

    #[test]
    fn emit() {
        let mut out = dirty(REPR.buffer_len());
        REPR.emit(&mut out);
        assert_eq!(out, hex(HEADER));
    }
}

/// RFC 5040 §4.4: the capture's Read Request: 1 KiB from the host's
/// source STag into the target's sink.
mod read_request {
    use super::*;

    const BODY: &str = "842e7201 ff29a58f50051000 00000400 7fe79101 ff2af6414290a000";
    const REPR: ReadRequest = ReadRequest {
        sink_stag: 0x842e_7201,
        sink_to: 0xff29_a58f_5005_1000,
        size: 1024,
        src_stag: 0x7fe7_9101,
        src_to: 0xff2a_f641_4290_a000,
    };

    #[test]
    fn construct() {
        let mut b = vec![0; 28];
        let mut p = ReadRequestPacket::new_unchecked(&mut b);
        p.set_sink_stag(0x842e_7201);
        p.set_sink_to(0xff29_a58f_5005_1000);
        p.set_size(1024);
        p.set_src_stag(0x7fe7_9101);
        p.set_src_to(0xff2a_f641_4290_a000);
        assert_eq!(b, hex(BODY));
    }

    #[test]
    fn deconstruct() {
        let b = hex(BODY);
        let p = ReadRequestPacket::new_checked(&b).unwrap();
        assert_eq!((p.sink_stag(), p.sink_to()), (0x842e_7201, 0xff29_a58f_5005_1000));
        assert_eq!(p.size(), 1024);
        assert_eq!((p.src_stag(), p.src_to()), (0x7fe7_9101, 0xff2a_f641_4290_a000));
        assert_eq!(ReadRequestPacket::new_checked(&b[..27]), Err(WireError::Truncated));
    }

    #[test]
    fn parse() {
        let b = hex(BODY);
        assert_eq!(ReadRequest::parse(&ReadRequestPacket::new_unchecked(&b)), Ok(REPR));
    }

    #[test]
    fn emit() {
        let mut out = dirty(REPR.buffer_len());
        REPR.emit(&mut ReadRequestPacket::new_unchecked(&mut out));
        assert_eq!(out, hex(BODY));
    }
}

/// RFC 5040 §4.8: DDP / untagged / MSN out of range, quoting the
/// segment's length (M) and DDP header (D); in the RFC's layout and in
/// siw's x86 one (nibbles swapped, M/D/R in bits 0/1/2).
mod terminate {
    use super::*;

    const QUOTED: &str = "0012 4143 00000000 00000000 00000002 00000000";
    const CASES: [(TermLayout, &str); 2] =
        [(TermLayout::Rfc5040, "12 03 c0 00"), (TermLayout::LinuxX86, "21 03 03 00")];

    fn bytes(head: &str) -> Vec<u8> {
        hex(&format!("{head} {QUOTED}"))
    }

    fn repr() -> Terminate {
        let mut t = Terminate::new(TermLayer::Ddp, 2, 3);
        t.seg_len = Some(0x12);
        t.ddp_header = Some(hex(&QUOTED[5..]));
        t
    }

    #[test]
    fn construct() {
        for (layout, head) in CASES {
            let mut b = vec![0; 4 + 2 + 18];
            let mut p = TerminatePacket::new_unchecked(&mut b);
            p.set_layer_etype(layout, 1, 2);
            p.set_error_code(3);
            p.set_hdrct(layout, 0x80 | 0x40);
            p.quoted_mut().copy_from_slice(&hex(QUOTED));
            assert_eq!(b, bytes(head), "{layout:?}");
        }
    }

    #[test]
    fn deconstruct() {
        for (layout, head) in CASES {
            let b = bytes(head);
            let p = TerminatePacket::new_checked(&b).unwrap();
            assert_eq!((p.layer(layout), p.etype(layout), p.error_code()), (1, 2, 3));
            assert_eq!(p.hdrct(layout), 0xc0, "{layout:?}");
            assert_eq!(p.quoted(), hex(QUOTED));
        }
        assert_eq!(TerminatePacket::new_checked(&[0x12, 3, 0]), Err(WireError::BadTerminate));
    }

    #[test]
    fn parse() {
        for (layout, head) in CASES {
            let b = bytes(head);
            assert_eq!(Terminate::parse(&TerminatePacket::new_unchecked(&b), layout), Ok(repr()));
        }
        // Hdrct says D, but the quoted header is cut short.
        let cut = TerminatePacket::new_unchecked(hex("12 03 40 00 4143 0000"));
        assert_eq!(Terminate::parse(&cut, TermLayout::Rfc5040), Err(WireError::BadTerminate));
    }

    #[test]
    fn emit() {
        let t = repr();
        for (layout, head) in CASES {
            let mut out = dirty(t.buffer_len());
            t.emit(&mut TerminatePacket::new_unchecked(&mut out), layout);
            assert_eq!(out, bytes(head), "{layout:?}");
        }
    }
}
