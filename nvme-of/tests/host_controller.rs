//! The core's bring-up, keep alive, abort, retry, reconnect and reset,
//! tested on the pair harness over the loopback binding: a host and a
//! controller joined in memory, with time under the test's control and no
//! transport of their own in the way. What each transport binding adds
//! (PDUs, digests, R2T; MPA, STags) is tested in its own crate.

use nvme_of::auth::{DhGroup, Explanation, Hash, Refusal, Secret};
use nvme_of::controller::{Access, CloseReason, HostKeys, Port, Target, TargetConfig};
use nvme_of::host::{DhchapSecrets, HostConfig, HostError, HostEvent, Io, IoKind};
use nvme_of::namespace::{BlockIo, Done, Namespace};
use nvme_of::nvme::{DISCOVERY_NQN, Status};
use nvme_of::pair::{self, Loopback, Pair, SUBNQN, pattern};
use nvme_storage::RamNamespace;
use std::sync::Arc;
use std::time::Duration;
use ulp_ddp::IoBuf;

fn target(cfg: TargetConfig, size: u64, block: u32) -> Arc<Target> {
    pair::target(cfg, Arc::new(RamNamespace::new(size, block).unwrap()))
}

fn pair(host: HostConfig, target: Arc<Target>) -> Pair {
    Pair::with(host, Loopback, target)
}

/// A host of the test subsystem against a 16 MiB namespace.
fn nvm(host: HostConfig) -> Pair {
    let host = HostConfig { subnqn: SUBNQN.into(), ..host };
    pair(host, target(TargetConfig::default(), 16 << 20, 512))
}

#[test]
fn bring_up_finds_the_namespace() {
    let mut p = nvm(HostConfig { io_queues: 4, queue_depth: 32, ..Default::default() });
    p.ready();
    assert_eq!(p.host.io_queues(), 4);
    assert_eq!(p.host.queue_depth(), 32);
    let ns = p.host.namespaces();
    assert_eq!(ns.len(), 1);
    assert_eq!((ns[0].nsid, ns[0].blocks, ns[0].block_size), (1, 32768, 512));
    let id = p.host.controller().unwrap();
    assert_eq!(id.subnqn, SUBNQN);
    assert_eq!(id.cntlid, p.host.cntlid());
    assert_eq!(p.target.stats().controllers, 1);
}

#[test]
fn bad_commands_get_nvme_statuses() {
    let mut p = nvm(HostConfig::default());
    p.ready();
    let blocks = p.host.namespaces()[0].blocks;
    let buf = IoBuf::new(8192);
    assert_eq!(p.io(1, IoKind::Read, blocks - 1, 2, Some(buf.clone())), Status::LBA_OUT_OF_RANGE);
    assert_eq!(
        p.io(1, IoKind::Write, u64::MAX - 1, 4, Some(buf.clone())),
        Status::LBA_OUT_OF_RANGE
    );
    assert_eq!(p.io(1, IoKind::WriteZeroes, blocks, 1, None), Status::LBA_OUT_OF_RANGE);
    assert_eq!(p.io(1, IoKind::Flush, 0, 0, None), Status::SUCCESS);
    // The association survives errors.
    assert_eq!(p.io(1, IoKind::Read, 0, 16, Some(buf)), Status::SUCCESS);
    assert!(p.failure().is_none());
}

#[test]
fn write_zeroes_and_deallocate_clear_data() {
    let mut p = nvm(HostConfig::default());
    p.ready();
    let data = pattern(16 * 512, 3);
    assert_eq!(
        p.io(1, IoKind::Write, 100, 16, Some(IoBuf::from_vec(data.clone()))),
        Status::SUCCESS
    );
    assert_eq!(p.io(1, IoKind::WriteZeroes, 100, 4, None), Status::SUCCESS);
    assert_eq!(p.io(1, IoKind::Deallocate, 112, 4, None), Status::SUCCESS);
    let buf = IoBuf::new(16 * 512);
    assert_eq!(p.io(1, IoKind::Read, 100, 16, Some(buf.clone())), Status::SUCCESS);
    let got = buf.to_vec();
    assert!(got[..2048].iter().all(|&b| b == 0));
    assert_eq!(&got[2048..6144], &data[2048..6144]);
    assert!(got[6144..].iter().all(|&b| b == 0));
}

#[test]
fn the_discovery_controller_takes_linux_default_queue_size() {
    // Linux asks discovery controllers for 128 entries and warns when
    // clamped; the discovery controller offers what the subsystem does.
    let t = target(TargetConfig::default(), 1 << 20, 512);
    let mut p = pair(HostConfig { subnqn: DISCOVERY_NQN.into(), ..Default::default() }, t);
    p.run_until(|ev| ev.iter().any(|e| matches!(e, HostEvent::Closed | HostEvent::Failed(_))));
    assert!(p.failure().is_none(), "{:?}", p.events);
    assert!(p.events.iter().any(|e| matches!(e, HostEvent::Discovered(_))), "{:?}", p.events);
    assert_eq!(p.host.capabilities() & 0xffff, 127, "CAP.MQES");
    assert_eq!(p.host.controller().map(|c| c.maxcmd), Some(128));
}

#[test]
fn keep_alive_keeps_the_association_and_its_absence_kills_it() {
    let kato = Duration::from_secs(2);
    let mut p = nvm(HostConfig { kato, ..Default::default() });
    p.ready();
    // An idle minute: keep alives flow and the controller stays.
    p.run_for(Duration::from_secs(60));
    assert!(p.failure().is_none(), "{:?}", p.events);
    assert_eq!(p.target.stats().controllers, 1);

    // A host that stops sending keep alives loses its controller.
    let mut p = nvm(HostConfig { kato, ..Default::default() });
    p.ready();
    let later = p.now + kato + Duration::from_millis(1);
    for c in p.conns.values_mut() {
        c.handle_timeout(later);
    }
    assert!(p.conns.values().all(|c| c.is_closed()));
    assert_eq!(p.conns[&0].close_reason(), Some(&CloseReason::KeepAliveExpired));
    assert_eq!(p.target.stats().controllers, 0);
}

/// RAM behind a write cache, as a file is: counts what makes writes durable.
struct Cached {
    ram: RamNamespace,
    flushes: std::sync::atomic::AtomicUsize,
}

impl Namespace for Cached {
    fn block_size(&self) -> u32 {
        self.ram.block_size()
    }
    fn size(&self) -> u64 {
        self.ram.size()
    }
    fn submit(&self, io: BlockIo, done: Done) {
        if matches!(io, BlockIo::Flush | BlockIo::Write { durable: true, .. }) {
            self.flushes.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
        self.ram.submit(io, done)
    }
    fn volatile_write_cache(&self) -> bool {
        true
    }
}

/// Storage that answers only when the test says, from another thread.
struct Deferred {
    ram: RamNamespace,
    held: std::sync::Mutex<Vec<(BlockIo, Done)>>,
}

impl Namespace for Deferred {
    fn block_size(&self) -> u32 {
        self.ram.block_size()
    }
    fn size(&self) -> u64 {
        self.ram.size()
    }
    fn submit(&self, io: BlockIo, done: Done) {
        self.held.lock().unwrap().push((io, done));
    }
}

impl Deferred {
    /// Answer the held I/Os `pick` chooses, on a thread of their own.
    fn answer(self: &Arc<Self>, pick: fn(&BlockIo) -> bool) {
        let me = self.clone();
        std::thread::spawn(move || {
            let mut held = me.held.lock().unwrap();
            for (io, done) in std::mem::take(&mut *held) {
                if pick(&io) { me.ram.submit(io, done) } else { held.push((io, done)) }
            }
        })
        .join()
        .unwrap();
    }
}

/// Counts the wake-ups a driver would get.
#[derive(Default)]
struct Wakes(std::sync::atomic::AtomicUsize);

impl std::task::Wake for Wakes {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }
}

/// The controller hands I/O to the storage and goes on: commands the
/// storage has not answered wait while later ones complete, an answer from
/// another thread wakes the driver once and completes its command on the
/// next `handle_timeout`, and an I/O the storage drops fails (Write Fault)
/// rather than hanging.
#[test]
fn storage_answers_later_without_holding_up_the_queue() {
    let ns = Arc::new(Deferred {
        ram: RamNamespace::new(1 << 20, 512).unwrap(),
        held: Default::default(),
    });
    let cfg = TargetConfig { subnqn: SUBNQN.into(), ..Default::default() };
    let target = Target::new(cfg, vec![ns.clone()]).unwrap();
    let wakes = Arc::new(Wakes::default());
    target.set_waker(wakes.clone().into());
    let mut p = pair(HostConfig { subnqn: SUBNQN.into(), ..Default::default() }, target);
    p.ready();
    let data = IoBuf::from_vec(pattern(4096, 5));
    let back = IoBuf::new(4096);
    let io = |kind, slba, buf: &IoBuf, tag| Io {
        kind,
        nsid: 1,
        slba,
        nlb: 8,
        buf: Some(buf.clone()),
        tag,
    };
    p.host.submit(1, io(IoKind::Write, 0, &data, 1), p.now).unwrap();
    p.host
        .submit(1, Io { kind: IoKind::Flush, nsid: 1, slba: 0, nlb: 0, buf: None, tag: 2 }, p.now)
        .unwrap();
    p.host.submit(1, io(IoKind::Read, 0, &back, 3), p.now).unwrap();
    while p.step() {}
    assert_eq!(ns.held.lock().unwrap().len(), 3, "all three reached the storage");
    assert!((1..=3).all(|t| p.completions(t).is_empty()), "{:?}", p.events);

    ns.answer(|io| matches!(io, BlockIo::Write { .. }));
    assert_eq!(wakes.0.load(std::sync::atomic::Ordering::SeqCst), 1);
    while p.step() {}
    assert_eq!(p.completions(1), [Status::SUCCESS]);
    assert!(p.completions(2).is_empty() && p.completions(3).is_empty());

    ns.answer(|io| matches!(io, BlockIo::Read { .. }));
    while p.step() {}
    assert_eq!(p.completions(3), [Status::SUCCESS], "the read overtook the flush");
    assert_eq!(back.to_vec(), data.to_vec());
    assert!(p.completions(2).is_empty());

    // Write Fault leaves DNR clear, so the host tries the flush again, as
    // often as Linux would; each time the storage drops it.
    let mut tries = 0;
    while p.completions(2).is_empty() {
        assert_eq!(ns.held.lock().unwrap().len(), 1);
        ns.held.lock().unwrap().clear();
        tries += 1;
        while p.step() {}
    }
    assert_eq!(p.completions(2), [Status::WRITE_FAULT], "a lost I/O fails, it does not hang");
    assert_eq!(tries, 6, "the first try and five retries");
    let stats = p.target.stats();
    assert_eq!((stats.writes, stats.reads, stats.media_errors), (1, 1, 6));
}

/// Behind a volatile write cache, a Write with FUA (CDW12 bit 30) is made
/// durable before it completes; a plain Write waits for a Flush.
#[test]
fn a_fua_write_is_durable_when_it_completes() {
    let ns = Arc::new(Cached {
        ram: RamNamespace::new(1 << 20, 512).unwrap(),
        flushes: Default::default(),
    });
    let target =
        Target::new(TargetConfig { subnqn: SUBNQN.into(), ..Default::default() }, vec![ns.clone()])
            .unwrap();
    let mut p = pair(HostConfig { subnqn: SUBNQN.into(), ..Default::default() }, target);
    p.ready();
    assert_eq!(p.host.controller().unwrap().vwc, 1, "Identify says writes are cached");
    let flushes = || ns.flushes.load(std::sync::atomic::Ordering::SeqCst);
    let buf = IoBuf::from_vec(pattern(4096, 7));
    assert_eq!(p.io(1, IoKind::Write, 0, 8, Some(buf.clone())), Status::SUCCESS);
    assert_eq!(flushes(), 0, "a plain write stays in the cache");
    assert_eq!(p.io(1, IoKind::WriteFua, 8, 8, Some(buf.clone())), Status::SUCCESS);
    assert_eq!(flushes(), 1, "FUA: durable before the completion");
    assert_eq!(p.io(1, IoKind::Flush, 0, 0, None), Status::SUCCESS);
    assert_eq!(flushes(), 2);
    let back = IoBuf::new(4096);
    assert_eq!(p.io(1, IoKind::Read, 8, 8, Some(back.clone())), Status::SUCCESS);
    assert_eq!(back.to_vec(), buf.to_vec());
}

/// An empty HOSTNQN is let in when the subsystem allows any host, as
/// Linux nvmet and SPDK do; one too long for its field (no NUL within 256
/// bytes) is Connect Invalid Parameters pointing at HOSTNQN.
#[test]
fn an_empty_host_nqn_connects_and_an_overlong_one_is_refused() {
    let mut p = nvm(HostConfig { hostnqn: String::new(), ..Default::default() });
    p.ready();
    let buf = IoBuf::from_vec(pattern(512, 3));
    assert_eq!(p.io(1, IoKind::Write, 0, 1, Some(buf)), Status::SUCCESS, "I/O queues too");

    let long = format!("nqn.2014-08.org.nvmexpress:uuid:{}", "a".repeat(230));
    let mut p = nvm(HostConfig { hostnqn: long, ..Default::default() });
    p.run_until(|ev| ev.iter().any(|e| matches!(e, HostEvent::Failed(_))));
    match p.failure() {
        Some(HostError::Refused { step: "Connect", status }) => {
            assert_eq!(*status, Status::CONNECT_INVALID_PARAMETERS)
        }
        other => panic!("{other:?}"),
    }
}

/// With an allow-list, only the hosts on it connect; the discovery
/// controller serves anyone but lists the subsystem only to those.
#[test]
fn only_allowed_hosts_connect_and_discover_the_subsystem() {
    const ALLOWED: &str = "nqn.2014-08.org.nvmexpress:uuid:allowed";
    let mut access = Access::no_host();
    access.hosts.insert(ALLOWED.into(), HostKeys::default());
    let port = Port { traddr: "198.18.0.2".into(), trsvcid: "4420".into(), portid: 1 };
    let cfg = TargetConfig { access, port: Some(port), ..Default::default() };
    let t = target(cfg, 1 << 20, 512);
    let host = |hostnqn: &str, subnqn: &str| HostConfig {
        hostnqn: hostnqn.into(),
        subnqn: subnqn.into(),
        ..Default::default()
    };

    let mut p = pair(host(ALLOWED, SUBNQN), t.clone());
    p.ready();
    let stranger = "nqn.2014-08.org.nvmexpress:uuid:stranger";
    let mut p = pair(host(stranger, SUBNQN), t.clone());
    p.run_until(|ev| ev.iter().any(|e| matches!(e, HostEvent::Failed(_))));
    assert_eq!(p.failure(), Some(&HostError::HostNotAllowed(stranger.into())));
    assert_eq!(p.target.stats().hosts_refused, 1);

    for (who, listed) in [(ALLOWED, 1), (stranger, 0)] {
        let mut p = pair(host(who, DISCOVERY_NQN), t.clone());
        p.run_until(|ev| ev.iter().any(|e| matches!(e, HostEvent::Closed | HostEvent::Failed(_))));
        let found = p.events.iter().find_map(|e| match e {
            HostEvent::Discovered(entries) => Some(entries.len()),
            _ => None,
        });
        assert_eq!(found, Some(listed), "{who}");
    }
}

const AUTH_HOST: &str = "nqn.2014-08.org.nvmexpress:uuid:authenticating";

/// A target that knows `AUTH_HOST` by `key` (and proves itself with
/// `ctrl_key`), offering `group` only.
fn auth_target(key: &Secret, ctrl_key: Option<&Secret>, group: DhGroup) -> Arc<Target> {
    let mut access = Access::no_host();
    let keys = HostKeys { key: Some(key.clone()), ctrl_key: ctrl_key.cloned() };
    access.hosts.insert(AUTH_HOST.into(), keys);
    access.dhgroups = vec![group];
    target(TargetConfig { access, ..Default::default() }, 1 << 20, 512)
}

fn auth_host(key: Option<&Secret>, ctrl_key: Option<&Secret>) -> HostConfig {
    HostConfig {
        hostnqn: AUTH_HOST.into(),
        subnqn: SUBNQN.into(),
        io_queues: 3,
        dhchap: key.map(|k| DhchapSecrets { key: k.clone(), ctrl_key: ctrl_key.cloned() }),
        ..Default::default()
    }
}

fn failed(p: &mut Pair) -> HostError {
    p.run_until(|ev| ev.iter().any(|e| matches!(e, HostEvent::Failed(_))));
    p.failure().cloned().expect("the association failed")
}

/// DH-HMAC-CHAP on the admin queue and every I/O queue, one way and
/// both ways, and again on the association a reconnect makes.
#[test]
fn a_host_with_the_right_secret_authenticates_every_queue_and_again_after_a_reconnect() {
    let key = Secret::generate(32, Some(Hash::Sha256)).unwrap();
    let ctrl_key = Secret::generate(48, None).unwrap();
    for (group, both_ways) in [(DhGroup::Null, false), (DhGroup::Ffdhe2048, true)] {
        let t = auth_target(&key, Some(&ctrl_key), group);
        let cfg = auth_host(Some(&key), both_ways.then_some(&ctrl_key));
        let mut p =
            pair(HostConfig { ctrl_loss_tmo: None, reconnect_delay: Duration::ZERO, ..cfg }, t);
        p.ready();
        assert_eq!(p.host.io_queues(), 3);
        let buf = IoBuf::from_vec(pattern(4096, 7));
        for qid in 1..=3 {
            assert_eq!(p.io(qid, IoKind::Write, 0, 8, Some(buf.clone())), Status::SUCCESS);
        }
        p.cut(2);
        p.run_until(|ev| ev.iter().any(|e| matches!(e, HostEvent::Reconnected)));
        assert_eq!(p.io(2, IoKind::Read, 0, 8, Some(IoBuf::new(4096))), Status::SUCCESS);
        assert!(p.failure().is_none(), "{group:?}");
    }
}

#[test]
fn a_wrong_or_missing_secret_leaves_nothing_connected() {
    let key = Secret::generate(32, None).unwrap();
    let ctrl_key = Secret::generate(32, None).unwrap();
    let other = Secret::generate(32, None).unwrap();
    let cases = [
        (
            Some(&other),
            None,
            HostError::Authentication {
                qid: 0,
                refusal: Refusal::ByController(Explanation::Failed),
            },
        ),
        (
            Some(&key),
            Some(&other),
            HostError::Authentication { qid: 0, refusal: Refusal::ByHost(Explanation::Failed) },
        ),
        (None, None, HostError::NoSecret(AUTH_HOST.into())),
    ];
    // A host that wants the controller's proof refuses one that asks for
    // no authentication at all.
    let open = target(TargetConfig::default(), 1 << 20, 512);
    let mut p = pair(auth_host(Some(&key), Some(&ctrl_key)), open);
    assert_eq!(failed(&mut p), HostError::ControllerNotAuthenticated);
    // A discovery controller authenticates no one, and is not refused for it.
    let t = auth_target(&key, Some(&ctrl_key), DhGroup::Null);
    let discover =
        HostConfig { subnqn: DISCOVERY_NQN.into(), ..auth_host(Some(&key), Some(&ctrl_key)) };
    let mut p = pair(discover, t);
    p.run_until(|ev| ev.iter().any(|e| matches!(e, HostEvent::Closed | HostEvent::Failed(_))));
    assert!(p.events.iter().any(|e| matches!(e, HostEvent::Discovered(_))), "{:?}", p.events);
    for (host_key, host_ctrl_key, want) in cases {
        let t = auth_target(&key, Some(&ctrl_key), DhGroup::Ffdhe2048);
        let mut p = pair(auth_host(host_key, host_ctrl_key), t);
        assert_eq!(failed(&mut p), want);
        assert!(!want.to_string().contains("DHHC-1"), "an error never quotes a secret");
        p.run_for(Duration::from_millis(10));
        assert_eq!(p.target.stats().controllers, 0, "{want}: no controller left behind");
    }
}

/// Linux's nvmet answers a wrong Reply with Failure1 and resets the queue
/// at once, without lingering, so the Failure1 may never leave it: a
/// controller that closes the queue while the host awaits its verdict on
/// the Reply has refused it, and the host says so, not that the transport
/// closed.
#[test]
fn a_controller_that_closes_the_queue_instead_of_failure1_refused_the_reply() {
    let key = Secret::generate(32, None).unwrap();
    let other = Secret::generate(32, None).unwrap();
    let t = auth_target(&key, None, DhGroup::Null);
    let mut p = pair(auth_host(Some(&other), None), t);
    // Failure1 of transaction 0: COMMON, FAILURE1, reserved, T_ID 0,
    // REASON_FAILED. It never reaches the host.
    let failure1 = [0x00, 0xf1, 0, 0, 0, 0, 0x01];
    let lost = std::rc::Rc::new(std::cell::Cell::new(false));
    let seen = lost.clone();
    p.c2h_filter = Some(Box::new(move |_, bytes: &mut Vec<u8>| {
        if bytes.windows(failure1.len()).any(|w| w == failure1) {
            bytes.clear();
            seen.set(true);
        }
    }));
    for _ in 0..1000 {
        if lost.get() {
            break;
        }
        p.step();
    }
    assert!(lost.get(), "the controller sent Failure1");
    p.cut(0);
    let refused = Refusal::ByController(Explanation::Failed);
    assert_eq!(failed(&mut p), HostError::Authentication { qid: 0, refusal: refused });
}

/// Clearing CC.EN resets the controller: its I/O queues are deleted, so
/// their connections close (and a command on one is aborted), while the
/// admin queue stays. The host, having lost its I/O queues, makes a new
/// association and the read completes there.
#[test]
fn clearing_cc_en_deletes_the_io_queues() {
    use nvme_of::nvme::{FabricsCommand, PropertySize, property};
    let host = HostConfig { io_queues: 2, reconnect_delay: Duration::ZERO, ..Default::default() };
    let mut p = nvm(host);
    p.ready();
    assert_eq!(p.conns.keys().copied().collect::<Vec<_>>(), [0, 1, 2]);
    // The statuses of CapsuleResps on queue 1, as the controller sent them.
    let sent = Arc::new(std::sync::Mutex::new(Vec::new()));
    let s = sent.clone();
    p.c2h_filter = Some(Box::new(move |qid, bytes| {
        if qid == 1 && bytes.len() >= 24 && bytes[0] == 0x05 {
            s.lock().unwrap().push(Status::from_field(u16::from_le_bytes([bytes[22], bytes[23]])));
        }
    }));
    let cc = |value| {
        let set =
            FabricsCommand::PropertySet { size: PropertySize::Four, offset: property::CC, value };
        set.to_sqe(Default::default())
    };
    p.host.submit_admin(cc(0), 0, 7, p.now).unwrap();
    // A read on an I/O queue reaches the controller just after the reset.
    let buf = IoBuf::new(512);
    let read = Io { kind: IoKind::Read, nsid: 1, slba: 0, nlb: 1, buf: Some(buf), tag: 8 };
    p.host.submit(1, read, p.now).unwrap();
    p.run_until(|ev| ev.iter().any(|e| matches!(e, HostEvent::Reconnecting { .. })));
    assert_eq!(p.completions(7), [Status::SUCCESS], "{:?}", p.events);
    assert_eq!(sent.lock().unwrap()[..], [Status::ABORTED_SQ_DELETION]);
    // The controller closed both I/O queues; the host, having lost them,
    // then closed the admin queue.
    let gone = Some(CloseReason::ControllerGone);
    assert_eq!(p.closed[..2], [(1, gone.clone()), (2, gone)], "{:?}", p.closed);
    assert_eq!(p.closed.get(2), Some(&(0, None)), "{:?}", p.closed);
    assert!(matches!(p.loss(), Some(HostError::Queue { qid: 1 | 2, .. })), "{:?}", p.loss());
    // The read, aborted by the reset, completes on the new association.
    p.run_until(|ev| ev.iter().any(|e| matches!(e, HostEvent::Completion { tag: 8, .. })));
    assert_eq!(p.completions(8), [Status::SUCCESS], "{:?}", p.events);
    assert!(p.host.is_ready() && p.failure().is_none());
}

/// A normal shutdown (CC.SHN) completes at once (CSTS.SHST), and the
/// properties stay readable afterwards, as long as the admin queue is
/// there: a host that reads CC while detaching gets it.
#[test]
fn properties_stay_readable_after_a_shutdown() {
    use nvme_of::nvme::{FabricsCommand, PropertySize, property};
    let mut p = nvm(HostConfig::default());
    p.ready();
    // DW0 and status of every CapsuleResp on the admin queue.
    let sent = Arc::new(std::sync::Mutex::new(Vec::new()));
    let s = sent.clone();
    p.c2h_filter = Some(Box::new(move |qid, bytes| {
        if qid == 0 && bytes.len() >= 24 && bytes[0] == 0x05 {
            let dw0 = u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]);
            let status = Status::from_field(u16::from_le_bytes([bytes[22], bytes[23]]));
            s.lock().unwrap().push((dw0, status));
        }
    }));
    let cc = property::CC_ENABLE | property::CC_SHN_NORMAL;
    let commands = [
        FabricsCommand::PropertySet {
            size: PropertySize::Four,
            offset: property::CC,
            value: cc.into(),
        },
        FabricsCommand::PropertyGet { size: PropertySize::Four, offset: property::CSTS },
        FabricsCommand::PropertyGet { size: PropertySize::Four, offset: property::CC },
    ];
    for (tag, c) in (10..).zip(commands) {
        p.host.submit_admin(c.to_sqe(Default::default()), 0, tag, p.now).unwrap();
        while p.step() {}
    }
    let sent = sent.lock().unwrap().clone();
    assert!(sent.iter().all(|&(_, s)| s == Status::SUCCESS), "{sent:?}");
    let [_, (csts, _), (read_cc, _)] = sent[..] else { panic!("{sent:?}") };
    assert_eq!(csts & property::CSTS_SHST_MASK, property::CSTS_SHST_COMPLETE, "{csts:#x}");
    assert_eq!(read_cc, cc);
}

/// Commands still outstanding on an I/O queue when CC.EN is cleared, one
/// with the storage and one waiting for its H2CData, complete as Command
/// Aborted due to SQ Deletion before the queue's connection closes; the
/// storage's late answer is dropped, and the host retries both writes on
/// its new association.
#[test]
fn a_reset_aborts_what_the_deleted_queues_still_held() {
    use nvme_of::nvme::{FabricsCommand, PropertySize, property};
    let ns = Arc::new(Deferred {
        ram: RamNamespace::new(1 << 20, 512).unwrap(),
        held: Default::default(),
    });
    let cfg = TargetConfig { subnqn: SUBNQN.into(), ..Default::default() };
    let target = Target::new(cfg, vec![ns.clone()]).unwrap();
    let host =
        HostConfig { subnqn: SUBNQN.into(), reconnect_delay: Duration::ZERO, ..Default::default() };
    let mut p = pair(host, target);
    p.ready();
    let sent = Arc::new(std::sync::Mutex::new(Vec::new()));
    let s = sent.clone();
    // Every CapsuleResp on queue 1 (the few PDUs here come whole).
    p.c2h_filter = Some(Box::new(move |qid, bytes| {
        let mut at = 0;
        while qid == 1 && at + 24 <= bytes.len() {
            let pdu = &bytes[at..];
            if pdu[0] == 0x05 {
                let cid = u16::from_le_bytes([pdu[20], pdu[21]]);
                let status = Status::from_field(u16::from_le_bytes([pdu[22], pdu[23]]));
                s.lock().unwrap().push((cid, status));
            }
            at += (u32::from_le_bytes([pdu[4], pdu[5], pdu[6], pdu[7]]) as usize).max(8);
        }
    }));
    // A small write goes in the capsule and on to the storage, which holds it.
    let small = IoBuf::from_vec(pattern(4096, 1));
    let io = |slba, nlb, buf: &IoBuf, tag| Io {
        kind: IoKind::Write,
        nsid: 1,
        slba,
        nlb,
        buf: Some(buf.clone()),
        tag,
    };
    p.host.submit(1, io(0, 8, &small, 1), p.now).unwrap();
    while p.step() {}
    assert_eq!(ns.held.lock().unwrap().len(), 1);
    // A large one asks for its data (R2T), which never arrives.
    let mut capsule_sent = false;
    p.h2c_filter = Some(Box::new(move |qid, bytes| {
        if qid == 1 {
            if capsule_sent {
                bytes.clear();
            }
            capsule_sent = true;
        }
    }));
    let large = IoBuf::from_vec(pattern(64 << 10, 2));
    p.host.submit(1, io(64, 128, &large, 2), p.now).unwrap();
    while p.step() {}
    assert!(sent.lock().unwrap().is_empty());
    p.h2c_filter = None;

    let set =
        FabricsCommand::PropertySet { size: PropertySize::Four, offset: property::CC, value: 0 };
    p.host.submit_admin(set.to_sqe(Default::default()), 0, 7, p.now).unwrap();
    p.run_until(|ev| ev.iter().any(|e| matches!(e, HostEvent::Reconnecting { .. })));
    let aborted = sent.lock().unwrap().clone();
    assert_eq!(aborted.len(), 2, "{aborted:?}");
    assert!(aborted.iter().all(|&(_, s)| s == Status::ABORTED_SQ_DELETION), "{aborted:?}");
    assert_ne!(aborted[0].0, aborted[1].0, "one per command");

    // The storage answers the old write late: nobody hears it. The host
    // sends both writes again; the storage takes them this time.
    ns.answer(|_| true);
    p.run_until(|ev| ev.iter().any(|e| matches!(e, HostEvent::Reconnected)));
    while ns.held.lock().unwrap().len() < 2 {
        assert!(p.step(), "the retried writes reach the storage");
    }
    ns.answer(|_| true);
    let done = |ev: &[HostEvent], tag| {
        ev.iter().any(|e| matches!(e, HostEvent::Completion { tag: t, .. } if *t == tag))
    };
    p.run_until(|ev| done(ev, 1) && done(ev, 2));
    for tag in [1, 2] {
        assert_eq!(p.completions(tag), [Status::SUCCESS], "{:?}", p.events);
    }
    let back = IoBuf::new(64 << 10);
    let read =
        Io { kind: IoKind::Read, nsid: 1, slba: 64, nlb: 128, buf: Some(back.clone()), tag: 3 };
    p.host.submit(1, read, p.now).unwrap();
    while p.step() {}
    ns.answer(|_| true);
    while p.step() {}
    assert_eq!(p.completions(3), [Status::SUCCESS]);
    assert_eq!(back.to_vec(), large.to_vec());
}

/// Submit writes of a pattern to LBAs 0, 8, 16... on I/O queue 1, tagged
/// by index, without running the pair; returns their data.
fn submit_writes(p: &mut Pair, n: u64, seed: u64) -> Vec<Vec<u8>> {
    (0..n)
        .map(|i| {
            let data = pattern(4096, seed + i);
            let buf = Some(IoBuf::from_vec(data.clone()));
            let io = Io { kind: IoKind::Write, nsid: 1, slba: i * 8, nlb: 8, buf, tag: i };
            p.host.submit(1, io, p.now).unwrap();
            data
        })
        .collect()
}

/// Read back what `submit_writes` wrote and compare.
fn read_back(p: &mut Pair, written: &[Vec<u8>]) {
    for (i, data) in written.iter().enumerate() {
        let buf = IoBuf::new(4096);
        assert_eq!(p.io(1, IoKind::Read, i as u64 * 8, 8, Some(buf.clone())), Status::SUCCESS);
        assert!(buf.to_vec() == *data, "LBA {} differs", i * 8);
    }
}

/// I/O commands read what they need of their controller (reset count,
/// CSTS.RDY, the write cache, keep alive) without its lock, so that queues
/// of one controller served by different poll groups never contend per
/// I/O: two hundred reads on two queues take no lock at all.
#[test]
fn io_commands_take_no_controller_lock() {
    let mut p = nvm(HostConfig { io_queues: 2, ..Default::default() });
    p.ready();
    let before = p.target.stats().association_locks;
    for i in 0..200u64 {
        let qid = 1 + (i % 2) as u16;
        assert_eq!(p.io(qid, IoKind::Read, i * 8, 8, Some(IoBuf::new(4096))), Status::SUCCESS);
    }
    let locks = p.target.stats().association_locks - before;
    assert_eq!(locks, 0, "{locks} locks for 200 reads");
}

/// A RAM namespace that notes, as each I/O reaches it, how many hold it.
struct Counted {
    me: std::sync::Weak<Counted>,
    ram: RamNamespace,
    holders: std::sync::Mutex<Vec<usize>>,
}

impl Namespace for Counted {
    fn block_size(&self) -> u32 {
        self.ram.block_size()
    }
    fn size(&self) -> u64 {
        self.ram.size()
    }
    fn submit(&self, io: BlockIo, done: Done) {
        self.holders.lock().unwrap().push(self.me.strong_count());
        self.ram.submit(io, done)
    }
}

/// Nor do they write the namespace's reference count, which every poll
/// group's I/O would share: while reads and writes run, it stays what it
/// is at rest.
#[test]
fn io_commands_leave_the_namespace_count_alone() {
    let ns = Arc::new_cyclic(|me| Counted {
        me: me.clone(),
        ram: RamNamespace::new(1 << 20, 512).unwrap(),
        holders: Default::default(),
    });
    let target = pair::target(TargetConfig::default(), ns.clone());
    let mut p = pair(HostConfig { subnqn: SUBNQN.into(), ..Default::default() }, target);
    p.ready();
    let at_rest = Arc::strong_count(&ns);
    for i in 0..20u64 {
        let kind = if i % 2 == 0 { IoKind::Write } else { IoKind::Read };
        assert_eq!(p.io(1, kind, i * 8, 8, Some(IoBuf::new(4096))), Status::SUCCESS);
    }
    let holders = ns.holders.lock().unwrap().clone();
    assert_eq!(holders.len(), 20);
    assert!(holders.iter().all(|&n| n == at_rest), "{holders:?} against {at_rest} at rest");
}

/// A dead link under in-flight writes: the host tears the association
/// down, reconnects after reconnect-delay, submits what did not complete
/// again, and every write completes exactly once and reads back.
#[test]
fn a_lost_connection_reconnects_and_retries_what_did_not_complete() {
    let delay = Duration::from_secs(1);
    let host = HostConfig { io_queues: 2, reconnect_delay: delay, ..Default::default() };
    let mut p = nvm(host);
    p.ready();
    let written = submit_writes(&mut p, 8, 100);
    let lost = p.now;
    p.cut(1);
    p.run_until(|ev| ev.iter().any(|e| matches!(e, HostEvent::Reconnected)));
    assert!(p.now >= lost + delay, "waited reconnect-delay");
    match p.loss() {
        Some(HostError::Queue { qid: 1, error }) => {
            assert_eq!(error.to_string(), "transport closed")
        }
        other => panic!("{other:?}"),
    }
    p.run_until(|ev| {
        (0..8)
            .all(|t| ev.iter().any(|e| matches!(e, HostEvent::Completion { tag, .. } if *tag == t)))
    });
    for tag in 0..8 {
        assert_eq!(p.completions(tag), [Status::SUCCESS], "tag {tag}");
    }
    let r = p.host.recovery();
    assert_eq!((r.lost, r.attempts, r.reconnects, r.retried, r.aborts), (1, 1, 1, 8, 0));
    assert_eq!(p.host.io_queues(), 2);
    read_back(&mut p, &written);
    // One controller: the old association's was removed with its queues.
    assert_eq!(p.target.stats().controllers, 1);
}

/// With ctrl-loss-tmo 0 the first loss is final: what was in flight
/// completes with an error before the failure is reported.
#[test]
fn ctrl_loss_tmo_zero_fails_at_once_and_completes_what_was_in_flight() {
    let host = HostConfig { ctrl_loss_tmo: Some(Duration::ZERO), ..Default::default() };
    let mut p = nvm(host);
    p.ready();
    submit_writes(&mut p, 2, 1);
    p.cut(1);
    p.run_until(|ev| ev.iter().any(|e| matches!(e, HostEvent::Failed(_))));
    assert!(!p.events.iter().any(|e| matches!(e, HostEvent::Reconnecting { .. })));
    let failed_at = p.events.iter().position(|e| matches!(e, HostEvent::Failed(_))).unwrap();
    for tag in 0..2 {
        assert_eq!(p.completions(tag), [Status::HOST_PATH_ERROR]);
        let at = p
            .events
            .iter()
            .position(|e| matches!(e, HostEvent::Completion { tag: t, .. } if *t == tag));
        assert!(at.unwrap() < failed_at, "completions come before the failure");
    }
}

/// A controller that stays away: attempts every reconnect-delay until
/// ctrl-loss-tmo, then the waiting commands fail (Host Pathing Error) and
/// the host reports the controller lost.
#[test]
fn a_controller_that_stays_away_is_given_up_after_ctrl_loss_tmo() {
    let (delay, tmo) = (Duration::from_secs(2), Duration::from_secs(10));
    let host =
        HostConfig { reconnect_delay: delay, ctrl_loss_tmo: Some(tmo), ..Default::default() };
    let mut p = nvm(host);
    p.ready();
    submit_writes(&mut p, 1, 1);
    let lost = p.now;
    p.refuse = true;
    p.cut(1);
    p.run_until(|ev| ev.iter().any(|e| matches!(e, HostEvent::Failed(_))));
    let waited = p.now.saturating_since(lost);
    assert!(waited >= tmo && waited <= tmo + delay, "gave up after {waited:?}");
    let attempts = p.events.iter().filter(|e| matches!(e, HostEvent::Reconnecting { .. })).count();
    assert_eq!(attempts, 5, "the loss, then attempts at 2, 4, 6 and 8 s; at 10 s it gives up");
    assert_eq!(p.completions(0), [Status::HOST_PATH_ERROR]);
    match p.failure() {
        Some(HostError::ControllerLost { after, last }) => {
            assert!(*after >= tmo);
            assert_eq!(last.to_string(), "queue 0: transport closed");
        }
        other => panic!("{other:?}"),
    }
    // One loss, four attempts at it, none of which made an association.
    let r = p.host.recovery();
    assert_eq!((r.lost, r.attempts, r.reconnects), (1, 4, 0));
}

/// A user's stop while the controller does not answer: `close` ends the
/// association at once, without CC.SHN, and what was in flight completes
/// with an error before `Closed`.
#[test]
fn close_ends_the_association_without_waiting_on_the_controller() {
    let mut p = nvm(HostConfig::default());
    p.ready();
    // The controller hears nothing more.
    p.h2c_filter = Some(Box::new(|_, bytes: &mut Vec<u8>| bytes.clear()));
    submit_writes(&mut p, 2, 1);
    p.step();
    let at = p.now;
    p.host.close(p.now);
    p.step();
    assert_eq!(p.now, at, "no time passed");
    let closed = p.events.iter().position(|e| matches!(e, HostEvent::Closed)).expect("Closed");
    for tag in 0..2 {
        assert_eq!(p.completions(tag), [Status::HOST_PATH_ERROR], "tag {tag}");
        let done = p
            .events
            .iter()
            .position(|e| matches!(e, HostEvent::Completion { tag: t, .. } if *t == tag));
        assert!(done.unwrap() < closed, "completions come before Closed");
    }
    assert!(p.host.is_closed(0) && p.host.is_closed(1));
}

/// A command the controller never sees times out: the host first sends
/// an Abort for it (and gives it another timeout), then resets the
/// association, and the command completes on the new one.
#[test]
fn a_timed_out_command_is_aborted_before_the_association_is_reset() {
    let timeout = Duration::from_secs(3);
    let host = HostConfig {
        command_timeout: timeout,
        reconnect_delay: Duration::ZERO,
        kato: Duration::ZERO,
        ..Default::default()
    };
    let mut p = nvm(host);
    p.ready();
    // Swallow the next capsule on queue 1; note Aborts on the admin queue.
    let armed = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let a = armed.clone();
    let aborts = Arc::new(std::sync::Mutex::new(Vec::new()));
    let ab = aborts.clone();
    p.h2c_filter = Some(Box::new(move |qid, bytes| {
        if qid == 1 && bytes[0] == 0x04 && a.swap(false, std::sync::atomic::Ordering::Relaxed) {
            bytes.clear();
        }
        if qid == 0 && bytes[0] == 0x04 && bytes[8] == 0x08 {
            ab.lock()
                .unwrap()
                .push(u32::from_le_bytes([bytes[48], bytes[49], bytes[50], bytes[51]]));
        }
    }));
    let sent = p.now;
    p.host
        .submit(1, Io { kind: IoKind::Flush, nsid: 1, slba: 0, nlb: 0, buf: None, tag: 5 }, p.now)
        .unwrap();
    p.run_until(|ev| ev.iter().any(|e| matches!(e, HostEvent::Reconnecting { .. })));
    // CDW10: SQID 1, CID 0 (the flush was the queue's first command).
    assert_eq!(aborts.lock().unwrap()[..], [1]);
    assert_eq!(p.now.saturating_since(sent), 2 * timeout, "aborted, then waited once more");
    assert!(matches!(p.loss(), Some(HostError::Timeout("a command completion"))), "{:?}", p.loss());
    p.run_until(|ev| ev.iter().any(|e| matches!(e, HostEvent::Completion { tag: 5, .. })));
    assert_eq!(p.completions(5), [Status::SUCCESS]);
    let r = p.host.recovery();
    assert_eq!((r.aborts, r.reconnects, r.retried), (1, 1, 1));
}

/// A controller that goes silent is found dead by the unanswered keep
/// alive within KATO and a half, on any medium; once it answers again
/// the host is back.
#[test]
fn keep_alive_detects_a_silent_controller_within_kato() {
    let kato = Duration::from_secs(4);
    let host = HostConfig { kato, reconnect_delay: Duration::from_secs(1), ..Default::default() };
    let mut p = nvm(host);
    p.ready();
    let silent = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let s = silent.clone();
    p.c2h_filter = Some(Box::new(move |_, bytes| {
        if s.load(std::sync::atomic::Ordering::Relaxed) {
            bytes.clear();
        }
    }));
    let since = p.now;
    p.run_until(|ev| ev.iter().any(|e| matches!(e, HostEvent::Reconnecting { .. })));
    let found = p.now.saturating_since(since);
    assert!(found <= kato + kato / 2, "found dead after {found:?}");
    assert!(matches!(p.loss(), Some(HostError::Timeout("a keep alive"))), "{:?}", p.loss());
    silent.store(false, std::sync::atomic::Ordering::Relaxed);
    p.run_until(|ev| ev.iter().any(|e| matches!(e, HostEvent::Reconnected)));
    assert!(p.host.is_ready());
}

/// `nvme reset` in the middle of a workload: what was in flight completes
/// exactly once, on the new association, and I/O goes on.
#[test]
fn a_reset_from_the_host_mid_workload_resumes_without_stale_completions() {
    let mut p = nvm(HostConfig { io_queues: 1, ..Default::default() });
    p.ready();
    let first = p.host.cntlid();
    // Some writes reach the controller before the reset, some in part,
    // some not at all.
    p.chunk = 6000;
    let written = submit_writes(&mut p, 6, 40);
    p.step();
    assert!(p.host.reset_controller(p.now));
    p.run_until(|ev| {
        (0..6)
            .all(|t| ev.iter().any(|e| matches!(e, HostEvent::Completion { tag, .. } if *tag == t)))
    });
    while p.step() {}
    for tag in 0..6 {
        assert_eq!(p.completions(tag), [Status::SUCCESS], "tag {tag}: {:?}", p.events);
    }
    let reset = p.events.iter().position(
        |e| matches!(e, HostEvent::Reconnecting { error: None, delay } if delay.is_zero()),
    );
    let back = p.events.iter().position(|e| matches!(e, HostEvent::Reconnected));
    assert!(reset.is_some() && back > reset, "{:?}", p.events);
    assert_ne!(p.host.cntlid(), first, "a new controller");
    read_back(&mut p, &written);
    assert_eq!(p.host.recovery().reconnects, 1);
}

/// A controller started again on the same file presents the namespace
/// under the same NGUID, as a reconnecting Linux host requires (it drops
/// a namespace whose identifiers changed); a RAM namespace, whose data
/// dies with the controller, gets new ones.
#[test]
fn a_file_namespace_keeps_its_nguid_when_the_controller_restarts() {
    use nvme_of::nvme::identify::{self, IdentifyNamespace, cns};
    use nvme_storage::FileNamespace;
    let path = std::env::temp_dir().join(format!("nvmeddp-nguid-{}.img", std::process::id()));
    std::fs::File::create(&path).unwrap().set_len(1 << 20).unwrap();
    let nguid = |file: bool, serial: &str| {
        let ns: Arc<dyn Namespace> = if file {
            Arc::new(FileNamespace::open(&path, 512, 0).unwrap())
        } else {
            Arc::new(RamNamespace::new(1 << 20, 512).unwrap())
        };
        let cfg =
            TargetConfig { subnqn: SUBNQN.into(), serial: serial.into(), ..Default::default() };
        let host = HostConfig { subnqn: SUBNQN.into(), ..Default::default() };
        let mut p = pair(host, Target::new(cfg, vec![ns]).unwrap());
        p.ready();
        p.host.submit_admin(identify::command(cns::NAMESPACE, 1), 4096, 1, p.now).unwrap();
        p.run_until(|ev| ev.iter().any(|e| matches!(e, HostEvent::Completion { qid: 0, .. })));
        let page = p.events.iter().find_map(|e| match e {
            HostEvent::Completion { qid: 0, buf: Some(b), .. } => Some(b.to_vec()),
            _ => None,
        });
        IdentifyNamespace::parse(&page.unwrap()).unwrap().nguid
    };
    let (before, after) = (nguid(true, "first-run"), nguid(true, "second-run"));
    std::fs::remove_file(&path).unwrap();
    assert_eq!(before, after, "same file, same NGUID");
    assert_ne!(nguid(false, "first-run"), nguid(false, "second-run"), "RAM: new data, new NGUID");
}
