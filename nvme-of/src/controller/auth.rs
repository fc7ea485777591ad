//! Authentication Send and Receive: DH-HMAC-CHAP on the queue they
//! arrive on (`crate::auth` has the protocol). Until a queue whose host
//! has a secret has authenticated, its commands other than Fabrics ones
//! complete with Authentication Required, as nvmet's do.

use super::queue::{Data, DataPtr, Outcome};
use super::{CtrlQueue, lock};
use crate::auth::{CtrlAuth, Peer};
use crate::nvme::{FabricsCommand, Sqe, Status};
use crate::time::Instant;

/// The longest message a host sends: a Reply with SHA-512 and ffdhe8192
/// is 1168 bytes; a Negotiate of many descriptors is longer, and nothing
/// the protocol needs.
const MAX_SEND: u32 = 4096;
/// The most an Authentication Receive may ask for.
const MAX_RECEIVE: u32 = 8192;

impl CtrlQueue {
    pub(super) fn auth_send(
        &mut self,
        sqe: &Sqe,
        data: Data,
        secp: u8,
        spsp: u16,
        tl: u32,
        now: Instant,
    ) -> Outcome {
        if let Some(bad) = check(secp, spsp, tl) {
            return bad;
        }
        if tl > MAX_SEND {
            return Outcome::status(Status::INVALID_FIELD);
        }
        let bytes = match self.host_data(sqe, data, tl as usize) {
            Ok(Some((buf, _))) => buf.lock()[..tl as usize].to_vec(),
            Ok(None) => return Outcome::NeedData(tl),
            Err(status) => return Outcome::status(status),
        };
        // A message that fails the transaction still completes: the host
        // hears why from the next AUTH_Receive (Failure1), as from nvmet.
        match self.with_auth(now, |auth, peer| auth.send(&bytes, peer)) {
            Some(()) => Outcome::ok(),
            None => Outcome::status(Status::COMMAND_SEQUENCE_ERROR),
        }
    }

    pub(super) fn auth_receive(
        &mut self,
        sqe: &Sqe,
        secp: u8,
        spsp: u16,
        al: u32,
        now: Instant,
    ) -> Outcome {
        if let Some(bad) = check(secp, spsp, al) {
            return bad;
        }
        // The AL bytes go back whole, so the host may not ask for many:
        // Linux's and SPDK's ask for 4 KiB, twice the longest message.
        if al > MAX_RECEIVE {
            return Outcome::status(Status::INVALID_FIELD);
        }
        // The data must be able to go before the transaction moves on.
        if self.data_ptr(sqe) != DataPtr::Remote {
            return Outcome::status(Status::SGL_DESCRIPTOR_TYPE_INVALID);
        }
        if sqe.sgl.data_len() != al {
            return Outcome::status(Status::DATA_SGL_LENGTH_INVALID);
        }
        let Some(mut msg) = self.with_auth(now, |auth, peer| auth.receive(peer)) else {
            return Outcome::status(Status::COMMAND_SEQUENCE_ERROR);
        };
        if msg.len() > al as usize {
            return Outcome::status(Status::INTERNAL_ERROR);
        }
        // AL bytes go back, the message at their front (as nvmet sends).
        msg.resize(al as usize, 0);
        self.data_out(sqe, &msg)
    }

    /// Run `f` on this queue's transaction; `None` for a queue whose host
    /// need not authenticate. The admin queue's success admits I/O queues.
    fn with_auth<T>(
        &mut self,
        now: Instant,
        f: impl FnOnce(&mut CtrlAuth, &Peer<'_>) -> T,
    ) -> Option<T> {
        let q = self.queue.as_mut()?;
        let auth = q.auth.as_mut()?;
        let (hostnqn, subnqn) = {
            let a = lock(&q.assoc);
            (a.hostnqn.clone(), a.subnqn.clone())
        };
        let access = &self.target.config().access;
        let keys = access.keys(&hostnqn)?;
        let peer = Peer {
            hostnqn: &hostnqn,
            subnqn: &subnqn,
            key: keys.key.as_ref()?,
            ctrl_key: keys.ctrl_key.as_ref(),
            hashes: &access.hashes,
            dhgroups: &access.dhgroups,
        };
        let was = auth.authenticated();
        let out = f(auth, &peer);
        let authenticated = auth.authenticated();
        if authenticated != was {
            if authenticated {
                tracing::debug!(cntlid = q.cntlid, qid = q.qid, %hostnqn, "queue authenticated");
                // Authenticated in time: the connect timeout is done with.
                self.connect_by = None;
            }
            if q.qid == 0 {
                let mut a = lock(&q.assoc);
                if authenticated && !a.authenticated {
                    let kato = a.kato();
                    a.set_kato(kato, now);
                }
                a.authenticated = authenticated;
            }
        }
        Some(out)
    }
}

/// nvmet's checks of SECP, SPSP and the length: Invalid Field.
fn check(secp: u8, spsp: u16, len: u32) -> Option<Outcome> {
    let ok = secp == FabricsCommand::SECP_AUTH && spsp == FabricsCommand::SPSP_AUTH && len > 0;
    (!ok).then(|| Outcome::status(Status::INVALID_FIELD))
}
