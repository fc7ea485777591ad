//! NVMe/TCP PDUs as a NIC follows them: its own tracker, not the protocol
//! crate's parser, so that a parsing bug is not shared by the model and the
//! host it checks.
//!
//! It reads what a NIC reads and nothing more: the common header (type,
//! flags, HLEN, PDO, PLEN), the tag and offsets of data PDUs (CCCID, TTAG,
//! DATAO, DATAL), the CID of capsules, and the digests. It takes the stream
//! in any pieces, gathers each header, checks it for consistency (and its
//! header digest when there is one), and hands out data as slices of the
//! input. Anything it cannot follow is an error: the caller stops
//! offloading until it finds PDU boundaries again.

use crate::track::{self, Unfollowable};

/// PDU types (NVMe/TCP transport specification, "PDU Type").
pub(crate) mod ty {
    pub const IC_REQ: u8 = 0x00;
    pub const IC_RESP: u8 = 0x01;
    pub const H2C_TERM_REQ: u8 = 0x02;
    pub const C2H_TERM_REQ: u8 = 0x03;
    pub const CAPSULE_CMD: u8 = 0x04;
    pub const CAPSULE_RESP: u8 = 0x05;
    pub const H2C_DATA: u8 = 0x06;
    pub const C2H_DATA: u8 = 0x07;
    pub const R2T: u8 = 0x09;
}

const HDGSTF: u8 = 1 << 0;
const DDGSTF: u8 = 1 << 1;
const SUCCESS: u8 = 1 << 3;
const COMMON: usize = 8;
const DIGEST: usize = 4;
/// The longest header (ICReq/ICResp) and its digest.
const MAX_HEADER: usize = 128 + DIGEST;

/// Which way the PDUs a tracker follows travel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Direction {
    HostToController,
    ControllerToHost,
}

/// The HLEN of `t` travelling `dir`, and whether it carries digests.
fn shape(t: u8, dir: Direction) -> Option<(usize, bool)> {
    use Direction::*;
    match (t, dir) {
        (ty::IC_REQ, HostToController) | (ty::IC_RESP, ControllerToHost) => Some((128, false)),
        (ty::H2C_TERM_REQ, HostToController) | (ty::C2H_TERM_REQ, ControllerToHost) => {
            Some((24, false))
        }
        (ty::CAPSULE_CMD, HostToController) => Some((72, true)),
        (ty::H2C_DATA, HostToController)
        | (ty::CAPSULE_RESP | ty::C2H_DATA | ty::R2T, ControllerToHost) => Some((24, true)),
        _ => None,
    }
}

/// What a header tells the NIC.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    CapsuleCmd { cid: u16 },
    CapsuleResp { cid: u16 },
    C2hData { cccid: u16, datao: u32, success: bool },
    H2cData { ttag: u16, datao: u32 },
    Other,
}

/// A PDU header the tracker accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Header {
    pub kind: Kind,
    pub plen: u32,
    pub data_len: u32,
    pub ddgst: bool,
    /// Bytes between the header (and its digest) and the data.
    pad: u32,
}

/// What the input held.
pub(crate) type Event<'a> = track::Event<'a, Header>;

fn le16(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

fn le32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// Parse a whole header, `b` holding HLEN bytes and its digest if any.
/// `digests` are the (header, data) digests in force on the connection.
pub(crate) fn parse(
    b: &[u8],
    dir: Direction,
    digests: (bool, bool),
) -> Result<Header, Unfollowable> {
    let need = header_len(b, dir, digests)?;
    if b.len() < need {
        return Err(Unfollowable);
    }
    let (t, flags, hlen) = (b[0], b[1], usize::from(b[2]));
    let (pdo, plen) = (u32::from(b[3]), le32(b, 4));
    let hdgst = need > hlen;
    if hdgst && le32(b, hlen) != crate::copy::crc32c(&b[..hlen]) {
        return Err(Unfollowable);
    }
    let head = need as u32;
    let (data_len, ddgst, pad) = if plen == head {
        (0, false, 0)
    } else {
        // Data follows at PDO, and its digest (if any) after it.
        let ddgst = flags & DDGSTF != 0;
        if ddgst != digests.1 || pdo < head || plen < pdo + if ddgst { 4 } else { 0 } {
            return Err(Unfollowable);
        }
        (plen - pdo - if ddgst { 4 } else { 0 }, ddgst, pdo - head)
    };
    let kind = match t {
        ty::CAPSULE_CMD => Kind::CapsuleCmd { cid: le16(b, COMMON + 2) },
        ty::CAPSULE_RESP => Kind::CapsuleResp { cid: le16(b, COMMON + 12) },
        ty::C2H_DATA | ty::H2C_DATA => {
            // DATAL must agree with what PLEN leaves for data.
            let (datao, datal) = (le32(b, 12), le32(b, 16));
            if datal != data_len || data_len == 0 {
                return Err(Unfollowable);
            }
            if t == ty::C2H_DATA {
                Kind::C2hData { cccid: le16(b, 8), datao, success: flags & SUCCESS != 0 }
            } else {
                Kind::H2cData { ttag: le16(b, 10), datao }
            }
        }
        _ => Kind::Other,
    };
    Ok(Header { kind, plen, data_len, ddgst, pad })
}

/// From the common header alone: the bytes of header and header digest.
fn header_len(b: &[u8], dir: Direction, digests: (bool, bool)) -> Result<usize, Unfollowable> {
    if b.len() < COMMON {
        return Err(Unfollowable);
    }
    let (hlen, digestible) = shape(b[0], dir).ok_or(Unfollowable)?;
    let hdgst = b[1] & HDGSTF != 0;
    if usize::from(b[2]) != hlen || (digestible && hdgst != digests.0) || (!digestible && hdgst) {
        return Err(Unfollowable);
    }
    Ok(hlen + if hdgst { DIGEST } else { 0 })
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Header { need: usize },
    Pad { left: u32 },
    Data { offset: u32 },
    Digest { have: usize },
    End,
}

/// Follows the PDUs of one direction of a connection.
#[derive(Debug, Clone)]
pub(crate) struct Tracker {
    dir: Direction,
    digests: (bool, bool),
    state: State,
    buf: [u8; MAX_HEADER],
    have: usize,
    pdu: Option<Header>,
    digest: [u8; DIGEST],
    digest_lost: bool,
}

impl Tracker {
    /// A tracker for PDUs travelling `dir` with (header, data) `digests`.
    pub fn new(dir: Direction, digests: (bool, bool)) -> Self {
        Self {
            dir,
            digests,
            state: State::Header { need: COMMON },
            buf: [0; MAX_HEADER],
            have: 0,
            pdu: None,
            digest: [0; DIGEST],
            digest_lost: false,
        }
    }

    pub fn direction(&self) -> Direction {
        self.dir
    }

    pub fn digests(&self) -> (bool, bool) {
        self.digests
    }

    /// Forget any partial PDU: the next byte starts one.
    pub fn reset(&mut self) {
        self.state = State::Header { need: COMMON };
        self.have = 0;
        self.pdu = None;
        self.digest_lost = false;
    }

    /// Bytes left to the next header once the current one is parsed; `None`
    /// inside a header.
    pub fn remaining(&self) -> Option<u64> {
        let pdu = self.pdu?;
        let dd = if pdu.ddgst { DIGEST as u64 } else { 0 };
        Some(match self.state {
            State::Header { .. } => return None,
            State::Pad { left } => u64::from(left) + u64::from(pdu.data_len) + dd,
            State::Data { offset } => u64::from(pdu.data_len - offset) + dd,
            State::Digest { have } => (DIGEST - have) as u64,
            State::End => 0,
        })
    }

    /// Move past finished parts of the PDU.
    fn advance(&mut self, pdu: Header) {
        if self.state == (State::Pad { left: 0 }) {
            self.state = State::Data { offset: 0 };
        }
        if self.state == (State::Data { offset: pdu.data_len }) {
            self.state = if pdu.ddgst { State::Digest { have: 0 } } else { State::End };
        }
        if self.state == (State::Digest { have: DIGEST }) {
            self.state = State::End;
        }
    }
}

impl track::Tracker for Tracker {
    type Header = Header;
    const MIN_HEADER: usize = COMMON;

    /// Take bytes from `input`: how many were used and the event they
    /// completed. `(n, None)` means all of it was used and more is needed;
    /// call again while events come, even with no input (a PDU without
    /// data ends without using bytes).
    fn next<'a>(&mut self, input: &'a [u8]) -> Result<(usize, Option<Event<'a>>), Unfollowable> {
        let mut used = 0;
        loop {
            let rest = &input[used..];
            match self.state {
                State::Header { need } => {
                    let k = (need - self.have).min(rest.len());
                    self.buf[self.have..self.have + k].copy_from_slice(&rest[..k]);
                    self.have += k;
                    used += k;
                    if self.have < need {
                        return Ok((used, None));
                    }
                    if need == COMMON {
                        let need = header_len(&self.buf[..COMMON], self.dir, self.digests)?;
                        self.state = State::Header { need };
                        continue;
                    }
                    let pdu = parse(&self.buf[..need], self.dir, self.digests)?;
                    self.pdu = Some(pdu);
                    self.digest_lost = false;
                    self.state = State::Pad { left: pdu.pad };
                    self.advance(pdu);
                    return Ok((used, Some(Event::Header(pdu))));
                }
                State::Pad { left } => {
                    let k = (left as usize).min(rest.len());
                    used += k;
                    self.state = State::Pad { left: left - k as u32 };
                    let Some(pdu) = self.pdu else { return Err(Unfollowable) };
                    self.advance(pdu);
                    if matches!(self.state, State::Pad { .. }) {
                        return Ok((used, None));
                    }
                }
                State::Data { offset } => {
                    let Some(pdu) = self.pdu else { return Err(Unfollowable) };
                    let k = ((pdu.data_len - offset) as usize).min(rest.len());
                    if k == 0 {
                        return Ok((used, None));
                    }
                    self.state = State::Data { offset: offset + k as u32 };
                    self.advance(pdu);
                    used += k;
                    return Ok((used, Some(Event::Data { offset, bytes: &rest[..k] })));
                }
                State::Digest { have } => {
                    let k = (DIGEST - have).min(rest.len());
                    self.digest[have..have + k].copy_from_slice(&rest[..k]);
                    used += k;
                    self.state = State::Digest { have: have + k };
                    let Some(pdu) = self.pdu else { return Err(Unfollowable) };
                    self.advance(pdu);
                    if self.state != State::End {
                        return Ok((used, None));
                    }
                }
                State::End => {
                    let lost = self.digest_lost;
                    let ddgst = self.pdu.is_some_and(|p| p.ddgst) && !lost;
                    let data_digest = ddgst.then(|| u32::from_le_bytes(self.digest));
                    self.reset();
                    return Ok((used, Some(Event::End { digest: data_digest })));
                }
            }
        }
    }

    /// Pass over `n` lost bytes of the current PDU. False, changing
    /// nothing, if they would reach into the next header.
    fn skip(&mut self, n: u64) -> bool {
        if self.remaining().is_none_or(|left| n > left) {
            return false;
        }
        let Some(pdu) = self.pdu else { return false };
        let mut n = n;
        while n > 0 {
            match self.state {
                State::Pad { left } => {
                    let k = u64::from(left).min(n);
                    n -= k;
                    self.state = State::Pad { left: left - k as u32 };
                }
                State::Data { offset } => {
                    let k = u64::from(pdu.data_len - offset).min(n);
                    n -= k;
                    self.state = State::Data { offset: offset + k as u32 };
                }
                State::Digest { have } => {
                    let k = ((DIGEST - have) as u64).min(n);
                    n -= k;
                    self.state = State::Digest { have: have + k as usize };
                }
                State::Header { .. } | State::End => return false,
            }
            self.advance(pdu);
        }
        self.digest_lost = true;
        true
    }

    fn restart(&mut self, _at: u64) {
        self.reset();
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::track::Tracker as _;

    /// A C2HData PDU as a controller sends it: header (and digest), pad to
    /// `pdo`, data, data digest.
    pub(crate) fn c2h(cccid: u16, datao: u32, data: &[u8], hdgst: bool, pdo: u8) -> Vec<u8> {
        let mut h = vec![0u8; 24];
        h[0] = ty::C2H_DATA;
        h[1] = DDGSTF | if hdgst { HDGSTF } else { 0 } | SUCCESS;
        h[2] = 24;
        h[3] = pdo;
        let plen = u32::from(pdo) + data.len() as u32 + 4;
        h[4..8].copy_from_slice(&plen.to_le_bytes());
        h[8..10].copy_from_slice(&cccid.to_le_bytes());
        h[12..16].copy_from_slice(&datao.to_le_bytes());
        h[16..20].copy_from_slice(&(data.len() as u32).to_le_bytes());
        if hdgst {
            let d = crc32c::crc32c(&h);
            h.extend_from_slice(&d.to_le_bytes());
        }
        h.resize(usize::from(pdo), 0);
        h.extend_from_slice(data);
        h.extend_from_slice(&crc32c::crc32c(data).to_le_bytes());
        h
    }

    /// A CapsuleResp with its header digest.
    fn resp(cid: u16) -> Vec<u8> {
        let mut h = vec![0u8; 24];
        h[0] = ty::CAPSULE_RESP;
        h[1] = HDGSTF;
        h[2] = 24;
        h[4..8].copy_from_slice(&28u32.to_le_bytes());
        h[20..22].copy_from_slice(&cid.to_le_bytes());
        let d = crc32c::crc32c(&h);
        h.extend_from_slice(&d.to_le_bytes());
        h
    }

    /// Everything the tracker reports for `stream` fed `piece` bytes at a time.
    fn events(t: &mut Tracker, stream: &[u8], piece: usize) -> Vec<String> {
        let mut out = Vec::new();
        let mut data = Vec::new();
        for chunk in stream.chunks(piece) {
            let mut at = 0;
            loop {
                let (n, ev) = t.next(&chunk[at..]).unwrap();
                at += n;
                match ev {
                    None => break,
                    Some(Event::Header(h)) => out.push(format!("{:?} {}", h.kind, h.data_len)),
                    Some(Event::Marker { .. }) => unreachable!("PDUs have no markers"),
                    Some(Event::Data { offset, bytes }) => {
                        assert_eq!(offset as usize, data.len());
                        data.extend_from_slice(bytes);
                    }
                    Some(Event::End { digest: data_digest }) => {
                        let ok = data_digest.map(|d| d == crc32c::crc32c(&data));
                        out.push(format!("end {} {ok:?}", data.len()));
                        data.clear();
                    }
                }
            }
        }
        out
    }

    #[test]
    fn follows_pdus_cut_at_every_size() {
        let payload: Vec<u8> = (0..300u32).map(|i| i as u8).collect();
        let mut stream = c2h(3, 4096, &payload, true, 32);
        stream.extend(resp(3));
        stream.extend(c2h(9, 0, &payload[..7], true, 28));
        let want = vec![
            "C2hData { cccid: 3, datao: 4096, success: true } 300".to_string(),
            "end 300 Some(true)".into(),
            "CapsuleResp { cid: 3 } 0".into(),
            "end 0 None".into(),
            "C2hData { cccid: 9, datao: 0, success: true } 7".into(),
            "end 7 Some(true)".into(),
        ];
        for piece in 1..=stream.len() {
            let mut t = Tracker::new(Direction::ControllerToHost, (true, true));
            assert_eq!(events(&mut t, &stream, piece), want, "pieces of {piece}");
        }
    }

    #[test]
    fn refuses_what_it_cannot_follow() {
        let good = c2h(1, 0, b"abcdefgh", true, 28);
        let dir = Direction::ControllerToHost;
        let mut cases: Vec<(&str, Vec<u8>)> = Vec::new();
        let mut b = good.clone();
        b[0] = ty::H2C_DATA;
        cases.push(("wrong direction", b));
        let mut b = good.clone();
        b[2] = 72;
        cases.push(("HLEN not the type's", b));
        let mut b = good.clone();
        b[1] &= !HDGSTF;
        cases.push(("header digest not as negotiated", b));
        let mut b = good.clone();
        b[24] ^= 1;
        cases.push(("bad header digest", b));
        let mut b = good.clone();
        b[16] = 9;
        let d = crc32c::crc32c(&b[..24]);
        b[24..28].copy_from_slice(&d.to_le_bytes());
        cases.push(("DATAL disagrees with PLEN", b));
        let mut b = good.clone();
        b[3] = 8;
        let d = crc32c::crc32c(&b[..24]);
        b[24..28].copy_from_slice(&d.to_le_bytes());
        cases.push(("PDO inside the header", b));
        for (what, b) in cases {
            let mut t = Tracker::new(dir, (true, true));
            assert_eq!(t.next(&b), Err(Unfollowable), "{what}");
        }
    }

    #[test]
    fn skips_lost_data_and_reports_no_digest() {
        let stream = c2h(2, 0, &[7u8; 100], false, 24);
        let mut t = Tracker::new(Direction::ControllerToHost, (false, true));
        let (n, ev) = t.next(&stream[..30]).unwrap();
        assert!(matches!(ev, Some(Event::Header(_))));
        assert_eq!(t.remaining(), Some(104));
        assert!(!t.skip(105), "past the PDU");
        assert!(t.skip(50));
        let mut at = n + 50;
        let mut end = None;
        while end.is_none() {
            let (k, ev) = t.next(&stream[at..]).unwrap();
            at += k;
            if let Some(Event::End { digest: data_digest }) = ev {
                end = Some(data_digest);
            }
        }
        assert_eq!(end, Some(None), "a digest over lost bytes is not reported");
    }
}
