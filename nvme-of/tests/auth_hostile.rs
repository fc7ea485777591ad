//! A controller queue fed by hand what no well-behaved host sends around
//! DH-HMAC-CHAP: commands before authenticating, an I/O queue before its
//! admin queue authenticated, malformed, oversized and out-of-order
//! messages. Each gets the specification's answer and, where the
//! transaction fails, a close; never a panic, never data.

use nvme_of::Instant;
use nvme_of::auth::{DhGroup, HostAuth, Secret};
use nvme_of::controller::{Access, Action, CloseReason, CtrlQueue, HostKeys, Target, TargetConfig};
use nvme_of::host::DhchapSecrets;
use nvme_of::nvme::{ConnectData, FabricsCommand, SglDescriptor, Sqe, Status, admin, identify};
use nvme_of::pair::{self, LOOPBACK, SUBNQN};
use nvme_storage::RamNamespace;
use std::sync::Arc;
use ulp_ddp::IoBuf;

const HOST: &str = "nqn.2014-08.org.nvmexpress:uuid:hostile";

fn target() -> Arc<Target> {
    target_with(Secret::generate(32, None).unwrap())
}

fn target_with(key: Secret) -> Arc<Target> {
    let mut access = Access::no_host();
    access.hosts.insert(HOST.into(), HostKeys { key: Some(key), ctrl_key: None });
    access.dhgroups = vec![DhGroup::Ffdhe2048];
    let cfg = TargetConfig { access, ..Default::default() };
    pair::target(cfg, Arc::new(RamNamespace::new(1 << 20, 512).unwrap()))
}

fn connect(q: &mut CtrlQueue, qid: u16, cntlid: u16) -> (Status, u32) {
    connect_kato(q, qid, cntlid, 0)
}

fn connect_kato(q: &mut CtrlQueue, qid: u16, cntlid: u16, kato: u32) -> (Status, u32) {
    let d = ConnectData { hostid: [1; 16], cntlid, subnqn: SUBNQN.into(), hostnqn: HOST.into() };
    let mut raw = [0u8; ConnectData::LEN];
    d.emit(&mut raw);
    let cmd = FabricsCommand::Connect { recfmt: 0, qid, sqsize: 31, cattr: 0, kato };
    let sqe = cmd.to_sqe(SglDescriptor::in_capsule(ConnectData::LEN as u32));
    complete(q.submit(
        &sqe,
        Some((IoBuf::from_vec(raw.to_vec()), ConnectData::LEN)),
        None,
        Instant::ZERO,
    ))
}

fn complete(a: Action) -> (Status, u32) {
    match a {
        Action::Respond { cqe, .. } => (Status::from_field(cqe.status), cqe.dw0),
        other => panic!("{other:?}"),
    }
}

fn auth_send(q: &mut CtrlQueue, msg: &[u8], tl: u32) -> Status {
    let cmd = FabricsCommand::AuthSend { secp: 0xe9, spsp: 0x0101, tl };
    let sqe = cmd.to_sqe(SglDescriptor::in_capsule(msg.len() as u32));
    let data = Some((IoBuf::from_vec(msg.to_vec()), msg.len()));
    complete(q.submit(&sqe, data, None, Instant::ZERO)).0
}

fn auth_receive(q: &mut CtrlQueue) -> (Status, Vec<u8>) {
    let cmd = FabricsCommand::AuthReceive { secp: 0xe9, spsp: 0x0101, al: 4096 };
    let sqe = cmd.to_sqe(SglDescriptor::transport(4096));
    match q.submit(&sqe, None, None, Instant::ZERO) {
        Action::Respond { cqe, data } => (
            Status::from_field(cqe.status),
            data.map(|d| d.buf.lock()[d.offset..d.offset + d.len].to_vec()).unwrap_or_default(),
        ),
        other => panic!("{other:?}"),
    }
}

fn closes(q: &mut CtrlQueue) -> Option<CloseReason> {
    q.handle_timeout(Instant::ZERO)
}

#[test]
fn before_authenticating_only_fabrics_commands_run_and_io_queues_are_refused() {
    let t = target();
    let mut admin_q = CtrlQueue::new(t.clone(), None, LOOPBACK);
    let (status, dw0) = connect(&mut admin_q, 0, 0xffff);
    assert!(status.is_success());
    assert_eq!(dw0 >> 16 & 0x6, 0x2, "ATR set, ASCR clear");
    let cntlid = dw0 as u16;

    let identify = identify::command(identify::cns::CONTROLLER, 0);
    let (status, _) = complete(admin_q.submit(&identify, None, None, Instant::ZERO));
    assert_eq!(status, Status::AUTH_REQUIRED);
    let ka = Sqe::new(admin::KEEP_ALIVE, 0, Default::default());
    assert_eq!(complete(admin_q.submit(&ka, None, None, Instant::ZERO)).0, Status::AUTH_REQUIRED);

    let mut io_q = CtrlQueue::new(t.clone(), None, LOOPBACK);
    assert_eq!(
        connect(&mut io_q, 1, cntlid).0,
        Status::AUTH_REQUIRED,
        "admin queue not authenticated"
    );

    // Bad SECP, no length, too long: Invalid Field, and nothing starts.
    let bad = FabricsCommand::AuthSend { secp: 0xea, spsp: 0x0101, tl: 8 };
    let sqe = bad.to_sqe(SglDescriptor::in_capsule(8));
    let r = admin_q.submit(&sqe, Some((IoBuf::from_vec(vec![0; 8]), 8)), None, Instant::ZERO);
    assert_eq!(complete(r).0, Status::INVALID_FIELD);
    assert_eq!(auth_send(&mut admin_q, &[], 0), Status::INVALID_FIELD);
    assert_eq!(auth_send(&mut admin_q, &vec![0; 8192], 8192), Status::INVALID_FIELD);
    // An allocation length past a transfer, or past its own SGL: refused
    // before anything is allocated (the fuzzer found 2.7 GB asked).
    for (al, sgl) in [(u32::MAX - 7, u32::MAX - 7), (4096, 8192)] {
        let cmd = FabricsCommand::AuthReceive { secp: 0xe9, spsp: 0x0101, al };
        let sqe = cmd.to_sqe(SglDescriptor::transport(sgl));
        let status = complete(admin_q.submit(&sqe, None, None, Instant::ZERO)).0;
        assert!(matches!(status, Status::INVALID_FIELD | Status::DATA_SGL_LENGTH_INVALID), "{al}");
    }
    assert!(closes(&mut admin_q).is_none());
}

#[test]
fn garbage_and_out_of_order_messages_get_failure1_and_a_close() {
    let reply_first = {
        let mut m = vec![0x01, 0x02, 0, 0, 0, 0, 32, 0];
        m.resize(16 + 64, 0);
        m
    };
    for (name, msg) in [
        ("garbage", vec![0x55; 40]),
        ("truncated Negotiate", vec![0, 0, 0, 0, 0, 0, 0, 1, 1, 0]),
        ("Reply before Negotiate", reply_first),
        ("Success2 before anything", vec![0x01, 0x04, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]),
    ] {
        let t = target();
        let mut q = CtrlQueue::new(t.clone(), None, LOOPBACK);
        assert!(connect(&mut q, 0, 0xffff).0.is_success());
        assert_eq!(auth_send(&mut q, &msg, msg.len() as u32), Status::SUCCESS, "{name}");
        let (status, f1) = auth_receive(&mut q);
        assert!(status.is_success());
        assert_eq!(&f1[..2], &[0x00, 0xf1], "{name}: Failure1");
        assert_eq!(f1[6], 0x01, "reason: authentication failure");
        assert!(matches!(closes(&mut q), Some(CloseReason::AuthenticationFailed(_))), "{name}");
        assert_eq!(t.stats().controllers, 0, "{name}: the controller is gone");
    }
}

/// A peer that knows a HOSTNQN and a CNTLID but not the secret cannot take
/// an authenticated controller down through an I/O queue of its own: that
/// queue fails and closes alone.
#[test]
fn a_failing_io_queue_closes_alone() {
    let key = Secret::generate(32, None).unwrap();
    let t = target_with(key.clone());
    let mut admin_q = CtrlQueue::new(t.clone(), None, LOOPBACK);
    let cntlid = connect(&mut admin_q, 0, 0xffff).1 as u16;
    let secrets = DhchapSecrets { key, ctrl_key: None };
    let (mut host, negotiate) = HostAuth::start(0, HOST, SUBNQN, secrets);
    assert_eq!(auth_send(&mut admin_q, &negotiate, negotiate.len() as u32), Status::SUCCESS);
    let reply = host.challenge(&auth_receive(&mut admin_q).1).unwrap();
    assert_eq!(auth_send(&mut admin_q, &reply, reply.len() as u32), Status::SUCCESS);
    assert_eq!(host.success1(&auth_receive(&mut admin_q).1), Ok(None));
    let identify = identify::command(identify::cns::CONTROLLER, 0);
    let r = admin_q.submit(&identify, None, None, Instant::ZERO);
    assert_ne!(complete(r).0, Status::AUTH_REQUIRED, "authenticated");

    // CC.EN so that I/O queues may connect.
    let cc = FabricsCommand::PropertySet {
        size: nvme_of::nvme::PropertySize::Four,
        offset: nvme_of::nvme::property::CC,
        value: u64::from(nvme_of::nvme::property::CC_ENABLE),
    };
    let r = admin_q.submit(&cc.to_sqe(Default::default()), None, None, Instant::ZERO);
    assert!(complete(r).0.is_success());

    let mut intruder = CtrlQueue::new(t.clone(), None, LOOPBACK);
    let (status, dw0) = connect(&mut intruder, 1, cntlid);
    assert!(status.is_success() && dw0 >> 17 & 1 == 1, "{status}: the queue must authenticate");
    let garbage = [0x55u8; 24];
    assert_eq!(auth_send(&mut intruder, &garbage, 24), Status::SUCCESS);
    assert!(auth_receive(&mut intruder).1.starts_with(&[0x00, 0xf1]));
    assert!(matches!(closes(&mut intruder), Some(CloseReason::AuthenticationFailed(_))));
    assert_eq!(t.stats().controllers, 1, "the authenticated controller stays");
    assert!(closes(&mut admin_q).is_none());
}

/// A host works out a large group's Diffie-Hellman without sending keep
/// alives (Linux's first ffdhe8192 self-tests for seconds under
/// emulation): keep alive runs from authentication on, and until then the
/// connect timeout bounds the wait.
#[test]
fn keep_alive_starts_once_the_admin_queue_has_authenticated() {
    let key = Secret::generate(32, None).unwrap();
    let t = target_with(key.clone());
    let mut q = CtrlQueue::new(t.clone(), None, LOOPBACK);
    q.accepted(Instant::ZERO);
    assert!(connect_kato(&mut q, 0, 0xffff, 1000).0.is_success());
    let (mut host, negotiate) =
        HostAuth::start(0, HOST, SUBNQN, DhchapSecrets { key, ctrl_key: None });
    assert_eq!(auth_send(&mut q, &negotiate, negotiate.len() as u32), Status::SUCCESS);
    let reply = host.challenge(&auth_receive(&mut q).1).unwrap();
    let late = Instant::ZERO + std::time::Duration::from_secs(5);
    assert!(q.handle_timeout(late).is_none(), "five keep alive timeouts in, still authenticating");
    let send = FabricsCommand::AuthSend { secp: 0xe9, spsp: 0x0101, tl: reply.len() as u32 };
    let sqe = send.to_sqe(SglDescriptor::in_capsule(reply.len() as u32));
    let r = q.submit(&sqe, Some((IoBuf::from_vec(reply.clone()), reply.len())), None, late);
    assert!(complete(r).0.is_success());
    assert_eq!(host.success1(&auth_receive(&mut q).1), Ok(None));
    let expired = late + std::time::Duration::from_millis(1500);
    assert!(q.handle_timeout(late).is_none());
    assert!(matches!(q.handle_timeout(expired), Some(CloseReason::KeepAliveExpired)));
    // And without authenticating, the connect timeout (30 s) ends it.
    let mut idle = CtrlQueue::new(t, None, LOOPBACK);
    idle.accepted(Instant::ZERO);
    assert!(connect_kato(&mut idle, 0, 0xffff, 1000).0.is_success());
    assert!(idle.handle_timeout(late).is_none());
    let later = Instant::ZERO + std::time::Duration::from_secs(31);
    assert!(matches!(idle.handle_timeout(later), Some(CloseReason::ConnectTimeout)));
}
