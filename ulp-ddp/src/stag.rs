//! Tagged buffers: the RDMA half of the contract, beside the CID mappings.
//!
//! An STag names a registered buffer that a peer addresses by tagged
//! offset (RFC 5040 §2.4, RFC 5041 §3). The ULP owns the STag table and
//! chooses the STags, as it chooses CIDs; the device keeps a copy of each
//! mapping it was given, so that it can place tagged data and free an STag
//! that a peer closes before the ULP sees the message. Every mapping the
//! device holds is a hint the ULP can check against its own table.

use crate::Sgl;

/// A steering tag: a 24-bit index and an 8-bit key, `index << 8 | key`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Stag(pub u32);

impl Stag {
    pub fn new(index: u32, key: u8) -> Self {
        Self((index << 8) | u32::from(key))
    }

    pub fn index(self) -> u32 {
        self.0 >> 8
    }

    pub fn key(self) -> u8 {
        self.0 as u8
    }

    /// The same index with the next key (Linux `ib_inc_rkey`).
    pub fn next_key(self) -> Self {
        Self::new(self.index(), self.key().wrapping_add(1))
    }
}

impl std::fmt::Display for Stag {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:#010x}", self.0)
    }
}

/// Access rights of a registered buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub struct Access(u8);

impl Access {
    pub const LOCAL_WRITE: Access = Access(1);
    pub const REMOTE_READ: Access = Access(2);
    pub const REMOTE_WRITE: Access = Access(4);

    pub fn contains(self, other: Access) -> bool {
        self.0 & other.0 == other.0
    }

    pub const fn union(self, other: Access) -> Access {
        Access(self.0 | other.0)
    }
}

impl std::ops::BitOr for Access {
    type Output = Access;
    fn bitor(self, o: Access) -> Access {
        Access(self.0 | o.0)
    }
}

/// A tagged-buffer mapping: tagged offsets `[base, base + len)` of `stag`
/// are the bytes of `sgl`, in order.
#[derive(Debug, Clone)]
pub struct StagIo {
    pub stag: Stag,
    pub sgl: Sgl,
    /// The tagged offset of the first byte.
    pub base: u64,
    pub access: Access,
}

impl StagIo {
    /// Bytes the mapping covers.
    pub fn len(&self) -> u64 {
        self.sgl.iter().map(|e| e.len as u64).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
