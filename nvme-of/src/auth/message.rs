//! The DH-HMAC-CHAP messages, byte for byte (NVMe Base 2.0, 8.13.5; the
//! layouts Linux's `struct nvmf_auth_dhchap_*` give). Integers are little
//! endian. A message is read from the front of its buffer: an AUTH_Receive
//! buffer is the size the host allocated, longer than what it holds.

use crate::bytes::{get_u16, get_u32};

/// AUTH_Type: messages common to every protocol, and DH-HMAC-CHAP's own.
const COMMON: u8 = 0x00;
const DHCHAP: u8 = 0x01;
/// AUTH_Id of each message.
const NEGOTIATE: u8 = 0x00;
const CHALLENGE: u8 = 0x01;
const REPLY: u8 = 0x02;
const SUCCESS1: u8 = 0x03;
const SUCCESS2: u8 = 0x04;
const FAILURE2: u8 = 0xf0;
const FAILURE1: u8 = 0xf1;
/// The protocol descriptor's AUTHID for DH-HMAC-CHAP.
const AUTHID_DHCHAP: u8 = 0x01;
/// A protocol descriptor: AUTHID, reserved, HALEN, DHLEN, then 30 hash
/// identifiers and 30 group identifiers.
const DESCRIPTOR_LEN: usize = 64;
const IDS: usize = 30;
/// The one reason code: authentication failed.
const REASON_FAILED: u8 = 0x01;

/// Why a transaction failed: a failure message's reason code explanation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Explanation {
    /// The response did not match: a wrong secret.
    Failed = 0x01,
    NotUsable = 0x02,
    ConcatMismatch = 0x03,
    HashUnusable = 0x04,
    DhGroupUnusable = 0x05,
    IncorrectPayload = 0x06,
    IncorrectMessage = 0x07,
}

impl Explanation {
    fn from_code(c: u8) -> Self {
        use Explanation::*;
        [Failed, NotUsable, ConcatMismatch, HashUnusable, DhGroupUnusable, IncorrectPayload]
            .into_iter()
            .find(|e| *e as u8 == c)
            .unwrap_or(IncorrectMessage)
    }

    pub fn describe(self) -> &'static str {
        match self {
            Explanation::Failed => "authentication failed (the secrets do not match)",
            Explanation::NotUsable => "authentication protocol not usable",
            Explanation::ConcatMismatch => "secure channel concatenation mismatch",
            Explanation::HashUnusable => "no hash function both sides accept",
            Explanation::DhGroupUnusable => "no usable Diffie-Hellman group or value",
            Explanation::IncorrectPayload => "incorrect payload",
            Explanation::IncorrectMessage => "incorrect protocol message",
        }
    }
}

impl std::fmt::Display for Explanation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.describe())
    }
}

/// One message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Message {
    /// Host to controller: what it can do. `hashes` and `dhgroups` are the
    /// identifiers as sent, unknown ones included.
    Negotiate { t_id: u16, sc_c: u8, hashes: Vec<u8>, dhgroups: Vec<u8> },
    /// Controller to host: hash and group chosen, S1, C1, and the
    /// controller's public value.
    Challenge { t_id: u16, hash: u8, dhgroup: u8, seqnum: u32, challenge: Vec<u8>, dh: Vec<u8> },
    /// Host to controller: R1, and (when `seqnum` is not 0) C2 for the
    /// controller to answer; the host's public value.
    Reply { t_id: u16, seqnum: u32, response: Vec<u8>, challenge: Option<Vec<u8>>, dh: Vec<u8> },
    /// Controller to host: R1 was right; R2 if the host asked for it.
    /// `hl` is the hash length, also sent without R2.
    Success1 { t_id: u16, hl: u8, response: Option<Vec<u8>> },
    /// Host to controller: R2 was right.
    Success2 { t_id: u16 },
    /// Failure1 (from the controller) or Failure2 (from the host).
    Failure { t_id: u16, from_controller: bool, why: Explanation },
}

impl Message {
    pub fn t_id(&self) -> u16 {
        match self {
            Message::Negotiate { t_id, .. }
            | Message::Challenge { t_id, .. }
            | Message::Reply { t_id, .. }
            | Message::Success1 { t_id, .. }
            | Message::Success2 { t_id }
            | Message::Failure { t_id, .. } => *t_id,
        }
    }

    /// What a queue's reader calls it, for logs and errors.
    pub fn name(&self) -> &'static str {
        match self {
            Message::Negotiate { .. } => "Negotiate",
            Message::Challenge { .. } => "Challenge",
            Message::Reply { .. } => "Reply",
            Message::Success1 { .. } => "Success1",
            Message::Success2 { .. } => "Success2",
            Message::Failure { from_controller: true, .. } => "Failure1",
            Message::Failure { .. } => "Failure2",
        }
    }

    /// Read a message from the front of `b`; what is wrong with it is the
    /// explanation a failure message would give.
    pub fn parse(b: &[u8]) -> Result<Self, Explanation> {
        use Explanation::{IncorrectMessage, IncorrectPayload};
        if b.len() < 8 {
            return Err(IncorrectPayload);
        }
        let t_id = get_u16(b, 4);
        let hl = usize::from(b[6]);
        let at_least = |n: usize| if b.len() < n { Err(IncorrectPayload) } else { Ok(()) };
        Ok(match (b[0], b[1]) {
            (COMMON, NEGOTIATE) => {
                let napd = usize::from(b[7]);
                at_least(8 + DESCRIPTOR_LEN * napd)?;
                let d = (0..napd)
                    .map(|i| &b[8 + DESCRIPTOR_LEN * i..][..DESCRIPTOR_LEN])
                    .find(|d| d[0] == AUTHID_DHCHAP)
                    .ok_or(IncorrectPayload)?;
                let (halen, dhlen) = (usize::from(d[2]), usize::from(d[3]));
                if halen > IDS || dhlen > IDS {
                    return Err(IncorrectPayload);
                }
                let ids = &d[4..];
                Message::Negotiate {
                    t_id,
                    sc_c: b[6],
                    hashes: ids[..halen].to_vec(),
                    dhgroups: ids[IDS..IDS + dhlen].to_vec(),
                }
            }
            (DHCHAP, CHALLENGE) => {
                let dhvlen = usize::from(get_u16(b, 10));
                at_least(16 + hl + dhvlen)?;
                Message::Challenge {
                    t_id,
                    hash: b[8],
                    dhgroup: b[9],
                    seqnum: get_u32(b, 12),
                    challenge: b[16..16 + hl].to_vec(),
                    dh: b[16 + hl..16 + hl + dhvlen].to_vec(),
                }
            }
            (DHCHAP, REPLY) => {
                let dhvlen = usize::from(get_u16(b, 10));
                at_least(16 + 2 * hl + dhvlen)?;
                let cvalid = b[8] & 1 != 0;
                let seqnum = get_u32(b, 12);
                if cvalid && seqnum == 0 {
                    return Err(IncorrectPayload);
                }
                Message::Reply {
                    t_id,
                    seqnum: if cvalid { seqnum } else { 0 },
                    response: b[16..16 + hl].to_vec(),
                    challenge: cvalid.then(|| b[16 + hl..16 + 2 * hl].to_vec()),
                    dh: b[16 + 2 * hl..16 + 2 * hl + dhvlen].to_vec(),
                }
            }
            (DHCHAP, SUCCESS1) => {
                let rvalid = b[8] & 1 != 0;
                at_least(if rvalid { 16 + hl } else { 16 })?;
                Message::Success1 {
                    t_id,
                    hl: b[6],
                    response: rvalid.then(|| b[16..16 + hl].to_vec()),
                }
            }
            (DHCHAP, SUCCESS2) => {
                at_least(16)?;
                Message::Success2 { t_id }
            }
            (COMMON, id @ (FAILURE1 | FAILURE2)) => Message::Failure {
                t_id,
                from_controller: id == FAILURE1,
                why: Explanation::from_code(b[7]),
            },
            _ => return Err(IncorrectMessage),
        })
    }

    pub fn emit(&self) -> Vec<u8> {
        let header = |v: &mut Vec<u8>, ty: u8, id: u8, t_id: u16| {
            v.extend_from_slice(&[ty, id, 0, 0]);
            v.extend_from_slice(&t_id.to_le_bytes());
        };
        let mut v = Vec::new();
        match self {
            Message::Negotiate { t_id, sc_c, hashes, dhgroups } => {
                header(&mut v, COMMON, NEGOTIATE, *t_id);
                v.extend_from_slice(&[*sc_c, 1]);
                let (halen, dhlen) = (hashes.len().min(IDS), dhgroups.len().min(IDS));
                v.extend_from_slice(&[AUTHID_DHCHAP, 0, halen as u8, dhlen as u8]);
                let mut ids = [0u8; 2 * IDS];
                ids[..halen].copy_from_slice(&hashes[..halen]);
                ids[IDS..IDS + dhlen].copy_from_slice(&dhgroups[..dhlen]);
                v.extend_from_slice(&ids);
            }
            Message::Challenge { t_id, hash, dhgroup, seqnum, challenge, dh } => {
                header(&mut v, DHCHAP, CHALLENGE, *t_id);
                v.extend_from_slice(&[challenge.len() as u8, 0, *hash, *dhgroup]);
                v.extend_from_slice(&(dh.len() as u16).to_le_bytes());
                v.extend_from_slice(&seqnum.to_le_bytes());
                v.extend_from_slice(challenge);
                v.extend_from_slice(dh);
            }
            Message::Reply { t_id, seqnum, response, challenge, dh } => {
                header(&mut v, DHCHAP, REPLY, *t_id);
                v.extend_from_slice(&[response.len() as u8, 0, u8::from(challenge.is_some()), 0]);
                v.extend_from_slice(&(dh.len() as u16).to_le_bytes());
                v.extend_from_slice(&seqnum.to_le_bytes());
                v.extend_from_slice(response);
                // C2 is always there; zeros when not asked for (as Linux).
                match challenge {
                    Some(c) => v.extend_from_slice(c),
                    None => v.resize(v.len() + response.len(), 0),
                }
                v.extend_from_slice(dh);
            }
            Message::Success1 { t_id, hl, response } => {
                header(&mut v, DHCHAP, SUCCESS1, *t_id);
                v.extend_from_slice(&[*hl, 0, u8::from(response.is_some())]);
                v.resize(16, 0);
                if let Some(r) = response {
                    v.extend_from_slice(r);
                }
            }
            Message::Success2 { t_id } => {
                header(&mut v, DHCHAP, SUCCESS2, *t_id);
                v.resize(16, 0);
            }
            Message::Failure { t_id, from_controller, why } => {
                let id = if *from_controller { FAILURE1 } else { FAILURE2 };
                header(&mut v, COMMON, id, *t_id);
                v.extend_from_slice(&[REASON_FAILED, *why as u8]);
            }
        }
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn negotiate_is_72_bytes_with_group_ids_at_42() {
        let m = Message::Negotiate {
            t_id: 3,
            sc_c: 0,
            hashes: vec![1, 2, 3],
            dhgroups: vec![0, 1, 2, 3, 4, 5],
        };
        let b = m.emit();
        assert_eq!(b.len(), 72);
        assert_eq!(&b[..12], &[0, 0, 0, 0, 3, 0, 0, 1, 1, 0, 3, 6]);
        assert_eq!(&b[12..15], &[1, 2, 3]);
        assert_eq!(&b[42..48], &[0, 1, 2, 3, 4, 5]);
        assert_eq!(Message::parse(&b), Ok(m));
    }

    #[test]
    fn every_message_round_trips_with_linuxs_sizes() {
        let hl = 32;
        let msgs = [
            (
                Message::Challenge {
                    t_id: 1,
                    hash: 1,
                    dhgroup: 1,
                    seqnum: 7,
                    challenge: vec![9; hl],
                    dh: vec![4; 256],
                },
                304,
            ),
            (
                Message::Reply {
                    t_id: 1,
                    seqnum: 8,
                    response: vec![1; hl],
                    challenge: Some(vec![2; hl]),
                    dh: vec![3; 256],
                },
                336,
            ),
            (
                Message::Reply {
                    t_id: 1,
                    seqnum: 0,
                    response: vec![1; hl],
                    challenge: None,
                    dh: vec![],
                },
                80,
            ),
            (Message::Success1 { t_id: 1, hl: 32, response: Some(vec![5; hl]) }, 48),
            (Message::Success1 { t_id: 1, hl: 32, response: None }, 16),
            (Message::Success2 { t_id: 1 }, 16),
            (Message::Failure { t_id: 1, from_controller: true, why: Explanation::Failed }, 8),
        ];
        for (m, len) in msgs {
            let mut b = m.emit();
            assert_eq!(b.len(), len, "{m:?}");
            // An AUTH_Receive buffer is longer than the message.
            b.resize(4096, 0xee);
            assert_eq!(Message::parse(&b), Ok(m));
        }
    }

    #[test]
    fn short_and_unknown_messages_are_refused() {
        let c = Message::Challenge {
            t_id: 1,
            hash: 1,
            dhgroup: 1,
            seqnum: 7,
            challenge: vec![9; 32],
            dh: vec![4; 256],
        }
        .emit();
        assert_eq!(Message::parse(&c[..303]), Err(Explanation::IncorrectPayload));
        assert_eq!(Message::parse(&c[..7]), Err(Explanation::IncorrectPayload));
        let mut odd = c.clone();
        odd[1] = 0x09;
        assert_eq!(Message::parse(&odd), Err(Explanation::IncorrectMessage));
        let mut neg =
            Message::Negotiate { t_id: 0, sc_c: 0, hashes: vec![1], dhgroups: vec![0] }.emit();
        neg[10] = 31;
        assert_eq!(Message::parse(&neg), Err(Explanation::IncorrectPayload), "HALEN past its ids");
        neg[10] = 1;
        neg[7] = 2;
        assert_eq!(
            Message::parse(&neg),
            Err(Explanation::IncorrectPayload),
            "NAPD past the message"
        );
    }
}
