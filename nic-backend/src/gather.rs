//! Zero-copy transmit: the NIC's transmit mappings, and the gather that
//! fills outgoing frames from them.
//!
//! The stack names, in each frame's metadata, the payload ranges it never
//! wrote and the mapping (token and offset) they come from. The NIC looks
//! them all up before it sends anything: a frame that names bytes of no
//! mapping is dropped whole, since whatever it holds there is stale.
//! A token is a slot and the generation of the mapping in it, so a stale
//! one finds nothing (for the next 2^32 mappings) rather than another
//! socket's buffer.

use crate::frame;
use smoltcp::phy::GatherRanges;
use ulp_ddp::{DdpError, IoBuf, SgEntry};

/// Transmit mappings the NIC holds at once, over all sockets.
const MAX_TX_MAPS: usize = 1 << 16;

struct TxMap {
    generation: u32,
    sk: u32,
    sg: SgEntry,
}

/// Every socket's transmit mappings, by token.
#[derive(Default)]
pub(crate) struct TxMaps {
    generation: u32,
    maps: slab::Slab<TxMap>,
}

impl TxMaps {
    /// Map `sg` for socket `sk`; the token that names it.
    pub fn insert(&mut self, sk: u32, sg: SgEntry) -> Result<u64, DdpError> {
        if sg.len == 0 {
            return Err(DdpError::Empty);
        }
        if !sg.in_bounds() {
            return Err(DdpError::BadEntry(0));
        }
        if self.maps.len() >= MAX_TX_MAPS {
            return Err(DdpError::TooManyTxMaps(MAX_TX_MAPS));
        }
        self.generation = self.generation.wrapping_add(1);
        let slot = self.maps.insert(TxMap { generation: self.generation, sk, sg });
        Ok(u64::from(self.generation) << 32 | slot as u64)
    }

    fn get(&self, token: u64) -> Option<&TxMap> {
        let (generation, slot) = ((token >> 32) as u32, token as u32 as usize);
        self.maps.get(slot).filter(|m| m.generation == generation)
    }

    /// Unmap `token` of socket `sk`; whether it was mapped.
    pub fn remove(&mut self, sk: u32, token: u64) -> bool {
        match self.get(token) {
            Some(m) if m.sk == sk => {
                self.maps.remove(token as u32 as usize);
                true
            }
            _ => false,
        }
    }

    /// Where each of `gather`'s ranges comes from, or `None` if one names
    /// bytes of no mapping.
    pub fn resolve(&self, gather: &GatherRanges) -> Option<Gathers> {
        let mut out = Gathers::default();
        for (slot, g) in out.pieces.iter_mut().zip(gather.iter()) {
            let sg = &self.get(g.token)?.sg;
            let len = usize::from(g.end - g.start);
            let at = usize::try_from(g.token_offset).ok()?;
            if at.checked_add(len)? > sg.len {
                return None;
            }
            *slot = Some(Piece {
                start: usize::from(g.start),
                len,
                buf: sg.buf.clone(),
                offset: sg.offset + at,
            });
        }
        Some(out)
    }
}

/// Payload bytes `start..start + len` of a frame are `buf[offset..]`.
struct Piece {
    start: usize,
    len: usize,
    buf: IoBuf,
    offset: usize,
}

/// A frame's gathered ranges, resolved.
#[derive(Default)]
pub(crate) struct Gathers {
    pieces: [Option<Piece>; GatherRanges::CAPACITY],
}

impl Gathers {
    /// Copy each range into the TCP payload of `frame` (the DMA); the bytes
    /// copied.
    pub fn fill(&self, frame: &mut [u8]) -> u64 {
        let Some(seg) = frame::parse_headers(frame) else { return 0 };
        let payload = &mut frame[seg.payload_at..seg.payload_at + seg.payload_len];
        let mut n = 0;
        for p in self.pieces.iter().flatten() {
            // `resolve` checked the source against the mapping, whose
            // buffer never changes length; the stack sized the payload.
            let Some(dst) = payload.get_mut(p.start..p.start + p.len) else {
                debug_assert!(false, "a gather range past the payload");
                continue;
            };
            dst.copy_from_slice(&p.buf.lock()[p.offset..p.offset + p.len]);
            n += p.len as u64;
        }
        n
    }
}
