//! Where received payload goes: a mapped buffer ([`Mapping`]) and, for one
//! segment, the payload ranges the NIC wrote there ([`Placed`]), which the
//! stack then leaves out of its ring.
//!
//! It must never write outside a mapping's entries, nor report a range as
//! placed that lies outside the segment at hand.

use crate::copy::copy_then_crc;
use smoltcp::phy::PlacedRanges;
use ulp_ddp::{Frag, IoBuf, SgEntry, Sgl};

/// A buffer the device may place into (a tag's, an STag's, a posted
/// receive's), as the device keeps it.
pub(crate) struct Mapping {
    /// The buffer's entries, contiguous runs merged.
    pub entries: Sgl,
    pub len: usize,
    pub oneshot: bool,
    /// One-shot mappings go live when the message that carries them leaves.
    pub live: bool,
}

impl Mapping {
    /// The mapping of `sgl`, whose entries the caller checked.
    pub fn new(sgl: Sgl, oneshot: bool, live: bool) -> Self {
        let mut entries = Sgl::new();
        for e in sgl {
            match entries.last_mut() {
                Some(l) if l.buf.same(&e.buf) && l.offset + l.len == e.offset => l.len += e.len,
                _ => entries.push(e),
            }
        }
        let len = entries.iter().map(|e| e.len).sum();
        Self { entries, len, oneshot, live }
    }

    /// Write `src` at byte `pos` of the mapping, continuing `crc` over it
    /// when `crc` is given. `None` if the bytes do not fit: the caller
    /// checked at the PDU header that they do, so that is a bug, and the
    /// bytes are then left to the ULP as unplaced.
    pub fn place(&self, pos: usize, src: &[u8], mut crc: Option<u32>) -> Option<Option<u32>> {
        let mut entry_start = 0;
        let mut done = 0;
        for SgEntry { buf, offset: off, len } in &self.entries {
            if done == src.len() {
                break;
            }
            let at = pos + done;
            if at >= entry_start + len {
                entry_start += len;
                continue;
            }
            let in_entry = at - entry_start;
            let k = (len - in_entry).min(src.len() - done);
            let mut g = buf.lock();
            let dst = g.get_mut(off + in_entry..off + in_entry + k)?;
            let s = &src[done..done + k];
            crc = match crc {
                Some(c) => Some(copy_then_crc(dst, s, c)),
                None => {
                    dst.copy_from_slice(s);
                    None
                }
            };
            done += k;
            entry_start += len;
        }
        (done == src.len()).then_some(crc)
    }

    /// The buffer runs that bytes `[pos, pos + len)` of the mapping lie
    /// in: `f(bytes before this run, buffer, offset, length)`.
    pub fn pieces(&self, pos: usize, len: usize, mut f: impl FnMut(usize, &IoBuf, usize, usize)) {
        let (mut entry_start, mut done) = (0, 0);
        for SgEntry { buf, offset: off, len: elen } in &self.entries {
            if done == len {
                break;
            }
            let at = pos + done;
            if at < entry_start + elen {
                let k = (entry_start + elen - at).min(len - done);
                f(done, buf, off + at - entry_start, k);
                done += k;
            }
            entry_start += elen;
        }
    }
}

/// Payload of one received segment that the NIC placed, as ranges of its
/// TCP payload: the stack does not copy these bytes (`PacketMeta::placed`).
#[derive(Debug, Default, Clone)]
pub(crate) struct Placed {
    /// Stream offset of the segment's first payload byte.
    pub base: u64,
    /// Where the payload starts in the frame.
    pub frame_at: usize,
    pub ranges: PlacedRanges,
    /// Placed bytes may be kept out of the ring.
    pub zero_copy: bool,
    /// The frame is being copied for the stack, so the NIC may change
    /// what it carries (TLS decrypts) ...
    pub may_rewrite: bool,
    /// ... and did: the stack gets the NIC's copy.
    pub rewritten: bool,
    /// Added to a stream offset of the layer at hand gives the TCP
    /// stream offset: 0, but for a layer inside TLS, which counts its own.
    pub shift: u64,
    /// Where bytes kept out of the ring went, by TCP stream offset, for
    /// whoever must find them again (software opening a TLS record the
    /// NIC could not vouch for).
    pub located: Option<Vec<Frag>>,
}

impl Placed {
    /// Copy `frame` into `dst`, which is as long, except the bytes placed:
    /// the DMA of a device that splits header from data.
    pub fn dma(&self, dst: &mut [u8], frame: &[u8]) {
        let mut at = 0;
        for r in self.ranges.iter() {
            let (start, end) = (self.frame_at + r.start, self.frame_at + r.end);
            dst[at..start].copy_from_slice(&frame[at..start]);
            at = end;
        }
        dst[at..].copy_from_slice(&frame[at..]);
    }

    /// The metadata that tells the stack what not to copy.
    pub fn meta(&self) -> smoltcp::phy::PacketMeta {
        let mut meta = smoltcp::phy::PacketMeta::default();
        meta.placed = self.ranges;
        meta
    }

    /// Stream bytes `[start, end)` were placed and the ULP was told so.
    /// Ranges that do not fit are left out: the stack copies them too,
    /// which the ULP never reads, and which is always correct.
    pub fn push(&mut self, start: u64, end: u64) -> bool {
        if !self.zero_copy {
            return false;
        }
        let Some((a, b)) = self.in_segment(start, end) else {
            debug_assert!(false, "a segment payload is shorter than 64 KiB");
            return false;
        };
        self.ranges.push(a, b)
    }

    /// Stream bytes `[start, end)` of this segment, in place of the placed
    /// ranges inside them, were consumed whole and the ULP was told so.
    pub fn consume(&mut self, start: u64, end: u64) -> bool {
        let Some((a, b)) = self.in_segment(start, end).filter(|_| self.zero_copy) else {
            return false;
        };
        self.ranges.truncate_from(a);
        self.ranges.push(a, b)
    }

    /// Bytes `[start, start + n)`, just kept out of the ring, are at `pos`
    /// of mapping `m`: noted, if someone asked.
    pub fn locate(&mut self, start: u64, m: &Mapping, pos: usize, n: usize) {
        let (shift, Some(v)) = (self.shift, self.located.as_mut()) else { return };
        m.pieces(pos, n, |before, buf, offset, len| {
            let start = start.wrapping_add(shift) + before as u64;
            v.push(Frag { start, buf: buf.clone(), offset, len });
        });
    }

    /// Stream bytes `[start, end)` as offsets into this segment's payload.
    fn in_segment(&self, start: u64, end: u64) -> Option<(u16, u16)> {
        let at = |x: u64| {
            x.wrapping_add(self.shift).checked_sub(self.base).and_then(|d| u16::try_from(d).ok())
        };
        Some((at(start)?, at(end)?))
    }
}
