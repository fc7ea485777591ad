//! The per-byte and per-PDU costs under everything else: PDU header encode
//! and parse, the streaming framer, CRC32C, and the NIC's placement
//! (fused copy+CRC against copy then CRC).

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use nvme_of::Digests;
use nvme_of::nvme::{Cqe, Status};
use nvme_tcp::wire::{
    CapsuleResp, DataPdu, Direction, Event, Framer, Framing, Header, Pdu, PduRepr, crc32c_append,
};
use std::hint::black_box;

const FRAMING: Framing = Framing { digests: Digests { header: true, data: true }, pda: 0 };

fn c2h_data(len: u32) -> PduRepr {
    let d = DataPdu { cccid: 7, ttag: 0, datao: 0, last: true, success: false };
    PduRepr::new(Header::C2hData(d), FRAMING, len)
}

fn pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect()
}

fn pdu_headers(c: &mut Criterion) {
    let mut g = c.benchmark_group("pdu");
    let reprs = [
        ("c2h_data", c2h_data(128 << 10)),
        (
            "capsule_resp",
            PduRepr::new(
                Header::CapsuleResp(CapsuleResp { cqe: Cqe::new(7, Status::SUCCESS) }),
                FRAMING,
                0,
            ),
        ),
    ];
    for (name, repr) in reprs {
        let mut buf = vec![0u8; repr.header_len()];
        g.bench_function(BenchmarkId::new("emit", name), |b| {
            b.iter(|| black_box(&repr).emit_header(&mut buf))
        });
        repr.emit_header(&mut buf);
        g.bench_function(BenchmarkId::new("parse", name), |b| {
            b.iter(|| {
                let pdu = Pdu::new_checked(black_box(&buf[..])).unwrap();
                PduRepr::parse(&pdu, FRAMING).unwrap()
            })
        });
    }
    g.finish();
}

/// A stream of 128 KiB C2HData PDUs cut into 9000-byte segments, as the
/// host sees it from a jumbo-frame connection.
fn framer(c: &mut Criterion) {
    let data = pattern(128 << 10);
    let repr = c2h_data(data.len() as u32);
    let mut pdu = vec![0u8; repr.header_len()];
    repr.emit_header(&mut pdu);
    pdu.extend_from_slice(&data);
    pdu.extend_from_slice(&crc32c_append(0, &data).to_le_bytes());
    let stream = pdu.repeat(8);
    let mut g = c.benchmark_group("framer");
    g.throughput(Throughput::Bytes(stream.len() as u64));
    g.bench_function("c2h_data_128k_in_9000_byte_segments", |b| {
        b.iter(|| {
            let mut f = Framer::new(Direction::ControllerToHost);
            f.set_framing(FRAMING);
            let mut pdus = 0;
            for seg in stream.chunks(9000) {
                let mut at = 0;
                while let Ok((n, Some(ev))) = f.next(&seg[at..]) {
                    at += n;
                    pdus += usize::from(matches!(ev, Event::End { .. }));
                }
            }
            assert_eq!(pdus, 8);
        })
    });
    g.finish();
}

fn crc(c: &mut Criterion) {
    let mut g = c.benchmark_group("crc32c");
    for len in [512usize, 4096, 8948, 128 << 10] {
        let data = pattern(len);
        g.throughput(Throughput::Bytes(len as u64));
        g.bench_with_input(BenchmarkId::from_parameter(len), &data, |b, d| {
            b.iter(|| crc32c_append(0, black_box(d)))
        });
    }
    g.finish();
}

/// What the NIC does with each received segment of mapped data: one pass
/// that copies and digests block by block, or a copy and then a digest.
fn placement(c: &mut Criterion) {
    let mut g = c.benchmark_group("placement");
    // A standard and a jumbo segment's payload, and a whole 128 KiB PDU.
    for len in [1448usize, 8948, 128 << 10] {
        let src = pattern(len);
        let mut dst = vec![0u8; len];
        g.throughput(Throughput::Bytes(len as u64));
        g.bench_with_input(BenchmarkId::new("copy_and_crc", len), &src, |b, s| {
            b.iter(|| nic_backend::copy_and_crc(&mut dst, black_box(s), 0))
        });
        g.bench_with_input(BenchmarkId::new("copy_then_crc", len), &src, |b, s| {
            b.iter(|| nic_backend::copy_then_crc(&mut dst, black_box(s), 0))
        });
        g.bench_with_input(BenchmarkId::new("copy_only", len), &src, |b, s| {
            b.iter(|| dst.copy_from_slice(black_box(s)))
        });
    }
    g.finish();
}

criterion_group!(benches, pdu_headers, framer, crc, placement);
criterion_main!(benches);
