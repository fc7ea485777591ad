//! The host's side of one DH-HMAC-CHAP transaction on one queue:
//! Negotiate out, Challenge in, Reply out, Success1 in, and Success2 out
//! when the host asked the controller to prove itself.

use super::exchange::{self, Responder};
use super::ffdhe::KeyPair;
use super::message::{Explanation, Message};
use super::{DhGroup, Hash, crypto};
use crate::host::DhchapSecrets;
use zeroize::Zeroizing;

/// How a transaction failed, from the host's side.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// The controller sent Failure1: nothing more is sent.
    ByController(Explanation),
    /// The host found fault: it sends Failure2 with this, then gives up.
    ByHost(Explanation),
}

/// One transaction.
pub struct HostAuth {
    t_id: u16,
    hostnqn: String,
    subnqn: String,
    secrets: DhchapSecrets,
    /// What the host expects in Success1, once it has replied.
    expect: Option<Expect>,
}

struct Expect {
    hash: Hash,
    group: DhGroup,
    /// R2, when the host challenged the controller.
    r2: Option<Zeroizing<Vec<u8>>>,
}

impl HostAuth {
    /// A transaction and its first message, Negotiate: every hash and
    /// group, as Linux offers them.
    pub fn start(
        t_id: u16,
        hostnqn: &str,
        subnqn: &str,
        secrets: DhchapSecrets,
    ) -> (Self, Vec<u8>) {
        let negotiate = Message::Negotiate {
            t_id,
            sc_c: 0,
            hashes: Hash::ALL.iter().map(|h| h.id()).collect(),
            dhgroups: DhGroup::ALL.iter().map(|g| g.id()).collect(),
        };
        let auth =
            Self { t_id, hostnqn: hostnqn.into(), subnqn: subnqn.into(), secrets, expect: None };
        (auth, negotiate.emit())
    }

    /// The hash and group the controller chose, once it has.
    pub fn negotiated(&self) -> Option<(Hash, DhGroup)> {
        self.expect.as_ref().map(|e| (e.hash, e.group))
    }

    /// Whether the host asked the controller to prove itself.
    pub fn bidirectional(&self) -> bool {
        self.secrets.ctrl_key.is_some()
    }

    /// The message a refusal sends, if any (Failure2).
    pub fn failure(&self, r: Refusal) -> Option<Vec<u8>> {
        match r {
            Refusal::ByHost(why) => {
                Some(Message::Failure { t_id: self.t_id, from_controller: false, why }.emit())
            }
            Refusal::ByController(_) => None,
        }
    }

    /// The controller's answer to Negotiate; the Reply to send.
    pub fn challenge(&mut self, b: &[u8]) -> Result<Vec<u8>, Refusal> {
        use Explanation::*;
        let Message::Challenge { t_id, hash, dhgroup, seqnum, challenge, dh } = self.read(b)?
        else {
            return Err(Refusal::ByHost(IncorrectMessage));
        };
        let hash = Hash::from_id(hash).ok_or(Refusal::ByHost(HashUnusable))?;
        if challenge.len() != hash.digest_len() {
            return Err(Refusal::ByHost(HashUnusable));
        }
        let group = DhGroup::from_id(dhgroup).ok_or(Refusal::ByHost(DhGroupUnusable))?;
        let (shared, public) = match (group, dh.is_empty()) {
            (DhGroup::Null, true) => (None, Vec::new()),
            (DhGroup::Null, false) => return Err(Refusal::ByHost(IncorrectPayload)),
            (_, true) => return Err(Refusal::ByHost(DhGroupUnusable)),
            (g, false) => {
                let pair = KeyPair::generate(g).map_err(|_| Refusal::ByHost(Failed))?;
                let z = pair.shared(&dh).map_err(|_| Refusal::ByHost(IncorrectPayload))?;
                (Some(z), pair.public().to_vec())
            }
        };
        let c1 = exchange::augment(hash, shared.as_deref().map(|z| &z[..]), &challenge);
        let key = self.secrets.key.transformed(&self.hostnqn);
        let r1 = exchange::response(
            hash,
            &key,
            &c1,
            seqnum,
            t_id,
            Responder::Host,
            (&self.hostnqn, &self.subnqn),
        );
        let (s2, c2, r2) = match &self.secrets.ctrl_key {
            None => (0, None, None),
            Some(ctrl_key) => {
                let s2 = exchange::seqnum().map_err(|_| Refusal::ByHost(Failed))?;
                let c2 = crypto::random(hash.digest_len()).map_err(|_| Refusal::ByHost(Failed))?;
                let ca2 = exchange::augment(hash, shared.as_deref().map(|z| &z[..]), &c2);
                let r2 = exchange::response(
                    hash,
                    &ctrl_key.transformed(&self.subnqn),
                    &ca2,
                    s2,
                    t_id,
                    Responder::Controller,
                    (&self.hostnqn, &self.subnqn),
                );
                (s2, Some(c2.to_vec()), Some(r2))
            }
        };
        self.expect = Some(Expect { hash, group, r2 });
        let reply =
            Message::Reply { t_id, seqnum: s2, response: r1.to_vec(), challenge: c2, dh: public };
        Ok(reply.emit())
    }

    /// The controller's verdict on the Reply. `Ok(Some(Success2))` when
    /// the controller proved itself, `Ok(None)` when done without it.
    pub fn success1(&mut self, b: &[u8]) -> Result<Option<Vec<u8>>, Refusal> {
        use Explanation::*;
        let msg = self.read(b)?;
        let (Message::Success1 { hl, response, .. }, Some(expect)) = (msg, &self.expect) else {
            return Err(Refusal::ByHost(IncorrectMessage));
        };
        if usize::from(hl) != expect.hash.digest_len() {
            return Err(Refusal::ByHost(HashUnusable));
        }
        match (&expect.r2, response) {
            (None, _) => Ok(None),
            (Some(want), Some(got)) if crypto::same(want, &got) => {
                Ok(Some(Message::Success2 { t_id: self.t_id }.emit()))
            }
            // Linux lets a controller that does not answer C2 through;
            // a host that asked for proof is owed one.
            (Some(_), _) => Err(Refusal::ByHost(Failed)),
        }
    }

    /// A message of this transaction, or why not.
    fn read(&self, b: &[u8]) -> Result<Message, Refusal> {
        match Message::parse(b).map_err(Refusal::ByHost)? {
            Message::Failure { from_controller: true, why, .. } => Err(Refusal::ByController(why)),
            m if m.t_id() != self.t_id => Err(Refusal::ByHost(Explanation::IncorrectMessage)),
            m => Ok(m),
        }
    }
}
