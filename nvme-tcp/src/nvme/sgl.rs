//! SGL descriptors as NVMe/TCP uses them (NVMe over Fabrics, "SGL Descriptor Types").

use crate::bytes::{get_u32, get_u64, put_u32, put_u64};

/// The kinds of SGL descriptor a TCP capsule can carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SglType {
    /// Data Block, Offset subtype (0x01): in-capsule data at `addr` bytes
    /// past the start of the capsule's data (ICDOFF is 0 on TCP).
    InCapsule,
    /// Transport SGL Data Block, transport-specific subtype (0x5A): the data
    /// moves in C2HData / R2T+H2CData PDUs; `addr` is 0.
    Transport,
    /// Keyed SGL Data Block (0x4x): RDMA only, never valid on TCP.
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

    /// In-capsule data of `len` bytes at offset 0 of the capsule data.
    pub fn in_capsule(len: u32) -> Self {
        Self { addr: 0, len, rsvd: [0; 3], id: Self::ID_IN_CAPSULE }
    }

    /// Data transferred by the transport (C2HData, or R2T + H2CData).
    pub fn transport(len: u32) -> Self {
        Self { addr: 0, len, rsvd: [0; 3], id: Self::ID_TRANSPORT }
    }

    pub fn kind(&self) -> SglType {
        match self.id {
            Self::ID_IN_CAPSULE => SglType::InCapsule,
            Self::ID_TRANSPORT => SglType::Transport,
            id if id >> 4 == 0x4 => SglType::Keyed,
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
