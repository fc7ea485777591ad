//! Fabrics commands (opcode 0x7F): Connect and its 1024-byte data, Property
//! Get and Property Set, and the controller properties they address.

use super::{Sqe, fctype};
use crate::bytes::{get_str, get_u16, put_str, put_u16};

/// Size of a property access (ATTRIB bits 2:0).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PropertySize {
    Four,
    Eight,
}

/// A Fabrics command decoded from its SQE.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FabricsCommand {
    /// Connect: RECFMT in CDW10\[15:0\], QID in CDW10\[31:16\], SQSIZE (0-based)
    /// in CDW11\[15:0\], CATTR in CDW11\[23:16\], KATO (ms) in CDW12.
    Connect { recfmt: u16, qid: u16, sqsize: u16, cattr: u8, kato: u32 },
    /// Property Get: ATTRIB in CDW10\[7:0\], OFST in CDW11.
    PropertyGet { size: PropertySize, offset: u32 },
    /// Property Set: ATTRIB, OFST, VALUE in CDW12..13.
    PropertySet { size: PropertySize, offset: u32, value: u64 },
    /// Authentication Send: TL bytes of a security protocol's message
    /// from the host. SECP in CDW10\[31:24\], SPSP1:SPSP0 in CDW10\[23:8\].
    AuthSend { secp: u8, spsp: u16, tl: u32 },
    /// Authentication Receive: up to AL bytes of the controller's answer.
    AuthReceive { secp: u8, spsp: u16, al: u32 },
    /// Disconnect and reserved types.
    Other(u8),
}

impl FabricsCommand {
    /// Connect CATTR bit 2: the host asks for SQ flow control to be disabled.
    pub const CATTR_DISABLE_SQ_FLOW_CONTROL: u8 = 1 << 2;
    /// The security protocol of NVMe in-band authentication (SECP E9h),
    /// and the SPSP both bytes of which are 01h for it.
    pub const SECP_AUTH: u8 = 0xe9;
    pub const SPSP_AUTH: u16 = 0x0101;

    pub fn parse(sqe: &Sqe) -> Self {
        let size = if sqe.cdw10 & 0x7 == 1 { PropertySize::Eight } else { PropertySize::Four };
        match sqe.fctype() {
            fctype::CONNECT => Self::Connect {
                recfmt: sqe.cdw10 as u16,
                qid: (sqe.cdw10 >> 16) as u16,
                sqsize: sqe.cdw11 as u16,
                cattr: (sqe.cdw11 >> 16) as u8,
                kato: sqe.cdw12,
            },
            fctype::PROPERTY_GET => Self::PropertyGet { size, offset: sqe.cdw11 },
            fctype::PROPERTY_SET => Self::PropertySet {
                size,
                offset: sqe.cdw11,
                value: u64::from(sqe.cdw12) | (u64::from(sqe.cdw13) << 32),
            },
            fctype::AUTH_SEND => Self::AuthSend {
                secp: (sqe.cdw10 >> 24) as u8,
                spsp: (sqe.cdw10 >> 8) as u16,
                tl: sqe.cdw11,
            },
            fctype::AUTH_RECV => Self::AuthReceive {
                secp: (sqe.cdw10 >> 24) as u8,
                spsp: (sqe.cdw10 >> 8) as u16,
                al: sqe.cdw11,
            },
            other => Self::Other(other),
        }
    }

    /// The SQE for this command (CID left 0; the queue assigns it).
    pub fn to_sqe(&self, sgl: super::SglDescriptor) -> Sqe {
        let mut sqe = Sqe::new(super::admin::FABRICS, 0, sgl);
        let attrib = |size| match size {
            PropertySize::Four => 0,
            PropertySize::Eight => 1,
        };
        match *self {
            Self::Connect { recfmt, qid, sqsize, cattr, kato } => {
                sqe.nsid = u32::from(fctype::CONNECT);
                sqe.cdw10 = u32::from(recfmt) | (u32::from(qid) << 16);
                sqe.cdw11 = u32::from(sqsize) | (u32::from(cattr) << 16);
                sqe.cdw12 = kato;
            }
            Self::PropertyGet { size, offset } => {
                sqe.nsid = u32::from(fctype::PROPERTY_GET);
                sqe.cdw10 = attrib(size);
                sqe.cdw11 = offset;
            }
            Self::PropertySet { size, offset, value } => {
                sqe.nsid = u32::from(fctype::PROPERTY_SET);
                sqe.cdw10 = attrib(size);
                sqe.cdw11 = offset;
                sqe.cdw12 = value as u32;
                sqe.cdw13 = (value >> 32) as u32;
            }
            Self::AuthSend { secp, spsp, tl: len } | Self::AuthReceive { secp, spsp, al: len } => {
                let t = if matches!(self, Self::AuthSend { .. }) {
                    fctype::AUTH_SEND
                } else {
                    fctype::AUTH_RECV
                };
                sqe.nsid = u32::from(t);
                sqe.cdw10 = (u32::from(secp) << 24) | (u32::from(spsp) << 8);
                sqe.cdw11 = len;
            }
            Self::Other(t) => sqe.nsid = u32::from(t),
        }
        sqe
    }
}

/// The 1024-byte data of a Connect command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectData {
    pub hostid: [u8; 16],
    /// 0xFFFF asks for a dynamic controller on the admin queue; I/O queues
    /// name the controller their admin queue got.
    pub cntlid: u16,
    pub subnqn: String,
    pub hostnqn: String,
}

impl ConnectData {
    pub const LEN: usize = 1024;
    pub const DYNAMIC_CNTLID: u16 = 0xffff;
    /// Byte offsets, for the IPO of a Connect Invalid Parameters status.
    pub const OFFSET_CNTLID: u16 = 16;
    pub const OFFSET_SUBNQN: u16 = 256;
    pub const OFFSET_HOSTNQN: u16 = 512;

    pub fn parse(b: &[u8; 1024]) -> Self {
        let mut hostid = [0; 16];
        hostid.copy_from_slice(&b[..16]);
        Self {
            hostid,
            cntlid: get_u16(b, 16),
            subnqn: get_str(&b[256..512]),
            hostnqn: get_str(&b[512..768]),
        }
    }

    pub fn emit(&self, b: &mut [u8; 1024]) {
        b.fill(0);
        b[..16].copy_from_slice(&self.hostid);
        put_u16(b, 16, self.cntlid);
        put_str(&mut b[256..512], &self.subnqn);
        put_str(&mut b[512..768], &self.hostnqn);
    }
}

/// Controller properties (the fabrics view of the controller registers).
pub mod property {
    pub const CAP: u32 = 0x00;
    pub const VS: u32 = 0x08;
    pub const CC: u32 = 0x14;
    pub const CSTS: u32 = 0x1c;
    pub const NSSR: u32 = 0x20;

    /// CAP: MQES (0-based) in 15:0, CQR bit 16, TO (500 ms units) in 31:24,
    /// CSS in 44:37 (bit 37: NVM command set), MPSMIN 51:48, MPSMAX 55:52.
    pub fn cap(mqes: u16, timeout_500ms: u8) -> u64 {
        u64::from(mqes) | (1 << 16) | (u64::from(timeout_500ms) << 24) | (1 << 37)
    }

    pub fn cap_mqes(cap: u64) -> u16 {
        cap as u16
    }

    pub fn cap_timeout_ms(cap: u64) -> u64 {
        ((cap >> 24) & 0xff) * 500
    }

    /// Version 1.3.0, what Linux nvmet reports.
    pub const VS_1_3: u32 = 0x0001_0300;

    pub const CC_EN: u32 = 1 << 0;
    pub const CC_SHN_MASK: u32 = 0x3 << 14;
    pub const CC_IOSQES_SHIFT: u32 = 16;
    pub const CC_IOCQES_SHIFT: u32 = 20;
    /// What a host writes to enable: EN, NVM command set, 4 KiB pages,
    /// round robin, IOSQES 6 (64 B), IOCQES 4 (16 B).
    pub const CC_ENABLE: u32 = CC_EN | (6 << CC_IOSQES_SHIFT) | (4 << CC_IOCQES_SHIFT);
    /// Normal shutdown notification.
    pub const CC_SHN_NORMAL: u32 = 1 << 14;

    pub const CSTS_RDY: u32 = 1 << 0;
    pub const CSTS_CFS: u32 = 1 << 1;
    pub const CSTS_SHST_MASK: u32 = 0x3 << 2;
    pub const CSTS_SHST_COMPLETE: u32 = 0x2 << 2;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nvme::SglDescriptor;

    #[test]
    fn connect_sqe_fixture() {
        let cmd = FabricsCommand::Connect { recfmt: 0, qid: 3, sqsize: 127, cattr: 4, kato: 0 };
        let mut b = [0u8; 64];
        cmd.to_sqe(SglDescriptor::in_capsule(1024)).emit(&mut b);
        assert_eq!(b[0], 0x7f);
        assert_eq!(b[4], 0x01, "fctype");
        assert_eq!(&b[40..48], &[0, 0, 3, 0, 127, 0, 4, 0]);
        assert_eq!(b[39], 0x01, "in-capsule SGL");
        assert_eq!(FabricsCommand::parse(&Sqe::parse(&b)), cmd);
    }

    #[test]
    fn auth_commands_carry_secp_spsp_and_length_where_linux_puts_them() {
        let cmd = FabricsCommand::AuthSend {
            secp: FabricsCommand::SECP_AUTH,
            spsp: FabricsCommand::SPSP_AUTH,
            tl: 0x148,
        };
        let mut b = [0u8; 64];
        cmd.to_sqe(SglDescriptor::in_capsule(0x148)).emit(&mut b);
        assert_eq!(b[4], 0x05, "fctype");
        assert_eq!(&b[40..48], &[0, 0x01, 0x01, 0xe9, 0x48, 0x01, 0, 0], "spsp0, spsp1, secp, tl");
        assert_eq!(FabricsCommand::parse(&Sqe::parse(&b)), cmd);
        let recv = FabricsCommand::AuthReceive { secp: 0xe9, spsp: 0x0101, al: 4096 };
        recv.to_sqe(SglDescriptor::default()).emit(&mut b);
        assert_eq!(b[4], 0x06);
        assert_eq!(FabricsCommand::parse(&Sqe::parse(&b)), recv);
    }

    #[test]
    fn property_set_round_trip() {
        let cmd = FabricsCommand::PropertySet {
            size: PropertySize::Four,
            offset: property::CC,
            value: u64::from(property::CC_ENABLE),
        };
        let mut b = [0u8; 64];
        cmd.to_sqe(SglDescriptor::default()).emit(&mut b);
        assert_eq!(b[4], 0x00);
        assert_eq!(&b[44..52], &[0x14, 0, 0, 0, 0x01, 0x00, 0x46, 0x00]);
        assert_eq!(FabricsCommand::parse(&Sqe::parse(&b)), cmd);
    }

    #[test]
    fn connect_data_round_trip() {
        let d = ConnectData {
            hostid: [7; 16],
            cntlid: ConnectData::DYNAMIC_CNTLID,
            subnqn: "nqn.2026-11.io.nvme-ddp:sub".into(),
            hostnqn: "nqn.2014-08.org.nvmexpress:uuid:1".into(),
        };
        let mut b = [0u8; 1024];
        d.emit(&mut b);
        assert_eq!(&b[16..18], &[0xff, 0xff]);
        assert_eq!(&b[256..260], b"nqn.");
        assert_eq!(ConnectData::parse(&b), d);
    }
}
