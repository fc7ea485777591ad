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

use crate::{Caps, DdpSk, IoBuf, IwarpSk, SgEntry, TxFpdus};
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

    /// Of the last `len` bytes queued, a record ends after every whole
    /// `stride` (the FPDUs of one message): what `end_record` after each
    /// would do.
    fn end_records(&mut self, len: usize, stride: usize) {
        let _ = (len, stride);
    }

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

/// How a run of payload goes out.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub enum TxMode {
    /// Nothing of it queued yet.
    #[default]
    Unsent,
    /// By reference, through the transmit mapping `token`.
    Reference(u64),
    /// By copy.
    Copy,
}

/// One socket's transmit mappings, from the ULP's side: made as payload is
/// queued by reference, torn down as the peer acknowledges it, and the
/// rest when dropped (keep it until the transport is done sending: the
/// device keeps a mapping past `sk_del`, and a segment naming a torn-down
/// one is dropped).
///
/// A mapping covers its whole buffer, and runs of the buffer mapped last
/// go out under its token: a message cut into many PDUs (an RDMA Read
/// Response in FPDUs) is mapped once, as a driver maps a page once
/// however many segments carry parts of it. (The device's bounds check is
/// then the buffer's: as with a DMA mapping of a page, the offsets within
/// it are the ULP's to get right.)
pub struct ZeroCopyTx {
    sk: Arc<dyn DdpSk>,
    /// Mappings not yet acknowledged, in stream order.
    maps: VecDeque<TxMap>,
}

/// One transmit mapping the device holds for us.
struct TxMap {
    /// The stream offset where the last byte queued under it ends; none
    /// queued yet, the largest.
    end: u64,
    token: u64,
    /// The buffer mapped whole, which later runs of it share; none for a
    /// message the device frames.
    buf: Option<IoBuf>,
}

impl ZeroCopyTx {
    /// Zero-copy transmit on `sk`, if the device granted it.
    pub fn new(sk: Arc<dyn DdpSk>) -> Option<Self> {
        sk.offloads().contains(Caps::ZC_TX).then(|| Self { sk, maps: VecDeque::new() })
    }

    /// Queue bytes `done..len` of the `len` at `offset` in `buf` by
    /// reference, the first `done` having gone out as `mode` says (the
    /// run is mapped when the first of it is queued). Returns how many
    /// were queued now, or `None` if the run goes by copy: the device
    /// refused the mapping, or the transport cannot queue by reference.
    pub fn send(
        &mut self,
        out: &mut dyn TxSink,
        mode: &mut TxMode,
        buf: &IoBuf,
        offset: usize,
        len: usize,
        done: usize,
    ) -> Option<usize> {
        let end = out.offset() + (len - done) as u64;
        let mut mapped_now = false;
        let token = match *mode {
            TxMode::Copy => return None,
            TxMode::Reference(token) => {
                // A run need not follow its start at once in the stream.
                if let Some(m) = self.maps.iter_mut().rev().find(|m| m.token == token) {
                    m.end = m.end.max(end);
                }
                token
            }
            // Nothing to map for yet.
            TxMode::Unsent if out.room() == 0 => return Some(0),
            TxMode::Unsent => match self.maps.back_mut() {
                // The buffer mapped last: its mapping carries this run too.
                Some(m) if m.buf.as_ref().is_some_and(|b| b.same(buf)) => {
                    m.end = m.end.max(end);
                    m.token
                }
                _ => {
                    mapped_now = true;
                    let sg = SgEntry { buf: buf.clone(), offset: 0, len: buf.len() };
                    // A refusal is counted by the device (`tx_setup_fail`).
                    let Ok(token) = self.sk.tx_setup(sg) else {
                        *mode = TxMode::Copy;
                        return None;
                    };
                    self.maps.push_back(TxMap { end, token, buf: Some(buf.clone()) });
                    token
                }
            },
        };
        let n = out.write_by_reference(len - done, token, (offset + done) as u64);
        if n == 0 && *mode == TxMode::Unsent {
            // There was room: not a transport that queues by reference. A
            // shared mapping keeps its extended end: it is released a
            // little later, nothing worse.
            if mapped_now && let Some(m) = self.maps.pop_back() {
                self.sk.tx_teardown(m.token);
            }
            *mode = TxMode::Copy;
            return None;
        }
        *mode = TxMode::Reference(token);
        Some(n)
    }

    /// Map a message the device cuts into FPDUs on `sk`, the iWARP socket
    /// this is for; the token to queue its framed octets under with
    /// [`send_mapped`](Self::send_mapped), or None if the device refused
    /// it (send the FPDUs by other means).
    pub fn map_fpdus(&mut self, sk: &dyn IwarpSk, fpdus: Arc<TxFpdus>) -> Option<u64> {
        let token = sk.tx_setup_fpdus(fpdus).ok()?;
        self.maps.push_back(TxMap { end: u64::MAX, token, buf: None });
        Some(token)
    }

    /// Queue by reference the `len` octets of mapping `token` from
    /// `token_offset` on, the last it has, as many as there is room for;
    /// how many were queued, or None if the transport cannot queue by
    /// reference (a mapping that carried nothing yet is torn down then:
    /// send its octets by copy).
    pub fn send_mapped(
        &mut self,
        out: &mut dyn TxSink,
        token: u64,
        token_offset: u64,
        len: usize,
    ) -> Option<usize> {
        let end = out.offset() + len as u64;
        let i = self.maps.iter().rposition(|m| m.token == token)?;
        let unsent = self.maps[i].end == u64::MAX;
        let n = out.write_by_reference(len, token, token_offset);
        if n == 0 && out.room() > 0 {
            if unsent && let Some(m) = self.maps.remove(i) {
                self.sk.tx_teardown(m.token);
            }
            return None;
        }
        let m = &mut self.maps[i];
        m.end = if unsent { end } else { m.end.max(end) };
        Some(n)
    }

    /// Tear down the mappings whose bytes the peer has acknowledged.
    pub fn release(&mut self, acked: u64) {
        while let Some(m) = self.maps.front()
            && m.end <= acked
        {
            let token = m.token;
            self.maps.pop_front();
            self.sk.tx_teardown(token);
        }
    }

    /// Mappings still held.
    pub fn mapped(&self) -> usize {
        self.maps.len()
    }
}

impl Drop for ZeroCopyTx {
    fn drop(&mut self) {
        for m in self.maps.drain(..) {
            self.sk.tx_teardown(m.token);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{DdpError, SkCtx};
    use std::sync::Mutex;

    /// A socket that maps until `refuse` is set, and says which tokens it
    /// holds.
    #[derive(Default)]
    struct Sk {
        ctx: Arc<SkCtx>,
        maps: Mutex<Vec<u64>>,
        next: Mutex<u64>,
        refuse: Mutex<bool>,
    }

    impl DdpSk for Sk {
        fn ctx(&self) -> &Arc<SkCtx> {
            &self.ctx
        }
        fn offloads(&self) -> Caps {
            Caps::ALL
        }
        fn resync(&self, _: u64) {}
        fn tx_setup(&self, _: SgEntry) -> Result<u64, DdpError> {
            if *self.refuse.lock().unwrap() {
                return Err(DdpError::NotActive(Caps::ZC_TX));
            }
            let mut next = self.next.lock().unwrap();
            *next += 1;
            self.maps.lock().unwrap().push(*next);
            Ok(*next)
        }
        fn tx_teardown(&self, token: u64) {
            self.maps.lock().unwrap().retain(|&t| t != token);
        }
        fn sk_del(&self) {}
    }

    /// A transport with `room` bytes free that records what it was given.
    struct Sink {
        room: usize,
        offset: u64,
        acked: u64,
        got: Vec<(usize, Option<(u64, u64)>)>,
    }

    impl TxSink for Sink {
        fn room(&self) -> usize {
            self.room
        }
        fn write(&mut self, bytes: &[u8]) -> usize {
            let n = bytes.len().min(self.room);
            self.got.push((n, None));
            self.room -= n;
            self.offset += n as u64;
            n
        }
        fn write_by_reference(&mut self, len: usize, token: u64, token_offset: u64) -> usize {
            let n = len.min(self.room);
            self.got.push((n, Some((token, token_offset))));
            self.room -= n;
            self.offset += n as u64;
            n
        }
        fn offset(&self) -> u64 {
            self.offset
        }
        fn acked(&self) -> u64 {
            self.acked
        }
    }

    #[test]
    fn a_run_keeps_its_way_out_and_mappings_last_until_acknowledged() {
        let dev = Arc::new(Sk::default());
        let mut zc = ZeroCopyTx::new(dev.clone()).unwrap();
        let buf = IoBuf::new(100);
        let mut out = Sink { room: 0, offset: 0, acked: 0, got: Vec::new() };

        // No room: nothing is mapped for nothing.
        let mut a = TxMode::Unsent;
        assert_eq!(zc.send(&mut out, &mut a, &buf, 0, 100, 0), Some(0));
        assert_eq!((a, dev.maps.lock().unwrap().len()), (TxMode::Unsent, 0));
        // Room for 60: mapped once, continued under the same token.
        out.room = 60;
        assert_eq!(zc.send(&mut out, &mut a, &buf, 0, 100, 0), Some(60));
        out.room = 100;
        assert_eq!(zc.send(&mut out, &mut a, &buf, 0, 100, 60), Some(40));
        assert_eq!(out.got, [(60, Some((1, 0))), (40, Some((1, 60)))]);
        assert_eq!(*dev.maps.lock().unwrap(), [1]);

        // A run the device refuses goes by copy, all of it, even with
        // another run mapped since.
        let (other, third) = (IoBuf::new(10), IoBuf::new(10));
        *dev.refuse.lock().unwrap() = true;
        let mut b = TxMode::Unsent;
        assert_eq!(zc.send(&mut out, &mut b, &other, 0, 10, 0), None);
        *dev.refuse.lock().unwrap() = false;
        let mut c = TxMode::Unsent;
        assert_eq!(zc.send(&mut out, &mut c, &third, 0, 10, 0), Some(10));
        assert_eq!(zc.send(&mut out, &mut b, &other, 0, 10, 5), None, "b stays a copy");
        assert_eq!(b, TxMode::Copy);

        // Acknowledged through the first run: its mapping goes.
        zc.release(99);
        assert_eq!(*dev.maps.lock().unwrap(), [1, 2]);
        zc.release(100);
        assert_eq!(*dev.maps.lock().unwrap(), [2]);
        // The rest when the ULP lets go.
        drop(zc);
        assert!(dev.maps.lock().unwrap().is_empty());
    }

    #[test]
    fn runs_of_the_buffer_mapped_last_share_its_mapping_until_the_last_is_acknowledged() {
        let dev = Arc::new(Sk::default());
        let mut zc = ZeroCopyTx::new(dev.clone()).unwrap();
        let (buf, next) = (IoBuf::new(300), IoBuf::new(100));
        let mut out = Sink { room: 1000, offset: 0, acked: 0, got: Vec::new() };

        // Three pieces of one message, headers between them: one mapping
        // of the whole buffer, each piece at its own offset in it.
        let mut modes = [TxMode::Unsent; 3];
        for (i, mode) in modes.iter_mut().enumerate() {
            assert_eq!(out.write(&[0; 8]), 8);
            assert_eq!(zc.send(&mut out, mode, &buf, 100 * i, 100, 0), Some(100));
        }
        let refs: Vec<_> = out.got.iter().filter_map(|g| g.1).collect();
        assert_eq!(refs, [(1, 0), (1, 100), (1, 200)]);
        assert_eq!((*dev.maps.lock().unwrap()).clone(), [1]);
        // Another buffer gets a mapping of its own.
        let mut m = TxMode::Unsent;
        assert_eq!(zc.send(&mut out, &mut m, &next, 0, 100, 0), Some(100));
        assert_eq!(m, TxMode::Reference(2));
        // The shared mapping lasts until its last piece is acknowledged
        // (stream offset 324), not its first.
        zc.release(108);
        zc.release(323);
        assert_eq!(*dev.maps.lock().unwrap(), [1, 2]);
        zc.release(324);
        assert_eq!(*dev.maps.lock().unwrap(), [2]);
        assert_eq!(zc.mapped(), 1);
    }
}
