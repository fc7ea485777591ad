//! Byte fixtures for every PDU type: construct (setters), deconstruct
//! (accessors), parse (repr from bytes) and emit (bytes from repr). The
//! fixtures are written out by hand from the specification's layouts, not
//! produced by the code under test.

use super::*;
use nvme_of::nvme::{Cqe, SglDescriptor, Sqe, Status};

const HD: Framing = Framing { digests: Digests { header: true, data: true }, pda: 0 };
const NONE: Framing = Framing::INITIAL;

fn le32(v: u32) -> [u8; 4] {
    v.to_le_bytes()
}

/// Fill in HDGST at `hlen` and DDGST at the end over `data_at..end-4`.
fn with_digests(mut b: Vec<u8>, hlen: usize, data: Option<std::ops::Range<usize>>) -> Vec<u8> {
    let h = crc32c::crc32c(&b[..hlen]);
    b[hlen..hlen + 4].copy_from_slice(&le32(h));
    if let Some(r) = data {
        let d = crc32c::crc32c(&b[r.clone()]);
        b[r.end..r.end + 4].copy_from_slice(&le32(d));
    }
    b
}

fn check(bytes: &[u8], framing: Framing, repr: PduRepr, data: &[u8]) {
    // parse
    let pdu = Pdu::new_checked(bytes).expect("fixture has a whole header");
    assert_eq!(PduRepr::parse(&pdu, framing), Ok(repr));
    assert_eq!(repr.plen() as usize, bytes.len());
    assert_eq!(pdu.plen() as usize, bytes.len());
    assert_eq!(pdu.pdo(), repr.pdo());
    // emit
    let mut out = vec![0xa5; bytes.len()];
    repr.emit(&mut out, data);
    assert_eq!(out, bytes);
    // the framer sees the same PDU
    let mut f = Framer::new(repr.pdu_type().direction());
    f.set_framing(framing);
    let (n, ev) = f.next(bytes).expect("valid");
    assert_eq!(ev, Some(Event::Header(repr)));
    let mut got = Vec::new();
    let mut at = n;
    loop {
        let (n, ev) = f.next(&bytes[at..]).expect("valid");
        at += n;
        match ev {
            Some(Event::Data { offset, bytes }) => {
                assert_eq!(offset as usize, got.len());
                got.extend_from_slice(bytes);
            }
            Some(Event::End { data_digest }) => {
                assert_eq!(data_digest, repr.ddgst.then(|| crc32c::crc32c(data)));
                break;
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(at, bytes.len());
    assert_eq!(got, data);
}

#[test]
fn crc32c_check_value() {
    assert_eq!(crc32c(b"123456789"), 0xE306_9283);
    assert_eq!(crc32c_append(crc32c(b"1234"), b"56789"), 0xE306_9283);
}

#[test]
fn ic_req() {
    let mut bytes = vec![0u8; 128];
    bytes[..16].copy_from_slice(&[
        0x00, 0x00, 0x80, 0x00, 0x80, 0x00, 0x00, 0x00, // CH: ICReq, HLEN=PLEN=128
        0x00, 0x00, 0x02, 0x03, 0x03, 0x00, 0x00, 0x00, // PFV 0, HPDA 2, DGST 3, MAXR2T 3
    ]);
    // deconstruct
    let pdu = Pdu::new_checked(&bytes[..]).unwrap();
    assert_eq!(pdu.pdu_type(), Some(PduType::IcReq));
    assert_eq!(
        (pdu.hlen(), pdu.plen(), pdu.pfv(), pdu.pda(), pdu.dgst(), pdu.ic_limit()),
        (128, 128, 0, 2, 3, 3)
    );
    // construct
    let mut b = vec![0u8; 128];
    let mut pdu = Pdu::new_unchecked(&mut b[..]);
    pdu.set_pdu_type(PduType::IcReq);
    pdu.set_hlen(128);
    pdu.set_plen(128);
    pdu.set_pda(2);
    pdu.set_dgst(3);
    pdu.set_ic_limit(3);
    assert_eq!(b, bytes);
    let ic = IcReq { pfv: 0, hpda: 2, digests: Digests { header: true, data: true }, maxr2t: 3 };
    check(&bytes, NONE, PduRepr::new(Header::IcReq(ic), HD, 0), &[]);
}

#[test]
fn ic_resp() {
    let mut bytes = vec![0u8; 128];
    bytes[..16].copy_from_slice(&[
        0x01, 0x00, 0x80, 0x00, 0x80, 0x00, 0x00, 0x00, // CH: ICResp
        0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x40,
        0x00, // PFV 0, CPDA 0, DGST 1, MAXH2CDATA 4 MiB
    ]);
    let pdu = Pdu::new_checked(&bytes[..]).unwrap();
    assert_eq!((pdu.pda(), pdu.dgst(), pdu.ic_limit()), (0, 1, 0x40_0000));
    let mut b = vec![0u8; 128];
    let mut pdu = Pdu::new_unchecked(&mut b[..]);
    pdu.set_pdu_type(PduType::IcResp);
    pdu.set_hlen(128);
    pdu.set_plen(128);
    pdu.set_dgst(1);
    pdu.set_ic_limit(0x40_0000);
    assert_eq!(b, bytes);
    let ic = IcResp {
        pfv: 0,
        cpda: 0,
        digests: Digests { header: true, data: false },
        maxh2cdata: 0x40_0000,
    };
    check(&bytes, NONE, PduRepr::new(Header::IcResp(ic), NONE, 0), &[]);
}

#[test]
fn term_req() {
    let offending = [0x05u8, 0x00, 0x19, 0x00, 0x18, 0x00, 0x00, 0x00];
    let mut bytes = vec![
        0x03, 0x00, 0x18, 0x00, 0x20, 0x00, 0x00,
        0x00, // CH: C2HTermReq, HLEN 24, PDO 0, PLEN 32
        0x01, 0x00, 0x02, 0x00, 0x00, 0x00, // FES 1, FEI 2 at the unaligned offset 10
    ];
    bytes.extend_from_slice(&[0; 10]);
    bytes.extend_from_slice(&offending);
    let pdu = Pdu::new_checked(&bytes[..]).unwrap();
    assert_eq!((pdu.fes(), pdu.fei()), (1, 2));
    let mut b = vec![0u8; 24];
    let mut pdu = Pdu::new_unchecked(&mut b[..]);
    pdu.set_pdu_type(PduType::C2hTermReq);
    pdu.set_hlen(24);
    pdu.set_plen(32);
    pdu.set_fes(1);
    pdu.set_fei(2);
    assert_eq!(b, bytes[..24]);
    let t = TermReq { fes: Fes::InvalidHeaderField, fei: 2 };
    // Digests never apply to a TermReq, even when negotiated.
    check(&bytes, HD, PduRepr::new(Header::C2hTermReq(t), HD, 8), &offending);
    let mut h2c = bytes.clone();
    h2c[0] = 0x02;
    check(&h2c, HD, PduRepr::new(Header::H2cTermReq(t), HD, 8), &offending);
}

#[test]
fn capsule_cmd_with_digests_and_in_capsule_data() {
    let data = *b"8 bytes!";
    let mut bytes = vec![
        0x04, 0x03, 0x48, 0x4c, 0x58, 0x00, 0x00,
        0x00, // CH: HDGSTF|DDGSTF, HLEN 72, PDO 76, PLEN 88
        0x01, 0x40, 0x07, 0x00, 0x01, 0x00, 0x00, 0x00, // SQE: Write, PSDT SGL, CID 7, NSID 1
    ];
    bytes.extend_from_slice(&[0; 16]); // CDW2, CDW3, MPTR
    bytes.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 0, 8, 0, 0, 0, 0, 0, 0, 0x01]); // SGL: in-capsule, 8 B
    bytes.extend_from_slice(&[0x10, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]); // SLBA 16, NLB 0 (one block)
    bytes.extend_from_slice(&[0; 12]); // CDW13..15
    bytes.extend_from_slice(&[0; 4]); // HDGST
    bytes.extend_from_slice(&data);
    bytes.extend_from_slice(&[0; 4]); // DDGST
    let bytes = with_digests(bytes, 72, Some(76..84));
    let pdu = Pdu::new_checked(&bytes[..]).unwrap();
    assert_eq!(pdu.header_digest(), Some(pdu.compute_header_digest()));
    assert_eq!(pdu.sqe()[..4], [0x01, 0x40, 0x07, 0x00]);
    let mut sqe = Sqe::rw(nvme_of::nvme::io::WRITE, 1, 16, 1, SglDescriptor::in_capsule(8));
    sqe.cid = 7;
    check(&bytes, HD, PduRepr::new(Header::CapsuleCmd(CapsuleCmd { sqe }), HD, 8), &data);
}

#[test]
fn capsule_cmd_without_data_has_no_pdo_or_ddgst() {
    let mut sqe = Sqe::new(nvme_of::nvme::admin::KEEP_ALIVE, 0, SglDescriptor::transport(0));
    sqe.cid = 3;
    let repr = PduRepr::new(Header::CapsuleCmd(CapsuleCmd { sqe }), HD, 0);
    let mut bytes = vec![0u8; 76];
    bytes[..8].copy_from_slice(&[0x04, 0x01, 0x48, 0x00, 0x4c, 0, 0, 0]);
    let mut s = [0u8; 64];
    sqe.emit(&mut s);
    bytes[8..72].copy_from_slice(&s);
    let bytes = with_digests(bytes, 72, None);
    check(&bytes, HD, repr, &[]);
}

#[test]
fn capsule_resp() {
    let mut bytes = vec![
        0x05, 0x01, 0x18, 0x00, 0x1c, 0x00, 0x00, 0x00, // CH: HDGSTF, HLEN 24, PDO 0, PLEN 28
        0x2a, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // DW0 42, DW1
        0xff, 0xff, 0x01, 0x00, 0x07, 0x00, 0x02,
        0x00, // SQHD ffff, SQID 1, CID 7, status: SC 1
    ];
    bytes.extend_from_slice(&[0; 4]);
    let bytes = with_digests(bytes, 24, None);
    let pdu = Pdu::new_checked(&bytes[..]).unwrap();
    assert_eq!(pdu.cqe()[12..14], [7, 0]);
    let mut b = vec![0u8; 24];
    let mut pdu = Pdu::new_unchecked(&mut b[..]);
    pdu.set_pdu_type(PduType::CapsuleResp);
    pdu.set_flags(flags::HDGSTF);
    pdu.set_hlen(24);
    pdu.set_plen(28);
    pdu.cqe_mut().copy_from_slice(&bytes[8..24]);
    assert_eq!(b, bytes[..24]);
    let cqe = Cqe { dw0: 42, sqhd: 0xffff, sqid: 1, cid: 7, ..Cqe::new(7, Status::INVALID_OPCODE) };
    let cqe = Cqe { status: Status::generic(0x01).to_field(), ..cqe };
    check(&bytes, HD, PduRepr::new(Header::CapsuleResp(CapsuleResp { cqe }), HD, 0), &[]);
}

#[test]
fn h2c_data_with_padding() {
    // CPDA 1: data aligned to 8 bytes, so 24 + 4 (HDGST) is padded to PDO 32.
    let framing = Framing { pda: 1, ..HD };
    let data = *b"abcdef";
    let mut bytes = vec![
        0x06, 0x07, 0x18, 0x20, 0x2a, 0x00, 0x00,
        0x00, // CH: HDGSTF|DDGSTF|LAST_PDU, PDO 32, PLEN 42
        0x09, 0x00, 0x05, 0x00, 0x00, 0x10, 0x00, 0x00, // CCCID 9, TTAG 5, DATAO 4096
        0x06, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // DATAL 6
        0, 0, 0, 0, 0, 0, 0, 0, // HDGST, PAD
    ];
    bytes.extend_from_slice(&data);
    bytes.extend_from_slice(&[0; 4]);
    let bytes = with_digests(bytes, 24, Some(32..38));
    let pdu = Pdu::new_checked(&bytes[..]).unwrap();
    assert_eq!((pdu.cccid(), pdu.ttag(), pdu.datao(), pdu.datal()), (9, 5, 4096, 6));
    let mut b = vec![0u8; 24];
    let mut pdu = Pdu::new_unchecked(&mut b[..]);
    pdu.set_pdu_type(PduType::H2cData);
    pdu.set_flags(0x07);
    pdu.set_hlen(24);
    pdu.set_pdo(32);
    pdu.set_plen(42);
    pdu.set_cccid(9);
    pdu.set_ttag(5);
    pdu.set_datao(4096);
    pdu.set_datal(6);
    assert_eq!(b, bytes[..24]);
    let d = DataPdu { cccid: 9, ttag: 5, datao: 4096, last: true, success: false };
    check(&bytes, framing, PduRepr::new(Header::H2cData(d), framing, 6), &data);
}

#[test]
fn c2h_data_success() {
    let data = *b"hello";
    let mut bytes = vec![
        0x07, 0x0c, 0x18, 0x18, 0x1d, 0x00, 0x00,
        0x00, // CH: LAST_PDU|SUCCESS, PDO 24, PLEN 29
        0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // CCCID 1, reserved, DATAO 0
        0x05, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // DATAL 5
    ];
    bytes.extend_from_slice(&data);
    let d = DataPdu { cccid: 1, ttag: 0, datao: 0, last: true, success: true };
    check(&bytes, NONE, PduRepr::new(Header::C2hData(d), NONE, 5), &data);
}

#[test]
fn r2t() {
    let bytes = vec![
        0x09, 0x00, 0x18, 0x00, 0x18, 0x00, 0x00, 0x00, // CH: R2T, PLEN 24
        0x02, 0x00, 0x11, 0x00, 0x00, 0x20, 0x00, 0x00, // CCCID 2, TTAG 17, R2TO 8192
        0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, // R2TL 64 KiB
    ];
    let pdu = Pdu::new_checked(&bytes[..]).unwrap();
    assert_eq!((pdu.cccid(), pdu.ttag(), pdu.datao(), pdu.datal()), (2, 17, 8192, 0x1_0000));
    let r = R2t { cccid: 2, ttag: 17, r2to: 8192, r2tl: 0x1_0000 };
    check(&bytes, NONE, PduRepr::new(Header::R2t(r), NONE, 0), &[]);
}

/// A valid C2HData header (no digests) to break one field at a time.
fn c2h(flags: u8, hlen: u8, pdo: u8, plen: u32, datal: u32) -> Vec<u8> {
    let mut b = vec![0x07, flags, hlen, pdo];
    b.extend_from_slice(&le32(plen));
    b.extend_from_slice(&[1, 0, 0, 0, 0, 0, 0, 0]);
    b.extend_from_slice(&le32(datal));
    b.extend_from_slice(&[0; 4]);
    b
}

fn parse_err(bytes: &[u8], framing: Framing) -> (Fes, u32) {
    let mut f = Framer::new(
        PduType::from_u8(bytes[0]).map_or(Direction::ControllerToHost, PduType::direction),
    );
    f.set_framing(framing);
    let e = f.next(bytes).expect_err("must be refused");
    let view = Pdu::new_checked(bytes).and_then(|p| PduRepr::parse(&p, framing));
    if let Err(v) = view {
        assert_eq!(v, e, "framer and parse agree");
    }
    (e.fes(), e.fei())
}

#[test]
fn malformed_headers_map_to_fes_and_fei() {
    use Fes::*;
    let ok = c2h(flags::LAST_PDU, 24, 24, 24 + 100, 100);
    assert!(PduRepr::parse(&Pdu::new_checked(&ok[..]).unwrap(), NONE).is_ok());

    let mut unknown = ok.clone();
    unknown[0] = 0x08;
    assert_eq!(parse_err(&unknown, NONE), (InvalidHeaderField, 0));
    // A CapsuleCmd travels host to controller; a host must refuse it.
    let mut f = Framer::new(Direction::ControllerToHost);
    let cmd = [0x04u8, 0, 72, 0, 72, 0, 0, 0];
    assert_eq!(f.next(&cmd).unwrap_err(), PduError::BadType(0x04));

    assert_eq!(
        parse_err(&c2h(0x10 | flags::LAST_PDU, 24, 24, 124, 100), NONE),
        (InvalidHeaderField, 1)
    );
    assert_eq!(parse_err(&c2h(flags::SUCCESS, 24, 24, 124, 100), NONE), (InvalidHeaderField, 1));
    // HDGSTF on a connection without header digests, or missing when on.
    assert_eq!(parse_err(&c2h(flags::HDGSTF, 24, 28, 128, 100), NONE), (InvalidHeaderField, 1));
    assert_eq!(parse_err(&c2h(0, 24, 24, 124, 100), HD), (InvalidHeaderField, 1));
    assert_eq!(parse_err(&c2h(0, 23, 24, 124, 100), NONE), (InvalidHeaderField, 2));
    assert_eq!(parse_err(&c2h(0, 25, 24, 124, 100), NONE), (InvalidHeaderField, 2));
    // PDO inside the header, or not aligned to the receiver's PDA.
    assert_eq!(parse_err(&c2h(0, 24, 20, 120, 100), NONE), (InvalidHeaderField, 3));
    assert_eq!(
        parse_err(&c2h(0, 24, 28, 128, 100), Framing { pda: 2, ..NONE }),
        (InvalidHeaderField, 3)
    );
    // PLEN shorter than the header, or with no room for data after PDO.
    assert_eq!(parse_err(&c2h(0, 24, 24, 20, 100), NONE), (InvalidHeaderField, 4));
    assert_eq!(parse_err(&c2h(0, 24, 0, 30, 6), NONE), (InvalidHeaderField, 4));
    // DATAL disagreeing with PLEN.
    assert_eq!(parse_err(&c2h(0, 24, 24, 124, 101), NONE), (InvalidHeaderField, 16));

    // Header digest mismatch: FEI carries the digest received.
    let mut hd = c2h(flags::HDGSTF | flags::DDGSTF, 24, 28, 28 + 100 + 4, 100);
    hd.extend_from_slice(&le32(0xdead_beef));
    assert_eq!(parse_err(&hd, HD), (HeaderDigestError, 0xdead_beef));

    // R2T with data, or an R2TL of 0.
    let r2t = |pdo: u8, plen: u32, r2tl: u32| {
        let mut b = vec![0x09, 0, 24, pdo];
        b.extend_from_slice(&le32(plen));
        b.extend_from_slice(&[1, 0, 1, 0, 0, 0, 0, 0]);
        b.extend_from_slice(&le32(r2tl));
        b.extend_from_slice(&[0; 4]);
        b
    };
    assert_eq!(parse_err(&r2t(24, 28, 8), NONE), (InvalidHeaderField, 3));
    assert_eq!(parse_err(&r2t(0, 28, 8), NONE), (InvalidHeaderField, 4));
    assert_eq!(parse_err(&r2t(0, 24, 0), NONE), (InvalidHeaderField, 16));

    // ICReq / ICResp fields.
    let ic = |t: u8, plen: u32, pfv: u16, pda: u8, dgst: u8, limit: u32| {
        let mut b = vec![t, 0, 128, 0];
        b.extend_from_slice(&le32(plen));
        b.extend_from_slice(&pfv.to_le_bytes());
        b.extend_from_slice(&[pda, dgst]);
        b.extend_from_slice(&le32(limit));
        b.resize(128, 0);
        b
    };
    assert_eq!(parse_err(&ic(0, 127, 0, 0, 0, 0), NONE), (InvalidHeaderField, 4));
    assert_eq!(parse_err(&ic(0, 128, 1, 0, 0, 0), NONE), (UnsupportedParameter, 8));
    assert_eq!(parse_err(&ic(0, 128, 0, 32, 0, 0), NONE), (InvalidHeaderField, 10));
    assert_eq!(parse_err(&ic(0, 128, 0, 0, 4, 0), NONE), (InvalidHeaderField, 11));
    assert_eq!(parse_err(&ic(1, 128, 0, 0, 0, 4095), NONE), (InvalidHeaderField, 12));
    assert_eq!(parse_err(&ic(1, 128, 0, 0, 0, 4098), NONE), (InvalidHeaderField, 12));

    // A TermReq with a PLEN out of 24..=152 is an error that gets no TermReq back.
    let mut term = vec![0x03, 0, 24, 0];
    term.extend_from_slice(&le32(153));
    term.resize(24, 0);
    let e = Framer::new(Direction::ControllerToHost).next(&term).unwrap_err();
    assert_eq!((e.fes(), e.fei(), e.wants_term_req()), (InvalidHeaderField, 4, false));
}

#[test]
fn framer_skip_keeps_sync_inside_data_only() {
    let framing = NONE;
    let d = DataPdu { cccid: 1, ttag: 0, datao: 0, last: true, success: false };
    let repr = PduRepr::new(Header::C2hData(d), framing, 10);
    let mut one = vec![0u8; repr.plen() as usize];
    repr.emit(&mut one, &[7; 10]);
    let mut f = Framer::new(Direction::ControllerToHost);
    let (n, _) = f.next(&one[..26]).unwrap(); // header + 2 data bytes
    assert_eq!(n, 24);
    let (_, ev) = f.next(&one[24..26]).unwrap();
    assert!(matches!(ev, Some(Event::Data { offset: 0, .. })));
    assert_eq!(f.remaining(), Some(8));
    assert!(!f.skip(9), "would reach into the next header");
    assert!(f.skip(5));
    let (_, ev) = f.next(&one[31..]).unwrap();
    assert_eq!(ev, Some(Event::Data { offset: 7, bytes: &[7, 7, 7][..] }));
    let (_, ev) = f.next(&[]).unwrap();
    assert_eq!(ev, Some(Event::End { data_digest: None }));
    assert!(f.at_pdu_start());
}
