//! NVMe/TCP PDUs on the wire (NVMe/TCP Transport Specification 1.0, section 3.6).
//!
//! [`Pdu`] is a typed view over a buffer that starts at the first byte of a
//! PDU; [`PduRepr`] is what the header means, parsed and validated against
//! the digests in force, and emitted back into a buffer the caller sized.
//! [`Framer`] cuts a byte stream into PDUs without needing a PDU to be
//! contiguous.
//!
//! Every error a peer's bytes can cause is a [`PduError`] that names the
//! fatal error status (FES) and fatal error information (FEI) the receiver
//! must put in its TermReq. Nothing here panics on peer input and nothing
//! allocates.

mod framer;
mod repr;
#[cfg(test)]
mod tests;
mod tx;

pub use framer::{Event, Framer};
pub(crate) use nvme_of::{Digests, TxStats};
pub use repr::{CapsuleCmd, CapsuleResp, DataPdu, Header, IcReq, IcResp, PduRepr, R2t, TermReq};
pub use tx::TxQueue;

use core::fmt;
use nvme_of::bytes::{get_u16, get_u32, put_u16, put_u32};

/// Byte offsets of every header field (common header, then per type).
pub mod field {
    use core::ops::Range;
    pub type Field = Range<usize>;

    pub const TYPE: usize = 0;
    pub const FLAGS: usize = 1;
    pub const HLEN: usize = 2;
    pub const PDO: usize = 3;
    pub const PLEN: Field = 4..8;

    // ICReq / ICResp
    pub const PFV: Field = 8..10;
    /// HPDA in ICReq, CPDA in ICResp.
    pub const PDA: usize = 10;
    pub const DGST: usize = 11;
    /// MAXR2T in ICReq, MAXH2CDATA in ICResp.
    pub const IC_LIMIT: Field = 12..16;

    // H2CTermReq / C2HTermReq
    pub const FES: Field = 8..10;
    /// FEI is a 32-bit field at the unaligned offset 10.
    pub const FEI: Field = 10..14;

    // CapsuleCmd / CapsuleResp
    pub const SQE: Field = 8..72;
    pub const CQE: Field = 8..24;

    // H2CData / C2HData / R2T
    pub const CCCID: Field = 8..10;
    pub const TTAG: Field = 10..12;
    /// DATAO, or R2TO in an R2T.
    pub const DATAO: Field = 12..16;
    /// DATAL, or R2TL in an R2T.
    pub const DATAL: Field = 16..20;
}

/// Length of the common header.
pub const COMMON_HEADER_LEN: usize = 8;
/// Length of a header digest or data digest.
pub const DIGEST_LEN: usize = 4;
/// The longest header plus its digest (ICReq/ICResp have no digest, so 128).
pub const MAX_HEADER_LEN: usize = 128;
/// A TermReq carries at most this many bytes of the offending PDU header.
pub const TERM_REQ_MAX_DATA: usize = 128;

/// PDU-Type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum PduType {
    IcReq = 0x00,
    IcResp = 0x01,
    H2cTermReq = 0x02,
    C2hTermReq = 0x03,
    CapsuleCmd = 0x04,
    CapsuleResp = 0x05,
    H2cData = 0x06,
    C2hData = 0x07,
    R2t = 0x09,
}

/// Which way a PDU travels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Direction {
    HostToController,
    ControllerToHost,
}

impl PduType {
    pub fn from_u8(v: u8) -> Option<Self> {
        Some(match v {
            0x00 => Self::IcReq,
            0x01 => Self::IcResp,
            0x02 => Self::H2cTermReq,
            0x03 => Self::C2hTermReq,
            0x04 => Self::CapsuleCmd,
            0x05 => Self::CapsuleResp,
            0x06 => Self::H2cData,
            0x07 => Self::C2hData,
            0x09 => Self::R2t,
            _ => return None,
        })
    }

    /// HLEN: the fixed length of this type's header, without digest.
    pub const fn hlen(self) -> u8 {
        match self {
            Self::IcReq | Self::IcResp => 128,
            Self::CapsuleCmd => 72,
            Self::H2cTermReq
            | Self::C2hTermReq
            | Self::CapsuleResp
            | Self::H2cData
            | Self::C2hData
            | Self::R2t => 24,
        }
    }

    pub const fn direction(self) -> Direction {
        match self {
            Self::IcReq | Self::H2cTermReq | Self::CapsuleCmd | Self::H2cData => {
                Direction::HostToController
            }
            Self::IcResp | Self::C2hTermReq | Self::CapsuleResp | Self::C2hData | Self::R2t => {
                Direction::ControllerToHost
            }
        }
    }

    /// Whether a header digest follows the header when header digests are on.
    /// Connection setup and termination PDUs never carry digests.
    pub const fn has_digests(self) -> bool {
        !matches!(self, Self::IcReq | Self::IcResp | Self::H2cTermReq | Self::C2hTermReq)
    }

    /// Whether the PDU may carry data (and then a data digest).
    pub const fn may_carry_data(self) -> bool {
        matches!(self, Self::CapsuleCmd | Self::H2cData | Self::C2hData)
    }

    /// FLAGS bits this type may set.
    pub const fn valid_flags(self) -> u8 {
        match self {
            Self::IcReq | Self::IcResp | Self::H2cTermReq | Self::C2hTermReq => 0,
            Self::CapsuleCmd => flags::HDGSTF | flags::DDGSTF,
            Self::CapsuleResp | Self::R2t => flags::HDGSTF,
            Self::H2cData => flags::HDGSTF | flags::DDGSTF | flags::LAST_PDU,
            Self::C2hData => flags::HDGSTF | flags::DDGSTF | flags::LAST_PDU | flags::SUCCESS,
        }
    }

    pub const fn is_term_req(self) -> bool {
        matches!(self, Self::H2cTermReq | Self::C2hTermReq)
    }
}

/// FLAGS bits of the common header.
pub mod flags {
    /// HDGSTF: a header digest follows the PDU header.
    pub const HDGSTF: u8 = 0x01;
    /// DDGSTF: a data digest follows the PDU data.
    pub const DDGSTF: u8 = 0x02;
    /// LAST_PDU: the last data PDU of a command (C2HData) or of an R2T (H2CData).
    pub const LAST_PDU: u8 = 0x04;
    /// SUCCESS: the command completed successfully; no CapsuleResp follows (C2HData only).
    pub const SUCCESS: u8 = 0x08;
}

/// What the framing of one direction of a connection was negotiated to:
/// the digests in force and the receiver's PDU data alignment (HPDA for
/// C2H data, CPDA for H2C data; 0-based dwords).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub struct Framing {
    pub digests: Digests,
    pub pda: u8,
}

impl Framing {
    /// Before ICReq/ICResp: no digests, no alignment.
    pub const INITIAL: Framing = Framing { digests: Digests::NONE, pda: 0 };

    /// PDO of a PDU with data must be a multiple of this.
    pub const fn alignment(self) -> usize {
        (self.pda as usize % 32 + 1) * 4
    }
}

/// CRC32C (Castagnoli) of `data`, the digest NVMe/TCP puts after headers and data.
/// It is stored little-endian on the wire.
#[inline]
pub fn crc32c(data: &[u8]) -> u32 {
    crc32c::crc32c(data)
}

/// Continue a CRC32C over more bytes: `crc32c_append(crc32c(a), b) == crc32c(a ++ b)`.
#[inline]
pub fn crc32c_append(crc: u32, data: &[u8]) -> u32 {
    crc32c::crc32c_append(crc, data)
}

/// Fatal error status of a TermReq.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Fes {
    InvalidHeaderField,
    PduSequenceError,
    HeaderDigestError,
    DataOutOfRange,
    /// Data Transfer Limit Exceeded (R2T Limit Exceeded in older revisions).
    DataLimitExceeded,
    UnsupportedParameter,
    Other(u16),
}

impl Fes {
    pub const fn from_u16(v: u16) -> Self {
        match v {
            0x01 => Self::InvalidHeaderField,
            0x02 => Self::PduSequenceError,
            0x03 => Self::HeaderDigestError,
            0x04 => Self::DataOutOfRange,
            0x05 => Self::DataLimitExceeded,
            0x06 => Self::UnsupportedParameter,
            v => Self::Other(v),
        }
    }

    pub const fn to_u16(self) -> u16 {
        match self {
            Self::InvalidHeaderField => 0x01,
            Self::PduSequenceError => 0x02,
            Self::HeaderDigestError => 0x03,
            Self::DataOutOfRange => 0x04,
            Self::DataLimitExceeded => 0x05,
            Self::UnsupportedParameter => 0x06,
            Self::Other(v) => v,
        }
    }
}

impl fmt::Display for Fes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::InvalidHeaderField => write!(f, "invalid PDU header field"),
            Self::PduSequenceError => write!(f, "PDU sequence error"),
            Self::HeaderDigestError => write!(f, "header digest error"),
            Self::DataOutOfRange => write!(f, "data transfer out of range"),
            Self::DataLimitExceeded => write!(f, "data transfer limit exceeded"),
            Self::UnsupportedParameter => write!(f, "unsupported parameter"),
            Self::Other(v) => write!(f, "FES {v:#x}"),
        }
    }
}

/// A PDU a receiver must refuse, with the TermReq it owes the sender.
///
/// FES and FEI follow the transport specification as FreeBSD's nvmf and
/// Wireshark read it: FEI is the byte offset of the offending field for
/// invalid header fields and unsupported parameters, the received digest for
/// header digest errors, and reserved (0) otherwise.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum PduError {
    /// PDU-Type is unknown, or travels the other way.
    #[error("PDU type {0:#04x} is not valid here")]
    BadType(u8),
    /// FLAGS has bits the type does not allow, or disagrees with the digests in force.
    #[error("{pdu_type:?}: FLAGS {flags:#04x} are invalid")]
    BadFlags { pdu_type: PduType, flags: u8 },
    /// HLEN is not the fixed header length of the type.
    #[error("{pdu_type:?}: HLEN {hlen} is wrong")]
    BadHlen { pdu_type: PduType, hlen: u8 },
    /// PDO is not where data can start.
    #[error("{pdu_type:?}: PDO {pdo} is invalid")]
    BadPdo { pdu_type: PduType, pdo: u8 },
    /// PLEN does not fit the type, its header and its data.
    #[error("{pdu_type:?}: PLEN {plen} is invalid")]
    BadPlen { pdu_type: PduType, plen: u32 },
    /// A type-specific field holds a value the specification does not allow,
    /// or names a command or transfer the receiver does not know.
    #[error("{pdu_type:?}: field at byte {offset} is invalid")]
    BadField { pdu_type: PduType, offset: u8 },
    /// HDGST does not match the header.
    #[error("header digest {received:#010x}, computed {computed:#010x}")]
    HeaderDigest { received: u32, computed: u32 },
    /// A valid PDU arrived where the protocol does not allow it.
    #[error("{0:?} out of sequence")]
    Sequence(PduType),
    /// Data offset or length outside the command's (or the R2T's) transfer.
    #[error("{0:?}: data transfer out of range")]
    DataOutOfRange(PduType),
    /// More data than MAXH2CDATA allows, or more R2Ts than MAXR2T.
    #[error("{0:?}: data transfer limit exceeded")]
    DataLimitExceeded(PduType),
    /// A parameter the receiver does not support.
    #[error("{pdu_type:?}: unsupported parameter at byte {offset}")]
    UnsupportedParameter { pdu_type: PduType, offset: u8 },
    /// The buffer ends before the header does (a caller error, not a peer's).
    #[error("buffer shorter than the PDU header")]
    Truncated,
}

impl PduError {
    /// The FES of the TermReq this error calls for.
    pub fn fes(&self) -> Fes {
        match self {
            Self::BadType(_)
            | Self::BadFlags { .. }
            | Self::BadHlen { .. }
            | Self::BadPdo { .. }
            | Self::BadPlen { .. }
            | Self::BadField { .. }
            | Self::Truncated => Fes::InvalidHeaderField,
            Self::HeaderDigest { .. } => Fes::HeaderDigestError,
            Self::Sequence(_) => Fes::PduSequenceError,
            Self::DataOutOfRange(_) => Fes::DataOutOfRange,
            Self::DataLimitExceeded(_) => Fes::DataLimitExceeded,
            Self::UnsupportedParameter { .. } => Fes::UnsupportedParameter,
        }
    }

    /// The FEI of that TermReq.
    pub fn fei(&self) -> u32 {
        let offset = match *self {
            Self::BadType(_) => field::TYPE,
            Self::BadFlags { .. } => field::FLAGS,
            Self::BadHlen { .. } => field::HLEN,
            Self::BadPdo { .. } => field::PDO,
            Self::BadPlen { .. } | Self::Truncated => field::PLEN.start,
            Self::BadField { offset, .. } | Self::UnsupportedParameter { offset, .. } => {
                offset as usize
            }
            Self::HeaderDigest { received, .. } => return received,
            Self::Sequence(_) | Self::DataOutOfRange(_) | Self::DataLimitExceeded(_) => 0,
        };
        offset as u32
    }

    /// The type of the offending PDU, where it was known.
    pub fn pdu_type(&self) -> Option<PduType> {
        match *self {
            Self::BadFlags { pdu_type, .. }
            | Self::BadHlen { pdu_type, .. }
            | Self::BadPdo { pdu_type, .. }
            | Self::BadPlen { pdu_type, .. }
            | Self::BadField { pdu_type, .. }
            | Self::UnsupportedParameter { pdu_type, .. } => Some(pdu_type),
            Self::Sequence(t) | Self::DataOutOfRange(t) | Self::DataLimitExceeded(t) => Some(t),
            Self::BadType(_) | Self::HeaderDigest { .. } | Self::Truncated => None,
        }
    }

    /// Whether the receiver answers with a TermReq before closing. A broken
    /// TermReq is never answered: the connection just closes (NVMe-oF 1.1
    /// section 7.4.7).
    pub fn wants_term_req(&self) -> bool {
        !self.pdu_type().is_some_and(PduType::is_term_req)
    }
}

/// A read/write view of an NVMe/TCP PDU: at least its header, possibly the
/// whole PDU.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pdu<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Pdu<T> {
    pub const fn new_unchecked(buffer: T) -> Self {
        Self { buffer }
    }

    /// A view whose header accessors cannot panic: the type is known and the
    /// buffer holds its whole fixed-length header.
    pub fn new_checked(buffer: T) -> Result<Self, PduError> {
        let pdu = Self::new_unchecked(buffer);
        pdu.check_len()?;
        Ok(pdu)
    }

    pub fn check_len(&self) -> Result<(), PduError> {
        let b = self.buffer.as_ref();
        if b.len() < COMMON_HEADER_LEN {
            return Err(PduError::Truncated);
        }
        let ty = PduType::from_u8(b[field::TYPE]).ok_or(PduError::BadType(b[field::TYPE]))?;
        if b.len() < usize::from(ty.hlen()) {
            return Err(PduError::Truncated);
        }
        Ok(())
    }

    pub fn into_inner(self) -> T {
        self.buffer
    }

    fn b(&self) -> &[u8] {
        self.buffer.as_ref()
    }

    /// PDU-Type, if known (always, after `new_checked`).
    pub fn pdu_type(&self) -> Option<PduType> {
        PduType::from_u8(self.b()[field::TYPE])
    }
    pub fn flags(&self) -> u8 {
        self.b()[field::FLAGS]
    }
    pub fn hlen(&self) -> u8 {
        self.b()[field::HLEN]
    }
    pub fn pdo(&self) -> u8 {
        self.b()[field::PDO]
    }
    pub fn plen(&self) -> u32 {
        get_u32(self.b(), field::PLEN.start)
    }

    pub fn pfv(&self) -> u16 {
        get_u16(self.b(), field::PFV.start)
    }
    /// HPDA (ICReq) or CPDA (ICResp).
    pub fn pda(&self) -> u8 {
        self.b()[field::PDA]
    }
    pub fn dgst(&self) -> u8 {
        self.b()[field::DGST]
    }
    /// MAXR2T (ICReq, 0-based) or MAXH2CDATA (ICResp).
    pub fn ic_limit(&self) -> u32 {
        get_u32(self.b(), field::IC_LIMIT.start)
    }

    pub fn fes(&self) -> u16 {
        get_u16(self.b(), field::FES.start)
    }
    pub fn fei(&self) -> u32 {
        get_u32(self.b(), field::FEI.start)
    }

    /// The 64-byte SQE of a CapsuleCmd.
    pub fn sqe(&self) -> &[u8] {
        &self.b()[field::SQE]
    }
    /// The 16-byte CQE of a CapsuleResp.
    pub fn cqe(&self) -> &[u8] {
        &self.b()[field::CQE]
    }

    pub fn cccid(&self) -> u16 {
        get_u16(self.b(), field::CCCID.start)
    }
    pub fn ttag(&self) -> u16 {
        get_u16(self.b(), field::TTAG.start)
    }
    /// DATAO, or R2TO.
    pub fn datao(&self) -> u32 {
        get_u32(self.b(), field::DATAO.start)
    }
    /// DATAL, or R2TL.
    pub fn datal(&self) -> u32 {
        get_u32(self.b(), field::DATAL.start)
    }

    /// The header digest, if the buffer holds one at HLEN.
    pub fn header_digest(&self) -> Option<u32> {
        let at = usize::from(self.hlen());
        (self.b().len() >= at + DIGEST_LEN).then(|| get_u32(self.b(), at))
    }

    /// CRC32C over the HLEN header bytes.
    pub fn compute_header_digest(&self) -> u32 {
        crc32c(&self.b()[..usize::from(self.hlen()).min(self.b().len())])
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Pdu<T> {
    fn b_mut(&mut self) -> &mut [u8] {
        self.buffer.as_mut()
    }

    pub fn set_pdu_type(&mut self, t: PduType) {
        self.b_mut()[field::TYPE] = t as u8;
    }
    pub fn set_flags(&mut self, v: u8) {
        self.b_mut()[field::FLAGS] = v;
    }
    pub fn set_hlen(&mut self, v: u8) {
        self.b_mut()[field::HLEN] = v;
    }
    pub fn set_pdo(&mut self, v: u8) {
        self.b_mut()[field::PDO] = v;
    }
    pub fn set_plen(&mut self, v: u32) {
        put_u32(self.b_mut(), field::PLEN.start, v);
    }
    pub fn set_pfv(&mut self, v: u16) {
        put_u16(self.b_mut(), field::PFV.start, v);
    }
    pub fn set_pda(&mut self, v: u8) {
        self.b_mut()[field::PDA] = v;
    }
    pub fn set_dgst(&mut self, v: u8) {
        self.b_mut()[field::DGST] = v;
    }
    pub fn set_ic_limit(&mut self, v: u32) {
        put_u32(self.b_mut(), field::IC_LIMIT.start, v);
    }
    pub fn set_fes(&mut self, v: u16) {
        put_u16(self.b_mut(), field::FES.start, v);
    }
    pub fn set_fei(&mut self, v: u32) {
        put_u32(self.b_mut(), field::FEI.start, v);
    }
    pub fn sqe_mut(&mut self) -> &mut [u8] {
        &mut self.b_mut()[field::SQE]
    }
    pub fn cqe_mut(&mut self) -> &mut [u8] {
        &mut self.b_mut()[field::CQE]
    }
    pub fn set_cccid(&mut self, v: u16) {
        put_u16(self.b_mut(), field::CCCID.start, v);
    }
    pub fn set_ttag(&mut self, v: u16) {
        put_u16(self.b_mut(), field::TTAG.start, v);
    }
    pub fn set_datao(&mut self, v: u32) {
        put_u32(self.b_mut(), field::DATAO.start, v);
    }
    pub fn set_datal(&mut self, v: u32) {
        put_u32(self.b_mut(), field::DATAL.start, v);
    }

    /// Compute the header digest over HLEN bytes and store it after them.
    pub fn fill_header_digest(&mut self) {
        let at = usize::from(self.hlen());
        let d = crc32c(&self.b()[..at]);
        put_u32(self.b_mut(), at, d);
    }
}
