//! I/O workloads: which I/O to submit next, what came back, how fast.
//!
//! A [`Workload`] keeps every I/O queue filled to its depth until its byte
//! or time budget is spent, optionally verifies read data against a pattern
//! keyed by byte address (so any block size and any I/O order agree on
//! what a block must hold), and records latencies in an HDR histogram.
//! Like the block layer, it splits an I/O larger than the host's largest
//! transfer into several commands; the I/O completes with the last.
//!
//! A workload chooses and checks I/O; it must never move bytes or read
//! the clock (the host and the driver do).

use crate::size::format_size;
use hdrhistogram::Histogram;
use nvme_of::Instant;
use nvme_of::host::{Host, Io, IoKind, NamespaceInfo, SubmitError};
use nvme_of::nvme::Status;
use serde::Serialize;
use std::time::Duration;
use ulp_ddp::IoBuf;

/// Access pattern.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum, Serialize, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum Rw {
    #[default]
    Read,
    Write,
    #[value(name = "randread")]
    RandRead,
    #[value(name = "randwrite")]
    RandWrite,
    /// Sequential, reads and writes mixed (fio's rw, or readwrite).
    #[value(alias = "readwrite")]
    Rw,
    /// Random, reads and writes mixed (fio's randrw).
    #[value(name = "randrw")]
    RandRw,
}

impl Rw {
    pub fn name(self) -> &'static str {
        match self {
            Rw::Read => "read",
            Rw::Write => "write",
            Rw::RandRead => "randread",
            Rw::RandWrite => "randwrite",
            Rw::Rw => "rw",
            Rw::RandRw => "randrw",
        }
    }

    /// Reads and writes mixed.
    pub fn is_mixed(self) -> bool {
        matches!(self, Rw::Rw | Rw::RandRw)
    }
}

/// When a workload stops issuing I/O.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Limit {
    Bytes(u64),
    Time(Duration),
    /// Every block of the namespace once.
    Namespace,
}

#[derive(Debug, Clone)]
pub struct WorkloadSpec {
    pub rw: Rw,
    /// Bytes per I/O, a multiple of the namespace's block size.
    pub bs: u32,
    pub limit: Limit,
    /// I/Os outstanding per queue (capped by the queue's depth).
    pub qd: usize,
    /// Percent of a mixed workload's I/Os that read (fio's rwmixread).
    pub rwmixread: u8,
    /// Write a pattern and check it on reads.
    pub verify: bool,
    pub seed: u64,
    /// The namespace to use; `None` for the first one.
    pub nsid: Option<u32>,
    /// This workload is part `i` of `n` of the pass (`(0, 1)`: all of it):
    /// it moves its share of the bytes, a sequential pass starts where its
    /// share does (fio's jobs with `offset_increment`), and random offsets
    /// differ from part to part.
    pub part: (u32, u32),
}

#[derive(Debug, thiserror::Error)]
pub enum WorkloadError {
    #[error("block size {bs} is not a multiple of the namespace's {block} bytes")]
    Unaligned { bs: u32, block: u32 },
    #[error("block size {} exceeds the namespace ({})", format_size(u64::from(*bs)), format_size(*size))]
    TooLarge { bs: u32, size: u64 },
    #[error("the controller has no namespace")]
    NoNamespace,
    #[error("the controller has no namespace {0}")]
    NoSuchNamespace(u32),
    #[error("{} to transfer exceed namespace {nsid} ({})", format_size(*bytes), format_size(*size))]
    BeyondNamespace { bytes: u64, nsid: u32, size: u64 },
    #[error("nothing to transfer")]
    Empty,
}

struct Slot {
    /// One buffer per command.
    bufs: Vec<IoBuf>,
    lba: u64,
    kind: IoKind,
    qid: u16,
    start: Instant,
    /// Which I/O units held known data when this read was issued.
    check: bool,
    /// Commands submitted, those not completed yet, and the first that
    /// failed.
    sent: usize,
    pending: usize,
    failed: Option<Status>,
}

/// What a workload did. Latencies are in microseconds.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct IoStats {
    pub ios: u64,
    pub bytes: u64,
    pub seconds: f64,
    pub iops: f64,
    pub bytes_per_sec: f64,
    pub lat_mean_us: f64,
    pub lat_stdev_us: f64,
    pub lat_p50_us: u64,
    pub lat_p90_us: u64,
    pub lat_p99_us: u64,
    pub lat_p999_us: u64,
    pub lat_max_us: u64,
    pub errors: u64,
    /// Bytes read back and found equal to what was written.
    pub verified_bytes: u64,
    /// Bytes read, with verification on, from blocks that held nothing
    /// known when the read was issued (a mixed run reads blocks it has not
    /// written yet): not checked.
    pub unchecked_bytes: u64,
    pub verify_failures: u64,
    /// Reads and writes apart, when the workload mixes them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub read: Option<Box<IoStats>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub write: Option<Box<IoStats>>,
}

pub struct Workload {
    spec: WorkloadSpec,
    ns: NamespaceInfo,
    /// The I/O queues it submits on: the host's own (a set's, of those it
    /// holds).
    qids: Vec<u16>,
    blocks_per_io: u32,
    /// Blocks per command, and commands per I/O.
    blocks_per_part: u32,
    parts: usize,
    units: u64,
    cursor: u64,
    rng: u64,
    slots: Vec<Option<Slot>>,
    free: Vec<usize>,
    spare: Vec<Vec<IoBuf>>,
    /// I/Os in flight per queue, and the one whose commands are not all
    /// submitted yet (the queue was full).
    inflight: Vec<usize>,
    partial: Vec<Option<usize>>,
    written: Vec<u64>,
    issued_bytes: u64,
    /// The bytes to move, unless time limits it.
    budget: Option<u64>,
    started: Option<Instant>,
    finished: Option<Instant>,
    /// Latencies of reads and of writes (all of them together when
    /// summarized), and the counts of each.
    hist: [Histogram<u64>; 2],
    by_kind: [IoStats; 2],
    stats: IoStats,
    first_error: Option<String>,
    stopped: bool,
}

impl Workload {
    /// A workload over the namespace the spec names, or the host's first.
    pub fn new(spec: WorkloadSpec, host: &Host) -> Result<Self, WorkloadError> {
        let ns = *match spec.nsid {
            None => host.namespaces().first().ok_or(WorkloadError::NoNamespace)?,
            Some(id) => host
                .namespaces()
                .iter()
                .find(|n| n.nsid == id)
                .ok_or(WorkloadError::NoSuchNamespace(id))?,
        };
        let size = ns.blocks * u64::from(ns.block_size);
        match spec.limit {
            Limit::Bytes(0) => return Err(WorkloadError::Empty),
            Limit::Bytes(bytes) if bytes > size => {
                return Err(WorkloadError::BeyondNamespace { bytes, nsid: ns.nsid, size });
            }
            _ => {}
        }
        if spec.bs == 0 || !spec.bs.is_multiple_of(ns.block_size) {
            return Err(WorkloadError::Unaligned { bs: spec.bs, block: ns.block_size });
        }
        let blocks_per_io = spec.bs / ns.block_size;
        let units = ns.blocks / u64::from(blocks_per_io);
        if units == 0 {
            return Err(WorkloadError::TooLarge {
                bs: spec.bs,
                size: ns.blocks * u64::from(ns.block_size),
            });
        }
        let max = host.max_transfer().unwrap_or(u64::MAX);
        let blocks_per_part = blocks_per_io
            .min(u32::try_from(max / u64::from(ns.block_size)).unwrap_or(u32::MAX))
            .max(1);
        let parts = blocks_per_io.div_ceil(blocks_per_part) as usize;
        let assume_written = matches!(spec.rw, Rw::Read | Rw::RandRead);
        let written = vec![if assume_written { u64::MAX } else { 0 }; units.div_ceil(64) as usize];
        let hist =
            Histogram::new(3).unwrap_or_else(|_| Histogram::new(2).expect("2 significant digits"));
        let all = match spec.limit {
            Limit::Bytes(bytes) => bytes / u64::from(spec.bs),
            Limit::Namespace | Limit::Time(_) => units,
        };
        let (cursor, mine) = part_of(all, spec.part);
        let budget = match spec.limit {
            Limit::Time(_) => None,
            _ => Some(mine * u64::from(spec.bs)),
        };
        Ok(Self {
            // Parts of a pass pick their random offsets apart; the data
            // pattern stays the seed's, so each verifies what another wrote.
            rng: match spec.part.0 {
                0 => spec.seed,
                i => mix(spec.seed ^ u64::from(i) << 32),
            } | 1,
            spec,
            ns,
            qids: host.io_qids(),
            blocks_per_io,
            blocks_per_part,
            parts,
            units,
            cursor,
            budget,
            slots: Vec::new(),
            free: Vec::new(),
            spare: Vec::new(),
            inflight: vec![0; usize::from(host.io_queues()) + 1],
            partial: vec![None; usize::from(host.io_queues()) + 1],
            written,
            issued_bytes: 0,
            started: None,
            finished: None,
            hist: [hist.clone(), hist],
            by_kind: Default::default(),
            stats: IoStats::default(),
            first_error: None,
            stopped: false,
        })
    }

    /// A workload that takes over `before`'s I/O buffers, as an
    /// application keeps its buffers from one pass to the next.
    pub fn after(spec: WorkloadSpec, host: &Host, before: Workload) -> Result<Self, WorkloadError> {
        Ok(Self { spare: before.spare, ..Self::new(spec, host)? })
    }

    pub fn spec(&self) -> &WorkloadSpec {
        &self.spec
    }

    /// The first I/O error or verification failure, described.
    pub fn first_error(&self) -> Option<&str> {
        self.first_error.as_deref()
    }

    /// Issue no more I/O; what is in flight still completes.
    pub fn stop(&mut self) {
        self.stopped = true;
    }

    /// The share of the byte or time budget spent, 0 to 1.
    pub fn done_fraction(&self, now: Instant) -> f64 {
        let share = match self.spec.limit {
            Limit::Time(d) => {
                let spent = self.started.map_or(0.0, |s| now.saturating_since(s).as_secs_f64());
                spent / d.as_secs_f64().max(1e-9)
            }
            _ => self.stats.bytes as f64 / self.byte_budget().unwrap_or(1).max(1) as f64,
        };
        share.min(1.0)
    }

    /// A timed workload whose time is up.
    pub fn time_is_up(&self, now: Instant) -> bool {
        match self.spec.limit {
            Limit::Time(d) => self.started.is_some_and(|s| now >= s + d),
            _ => false,
        }
    }

    /// The bytes to transfer, unless time limits the workload.
    fn byte_budget(&self) -> Option<u64> {
        self.budget
    }

    fn more(&self, now: Instant) -> bool {
        if self.stopped {
            return false;
        }
        match self.spec.limit {
            Limit::Time(d) => self.started.is_none_or(|s| now < s + d),
            _ => self.issued_bytes < self.byte_budget().unwrap_or(0),
        }
    }

    fn next_random(&mut self) -> u64 {
        let mut x = self.rng;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.rng = x;
        x
    }

    /// A read or a write, in the mix asked for.
    fn mixed_kind(&mut self) -> IoKind {
        match self.next_random() % 100 < u64::from(self.spec.rwmixread) {
            true => IoKind::Read,
            false => IoKind::Write,
        }
    }

    /// Submit I/O until every queue is at depth or the budget is spent.
    pub fn fill(&mut self, host: &mut Host, now: Instant) -> Result<(), SubmitError> {
        self.started.get_or_insert(now);
        if !host.is_ready() {
            // Reconnecting: what is in flight waits in the host.
            return Ok(());
        }
        let depth = self.spec.qd.max(1);
        for i in 0..self.qids.len() {
            let qid = self.qids[i];
            let q = usize::from(qid);
            if let Some(index) = self.partial[q] {
                self.submit_parts(host, index, now)?;
            }
            while self.partial[q].is_none()
                && self.inflight[q] < depth
                && host.outstanding(qid) < host.queue_depth()
                && self.more(now)
            {
                self.submit_one(host, qid, now)?;
            }
        }
        Ok(())
    }

    /// Bytes of command `part` of an I/O, and its offset in the I/O.
    fn part(&self, part: usize) -> (usize, usize) {
        let block = self.ns.block_size as usize;
        let at = part * self.blocks_per_part as usize * block;
        (at, (self.spec.bs as usize - at).min(self.blocks_per_part as usize * block))
    }

    fn submit_one(&mut self, host: &mut Host, qid: u16, now: Instant) -> Result<(), SubmitError> {
        let (unit, kind) = match self.spec.rw {
            Rw::Read | Rw::Write => {
                let u = self.cursor % self.units;
                self.cursor += 1;
                (u, if self.spec.rw == Rw::Read { IoKind::Read } else { IoKind::Write })
            }
            Rw::RandRead => (self.next_random() % self.units, IoKind::Read),
            Rw::RandWrite => (self.next_random() % self.units, IoKind::Write),
            Rw::Rw => {
                let u = self.cursor % self.units;
                self.cursor += 1;
                (u, self.mixed_kind())
            }
            Rw::RandRw => (self.next_random() % self.units, self.mixed_kind()),
        };
        let lba = unit * u64::from(self.blocks_per_io);
        let base = lba * u64::from(self.ns.block_size);
        let (seed, fill) = (self.spec.seed, kind == IoKind::Write && self.spec.verify);
        // A buffer is free again once nothing else holds it: a NIC's
        // transmit mapping lets go when the peer has acknowledged the data.
        let free = self.spare.iter().rposition(|b| b.iter().all(|x| !x.is_shared()));
        let bufs = match free.map(|i| self.spare.swap_remove(i)) {
            Some(bufs) => {
                for (i, b) in bufs.iter().enumerate().filter(|_| fill) {
                    fill_pattern(&mut b.lock(), seed, base + self.part(i).0 as u64);
                }
                bufs
            }
            None => (0..self.parts)
                .map(|i| {
                    let (at, len) = self.part(i);
                    let mut data = vec![0u8; len];
                    fill_pattern(&mut data, seed, base + at as u64);
                    IoBuf::from_vec(data)
                })
                .collect(),
        };
        let check = self.spec.verify && kind == IoKind::Read && self.is_written(unit);
        let index = self.free.pop().unwrap_or_else(|| {
            self.slots.push(None);
            self.slots.len() - 1
        });
        self.slots[index] = Some(Slot {
            bufs,
            lba,
            kind,
            qid,
            start: now,
            check,
            sent: 0,
            pending: 0,
            failed: None,
        });
        self.inflight[usize::from(qid)] += 1;
        self.issued_bytes += u64::from(self.spec.bs);
        self.submit_parts(host, index, now)
    }

    /// Submit the commands of I/O `index` that fit in its queue; the rest
    /// wait for room.
    fn submit_parts(
        &mut self,
        host: &mut Host,
        index: usize,
        now: Instant,
    ) -> Result<(), SubmitError> {
        let Some(slot) = self.slots[index].as_ref() else { return Ok(()) };
        let (qid, kind, lba) = (slot.qid, slot.kind, slot.lba);
        let mut sent = slot.sent;
        let mut result = Ok(());
        while sent < self.parts && host.outstanding(qid) < host.queue_depth() {
            let io = Io {
                kind,
                nsid: self.ns.nsid,
                slba: lba + (sent as u64) * u64::from(self.blocks_per_part),
                nlb: (self.part(sent).1 / self.ns.block_size as usize) as u32,
                buf: self.slots[index].as_ref().map(|s| s.bufs[sent].clone()),
                tag: (index * self.parts + sent) as u64,
            };
            if let Err(e) = host.submit(qid, io, now) {
                result = Err(e);
                break;
            }
            sent += 1;
        }
        let q = usize::from(qid);
        let Some(slot) = self.slots[index].as_mut() else { return result };
        slot.pending += sent - slot.sent;
        slot.sent = sent;
        self.partial[q] = (sent < self.parts).then_some(index);
        if result.is_err() {
            // What was sent still completes; nothing more will be.
            slot.failed.get_or_insert(Status::INTERNAL_ERROR);
            slot.sent = self.parts;
            self.partial[q] = None;
            if slot.pending == 0 {
                self.retire(index, now);
            }
        }
        result
    }

    fn is_written(&self, unit: u64) -> bool {
        self.written[(unit / 64) as usize] & (1 << (unit % 64)) != 0
    }

    /// A command of this workload completed.
    pub fn complete(&mut self, tag: u64, status: Status, now: Instant) {
        let index = tag as usize / self.parts;
        let Some(slot) = self.slots.get_mut(index).and_then(Option::as_mut) else { return };
        slot.pending = slot.pending.saturating_sub(1);
        if !status.is_success() {
            slot.failed.get_or_insert(status);
        }
        if slot.pending > 0 || slot.sent < self.parts {
            return;
        }
        self.retire(index, now);
    }

    /// I/O `index` is over: account for it.
    fn retire(&mut self, index: usize, now: Instant) {
        let Some(slot) = self.slots[index].take() else { return };
        self.free.push(index);
        self.inflight[usize::from(slot.qid)] -= 1;
        let us = now.saturating_since(slot.start).as_micros() as u64;
        let k = usize::from(slot.kind == IoKind::Write);
        let _ = self.hist[k].record(us.max(1));
        self.stats.ios += 1;
        self.by_kind[k].ios += 1;
        self.finished = Some(now);
        if let Some(status) = slot.failed {
            self.stats.errors += 1;
            self.by_kind[k].errors += 1;
            self.first_error.get_or_insert_with(|| {
                format!("{:?} of LBA {} failed: {status}", slot.kind, slot.lba)
            });
        } else {
            self.stats.bytes += u64::from(self.spec.bs);
            self.by_kind[k].bytes += u64::from(self.spec.bs);
            let unit = slot.lba / u64::from(self.blocks_per_io);
            match slot.kind {
                IoKind::Write => self.written[(unit / 64) as usize] |= 1 << (unit % 64),
                IoKind::Read if slot.check => {
                    let base = slot.lba * u64::from(self.ns.block_size);
                    let wrong = slot.bufs.iter().enumerate().find_map(|(i, b)| {
                        let (at, len) = self.part(i);
                        check_pattern(&b.lock()[..len], self.spec.seed, base + at as u64)
                            .map(|k| at + k)
                    });
                    match wrong {
                        None => self.stats.verified_bytes += u64::from(self.spec.bs),
                        Some(at) => {
                            self.stats.verify_failures += 1;
                            let lba = slot.lba;
                            let written_here = !matches!(self.spec.rw, Rw::Read | Rw::RandRead);
                            let seed = self.spec.seed;
                            self.first_error.get_or_insert_with(|| match written_here {
                                true => format!("data read at LBA {lba} differs at byte {at} from what this run wrote there"),
                                false => format!("data read at LBA {lba} differs at byte {at} from the pattern of seed {seed}: a verified read expects what a verified write with the same seed left there (was the namespace written so?)"),
                            });
                        }
                    }
                }
                IoKind::Read if self.spec.verify => {
                    self.stats.unchecked_bytes += u64::from(self.spec.bs)
                }
                _ => {}
            }
        }
        self.spare.push(slot.bufs);
    }

    /// I/Os issued and not yet complete.
    pub fn in_flight(&self) -> usize {
        self.slots.iter().filter(|s| s.is_some()).count()
    }

    /// Nothing more to issue and nothing in flight.
    pub fn done(&self, now: Instant) -> bool {
        !self.more(now) && self.slots.iter().all(Option::is_none)
    }

    /// The latencies of every I/O completed, in microseconds, reads and
    /// writes together (to be merged with other workloads').
    pub fn latencies(&self) -> Histogram<u64> {
        let [reads, writes] = &self.hist;
        let mut all = reads.clone();
        let _ = all.add(writes);
        all
    }

    /// The latencies of the reads and of the writes apart.
    pub fn latencies_by_kind(&self) -> &[Histogram<u64>; 2] {
        &self.hist
    }

    pub fn stats(&self) -> IoStats {
        let [reads, writes] = &self.hist;
        let mut s = self.summarize(&self.stats, &self.latencies());
        if self.spec.rw.is_mixed() {
            s.read = Some(Box::new(self.summarize(&self.by_kind[0], reads)));
            s.write = Some(Box::new(self.summarize(&self.by_kind[1], writes)));
        }
        s
    }

    /// Rates and latencies of `counts` over the workload's time.
    fn summarize(&self, counts: &IoStats, h: &Histogram<u64>) -> IoStats {
        let elapsed = match (self.started, self.finished) {
            (Some(a), Some(b)) => b.saturating_since(a).as_secs_f64(),
            _ => 0.0,
        };
        rated(counts, elapsed, h)
    }
}

impl IoStats {
    /// What workloads that ran at the same time did together, each given
    /// with its latencies of reads and of writes (fio's group reporting):
    /// counts add up, rates are over the longest one's time, latencies
    /// come from all their I/Os.
    pub fn of_jobs(jobs: &[(&IoStats, &[Histogram<u64>; 2])]) -> IoStats {
        let merged = |kinds: &[usize]| {
            let mut h = Histogram::new(3).expect("3 significant figures");
            for (_, hist) in jobs {
                for &k in kinds {
                    let _ = h.add(&hist[k]);
                }
            }
            h
        };
        let seconds = jobs.iter().map(|(s, _)| s.seconds).fold(0.0, f64::max);
        let all = added(jobs.iter().map(|(s, _)| *s));
        let mut s = rated(&all, seconds, &merged(&[0, 1]));
        if jobs.iter().any(|(s, _)| s.read.is_some()) {
            let read = added(jobs.iter().filter_map(|(s, _)| s.read.as_deref()));
            let write = added(jobs.iter().filter_map(|(s, _)| s.write.as_deref()));
            s.read = Some(Box::new(rated(&read, seconds, &merged(&[0]))));
            s.write = Some(Box::new(rated(&write, seconds, &merged(&[1]))));
        }
        s
    }
}

/// Part `i` of `n` of `units`: where it starts and how many it has (the
/// last part takes what does not divide).
fn part_of(units: u64, (i, n): (u32, u32)) -> (u64, u64) {
    let (i, n) = (u64::from(i), u64::from(n.max(1)));
    let per = units / n;
    (i * per, if i + 1 >= n { units - i.min(n - 1) * per } else { per })
}

/// The counts of `stats` added up.
fn added<'a>(stats: impl Iterator<Item = &'a IoStats>) -> IoStats {
    stats.fold(IoStats::default(), |t, s| IoStats {
        ios: t.ios + s.ios,
        bytes: t.bytes + s.bytes,
        errors: t.errors + s.errors,
        verified_bytes: t.verified_bytes + s.verified_bytes,
        unchecked_bytes: t.unchecked_bytes + s.unchecked_bytes,
        verify_failures: t.verify_failures + s.verify_failures,
        ..IoStats::default()
    })
}

/// `counts` with their rates over `elapsed` seconds and the latencies `h`
/// holds.
fn rated(counts: &IoStats, elapsed: f64, h: &Histogram<u64>) -> IoStats {
    let mut s = counts.clone();
    s.seconds = elapsed;
    if elapsed > 0.0 {
        s.iops = s.ios as f64 / elapsed;
        s.bytes_per_sec = s.bytes as f64 / elapsed;
    }
    if !h.is_empty() {
        s.lat_mean_us = h.mean();
        s.lat_stdev_us = h.stdev();
        s.lat_p50_us = h.value_at_quantile(0.5);
        s.lat_p90_us = h.value_at_quantile(0.9);
        s.lat_p99_us = h.value_at_quantile(0.99);
        s.lat_p999_us = h.value_at_quantile(0.999);
        s.lat_max_us = h.max();
    }
    s
}

fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The pattern depends only on the seed and the byte address, so a block
/// holds the same bytes whichever I/O wrote it.
pub fn fill_pattern(buf: &mut [u8], seed: u64, base: u64) {
    for (i, w) in buf.chunks_exact_mut(8).enumerate() {
        w.copy_from_slice(&mix(seed ^ (base + i as u64 * 8)).to_le_bytes());
    }
}

/// The offset of the first byte that breaks the pattern, if any.
pub fn check_pattern(buf: &[u8], seed: u64, base: u64) -> Option<usize> {
    for (i, w) in buf.chunks_exact(8).enumerate() {
        let want = mix(seed ^ (base + i as u64 * 8)).to_le_bytes();
        if w != want {
            let j = w.iter().zip(want).position(|(a, b)| *a != b).unwrap_or(0);
            return Some(i * 8 + j);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pattern_is_keyed_by_address() {
        let mut a = vec![0u8; 8192];
        fill_pattern(&mut a, 7, 4096);
        let mut b = vec![0u8; 4096];
        fill_pattern(&mut b, 7, 8192);
        assert_eq!(&a[4096..], &b[..]);
        assert_eq!(check_pattern(&a, 7, 4096), None);
        a[100] ^= 1;
        assert_eq!(check_pattern(&a, 7, 4096), Some(100));
    }

    #[test]
    fn jobs_at_once_add_up_as_fio_reports_a_group() {
        let hist = |us: &[u64]| {
            let mut h = Histogram::<u64>::new(3).unwrap();
            us.iter().for_each(|&v| h.record(v).unwrap());
            h
        };
        let part = |ios, bytes, seconds| IoStats { ios, bytes, seconds, ..IoStats::default() };
        let job = |ios: u64, seconds: f64| IoStats {
            verified_bytes: ios * 4096,
            read: Some(Box::new(part(ios / 2, ios / 2 * 4096, seconds))),
            write: Some(Box::new(part(ios / 2, ios / 2 * 4096, seconds))),
            ..part(ios, ios * 4096, seconds)
        };
        let (a, b) = (job(100, 1.0), job(300, 2.0));
        let (ha, hb) = ([hist(&[10; 50]), hist(&[20; 50])], [hist(&[30; 150]), hist(&[40; 150])]);
        let all = IoStats::of_jobs(&[(&a, &ha), (&b, &hb)]);
        assert_eq!((all.ios, all.bytes, all.verified_bytes), (400, 400 * 4096, 400 * 4096));
        assert_eq!(all.seconds, 2.0, "the longest job's time");
        assert_eq!(all.iops, 200.0);
        assert_eq!((all.lat_p50_us, all.lat_max_us), (30, 40));
        let (read, write) = (all.read.unwrap(), all.write.unwrap());
        assert_eq!((read.ios, read.lat_max_us, read.lat_p50_us), (200, 30, 30));
        assert_eq!((write.ios, write.lat_max_us), (200, 40));
    }

    #[test]
    fn parts_of_a_pass_cover_it_once() {
        assert_eq!(part_of(10, (0, 1)), (0, 10));
        let parts: Vec<_> = (0..3).map(|i| part_of(10, (i, 3))).collect();
        assert_eq!(parts, [(0, 3), (3, 3), (6, 4)]);
    }
}
