//! DH-HMAC-CHAP on each queue whose Connect response asks for it (ATR),
//! as Linux's host runs it: Negotiate, Challenge, Reply, Success1, and
//! Success2 when the host made the controller prove itself; each an
//! Authentication Send or Receive on that queue. The queue counts as
//! connected once it has authenticated.

use super::step::{AuthStep, Step};
use super::{Dir, Host, HostError, Owner, QueueError};
use crate::auth::{DhGroup, Explanation, Hash, HostAuth, RECEIVE_LEN, Refusal};
use crate::nvme::FabricsCommand;
use crate::time::Instant;
use tracing::{debug, info};
use ulp_ddp::IoBuf;

/// Connect response DW0 bit 17 (ATR): authenticate this queue. Bit 18
/// (ASCR) asks for a secure channel too, which needs TLS.
const ATR: u64 = 1 << 17;
const ASCR: u64 = 1 << 18;

/// A transaction in progress on a queue, and how it failed if it did.
pub(super) struct Transaction {
    auth: HostAuth,
    refusal: Option<Refusal>,
    /// The Reply went out and the controller's verdict on it (Success1
    /// or Failure1) has not come in.
    awaiting_verdict: bool,
    started: Instant,
}

impl Host {
    /// Queue `qid` connected with this Connect result: whether it must
    /// authenticate first (and has started to).
    pub(super) fn authenticate(
        &mut self,
        qid: u16,
        result: u64,
        now: Instant,
    ) -> Result<bool, HostError> {
        if result & (ATR | ASCR) == 0 {
            // A host that asked the controller to prove itself is owed
            // that proof (Linux's host goes on without it); a discovery
            // controller authenticates no one.
            let asked = self.cfg.dhchap.as_ref().is_some_and(|s| s.ctrl_key.is_some());
            if asked && !self.discovery {
                return Err(HostError::ControllerNotAuthenticated);
            }
            return Ok(false);
        }
        if result & ASCR != 0 {
            return Err(HostError::Incompatible(
                "the controller requires a secure channel (ASCR), which needs TLS".into(),
            ));
        }
        let Some(secrets) = self.cfg.dhchap.clone() else {
            return Err(HostError::NoSecret(self.cfg.hostnqn.clone()));
        };
        let t_id = self.auth_transactions;
        self.auth_transactions = self.auth_transactions.wrapping_add(1);
        let (auth, negotiate) = HostAuth::start(t_id, &self.cfg.hostnqn, &self.cfg.subnqn, secrets);
        debug!(parent: &self.span, qid, t_id, "authenticating");
        let t = Transaction { auth, refusal: None, awaiting_verdict: false, started: now };
        self.auth.insert(qid, t);
        self.auth_send(qid, AuthStep::Negotiate, negotiate, now);
        Ok(true)
    }

    /// The next step after `step` completed on `qid` with `buf`; `true`
    /// once the queue has authenticated.
    pub(super) fn auth_advance(
        &mut self,
        qid: u16,
        step: AuthStep,
        buf: Option<IoBuf>,
        now: Instant,
    ) -> Result<bool, HostError> {
        let Some(t) = self.auth.get_mut(&qid) else {
            return Err(HostError::Incompatible("authentication message on no transaction".into()));
        };
        let data = || buf.as_ref().map(IoBuf::to_vec).unwrap_or_default();
        let verdict = match step {
            AuthStep::Negotiate => return self.auth_receive(qid, AuthStep::Challenge, now),
            AuthStep::Reply => return self.auth_receive(qid, AuthStep::Success1, now),
            AuthStep::Challenge => {
                t.auth.challenge(&data()).map(|reply| Some((AuthStep::Reply, reply)))
            }
            AuthStep::Success1 => {
                t.awaiting_verdict = false;
                t.auth.success1(&data()).map(|s2| s2.map(|s2| (AuthStep::Success2, s2)))
            }
            AuthStep::Success2 => Ok(None),
            AuthStep::Failure2 => {
                let refusal = t.refusal.unwrap_or(Refusal::ByHost(Explanation::Failed));
                return Err(HostError::Authentication { qid, refusal });
            }
        };
        match verdict {
            Ok(Some((next, msg))) => {
                self.auth_send(qid, next, msg, now);
                Ok(false)
            }
            Ok(None) => {
                let (hash, group) = t.auth.negotiated().unwrap_or((Hash::Sha256, DhGroup::Null));
                let ms = (now - t.started).as_secs_f64() * 1e3;
                let (hash, dhgroup, both) = (hash.name(), group.name(), t.auth.bidirectional());
                // As Linux says it, once per association; the I/O queues
                // repeat it.
                if qid == 0 {
                    info!(parent: &self.span, hash = %hash, dhgroup = %dhgroup, bidirectional = both, ms = %format!("{ms:.1}"), "authenticated (DH-HMAC-CHAP)");
                } else {
                    debug!(parent: &self.span, qid, hash = %hash, dhgroup = %dhgroup, ms = %format!("{ms:.1}"), "queue authenticated");
                }
                self.auth.remove(&qid);
                Ok(true)
            }
            Err(refusal) => match t.auth.failure(refusal) {
                Some(failure2) => {
                    t.refusal = Some(refusal);
                    self.auth_send(qid, AuthStep::Failure2, failure2, now);
                    Ok(false)
                }
                None => Err(HostError::Authentication { qid, refusal }),
            },
        }
    }

    /// How queue `qid`'s transaction failed, if the host knows, now that
    /// the queue failed with `error`: a controller that closes the queue
    /// before Failure2 completes has not made the failure anything else;
    /// and one that closes it while the host awaits its verdict on the
    /// Reply has refused the Reply. Linux's nvmet sends Failure1 and
    /// resets the queue at once, without lingering, so the Failure1 may
    /// never leave it.
    pub(super) fn auth_failure(&self, qid: u16, error: &QueueError) -> Option<HostError> {
        let t = self.auth.get(&qid)?;
        let refused = (t.awaiting_verdict && *error == QueueError::TransportClosed)
            .then_some(Refusal::ByController(Explanation::Failed));
        let refusal = t.refusal.or(refused)?;
        Some(HostError::Authentication { qid, refusal })
    }

    fn auth_send(&mut self, qid: u16, step: AuthStep, msg: Vec<u8>, now: Instant) {
        if let (AuthStep::Reply, Some(t)) = (step, self.auth.get_mut(&qid)) {
            t.awaiting_verdict = true;
        }
        let cmd = FabricsCommand::AuthSend {
            secp: FabricsCommand::SECP_AUTH,
            spsp: FabricsCommand::SPSP_AUTH,
            tl: msg.len() as u32,
        };
        let len = msg.len();
        let data = (IoBuf::from_vec(msg), len, Dir::ToController);
        self.queue_cmd(qid, step, cmd, Some(data), now);
    }

    fn auth_receive(&mut self, qid: u16, step: AuthStep, now: Instant) -> Result<bool, HostError> {
        let cmd = FabricsCommand::AuthReceive {
            secp: FabricsCommand::SECP_AUTH,
            spsp: FabricsCommand::SPSP_AUTH,
            al: RECEIVE_LEN,
        };
        let len = RECEIVE_LEN as usize;
        let data = (IoBuf::new(len), len, Dir::FromController);
        self.queue_cmd(qid, step, cmd, Some(data), now);
        Ok(false)
    }

    /// A Fabrics command of bring-up on queue `qid` (not only the admin
    /// queue: every queue authenticates on its own).
    fn queue_cmd(
        &mut self,
        qid: u16,
        step: AuthStep,
        cmd: FabricsCommand,
        data: super::CmdData,
        now: Instant,
    ) {
        let deadline = now + self.cfg.command_timeout;
        let q = &mut self.queues[usize::from(qid)];
        if q.submit(Owner::Admin(Step::Auth(step)), cmd.to_sqe(Default::default()), data, deadline)
            .is_none()
        {
            self.fail(HostError::Incompatible("queue full while authenticating".into()));
        }
    }
}
