//! MPA markers (RFC 5044 §5.2, §7.1): four bytes every 512 octets of one
//! direction's stream, counted from the first octet after the Request or
//! Reply, so the first FPDU starts behind one. A marker holds FPDUPTR, how
//! far back the FPDU it sits in starts (0 when it precedes one), and lets
//! a receiver that lost its place find the next FPDU without guessing.
//!
//! Markers are sent only to a receiver that set M in its own frame; each
//! direction is negotiated on its own. A marker inside an FPDU (anywhere
//! after the length field, up to the CRC) is covered by its CRC; the one
//! in front of an FPDU is not. Linux siw never sends or asks for them.

use super::crc32c_append;

/// Octets from one marker to the next.
pub const INTERVAL: u64 = 512;
/// A marker: 16 reserved bits, then FPDUPTR.
pub const LEN: usize = 4;
const CRC: usize = 4;

/// Where one direction's markers go: every [`INTERVAL`] octets from
/// `origin`, the stream offset of the first FPDU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Markers {
    pub origin: u64,
}

impl Markers {
    /// How far `pos` is past the last marker position: below [`LEN`] it
    /// is inside a marker, at that byte.
    pub fn phase(&self, pos: u64) -> usize {
        (pos.wrapping_sub(self.origin) % INTERVAL) as usize
    }

    /// Octets from `pos` (not inside a marker) to the next marker.
    pub fn until_next(&self, pos: u64) -> usize {
        INTERVAL as usize - self.phase(pos)
    }

    /// Marker octets in the stream range `[pos, pos + n)`.
    pub fn octets_in(&self, pos: u64, n: u64) -> u64 {
        let (mut at, end, mut count) = (pos, pos + n, 0);
        while at < end {
            let ph = self.phase(at) as u64;
            if ph < LEN as u64 {
                let k = (LEN as u64 - ph).min(end - at);
                count += k;
                at += k;
            } else {
                at += INTERVAL - ph;
            }
        }
        count
    }
}

/// The marker's FPDUPTR (its low two bits read as zero).
pub fn fpduptr(marker: [u8; LEN]) -> u16 {
    u16::from_be_bytes([marker[2], marker[3]]) & !3
}

/// The largest ULPDU an FPDU may carry in one TCP segment of `emss` bytes
/// when markers go into it (RFC 5044 §8.1.2).
pub fn mulpdu(emss: usize) -> usize {
    emss.saturating_sub(6 + LEN * emss.div_ceil(INTERVAL as usize) + emss % 4)
}

/// Append `fpdu`, built without markers (its CRC trailer last), to `out`
/// with markers where they fall, as it goes on the wire at stream offset
/// `at`; its CRC, over everything from the length field up to the trailer
/// markers included, is written when `crc`, zeros are left otherwise.
pub fn append(out: &mut Vec<u8>, fpdu: &[u8], at: u64, m: Markers, crc: bool) {
    let body = &fpdu[..fpdu.len() - CRC];
    out.reserve(fpdu.len() + LEN * (fpdu.len() / INTERVAL as usize + 2));
    let (mut pos, mut head, mut covered, mut i) = (at, None, out.len(), 0);
    loop {
        if m.phase(pos) == 0 {
            // A marker in front of the FPDU points at it; one inside points
            // back to its length field.
            let ptr = head.map_or(0, |h| pos - h);
            debug_assert!(ptr <= u64::from(u16::MAX), "an FPDU longer than FPDUPTR reaches");
            out.extend_from_slice(&[0, 0]);
            out.extend_from_slice(&(ptr as u16).to_be_bytes());
            pos += LEN as u64;
        }
        if head.is_none() {
            head = Some(pos);
            covered = out.len();
        }
        if i == body.len() {
            break;
        }
        let k = (body.len() - i).min(m.until_next(pos));
        out.extend_from_slice(&body[i..i + k]);
        (i, pos) = (i + k, pos + k as u64);
    }
    let sum = if crc { crc32c_append(0, &out[covered..]) } else { 0 };
    out.extend_from_slice(&sum.to_le_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn phase_and_octets() {
        let m = Markers { origin: 100 };
        assert_eq!(m.phase(100), 0);
        assert_eq!(m.phase(103), 3);
        assert_eq!(m.until_next(104), 508);
        assert_eq!(m.octets_in(100, 4), 4);
        assert_eq!(m.octets_in(102, 512), 4, "two of one marker, two of the next");
        assert_eq!(m.octets_in(104, 508), 0);
        assert_eq!(m.octets_in(100, 1536), 12);
    }

    #[test]
    fn mulpdu_leaves_room_for_markers() {
        // 1448 bytes hold three markers at most.
        assert_eq!(mulpdu(1448), 1448 - 6 - 12);
        assert_eq!(mulpdu(8948), 8948 - 6 - 4 * 18);
    }

    #[test]
    fn markers_land_every_512_octets_and_point_back() {
        // A 1000-byte body (length field first) and its CRC, sent at an
        // offset 8 bytes short of a marker.
        let body: Vec<u8> = (0..1000u32).map(|i| (i % 251) as u8).collect();
        let m = Markers { origin: 0 };
        let mut out = vec![0xee; 3];
        let mut fpdu = body.clone();
        fpdu.extend_from_slice(&[0; 4]);
        append(&mut out, &fpdu, 504, m, true);
        let wire = &out[3..];
        assert_eq!(wire.len(), 1000 + 4 + 4 * 2, "markers at 512 and 1024");
        assert_eq!(&wire[..8], &body[..8]);
        assert_eq!(fpduptr(wire[8..12].try_into().unwrap()), 8);
        assert_eq!(&wire[12..520], &body[8..516]);
        assert_eq!(fpduptr(wire[520..524].try_into().unwrap()), 520);
        // The CRC covers both markers.
        let n = wire.len();
        assert_eq!(wire[n - 4..], crc32c::crc32c(&wire[..n - 4]).to_le_bytes());
        // Starting right at a marker: it precedes the FPDU and the CRC
        // leaves it out.
        let mut out = Vec::new();
        append(&mut out, &fpdu, 512, m, true);
        assert_eq!(&out[..4], &[0, 0, 0, 0]);
        assert_eq!(fpduptr(out[512..516].try_into().unwrap()), 508);
        let n = out.len();
        assert_eq!(out[n - 4..], crc32c::crc32c(&out[4..n - 4]).to_le_bytes());
    }
}
