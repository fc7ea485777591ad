//! MPA FPDUs and their DDP/RDMAP headers as a NIC follows them: its own
//! tracker, not the protocol crate's parser, so that a parsing bug is not
//! shared by the model and the engine it checks.
//!
//! It reads what an RNIC reads to place and digest: the MPA length, the
//! DDP and RDMAP control bytes, the STag and TO of tagged segments, the
//! STag field and the queue numbers of untagged ones, the PAD and the CRC
//! trailer (RFC 5044 §7, RFC 5041 §4, RFC 5040 §4). It takes the stream in
//! any pieces and keeps the running CRC32C over the length, header and PAD;
//! payload bytes are the caller's to digest, so that a copy and its CRC
//! can be one pass. Anything it cannot follow is an error: the caller
//! stops offloading until it finds FPDU boundaries again.
//!
//! Where the direction carries MPA markers (RFC 5044 §5.2: four bytes
//! every 512 octets, FPDUPTR pointing back at the FPDU's length field),
//! the tracker steps over them, checks each, and takes those inside an
//! FPDU into its CRC; [`marker_head`] reads one to find an FPDU after a
//! loss.

use crate::copy::crc32c_append;
use crate::track::{self, Unfollowable};

const LEN: usize = 2;
const CRC: usize = 4;
const TAGGED: usize = 14;
const UNTAGGED: usize = 18;
const MARKER: usize = 4;
const INTERVAL: u64 = 512;

/// RDMAP opcodes the NIC acts on (RFC 5040 §4.3), and the one-shot
/// encodings a connection may agree to.
pub(crate) mod op {
    pub const WRITE: u8 = 0x0;
    pub const READ_REQUEST: u8 = 0x1;
    pub const READ_RESPONSE: u8 = 0x2;
    pub const SEND_INVALIDATE: u8 = 0x4;
    pub const SEND_SE_INVALIDATE: u8 = 0x6;
    pub const TERMINATE: u8 = 0x7;
    /// A Send whose STag field advertises a buffer (one-shot initiation).
    pub const SEND_ADVERTISE: u8 = 0x8;
    /// A Send whose STag field closes a buffer (one-shot completion).
    pub const SEND_CLOSE: u8 = 0xC;
}

/// What an FPDU header tells the NIC.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// RDMA Write or Read Response: payload for `stag` at `to`.
    Tagged { stag: u32, to: u64 },
    /// A Send (any flavour): `stag` is the Invalidate STag of the
    /// invalidating opcodes, the advertised or closed one of the one-shot
    /// ones, and meaningless otherwise.
    Send { stag: u32, msn: u32, mo: u32 },
    /// Read Request or Terminate.
    Other,
}

/// An FPDU header the tracker accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Header {
    pub opcode: u8,
    pub last: bool,
    pub kind: Kind,
    /// Payload bytes after the DDP header.
    pub payload_len: u32,
    /// Bytes of the whole FPDU on the wire.
    pub fpdu_len: u32,
}

impl Header {
    /// A Send that asks the receiver to invalidate (or close) its STag.
    pub fn closes(&self) -> bool {
        matches!(self.opcode, op::SEND_INVALIDATE | op::SEND_SE_INVALIDATE | op::SEND_CLOSE)
    }

    pub fn is_send(&self) -> bool {
        matches!(self.kind, Kind::Send { .. })
    }
}

/// What the input held.
pub(crate) type Event<'a> = track::Event<'a, Header>;

fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// PAD after a ULPDU of `ulpdu` bytes (RFC 5044 §7.1).
fn pad(ulpdu: usize) -> usize {
    (4 - (LEN + ulpdu) % 4) % 4
}

/// Header bytes (after the length) of an FPDU whose control bytes are
/// `b[0..2]`, if they are ones a peer may send: DDP and RDMAP version 1,
/// reserved bits clear, a known opcode, and a T bit that agrees with it.
fn header_len(b: &[u8], oneshot: bool) -> Result<usize, Unfollowable> {
    let (ddp, rdmap) = (b[0], b[1]);
    if ddp & 0x3f != 0x01 || rdmap & 0xf0 != 0x40 {
        return Err(Unfollowable);
    }
    let opcode = rdmap & 0x0f;
    let known = opcode <= op::TERMINATE
        || (oneshot && matches!(opcode, op::SEND_ADVERTISE | op::SEND_CLOSE));
    let tagged = matches!(opcode, op::WRITE | op::READ_RESPONSE);
    if !known || (ddp & 0x80 != 0) != tagged {
        return Err(Unfollowable);
    }
    Ok(if tagged { TAGGED } else { UNTAGGED })
}

/// Parse the FPDU header at the start of `b` (length field included), if
/// `b` holds all of it and it is consistent.
pub(crate) fn parse(b: &[u8], oneshot: bool) -> Result<Header, Unfollowable> {
    if b.len() < LEN + 2 {
        return Err(Unfollowable);
    }
    let need = header_len(&b[LEN..], oneshot)?;
    let ulpdu = usize::from(u16::from_be_bytes([b[0], b[1]]));
    if b.len() < LEN + need || ulpdu < need {
        return Err(Unfollowable);
    }
    let h = &b[LEN..];
    let opcode = h[1] & 0x0f;
    let payload_len = (ulpdu - need) as u32;
    let kind = match opcode {
        op::WRITE | op::READ_RESPONSE => {
            let to = u64::from(be32(h, 6)) << 32 | u64::from(be32(h, 10));
            Kind::Tagged { stag: be32(h, 2), to }
        }
        op::READ_REQUEST | op::TERMINATE => {
            let qn = if opcode == op::READ_REQUEST { 1 } else { 2 };
            if be32(h, 6) != qn {
                return Err(Unfollowable);
            }
            Kind::Other
        }
        _ => {
            if be32(h, 6) != 0 {
                return Err(Unfollowable);
            }
            Kind::Send { stag: be32(h, 2), msn: be32(h, 10), mo: be32(h, 14) }
        }
    };
    let fpdu_len = (LEN + ulpdu + pad(ulpdu) + CRC) as u32;
    Ok(Header { opcode, last: h[0] & 0x40 != 0, kind, payload_len, fpdu_len })
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Gathering the length, the control bytes, then the rest.
    Header {
        need: usize,
    },
    Data {
        offset: u32,
        left: u32,
    },
    Pad {
        left: usize,
    },
    Crc,
}

/// Where the FPDU a marker at stream offset `at` belongs to starts, if
/// the marker is well formed (RFC 5044 §5.2: FPDUPTR 0 for one in front
/// of an FPDU, else how far back its length field is).
pub(crate) fn marker_head(at: u64, marker: &[u8]) -> Option<u64> {
    let ptr = u64::from(u16::from_be_bytes([marker[2], marker[3]]) & !3);
    match ptr {
        0 => Some(at + MARKER as u64),
        // The length field and control bytes come before any marker.
        4.. => at.checked_sub(ptr),
        _ => None,
    }
}

/// Follows the FPDUs of one direction of a connection.
#[derive(Debug, Clone)]
pub(crate) struct Tracker {
    oneshot: bool,
    /// Stream offset of the first FPDU, when markers are in the stream.
    markers: Option<u64>,
    /// Stream offset of the next byte, and of the current FPDU.
    pos: u64,
    fpdu_start: u64,
    marker: [u8; MARKER],
    /// Bytes of the marker at hand seen (a gap may have taken some).
    marker_seen: usize,
    state: State,
    buf: [u8; LEN + UNTAGGED],
    have: usize,
    pad: usize,
    trailer: [u8; CRC],
    /// CRC32C so far over this FPDU: length and header, payload (added by
    /// the caller through [`Tracker::crc_mut`]), PAD.
    crc: u32,
    /// CRC trailer bytes the last call took: (where in its input, first
    /// trailer byte, how many).
    trailer_span: Option<(usize, usize, usize)>,
}

impl Tracker {
    /// A tracker for FPDUs from stream offset `start` on, with markers
    /// from there when `markers`, and the one-shot opcodes when `oneshot`.
    pub fn new(start: u64, markers: bool, oneshot: bool) -> Self {
        Self {
            oneshot,
            markers: markers.then_some(start),
            pos: start,
            fpdu_start: start,
            marker: [0; MARKER],
            marker_seen: 0,
            state: State::Header { need: LEN + 2 },
            buf: [0; LEN + UNTAGGED],
            have: 0,
            pad: 0,
            trailer: [0; CRC],
            crc: 0,
            trailer_span: None,
        }
    }

    pub fn oneshot(&self) -> bool {
        self.oneshot
    }

    pub fn has_markers(&self) -> bool {
        self.markers.is_some()
    }

    /// Forget the FPDU in progress; an FPDU starts at stream offset `at`.
    pub fn reset_at(&mut self, at: u64) {
        *self = Self { markers: self.markers, ..Self::new(at, false, self.oneshot) };
    }

    /// Where `pos` is past the last marker position, with markers.
    fn phase(&self, pos: u64) -> Option<usize> {
        self.markers.map(|origin| (pos.wrapping_sub(origin) % INTERVAL) as usize)
    }

    /// Marker octets in the stream range `[pos, pos + n)`.
    fn marker_octets(&self, pos: u64, n: u64) -> u64 {
        let (mut at, end, mut count) = (pos, pos + n, 0);
        while let Some(ph) = self.phase(at).filter(|_| at < end) {
            let ph = ph as u64;
            if ph < MARKER as u64 {
                let k = (MARKER as u64 - ph).min(end - at);
                (count, at) = (count + k, at + k);
            } else {
                at += INTERVAL - ph;
            }
        }
        count
    }

    /// The first marker position at or after `pos` (with markers).
    pub fn next_marker(&self, pos: u64) -> u64 {
        match self.phase(pos) {
            Some(0) | None => pos,
            Some(ph) => pos + (INTERVAL - ph as u64),
        }
    }

    fn at_fpdu_start(&self) -> bool {
        self.state == State::Header { need: LEN + 2 } && self.have == 0
    }

    /// The running CRC, for the caller to continue over payload bytes.
    pub fn crc_mut(&mut self) -> &mut u32 {
        &mut self.crc
    }

    /// The CRC trailer bytes the last call to [`Tracker::next`] took: where
    /// they sat in its input, the index of the first in the trailer, and
    /// how many. The CRC is final by then ([`Tracker::computed`]).
    pub fn trailer_span(&self) -> Option<(usize, usize, usize)> {
        self.trailer_span
    }

    /// The bytes of a marker at hand, from its byte `ph`.
    fn marker_bytes<'a>(
        &mut self,
        ph: usize,
        input: &'a [u8],
    ) -> Result<(usize, Option<Event<'a>>), Unfollowable> {
        let k = (MARKER - ph).min(input.len());
        if k == 0 {
            return Ok((0, None));
        }
        if ph == 0 {
            self.marker_seen = 0;
        }
        self.marker[ph..ph + k].copy_from_slice(&input[..k]);
        self.marker_seen += k;
        let inside = !self.at_fpdu_start();
        if inside {
            if self.state == (State::Crc) && self.have > 0 {
                return Err(Unfollowable);
            }
            self.crc = crc32c_append(self.crc, &input[..k]);
        }
        let at = self.pos - ph as u64;
        self.pos += k as u64;
        if self.marker_seen == MARKER {
            let head = if inside { self.fpdu_start } else { self.pos };
            if marker_head(at, &self.marker) != Some(head) {
                return Err(Unfollowable);
            }
        }
        Ok((k, Some(Event::Marker { inside })))
    }

    fn step<'a>(&mut self, input: &'a [u8]) -> Result<(usize, Option<Event<'a>>), Unfollowable> {
        let mut used = 0;
        loop {
            let rest = &input[used..];
            match self.state {
                State::Header { need } => {
                    let k = (need - self.have).min(rest.len());
                    if self.have == 0 {
                        self.crc = 0;
                    }
                    self.buf[self.have..self.have + k].copy_from_slice(&rest[..k]);
                    self.crc = crc32c_append(self.crc, &rest[..k]);
                    self.have += k;
                    used += k;
                    if self.have < need {
                        return Ok((used, None));
                    }
                    if need == LEN + 2 {
                        let full = LEN + header_len(&self.buf[LEN..], self.oneshot)?;
                        self.state = State::Header { need: full };
                        continue;
                    }
                    let header = parse(&self.buf[..need], self.oneshot)?;
                    self.have = 0;
                    self.pad = pad(usize::from(u16::from_be_bytes([self.buf[0], self.buf[1]])));
                    self.state = State::Data { offset: 0, left: header.payload_len };
                    return Ok((used, Some(Event::Header(header))));
                }
                State::Data { left: 0, .. } => self.state = State::Pad { left: self.pad },
                State::Data { offset, left } => {
                    let k = (left as usize).min(rest.len());
                    if k == 0 {
                        return Ok((used, None));
                    }
                    used += k;
                    self.state = State::Data { offset: offset + k as u32, left: left - k as u32 };
                    return Ok((used, Some(Event::Data { offset, bytes: &rest[..k] })));
                }
                State::Pad { left } => {
                    let k = left.min(rest.len());
                    self.crc = crc32c_append(self.crc, &rest[..k]);
                    used += k;
                    if k < left {
                        self.state = State::Pad { left: left - k };
                        return Ok((used, None));
                    }
                    self.state = State::Crc;
                }
                State::Crc => {
                    let k = (CRC - self.have).min(rest.len());
                    self.trailer_span = (k > 0).then_some((used, self.have, k));
                    self.trailer[self.have..self.have + k].copy_from_slice(&rest[..k]);
                    self.have += k;
                    used += k;
                    if self.have < CRC {
                        return Ok((used, None));
                    }
                    let trailer = u32::from_le_bytes(self.trailer);
                    self.have = 0;
                    self.state = State::Header { need: LEN + 2 };
                    return Ok((used, Some(Event::End { digest: Some(trailer) })));
                }
            }
        }
    }

    /// The CRC of the FPDU that just ended (valid right after `End`).
    pub fn computed(&self) -> u32 {
        self.crc
    }
}

impl track::Tracker for Tracker {
    type Header = Header;
    const MIN_HEADER: usize = LEN + 2;

    /// Take bytes from `input`: how many were used and the event they
    /// completed. `(n, None)` means more is needed: all of `input` was
    /// used, or a marker comes next.
    fn next<'a>(&mut self, input: &'a [u8]) -> Result<(usize, Option<Event<'a>>), Unfollowable> {
        self.trailer_span = None;
        let lim = match self.phase(self.pos) {
            None => input.len(),
            Some(ph) if ph < MARKER => return self.marker_bytes(ph, input),
            Some(ph) => (INTERVAL as usize - ph).min(input.len()),
        };
        if self.at_fpdu_start() {
            self.fpdu_start = self.pos;
        }
        let (n, ev) = self.step(&input[..lim])?;
        self.pos += n as u64;
        Ok((n, ev))
    }

    /// Skip `n` bytes that never arrived. Only payload (and markers in
    /// it) can be skipped: anything else loses the FPDU boundaries (false).
    fn skip(&mut self, n: u64) -> bool {
        let payload = n - self.marker_octets(self.pos, n);
        match self.state {
            State::Data { offset, left } if payload <= u64::from(left) => {
                let p = payload as u32;
                self.state = State::Data { offset: offset + p, left: left - p };
                self.pos += n;
                // A marker cut by the gap cannot be checked.
                self.marker_seen = 0;
                true
            }
            _ => false,
        }
    }

    fn restart(&mut self, at: u64) {
        self.reset_at(at);
    }

    /// The FPDU's length field.
    fn unit_start(&self, _first_seen: u64) -> u64 {
        self.fpdu_start
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::track::Tracker as _;

    /// An FPDU as siw sends it: length, header, payload, PAD, CRC (LE).
    pub(crate) fn fpdu(header: &[u8], payload: &[u8]) -> Vec<u8> {
        let ulpdu = header.len() + payload.len();
        let mut b = (ulpdu as u16).to_be_bytes().to_vec();
        b.extend_from_slice(header);
        b.extend_from_slice(payload);
        b.resize(b.len() + pad(ulpdu), 0);
        let crc = crc32c::crc32c(&b);
        b.extend_from_slice(&crc.to_le_bytes());
        b
    }

    fn write_header(stag: u32, to: u64) -> Vec<u8> {
        let mut h = vec![0xc1, 0x40];
        h.extend_from_slice(&stag.to_be_bytes());
        h.extend_from_slice(&to.to_be_bytes());
        h
    }

    fn send_inv_header(stag: u32, msn: u32) -> Vec<u8> {
        let mut h = vec![0x41, 0x44];
        for v in [stag, 0, msn, 0] {
            h.extend_from_slice(&v.to_be_bytes());
        }
        h
    }

    /// `fpdus` as sent at stream offset 0 with a marker every 512 octets:
    /// in front of an FPDU it points at it, inside one back at its start.
    pub(crate) fn with_markers(fpdus: &[Vec<u8>]) -> Vec<u8> {
        let mut out = Vec::new();
        for f in fpdus {
            let mut head = None;
            for (i, &b) in f.iter().enumerate() {
                if out.len() % 512 == 0 {
                    let ptr = head.map_or(0, |h| out.len() - h) as u16;
                    out.extend_from_slice(&[0, 0]);
                    out.extend_from_slice(&ptr.to_be_bytes());
                }
                head.get_or_insert(out.len());
                // The CRC covers the markers inside: recompute it at the end.
                if i == f.len() - 4 {
                    let crc = crc32c::crc32c(&out[head.unwrap()..]);
                    out.extend_from_slice(&crc.to_le_bytes());
                    break;
                }
                out.push(b);
            }
        }
        out
    }

    /// Run `stream` through a tracker in pieces of `cut`, collecting
    /// (headers, payload, trailer ok) per FPDU.
    fn follow(stream: &[u8], cut: usize, markers: bool) -> Vec<(Header, Vec<u8>, bool)> {
        let mut t = Tracker::new(0, markers, false);
        let mut out = Vec::new();
        let mut cur: Option<(Header, Vec<u8>)> = None;
        for piece in stream.chunks(cut) {
            let mut pos = 0;
            loop {
                let (n, ev) = t.next(&piece[pos..]).unwrap();
                pos += n;
                match ev {
                    None if pos == piece.len() => break,
                    None | Some(Event::Marker { .. }) => {}
                    Some(Event::Header(h)) => cur = Some((h, Vec::new())),
                    Some(Event::Data { bytes, .. }) => {
                        *t.crc_mut() = crc32c_append(*t.crc_mut(), bytes);
                        cur.as_mut().unwrap().1.extend_from_slice(bytes);
                    }
                    Some(Event::End { digest }) => {
                        let trailer = digest.unwrap();
                        let (h, p) = cur.take().unwrap();
                        out.push((h, p, trailer == t.computed()));
                    }
                }
            }
        }
        out
    }

    #[test]
    fn follows_fpdus_cut_anywhere_and_checks_their_crc() {
        let mut stream = fpdu(&write_header(0x1234_5601, 0x1000), b"hello, tagged world");
        stream.extend(fpdu(&send_inv_header(0x1234_5601, 1), b"done"));
        for cut in 1..stream.len() {
            let got = follow(&stream, cut, false);
            assert_eq!(got.len(), 2, "cut {cut}");
            assert_eq!(got[0].0.kind, Kind::Tagged { stag: 0x1234_5601, to: 0x1000 });
            assert_eq!(got[0].1, b"hello, tagged world");
            assert!(got[1].0.closes() && got[1].0.last);
            assert_eq!(got[1].0.kind, Kind::Send { stag: 0x1234_5601, msn: 1, mo: 0 });
            assert!(got.iter().all(|g| g.2), "CRCs match at cut {cut}");
        }
    }

    #[test]
    fn steps_over_markers_checks_them_and_keeps_them_in_the_crc() {
        let payload: Vec<u8> = (0..700u32).map(|i| i as u8).collect();
        let fpdus = [
            fpdu(&write_header(7, 0), &payload),
            fpdu(&send_inv_header(7, 1), &payload[..300]),
            fpdu(&write_header(7, 700), &payload),
        ];
        let stream = with_markers(&fpdus);
        assert_eq!(stream.len(), fpdus.iter().map(Vec::len).sum::<usize>() + 4 * 4);
        for cut in [1, 2, 3, 5, 64, 511, 512, 513, stream.len()] {
            let got = follow(&stream, cut, true);
            assert_eq!(got.len(), 3, "cut {cut}");
            assert_eq!((got[0].1.as_slice(), got[2].1.as_slice()), (&payload[..], &payload[..]));
            assert_eq!(got[1].1, &payload[..300]);
            assert!(got.iter().all(|g| g.2), "CRCs with markers in them, cut {cut}");
        }
        // A marker that points elsewhere loses the tracker.
        let mut t = Tracker::new(0, true, false);
        let mut bad = stream.clone();
        bad[515] ^= 4;
        let mut pos = 0;
        let r = loop {
            match t.next(&bad[pos..]) {
                Ok((n, _)) => pos += n,
                Err(e) => break Err(e),
            }
            if pos == bad.len() {
                break Ok(());
            }
        };
        assert_eq!(r, Err(Unfollowable));
        // Found from a marker: the one at 512 points back at the first
        // FPDU's start, the one in front of nothing at 0 at 4.
        assert_eq!(marker_head(512, &stream[512..516]), Some(4));
        assert_eq!(marker_head(0, &stream[..4]), Some(4));
        assert_eq!(marker_head(512, &[0, 0, 0, 2]), Some(516), "low bits read as zero");
    }

    #[test]
    fn refuses_what_a_peer_may_not_send() {
        let good = fpdu(&write_header(1, 0), b"x");
        assert!(parse(&good, false).is_ok());
        let mut bad_version = good.clone();
        bad_version[2] = 0xc2;
        let mut reserved = good.clone();
        reserved[2] |= 0x04;
        let mut tagged_send = good.clone();
        tagged_send[3] = 0x43;
        let mut opcode8 = fpdu(&send_inv_header(1, 1), b"");
        opcode8[3] = 0x48;
        let mut short = good.clone();
        short[1] = 4;
        for b in [&bad_version, &reserved, &tagged_send, &opcode8, &short] {
            assert_eq!(parse(b, false), Err(Unfollowable));
        }
        // The one-shot opcodes exist only where both ends agreed to them.
        assert!(parse(&opcode8, true).is_ok());
    }
}
