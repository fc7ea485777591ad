//! NVMe in-band authentication: DH-HMAC-CHAP (NVMe Base 2.0, 8.13), the
//! protocol Linux (`nvme-auth`) and SPDK run over Authentication Send and
//! Authentication Receive after a Connect whose response asks for it.
//!
//! - `secret`: the configured secrets, in nvme-cli's interchange format.
//! - `message`: the messages, byte for byte.
//! - `ffdhe`, `crypto`: the Diffie-Hellman groups, hashes and HMAC, from
//!   well-kept crates.
//! - `host`, `controller`: one transaction each side, sans-IO: a message
//!   in, the next message (or the verdict) out.
//!
//! Each queue authenticates on its own (Linux authenticates the admin
//! queue and then every I/O queue, and again after a reconnect).

mod controller;
mod crypto;
mod exchange;
mod ffdhe;
mod host;
mod message;
mod secret;

pub use controller::{CtrlAuth, Peer};
pub use ffdhe::BadPublicValue;
pub use host::{HostAuth, Refusal};
pub use message::{Explanation, Message};
pub use secret::{Secret, SecretError};

/// AUTH_Receive's allocation length, as Linux's host asks: every message
/// fits (the largest, a Challenge with SHA-512 and ffdhe8192, is 1104
/// bytes).
pub const RECEIVE_LEN: u32 = 4096;

/// A hash function DH-HMAC-CHAP may use, by its identifier.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Hash {
    Sha256,
    Sha384,
    Sha512,
}

impl Hash {
    pub const ALL: [Hash; 3] = [Hash::Sha256, Hash::Sha384, Hash::Sha512];

    pub fn id(self) -> u8 {
        match self {
            Hash::Sha256 => 1,
            Hash::Sha384 => 2,
            Hash::Sha512 => 3,
        }
    }

    pub fn from_id(id: u8) -> Option<Self> {
        Self::ALL.into_iter().find(|h| h.id() == id)
    }

    /// Output length in bytes.
    pub fn digest_len(self) -> usize {
        match self {
            Hash::Sha256 => 32,
            Hash::Sha384 => 48,
            Hash::Sha512 => 64,
        }
    }

    /// The name nvmet's `dhchap_hash` takes: `hmac(sha256)` and so on.
    pub fn name(self) -> &'static str {
        match self {
            Hash::Sha256 => "hmac(sha256)",
            Hash::Sha384 => "hmac(sha384)",
            Hash::Sha512 => "hmac(sha512)",
        }
    }

    /// `sha256`, `hmac(sha256)` or `1`, and the like.
    pub fn parse(s: &str) -> Option<Self> {
        let s = s.trim();
        let bare = s.strip_prefix("hmac(").and_then(|r| r.strip_suffix(')')).unwrap_or(s);
        Self::ALL
            .into_iter()
            .find(|h| h.name()[5..h.name().len() - 1] == *bare || bare.parse() == Ok(h.id()))
    }
}

/// A Diffie-Hellman group DH-HMAC-CHAP may use; `Null` is none (the
/// challenge is then used as it is).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum DhGroup {
    Null,
    Ffdhe2048,
    Ffdhe3072,
    Ffdhe4096,
    Ffdhe6144,
    Ffdhe8192,
}

impl DhGroup {
    pub const ALL: [DhGroup; 6] = [
        DhGroup::Null,
        DhGroup::Ffdhe2048,
        DhGroup::Ffdhe3072,
        DhGroup::Ffdhe4096,
        DhGroup::Ffdhe6144,
        DhGroup::Ffdhe8192,
    ];

    pub fn id(self) -> u8 {
        self as u8
    }

    pub fn from_id(id: u8) -> Option<Self> {
        Self::ALL.get(usize::from(id)).copied()
    }

    /// The name nvmet's `dhchap_dhgroup` takes: `null`, `ffdhe2048`, ...
    pub fn name(self) -> &'static str {
        match self {
            DhGroup::Null => "null",
            DhGroup::Ffdhe2048 => "ffdhe2048",
            DhGroup::Ffdhe3072 => "ffdhe3072",
            DhGroup::Ffdhe4096 => "ffdhe4096",
            DhGroup::Ffdhe6144 => "ffdhe6144",
            DhGroup::Ffdhe8192 => "ffdhe8192",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        let s = s.trim();
        Self::ALL.into_iter().find(|g| g.name() == s || s.parse() == Ok(g.id()))
    }

    /// Bytes of a public value (0 for the NULL group).
    pub fn value_len(self) -> usize {
        match self {
            DhGroup::Null => 0,
            DhGroup::Ffdhe2048 => 256,
            DhGroup::Ffdhe3072 => 384,
            DhGroup::Ffdhe4096 => 512,
            DhGroup::Ffdhe6144 => 768,
            DhGroup::Ffdhe8192 => 1024,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host::DhchapSecrets;

    const HOSTNQN: &str = "nqn.2014-08.org.nvmexpress:uuid:host";
    const SUBNQN: &str = "nqn.2026-11.io.nvme-ddp:target";

    struct Keys {
        host: Secret,
        ctrl: Option<Secret>,
    }

    fn peer<'a>(k: &'a Keys, hashes: &'a [Hash], dhgroups: &'a [DhGroup]) -> Peer<'a> {
        Peer {
            hostnqn: HOSTNQN,
            subnqn: SUBNQN,
            key: &k.host,
            ctrl_key: k.ctrl.as_ref(),
            hashes,
            dhgroups,
        }
    }

    /// Run one transaction; the host's verdict and the controller's.
    fn run(host: DhchapSecrets, ctrl: &Peer<'_>) -> (Result<(), Refusal>, CtrlAuth) {
        let (mut h, negotiate) = HostAuth::start(5, HOSTNQN, SUBNQN, host);
        let mut c = CtrlAuth::default();
        c.send(&negotiate, ctrl);
        let verdict = (|| {
            let reply = h.challenge(&c.receive(ctrl))?;
            c.send(&reply, ctrl);
            if let Some(success2) = h.success1(&c.receive(ctrl))? {
                c.send(&success2, ctrl);
            }
            Ok(())
        })();
        if let Err(r) = verdict
            && let Some(f2) = h.failure(r)
        {
            c.send(&f2, ctrl);
        }
        (verdict, c)
    }

    #[test]
    fn every_hash_and_group_authenticates_both_ways() {
        for (hash, group) in [
            (Hash::Sha256, DhGroup::Null),
            (Hash::Sha384, DhGroup::Ffdhe2048),
            (Hash::Sha512, DhGroup::Ffdhe3072),
            (Hash::Sha256, DhGroup::Ffdhe4096),
        ] {
            for bidirectional in [false, true] {
                let keys = Keys {
                    host: Secret::generate(32, Some(Hash::Sha256)).unwrap(),
                    ctrl: bidirectional.then(|| Secret::generate(64, None).unwrap()),
                };
                let (hashes, groups) = ([hash], [group]);
                let ctrl = peer(&keys, &hashes, &groups);
                let secrets = DhchapSecrets { key: keys.host.clone(), ctrl_key: keys.ctrl.clone() };
                let (verdict, c) = run(secrets, &ctrl);
                assert_eq!(verdict, Ok(()), "{hash:?} {group:?} bidirectional {bidirectional}");
                assert!(c.authenticated() && c.failed().is_none());
            }
        }
    }

    #[test]
    fn a_wrong_secret_is_refused_with_failure1_and_a_fake_controller_by_the_host() {
        let keys = Keys { host: Secret::generate(32, None).unwrap(), ctrl: None };
        let ctrl = peer(&keys, &Hash::ALL, &[DhGroup::Ffdhe2048]);
        let wrong = DhchapSecrets { key: Secret::generate(32, None).unwrap(), ctrl_key: None };
        let (verdict, c) = run(wrong, &ctrl);
        assert_eq!(verdict, Err(Refusal::ByController(Explanation::Failed)));
        assert!(!c.authenticated());
        assert_eq!(c.failed(), Some(Explanation::Failed));

        // The controller knows the host's secret but not the one the
        // host expects it to prove: the host refuses with Failure2.
        let theirs =
            Keys { host: keys.host.clone(), ctrl: Some(Secret::generate(32, None).unwrap()) };
        let ctrl = peer(&theirs, &Hash::ALL, &[DhGroup::Null]);
        let ours = DhchapSecrets {
            key: keys.host.clone(),
            ctrl_key: Some(Secret::generate(32, None).unwrap()),
        };
        let (verdict, c) = run(ours, &ctrl);
        assert_eq!(verdict, Err(Refusal::ByHost(Explanation::Failed)));
        assert!(!c.authenticated(), "Failure2 leaves the queue unauthenticated");
        assert_eq!(c.failed(), Some(Explanation::Failed));
    }

    #[test]
    fn a_failed_transaction_is_final_and_retries_are_bounded() {
        let keys = Keys { host: Secret::generate(32, None).unwrap(), ctrl: None };
        let ctrl = peer(&keys, &Hash::ALL, &[DhGroup::Null]);
        let right = || DhchapSecrets { key: keys.host.clone(), ctrl_key: None };
        let wrong = DhchapSecrets { key: Secret::generate(32, None).unwrap(), ctrl_key: None };
        // A wrong Reply, then a fresh and right transaction on the queue:
        // the failure stands, and Failure1 is what the queue gets.
        let (mut h, negotiate) = HostAuth::start(1, HOSTNQN, SUBNQN, wrong);
        let mut c = CtrlAuth::default();
        c.send(&negotiate, &ctrl);
        let reply = h.challenge(&c.receive(&ctrl)).unwrap();
        c.send(&reply, &ctrl);
        let (mut h, negotiate) = HostAuth::start(2, HOSTNQN, SUBNQN, right());
        c.send(&negotiate, &ctrl);
        assert_eq!(h.challenge(&c.receive(&ctrl)), Err(Refusal::ByController(Explanation::Failed)));
        assert_eq!((c.authenticated(), c.failed()), (false, Some(Explanation::Failed)));

        // Negotiate after Negotiate, never replying: the fifth is refused.
        let mut c = CtrlAuth::default();
        for t_id in 0..4 {
            let (_, negotiate) = HostAuth::start(t_id, HOSTNQN, SUBNQN, right());
            c.send(&negotiate, &ctrl);
            assert!(c.receive(&ctrl).starts_with(&[0x01, 0x01]), "Challenge {t_id}");
        }
        let (_, negotiate) = HostAuth::start(4, HOSTNQN, SUBNQN, right());
        c.send(&negotiate, &ctrl);
        assert!(c.receive(&ctrl).starts_with(&[0x00, 0xf1]));
        assert!(c.failed().is_some());
    }

    #[test]
    fn nothing_in_common_is_hash_or_group_unusable() {
        let keys = Keys { host: Secret::generate(32, None).unwrap(), ctrl: None };
        let secrets = || DhchapSecrets { key: keys.host.clone(), ctrl_key: None };
        let (mut h, negotiate) = HostAuth::start(1, HOSTNQN, SUBNQN, secrets());
        let mut c = CtrlAuth::default();
        // A Negotiate that offers SHA-256 only, against SHA-512 only.
        let mut only = negotiate.clone();
        only[10] = 1;
        c.send(&only, &peer(&keys, &[Hash::Sha512], &[DhGroup::Null]));
        let f1 = c.receive(&peer(&keys, &[Hash::Sha512], &[DhGroup::Null]));
        assert_eq!(h.challenge(&f1), Err(Refusal::ByController(Explanation::HashUnusable)));
        assert_eq!(c.failed(), Some(Explanation::HashUnusable));
    }

    #[test]
    fn out_of_order_replayed_and_tampered_messages_fail() {
        let keys = Keys { host: Secret::generate(48, Some(Hash::Sha384)).unwrap(), ctrl: None };
        let ctrl = peer(&keys, &Hash::ALL, &[DhGroup::Ffdhe2048]);
        let secrets = || DhchapSecrets { key: keys.host.clone(), ctrl_key: None };

        // A Reply before any Negotiate.
        let mut c = CtrlAuth::default();
        let (mut h, negotiate) = HostAuth::start(1, HOSTNQN, SUBNQN, secrets());
        let mut other = CtrlAuth::default();
        other.send(&negotiate, &ctrl);
        let reply = h.challenge(&other.receive(&ctrl)).unwrap();
        c.send(&reply, &ctrl);
        assert!(c.receive(&ctrl).starts_with(&[0x00, 0xf1]), "Failure1");
        assert_eq!(c.failed(), Some(Explanation::IncorrectMessage));

        // The same Reply replayed into a new transaction: its response
        // answers another challenge.
        let mut c = CtrlAuth::default();
        c.send(&negotiate, &ctrl);
        let _ = c.receive(&ctrl);
        c.send(&reply, &ctrl);
        assert!(c.receive(&ctrl).starts_with(&[0x00, 0xf1]));
        assert!(!c.authenticated());

        // A controller value of 1 (confining the secret) and one cut short.
        let mut c = CtrlAuth::default();
        c.send(&negotiate, &ctrl);
        let challenge = c.receive(&ctrl);
        let mut one = challenge.clone();
        let at = 16 + usize::from(challenge[6]);
        one[at..].fill(0);
        *one.last_mut().unwrap() = 1;
        let (mut h, _) = HostAuth::start(1, HOSTNQN, SUBNQN, secrets());
        assert_eq!(h.challenge(&one), Err(Refusal::ByHost(Explanation::IncorrectPayload)));
        assert_eq!(
            h.challenge(&challenge[..100]),
            Err(Refusal::ByHost(Explanation::IncorrectPayload))
        );
        // A host public value of p - 1 in the Reply.
        let mut reply = h.challenge(&challenge).unwrap();
        let n = reply.len();
        reply[n - 256..].fill(0xff);
        reply[n - 1] = 0xfe;
        c.send(&reply, &ctrl);
        assert!(c.receive(&ctrl).starts_with(&[0x00, 0xf1, 0, 0, 1, 0, 1, 0x05]));
    }

    #[test]
    fn names_and_ids_round_trip() {
        for h in Hash::ALL {
            assert_eq!(Hash::from_id(h.id()), Some(h));
            assert_eq!(Hash::parse(h.name()), Some(h));
        }
        assert_eq!(Hash::parse("sha384"), Some(Hash::Sha384));
        assert_eq!(Hash::parse("md5"), None);
        for g in DhGroup::ALL {
            assert_eq!(DhGroup::from_id(g.id()), Some(g));
            assert_eq!(DhGroup::parse(g.name()), Some(g));
        }
        assert_eq!(DhGroup::from_id(6), None);
    }
}
