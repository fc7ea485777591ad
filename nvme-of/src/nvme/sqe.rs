//! The 64-byte submission queue entry and the 16-byte completion queue entry.

use super::{SglDescriptor, Status};
use crate::bytes::{get_u16, get_u32, get_u64, put_u16, put_u32, put_u64};

/// A submission queue entry. Fields are named by dword as in the base
/// specification; command-specific meaning lives in the helpers below and in
/// [`super::FabricsCommand`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Sqe {
    pub opcode: u8,
    /// FUSE (bits 1:0) and PSDT (bits 7:6); PSDT is 01b (SGL) on fabrics.
    pub flags: u8,
    pub cid: u16,
    /// NSID; on Fabrics commands byte 4 is FCTYPE instead.
    pub nsid: u32,
    pub cdw2: u32,
    pub cdw3: u32,
    pub mptr: u64,
    /// DPTR: SGL1 on fabrics.
    pub sgl: SglDescriptor,
    pub cdw10: u32,
    pub cdw11: u32,
    pub cdw12: u32,
    pub cdw13: u32,
    pub cdw14: u32,
    pub cdw15: u32,
}

impl Sqe {
    pub const LEN: usize = 64;
    /// PSDT = 01b: SGLs are used for this transfer (required on fabrics).
    pub const FLAGS_SGL: u8 = 0x40;

    pub fn parse(b: &[u8; 64]) -> Self {
        let mut sgl = [0u8; 16];
        sgl.copy_from_slice(&b[24..40]);
        Self {
            opcode: b[0],
            flags: b[1],
            cid: get_u16(b, 2),
            nsid: get_u32(b, 4),
            cdw2: get_u32(b, 8),
            cdw3: get_u32(b, 12),
            mptr: get_u64(b, 16),
            sgl: SglDescriptor::parse(&sgl),
            cdw10: get_u32(b, 40),
            cdw11: get_u32(b, 44),
            cdw12: get_u32(b, 48),
            cdw13: get_u32(b, 52),
            cdw14: get_u32(b, 56),
            cdw15: get_u32(b, 60),
        }
    }

    pub fn emit(&self, b: &mut [u8; 64]) {
        b[0] = self.opcode;
        b[1] = self.flags;
        put_u16(b, 2, self.cid);
        put_u32(b, 4, self.nsid);
        put_u32(b, 8, self.cdw2);
        put_u32(b, 12, self.cdw3);
        put_u64(b, 16, self.mptr);
        let mut sgl = [0u8; 16];
        self.sgl.emit(&mut sgl);
        b[24..40].copy_from_slice(&sgl);
        put_u32(b, 40, self.cdw10);
        put_u32(b, 44, self.cdw11);
        put_u32(b, 48, self.cdw12);
        put_u32(b, 52, self.cdw13);
        put_u32(b, 56, self.cdw14);
        put_u32(b, 60, self.cdw15);
    }

    /// A command with SGL data pointer and the given opcode, everything else zero.
    pub fn new(opcode: u8, nsid: u32, sgl: SglDescriptor) -> Self {
        Self { opcode, flags: Self::FLAGS_SGL, nsid, sgl, ..Self::default() }
    }

    /// Read or Write: starting LBA in CDW10/11, 0-based block count in CDW12.
    pub fn rw(opcode: u8, nsid: u32, slba: u64, nlb: u32, sgl: SglDescriptor) -> Self {
        let mut sqe = Self::new(opcode, nsid, sgl);
        sqe.cdw10 = slba as u32;
        sqe.cdw11 = (slba >> 32) as u32;
        sqe.cdw12 = nlb.saturating_sub(1) & 0xffff;
        sqe
    }

    /// Starting LBA of a Read, Write or Write Zeroes.
    pub fn slba(&self) -> u64 {
        u64::from(self.cdw10) | (u64::from(self.cdw11) << 32)
    }

    /// Number of logical blocks (1-based) of a Read, Write or Write Zeroes.
    pub fn nlb(&self) -> u32 {
        (self.cdw12 & 0xffff) + 1
    }

    /// Force Unit Access (CDW12 bit 30) of a Read, Write or Write Zeroes:
    /// a write completes only once its data is on non-volatile media.
    pub const FUA: u32 = 1 << 30;

    pub fn fua(&self) -> bool {
        self.cdw12 & Self::FUA != 0
    }

    /// FCTYPE of a Fabrics command.
    pub fn fctype(&self) -> u8 {
        self.nsid as u8
    }
}

/// A completion queue entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Cqe {
    /// Command-specific result, DW0 (and DW1 for 8-byte results such as Property Get).
    pub dw0: u32,
    pub dw1: u32,
    /// SQ head pointer; 0xFFFF when SQ flow control is disabled.
    pub sqhd: u16,
    pub sqid: u16,
    pub cid: u16,
    /// Status field including the phase tag in bit 0.
    pub status: u16,
}

impl Cqe {
    pub const LEN: usize = 16;

    pub fn new(cid: u16, status: Status) -> Self {
        Self { cid, status: status.to_field(), ..Self::default() }
    }

    pub fn parse(b: &[u8; 16]) -> Self {
        Self {
            dw0: get_u32(b, 0),
            dw1: get_u32(b, 4),
            sqhd: get_u16(b, 8),
            sqid: get_u16(b, 10),
            cid: get_u16(b, 12),
            status: get_u16(b, 14),
        }
    }

    pub fn emit(&self, b: &mut [u8; 16]) {
        put_u32(b, 0, self.dw0);
        put_u32(b, 4, self.dw1);
        put_u16(b, 8, self.sqhd);
        put_u16(b, 10, self.sqid);
        put_u16(b, 12, self.cid);
        put_u16(b, 14, self.status);
    }

    pub fn status(&self) -> Status {
        Status::from_field(self.status)
    }

    /// DW0 and DW1 as one 64-bit result.
    pub fn result64(&self) -> u64 {
        u64::from(self.dw0) | (u64::from(self.dw1) << 32)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn read_sqe_fixture() {
        // Read, CID 0x1234, NSID 1, SLBA 0x1_0000_0002, 8 blocks, transport SGL 4096 bytes.
        let sqe = Sqe::rw(0x02, 1, 0x1_0000_0002, 8, SglDescriptor::transport(4096));
        let mut b = [0u8; 64];
        Sqe { cid: 0x1234, ..sqe }.emit(&mut b);
        assert_eq!(&b[0..8], &[0x02, 0x40, 0x34, 0x12, 1, 0, 0, 0]);
        assert_eq!(&b[24..40], &[0, 0, 0, 0, 0, 0, 0, 0, 0x00, 0x10, 0, 0, 0, 0, 0, 0x5a]);
        assert_eq!(&b[40..52], &[2, 0, 0, 0, 1, 0, 0, 0, 7, 0, 0, 0]);
        let back = Sqe::parse(&b);
        assert_eq!((back.cid, back.slba(), back.nlb()), (0x1234, 0x1_0000_0002, 8));
        assert_eq!(back.sgl.kind(), crate::nvme::SglType::Transport);
    }

    #[test]
    fn cqe_fixture() {
        let b: [u8; 16] = [1, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 1, 0, 7, 0, 0x01, 0x81];
        let cqe = Cqe::parse(&b);
        assert_eq!((cqe.dw0, cqe.sqhd, cqe.sqid, cqe.cid), (1, 0xffff, 1, 7));
        assert_eq!(cqe.status(), Status::LBA_OUT_OF_RANGE);
        let mut out = [0u8; 16];
        cqe.emit(&mut out);
        assert_eq!(out, b);
    }
}
