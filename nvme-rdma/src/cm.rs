//! The private data NVMe/RDMA puts in connection management messages
//! (NVMe over Fabrics RDMA Transport Specification, "RDMA_CM_REQUEST",
//! "RDMA_CM_ACCEPT", "RDMA_CM_REJECT"), carried in the MPA Request, Reply
//! and Reject. Little-endian, as everything NVMe.

/// The record format every message carries; only 0 is defined.
pub const RECFMT: u16 = 0;

/// What the host asks for: a queue and its sizes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CmRequest {
    pub recfmt: u16,
    pub qid: u16,
    /// Host receive queue size: the responses the host can take.
    pub hrqsize: u16,
    /// Host send queue size, 0's based.
    pub hsqsize: u16,
}

/// The controller's answer: its receive queue size (HSQSIZE + 1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CmAccept {
    pub recfmt: u16,
    pub crqsize: u16,
}

/// Why the controller refused the queue (RDMA_CM_REJECT status).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum CmRejectStatus {
    #[error("invalid private data length")]
    InvalidLength,
    #[error("invalid record format")]
    InvalidRecfmt,
    #[error("invalid queue ID")]
    InvalidQid,
    #[error("invalid host send queue size")]
    InvalidHsqsize,
    #[error("invalid host receive queue size")]
    InvalidHrqsize,
    #[error("no resources")]
    NoResources,
    #[error("invalid IRD")]
    InvalidIrd,
    #[error("invalid ORD")]
    InvalidOrd,
    #[error("reject status {0}")]
    Other(u16),
}

impl CmRejectStatus {
    pub fn code(self) -> u16 {
        match self {
            Self::InvalidLength => 1,
            Self::InvalidRecfmt => 2,
            Self::InvalidQid => 3,
            Self::InvalidHsqsize => 4,
            Self::InvalidHrqsize => 5,
            Self::NoResources => 6,
            Self::InvalidIrd => 7,
            Self::InvalidOrd => 8,
            Self::Other(c) => c,
        }
    }

    pub fn from_code(c: u16) -> Self {
        match c {
            1 => Self::InvalidLength,
            2 => Self::InvalidRecfmt,
            3 => Self::InvalidQid,
            4 => Self::InvalidHsqsize,
            5 => Self::InvalidHrqsize,
            6 => Self::NoResources,
            7 => Self::InvalidIrd,
            8 => Self::InvalidOrd,
            c => Self::Other(c),
        }
    }
}

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

impl CmRequest {
    pub const LEN: usize = 32;

    pub fn emit(&self) -> [u8; Self::LEN] {
        let mut b = [0u8; Self::LEN];
        b[0..2].copy_from_slice(&self.recfmt.to_le_bytes());
        b[2..4].copy_from_slice(&self.qid.to_le_bytes());
        b[4..6].copy_from_slice(&self.hrqsize.to_le_bytes());
        b[6..8].copy_from_slice(&self.hsqsize.to_le_bytes());
        b
    }

    /// The request in `pd`; trailing bytes (reserved, or what another
    /// extension appended) are ignored, as Linux ignores them.
    pub fn parse(pd: &[u8]) -> Result<Self, CmRejectStatus> {
        if pd.len() < Self::LEN {
            return Err(CmRejectStatus::InvalidLength);
        }
        let r = Self {
            recfmt: u16_at(pd, 0),
            qid: u16_at(pd, 2),
            hrqsize: u16_at(pd, 4),
            hsqsize: u16_at(pd, 6),
        };
        if r.recfmt != RECFMT {
            return Err(CmRejectStatus::InvalidRecfmt);
        }
        Ok(r)
    }
}

impl CmAccept {
    pub const LEN: usize = 32;

    pub fn emit(&self) -> [u8; Self::LEN] {
        let mut b = [0u8; Self::LEN];
        b[0..2].copy_from_slice(&self.recfmt.to_le_bytes());
        b[2..4].copy_from_slice(&self.crqsize.to_le_bytes());
        b
    }

    pub fn parse(pd: &[u8]) -> Option<Self> {
        (pd.len() >= 4).then(|| Self { recfmt: u16_at(pd, 0), crqsize: u16_at(pd, 2) })
    }
}

/// RDMA_CM_REJECT private data.
pub fn emit_reject(sts: CmRejectStatus) -> [u8; 4] {
    let mut b = [0u8; 4];
    b[0..2].copy_from_slice(&RECFMT.to_le_bytes());
    b[2..4].copy_from_slice(&sts.code().to_le_bytes());
    b
}

pub fn parse_reject(pd: &[u8]) -> Option<CmRejectStatus> {
    (pd.len() >= 4).then(|| CmRejectStatus::from_code(u16_at(pd, 2)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_read_as_linux_writes_them() {
        // A Linux host's admin queue: hrqsize 32, hsqsize 31, 24 reserved bytes.
        let mut pd = [0u8; 32];
        pd[4] = 0x20;
        pd[6] = 0x1f;
        let r = CmRequest::parse(&pd).unwrap();
        assert_eq!(r, CmRequest { recfmt: 0, qid: 0, hrqsize: 32, hsqsize: 31 });
        assert_eq!(r.emit(), pd);
        assert_eq!(CmRequest::parse(&pd[..31]), Err(CmRejectStatus::InvalidLength));
        pd[0] = 1;
        assert_eq!(CmRequest::parse(&pd), Err(CmRejectStatus::InvalidRecfmt));
        let a = CmAccept { recfmt: 0, crqsize: 32 }.emit();
        assert_eq!(&a[..4], &[0, 0, 0x20, 0]);
        assert_eq!(emit_reject(CmRejectStatus::InvalidHsqsize), [0, 0, 4, 0]);
        assert_eq!(parse_reject(&[0, 0, 4, 0]), Some(CmRejectStatus::InvalidHsqsize));
    }
}
