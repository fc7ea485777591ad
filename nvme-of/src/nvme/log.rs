//! Log pages (Get Log Page): the command's fields and the pages this
//! implementation serves, including the discovery log.

use super::Sqe;
use crate::bytes::{get_str, get_u16, get_u32, get_u64, put_str, put_u16, put_u32, put_u64};

/// Log page identifiers.
pub mod lid {
    pub const SUPPORTED: u8 = 0x00;
    pub const ERROR_INFO: u8 = 0x01;
    pub const SMART: u8 = 0x02;
    pub const FW_SLOT: u8 = 0x03;
    pub const CHANGED_NS: u8 = 0x04;
    pub const EFFECTS: u8 = 0x05;
    pub const DISCOVERY: u8 = 0x70;
}

/// Get Log Page command fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GetLogPage {
    pub lid: u8,
    pub lsp: u8,
    /// Retain Asynchronous Event.
    pub rae: bool,
    /// Bytes requested (NUMD is 0-based dwords).
    pub len: u64,
    /// Log page offset in bytes.
    pub lpo: u64,
}

impl GetLogPage {
    pub fn parse(sqe: &Sqe) -> Self {
        let numd = u64::from(sqe.cdw10 >> 16) | (u64::from(sqe.cdw11 & 0xffff) << 16);
        Self {
            lid: sqe.cdw10 as u8,
            lsp: ((sqe.cdw10 >> 8) & 0x7f) as u8,
            rae: sqe.cdw10 & (1 << 15) != 0,
            len: (numd + 1) * 4,
            lpo: u64::from(sqe.cdw12) | (u64::from(sqe.cdw13) << 32),
        }
    }

    /// The command; `len` must be a non-zero multiple of 4.
    pub fn to_sqe(&self) -> Sqe {
        let mut sqe = Sqe::new(super::admin::GET_LOG_PAGE, 0, Default::default());
        let numd = (self.len / 4).saturating_sub(1);
        sqe.cdw10 = u32::from(self.lid)
            | (u32::from(self.lsp & 0x7f) << 8)
            | (u32::from(self.rae) << 15)
            | ((numd as u32 & 0xffff) << 16);
        sqe.cdw11 = (numd >> 16) as u32 & 0xffff;
        sqe.cdw12 = self.lpo as u32;
        sqe.cdw13 = (self.lpo >> 32) as u32;
        sqe
    }
}

/// SMART / Health Information, 512 bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SmartLog {
    pub critical_warning: u8,
    /// Composite temperature in kelvins.
    pub temperature: u16,
    pub available_spare: u8,
    pub spare_threshold: u8,
    /// Estimate of the life used, in percent.
    pub percentage_used: u8,
    /// Data units (1000 blocks of 512 bytes) read and written.
    pub data_units_read: u64,
    pub data_units_written: u64,
    pub host_reads: u64,
    pub host_writes: u64,
    pub power_cycles: u64,
    pub media_errors: u64,
    pub error_log_entries: u64,
}

impl SmartLog {
    pub const LEN: usize = 512;

    pub fn emit(&self, b: &mut [u8]) {
        let b = &mut b[..Self::LEN];
        b.fill(0);
        b[0] = self.critical_warning;
        put_u16(b, 1, self.temperature);
        b[3] = self.available_spare;
        b[4] = self.spare_threshold;
        b[5] = self.percentage_used;
        // The counters are 128-bit; the high halves stay zero.
        put_u64(b, 32, self.data_units_read);
        put_u64(b, 48, self.data_units_written);
        put_u64(b, 64, self.host_reads);
        put_u64(b, 80, self.host_writes);
        put_u64(b, 112, self.power_cycles);
        put_u64(b, 160, self.media_errors);
        put_u64(b, 176, self.error_log_entries);
    }

    pub fn parse(b: &[u8]) -> Option<Self> {
        let b = b.get(..Self::LEN)?;
        Some(Self {
            critical_warning: b[0],
            temperature: get_u16(b, 1),
            available_spare: b[3],
            spare_threshold: b[4],
            percentage_used: b[5],
            data_units_read: get_u64(b, 32),
            data_units_written: get_u64(b, 48),
            host_reads: get_u64(b, 64),
            host_writes: get_u64(b, 80),
            power_cycles: get_u64(b, 112),
            media_errors: get_u64(b, 160),
            error_log_entries: get_u64(b, 176),
        })
    }
}

/// One Error Information log entry, 64 bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ErrorLogEntry {
    pub error_count: u64,
    pub sqid: u16,
    pub cid: u16,
    /// Status field as in the CQE (phase bit clear).
    pub status: u16,
    /// Parameter error location: byte (bits 7:0) and bit (10:8) in the command.
    pub param_loc: u16,
    pub lba: u64,
    pub nsid: u32,
    /// Transport type of the queue the command came on (TRTYPE).
    pub trtype: u8,
}

impl ErrorLogEntry {
    pub const LEN: usize = 64;

    pub fn emit(&self, b: &mut [u8]) {
        let b = &mut b[..Self::LEN];
        b.fill(0);
        put_u64(b, 0, self.error_count);
        put_u16(b, 8, self.sqid);
        put_u16(b, 10, self.cid);
        put_u16(b, 12, self.status);
        put_u16(b, 14, self.param_loc);
        put_u64(b, 16, self.lba);
        put_u32(b, 24, self.nsid);
        b[29] = self.trtype;
    }

    pub fn parse(b: &[u8]) -> Option<Self> {
        let b = b.get(..Self::LEN)?;
        Some(Self {
            error_count: get_u64(b, 0),
            sqid: get_u16(b, 8),
            cid: get_u16(b, 10),
            status: get_u16(b, 12),
            param_loc: get_u16(b, 14),
            lba: get_u64(b, 16),
            nsid: get_u32(b, 24),
            trtype: b[29],
        })
    }
}

/// Commands Supported and Effects: bit 0 CSUPP, bit 1 LBCC.
pub fn emit_effects(b: &mut [u8], admin: &[u8], io: &[(u8, u32)]) {
    let b = &mut b[..4096];
    b.fill(0);
    for &op in admin {
        put_u32(b, usize::from(op) * 4, 1);
    }
    for &(op, effects) in io {
        put_u32(b, 1024 + usize::from(op) * 4, effects);
    }
}

/// Transport type, address family and subsystem type in discovery entries.
pub const TRTYPE_RDMA: u8 = 1;
pub const TRTYPE_TCP: u8 = 3;
pub const ADRFAM_IPV4: u8 = 1;
pub const ADRFAM_IPV6: u8 = 2;
pub const SUBTYPE_DISCOVERY_REFERRAL: u8 = 1;
pub const SUBTYPE_NVME: u8 = 2;
pub const SUBTYPE_CURRENT_DISCOVERY: u8 = 3;
/// TREQ bit 2: SQ flow control disable supported.
pub const TREQ_DISABLE_SQFLOW: u8 = 0x04;
/// TREQ bits 1:0, secure channel: required, not required.
pub const TREQ_SECURE_REQUIRED: u8 = 0x01;
pub const TREQ_SECURE_NOT_REQUIRED: u8 = 0x02;
/// TSAS byte 0 of an NVMe/TCP entry (SECTYPE): TLS 1.3.
pub const SECTYPE_TLS13: u8 = 0x02;

/// One discovery log page entry (1024 bytes).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DiscoveryEntry {
    pub trtype: u8,
    pub adrfam: u8,
    pub subtype: u8,
    pub treq: u8,
    pub portid: u16,
    pub cntlid: u16,
    pub asqsz: u16,
    pub trsvcid: String,
    pub subnqn: String,
    pub traddr: String,
    /// The first bytes of the transport specific address subtype: the
    /// security type on TCP (0 none); QP service type, provider type and
    /// connection management service on RDMA.
    pub tsas: [u8; 3],
}

impl DiscoveryEntry {
    pub const LEN: usize = 1024;

    pub fn emit(&self, b: &mut [u8]) {
        let b = &mut b[..Self::LEN];
        b.fill(0);
        b[0] = self.trtype;
        b[1] = self.adrfam;
        b[2] = self.subtype;
        b[3] = self.treq;
        put_u16(b, 4, self.portid);
        put_u16(b, 6, self.cntlid);
        put_u16(b, 8, self.asqsz);
        put_str(&mut b[32..64], &self.trsvcid);
        put_str(&mut b[256..512], &self.subnqn);
        put_str(&mut b[512..768], &self.traddr);
        b[768..771].copy_from_slice(&self.tsas);
    }

    pub fn parse(b: &[u8]) -> Option<Self> {
        let b = b.get(..Self::LEN)?;
        Some(Self {
            trtype: b[0],
            adrfam: b[1],
            subtype: b[2],
            treq: b[3],
            portid: get_u16(b, 4),
            cntlid: get_u16(b, 6),
            asqsz: get_u16(b, 8),
            trsvcid: get_str(&b[32..64]).trim().to_string(),
            subnqn: get_str(&b[256..512]),
            traddr: get_str(&b[512..768]).trim().to_string(),
            tsas: [b[768], b[769], b[770]],
        })
    }
}

/// The discovery log page: a 1024-byte header (GENCTR, NUMREC, RECFMT),
/// then one entry per record.
pub fn emit_discovery_log(genctr: u64, entries: &[DiscoveryEntry]) -> Vec<u8> {
    let mut b = vec![0u8; DiscoveryEntry::LEN * (1 + entries.len())];
    put_u64(&mut b, 0, genctr);
    put_u64(&mut b, 8, entries.len() as u64);
    for (i, e) in entries.iter().enumerate() {
        e.emit(&mut b[DiscoveryEntry::LEN * (i + 1)..]);
    }
    b
}

/// GENCTR and NUMREC from the discovery log header.
pub fn parse_discovery_header(b: &[u8]) -> Option<(u64, u64)> {
    (b.len() >= 16).then(|| (get_u64(b, 0), get_u64(b, 8)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn get_log_page_fields() {
        let g = GetLogPage { lid: lid::DISCOVERY, lsp: 0, rae: true, len: 4096, lpo: 1024 };
        let sqe = g.to_sqe();
        assert_eq!(sqe.opcode, crate::nvme::admin::GET_LOG_PAGE);
        assert_eq!(sqe.cdw10, 0x03ff_8070);
        assert_eq!((sqe.cdw11, sqe.cdw12), (0, 1024));
        assert_eq!(GetLogPage::parse(&sqe), g);
    }

    #[test]
    fn discovery_log_layout() {
        let e = DiscoveryEntry {
            trtype: TRTYPE_TCP,
            adrfam: ADRFAM_IPV4,
            subtype: SUBTYPE_NVME,
            treq: TREQ_DISABLE_SQFLOW,
            portid: 1,
            cntlid: 0xffff,
            asqsz: 32,
            trsvcid: "4420".into(),
            subnqn: "nqn.x".into(),
            traddr: "198.18.0.2".into(),
            tsas: [0; 3],
        };
        let log = emit_discovery_log(5, std::slice::from_ref(&e));
        assert_eq!(log.len(), 2048);
        assert_eq!(parse_discovery_header(&log), Some((5, 1)));
        assert_eq!(&log[1024..1028], &[3, 1, 2, 4]);
        assert_eq!(&log[1024 + 32..1024 + 36], b"4420");
        assert_eq!(DiscoveryEntry::parse(&log[1024..]), Some(e));
    }
}
