//! A sparse RAM namespace.

use crate::{check_block_size, check_size};
use nvme_of::namespace::{BlockIo, Done, Namespace};
use std::io;
use std::sync::{PoisonError, RwLock};

const CHUNK: usize = 1 << 20;

/// A megabyte of the namespace, allocated on first write.
type Chunk = RwLock<Option<Box<[u8]>>>;

/// A RAM namespace, allocated a megabyte at a time on first write. Its
/// data lives and dies with the process.
pub struct RamNamespace {
    block_size: u32,
    size: u64,
    chunks: Vec<Chunk>,
}

impl RamNamespace {
    /// `size` must be whole blocks.
    pub fn new(size: u64, block_size: u32) -> io::Result<Self> {
        check_block_size(block_size)?;
        check_size(size, block_size)?;
        let n = size.div_ceil(CHUNK as u64) as usize;
        let chunks = (0..n).map(|_| RwLock::new(None)).collect();
        Ok(Self { block_size, size, chunks })
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

    pub fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        for (idx, off, at, n) in Self::pieces(offset, buf.len() as u64) {
            let chunk = self.chunk(idx)?.read().unwrap_or_else(PoisonError::into_inner);
            let dst = &mut buf[at..at + n];
            match chunk.as_deref() {
                Some(c) => dst.copy_from_slice(&c[off..off + n]),
                None => dst.fill(0),
            }
        }
        Ok(())
    }

    pub fn write_at(&self, offset: u64, buf: &[u8]) -> io::Result<()> {
        for (idx, off, at, n) in Self::pieces(offset, buf.len() as u64) {
            let mut chunk = self.chunk(idx)?.write().unwrap_or_else(PoisonError::into_inner);
            let c = chunk.get_or_insert_with(|| vec![0; CHUNK].into_boxed_slice());
            c[off..off + n].copy_from_slice(&buf[at..at + n]);
        }
        Ok(())
    }

    /// Zero a range; whole chunks are given back.
    pub fn write_zeroes(&self, offset: u64, len: u64) -> io::Result<()> {
        for (idx, off, _, n) in Self::pieces(offset, len) {
            let mut chunk = self.chunk(idx)?.write().unwrap_or_else(PoisonError::into_inner);
            if n == CHUNK {
                *chunk = None;
            } else if let Some(c) = chunk.as_deref_mut() {
                c[off..off + n].fill(0);
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
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ram_is_sparse_and_spans_chunks() {
        let ns = RamNamespace::new(3 * CHUNK as u64 + 4096, 4096).unwrap();
        assert_eq!(ns.blocks(), 3 * 256 + 1);
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

    #[test]
    fn a_size_that_is_not_whole_blocks_is_refused_not_rounded() {
        let e = RamNamespace::new(1000, 512).err().expect("refused");
        assert!(e.to_string().contains("1 blocks and 488 bytes"), "{e}");
        assert!(RamNamespace::new(0, 512).err().expect("refused").to_string().contains("smaller"));
        assert_eq!(RamNamespace::new(1024, 512).unwrap().size(), 1024);
    }
}
