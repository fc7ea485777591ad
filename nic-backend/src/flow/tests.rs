//! A flow driven directly, for each protocol: TCP segments (stream offset,
//! bytes) in; bytes in the mapped buffers, hints and resync requests out.
//! In order; a gap inside data; a gap over a header, then the hunt, the
//! resync request and its confirmation; and a retransmission that passes
//! untouched.
//!
//! Each scenario is written once, over a [`Case`]: a flow with one buffer
//! mapped and a stream of equal units that fill it. The protocols only
//! build their case and say where to cut.
//!
//! Nothing here may reach past the flow: no frames, no device.

use super::iwarp::{Iwarp, StagMapping};
use super::nvme_tcp::NvmeTcp;
use super::{Env, Flow, Protocol, Socket};
use crate::mpa::tests::fpdu;
use crate::pdu::tests::c2h;
use crate::place::{Mapping, Placed};
use std::ops::Range;
use ulp_ddp::{
    Access, Caps, HintFlags, IoBuf, IwarpConfig, SgEntry, Sgl, Stag, StagIo, Stats, sgl,
};

const PLACED_OK: HintFlags = HintFlags::PLACED.union(HintFlags::CRC_OK);

fn buffer(len: usize) -> (IoBuf, Sgl) {
    let buf = IoBuf::new(len);
    (buf.clone(), sgl![SgEntry { buf, offset: 0, len }])
}

/// A flow with one buffer mapped, and a stream of units of one length
/// that carry `data`, in order, into it.
struct Case<P: Protocol> {
    flow: Flow<P>,
    stats: Stats,
    buf: IoBuf,
    /// What the buffer holds once every unit is placed.
    data: Vec<u8>,
    stream: Vec<u8>,
    /// The length of a unit.
    unit: usize,
    /// Where a unit's payload lies within it.
    payload: Range<usize>,
}

impl<P: Protocol> Case<P>
where
    Flow<P>: Socket,
{
    /// `data` cut in pieces of `each` bytes, each carried by the unit
    /// `build(its offset in data, piece)` whose payload starts `header`
    /// bytes in.
    fn new(
        flow: Flow<P>,
        buf: IoBuf,
        data: Vec<u8>,
        each: usize,
        header: usize,
        build: impl Fn(usize, &[u8]) -> Vec<u8>,
    ) -> Self {
        let units: Vec<_> =
            data.chunks(each).enumerate().map(|(i, d)| build(i * each, d)).collect();
        let unit = units[0].len();
        assert!(units.iter().all(|u| u.len() == unit), "units of one length");
        let (stream, payload) = (units.concat(), header..header + each);
        Self { flow, stats: Stats::default(), buf, data, stream, unit, payload }
    }

    /// Where unit `i` starts in the stream.
    fn at(&self, i: usize) -> usize {
        i * self.unit
    }

    /// The payload of unit `i`, in the stream.
    fn payload(&self, i: usize) -> Range<usize> {
        self.at(i) + self.payload.start..self.at(i) + self.payload.end
    }

    /// The bytes of unit `i` after its payload (PAD, digest), in the stream.
    fn trailer(&self, i: usize) -> Range<usize> {
        self.at(i) + self.payload.end..self.at(i + 1)
    }

    /// Feed `stream[from..to]` as one segment.
    fn segment(&mut self, from: usize, to: usize) {
        let mut placed = Placed { zero_copy: true, base: from as u64, ..Placed::default() };
        let mut env = Env { active: Caps::ALL, stats: &mut self.stats, placed: &mut placed };
        self.flow.rx_segment(from as u64, &self.stream[from..to], &mut env);
    }

    /// The hints for the whole stream, byte by byte (read once, at the
    /// end: the ULP reads forward).
    fn hints(&self) -> Vec<HintFlags> {
        let mut out = vec![HintFlags::NONE; self.stream.len()];
        self.flow.ctx.with_hints(0, out.len() as u64, |a, b, h| {
            out[a as usize..b as usize].fill(h.flags);
        });
        out
    }
}

/// Every byte of `h[range]` is `flags`.
fn all(h: &[HintFlags], range: Range<usize>, flags: HintFlags) -> bool {
    h[range].iter().all(|&f| f == flags)
}

// ---- the scenarios ----

/// The stream in order, cut at `cuts`: every byte placed, every unit
/// vouched for.
fn in_order<P: Protocol>(mut c: Case<P>, cuts: &[usize])
where
    Flow<P>: Socket,
{
    let ends: Vec<usize> = cuts.iter().copied().chain([c.stream.len()]).collect();
    let mut from = 0;
    for to in ends {
        c.segment(from, to);
        from = to;
    }
    assert_eq!(c.buf.to_vec(), c.data);
    assert_eq!(c.stats.nic_placed_bytes, c.data.len() as u64);
    let h = c.hints();
    for i in 0..c.stream.len() / c.unit {
        assert_eq!(h[c.at(i)], HintFlags::CRC_OK, "header of unit {i}");
        assert!(all(&h, c.payload(i), PLACED_OK), "payload of unit {i}");
        assert!(all(&h, c.trailer(i), HintFlags::CRC_OK), "digest of unit {i}");
    }
    assert!(c.flow.rx_synced());
}

/// Stream bytes `lost` (inside the payload of unit 0) never come in
/// order: skipped by length, the rest placed, unit 0 not vouched for but
/// unit 1 offloaded; their retransmission (from a little before) passes
/// untouched.
fn gap_inside_data<P: Protocol>(mut c: Case<P>, lost: Range<usize>)
where
    Flow<P>: Socket,
{
    assert!(c.payload(0).start + 50 <= lost.start && lost.end < c.payload(0).end);
    c.segment(0, lost.start);
    c.segment(lost.end, c.stream.len());
    assert!(c.flow.rx_synced(), "a gap inside data keeps the context");
    let got = c.buf.to_vec();
    let hole = lost.start - c.payload.start..lost.end - c.payload.start;
    assert_eq!(got[..hole.start], c.data[..hole.start]);
    assert!(got[hole.clone()].iter().all(|&b| b == 0), "the lost bytes are the ULP's");
    assert_eq!(got[hole.end..], c.data[hole.end..]);
    let h = c.hints();
    assert!(all(&h, c.trailer(0), HintFlags::NONE), "no verdict on a digest over lost bytes");
    assert!(all(&h, lost.end..c.payload(0).end, HintFlags::PLACED), "placed, digest unknown");
    assert!(all(&h, c.payload(1), PLACED_OK), "the next unit offloaded");

    // The retransmission of the lost bytes goes by untouched.
    let (before, packets) = (c.buf.to_vec(), c.stats.packets);
    c.segment(lost.start - 50, lost.end);
    assert_eq!(c.buf.to_vec(), before);
    assert_eq!(c.stats.packets, packets, "not counted either");
    assert!(all(&c.hints(), lost, HintFlags::NONE));
}

/// Of six units, bytes `lost` of unit 1's header (offsets in the unit)
/// never come in order; the rest comes up to unit 4. The flow hunts: unit
/// 2 is plausible and so is its successor, so the chain goes on at 3 and
/// the ULP is asked to confirm it; nothing is placed until it does, and
/// units 4 and 5, which come after, are offloaded. Returns the case for
/// what a protocol adds.
fn gap_over_a_header<P: Protocol>(mut c: Case<P>, lost: Range<usize>) -> Case<P>
where
    Flow<P>: Socket,
{
    assert_eq!(c.stream.len(), c.at(6));
    assert!(lost.end <= c.payload.start);
    c.segment(0, c.at(1) + lost.start);
    c.segment(c.at(1) + lost.end, c.at(4));
    assert!(!c.flow.rx_synced());
    assert_eq!(c.flow.ctx.take_resync_request(), Some(c.at(3) as u64));
    let each = c.payload.len();
    assert_eq!(c.stats.nic_placed_bytes, each as u64, "nothing placed on an unconfirmed chain");
    for wrong in [c.at(2) + 1, c.at(3) + 1] {
        assert!(!c.flow.resync(wrong as u64, &mut c.stats), "{wrong}: not a header on the chain");
    }
    assert!(c.flow.resync(c.at(3) as u64, &mut c.stats));
    assert!(c.flow.rx_synced());
    c.segment(c.at(4), c.stream.len());
    let got = c.buf.to_vec();
    assert_eq!(got[..each], c.data[..each]);
    assert!(got[each..4 * each].iter().all(|&b| b == 0), "units 1 to 3 are the ULP's");
    assert_eq!(got[4 * each..], c.data[4 * each..]);
    let h = c.hints();
    assert!(all(&h, c.at(3)..c.at(4), HintFlags::NONE));
    for i in [4, 5] {
        assert!(all(&h, c.payload(i), PLACED_OK), "payload of unit {i}");
    }
    assert_eq!((c.stats.resync, c.stats.resync_confirmed), (1, 1));
    c
}

// ---- NVMe/TCP ----

const CID: u16 = 3;

/// A host flow with data digests and `CID` mapped to a buffer; and `n`
/// C2HData PDUs of `each` bytes that fill it, byte `i` of the data being
/// `i as u8`.
fn nvme(n: usize, each: usize) -> Case<NvmeTcp> {
    let mut flow = NvmeTcp::host_flow(16, 0);
    let (buf, sgl) = buffer(n * each);
    *flow.proto.slot(CID).unwrap() = Some(Mapping::new(sgl, false, true));
    let data = (0..n * each).map(|i| i as u8).collect();
    Case::new(flow, buf, data, each, 24, |at, d| c2h(CID, at as u32, d, false, 24))
}

// ---- iWARP (MPA/DDP/RDMAP) ----

const STAG: Stag = Stag(0x0300 | 7);
/// The tagged offset of the STag's first byte.
const BASE: u64 = 7 << 8;
/// The MPA length and the tagged DDP/RDMAP header.
const WRITE_HEADER: usize = 2 + 14;

/// An RDMA Write FPDU of `payload` for `STAG` at TO `BASE + to`.
fn write(to: u64, payload: &[u8]) -> Vec<u8> {
    let mut h = vec![0x81 | 0x40, 0x40];
    h.extend_from_slice(&STAG.0.to_be_bytes());
    h.extend_from_slice(&(BASE + to).to_be_bytes());
    fpdu(&h, payload)
}

/// A flow with MPA CRCs and `STAG` mapped to a buffer, writable by the
/// peer; and `n` Writes of `each` bytes that fill it.
fn iwarp(n: usize, each: usize) -> Case<Iwarp> {
    let config = IwarpConfig {
        crc: true,
        oneshot_opcodes: false,
        rx_start: 0,
        tx_start: 0,
        rx_markers: false,
        tx_markers: false,
    };
    let mut flow = Iwarp::flow(config, 0, 0, false, false);
    let (buf, sgl) = buffer(n * each);
    let io = StagIo { stag: STAG, sgl, base: BASE, access: Access::REMOTE_WRITE };
    flow.proto.insert_stag(StagMapping::new(io, None).unwrap(), None);
    let data = (0..n * each).map(|i| (i % 251) as u8).collect();
    Case::new(flow, buf, data, each, WRITE_HEADER, |at, d| write(at as u64, d))
}

// ---- the tests: each scenario for each protocol ----

/// One test of its own for each `name: body`.
macro_rules! tests {
    ($($name:ident: $body:expr;)*) => {
        $(
            #[test]
            fn $name() {
                $body;
            }
        )*
    };
}

tests! {
    nvme_tcp_in_order_places_and_vouches: in_order(nvme(3, 500), &[100, 777]);
    iwarp_in_order_places_and_vouches: in_order(iwarp(2, 700), &[500, 900]);

    nvme_tcp_gap_inside_data_is_skipped_and_the_retransmission_untouched:
        gap_inside_data(nvme(2, 500), 200..300);
    iwarp_gap_inside_data_is_skipped_and_the_retransmission_untouched:
        gap_inside_data(iwarp(2, 700), 300..500);

    nvme_tcp_gap_over_a_header_hunts_then_resyncs_on_confirmation:
        gap_over_a_header(nvme(6, 500), 5..20);
    iwarp_gap_over_a_header_hunts_then_resyncs_on_confirmation: {
        let c = gap_over_a_header(iwarp(6, 100), 3..10);
        // Each Write came whole in one segment: one run, header and CRC too.
        let h = c.hints();
        assert!(h[c.at(4)..c.at(6)].iter().all(|&f| f.contains(HintFlags::PLACED)));
    };
}
