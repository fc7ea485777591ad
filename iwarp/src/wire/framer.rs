//! MPA FPDUs (RFC 5044 §7.2) taken apart resumably on receive, in
//! whatever pieces TCP delivers (the CRC trailer alone included, as Linux
//! siw often sends it); building them on transmit is `fpdu.rs`'s. The
//! framer never needs an FPDU to be contiguous, never allocates per FPDU
//! and never panics on a peer's bytes.
//!
//! Where this side asked for markers ([`FpduFramer::start`]), the
//! framer takes them out of the stream, checks that each points at the
//! FPDU it sits in (or precedes), and keeps those inside an FPDU in its
//! CRC.
//!
//! Under a NIC that offloads the MPA CRC or places tagged payload, each
//! run of input comes with the NIC's hint ([`FpduFramer::set_hint`]). An
//! FPDU whose header the NIC digested is the NIC's to vouch for: if every
//! byte up to its CRC trailer comes vouched, no CRC is computed here;
//! otherwise the caller recomputes it from where the payload landed
//! ([`FpduFramer::take_unverified`]). Payload the NIC placed is not in the
//! stream: the caller digests it from its buffer when the CRC is ours.

use super::fpdu::{CRC, LEN, pad};
use super::marker::{self, Markers};
use super::{DdpHeader, FpduPacket, WireError, crc32c_append};
use ulp_ddp::HintFlags;

/// What the framer found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event<'a> {
    /// A DDP segment header; `payload_len` bytes of payload follow as
    /// `Data`, then `End`.
    Header { header: DdpHeader, payload_len: u32 },
    /// Payload bytes at `offset` within this segment's payload.
    Data { offset: u32, bytes: &'a [u8] },
    /// The FPDU is complete, and its CRC (when checked) was right.
    End,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Gathering the length and the control bytes.
    Length,
    /// Gathering the rest of a header of `need` bytes.
    Header {
        need: usize,
    },
    /// `pad` is the PAD that follows the data.
    Data {
        left: u32,
        offset: u32,
        pad: usize,
    },
    Pad {
        left: usize,
    },
    Crc,
    End,
}

/// The receive side of one MPA connection after setup.
#[derive(Debug, Clone)]
pub struct FpduFramer {
    crc_on: bool,
    /// The one-shot opcodes were agreed to.
    oneshot: bool,
    state: State,
    buf: [u8; LEN + DdpHeader::UNTAGGED_LEN],
    have: usize,
    crc: u32,
    trailer: [u8; CRC],
    /// The NIC's hint for the input at hand.
    hint: HintFlags,
    /// Bytes of the current FPDU's length and header.
    header_len: usize,
    payload_len: u32,
    /// The NIC digested this FPDU's header: the CRC is its to vouch for.
    nic_crc: bool,
    /// Every byte of this FPDU so far came with the NIC's CRC_OK.
    vouched: bool,
    pad: [u8; 3],
    pad_len: usize,
    /// The trailer of an FPDU that ended unvouched, for the caller.
    unverified: Option<u32>,
    sw_crc_bytes: u64,
    nic_crc_bytes: u64,
    /// The markers this side asked for, if it did.
    markers: Option<Markers>,
    /// Stream offset of the next byte, and of the current FPDU's length
    /// field.
    pos: u64,
    fpdu_start: u64,
    /// The marker being read.
    marker: [u8; marker::LEN],
    /// Markers inside the current FPDU, by their offset in it as if they
    /// were not there: what a CRC recomputed later must take in.
    marks: Vec<(u32, [u8; marker::LEN])>,
}

impl FpduFramer {
    /// A framer checking CRCs when `crc` was negotiated.
    pub fn new(crc: bool) -> Self {
        Self {
            crc_on: crc,
            oneshot: false,
            state: State::Length,
            buf: [0; LEN + DdpHeader::UNTAGGED_LEN],
            have: 0,
            crc: 0,
            trailer: [0; CRC],
            hint: HintFlags::NONE,
            header_len: 0,
            payload_len: 0,
            nic_crc: false,
            vouched: false,
            pad: [0; 3],
            pad_len: 0,
            unverified: None,
            sw_crc_bytes: 0,
            nic_crc_bytes: 0,
            markers: None,
            pos: 0,
            fpdu_start: 0,
            marker: [0; marker::LEN],
            marks: Vec::new(),
        }
    }

    /// FPDUs start at stream offset `at`, with markers in them if this
    /// side asked for markers.
    pub fn start(mut self, at: u64, markers: bool) -> Self {
        self.pos = at;
        self.markers = markers.then_some(Markers { origin: at });
        self
    }

    /// The markers this side reads, if it asked for them.
    pub fn markers(&self) -> Option<Markers> {
        self.markers
    }

    /// Stream offset of the current (or last) FPDU's length field.
    pub fn fpdu_start(&self) -> u64 {
        self.fpdu_start
    }

    /// Accept the one-shot opcodes (agreed to at connection setup).
    pub fn with_oneshot(mut self, oneshot: bool) -> Self {
        self.oneshot = oneshot;
        self
    }

    /// How the NIC handled the bytes the next calls take.
    pub fn set_hint(&mut self, hint: HintFlags) {
        self.hint = hint;
    }

    /// The bytes at hand were placed by the NIC: they are not in the
    /// stream, only where they belong.
    pub fn placed(&self) -> bool {
        self.hint.contains(HintFlags::PLACED)
    }

    /// The CRC of the current FPDU is computed here, so placed payload
    /// must be digested from its buffer ([`FpduFramer::crc`]).
    pub fn wants_payload_crc(&self) -> bool {
        self.crc_on && !self.nic_crc
    }

    fn digest_payload(&mut self, bytes: &[u8]) {
        self.crc = crc32c_append(self.crc, bytes);
        self.sw_crc_bytes += bytes.len() as u64;
    }

    /// The running CRC, for the caller to continue over `n` payload bytes
    /// it takes from their buffer and give back with [`Self::digested`].
    pub fn crc(&self) -> u32 {
        self.crc
    }

    pub fn digested(&mut self, crc: u32, n: usize) {
        self.crc = crc;
        self.sw_crc_bytes += n as u64;
    }

    /// After `End`: the CRC trailer of an FPDU the NIC took on and did
    /// not vouch for (bytes were missed, or it found the CRC wrong). The
    /// caller recomputes the CRC: [`FpduFramer::header_crc`], then the
    /// payload from where it landed, then [`FpduFramer::pad_crc`].
    pub fn take_unverified(&mut self) -> Option<u32> {
        self.unverified.take()
    }

    /// The CRC over the FPDU's length and header, and the markers among
    /// them.
    pub fn header_crc(&self) -> u32 {
        let (mut crc, mut at) = (0, 0);
        for &(off, m) in self.marks.iter().filter(|(off, _)| (*off as usize) < self.header_len) {
            crc = crc32c_append(crc, &self.buf[at..off as usize]);
            crc = crc32c_append(crc, &m);
            at = off as usize;
        }
        crc32c_append(crc, &self.buf[at..self.header_len])
    }

    /// The markers inside the ended FPDU's payload: where in the payload
    /// each one sits (in front of that byte), for the caller recomputing
    /// the CRC to take in between.
    pub fn payload_marks(&self) -> impl Iterator<Item = (u32, [u8; marker::LEN])> + '_ {
        let (from, to) = (self.header_len as u32, self.header_len as u32 + self.payload_len);
        self.marks
            .iter()
            .filter(move |(off, _)| (from..to).contains(off))
            .map(move |&(o, m)| (o - from, m))
    }

    /// `crc`, which went on over the payload, continued over the PAD and
    /// the marker in front of the trailer, if one is there.
    pub fn pad_crc(&mut self, crc: u32) -> u32 {
        self.sw_crc_bytes += u64::from(self.payload_len);
        let mut crc = crc32c_append(crc, &self.pad[..self.pad_len]);
        let end = self.header_len as u32 + self.payload_len;
        for (_, m) in self.marks.iter().filter(|(off, _)| *off >= end) {
            crc = crc32c_append(crc, m);
        }
        crc
    }

    /// Between FPDUs, `len` stream bytes of whole FPDUs the NIC consumed
    /// go by unread.
    pub fn skip_whole(&mut self, len: u64) {
        debug_assert!(self.at_fpdu_start() && self.markers.is_none());
        self.pos += len;
    }

    /// Payload bytes of FPDUs the NIC consumed whole whose CRCs it checked.
    pub fn nic_vouched(&mut self, payload: u64) {
        self.nic_crc_bytes += payload;
    }

    /// Payload bytes digested here, and vouched for by the NIC.
    pub fn crc_bytes(&self) -> (u64, u64) {
        (self.sw_crc_bytes, self.nic_crc_bytes)
    }

    fn note(&mut self, k: usize) {
        if k > 0 {
            self.vouched &= self.hint.contains(HintFlags::CRC_OK);
        }
    }

    /// Between FPDUs: the next byte starts one.
    pub fn at_fpdu_start(&self) -> bool {
        self.state == State::Length && self.have == 0
    }

    fn digest(&mut self, bytes: &[u8]) {
        if self.crc_on && !self.nic_crc {
            self.crc = crc32c_append(self.crc, bytes);
        }
    }

    /// Copy from `rest` into `buf` until it holds `need` bytes; how many
    /// were taken, and whether `buf` is now full.
    fn gather(&mut self, rest: &[u8], need: usize) -> (usize, bool) {
        let k = (need - self.have).min(rest.len());
        self.buf[self.have..self.have + k].copy_from_slice(&rest[..k]);
        self.have += k;
        (k, self.have == need)
    }

    /// Take bytes from `input`: how many were used and the event they
    /// completed. `(n, None)` means all of it was used and more is needed;
    /// call again while events come, even with no input left.
    pub fn next<'a>(&mut self, input: &'a [u8]) -> Result<(usize, Option<Event<'a>>), WireError> {
        let Some(m) = self.markers else {
            if self.at_fpdu_start() {
                self.fpdu_start = self.pos;
            }
            let (n, ev) = self.step(input)?;
            self.pos += n as u64;
            return Ok((n, ev));
        };
        let mut used = 0;
        loop {
            let ph = m.phase(self.pos);
            if ph < marker::LEN {
                let k = (marker::LEN - ph).min(input.len() - used);
                if k == 0 {
                    return Ok((used, None));
                }
                self.marker_bytes(ph, &input[used..used + k])?;
                used += k;
                self.pos += k as u64;
                continue;
            }
            if self.at_fpdu_start() {
                self.fpdu_start = self.pos;
                self.marks.clear();
            }
            let lim = used + m.until_next(self.pos).min(input.len() - used);
            let (n, ev) = self.step(&input[used..lim])?;
            used += n;
            self.pos += n as u64;
            if ev.is_some() || used == input.len() {
                return Ok((used, ev));
            }
        }
    }

    /// Bytes `ph..` of the marker at hand: checked once whole, and taken
    /// into the CRC when inside an FPDU.
    fn marker_bytes(&mut self, ph: usize, bytes: &[u8]) -> Result<(), WireError> {
        let k = bytes.len();
        if ph == 0 {
            self.marker = [0; marker::LEN];
        }
        self.marker[ph..ph + k].copy_from_slice(bytes);
        // Nothing but payload is ever placed: a placed marker was never
        // seen.
        if self.placed() {
            return Err(WireError::MarkerMismatch);
        }
        let inside = !self.at_fpdu_start();
        if inside {
            self.note(k);
            if matches!(self.state, State::Data { .. } | State::Pad { .. } | State::Crc) {
                self.digest(bytes);
            }
        }
        if ph + k < marker::LEN {
            return Ok(());
        }
        let at = self.pos - ph as u64;
        let want = if inside { at - self.fpdu_start } else { 0 };
        if u64::from(marker::fpduptr(self.marker)) != want {
            return Err(WireError::MarkerMismatch);
        }
        if inside {
            self.marks.push((self.fpdu_offset(), self.marker));
        }
        Ok(())
    }

    /// Bytes of the current FPDU so far, markers left out.
    fn fpdu_offset(&self) -> u32 {
        let body = self.header_len as u32 + self.payload_len;
        match self.state {
            State::Length | State::Header { .. } => self.have as u32,
            State::Data { offset, .. } => self.header_len as u32 + offset,
            State::Pad { .. } => body + self.pad_len as u32,
            State::Crc | State::End => body + self.pad_len as u32 + self.have as u32,
        }
    }

    fn step<'a>(&mut self, input: &'a [u8]) -> Result<(usize, Option<Event<'a>>), WireError> {
        let mut used = 0;
        loop {
            let rest = &input[used..];
            match self.state {
                State::Length => {
                    if self.have == 0 {
                        self.vouched = true;
                    }
                    let (k, full) = self.gather(rest, LEN + 2);
                    self.note(k);
                    used += k;
                    if !full {
                        return Ok((used, None));
                    }
                    // The control bytes say how long the header is.
                    let ulpdu = FpduPacket::new_unchecked(&self.buf).ulpdu_length();
                    let need =
                        DdpHeader::peek(&self.buf[LEN..LEN + 2], self.oneshot)?.opcode.header_len();
                    if usize::from(ulpdu) < need {
                        return Err(WireError::ShortUlpdu { len: ulpdu, need: need as u16 });
                    }
                    self.state = State::Header { need };
                }
                State::Header { need } => {
                    let (k, full) = self.gather(rest, LEN + need);
                    self.note(k);
                    used += k;
                    if !full {
                        return Ok((used, None));
                    }
                    let header = DdpHeader::parse_with(&self.buf[LEN..LEN + need], self.oneshot)?;
                    let ulpdu = usize::from(FpduPacket::new_unchecked(&self.buf).ulpdu_length());
                    self.header_len = LEN + need;
                    self.nic_crc = self.crc_on && self.vouched;
                    self.crc = if self.wants_payload_crc() { self.header_crc() } else { 0 };
                    self.have = 0;
                    let payload_len = (ulpdu - need) as u32;
                    self.payload_len = payload_len;
                    self.pad_len = 0;
                    self.state = State::Data { left: payload_len, offset: 0, pad: pad(ulpdu) };
                    return Ok((used, Some(Event::Header { header, payload_len })));
                }
                State::Data { left: 0, pad, .. } => self.state = State::Pad { left: pad },
                State::Data { left, offset, pad } => {
                    let k = (left as usize).min(rest.len());
                    if k == 0 {
                        return Ok((used, None));
                    }
                    let bytes = &rest[..k];
                    self.note(k);
                    if !self.placed() && self.wants_payload_crc() {
                        self.digest_payload(bytes);
                    }
                    used += k;
                    let (left, next) = (left - k as u32, offset + k as u32);
                    self.state = State::Data { left, offset: next, pad };
                    return Ok((used, Some(Event::Data { offset, bytes })));
                }
                State::Pad { left } => {
                    let k = left.min(rest.len());
                    self.note(k);
                    self.pad[self.pad_len..self.pad_len + k].copy_from_slice(&rest[..k]);
                    self.pad_len += k;
                    self.digest(&rest[..k]);
                    used += k;
                    if k < left {
                        self.state = State::Pad { left: left - k };
                        return Ok((used, None));
                    }
                    self.state = State::Crc;
                }
                State::Crc => {
                    let k = (CRC - self.have).min(rest.len());
                    self.trailer[self.have..self.have + k].copy_from_slice(&rest[..k]);
                    self.have += k;
                    self.note(k);
                    used += k;
                    if self.have < CRC {
                        return Ok((used, None));
                    }
                    self.have = 0;
                    let got = u32::from_le_bytes(self.trailer);
                    if self.nic_crc {
                        if self.vouched {
                            self.nic_crc_bytes += u64::from(self.payload_len);
                        } else {
                            self.unverified = Some(got);
                        }
                    } else if self.crc_on && got != self.crc {
                        return Err(WireError::BadCrc);
                    }
                    self.state = State::End;
                }
                State::End => {
                    self.state = State::Length;
                    return Ok((used, Some(Event::End)));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::{Ctrl, Opcode, emit_fpdu, fpdu_len, mulpdu};

    fn send(msn: u32, payload_len: usize) -> (DdpHeader, Vec<u8>) {
        let ctrl = Ctrl { last: true, opcode: Opcode::Send };
        let h = DdpHeader::Untagged { ctrl, inval_stag: 0, qn: 0, msn, mo: 0 };
        (h, (0..payload_len).map(|i| (i * 7 + msn as usize) as u8).collect())
    }

    fn write(stag: u32, to: u64, payload_len: usize, last: bool) -> (DdpHeader, Vec<u8>) {
        let h = DdpHeader::Tagged { ctrl: Ctrl { last, opcode: Opcode::Write }, stag, to };
        (h, (0..payload_len).map(|i| (i * 13) as u8).collect())
    }

    #[test]
    fn sizes_and_pad() {
        // A zero-length Send is 24 bytes: length 18, no PAD, CRC.
        let (h, p) = send(1, 0);
        let mut out = Vec::new();
        emit_fpdu(&h, &p, false, &mut out);
        assert_eq!(out.len(), 24);
        assert_eq!(&out[..4], [0x00, 0x12, 0x41, 0x43]);
        assert_eq!(&out[20..], [0, 0, 0, 0], "CRC off: zeros");
        // The zero-length RTR Write of the reference: 00 0e c1 40, STag 1.
        let (h, p) = write(1, 0, 0, true);
        let mut out = Vec::new();
        emit_fpdu(&h, &p, false, &mut out);
        assert_eq!(&out[..8], [0x00, 0x0e, 0xc1, 0x40, 0, 0, 0, 1]);
        assert_eq!(out.len(), 2 + 14 + 4, "no payload, no PAD");
        assert_eq!(fpdu_len(14), 20);
        // One payload byte: 2 + 19 = 21, three bytes of PAD.
        assert_eq!(fpdu_len(19), 2 + 19 + 3 + 4);
        // siw's MSS-sized Write: 1448-byte segments carry 1442-byte ULPDUs.
        assert_eq!(mulpdu(1448), 1442);
        assert_eq!(fpdu_len(mulpdu(1448)), 1448);
    }

    #[test]
    fn crc_is_the_values_little_endian_bytes() {
        let (h, p) = send(1, 16);
        let mut out = Vec::new();
        emit_fpdu(&h, &p, true, &mut out);
        let n = out.len();
        let sum = crc32c::crc32c(&out[..n - 4]);
        assert_eq!(out[n - 4..], sum.to_le_bytes());
    }

    /// Events for `stream` fed `piece` bytes at a time, as text.
    fn run(f: &mut FpduFramer, stream: &[u8], piece: usize) -> Result<Vec<String>, WireError> {
        feed(f, &stream.chunks(piece).collect::<Vec<_>>())
    }

    /// Events for the stream that `chunks` make up, fed one at a time.
    fn feed(f: &mut FpduFramer, chunks: &[&[u8]]) -> Result<Vec<String>, WireError> {
        let mut out = Vec::new();
        let mut data = Vec::new();
        for chunk in chunks {
            let mut at = 0;
            loop {
                let (n, ev) = f.next(&chunk[at..])?;
                at += n;
                match ev {
                    None => break,
                    Some(Event::Header { header, payload_len }) => {
                        out.push(format!("{:?} {payload_len}", header.ctrl().opcode))
                    }
                    Some(Event::Data { offset, bytes }) => {
                        assert_eq!(offset as usize, data.len());
                        data.extend_from_slice(bytes);
                    }
                    Some(Event::End) => {
                        out.push(format!("end {}", data.len()));
                        data.clear();
                    }
                }
            }
        }
        Ok(out)
    }

    #[test]
    fn fpdus_cut_at_every_point_with_and_without_crc() {
        for crc in [false, true] {
            let mut stream = Vec::new();
            for (h, p) in
                [send(1, 0), write(0x101, 4096, 37, false), send(2, 5), write(0x101, 4133, 3, true)]
            {
                emit_fpdu(&h, &p, crc, &mut stream);
            }
            let want =
                ["Send 0", "end 0", "Write 37", "end 37", "Send 5", "end 5", "Write 3", "end 3"];
            for piece in 1..=stream.len() {
                let mut f = FpduFramer::new(crc);
                assert_eq!(
                    run(&mut f, &stream, piece).unwrap(),
                    want,
                    "crc {crc}, pieces of {piece}"
                );
                assert!(f.at_fpdu_start());
            }
        }
    }

    #[test]
    fn a_crc_trailer_arriving_alone_and_a_bad_one() {
        let (h, p) = write(7, 0, 1428, true);
        let mut fpdu = Vec::new();
        emit_fpdu(&h, &p, true, &mut fpdu);
        // As siw sends it: header and data in one segment, the CRC in the next.
        let (body, trailer) = fpdu.split_at(fpdu.len() - 4);
        let ev = feed(&mut FpduFramer::new(true), &[body, trailer]).unwrap();
        assert_eq!(ev, ["Write 1428", "end 1428"]);
        // One flipped payload bit fails the CRC; with CRC off it passes.
        fpdu[100] ^= 1;
        assert_eq!(run(&mut FpduFramer::new(true), &fpdu, 64), Err(WireError::BadCrc));
        assert!(run(&mut FpduFramer::new(false), &fpdu, 64).is_ok());
    }

    #[test]
    fn markers_are_taken_out_checked_and_kept_in_the_crc() {
        // Two 700-byte Writes behind the Reply, markers every 512 octets.
        let m = Markers { origin: 40 };
        let mut stream = Vec::new();
        for to in [0, 700] {
            let (h, p) = write(9, to, 700, true);
            let mut fpdu = Vec::new();
            emit_fpdu(&h, &p, false, &mut fpdu);
            let at = 40 + stream.len() as u64;
            marker::append(&mut stream, &fpdu, at, m, true);
        }
        assert_eq!(stream.len(), 2 * fpdu_len(714) + 3 * 4, "markers at 0, 512 and 1024");
        for piece in [1, 3, 512, stream.len()] {
            let mut f = FpduFramer::new(true).start(40, true);
            let ev = run(&mut f, &stream, piece).unwrap();
            assert_eq!(ev, ["Write 700", "end 700", "Write 700", "end 700"], "pieces of {piece}");
        }
        // A marker pointing elsewhere, and one whose bytes changed.
        let mut moved = stream.clone();
        moved[515] ^= 4;
        let mut f = FpduFramer::new(true).start(40, true);
        assert_eq!(run(&mut f, &moved, 100), Err(WireError::MarkerMismatch));
        let mut flipped = stream.clone();
        flipped[1024 + 1] ^= 1;
        let mut f = FpduFramer::new(true).start(40, true);
        assert_eq!(run(&mut f, &flipped, 100), Err(WireError::BadCrc), "the CRC covers markers");
        // Without markers expected, the stream does not parse as FPDUs.
        assert!(run(&mut FpduFramer::new(true), &stream, 100).is_err());
    }

    #[test]
    fn malformed_fpdus_are_refused() {
        // A Send whose length is shorter than its 18-byte header.
        let mut b = vec![0x00, 0x10, 0x41, 0x43];
        b.resize(24, 0);
        assert_eq!(
            FpduFramer::new(false).next(&b),
            Err(WireError::ShortUlpdu { len: 16, need: 18 })
        );
        // Opcode 8 (the patent's encodings, not RFC 5040's).
        assert_eq!(
            FpduFramer::new(false).next(&[0, 0x12, 0x41, 0x48]),
            Err(WireError::BadOpcode(8))
        );
        assert_eq!(
            WireError::BadOpcode(8).terminate(),
            Some((crate::wire::TermLayer::Rdmap, 2, 6))
        );
        assert_eq!(WireError::BadCrc.terminate(), Some((crate::wire::TermLayer::Llp, 0, 2)));
    }
}
