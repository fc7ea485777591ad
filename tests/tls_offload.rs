//! TLS record offload end to end, in simulated time: the NICs take the
//! records over after the handshake (the host's I/O queues, every
//! connection of the controller), the data comes back intact, and
//! records a NIC could not take (loss, reordering) are opened in software.

use nvme_ddp::app::{HostApp, IoApp};
use nvme_ddp::demo::{self, Demo, DemoOptions};
use nvme_ddp::driver::smoltcp::run_simulated;
use nvme_of::Digests;
use smoltcp_glue::Profile;
use std::time::Duration;
use ulp_ddp::Caps;
use ulp_ddp::DdpDevice;

const MB: u64 = 1 << 20;
const LIMIT: Duration = Duration::from_secs(600);

fn opts(offload: Caps) -> DemoOptions {
    DemoOptions {
        size: 4 * MB,
        bs: 128 << 10,
        qd: 8,
        queues: 2,
        digests: Digests { header: false, data: true },
        simulated: true,
        tls: true,
        offload,
        ..DemoOptions::default()
    }
}

/// A write pass then a verified read pass.
fn run(o: &DemoOptions) -> Demo {
    let mut d = demo::build(o).unwrap();
    let mut app = IoApp::new(demo::passes(o));
    run_simulated(&mut d.host, &mut d.ctrl, &mut app, LIMIT).unwrap();
    assert_eq!(app.error(), None);
    let read = &app.results[1].1;
    assert_eq!((read.verify_failures, read.errors), (0, 0));
    assert_eq!(read.verified_bytes, o.size, "identical data");
    // No TLS failure hidden by a reconnect.
    assert_eq!(d.host.host.recovery().lost, 0, "no association lost");
    d
}

#[test]
fn the_nics_take_the_records_over_and_software_seals_and_opens_none_of_the_data() {
    let o = opts(Caps::TLS);
    let d = run(&o);
    let (ulp, tx) = d.host.host.stats();
    let nic = d.host_nic.stats();
    // Host: two I/O queues handed over both ways; the admin queue (never
    // offloaded) is all software does.
    assert_eq!(nic.tls_dev_add, 4);
    assert!(nic.rx_tls_decrypted_bytes > o.size, "every read record: {nic:?}");
    assert!(nic.tx_tls_encrypted_bytes > o.size, "every write record");
    assert_eq!(nic.rx_tls_auth_fail, 0);
    assert!(ulp.tls_decrypt_bytes < 64 << 10, "the admin queue's alone: {}", ulp.tls_decrypt_bytes);
    assert!(tx.tls_encrypt_bytes < 64 << 10, "the admin queue's alone: {}", tx.tls_encrypt_bytes);
    // Controller: every connection, the admin queue's too, once the
    // handshake is done.
    let (cu, ct) = d.ctrl.stats();
    let cn = d.ctrl_nic.stats();
    assert_eq!(cn.tls_dev_add, 6);
    assert!(cn.rx_tls_decrypted_bytes > o.size && cn.tx_tls_encrypted_bytes > o.size);
    assert!(cu.tls_decrypt_bytes < 4 << 10, "handshake-time records: {}", cu.tls_decrypt_bytes);
    assert_eq!(ct.tls_encrypt_bytes, 0);
    // Nothing of the data was copied twice for it: TLS offload alone
    // leaves the NVMe/TCP work (copies, digests) as it was.
    assert_eq!(ulp.copy_bytes, o.size);
}

#[test]
fn without_the_offload_software_does_every_record() {
    let o = opts(Caps::NONE);
    let d = run(&o);
    let (ulp, tx) = d.host.host.stats();
    assert!(ulp.tls_decrypt_bytes > o.size && tx.tls_encrypt_bytes > o.size);
    assert_eq!(d.host_nic.stats().tls_dev_add, 0);
    // Receive only, or transmit only.
    for (caps, rx, txo) in [(Caps::TLS_RX, true, false), (Caps::TLS_TX, false, true)] {
        let d = run(&opts(caps));
        let (ulp, tx) = d.host.host.stats();
        let nic = d.host_nic.stats();
        assert_eq!(nic.rx_tls_decrypted_bytes > o.size, rx, "{caps}");
        assert_eq!(ulp.tls_decrypt_bytes > o.size, !rx, "{caps}");
        assert_eq!(nic.tx_tls_encrypted_bytes > o.size, txo, "{caps}");
        assert_eq!(tx.tls_encrypt_bytes > o.size, !txo, "{caps}");
    }
}

/// 1% of frames lost each way, some reordered: records the NICs saw cut
/// are opened in software (what they decrypted of them encrypted back
/// first), retransmitted records are sealed again by the sending NIC,
/// and lost headers are found again.
#[test]
fn on_a_lossy_wire_records_the_nic_missed_are_opened_in_software_and_the_data_is_intact() {
    let impair = Profile { loss: 0.01, reorder: 0.005, ..Profile::default() };
    let o = DemoOptions {
        impair,
        kato: DemoOptions::IMPAIRED_KATO,
        io_timeout: DemoOptions::IMPAIRED_IO_TIMEOUT,
        seed: 7,
        ..opts(Caps::TLS)
    };
    let d = run(&o);
    let (ulp, _) = d.host.host.stats();
    let nic = d.host_nic.stats();
    let cn = d.ctrl_nic.stats();
    assert_eq!(nic.rx_tls_auth_fail + cn.rx_tls_auth_fail, 0);
    // Headers lost, and found again: by a guess the next tag proved, or
    // by asking the host.
    let found = |s: &ulp_ddp::Stats| s.rx_tls_resync_guess_ok + s.rx_tls_resync_res_ok;
    assert!(found(&nic) + found(&cn) > 0, "headers lost and found: {nic:?}");
    assert!(nic.tx_tls_ooo > 0 && cn.tx_tls_ooo > 0, "retransmissions sealed again");
    assert!(ulp.tls_decrypt_bytes > 64 << 10, "records the NIC missed, opened here");
    assert!(nic.rx_tls_decrypted_bytes > o.size / 2);
}

/// Everything on, TLS too: the NICs place and digest NVMe/TCP data inside
/// the records they decrypt; they gather write payload into the records
/// they seal and digest it there. The host opens, copies and digests no
/// payload either way.
#[test]
fn inside_the_records_the_nic_places_and_digests_and_the_host_touches_no_read_payload() {
    let o = opts(Caps::ALL);
    let d = run(&o);
    let (ulp, tx) = d.host.host.stats();
    let nic = d.host_nic.stats();
    assert_eq!(nic.nic_placed_bytes, o.size, "every read byte placed");
    assert_eq!(nic.nic_zero_copy_bytes, o.size, "and kept out of the ring");
    assert_eq!(nic.nic_crc_bytes, o.size);
    assert_eq!((ulp.copy_bytes, ulp.crc_bytes), (0, 0), "no read payload copied or digested");
    assert!(ulp.tls_decrypt_bytes < 64 << 10, "the admin queue's alone");
    assert_eq!(nic.tx_crc_offloaded_bytes, o.size, "write digests by the NIC, inside records");
    assert_eq!(tx.zero_copy_bytes, o.size, "write payload gathered by the NIC, then sealed");
    assert_eq!(tx.data_bytes, 2 * 1024, "nothing copied but the Connect data");
    assert_eq!(tx.crc_bytes, 2 * 1024, "only the I/O queues' Connect data, before offload began");
    let cn = d.ctrl_nic.stats();
    assert_eq!(cn.nic_placed_bytes, o.size, "the controller's NIC placed the written data");
    assert_eq!(cn.tx_crc_offloaded_bytes, o.size);
}

/// Everything on over a lossy wire: records the NIC could not vouch for
/// are opened in software from the ring and the fragments it placed, and
/// every byte comes back as written.
#[test]
fn inside_the_records_on_a_lossy_wire_the_data_is_intact() {
    let impair = Profile { loss: 0.01, reorder: 0.005, ..Profile::default() };
    let o = DemoOptions {
        impair,
        kato: DemoOptions::IMPAIRED_KATO,
        io_timeout: DemoOptions::IMPAIRED_IO_TIMEOUT,
        seed: 11,
        ..opts(Caps::ALL)
    };
    let d = run(&o);
    let (ulp, _) = d.host.host.stats();
    let nic = d.host_nic.stats();
    assert!(ulp.tls_decrypt_bytes > 64 << 10, "records opened in software");
    assert!(nic.nic_zero_copy_bytes > o.size / 2, "most placed anyway: {nic:?}");
    assert_eq!(nic.rx_tls_auth_fail, 0);
}

/// Where the NIC placed a record's data is noted until the record is
/// taken, then forgotten: a long run keeps every byte out of the ring
/// (were the notes kept, the NIC would run out of room for them after
/// some 16384 and stop keeping bytes out).
#[test]
fn placement_inside_records_goes_on_for_as_long_as_the_run() {
    let o = DemoOptions { size: 128 * MB, queues: 1, qd: 16, ..opts(Caps::ALL) };
    let d = run(&o);
    let nic = d.host_nic.stats();
    assert_eq!(nic.nic_zero_copy_bytes, o.size, "{nic:?}");
}
