//! Identify data structures (CNS 00h, 01h, 02h, 03h) at the offsets of the
//! NVMe Base Specification, with the fields an NVMe-oF host checks.

use crate::bytes::{
    get_ascii, get_str, get_u16, get_u32, get_u64, put_ascii, put_str, put_u16, put_u32, put_u64,
};

/// Controller or Namespace Structure (CNS) values.
pub mod cns {
    pub const NAMESPACE: u8 = 0x00;
    pub const CONTROLLER: u8 = 0x01;
    pub const ACTIVE_NS_LIST: u8 = 0x02;
    pub const NS_DESCRIPTORS: u8 = 0x03;
    pub const CSI_NAMESPACE: u8 = 0x05;
    pub const CSI_CONTROLLER: u8 = 0x06;
    pub const CSI_ACTIVE_NS_LIST: u8 = 0x07;
    pub const CS_INDEPENDENT_NS: u8 = 0x08;
}

/// Every Identify data structure is 4096 bytes.
pub const IDENTIFY_LEN: usize = 4096;

/// An Identify command for `cns` (of the NVM command set) about `nsid`.
pub fn command(cns: u8, nsid: u32) -> super::Sqe {
    let mut sqe = super::Sqe::new(super::admin::IDENTIFY, nsid, Default::default());
    sqe.cdw10 = u32::from(cns);
    sqe
}

/// Controller type (CNTRLTYPE, byte 111).
pub const CNTRLTYPE_IO: u8 = 1;
pub const CNTRLTYPE_DISCOVERY: u8 = 2;

/// Identify Controller: the fields this implementation fills or reads.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct IdentifyController {
    pub vid: u16,
    pub ssvid: u16,
    pub sn: String,
    pub mn: String,
    pub fr: String,
    /// Recommended arbitration burst.
    pub rab: u8,
    /// Multi-path I/O and namespace sharing capabilities.
    pub cmic: u8,
    /// Maximum data transfer size, 2^MDTS pages of 4 KiB; 0 means no limit.
    pub mdts: u8,
    pub cntlid: u16,
    pub ver: u32,
    /// Optional asynchronous events supported.
    pub oaes: u32,
    /// Controller attributes (bit 0: 128-bit host id, bit 6: TBKAS).
    pub ctratt: u32,
    pub cntrltype: u8,
    pub oacs: u16,
    /// Abort command limit, 0-based.
    pub acl: u8,
    /// Asynchronous event request limit, 0-based.
    pub aerl: u8,
    pub frmw: u8,
    /// Log page attributes (bit 1: commands supported and effects, bit 2: extended data).
    pub lpa: u8,
    /// Error log page entries, 0-based.
    pub elpe: u8,
    /// Keep alive support: granularity in 100 ms units; 0 = not supported.
    pub kas: u16,
    pub sqes: u8,
    pub cqes: u8,
    pub maxcmd: u16,
    /// Number of namespaces (the largest NSID).
    pub nn: u32,
    /// Optional NVM command support (bit 2: DSM, bit 3: Write Zeroes).
    pub oncs: u16,
    /// Volatile write cache present.
    pub vwc: u8,
    /// SGL support (bit 0: byte-aligned SGLs).
    pub sgls: u32,
    pub subnqn: String,
    /// I/O queue command capsule supported size, in 16-byte units.
    pub ioccsz: u32,
    /// I/O queue response capsule supported size, in 16-byte units.
    pub iorcsz: u32,
    /// In-capsule data offset, in 16-byte units (must be 0 on TCP).
    pub icdoff: u16,
    /// Fabrics controller attributes (bit 0: static controller model).
    pub fcatt: u8,
    /// Maximum SGL data block descriptors.
    pub msdbd: u8,
}

impl IdentifyController {
    pub fn emit(&self, b: &mut [u8]) {
        let b = &mut b[..IDENTIFY_LEN];
        b.fill(0);
        put_u16(b, 0, self.vid);
        put_u16(b, 2, self.ssvid);
        put_ascii(&mut b[4..24], &self.sn);
        put_ascii(&mut b[24..64], &self.mn);
        put_ascii(&mut b[64..72], &self.fr);
        b[72] = self.rab;
        b[76] = self.cmic;
        b[77] = self.mdts;
        put_u16(b, 78, self.cntlid);
        put_u32(b, 80, self.ver);
        put_u32(b, 92, self.oaes);
        put_u32(b, 96, self.ctratt);
        b[111] = self.cntrltype;
        put_u16(b, 256, self.oacs);
        b[258] = self.acl;
        b[259] = self.aerl;
        b[260] = self.frmw;
        b[261] = self.lpa;
        b[262] = self.elpe;
        put_u16(b, 320, self.kas);
        b[512] = self.sqes;
        b[513] = self.cqes;
        put_u16(b, 514, self.maxcmd);
        put_u32(b, 516, self.nn);
        put_u16(b, 520, self.oncs);
        b[525] = self.vwc;
        put_u32(b, 536, self.sgls);
        put_str(&mut b[768..1024], &self.subnqn);
        put_u32(b, 1792, self.ioccsz);
        put_u32(b, 1796, self.iorcsz);
        put_u16(b, 1800, self.icdoff);
        b[1802] = self.fcatt;
        b[1803] = self.msdbd;
    }

    /// Parse from at least 4096 bytes; `None` if shorter.
    pub fn parse(b: &[u8]) -> Option<Self> {
        let b = b.get(..IDENTIFY_LEN)?;
        Some(Self {
            vid: get_u16(b, 0),
            ssvid: get_u16(b, 2),
            sn: get_ascii(&b[4..24]),
            mn: get_ascii(&b[24..64]),
            fr: get_ascii(&b[64..72]),
            rab: b[72],
            cmic: b[76],
            mdts: b[77],
            cntlid: get_u16(b, 78),
            ver: get_u32(b, 80),
            oaes: get_u32(b, 92),
            ctratt: get_u32(b, 96),
            cntrltype: b[111],
            oacs: get_u16(b, 256),
            acl: b[258],
            aerl: b[259],
            frmw: b[260],
            lpa: b[261],
            elpe: b[262],
            kas: get_u16(b, 320),
            sqes: b[512],
            cqes: b[513],
            maxcmd: get_u16(b, 514),
            nn: get_u32(b, 516),
            oncs: get_u16(b, 520),
            vwc: b[525],
            sgls: get_u32(b, 536),
            subnqn: get_str(&b[768..1024]),
            ioccsz: get_u32(b, 1792),
            iorcsz: get_u32(b, 1796),
            icdoff: get_u16(b, 1800),
            fcatt: b[1802],
            msdbd: b[1803],
        })
    }
}

/// Identify Namespace (NVM command set), with one LBA format.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct IdentifyNamespace {
    /// Namespace size, capacity and utilization, in logical blocks.
    pub nsze: u64,
    pub ncap: u64,
    pub nuse: u64,
    pub nsfeat: u8,
    /// Number of LBA formats, 0-based.
    pub nlbaf: u8,
    /// Formatted LBA size: index of the format in use.
    pub flbas: u8,
    /// Deallocate logical block features (bits 2:0 = 001b: reads return zeros).
    pub dlfeat: u8,
    /// Namespace multi-path and sharing capabilities.
    pub nmic: u8,
    pub nguid: [u8; 16],
    pub eui64: [u8; 8],
    /// LBA data size of format 0, as a power of two (9 = 512 B, 12 = 4 KiB).
    pub lbads: u8,
}

impl IdentifyNamespace {
    pub fn emit(&self, b: &mut [u8]) {
        let b = &mut b[..IDENTIFY_LEN];
        b.fill(0);
        put_u64(b, 0, self.nsze);
        put_u64(b, 8, self.ncap);
        put_u64(b, 16, self.nuse);
        b[24] = self.nsfeat;
        b[25] = self.nlbaf;
        b[26] = self.flbas;
        b[30] = self.nmic;
        b[33] = self.dlfeat;
        b[104..120].copy_from_slice(&self.nguid);
        b[120..128].copy_from_slice(&self.eui64);
        // LBA format 0: MS (u16) = 0, LBADS, RP = 0.
        b[130] = self.lbads;
    }

    pub fn parse(b: &[u8]) -> Option<Self> {
        let b = b.get(..IDENTIFY_LEN)?;
        let mut nguid = [0; 16];
        nguid.copy_from_slice(&b[104..120]);
        let mut eui64 = [0; 8];
        eui64.copy_from_slice(&b[120..128]);
        let format = usize::from(b[26] & 0xf);
        Some(Self {
            nsze: get_u64(b, 0),
            ncap: get_u64(b, 8),
            nuse: get_u64(b, 16),
            nsfeat: b[24],
            nlbaf: b[25],
            flbas: b[26],
            dlfeat: b[33],
            nmic: b[30],
            nguid,
            eui64,
            lbads: b[128 + 4 * format + 2],
        })
    }

    /// Logical block size in bytes.
    pub fn block_size(&self) -> u64 {
        1u64.checked_shl(u32::from(self.lbads)).unwrap_or(0)
    }
}

/// Active namespace ID list: NSIDs above `after`, ascending, zero-terminated.
pub fn emit_ns_list(b: &mut [u8], nsids: impl Iterator<Item = u32>, after: u32) {
    let b = &mut b[..IDENTIFY_LEN];
    b.fill(0);
    for (i, nsid) in nsids.filter(|&n| n > after).take(IDENTIFY_LEN / 4).enumerate() {
        put_u32(b, i * 4, nsid);
    }
}

pub fn parse_ns_list(b: &[u8]) -> Vec<u32> {
    b.chunks_exact(4).map(|c| get_u32(c, 0)).take_while(|&n| n != 0).collect()
}

/// Namespace Identification Descriptor types (NIDT).
pub mod nidt {
    pub const EUI64: u8 = 1;
    pub const NGUID: u8 = 2;
    pub const UUID: u8 = 3;
    pub const CSI: u8 = 4;
}

/// Namespace Identification Descriptor list: (NIDT, value) pairs.
pub fn emit_ns_descriptors(b: &mut [u8], descriptors: &[(u8, &[u8])]) {
    let b = &mut b[..IDENTIFY_LEN];
    b.fill(0);
    let mut at = 0;
    for &(nidt, value) in descriptors {
        b[at] = nidt;
        b[at + 1] = value.len() as u8;
        b[at + 4..at + 4 + value.len()].copy_from_slice(value);
        at += 4 + value.len();
    }
}

pub fn parse_ns_descriptors(b: &[u8]) -> Vec<(u8, Vec<u8>)> {
    let mut out = Vec::new();
    let mut at = 0;
    while at + 4 <= b.len() {
        let (nidt, nidl) = (b[at], usize::from(b[at + 1]));
        if nidl == 0 || at + 4 + nidl > b.len() {
            break;
        }
        out.push((nidt, b[at + 4..at + 4 + nidl].to_vec()));
        at += 4 + nidl;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn controller_fields_at_their_offsets() {
        let id = IdentifyController {
            sn: "SN1".into(),
            mn: "nvme-ddp".into(),
            cntlid: 0x0102,
            kas: 10,
            sgls: 1,
            subnqn: "nqn.test".into(),
            ioccsz: 260,
            iorcsz: 1,
            cntrltype: CNTRLTYPE_IO,
            ..Default::default()
        };
        let mut b = vec![0u8; IDENTIFY_LEN];
        id.emit(&mut b);
        assert_eq!(&b[4..8], b"SN1 ");
        assert_eq!(&b[78..80], &[0x02, 0x01]);
        assert_eq!(b[111], 1);
        assert_eq!(&b[320..322], &[10, 0]);
        assert_eq!(&b[536..540], &[1, 0, 0, 0]);
        assert_eq!(&b[768..776], b"nqn.test");
        assert_eq!(&b[1792..1800], &[4, 1, 0, 0, 1, 0, 0, 0]);
        assert_eq!(IdentifyController::parse(&b), Some(id));
    }

    #[test]
    fn namespace_and_lists_round_trip() {
        let ns = IdentifyNamespace {
            nsze: 2048,
            ncap: 2048,
            nuse: 2048,
            lbads: 12,
            nmic: 1,
            dlfeat: 1,
            ..Default::default()
        };
        let mut b = vec![0u8; IDENTIFY_LEN];
        ns.emit(&mut b);
        assert_eq!(b[130], 12);
        assert_eq!(IdentifyNamespace::parse(&b).map(|n| n.block_size()), Some(4096));
        emit_ns_list(&mut b, [1, 2, 7].into_iter(), 1);
        assert_eq!(parse_ns_list(&b), vec![2, 7]);
        emit_ns_descriptors(&mut b, &[(nidt::NGUID, &[9; 16]), (nidt::CSI, &[0])]);
        assert_eq!(&b[..4], &[2, 16, 0, 0]);
        assert_eq!(parse_ns_descriptors(&b), vec![(2, vec![9; 16]), (4, vec![0])]);
    }
}
