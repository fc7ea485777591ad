//! The computations both sides make (NVMe Base 2.0, 8.13.5.5): the
//! challenge augmented with the Diffie-Hellman secret, and the responses.

use super::{Hash, crypto};
use zeroize::Zeroizing;

/// Which side answers: the host (R1) or the controller (R2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Responder {
    Host,
    Controller,
}

/// The challenge a response answers: as sent with the NULL group, else
/// HMAC(H(g^xy), C), the secret as long as the group's prime.
pub(crate) fn augment(hash: Hash, shared: Option<&[u8]>, challenge: &[u8]) -> Zeroizing<Vec<u8>> {
    match shared {
        None => Zeroizing::new(challenge.to_vec()),
        Some(z) => crypto::hmac(hash, &crypto::digest(hash, &[z]), &[challenge]),
    }
}

/// R1 or R2: HMAC over the (augmented) challenge, the sequence number,
/// the transaction, the secure channel byte (0: no concatenation), who
/// answers, and the NQNs (the host's and the subsystem's), the answerer's
/// first.
pub(crate) fn response(
    hash: Hash,
    key: &[u8],
    challenge: &[u8],
    seqnum: u32,
    t_id: u16,
    who: Responder,
    (hostnqn, subnqn): (&str, &str),
) -> Zeroizing<Vec<u8>> {
    let (label, first, second): (&[u8], _, _) = match who {
        Responder::Host => (b"HostHost", hostnqn, subnqn),
        Responder::Controller => (b"Controller", subnqn, hostnqn),
    };
    crypto::hmac(
        hash,
        key,
        &[
            challenge,
            &seqnum.to_le_bytes(),
            &t_id.to_le_bytes(),
            &[0],
            label,
            first.as_bytes(),
            &[0],
            second.as_bytes(),
        ],
    )
}

/// A sequence number for a new challenge: never 0, which says "none".
pub(crate) fn seqnum() -> Result<u32, getrandom::Error> {
    loop {
        let b = crypto::random(4)?;
        let n = u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
        if n != 0 {
            return Ok(n);
        }
    }
}
