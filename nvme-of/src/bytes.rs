//! Little-endian field access for the fixed-layout structures of NVMe and NVMe/TCP.
//!
//! Every caller has checked the buffer length first, so these index directly;
//! they exist so that no codec does its own shifting and masking.

#[inline]
pub fn get_u16(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

#[inline]
pub fn get_u32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

#[inline]
pub fn get_u64(b: &[u8], at: usize) -> u64 {
    u64::from(get_u32(b, at)) | (u64::from(get_u32(b, at + 4)) << 32)
}

#[inline]
pub fn put_u16(b: &mut [u8], at: usize, v: u16) {
    b[at..at + 2].copy_from_slice(&v.to_le_bytes());
}

#[inline]
pub fn put_u32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_le_bytes());
}

#[inline]
pub fn put_u64(b: &mut [u8], at: usize, v: u64) {
    b[at..at + 8].copy_from_slice(&v.to_le_bytes());
}

/// Copy `s` into a fixed, NUL-padded field (NQNs and the like), truncating if needed.
pub fn put_str(b: &mut [u8], s: &str) {
    let n = s.len().min(b.len());
    b[..n].copy_from_slice(&s.as_bytes()[..n]);
    b[n..].fill(0);
}

/// Read a NUL-padded field as text; stops at the first NUL and replaces invalid UTF-8.
pub fn get_str(b: &[u8]) -> String {
    let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
    String::from_utf8_lossy(&b[..end]).into_owned()
}

/// Copy `s` into a space-padded ASCII field (serial number, model, firmware revision).
pub fn put_ascii(b: &mut [u8], s: &str) {
    b.fill(b' ');
    let n = s.len().min(b.len());
    b[..n].copy_from_slice(&s.as_bytes()[..n]);
}

/// Read a space- or NUL-padded ASCII field, trimmed.
pub fn get_ascii(b: &[u8]) -> String {
    get_str(b).trim_end().to_string()
}
