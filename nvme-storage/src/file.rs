//! A namespace over a regular file or a block device.

use crate::{Workers, check_block_size, check_size};
use nvme_of::namespace::{BlockIo, Done, Namespace};
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::Path;
use std::sync::Arc;

/// Zeros are written this many bytes at a time.
const ZEROS: usize = 1 << 20;

/// A namespace over a regular file or a block device, with positional I/O
/// on worker threads: as many I/Os run at once as [`Workers`] allows.
/// Writes land in the page cache (a volatile write cache, as Identify
/// says); a durable write and Flush are `fdatasync`.
pub struct FileNamespace {
    file: Arc<File>,
    block_size: u32,
    size: u64,
    /// The file's device and inode.
    identity: u64,
    /// None: each I/O runs inside `submit` (for single-threaded
    /// simulations, where nothing may happen behind the clock's back).
    workers: Option<Workers>,
}

impl FileNamespace {
    /// Open an existing file or block device read-write, served by up to
    /// `depth` worker threads (0: inline). Its size is rounded down to
    /// whole blocks.
    pub fn open(path: &Path, block_size: u32, depth: usize) -> io::Result<Self> {
        check_block_size(block_size)?;
        let named =
            |e: io::Error| io::Error::new(e.kind(), format!("namespace {}: {e}", path.display()));
        let file = OpenOptions::new().read(true).write(true).open(path).map_err(named)?;
        // A block device reports length 0 in its metadata; seeking finds its size.
        let size = io::Seek::seek(&mut &file, io::SeekFrom::End(0)).map_err(|e| {
            named(io::Error::new(
                e.kind(),
                format!("cannot find its size by seeking to its end: {e}"),
            ))
        })?;
        check_size(size, block_size).map_err(named)?;
        let meta = file.metadata().map_err(named)?;
        let identity = meta.dev().rotate_left(32) ^ meta.ino();
        let workers = (depth > 0).then(|| Workers::new(depth));
        Ok(Self { file: Arc::new(file), block_size, size, identity, workers })
    }

    /// Worker threads started so far.
    pub fn threads(&self) -> usize {
        self.workers.as_ref().map_or(0, Workers::threads)
    }
}

/// Do one I/O, blocking.
fn run(file: &File, io: BlockIo) -> io::Result<()> {
    match io {
        BlockIo::Read { offset, buf, len } => file.read_exact_at(&mut buf.lock()[..len], offset),
        BlockIo::Write { offset, buf, len, durable } => {
            file.write_all_at(&buf.lock()[..len], offset)?;
            if durable { file.sync_data() } else { Ok(()) }
        }
        BlockIo::WriteZeroes { offset, len, durable } => {
            write_zeroes(file, offset, len)?;
            if durable { file.sync_data() } else { Ok(()) }
        }
        BlockIo::Deallocate(ranges) => {
            ranges.into_iter().try_for_each(|(offset, len)| write_zeroes(file, offset, len))
        }
        BlockIo::Flush => file.sync_data(),
    }
}

fn write_zeroes(file: &File, offset: u64, len: u64) -> io::Result<()> {
    let zeros = vec![0u8; ZEROS.min(len as usize)];
    let mut at = 0;
    while at < len {
        let n = (len - at).min(zeros.len() as u64) as usize;
        file.write_all_at(&zeros[..n], offset + at)?;
        at += n as u64;
    }
    Ok(())
}

impl Namespace for FileNamespace {
    fn block_size(&self) -> u32 {
        self.block_size
    }

    fn size(&self) -> u64 {
        self.size
    }

    fn submit(&self, io: BlockIo, done: Done) {
        match &self.workers {
            Some(w) => {
                let file = self.file.clone();
                w.run(move || done.complete(run(&file, io)));
            }
            None => done.complete(run(&self.file, io)),
        }
    }

    fn identity(&self) -> Option<u64> {
        Some(self.identity)
    }

    fn volatile_write_cache(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;
    use std::time::Duration;
    use ulp_ddp::IoBuf;

    /// Submit `io` and wait for its answer.
    fn sync(ns: &FileNamespace, io: BlockIo) -> io::Result<()> {
        let (tx, rx) = mpsc::channel();
        ns.submit(io, Done::call(move |r| tx.send(r).unwrap()));
        rx.recv_timeout(Duration::from_secs(60)).expect("an answer")
    }

    #[test]
    fn file_namespace_reads_what_it_wrote_on_its_workers_and_inline() {
        let path = std::env::temp_dir().join(format!("nvme-ddp-ns-{}", std::process::id()));
        std::fs::write(&path, vec![0u8; 4608]).unwrap();
        for depth in [4, 0] {
            let ns = FileNamespace::open(&path, 512, depth).unwrap();
            assert_eq!(ns.size(), 4608);
            let data = IoBuf::from_vec(format!("hello {depth}").into_bytes());
            sync(&ns, BlockIo::Write { offset: 512, buf: data, len: 7, durable: true }).unwrap();
            let back = IoBuf::new(7);
            sync(&ns, BlockIo::Read { offset: 512, buf: back.clone(), len: 7 }).unwrap();
            assert_eq!(&back.lock()[..], format!("hello {depth}").as_bytes());
            sync(&ns, BlockIo::Deallocate(vec![(512, 512)])).unwrap();
            sync(&ns, BlockIo::Read { offset: 512, buf: back.clone(), len: 7 }).unwrap();
            assert_eq!(&back.lock()[..], &[0; 7]);
            sync(&ns, BlockIo::Flush).unwrap();
            // Reading past the end fails through the answer, not a panic.
            let past = BlockIo::Read { offset: 4608, buf: IoBuf::new(4096), len: 4096 };
            assert!(sync(&ns, past).is_err());
            assert_eq!(ns.threads() > 0, depth > 0);
        }
        // A tail short of a block is refused, not left out unsaid.
        std::fs::write(&path, vec![0u8; 5000]).unwrap();
        let err = FileNamespace::open(&path, 512, 1).err().unwrap();
        let named = format!("namespace {}: 5000 bytes is not a whole number", path.display());
        assert!(err.to_string().starts_with(&named), "{err}");
        std::fs::remove_file(&path).unwrap();
        let err = FileNamespace::open(&path, 512, 1).err().unwrap();
        assert!(err.to_string().starts_with(&format!("namespace {}: ", path.display())), "{err}");
    }
}
