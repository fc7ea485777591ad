//! The NIC's data movement: copy received data into place and run the data
//! digest over it.
//!
//! Two ways to do it, both measured by `benches/codec.rs`: a fused pass
//! that copies and digests a block at a time while the block is in L1, and
//! a copy followed by a digest. The NIC uses the second. By the time a
//! segment's payload is placed, the checksum check has just read it into
//! cache, so the fused pass saves no memory traffic; and CRC32C runs
//! fastest over long runs (the `crc32c` crate interleaves three 8 KiB
//! stripes), which 4 KiB blocks cut short. On a 2-vCPU Xeon the fused pass
//! is 5-10% slower per jumbo segment, and a few percent end to end.

use crc32c::crc32c_append;

/// Bytes copied before their CRC is taken, while they are still in L1.
const BLOCK: usize = 4096;

/// Copy `src` into `dst` and continue `crc` over the bytes, block by block,
/// so each byte is read from memory once. Returns the new CRC.
#[inline]
pub fn copy_and_crc(dst: &mut [u8], src: &[u8], mut crc: u32) -> u32 {
    for (d, s) in dst.chunks_mut(BLOCK).zip(src.chunks(BLOCK)) {
        d.copy_from_slice(s);
        crc = crc32c_append(crc, d);
    }
    crc
}

/// Copy everything, then CRC it: what the NIC does.
#[inline]
pub fn copy_then_crc(dst: &mut [u8], src: &[u8], crc: u32) -> u32 {
    dst.copy_from_slice(src);
    crc32c_append(crc, dst)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_ways_agree() {
        let src: Vec<u8> = (0..100_000u32).map(|i| (i * 7) as u8).collect();
        let (mut a, mut b) = (vec![0u8; src.len()], vec![0u8; src.len()]);
        assert_eq!(copy_and_crc(&mut a, &src, 5), copy_then_crc(&mut b, &src, 5));
        assert_eq!(a, src);
        assert_eq!(b, src);
    }
}
