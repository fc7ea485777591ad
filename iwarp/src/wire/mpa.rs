//! MPA connection setup (RFC 5044 §7.1, RFC 6581): the Request and Reply
//! frames, a Reply with R set being a Reject, and in revision 2 with the
//! enhanced flag the IRD/ORD words that open the private data.

use super::{WireError, be16};

/// Request or Reply (a Reply with `reject` set is a Reject).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MpaKind {
    Request,
    Reply,
}

/// The IRD/ORD words of enhanced MPA (RFC 6581 §7.1): how many inbound
/// and outbound RDMA Reads this side takes, and the peer-to-peer
/// ready-to-receive it offers or picked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct IrdOrd {
    pub ird: u16,
    pub ord: u16,
    /// A: peer-to-peer; the initiator sends an RTR before anything else.
    pub p2p: bool,
    /// B: a zero-length Send as RTR.
    pub send_rtr: bool,
    /// C: a zero-length RDMA Write as RTR.
    pub write_rtr: bool,
    /// D: a zero-length RDMA Read Request as RTR.
    pub read_rtr: bool,
}

impl IrdOrd {
    /// IRD and ORD are 14-bit values.
    pub const MAX: u16 = 0x3fff;

    fn parse(b: &[u8]) -> Self {
        let (ird, ord) = (be16(b, 0), be16(b, 2));
        Self {
            ird: ird & Self::MAX,
            ord: ord & Self::MAX,
            p2p: ird & 0x8000 != 0,
            send_rtr: ird & 0x4000 != 0,
            write_rtr: ord & 0x8000 != 0,
            read_rtr: ord & 0x4000 != 0,
        }
    }

    fn emit(&self, out: &mut Vec<u8>) {
        let bit = |on: bool, b: u16| if on { b } else { 0 };
        let ird = (self.ird & Self::MAX) | bit(self.p2p, 0x8000) | bit(self.send_rtr, 0x4000);
        let ord = (self.ord & Self::MAX) | bit(self.write_rtr, 0x8000) | bit(self.read_rtr, 0x4000);
        out.extend_from_slice(&ird.to_be_bytes());
        out.extend_from_slice(&ord.to_be_bytes());
    }
}

/// An MPA Request, Reply or Reject.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MpaFrame {
    pub kind: MpaKind,
    /// M: the sender wants to receive markers.
    pub markers: bool,
    /// C: the sender wants CRCs (either side asking is enough).
    pub crc: bool,
    /// R: a Reply that rejects the connection.
    pub reject: bool,
    /// RFC 6581 enhanced connection setup.
    pub enhanced: bool,
    /// 1 (RFC 5044) or 2 (RFC 6581).
    pub rev: u8,
    /// Revision 2 with `enhanced`: the first four private-data bytes.
    pub ird_ord: Option<IrdOrd>,
    /// The ULP's private data (after the IRD/ORD words, if any).
    pub private_data: Vec<u8>,
}

const KEY_REQUEST: &[u8; 16] = b"MPA ID Req Frame";
const KEY_REPLY: &[u8; 16] = b"MPA ID Rep Frame";
const M: u8 = 0x80;
const C: u8 = 0x40;
const R: u8 = 0x20;
const ENHANCED: u8 = 0x10;

impl MpaFrame {
    /// Key, flags, revision and PD_Length.
    pub const HEADER_LEN: usize = 20;
    /// The most private data RFC 5044 allows (Linux takes 256).
    pub const MAX_PRIVATE_DATA: u16 = 512;

    /// A frame at the start of `b`, and its length; `None` while `b` holds
    /// only part of one.
    pub fn parse(b: &[u8]) -> Result<Option<(MpaFrame, usize)>, WireError> {
        if b.len() < 16 {
            let key_so_far = |k: &[u8; 16]| k.starts_with(b);
            return if key_so_far(KEY_REQUEST) || key_so_far(KEY_REPLY) {
                Ok(None)
            } else {
                Err(WireError::BadKey)
            };
        }
        let kind = match &b[..16] {
            k if k == KEY_REQUEST => MpaKind::Request,
            k if k == KEY_REPLY => MpaKind::Reply,
            _ => return Err(WireError::BadKey),
        };
        if b.len() < Self::HEADER_LEN {
            return Ok(None);
        }
        let (flags, rev, pd_len) = (b[16], b[17], be16(b, 18));
        if !(1..=2).contains(&rev) {
            return Err(WireError::BadRevision(rev));
        }
        if pd_len > Self::MAX_PRIVATE_DATA {
            return Err(WireError::PrivateDataTooLong(pd_len));
        }
        let len = Self::HEADER_LEN + usize::from(pd_len);
        if b.len() < len {
            return Ok(None);
        }
        let enhanced = flags & ENHANCED != 0;
        let mut pd = &b[Self::HEADER_LEN..len];
        let ird_ord = if rev == 2 && enhanced {
            if pd.len() < 4 {
                return Err(WireError::NoIrdOrd);
            }
            let io = IrdOrd::parse(pd);
            pd = &pd[4..];
            Some(io)
        } else {
            None
        };
        let frame = MpaFrame {
            kind,
            markers: flags & M != 0,
            crc: flags & C != 0,
            reject: flags & R != 0,
            enhanced,
            rev,
            ird_ord,
            private_data: pd.to_vec(),
        };
        Ok(Some((frame, len)))
    }

    /// PD_Length: the IRD/ORD words and the ULP's private data.
    pub fn pd_len(&self) -> usize {
        self.private_data.len() + if self.ird_ord.is_some() { 4 } else { 0 }
    }

    pub fn buffer_len(&self) -> usize {
        Self::HEADER_LEN + self.pd_len()
    }

    /// Append the frame to `out`.
    pub fn emit(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(match self.kind {
            MpaKind::Request => KEY_REQUEST,
            MpaKind::Reply => KEY_REPLY,
        });
        let bit = |on: bool, b: u8| if on { b } else { 0 };
        out.push(
            bit(self.markers, M)
                | bit(self.crc, C)
                | bit(self.reject, R)
                | bit(self.enhanced, ENHANCED),
        );
        out.push(self.rev);
        out.extend_from_slice(&(self.pd_len() as u16).to_be_bytes());
        if let Some(io) = &self.ird_ord {
            io.emit(out);
        }
        out.extend_from_slice(&self.private_data);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(s: &str) -> Vec<u8> {
        let s: String = s.split_whitespace().collect();
        (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
    }

    /// The NVMe/RDMA CM request Linux's host sends for its admin queue
    /// (recfmt 0, qid 0, hrqsize 32, hsqsize 31, 24 reserved bytes).
    fn cm_req() -> Vec<u8> {
        let mut v = hex("0000 0000 2000 1f00");
        v.resize(32, 0);
        v
    }

    /// Linux's MPA Request to nvmet-rdma, byte for byte (the reference's
    /// frame 4): enhanced, revision 2, IRD 128, ORD 0, 36 bytes of PD.
    #[test]
    fn the_linux_hosts_request() {
        let mut bytes = b"MPA ID Req Frame".to_vec();
        bytes.extend(hex("10 02 0024 0080 0000"));
        bytes.extend(cm_req());
        let want = MpaFrame {
            kind: MpaKind::Request,
            markers: false,
            crc: false,
            reject: false,
            enhanced: true,
            rev: 2,
            ird_ord: Some(IrdOrd { ird: 128, ..IrdOrd::default() }),
            private_data: cm_req(),
        };
        assert_eq!(MpaFrame::parse(&bytes), Ok(Some((want.clone(), 56))));
        let mut out = Vec::new();
        want.emit(&mut out);
        assert_eq!(out, bytes);
        assert_eq!(want.buffer_len(), 56);
        // Every prefix is "more, please", never an error.
        for n in 0..bytes.len() {
            assert_eq!(MpaFrame::parse(&bytes[..n]), Ok(None), "{n} bytes");
        }
    }

    #[test]
    fn siws_reply_and_rejects() {
        // nvmet's Reply: IRD 0, ORD = the requester's IRD.
        let mut rep = b"MPA ID Rep Frame".to_vec();
        rep.extend(hex("10 02 0024 0000 0080"));
        rep.extend(hex("0000 2000"));
        rep.resize(56, 0);
        let (f, n) = MpaFrame::parse(&rep).unwrap().unwrap();
        assert_eq!((f.kind, n, f.reject), (MpaKind::Reply, 56, false));
        assert_eq!(f.ird_ord, Some(IrdOrd { ord: 128, ..IrdOrd::default() }));
        // A Request with M is rejected: R|ENH, PD_Length 4, IRD/ORD 0.
        let rej = MpaFrame {
            kind: MpaKind::Reply,
            markers: false,
            crc: false,
            reject: true,
            enhanced: true,
            rev: 2,
            ird_ord: Some(IrdOrd::default()),
            private_data: Vec::new(),
        };
        let mut out = Vec::new();
        rej.emit(&mut out);
        assert_eq!(&out[16..], hex("30 02 0004 0000 0000"));
        // The NVMe/RDMA CM reject of an admin HSQSIZE 32: IRD/ORD then
        // recfmt 0, sts 4 (little-endian).
        let mut nvme = b"MPA ID Rep Frame".to_vec();
        nvme.extend(hex("30 02 0008 0000 0010 0000 0400"));
        let (f, _) = MpaFrame::parse(&nvme).unwrap().unwrap();
        assert!(f.reject);
        assert_eq!(f.private_data, hex("0000 0400"));
    }

    #[test]
    fn rtr_bits_and_refusals() {
        // Request for peer-to-peer with Write RTR; siw's Reply 8000 / 8010.
        let io = IrdOrd::parse(&hex("8000 8010"));
        assert_eq!(io, IrdOrd { ird: 0, ord: 16, p2p: true, write_rtr: true, ..IrdOrd::default() });
        let mut out = Vec::new();
        io.emit(&mut out);
        assert_eq!(out, hex("8000 8010"));
        assert!(IrdOrd::parse(&hex("c001 4010")).send_rtr);
        assert!(IrdOrd::parse(&hex("8001 4010")).read_rtr);

        let frame = |flags: u8, rev: u8, pd: u16| {
            let mut b = b"MPA ID Req Frame".to_vec();
            b.extend([flags, rev]);
            b.extend(pd.to_be_bytes());
            b.resize(20 + usize::from(pd), 0);
            b
        };
        assert_eq!(MpaFrame::parse(&frame(0x10, 3, 4)), Err(WireError::BadRevision(3)));
        assert_eq!(MpaFrame::parse(&frame(0x10, 0, 4)), Err(WireError::BadRevision(0)));
        assert_eq!(MpaFrame::parse(&frame(0, 1, 513)), Err(WireError::PrivateDataTooLong(513)));
        assert_eq!(MpaFrame::parse(&frame(0x10, 2, 2)), Err(WireError::NoIrdOrd));
        assert_eq!(MpaFrame::parse(b"MPA ID Req Fraxx"), Err(WireError::BadKey));
        assert_eq!(MpaFrame::parse(b"GET /"), Err(WireError::BadKey));
        // Revision 1 carries no IRD/ORD: all private data is the ULP's.
        let (f, _) = MpaFrame::parse(&frame(0xd0, 1, 4)).unwrap().unwrap();
        assert!(f.markers && f.crc && f.ird_ord.is_none() && f.private_data.len() == 4);
    }
}
