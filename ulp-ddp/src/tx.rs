//! Transmit: where a ULP's outgoing stream goes ([`TxSink`]), and the ULP's
//! half of zero-copy transmit ([`ZeroCopyTx`]).
//!
//! A ULP writes headers and small things by copy. With [`Caps::ZC_TX`]
//! granted and a transport that can, it queues payload by reference
//! instead: it maps the buffer with the device, queues the bytes under the
//! token it got, and keeps the mapping until the peer has acknowledged
//! them, since a retransmission gathers them again. Only then is the
//! buffer the caller's again (the device's mapping holds a handle to it
//! until then, so a pool that reuses only unshared buffers waits).

use crate::{Caps, DdpDevice, IoBuf, SgEntry, SkHandle};
use std::collections::VecDeque;
use std::sync::Arc;

/// The free part of a transport's send buffer, as a ULP fills it.
pub trait TxSink {
    /// Bytes that may be queued now.
    fn room(&self) -> usize;

    /// Queue a copy of the first bytes of `bytes`, as many as there is
    /// room for; returns how many.
    fn write(&mut self, bytes: &[u8]) -> usize;

    /// Queue `len` bytes (at most `room`) that the device gathers from
    /// its transmit mapping `token`, from `token_offset` on; returns how
    /// many. A transport that cannot queue by reference returns 0.
    fn write_by_reference(&mut self, len: usize, token: u64, token_offset: u64) -> usize {
        let _ = (len, token, token_offset);
        0
    }

    /// What was queued so far ends a record (a PDU, an FPDU): a segment
    /// that would end inside the next one ends here instead, so that
    /// segments start where records start.
    fn end_record(&mut self) {}

    /// Stream offset of the next byte queued.
    fn offset(&self) -> u64;

    /// Stream offset before which the peer has acknowledged every byte.
    fn acked(&self) -> u64;
}

/// A plain buffer as a sink: bytes by copy only, and none acknowledged.
pub struct SliceSink<'a> {
    buf: &'a mut [u8],
    len: usize,
}

impl<'a> SliceSink<'a> {
    pub fn new(buf: &'a mut [u8]) -> Self {
        Self { buf, len: 0 }
    }

    /// Bytes written so far.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl TxSink for SliceSink<'_> {
    fn room(&self) -> usize {
        self.buf.len() - self.len
    }

    fn write(&mut self, bytes: &[u8]) -> usize {
        let n = bytes.len().min(self.room());
        self.buf[self.len..self.len + n].copy_from_slice(&bytes[..n]);
        self.len += n;
        n
    }

    fn offset(&self) -> u64 {
        self.len as u64
    }

    fn acked(&self) -> u64 {
        0
    }
}

/// One socket's transmit mappings, from the ULP's side: made as payload is
/// queued by reference, torn down as the peer acknowledges it.
pub struct ZeroCopyTx {
    dev: Arc<dyn DdpDevice>,
    sk: SkHandle,
    /// Mappings not yet acknowledged, in stream order: the stream offset
    /// where each one's bytes end, and its token.
    maps: VecDeque<(u64, u64)>,
}

impl ZeroCopyTx {
    /// Zero-copy transmit on `sk`, if the device granted it.
    pub fn new(dev: Arc<dyn DdpDevice>, sk: &SkHandle) -> Option<Self> {
        sk.offloads.contains(Caps::ZC_TX).then(|| Self {
            dev,
            sk: sk.clone(),
            maps: VecDeque::new(),
        })
    }

    /// Queue bytes `done..len` of the `len` at `offset` in `buf` by
    /// reference, the first `done` having been queued by earlier calls
    /// (mapped by the first). Returns how many were queued now, or `None`
    /// if they must go by copy: the device refused the mapping, or the
    /// transport cannot queue by reference.
    pub fn send(
        &mut self,
        out: &mut dyn TxSink,
        buf: &IoBuf,
        offset: usize,
        len: usize,
        done: usize,
    ) -> Option<usize> {
        let token = match (done, self.maps.back()) {
            (0, _) => {
                let sg = SgEntry { buf: buf.clone(), offset, len };
                // A refusal is counted by the device (`tx_setup_fail`).
                let token = self.dev.tx_setup(&self.sk, sg).ok()?;
                self.maps.push_back((out.offset() + len as u64, token));
                token
            }
            (_, Some(&(_, token))) => token,
            (_, None) => return None,
        };
        let n = out.write_by_reference(len - done, token, done as u64);
        if n == 0 && done == 0 && out.room() > 0 {
            // Not a transport that queues by reference.
            self.maps.pop_back();
            self.dev.tx_teardown(&self.sk, token);
            return None;
        }
        Some(n)
    }

    /// Tear down the mappings whose bytes the peer has acknowledged.
    pub fn release(&mut self, acked: u64) {
        while let Some(&(end, token)) = self.maps.front()
            && end <= acked
        {
            self.maps.pop_front();
            self.dev.tx_teardown(&self.sk, token);
        }
    }

    /// Mappings still held.
    pub fn mapped(&self) -> usize {
        self.maps.len()
    }
}
