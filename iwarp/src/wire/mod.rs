//! iWARP on the wire. Every MPA, DDP and RDMAP integer is big-endian; the
//! MPA CRC travels as the CRC value's little-endian bytes (as Linux siw
//! sends it and Wireshark checks it).
//!
//! Each header is a typed view over a byte buffer, `XPacket<T:
//! AsRef<[u8]>>`, with its field offsets in a private `field` module:
//! `new_checked` validates the length once, after which no accessor
//! panics, and setters exist only where `T: AsMut<[u8]>`. What a header
//! means is its repr: `parse(&XPacket) -> Result<Repr>`, `buffer_len()`,
//! and `emit` into a buffer the caller sized.
//!
//! | header | view | repr |
//! |---|---|---|
//! | MPA Request/Reply frame (RFC 5044 §7.1) | [`MpaPacket`] | [`MpaFrame`] |
//! | IRD/ORD words (RFC 6581 §7.1) | [`IrdOrdPacket`] | [`IrdOrd`] |
//! | FPDU: ULPDU_Length, PAD, CRC (RFC 5044 §7.2) | [`FpduPacket`] | [`FpduRepr`] |
//! | DDP and RDMAP control bytes | [`CtrlPacket`] | [`Ctrl`] |
//! | DDP tagged / untagged header (RFC 5041 §4) | [`TaggedPacket`], [`UntaggedPacket`] | [`DdpHeader`] |
//! | RDMA Read Request (RFC 5040 §4.4) | [`ReadRequestPacket`] | [`ReadRequest`] |
//! | Terminate (RFC 5040 §4.8) | [`TerminatePacket`] | [`Terminate`] |
//!
//! [`FpduFramer`] takes FPDUs apart from a byte stream; [`marker`] puts
//! MPA markers in and takes them out.
//!
//! Nothing here may panic on a peer's bytes: malformed input is a
//! [`WireError`]. Nothing on the per-FPDU path allocates.

/// A view over a header's bytes: the struct, `new_unchecked`,
/// `new_checked` (which runs the view's own `check_len`) and `into_inner`.
macro_rules! view {
    ($(#[$m:meta])* $name:ident) => {
        $(#[$m])*
        #[derive(Debug, Clone, PartialEq, Eq)]
        pub struct $name<T: AsRef<[u8]>> {
            buffer: T,
        }

        impl<T: AsRef<[u8]>> $name<T> {
            pub const fn new_unchecked(buffer: T) -> Self {
                Self { buffer }
            }

            /// A view whose accessors cannot panic (see `check_len`).
            pub fn new_checked(buffer: T) -> Result<Self, $crate::wire::WireError> {
                let p = Self::new_unchecked(buffer);
                p.check_len()?;
                Ok(p)
            }

            pub fn into_inner(self) -> T {
                self.buffer
            }
        }
    };
}

/// A view's big-endian integer fields: a getter each, and a setter where
/// the buffer is writable.
macro_rules! be_fields {
    ($name:ident { $($(#[$m:meta])* $get:ident, $set:ident: $ty:ty = $field:expr;)* }) => {
        impl<T: AsRef<[u8]>> $name<T> {
            $(
                $(#[$m])*
                pub fn $get(&self) -> $ty {
                    <$ty>::from_be_bytes($crate::wire::get(self.buffer.as_ref(), $field))
                }
            )*
        }

        impl<T: AsRef<[u8]> + AsMut<[u8]>> $name<T> {
            $(
                pub fn $set(&mut self, v: $ty) {
                    self.buffer.as_mut()[$field].copy_from_slice(&v.to_be_bytes());
                }
            )*
        }
    };
}

/// A view's one-bit flags: `(byte, mask)`.
macro_rules! bit_fields {
    ($name:ident { $($(#[$m:meta])* $get:ident, $set:ident = $at:expr, $bit:expr;)* }) => {
        impl<T: AsRef<[u8]>> $name<T> {
            $(
                $(#[$m])*
                pub fn $get(&self) -> bool {
                    self.buffer.as_ref()[$at] & $bit != 0
                }
            )*
        }

        impl<T: AsRef<[u8]> + AsMut<[u8]>> $name<T> {
            $(
                pub fn $set(&mut self, on: bool) {
                    let b = &mut self.buffer.as_mut()[$at];
                    *b = if on { *b | $bit } else { *b & !$bit };
                }
            )*
        }
    };
}

mod ddp;
mod fpdu;
mod framer;
pub mod marker;
mod mpa;
mod rdmap;
#[cfg(test)]
mod tests;

pub use ddp::{Ctrl, CtrlPacket, DdpHeader, Opcode, TaggedPacket, UntaggedPacket};
pub use fpdu::{
    FpduPacket, FpduRepr, emit_fpdu, emit_fpdu_with, fpdu_len, mulpdu, pad as fpdu_pad,
};
pub use framer::{Event, FpduFramer};
pub use mpa::{IrdOrd, IrdOrdPacket, MpaFrame, MpaKind, MpaPacket};
pub use rdmap::{
    ReadRequest, ReadRequestPacket, TermLayer, TermLayout, Terminate, TerminatePacket,
};

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
    /// A buffer handed to a view ends before the header it should hold
    /// does (the framer never hands one over: a caller's error).
    #[error("buffer shorter than its header")]
    Truncated,
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
            WireError::ShortUlpdu { .. } | WireError::Truncated => (Rdmap, 2, 0xff),
            WireError::BadTerminate => (Rdmap, 2, 6),
            WireError::MarkerMismatch => (Llp, 0, 3),
        })
    }
}

/// CRC32C (Castagnoli) of `data` continued from `crc`, as MPA computes it.
pub fn crc32c_append(crc: u32, data: &[u8]) -> u32 {
    crc32c::crc32c_append(crc, data)
}

/// Append `len` bytes to `out` and have `emit` write them: a repr's
/// `emit` for a caller that keeps its output in a `Vec`. No allocation
/// once `out` has the room.
pub fn append_with(out: &mut Vec<u8>, len: usize, emit: impl FnOnce(&mut [u8])) {
    let start = out.len();
    out.resize(start + len, 0);
    emit(&mut out[start..]);
}

/// A header field: its byte range.
type Field = core::ops::Range<usize>;

/// The bytes of a field of `N` bytes. Each caller has checked the
/// buffer's length; a range of the wrong width is a bug here.
pub(crate) fn get<const N: usize>(b: &[u8], f: Field) -> [u8; N] {
    let mut a = [0; N];
    a.copy_from_slice(&b[f]);
    a
}
