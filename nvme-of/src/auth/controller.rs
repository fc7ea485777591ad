//! The controller's side of DH-HMAC-CHAP on one queue. AUTH_Send hands it
//! the host's messages, AUTH_Receive takes its answers, as nvmet does it:
//! a Negotiate (at any time) starts a transaction; a Reply that fails is
//! completed like any other and answered with Failure1 at the next
//! AUTH_Receive, after which the controller closes the queue.

use super::exchange::{self, Responder};
use super::ffdhe::KeyPair;
use super::message::{Explanation, Message};
use super::{DhGroup, Hash, Secret, crypto};
use zeroize::Zeroizing;

/// Who is authenticating, and with what.
pub struct Peer<'a> {
    pub hostnqn: &'a str,
    pub subnqn: &'a str,
    pub key: &'a Secret,
    pub ctrl_key: Option<&'a Secret>,
    /// What the controller accepts, in its order of preference.
    pub hashes: &'a [Hash],
    pub dhgroups: &'a [DhGroup],
}

/// Where a queue's transaction stands.
#[derive(Default)]
enum Step {
    /// Waiting for Negotiate.
    #[default]
    Negotiate,
    /// The Challenge is owed at the next AUTH_Receive.
    Challenge(Challenge),
    /// Waiting for the Reply to the Challenge sent.
    Reply(Challenge),
    /// Success1 is owed (with R2 if the host asked).
    Success1 { hash: Hash, r2: Option<Zeroizing<Vec<u8>>> },
    /// Waiting for Success2.
    Success2,
    /// Failure1 is owed; the queue closes after it.
    Failure1(Explanation),
    /// Done: authenticated, or failed for good.
    Done,
}

struct Challenge {
    hash: Hash,
    group: DhGroup,
    seqnum: u32,
    c1: Zeroizing<Vec<u8>>,
    pair: Option<KeyPair>,
}

/// One queue's authentication.
#[derive(Default)]
pub struct CtrlAuth {
    t_id: u16,
    step: Step,
    authenticated: bool,
    /// The transaction failed: the queue is to close once Failure1 (if
    /// owed) has gone.
    failed: Option<Explanation>,
    /// Transactions the host started before it first authenticated.
    attempts: u8,
}

/// Transactions a queue may start before one succeeds: enough for a host
/// that retries, too few for one that makes the controller exponentiate
/// for ever (each Challenge costs a Diffie-Hellman key pair).
const MAX_ATTEMPTS: u8 = 4;

impl CtrlAuth {
    pub fn authenticated(&self) -> bool {
        self.authenticated
    }

    /// Why the transaction failed, once Failure1 has gone (or the host
    /// sent Failure2): the queue closes.
    pub fn failed(&self) -> Option<Explanation> {
        self.failed.filter(|_| matches!(self.step, Step::Done))
    }

    /// A message from the host (AUTH_Send's data). A failed transaction
    /// is final: what follows it is ignored until the queue closes.
    pub fn send(&mut self, b: &[u8], peer: &Peer<'_>) {
        if self.failed.is_some() {
            return;
        }
        let msg = match Message::parse(b) {
            Ok(m) => m,
            Err(why) => return self.fail(why),
        };
        self.step = match (std::mem::take(&mut self.step), msg) {
            (_, Message::Negotiate { .. })
                if !self.authenticated && self.attempts >= MAX_ATTEMPTS =>
            {
                Step::Failure1(Explanation::IncorrectMessage)
            }
            (_, Message::Negotiate { t_id, sc_c, hashes, dhgroups }) => {
                self.t_id = t_id;
                self.attempts = self.attempts.saturating_add(u8::from(!self.authenticated));
                match challenge(sc_c, &hashes, &dhgroups, peer) {
                    Ok(c) => Step::Challenge(c),
                    Err(why) => Step::Failure1(why),
                }
            }
            (_, Message::Failure { from_controller: false, why, .. }) => {
                tracing::warn!(hostnqn = peer.hostnqn, %why, "the host refused the controller's response (Failure2): is --dhchap-ctrl-key the secret the host holds?");
                self.failed = Some(why);
                self.authenticated = false;
                Step::Done
            }
            (Step::Reply(_), m @ Message::Reply { .. })
            | (Step::Success2, m @ Message::Success2 { .. })
                if m.t_id() != self.t_id =>
            {
                Step::Failure1(Explanation::IncorrectPayload)
            }
            (Step::Reply(c), Message::Reply { seqnum, response, challenge, dh, .. }) => {
                self.reply(c, seqnum, &response, challenge.as_deref(), &dh, peer)
            }
            (Step::Success2, Message::Success2 { .. }) => {
                self.authenticated = true;
                Step::Done
            }
            _ => Step::Failure1(Explanation::IncorrectMessage),
        };
        if let Step::Failure1(why) = self.step {
            self.fail(why);
        }
    }

    /// The controller's next message (AUTH_Receive's data).
    pub fn receive(&mut self, peer: &Peer<'_>) -> Vec<u8> {
        let t_id = self.t_id;
        let (msg, next) = match std::mem::take(&mut self.step) {
            Step::Challenge(mut c) => {
                // The key pair is made when the Challenge goes, not when
                // a Negotiate arrives: Negotiates sent back to back cost
                // nothing.
                if c.group != DhGroup::Null {
                    match KeyPair::generate(c.group) {
                        Ok(pair) => c.pair = Some(pair),
                        Err(_) => return self.failure1(Explanation::Failed, peer),
                    }
                }
                let msg = Message::Challenge {
                    t_id,
                    hash: c.hash.id(),
                    dhgroup: c.group.id(),
                    seqnum: c.seqnum,
                    challenge: c.c1.to_vec(),
                    dh: c.pair.as_ref().map_or_else(Vec::new, |p| p.public().to_vec()),
                };
                (msg, Step::Reply(c))
            }
            Step::Success1 { hash, r2 } => {
                let next = if r2.is_some() { Step::Success2 } else { Step::Done };
                let msg = Message::Success1 {
                    t_id,
                    hl: hash.digest_len() as u8,
                    response: r2.map(|r| r.to_vec()),
                };
                (msg, next)
            }
            Step::Failure1(why) => return self.failure1(why, peer),
            _ => return self.failure1(Explanation::IncorrectMessage, peer),
        };
        self.step = next;
        msg.emit()
    }

    /// Failure1: the transaction is over, and the queue closes after it.
    fn failure1(&mut self, why: Explanation, peer: &Peer<'_>) -> Vec<u8> {
        let why = self.failed.unwrap_or(why);
        self.fail(why);
        self.step = Step::Done;
        tracing::warn!(hostnqn = peer.hostnqn, %why, "authentication failed; closing the queue");
        Message::Failure { t_id: self.t_id, from_controller: true, why }.emit()
    }

    fn fail(&mut self, why: Explanation) {
        self.authenticated = false;
        self.failed = Some(why);
        self.step = Step::Failure1(why);
    }

    /// Check R1; work out R2 if the host asked for it.
    fn reply(
        &mut self,
        c: Challenge,
        s2: u32,
        r1: &[u8],
        c2: Option<&[u8]>,
        dh: &[u8],
        peer: &Peer<'_>,
    ) -> Step {
        let shared = match (&c.pair, dh.is_empty()) {
            (None, true) => None,
            (Some(pair), false) => match pair.shared(dh) {
                Ok(z) => Some(z),
                Err(_) => return Step::Failure1(Explanation::DhGroupUnusable),
            },
            _ => return Step::Failure1(Explanation::IncorrectPayload),
        };
        let z = shared.as_deref().map(|z| &z[..]);
        let ca1 = exchange::augment(c.hash, z, &c.c1);
        let want = exchange::response(
            c.hash,
            &peer.key.transformed(peer.hostnqn),
            &ca1,
            c.seqnum,
            self.t_id,
            Responder::Host,
            (peer.hostnqn, peer.subnqn),
        );
        if !crypto::same(&want, r1) {
            return Step::Failure1(Explanation::Failed);
        }
        let r2 = match (c2, peer.ctrl_key) {
            (None, _) => {
                self.authenticated = true;
                None
            }
            // The host wants proof the controller has no secret for.
            (Some(_), None) => return Step::Failure1(Explanation::Failed),
            (Some(c2), Some(ctrl_key)) => {
                let ca2 = exchange::augment(c.hash, z, c2);
                Some(exchange::response(
                    c.hash,
                    &ctrl_key.transformed(peer.subnqn),
                    &ca2,
                    s2,
                    self.t_id,
                    Responder::Controller,
                    (peer.hostnqn, peer.subnqn),
                ))
            }
        };
        Step::Success1 { hash: c.hash, r2 }
    }
}

/// The challenge for a Negotiate: the controller's preferred hash and
/// group among those the host offered.
fn challenge(
    sc_c: u8,
    hashes: &[u8],
    dhgroups: &[u8],
    peer: &Peer<'_>,
) -> Result<Challenge, Explanation> {
    if sc_c != 0 {
        return Err(Explanation::ConcatMismatch);
    }
    let hash = (peer.hashes.iter().copied())
        .find(|h| hashes.contains(&h.id()))
        .ok_or(Explanation::HashUnusable)?;
    let group = (peer.dhgroups.iter().copied())
        .find(|g| dhgroups.contains(&g.id()))
        .ok_or(Explanation::DhGroupUnusable)?;
    Ok(Challenge {
        hash,
        group,
        seqnum: exchange::seqnum().map_err(|_| Explanation::Failed)?,
        c1: crypto::random(hash.digest_len()).map_err(|_| Explanation::Failed)?,
        pair: None,
    })
}
