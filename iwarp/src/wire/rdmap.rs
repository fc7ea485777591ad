//! The RDMAP message headers that follow a DDP header (RFC 5040 §4.4,
//! §4.8): the RDMA Read Request and the Terminate, views and reprs.
//!
//! A Terminate's first four bytes are laid out two ways ([`TermLayout`]):
//! the RFC's, and Linux siw's on x86, whose bitfields swap the nibbles
//! and move M/D/R. The view reads either; the connection says which.
//! Nothing here panics on a peer's bytes.

use super::{DdpHeader, Field, WireError};

mod field {
    use super::Field;

    // Read Request (RFC 5040 §4.4).
    pub const SINK_STAG: Field = 0..4;
    pub const SINK_TO: Field = 4..12;
    /// RDMA Read Message Size.
    pub const RDMA_RDSZ: Field = 12..16;
    pub const SRC_STAG: Field = 16..20;
    pub const SRC_TO: Field = 20..28;

    // Terminate (RFC 5040 §4.8).
    /// Layer and EType, one nibble each (which one is the layout's).
    pub const TERM_CTRL: usize = 0;
    pub const ERR_CODE: usize = 1;
    /// Hdrct: M, D, R (where they sit is the layout's); then reserved.
    pub const HDRCT: usize = 2;
    pub const TERM_RSVD: usize = 3;
    /// The optional quoted parts: DDP segment length, DDP header, RDMAP
    /// header.
    pub const QUOTED: usize = 4;
}

view!(
    /// A read/write view of an RDMA Read Request's RDMAP header (RFC 5040
    /// §4.4), the payload of its untagged DDP segment.
    ReadRequestPacket
);

be_fields!(ReadRequestPacket {
    /// The data sink STag: where the Read Response goes.
    sink_stag, set_sink_stag: u32 = field::SINK_STAG;
    sink_to, set_sink_to: u64 = field::SINK_TO;
    /// RDMA Read Message Size.
    size, set_size: u32 = field::RDMA_RDSZ;
    /// The data source STag: what is read.
    src_stag, set_src_stag: u32 = field::SRC_STAG;
    src_to, set_src_to: u64 = field::SRC_TO;
});

impl<T: AsRef<[u8]>> ReadRequestPacket<T> {
    /// The buffer holds the whole header.
    pub fn check_len(&self) -> Result<(), WireError> {
        if self.buffer.as_ref().len() < ReadRequest::LEN {
            return Err(WireError::Truncated);
        }
        Ok(())
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
    pub const LEN: usize = field::SRC_TO.end;

    pub fn parse<T: AsRef<[u8]>>(p: &ReadRequestPacket<T>) -> Result<ReadRequest, WireError> {
        p.check_len()?;
        Ok(ReadRequest {
            sink_stag: p.sink_stag(),
            sink_to: p.sink_to(),
            size: p.size(),
            src_stag: p.src_stag(),
            src_to: p.src_to(),
        })
    }

    pub fn buffer_len(&self) -> usize {
        Self::LEN
    }

    /// # Panics
    /// If the buffer is shorter than `buffer_len()`.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut ReadRequestPacket<T>) {
        p.set_sink_stag(self.sink_stag);
        p.set_sink_to(self.sink_to);
        p.set_size(self.size);
        p.set_src_stag(self.src_stag);
        p.set_src_to(self.src_to);
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

impl TermLayer {
    fn from_u8(v: u8) -> Option<TermLayer> {
        Some(match v {
            0 => TermLayer::Rdmap,
            1 => TermLayer::Ddp,
            2 => TermLayer::Llp,
            _ => return None,
        })
    }
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

/// Hdrct bits in the RFC's positions, as [`TerminatePacket::hdrct`] gives
/// them whatever the layout.
const M_RFC: u8 = 0x80;
const D_RFC: u8 = 0x40;
const R_RFC: u8 = 0x20;
const HDRCT_RFC: u8 = M_RFC | D_RFC | R_RFC;

impl TermLayout {
    /// (layer, error type) from the first byte.
    fn decode_ctrl(self, b0: u8) -> (u8, u8) {
        match self {
            TermLayout::Rfc5040 => (b0 >> 4, b0 & 0x0f),
            TermLayout::LinuxX86 => (b0 & 0x0f, b0 >> 4),
        }
    }

    fn encode_ctrl(self, layer: u8, etype: u8) -> u8 {
        let (layer, etype) = (layer & 0x0f, etype & 0x0f);
        match self {
            TermLayout::Rfc5040 => (layer << 4) | etype,
            TermLayout::LinuxX86 => (etype << 4) | layer,
        }
    }

    /// M/D/R in RFC positions from the third byte.
    fn decode_hdrct(self, b2: u8) -> u8 {
        match self {
            TermLayout::Rfc5040 => b2 & HDRCT_RFC,
            TermLayout::LinuxX86 => {
                let bit = |i: u8, f: u8| if b2 & (1 << i) != 0 { f } else { 0 };
                bit(0, M_RFC) | bit(1, D_RFC) | bit(2, R_RFC)
            }
        }
    }

    fn encode_hdrct(self, flags: u8) -> u8 {
        match self {
            TermLayout::Rfc5040 => flags & HDRCT_RFC,
            TermLayout::LinuxX86 => {
                let bit = |f: u8, i: u8| if flags & f != 0 { 1 << i } else { 0 };
                bit(M_RFC, 0) | bit(D_RFC, 1) | bit(R_RFC, 2)
            }
        }
    }
}

view!(
    /// A read/write view of a Terminate's RDMAP header (RFC 5040 §4.8),
    /// the payload of its untagged DDP segment: the Terminate control
    /// fields, then whatever of the terminated segment it quotes.
    TerminatePacket
);

impl<T: AsRef<[u8]>> TerminatePacket<T> {
    /// Bytes of the fixed part: control, error code, Hdrct, reserved.
    pub const HEADER_LEN: usize = field::QUOTED;

    /// The buffer holds the fixed part (what it quotes is checked on
    /// parse, against Hdrct).
    pub fn check_len(&self) -> Result<(), WireError> {
        if self.buffer.as_ref().len() < Self::HEADER_LEN {
            return Err(WireError::BadTerminate);
        }
        Ok(())
    }

    fn b(&self) -> &[u8] {
        self.buffer.as_ref()
    }

    /// Layer: 0 RDMAP, 1 DDP, 2 LLP.
    pub fn layer(&self, layout: TermLayout) -> u8 {
        layout.decode_ctrl(self.b()[field::TERM_CTRL]).0
    }

    /// EType: the error type within the layer.
    pub fn etype(&self, layout: TermLayout) -> u8 {
        layout.decode_ctrl(self.b()[field::TERM_CTRL]).1
    }

    pub fn error_code(&self) -> u8 {
        self.b()[field::ERR_CODE]
    }

    /// Hdrct with M, D and R at 0x80, 0x40 and 0x20, whatever the layout.
    pub fn hdrct(&self, layout: TermLayout) -> u8 {
        layout.decode_hdrct(self.b()[field::HDRCT])
    }

    /// What follows the fixed part: the DDP segment length (M), the
    /// terminated DDP header (D) and RDMAP header (R), in that order.
    pub fn quoted(&self) -> &[u8] {
        &self.b()[field::QUOTED..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> TerminatePacket<T> {
    pub fn set_layer_etype(&mut self, layout: TermLayout, layer: u8, etype: u8) {
        self.buffer.as_mut()[field::TERM_CTRL] = layout.encode_ctrl(layer, etype);
    }

    pub fn set_error_code(&mut self, v: u8) {
        self.buffer.as_mut()[field::ERR_CODE] = v;
    }

    /// Hdrct from M, D and R at 0x80, 0x40 and 0x20; the reserved bits
    /// that share its bytes are cleared.
    pub fn set_hdrct(&mut self, layout: TermLayout, flags: u8) {
        let b = self.buffer.as_mut();
        b[field::HDRCT] = layout.encode_hdrct(flags);
        b[field::TERM_RSVD] = 0;
    }

    pub fn quoted_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[field::QUOTED..]
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

    /// The whole body is the view's buffer: what Hdrct announces must be
    /// there, and nothing more.
    pub fn parse<T: AsRef<[u8]>>(
        p: &TerminatePacket<T>,
        layout: TermLayout,
    ) -> Result<Terminate, WireError> {
        let bad = WireError::BadTerminate;
        p.check_len()?;
        let layer = TermLayer::from_u8(p.layer(layout)).ok_or(bad)?;
        let mut t = Terminate::new(layer, p.etype(layout), p.error_code());
        let (flags, b) = (p.hdrct(layout), p.quoted());
        let mut at = 0;
        if flags & M_RFC != 0 {
            let len = b.get(at..at + 2).ok_or(bad)?;
            t.seg_len = Some(u16::from_be_bytes([len[0], len[1]]));
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

    pub fn buffer_len(&self) -> usize {
        let quoted = [&self.ddp_header, &self.rdmap_header].into_iter().flatten();
        field::QUOTED + self.seg_len.map_or(0, |_| 2) + quoted.map(Vec::len).sum::<usize>()
    }

    /// # Panics
    /// If the buffer is shorter than `buffer_len()`.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(
        &self,
        p: &mut TerminatePacket<T>,
        layout: TermLayout,
    ) {
        let flag = |on: bool, f: u8| if on { f } else { 0 };
        let flags = flag(self.seg_len.is_some(), M_RFC)
            | flag(self.ddp_header.is_some(), D_RFC)
            | flag(self.rdmap_header.is_some(), R_RFC);
        p.set_layer_etype(layout, self.layer as u8, self.etype);
        p.set_error_code(self.code);
        p.set_hdrct(layout, flags);
        let b = p.quoted_mut();
        let mut at = 0;
        if let Some(n) = self.seg_len {
            b[..2].copy_from_slice(&n.to_be_bytes());
            at = 2;
        }
        for part in [&self.ddp_header, &self.rdmap_header].into_iter().flatten() {
            b[at..at + part.len()].copy_from_slice(part);
            at += part.len();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::tests::hex;

    const RFC: TermLayout = TermLayout::Rfc5040;

    fn parse(b: &[u8], layout: TermLayout) -> Result<Terminate, WireError> {
        Terminate::parse(&TerminatePacket::new_checked(b)?, layout)
    }

    fn emit(t: &Terminate, layout: TermLayout) -> Vec<u8> {
        let mut out = vec![0; t.buffer_len()];
        t.emit(&mut TerminatePacket::new_unchecked(&mut out), layout);
        out
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
        assert_eq!(ReadRequest::parse(&ReadRequestPacket::new_unchecked(&b)), Ok(want));
        let mut out = vec![0; want.buffer_len()];
        want.emit(&mut ReadRequestPacket::new_unchecked(&mut out));
        assert_eq!(out, b);
        let short = ReadRequestPacket::new_unchecked(&b[..27]);
        assert_eq!(ReadRequest::parse(&short), Err(WireError::Truncated));
    }

    #[test]
    fn terminates_round_trip() {
        // DDP / untagged / MSN range, with the segment length and the DDP
        // header that caused it.
        let mut t = Terminate::new(TermLayer::Ddp, 2, 3);
        t.seg_len = Some(0x0012);
        t.ddp_header = Some(hex("4143 00000000 00000000 00000002 00000000"));
        let out = emit(&t, RFC);
        assert_eq!(&out[..6], hex("12 03 c0 00 0012"));
        assert_eq!(parse(&out, RFC), Ok(t));
        // RDMAP / remote operation / unexpected opcode, nothing quoted.
        let t = Terminate::new(TermLayer::Rdmap, 2, 6);
        let out = emit(&t, RFC);
        assert_eq!(out, hex("02 06 00 00"));
        assert_eq!(parse(&out, RFC), Ok(t));
        assert_eq!(parse(&hex("32 06 00 00"), RFC), Err(WireError::BadTerminate));
        assert_eq!(parse(&hex("12 03 40 00 4143"), RFC), Err(WireError::BadTerminate));
    }

    /// siw's Terminates from the reference, read with the x86 layout.
    #[test]
    fn siws_terminates() {
        let crc = parse(&hex("02 02 00 00"), TermLayout::LinuxX86).unwrap();
        assert_eq!(crc, Terminate::new(TermLayer::Llp, 0, 2));
        let op = parse(&hex("20 06 00 00"), TermLayout::LinuxX86).unwrap();
        assert_eq!(op, Terminate::new(TermLayer::Rdmap, 2, 6));
        let msn = hex("21 03 03 00 0012 4143 00000000 00000000 00000002 00000000");
        let t = parse(&msn, TermLayout::LinuxX86).unwrap();
        assert_eq!((t.layer, t.etype, t.code, t.seg_len), (TermLayer::Ddp, 2, 3, Some(0x12)));
        let out = emit(&t, TermLayout::LinuxX86);
        assert_eq!(out, msn);
        // The same Terminate in the RFC's layout.
        let out = emit(&t, RFC);
        assert_eq!(&out[..4], hex("12 03 c0 00"));
    }
}
