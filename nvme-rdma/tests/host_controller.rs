//! An NVMe/RDMA host and controller wired to each other through in-memory
//! byte pipes (the TCP stream their queue pairs share), with time under the
//! test's control.

use iwarp::{Device, QpConfig};
use nvme_of::Instant;
use nvme_of::controller::{ControllerQueue, Port, Target, TargetConfig};
use nvme_of::host::{Host, HostConfig, HostError, HostEvent, Io, IoKind};
use nvme_of::namespace::Namespace;
use nvme_of::nvme::DISCOVERY_NQN;
use nvme_of::nvme::log::TRTYPE_RDMA;
use nvme_rdma::RdmaError;
use nvme_rdma::cm::CmRejectStatus;
use nvme_rdma::controller::Connection;
use nvme_rdma::host::Rdma;
use nvme_storage::RamNamespace;
use std::collections::BTreeMap;
use std::sync::Arc;
use ulp_ddp::IoBuf;

const SUBNQN: &str = "nqn.2026-11.io.nvme-ddp:rdma";

struct Pair {
    host: Host,
    target: Arc<Target>,
    ctrl_dev: Device,
    ctrl_qp: QpConfig,
    conns: BTreeMap<u16, Connection>,
    now: Instant,
    events: Vec<HostEvent>,
}

fn target(queue_size: u16) -> Arc<Target> {
    let ns: Arc<dyn Namespace> = Arc::new(RamNamespace::new(16 << 20, 512).unwrap());
    let port = Some(Port { traddr: "198.18.0.1".into(), trsvcid: "4420".into(), portid: 1 });
    let cfg = TargetConfig { subnqn: SUBNQN.into(), queue_size, port, ..TargetConfig::default() };
    Target::new(cfg, vec![ns]).unwrap()
}

impl Pair {
    fn new(host: HostConfig, rdma: Rdma, target: Arc<Target>) -> Self {
        let ctrl_dev = Device::new();
        let ctrl_qp = QpConfig::new(ctrl_dev.alloc_pd());
        Self {
            host: nvme_rdma::host::new(host, rdma),
            target,
            ctrl_dev,
            ctrl_qp,
            conns: BTreeMap::new(),
            now: Instant::from_millis(1_000),
            events: Vec::new(),
        }
    }

    fn nvm(queue_depth: u16, rdma: Rdma) -> Self {
        let host = HostConfig { subnqn: SUBNQN.into(), queue_depth, ..HostConfig::default() };
        Self::new(host, rdma, target(128))
    }

    fn step(&mut self) -> bool {
        let mut moved = false;
        while let Some(qid) = self.host.poll_connect() {
            let c = Connection::new(
                self.target.clone(),
                None,
                &self.ctrl_dev,
                self.ctrl_qp.clone(),
                self.now,
            );
            self.conns.insert(qid, c);
            self.host.connected(qid, self.now);
            moved = true;
        }
        let mut buf = vec![0u8; 9000];
        for qid in self.conns.keys().copied().collect::<Vec<_>>() {
            let n = self.host.poll_transmit(qid, &mut buf);
            let conn = self.conns.get_mut(&qid).unwrap();
            if n > 0 {
                moved = true;
                conn.handle_input(&buf[..n], self.now);
            }
            let n = conn.poll_transmit(&mut buf);
            if n > 0 {
                moved = true;
                self.host.handle_input(qid, &buf[..n], self.now);
            }
            if self.conns[&qid].is_closed() || self.host.is_closed(qid) {
                let n = self.host.poll_transmit(qid, &mut buf);
                if n > 0 {
                    self.conns.get_mut(&qid).unwrap().handle_input(&buf[..n], self.now);
                }
                self.conns.get_mut(&qid).unwrap().transport_closed();
                self.host.transport_closed(qid, self.now);
                self.conns.remove(&qid);
                moved = true;
            }
        }
        while let Some(ev) = self.host.poll_event() {
            self.events.push(ev);
            moved = true;
        }
        moved
    }

    fn run_until(&mut self, mut done: impl FnMut(&[HostEvent]) -> bool) {
        for _ in 0..100_000 {
            while self.step() {}
            if done(&self.events) {
                return;
            }
            let t = self
                .host
                .poll_timeout()
                .into_iter()
                .chain(self.conns.values().filter_map(|c| c.poll_timeout()))
                .min();
            let Some(t) = t else { return };
            self.now = self.now.max(t);
            self.host.handle_timeout(self.now);
            for c in self.conns.values_mut() {
                c.handle_timeout(self.now);
            }
        }
        panic!("did not settle");
    }

    fn ready(&mut self) {
        self.run_until(|ev| {
            ev.iter().any(|e| matches!(e, HostEvent::Ready | HostEvent::Failed(_)))
        });
        assert!(self.host.is_ready(), "{:?}", self.events);
    }

    /// Submit `io` and run until it completes.
    fn io(&mut self, io: Io) -> nvme_of::nvme::Status {
        let tag = io.tag;
        self.host.submit(1, io, self.now).unwrap();
        let mut status = None;
        self.run_until(|ev| {
            status = ev.iter().find_map(|e| match e {
                HostEvent::Completion { tag: t, status, .. } if *t == tag => Some(*status),
                _ => None,
            });
            status.is_some()
        });
        status.expect("a completion")
    }
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
    assert!(p.io(w).is_success());
    let back = IoBuf::new(len);
    let r = Io {
        kind: IoKind::Read,
        nsid: 1,
        slba,
        nlb,
        buf: Some(back.clone()),
        tag: 2000 + u64::from(seed),
    };
    assert!(p.io(r).is_success());
    assert!(back.to_vec() == data, "{len} bytes at LBA {slba} read back as written");
}

#[test]
fn brings_up_and_moves_data_both_ways_with_and_without_crc() {
    for (crc, oneshot) in [(false, false), (true, false), (false, true), (true, true)] {
        let mut p = Pair::nvm(32, Rdma::new(crc, oneshot));
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
        let mut p = Pair::nvm(32, Rdma::new(false, oneshot));
        p.ready();
        let before = p.host.stats().0.control_calls;
        for i in 0..8 {
            let buf = IoBuf::new(64 << 10);
            let r =
                Io { kind: IoKind::Read, nsid: 1, slba: i * 128, nlb: 128, buf: Some(buf), tag: i };
            assert!(p.io(r).is_success());
        }
        (p.host.stats().0.control_calls - before) as f64 / 8.0
    };
    assert_eq!((per_io(false), per_io(true)), (3.0, 1.0));
}

#[test]
fn discovery_names_the_rdma_transport() {
    let host = HostConfig { subnqn: DISCOVERY_NQN.into(), ..HostConfig::default() };
    let mut p = Pair::new(host, Rdma::new(false, false), target(128));
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
    let mut p = Pair::nvm(32, Rdma::new(false, false));
    assert_eq!(p.host.poll_connect(), Some(0));
    let c = Connection::new(p.target.clone(), None, &p.ctrl_dev, p.ctrl_qp.clone(), p.now);
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
