//! NVM I/O commands: Read, Write, Flush, Write Zeroes, Dataset Management.

use super::queue::{Data, DataPtr, Outcome};
use super::{CtrlQueue, lock};
use crate::namespace::Namespace;
use crate::nvme::{Sqe, Status, io};
use std::sync::Arc;
use std::sync::atomic::Ordering;

/// Make a write durable before it completes where it must be: with FUA,
/// or with the volatile write cache turned off.
fn durable(sqe: &Sqe, ns: &dyn Namespace, vwc: bool) -> std::io::Result<()> {
    if vwc && !sqe.fua() { Ok(()) } else { ns.flush() }
}

/// Dataset Management range: context attributes, length in blocks, start.
const DSM_RANGE_LEN: usize = 16;

impl CtrlQueue {
    /// Commands of an I/O queue, after Connect.
    pub(super) fn io(&mut self, sqe: &Sqe, data: Data) -> Outcome {
        let Some(q) = &self.queue else { return Outcome::status(Status::COMMAND_SEQUENCE_ERROR) };
        let vwc = {
            let a = lock(&q.assoc);
            if q.deleted(&a) {
                return Outcome::status(Status::ABORTED_SQ_DELETION);
            }
            if !a.ready() {
                return Outcome::status(Status::COMMAND_SEQUENCE_ERROR);
            }
            a.vwc
        };
        match sqe.opcode {
            io::READ | io::WRITE | io::WRITE_ZEROES | io::DATASET_MANAGEMENT => {}
            io::FLUSH => return self.flush(sqe.nsid),
            _ => return Outcome::status(Status::INVALID_OPCODE),
        }
        let Some(ns) = self.io_namespace(sqe.nsid) else {
            return Outcome::status(Status::INVALID_NAMESPACE);
        };
        match sqe.opcode {
            io::READ => self.read(sqe, &ns, data),
            io::WRITE => self.write(sqe, &ns, data, vwc),
            io::WRITE_ZEROES => match block_range(&*ns, sqe.slba(), u64::from(sqe.nlb())) {
                Ok((offset, len)) => {
                    let zeroed = ns.write_zeroes(offset, len);
                    media(zeroed.and_then(|()| durable(sqe, &*ns, vwc)), Status::WRITE_FAULT)
                }
                Err(s) => Outcome::status(s),
            },
            _ => self.dataset_management(sqe, &ns, data),
        }
    }

    fn io_namespace(&self, nsid: u32) -> Option<Arc<dyn Namespace>> {
        let i = usize::try_from(nsid).ok()?.checked_sub(1)?;
        self.target.namespaces().get(i).cloned()
    }

    /// Bytes a Read or Write moves, after range and size checks.
    fn transfer(&self, sqe: &Sqe, ns: &dyn Namespace) -> Result<(u64, usize), Status> {
        let (offset, len) = block_range(ns, sqe.slba(), u64::from(sqe.nlb()))?;
        if len > self.target.max_transfer() {
            return Err(Status::INVALID_FIELD);
        }
        Ok((offset, len as usize))
    }

    fn read(&mut self, sqe: &Sqe, ns: &Arc<dyn Namespace>, data: Data) -> Outcome {
        let (offset, len) = match self.transfer(sqe, &**ns) {
            Ok(t) => t,
            Err(s) => return Outcome::status(s),
        };
        match self.data_ptr(sqe) {
            DataPtr::Remote if data.is_none() => {}
            DataPtr::Remote | DataPtr::InCapsule => return Outcome::status(Status::INVALID_FIELD),
            DataPtr::Invalid => return Outcome::status(Status::SGL_DESCRIPTOR_TYPE_INVALID),
        }
        if (sqe.sgl.data_len() as usize) < len {
            return Outcome::status(Status::DATA_SGL_LENGTH_INVALID);
        }
        let buf = self.pool.get(len);
        if let Err(e) = ns.read_at(offset, &mut buf.lock()[..len]) {
            tracing::warn!(error = %e, offset, len, "namespace read failed");
            self.target.counters.media_errors.fetch_add(1, Ordering::Relaxed);
            return Outcome::status(Status::UNRECOVERED_READ_ERROR);
        }
        let c = &self.target.counters;
        c.reads.fetch_add(1, Ordering::Relaxed);
        c.bytes_read.fetch_add(len as u64, Ordering::Relaxed);
        Outcome::Complete { status: Status::SUCCESS, result: 0, data: Some((buf, len)) }
    }

    fn write(&mut self, sqe: &Sqe, ns: &Arc<dyn Namespace>, data: Data, vwc: bool) -> Outcome {
        let (offset, len) = match self.transfer(sqe, &**ns) {
            Ok(t) => t,
            Err(s) => return Outcome::status(s),
        };
        let buf = match self.host_data(sqe, data, len) {
            Ok(Some((buf, _))) => buf,
            Ok(None) => return Outcome::NeedData(len as u32),
            Err(s) => return Outcome::status(s),
        };
        let written = ns.write_at(offset, &buf.lock()[..len]);
        let written = written.and_then(|()| durable(sqe, &**ns, vwc));
        if let Err(e) = written {
            tracing::warn!(error = %e, offset, len, "namespace write failed");
            self.target.counters.media_errors.fetch_add(1, Ordering::Relaxed);
            return Outcome::status(Status::WRITE_FAULT);
        }
        let c = &self.target.counters;
        c.writes.fetch_add(1, Ordering::Relaxed);
        c.bytes_written.fetch_add(len as u64, Ordering::Relaxed);
        Outcome::ok()
    }

    fn flush(&self, nsid: u32) -> Outcome {
        let all: Vec<Arc<dyn Namespace>> = match nsid {
            0xffff_ffff => self.target.namespaces().to_vec(),
            n => match self.io_namespace(n) {
                Some(ns) => vec![ns],
                None => return Outcome::status(Status::INVALID_NAMESPACE),
            },
        };
        media(all.iter().try_for_each(|ns| ns.flush()), Status::WRITE_FAULT)
    }

    fn dataset_management(&mut self, sqe: &Sqe, ns: &Arc<dyn Namespace>, data: Data) -> Outcome {
        let ranges = (sqe.cdw10 & 0xff) as usize + 1;
        let len = ranges * DSM_RANGE_LEN;
        let buf = match self.host_data(sqe, data, len) {
            Ok(Some((buf, _))) => buf,
            Ok(None) => return Outcome::NeedData(len as u32),
            Err(s) => return Outcome::status(s),
        };
        // Only Attribute - Deallocate (AD) changes anything; IDR/IDW are hints.
        if sqe.cdw11 & (1 << 2) == 0 {
            return Outcome::ok();
        }
        let list = buf.lock()[..len].to_vec();
        let mut extents = Vec::with_capacity(ranges);
        for r in list.chunks_exact(DSM_RANGE_LEN) {
            let nlb = u32::from_le_bytes([r[4], r[5], r[6], r[7]]);
            let slba = u64::from_le_bytes([r[8], r[9], r[10], r[11], r[12], r[13], r[14], r[15]]);
            match block_range(&**ns, slba, u64::from(nlb)) {
                Ok(extent) => extents.push(extent),
                Err(s) => return Outcome::status(s),
            }
        }
        media(
            extents.iter().try_for_each(|&(offset, len)| ns.deallocate(offset, len)),
            Status::WRITE_FAULT,
        )
    }
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

fn media(r: std::io::Result<()>, status: Status) -> Outcome {
    match r {
        Ok(()) => Outcome::ok(),
        Err(e) => {
            tracing::warn!(error = %e, "namespace operation failed");
            Outcome::status(status)
        }
    }
}
