//! Entry points for the fuzz targets (`fuzz/`) and for the test that replays
//! their corpus. Not part of the API.

use crate::wire::{Digests, Direction, Event, Framer, Framing, Pdu, PduRepr};

/// Feed arbitrary bytes to a framer and check what it reports.
///
/// Byte 0 picks the direction (bit 0), the digests (bits 2:1) and the PDA
/// (bits 7:3); byte 1 the size of the pieces the stream is cut into. For
/// every header the framer accepts, the header emitted back from its repr
/// must parse to the same repr, its data must add up to its length, and its
/// data digest must be reported exactly when the PDU has one.
pub fn framer(data: &[u8]) {
    let [mode, piece, stream @ ..] = data else { return };
    let accepts =
        if mode & 1 == 0 { Direction::ControllerToHost } else { Direction::HostToController };
    let framing = Framing { digests: Digests::from_bits(mode >> 1), pda: mode >> 3 };
    let mut f = Framer::new(accepts);
    f.set_framing(framing);
    let mut current: Option<(PduRepr, u64)> = None;
    for chunk in stream.chunks(usize::from(*piece).max(1)) {
        let mut at = 0;
        loop {
            let (n, event) = match f.next(&chunk[at..]) {
                Ok(step) => step,
                Err(e) => {
                    // Every refusal names a TermReq; none of this may panic.
                    let _ = (e.fes(), e.fei(), e.wants_term_req(), e.to_string());
                    assert!(f.header_bytes().len() <= crate::wire::MAX_HEADER_LEN + 4);
                    return;
                }
            };
            assert!(n <= chunk.len() - at);
            at += n;
            match event {
                None => break,
                Some(Event::Header(repr)) => {
                    assert!(current.is_none());
                    assert_eq!(repr.pdu_type().direction(), accepts);
                    let rx = if repr.pdu_type().has_digests() { framing } else { Framing::INITIAL };
                    let mut b = vec![0u8; repr.header_len()];
                    repr.emit_header(&mut b);
                    let again = Pdu::new_checked(&b[..]).and_then(|p| PduRepr::parse(&p, rx));
                    assert_eq!(again, Ok(repr), "accepted header must survive emit and parse");
                    current = Some((repr, 0));
                }
                Some(Event::Data { offset, bytes }) => {
                    let (repr, seen) = current.as_mut().expect("data only inside a PDU");
                    assert_eq!(u64::from(offset), *seen);
                    *seen += bytes.len() as u64;
                    assert!(*seen <= u64::from(repr.data_len));
                }
                Some(Event::End { data_digest }) => {
                    let (repr, seen) = current.take().expect("end only after a header");
                    assert_eq!(seen, u64::from(repr.data_len));
                    assert_eq!(data_digest.is_some(), repr.ddgst);
                    assert!(f.at_pdu_start());
                }
            }
        }
    }
}

use crate::controller::{Connection, Tcp};
use crate::tls::controller::{SecureTcp, TlsPort};
use crate::tls::host::TlsClient;
use crate::tls::{ConfiguredPsk, Derivation, PskHash};
use nvme_of::auth::Secret;
use nvme_of::controller::Transport as _;
use nvme_of::controller::{Access, ControllerQueue, HostKeys, Target, TargetConfig};
use nvme_of::host::{DhchapSecrets, HostConfig, HostEvent, Io, IoKind};
use nvme_of::namespace::Namespace;
use nvme_of::pair::Pair;
use std::sync::Arc;
use std::time::Duration;
use ulp_ddp::IoBuf;

const NQN: &str = "nqn.2026-11.io.nvme-ddp:fuzz";
/// Time passing per piece of fuzzed input.
const TICK: Duration = Duration::from_millis(7);

/// A host and a controller on the core's pair harness. The fuzzer plays
/// the controller of a queue by taking its connection out of the pair,
/// until the host gives the queue up and connects it anew.
fn pair(cfg: HostConfig, ns: Arc<dyn Namespace>) -> Pair {
    pair_with(cfg, ns, Access::any_host())
}

/// The secret the controller target's authenticating host holds.
fn auth_secret() -> Secret {
    Secret::new(&[0x5a; 32], None).expect("a 32-byte secret")
}

/// A target that admits only the default host, and only with DH-HMAC-CHAP.
fn auth_access() -> Access {
    let mut access = Access::no_host();
    let keys = HostKeys { key: Some(auth_secret()), ctrl_key: None };
    access.hosts.insert(HostConfig::default().hostnqn, keys);
    access
}

fn pair_with(cfg: HostConfig, ns: Arc<dyn Namespace>, access: Access) -> Pair {
    let cfg_t = TargetConfig { subnqn: NQN.into(), access, ..TargetConfig::default() };
    let target = Target::new(cfg_t, vec![ns]).expect("target");
    let mut p = Pair::new(crate::host::new(cfg), Arc::new(Tcp), target);
    p.chunk = 16 * 1024;
    p
}

/// Move bytes until nothing moves (bounded: a fuzzed peer may keep a
/// queue busy).
fn settle(p: &mut Pair) {
    for _ in 0..10_000 {
        if !p.step() {
            return;
        }
    }
}

/// Feed `stream` cut into `piece`-byte pieces to the host as queue
/// `qid`'s controller; what the host sends there goes nowhere.
fn play_controller(p: &mut Pair, qid: u16, stream: &[u8], piece: usize) {
    let mut sink = vec![0u8; 16 * 1024];
    for chunk in stream.chunks(piece.max(1)) {
        let mut at = 0;
        while at < chunk.len() {
            let k = p.host.handle_input(qid, &chunk[at..], p.now);
            while p.host.poll_transmit(qid, &mut sink) > 0 {}
            if k == 0 {
                break;
            }
            at += k;
        }
        p.now = p.now + TICK;
        if p.host.poll_timeout().is_some_and(|t| p.now >= t) {
            p.host.handle_timeout(p.now);
        }
        settle(p);
        if p.conns.contains_key(&qid) {
            return; // the host gave the queue up and reconnected
        }
    }
}

/// Play an NVMe/TCP controller to the host with arbitrary bytes.
///
/// Byte 0: bit 0 picks from the first byte of the admin queue (ICResp
/// onwards) or an I/O queue after a real bring-up with I/O in flight; bits
/// 2:1 the digests; bit 3 whether the connection then closes. Byte 1 is the
/// size of the pieces. Whatever the bytes, nothing panics, and afterwards,
/// with the real controller back, every I/O submitted completes exactly
/// once: no command is lost or completed twice. `ns` (at least 1 MiB) is
/// the controller's one namespace.
pub fn host(data: &[u8], ns: Arc<dyn Namespace>) {
    let [mode, piece, stream @ ..] = data else { return };
    let cfg = HostConfig {
        subnqn: NQN.into(),
        digests: Digests::from_bits(mode >> 1),
        queue_depth: 4,
        kato: Duration::from_secs(2),
        command_timeout: Duration::from_secs(1),
        reconnect_delay: Duration::from_millis(100),
        ctrl_loss_tmo: Some(Duration::from_secs(5)),
        ..HostConfig::default()
    };
    let mut w = pair(cfg, ns);
    let qid = if mode & 1 == 0 {
        let qid = w.host.poll_connect().expect("the admin queue connects first");
        w.host.connected(qid, w.now);
        qid
    } else {
        w.run_for(Duration::from_millis(50));
        if !w.host.is_ready() {
            panic!("bring-up against the real controller failed: {:?}", w.events);
        }
        for tag in 0..4u64 {
            let (kind, buf) = match tag % 3 {
                0 => (IoKind::Read, Some(IoBuf::new(4096))),
                1 => (IoKind::Write, Some(IoBuf::from_vec(vec![tag as u8; 4096]))),
                _ => (IoKind::Flush, None),
            };
            let io = Io { kind, nsid: 1, slba: tag * 8, nlb: 8, buf, tag };
            w.host.submit(1, io, w.now).expect("room for four commands");
        }
        w.conns.remove(&1);
        1
    };
    play_controller(&mut w, qid, stream, usize::from(*piece));
    if mode & 8 != 0 && !w.conns.contains_key(&qid) {
        w.host.transport_closed(qid, w.now);
    }
    // The real controller again, long enough for every timer and retry.
    w.run_for(Duration::from_secs(12));
    settle(&mut w);
    if mode & 1 == 1 {
        for tag in 0..4u64 {
            let n = w
                .events
                .iter()
                .filter(|e| matches!(e, HostEvent::Completion { tag: t, .. } if *t == tag))
                .count();
            assert_eq!(n, 1, "I/O {tag} completed {n} times: {:?}", w.events);
        }
    }
}

/// Play a host to an NVMe/TCP controller connection with arbitrary bytes.
///
/// Byte 0: bit 0 picks from the first byte (ICReq onwards) or an I/O queue
/// after a real host's bring-up; bit 1 makes the subsystem admit only the
/// default host, authenticated (DH-HMAC-CHAP), so the bytes meet AUTH
/// messages; bit 2, from the first byte, puts a port that requires TLS
/// under the connection, so the bytes meet the TLS handshake and records;
/// byte 1 is the size of the pieces. Nothing panics, and once
/// every connection has closed no controller is left behind. `ns` (at
/// least 1 MiB) is the controller's one namespace.
pub fn controller(data: &[u8], ns: Arc<dyn Namespace>) {
    let [mode, piece, stream @ ..] = data else { return };
    let auth = mode & 2 != 0;
    let cfg = HostConfig {
        subnqn: NQN.into(),
        kato: Duration::from_secs(2),
        dhchap: auth.then(|| DhchapSecrets { key: auth_secret(), ctrl_key: None }),
        ..HostConfig::default()
    };
    let access = if auth { auth_access() } else { Access::any_host() };
    let mut w = pair_with(cfg, ns, access);
    let mut conn: Box<dyn ControllerQueue> = if mode & 1 == 0 && mode & 4 != 0 {
        tls_port().accept(w.target.clone(), None, w.now)
    } else if mode & 1 == 0 {
        Box::new(Connection::new(w.target.clone(), None))
    } else {
        w.run_for(Duration::from_millis(50));
        assert!(w.host.is_ready(), "bring-up failed: {:?}", w.events);
        w.conns.remove(&1).expect("I/O queue 1")
    };
    let mut out = vec![0u8; 64 * 1024];
    for chunk in stream.chunks(usize::from(*piece).max(1)) {
        let mut at = 0;
        while at < chunk.len() && !conn.is_closed() {
            let k = conn.handle_input(&chunk[at..], w.now);
            while conn.poll_transmit(&mut out) > 0 {}
            if k == 0 {
                break;
            }
            at += k;
        }
        w.now = w.now + TICK;
        if conn.poll_timeout().is_some_and(|t| w.now >= t) {
            conn.handle_timeout(w.now);
        }
        if conn.is_closed() {
            break;
        }
    }
    conn.transport_closed();
    w.host.shutdown(w.now);
    w.run_for(Duration::from_secs(10));
    settle(&mut w);
    for c in w.conns.values_mut() {
        c.transport_closed();
    }
    assert_eq!(w.target.stats().controllers, 0, "a controller outlived its connections");
}

/// What a real host sends on its admin queue to an authenticating
/// controller (ICReq, Connect, Negotiate, AUTH_Receive, Reply, and on), as
/// input to [`controller`] from the first byte with authentication on:
/// played again, its Reply answers a challenge the controller no longer
/// asks. Seeds the fuzz corpus; the corpus test plays it and its cuts.
pub fn auth_transcript(ns: Arc<dyn Namespace>) -> Vec<u8> {
    let cfg = HostConfig {
        subnqn: NQN.into(),
        dhchap: Some(DhchapSecrets { key: auth_secret(), ctrl_key: None }),
        ..HostConfig::default()
    };
    admin_stream(pair_with(cfg, ns, auth_access()), 2)
}

/// What the host of `w` sends on its admin queue until it is ready, after
/// the [`controller`] mode byte `mode` and a piece size of 255.
fn admin_stream(mut w: Pair, mode: u8) -> Vec<u8> {
    let sent = Arc::new(std::sync::Mutex::new(vec![mode, 255]));
    let into = sent.clone();
    w.h2c_filter = Some(Box::new(move |qid, bytes: &mut Vec<u8>| {
        if qid == 0 {
            into.lock().unwrap_or_else(std::sync::PoisonError::into_inner).extend_from_slice(bytes);
        }
    }));
    w.run_for(Duration::from_millis(50));
    assert!(w.host.is_ready(), "bring-up failed: {:?}", w.events);
    let bytes = sent.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    bytes.clone()
}

/// The PSK of the fuzzed TLS port.
fn tls_psk() -> ConfiguredPsk {
    ConfiguredPsk::new(&[0x5a; 32], Some(PskHash::Sha256)).expect("a 32-byte PSK")
}

fn tls_port() -> SecureTcp {
    SecureTcp(TlsPort::configured(true, tls_psk(), Derivation::Rfc8446))
}

/// What a real host sends on its admin queue to a TLS port (ClientHello,
/// Finished, then records), as input to [`controller`] from the first byte
/// with TLS on: played again, its records are under keys the new
/// handshake does not make. Seeds the fuzz corpus.
pub fn tls_transcript(ns: Arc<dyn Namespace>) -> Vec<u8> {
    let cfg = HostConfig { subnqn: NQN.into(), ..HostConfig::default() };
    let (identity, psk) = tls_psk().tls_psk(1, &cfg.hostnqn, &cfg.subnqn, Derivation::Rfc8446);
    let tcp = crate::host::Tcp { digests: cfg.digests, maxr2t: cfg.maxr2t };
    let transport = crate::tls::host::SecureTcp { tcp, client: TlsClient { identity, psk } };
    let host = nvme_of::host::Host::new(cfg, Arc::new(transport));
    let target =
        Target::new(TargetConfig { subnqn: NQN.into(), ..TargetConfig::default() }, vec![ns])
            .expect("target");
    admin_stream(Pair::new(host, Arc::new(tls_port()), target), 4)
}
