//! A sparse RAM namespace that lends what it holds.

use crate::{check_block_size, check_size};
use nvme_of::namespace::{BlockIo, Done, Namespace};
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{PoisonError, RwLock, RwLockWriteGuard};
use ulp_ddp::{IoBuf, SgEntry};

/// The unit of allocation, and of copy-on-write: a write to a chunk that
/// is lent copies this much at most.
const CHUNK: usize = 128 << 10;

/// Reads shorter than this are copied, not lent. A lent read holds its
/// whole chunk until the host has it, and a write into a lent chunk copies
/// the whole chunk: from half a chunk up, reads held by a host that does
/// not read its socket hold at most twice the memory their copies would
/// have, and a write to what they hold costs at most twice the copies
/// lending saved.
const LEND_MIN: usize = CHUNK / 2;

/// A chunk of the namespace, allocated on first write. A buffer someone
/// else holds (a lent one) is never written again: a write replaces it
/// with a copy.
type Chunk = RwLock<Option<IoBuf>>;

/// A RAM namespace, allocated a chunk at a time on first write. Its data
/// lives and dies with the process.
pub struct RamNamespace {
    block_size: u32,
    size: u64,
    chunks: Vec<Chunk>,
    lent: AtomicU64,
    copied_on_write: AtomicU64,
}

/// What lending cost and saved.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RamStats {
    /// Bytes read by lending them, not copying them.
    pub lent_bytes: u64,
    /// Bytes copied because a write came to a chunk someone still held.
    pub copied_on_write_bytes: u64,
}

impl RamNamespace {
    /// `size` must be whole blocks.
    pub fn new(size: u64, block_size: u32) -> io::Result<Self> {
        check_block_size(block_size)?;
        check_size(size, block_size)?;
        let n = size.div_ceil(CHUNK as u64) as usize;
        let chunks = (0..n).map(|_| RwLock::new(None)).collect();
        Ok(Self {
            block_size,
            size,
            chunks,
            lent: AtomicU64::new(0),
            copied_on_write: AtomicU64::new(0),
        })
    }

    pub fn stats(&self) -> RamStats {
        RamStats {
            lent_bytes: self.lent.load(Ordering::Relaxed),
            copied_on_write_bytes: self.copied_on_write.load(Ordering::Relaxed),
        }
    }

    /// Visit the chunk pieces `[offset, offset+len)` covers: (chunk index,
    /// offset in chunk, offset in the caller's range, length).
    fn pieces(offset: u64, len: u64) -> impl Iterator<Item = (usize, usize, usize, usize)> {
        let mut at = 0u64;
        std::iter::from_fn(move || {
            if at >= len {
                return None;
            }
            let abs = offset + at;
            let (idx, off) = ((abs / CHUNK as u64) as usize, (abs % CHUNK as u64) as usize);
            let n = (CHUNK - off).min((len - at) as usize);
            let piece = (idx, off, at as usize, n);
            at += n as u64;
            Some(piece)
        })
    }

    fn chunk(&self, idx: usize) -> io::Result<&Chunk> {
        self.chunks.get(idx).ok_or_else(|| io::Error::other("offset beyond the namespace"))
    }

    /// Chunk `idx` to write `n` bytes of, held: allocated if it was not,
    /// and a copy of its own if its buffer is lent.
    fn writable(&self, idx: usize, n: usize) -> io::Result<RwLockWriteGuard<'_, Option<IoBuf>>> {
        let mut chunk = self.chunk(idx)?.write().unwrap_or_else(PoisonError::into_inner);
        match chunk.as_ref() {
            None => *chunk = Some(IoBuf::new(CHUNK)),
            // All of it is about to be written: nothing to copy.
            Some(c) if c.is_shared() && n == CHUNK => *chunk = Some(IoBuf::new(CHUNK)),
            Some(c) if c.is_shared() => {
                self.copied_on_write.fetch_add(CHUNK as u64, Ordering::Relaxed);
                *chunk = Some(IoBuf::from_vec(c.to_vec()));
            }
            Some(_) => {}
        }
        Ok(chunk)
    }

    pub fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        for (idx, off, at, n) in Self::pieces(offset, buf.len() as u64) {
            let chunk = self.chunk(idx)?.read().unwrap_or_else(PoisonError::into_inner);
            let dst = &mut buf[at..at + n];
            match chunk.as_ref() {
                Some(c) => dst.copy_from_slice(&c.lock()[off..off + n]),
                None => dst.fill(0),
            }
        }
        Ok(())
    }

    pub fn write_at(&self, offset: u64, buf: &[u8]) -> io::Result<()> {
        for (idx, off, at, n) in Self::pieces(offset, buf.len() as u64) {
            if let Some(c) = self.writable(idx, n)?.as_ref() {
                c.lock()[off..off + n].copy_from_slice(&buf[at..at + n]);
            }
        }
        Ok(())
    }

    /// Zero a range; whole chunks are given back.
    pub fn write_zeroes(&self, offset: u64, len: u64) -> io::Result<()> {
        for (idx, off, _, n) in Self::pieces(offset, len) {
            if n == CHUNK {
                *self.chunk(idx)?.write().unwrap_or_else(PoisonError::into_inner) = None;
            } else if self.chunk(idx)?.read().unwrap_or_else(PoisonError::into_inner).is_some()
                && let Some(c) = self.writable(idx, n)?.as_ref()
            {
                c.lock()[off..off + n].fill(0);
            }
        }
        Ok(())
    }
}

impl Namespace for RamNamespace {
    fn block_size(&self) -> u32 {
        self.block_size
    }

    fn size(&self) -> u64 {
        self.size
    }

    /// Memory answers at once; nothing is ever volatile beyond it.
    fn submit(&self, io: BlockIo, done: Done) {
        done.complete(match io {
            BlockIo::Read { offset, buf, len } => self.read_at(offset, &mut buf.lock()[..len]),
            BlockIo::Write { offset, buf, len, .. } => self.write_at(offset, &buf.lock()[..len]),
            BlockIo::WriteZeroes { offset, len, .. } => self.write_zeroes(offset, len),
            BlockIo::Deallocate(ranges) => {
                ranges.into_iter().try_for_each(|(offset, len)| self.write_zeroes(offset, len))
            }
            BlockIo::Flush => Ok(()),
        });
    }

    /// A read of at least `LEND_MIN` bytes inside one written chunk is
    /// lent; the chunk is copied before anything writes it again.
    fn lend(&self, offset: u64, len: usize) -> Option<SgEntry> {
        let (idx, off, _, n) = Self::pieces(offset, len as u64).next()?;
        if len < LEND_MIN || n < len {
            return None;
        }
        let chunk = self.chunks.get(idx)?.read().unwrap_or_else(PoisonError::into_inner);
        let buf = chunk.as_ref()?.clone();
        self.lent.fetch_add(len as u64, Ordering::Relaxed);
        Some(SgEntry { buf, offset: off, len })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ram_is_sparse_and_spans_chunks() {
        let ns = RamNamespace::new(3 * CHUNK as u64 + 4096, 4096).unwrap();
        assert_eq!(ns.blocks(), 3 * (CHUNK as u64 / 4096) + 1);
        let mut buf = vec![0xff; 8192];
        ns.read_at(CHUNK as u64 - 4096, &mut buf).unwrap();
        assert!(buf.iter().all(|&b| b == 0));
        let data: Vec<u8> = (0..8192u32).map(|i| i as u8).collect();
        ns.write_at(CHUNK as u64 - 4096, &data).unwrap();
        ns.read_at(CHUNK as u64 - 4096, &mut buf).unwrap();
        assert_eq!(buf, data);
        ns.write_zeroes(CHUNK as u64 - 2048, 4096).unwrap();
        ns.read_at(CHUNK as u64 - 4096, &mut buf).unwrap();
        assert_eq!(&buf[..2048], &data[..2048]);
        assert!(buf[2048..6144].iter().all(|&b| b == 0));
        assert_eq!(&buf[6144..], &data[6144..]);
        assert!(RamNamespace::new(1000, 1000).is_err());
    }

    fn bytes(e: &SgEntry) -> Vec<u8> {
        e.buf.lock()[e.offset..e.offset + e.len].to_vec()
    }

    #[test]
    fn a_lent_range_keeps_its_bytes_while_writes_go_to_a_copy() {
        let ns = RamNamespace::new(4 * CHUNK as u64, 512).unwrap();
        let old: Vec<u8> = (0..CHUNK as u32).map(|i| (i * 7) as u8).collect();
        ns.write_at(CHUNK as u64, &old).unwrap();
        let lent = ns.lend(CHUNK as u64 + 4096, LEND_MIN).expect("lent");
        assert_eq!((lent.offset, lent.len), (4096, LEND_MIN));
        assert_eq!(bytes(&lent), &old[4096..4096 + LEND_MIN]);
        // A write over the lent range, and one that fills the chunk.
        ns.write_at(CHUNK as u64 + 8192, &[0xaa; 512]).unwrap();
        assert_eq!(bytes(&lent), &old[4096..4096 + LEND_MIN], "the lent bytes never change");
        let mut now = vec![0; 1024];
        ns.read_at(CHUNK as u64 + 8192 - 256, &mut now).unwrap();
        assert_eq!(&now[..256], &old[8192 - 256..8192]);
        assert_eq!(&now[256..768], &[0xaa; 512]);
        assert_eq!(ns.stats().copied_on_write_bytes, CHUNK as u64);
        // The copy is no one else's: the next write goes into it in place.
        ns.write_at(CHUNK as u64, &[1; 512]).unwrap();
        assert_eq!(ns.stats().copied_on_write_bytes, CHUNK as u64);
        // A whole-chunk write to a lent chunk has nothing to copy.
        let again = ns.lend(CHUNK as u64, CHUNK).expect("lent");
        ns.write_at(CHUNK as u64, &vec![2; CHUNK]).unwrap();
        assert_eq!(ns.stats().copied_on_write_bytes, CHUNK as u64);
        assert_eq!(bytes(&again)[..512], [1; 512]);
        // Nor does zeroing it, which gives the chunk back.
        let zeroed = ns.lend(CHUNK as u64, CHUNK).expect("lent");
        ns.write_zeroes(CHUNK as u64, CHUNK as u64).unwrap();
        assert!(bytes(&zeroed).iter().all(|&b| b == 2));
        assert_eq!(ns.stats().lent_bytes, (LEND_MIN + 2 * CHUNK) as u64);
    }

    #[test]
    fn small_straddling_and_unwritten_reads_are_not_lent() {
        let ns = RamNamespace::new(4 * CHUNK as u64, 512).unwrap();
        assert!(ns.lend(0, CHUNK).is_none(), "never written: nothing to lend");
        ns.write_at(0, &vec![5; 2 * CHUNK]).unwrap();
        assert!(ns.lend(0, LEND_MIN - 512).is_none(), "too small to lend");
        assert!(ns.lend(CHUNK as u64 - 4096, LEND_MIN).is_none(), "in two chunks");
        assert!(ns.lend(4 * CHUNK as u64, LEND_MIN).is_none(), "beyond the namespace");
        assert!(ns.lend(CHUNK as u64, CHUNK).is_some());
        assert_eq!(ns.stats().lent_bytes, CHUNK as u64);
    }

    #[test]
    fn a_size_that_is_not_whole_blocks_is_refused_not_rounded() {
        let e = RamNamespace::new(1000, 512).err().expect("refused");
        assert!(e.to_string().contains("1 blocks and 488 bytes"), "{e}");
        assert!(RamNamespace::new(0, 512).err().expect("refused").to_string().contains("smaller"));
        assert_eq!(RamNamespace::new(1024, 512).unwrap().size(), 1024);
    }
}
