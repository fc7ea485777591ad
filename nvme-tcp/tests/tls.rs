//! NVMe/TCP over TLS 1.3 with a PSK, on the core's pair harness: the TLS
//! handshake first on every queue, then ICReq and everything else inside
//! records; a wrong key, or NVMe/TCP in the clear on a port that requires
//! TLS, gets nowhere.

use nvme_of::Digests;
use nvme_of::controller::{Port, Target, TargetConfig, Transport as _};
use nvme_of::host::{Host, HostConfig, HostEvent, IoKind};
use nvme_of::nvme::{DISCOVERY_NQN, Status, log};
use nvme_of::pair::{self, Pair, SUBNQN, pattern};
use nvme_storage::RamNamespace;
use nvme_tcp::tls::controller::{SecureTcp as CtrlTls, TlsPort};
use nvme_tcp::tls::host::{SecureTcp as HostTls, TlsClient};
use nvme_tcp::tls::{ConfiguredPsk, Derivation, PskHash};
use std::sync::Arc;
use ulp_ddp::IoBuf;

const HOSTNQN: &str = "nqn.2014-08.org.nvmexpress:uuid:tls-host";

fn configured() -> ConfiguredPsk {
    ConfiguredPsk::new(&[0x42; 32], Some(PskHash::Sha256)).unwrap()
}

/// A port that knows the configured PSK and derives each host's TLS PSK.
fn port(required: bool) -> TlsPort {
    TlsPort::configured(required, configured(), Derivation::Rfc8446)
}

fn host(cfg: HostConfig, psk: &ConfiguredPsk) -> Host {
    let (identity, tls) = psk.tls_psk(1, &cfg.hostnqn, &cfg.subnqn, Derivation::Rfc8446);
    let tcp = nvme_tcp::host::Tcp { digests: cfg.digests, maxr2t: cfg.maxr2t };
    Host::new(cfg, Arc::new(HostTls { tcp, client: TlsClient { identity, psk: tls } }))
}

fn target() -> Arc<Target> {
    let port = Port { traddr: "198.18.0.2".into(), trsvcid: "4420".into(), portid: 1 };
    let cfg = TargetConfig { port: Some(port), ..Default::default() };
    pair::target(cfg, Arc::new(RamNamespace::new(1 << 20, 512).unwrap()))
}

fn cfg(subnqn: &str, digests: Digests) -> HostConfig {
    HostConfig {
        subnqn: subnqn.into(),
        hostnqn: HOSTNQN.into(),
        digests,
        io_queues: 2,
        ..Default::default()
    }
}

#[test]
fn every_queue_runs_inside_tls_with_and_without_digests() {
    for digests in [Digests::NONE, Digests { header: true, data: true }] {
        let mut p = Pair::new(
            host(cfg(SUBNQN, digests), &configured()),
            Arc::new(CtrlTls(port(true))),
            target(),
        );
        // No cleartext NVMe/TCP PDU after the handshake: every byte the
        // host sends is a TLS record (type 22 handshake, 23 application
        // data), and its ICReq never shows.
        let seen = Arc::new(std::sync::Mutex::new(Vec::<u8>::new()));
        let into = seen.clone();
        p.h2c_filter = Some(Box::new(move |_qid, bytes: &mut Vec<u8>| {
            into.lock().unwrap().extend_from_slice(bytes);
        }));
        p.ready();
        let data = pattern(64 * 1024, 5);
        assert_eq!(
            p.io(1, IoKind::Write, 0, 128, Some(IoBuf::from_vec(data.clone()))),
            Status::SUCCESS
        );
        let back = IoBuf::new(64 * 1024);
        assert_eq!(p.io(2, IoKind::Read, 0, 128, Some(back.clone())), Status::SUCCESS);
        assert_eq!(back.to_vec(), data);
        let wire = seen.lock().unwrap().clone();
        assert_eq!(wire[0], 0x16, "a ClientHello first");
        assert!(wire.windows(4).all(|w| w != [0x00, 0x00, 0x80, 0x00]), "no cleartext ICReq");
        assert!(wire.windows(data.len().min(64)).all(|w| w != &data[..64]), "no cleartext data");
    }
}

#[test]
fn a_wrong_key_and_cleartext_on_a_required_port_get_nowhere() {
    let wrong = ConfiguredPsk::new(&[0x43; 32], Some(PskHash::Sha256)).unwrap();
    let mut p = Pair::new(
        host(cfg(SUBNQN, Digests::NONE), &wrong),
        Arc::new(CtrlTls(port(true))),
        target(),
    );
    p.run_for(std::time::Duration::from_secs(2));
    assert!(!p.host.is_ready(), "{:?}", p.events);
    assert_eq!(p.target.stats().controllers, 0);

    let clear = nvme_tcp::host::new(cfg(SUBNQN, Digests::NONE));
    let mut p = Pair::new(clear, Arc::new(CtrlTls(port(true))), target());
    p.run_for(std::time::Duration::from_secs(2));
    assert!(!p.host.is_ready());
    assert_eq!(p.target.stats().controllers, 0);

    // Where TLS is offered but not required, the clear host gets in.
    let clear = nvme_tcp::host::new(cfg(SUBNQN, Digests::NONE));
    let mut p = Pair::new(clear, Arc::new(CtrlTls(port(false))), target());
    p.ready();
}

#[test]
fn discovery_says_the_port_requires_tls_1_3() {
    for (required, treq) in
        [(true, log::TREQ_SECURE_REQUIRED), (false, log::TREQ_SECURE_NOT_REQUIRED)]
    {
        let b = CtrlTls(port(required)).binding();
        assert_eq!((b.treq & 3, b.tsas[0]), (treq, log::SECTYPE_TLS13));
        let mut p = Pair::new(
            host(cfg(DISCOVERY_NQN, Digests::NONE), &configured()),
            Arc::new(CtrlTls(port(required))),
            target(),
        );
        p.run_until(|ev| {
            ev.iter().any(|e| matches!(e, HostEvent::Discovered(_) | HostEvent::Failed(_)))
        });
        let entries = p.events.iter().find_map(|e| match e {
            HostEvent::Discovered(v) => Some(v.clone()),
            _ => None,
        });
        let e = &entries.expect("discovered")[0];
        assert_eq!((e.treq & 3, e.tsas[0]), (treq, log::SECTYPE_TLS13));
    }
}

/// A controller that refuses the handshake by closing, without an alert
/// (tlshd under nvmet does so): the host says the handshake failed.
#[test]
fn a_close_during_the_handshake_is_a_failed_handshake() {
    let mut h = host(cfg(SUBNQN, Digests::NONE), &configured());
    let qid = h.poll_connect().unwrap();
    h.connected(qid, nvme_of::Instant::ZERO);
    let mut buf = vec![0u8; 4096];
    assert!(h.poll_transmit(qid, &mut buf) > 0, "a ClientHello");
    h.transport_closed(qid, nvme_of::Instant::ZERO);
    let failed = std::iter::from_fn(|| h.poll_event()).find_map(|e| match e {
        HostEvent::Failed(e) => Some(e.to_string()),
        _ => None,
    });
    let failed = failed.expect("the association failed");
    assert!(failed.contains("TLS handshake failed"), "{failed}");
}

/// A controller that never answers the ClientHello: the handshake is
/// given up after 10 s, as Linux's host gives it up.
#[test]
fn a_handshake_nobody_answers_times_out() {
    let mut h = host(cfg(SUBNQN, Digests::NONE), &configured());
    let qid = h.poll_connect().unwrap();
    h.connected(qid, nvme_of::Instant::ZERO);
    let mut buf = vec![0u8; 4096];
    assert!(h.poll_transmit(qid, &mut buf) > 0, "a ClientHello");
    let at = h.poll_timeout().expect("a handshake deadline");
    assert!(at <= nvme_of::Instant::ZERO + std::time::Duration::from_secs(10));
    h.handle_timeout(at);
    let failed = std::iter::from_fn(|| h.poll_event()).find_map(|e| match e {
        HostEvent::Failed(e) => Some(e.to_string()),
        _ => None,
    });
    assert!(failed.expect("failed").contains("did not complete it in 10 s"));
}

/// More reads at once than the controller queues output for (4 MiB): the
/// commands it could not take yet wait as plaintext in the TLS layer, and
/// are handed over as its output drains, with no further input to prompt
/// it; every read completes.
#[test]
fn commands_waiting_under_tls_are_taken_as_output_drains() {
    use nvme_of::host::Io;
    let host_cfg = HostConfig { queue_depth: 64, io_queues: 1, ..cfg(SUBNQN, Digests::NONE) };
    let target =
        pair::target(TargetConfig::default(), Arc::new(RamNamespace::new(16 << 20, 512).unwrap()));
    let mut p = Pair::new(host(host_cfg, &configured()), Arc::new(CtrlTls(port(true))), target);
    p.ready();
    for tag in 0..64u64 {
        let io = Io {
            kind: IoKind::Read,
            nsid: 1,
            slba: tag * 256,
            nlb: 256,
            buf: Some(IoBuf::new(128 << 10)),
            tag,
        };
        p.host.submit(1, io, p.now).expect("room for 64");
    }
    p.run_for(std::time::Duration::from_secs(2));
    let done = p
        .events
        .iter()
        .filter(|e| matches!(e, HostEvent::Completion { status, .. } if status.is_success()))
        .count();
    assert_eq!(done, 64, "{} of 64 reads completed", done);
}
