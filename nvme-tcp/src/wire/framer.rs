//! A resumable receive parser that cuts an NVMe/TCP byte stream into PDUs.
//!
//! It takes the stream in whatever pieces arrive (one byte at a time works),
//! gathers each header into a small buffer and validates it, then hands out
//! the PDU's data as slices of the caller's input, never copying them and
//! never computing their digest: the caller decides whether a data span is
//! copied, skipped (the NIC already placed it) or digested. Header digests
//! are always checked here.

use super::{
    COMMON_HEADER_LEN, DIGEST_LEN, Direction, Framing, MAX_HEADER_LEN, Pdu, PduError, PduRepr,
    PduType, field, flags,
};
use nvme_of::bytes::get_u32;

/// What the framer found in the input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event<'a> {
    /// A whole, valid PDU header. Data events for this PDU follow, then `End`.
    Header(PduRepr),
    /// Data of the current PDU: `bytes` sit at `offset` within its data.
    Data { offset: u32, bytes: &'a [u8] },
    /// The current PDU is complete. `data_digest` is the DDGST received, if
    /// the PDU has one and its bytes were not skipped.
    End { data_digest: Option<u32> },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Gathering the header; `need` grows from the common header to HLEN + HDGST.
    Header {
        need: usize,
    },
    Pad {
        left: usize,
    },
    Data {
        offset: u32,
    },
    Digest {
        have: usize,
    },
    End,
}

/// The receive-side PDU parser of one connection.
#[derive(Debug, Clone)]
pub struct Framer {
    accepts: Direction,
    framing: Framing,
    state: State,
    header: [u8; MAX_HEADER_LEN + DIGEST_LEN],
    have: usize,
    repr: Option<PduRepr>,
    digest: [u8; DIGEST_LEN],
    digest_lost: bool,
}

impl Framer {
    /// A framer for PDUs travelling `accepts`, before digests are negotiated.
    pub fn new(accepts: Direction) -> Self {
        Self {
            accepts,
            framing: Framing::INITIAL,
            state: State::Header { need: COMMON_HEADER_LEN },
            header: [0; MAX_HEADER_LEN + DIGEST_LEN],
            have: 0,
            repr: None,
            digest: [0; DIGEST_LEN],
            digest_lost: false,
        }
    }

    /// Framing in force from the next PDU on (after ICReq/ICResp).
    pub fn set_framing(&mut self, framing: Framing) {
        self.framing = framing;
    }

    pub fn framing(&self) -> Framing {
        self.framing
    }

    /// The PDU being received, once its header is complete.
    pub fn current(&self) -> Option<&PduRepr> {
        self.repr.as_ref()
    }

    /// The header bytes gathered so far: what a TermReq quotes back.
    pub fn header_bytes(&self) -> &[u8] {
        &self.header[..self.have]
    }

    /// True between PDUs: the next byte is the first of a PDU header.
    pub fn at_pdu_start(&self) -> bool {
        matches!(self.state, State::Header { .. }) && self.have == 0
    }

    /// Bytes left before the next PDU header, once the current header has
    /// been parsed (0 while an `End` is pending). `None` inside a header.
    pub fn remaining(&self) -> Option<u64> {
        let repr = self.repr.as_ref()?;
        let dd = repr.ddgst_len() as u64;
        Some(match self.state {
            State::Header { .. } => return None,
            State::Pad { left } => left as u64 + u64::from(repr.data_len) + dd,
            State::Data { offset } => u64::from(repr.data_len - offset) + dd,
            State::Digest { have } => (DIGEST_LEN - have) as u64,
            State::End => 0,
        })
    }

    /// Forget any partial PDU: the next byte is taken as a PDU's first.
    pub fn reset(&mut self) {
        self.state = State::Header { need: COMMON_HEADER_LEN };
        self.have = 0;
        self.repr = None;
        self.digest_lost = false;
    }

    /// Pass over `n` bytes of the current PDU whose contents were lost. Works
    /// only after the header and up to the PDU's end; returns false (and
    /// changes nothing) when the bytes would reach into the next header.
    pub fn skip(&mut self, n: u64) -> bool {
        match self.remaining() {
            Some(left) if n <= left => {}
            _ => return false,
        }
        let mut n = n;
        while n > 0 {
            let Some(repr) = self.repr else { return false };
            match self.state {
                State::Pad { left } => {
                    let k = (left as u64).min(n);
                    n -= k;
                    self.state = State::Pad { left: left - k as usize };
                    self.after_pad(repr);
                }
                State::Data { offset } => {
                    let k = u64::from(repr.data_len - offset).min(n);
                    n -= k;
                    self.state = State::Data { offset: offset + k as u32 };
                    self.after_data(repr);
                }
                State::Digest { have } => {
                    let k = ((DIGEST_LEN - have) as u64).min(n);
                    n -= k;
                    self.digest_lost = true;
                    self.state = State::Digest { have: have + k as usize };
                    if have + k as usize == DIGEST_LEN {
                        self.state = State::End;
                    }
                }
                State::Header { .. } | State::End => return false,
            }
        }
        // A gap that touches the data means the data digest cannot be checked.
        self.digest_lost = true;
        true
    }

    fn after_pad(&mut self, repr: PduRepr) {
        if self.state == (State::Pad { left: 0 }) {
            self.state = State::Data { offset: 0 };
            self.after_data(repr);
        }
    }

    fn after_data(&mut self, repr: PduRepr) {
        if self.state == (State::Data { offset: repr.data_len }) {
            self.state = if repr.ddgst { State::Digest { have: 0 } } else { State::End };
        }
    }

    /// Take bytes from `input`. Returns how many were consumed and the event
    /// they completed, if any. `(n, None)` means all of `input` was consumed
    /// and more is needed; call again while events come back, even with an
    /// empty input (a PDU without data ends without consuming bytes).
    pub fn next<'a>(&mut self, input: &'a [u8]) -> Result<(usize, Option<Event<'a>>), PduError> {
        let mut used = 0;
        loop {
            let rest = &input[used..];
            match self.state {
                State::Header { need } => {
                    let k = (need - self.have).min(rest.len());
                    self.header[self.have..self.have + k].copy_from_slice(&rest[..k]);
                    self.have += k;
                    used += k;
                    if self.have < need {
                        return Ok((used, None));
                    }
                    if need == COMMON_HEADER_LEN {
                        self.state = State::Header { need: self.header_need()? };
                        continue;
                    }
                    let repr =
                        PduRepr::parse(&Pdu::new_unchecked(&self.header[..need]), self.framing)?;
                    self.repr = Some(repr);
                    self.digest_lost = false;
                    self.state = State::Pad { left: usize::from(repr.pad) };
                    self.after_pad(repr);
                    return Ok((used, Some(Event::Header(repr))));
                }
                State::Pad { left } => {
                    let k = left.min(rest.len());
                    used += k;
                    self.state = State::Pad { left: left - k };
                    if let Some(repr) = self.repr {
                        self.after_pad(repr);
                    }
                    if self.state == (State::Pad { left: left - k }) {
                        return Ok((used, None));
                    }
                }
                State::Data { offset } => {
                    let Some(repr) = self.repr else { return Ok((used, None)) };
                    let k = ((repr.data_len - offset) as usize).min(rest.len());
                    if k == 0 {
                        return Ok((used, None));
                    }
                    self.state = State::Data { offset: offset + k as u32 };
                    self.after_data(repr);
                    used += k;
                    return Ok((used, Some(Event::Data { offset, bytes: &rest[..k] })));
                }
                State::Digest { have } => {
                    let k = (DIGEST_LEN - have).min(rest.len());
                    self.digest[have..have + k].copy_from_slice(&rest[..k]);
                    used += k;
                    if have + k < DIGEST_LEN {
                        self.state = State::Digest { have: have + k };
                        return Ok((used, None));
                    }
                    self.state = State::End;
                }
                State::End => {
                    let ddgst = self.repr.is_some_and(|r| r.ddgst) && !self.digest_lost;
                    let data_digest = ddgst.then(|| get_u32(&self.digest, 0));
                    self.reset();
                    return Ok((used, Some(Event::End { data_digest })));
                }
            }
        }
    }

    /// From the common header alone: the type may travel this way, FLAGS
    /// holds only the type's bits and HDGSTF agrees with the digests in
    /// force, HLEN is the type's. Returns how many header bytes to gather.
    fn header_need(&self) -> Result<usize, PduError> {
        let b = &self.header;
        let t = b[field::TYPE];
        let ty = PduType::from_u8(t).filter(|ty| ty.direction() == self.accepts);
        let ty = ty.ok_or(PduError::BadType(t))?;
        let f = b[field::FLAGS];
        let hdgst = f & flags::HDGSTF != 0;
        if f & !ty.valid_flags() != 0 || (ty.has_digests() && hdgst != self.framing.digests.header)
        {
            return Err(PduError::BadFlags { pdu_type: ty, flags: f });
        }
        let hlen = b[field::HLEN];
        if hlen != ty.hlen() {
            return Err(PduError::BadHlen { pdu_type: ty, hlen });
        }
        Ok(usize::from(hlen) + if hdgst { DIGEST_LEN } else { 0 })
    }
}
