//! Receive: the records of one connection as the NIC follows them.
//!
//! In-sequence segments are walked record by record. A record the NIC
//! meets from its header on, knowing its sequence number, is decrypted in
//! the segment as it passes (the stack then holds plaintext) and hinted
//! `DECRYPTED`; when its tag is in and verifies, the tag's bytes are
//! hinted `TAG_OK`, and the ULP may take the record as it is. A record that
//! fails its tag, or that a gap cut, is left with whatever was decrypted
//! of it, hinted as such, for software to encrypt back and open itself.
//!
//! A gap inside a record's body is stepped over by its length; a gap over
//! a header loses the records. The NIC then hunts for a header that a
//! second one follows at its length. If it knows where the lost header
//! was and what its record was numbered, and one record fits between, it
//! guesses that one did and goes on (the header it found is of the record
//! after): the guess is proven or refuted by that record's tag, and noted
//! in the mailbox meanwhile, so that software can undo what it decrypted
//! should it be wrong. Where the second header lies in a later segment
//! (always, with full-size records in jumbo frames), the NIC does not
//! wait for it: it guesses on the one header, but decrypts that record in
//! a copy of its own, leaving the stream as it came, for a header no
//! second one vouched for may be ciphertext that looks like one, whose
//! decryption software could not undo. The layer inside is given a
//! guessed record once the guess is proven, from a copy the NIC holds
//! until then. Otherwise it asks the ULP to confirm the header,
//! follows the chain meanwhile without decrypting, and starts again at
//! the header after the confirmation, with the sequence number the ULP
//! gave.
//!
//! Bytes that come a second time (a retransmission the stack may take in
//! place of a copy it dropped) are decrypted again wherever the first
//! copy was, so that the stack's bytes always match the hints.
//!
//! The layer inside (a ULP DDP flow, if one was added) gets the content
//! of every record as it is decrypted, at its own stream offsets, which
//! count content bytes: it places and digests there as it would in the
//! clear, and what it kept out of the stack's ring is noted by TCP
//! offset as fragments, for software that must open such a record
//! itself. A record is taken to be unpadded application data until its
//! last byte says otherwise; if it does, the layer inside is dropped, its
//! hints for that record withdrawn, and the record not vouched for.
//!
//! It must never hint a byte it did not decrypt, nor a tag it did not
//! verify.

use super::aead::Aead;
use crate::flow::{Env, Socket};
use std::collections::VecDeque;
use ulp_ddp::tls::record::{self, APPLICATION_DATA, HEADER, TAG};
use ulp_ddp::{Caps, HintFlags, SkCtx, TlsStart};

/// Fragments one segment may leave at most (a placed run per
/// scatter-gather entry, a few PDUs).
const FRAGS_PER_SEGMENT: usize = 256;

/// The layer inside, if any.
pub(crate) type Inner = Option<Box<dyn Socket>>;

/// Record starts remembered while a resync waits for confirmation; the
/// request stands until the record it names falls out of them.
const CHAIN_MEMORY: usize = 64;
/// Decrypted records remembered for their bytes coming again, at most
/// (acknowledgments prune them long before); past it, no more records
/// are decrypted until some are acknowledged.
const DECRYPTED_MEMORY: usize = 1 << 16;

#[derive(Debug)]
enum State {
    /// A header starts at `start`; `got` of its bytes are in.
    Header {
        start: u64,
        buf: [u8; HEADER],
        got: usize,
    },
    Body(Record),
    /// Records lost; hunting. `candidate` is where a header must be, the
    /// one after the plausible header that came before it.
    Lost {
        candidate: Option<(u64, u64)>,
    },
}

#[derive(Debug)]
struct Record {
    body: u64,
    tag_at: u64,
    end: u64,
    seq: u64,
    /// Decrypted as its bytes come, by its sequence number.
    decrypting: bool,
    /// Every body byte came in order so far: the tag can be checked.
    whole: bool,
    /// The layer inside's offset of the first content byte, if known.
    inner: Option<u64>,
    /// Not plain application data after all: not vouched for.
    odd: bool,
    /// Numbered by a guess its tag is to prove.
    guessed: bool,
    /// Decrypted in a copy only (into `held`), the stream left as it
    /// came: a guess on a header no second one vouched for.
    shadow: bool,
    /// A guessed record's content, decrypted, held for the layer inside
    /// until the tag proves the guess.
    held: Option<Held>,
    tag: [u8; TAG],
}

/// The content of a guessed record, whole so far, which the layer inside
/// counts from `inner`.
#[derive(Debug)]
struct Held {
    inner: u64,
    content: Vec<u8>,
}

/// Where records were lost: the header that went missing at `start`, of
/// the record numbered `seq`, whose content the layer inside counts from
/// `inner`. With `odd`, those numbers rest on a guess still unproven, of
/// a record that looked padded or not data: true if the guess is.
#[derive(Debug, Clone, Copy)]
struct Missed {
    start: u64,
    seq: u64,
    inner: Option<u64>,
    odd: bool,
}

/// Bytes `[from, to)` of the body of record `seq` (which starts at
/// `body` and ends at `end`) were decrypted in the stack's copy.
#[derive(Debug, Clone, Copy)]
struct Decrypted {
    seq: u64,
    body: u64,
    from: u64,
    to: u64,
    end: u64,
}

pub(crate) struct RxRecords {
    aead: Aead,
    /// Stream offset of the next byte in sequence.
    pub next: u64,
    state: State,
    /// Sequence number of the record whose header comes next; `None`
    /// until a resync is confirmed.
    seq: Option<u64>,
    /// The layer inside's offset of the next record's content; `None`
    /// with `seq`.
    inner_at: Option<u64>,
    /// Records begun since the resync request: start, body length.
    chain: VecDeque<(u64, usize)>,
    /// The record start the standing resync request names.
    asked: Option<u64>,
    decrypted: VecDeque<Decrypted>,
    /// The layer inside could not follow a record: it gets no more.
    inner_off: bool,
    /// While lost: where, if known.
    missed: Option<Missed>,
    /// The record whose header comes next is numbered by a guess.
    guessing: bool,
    /// A record numbered by the guess still to be proven looked padded or
    /// not data: true if the guess is.
    guessed_odd: bool,
    /// The hunt's last find is a header with no second one after it yet.
    unchained: bool,
    /// The hunt's last find followed a header that came before it, here.
    chain_from: Option<u64>,
}

impl RxRecords {
    pub fn new(aead: Aead, start: TlsStart, seq: u64) -> Self {
        Self {
            aead,
            next: start.tcp,
            state: State::Header { start: start.tcp, buf: [0; HEADER], got: 0 },
            seq: Some(seq),
            inner_at: Some(start.inner),
            chain: VecDeque::new(),
            asked: None,
            decrypted: VecDeque::new(),
            inner_off: false,
            missed: None,
            guessing: false,
            guessed_odd: false,
            unchained: false,
            chain_from: None,
        }
    }

    /// Bytes before `seen` went by before the offload began: start lost
    /// there, to find records again in what comes after.
    pub fn lost_until(&mut self, seen: u64) {
        self.next = seen;
        self.lose();
    }

    #[cfg(test)]
    pub fn synced(&self) -> bool {
        self.seq.is_some() && !matches!(self.state, State::Lost { .. })
    }

    /// An in-order or old segment, `payload` at stream offset `off`,
    /// which the NIC may rewrite.
    pub fn segment(
        &mut self,
        off: u64,
        payload: &mut [u8],
        inner: &mut Inner,
        ctx: &SkCtx,
        env: &mut Env,
    ) {
        let end = off + payload.len() as u64;
        if off < self.next {
            let old = (self.next.min(end) - off) as usize;
            self.again(off, &mut payload[..old]);
        }
        if end <= self.next {
            return;
        }
        let at = self.next.max(off);
        if off > self.next {
            self.gap(off - self.next);
        }
        self.next = end;
        let from = (at - off) as usize;
        let before = env.stats.rx_tls_decrypted_bytes;
        self.walk(at, &mut payload[from..], inner, ctx, env);
        if env.stats.rx_tls_decrypted_bytes > before {
            env.stats.rx_tls_decrypted_packets += 1;
        }
    }

    /// An in-order segment the NIC may not rewrite: its records go up as
    /// they came, and the NIC steps over them as over a gap.
    pub fn pass(&mut self, off: u64, len: usize) {
        let end = off + len as u64;
        if end > self.next {
            self.gap(end - self.next);
            self.next = end;
        }
    }

    /// The ULP confirmed that record `rec_seq` starts at `at`.
    pub fn resync(&mut self, at: TlsStart, rec_seq: u64) -> bool {
        if self.seq.is_some() || matches!(self.state, State::Lost { .. }) {
            return false;
        }
        let Some(i) = self.chain.iter().position(|&(s, _)| s == at.tcp) else { return false };
        // The records begun since `at`, it included, numbered on, their
        // content counted on.
        let since = self.chain.range(i..);
        self.seq = Some(rec_seq + since.len() as u64);
        self.inner_at = Some(at.inner + since.map(|&(_, len)| content(len)).sum::<u64>());
        self.chain.clear();
        true
    }

    /// Our acknowledgment: the stack holds everything before `ack`, and
    /// takes no copy of it again.
    pub fn acked(&mut self, ack: u64) {
        while self.decrypted.front().is_some_and(|d| d.end <= ack) {
            self.decrypted.pop_front();
        }
    }

    fn lose(&mut self) {
        self.state = State::Lost { candidate: None };
        self.seq = None;
        self.inner_at = None;
        self.chain.clear();
        self.missed = None;
        self.guessing = false;
        self.guessed_odd = false;
        self.unchained = false;
        self.chain_from = None;
    }

    /// Lost at a header that started at `start`, the record numbered
    /// `seq` if known: the hunt may guess from there. `odd`: the record
    /// before, numbered by a guess, looked padded or not data.
    fn lose_header(&mut self, start: u64, odd: bool) {
        let odd = odd || self.guessed_odd;
        let missed = self.seq.map(|seq| Missed { start, seq, inner: self.inner_at, odd });
        self.lose();
        self.missed = missed;
    }

    /// `n` bytes from `next` on never came in order.
    fn gap(&mut self, n: u64) {
        let to = self.next + n;
        tracing::trace!(from = self.next, to, state = ?self.state, "gap");
        match &mut self.state {
            State::Body(r) if to < r.end => {
                // The record can no longer be vouched for, but its bytes
                // after the gap are still decrypted where they are (counter
                // mode needs only their place), for the layer inside and
                // for software, which encrypts them back to open it.
                r.whole = false;
                // With a hole, a guess cannot be proven: nothing to give.
                r.held = None;
                if r.decrypting && self.decrypted.len() < DECRYPTED_MEMORY {
                    let (seq, body, end) = (r.seq, r.body, r.end);
                    let from = to.min(r.tag_at);
                    self.decrypted.push_back(Decrypted { seq, body, from, to: from, end });
                } else {
                    r.decrypting = false;
                }
            }
            State::Body(r) if to == r.end => {
                // A guess its tag could not prove: the next record's tag
                // is to prove it too.
                self.guessing = r.guessed;
                self.guessed_odd |= r.guessed && r.odd;
                self.state = State::Header { start: to, buf: [0; HEADER], got: 0 };
            }
            State::Body(r) => {
                let (start, odd) = (r.end, r.guessed && r.odd);
                self.lose_header(start, odd);
            }
            State::Header { start, .. } => {
                let start = *start;
                self.lose_header(start, false);
            }
            State::Lost { candidate } => {
                if candidate.is_some_and(|(c, _)| c < to) {
                    *candidate = None;
                }
            }
        }
    }

    /// Decrypt again the bytes of `old` (at stream offset `off`) that
    /// were decrypted when they first came.
    fn again(&mut self, off: u64, old: &mut [u8]) {
        let end = off + old.len() as u64;
        for d in self.decrypted.iter().filter(|d| d.from < end && d.to > off) {
            let (a, b) = (d.from.max(off), d.to.min(end));
            let buf = &mut old[(a - off) as usize..(b - off) as usize];
            let ok = self.aead.keystream(d.seq, (a - d.body) as usize, buf);
            debug_assert!(ok, "the keystream of a record decrypted before");
        }
    }

    fn walk(&mut self, at: u64, data: &mut [u8], inner: &mut Inner, ctx: &SkCtx, env: &mut Env) {
        let mut pos = 0;
        while pos < data.len() {
            let here = at + pos as u64;
            match &mut self.state {
                State::Lost { .. } => {
                    let Some(p) = self.hunt(here, &data[pos..]) else { return };
                    pos += p;
                    let start = at + pos as u64;
                    let missed = self.missed.take();
                    // The chain found starts here, or at a header before
                    // this one whose length led here.
                    let first = self.chain_from.take().filter(|&f| f < start).unwrap_or(start);
                    self.state = State::Header { start, buf: [0; HEADER], got: 0 };
                    self.chain.clear();
                    // One record between the lost header and the chain?
                    // (A chain found across segments never is: the hunt
                    // guesses on its first header rather than wait.)
                    if let Some(m) = missed
                        && one_record(m.start, first)
                    {
                        let framing = (HEADER + 1 + TAG) as u64;
                        self.seq = Some(m.seq + 1);
                        self.inner_at = m.inner.map(|i| i + (start - m.start) - framing);
                        self.guessing = true;
                        self.guessed_odd = m.odd;
                        env.stats.rx_tls_resync_guess += 1;
                        continue;
                    }
                    self.asked = Some(start);
                    ctx.request_resync(start);
                    env.stats.rx_tls_resync_req += 1;
                }
                State::Header { start, buf, got } => {
                    let k = (HEADER - *got).min(data.len() - pos);
                    buf[*got..*got + k].copy_from_slice(&data[pos..pos + k]);
                    *got += k;
                    pos += k;
                    if *got == HEADER {
                        let (start, header) = (*start, *buf);
                        match record::plausible(&header) {
                            Some(len) => self.begin(start, &header, len, ctx, env),
                            // Not a record: lost, and hunting from here.
                            None if self.guessing => self.lose(),
                            None => self.lose_header(start, false),
                        }
                    }
                }
                State::Body(r) => {
                    if here < r.tag_at {
                        let k = ((r.tag_at - here) as usize).min(data.len() - pos);
                        if r.decrypting {
                            let buf = &mut data[pos..pos + k];
                            let ok = match r.whole {
                                true => self.aead.update(buf),
                                false => self.aead.keystream(r.seq, (here - r.body) as usize, buf),
                            };
                            if ok && ctx.push_hint(here, here + k as u64, HintFlags::DECRYPTED) {
                                env.stats.rx_tls_decrypted_bytes += k as u64;
                                if let Some(d) = self.decrypted.back_mut() {
                                    d.to = here + k as u64;
                                }
                                if !self.inner_off && r.inside(here, buf, inner, ctx, env) {
                                    self.inner_off = true;
                                }
                            } else {
                                // Unhinted bytes must reach the stack as they came.
                                if ok && let Some(d) = self.decrypted.back() {
                                    self.aead.keystream(d.seq, (here - d.body) as usize, buf);
                                }
                                r.decrypting = false;
                                r.held = None;
                            }
                        }
                        if r.shadow {
                            let mut copy = data[pos..pos + k].to_vec();
                            if self.aead.update(&mut copy) {
                                let n = ((r.tag_at - 1).saturating_sub(here) as usize).min(k);
                                r.odd |= n < k && copy[n] != APPLICATION_DATA;
                                if let Some(h) = &mut r.held {
                                    h.content.extend_from_slice(&copy[..n]);
                                }
                            } else {
                                (r.shadow, r.held) = (false, None);
                            }
                        }
                        pos += k;
                        continue;
                    }
                    let k = ((r.end - here) as usize).min(data.len() - pos);
                    let t = (here - r.tag_at) as usize;
                    r.tag[t..t + k].copy_from_slice(&data[pos..pos + k]);
                    pos += k;
                    if here + (k as u64) < r.end {
                        continue;
                    }
                    let verified =
                        (r.decrypting || r.shadow) && r.whole && self.aead.verify(&r.tag);
                    // Software opens a record decrypted in a copy itself.
                    if verified && !r.shadow {
                        if !r.odd && ctx.push_hint(r.tag_at, r.end, HintFlags::TAG_OK) {
                            env.stats.rx_tls_decrypted_bytes += TAG as u64;
                            env.stats.rx_tls_records += 1;
                        }
                    } else if r.decrypting && r.whole && !r.guessed {
                        env.stats.rx_tls_auth_fail += 1;
                    }
                    // Held whole, or not at all.
                    let held =
                        r.held.take().filter(|h| h.content.len() as u64 == r.tag_at - 1 - r.body);
                    let (start, guessed, odd) = (r.end, r.guessed, r.odd);
                    self.state = State::Header { start, buf: [0; HEADER], got: 0 };
                    if guessed {
                        match verified {
                            true => {
                                env.stats.rx_tls_resync_guess_ok += 1;
                                // Proven, and padded or not data: the
                                // layer inside counted content that is
                                // not, and can follow no further.
                                self.inner_off |= odd | std::mem::take(&mut self.guessed_odd);
                                if let (false, Some(h), Some(flow)) =
                                    (self.inner_off, held, inner.as_mut())
                                {
                                    // Proven plaintext: the layer inside
                                    // takes it now, headers and all. Its
                                    // bytes went up in the ring already, so
                                    // what it places it copies.
                                    let zero_copy = std::mem::take(&mut env.placed.zero_copy);
                                    flow.rx_segment(h.inner, &h.content, env);
                                    env.placed.zero_copy = zero_copy;
                                }
                            }
                            // A wrong guess: lost again, and the ULP asked,
                            // whose answer counts the layer inside anew.
                            false => self.lose(),
                        }
                    }
                }
            }
        }
    }

    /// A header of a record with a `len`-byte body starts at `start`.
    fn begin(&mut self, start: u64, header: &[u8], len: usize, ctx: &SkCtx, env: &mut Env) {
        let body = start + HEADER as u64;
        let end = body + len as u64;
        tracing::trace!(start, len, seq = ?self.seq, "record");
        let inner = self.inner_at;
        self.inner_at = inner.map(|i| i + content(len));
        let tag_at = end - TAG as u64;
        let guessed = std::mem::take(&mut self.guessing);
        let shadow = std::mem::take(&mut self.unchained) && guessed;
        let mut r = Record {
            body,
            tag_at,
            end,
            seq: 0,
            decrypting: false,
            whole: true,
            // The layer inside waits for the guess to be proven.
            inner: inner.filter(|_| !guessed),
            odd: false,
            guessed,
            shadow: false,
            held: None,
            tag: [0; TAG],
        };
        match self.seq {
            None => {
                self.chain.push_back((start, len));
                if self.chain.len() > CHAIN_MEMORY
                    && self.chain.pop_front().map(|c| c.0) == self.asked
                {
                    // The request went unanswered this long: ask anew.
                    self.asked = Some(start);
                    ctx.request_resync(start);
                    env.stats.rx_tls_resync_req += 1;
                }
            }
            Some(seq) if shadow => {
                self.seq = Some(seq + 1);
                if env.active.contains(Caps::TLS_RX) && self.aead.begin(seq, header) {
                    (r.shadow, r.seq) = (true, seq);
                    if !self.inner_off {
                        r.held = inner.map(|inner| Held { inner, content: Vec::new() });
                    }
                }
            }
            Some(seq) => {
                self.seq = Some(seq + 1);
                // Only what the ULP will hear of, and what can be decrypted
                // again should it come again, may be decrypted.
                if env.active.contains(Caps::TLS_RX)
                    && ctx.has_room()
                    && self.decrypted.len() < DECRYPTED_MEMORY
                    && self.aead.begin(seq, header)
                {
                    (r.decrypting, r.seq) = (true, seq);
                    self.decrypted.push_back(Decrypted { seq, body, from: body, to: body, end });
                    if guessed && !ctx.push_guess(body, seq) {
                        // Software could not undo it: not decrypted, and
                        // the guess goes unproven.
                        r.decrypting = false;
                        self.decrypted.pop_back();
                    } else if guessed && !self.inner_off {
                        r.held = inner.map(|inner| Held { inner, content: Vec::new() });
                    }
                }
            }
        }
        self.state = State::Body(r);
    }

    /// Where in `data` (at stream offset `at`) a record header starts
    /// that another follows at its length, after a loss; or, where a guess
    /// can number it, one whose successor lies beyond `data`.
    fn hunt(&mut self, at: u64, data: &[u8]) -> Option<usize> {
        let end = at + data.len() as u64;
        if let State::Lost { candidate: Some((c, before)) } = self.state {
            if c >= end {
                return None;
            }
            self.state = State::Lost { candidate: None };
            if c >= at && record::plausible(&data[(c - at) as usize..]).is_some() {
                self.chain_from = Some(before);
                return Some((c - at) as usize);
            }
        }
        for p in 0..data.len().saturating_sub(HEADER - 1) {
            let Some(len) = record::plausible(&data[p..]) else { continue };
            let next = p + HEADER + len;
            if next + HEADER > data.len() {
                // Its successor lies beyond this segment. Where a guess
                // can number it, its own tag is proof enough, but only of
                // a copy: it may not be a header at all.
                if self.missed.is_some_and(|m| one_record(m.start, at + p as u64)) {
                    self.unchained = true;
                    return Some(p);
                }
                self.state = State::Lost { candidate: Some((at + next as u64, at + p as u64)) };
                return None;
            }
            if record::plausible(&data[next..]).is_some() {
                return Some(p);
            }
        }
        None
    }
}

/// Whether one record fits between a header lost at `lost` and one
/// found at `found`.
fn one_record(lost: u64, found: u64) -> bool {
    let n = found.saturating_sub(lost);
    (HEADER + TAG + 1) as u64 <= n && n <= (HEADER + record::MAX_BODY) as u64
}

/// Content bytes of a record with a `len`-byte body, unpadded.
fn content(len: usize) -> u64 {
    (len - 1 - TAG) as u64
}

impl Record {
    /// Body bytes `buf`, at stream offset `at`, just decrypted: content
    /// to the layer inside; the content type checked. True if the layer
    /// inside can follow no further.
    fn inside(
        &mut self,
        at: u64,
        buf: &mut [u8],
        inner: &mut Inner,
        ctx: &SkCtx,
        env: &mut Env,
    ) -> bool {
        let kind_at = self.tag_at - 1;
        let n = (kind_at.saturating_sub(at) as usize).min(buf.len());
        let odd = n < buf.len() && buf[n] != APPLICATION_DATA;
        let Some(flow) = inner.as_mut() else {
            self.held = None;
            return false;
        };
        let Some(base) = self.inner else {
            // A guessed record: held for the layer inside until the tag
            // proves the guess, and counted for it all the same. Whether
            // it is what was counted is known then too: under a wrong
            // number its last byte is noise.
            if let Some(h) = &mut self.held {
                h.content.extend_from_slice(&buf[..n]);
            }
            self.odd |= odd;
            return false;
        };
        if n > 0 {
            feed(flow.as_mut(), base + (at - self.body), at, &buf[..n], ctx, env);
        }
        if odd {
            // Padded, or not application data: the layer inside counted
            // content that is not. It follows no further on receive (its
            // transmit digests go on), and its word on this record goes.
            tracing::debug!(at, kind = buf[n], "a record the layer inside cannot follow");
            flow.ctx().truncate_hints(base);
            self.odd = true;
        }
        odd
    }
}

/// Content `bytes` at the layer inside's offset `off`, TCP offset `at`,
/// through the layer inside: what it keeps out of the ring is placed
/// where the segment's payload has it, and noted as fragments.
fn feed(flow: &mut dyn Socket, off: u64, at: u64, bytes: &[u8], ctx: &SkCtx, env: &mut Env) {
    let zero_copy = env.placed.zero_copy;
    // Bytes go out of the ring only where software can find them again.
    env.placed.zero_copy &= ctx.frag_room(FRAGS_PER_SEGMENT);
    env.placed.shift = at.wrapping_sub(off);
    env.placed.located = Some(Vec::new());
    flow.rx_segment(off, bytes, env);
    for f in env.placed.located.take().into_iter().flatten() {
        ctx.push_frag(f);
    }
    env.placed.shift = 0;
    env.placed.zero_copy = zero_copy;
}
