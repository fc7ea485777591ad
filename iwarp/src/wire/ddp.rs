//! DDP segment headers (RFC 5041 §4) with the RDMAP control byte (RFC 5040
//! §4): tagged (STag, TO) and untagged (QN, MSN, MO), the Read Request
//! body and the Terminate header.

use super::{WireError, be16, be32, be64};

/// RDMAP opcodes (RFC 5040 §4.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Opcode {
    Write = 0,
    ReadRequest = 1,
    ReadResponse = 2,
    Send = 3,
    SendInvalidate = 4,
    SendSe = 5,
    SendSeInvalidate = 6,
    Terminate = 7,
    /// One-shot initiation (not RFC 5040; only where both ends agreed at
    /// connection setup): a Send whose STag field advertises a buffer.
    SendAdvertise = 8,
    /// One-shot completion (likewise): a Send whose STag field names a
    /// buffer the receiver invalidates and frees before it completes.
    SendClose = 0xC,
}

impl Opcode {
    pub fn from_u8(v: u8) -> Option<Opcode> {
        use Opcode::*;
        Some(match v {
            0 => Write,
            1 => ReadRequest,
            2 => ReadResponse,
            3 => Send,
            4 => SendInvalidate,
            5 => SendSe,
            6 => SendSeInvalidate,
            7 => Terminate,
            8 => SendAdvertise,
            0xC => SendClose,
            _ => return None,
        })
    }

    /// Carried in tagged segments (placed at STag + TO).
    pub fn tagged(self) -> bool {
        matches!(self, Opcode::Write | Opcode::ReadResponse)
    }

    /// The untagged queue: 0 Sends, 1 Read Requests, 2 Terminates.
    pub fn queue(self) -> Option<u32> {
        match self {
            Opcode::Write | Opcode::ReadResponse => None,
            Opcode::ReadRequest => Some(1),
            Opcode::Terminate => Some(2),
            _ => Some(0),
        }
    }

    /// Sends that carry an STag for the receiver to invalidate.
    pub fn invalidates(self) -> bool {
        matches!(self, Opcode::SendInvalidate | Opcode::SendSeInvalidate | Opcode::SendClose)
    }

    /// The one-shot encodings, outside RFC 5040.
    pub fn oneshot(self) -> bool {
        matches!(self, Opcode::SendAdvertise | Opcode::SendClose)
    }

    /// Sends with the solicited event bit.
    pub fn solicited(self) -> bool {
        matches!(self, Opcode::SendSe | Opcode::SendSeInvalidate)
    }

    /// DDP header bytes (control included) for this opcode.
    pub fn header_len(self) -> usize {
        if self.tagged() { DdpHeader::TAGGED_LEN } else { DdpHeader::UNTAGGED_LEN }
    }
}

/// The two control bytes: DDP's T and L flags and version, RDMAP's version
/// and opcode. Versions are 1 on the wire and checked on parse.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ctrl {
    /// L: the last segment of its message.
    pub last: bool,
    pub opcode: Opcode,
}

const T: u8 = 0x80;
const L: u8 = 0x40;
const DDP_VERSION: u8 = 1;
const RDMAP_VERSION: u8 = 1;

impl Ctrl {
    /// `oneshot`: the one-shot opcodes were agreed to.
    fn parse(b: &[u8], oneshot: bool) -> Result<Ctrl, WireError> {
        let (ddp, rdmap) = (b[0], b[1]);
        if ddp & 0x03 != DDP_VERSION {
            return Err(WireError::BadDdpVersion { tagged: ddp & T != 0, version: ddp & 0x03 });
        }
        if rdmap >> 6 != RDMAP_VERSION {
            return Err(WireError::BadRdmapVersion(rdmap >> 6));
        }
        let opcode = Opcode::from_u8(rdmap & 0x0f)
            .filter(|o| oneshot || !o.oneshot())
            .ok_or(WireError::BadOpcode(rdmap & 0x0f))?;
        // Linux siw takes the header's shape from the opcode alone; the T
        // bit must agree with it (RFC 5040 §4.1), and here it must.
        if (ddp & T != 0) != opcode.tagged() {
            return Err(WireError::BadOpcode(opcode as u8));
        }
        Ok(Ctrl { last: ddp & L != 0, opcode })
    }

    fn emit(&self) -> [u8; 2] {
        let t = if self.opcode.tagged() { T } else { 0 };
        let l = if self.last { L } else { 0 };
        [t | l | DDP_VERSION, (RDMAP_VERSION << 6) | self.opcode as u8]
    }
}

/// A DDP segment header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DdpHeader {
    Tagged {
        ctrl: Ctrl,
        stag: u32,
        to: u64,
    },
    /// `inval_stag` is the STag to invalidate for the Send-with-Invalidate
    /// opcodes, zero otherwise.
    Untagged {
        ctrl: Ctrl,
        inval_stag: u32,
        qn: u32,
        msn: u32,
        mo: u32,
    },
}

impl DdpHeader {
    pub const TAGGED_LEN: usize = 14;
    pub const UNTAGGED_LEN: usize = 18;

    /// The opcode of a header starting at `b`, from its first two bytes:
    /// how long the header is.
    pub fn peek(b: &[u8], oneshot: bool) -> Result<Ctrl, WireError> {
        Ctrl::parse(b, oneshot)
    }

    /// The header at the start of a ULPDU (RFC opcodes only).
    pub fn parse(b: &[u8]) -> Result<DdpHeader, WireError> {
        Self::parse_with(b, false)
    }

    /// The header at the start of a ULPDU; `oneshot`: the one-shot
    /// opcodes were agreed to.
    pub fn parse_with(b: &[u8], oneshot: bool) -> Result<DdpHeader, WireError> {
        let ctrl = Ctrl::parse(b, oneshot)?;
        let need = ctrl.opcode.header_len();
        if b.len() < need {
            let len = b.len() as u16;
            return Err(WireError::ShortUlpdu { len, need: need as u16 });
        }
        Ok(if ctrl.opcode.tagged() {
            DdpHeader::Tagged { ctrl, stag: be32(b, 2), to: be64(b, 6) }
        } else {
            let (inval_stag, qn, msn, mo) = (be32(b, 2), be32(b, 6), be32(b, 10), be32(b, 14));
            DdpHeader::Untagged { ctrl, inval_stag, qn, msn, mo }
        })
    }

    pub fn ctrl(&self) -> Ctrl {
        match *self {
            DdpHeader::Tagged { ctrl, .. } | DdpHeader::Untagged { ctrl, .. } => ctrl,
        }
    }

    /// Bytes the header takes.
    pub fn buffer_len(&self) -> usize {
        self.ctrl().opcode.header_len()
    }

    /// Append the header to `out`.
    pub fn emit(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.ctrl().emit());
        match *self {
            DdpHeader::Tagged { stag, to, .. } => {
                out.extend_from_slice(&stag.to_be_bytes());
                out.extend_from_slice(&to.to_be_bytes());
            }
            DdpHeader::Untagged { inval_stag, qn, msn, mo, .. } => {
                for v in [inval_stag, qn, msn, mo] {
                    out.extend_from_slice(&v.to_be_bytes());
                }
            }
        }
    }
}

/// The body of an RDMA Read Request (RFC 5040 §4.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadRequest {
    pub sink_stag: u32,
    pub sink_to: u64,
    pub size: u32,
    pub src_stag: u32,
    pub src_to: u64,
}

impl ReadRequest {
    pub const LEN: usize = 28;

    pub fn parse(b: &[u8]) -> Option<ReadRequest> {
        (b.len() == Self::LEN).then(|| ReadRequest {
            sink_stag: be32(b, 0),
            sink_to: be64(b, 4),
            size: be32(b, 12),
            src_stag: be32(b, 16),
            src_to: be64(b, 20),
        })
    }

    pub fn emit(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.sink_stag.to_be_bytes());
        out.extend_from_slice(&self.sink_to.to_be_bytes());
        out.extend_from_slice(&self.size.to_be_bytes());
        out.extend_from_slice(&self.src_stag.to_be_bytes());
        out.extend_from_slice(&self.src_to.to_be_bytes());
    }
}

/// The layer a Terminate blames (RFC 5040 §4.8).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TermLayer {
    Rdmap = 0,
    Ddp = 1,
    /// The lower layer: MPA.
    Llp = 2,
}

/// How the first four bytes of a Terminate are laid out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TermLayout {
    /// RFC 5040 §4.8: layer in the high nibble of the first byte, error
    /// type in the low one; M, D, R as 0x80, 0x40, 0x20 of the third.
    #[default]
    Rfc5040,
    /// Linux siw on x86 (little-endian bitfields): the nibbles swapped and
    /// M, D, R in bits 0, 1, 2 of the third byte.
    LinuxX86,
}

const M_RFC: u8 = 0x80;
const D_RFC: u8 = 0x40;
const R_RFC: u8 = 0x20;

impl TermLayout {
    /// (layer, error type) from the first byte, M/D/R in RFC positions
    /// from the third.
    fn decode(self, b0: u8, b2: u8) -> (u8, u8, u8) {
        match self {
            TermLayout::Rfc5040 => (b0 >> 4, b0 & 0x0f, b2),
            TermLayout::LinuxX86 => {
                let bit = |i: u8, f: u8| if b2 & (1 << i) != 0 { f } else { 0 };
                (b0 & 0x0f, b0 >> 4, bit(0, M_RFC) | bit(1, D_RFC) | bit(2, R_RFC))
            }
        }
    }

    fn encode(self, layer: u8, etype: u8, flags: u8) -> (u8, u8) {
        match self {
            TermLayout::Rfc5040 => ((layer << 4) | etype, flags),
            TermLayout::LinuxX86 => {
                let bit = |f: u8, i: u8| if flags & f != 0 { 1 << i } else { 0 };
                ((etype << 4) | layer, bit(M_RFC, 0) | bit(D_RFC, 1) | bit(R_RFC, 2))
            }
        }
    }
}

/// A Terminate message's body (RFC 5040 §4.8): who blames whom, and the
/// headers of the segment that caused it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Terminate {
    pub layer: TermLayer,
    pub etype: u8,
    pub code: u8,
    /// M: the terminated segment's DDP length.
    pub seg_len: Option<u16>,
    /// D: the terminated DDP header (14 or 18 bytes).
    pub ddp_header: Option<Vec<u8>>,
    /// R: the terminated RDMAP header (28 bytes, a Read Request's body).
    pub rdmap_header: Option<Vec<u8>>,
}

impl Terminate {
    pub fn new(layer: TermLayer, etype: u8, code: u8) -> Self {
        Self { layer, etype, code, seg_len: None, ddp_header: None, rdmap_header: None }
    }

    /// The RFC 5040 layout.
    pub fn parse(b: &[u8]) -> Result<Terminate, WireError> {
        Self::parse_as(b, TermLayout::Rfc5040)
    }

    pub fn parse_as(b: &[u8], layout: TermLayout) -> Result<Terminate, WireError> {
        let bad = WireError::BadTerminate;
        if b.len() < 4 {
            return Err(bad);
        }
        let (layer, etype, flags) = layout.decode(b[0], b[2]);
        let layer = match layer {
            0 => TermLayer::Rdmap,
            1 => TermLayer::Ddp,
            2 => TermLayer::Llp,
            _ => return Err(bad),
        };
        let mut t = Terminate::new(layer, etype, b[1]);
        let mut at = 4;
        if flags & M_RFC != 0 {
            t.seg_len = Some(be16(b.get(at..at + 2).ok_or(bad)?, 0));
            at += 2;
        }
        if flags & D_RFC != 0 {
            let len = DdpHeader::peek(b.get(at..at + 2).ok_or(bad)?, false)
                .map_or(DdpHeader::UNTAGGED_LEN, |c| c.opcode.header_len());
            t.ddp_header = Some(b.get(at..at + len).ok_or(bad)?.to_vec());
            at += len;
        }
        if flags & R_RFC != 0 {
            t.rdmap_header = Some(b.get(at..at + ReadRequest::LEN).ok_or(bad)?.to_vec());
            at += ReadRequest::LEN;
        }
        if at != b.len() { Err(bad) } else { Ok(t) }
    }

    /// The RFC 5040 layout.
    pub fn emit(&self, out: &mut Vec<u8>) {
        self.emit_as(TermLayout::Rfc5040, out)
    }

    pub fn emit_as(&self, layout: TermLayout, out: &mut Vec<u8>) {
        let flag = |on: bool, f: u8| if on { f } else { 0 };
        let flags = flag(self.seg_len.is_some(), M_RFC)
            | flag(self.ddp_header.is_some(), D_RFC)
            | flag(self.rdmap_header.is_some(), R_RFC);
        let (b0, b2) = layout.encode(self.layer as u8, self.etype & 0x0f, flags);
        out.extend_from_slice(&[b0, self.code, b2, 0]);
        if let Some(n) = self.seg_len {
            out.extend_from_slice(&n.to_be_bytes());
        }
        for part in [&self.ddp_header, &self.rdmap_header].into_iter().flatten() {
            out.extend_from_slice(part);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn hex(s: &str) -> Vec<u8> {
        let s: String = s.split_whitespace().collect();
        (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
    }

    fn untagged(last: bool, opcode: Opcode, inval_stag: u32, msn: u32, mo: u32) -> DdpHeader {
        let qn = opcode.queue().unwrap();
        DdpHeader::Untagged { ctrl: Ctrl { last, opcode }, inval_stag, qn, msn, mo }
    }

    /// The headers of a Linux NVMe/RDMA exchange (the reference's capture,
    /// MPA length stripped), each parsed and emitted back byte for byte.
    #[test]
    fn headers_from_a_linux_capture() {
        let cases = [
            // Connect capsule: Send, last, QN 0, MSN 1, MO 0.
            ("4143 00000000 00000000 00000001 00000000", untagged(true, Opcode::Send, 0, 1, 0)),
            // Read Request header (QN 1, MSN 1).
            (
                "4141 00000000 00000001 00000001 00000000",
                untagged(true, Opcode::ReadRequest, 0, 1, 0),
            ),
            // Read Response, last, to the target's sink.
            (
                "c142 842e7201 ff29a58f50051000",
                DdpHeader::Tagged {
                    ctrl: Ctrl { last: true, opcode: Opcode::ReadResponse },
                    stag: 0x842e7201,
                    to: 0xff29a58f50051000,
                },
            ),
            // Send with Invalidate carrying the host's key.
            (
                "4144 7fe79101 00000000 00000001 00000000",
                untagged(true, Opcode::SendInvalidate, 0x7fe79101, 1, 0),
            ),
            // RDMA Write, not the last segment.
            (
                "8140 7fe79102 ff2af64142a6e000",
                DdpHeader::Tagged {
                    ctrl: Ctrl { last: false, opcode: Opcode::Write },
                    stag: 0x7fe79102,
                    to: 0xff2af64142a6e000,
                },
            ),
            // Send with Solicited Event, and with SE and Invalidate.
            ("4145 00000000 00000000 00000003 00000000", untagged(true, Opcode::SendSe, 0, 3, 0)),
            (
                "4146 7fe79102 00000000 00000004 00000000",
                untagged(true, Opcode::SendSeInvalidate, 0x7fe79102, 4, 0),
            ),
            // A middle segment of a Send: L clear, MO 1424.
            (
                "0143 00000000 00000000 00000002 00000590",
                untagged(false, Opcode::Send, 0, 2, 0x590),
            ),
            // Terminate: QN 2, MSN 1.
            (
                "4147 00000000 00000002 00000001 00000000",
                untagged(true, Opcode::Terminate, 0, 1, 0),
            ),
        ];
        for (bytes, want) in cases {
            let b = hex(bytes);
            assert_eq!(DdpHeader::parse(&b), Ok(want), "{bytes}");
            assert_eq!(want.buffer_len(), b.len());
            let mut out = Vec::new();
            want.emit(&mut out);
            assert_eq!(out, b, "{bytes}");
        }
    }

    #[test]
    fn the_read_request_body() {
        let b = hex("842e7201 ff29a58f50051000 00000400 7fe79101 ff2af6414290a000");
        let want = ReadRequest {
            sink_stag: 0x842e7201,
            sink_to: 0xff29a58f50051000,
            size: 1024,
            src_stag: 0x7fe79101,
            src_to: 0xff2af6414290a000,
        };
        assert_eq!(ReadRequest::parse(&b), Some(want));
        let mut out = Vec::new();
        want.emit(&mut out);
        assert_eq!(out, b);
        assert_eq!(ReadRequest::parse(&b[..27]), None);
    }

    #[test]
    fn bad_control_bytes() {
        assert_eq!(
            DdpHeader::parse(&hex("4248")),
            Err(WireError::BadDdpVersion { tagged: false, version: 2 })
        );
        assert_eq!(DdpHeader::parse(&hex("4103")), Err(WireError::BadRdmapVersion(0)));
        assert_eq!(DdpHeader::parse(&hex("4148")), Err(WireError::BadOpcode(8)));
        // T must agree with the opcode: an untagged Write, a tagged Send.
        assert_eq!(DdpHeader::parse(&hex("4140")), Err(WireError::BadOpcode(0)));
        assert_eq!(DdpHeader::parse(&hex("c143")), Err(WireError::BadOpcode(3)));
        assert_eq!(
            DdpHeader::parse(&hex("c140 00000001")),
            Err(WireError::ShortUlpdu { len: 6, need: 14 })
        );
    }

    #[test]
    fn terminates_round_trip() {
        // DDP / untagged / MSN range, with the segment length and the DDP
        // header that caused it.
        let mut t = Terminate::new(TermLayer::Ddp, 2, 3);
        t.seg_len = Some(0x0012);
        t.ddp_header = Some(hex("4143 00000000 00000000 00000002 00000000"));
        let mut out = Vec::new();
        t.emit(&mut out);
        assert_eq!(&out[..6], hex("12 03 c0 00 0012"));
        assert_eq!(Terminate::parse(&out), Ok(t));
        // RDMAP / remote operation / unexpected opcode, nothing quoted.
        let t = Terminate::new(TermLayer::Rdmap, 2, 6);
        let mut out = Vec::new();
        t.emit(&mut out);
        assert_eq!(out, hex("02 06 00 00"));
        assert_eq!(Terminate::parse(&out), Ok(t));
        assert_eq!(Terminate::parse(&hex("32 06 00 00")), Err(WireError::BadTerminate));
        assert_eq!(Terminate::parse(&hex("12 03 40 00 4143")), Err(WireError::BadTerminate));
    }

    /// siw's Terminates from the reference, read with the x86 layout.
    #[test]
    fn siws_terminates() {
        let crc = Terminate::parse_as(&hex("02 02 00 00"), TermLayout::LinuxX86).unwrap();
        assert_eq!(crc, Terminate::new(TermLayer::Llp, 0, 2));
        let op = Terminate::parse_as(&hex("20 06 00 00"), TermLayout::LinuxX86).unwrap();
        assert_eq!(op, Terminate::new(TermLayer::Rdmap, 2, 6));
        let msn = hex("21 03 03 00 0012 4143 00000000 00000000 00000002 00000000");
        let t = Terminate::parse_as(&msn, TermLayout::LinuxX86).unwrap();
        assert_eq!((t.layer, t.etype, t.code, t.seg_len), (TermLayer::Ddp, 2, 3, Some(0x12)));
        let mut out = Vec::new();
        t.emit_as(TermLayout::LinuxX86, &mut out);
        assert_eq!(out, msn);
        // The same Terminate in the RFC's layout.
        out.clear();
        t.emit(&mut out);
        assert_eq!(&out[..4], hex("12 03 c0 00"));
    }
}
