//! The offload under loss, reordering and duplication (seeded, both
//! directions, header and data digests on, simulated time): data stays
//! intact, the NIC resyncs after losing a header and resumes offloading,
//! retransmitted segments get their digests back, and a payload made of
//! fake PDU headers never gets a placement trusted.

use nvme_ddp::app::{HostApp, IoApp};
use nvme_ddp::demo::{self, Demo, DemoOptions};
use nvme_ddp::driver::smoltcp::run_simulated;
use nvme_of::Digests;
use nvme_of::host::{Host, HostEvent, Io, IoKind};
use nvme_of::nvme::Status;
use nvme_tcp::wire::{DataPdu, Framing, Header, PduRepr};
use smoltcp_glue::Profile;
use std::time::Duration;
use ulp_ddp::{Caps, DdpDevice, IoBuf};

const LIMIT: Duration = Duration::from_secs(24 * 3600);

fn opts(impair: Profile, seed: u64) -> DemoOptions {
    DemoOptions {
        size: 16 << 20,
        bs: 128 << 10,
        qd: 8,
        queues: 2,
        digests: Digests { header: true, data: true },
        impair,
        seed,
        simulated: true,
        offload: Caps::ALL,
        kato: DemoOptions::IMPAIRED_KATO,
        io_timeout: DemoOptions::IMPAIRED_IO_TIMEOUT,
        ..DemoOptions::default()
    }
}

/// A write pass and a verified read pass; every byte must come back.
fn run(o: &DemoOptions) -> Demo {
    let mut d = demo::build(o).unwrap();
    let mut app = IoApp::new(demo::passes(o));
    run_simulated(&mut d.host, &mut d.ctrl, &mut app, LIMIT).unwrap();
    assert_eq!(app.error(), None, "{o:?}");
    let (w, r) = (&app.results[0].1, &app.results[1].1);
    assert_eq!((w.bytes, w.errors), (o.size, 0));
    assert_eq!(
        (r.verified_bytes, r.verify_failures, r.errors),
        (o.size, 0, 0),
        "100% data integrity"
    );
    d
}

fn loss(p: f64) -> Profile {
    Profile { loss: p, ..Profile::default() }
}

#[test]
fn light_loss_keeps_almost_everything_offloaded() {
    for seed in [1, 2] {
        let d = run(&opts(loss(0.001), seed));
        let (ulp, _) = d.host.host.stats();
        assert!(ulp.offload_share() > 0.95, "seed {seed}: {ulp:?}");
    }
}

#[test]
fn one_percent_loss_resyncs_and_keeps_ninety_percent_offloaded() {
    for seed in [1, 2, 3] {
        let d = run(&opts(loss(0.01), seed));
        let (ulp, _) = d.host.host.stats();
        let nic = d.host_nic.stats();
        assert!(
            nic.resync > 0 && nic.resync_confirmed > 0,
            "seed {seed}: headers were lost and found again: {nic:?}"
        );
        assert!(ulp.offload_gaps > 0, "seed {seed}: offload stopped and resumed");
        assert!(
            ulp.offload_share() >= 0.9,
            "seed {seed}: {:.3} of the payload placed",
            ulp.offload_share()
        );
        // The controller's NIC, seeing the same losses the other way, recovers too.
        assert!(d.ctrl_nic.stats().nic_placed_bytes > 0);
    }
}

#[test]
fn five_percent_loss_still_loses_no_data() {
    let d = run(&opts(loss(0.05), 4));
    let (ulp, _) = d.host.host.stats();
    let nic = d.host_nic.stats();
    assert!(nic.resync_confirmed > 0);
    assert!(ulp.offload_share() > 0.5, "offload keeps coming back: {ulp:?}");
    assert!(ulp.fallback_pdus > 0, "the software path did its share");
}

#[test]
fn retransmitted_segments_get_their_data_digests_back() {
    // Lose host-to-controller frames during writes: the host's NIC filled
    // the digests of the H2CData it sent; retransmissions carry the zeros
    // the host left, and the NIC must put the digests back, or the
    // controller would fail the writes.
    let mut o = opts(loss(0.01), 5);
    o.size = 8 << 20;
    let d = run(&o);
    let nic = d.host_nic.stats();
    assert!(nic.tx_digest_restored > 0, "{nic:?}");
    assert_eq!(nic.tx_crc_offloaded_bytes, o.size);
}

#[test]
fn reordering_and_duplication_in_both_directions() {
    for (name, p) in [
        ("reorder", Profile { reorder: 0.02, ..Profile::default() }),
        ("duplicate", Profile { duplicate: 0.02, ..Profile::default() }),
        (
            "all",
            Profile {
                loss: 0.005,
                reorder: 0.01,
                duplicate: 0.01,
                corrupt: 0.005,
                ..Profile::default()
            },
        ),
    ] {
        let d = run(&opts(p, 6));
        let (ulp, _) = d.host.host.stats();
        assert!(ulp.offload_share() > 0.5, "{name}: {ulp:?}");
    }
}

/// Data that is a chain of C2HData headers, each with a right header
/// digest and a PLEN leading to the next: exactly what a NIC hunting for
/// its place would find plausible.
fn fake_chain(len: usize, cid: u16) -> Vec<u8> {
    let framing = Framing { digests: Digests { header: true, data: true }, pda: 0 };
    let d = DataPdu { cccid: cid, ttag: 0, datao: 0, last: true, success: false };
    let repr = PduRepr::new(Header::C2hData(d), framing, 100);
    let mut one = vec![0u8; repr.plen() as usize];
    repr.emit(&mut one, &[0xab; 100]);
    one.iter().copied().cycle().take(len).collect()
}

/// Writes fake-header data, then reads it back and compares.
struct FakeHeaders {
    written: Vec<(u64, Vec<u8>)>,
    next: usize,
    reading: bool,
    outstanding: usize,
    mismatches: usize,
    read_back: usize,
    done: bool,
    failed: Option<String>,
}

impl FakeHeaders {
    const IOS: usize = 64;
    const BS: usize = 128 << 10;

    fn new() -> Self {
        let written = (0..Self::IOS)
            .map(|i| ((i * Self::BS / 512) as u64, fake_chain(Self::BS, (i % 8) as u16)))
            .collect();
        Self {
            written,
            next: 0,
            reading: false,
            outstanding: 0,
            mismatches: 0,
            read_back: 0,
            done: false,
            failed: None,
        }
    }

    fn pump(&mut self, host: &mut Host, now: nvme_of::Instant) {
        while self.outstanding < 8 && self.next < Self::IOS {
            let (lba, data) = &self.written[self.next];
            let (kind, buf) = if self.reading {
                (IoKind::Read, IoBuf::new(Self::BS))
            } else {
                (IoKind::Write, IoBuf::from_vec(data.clone()))
            };
            let io = Io {
                kind,
                nsid: 1,
                slba: *lba,
                nlb: (Self::BS / 512) as u32,
                buf: Some(buf),
                tag: self.next as u64,
            };
            host.submit(1 + (self.next % 2) as u16, io, now).unwrap();
            self.next += 1;
            self.outstanding += 1;
        }
        if self.outstanding == 0 && self.next == Self::IOS {
            if self.reading {
                host.shutdown(now);
            } else {
                self.reading = true;
                self.next = 0;
                self.pump(host, now);
            }
        }
    }
}

impl HostApp for FakeHeaders {
    fn on_event(&mut self, host: &mut Host, event: HostEvent, now: nvme_of::Instant) {
        match event {
            HostEvent::Ready => self.pump(host, now),
            HostEvent::Completion { tag, status, buf, .. } => {
                assert_eq!(status, Status::SUCCESS);
                self.outstanding -= 1;
                if self.reading {
                    self.read_back += 1;
                    if buf.map(|b| b.to_vec()) != Some(self.written[tag as usize].1.clone()) {
                        self.mismatches += 1;
                    }
                }
                self.pump(host, now);
            }
            HostEvent::Failed(e) => {
                self.failed = Some(e.to_string());
                self.done = true;
            }
            HostEvent::Closed => self.done = true,
            _ => {}
        }
    }
    fn is_done(&self) -> bool {
        self.done
    }
    fn error(&self) -> Option<String> {
        self.failed.clone()
    }
}

#[test]
fn fake_pdu_headers_in_the_payload_never_get_a_placement_trusted() {
    let o = opts(loss(0.03), 7);
    let mut d = demo::build(&o).unwrap();
    let mut app = FakeHeaders::new();
    run_simulated(&mut d.host, &mut d.ctrl, &mut app, LIMIT).unwrap();
    assert_eq!(app.failed, None);
    assert_eq!(app.read_back, FakeHeaders::IOS);
    assert_eq!(app.mismatches, 0, "every read returned exactly what was written");
    let nic = d.host_nic.stats();
    // The hunting NIC followed fake chains and asked about them; the host
    // confirmed only real headers.
    assert!(nic.resync > nic.resync_confirmed, "{nic:?}");
    assert!(nic.nic_placed_bytes > 0);
}
