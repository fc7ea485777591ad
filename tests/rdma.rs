//! NVMe/RDMA end to end: host and controller on smoltcp stacks over the
//! in-process wire, each behind the software NIC, in simulated time. The
//! same demo as NVMe/TCP, with the NIC placing RDMA Writes and Read
//! Responses by STag and the host registering classically or one-shot.

use nvme_ddp::demo::{self, DemoOptions};
use nvme_ddp::driver::transport::TransportType;
use nvme_of::Digests;
use smoltcp_glue::Profile;
use ulp_ddp::Caps;

fn run(offload: Caps, crc: bool, impair: Profile) -> demo::DemoReport {
    run_bs(offload, crc, impair, 128 << 10)
}

fn run_bs(offload: Caps, crc: bool, impair: Profile, bs: u32) -> demo::DemoReport {
    let o = DemoOptions {
        size: 8 << 20,
        bs,
        qd: 8,
        queues: 2,
        digests: Digests { header: false, data: crc },
        offload,
        impair,
        simulated: true,
        transport: TransportType::Rdma,
        ..DemoOptions::default()
    };
    let r = demo::run(&o, None, &Default::default()).expect("the demo runs");
    assert_eq!(r.error, None);
    assert_eq!(r.phases.len(), 2);
    // The read pass verified every byte it read.
    assert_eq!(r.phases[1].stats.verified_bytes, 8 << 20, "{:?}", r.phases[1]);
    r
}

#[test]
fn one_shot_reads_are_placed_whole_with_one_control_call_each() {
    for crc in [false, true] {
        let r = run(Caps::ALL, crc, Profile::default());
        let h = &r.offload;
        // Every read's data was placed by the NIC, none copied by the host.
        assert!(h.nic_placed_bytes >= 8 << 20, "crc {crc}: {h:?}");
        assert!(h.host_copy_bytes - h.host_tx_copy_bytes < 64 << 10, "crc {crc}: {h:?}");
        // One call per I/O, and a Send for each I/O queue's Connect.
        assert_eq!(h.control_calls, h.ddp_ios + 2, "crc {crc}: {h:?}");
        // The NIC armed the STag of every read, which it places into, and
        // freed it at the response; a write's STag is read-only, and the
        // NIC, which has nothing to do with it, is not told of it.
        let (writes, reads) = (r.phases[0].stats.ios, r.phases[1].stats.ios);
        assert_eq!(h.ddp_ios, writes + reads, "crc {crc}: {h:?}");
        assert_eq!((h.oneshot_armed, h.oneshot_freed), (reads, reads), "crc {crc}: {h:?}");
        // With CRCs on, the NIC checked and wrote them, not the host.
        if crc {
            assert!(h.hw_crc_bytes >= 8 << 20 && h.host_crc_bytes == 0, "{h:?}");
        }
        // The controller's NIC placed the written data into its Read sinks.
        assert!(r.controller_offload.nic_placed_bytes >= 8 << 20, "{:?}", r.controller_offload);
    }
}

#[test]
fn classic_registration_takes_three_calls_and_no_offload_copies_everything() {
    let classic = Caps::ALL.without(Caps::ONESHOT);
    let r = run(classic, false, Profile::default());
    assert_eq!(r.offload.control_calls, 3 * r.offload.ddp_ios + 2, "{:?}", r.offload);
    assert!(r.offload.nic_placed_bytes >= 8 << 20);
    let r = run(Caps::NONE, true, Profile::default());
    assert_eq!(r.offload.nic_placed_bytes, 0);
    assert!(r.offload.host_copy_bytes >= 8 << 20, "{:?}", r.offload);
    assert!(r.offload.host_crc_bytes >= 16 << 20, "both ways: {:?}", r.offload);
}

/// The namespace lends 64 KiB reads from the middle of its 128 KiB
/// chunks: each RDMA Write carries the half its command asked for, gathered
/// by the NIC or copied.
#[test]
fn reads_lent_from_inside_a_chunk_write_the_right_bytes() {
    for offload in [Caps::ALL, Caps::ALL.without(Caps::ZC_TX)] {
        let r = run_bs(offload, true, Profile::default(), 64 << 10);
        assert!(r.controller_offload.tx_zero_copy_bytes > 0 || !offload.contains(Caps::ZC_TX));
        assert_eq!(r.namespace_lent_bytes, 8 << 20, "{offload}: every read lent");
    }
}

#[test]
fn data_survives_loss_and_reordering_with_offload_on() {
    let impair = Profile { loss: 0.01, reorder: 0.02, ..Profile::default() };
    let r = run(Caps::ALL, true, impair);
    assert!(r.impaired_c2h.dropped + r.impaired_c2h.reordered > 0, "{:?}", r.impaired_c2h);
}

/// Zero-copy transmit over iWARP: the host's Read Responses (the data of
/// its writes) and the controller's RDMA Writes (of reads) leave their
/// buffers once, gathered by the NIC, which cuts each message into FPDUs
/// and frames them itself; under loss the NIC frames and gathers the
/// retransmissions again from buffers still held.
#[test]
fn payload_leaves_its_buffer_once_gathered_by_the_nic() {
    // No FPDU is longer than the demo's 9000-byte MTU.
    let fpdus_per_io = (128u64 << 10).div_ceil(9000);
    let ios = (8u64 << 20) / (128 << 10);
    for impair in [Profile::default(), Profile { loss: 0.01, ..Profile::default() }] {
        let r = run(Caps::ALL, true, impair);
        for (side, o) in [("host", &r.offload), ("controller", &r.controller_offload)] {
            assert!(o.tx_zero_copy_bytes >= 8 << 20, "{side}: {o:?}");
            assert!(o.host_tx_copy_bytes < 64 << 10, "{side} copies only Sends: {o:?}");
            assert!(o.tx_gathered_bytes >= o.tx_zero_copy_bytes, "{side}: {o:?}");
            assert_eq!(o.tx_gather_refused, 0, "{side}: {o:?}");
            assert!(o.tx_fpdus_framed >= ios * fpdus_per_io, "{side}: {o:?}");
        }
        if impair.loss > 0.0 {
            let o = &r.controller_offload;
            assert!(o.tx_gathered_bytes > o.tx_zero_copy_bytes, "retransmissions: {o:?}");
            assert!(o.tx_fpdus_framed > ios * fpdus_per_io, "framed again: {o:?}");
        } else {
            // Only payload counts as gathered: the framing is the NIC's.
            let o = &r.controller_offload;
            assert_eq!(o.tx_gathered_bytes, o.tx_zero_copy_bytes, "a clean wire: {o:?}");
        }
    }
    let r = run(Caps::ALL.without(Caps::ZC_TX), true, Profile::default());
    assert_eq!(r.offload.tx_zero_copy_bytes + r.controller_offload.tx_gathered_bytes, 0);
    assert!(r.controller_offload.host_tx_copy_bytes >= 8 << 20, "{:?}", r.controller_offload);
}
