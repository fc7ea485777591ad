//! Transmit: the records the stack hands down in plaintext, encrypted by
//! the NIC.
//!
//! Software frames each record (header, content, content type, sixteen
//! bytes left for the tag); the stack's send ring keeps that plaintext.
//! New bytes are walked record by record and encrypted as they pass, the
//! tag computed after the body's last byte and written where it falls. A
//! record stays known until the peer acknowledges its last byte, so that
//! a retransmitted segment is encrypted again from its place (counter
//! mode alone) and gets the tag it carried the first time, as
//! `tls_device` re-encrypts from the records it keeps.
//!
//! The layer inside (a ULP DDP flow, if one was added) sees each record's
//! content first, at its own stream offsets: it writes the data digests
//! left to it into the plaintext, which is then encrypted; on a
//! retransmission it puts them back, and the bytes are encrypted again.
//!
//! Once the driver takes the direction back (`tls_dev_del`), new bytes
//! are the driver's again; the records already sent stay the NIC's until
//! acknowledged.
//!
//! It must never let plaintext out: a stream that stops being records
//! (a ULP's bug), a cipher that fails, or old bytes of records it no
//! longer holds go out as zeros, which the peer refuses.

use super::aead::Aead;
use super::rx::Inner;
use crate::flow::Env;
use std::collections::VecDeque;
use ulp_ddp::TlsStart;
use ulp_ddp::tls::record::{self, HEADER, TAG};

/// A record the NIC encrypted, kept until acknowledged.
#[derive(Debug, Clone, Copy)]
struct Sent {
    seq: u64,
    /// The layer inside's offset of its first content byte.
    inner: u64,
    body: u64,
    tag_at: u64,
    end: u64,
    /// Computed once the body's last byte went by.
    tag: Option<[u8; TAG]>,
}

#[derive(Debug)]
enum State {
    Header {
        start: u64,
        buf: [u8; HEADER],
        got: usize,
    },
    /// Inside the newest record of `sent`.
    Body,
    /// The stream stopped being records at this offset.
    Poisoned(u64),
}

pub(crate) struct TxRecords {
    aead: Aead,
    /// Stream offset of the next new byte.
    pub next: u64,
    seq: u64,
    /// The layer inside's offset of the next record's content.
    inner_at: u64,
    state: State,
    sent: VecDeque<Sent>,
    /// Where the offload started, and before which offset records were
    /// acknowledged and forgotten: no byte between may go out again.
    start: u64,
    forgotten: u64,
    /// Taken back at this offset: bytes from here on are not ours.
    closed: Option<u64>,
}

impl TxRecords {
    pub fn new(aead: Aead, start: TlsStart, seq: u64) -> Self {
        Self {
            aead,
            next: start.tcp,
            seq,
            inner_at: start.inner,
            state: State::Header { start: start.tcp, buf: [0; HEADER], got: 0 },
            sent: VecDeque::new(),
            start: start.tcp,
            forgotten: start.tcp,
            closed: None,
        }
    }

    /// The peer holds everything before `ack` (no further than what was
    /// sent: an acknowledgment of more is not one the stack takes).
    /// Returns the layer inside's offset before which the peer holds
    /// every byte of content.
    pub fn acked(&mut self, ack: u64) -> u64 {
        let ack = ack.min(self.next);
        while self.sent.front().is_some_and(|s| s.end <= ack) {
            if let Some(s) = self.sent.pop_front() {
                self.forgotten = s.end;
            }
        }
        self.sent.front().map_or(self.inner_at, |s| s.inner)
    }

    /// The driver takes the direction back: bytes from here on are its.
    pub fn close(&mut self) {
        self.closed.get_or_insert(self.next);
    }

    /// Whether nothing the NIC sealed waits for an acknowledgment.
    pub fn drained(&self) -> bool {
        self.sent.is_empty()
    }

    pub fn closed(&self) -> bool {
        self.closed.is_some()
    }

    /// An outgoing segment, `payload` at stream offset `off`, encrypted
    /// where it carries records. Whether any byte changed.
    pub fn segment(
        &mut self,
        off: u64,
        payload: &mut [u8],
        inner: &mut Inner,
        env: &mut Env,
    ) -> bool {
        let end = off + payload.len() as u64;
        let mut edited = false;
        if off < self.next {
            let old = (self.next.min(end) - off) as usize;
            edited |= self.again(off, &mut payload[..old], inner, env);
            env.stats.tx_tls_ooo += 1;
        }
        if end <= self.next || self.closed.is_some() {
            return edited;
        }
        if off > self.next {
            // Our own stream has no gaps; if it seems to, nothing of it
            // can be trusted to be records any more.
            self.state = State::Poisoned(self.next);
        }
        let at = self.next.max(off);
        self.next = end;
        let from = (at - off) as usize;
        let before = env.stats.tx_tls_encrypted_bytes;
        edited |= self.walk(at, &mut payload[from..], inner, env);
        if env.stats.tx_tls_encrypted_bytes > before {
            env.stats.tx_tls_encrypted_packets += 1;
        }
        edited
    }

    /// Encrypt again the old bytes `old`, at stream offset `off`.
    fn again(&mut self, off: u64, old: &mut [u8], inner: &mut Inner, env: &mut Env) -> bool {
        let end = off + old.len() as u64;
        let mut edited = false;
        // Records acknowledged and forgotten: whatever sends their bytes
        // again, it is not their plaintext that goes.
        let (from, to) = (self.start.max(off), self.forgotten.min(end));
        if from < to {
            old[(from - off) as usize..(to - off) as usize].fill(0);
            edited = true;
        }
        for s in self.sent.iter().filter(|s| s.body < end && s.end > off) {
            let (a, b) = (s.body.max(off), s.tag_at.min(end));
            if a < b {
                let buf = &mut old[(a - off) as usize..(b - off) as usize];
                s.inside(a, buf, inner, env);
                if !self.aead.keystream(s.seq, (a - s.body) as usize, buf) {
                    buf.fill(0);
                }
                edited = true;
            }
            let (a, b) = (s.tag_at.max(off), s.end.min(end));
            if a < b {
                // A tag's bytes went out once, so it was computed then.
                let Some(tag) = s.tag else { continue };
                let t = &tag[(a - s.tag_at) as usize..(b - s.tag_at) as usize];
                old[(a - off) as usize..(b - off) as usize].copy_from_slice(t);
                edited = true;
            }
        }
        if let State::Poisoned(from) = self.state
            && from < end
        {
            old[(from.max(off) - off) as usize..].fill(0);
            edited = true;
        }
        edited
    }

    fn walk(&mut self, at: u64, data: &mut [u8], inner: &mut Inner, env: &mut Env) -> bool {
        let mut pos = 0;
        let mut edited = false;
        while pos < data.len() {
            let here = at + pos as u64;
            match &mut self.state {
                State::Poisoned(_) => {
                    data[pos..].fill(0);
                    return true;
                }
                State::Header { start, buf, got } => {
                    let k = (HEADER - *got).min(data.len() - pos);
                    buf[*got..*got + k].copy_from_slice(&data[pos..pos + k]);
                    *got += k;
                    pos += k;
                    if *got < HEADER {
                        continue;
                    }
                    let (start, header) = (*start, *buf);
                    let body = start + HEADER as u64;
                    match record::plausible(&header) {
                        Some(len) if self.aead.begin(self.seq, &header) => {
                            let end = body + len as u64;
                            let tag_at = end - TAG as u64;
                            let (seq, inner) = (self.seq, self.inner_at);
                            self.sent.push_back(Sent { seq, inner, body, tag_at, end, tag: None });
                            self.seq += 1;
                            self.inner_at += (len - 1 - TAG) as u64;
                            self.state = State::Body;
                        }
                        _ => {
                            tracing::warn!(at = start, "not a TLS record: sending zeros from here");
                            // The header's bytes in this segment too.
                            let from = (start.max(at) - at) as usize;
                            self.state = State::Poisoned(start);
                            data[from..pos].fill(0);
                            edited = true;
                        }
                    }
                }
                State::Body => {
                    let Some(s) = self.sent.back_mut().filter(|s| s.end > here) else {
                        // No record in hand: nothing here can be sealed.
                        self.state = State::Poisoned(here);
                        continue;
                    };
                    if here < s.tag_at {
                        let k = ((s.tag_at - here) as usize).min(data.len() - pos);
                        s.inside(here, &mut data[pos..pos + k], inner, env);
                        if !self.aead.update(&mut data[pos..pos + k]) {
                            // Never the plaintext instead.
                            tracing::warn!(at = here, "the cipher failed: sending zeros from here");
                            self.state = State::Poisoned(here);
                            continue;
                        }
                        edited = true;
                        env.stats.tx_tls_encrypted_bytes += k as u64;
                        pos += k;
                        continue;
                    }
                    let tag = match s.tag {
                        Some(t) => t,
                        None => {
                            let t = self.aead.seal().unwrap_or([0; TAG]);
                            s.tag = Some(t);
                            t
                        }
                    };
                    let t = (here - s.tag_at) as usize;
                    let k = (TAG - t).min(data.len() - pos);
                    data[pos..pos + k].copy_from_slice(&tag[t..t + k]);
                    edited = true;
                    pos += k;
                    if t + k == TAG {
                        env.stats.tx_tls_records += 1;
                        let start = s.end;
                        self.state = State::Header { start, buf: [0; HEADER], got: 0 };
                    }
                }
            }
        }
        edited
    }
}

impl Sent {
    /// Body bytes `buf` at stream offset `at`, in the clear: their
    /// content through the layer inside, which writes the digests left
    /// to it (or, sent before, writes them again).
    fn inside(&self, at: u64, buf: &mut [u8], inner: &mut Inner, env: &mut Env) {
        let Some(flow) = inner.as_mut() else { return };
        let n = ((self.tag_at - 1).saturating_sub(at) as usize).min(buf.len());
        if n > 0 && flow.tx_wanted(env.active) {
            flow.tx_segment(self.inner + (at - self.body), &mut buf[..n], env);
        }
    }
}
