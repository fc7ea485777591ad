//! What the NIC's protocol trackers ([`crate::pdu`], [`crate::mpa`]) have in
//! common: the events they hand out, how they fail, and the [`Tracker`]
//! trait a flow drives them through.
//!
//! Types only: it must never know a protocol's layout.

/// What the input held.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Event<'a, H> {
    /// A whole, consistent header; data then `End` follow.
    Header(H),
    /// Payload of the current unit: `bytes` sit at `offset` within it.
    Data { offset: u32, bytes: &'a [u8] },
    /// Bytes of a marker (nothing else): `inside` a unit, and so in its
    /// digest, or in front of one.
    Marker { inside: bool },
    /// The unit is complete: its digest as sent, unless it has none or
    /// some of it was skipped.
    End { digest: Option<u32> },
}

/// A stream the tracker cannot follow from here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Unfollowable;

/// Follows the units (PDUs, FPDUs) of one direction of a connection,
/// taking the stream in any pieces.
pub(crate) trait Tracker {
    type Header: Copy;
    /// Bytes a header needs before it can be judged at all.
    const MIN_HEADER: usize;

    /// Take bytes from `input`: how many were used and the event they
    /// completed. `(n, None)` means more is needed: all of `input` was
    /// used, or a marker comes next. Call again while events come, even
    /// with no input (a unit without data ends without using bytes).
    #[allow(clippy::type_complexity)]
    fn next<'a>(
        &mut self,
        input: &'a [u8],
    ) -> Result<(usize, Option<Event<'a, Self::Header>>), Unfollowable>;

    /// Pass over `n` lost bytes of the current unit. False, changing
    /// nothing, if they would reach into the next header.
    fn skip(&mut self, n: u64) -> bool;

    /// Forget any partial unit: one starts at stream offset `at`.
    fn restart(&mut self, at: u64);

    /// Stream offset of the unit whose header just came, its first bytes
    /// seen at `first_seen`: a tracker that counts no offsets takes that
    /// word for it.
    fn unit_start(&self, first_seen: u64) -> u64 {
        first_seen
    }
}
