//! A flow driven directly, for each protocol: TCP segments (stream offset,
//! bytes) in; bytes in the mapped buffers, hints and resync requests out.
//! In order; a gap inside data; a gap over a header, then the hunt, the
//! resync request and its confirmation; and a retransmission that passes
//! untouched.
//!
//! Nothing here may reach past the flow: no frames, no device.

use super::iwarp::{Iwarp, StagMapping};
use super::nvme_tcp::NvmeTcp;
use super::{Env, Flow, Protocol, Socket};
use crate::mpa::tests::fpdu;
use crate::pdu;
use crate::place::{Mapping, Placed};
use ulp_ddp::{
    Access, Caps, HintFlags, IoBuf, IwarpConfig, NvmeTcpConfig, Role, SgEntry, Stag, StagIo, Stats,
};

const PLACED_OK: HintFlags = HintFlags::PLACED.union(HintFlags::CRC_OK);

/// Feed `stream[from..to]` as one segment.
fn segment<P: Protocol>(
    flow: &mut Flow<P>,
    stats: &mut Stats,
    stream: &[u8],
    from: usize,
    to: usize,
) where
    Flow<P>: Socket,
{
    let mut placed = Placed { zero_copy: true, base: from as u64, ..Placed::default() };
    let mut env = Env { active: Caps::ALL, stats, placed: &mut placed };
    flow.rx_segment(from as u64, &stream[from..to], &mut env);
}

/// The hints for `[0, end)`, byte by byte (read once, at the end: the
/// ULP reads forward).
fn hints<P: Protocol>(flow: &Flow<P>, end: usize) -> Vec<HintFlags> {
    let mut out = vec![HintFlags::NONE; end];
    flow.ctx.with_hints(0, end as u64, |a, b, h| {
        out[a as usize..b as usize].fill(h.flags);
    });
    out
}

fn buffer(len: usize) -> (IoBuf, Vec<SgEntry>) {
    let buf = IoBuf::new(len);
    (buf.clone(), vec![SgEntry { buf, offset: 0, len }])
}

// ---- NVMe/TCP ----

const CID: u16 = 3;

/// A C2HData PDU for `CID` with a data digest.
fn c2h(datao: u32, data: &[u8]) -> Vec<u8> {
    let mut h = vec![0u8; 24];
    h[0] = pdu::ty::C2H_DATA;
    h[1] = 0x02;
    h[2] = 24;
    h[3] = 24;
    h[4..8].copy_from_slice(&(24 + data.len() as u32 + 4).to_le_bytes());
    h[8..10].copy_from_slice(&CID.to_le_bytes());
    h[12..16].copy_from_slice(&datao.to_le_bytes());
    h[16..20].copy_from_slice(&(data.len() as u32).to_le_bytes());
    h.extend_from_slice(data);
    h.extend_from_slice(&crc32c::crc32c(data).to_le_bytes());
    h
}

/// A host flow with data digests and `CID` mapped to a buffer of `len`
/// bytes; and `n` C2HData PDUs of `each` bytes for it, byte `i` of the
/// data being `i as u8`.
fn nvme(len: usize, n: usize, each: usize) -> (Flow<NvmeTcp>, IoBuf, Vec<u8>, Vec<u8>) {
    let config = NvmeTcpConfig {
        role: Role::Host,
        pfv: 0,
        cpda: 0,
        hpda: 0,
        dgst: NvmeTcpConfig::DGST_DATA,
        queue_size: 16,
        rx_start: 0,
        tx_start: 0,
    };
    let mut flow = NvmeTcp::flow(config, 0, 0, false, 16);
    let (buf, sgl) = buffer(len);
    *flow.proto.slot(CID).unwrap() = Some(Mapping::new(sgl, false, true));
    let data: Vec<u8> = (0..n * each).map(|i| i as u8).collect();
    let stream = data.chunks(each).enumerate().flat_map(|(i, d)| c2h((i * each) as u32, d));
    let stream = stream.collect();
    (flow, buf, data, stream)
}

#[test]
fn nvme_tcp_in_order_places_and_vouches() {
    let (mut flow, buf, data, stream) = nvme(1500, 3, 500);
    let mut stats = Stats::default();
    for (from, to) in [(0, 100), (100, 777), (777, stream.len())] {
        segment(&mut flow, &mut stats, &stream, from, to);
    }
    assert_eq!(buf.to_vec(), data);
    assert_eq!(stats.nic_placed_bytes, 1500);
    let h = hints(&flow, stream.len());
    for i in 0..3 {
        let pdu = i * 528;
        assert_eq!(h[pdu], HintFlags::CRC_OK, "header of PDU {i}");
        assert!(h[pdu + 24..pdu + 524].iter().all(|&f| f == PLACED_OK), "data of PDU {i}");
        assert_eq!(h[pdu + 524..pdu + 528], [HintFlags::CRC_OK; 4], "digest of PDU {i}");
    }
    assert!(flow.rx_synced());
}

#[test]
fn nvme_tcp_gap_inside_data_is_skipped_and_the_retransmission_untouched() {
    let (mut flow, buf, data, stream) = nvme(1000, 2, 500);
    let mut stats = Stats::default();
    segment(&mut flow, &mut stats, &stream, 0, 200);
    segment(&mut flow, &mut stats, &stream, 300, stream.len());
    assert!(flow.rx_synced(), "a gap inside data keeps the context");
    let got = buf.to_vec();
    assert_eq!(got[..176], data[..176]);
    assert_eq!(got[176..276], [0; 100], "the lost bytes are the ULP's");
    assert_eq!(got[276..], data[276..]);
    let h = hints(&flow, stream.len());
    assert_eq!(h[524..528], [HintFlags::NONE; 4], "no verdict on a digest over lost bytes");
    assert!(h[300..524].iter().all(|&f| f == HintFlags::PLACED), "placed, digest unknown");
    assert!(h[528 + 24..528 + 524].iter().all(|&f| f == PLACED_OK), "the next PDU offloaded");

    // The retransmission of the lost bytes goes by untouched.
    let (before, packets) = (buf.to_vec(), stats.packets);
    segment(&mut flow, &mut stats, &stream, 150, 300);
    assert_eq!(buf.to_vec(), before);
    assert_eq!(stats.packets, packets, "not counted either");
    assert_eq!(hints(&flow, stream.len())[200..300], [HintFlags::NONE; 100]);
}

#[test]
fn nvme_tcp_gap_over_a_header_hunts_then_resyncs_on_confirmation() {
    let (mut flow, buf, data, stream) = nvme(3000, 6, 500);
    let mut stats = Stats::default();
    let pdu = |i: usize| i * 528;
    segment(&mut flow, &mut stats, &stream, 0, pdu(1) + 5);
    // The rest of PDU 1's header never comes in order.
    segment(&mut flow, &mut stats, &stream, pdu(1) + 20, pdu(4));
    assert!(!flow.rx_synced());
    // PDU 2 is plausible and so is its successor: the chain goes on at 3.
    assert_eq!(flow.ctx.take_resync_request(), Some(pdu(3) as u64));
    assert_eq!(stats.nic_placed_bytes, 500, "nothing placed on an unconfirmed chain");
    assert!(!flow.resync(pdu(3) as u64 + 1, &mut stats), "not a header on the chain");
    assert!(flow.resync(pdu(3) as u64, &mut stats));
    assert!(flow.rx_synced());
    segment(&mut flow, &mut stats, &stream, pdu(4), stream.len());
    let got = buf.to_vec();
    assert_eq!(got[..500], data[..500]);
    assert_eq!(got[500..2000], [0; 1500], "PDUs 1 to 3 are the ULP's");
    assert_eq!(got[2000..], data[2000..]);
    let h = hints(&flow, stream.len());
    assert!(h[pdu(3)..pdu(4)].iter().all(|&f| f == HintFlags::NONE));
    assert!(h[pdu(4) + 24..pdu(4) + 524].iter().all(|&f| f == PLACED_OK));
    assert_eq!((stats.resync, stats.resync_confirmed), (1, 1));
}

// ---- iWARP (MPA/DDP/RDMAP) ----

const STAG: Stag = Stag(0x0300 | 7);
/// The tagged offset of the STag's first byte.
const BASE: u64 = 7 << 8;

/// An RDMA Write FPDU of `payload` for `STAG` at TO `BASE + to`.
fn write(to: u64, payload: &[u8]) -> Vec<u8> {
    let mut h = vec![0x81 | 0x40, 0x40];
    h.extend_from_slice(&STAG.0.to_be_bytes());
    h.extend_from_slice(&(BASE + to).to_be_bytes());
    fpdu(&h, payload)
}

/// A flow with MPA CRCs and `STAG` mapped to a buffer of `len` bytes,
/// writable by the peer; and `n` Writes of `each` bytes for it.
fn iwarp(len: usize, n: usize, each: usize) -> (Flow<Iwarp>, IoBuf, Vec<u8>, Vec<Vec<u8>>) {
    let config = IwarpConfig {
        crc: true,
        oneshot_opcodes: false,
        rx_start: 0,
        tx_start: 0,
        rx_markers: false,
        tx_markers: false,
    };
    let mut flow = Iwarp::flow(config, 0, 0, false, false);
    let (buf, sgl) = buffer(len);
    let io = StagIo { stag: STAG, sgl, base: BASE, access: Access::REMOTE_WRITE };
    flow.proto.insert_stag(StagMapping::new(io, None).unwrap(), None);
    let data: Vec<u8> = (0..n * each).map(|i| (i % 251) as u8).collect();
    let fpdus = data.chunks(each).enumerate().map(|(i, d)| write((i * each) as u64, d));
    let fpdus = fpdus.collect();
    (flow, buf, data, fpdus)
}

#[test]
fn iwarp_in_order_places_and_vouches() {
    let (mut flow, buf, data, fpdus) = iwarp(1400, 2, 700);
    let stream = fpdus.concat();
    let mut stats = Stats::default();
    for (from, to) in [(0, 500), (500, 900), (900, stream.len())] {
        segment(&mut flow, &mut stats, &stream, from, to);
    }
    assert_eq!(buf.to_vec(), data);
    assert_eq!(stats.nic_placed_bytes, 1400);
    let h = hints(&flow, stream.len());
    let len = fpdus[0].len();
    for i in 0..2 {
        let at = i * len;
        assert!(h[at + 16..at + 716].iter().all(|&f| f == PLACED_OK), "payload of FPDU {i}");
        assert_eq!(h[at + len - 4..at + len], [HintFlags::CRC_OK; 4], "CRC of FPDU {i}");
    }
}

#[test]
fn iwarp_gap_inside_data_is_skipped_and_the_retransmission_untouched() {
    let (mut flow, buf, data, fpdus) = iwarp(1400, 2, 700);
    let stream = fpdus.concat();
    let mut stats = Stats::default();
    segment(&mut flow, &mut stats, &stream, 0, 300);
    segment(&mut flow, &mut stats, &stream, 500, stream.len());
    assert!(flow.rx_synced(), "a gap inside the payload keeps the context");
    let got = buf.to_vec();
    assert_eq!(got[..284], data[..284]);
    assert_eq!(got[284..484], [0; 200], "the lost bytes are the ULP's");
    assert_eq!(got[484..], data[484..]);
    let h = hints(&flow, stream.len());
    let len = fpdus[0].len();
    assert_eq!(h[len - 4..len], [HintFlags::NONE; 4], "no verdict on a CRC over lost bytes");
    assert!(h[500..716].iter().all(|&f| f == HintFlags::PLACED), "placed, CRC unknown");
    assert!(h[len + 16..len + 716].iter().all(|&f| f == PLACED_OK), "the next FPDU offloaded");

    // The retransmission of the lost bytes goes by untouched.
    let (before, packets) = (buf.to_vec(), stats.packets);
    segment(&mut flow, &mut stats, &stream, 250, 500);
    assert_eq!(buf.to_vec(), before);
    assert_eq!(stats.packets, packets, "not counted either");
    assert_eq!(hints(&flow, stream.len())[300..500], [HintFlags::NONE; 200]);
}

#[test]
fn iwarp_gap_over_a_header_hunts_then_resyncs_on_confirmation() {
    let (mut flow, buf, data, fpdus) = iwarp(600, 6, 100);
    let stream = fpdus.concat();
    let len = fpdus[0].len();
    let fpdu = |i: usize| i * len;
    let mut stats = Stats::default();
    segment(&mut flow, &mut stats, &stream, 0, fpdu(1) + 3);
    // The rest of FPDU 1's header never comes in order.
    segment(&mut flow, &mut stats, &stream, fpdu(1) + 10, fpdu(4));
    assert!(!flow.rx_synced());
    // FPDU 2 is plausible (its CRC too) and so is its successor.
    assert_eq!(flow.ctx.take_resync_request(), Some(fpdu(3) as u64));
    assert_eq!(stats.nic_placed_bytes, 100, "nothing placed on an unconfirmed chain");
    assert!(!flow.resync(fpdu(2) as u64 + 1, &mut stats), "not a header on the chain");
    assert!(flow.resync(fpdu(3) as u64, &mut stats));
    assert!(flow.rx_synced());
    segment(&mut flow, &mut stats, &stream, fpdu(4), stream.len());
    let got = buf.to_vec();
    assert_eq!(got[..100], data[..100]);
    assert_eq!(got[100..400], [0; 300], "FPDUs 1 to 3 are the ULP's");
    assert_eq!(got[400..], data[400..]);
    let h = hints(&flow, stream.len());
    assert!(h[fpdu(3)..fpdu(4)].iter().all(|&f| f == HintFlags::NONE));
    assert!(h[fpdu(4)..fpdu(6)].iter().all(|&f| f.contains(HintFlags::PLACED)));
    assert_eq!((stats.resync, stats.resync_confirmed), (1, 1));
}
