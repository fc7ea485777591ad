//! NVMe/RDMA on the core's pair harness: host and controller joined by
//! in-memory byte streams (the TCP stream their queue pairs share), with
//! time under the test's control. Keyed SGLs, one-shot registration, the
//! CM's private data and rejects are the binding's own, tested here.

use iwarp::{Device, QpConfig};
use nvme_of::controller::{Port, Target, TargetConfig};
use nvme_of::host::{HostConfig, HostError, HostEvent, Io, IoKind};
use nvme_of::namespace::Namespace;
use nvme_of::nvme::DISCOVERY_NQN;
use nvme_of::nvme::log::TRTYPE_RDMA;
use nvme_of::pair::Pair;
use nvme_rdma::RdmaError;
use nvme_rdma::cm::CmRejectStatus;
use nvme_rdma::host::Rdma;
use nvme_storage::RamNamespace;
use std::sync::Arc;
use ulp_ddp::IoBuf;

const SUBNQN: &str = "nqn.2026-11.io.nvme-ddp:rdma";

fn target(queue_size: u16) -> Arc<Target> {
    let ns: Arc<dyn Namespace> = Arc::new(RamNamespace::new(16 << 20, 512).unwrap());
    let port = Some(Port { traddr: "198.18.0.1".into(), trsvcid: "4420".into(), portid: 1 });
    let cfg = TargetConfig { subnqn: SUBNQN.into(), queue_size, port, ..TargetConfig::default() };
    Target::new(cfg, vec![ns]).unwrap()
}

/// The RDMA binding on the core's pair harness: a host with `rdma`'s
/// memory and options, a controller with memory of its own.
fn pair(host: HostConfig, rdma: Rdma, target: Arc<Target>) -> Pair {
    let dev = Device::new();
    let qp = QpConfig::new(dev.alloc_pd());
    let acceptor = Arc::new(nvme_rdma::controller::Rdma { dev, qp });
    let mut p = Pair::new(nvme_rdma::host::new(host, rdma), acceptor, target);
    p.chunk = 9000;
    p
}

fn nvm(queue_depth: u16, rdma: Rdma) -> Pair {
    let host = HostConfig { subnqn: SUBNQN.into(), queue_depth, ..HostConfig::default() };
    pair(host, rdma, target(128))
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed)).collect()
}

fn write_read_verify(p: &mut Pair, len: usize, slba: u64, seed: u8) {
    let data = pattern(len, seed);
    let nlb = (len / 512) as u32;
    let w = Io {
        kind: IoKind::Write,
        nsid: 1,
        slba,
        nlb,
        buf: Some(IoBuf::from_vec(data.clone())),
        tag: 1000 + u64::from(seed),
    };
    assert!(p.submit_and_wait(1, w).is_success());
    let back = IoBuf::new(len);
    let r = Io {
        kind: IoKind::Read,
        nsid: 1,
        slba,
        nlb,
        buf: Some(back.clone()),
        tag: 2000 + u64::from(seed),
    };
    assert!(p.submit_and_wait(1, r).is_success());
    assert!(back.to_vec() == data, "{len} bytes at LBA {slba} read back as written");
}

#[test]
fn brings_up_and_moves_data_both_ways_with_and_without_crc() {
    for (crc, oneshot) in [(false, false), (true, false), (false, true), (true, true)] {
        let mut p = nvm(32, Rdma::new(crc, oneshot));
        p.ready();
        let id = p.host.controller().unwrap().clone();
        // Keyed SGLs, and the RDMA queue limit (MQES 127).
        assert_ne!(id.sgls & (1 << 2), 0);
        assert_eq!(nvme_of::nvme::property::cap_mqes(p.host.capabilities()), 127);
        assert_eq!(p.host.namespaces()[0].blocks, (16 << 20) / 512);
        // In the capsule (4 KiB), by RDMA Read (128 KiB), by RDMA Write.
        write_read_verify(&mut p, 4096, 0, 1);
        write_read_verify(&mut p, 128 << 10, 64, 2);
        write_read_verify(&mut p, 64 << 10, 1024, 3);
        let (rx, _) = p.host.stats();
        assert!(rx.data_bytes >= (196 << 10), "{rx:?}");
        p.host.shutdown(p.now);
        p.run_until(|ev| ev.iter().any(|e| matches!(e, HostEvent::Closed)));
        assert!(
            p.events.iter().any(|e| matches!(e, HostEvent::Closed)),
            "crc {crc} oneshot {oneshot}"
        );
    }
}

#[test]
fn one_shot_takes_one_control_call_per_io_and_classic_three() {
    let per_io = |oneshot: bool| {
        let mut p = nvm(32, Rdma::new(false, oneshot));
        p.ready();
        let before = p.host.stats().0.control_calls;
        for i in 0..8 {
            let buf = IoBuf::new(64 << 10);
            let r =
                Io { kind: IoKind::Read, nsid: 1, slba: i * 128, nlb: 128, buf: Some(buf), tag: i };
            assert!(p.submit_and_wait(1, r).is_success());
        }
        (p.host.stats().0.control_calls - before) as f64 / 8.0
    };
    assert_eq!((per_io(false), per_io(true)), (3.0, 1.0));
}

#[test]
fn discovery_names_the_rdma_transport() {
    let host = HostConfig { subnqn: DISCOVERY_NQN.into(), ..HostConfig::default() };
    let mut p = pair(host, Rdma::new(false, false), target(128));
    p.run_until(|ev| {
        ev.iter().any(|e| matches!(e, HostEvent::Discovered(_) | HostEvent::Failed(_)))
    });
    let entries = p.events.iter().find_map(|e| match e {
        HostEvent::Discovered(v) => Some(v.clone()),
        _ => None,
    });
    let entries = entries.expect("a discovery log");
    assert_eq!(entries.len(), 1);
    assert_eq!((entries[0].trtype, entries[0].tsas), (TRTYPE_RDMA, [1, 1, 1]));
    assert_eq!(entries[0].subnqn, SUBNQN);
}

#[test]
fn an_admin_queue_larger_than_32_is_rejected_with_the_cm_status() {
    // The host asks for an admin queue of 33 entries (HSQSIZE 32).
    let mut p = nvm(32, Rdma::new(false, false));
    assert_eq!(p.host.poll_connect(), Some(0));
    let c = p.acceptor.accept(p.target.clone(), None, p.now);
    p.conns.insert(0, c);
    p.host.connected(0, p.now);
    let mut buf = vec![0u8; 4096];
    let n = p.host.poll_transmit(0, &mut buf);
    assert_eq!(&buf[..16], b"MPA ID Req Frame");
    buf[30] = 32;
    p.conns.get_mut(&0).unwrap().handle_input(&buf[..n], p.now);
    p.run_until(|ev| ev.iter().any(|e| matches!(e, HostEvent::Failed(_))));
    match p.events.iter().find_map(|e| match e {
        HostEvent::Failed(HostError::Queue { qid: 0, error }) => Some(error.clone()),
        _ => None,
    }) {
        Some(e) => assert_eq!(
            e.downcast_ref::<RdmaError>(),
            Some(&RdmaError::Rejected(Some(CmRejectStatus::InvalidHsqsize)))
        ),
        None => panic!("{:?}", p.events),
    }
}
