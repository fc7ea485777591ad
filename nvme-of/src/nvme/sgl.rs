//! SGL descriptors as the Fabrics transports use them (NVMe over Fabrics,
//! "SGL Descriptor Types"; the RDMA binding for the keyed ones).

use crate::bytes::{get_u32, get_u64, put_u32, put_u64};

/// The kinds of SGL descriptor a capsule can carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SglType {
    /// Data Block, Offset subtype (0x01): in-capsule data at `addr` bytes
    /// past the start of the capsule's data (ICDOFF is 0 on TCP).
    InCapsule,
    /// Transport SGL Data Block, transport-specific subtype (0x5A): the data
    /// moves in C2HData / R2T+H2CData PDUs; `addr` is 0.
    Transport,
    /// Keyed SGL Data Block, Address (0x40) or Address with Invalidate
    /// (0x4F): RDMA only, never valid on TCP.
    Keyed,
    /// Anything else (segments, bit buckets, reserved types).
    Other(u8),
}

/// A 16-byte SGL descriptor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SglDescriptor {
    pub addr: u64,
    pub len: u32,
    /// Bytes 12..15: reserved on data blocks, the key's top bytes on keyed ones.
    pub rsvd: [u8; 3],
    /// SGL identifier: type in bits 7:4, subtype in bits 3:0.
    pub id: u8,
}

impl SglDescriptor {
    pub const LEN: usize = 16;
    pub const ID_IN_CAPSULE: u8 = 0x01;
    pub const ID_TRANSPORT: u8 = 0x5a;
    pub const ID_KEYED: u8 = 0x40;
    /// Keyed, and the host asks for the response by Send with Invalidate.
    pub const ID_KEYED_INVALIDATE: u8 = 0x4f;

    /// In-capsule data of `len` bytes at offset 0 of the capsule data.
    pub fn in_capsule(len: u32) -> Self {
        Self { addr: 0, len, rsvd: [0; 3], id: Self::ID_IN_CAPSULE }
    }

    /// Data transferred by the transport (C2HData, or R2T + H2CData).
    pub fn transport(len: u32) -> Self {
        Self { addr: 0, len, rsvd: [0; 3], id: Self::ID_TRANSPORT }
    }

    /// A keyed data block: `len` (24 bits) bytes of the host's memory at
    /// `addr` under `key`.
    pub fn keyed(addr: u64, len: u32, key: u32, invalidate: bool) -> Self {
        let k = key.to_le_bytes();
        let id = if invalidate { Self::ID_KEYED_INVALIDATE } else { Self::ID_KEYED };
        Self {
            addr,
            len: (len & 0xff_ffff) | (u32::from(k[0]) << 24),
            rsvd: [k[1], k[2], k[3]],
            id,
        }
    }

    /// The bytes a descriptor describes: 24 bits on keyed ones.
    pub fn data_len(&self) -> u32 {
        if self.kind() == SglType::Keyed { self.len & 0xff_ffff } else { self.len }
    }

    /// The key of a keyed data block (bytes 11..15).
    pub fn key(&self) -> u32 {
        u32::from_le_bytes([(self.len >> 24) as u8, self.rsvd[0], self.rsvd[1], self.rsvd[2]])
    }

    /// A keyed data block whose key the response should invalidate.
    pub fn invalidate(&self) -> bool {
        self.id == Self::ID_KEYED_INVALIDATE
    }

    pub fn kind(&self) -> SglType {
        match self.id {
            Self::ID_IN_CAPSULE => SglType::InCapsule,
            Self::ID_TRANSPORT => SglType::Transport,
            Self::ID_KEYED | Self::ID_KEYED_INVALIDATE => SglType::Keyed,
            id => SglType::Other(id),
        }
    }

    pub fn parse(b: &[u8; 16]) -> Self {
        Self { addr: get_u64(b, 0), len: get_u32(b, 8), rsvd: [b[12], b[13], b[14]], id: b[15] }
    }

    pub fn emit(&self, b: &mut [u8; 16]) {
        put_u64(b, 0, self.addr);
        put_u32(b, 8, self.len);
        b[12..15].copy_from_slice(&self.rsvd);
        b[15] = self.id;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keyed_descriptors_are_laid_out_as_linux_sends_them() {
        // From a Linux host's Connect: STag 0x7fe79101, 1024 bytes, 0x4F.
        let raw: [u8; 16] = [
            0x00, 0xa0, 0x90, 0x42, 0x41, 0xf6, 0x2a, 0xff, 0x00, 0x04, 0x00, 0x01, 0x91, 0xe7,
            0x7f, 0x4f,
        ];
        let d = SglDescriptor::parse(&raw);
        assert_eq!(d.kind(), SglType::Keyed);
        assert_eq!((d.addr, d.data_len(), d.key()), (0xff2a_f641_4290_a000, 1024, 0x7fe7_9101));
        assert!(d.invalidate());
        let mut out = [0u8; 16];
        SglDescriptor::keyed(d.addr, 1024, 0x7fe7_9101, true).emit(&mut out);
        assert_eq!(out, raw);
        assert_eq!(SglDescriptor { id: 0x41, ..d }.kind(), SglType::Other(0x41));
    }
}
