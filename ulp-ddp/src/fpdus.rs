//! A tagged iWARP message the device cuts into FPDUs as it sends them: DDP
//! segmentation (RFC 5041 §5) and MPA framing (RFC 5044 §4) done by the
//! device, as an RNIC's transmit engine does, so that the ULP neither
//! builds nor queues a byte of any FPDU but names the whole framed message
//! by reference ([`IwarpSk::tx_setup_fpdus`](crate::IwarpSk::tx_setup_fpdus)).
//!
//! This type says what the framed octets are, and writes them where they
//! are asked for: the device into each segment, or the ULP by copy when
//! its transport cannot queue them by reference.

use crate::{SgEntry, Sgl};

/// A tagged message (RDMA Write, RDMA Read Response) as the FPDUs that
/// carry it, without markers. FPDU `i` carries payload octets
/// `i * per_fpdu ..` of `sgl`, `per_fpdu` of them but in the last, and is,
/// in order:
///
/// - its ULPDU_LENGTH, big-endian: the header's length and its payload's;
/// - [`header`](Self::header) with the TO advanced by `i * per_fpdu` and
///   the L bit set in the last FPDU only;
/// - its payload;
/// - the pad to a multiple of four octets, and the four-octet CRC field,
///   all zero: the device's transmit CRC offload fills the CRC in, or the
///   connection runs without CRCs.
#[derive(Debug, Clone)]
pub struct TxFpdus {
    /// The first FPDU's DDP and RDMAP header (RFC 5041 §4.2, RFC 5040
    /// §4): control octets, STag, TO.
    pub header: [u8; TxFpdus::HEADER_LEN],
    /// The first FPDU's TO, as its header has it.
    to: u64,
    per_fpdu: usize,
    sgl: Sgl,
    payload: usize,
}

impl TxFpdus {
    /// A tagged DDP header's length.
    pub const HEADER_LEN: usize = 14;
    /// The DDP control octet's T and L bits.
    pub const TAGGED: u8 = 0x80;
    pub const LAST: u8 = 0x40;
    /// Where the TO is in the header.
    pub const TO_AT: usize = 6;
    /// The ULPDU_LENGTH field and the CRC field.
    const LENGTH_LEN: usize = 2;
    const CRC_LEN: usize = 4;
    /// What comes before an FPDU's payload: its length and header.
    pub const HEAD_LEN: usize = Self::LENGTH_LEN + Self::HEADER_LEN;

    /// The message of `sgl`'s payload with `header` first, `per_fpdu`
    /// payload octets to an FPDU; None unless the header is tagged and
    /// every entry lies in its buffer, or if there is nothing to send.
    pub fn new(header: [u8; Self::HEADER_LEN], per_fpdu: usize, sgl: Sgl) -> Option<Self> {
        let payload = sgl.iter().map(|e| e.len).sum::<usize>();
        let to = u64::from_be_bytes(header[Self::TO_AT..].try_into().ok()?);
        let ok = header[0] & Self::TAGGED != 0
            && per_fpdu > 0
            && payload > 0
            && Self::HEADER_LEN + per_fpdu <= usize::from(u16::MAX)
            && sgl.iter().all(SgEntry::in_bounds);
        ok.then_some(Self { header, to, per_fpdu, sgl, payload })
    }

    pub fn per_fpdu(&self) -> usize {
        self.per_fpdu
    }

    pub fn sgl(&self) -> &[SgEntry] {
        &self.sgl
    }

    /// Payload octets in all.
    pub fn payload_len(&self) -> usize {
        self.payload
    }

    /// FPDUs in all.
    pub fn count(&self) -> usize {
        self.payload.div_ceil(self.per_fpdu)
    }

    /// Payload octets of FPDU `i`.
    pub fn payload_of(&self, i: usize) -> usize {
        self.per_fpdu.min(self.payload - i * self.per_fpdu)
    }

    /// Octets on the wire of an FPDU carrying `payload` octets.
    pub fn wire_len(payload: usize) -> usize {
        let framed = Self::LENGTH_LEN + Self::HEADER_LEN + payload;
        framed.next_multiple_of(4) + Self::CRC_LEN
    }

    /// Octets of FPDU `i`.
    pub fn fpdu_len(&self, i: usize) -> usize {
        Self::wire_len(self.payload_of(i))
    }

    /// Octets of the framed message.
    pub fn len(&self) -> usize {
        let n = self.count();
        (n - 1) * Self::wire_len(self.per_fpdu) + self.fpdu_len(n - 1)
    }

    pub fn is_empty(&self) -> bool {
        false
    }

    /// The FPDU octet `at` of the framed message is in, and where that
    /// FPDU starts.
    pub fn fpdu_at(&self, at: usize) -> (usize, usize) {
        let full = Self::wire_len(self.per_fpdu);
        let i = (at / full).min(self.count() - 1);
        (i, i * full)
    }

    /// FPDU `i`'s ULPDU_LENGTH and header, as they go on the wire.
    pub fn head_of(&self, i: usize) -> [u8; Self::HEAD_LEN] {
        let mut head = [0u8; Self::HEAD_LEN];
        let ulpdu = (Self::HEADER_LEN + self.payload_of(i)) as u16;
        head[..2].copy_from_slice(&ulpdu.to_be_bytes());
        let h = &mut head[2..];
        h.copy_from_slice(&self.header);
        h[0] &= !Self::LAST;
        if i + 1 == self.count() {
            h[0] |= Self::LAST;
        }
        let to = self.to.wrapping_add((i * self.per_fpdu) as u64);
        h[Self::TO_AT..].copy_from_slice(&to.to_be_bytes());
        head
    }

    /// Payload octets among the framed message's octets `from..to`.
    pub fn payload_in(&self, from: usize, to: usize) -> usize {
        self.payload_before(to).saturating_sub(self.payload_before(from))
    }

    /// The payload among the framed message's octets `from..to`, as the
    /// runs of the buffers it is in, to `f` in order.
    pub fn payload_runs(&self, from: usize, to: usize, mut f: impl FnMut(&[u8])) {
        let (mut from, to) = (self.payload_before(from), self.payload_before(to));
        let mut entry_start = 0;
        for e in &self.sgl {
            let entry_end = entry_start + e.len;
            if from < to && from < entry_end {
                let (a, b) = (from - entry_start, to.min(entry_end) - entry_start);
                f(&e.buf.lock()[e.offset + a..e.offset + b]);
                from = entry_start + b;
            }
            entry_start = entry_end;
        }
    }

    /// Payload octets before the framed message's octet `at`.
    fn payload_before(&self, at: usize) -> usize {
        let (i, start) = self.fpdu_at(at);
        let into = (at - start).saturating_sub(Self::HEAD_LEN).min(self.payload_of(i));
        i * self.per_fpdu + into
    }

    /// Write octets `at..at + dst.len()` of the framed message into
    /// `dst`; how many FPDUs start among them, and how many payload
    /// octets they are.
    pub fn fill(&self, mut at: usize, dst: &mut [u8]) -> (u64, usize) {
        let (mut started, mut k, mut payload_octets) = (0, 0, 0);
        while k < dst.len() {
            let (i, start) = self.fpdu_at(at);
            let head = self.head_of(i);
            let (h, p) = (head.len(), self.payload_of(i));
            let off = at - start;
            started += u64::from(off == 0);
            let n = (self.fpdu_len(i) - off).min(dst.len() - k);
            let out = &mut dst[k..k + n];
            // The head, the payload, then the pad and the CRC field.
            let in_head = h.saturating_sub(off).min(n);
            if in_head > 0 {
                out[..in_head].copy_from_slice(&head[off..off + in_head]);
            }
            let from = (off + in_head).saturating_sub(h).min(p);
            let in_payload = (p - from).min(n - in_head);
            let payload = &mut out[in_head..in_head + in_payload];
            copy_from_sgl(&self.sgl, i * self.per_fpdu + from, payload);
            payload_octets += in_payload;
            out[in_head + in_payload..].fill(0);
            at += n;
            k += n;
        }
        (started, payload_octets)
    }
}

/// Fill `dst` from the scatter list `sgl`, from its octet `from` on.
fn copy_from_sgl(sgl: &[SgEntry], mut from: usize, dst: &mut [u8]) {
    let mut k = 0;
    for e in sgl {
        if k == dst.len() {
            break;
        }
        if from >= e.len {
            from -= e.len;
            continue;
        }
        let n = (e.len - from).min(dst.len() - k);
        dst[k..k + n].copy_from_slice(&e.buf.lock()[e.offset + from..e.offset + from + n]);
        k += n;
        from = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::IoBuf;

    fn fpdus(payload: usize, per_fpdu: usize) -> TxFpdus {
        let mut header = [0u8; TxFpdus::HEADER_LEN];
        header[0] = TxFpdus::TAGGED | TxFpdus::LAST | 1;
        header[1] = 0x40 | 0x01;
        header[TxFpdus::TO_AT..].copy_from_slice(&0x1000u64.to_be_bytes());
        let sgl = crate::sgl![SgEntry { buf: IoBuf::new(payload), offset: 0, len: payload }];
        TxFpdus::new(header, per_fpdu, sgl).expect("valid")
    }

    #[test]
    fn fpdus_are_cut_at_the_payload_size_and_padded_to_four() {
        let f = fpdus(10_001, 4_000);
        assert_eq!(f.count(), 3);
        assert_eq!((f.payload_of(0), f.payload_of(2)), (4_000, 2_001));
        // 2 + 14 + 4000 is a multiple of four; 2 + 14 + 2001 needs three.
        assert_eq!(f.fpdu_len(0), 4_020);
        assert_eq!(f.fpdu_len(2), 2 + 14 + 2_001 + 3 + 4);
        assert_eq!(f.len(), 2 * 4_020 + 2_024);
        assert_eq!(f.fpdu_at(4_019), (0, 0));
        assert_eq!(f.fpdu_at(4_020), (1, 4_020));
        assert_eq!(f.fpdu_at(f.len() - 1), (2, 8_040));
    }

    #[test]
    fn each_header_advances_the_to_and_only_the_last_is_last() {
        let f = fpdus(10_001, 4_000);
        let heads: Vec<_> = (0..3).map(|i| f.head_of(i)).collect();
        for (i, h) in heads.iter().enumerate() {
            let ulpdu = u16::from_be_bytes([h[0], h[1]]) as usize;
            assert_eq!(ulpdu, 14 + f.payload_of(i));
            assert_eq!(h[2] & TxFpdus::LAST != 0, i == 2, "L bit of FPDU {i}");
            assert_eq!(h[2] & !TxFpdus::LAST, TxFpdus::TAGGED | 1);
            assert_eq!(h[3], 0x41);
            let to = u64::from_be_bytes(h[8..16].try_into().unwrap());
            assert_eq!(to, 0x1000 + 4_000 * i as u64);
        }
    }

    /// The framed octets, FPDU by FPDU, as a reader of RFC 5044 would
    /// write them.
    fn by_hand(f: &TxFpdus, payload: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        for i in 0..f.count() {
            let p = &payload[i * f.per_fpdu()..][..f.payload_of(i)];
            out.extend_from_slice(&f.head_of(i));
            out.extend_from_slice(p);
            while out.len() % 4 != 0 {
                out.push(0);
            }
            out.extend_from_slice(&[0; 4]);
        }
        out
    }

    #[test]
    fn the_framed_message_reads_the_same_at_every_cut() {
        let payload: Vec<u8> = (0..5_003u32).map(|i| (i * 13 + 1) as u8).collect();
        // Two entries, the second from the middle of its buffer.
        let (a, b) = (IoBuf::from_vec(payload[..1_234].to_vec()), IoBuf::new(4_000));
        b.lock()[100..100 + 3_769].copy_from_slice(&payload[1_234..]);
        let sgl = crate::sgl![
            SgEntry { buf: a, offset: 0, len: 1_234 },
            SgEntry { buf: b, offset: 100, len: 3_769 },
        ];
        let f = TxFpdus::new([TxFpdus::TAGGED; 14], 2_001, sgl).unwrap();
        let want = by_hand(&f, &payload);
        assert_eq!(want.len(), f.len());
        let mut whole = vec![0xee; f.len()];
        assert_eq!(f.fill(0, &mut whole), (3, 5_003));
        assert_eq!(whole, want);
        for cut in (0..f.len()).step_by(7) {
            let mut tail = vec![0xee; f.len() - cut];
            let (started, payload) = f.fill(cut, &mut tail);
            assert_eq!(tail, want[cut..], "from {cut}");
            let starts = (0..3).map(|i| f.fpdu_at(i * 2_024 + 1).1).filter(|&s| s >= cut);
            assert_eq!(started, starts.count() as u64, "from {cut}");
            assert_eq!(payload, f.payload_in(cut, f.len()), "from {cut}");
            assert_eq!(f.payload_in(0, cut) + payload, 5_003, "from {cut}");
        }
    }

    #[test]
    fn payload_is_counted_octet_by_octet_between_any_two_cuts() {
        let f = fpdus(1_001, 300);
        // Which framed octets are payload, by the layout.
        let mut is_payload = Vec::new();
        for i in 0..f.count() {
            let n = f.payload_of(i);
            is_payload.extend([false; TxFpdus::HEAD_LEN]);
            is_payload.extend(vec![true; n]);
            is_payload.extend(vec![false; f.fpdu_len(i) - TxFpdus::HEAD_LEN - n]);
        }
        assert_eq!(is_payload.len(), f.len());
        // Payload octets before each framed octet.
        let before: Vec<usize> = std::iter::once(0)
            .chain(is_payload.iter().scan(0, |n, &p| {
                *n += usize::from(p);
                Some(*n)
            }))
            .collect();
        for from in 0..=f.len() {
            for to in from..=f.len() {
                assert_eq!(f.payload_in(from, to), before[to] - before[from], "{from}..{to}");
            }
        }
    }

    #[test]
    fn payload_runs_are_the_payload_framed_between_two_cuts() {
        // Payload octets numbered, over three buffers with offsets.
        let bufs: Vec<IoBuf> = (0..3)
            .map(|b| IoBuf::from_vec((0..500).map(|i| (b * 500 + i) as u16 as u8).collect()))
            .collect();
        let lens = [100, 250, 93];
        let sgl = bufs
            .iter()
            .zip(lens)
            .enumerate()
            .map(|(k, (buf, len))| SgEntry { buf: buf.clone(), offset: 7 * k, len })
            .collect();
        let mut header = [0u8; TxFpdus::HEADER_LEN];
        header[0] = TxFpdus::TAGGED | TxFpdus::LAST;
        let f = TxFpdus::new(header, 60, sgl).expect("valid");
        let payload: Vec<u8> = bufs
            .iter()
            .zip(lens)
            .enumerate()
            .flat_map(|(k, (b, len))| b.lock()[7 * k..7 * k + len].to_vec())
            .collect();
        for from in (0..=f.len()).step_by(7) {
            for to in (from..=f.len()).step_by(11) {
                let mut got = Vec::new();
                f.payload_runs(from, to, |run| got.extend_from_slice(run));
                let skip = f.payload_in(0, from);
                assert_eq!(got, payload[skip..skip + f.payload_in(from, to)], "{from}..{to}");
            }
        }
    }

    #[test]
    fn untagged_empty_and_out_of_bounds_messages_are_refused() {
        let buf = IoBuf::new(100);
        let sgl = |len| crate::sgl![SgEntry { buf: buf.clone(), offset: 0, len }];
        let tagged = [TxFpdus::TAGGED; TxFpdus::HEADER_LEN];
        assert!(TxFpdus::new([0; TxFpdus::HEADER_LEN], 64, sgl(100)).is_none());
        assert!(TxFpdus::new(tagged, 64, sgl(0)).is_none());
        assert!(TxFpdus::new(tagged, 0, sgl(100)).is_none());
        assert!(TxFpdus::new(tagged, 64, sgl(101)).is_none());
        assert!(TxFpdus::new(tagged, 64, sgl(100)).is_some());
    }
}
