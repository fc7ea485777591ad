//! The sender's SACK scoreboard (RFC 6675).
//!
//! RFC 6675 ("A Conservative Loss Recovery Algorithm Based on Selective
//! Acknowledgment (SACK) for TCP") has the sender keep a *scoreboard* of the
//! bytes above SND.UNA that the receiver reported holding in SACK blocks
//! (RFC 2018). From it the sender decides which bytes are lost (`IsLost`,
//! RFC 6675 §4), how many bytes are still in the network (`SetPipe`, §4),
//! and what to retransmit next (`NextSeg`, §4). This module is that
//! scoreboard, as pure logic: it sends nothing and keeps no timers; the
//! socket feeds it the SACK blocks of each ACK and asks it those questions.
//!
//! Conventions. Sequence ranges are half-open, `[left, right)`, as SACK
//! blocks are on the wire. `una` is SND.UNA (RFC 6675's HighACK + 1 is the
//! first unacknowledged byte; here `una` *is* that byte). `high_data` is one
//! past the highest byte sent (RFC 6675's HighData + 1), and `high_rxt` is
//! one past the highest byte retransmitted in the current recovery phase
//! (RFC 6675's HighRxt + 1), or `una` when nothing has been retransmitted.
//! All of them must lie within 2<sup>31</sup> - 1 bytes of one another, as
//! TCP sequence numbers always do; anything else is garbage, and garbage in
//! any argument or SACK block never panics (it is ignored or clipped).
//!
//! The scoreboard has room for [`CAPACITY`] discontiguous blocks. When a new
//! block does not fit, the highest block is forgotten: the holes that
//! matter for retransmission are the low ones, and a receiver reports its
//! most recent blocks first (RFC 2018 §4), so a forgotten high block comes
//! back with later ACKs once the lower ones have been filled.

use crate::wire::TcpSeqNumber;

/// How many discontiguous SACKed blocks the scoreboard remembers.
pub(super) const CAPACITY: usize = 8;

/// DupThresh of RFC 6675 §2: the number of duplicate ACKs (and here, of
/// discontiguous SACKed blocks) that marks a segment lost (RFC 5681's 3).
pub(super) const DUP_THRESH: usize = 3;

/// One SACKed block, `[left, right)`, `left < right`.
#[derive(Debug, PartialEq, Eq, Clone, Copy)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
struct Block {
    left: TcpSeqNumber,
    right: TcpSeqNumber,
}

const EMPTY_BLOCK: Block = Block { left: TcpSeqNumber(0), right: TcpSeqNumber(0) };

/// `to - from` when `to` is at or above `from` (in sequence space), else `None`.
///
/// Unlike `TcpSeqNumber`'s `Sub`, this never panics.
fn distance(from: TcpSeqNumber, to: TcpSeqNumber) -> Option<usize> {
    let d = to.0.wrapping_sub(from.0);
    if d >= 0 { Some(d as usize) } else { None }
}

/// The SACKed blocks lying in `(una, high_data]`, as byte offsets from
/// `una`: sorted, disjoint, nonempty, all within `1..=end`.
struct View {
    blocks: [(usize, usize); CAPACITY],
    len: usize,
    /// `high_data - una`.
    end: usize,
}

impl View {
    /// Hole `i`, for `i` in `0..=len`: the un-SACKed range below block `i`,
    /// `[end of block i - 1 (or 0), start of block i)`; hole `len` is the
    /// tail, from the highest block (or 0) up to `end`. It may be empty.
    fn hole(&self, i: usize) -> (usize, usize) {
        let start = if i == 0 { 0 } else { self.blocks[i - 1].1 };
        let end = if i < self.len { self.blocks[i].0 } else { self.end };
        (start, end)
    }

    /// RFC 6675 `IsLost` for the bytes of hole `i`. The SACKed blocks above
    /// any byte of hole `i` are exactly blocks `i..len`, so all of a hole's
    /// bytes are lost or none is; the tail hole never is.
    fn hole_is_lost(&self, i: usize, mss: usize) -> bool {
        let above = &self.blocks[i.min(self.len)..self.len];
        let bytes = above.iter().fold(0usize, |sum, &(l, r)| sum.saturating_add(r - l));
        lost(above.len(), bytes, mss)
    }
}

/// RFC 6675 §4 `IsLost`: `DupThresh` discontiguous SACKed sequences, or more
/// than `(DupThresh - 1) * SMSS` SACKed bytes, above the sequence number.
fn lost(blocks_above: usize, bytes_above: usize, mss: usize) -> bool {
    blocks_above >= DUP_THRESH || bytes_above > (DUP_THRESH - 1).saturating_mul(mss)
}

/// The sender's SACK scoreboard of RFC 6675 §3.
///
/// It holds the SACKed blocks above SND.UNA, sorted, disjoint and not
/// adjacent (adjacent blocks are merged, so every block is one of RFC 6675's
/// "discontiguous SACKed sequences"), at most [`CAPACITY`] of them.
#[derive(Debug, PartialEq, Eq, Clone)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub(super) struct Scoreboard {
    blocks: [Block; CAPACITY],
    len: usize,
}

impl Default for Scoreboard {
    fn default() -> Self {
        Self::new()
    }
}

impl Scoreboard {
    /// An empty scoreboard.
    pub const fn new() -> Self {
        Scoreboard { blocks: [EMPTY_BLOCK; CAPACITY], len: 0 }
    }

    /// Forget every SACKed block (for instance on a new connection, or when
    /// the socket decides to distrust SACK information after an RTO, as
    /// RFC 2018 §8 permits).
    pub fn clear(&mut self) {
        self.len = 0;
    }

    /// Whether no byte is known to be SACKed.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn blocks(&self) -> &[Block] {
        &self.blocks[..self.len]
    }

    /// Take the SACK blocks of one ACK (as `TcpRepr::sack_ranges` carries
    /// them: raw 32-bit sequence numbers, `[left, right)`), once the ACK has
    /// moved SND.UNA to `una` (RFC 6675 §5, "Update ()"). Blocks below `una`
    /// are first dropped, as by [`advance`](Self::advance).
    ///
    /// A block is taken only if it lies within `(una, high_data]`, that is
    /// `una < left < right <= high_data`. Others are ignored: D-SACK blocks
    /// (RFC 2883), which report bytes below the ACK; blocks that reach
    /// `una` or below, which a receiver that held those bytes would have
    /// acknowledged instead (Linux refuses them too); blocks reaching beyond
    /// what was sent; and empty or reversed ones. A D-SACK block inside an
    /// already SACKed block (RFC 2883 §4, second case) is taken and adds
    /// nothing. Overlapping and adjacent blocks are merged. When a block is
    /// disjoint from all others and the scoreboard is full, the highest
    /// block (possibly the new one) is dropped.
    ///
    /// Returns the number of bytes newly recorded as SACKed, so that the
    /// socket can count an ACK that SACKs new data as a duplicate ACK
    /// (RFC 6675 §2, "DupAck"). A block dropped for lack of room counts for
    /// nothing.
    pub fn update(
        &mut self,
        blocks: &[Option<(u32, u32)>],
        una: TcpSeqNumber,
        high_data: TcpSeqNumber,
    ) -> usize {
        self.advance(una);
        let Some(end) = distance(una, high_data) else {
            return 0;
        };
        let mut new = 0usize;
        for &(left, right) in blocks.iter().flatten() {
            let left = TcpSeqNumber(left as i32);
            let right = TcpSeqNumber(right as i32);
            match (distance(una, left), distance(una, right)) {
                (Some(l), Some(r)) if 0 < l && l < r && r <= end => {
                    new = new.saturating_add(self.insert(left, right))
                }
                _ => net_trace!("tcp sack: ignoring block {}..{}", left, right),
            }
        }
        new
    }

    /// Insert `[left, right)` (`left < right`, both within 2^31 of every
    /// block), merging it with the blocks it overlaps or touches. Returns the
    /// number of bytes it adds to the scoreboard.
    fn insert(&mut self, left: TcpSeqNumber, right: TcpSeqNumber) -> usize {
        let blocks = &self.blocks[..self.len];
        // The first block that overlaps or touches the new one, or lies above it...
        let first = blocks.iter().position(|b| b.right >= left).unwrap_or(self.len);
        // ...and the first one wholly above it, not touching it. Since the
        // blocks are sorted, `first <= past`, and the blocks `first..past`
        // overlap or touch the new one.
        let past = blocks.iter().position(|b| b.left > right).unwrap_or(self.len);

        if first < past {
            let covered = blocks[first..past].iter().fold(0usize, |sum, b| {
                let lo = b.left.max(left);
                let hi = b.right.min(right);
                if hi > lo { sum + (hi - lo) } else { sum }
            });
            let merged = Block {
                left: blocks[first].left.min(left),
                right: blocks[past - 1].right.max(right),
            };
            self.blocks[first] = merged;
            self.blocks.copy_within(past..self.len, first + 1);
            self.len -= past - first - 1;
            (right - left).saturating_sub(covered)
        } else {
            if self.len == CAPACITY {
                if first == CAPACITY {
                    // The new block would be the highest: drop it.
                    return 0;
                }
                // Drop the highest block to make room.
                self.len -= 1;
            }
            self.blocks.copy_within(first..self.len, first + 1);
            self.blocks[first] = Block { left, right };
            self.len += 1;
            right - left
        }
    }

    /// SND.UNA moved to `una`: drop the blocks it covers.
    ///
    /// A block that begins at or below `una` is dropped whole, also when it
    /// ends above `una`: the receiver's cumulative ACK says it does not hold
    /// byte `una`, so it reneged on the rest of that block (RFC 2018 §8), and
    /// those bytes are holes again, to be resent.
    pub fn advance(&mut self, una: TcpSeqNumber) {
        let keep = self.blocks().iter().position(|b| b.left > una).unwrap_or(self.len);
        self.blocks.copy_within(keep..self.len, 0);
        self.len -= keep;
    }

    /// RFC 6675 §4 `IsLost (SeqNum)` for `seq` (normally the first byte of a
    /// hole): true when at least `DupThresh` discontiguous SACKed blocks, or
    /// more than `(DupThresh - 1) * mss` SACKed bytes, lie above `seq`.
    pub fn is_lost(&self, seq: TcpSeqNumber, mss: usize) -> bool {
        let mut count = 0;
        let mut bytes = 0usize;
        for b in self.blocks() {
            if b.left > seq {
                count += 1;
                bytes = bytes.saturating_add(b.right - b.left);
            } else if b.right > seq + 1 {
                // `seq` is itself SACKed; count the block's bytes above it.
                count += 1;
                bytes = bytes.saturating_add(b.right - (seq + 1));
            }
        }
        lost(count, bytes, mss)
    }

    /// The blocks in `(una, high_data]`, as offsets from `una`. Blocks that
    /// begin at or below `una` are left out, as [`advance`](Self::advance)
    /// would drop them, so a query with a `una` the scoreboard has not been
    /// advanced to yet answers as if it had been.
    fn view(&self, una: TcpSeqNumber, high_data: TcpSeqNumber) -> View {
        let mut view =
            View { blocks: [(0, 0); CAPACITY], len: 0, end: distance(una, high_data).unwrap_or(0) };
        let mut floor = 0;
        for b in self.blocks() {
            // As `advance` would, leave out blocks that begin at or below una.
            let (Some(l @ 1..), Some(r)) = (distance(una, b.left), distance(una, b.right)) else {
                continue;
            };
            // Only garbage arguments make these clip anything.
            let l = l.max(floor);
            let r = r.min(view.end);
            if l < r {
                view.blocks[view.len] = (l, r);
                view.len += 1;
                floor = r;
            }
        }
        view
    }

    /// RFC 6675 §4 `SetPipe`: the bytes thought to be in the network
    /// between `una` and `high_data`. Every byte not SACKed counts once if
    /// it is not lost (`IsLost`), and once more if it was retransmitted
    /// (it lies below `high_rxt`). The tail above the highest SACKed byte
    /// is never lost.
    ///
    /// With `lost_below` (after a retransmission timeout, RFC 6675 §5.1, as
    /// in [`next_seg`](Self::next_seg): what had been sent when the timer
    /// fired), every byte not SACKed below it, the tail included, is lost,
    /// so of those only the bytes retransmitted since (below `high_rxt`)
    /// count, once each; bytes first sent after the timeout count as any.
    pub fn pipe(
        &self,
        una: TcpSeqNumber,
        high_data: TcpSeqNumber,
        high_rxt: TcpSeqNumber,
        mss: usize,
        lost_below: Option<TcpSeqNumber>,
    ) -> usize {
        let view = self.view(una, high_data);
        let rxt = distance(una, high_rxt).unwrap_or(0).min(view.end);
        let lost_end = lost_below.map_or(0, |p| distance(una, p).unwrap_or(0).min(view.end));
        let mut pipe = 0usize;
        for i in 0..=view.len {
            let (start, end) = view.hole(i);
            if start >= end {
                continue;
            }
            let above = start.max(lost_end);
            if above < end && !view.hole_is_lost(i, mss) {
                pipe = pipe.saturating_add(end - above);
            }
            if rxt > start {
                pipe = pipe.saturating_add(rxt.min(end) - start);
            }
        }
        pipe
    }

    /// RFC 6675 §4 `NextSeg ()`, rules (1) and (3); rule (2), sending new
    /// data, is the socket's, as is rule (4), the rescue retransmission.
    ///
    /// Rule (1): the first un-SACKed byte at or above `max(high_rxt, una)`,
    /// below the highest SACKed byte, that is lost (`IsLost`). If there is
    /// none, and `rule3` is set (the socket has found no new data to send
    /// under rule (2)), rule (3): the first un-SACKed byte at or above
    /// `max(high_rxt, una)` below the highest SACKed byte, lost or not.
    ///
    /// With `lost_below` (after a retransmission timeout, RFC 6675 §5.1, when
    /// every byte not SACKed that had been sent is taken for lost), every
    /// hole below it is lost, including the tail above the highest SACKed
    /// byte; bytes first sent after the timeout are judged as any.
    ///
    /// Returns the segment to (re)send, `(seq, len)`: `0 < len <= mss`, and
    /// it ends where the hole (or its lost part) does, never covering
    /// SACKed bytes.
    pub fn next_seg(
        &self,
        una: TcpSeqNumber,
        high_data: TcpSeqNumber,
        high_rxt: TcpSeqNumber,
        mss: usize,
        lost_below: Option<TcpSeqNumber>,
        rule3: bool,
    ) -> Option<(TcpSeqNumber, usize)> {
        if mss == 0 {
            return None;
        }
        let view = self.view(una, high_data);
        let rxt = distance(una, high_rxt).unwrap_or(0);
        let lost_end = lost_below.map_or(0, |p| distance(una, p).unwrap_or(0).min(view.end));
        // Hole `i` up to offset `upto`, from the first byte not yet resent.
        let segment = |i: usize, upto: usize| -> Option<(TcpSeqNumber, usize)> {
            let (start, end) = view.hole(i);
            let (start, end) = (start.max(rxt), end.min(upto));
            // `start < end <= view.end <= i32::MAX`, so the addition is in range.
            (start < end).then(|| (una + start, (end - start).min(mss)))
        };
        // A hole below the highest SACKed byte is lost by IsLost, whole; any
        // hole, the tail included, is lost below the timeout's point.
        let lost = |i: usize| {
            let upto = if i < view.len && view.hole_is_lost(i, mss) { view.end } else { lost_end };
            segment(i, upto)
        };
        (0..=view.len).find_map(lost).or_else(|| {
            if rule3 { (0..view.len).find_map(|i| segment(i, view.end)) } else { None }
        })
    }
}

#[cfg(test)]
mod test {
    use super::*;

    const MSS: usize = 100;

    fn s(n: u32) -> TcpSeqNumber {
        TcpSeqNumber(n as i32)
    }

    fn blocks(sb: &Scoreboard) -> Vec<(u32, u32)> {
        sb.blocks().iter().map(|b| (b.left.0 as u32, b.right.0 as u32)).collect()
    }

    /// A scoreboard holding the given blocks, taken one per ACK.
    fn board(una: u32, high_data: u32, bs: &[(u32, u32)]) -> Scoreboard {
        let mut sb = Scoreboard::new();
        for &b in bs {
            sb.update(&[Some(b), None, None], s(una), s(high_data));
        }
        assert_eq!(blocks(&sb), bs, "test setup");
        sb
    }

    #[test]
    fn test_new_and_clear() {
        let mut sb = Scoreboard::new();
        assert!(sb.is_empty());
        assert_eq!(sb, Scoreboard::default());
        assert_eq!(sb.update(&[Some((1100, 1200)), None, None], s(1000), s(2000)), 100);
        assert!(!sb.is_empty());
        sb.clear();
        assert!(sb.is_empty());
        assert_eq!(blocks(&sb), []);
    }

    #[test]
    fn test_update_sorts_and_counts_new_bytes() {
        let mut sb = Scoreboard::new();
        let new = sb.update(
            &[Some((1500, 1600)), Some((1100, 1200)), Some((1300, 1400))],
            s(1000),
            s(2000),
        );
        assert_eq!(new, 300);
        assert_eq!(blocks(&sb), [(1100, 1200), (1300, 1400), (1500, 1600)]);
        // The same blocks again: nothing new, so not a DupAck by SACK.
        let new = sb.update(&[Some((1300, 1400)), Some((1100, 1200))], s(1000), s(2000));
        assert_eq!(new, 0);
        assert_eq!(blocks(&sb), [(1100, 1200), (1300, 1400), (1500, 1600)]);
    }

    #[test]
    fn test_update_merges_overlaps() {
        let mut sb = board(1000, 3000, &[(1100, 1200), (1300, 1400), (1500, 1600)]);
        // Overlapping the right edge of one block.
        assert_eq!(sb.update(&[Some((1150, 1250))], s(1000), s(3000)), 50);
        assert_eq!(blocks(&sb), [(1100, 1250), (1300, 1400), (1500, 1600)]);
        // Overlapping the left edge.
        assert_eq!(sb.update(&[Some((1280, 1320))], s(1000), s(3000)), 20);
        assert_eq!(blocks(&sb), [(1100, 1250), (1280, 1400), (1500, 1600)]);
        // Inside a block.
        assert_eq!(sb.update(&[Some((1520, 1580))], s(1000), s(3000)), 0);
        assert_eq!(blocks(&sb), [(1100, 1250), (1280, 1400), (1500, 1600)]);
        // Containing a block.
        assert_eq!(sb.update(&[Some((1490, 1610))], s(1000), s(3000)), 20);
        assert_eq!(blocks(&sb), [(1100, 1250), (1280, 1400), (1490, 1610)]);
        // Bridging all three: 30 + 90 new bytes.
        assert_eq!(sb.update(&[Some((1200, 1500))], s(1000), s(3000)), 120);
        assert_eq!(blocks(&sb), [(1100, 1610)]);
    }

    #[test]
    fn test_update_merges_adjacent_blocks() {
        let mut sb = board(1000, 3000, &[(1100, 1200), (1300, 1400)]);
        assert_eq!(sb.update(&[Some((1200, 1300))], s(1000), s(3000)), 100);
        assert_eq!(blocks(&sb), [(1100, 1400)]);
        assert_eq!(sb.update(&[Some((1050, 1100))], s(1000), s(3000)), 50);
        assert_eq!(sb.update(&[Some((1400, 1450))], s(1000), s(3000)), 50);
        assert_eq!(blocks(&sb), [(1050, 1450)]);
        // Blocks of one ACK that touch each other merge too.
        let mut sb = Scoreboard::new();
        let new = sb.update(
            &[Some((1200, 1300)), Some((1100, 1200)), Some((1300, 1400))],
            s(1000),
            s(3000),
        );
        assert_eq!(new, 300);
        assert_eq!(blocks(&sb), [(1100, 1400)]);
    }

    #[test]
    fn test_update_ignores_out_of_range_blocks() {
        let mut sb = Scoreboard::new();
        let (una, high) = (s(1000), s(2000));
        // Beyond what was sent.
        assert_eq!(sb.update(&[Some((2000, 2100))], una, high), 0);
        assert_eq!(sb.update(&[Some((1900, 2001))], una, high), 0);
        // Starting at or below una.
        assert_eq!(sb.update(&[Some((1000, 1100))], una, high), 0);
        assert_eq!(sb.update(&[Some((900, 1100))], una, high), 0);
        assert!(sb.is_empty());
        // Ending exactly at high_data is fine.
        assert_eq!(sb.update(&[Some((1900, 2000))], una, high), 100);
        assert_eq!(blocks(&sb), [(1900, 2000)]);
        // Nothing sent beyond una: nothing can be SACKed.
        let mut sb = Scoreboard::new();
        assert_eq!(sb.update(&[Some((1001, 1002))], una, una), 0);
        assert!(sb.is_empty());
    }

    #[test]
    fn test_update_ignores_dsack() {
        // RFC 2883 §4.1.1: a duplicate segment below the ACK is reported in
        // the first block, followed by the usual SACK blocks.
        let mut sb = Scoreboard::new();
        let new = sb.update(&[Some((500, 600)), Some((1100, 1200)), None], s(1000), s(2000));
        assert_eq!(new, 100);
        assert_eq!(blocks(&sb), [(1100, 1200)]);
        // RFC 2883 §4.1.2: a duplicate of SACKed data, inside the second
        // block: no new bytes.
        let new = sb.update(&[Some((1120, 1140)), Some((1100, 1200)), None], s(1000), s(2000));
        assert_eq!(new, 0);
        assert_eq!(blocks(&sb), [(1100, 1200)]);
    }

    #[test]
    fn test_update_full_drops_highest() {
        let full: Vec<(u32, u32)> =
            (0..CAPACITY as u32).map(|i| (1100 + 200 * i, 1200 + 200 * i)).collect();
        let mut sb = board(1000, 10_000, &full);
        // A new highest block does not fit and is dropped.
        assert_eq!(sb.update(&[Some((5000, 5100))], s(1000), s(10_000)), 0);
        assert_eq!(blocks(&sb), full);
        // A new lower block pushes out the highest one.
        assert_eq!(sb.update(&[Some((1010, 1020))], s(1000), s(10_000)), 10);
        let mut expected = vec![(1010, 1020)];
        expected.extend_from_slice(&full[..CAPACITY - 1]);
        assert_eq!(blocks(&sb), expected);
        // A block that merges needs no room.
        assert_eq!(sb.update(&[Some((1020, 1100))], s(1000), s(10_000)), 80);
        assert_eq!(blocks(&sb)[0], (1010, 1200));
        assert_eq!(sb.len, CAPACITY - 1);
    }

    #[test]
    fn test_advance() {
        let mut sb = board(1000, 3000, &[(1100, 1200), (1300, 1400), (1500, 1600)]);
        // Below every block: nothing changes.
        sb.advance(s(1050));
        assert_eq!(blocks(&sb), [(1100, 1200), (1300, 1400), (1500, 1600)]);
        // Up to the end of a block (the ACK covered it).
        sb.advance(s(1200));
        assert_eq!(blocks(&sb), [(1300, 1400), (1500, 1600)]);
        // Into a hole.
        sb.advance(s(1450));
        assert_eq!(blocks(&sb), [(1500, 1600)]);
        sb.advance(s(1600));
        assert!(sb.is_empty());
    }

    #[test]
    fn test_advance_drops_reneged_block() {
        // The ACK ends at, or inside, a SACKed block: the receiver reneged.
        let mut sb = board(1000, 3000, &[(1100, 1200), (1300, 1400)]);
        sb.advance(s(1100));
        assert_eq!(blocks(&sb), [(1300, 1400)]);
        sb.advance(s(1350));
        assert!(sb.is_empty());
    }

    #[test]
    fn test_update_advances_first() {
        let mut sb = board(1000, 3000, &[(1100, 1200), (1300, 1400)]);
        let new = sb.update(&[Some((1500, 1600))], s(1250), s(3000));
        assert_eq!(new, 100);
        assert_eq!(blocks(&sb), [(1300, 1400), (1500, 1600)]);
    }

    #[test]
    fn test_queries_before_advance() {
        // Asked with a una it was not advanced to, the scoreboard answers as
        // if it had been.
        let sb = board(1000, 3000, &[(1100, 1200), (1300, 1400), (1500, 1600)]);
        let mut advanced = sb.clone();
        advanced.advance(s(1300));
        assert_eq!(blocks(&advanced), [(1500, 1600)]);
        for rxt in [1300, 1350, 1450, 1550, 2000] {
            for lost_below in [None, Some(s(3000)), Some(s(1450))] {
                assert_eq!(
                    sb.pipe(s(1300), s(3000), s(rxt), MSS, lost_below),
                    advanced.pipe(s(1300), s(3000), s(rxt), MSS, lost_below)
                );
            }
            let cases = [(None, false), (None, true), (Some(s(3000)), false), (Some(s(1450)), true)];
            for (lost_below, rule3) in cases {
                assert_eq!(
                    sb.next_seg(s(1300), s(3000), s(rxt), MSS, lost_below, rule3),
                    advanced.next_seg(s(1300), s(3000), s(rxt), MSS, lost_below, rule3)
                );
            }
        }
        assert_eq!(sb.pipe(s(1300), s(3000), s(1300), MSS, None), 200 + 1400);
        assert_eq!(sb.next_seg(s(1300), s(3000), s(1300), MSS, Some(s(3000)), false), Some((s(1300), 100)));
    }

    #[test]
    fn test_is_lost_by_bytes() {
        // Exactly (DupThresh - 1) * SMSS bytes above: not lost.
        let sb = board(1000, 3000, &[(1100, 1300)]);
        assert!(!sb.is_lost(s(1000), MSS));
        // One more: lost.
        let sb = board(1000, 3000, &[(1100, 1301)]);
        assert!(sb.is_lost(s(1000), MSS));
        assert!(sb.is_lost(s(1099), MSS));
        // Nothing SACKed above.
        assert!(!sb.is_lost(s(1301), MSS));
        assert!(!sb.is_lost(s(2000), MSS));
        // Two blocks adding up.
        let sb = board(1000, 3000, &[(1100, 1200), (1300, 1401)]);
        assert!(sb.is_lost(s(1000), MSS));
        assert!(!sb.is_lost(s(1200), MSS));
        // From inside a block, only the bytes above count.
        let sb = board(1000, 3000, &[(1100, 1400)]);
        assert!(sb.is_lost(s(1000), MSS));
        assert!(sb.is_lost(s(1198), MSS));
        assert!(!sb.is_lost(s(1199), MSS));
    }

    #[test]
    fn test_is_lost_by_block_count() {
        let sb = board(1000, 3000, &[(1100, 1101), (1200, 1201), (1300, 1301)]);
        assert!(sb.is_lost(s(1000), MSS));
        assert!(sb.is_lost(s(1099), MSS));
        // Only two blocks (two bytes) above.
        assert!(!sb.is_lost(s(1101), MSS));
        assert!(!sb.is_lost(s(1201), MSS));
        assert!(!Scoreboard::new().is_lost(s(1000), MSS));
    }

    #[test]
    fn test_pipe_without_sack() {
        let sb = Scoreboard::new();
        assert_eq!(sb.pipe(s(1000), s(2000), s(1000), MSS, None), 1000);
        assert_eq!(sb.pipe(s(1000), s(1000), s(1000), MSS, None), 0);
        // Retransmitted bytes count twice.
        assert_eq!(sb.pipe(s(1000), s(2000), s(1100), MSS, None), 1100);
    }

    #[test]
    fn test_pipe_with_holes() {
        // Hole [1000, 1100) is lost (three blocks above it), hole
        // [1200, 1300) is not (two small blocks above), nor are hole
        // [1310, 1400) or the tail [1410, 2000).
        let sb = board(1000, 2000, &[(1100, 1200), (1300, 1310), (1400, 1410)]);
        assert!(sb.is_lost(s(1000), MSS));
        assert!(!sb.is_lost(s(1200), MSS));
        assert_eq!(sb.pipe(s(1000), s(2000), s(1000), MSS, None), 100 + 90 + 590);
        // The lost hole retransmitted in part: those bytes count once.
        assert_eq!(sb.pipe(s(1000), s(2000), s(1050), MSS, None), 50 + 100 + 90 + 590);
        // Retransmitted up to 1250: lost hole 100, and 50 bytes of the second
        // hole count twice.
        assert_eq!(sb.pipe(s(1000), s(2000), s(1250), MSS, None), 100 + 150 + 90 + 590);
    }

    #[test]
    fn test_pipe_tail_never_lost() {
        // A lot SACKed, all of it below the tail.
        let sb = board(1000, 5000, &[(1100, 2000)]);
        assert!(sb.is_lost(s(1000), MSS));
        assert_eq!(sb.pipe(s(1000), s(5000), s(1000), MSS, None), 3000);
        // The tail retransmitted (after an RTO) counts twice.
        assert_eq!(sb.pipe(s(1000), s(5000), s(2100), MSS, None), 3000 + 100 + 100);
        // Everything SACKed up to high_data: only the lost hole, which is
        // out of the network.
        let sb = board(1000, 2000, &[(1100, 2000)]);
        assert_eq!(sb.pipe(s(1000), s(2000), s(1000), MSS, None), 0);
    }

    #[test]
    fn test_pipe_after_rto() {
        // After an RTO every byte not SACKed is lost, the tail too: only
        // what was retransmitted since counts, once.
        let sb = board(1000, 2000, &[(1100, 1200), (1300, 1310)]);
        assert_eq!(sb.pipe(s(1000), s(2000), s(1000), MSS, Some(s(2000))), 0);
        assert_eq!(sb.pipe(s(1000), s(2000), s(1050), MSS, Some(s(2000))), 50);
        // SACKed bytes below high_rxt were skipped, not resent.
        assert_eq!(sb.pipe(s(1000), s(2000), s(1250), MSS, Some(s(2000))), 100 + 50);
        assert_eq!(sb.pipe(s(1000), s(2000), s(1500), MSS, Some(s(2000))), 100 + 100 + 190);
        assert_eq!(sb.pipe(s(1000), s(2000), s(2000), MSS, Some(s(2000))), 1000 - 110);
        // Without SACK information too.
        let sb = Scoreboard::new();
        assert_eq!(sb.pipe(s(1000), s(2000), s(1000), MSS, Some(s(2000))), 0);
        assert_eq!(sb.pipe(s(1000), s(2000), s(1300), MSS, Some(s(2000))), 300);
        // Data first sent after the timeout (at 1500) is in the network: it
        // counts against the window, or the sender, free of it, would send
        // all it has at once.
        let sb = board(1000, 2000, &[(1100, 1200), (1300, 1310)]);
        assert_eq!(sb.pipe(s(1000), s(2000), s(1000), MSS, Some(s(1500))), 500);
        assert_eq!(sb.pipe(s(1000), s(2000), s(1250), MSS, Some(s(1500))), 500 + 100 + 50);
        let sb = Scoreboard::new();
        assert_eq!(sb.pipe(s(1000), s(2000), s(1300), MSS, Some(s(1500))), 500 + 300);
    }

    #[test]
    fn test_next_seg_rule1() {
        let sb = board(1000, 3000, &[(1250, 1500), (1600, 1610)]);
        let next = |rxt: u32| sb.next_seg(s(1000), s(3000), s(rxt), MSS, None, false);
        // The first hole is lost: up to one MSS of it.
        assert_eq!(next(1000), Some((s(1000), 100)));
        assert_eq!(next(1100), Some((s(1100), 100)));
        // Not crossing into the SACKed block.
        assert_eq!(next(1200), Some((s(1200), 50)));
        // The second hole, [1500, 1600), is not lost: no rule (1) segment.
        assert_eq!(next(1250), None);
        assert_eq!(next(1500), None);
        // high_rxt below una is taken as una.
        assert_eq!(sb.next_seg(s(1000), s(3000), s(900), MSS, None, false), Some((s(1000), 100)));
        // A smaller MSS.
        assert_eq!(sb.next_seg(s(1000), s(3000), s(1000), 30, None, false), Some((s(1000), 30)));
        assert_eq!(sb.next_seg(s(1000), s(3000), s(1000), 0, Some(s(3000)), true), None);
    }

    #[test]
    fn test_next_seg_rule1_skips_to_later_lost_hole() {
        // Holes [1000, 1100), [1200, 1300), [1400, 1500): three blocks above
        // the first, 201 bytes above the second (lost), 101 above the third
        // (not lost).
        let sb = board(1000, 3000, &[(1100, 1200), (1300, 1400), (1500, 1601)]);
        assert!(sb.is_lost(s(1200), MSS));
        assert!(!sb.is_lost(s(1400), MSS));
        let next = |rxt: u32| sb.next_seg(s(1000), s(3000), s(rxt), MSS, None, false);
        assert_eq!(next(1000), Some((s(1000), 100)));
        // The first hole retransmitted: the second.
        assert_eq!(next(1100), Some((s(1200), 100)));
        assert_eq!(next(1250), Some((s(1250), 50)));
        assert_eq!(next(1300), None);
    }

    #[test]
    fn test_next_seg_rule3() {
        let sb = board(1000, 3000, &[(1100, 1150), (1300, 1350)]);
        // Nothing lost.
        assert!(!sb.is_lost(s(1000), MSS));
        let next = |rxt: u32, rule3| sb.next_seg(s(1000), s(3000), s(rxt), MSS, None, rule3);
        assert_eq!(next(1000, false), None);
        assert_eq!(next(1000, true), Some((s(1000), 100)));
        assert_eq!(next(1120, true), Some((s(1150), 100)));
        assert_eq!(next(1250, true), Some((s(1250), 50)));
        // Not above the highest SACKed byte.
        assert_eq!(next(1300, true), None);
        assert_eq!(next(2000, true), None);
        // Rule (1) comes first: with the first hole lost, rule (3) is not
        // needed.
        let sb = board(1000, 3000, &[(1100, 1150), (1300, 1350), (1500, 1550)]);
        assert_eq!(sb.next_seg(s(1000), s(3000), s(1050), MSS, None, true), Some((s(1050), 50)));
        // ...but once past it, rule (3) finds the second hole.
        assert_eq!(sb.next_seg(s(1000), s(3000), s(1100), MSS, None, true), Some((s(1150), 100)));
    }

    #[test]
    fn test_next_seg_after_rto() {
        let sb = board(1000, 3000, &[(1100, 1150)]);
        let next = |rxt: u32| sb.next_seg(s(1000), s(3000), s(rxt), MSS, Some(s(3000)), false);
        assert_eq!(next(1000), Some((s(1000), 100)));
        // SACKed bytes are skipped...
        assert_eq!(next(1100), Some((s(1150), 100)));
        // ...and the tail is lost too.
        assert_eq!(next(2950), Some((s(2950), 50)));
        assert_eq!(next(3000), None);
        // Lost only up to the timeout's point: what was sent since is not
        // sent again, unless IsLost says so.
        let next = |rxt: u32| sb.next_seg(s(1000), s(3000), s(rxt), MSS, Some(s(1200)), false);
        assert_eq!(next(1000), Some((s(1000), 100)));
        assert_eq!(next(1100), Some((s(1150), 50)));
        assert_eq!(next(1200), None);
        // With nothing SACKed, all of it.
        let sb = Scoreboard::new();
        assert_eq!(sb.next_seg(s(1000), s(3000), s(1000), MSS, Some(s(3000)), false), Some((s(1000), 100)));
        assert_eq!(sb.next_seg(s(1000), s(3000), s(1000), MSS, None, true), None);
    }

    #[test]
    fn test_wraparound() {
        let una = u32::MAX - 150;
        let high = 1000u32;
        let mut sb = Scoreboard::new();
        // Blocks just below and across the wrap, and above it.
        let new = sb.update(&[Some((100, 200)), Some((u32::MAX - 100, 50)), None], s(una), s(high));
        assert_eq!(new, 100 + 151);
        assert_eq!(blocks(&sb), [(u32::MAX - 100, 50), (100, 200)]);
        // A block bridging them merges across the wrap.
        assert_eq!(sb.update(&[Some((40, 110))], s(una), s(high)), 50);
        assert_eq!(blocks(&sb), [(u32::MAX - 100, 200)]);
        // Beyond high_data across the wrap: ignored. At una: ignored.
        assert_eq!(sb.update(&[Some((900, 1001))], s(una), s(high)), 0);
        assert_eq!(sb.update(&[Some((una, u32::MAX))], s(una), s(high)), 0);
        // The hole [una, MAX - 100) has 301 bytes SACKed above it.
        assert!(sb.is_lost(s(una), MSS));
        assert!(!sb.is_lost(s(200), MSS));
        assert_eq!(sb.pipe(s(una), s(high), s(una), MSS, None), 800);
        assert_eq!(sb.pipe(s(una), s(high), s(u32::MAX - 120), MSS, None), 800 + 30);
        assert_eq!(sb.next_seg(s(una), s(high), s(una), MSS, None, false), Some((s(una), 50)));
        assert_eq!(sb.next_seg(s(una), s(high), s(una), MSS, Some(s(high)), false), Some((s(una), 50)));
        assert_eq!(
            sb.next_seg(s(una), s(high), s(u32::MAX - 100), MSS, Some(s(high)), false),
            Some((s(200), 100))
        );
        // Advance across the wrap.
        sb.advance(s(5));
        assert!(sb.is_empty());
        let mut sb = board(una, high, &[(u32::MAX - 100, 50), (100, 200)]);
        sb.advance(s(60));
        assert_eq!(blocks(&sb), [(100, 200)]);
    }

    #[test]
    fn test_garbage_never_panics() {
        let garbage = [
            (1500, 1500),
            (1600, 1500),
            (0, u32::MAX),
            (u32::MAX, 0),
            (1100, 1100 + (1 << 31)),
            (1100 + (1 << 31), 1100),
            (1000 + (1 << 31), 1001 + (1 << 31)),
            (1100, 1000),
            (0, 0),
        ];
        for &(una, high) in &[
            (1000u32, 2000u32),
            (1000, 1000),
            (2000, 1000),
            (1000, 1000 + (1 << 31) - 1),
            (1000, 1000 + (1 << 31)),
            (u32::MAX, 5),
        ] {
            let mut sb = Scoreboard::new();
            sb.update(&[Some((1100, 1200))], s(una), s(high));
            for &g in &garbage {
                sb.update(&[Some(g), Some(g), Some(g)], s(una), s(high));
                for &(l, r) in &garbage {
                    for seq in [l, r, una, high] {
                        sb.is_lost(s(seq), MSS);
                        sb.is_lost(s(seq), usize::MAX);
                        sb.pipe(s(una), s(high), s(seq), MSS, None);
                        sb.pipe(s(seq), s(l), s(r), usize::MAX, None);
                        sb.pipe(s(una), s(high), s(seq), 0, Some(s(high)));
                        sb.pipe(s(seq), s(l), s(r), usize::MAX, Some(s(una)));
                        let cases = [(None, false), (Some(s(l)), true), (None, true)];
                        for (lost_below, rule3) in cases {
                            sb.next_seg(s(una), s(high), s(seq), MSS, lost_below, rule3);
                            sb.next_seg(s(seq), s(l), s(r), usize::MAX, lost_below, rule3);
                        }
                    }
                }
                check_invariants(&sb);
            }
            for &g in &garbage {
                sb.advance(s(g.0));
                check_invariants(&sb);
            }
        }
        // Only the garbage-free block survives valid ranges.
        let mut sb = Scoreboard::new();
        for &g in &garbage {
            assert_eq!(sb.update(&[Some(g)], s(1000), s(2000)), 0, "{g:?}");
        }
        assert!(sb.is_empty());
    }

    fn check_invariants(sb: &Scoreboard) {
        assert!(sb.len <= CAPACITY);
        for b in sb.blocks() {
            assert!(b.left < b.right, "{sb:?}");
        }
        for w in sb.blocks().windows(2) {
            assert!(w[0].right < w[1].left, "{sb:?}");
        }
    }

    /// A byte-by-byte model of RFC 6675 §4, over a window of `W` bytes above
    /// una, checked against the scoreboard on random SACK blocks.
    #[test]
    fn test_against_bytewise_model() {
        const W: usize = 96;
        const MSS: usize = 8;
        let mut rng = 0x2545_f491_4f6c_dd1du64;
        let mut rand = move |n: usize| {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            (rng % n as u64) as usize
        };

        for round in 0..400 {
            // Start near the wrap for half the rounds.
            let base =
                if round % 2 == 0 { u32::MAX - rand(2 * W) as u32 } else { rand(1 << 20) as u32 };
            let mut una = s(base);
            let high = una + W;
            let mut sb = Scoreboard::new();
            let mut model = [false; W]; // SACKed, by offset from `base`.
            let mut overflowed = false;

            for _ in 0..12 {
                // Sometimes advance una.
                if rand(4) == 0 {
                    una = una + rand(12).min(W - (una - s(base)));
                    sb.advance(una);
                }
                let u = una - s(base);
                // Bytes below una are acked; a block reaching una is dropped.
                let mut lo = u;
                while lo < W && model[lo] {
                    lo += 1;
                }
                model[..lo].iter_mut().for_each(|b| *b = false);

                let mut sack = [None; 3];
                for b in sack.iter_mut() {
                    if rand(4) != 0 {
                        let l = rand(W + 10) as i64 - 5;
                        let r = l + rand(20) as i64 - 2;
                        let at = |o: i64| (base as i64 + o) as u32;
                        *b = Some((at(l), at(r)));
                    }
                }
                // Take the ACK's blocks at once when they surely fit, else
                // one by one, to know whether one was dropped for lack of room.
                let batches: &[&[Option<(u32, u32)>]] = if sb.len + sack.len() <= CAPACITY {
                    &[&sack]
                } else {
                    &[&sack[..1], &sack[1..2], &sack[2..]]
                };
                for batch in batches {
                    overflowed |= sb.len == CAPACITY;
                    let before = model.iter().filter(|&&b| b).count();
                    let new = sb.update(batch, una, high);
                    for &(l, r) in batch.iter().flatten() {
                        let l = (l.wrapping_sub(base) as i32) as i64;
                        let r = (r.wrapping_sub(base) as i32) as i64;
                        if l > u as i64 && l < r && r <= W as i64 {
                            model[l as usize..r as usize].iter_mut().for_each(|b| *b = true);
                        }
                    }
                    check_invariants(&sb);
                    if !overflowed {
                        assert_eq!(new, model.iter().filter(|&&b| b).count() - before);
                    }
                }

                // From here on, model the scoreboard's own contents.
                let mut sacked = [false; W];
                for b in sb.blocks() {
                    let l = b.left - s(base);
                    let r = b.right - s(base);
                    sacked[l..r].iter_mut().for_each(|b| *b = true);
                }
                if !overflowed {
                    assert_eq!(sacked, model);
                }
                check_model(&sb, &sacked, s(base), u, MSS, &mut rand);
            }
        }
    }

    fn check_model(
        sb: &Scoreboard,
        sacked: &[bool],
        base: TcpSeqNumber,
        u: usize,
        mss: usize,
        rand: &mut impl FnMut(usize) -> usize,
    ) {
        let w = sacked.len();
        let is_lost = |x: usize| {
            let bytes = (x + 1..w).filter(|&i| sacked[i]).count();
            let runs = (x + 1..w).filter(|&i| sacked[i] && (i == x + 1 || !sacked[i - 1])).count();
            runs >= DUP_THRESH || bytes > (DUP_THRESH - 1) * mss
        };
        for x in u..w {
            if !sacked[x] {
                assert_eq!(sb.is_lost(base + x, mss), is_lost(x), "x={x} {sb:?}");
            }
        }
        let highest = (0..w).rev().find(|&i| sacked[i]);
        let una = base + u;
        let high = base + w;
        for _ in 0..4 {
            let rxt = u + rand(w - u + 1);
            let pipe = (u..w)
                .filter(|&x| !sacked[x])
                .map(|x| usize::from(!is_lost(x)) + usize::from(x < rxt))
                .sum::<usize>();
            assert_eq!(sb.pipe(una, high, base + rxt, mss, None), pipe, "rxt={rxt} {sb:?}");
            // After a timeout at `p`: what was sent below it and not
            // SACKed is lost, what was sent since is judged as any.
            let p = u + rand(w - u + 1);
            let lost_at_p = |x: usize| x < p || is_lost(x);
            let pipe_after_rto = (u..w)
                .filter(|&x| !sacked[x])
                .map(|x| usize::from(!lost_at_p(x)) + usize::from(x < rxt))
                .sum::<usize>();
            assert_eq!(
                sb.pipe(una, high, base + rxt, mss, Some(base + p)),
                pipe_after_rto,
                "rxt={rxt} p={p} {sb:?}"
            );

            let seg_at = |x: usize| {
                let len = (x..w).take_while(|&i| !sacked[i]).count().min(mss);
                (base + x, len)
            };
            let below_highest = |x: usize| highest.is_some_and(|h| x < h);
            let rule1 = (rxt..w).find(|&x| !sacked[x] && below_highest(x) && is_lost(x));
            let rule3 = (rxt..w).find(|&x| !sacked[x] && below_highest(x));
            // The first byte lost at `p`, and its segment: a hole lost by
            // IsLost goes whole, one lost by the timeout up to `p`.
            let after_rto = (rxt..w).find(|&x| !sacked[x] && ((below_highest(x) && is_lost(x)) || x < p));
            let seg_after_rto = |x: usize| {
                let (seq, len) = seg_at(x);
                if below_highest(x) && is_lost(x) { (seq, len) } else { (seq, len.min(p - x)) }
            };
            let next = |lost_below, rule3| sb.next_seg(una, high, base + rxt, mss, lost_below, rule3);
            assert_eq!(next(None, false), rule1.map(seg_at), "rxt={rxt} {sb:?}");
            assert_eq!(next(None, true), rule1.or(rule3).map(seg_at), "rxt={rxt} {sb:?}");
            assert_eq!(
                next(Some(base + p), false),
                after_rto.map(seg_after_rto),
                "rxt={rxt} p={p} {sb:?}"
            );
        }
    }
}
