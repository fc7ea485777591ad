//! The NIC's data movement: copy received data into place and run the data
//! digest over it, with the NIC's CRC32C engine.
//!
//! The engine is `crc-fast`'s CRC-32/ISCSI, which folds 64 bytes a step
//! with carry-less multiplies (VPCLMULQDQ where the CPU has it): about four
//! times the rate of the host's software digest (the `crc32c` crate, the
//! three-way `crc32q` loop Linux's `crc32c-intel` runs) on a jumbo segment.
//! A NIC digests at line rate beside its DMA; the model pays what software
//! must, but no more than the fastest software can. The host side keeps the
//! algorithm its peers run, so what an offload saves the host is measured
//! against what Linux would spend.
//!
//! Two ways to move and digest, both measured by `benches/codec.rs`: a
//! fused pass that copies and digests a block at a time while the block is
//! in L1, and a copy followed by a digest. The NIC uses the second. By the
//! time a segment's payload is placed, the checksum check has just read it
//! into cache, so the fused pass saves no memory traffic, and the digest
//! runs fastest over long runs, which blocks cut short.

use crc_fast::{CrcAlgorithm, Digest};

/// Bytes copied before their CRC is taken, while they are still in L1.
const BLOCK: usize = 4096;

/// CRC32C of `bytes` continued from `crc`, the CRC of what came before
/// (0 for nothing), as `crc32c::crc32c_append` takes and gives it.
#[inline]
pub fn crc32c_append(crc: u32, bytes: &[u8]) -> u32 {
    // The engine's state is the CRC before its final inversion.
    let mut d = Digest::new_with_init_state(CrcAlgorithm::Crc32Iscsi, u64::from(!crc));
    d.update(bytes);
    d.finalize() as u32
}

/// CRC32C of `bytes`.
#[inline]
pub fn crc32c(bytes: &[u8]) -> u32 {
    crc32c_append(0, bytes)
}

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

/// Start fetching `bytes` into the cache, as a DMA engine queues reads
/// of what a mapping holds next while it works on the frame at hand. A
/// NIC's reads of host memory overlap; the model's copy is a core's, which
/// would otherwise wait out each miss in turn, and a gather from memory no
/// cache holds (a namespace larger than the last level) would cost it
/// memory latency where a NIC pays only bandwidth.
#[inline]
pub fn read_ahead(bytes: &[u8]) {
    #[cfg(target_arch = "x86_64")]
    {
        use core::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
        // A byte of each line: every 64th from the first, and the last,
        // whose line the stride can step over when `bytes` starts
        // part-way into one.
        let lines = bytes.iter().step_by(64).chain(bytes.last());
        for byte in lines {
            // SAFETY: a prefetch is only a hint; it reads nothing and
            // cannot fault, and the address is inside `bytes`.
            unsafe { _mm_prefetch::<_MM_HINT_T0>(std::ptr::from_ref(byte).cast()) };
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = bytes;
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

    #[test]
    fn the_engine_is_the_hosts_crc32c() {
        let src: Vec<u8> = (0..20_000u32).map(|i| (i * 31 + 7) as u8).collect();
        for len in [0, 1, 4, 24, 63, 64, 65, 511, 4096, 8960, 20_000] {
            let b = &src[..len];
            assert_eq!(crc32c(b), ::crc32c::crc32c(b), "{len} bytes");
            for cut in [0, len / 3, len] {
                let head = crc32c(&b[..cut]);
                assert_eq!(crc32c_append(head, &b[cut..]), ::crc32c::crc32c(b));
            }
        }
    }
}
