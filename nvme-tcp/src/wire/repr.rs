//! What a PDU header means: one struct per PDU type, and [`PduRepr`] for the
//! framing all types share (header digest, padding, data, data digest).

use super::{
    DIGEST_LEN, Digests, Fes, Framing, Pdu, PduError, PduType, TERM_REQ_MAX_DATA, crc32c, field,
    flags,
};
use nvme_of::bytes::{put_u16, put_u32};
use nvme_of::nvme::{Cqe, Sqe};

/// ICReq: the host opens a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IcReq {
    /// PDU format version; 0 is the only one defined.
    pub pfv: u16,
    /// Host PDU data alignment (0-based dwords) the controller must use for C2H data.
    pub hpda: u8,
    pub digests: Digests,
    /// Maximum outstanding R2Ts per command, 0-based.
    pub maxr2t: u32,
}

/// ICResp: the controller accepts the connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IcResp {
    pub pfv: u16,
    /// Controller PDU data alignment (0-based dwords) the host must use for H2C data.
    pub cpda: u8,
    pub digests: Digests,
    /// Most data bytes one H2CData PDU may carry.
    pub maxh2cdata: u32,
}

/// H2CTermReq / C2HTermReq: the sender found a fatal error and closes.
/// The PDU's data is (up to 128 bytes of) the offending PDU header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TermReq {
    pub fes: Fes,
    pub fei: u32,
}

/// CapsuleCmd: a submission queue entry, possibly followed by in-capsule data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CapsuleCmd {
    pub sqe: Sqe,
}

/// CapsuleResp: a completion queue entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CapsuleResp {
    pub cqe: Cqe,
}

/// H2CData / C2HData: a piece of a command's data at offset DATAO.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DataPdu {
    /// Command capsule CID.
    pub cccid: u16,
    /// Transfer tag from the R2T (H2CData only; reserved in C2HData).
    pub ttag: u16,
    pub datao: u32,
    /// LAST_PDU.
    pub last: bool,
    /// SUCCESS (C2HData only): the command succeeded and no CapsuleResp follows.
    pub success: bool,
}

/// R2T: the controller is ready for R2TL bytes of a command's data at R2TO.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct R2t {
    pub cccid: u16,
    pub ttag: u16,
    pub r2to: u32,
    pub r2tl: u32,
}

/// The PDU-specific header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Header {
    IcReq(IcReq),
    IcResp(IcResp),
    H2cTermReq(TermReq),
    C2hTermReq(TermReq),
    CapsuleCmd(CapsuleCmd),
    CapsuleResp(CapsuleResp),
    H2cData(DataPdu),
    C2hData(DataPdu),
    R2t(R2t),
}

impl Header {
    pub fn pdu_type(&self) -> PduType {
        match self {
            Self::IcReq(_) => PduType::IcReq,
            Self::IcResp(_) => PduType::IcResp,
            Self::H2cTermReq(_) => PduType::H2cTermReq,
            Self::C2hTermReq(_) => PduType::C2hTermReq,
            Self::CapsuleCmd(_) => PduType::CapsuleCmd,
            Self::CapsuleResp(_) => PduType::CapsuleResp,
            Self::H2cData(_) => PduType::H2cData,
            Self::C2hData(_) => PduType::C2hData,
            Self::R2t(_) => PduType::R2t,
        }
    }
}

/// A parsed PDU header with the framing around it: whether digests follow,
/// how much padding precedes the data, how much data there is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PduRepr {
    pub header: Header,
    /// HDGSTF: a header digest follows the header.
    pub hdgst: bool,
    /// DDGSTF: a data digest follows the data.
    pub ddgst: bool,
    /// PAD bytes between the header (and its digest) and the data.
    pub pad: u8,
    /// Bytes of data (for H2CData/C2HData this is also DATAL).
    pub data_len: u32,
}

impl PduRepr {
    /// A PDU to send with the framing in force in its direction: digests
    /// as negotiated, data aligned to the receiver's PDA.
    pub fn new(header: Header, framing: Framing, data_len: u32) -> Self {
        let ty = header.pdu_type();
        if !ty.has_digests() {
            return Self { header, hdgst: false, ddgst: false, pad: 0, data_len };
        }
        let has_data = data_len > 0;
        let unpadded = usize::from(ty.hlen()) + framing.digests.header_len();
        let pad =
            if has_data { unpadded.next_multiple_of(framing.alignment()) - unpadded } else { 0 };
        Self {
            header,
            hdgst: framing.digests.header,
            ddgst: framing.digests.data && has_data,
            pad: pad as u8,
            data_len,
        }
    }

    pub fn pdu_type(&self) -> PduType {
        self.header.pdu_type()
    }

    pub fn hlen(&self) -> usize {
        usize::from(self.pdu_type().hlen())
    }

    /// Bytes from the start of the PDU to its data: header, header digest and
    /// padding. This is what [`emit_header`](Self::emit_header) writes.
    pub fn header_len(&self) -> usize {
        self.hlen() + if self.hdgst { DIGEST_LEN } else { 0 } + usize::from(self.pad)
    }

    /// PDO: where data starts, or 0 when there is no data. A TermReq's
    /// error data directly follows its header and its PDO is 0.
    pub fn pdo(&self) -> u8 {
        if self.data_len == 0 || self.pdu_type().is_term_req() {
            0
        } else {
            self.header_len() as u8
        }
    }

    /// Bytes of data digest after the data.
    pub fn ddgst_len(&self) -> usize {
        if self.ddgst { DIGEST_LEN } else { 0 }
    }

    /// PLEN: header, header digest, padding, data and data digest.
    pub fn plen(&self) -> u32 {
        (self.header_len() + self.ddgst_len()) as u32 + self.data_len
    }

    /// FLAGS as emitted.
    pub fn flags(&self) -> u8 {
        let mut f = 0;
        if self.hdgst {
            f |= flags::HDGSTF;
        }
        if self.ddgst {
            f |= flags::DDGSTF;
        }
        if let Header::H2cData(d) | Header::C2hData(d) = &self.header {
            if d.last {
                f |= flags::LAST_PDU;
            }
            if d.success {
                f |= flags::SUCCESS;
            }
        }
        f
    }

    /// Parse and validate a PDU header against the framing in force. The
    /// view must hold the header and, if HDGSTF is set, the header digest.
    ///
    /// Fields are checked in order, the lowest offset first (type, FLAGS,
    /// HLEN, PDO, PLEN), then the header digest, then the type's own fields,
    /// so the error names the first field that is wrong.
    pub fn parse<T: AsRef<[u8]>>(pdu: &Pdu<T>, framing: Framing) -> Result<Self, PduError> {
        pdu.check_len()?;
        let b = pdu.buffer.as_ref();
        let ty = PduType::from_u8(b[field::TYPE]).ok_or(PduError::BadType(b[field::TYPE]))?;
        let (f, hlen, pdo, plen) = (pdu.flags(), pdu.hlen(), pdu.pdo(), pdu.plen());
        let bad_field = |offset: usize| PduError::BadField { pdu_type: ty, offset: offset as u8 };

        let hdgst = f & flags::HDGSTF != 0;
        let ddgst = f & flags::DDGSTF != 0;
        let carries_data = ty.may_carry_data() && pdo != 0;
        if f & !ty.valid_flags() != 0
            || (ty.has_digests() && hdgst != framing.digests.header)
            || ddgst != (carries_data && framing.digests.data)
            || (f & flags::SUCCESS != 0 && f & flags::LAST_PDU == 0)
        {
            return Err(PduError::BadFlags { pdu_type: ty, flags: f });
        }

        if hlen != ty.hlen() {
            return Err(PduError::BadHlen { pdu_type: ty, hlen });
        }

        let unpadded = u32::from(hlen) + if hdgst { DIGEST_LEN as u32 } else { 0 };
        if pdo != 0
            && (!ty.may_carry_data()
                || u32::from(pdo) < unpadded
                || usize::from(pdo) % framing.alignment() != 0)
        {
            return Err(PduError::BadPdo { pdu_type: ty, pdo });
        }

        let dd = if ddgst { DIGEST_LEN as u32 } else { 0 };
        let data_len = match ty {
            PduType::IcReq | PduType::IcResp => (plen == u32::from(hlen)).then_some(0),
            PduType::H2cTermReq | PduType::C2hTermReq => {
                let max = u32::from(hlen) + TERM_REQ_MAX_DATA as u32;
                (u32::from(hlen)..=max).contains(&plen).then(|| plen - u32::from(hlen))
            }
            _ if pdo == 0 => (plen == unpadded).then_some(0),
            _ => plen.checked_sub(u32::from(pdo) + dd).filter(|&n| n > 0),
        };
        let data_len = data_len.ok_or(PduError::BadPlen { pdu_type: ty, plen })?;

        if hdgst {
            let received = pdu.header_digest().ok_or(PduError::Truncated)?;
            let computed = pdu.compute_header_digest();
            if received != computed {
                return Err(PduError::HeaderDigest { received, computed });
            }
        }

        let header = match ty {
            PduType::IcReq | PduType::IcResp => {
                if pdu.pfv() != 0 {
                    let offset = field::PFV.start as u8;
                    return Err(PduError::UnsupportedParameter { pdu_type: ty, offset });
                }
                if pdu.pda() > 31 {
                    return Err(bad_field(field::PDA));
                }
                if pdu.dgst() & !0x3 != 0 {
                    return Err(bad_field(field::DGST));
                }
                let digests = Digests::from_bits(pdu.dgst());
                if ty == PduType::IcReq {
                    Header::IcReq(IcReq {
                        pfv: 0,
                        hpda: pdu.pda(),
                        digests,
                        maxr2t: pdu.ic_limit(),
                    })
                } else {
                    let maxh2cdata = pdu.ic_limit();
                    if maxh2cdata < 4096 || !maxh2cdata.is_multiple_of(4) {
                        return Err(bad_field(field::IC_LIMIT.start));
                    }
                    Header::IcResp(IcResp { pfv: 0, cpda: pdu.pda(), digests, maxh2cdata })
                }
            }
            PduType::H2cTermReq | PduType::C2hTermReq => {
                let t = TermReq { fes: Fes::from_u16(pdu.fes()), fei: pdu.fei() };
                if ty == PduType::H2cTermReq {
                    Header::H2cTermReq(t)
                } else {
                    Header::C2hTermReq(t)
                }
            }
            PduType::CapsuleCmd => {
                let mut sqe = [0u8; Sqe::LEN];
                sqe.copy_from_slice(pdu.sqe());
                Header::CapsuleCmd(CapsuleCmd { sqe: Sqe::parse(&sqe) })
            }
            PduType::CapsuleResp => {
                let mut cqe = [0u8; Cqe::LEN];
                cqe.copy_from_slice(pdu.cqe());
                Header::CapsuleResp(CapsuleResp { cqe: Cqe::parse(&cqe) })
            }
            PduType::H2cData | PduType::C2hData => {
                if pdu.datal() != data_len {
                    return Err(bad_field(field::DATAL.start));
                }
                let last = f & flags::LAST_PDU != 0;
                let success = f & flags::SUCCESS != 0;
                let d = DataPdu { cccid: pdu.cccid(), ttag: 0, datao: pdu.datao(), last, success };
                if ty == PduType::H2cData {
                    Header::H2cData(DataPdu { ttag: pdu.ttag(), ..d })
                } else {
                    Header::C2hData(d)
                }
            }
            PduType::R2t => {
                if pdu.datal() == 0 {
                    return Err(bad_field(field::DATAL.start));
                }
                Header::R2t(R2t {
                    cccid: pdu.cccid(),
                    ttag: pdu.ttag(),
                    r2to: pdu.datao(),
                    r2tl: pdu.datal(),
                })
            }
        };
        let pad =
            if data_len > 0 && !ty.is_term_req() { (u32::from(pdo) - unpadded) as u8 } else { 0 };
        Ok(Self { header, hdgst, ddgst, pad, data_len })
    }

    /// Write the header, its digest and the padding: the first
    /// [`header_len`](Self::header_len) bytes of the PDU.
    ///
    /// # Panics
    /// If `b` is shorter than `header_len()`.
    pub fn emit_header(&self, b: &mut [u8]) {
        let hlen = self.hlen();
        let b = &mut b[..self.header_len()];
        b.fill(0);
        b[field::TYPE] = self.pdu_type() as u8;
        b[field::FLAGS] = self.flags();
        b[field::HLEN] = hlen as u8;
        b[field::PDO] = self.pdo();
        put_u32(b, field::PLEN.start, self.plen());
        match &self.header {
            Header::IcReq(ic) => {
                put_u16(b, field::PFV.start, ic.pfv);
                b[field::PDA] = ic.hpda;
                b[field::DGST] = ic.digests.bits();
                put_u32(b, field::IC_LIMIT.start, ic.maxr2t);
            }
            Header::IcResp(ic) => {
                put_u16(b, field::PFV.start, ic.pfv);
                b[field::PDA] = ic.cpda;
                b[field::DGST] = ic.digests.bits();
                put_u32(b, field::IC_LIMIT.start, ic.maxh2cdata);
            }
            Header::H2cTermReq(t) | Header::C2hTermReq(t) => {
                put_u16(b, field::FES.start, t.fes.to_u16());
                put_u32(b, field::FEI.start, t.fei);
            }
            Header::CapsuleCmd(c) => {
                let mut sqe = [0u8; Sqe::LEN];
                c.sqe.emit(&mut sqe);
                b[field::SQE].copy_from_slice(&sqe);
            }
            Header::CapsuleResp(c) => {
                let mut cqe = [0u8; Cqe::LEN];
                c.cqe.emit(&mut cqe);
                b[field::CQE].copy_from_slice(&cqe);
            }
            Header::H2cData(d) | Header::C2hData(d) => {
                put_u16(b, field::CCCID.start, d.cccid);
                put_u16(b, field::TTAG.start, d.ttag);
                put_u32(b, field::DATAO.start, d.datao);
                put_u32(b, field::DATAL.start, self.data_len);
            }
            Header::R2t(r) => {
                put_u16(b, field::CCCID.start, r.cccid);
                put_u16(b, field::TTAG.start, r.ttag);
                put_u32(b, field::DATAO.start, r.r2to);
                put_u32(b, field::DATAL.start, r.r2tl);
            }
        }
        if self.hdgst {
            let d = crc32c(&b[..hlen]);
            put_u32(b, hlen, d);
        }
    }

    /// Write the whole PDU: header, digest, padding, `data` and its digest.
    ///
    /// # Panics
    /// If `b` is shorter than PLEN or `data` is not `data_len` bytes.
    pub fn emit(&self, b: &mut [u8], data: &[u8]) {
        assert_eq!(data.len(), self.data_len as usize, "data length must match the repr");
        self.emit_header(b);
        let at = self.header_len();
        b[at..at + data.len()].copy_from_slice(data);
        if self.ddgst {
            put_u32(b, at + data.len(), crc32c(data));
        }
    }
}
