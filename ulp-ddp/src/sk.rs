//! The mailbox of one offloaded socket: what the device tells the ULP.
//!
//! The device writes: receive hints, resync requests, `teardown_done`
//! notices, and one-shot invalidations. The ULP reads them when it next
//! processes the socket's stream. Every hint is advisory: a ULP that finds
//! none for a byte does the work itself.

use std::collections::VecDeque;
use std::sync::{Mutex, MutexGuard, PoisonError};

/// How the device handled a range of received stream bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub struct HintFlags(u8);

impl HintFlags {
    pub const NONE: HintFlags = HintFlags(0);
    /// These data bytes were written into the mapped buffer of their PDU's
    /// tag, at their place; the ULP need not copy them.
    pub const PLACED: HintFlags = HintFlags(1 << 0);
    /// The device ran its data digest over these bytes from the start of
    /// their PDU; on digest bytes, it also found the digest correct.
    pub const CRC_OK: HintFlags = HintFlags(1 << 1);
    /// TLS: these bytes of a record's body reached the stack decrypted
    /// (`skb->decrypted`).
    pub const DECRYPTED: HintFlags = HintFlags(1 << 2);
    /// TLS: these are a record's tag, and the device found it right over
    /// the record it decrypted whole. A record whose body is `DECRYPTED`
    /// throughout and whose tag is `TAG_OK` is plaintext the ULP may take
    /// as it is; any other mix is ciphertext and plaintext side by side,
    /// for software to sort out. (Two flags, not one, so that the body of
    /// a record the device framed otherwise can never pass for a tag.)
    pub const TAG_OK: HintFlags = HintFlags(1 << 3);

    pub const fn contains(self, other: HintFlags) -> bool {
        self.0 & other.0 == other.0
    }

    pub const fn union(self, other: HintFlags) -> HintFlags {
        HintFlags(self.0 | other.0)
    }
}

/// Stream bytes `[start, end)` were handled as `flags` say; with `run`,
/// they are whole segments the device took on entirely.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RxHint {
    pub start: u64,
    pub end: u64,
    pub flags: HintFlags,
    pub run: Option<TaggedRun>,
}

/// Whole iWARP FPDUs, one after another, each an RDMA Write into one
/// STag that the device parsed, placed entirely and (with CRCs on) found
/// the CRC of right. Their headers, PAD and CRCs are consumed too, so the
/// ULP need not walk them: it checks the STag once, for the whole span of
/// tagged offsets the run wrote, and accounts for `payload` bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TaggedRun {
    pub stag: u32,
    /// The lowest tagged offset written, and the end of the highest.
    pub to: u64,
    pub to_end: u64,
    /// Payload bytes placed.
    pub payload: u64,
}

/// A one-shot mapping freed by the message at stream offset `offset`: a
/// CID freed by its response PDU, or an STag closed by the peer's Send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Freed {
    pub offset: u64,
    pub tag: u32,
}

/// Received stream bytes `[start, start + len)` that the device wrote
/// into `buf` at `offset` and kept out of the stack's ring, inside a TLS
/// record: where software finds them if it must open that record itself
/// (as an skb's fragments point at the pages a NIC placed into).
#[derive(Debug, Clone)]
pub struct Frag {
    pub start: u64,
    pub buf: crate::IoBuf,
    pub offset: usize,
    pub len: usize,
}

/// Hints kept before the device stops adding (and stops placing).
const HINT_CAPACITY: usize = 16384;
/// Fragments kept, likewise.
const FRAG_CAPACITY: usize = 16384;

#[derive(Default)]
struct Mailbox {
    hints: VecDeque<RxHint>,
    /// How far the ULP has asked about: a hint it has seen may not grow.
    read_to: u64,
    resync: Option<u64>,
    done: Vec<u16>,
    freed: VecDeque<Freed>,
    frags: VecDeque<Frag>,
    guesses: VecDeque<(u64, u64)>,
}

/// Guessed record numbers kept, at most (one per record lost and found).
const GUESS_CAPACITY: usize = 1024;

/// Shared by the device and the ULP for one socket.
#[derive(Default)]
pub struct SkCtx {
    inner: Mutex<Mailbox>,
}

impl std::fmt::Debug for SkCtx {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let m = self.lock();
        f.debug_struct("SkCtx").field("hints", &m.hints.len()).field("resync", &m.resync).finish()
    }
}

impl SkCtx {
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, Mailbox> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    // ---- device side ----

    /// Whether another hint fits. A device that cannot record a hint must
    /// not place: the ULP would not know to skip the bytes.
    pub fn has_room(&self) -> bool {
        self.lock().hints.len() < HINT_CAPACITY
    }

    /// Record how `[start, end)` was handled; ranges must come in stream
    /// order. Adjacent ranges with the same flags merge.
    pub fn push_hint(&self, start: u64, end: u64, flags: HintFlags) -> bool {
        if end <= start {
            return true;
        }
        let mut m = self.lock();
        if let Some(last) = m.hints.back_mut()
            && last.end == start
            && last.flags == flags
            && last.run.is_none()
        {
            last.end = end;
            return true;
        }
        if m.hints.len() >= HINT_CAPACITY {
            return false;
        }
        m.hints.push_back(RxHint { start, end, flags, run: None });
        true
    }

    /// Record `[start, end)` as whole FPDUs taken on as `run` says, in
    /// place of whatever hints from `start` on were recorded while they
    /// went by. A run joins the one before it if it continues it into the
    /// same STag and the ULP has not yet looked at that one.
    pub fn push_run(&self, start: u64, end: u64, flags: HintFlags, run: TaggedRun) -> bool {
        let mut m = self.lock();
        if m.read_to > start || m.hints.len() >= HINT_CAPACITY {
            return false;
        }
        while m.hints.back().is_some_and(|h| h.start >= start) {
            m.hints.pop_back();
        }
        let read_to = m.read_to;
        if let Some(last) = m.hints.back_mut() {
            last.end = last.end.min(start);
            if let Some(r) = &mut last.run
                && last.end == start
                && last.start >= read_to
                && last.flags == flags
                && r.stag == run.stag
            {
                last.end = end;
                r.to = r.to.min(run.to);
                r.to_end = r.to_end.max(run.to_end);
                r.payload += run.payload;
                return true;
            }
        }
        m.hints.push_back(RxHint { start, end, flags, run: Some(run) });
        true
    }

    /// Room for `n` more fragments: bytes may be kept out of the ring
    /// only if software can find them.
    pub fn frag_room(&self, n: usize) -> bool {
        self.lock().frags.len() + n <= FRAG_CAPACITY
    }

    /// Record a fragment; fragments come in stream order.
    pub fn push_frag(&self, frag: Frag) {
        self.lock().frags.push_back(frag);
    }

    /// Forget the hints from stream offset `from` on: the device had
    /// given them on a reading of the stream it found wrong before the ULP
    /// could see them.
    pub fn truncate_hints(&self, from: u64) {
        let mut m = self.lock();
        debug_assert!(m.read_to <= from, "hints the ULP has seen");
        while m.hints.back().is_some_and(|h| h.start >= from) {
            m.hints.pop_back();
        }
        if let Some(last) = m.hints.back_mut() {
            last.end = last.end.min(from);
        }
    }

    /// Ask the ULP to confirm that a PDU header starts at stream offset
    /// `seq` (`resync_request` with `ULP_DDP_RESYNC_PENDING`). A newer
    /// request replaces an unanswered one.
    pub fn request_resync(&self, seq: u64) {
        self.lock().resync = Some(seq);
    }

    /// The mapping of `tag` is gone (`ddp_teardown_done`).
    pub fn teardown_done(&self, tag: u16) {
        self.lock().done.push(tag);
    }

    /// A one-shot mapping was invalidated by the message at `offset`.
    pub fn freed(&self, offset: u64, tag: u32) {
        self.lock().freed.push_back(Freed { offset, tag });
    }

    // ---- ULP side ----

    /// The pending resync request, if any; clears it.
    pub fn take_resync_request(&self) -> Option<u64> {
        self.lock().resync.take()
    }

    /// A pending resync request, left in place.
    pub fn resync_request(&self) -> Option<u64> {
        self.lock().resync
    }

    /// Tags whose mappings were torn down since the last call.
    pub fn take_teardown_done(&self) -> Vec<u16> {
        std::mem::take(&mut self.lock().done)
    }

    /// The invalidation reported for the response starting at `offset`.
    /// Reports for earlier offsets, which no response claimed, come back
    /// first: the ULP treats any report but the one it expects as a
    /// mismatch.
    pub fn take_freed(&self, offset: u64) -> Option<Freed> {
        let mut m = self.lock();
        match m.freed.front() {
            Some(f) if f.offset <= offset => m.freed.pop_front(),
            _ => None,
        }
    }

    /// The fragments inside `[start, end)`, in order, dropping those
    /// before `start`: the ULP reads its stream only forward.
    pub fn with_frags(&self, start: u64, end: u64, mut f: impl FnMut(&Frag)) {
        self.forget_frags(start);
        for g in self.lock().frags.iter().take_while(|g| g.start < end) {
            f(g);
        }
    }

    /// TLS: the record whose body starts at `body` was decrypted under
    /// the number `seq`, a guess its tag is to prove. If it does not,
    /// software encrypts back with the same number.
    /// False if there is no room: the device must then not decrypt
    /// under the guess.
    pub fn push_guess(&self, body: u64, seq: u64) -> bool {
        let mut m = self.lock();
        if m.guesses.len() >= GUESS_CAPACITY {
            return false;
        }
        m.guesses.push_back((body, seq));
        true
    }

    /// The number the record whose body starts at `body` was decrypted
    /// under, if it was a guess; guesses for records before it go.
    pub fn take_guess(&self, body: u64) -> Option<u64> {
        let mut m = self.lock();
        while m.guesses.front().is_some_and(|&(b, _)| b < body) {
            m.guesses.pop_front();
        }
        match m.guesses.front() {
            Some(&(b, seq)) if b == body => {
                m.guesses.pop_front();
                Some(seq)
            }
            _ => None,
        }
    }

    /// Drop the fragments before `offset`: the ULP is past them (and
    /// lets go of the buffers they hold).
    pub fn forget_frags(&self, offset: u64) {
        let mut m = self.lock();
        while m.frags.front().is_some_and(|g| g.start + g.len as u64 <= offset) {
            m.frags.pop_front();
        }
    }

    /// Walk `[start, end)` in order as ranges, each with the whole hint it
    /// falls in (gaps the device left unhinted come with a hint of no
    /// flags), dropping hints that end at or before `start`: the ULP reads
    /// its stream only forward.
    pub fn with_hints(&self, start: u64, end: u64, mut f: impl FnMut(u64, u64, &RxHint)) {
        let mut m = self.lock();
        m.read_to = m.read_to.max(end);
        while m.hints.front().is_some_and(|h| h.end <= start) {
            m.hints.pop_front();
        }
        let gap = |start, end| RxHint { start, end, flags: HintFlags::NONE, run: None };
        let mut at = start;
        for h in &m.hints {
            if at >= end || h.start >= end {
                break;
            }
            if h.end <= at {
                continue;
            }
            if h.start > at {
                f(at, h.start, &gap(at, h.start));
                at = h.start;
            }
            let stop = h.end.min(end);
            f(at, stop, h);
            at = stop;
        }
        if at < end {
            f(at, end, &gap(at, end));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn walk(ctx: &SkCtx, start: u64, end: u64) -> Vec<(u64, u64, HintFlags)> {
        let mut v = Vec::new();
        ctx.with_hints(start, end, |a, b, h| v.push((a, b, h.flags)));
        v
    }

    #[test]
    fn hints_merge_and_cover_ranges_with_gaps() {
        let ctx = SkCtx::new();
        let (p, c) = (HintFlags::PLACED, HintFlags::CRC_OK);
        ctx.push_hint(0, 10, c);
        ctx.push_hint(10, 20, c);
        ctx.push_hint(20, 30, p.union(c));
        ctx.push_hint(40, 50, c);
        assert_eq!(
            walk(&ctx, 5, 45),
            vec![(5, 20, c), (20, 30, p.union(c)), (30, 40, HintFlags::NONE), (40, 45, c)]
        );
        // Reading forward drops what is behind.
        assert_eq!(walk(&ctx, 30, 35), vec![(30, 35, HintFlags::NONE)]);
        assert_eq!(walk(&ctx, 60, 70), vec![(60, 70, HintFlags::NONE)]);
    }

    #[test]
    fn runs_replace_the_hints_of_their_bytes_and_grow_until_seen() {
        let ctx = SkCtx::new();
        let (p, c) = (HintFlags::PLACED, HintFlags::CRC_OK);
        let run = |to, payload| TaggedRun { stag: 7, to, to_end: to + payload, payload };
        // The header hint of the FPDU at 10 merged into the trailer of the
        // one before; its payload and trailer hints follow.
        ctx.push_hint(0, 16, c);
        ctx.push_hint(16, 90, p.union(c));
        ctx.push_hint(90, 100, c);
        assert!(ctx.push_run(10, 100, p.union(c), run(0, 74)));
        assert!(ctx.push_run(100, 190, p.union(c), run(74, 74)));
        let mut seen = Vec::new();
        ctx.with_hints(0, 150, |a, b, h| seen.push((a, b, h.flags, h.run)));
        let whole = Some(TaggedRun { stag: 7, to: 0, to_end: 148, payload: 148 });
        assert_eq!(seen, vec![(0, 10, c, None), (10, 150, p.union(c), whole)]);
        // Seen in part, the run no longer grows; the next one stands alone.
        assert!(ctx.push_run(190, 280, p.union(c), run(148, 74)));
        let mut seen = Vec::new();
        ctx.with_hints(150, 280, |a, b, h| seen.push((a, b, h.run.map(|r| r.payload))));
        assert_eq!(seen, vec![(150, 190, Some(148)), (190, 280, Some(74))]);
        // Bytes the ULP has read cannot become a run.
        assert!(!ctx.push_run(270, 300, p, run(0, 1)));
    }

    #[test]
    fn upcalls_are_collected_once() {
        let ctx = SkCtx::new();
        ctx.request_resync(100);
        ctx.request_resync(200);
        assert_eq!(ctx.take_resync_request(), Some(200));
        assert_eq!(ctx.take_resync_request(), None);
        ctx.teardown_done(3);
        assert_eq!(ctx.take_teardown_done(), vec![3]);
        assert!(ctx.take_teardown_done().is_empty());
        ctx.freed(50, 7);
        assert_eq!(ctx.take_freed(40), None);
        assert_eq!(ctx.take_freed(50), Some(Freed { offset: 50, tag: 7 }));
    }
}
