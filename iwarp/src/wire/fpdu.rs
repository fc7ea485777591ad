//! The MPA FPDU (RFC 5044 §7.2): ULPDU_Length, the ULPDU (one DDP
//! segment), PAD to a 4-byte boundary, and the CRC32C trailer over all of
//! it, as a view and a repr; and building FPDUs on transmit.
//!
//! This knows an FPDU laid out whole, without markers: the stream with
//! markers in it is [`super::marker`]'s, and taking FPDUs apart as TCP
//! delivers them is [`super::FpduFramer`]'s. Nothing here allocates beyond
//! the caller's output buffer, and nothing panics on a peer's bytes.

use super::{DdpHeader, Field, WireError, crc32c_append};

mod field {
    use super::Field;

    pub const ULPDU_LENGTH: Field = 0..2;
    /// Where the ULPDU starts; ULPDU_Length bytes of it.
    pub const ULPDU: usize = 2;
}

/// ULPDU_Length's bytes.
pub(super) const LEN: usize = field::ULPDU_LENGTH.end;
/// The CRC trailer's bytes.
pub(super) const CRC: usize = 4;

/// PAD bytes after a ULPDU of `ulpdu` bytes: the FPDU's length field,
/// ULPDU and PAD end on a 4-byte boundary.
/// PAD after a ULPDU of `ulpdu` bytes: the FPDU ends on a 4-byte boundary.
pub fn pad(ulpdu: usize) -> usize {
    (4 - (LEN + ulpdu) % 4) % 4
}

/// Bytes on the wire of an FPDU carrying a `ulpdu`-byte ULPDU.
pub fn fpdu_len(ulpdu: usize) -> usize {
    LEN + ulpdu + pad(ulpdu) + CRC
}

/// The largest ULPDU an FPDU may carry in one TCP segment of `emss` bytes,
/// without markers (RFC 5044 §8.1.2): what is left after the length, CRC
/// and alignment.
pub fn mulpdu(emss: usize) -> usize {
    emss.saturating_sub(6 + emss % 4)
}

view!(
    /// A read/write view of an FPDU without markers: at least the whole
    /// FPDU its ULPDU_Length describes, CRC trailer included.
    FpduPacket
);

be_fields!(FpduPacket {
    /// ULPDU_Length: the ULPDU's bytes, not the length field's, PAD's,
    /// markers' or the CRC's.
    ulpdu_length, set_ulpdu_length: u16 = field::ULPDU_LENGTH;
});

impl<T: AsRef<[u8]>> FpduPacket<T> {
    /// The buffer holds the length field and all the FPDU it announces.
    pub fn check_len(&self) -> Result<(), WireError> {
        let b = self.buffer.as_ref();
        if b.len() < LEN || b.len() < fpdu_len(usize::from(self.ulpdu_length())) {
            return Err(WireError::Truncated);
        }
        Ok(())
    }

    fn ulpdu_range(&self) -> Field {
        field::ULPDU..field::ULPDU + usize::from(self.ulpdu_length())
    }

    /// Where the CRC trailer starts: the bytes before it are what it covers.
    fn crc_at(&self) -> usize {
        let n = usize::from(self.ulpdu_length());
        LEN + n + pad(n)
    }

    /// The ULPDU: one DDP segment, header first.
    pub fn ulpdu(&self) -> &[u8] {
        &self.buffer.as_ref()[self.ulpdu_range()]
    }

    pub fn pad(&self) -> &[u8] {
        &self.buffer.as_ref()[self.ulpdu_range().end..self.crc_at()]
    }

    /// The CRC trailer, read as the little-endian bytes siw sends.
    pub fn crc(&self) -> u32 {
        let at = self.crc_at();
        let mut v = [0; CRC];
        v.copy_from_slice(&self.buffer.as_ref()[at..at + CRC]);
        u32::from_le_bytes(v)
    }

    /// CRC32C over the length field, ULPDU and PAD.
    pub fn compute_crc(&self) -> u32 {
        crc32c_append(0, &self.buffer.as_ref()[..self.crc_at()])
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> FpduPacket<T> {
    pub fn ulpdu_mut(&mut self) -> &mut [u8] {
        let r = self.ulpdu_range();
        &mut self.buffer.as_mut()[r]
    }

    pub fn pad_mut(&mut self) -> &mut [u8] {
        let (from, to) = (self.ulpdu_range().end, self.crc_at());
        &mut self.buffer.as_mut()[from..to]
    }

    pub fn set_crc(&mut self, v: u32) {
        let at = self.crc_at();
        self.buffer.as_mut()[at..at + CRC].copy_from_slice(&v.to_le_bytes());
    }

    /// Compute the CRC over everything before the trailer and store it.
    pub fn fill_crc(&mut self) {
        let v = self.compute_crc();
        self.set_crc(v);
    }
}

/// What an FPDU's framing says: how long its ULPDU is. Whether the CRC
/// is checked or sent is the connection's (negotiated at setup), so it
/// is given to `parse` and `emit`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FpduRepr {
    pub ulpdu_len: u16,
}

impl FpduRepr {
    /// The framing of a whole FPDU; with `crc`, its trailer must match.
    pub fn parse<T: AsRef<[u8]>>(p: &FpduPacket<T>, crc: bool) -> Result<Self, WireError> {
        p.check_len()?;
        if crc && p.crc() != p.compute_crc() {
            return Err(WireError::BadCrc);
        }
        Ok(Self { ulpdu_len: p.ulpdu_length() })
    }

    pub fn buffer_len(&self) -> usize {
        fpdu_len(usize::from(self.ulpdu_len))
    }

    /// Write the length field, zero PAD and the trailer around a ULPDU
    /// already in place: the CRC32C when `crc`, zeros otherwise.
    ///
    /// # Panics
    /// If the buffer is shorter than `buffer_len()`.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut FpduPacket<T>, crc: bool) {
        p.set_ulpdu_length(self.ulpdu_len);
        p.pad_mut().fill(0);
        if crc { p.fill_crc() } else { p.set_crc(0) }
    }
}

/// Append the FPDU of `header` and `payload` to `out`: length, ULPDU, PAD,
/// and the CRC32C (little-endian bytes, as siw sends it) when `crc`, zeros
/// otherwise.
pub fn emit_fpdu(header: &DdpHeader, payload: &[u8], crc: bool, out: &mut Vec<u8>) {
    let fill = |out: &mut Vec<u8>| {
        out.extend_from_slice(payload);
        Ok::<_, std::convert::Infallible>(())
    };
    let Ok(()) = emit_fpdu_with(header, payload.len(), crc, out, fill);
}

/// [`emit_fpdu`] with the `payload_len` payload bytes appended by `fill`
/// straight into `out`. If `fill` fails, `out` is left as it was.
pub fn emit_fpdu_with<E>(
    header: &DdpHeader,
    payload_len: usize,
    crc: bool,
    out: &mut Vec<u8>,
    fill: impl FnOnce(&mut Vec<u8>) -> Result<(), E>,
) -> Result<(), E> {
    let start = out.len();
    let ulpdu = header.buffer_len() + payload_len;
    debug_assert!(ulpdu <= usize::from(u16::MAX), "a ULPDU of {ulpdu} bytes");
    let repr = FpduRepr { ulpdu_len: ulpdu as u16 };
    let at = start + field::ULPDU;
    out.resize(at + header.buffer_len(), 0);
    header.emit(&mut out[at..]);
    if let Err(e) = fill(out) {
        out.truncate(start);
        return Err(e);
    }
    debug_assert_eq!(out.len() - start, LEN + ulpdu, "fill wrote the payload length");
    out.resize(start + repr.buffer_len(), 0);
    repr.emit(&mut FpduPacket::new_unchecked(&mut out[start..]), crc);
    Ok(())
}
