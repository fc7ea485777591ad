//! The I/O path: what a user submits, turned into commands on the I/O
//! queues (or, for admin commands a user asks for, the admin queue), and
//! the largest transfer that may be asked for.

use super::{Dir, Host, Owner, State};
use crate::nvme::{Sqe, io};
use crate::time::Instant;
use ulp_ddp::IoBuf;

/// The I/O commands a host can submit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IoKind {
    Read,
    Write,
    /// A Write with Force Unit Access: durable when it completes.
    WriteFua,
    Flush,
    WriteZeroes,
    /// Dataset Management with the Deallocate attribute, one range.
    Deallocate,
}

/// One I/O to submit.
#[derive(Debug, Clone)]
pub struct Io {
    pub kind: IoKind,
    pub nsid: u32,
    pub slba: u64,
    pub nlb: u32,
    /// Read into / write from the first `nlb * block size` bytes.
    pub buf: Option<IoBuf>,
    /// Comes back with the completion.
    pub tag: u64,
}

/// Why an I/O could not be submitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SubmitError {
    #[error("the host is not ready for I/O")]
    NotReady,
    #[error("no I/O queue {0}")]
    NoQueue(u16),
    #[error("queue is full")]
    QueueFull,
    #[error("no namespace {0}")]
    NoNamespace(u32),
    #[error("transfer of {0} bytes exceeds the controller's maximum")]
    TooLarge(u64),
    #[error("buffer too small for the transfer")]
    BufferTooSmall,
}

impl Host {
    /// Largest transfer an I/O may have: what the controller takes (MDTS)
    /// and, where a device offloads the I/O queues, what one of its
    /// mappings holds, so that every read can be placed (Linux caps
    /// `max_hw_sectors` the same way when it offloads a controller).
    /// Callers split larger transfers, as the block layer does.
    pub fn max_transfer(&self) -> Option<u64> {
        let mdts = self.ctrl.as_ref().map_or(0, |c| c.mdts);
        let mpsmin = (self.cap >> 48) & 0xf;
        let mdts = (mdts > 0).then(|| 1u64 << (12 + mpsmin + u64::from(mdts)).min(40));
        let ddp = self.queues.iter().skip(1).filter_map(|q| q.ddp_max_transfer()).min();
        [mdts, ddp].into_iter().flatten().min()
    }

    /// Submit an I/O on queue `qid` (1..=io_queues).
    pub fn submit(&mut self, qid: u16, io: Io, now: Instant) -> Result<(), SubmitError> {
        self.now = self.now.max(now);
        if self.state != State::Ready {
            return Err(SubmitError::NotReady);
        }
        if qid == 0 || usize::from(qid) >= self.queues.len() {
            return Err(SubmitError::NoQueue(qid));
        }
        let ns = *self
            .namespaces
            .iter()
            .find(|n| n.nsid == io.nsid)
            .ok_or(SubmitError::NoNamespace(io.nsid))?;
        let len = u64::from(io.nlb) * u64::from(ns.block_size);
        let mut sqe = Sqe::rw(io::READ, io.nsid, io.slba, io.nlb, Default::default());
        let data = match io.kind {
            IoKind::Read | IoKind::Write | IoKind::WriteFua => {
                if self.max_transfer().is_some_and(|m| len > m) {
                    return Err(SubmitError::TooLarge(len));
                }
                let buf = io.buf.clone().ok_or(SubmitError::BufferTooSmall)?;
                if (buf.len() as u64) < len {
                    return Err(SubmitError::BufferTooSmall);
                }
                let (opcode, dir) = match io.kind {
                    IoKind::Read => (io::READ, Dir::FromController),
                    _ => (io::WRITE, Dir::ToController),
                };
                sqe.opcode = opcode;
                if io.kind == IoKind::WriteFua {
                    sqe.cdw12 |= Sqe::FUA;
                }
                Some((buf, len as usize, dir))
            }
            IoKind::Flush => {
                sqe = Sqe::new(io::FLUSH, io.nsid, Default::default());
                None
            }
            IoKind::WriteZeroes => {
                sqe.opcode = io::WRITE_ZEROES;
                None
            }
            IoKind::Deallocate => {
                sqe = Sqe::new(io::DATASET_MANAGEMENT, io.nsid, Default::default());
                // One range (NR 0), Attribute - Deallocate.
                sqe.cdw11 = 1 << 2;
                let mut range = vec![0u8; 16];
                range[4..8].copy_from_slice(&io.nlb.to_le_bytes());
                range[8..16].copy_from_slice(&io.slba.to_le_bytes());
                Some((IoBuf::from_vec(range), 16, Dir::ToController))
            }
        };
        let deadline = now + self.cfg.command_timeout;
        let q = &mut self.queues[usize::from(qid)];
        if !q.is_live() {
            return Err(SubmitError::NotReady);
        }
        q.submit(Owner::Io(io.tag), sqe, data, deadline).map(drop).ok_or(SubmitError::QueueFull)
    }

    /// Submit an admin command (Identify, Get Log Page, ...) that reads
    /// `len` bytes from the controller, or none. It completes as a
    /// [`HostEvent::Completion`](super::HostEvent::Completion) on queue 0 with `tag`, the data in `buf`.
    pub fn submit_admin(
        &mut self,
        sqe: Sqe,
        len: usize,
        tag: u64,
        now: Instant,
    ) -> Result<(), SubmitError> {
        self.now = self.now.max(now);
        if self.state != State::Ready {
            return Err(SubmitError::NotReady);
        }
        let data = (len > 0).then(|| (IoBuf::new(len), len, Dir::FromController));
        let deadline = now + self.cfg.command_timeout;
        self.queues[0]
            .submit(Owner::Io(tag), sqe, data, deadline)
            .map(drop)
            .ok_or(SubmitError::QueueFull)
    }
}
