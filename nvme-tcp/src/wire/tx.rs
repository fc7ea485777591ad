//! The transmit side of a connection: PDUs queued whole, written out in
//! whatever pieces the transport has room for.
//!
//! Headers are emitted once into the queue entry; data goes from the
//! command's buffer into the transport's send ring, copied, or queued by
//! reference for the NIC to gather ([`ZeroCopyTx`]). Its data digest is
//! computed here over the buffer, or left as zeros for a NIC with transmit
//! digest offload to fill in.

use super::{DIGEST_LEN, Framing, Header, PduRepr, crc32c_append};
use nvme_of::TxStats;
use std::collections::VecDeque;
use ulp_ddp::{IoBuf, SliceSink, TxMode, TxSink, ZeroCopyTx};

/// Room for the longest header with digest and padding (128 bytes) plus
/// inline data such as a TermReq's quoted header (128 bytes).
const HEAD_CAP: usize = 256;

struct TxPdu {
    head: [u8; HEAD_CAP],
    head_len: usize,
    data: Option<(IoBuf, usize, usize)>,
    ddgst: bool,
    /// Running CRC32C over the data sent so far.
    crc: u32,
    sent: usize,
    /// How the data goes out: by reference or by copy.
    mode: TxMode,
}

impl TxPdu {
    fn len(&self) -> usize {
        let data = self.data.as_ref().map_or(0, |d| d.2);
        self.head_len + data + if self.ddgst { DIGEST_LEN } else { 0 }
    }
}

/// PDUs waiting to be written to one connection.
pub struct TxQueue {
    pdus: VecDeque<TxPdu>,
    framing: Framing,
    ddgst_offload: bool,
    queued: usize,
    stats: TxStats,
}

impl Default for TxQueue {
    fn default() -> Self {
        Self::new()
    }
}

impl TxQueue {
    pub fn new() -> Self {
        Self {
            pdus: VecDeque::new(),
            framing: Framing::INITIAL,
            ddgst_offload: false,
            queued: 0,
            stats: TxStats::default(),
        }
    }

    /// Framing of this direction: the digests in force and the receiver's PDA.
    pub fn set_framing(&mut self, framing: Framing) {
        self.framing = framing;
    }

    pub fn framing(&self) -> Framing {
        self.framing
    }

    /// Leave data digests as zeros from the next PDU on: a NIC fills them in.
    pub fn set_ddgst_offload(&mut self, on: bool) {
        self.ddgst_offload = on;
    }

    pub fn stats(&self) -> TxStats {
        self.stats
    }

    /// Bytes queued and not yet written.
    pub fn queued(&self) -> usize {
        self.queued
    }

    pub fn is_empty(&self) -> bool {
        self.pdus.is_empty()
    }

    /// Drop everything queued (the connection is going away).
    pub fn clear(&mut self) {
        self.pdus.clear();
        self.queued = 0;
    }

    /// Queue a PDU whose data, if any, is `len` bytes of `buf` at `offset`
    /// (cut to what the buffer holds).
    pub fn push(&mut self, header: Header, data: Option<(IoBuf, usize, usize)>) {
        let data = data.map(|(buf, offset, len)| {
            let have = buf.len();
            let offset = offset.min(have);
            let len = len.min(have - offset);
            (buf, offset, len)
        });
        let data_len = data.as_ref().map_or(0, |d| d.2);
        let repr = PduRepr::new(header, self.framing, data_len as u32);
        let mut head = [0u8; HEAD_CAP];
        repr.emit_header(&mut head);
        let pdu = TxPdu {
            head,
            head_len: repr.header_len(),
            data: data.filter(|d| d.2 > 0),
            ddgst: repr.ddgst,
            crc: 0,
            sent: 0,
            mode: TxMode::Unsent,
        };
        self.queued += pdu.len();
        self.pdus.push_back(pdu);
    }

    /// Queue a PDU with a little data carried in the entry itself (a
    /// TermReq's quoted header). `data` is cut to what fits.
    pub fn push_inline(&mut self, header: Header, data: &[u8]) {
        let repr = PduRepr::new(header, self.framing, 0);
        let data = &data[..data.len().min(HEAD_CAP - repr.header_len())];
        let repr = PduRepr::new(header, self.framing, data.len() as u32);
        let mut head = [0u8; HEAD_CAP];
        let len = repr.plen() as usize;
        repr.emit(&mut head[..len], data);
        self.queued += len;
        self.pdus.push_back(TxPdu {
            head,
            head_len: len,
            data: None,
            ddgst: false,
            crc: 0,
            sent: 0,
            mode: TxMode::Copy,
        });
    }

    /// Copy queued bytes into `out`; returns how many.
    pub fn poll(&mut self, out: &mut [u8]) -> usize {
        self.poll_send(&mut SliceSink::new(out), None)
    }

    /// Queue bytes in `out`, data by reference where `zc` maps it; returns
    /// how many. Mappings the peer has acknowledged are released first.
    pub fn poll_send(&mut self, out: &mut dyn TxSink, mut zc: Option<&mut ZeroCopyTx>) -> usize {
        if let Some(zc) = zc.as_deref_mut() {
            zc.release(out.acked());
        }
        let mut n = 0;
        while out.room() > 0 {
            let Some(pdu) = self.pdus.front_mut() else { break };
            let wrote =
                Self::write_pdu(pdu, out, zc.as_deref_mut(), self.ddgst_offload, &mut self.stats);
            n += wrote;
            if pdu.sent == pdu.len() {
                self.pdus.pop_front();
            } else if wrote == 0 {
                break;
            }
        }
        self.queued -= n;
        n
    }

    fn write_pdu(
        pdu: &mut TxPdu,
        out: &mut dyn TxSink,
        zc: Option<&mut ZeroCopyTx>,
        offload: bool,
        stats: &mut TxStats,
    ) -> usize {
        let mut n = 0;
        if pdu.sent < pdu.head_len {
            let k = out.write(&pdu.head[pdu.sent..pdu.head_len]);
            pdu.sent += k;
            n += k;
        }
        let data_len = pdu.data.as_ref().map_or(0, |d| d.2);
        let data_end = pdu.head_len + data_len;
        if pdu.sent >= pdu.head_len
            && pdu.sent < data_end
            && out.room() > 0
            && let Some((buf, offset, len)) = &pdu.data
        {
            let done = pdu.sent - pdu.head_len;
            let by_ref = zc.and_then(|zc| zc.send(out, &mut pdu.mode, buf, *offset, *len, done));
            // The buffer is locked only to copy or digest it: sent by
            // reference and digested by the NIC, it is never read here.
            // In range: `push` clamped the span to the buffer, whose length never changes.
            let span = offset + done..offset + len;
            let k = match by_ref {
                Some(k) => {
                    stats.zero_copy_bytes += k as u64;
                    k
                }
                None => {
                    let k = out.write(&buf.lock()[span.clone()]);
                    stats.data_bytes += k as u64;
                    k
                }
            };
            if pdu.ddgst && offload {
                stats.crc_offloaded_bytes += k as u64;
            } else if pdu.ddgst {
                pdu.crc = crc32c_append(pdu.crc, &buf.lock()[span.start..span.start + k]);
                stats.crc_bytes += k as u64;
            }
            pdu.sent += k;
            n += k;
        }
        if pdu.ddgst && pdu.sent >= data_end && out.room() > 0 {
            let digest = if offload { [0; DIGEST_LEN] } else { pdu.crc.to_le_bytes() };
            let k = out.write(&digest[pdu.sent - data_end..]);
            pdu.sent += k;
            n += k;
        }
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::{DataPdu, Digests, Direction, Event, Framer};

    #[test]
    fn pieces_of_any_size_make_the_same_stream() {
        let framing = Framing { digests: Digests { header: true, data: true }, pda: 1 };
        let buf = IoBuf::from_vec((0..5000u32).map(|i| i as u8).collect());
        let build = || {
            let mut q = TxQueue::new();
            q.set_framing(framing);
            let d = DataPdu { cccid: 1, ttag: 0, datao: 0, last: false, success: false };
            q.push(Header::C2hData(d), Some((buf.clone(), 100, 3000)));
            let d = DataPdu { datao: 3000, last: true, ..d };
            q.push(Header::C2hData(d), Some((buf.clone(), 3100, 1900)));
            q
        };
        let mut whole = vec![0u8; 10_000];
        let mut q = build();
        let total = q.queued();
        assert_eq!(q.poll(&mut whole), total);
        whole.truncate(total);
        for piece in [1, 3, 7, 64, 1000] {
            let mut q = build();
            let mut got = Vec::new();
            let mut out = vec![0u8; piece];
            while !q.is_empty() {
                let n = q.poll(&mut out);
                got.extend_from_slice(&out[..n]);
            }
            assert_eq!(got, whole, "pieces of {piece}");
        }
        // What went out parses, with digests that match.
        let mut f = Framer::new(Direction::ControllerToHost);
        f.set_framing(framing);
        let mut at = 0;
        let mut data = Vec::new();
        let mut crc = 0;
        loop {
            let (n, ev) = f.next(&whole[at..]).unwrap();
            at += n;
            match ev {
                Some(Event::Data { bytes, .. }) => {
                    crc = crc32c_append(crc, bytes);
                    data.extend_from_slice(bytes);
                }
                Some(Event::End { data_digest }) => {
                    assert_eq!(data_digest, Some(crc));
                    crc = 0;
                }
                Some(Event::Header(_)) => {}
                None => break,
            }
        }
        assert_eq!(data, buf.to_vec()[100..5000]);
    }

    #[test]
    fn offloaded_digest_is_left_zero() {
        let framing = Framing { digests: Digests { header: false, data: true }, pda: 0 };
        let mut q = TxQueue::new();
        q.set_framing(framing);
        q.set_ddgst_offload(true);
        let d = DataPdu { cccid: 1, ttag: 2, datao: 0, last: true, success: false };
        q.push(Header::H2cData(d), Some((IoBuf::from_vec(vec![7; 10]), 0, 10)));
        let mut out = [0xffu8; 64];
        let n = q.poll(&mut out);
        assert_eq!(n, 24 + 10 + 4);
        assert_eq!(&out[34..38], &[0, 0, 0, 0]);
        assert_eq!(
            q.stats(),
            TxStats { data_bytes: 10, crc_offloaded_bytes: 10, ..TxStats::default() }
        );
    }
}
