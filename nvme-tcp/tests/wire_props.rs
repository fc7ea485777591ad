//! Property tests for the PDU codec and the framer: every field of every PDU
//! type round-trips through emit and parse under every digest and padding
//! combination, and the framer gives the same PDUs however the stream is cut.

use nvme_of::Digests;
use nvme_of::nvme::{Cqe, SglDescriptor, Sqe};
use nvme_tcp::wire::{
    CapsuleCmd, CapsuleResp, DataPdu, Direction, Event, Fes, Framer, Framing, Header, IcReq,
    IcResp, Pdu, PduRepr, R2t, TermReq,
};
use proptest::prelude::*;

fn sqe() -> impl Strategy<Value = Sqe> {
    (any::<[u32; 16]>(), any::<u8>()).prop_map(|(d, id)| Sqe {
        opcode: d[0] as u8,
        flags: (d[0] >> 8) as u8,
        cid: (d[0] >> 16) as u16,
        nsid: d[1],
        cdw2: d[2],
        cdw3: d[3],
        mptr: u64::from(d[4]) | u64::from(d[5]) << 32,
        sgl: SglDescriptor {
            addr: u64::from(d[6]) | u64::from(d[7]) << 32,
            len: d[8],
            rsvd: [d[9] as u8, (d[9] >> 8) as u8, (d[9] >> 16) as u8],
            id,
        },
        cdw10: d[10],
        cdw11: d[11],
        cdw12: d[12],
        cdw13: d[13],
        cdw14: d[14],
        cdw15: d[15],
    })
}

fn cqe() -> impl Strategy<Value = Cqe> {
    any::<(u32, u32, u16, u16, u16, u16)>().prop_map(|(dw0, dw1, sqhd, sqid, cid, status)| Cqe {
        dw0,
        dw1,
        sqhd,
        sqid,
        cid,
        status,
    })
}

fn digests() -> impl Strategy<Value = Digests> {
    (0u8..4).prop_map(Digests::from_bits)
}

/// A header and a data length that together make a valid PDU.
fn header() -> impl Strategy<Value = (Header, u32)> {
    let data = 1u32..3000;
    prop_oneof![
        (any::<u8>(), digests(), any::<u32>()).prop_map(|(hpda, digests, maxr2t)| {
            (Header::IcReq(IcReq { pfv: 0, hpda: hpda % 32, digests, maxr2t }), 0)
        }),
        (any::<u8>(), digests(), 1024u32..u32::MAX / 4).prop_map(|(cpda, digests, m)| {
            (Header::IcResp(IcResp { pfv: 0, cpda: cpda % 32, digests, maxh2cdata: m * 4 }), 0)
        }),
        (any::<u16>(), any::<u32>(), 0u32..=128, any::<bool>()).prop_map(|(fes, fei, n, h2c)| {
            let t = TermReq { fes: Fes::from_u16(fes), fei };
            (if h2c { Header::H2cTermReq(t) } else { Header::C2hTermReq(t) }, n)
        }),
        (sqe(), 0u32..3000).prop_map(|(sqe, n)| (Header::CapsuleCmd(CapsuleCmd { sqe }), n)),
        cqe().prop_map(|cqe| (Header::CapsuleResp(CapsuleResp { cqe }), 0)),
        (any::<(u16, u16, u32, bool)>(), data.clone()).prop_map(
            |((cccid, ttag, datao, last), n)| {
                (Header::H2cData(DataPdu { cccid, ttag, datao, last, success: false }), n)
            }
        ),
        (any::<(u16, u32, bool, bool)>(), data).prop_map(|((cccid, datao, last, success), n)| {
            let last = last || success;
            (Header::C2hData(DataPdu { cccid, ttag: 0, datao, last, success }), n)
        }),
        (any::<(u16, u16, u32)>(), 1u32..).prop_map(|((cccid, ttag, r2to), r2tl)| {
            (Header::R2t(R2t { cccid, ttag, r2to, r2tl }), 0)
        }),
    ]
}

fn framing() -> impl Strategy<Value = Framing> {
    (digests(), 0u8..32).prop_map(|(digests, pda)| Framing { digests, pda })
}

fn pdu() -> impl Strategy<Value = (PduRepr, Framing, Vec<u8>)> {
    (header(), framing(), any::<u8>()).prop_map(|((header, n), framing, seed)| {
        let data: Vec<u8> = (0..n).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed)).collect();
        (PduRepr::new(header, framing, n), framing, data)
    })
}

fn emit(repr: &PduRepr, data: &[u8]) -> Vec<u8> {
    let mut b = vec![0u8; repr.plen() as usize];
    repr.emit(&mut b, data);
    b
}

/// One PDU as the framer reports it: header, its data reassembled, its DDGST.
type Framed = (PduRepr, Vec<u8>, Option<u32>);

/// Run the framer over `chunks`, in order, and collect whole PDUs.
fn frame<'a>(
    accepts: Direction,
    framing: Framing,
    chunks: impl Iterator<Item = &'a [u8]>,
) -> Vec<Framed> {
    let mut f = Framer::new(accepts);
    f.set_framing(framing);
    let mut out: Vec<Framed> = Vec::new();
    let mut cur: Option<(PduRepr, Vec<u8>)> = None;
    for chunk in chunks {
        let mut at = 0;
        loop {
            let (n, ev) = f.next(&chunk[at..]).expect("valid stream");
            at += n;
            match ev {
                None => break,
                Some(Event::Header(r)) => cur = Some((r, Vec::new())),
                Some(Event::Data { offset, bytes }) => {
                    let (_, d) = cur.as_mut().expect("data after header");
                    assert_eq!(offset as usize, d.len(), "data arrives in order");
                    d.extend_from_slice(bytes);
                }
                Some(Event::End { data_digest }) => {
                    let (r, d) = cur.take().expect("end after header");
                    out.push((r, d, data_digest));
                }
            }
        }
        assert_eq!(at, chunk.len());
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn every_pdu_round_trips((repr, framing, data) in pdu()) {
        let bytes = emit(&repr, &data);
        let ty = repr.pdu_type();
        // IC and TermReq PDUs parse the same under any negotiated framing.
        let rx = if ty.has_digests() { framing } else { Framing::INITIAL };
        let view = Pdu::new_checked(&bytes[..]).unwrap();
        prop_assert_eq!(PduRepr::parse(&view, rx), Ok(repr));
        prop_assert_eq!(usize::from(view.pdo()) % rx.alignment(), 0);
        let framed = frame(ty.direction(), rx, std::iter::once(&bytes[..]));
        let ddgst = repr.ddgst.then(|| nvme_tcp::wire::crc32c(&data));
        prop_assert_eq!(framed, vec![(repr, data, ddgst)]);
    }

    #[test]
    fn framer_is_independent_of_segmentation(
        pdus in proptest::collection::vec(pdu(), 1..6),
        framing in framing(),
        cuts in proptest::collection::vec(any::<prop::sample::Index>(), 0..12),
    ) {
        // One direction, one framing: keep the PDUs that travel C2H.
        let mut stream = Vec::new();
        let mut want = Vec::new();
        for (repr, _, data) in &pdus {
            if repr.pdu_type().direction() != Direction::ControllerToHost || !repr.pdu_type().has_digests() {
                continue;
            }
            let repr = PduRepr::new(repr.header, framing, repr.data_len);
            stream.extend_from_slice(&emit(&repr, data));
            want.push((repr, data.clone(), repr.ddgst.then(|| nvme_tcp::wire::crc32c(data))));
        }
        let mut cuts: Vec<usize> = cuts.iter().map(|i| i.index(stream.len() + 1)).collect();
        cuts.sort_unstable();
        let mut pieces = Vec::new();
        let mut prev = 0;
        for c in cuts.into_iter().chain(std::iter::once(stream.len())) {
            pieces.push(&stream[prev..c]);
            prev = c;
        }
        let got = frame(Direction::ControllerToHost, framing, pieces.into_iter());
        prop_assert_eq!(got, want);
    }
}

/// A fixed stream of several PDU types, fed whole, at every single split
/// point, and one byte at a time: the same PDUs come out every time.
#[test]
fn framer_every_split_point() {
    let framing = Framing { digests: Digests { header: true, data: true }, pda: 3 };
    let mut stream = Vec::new();
    let pdus: Vec<(Header, Vec<u8>)> = vec![
        (Header::R2t(R2t { cccid: 1, ttag: 2, r2to: 0, r2tl: 8192 }), vec![]),
        (
            Header::C2hData(DataPdu { cccid: 3, ttag: 0, datao: 0, last: false, success: false }),
            vec![0xab; 300],
        ),
        (
            Header::C2hData(DataPdu { cccid: 3, ttag: 0, datao: 300, last: true, success: true }),
            vec![0xcd; 7],
        ),
        (Header::CapsuleResp(CapsuleResp { cqe: Cqe { cid: 9, ..Cqe::default() } }), vec![]),
        (
            Header::C2hTermReq(TermReq { fes: Fes::PduSequenceError, fei: 0 }),
            vec![1, 2, 3, 4, 5, 6, 7, 8],
        ),
    ];
    for (h, data) in &pdus {
        let repr = PduRepr::new(*h, framing, data.len() as u32);
        stream.extend_from_slice(&emit(&repr, data));
    }
    let whole = frame(Direction::ControllerToHost, framing, std::iter::once(&stream[..]));
    assert_eq!(whole.len(), pdus.len());
    assert_eq!(whole[1].1, vec![0xab; 300]);
    for split in 0..=stream.len() {
        let got = frame(
            Direction::ControllerToHost,
            framing,
            [&stream[..split], &stream[split..]].into_iter(),
        );
        assert_eq!(got, whole, "split at {split}");
    }
    let bytes = frame(Direction::ControllerToHost, framing, stream.chunks(1));
    assert_eq!(bytes, whole);
}
