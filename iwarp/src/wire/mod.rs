//! iWARP on the wire. Every MPA, DDP and RDMAP integer is big-endian; the
//! MPA CRC travels as the CRC value's little-endian bytes (as Linux siw
//! sends it and Wireshark checks it).

mod ddp;
mod framer;
pub mod marker;
mod mpa;

pub use ddp::{Ctrl, DdpHeader, Opcode, ReadRequest, TermLayer, TermLayout, Terminate};
pub use framer::{Event, FpduFramer, emit_fpdu, emit_fpdu_with, fpdu_len, mulpdu};
pub use mpa::{IrdOrd, MpaFrame, MpaKind};

/// What a peer's bytes can be wrong about, with the Terminate it earns
/// (RFC 5040 §7.2 layer, error type and code) where one is due.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    #[error("not an MPA Request or Reply frame key")]
    BadKey,
    #[error("MPA revision {0} is not supported")]
    BadRevision(u8),
    #[error("MPA private data of {0} bytes is longer than 512")]
    PrivateDataTooLong(u16),
    #[error("an enhanced (revision 2) frame without its IRD/ORD words")]
    NoIrdOrd,
    #[error("FPDU CRC does not match")]
    BadCrc,
    #[error("DDP version {version} is not 1")]
    BadDdpVersion { tagged: bool, version: u8 },
    #[error("RDMAP version {0} is not 1")]
    BadRdmapVersion(u8),
    #[error("RDMAP opcode {0:#x} is not one of RFC 5040's")]
    BadOpcode(u8),
    #[error("a ULPDU of {len} bytes is shorter than the {need}-byte header of its opcode")]
    ShortUlpdu { len: u16, need: u16 },
    #[error("Terminate header is malformed")]
    BadTerminate,
    #[error("an MPA marker does not point at its FPDU")]
    MarkerMismatch,
}

impl WireError {
    /// The Terminate this error calls for, as (layer, error type, code).
    pub fn terminate(&self) -> Option<(TermLayer, u8, u8)> {
        use TermLayer::*;
        Some(match self {
            // MPA errors before setup completes are answered with a Reject
            // or a close, not a Terminate.
            WireError::BadKey | WireError::BadRevision(_) | WireError::NoIrdOrd => return None,
            WireError::PrivateDataTooLong(_) => return None,
            WireError::BadCrc => (Llp, 0, 2),
            WireError::BadDdpVersion { tagged: true, .. } => (Ddp, 1, 4),
            WireError::BadDdpVersion { tagged: false, .. } => (Ddp, 2, 6),
            WireError::BadRdmapVersion(_) => (Rdmap, 2, 5),
            WireError::BadOpcode(_) => (Rdmap, 2, 6),
            // Neither RFC has a code for a segment too short for its own
            // header: RDMAP's "unspecified".
            WireError::ShortUlpdu { .. } => (Rdmap, 2, 0xff),
            WireError::BadTerminate => (Rdmap, 2, 6),
            WireError::MarkerMismatch => (Llp, 0, 3),
        })
    }
}

/// CRC32C (Castagnoli) of `data` continued from `crc`, as MPA computes it.
pub fn crc32c_append(crc: u32, data: &[u8]) -> u32 {
    crc32c::crc32c_append(crc, data)
}

pub(crate) fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

pub(crate) fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

pub(crate) fn be64(b: &[u8], at: usize) -> u64 {
    (u64::from(be32(b, at)) << 32) | u64::from(be32(b, at + 4))
}
