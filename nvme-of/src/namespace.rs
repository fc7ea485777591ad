//! The storage behind a controller's namespaces: a trait, a sparse RAM
//! implementation, and one over a regular file or a block device.
//!
//! Offsets and lengths are in bytes; the controller has already checked
//! them against the namespace's size and block size.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::{PoisonError, RwLock};

/// Block storage a namespace is made of.
pub trait Namespace: Send + Sync {
    /// Logical block size in bytes: 512 or 4096.
    fn block_size(&self) -> u32;
    /// Size in bytes, a multiple of the block size.
    fn size(&self) -> u64;
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()>;
    fn write_at(&self, offset: u64, buf: &[u8]) -> io::Result<()>;
    /// Make every completed write durable.
    fn flush(&self) -> io::Result<()>;
    /// Zero a range. Deallocated ranges read back as zeros too (DLFEAT 001b).
    fn write_zeroes(&self, offset: u64, len: u64) -> io::Result<()>;
    /// Deallocate a range (Dataset Management); reads return zeros afterwards.
    fn deallocate(&self, offset: u64, len: u64) -> io::Result<()> {
        self.write_zeroes(offset, len)
    }
    /// Number of logical blocks.
    /// What identifies the stored data beyond this process (a file's
    /// device and inode), so that the namespace keeps its identifiers
    /// (NGUID) when the controller restarts on the same store, as a host
    /// that reconnects requires. None: the data lives and dies with the
    /// process, and so do its identifiers.
    fn identity(&self) -> Option<u64> {
        None
    }

    fn blocks(&self) -> u64 {
        self.size() / u64::from(self.block_size())
    }
    /// Whether writes are cached until a flush (the VWC bit).
    fn volatile_write_cache(&self) -> bool {
        false
    }
}

/// Only 512 and 4096 byte logical blocks are offered.
pub fn check_block_size(block_size: u32) -> io::Result<()> {
    match block_size {
        512 | 4096 => Ok(()),
        other => Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("block size {other} is not supported (use 512 or 4096)"),
        )),
    }
}

const CHUNK: usize = 1 << 20;

/// A RAM namespace, allocated a megabyte at a time on first write.
pub struct RamNamespace {
    block_size: u32,
    size: u64,
    chunks: Vec<RwLock<Option<Box<[u8]>>>>,
}

impl RamNamespace {
    /// `size` is rounded down to whole blocks.
    pub fn new(size: u64, block_size: u32) -> io::Result<Self> {
        check_block_size(block_size)?;
        let size = size - size % u64::from(block_size);
        if size == 0 {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "namespace size is zero"));
        }
        let n = size.div_ceil(CHUNK as u64) as usize;
        Ok(Self { block_size, size, chunks: (0..n).map(|_| RwLock::new(None)).collect() })
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

    fn chunk(&self, idx: usize) -> io::Result<&RwLock<Option<Box<[u8]>>>> {
        self.chunks.get(idx).ok_or_else(|| io::Error::other("offset beyond the namespace"))
    }
}

impl Namespace for RamNamespace {
    fn block_size(&self) -> u32 {
        self.block_size
    }

    fn size(&self) -> u64 {
        self.size
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
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

    fn write_at(&self, offset: u64, buf: &[u8]) -> io::Result<()> {
        for (idx, off, at, n) in Self::pieces(offset, buf.len() as u64) {
            let mut chunk = self.chunk(idx)?.write().unwrap_or_else(PoisonError::into_inner);
            let c = chunk.get_or_insert_with(|| vec![0; CHUNK].into_boxed_slice());
            c[off..off + n].copy_from_slice(&buf[at..at + n]);
        }
        Ok(())
    }

    fn flush(&self) -> io::Result<()> {
        Ok(())
    }

    fn write_zeroes(&self, offset: u64, len: u64) -> io::Result<()> {
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

/// A namespace over a regular file or a block device, with positional I/O.
/// Flush is `fdatasync`.
pub struct FileNamespace {
    file: File,
    block_size: u32,
    size: u64,
    /// The file's device and inode.
    identity: u64,
}

impl FileNamespace {
    /// Open an existing file or block device read-write. Its size is rounded
    /// down to whole blocks.
    pub fn open(path: &Path, block_size: u32) -> io::Result<Self> {
        check_block_size(block_size)?;
        let file = OpenOptions::new().read(true).write(true).open(path).map_err(|e| {
            io::Error::new(e.kind(), format!("cannot open namespace {}: {e}", path.display()))
        })?;
        // A block device reports length 0 in its metadata; seeking finds its size.
        let size = io::Seek::seek(&mut &file, io::SeekFrom::End(0))?;
        let size = size - size % u64::from(block_size);
        if size == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("namespace {} is smaller than one {block_size}-byte block", path.display()),
            ));
        }
        let meta = file.metadata()?;
        let identity = std::os::unix::fs::MetadataExt::dev(&meta).rotate_left(32)
            ^ std::os::unix::fs::MetadataExt::ino(&meta);
        Ok(Self { file, block_size, size, identity })
    }
}

impl Namespace for FileNamespace {
    fn block_size(&self) -> u32 {
        self.block_size
    }

    fn identity(&self) -> Option<u64> {
        Some(self.identity)
    }

    fn size(&self) -> u64 {
        self.size
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        self.file.read_exact_at(buf, offset)
    }

    fn write_at(&self, offset: u64, buf: &[u8]) -> io::Result<()> {
        self.file.write_all_at(buf, offset)
    }

    fn flush(&self) -> io::Result<()> {
        self.file.sync_data()
    }

    fn write_zeroes(&self, offset: u64, len: u64) -> io::Result<()> {
        let zeros = vec![0u8; CHUNK.min(len as usize)];
        let mut at = 0;
        while at < len {
            let n = (len - at).min(zeros.len() as u64) as usize;
            self.file.write_all_at(&zeros[..n], offset + at)?;
            at += n as u64;
        }
        Ok(())
    }

    fn volatile_write_cache(&self) -> bool {
        true
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
    fn file_namespace_reads_what_it_wrote() {
        let path = std::env::temp_dir().join(format!("nvme-ddp-ns-{}", std::process::id()));
        std::fs::write(&path, vec![0u8; 5000]).unwrap();
        let ns = FileNamespace::open(&path, 512).unwrap();
        assert_eq!(ns.size(), 4608);
        ns.write_at(512, b"hello").unwrap();
        ns.flush().unwrap();
        let mut b = [0u8; 5];
        ns.read_at(512, &mut b).unwrap();
        assert_eq!(&b, b"hello");
        std::fs::remove_file(&path).unwrap();
        let err = FileNamespace::open(&path, 512).err().unwrap();
        assert!(err.to_string().contains("cannot open namespace"), "{err}");
    }
}
