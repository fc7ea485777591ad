//! NVM I/O commands: Read, Write, Flush, Write Zeroes, Dataset Management.
//! Each is checked here and handed to the namespace's storage; it
//! completes when the storage answers ([`CtrlQueue::storage_answer`]).

use super::CtrlQueue;
use super::queue::{Data, DataPtr, Outcome, Reply, StorageIo};
use crate::namespace::{BlockIo, Namespace};
use crate::nvme::{Sqe, Status, io};
use std::sync::atomic::Ordering;
use ulp_ddp::SgEntry;

/// Dataset Management range: context attributes, length in blocks, start.
const DSM_RANGE_LEN: usize = 16;

impl CtrlQueue {
    /// Commands of an I/O queue, after Connect.
    pub(super) fn io(&mut self, sqe: &Sqe, data: Data) -> Outcome {
        let Some(q) = &self.queue else { return Outcome::status(Status::COMMAND_SEQUENCE_ERROR) };
        if q.deleted() {
            return Outcome::status(Status::ABORTED_SQ_DELETION);
        }
        if !q.hot.ready() {
            return Outcome::status(Status::COMMAND_SEQUENCE_ERROR);
        }
        let vwc = q.hot.vwc();
        // A write is durable before it completes with FUA, or with the
        // volatile write cache turned off.
        let durable = sqe.fua() || !vwc;
        match sqe.opcode {
            io::READ | io::WRITE | io::WRITE_ZEROES | io::DATASET_MANAGEMENT => {}
            io::FLUSH => return self.flush(sqe),
            _ => return Outcome::status(Status::INVALID_OPCODE),
        }
        let Some(ns) = self.namespace_index(sqe.nsid) else {
            return Outcome::status(Status::INVALID_NAMESPACE);
        };
        let (io, data, bytes) = match sqe.opcode {
            io::READ => match self.read(sqe, ns, data) {
                Ok(Read::Io(io, data, len)) => (io, data, len),
                Ok(Read::Lent(data)) => {
                    let bytes = data.len as u64;
                    let io =
                        StorageIo { sqe: *sqe, data: Some(data), bytes, owed: 0, failed: false };
                    return self.finish(io);
                }
                Err(outcome) => return outcome,
            },
            io::WRITE => match self.write(sqe, ns, data, durable) {
                Ok((io, len)) => (io, None, len),
                Err(outcome) => return outcome,
            },
            io::WRITE_ZEROES => match block_range(self.ns(ns), sqe.slba(), u64::from(sqe.nlb())) {
                Ok((offset, len)) => (BlockIo::WriteZeroes { offset, len, durable }, None, 0),
                Err(s) => return Outcome::status(s),
            },
            _ => match self.dataset_management(sqe, ns, data) {
                Ok(Some(ranges)) => (BlockIo::Deallocate(ranges), None, 0),
                Ok(None) => return Outcome::ok(),
                Err(outcome) => return outcome,
            },
        };
        self.hand_over(sqe, data, bytes, 1, [(ns, io)])
    }

    /// Where namespace `nsid` is in the target's list. Commands carry the
    /// index, not a clone of the namespace's `Arc`: its count is one every
    /// poll group would write on every I/O.
    fn namespace_index(&self, nsid: u32) -> Option<usize> {
        let i = usize::try_from(nsid).ok()?.checked_sub(1)?;
        (i < self.target.namespaces().len()).then_some(i)
    }

    fn ns(&self, index: usize) -> &dyn Namespace {
        &*self.target.namespaces()[index]
    }

    /// Bytes a Read or Write moves, after range and size checks.
    fn transfer(&self, sqe: &Sqe, ns: usize) -> Result<(u64, usize), Outcome> {
        let (offset, len) =
            block_range(self.ns(ns), sqe.slba(), u64::from(sqe.nlb())).map_err(Outcome::status)?;
        if len > self.target.max_transfer() {
            return Err(Outcome::status(Status::INVALID_FIELD));
        }
        Ok((offset, len as usize))
    }

    fn read(&mut self, sqe: &Sqe, ns: usize, data: Data) -> Result<Read, Outcome> {
        let (offset, len) = self.transfer(sqe, ns)?;
        match self.data_ptr(sqe) {
            DataPtr::Remote if data.is_none() => {}
            DataPtr::Remote | DataPtr::InCapsule => {
                return Err(Outcome::status(Status::INVALID_FIELD));
            }
            DataPtr::Invalid => return Err(Outcome::status(Status::SGL_DESCRIPTOR_TYPE_INVALID)),
        }
        if (sqe.sgl.data_len() as usize) < len {
            return Err(Outcome::status(Status::DATA_SGL_LENGTH_INVALID));
        }
        if let Some(lent) = self.ns(ns).lend(offset, len) {
            return Ok(Read::Lent(lent));
        }
        let buf = self.pool.get(len);
        let data = Some(SgEntry { buf: buf.clone(), offset: 0, len });
        Ok(Read::Io(BlockIo::Read { offset, buf, len }, data, len as u64))
    }

    fn write(
        &mut self,
        sqe: &Sqe,
        ns: usize,
        data: Data,
        durable: bool,
    ) -> Result<(BlockIo, u64), Outcome> {
        let (offset, len) = self.transfer(sqe, ns)?;
        match self.host_data(sqe, data, len) {
            Ok(Some((buf, _))) => Ok((BlockIo::Write { offset, buf, len, durable }, len as u64)),
            Ok(None) => Err(Outcome::NeedData(len as u32)),
            Err(s) => Err(Outcome::status(s)),
        }
    }

    fn flush(&mut self, sqe: &Sqe) -> Outcome {
        if sqe.nsid != 0xffff_ffff {
            return match self.namespace_index(sqe.nsid) {
                Some(ns) => self.hand_over(sqe, None, 0, 1, [(ns, BlockIo::Flush)]),
                None => Outcome::status(Status::INVALID_NAMESPACE),
            };
        }
        let n = self.target.namespaces().len();
        self.hand_over(sqe, None, 0, n, (0..n).map(|ns| (ns, BlockIo::Flush)))
    }

    /// The ranges a Dataset Management command deallocates; None when it
    /// only gives hints.
    fn dataset_management(
        &mut self,
        sqe: &Sqe,
        ns: usize,
        data: Data,
    ) -> Result<Option<Vec<(u64, u64)>>, Outcome> {
        let ranges = (sqe.cdw10 & 0xff) as usize + 1;
        let len = ranges * DSM_RANGE_LEN;
        let buf = match self.host_data(sqe, data, len) {
            Ok(Some((buf, _))) => buf,
            Ok(None) => return Err(Outcome::NeedData(len as u32)),
            Err(s) => return Err(Outcome::status(s)),
        };
        // Only Attribute - Deallocate (AD) changes anything; IDR/IDW are hints.
        if sqe.cdw11 & (1 << 2) == 0 {
            return Ok(None);
        }
        let list = buf.lock()[..len].to_vec();
        let mut extents = Vec::with_capacity(ranges);
        for r in list.chunks_exact(DSM_RANGE_LEN) {
            let nlb = u32::from_le_bytes([r[4], r[5], r[6], r[7]]);
            let slba = u64::from_le_bytes([r[8], r[9], r[10], r[11], r[12], r[13], r[14], r[15]]);
            extents.push(block_range(self.ns(ns), slba, u64::from(nlb)).map_err(Outcome::status)?);
        }
        Ok(Some(extents))
    }

    /// Give the storage its I/Os for `sqe` (`owed` of them). The command
    /// completes now if every answer came at once, else when the last one
    /// does.
    fn hand_over(
        &mut self,
        sqe: &Sqe,
        data: Reply,
        bytes: u64,
        owed: usize,
        ios: impl IntoIterator<Item = (usize, BlockIo)>,
    ) -> Outcome {
        let cid = sqe.cid;
        let mut io = StorageIo { sqe: *sqe, data, bytes, owed, failed: false };
        for (ns, block_io) in ios {
            let ns = self.ns(ns);
            let done = self.answers.done(cid);
            if let Some(result) = self.answers.submitting(cid, || ns.submit(block_io, done)) {
                io.take(result);
            }
        }
        if io.owed == 0 {
            return self.finish(io);
        }
        // Answers that come later find it here; they are collected on
        // this thread, so none can come before it is in.
        self.storage.insert(cid, io);
        Outcome::Pending
    }

    /// One storage answer for `cid`; the command's outcome once it has
    /// them all.
    pub(super) fn answered(&mut self, cid: u16, result: std::io::Result<()>) -> Option<Outcome> {
        let io = self.storage.get_mut(&cid)?;
        io.take(result);
        if io.owed > 0 {
            return None;
        }
        let io = self.storage.remove(&cid)?;
        Some(self.finish(io))
    }

    /// A command the storage has answered in full.
    fn finish(&self, io: StorageIo) -> Outcome {
        let c = &self.target.counters;
        if io.failed {
            c.media_errors.fetch_add(1, Ordering::Relaxed);
            let read = io.sqe.opcode == io::READ;
            let status = if read { Status::UNRECOVERED_READ_ERROR } else { Status::WRITE_FAULT };
            return Outcome::status(status);
        }
        match io.sqe.opcode {
            io::READ => c.io.read(io.bytes),
            io::WRITE => c.io.written(io.bytes),
            _ => {}
        }
        Outcome::Complete { status: Status::SUCCESS, result: 0, data: io.data }
    }
}

impl StorageIo {
    fn take(&mut self, result: std::io::Result<()>) {
        self.owed -= 1;
        if let Err(e) = result {
            tracing::warn!(error = %e, cid = self.sqe.cid, opcode = self.sqe.opcode, "namespace I/O failed");
            self.failed = true;
        }
    }
}

/// How a Read's data comes.
enum Read {
    /// From the storage, into a buffer of ours: the I/O to hand it, the
    /// buffer, and the bytes it moves.
    Io(BlockIo, Reply, u64),
    /// The namespace's own memory, lent at once.
    Lent(SgEntry),
}

/// Byte offset and length of `nlb` blocks at `slba`, if inside the namespace.
fn block_range(ns: &dyn Namespace, slba: u64, nlb: u64) -> Result<(u64, u64), Status> {
    let end = slba.checked_add(nlb).ok_or(Status::LBA_OUT_OF_RANGE)?;
    if end > ns.blocks() {
        return Err(Status::LBA_OUT_OF_RANGE);
    }
    let bs = u64::from(ns.block_size());
    Ok((slba * bs, nlb * bs))
}
