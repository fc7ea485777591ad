//! Protection domains and memory regions: the STag table a peer's tagged
//! operations are checked against (RFC 5040 §5.3, §6.4).
//!
//! An STag is a 24-bit index and an 8-bit key. The table keeps each
//! index's key across registrations and bumps it on every one, so an STag
//! the peer kept from an earlier registration of the same index misses.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

pub use ulp_ddp::{Access, Stag};
use ulp_ddp::{SgEntry, Sgl};

/// A protection domain: an STag serves only QPs of its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Pd(pub u32);

/// Why the table refused an access, in the words both RFC 5040 (RDMAP,
/// remote protection) and RFC 5041 (DDP, tagged buffer) have codes for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum MrError {
    #[error("no valid STag with that index and key")]
    InvalidStag,
    #[error("the range is outside the region")]
    BaseBounds,
    #[error("the region does not grant that access")]
    AccessRights,
    #[error("the STag belongs to another protection domain")]
    WrongPd,
    #[error("TO plus length wraps")]
    ToWrap,
    #[error("the region is registered already")]
    Busy,
}

impl MrError {
    /// The RDMAP remote-protection code (RFC 5040 §7.2, error type 1).
    pub fn rdmap_code(self) -> u8 {
        match self {
            MrError::InvalidStag | MrError::Busy => 0x00,
            MrError::BaseBounds => 0x01,
            MrError::AccessRights => 0x02,
            MrError::WrongPd => 0x03,
            MrError::ToWrap => 0x04,
        }
    }

    /// The DDP tagged-buffer code (RFC 5041 §7.2, error type 1). DDP has
    /// no code for missing rights; like Linux siw, call it invalid STag.
    pub fn ddp_code(self) -> u8 {
        match self {
            MrError::InvalidStag | MrError::AccessRights | MrError::Busy => 0,
            MrError::BaseBounds => 1,
            MrError::WrongPd => 2,
            MrError::ToWrap => 3,
        }
    }
}

#[derive(Debug)]
struct Region {
    pd: Pd,
    sgl: Sgl,
    /// The tagged offset of the region's first byte.
    iova: u64,
    len: u64,
    access: Access,
}

#[derive(Debug, Default)]
struct Slot {
    key: u8,
    /// The index is allocated (to a PD) whether or not it is valid.
    pd: Option<Pd>,
    region: Option<Region>,
}

#[derive(Debug, Default)]
struct Table {
    /// Index 0 is never handed out: STag 0 means "none" on the wire.
    slots: Vec<Slot>,
    free: Vec<u32>,
    next_pd: u32,
}

/// An RNIC's memory-registration state, shared by its QPs. Cloning
/// shares the table.
#[derive(Debug, Clone, Default)]
pub struct Device(Arc<Mutex<Table>>);

impl Device {
    pub fn new() -> Self {
        Self::default()
    }

    fn table(&self) -> MutexGuard<'_, Table> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub fn alloc_pd(&self) -> Pd {
        let mut t = self.table();
        t.next_pd += 1;
        Pd(t.next_pd)
    }

    /// An STag index for fast registration (`ib_alloc_mr`): allocated to
    /// `pd`, not valid until a FastReg work request registers it.
    pub fn alloc_mr(&self, pd: Pd) -> Stag {
        let mut t = self.table();
        let index = match t.free.pop() {
            Some(i) => i,
            None => {
                if t.slots.is_empty() {
                    t.slots.push(Slot::default());
                }
                t.slots.push(Slot::default());
                (t.slots.len() - 1) as u32
            }
        };
        let slot = &mut t.slots[index as usize];
        slot.pd = Some(pd);
        Stag::new(index, slot.key)
    }

    /// Register `sgl` under a new STag at once (`ib_reg_mr`).
    pub fn reg_mr(&self, pd: Pd, sgl: Sgl, iova: u64, access: Access) -> Result<Stag, MrError> {
        let index = self.alloc_mr(pd);
        let stag = index.next_key();
        self.fast_reg(pd, stag, sgl, iova, access).inspect_err(|_| {
            // Give the index back; its key never moved.
            let _ = self.dereg_mr(index);
        })?;
        Ok(stag)
    }

    /// Make `stag` (an allocated index with a new key) valid over `sgl`,
    /// as a FastReg work request does. The index must be invalid.
    pub fn fast_reg(
        &self,
        pd: Pd,
        stag: Stag,
        sgl: Sgl,
        iova: u64,
        access: Access,
    ) -> Result<(), MrError> {
        let mut t = self.table();
        let slot = t.slots.get_mut(stag.index() as usize).ok_or(MrError::InvalidStag)?;
        match slot.pd {
            None => return Err(MrError::InvalidStag),
            Some(p) if p != pd => return Err(MrError::WrongPd),
            Some(_) if slot.region.is_some() => return Err(MrError::Busy),
            Some(_) => {}
        }
        let len = sgl_len(&sgl);
        iova.checked_add(len).ok_or(MrError::ToWrap)?;
        slot.key = stag.key();
        slot.region = Some(Region { pd, sgl, iova, len, access });
        Ok(())
    }

    /// Invalidate `stag` on behalf of `pd` (Local Invalidate, or a peer's
    /// Send with Invalidate): the region's buffers are released. Returns
    /// the access it granted.
    pub fn invalidate(&self, pd: Pd, stag: Stag) -> Result<Access, MrError> {
        let mut t = self.table();
        let slot = t.slots.get_mut(stag.index() as usize).ok_or(MrError::InvalidStag)?;
        match &slot.region {
            Some(r) if slot.key == stag.key() && r.pd == pd => {
                let access = r.access;
                slot.region = None;
                Ok(access)
            }
            Some(r) if slot.key == stag.key() && r.pd != pd => Err(MrError::WrongPd),
            _ => Err(MrError::InvalidStag),
        }
    }

    /// Give the index back (`ib_dereg_mr`); its next STag has a new key.
    pub fn dereg_mr(&self, stag: Stag) -> Result<(), MrError> {
        let mut t = self.table();
        let slot = t.slots.get_mut(stag.index() as usize).ok_or(MrError::InvalidStag)?;
        if slot.pd.is_none() || slot.key != stag.key() {
            return Err(MrError::InvalidStag);
        }
        slot.pd = None;
        slot.region = None;
        t.free.push(stag.index());
        Ok(())
    }

    /// Whether `stag` names a valid region now.
    pub fn is_valid(&self, stag: Stag) -> bool {
        let t = self.table();
        t.slots
            .get(stag.index() as usize)
            .is_some_and(|s| s.key == stag.key() && s.region.is_some())
    }

    /// Check that `pd` may access `[to, to + len)` of `stag` with `right`.
    pub fn check(
        &self,
        pd: Pd,
        stag: Stag,
        to: u64,
        len: u64,
        right: Access,
    ) -> Result<(), MrError> {
        lookup(&self.table(), pd, stag, to, len, right).map(|_| ())
    }

    /// Write `bytes` at `to` of `stag` once the same check passes; no byte
    /// is written if it fails.
    pub fn write(
        &self,
        pd: Pd,
        stag: Stag,
        to: u64,
        bytes: &[u8],
        right: Access,
    ) -> Result<(), MrError> {
        let mut done = 0;
        self.pieces(pd, stag, to, bytes.len(), right, |e, off, n| {
            e.buf.lock()[off..off + n].copy_from_slice(&bytes[done..done + n]);
            done += n;
        })
    }

    /// Continue `crc` over `len` bytes from `to` of `stag`, after the
    /// check: a digest over data that someone else (the NIC) placed.
    pub fn crc(
        &self,
        pd: Pd,
        stag: Stag,
        to: u64,
        len: usize,
        right: Access,
        mut crc: u32,
    ) -> Result<u32, MrError> {
        self.visit(pd, stag, to, len, right, |b| crc = crc32c::crc32c_append(crc, b))?;
        Ok(crc)
    }

    /// The mapping a NIC needs to place into `stag`, if it is valid.
    pub fn stag_io(&self, stag: Stag) -> Option<ulp_ddp::StagIo> {
        let t = self.table();
        let r = t.slots.get(stag.index() as usize)?;
        let region = r.region.as_ref().filter(|_| r.key == stag.key())?;
        Some(ulp_ddp::StagIo {
            stag,
            sgl: region.sgl.clone(),
            base: region.iova,
            access: region.access,
        })
    }

    /// Append `len` bytes from `to` of `stag` to `out`, after the check.
    pub fn read(
        &self,
        pd: Pd,
        stag: Stag,
        to: u64,
        len: usize,
        right: Access,
        out: &mut Vec<u8>,
    ) -> Result<(), MrError> {
        self.visit(pd, stag, to, len, right, |b| out.extend_from_slice(b))
    }

    /// Give `f` each piece of the `len` bytes from `to` of `stag` in
    /// order, as (entry, offset in its buffer, length), after the check.
    pub fn pieces(
        &self,
        pd: Pd,
        stag: Stag,
        to: u64,
        len: usize,
        right: Access,
        f: impl FnMut(&SgEntry, usize, usize),
    ) -> Result<(), MrError> {
        let t = self.table();
        let r = lookup(&t, pd, stag, to, len as u64, right)?;
        walk(&r.sgl, to - r.iova, len, f);
        Ok(())
    }

    /// Give `f` the `len` bytes from `to` of `stag` in order, after the
    /// check.
    fn visit(
        &self,
        pd: Pd,
        stag: Stag,
        to: u64,
        len: usize,
        right: Access,
        mut f: impl FnMut(&[u8]),
    ) -> Result<(), MrError> {
        self.pieces(pd, stag, to, len, right, |e, off, n| f(&e.buf.lock()[off..off + n]))
    }
}

fn lookup(
    t: &Table,
    pd: Pd,
    stag: Stag,
    to: u64,
    len: u64,
    right: Access,
) -> Result<&Region, MrError> {
    let slot = t.slots.get(stag.index() as usize).ok_or(MrError::InvalidStag)?;
    let r = slot.region.as_ref().filter(|_| slot.key == stag.key()).ok_or(MrError::InvalidStag)?;
    if r.pd != pd {
        return Err(MrError::WrongPd);
    }
    if !r.access.contains(right) {
        return Err(MrError::AccessRights);
    }
    let end = to.checked_add(len).ok_or(MrError::ToWrap)?;
    if to < r.iova || end > r.iova + r.len {
        return Err(MrError::BaseBounds);
    }
    Ok(r)
}

/// Bytes `sgl` covers.
pub(crate) fn sgl_len(sgl: &[SgEntry]) -> u64 {
    sgl.iter().map(|e| e.len as u64).sum()
}

/// Visit the pieces of `sgl` covering `len` bytes from byte `at`: each
/// entry with the offset in its buffer and the piece's length.
pub(crate) fn walk(
    sgl: &[SgEntry],
    mut at: u64,
    mut len: usize,
    mut f: impl FnMut(&SgEntry, usize, usize),
) {
    for e in sgl {
        if len == 0 {
            break;
        }
        if at >= e.len as u64 {
            at -= e.len as u64;
            continue;
        }
        let n = (e.len - at as usize).min(len);
        f(e, e.offset + at as usize, n);
        at = 0;
        len -= n;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ulp_ddp::IoBuf;

    fn sgl(buf: &IoBuf, parts: &[(usize, usize)]) -> Sgl {
        parts.iter().map(|&(offset, len)| SgEntry { buf: buf.clone(), offset, len }).collect()
    }

    #[test]
    fn keys_move_on_every_registration() {
        let dev = Device::new();
        let pd = dev.alloc_pd();
        let buf = IoBuf::new(64);
        let a = dev.reg_mr(pd, sgl(&buf, &[(0, 64)]), 0, Access::REMOTE_WRITE).unwrap();
        assert_ne!(a.index(), 0, "STag index 0 is never used");
        dev.dereg_mr(a).unwrap();
        let b = dev.reg_mr(pd, sgl(&buf, &[(0, 64)]), 0, Access::REMOTE_WRITE).unwrap();
        assert_eq!((b.index(), b.key()), (a.index(), a.key().wrapping_add(1)));
        assert_eq!(dev.check(pd, a, 0, 1, Access::REMOTE_WRITE), Err(MrError::InvalidStag));
        // Fast registration: allocate, register with a bumped key,
        // invalidate, register again with the next key.
        let m = dev.alloc_mr(pd);
        assert!(!dev.is_valid(m));
        let k1 = m.next_key();
        dev.fast_reg(pd, k1, sgl(&buf, &[(0, 8)]), 0x1000, Access::REMOTE_READ).unwrap();
        assert_eq!(
            dev.fast_reg(pd, k1.next_key(), sgl(&buf, &[(0, 8)]), 0, Access::REMOTE_READ),
            Err(MrError::Busy)
        );
        dev.invalidate(pd, k1).unwrap();
        assert_eq!(dev.invalidate(pd, k1), Err(MrError::InvalidStag), "once only");
        let k2 = k1.next_key();
        dev.fast_reg(pd, k2, sgl(&buf, &[(0, 8)]), 0x1000, Access::REMOTE_READ).unwrap();
        assert!(dev.is_valid(k2) && !dev.is_valid(k1));
        // A region whose TO range wraps is refused, not a panic.
        let wrap = dev.reg_mr(pd, sgl(&buf, &[(0, 8)]), u64::MAX - 3, Access::REMOTE_READ);
        assert_eq!(wrap, Err(MrError::ToWrap));
    }

    #[test]
    fn every_check_and_a_scattered_write() {
        let dev = Device::new();
        let (pd, other) = (dev.alloc_pd(), dev.alloc_pd());
        let buf = IoBuf::new(32);
        // Two pieces: bytes 4..8 and 20..28 of the buffer, TO 0x100.
        let s = dev.reg_mr(pd, sgl(&buf, &[(4, 4), (20, 8)]), 0x100, Access::REMOTE_WRITE).unwrap();
        let w = Access::REMOTE_WRITE;
        assert_eq!(dev.check(pd, s, 0x100, 12, w), Ok(()));
        assert_eq!(dev.check(pd, s, 0x101, 12, w), Err(MrError::BaseBounds));
        assert_eq!(dev.check(pd, s, 0xff, 1, w), Err(MrError::BaseBounds));
        assert_eq!(dev.check(pd, s, u64::MAX, 2, w), Err(MrError::ToWrap));
        assert_eq!(dev.check(other, s, 0x100, 1, w), Err(MrError::WrongPd));
        assert_eq!(dev.check(pd, s, 0x100, 1, Access::REMOTE_READ), Err(MrError::AccessRights));
        assert_eq!(dev.check(pd, s.next_key(), 0x100, 1, w), Err(MrError::InvalidStag));
        assert_eq!(dev.check(pd, Stag(0x4200), 0x100, 1, w), Err(MrError::InvalidStag));
        assert_eq!(
            dev.write(pd, s, 0x102, &[0x11; 11], Access::REMOTE_READ),
            Err(MrError::AccessRights)
        );
        assert!(buf.to_vec().iter().all(|&b| b == 0), "a refused write touches nothing");
        dev.write(pd, s, 0x102, &[1, 2, 3, 4, 5, 6], w).unwrap();
        let v = buf.to_vec();
        assert_eq!(&v[4..8], [0, 0, 1, 2]);
        assert_eq!(&v[20..28], [3, 4, 5, 6, 0, 0, 0, 0]);
        assert_eq!(MrError::AccessRights.rdmap_code(), 2);
        assert_eq!(MrError::AccessRights.ddp_code(), 0);
    }
}
