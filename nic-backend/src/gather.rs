//! Zero-copy transmit: the NIC's transmit mappings, and the gather that
//! fills outgoing frames from them. A mapping is a buffer, whose bytes go
//! out as they are, or a tagged iWARP message, which the NIC cuts into
//! FPDUs as it sends them ([`TxFpdus`]): each FPDU's length and header
//! written here, its payload gathered, its pad and CRC field zero for the
//! transmit CRC offload to fill in after.
//!
//! After each range it copies, the gather reads ahead as much again of
//! what the mapping holds next ([`copy::read_ahead`]), which the next
//! segment most likely takes, as a DMA engine keeps reads in flight.
//!
//! The stack names, in each frame's metadata, the payload ranges it never
//! wrote and the mapping (token and offset) they come from. The NIC looks
//! them all up before it sends anything: a frame that names bytes of no
//! mapping is dropped whole, since whatever it holds there is stale.
//! A token is a slot and the generation of the mapping in it, so a stale
//! one finds nothing (for the next 2^32 mappings) rather than another
//! socket's buffer.

use crate::{copy, frame};
use smoltcp::phy::GatherRanges;
use std::sync::Arc;
use ulp_ddp::{DdpError, IoBuf, SgEntry, TxFpdus};

/// Transmit mappings the NIC holds at once, over all sockets.
const MAX_TX_MAPS: usize = 1 << 16;

struct TxMap {
    generation: u32,
    sk: u32,
    src: Source,
}

/// What a mapping's bytes are.
#[derive(Clone)]
enum Source {
    Buffer(SgEntry),
    Fpdus(Arc<TxFpdus>),
}

impl Source {
    fn len(&self) -> usize {
        match self {
            Source::Buffer(sg) => sg.len,
            Source::Fpdus(f) => f.len(),
        }
    }
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
        self.insert_source(sk, Source::Buffer(sg))
    }

    /// Map a message to cut into FPDUs for socket `sk` (its entries were
    /// checked when it was made); the token that names it.
    pub fn insert_fpdus(&mut self, sk: u32, fpdus: Arc<TxFpdus>) -> Result<u64, DdpError> {
        self.insert_source(sk, Source::Fpdus(fpdus))
    }

    fn insert_source(&mut self, sk: u32, src: Source) -> Result<u64, DdpError> {
        if self.maps.len() >= MAX_TX_MAPS {
            return Err(DdpError::TooManyTxMaps(MAX_TX_MAPS));
        }
        self.generation = self.generation.wrapping_add(1);
        let slot = self.maps.insert(TxMap { generation: self.generation, sk, src });
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
            let src = &self.get(g.token)?.src;
            let len = usize::from(g.end - g.start);
            let at = usize::try_from(g.token_offset).ok()?;
            if at.checked_add(len)? > src.len() {
                return None;
            }
            let from = match src {
                Source::Buffer(sg) => From::Buffer {
                    buf: sg.buf.clone(),
                    offset: sg.offset + at,
                    end: sg.offset + sg.len,
                },
                Source::Fpdus(f) => From::Fpdus { fpdus: f.clone(), at },
            };
            *slot = Some(Piece { start: usize::from(g.start), len, from });
        }
        Some(out)
    }
}

/// Payload bytes `start..start + len` of a frame, and where they come from.
struct Piece {
    start: usize,
    len: usize,
    from: From,
}

enum From {
    /// `buf[offset..]`, of a mapping that ends at `buf[end]`.
    Buffer { buf: IoBuf, offset: usize, end: usize },
    /// The framed message's octets from `at` on.
    Fpdus { fpdus: Arc<TxFpdus>, at: usize },
}

/// A frame's gathered ranges, resolved.
#[derive(Default)]
pub(crate) struct Gathers {
    pieces: [Option<Piece>; GatherRanges::CAPACITY],
}

impl Gathers {
    /// Copy each range into the TCP payload of `frame` (the DMA), framing
    /// the FPDUs of a message as it goes.
    pub fn fill(&self, frame: &mut [u8]) -> Filled {
        let mut filled = Filled::default();
        let Some(seg) = frame::parse_headers(frame) else { return filled };
        let payload = &mut frame[seg.payload_at..seg.payload_at + seg.payload_len];
        for p in self.pieces.iter().flatten() {
            // `resolve` checked the source against the mapping, whose
            // buffer never changes length; the stack sized the payload.
            let Some(dst) = payload.get_mut(p.start..p.start + p.len) else {
                debug_assert!(false, "a gather range past the payload");
                continue;
            };
            filled.bytes += p.len as u64;
            match &p.from {
                From::Buffer { buf, offset, end: map_end } => {
                    let (buf, end) = (buf.lock(), *offset + p.len);
                    dst.copy_from_slice(&buf[*offset..end]);
                    // The next segment most likely takes as much again.
                    copy::read_ahead(&buf[end..(end + p.len).min(*map_end).max(end)]);
                    filled.gathered += p.len as u64;
                }
                From::Fpdus { fpdus, at } => {
                    // The payload is gathered; the framing is the NIC's own.
                    let (started, payload) = fpdus.fill(*at, dst);
                    let end = *at + p.len;
                    fpdus.payload_runs(end, (end + p.len).min(fpdus.len()), copy::read_ahead);
                    filled.fpdus += started;
                    filled.gathered += payload as u64;
                }
            }
        }
        filled
    }
}

/// What [`Gathers::fill`] wrote into a frame.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Filled {
    /// Octets written: gathered, or framing.
    pub bytes: u64,
    /// Payload octets gathered from buffers.
    pub gathered: u64,
    /// FPDUs that start in the frame, framed.
    pub fpdus: u64,
}
