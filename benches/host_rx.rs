//! The host's receive path for reads, with and without the device's hints:
//! the bytes of whole read responses (C2HData PDUs with data digests, then
//! the CapsuleResp) handed to the host state machine, timing only the host.
//! Without a device it copies and digests every data byte; with one whose
//! hints vouch for placement and digest, it skips both.

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use ulp_ddp::IoBuf;

mod rig;
use rig::Rig;

/// One read of `len` bytes; the time the host spent taking in its
/// response.
fn read(rig: &mut Rig, len: u32, dst: &IoBuf) -> std::time::Duration {
    let n = rig.submit(len, dst);
    let n = rig.serve(n);
    rig.vouch(n);
    let started = std::time::Instant::now();
    let done = rig.take(n);
    let took = started.elapsed();
    assert!(done, "the read did not complete");
    took
}

fn host_rx(c: &mut Criterion) {
    let mut g = c.benchmark_group("host_rx");
    for len in [4096u32, 128 << 10] {
        g.throughput(Throughput::Bytes(u64::from(len)));
        for hints in [false, true] {
            let mut rig = Rig::new(hints);
            assert_eq!(rig.host.is_offloaded(1), hints);
            let dst = IoBuf::new(len as usize);
            // One read first, to check the rig measures what it says.
            read(&mut rig, len, &dst);
            let (ulp, _) = rig.host.stats();
            if hints {
                assert_eq!(
                    (ulp.copy_bytes, ulp.crc_bytes),
                    (0, 0),
                    "hints must spare the work: {ulp:?}"
                );
            } else {
                assert_eq!(
                    (ulp.copy_bytes, ulp.crc_bytes),
                    (u64::from(len), u64::from(len)),
                    "{ulp:?}"
                );
            }
            let name = if hints { "hints" } else { "no_hints" };
            g.bench_function(BenchmarkId::new(name, len), |b| {
                b.iter_custom(|iters| (0..iters).map(|_| read(&mut rig, len, &dst)).sum())
            });
        }
    }
    g.finish();
}

criterion_group!(benches, host_rx);
criterion_main!(benches);
