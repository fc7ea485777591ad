//! What a controller asks of the storage behind a namespace, and how the
//! answer comes back.
//!
//! The controller never waits for storage: it hands each I/O to
//! [`Namespace::submit`] with a [`Done`] and goes on serving its queues.
//! The storage answers through the `Done` exactly once, at once (a RAM
//! store) or later from any thread (a file served by worker threads). An
//! answer given later wakes the driver through the [`Waker`] it gave the
//! target ([`Target::set_waker`](crate::controller::Target::set_waker)),
//! and the binding collects it on its next `handle_timeout`.
//!
//! Offsets and lengths are in bytes; the controller has already checked
//! them against the namespace's size and block size. Implementations live
//! outside this crate (`nvme-storage`).

use std::collections::VecDeque;
use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::Waker;
use ulp_ddp::{IoBuf, SgEntry};

/// Block storage a namespace is made of.
pub trait Namespace: Send + Sync {
    /// Logical block size in bytes: 512 or 4096.
    fn block_size(&self) -> u32;
    /// Size in bytes, a multiple of the block size.
    fn size(&self) -> u64;
    /// Start `io`; answer through `done`, exactly once. Must not wait for
    /// the medium (a RAM store may do its work here; a file may not).
    fn submit(&self, io: BlockIo, done: Done);
    /// What identifies the stored data beyond this process (a file's
    /// device and inode), so that the namespace keeps its identifiers
    /// (NGUID) when the controller restarts on the same store, as a host
    /// that reconnects requires. None: the data lives and dies with the
    /// process, and so do its identifiers.
    fn identity(&self) -> Option<u64> {
        None
    }
    /// Whether completed writes may sit in a volatile cache until a flush
    /// (the VWC bit): true for a file, whose writes land in the page cache.
    fn volatile_write_cache(&self) -> bool {
        false
    }
    /// Lend the stored bytes `[offset, offset + len)` instead of copying
    /// them into a buffer for a Read, as `sendfile` sends page-cache pages:
    /// the entry stays as it is for as long as anyone holds it (a write
    /// meanwhile goes to a copy of the storage's own), so a transport may
    /// send from it, and send it again, until the host has it. None: read
    /// it with [`BlockIo::Read`] (the store cannot lend, or not this range).
    fn lend(&self, offset: u64, len: usize) -> Option<SgEntry> {
        let _ = (offset, len);
        None
    }
    /// Number of logical blocks.
    fn blocks(&self) -> u64 {
        self.size() / u64::from(self.block_size())
    }
}

/// One I/O for a namespace.
#[derive(Debug)]
pub enum BlockIo {
    /// Fill `buf[..len]` from `offset`.
    Read { offset: u64, buf: IoBuf, len: usize },
    /// Store `buf[..len]` at `offset`; with `durable`, on stable media
    /// before answering (FUA, or the write cache turned off).
    Write { offset: u64, buf: IoBuf, len: usize, durable: bool },
    /// Zero `[offset, offset + len)`.
    WriteZeroes { offset: u64, len: u64, durable: bool },
    /// Deallocate these `(offset, len)` ranges: they read back as zeros
    /// (DLFEAT 001b).
    Deallocate(Vec<(u64, u64)>),
    /// Make every write answered so far durable.
    Flush,
}

/// The answer to one [`BlockIo`], owed exactly once. Dropping a `Done`
/// unanswered answers with an error, so a command never hangs on storage
/// that lost it.
pub struct Done(Option<To>);

enum To {
    /// A controller queue's command.
    Queue { answers: Arc<Answers>, cid: u16 },
    /// Anyone else (tests, benchmarks of a store).
    Call(Box<dyn FnOnce(io::Result<()>) + Send>),
}

impl Done {
    /// An answer that calls `f`.
    pub fn call(f: impl FnOnce(io::Result<()>) + Send + 'static) -> Self {
        Self(Some(To::Call(Box::new(f))))
    }

    pub fn complete(mut self, result: io::Result<()>) {
        self.answer(result);
    }

    fn answer(&mut self, result: io::Result<()>) {
        match self.0.take() {
            Some(To::Queue { answers, cid }) => answers.push(cid, result),
            Some(To::Call(f)) => f(result),
            None => {}
        }
    }
}

impl Drop for Done {
    fn drop(&mut self) {
        self.answer(Err(io::Error::other("the storage dropped the I/O")));
    }
}

impl std::fmt::Debug for Done {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.0 {
            Some(To::Queue { cid, .. }) => write!(f, "Done(cid {cid})"),
            Some(To::Call(_)) => f.write_str("Done(call)"),
            None => f.write_str("Done(answered)"),
        }
    }
}

/// Where a queue's storage answers gather until the binding collects them.
#[derive(Default)]
pub(crate) struct Answers {
    ready: Mutex<VecDeque<(u16, io::Result<()>)>>,
    /// How many are ready, read without the lock on every poll.
    count: AtomicUsize,
    /// The driver's, shared by every queue of the target.
    waker: Arc<Mutex<Option<Waker>>>,
}

/// An answer given inside `submit`, on the thread that called it: taken
/// straight back, without a lock or a wake-up.
struct Inline {
    /// The queue's answer list, by address.
    answers: usize,
    cid: u16,
    result: Option<io::Result<()>>,
}

thread_local! {
    static INLINE: std::cell::RefCell<Option<Inline>> = const { std::cell::RefCell::new(None) };
}

impl Answers {
    pub fn new(waker: Arc<Mutex<Option<Waker>>>) -> Arc<Self> {
        Arc::new(Self { ready: Mutex::default(), count: AtomicUsize::new(0), waker })
    }

    pub fn done(self: &Arc<Self>, cid: u16) -> Done {
        Done(Some(To::Queue { answers: self.clone(), cid }))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, VecDeque<(u16, io::Result<()>)>> {
        self.ready.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn push(&self, cid: u16, result: io::Result<()>) {
        let me = self as *const Self as usize;
        let result = INLINE.with_borrow_mut(|inline| match inline {
            Some(i) if i.answers == me && i.cid == cid && i.result.is_none() => {
                i.result = Some(result);
                None
            }
            _ => Some(result),
        });
        let Some(result) = result else { return };
        let first = {
            let mut ready = self.lock();
            ready.push_back((cid, result));
            self.count.store(ready.len(), Ordering::Release);
            ready.len() == 1
        };
        if first && let Some(w) = &*self.waker.lock().unwrap_or_else(PoisonError::into_inner) {
            w.wake_by_ref();
        }
    }

    /// Run `submit`, and return `cid`'s answer if it was given inside.
    pub fn submitting(&self, cid: u16, submit: impl FnOnce()) -> Option<io::Result<()>> {
        let me = Inline { answers: self as *const Self as usize, cid, result: None };
        let outer = INLINE.replace(Some(me));
        submit();
        INLINE.replace(outer).and_then(|i| i.result)
    }

    pub fn is_ready(&self) -> bool {
        self.count.load(Ordering::Acquire) > 0
    }

    pub fn take(&self) -> Option<(u16, io::Result<()>)> {
        if !self.is_ready() {
            return None;
        }
        let mut ready = self.lock();
        let answer = ready.pop_front();
        self.count.store(ready.len(), Ordering::Release);
        answer
    }
}
