//! The upper layer's half of ULP DDP, shared by host and controller: when a
//! transfer is worth mapping, how receive hints are read, and the software
//! path for every byte the device did not handle.
//!
//! Every device result is a hint this code checks: a data byte is skipped
//! only if the device placed it, and a data digest is trusted only if the
//! device vouched for every data byte and for the digest itself. Anything
//! less and the bytes are copied and digested here, as without offload.
//!
//! Placed bytes are not in the receive stream (the stack does not copy
//! them: zero-copy placement), so a digest computed here is computed over
//! the destination buffer, as Linux recomputes it over the request's
//! pages. A device that placed wrong bytes without vouching for them is
//! caught by it; bytes placed for a PDU this side did not map are lost,
//! and fail that PDU.

use crate::wire::crc32c_append;
use nvme_of::UlpStats;
use std::sync::Arc;
use ulp_ddp::{
    Caps, DdpDevice, DdpIo, FlowId, HintFlags, IoBuf, Limits, NvmeTcpConfig, NvmeTcpSk, SgEntry,
    SkCtx, ZeroCopyTx,
};

/// Scatter-gather entries are pages, as a block layer would hand them over.
const PAGE: usize = 4096;

/// Counts the PDUs between offload stopping and resuming on one queue.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct GapMeter {
    /// PDUs since the first one offload skipped, while in a gap.
    open: Option<u64>,
}

impl GapMeter {
    /// A PDU ended. `offloadable` is `Some(handled)` for a data PDU the
    /// device was expected to handle, `None` otherwise.
    pub fn pdu(&mut self, offloadable: Option<bool>, stats: &mut UlpStats) {
        match (self.open, offloadable) {
            (None, Some(false)) => self.open = Some(1),
            (Some(n), Some(true)) => {
                stats.offload_gaps += 1;
                stats.offload_gap_pdus += n;
                self.open = None;
            }
            (Some(n), _) => self.open = Some(n + 1),
            (None, _) => {}
        }
    }
}

/// A socket the device offloads, from the upper layer's side.
pub(crate) struct DdpSocket {
    pub dev: Arc<dyn DdpDevice>,
    pub sk: Arc<dyn NvmeTcpSk>,
    /// The socket's mailbox, read on the data path without a call
    /// through the socket.
    pub ctx: Arc<SkCtx>,
    pub limits: Limits,
}

impl DdpSocket {
    /// Ask the device to offload the socket; `None` (software only) if it
    /// will not.
    pub fn add(dev: Arc<dyn DdpDevice>, flow: FlowId, config: &NvmeTcpConfig) -> Option<Self> {
        let limits = dev.limits();
        match dev.sk_add(flow, config) {
            Ok(sk) => Some(Self { dev, ctx: sk.ctx().clone(), sk, limits }),
            Err(e) => {
                tracing::debug!(error = %e, "offload refused; software only");
                None
            }
        }
    }

    /// Largest transfer one mapping holds: `max_ddp_sgl_len` pages.
    pub fn max_transfer(&self) -> Option<u64> {
        let n = u64::from(self.limits.max_ddp_sgl_len);
        (n > 0).then_some(n * PAGE as u64)
    }

    /// Zero-copy transmit on this socket, if the device granted it. Kept
    /// by the connection, past `remove`, until it is done sending.
    pub fn zero_copy_tx(&self) -> Option<ZeroCopyTx> {
        ZeroCopyTx::new(self.sk.clone())
    }

    /// The device writes this socket's data digests.
    pub fn tx_offload(&self) -> bool {
        self.sk.offloads().contains(Caps::CRC_TX)
    }

    /// Map `len` bytes of `buf` for `tag` if the transfer is worth it and
    /// the device takes it. Returns whether it is mapped one-shot.
    pub fn setup(
        &self,
        tag: u16,
        buf: &IoBuf,
        len: usize,
        oneshot_ok: bool,
        threshold: Option<u32>,
        stats: &mut UlpStats,
    ) -> Option<bool> {
        let threshold = threshold.unwrap_or(self.limits.io_threshold) as usize;
        if len < threshold.max(1) {
            return None;
        }
        let active = self.dev.caps().1;
        if !active.contains(Caps::DDP) {
            return None;
        }
        let entries = len.div_ceil(PAGE);
        if self.limits.max_ddp_sgl_len > 0 && entries > self.limits.max_ddp_sgl_len as usize {
            return None;
        }
        let sgl = (0..entries)
            .map(|i| SgEntry { buf: buf.clone(), offset: i * PAGE, len: PAGE.min(len - i * PAGE) })
            .collect();
        let oneshot = oneshot_ok && active.contains(Caps::ONESHOT);
        stats.control_calls += 1;
        match self.sk.setup(DdpIo { tag, sgl, oneshot }) {
            Ok(()) => {
                stats.ddp_ios += 1;
                Some(oneshot)
            }
            Err(e) => {
                tracing::trace!(tag, error = %e, "setup refused; software path");
                None
            }
        }
    }

    pub fn teardown(&self, tag: u16, stats: &mut UlpStats) {
        stats.control_calls += 1;
        self.sk.teardown(tag);
    }

    /// Tags whose mappings the device has released.
    pub fn teardown_done(&self, stats: &mut UlpStats) -> Vec<u16> {
        let done = self.ctx.take_teardown_done();
        stats.control_calls += done.len() as u64;
        done
    }

    /// A PDU header starts at stream offset `at`: confirm it if the device
    /// asked about exactly that offset.
    pub fn confirm_resync(&self, at: u64, stats: &mut UlpStats) {
        if self.ctx.resync_request() == Some(at) {
            self.ctx.take_resync_request();
            self.sk.resync(at);
            stats.resyncs += 1;
            stats.control_calls += 1;
        }
    }

    pub fn remove(&self) {
        self.sk.sk_del();
    }
}

/// Receive state of one data PDU: what the device did for it so far.
#[derive(Debug, Clone, Copy)]
pub(crate) struct DataRx {
    /// The device vouched for every data byte so far.
    hw_crc: bool,
    /// Digest computed here over the first `sw_len` data bytes.
    sw_crc: u32,
    sw_len: u32,
    /// The device was expected to vouch for the digest (receive digest
    /// offload active).
    crc_expected: bool,
    /// Some of this PDU's work fell to software although it was offloaded.
    fallback: bool,
    /// The device left any hint on this PDU's data at all.
    hinted: bool,
    /// The device placed bytes of this PDU that this side had no mapping
    /// for: they are in no buffer and not in the stream.
    lost: bool,
}

/// Where a data PDU's bytes go: a buffer and the buffer offset of the
/// PDU's first data byte.
pub(crate) type Dest<'a> = Option<(&'a IoBuf, usize)>;

impl DataRx {
    /// A data PDU on a socket with or without a device.
    pub fn new(ddp: Option<&DdpSocket>, ddgst: bool) -> Self {
        let crc_expected = ddgst && ddp.is_some_and(|d| d.dev.caps().1.contains(Caps::CRC_RX));
        Self {
            hw_crc: ddp.is_some(),
            sw_crc: 0,
            sw_len: 0,
            crc_expected,
            fallback: false,
            hinted: false,
            lost: false,
        }
    }

    /// For gap accounting: `Some(handled)` when the device was expected to
    /// handle this PDU (placement for `mapped` data, or its digest).
    pub fn offloadable(&self, mapped: bool) -> Option<bool> {
        (mapped || self.crc_expected).then_some(self.hinted)
    }

    /// Bytes `bytes` at data offset `offset` of the PDU, stream offset `at`:
    /// copy whatever the device did not place (when `mapped`), and digest
    /// (when `ddgst`) whatever it did not vouch for.
    #[allow(clippy::too_many_arguments)]
    pub fn span(
        &mut self,
        ddp: Option<&DdpSocket>,
        mapped: bool,
        ddgst: bool,
        dest: Dest<'_>,
        offset: u32,
        bytes: &[u8],
        at: u64,
        stats: &mut UlpStats,
    ) {
        let n = bytes.len();
        stats.data_bytes += n as u64;
        let Some(ddp) = ddp else {
            if let Some((buf, base)) = dest {
                copy(buf, base + offset as usize, bytes);
                stats.copy_bytes += n as u64;
            }
            if ddgst {
                self.sw(dest, offset, bytes, stats);
            }
            return;
        };
        let mut g = dest.map(|(buf, base)| (buf.lock(), base + offset as usize));
        let (hw_crc, fallback, hinted, lost) =
            (&mut self.hw_crc, &mut self.fallback, &mut self.hinted, &mut self.lost);
        ddp.ctx.with_hints(at, at + n as u64, |a, b, h| {
            let flags = h.flags;
            *hinted |= flags != HintFlags::NONE;
            let r = (a - at) as usize..(b - at) as usize;
            if flags.contains(HintFlags::PLACED) {
                if mapped && g.is_some() {
                    stats.placed_bytes += r.len() as u64;
                } else {
                    *lost = true;
                }
            } else if let Some((dst, base)) = &mut g {
                match dst.get_mut(*base + r.start..*base + r.end) {
                    Some(d) => d.copy_from_slice(&bytes[r.clone()]),
                    None => debug_assert!(false, "data past the end of its buffer"),
                }
                stats.copy_bytes += r.len() as u64;
                *fallback |= mapped;
            }
            if !flags.contains(HintFlags::CRC_OK) {
                *hw_crc = false;
            }
        });
        drop(g);
        if ddgst && !self.hw_crc {
            self.fallback |= self.crc_expected;
            match dest {
                // Placed or copied, the span is in the buffer now.
                Some(_) => self.sw(dest, offset + n as u32, &[], stats),
                None => self.sw(dest, offset, bytes, stats),
            }
        }
    }

    /// Software digest up to the end of this span, catching up first over
    /// earlier bytes (already in the buffer, placed or copied).
    fn sw(&mut self, dest: Dest<'_>, offset: u32, bytes: &[u8], stats: &mut UlpStats) {
        if self.sw_len < offset
            && let Some((buf, base)) = dest
        {
            let g = buf.lock();
            if let Some(prev) = g.get(base + self.sw_len as usize..base + offset as usize) {
                self.sw_crc = crc32c_append(self.sw_crc, prev);
                stats.crc_bytes += prev.len() as u64;
            }
            self.sw_len = offset;
        }
        self.sw_crc = crc32c_append(self.sw_crc, bytes);
        self.sw_len = offset + bytes.len() as u32;
        stats.crc_bytes += bytes.len() as u64;
    }

    /// The PDU of `len` data bytes ended at stream offset `end`. Returns
    /// whether its data digest (if any) holds. `received` is the digest that
    /// came with it. `offloaded` PDUs that needed software count as
    /// fallbacks.
    #[allow(clippy::too_many_arguments)]
    pub fn finish(
        &mut self,
        ddp: Option<&DdpSocket>,
        ddgst: bool,
        received: Option<u32>,
        dest: Dest<'_>,
        len: u32,
        end: u64,
        stats: &mut UlpStats,
    ) -> bool {
        let mut ok = true;
        if ddgst {
            let mut vouched = self.hw_crc && ddp.is_some();
            if let Some(d) = ddp.filter(|_| vouched) {
                d.ctx.with_hints(end.saturating_sub(4), end, |_, _, h| {
                    vouched &= h.flags.contains(HintFlags::CRC_OK)
                });
            }
            if vouched {
                stats.hw_crc_bytes += u64::from(len);
            } else {
                self.fallback |= self.crc_expected;
                if self.sw_len < len {
                    self.sw(dest, len, &[], stats);
                }
                ok = received == Some(self.sw_crc);
            }
        }
        if self.fallback {
            stats.fallback_pdus += 1;
        }
        if self.lost {
            tracing::warn!("the device placed data of a PDU that was not mapped");
        }
        ok && !self.lost
    }
}

/// The callers checked the PDU's range against the command's buffer.
fn copy(buf: &IoBuf, at: usize, bytes: &[u8]) {
    match buf.lock().get_mut(at..at + bytes.len()) {
        Some(d) => d.copy_from_slice(bytes),
        None => debug_assert!(false, "data past the end of its buffer"),
    }
}
