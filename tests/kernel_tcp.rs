//! Host against controller over kernel TCP on 127.0.0.1: digests off and
//! on, one and four I/O queues, queue depth 1 and 32, a write pass and a
//! verified read pass over the whole namespace, large writes through R2T,
//! a file-backed namespace, and the error paths (malformed PDU, bad
//! command, keep alive expiry) with the controller serving on regardless.

use nvme_ddp::app::{AdminApp, IoApp};
use nvme_ddp::driver::kernel_tcp::{
    ControllerServer, HostRunError, QueueSet, run_host, run_host_sets,
};
use nvme_ddp::driver::transport::{Listener, TransportType};
use nvme_ddp::workload::{Limit, Rw, WorkloadSpec, check_pattern};
use nvme_of::Digests;
use nvme_of::controller::{Target, TargetConfig};
use nvme_of::host::{Host, HostConfig, HostEvent, Io, IoKind};
use nvme_of::namespace::Namespace;
use nvme_of::nvme::{ConnectData, FabricsCommand, SglDescriptor, Sqe, Status};
use nvme_storage::{FileNamespace, RamNamespace};
use nvme_tcp::wire::{CapsuleCmd, Framing, Header, IcReq, PduRepr};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::Duration;
use ulp_ddp::IoBuf;

const NQN: &str = "nqn.2026-11.io.nvme-ddp:kernel-tcp-test";
const LIMIT: Duration = Duration::from_secs(120);

fn serve(cfg: TargetConfig, ns: Arc<dyn Namespace>) -> (ControllerServer, SocketAddr) {
    serve_on(Listener::default(), cfg, ns)
}

fn serve_on(
    listener: Listener,
    cfg: TargetConfig,
    ns: Arc<dyn Namespace>,
) -> (ControllerServer, SocketAddr) {
    let target = Target::new(TargetConfig { subnqn: NQN.into(), ..cfg }, vec![ns]).unwrap();
    let listen = ["127.0.0.1:0".parse().unwrap()];
    let server = ControllerServer::spawn(target, &listen, listener).unwrap();
    let addr = server.local_addrs()[0];
    (server, addr)
}

fn ram(size: u64) -> Arc<dyn Namespace> {
    Arc::new(RamNamespace::new(size, 512).unwrap())
}

fn host_cfg(digests: Digests, queues: u16, qd: u16) -> HostConfig {
    HostConfig {
        subnqn: NQN.into(),
        digests,
        io_queues: queues,
        queue_depth: qd,
        ..HostConfig::default()
    }
}

/// A write pass over the whole namespace, then a verified read pass.
fn write_then_read(addr: SocketAddr, cfg: HostConfig, bs: u32, size: u64) -> IoApp {
    write_then_read_with(addr, &mut nvme_tcp::host::new(cfg), bs, size)
}

fn write_then_read_with(addr: SocketAddr, host: &mut Host, bs: u32, size: u64) -> IoApp {
    let spec = |rw| WorkloadSpec {
        rw,
        bs,
        limit: Limit::Bytes(size),
        qd: usize::MAX,
        rwmixread: 50,
        verify: true,
        seed: 42,
        nsid: None,
        part: (0, 1),
    };
    let mut app = IoApp::new([spec(Rw::Write), spec(Rw::Read)]);
    run_host(addr, host, &mut app, LIMIT).unwrap();
    assert_eq!(nvme_ddp::app::HostApp::error(&app), None);
    assert_eq!(app.results.len(), 2);
    let (_, w) = &app.results[0];
    let (_, r) = &app.results[1];
    assert_eq!((w.bytes, w.errors), (size, 0));
    assert_eq!((r.bytes, r.errors, r.verify_failures), (size, 0, 0));
    assert_eq!(r.verified_bytes, size, "every byte read back was checked");
    app
}

#[test]
fn every_digest_queue_count_and_depth() {
    let size = 4 << 20;
    let (_server, addr) = serve(TargetConfig::default(), ram(size));
    for (header, data) in [(false, false), (true, true), (false, true), (true, false)] {
        for (queues, qd) in [(1, 1), (4, 32)] {
            let app = write_then_read(
                addr,
                host_cfg(Digests { header, data }, queues, qd),
                64 << 10,
                size,
            );
            assert_eq!(app.io_queues, queues);
            assert_eq!(app.queue_depth, usize::from(qd));
        }
    }
}

#[test]
fn nvme_rdma_over_kernel_tcp_with_and_without_crc_and_one_shot() {
    // iWARP on kernel sockets, as `controller --transport rdma --listen`
    // serves Linux siw: writes small enough to go in the capsule and large
    // ones fetched by RDMA Read, reads by RDMA Write.
    let size = 4 << 20;
    let rdma = || TransportType::Rdma.listener(1500);
    let (_server, addr) = serve_on(rdma(), TargetConfig::default(), ram(size));
    // A controller that insists on MPA CRCs gets them from a host that
    // did not ask.
    let (_strict, strict) = serve_on(rdma().require_crc(true), TargetConfig::default(), ram(size));
    for (addr, crc, oneshot) in
        [(addr, false, false), (addr, true, true), (addr, false, true), (strict, false, false)]
    {
        for bs in [4 << 10, 128 << 10] {
            let cfg = host_cfg(Digests { header: false, data: crc }, 2, 16);
            let mut host = TransportType::Rdma.host(cfg, oneshot, 1500);
            let what = format!("crc {crc} one-shot {oneshot} bs {bs} at {addr}");
            let app = write_then_read_with(addr, &mut host, bs, size);
            assert_eq!(app.io_queues, 2, "{what}");
            let (rx, tx) = host.stats();
            let crc_on = crc || addr == strict;
            assert_eq!(
                rx.crc_bytes >= size && tx.crc_bytes >= size,
                crc_on,
                "{what}: {rx:?} {tx:?}"
            );
        }
    }
}

/// NVMe/RDMA's queues are connections too: a host's four iWARP I/O queues
/// spread over two poll groups (each queue's MPA and RDMAP state moving
/// with it when its Connect moves it), and what they write reads back.
#[test]
fn nvme_rdma_queues_spread_over_poll_groups() {
    let size = 4 << 20;
    let target =
        Target::new(TargetConfig { subnqn: NQN.into(), ..Default::default() }, vec![ram(size)])
            .unwrap();
    let listen = ["127.0.0.1:0".parse().unwrap()];
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let rdma = TransportType::Rdma.listener(1500);
    let server = ControllerServer::spawn_until(target, &listen, rdma, stop, &[None, None]).unwrap();
    let addr = server.local_addrs()[0];
    let mut host = TransportType::Rdma.host(host_cfg(Digests::NONE, 4, 16), true, 1500);
    let app = write_then_read_with(addr, &mut host, 128 << 10, size);
    assert_eq!(app.io_queues, 4);
    let groups = server.stop().unwrap();
    assert_eq!(groups.iter().map(|g| g.io_queues).sum::<u64>(), 4, "{groups:?}");
    assert!(groups.iter().all(|g| g.io_queues == 2), "two each: {groups:?}");
}

/// Queue sets need a queue each: a controller that grants fewer I/O
/// queues than there are sets fails the run with a reason, and the
/// association is closed, rather than leave a set with nothing to run on.
#[test]
fn more_sets_than_granted_queues_is_refused() {
    let cfg = TargetConfig { max_io_queues: 1, ..TargetConfig::default() };
    let (_server, addr) = serve(cfg, ram(1 << 20));
    let mut host = nvme_tcp::host::new(host_cfg(Digests::NONE, 2, 8));
    let spec = WorkloadSpec {
        rw: Rw::Read,
        bs: 4096,
        limit: Limit::Bytes(1 << 20),
        qd: 8,
        rwmixread: 50,
        verify: false,
        seed: 1,
        nsid: None,
        part: (0, 1),
    };
    let mut apps = [IoApp::new([spec.clone()]), IoApp::new([spec])];
    let sets = apps.iter_mut().map(|app| QueueSet { app, cpu: None }).collect();
    let stop = std::sync::atomic::AtomicBool::new(false);
    match run_host_sets(addr, &mut host, sets, &stop, LIMIT) {
        Err(e @ HostRunError::TooFewQueues { granted: 1, sets: 2 }) => {
            assert!(
                e.to_string().contains("granted 1 I/O queues, fewer than the 2 threads"),
                "{e}"
            );
        }
        Err(e) => panic!("{e}"),
        Ok(_) => panic!("ran with a set on no queue"),
    }
}

#[test]
fn large_writes_travel_by_r2t() {
    // 1 MiB writes against 16 KiB of in-capsule data and 64 KiB R2Ts: each
    // write needs 16 R2Ts, up to 4 outstanding (MAXR2T 3).
    let cfg =
        TargetConfig { r2t_len: 64 << 10, inline_data_size: 16 << 10, ..TargetConfig::default() };
    let (_server, addr) = serve(cfg, ram(16 << 20));
    let host = HostConfig { maxr2t: 3, ..host_cfg(Digests { header: true, data: true }, 2, 8) };
    write_then_read(addr, host, 1 << 20, 16 << 20);
}

#[test]
fn file_backed_namespace_holds_what_was_written() {
    let path = std::env::temp_dir().join(format!("nvme-ddp-file-ns-{}", std::process::id()));
    let size = 2 << 20;
    std::fs::write(&path, vec![0u8; size as usize]).unwrap();
    let ns: Arc<dyn Namespace> = Arc::new(FileNamespace::open(&path, 4096, 8).unwrap());
    let (server, addr) = serve(TargetConfig::default(), ns);
    write_then_read(addr, host_cfg(Digests::NONE, 2, 16), 16 << 10, size);
    server.stop().unwrap();
    let contents = std::fs::read(&path).unwrap();
    std::fs::remove_file(&path).unwrap();
    assert_eq!(check_pattern(&contents, 42, 0), None, "the file holds the pattern, byte for byte");
}

/// Two poll groups serve two hosts at once, each host's queues spread
/// over both groups (so one controller's queues run on two threads), its
/// file I/O answered by the storage's workers, whose answers wake the group
/// that owns the command; every connection is served and counted by one
/// group, and nothing of it is lost.
#[test]
fn poll_groups_share_the_connections_of_several_hosts() {
    let path = std::env::temp_dir().join(format!("nvme-ddp-groups-{}", std::process::id()));
    let size = 4 << 20;
    std::fs::write(&path, vec![0u8; size as usize]).unwrap();
    let ns: Arc<dyn Namespace> = Arc::new(FileNamespace::open(&path, 512, 8).unwrap());
    let target =
        Target::new(TargetConfig { subnqn: NQN.into(), ..Default::default() }, vec![ns]).unwrap();
    let listen = ["127.0.0.1:0".parse().unwrap()];
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let groups = [None, None];
    let server =
        ControllerServer::spawn_until(target.clone(), &listen, Listener::default(), stop, &groups)
            .unwrap();
    let addr = server.local_addrs()[0];
    std::thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(move || {
                // Both write the same pattern (it is keyed by address), so
                // either's reads verify whatever order the writes land in.
                let spec = |rw| WorkloadSpec {
                    rw,
                    bs: 16 << 10,
                    limit: Limit::Bytes(size / 2),
                    qd: 16,
                    rwmixread: 50,
                    verify: true,
                    seed: 42,
                    nsid: None,
                    part: (0, 1),
                };
                let mut host = nvme_tcp::host::new(host_cfg(Digests::NONE, 3, 16));
                let mut app = IoApp::new([spec(Rw::Write), spec(Rw::Read)]);
                run_host(addr, &mut host, &mut app, LIMIT).unwrap();
                assert_eq!(nvme_ddp::app::HostApp::error(&app), None);
                let (_, r) = &app.results[1];
                assert_eq!((r.verified_bytes, r.verify_failures), (size / 2, 0));
            });
        }
    });
    let groups = server.stop().unwrap();
    std::fs::remove_file(&path).unwrap();
    assert_eq!(groups.len(), 2);
    // Two hosts of an admin and three I/O queues each, all served, the
    // I/O queues spread over both groups whichever accepted them.
    let served: u64 = groups.iter().map(|g| g.connections).sum();
    assert_eq!(served, 8, "{groups:?}");
    assert_eq!(groups.iter().map(|g| g.io_queues).sum::<u64>(), 6, "{groups:?}");
    assert!(groups.iter().all(|g| g.io_queues >= 2), "spread over both: {groups:?}");
    assert!(groups.iter().all(|g| g.cpu_time > Duration::ZERO), "{groups:?}");
    assert_eq!(target.stats().controllers, 0, "both controllers gone");
}

/// Poll groups count what they hold exactly: after hundreds of
/// connections that come and go (some of them I/O queues moved between
/// groups), a limit of four still admits a host of an admin and three I/O
/// queues.
#[test]
fn poll_groups_give_back_what_closed_connections_held() {
    let cfg = TargetConfig { subnqn: NQN.into(), max_connections: 4, ..Default::default() };
    let target = Target::new(cfg, vec![ram(1 << 20)]).unwrap();
    let listen = ["127.0.0.1:0".parse().unwrap()];
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let server = ControllerServer::spawn_until(
        target.clone(),
        &listen,
        Listener::default(),
        stop,
        &[None; 2],
    )
    .unwrap();
    let addr = server.local_addrs()[0];
    // A connection reaches its group (or is refused, over the limit), and
    // its close is seen there, a moment after it is made: wait for all
    // `made` to come and go.
    let drained = |server: &ControllerServer, made: u64| {
        let start = std::time::Instant::now();
        let arrived = || server.accepted() + target.stats().connections_refused;
        while arrived() < made || server.connections() > 0 {
            let (a, held) = (arrived(), server.connections());
            assert!(start.elapsed() < Duration::from_secs(30), "{a} of {made} in, {held} held");
            std::thread::sleep(Duration::from_millis(10));
        }
    };
    // A host is an admin queue and three I/O queues.
    let mut made = 0;
    for round in 0..50 {
        // Bare connections, closed at once, a few at a time.
        let bare: Vec<TcpStream> = (0..4).map(|_| TcpStream::connect(addr).unwrap()).collect();
        drop(bare);
        made += 4;
        if round % 10 == 0 {
            drained(&server, made);
            write_then_read(addr, host_cfg(Digests::NONE, 3, 4), 4096, 256 << 10);
            made += 4;
        }
    }
    drained(&server, made);
    write_then_read(addr, host_cfg(Digests::NONE, 3, 4), 4096, 256 << 10);
    drained(&server, made + 4);
    assert!(server.accepted() > 8, "most bare connections were let in and closed");
    server.stop().unwrap();
    assert_eq!(target.stats().controllers, 0);
}

/// Submits a read past the end of the namespace, then a good one.
#[derive(Default)]
struct OutOfRange {
    statuses: Vec<(u64, Status)>,
    done: bool,
}

impl nvme_ddp::app::HostApp for OutOfRange {
    fn on_event(&mut self, host: &mut Host, event: HostEvent, now: nvme_of::Instant) {
        match event {
            HostEvent::Ready => {
                let blocks = host.namespaces()[0].blocks;
                let io = |tag, slba| Io {
                    kind: IoKind::Read,
                    nsid: 1,
                    slba,
                    nlb: 8,
                    buf: Some(IoBuf::new(4096)),
                    tag,
                };
                host.submit(1, io(1, blocks - 4), now).unwrap();
                host.submit(1, io(2, 0), now).unwrap();
            }
            HostEvent::Completion { tag, status, .. } => {
                self.statuses.push((tag, status));
                if self.statuses.len() == 2 {
                    host.shutdown(now);
                }
            }
            HostEvent::Closed | HostEvent::Failed(_) => self.done = true,
            _ => {}
        }
    }

    fn is_done(&self) -> bool {
        self.done
    }

    fn error(&self) -> Option<String> {
        None
    }
}

#[test]
fn bad_commands_fail_alone() {
    let (_server, addr) = serve(TargetConfig::default(), ram(1 << 20));
    let mut app = OutOfRange::default();
    run_host(addr, &mut nvme_tcp::host::new(host_cfg(Digests::NONE, 1, 4)), &mut app, LIMIT)
        .unwrap();
    app.statuses.sort_by_key(|s| s.0);
    assert_eq!(app.statuses, vec![(1, Status::LBA_OUT_OF_RANGE), (2, Status::SUCCESS)]);
}

/// Read one whole PDU from a raw socket (no digests).
fn read_pdu(s: &mut TcpStream) -> std::io::Result<Vec<u8>> {
    let mut ch = [0u8; 8];
    s.read_exact(&mut ch)?;
    let plen = u32::from_le_bytes([ch[4], ch[5], ch[6], ch[7]]) as usize;
    let mut rest = vec![0u8; plen.saturating_sub(8)];
    s.read_exact(&mut rest)?;
    Ok([&ch[..], &rest].concat())
}

fn emit(header: Header, data: &[u8]) -> Vec<u8> {
    let repr = PduRepr::new(header, Framing::INITIAL, data.len() as u32);
    let mut b = vec![0u8; repr.plen() as usize];
    repr.emit(&mut b, data);
    b
}

fn icreq(s: &mut TcpStream) {
    let ic = IcReq { pfv: 0, hpda: 0, digests: Digests::NONE, maxr2t: 0 };
    s.write_all(&emit(Header::IcReq(ic), &[])).unwrap();
    let resp = read_pdu(s).unwrap();
    assert_eq!(resp[0], 0x01, "ICResp");
}

/// The Connect capsule for queue `qid` of controller `cntlid` (0xffff: a
/// new one) with keep alive `kato` ms, as raw PDU bytes.
fn connect_pdu(qid: u16, cntlid: u16, kato: u32) -> Vec<u8> {
    let cmd = FabricsCommand::Connect { recfmt: 0, qid, sqsize: 31, cattr: 0, kato };
    let sqe = Sqe { cid: 100, ..cmd.to_sqe(SglDescriptor::in_capsule(1024)) };
    let data = ConnectData {
        hostid: [1; 16],
        cntlid,
        subnqn: NQN.into(),
        hostnqn: "nqn.2014-08.test:raw".into(),
    };
    let mut raw = [0u8; 1024];
    data.emit(&mut raw);
    emit(Header::CapsuleCmd(CapsuleCmd { sqe }), &raw)
}

/// ICReq and Connect on a raw socket; the controller's CNTLID.
fn connect_queue(s: &mut TcpStream, qid: u16, cntlid: u16, kato: u32) -> u16 {
    icreq(s);
    s.write_all(&connect_pdu(qid, cntlid, kato)).unwrap();
    let resp = read_pdu(s).unwrap();
    assert_eq!(resp[0], 0x05, "CapsuleResp");
    assert_eq!(u16::from_le_bytes([resp[22], resp[23]]) >> 1, 0, "Connect succeeded");
    u16::from_le_bytes([resp[8], resp[9]])
}

#[test]
fn malformed_pdu_gets_a_term_req_and_others_are_still_served() {
    let (_server, addr) = serve(TargetConfig::default(), ram(1 << 20));
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    icreq(&mut s);
    // A CapsuleCmd whose HLEN is wrong.
    let mut bad = vec![0x04, 0x00, 70, 0x00];
    bad.extend_from_slice(&72u32.to_le_bytes());
    bad.resize(72, 0);
    s.write_all(&bad).unwrap();
    let term = read_pdu(&mut s).unwrap();
    assert_eq!(term[0], 0x03, "C2HTermReq");
    assert_eq!(u16::from_le_bytes([term[8], term[9]]), 0x01, "FES: invalid PDU header field");
    assert_eq!(u32::from_le_bytes([term[10], term[11], term[12], term[13]]), 2, "FEI: HLEN");
    assert_eq!(&term[24..32], &bad[..8], "the offending header is quoted");
    let mut rest = Vec::new();
    assert_eq!(s.read_to_end(&mut rest).unwrap(), 0, "then the controller closes");

    let mut id = AdminApp::default();
    run_host(addr, &mut nvme_tcp::host::new(host_cfg(Digests::NONE, 1, 4)), &mut id, LIMIT)
        .unwrap();
    assert_eq!(id.namespaces.len(), 1, "other hosts are still served");
}

/// A capsule whose PLEN claims more data than the controller takes in any
/// PDU (MAXH2CDATA) is refused at its header, before any of the data is
/// read: C2HTermReq, Data Transfer Limit Exceeded, then close.
#[test]
fn a_capsule_claiming_gigabytes_is_refused_at_its_header() {
    let (_server, addr) = serve(TargetConfig::default(), ram(1 << 20));
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    icreq(&mut s);
    let mut pdu = connect_pdu(0, 0xffff, 0);
    pdu[4..8].copy_from_slice(&0xffff_fff0u32.to_le_bytes());
    s.write_all(&pdu[..72]).unwrap();
    let term = read_pdu(&mut s).unwrap();
    assert_eq!(term[0], 0x03, "C2HTermReq");
    assert_eq!(u16::from_le_bytes([term[8], term[9]]), 0x05, "FES: data transfer limit exceeded");
    let mut rest = Vec::new();
    assert_eq!(s.read_to_end(&mut rest).unwrap(), 0, "then the controller closes");
}

/// Over kernel TCP too, a listener holds at most `max_connections`: one
/// more is closed as soon as it is accepted, and counted; the ones held
/// are served.
#[test]
fn a_connection_over_the_limit_is_closed_and_counted() {
    let cfg = TargetConfig { subnqn: NQN.into(), max_connections: 2, ..TargetConfig::default() };
    let target = Target::new(cfg, vec![ram(1 << 20)]).unwrap();
    let listen = ["127.0.0.1:0".parse().unwrap()];
    let server = ControllerServer::spawn(target.clone(), &listen, Listener::default()).unwrap();
    let addr = server.local_addrs()[0];
    let mut held: Vec<TcpStream> = (0..2).map(|_| TcpStream::connect(addr).unwrap()).collect();
    for s in &mut held {
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        icreq(s);
    }
    let mut third = TcpStream::connect(addr).unwrap();
    third.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut rest = Vec::new();
    assert_eq!(third.read_to_end(&mut rest).unwrap_or(0), 0, "closed at once");
    assert_eq!(target.stats().connections_refused, 1);
}

/// A server that stops lets go of the controllers of hosts still
/// connected, as it does of those that closed a moment before: one of
/// these raced the other in `poll_groups_share_the_connections_of_several_hosts`.
#[test]
fn a_stopped_server_lets_go_of_the_controllers_it_held() {
    let target =
        Target::new(TargetConfig { subnqn: NQN.into(), ..Default::default() }, vec![ram(1 << 20)])
            .unwrap();
    let listen = ["127.0.0.1:0".parse().unwrap()];
    let server = ControllerServer::spawn(target.clone(), &listen, Listener::default()).unwrap();
    let mut s = TcpStream::connect(server.local_addrs()[0]).unwrap();
    connect_queue(&mut s, 0, 0xffff, 0);
    assert_eq!(target.stats().controllers, 1);
    server.stop().unwrap();
    assert_eq!(target.stats().controllers, 0, "the controller goes with its server");
    let mut rest = Vec::new();
    assert_eq!(s.read_to_end(&mut rest).unwrap(), 0, "and its connection is closed");
}

#[test]
fn keep_alive_expiry_tears_down_the_association() {
    let (_server, addr) = serve(TargetConfig::default(), ram(1 << 20));
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    // Connect the admin queue with a 1 s keep alive timeout, then go silent.
    connect_queue(&mut s, 0, 0xffff, 1000);
    let started = std::time::Instant::now();
    let mut rest = Vec::new();
    assert_eq!(
        s.read_to_end(&mut rest).unwrap(),
        0,
        "the controller closes the expired association"
    );
    assert!(started.elapsed() < Duration::from_secs(15));
}

/// One admin command as a raw capsule (no data), and its CapsuleResp's
/// (CID, status code type and code).
fn admin_cmd(s: &mut TcpStream, sqe: Sqe, answered: bool) -> Option<(u16, u16)> {
    s.write_all(&emit(Header::CapsuleCmd(CapsuleCmd { sqe }), &[])).unwrap();
    if !answered {
        return None;
    }
    let resp = read_pdu(s).unwrap();
    assert_eq!(resp[0], 0x05, "CapsuleResp");
    Some((u16::from_le_bytes([resp[20], resp[21]]), u16::from_le_bytes([resp[22], resp[23]]) >> 1))
}

fn property(cid: u16, cmd: FabricsCommand) -> Sqe {
    Sqe { cid, ..cmd.to_sqe(SglDescriptor::in_capsule(0)) }
}

/// SPDK's initiator at detach: it held four AERs (CIDs 0-3), aborted them
/// on its own side without telling the controller, and reuses CID 3 for
/// the Property Get of CC that starts an orderly shutdown. The controller
/// serves it (Command ID Conflict made SPDK give up the shutdown), and the
/// shutdown completes.
#[test]
fn a_cid_held_by_an_aer_is_free_for_the_shutdown_spdk_sends() {
    use nvme_of::nvme::{PropertySize, admin};
    let (_server, addr) = serve(TargetConfig::default(), ram(1 << 20));
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    connect_queue(&mut s, 0, 0xffff, 0);
    const CC: u32 = 0x14;
    const CSTS: u32 = 0x1c;
    let set = |value| FabricsCommand::PropertySet { size: PropertySize::Four, offset: CC, value };
    let get = |offset| FabricsCommand::PropertyGet { size: PropertySize::Four, offset };
    // Enabled, with the queue entry sizes an NVM host sets.
    assert_eq!(admin_cmd(&mut s, property(11, set(0x0046_0001)), true), Some((11, 0)));
    assert_eq!(admin_cmd(&mut s, property(12, get(CSTS)), true), Some((12, 0)));
    for cid in 0..4 {
        let aer = Sqe {
            opcode: admin::ASYNC_EVENT_REQUEST,
            flags: Sqe::FLAGS_SGL,
            cid,
            ..Default::default()
        };
        assert_eq!(admin_cmd(&mut s, aer, false), None, "an AER is held");
    }
    // CID 3 again, for CC: served, not a Command ID Conflict (0x03).
    let resp = admin_cmd(&mut s, property(3, get(CC)), true);
    assert_eq!(resp, Some((3, 0)), "(CID, status)");
    // Shutdown notification, then CSTS.SHST says complete (10b).
    assert_eq!(admin_cmd(&mut s, property(2, set(0x0046_4001)), true), Some((2, 0)));
    s.write_all(&emit(Header::CapsuleCmd(CapsuleCmd { sqe: property(1, get(CSTS)) }), &[]))
        .unwrap();
    let resp = read_pdu(&mut s).unwrap();
    assert_eq!(u16::from_le_bytes([resp[20], resp[21]]), 1);
    assert_eq!(u16::from_le_bytes([resp[22], resp[23]]) >> 1, 0);
    let csts = u32::from_le_bytes([resp[8], resp[9], resp[10], resp[11]]);
    assert_eq!((csts >> 2) & 3, 0b10, "CSTS.SHST: shutdown complete ({csts:#x})");
}

/// Where a command has data in flight, its CID stays its own: a Write
/// waiting for its data (R2T sent) and a second command on the same CID
/// is a Command ID Conflict, whose transfers would otherwise mix.
#[test]
fn a_cid_whose_data_is_in_flight_is_still_a_conflict() {
    use nvme_of::nvme::io;
    let (_server, addr) = serve(TargetConfig::default(), ram(1 << 20));
    let mut admin = TcpStream::connect(addr).unwrap();
    admin.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let cntlid = connect_queue(&mut admin, 0, 0xffff, 0);
    let enable = FabricsCommand::PropertySet {
        size: nvme_of::nvme::PropertySize::Four,
        offset: 0x14,
        value: 0x0046_0001,
    };
    assert_eq!(admin_cmd(&mut admin, property(1, enable), true), Some((1, 0)));
    let mut q = TcpStream::connect(addr).unwrap();
    q.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    connect_queue(&mut q, 1, cntlid, 0);
    // 64 KiB, more than fits in a capsule: the controller asks for it.
    let write = Sqe {
        opcode: io::WRITE,
        flags: Sqe::FLAGS_SGL,
        cid: 5,
        nsid: 1,
        sgl: SglDescriptor::transport(64 << 10),
        cdw12: 127,
        ..Default::default()
    };
    q.write_all(&emit(Header::CapsuleCmd(CapsuleCmd { sqe: write }), &[])).unwrap();
    let r2t = read_pdu(&mut q).unwrap();
    assert_eq!((r2t[0], u16::from_le_bytes([r2t[8], r2t[9]])), (0x09, 5), "R2T for CID 5");
    let resp = admin_cmd(&mut q, Sqe { cid: 5, opcode: io::FLUSH, ..write }, true);
    assert_eq!(resp, Some((5, Status::COMMAND_ID_CONFLICT.to_field() >> 1)));
}

/// Admin commands after bring-up, in one association: a failed Identify
/// lands in the Error Information log as the spec lays it out (count,
/// queue, command, status, NSID, transport), and the SMART log counts
/// the I/O the controller served.
#[test]
fn admin_commands_read_the_error_and_smart_logs() {
    use nvme_of::nvme::identify::{self, IDENTIFY_LEN, cns};
    use nvme_of::nvme::log::{ErrorLogEntry, GetLogPage, SmartLog, TRTYPE_TCP, lid};
    let (_server, addr) = serve(TargetConfig::default(), ram(1 << 20));
    write_then_read(addr, host_cfg(Digests::NONE, 1, 4), 4096, 1 << 20);
    let log = |lid, len: usize| {
        let sqe = GetLogPage { lid, lsp: 0, rae: false, len: len as u64, lpo: 0 }.to_sqe();
        (sqe, len)
    };
    let mut app = AdminApp::new(move |host: &Host| {
        assert_eq!(host.namespaces().len(), 1);
        vec![
            (identify::command(cns::NAMESPACE, 99), IDENTIFY_LEN),
            log(lid::ERROR_INFO, 4 * ErrorLogEntry::LEN),
            log(lid::SMART, SmartLog::LEN),
        ]
    });
    run_host(addr, &mut nvme_tcp::host::new(host_cfg(Digests::NONE, 1, 4)), &mut app, LIMIT)
        .unwrap();
    assert_eq!(nvme_ddp::app::HostApp::error(&app), None);
    let statuses: Vec<Status> = app.replies.iter().map(|r| r.0).collect();
    assert_eq!(statuses, [Status::INVALID_NAMESPACE, Status::SUCCESS, Status::SUCCESS]);
    let entries: Vec<ErrorLogEntry> =
        app.replies[1].1.chunks(ErrorLogEntry::LEN).filter_map(ErrorLogEntry::parse).collect();
    assert_eq!(entries.len(), 4);
    let e = entries[0];
    assert_eq!((e.error_count, e.sqid, e.nsid, e.trtype), (1, 0, 99, TRTYPE_TCP), "{e:?}");
    assert_eq!(Status::from_field(e.status), Status::INVALID_NAMESPACE);
    assert!(entries[1..].iter().all(|e| e.error_count == 0), "one error logged");
    let smart = SmartLog::parse(&app.replies[2].1).unwrap();
    // The write pass and the verified read pass, 256 commands each.
    assert_eq!((smart.host_reads, smart.host_writes), (256, 256), "{smart:?}");
    assert_eq!((smart.data_units_read, smart.error_log_entries), (3, 1), "{smart:?}");
}
