//! MPA connection setup (RFC 5044 §7.1, RFC 6581): the Request and Reply
//! frames, a Reply with R set being a Reject, and in revision 2 with the
//! enhanced flag the IRD/ORD words that open the private data; views and
//! reprs.
//!
//! A frame arrives in pieces before the stream turns into FPDUs:
//! [`MpaFrame::parse_prefix`] says "more, please" until one is whole, and
//! refuses a bad key, revision or PD_Length as soon as those bytes are in.
//! Nothing here panics on a peer's bytes.

use super::{Field, WireError};

mod field {
    use super::Field;

    pub const KEY: Field = 0..16;
    /// M, C, R, enhanced; the rest reserved.
    pub const FLAGS: usize = 16;
    pub const REV: usize = 17;
    pub const PD_LENGTH: Field = 18..20;
    pub const PRIVATE_DATA: usize = 20;

    // The IRD/ORD words at the start of enhanced private data.
    /// A (peer-to-peer), B (zero-length Send RTR), IRD.
    pub const IRD: Field = 0..2;
    /// C (zero-length Write RTR), D (zero-length Read RTR), ORD.
    pub const ORD: Field = 2..4;
    /// The high byte of each word, where its two flags are.
    pub const IRD_FLAGS: usize = 0;
    pub const ORD_FLAGS: usize = 2;
}

const KEY_REQUEST: &[u8; 16] = b"MPA ID Req Frame";
const KEY_REPLY: &[u8; 16] = b"MPA ID Rep Frame";
/// Frame flags.
const M: u8 = 0x80;
const C: u8 = 0x40;
const R: u8 = 0x20;
const ENHANCED: u8 = 0x10;
/// IRD/ORD word flags, in the word's high byte: A or C, and B or D.
const HIGH: u8 = 0x80;
const LOW: u8 = 0x40;

/// Request or Reply (a Reply with `reject` set is a Reject).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MpaKind {
    Request,
    Reply,
}

impl MpaKind {
    fn from_key(key: &[u8]) -> Option<MpaKind> {
        match key {
            k if k == KEY_REQUEST => Some(MpaKind::Request),
            k if k == KEY_REPLY => Some(MpaKind::Reply),
            _ => None,
        }
    }

    /// The frame's 16-byte key.
    pub fn key(self) -> &'static [u8; 16] {
        match self {
            MpaKind::Request => KEY_REQUEST,
            MpaKind::Reply => KEY_REPLY,
        }
    }
}

view!(
    /// A read/write view of the IRD/ORD words (RFC 6581 §7.1), the first
    /// four bytes of an enhanced frame's private data.
    IrdOrdPacket
);

bit_fields!(IrdOrdPacket {
    /// A: peer-to-peer.
    p2p, set_p2p = field::IRD_FLAGS, HIGH;
    /// B: a zero-length Send as RTR.
    send_rtr, set_send_rtr = field::IRD_FLAGS, LOW;
    /// C: a zero-length RDMA Write as RTR.
    write_rtr, set_write_rtr = field::ORD_FLAGS, HIGH;
    /// D: a zero-length RDMA Read Request as RTR.
    read_rtr, set_read_rtr = field::ORD_FLAGS, LOW;
});

impl<T: AsRef<[u8]>> IrdOrdPacket<T> {
    /// The words' bytes.
    pub const LEN: usize = field::ORD.end;

    /// The buffer holds both words.
    pub fn check_len(&self) -> Result<(), WireError> {
        if self.buffer.as_ref().len() < Self::LEN {
            return Err(WireError::NoIrdOrd);
        }
        Ok(())
    }

    /// IRD: 14 bits, the flags left out.
    pub fn ird(&self) -> u16 {
        u16::from_be_bytes(super::get(self.buffer.as_ref(), field::IRD)) & IrdOrd::MAX
    }

    /// ORD: 14 bits, the flags left out.
    pub fn ord(&self) -> u16 {
        u16::from_be_bytes(super::get(self.buffer.as_ref(), field::ORD)) & IrdOrd::MAX
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> IrdOrdPacket<T> {
    /// IRD, keeping the flags (values above 14 bits are cut).
    pub fn set_ird(&mut self, v: u16) {
        set_value(&mut self.buffer.as_mut()[field::IRD], v);
    }

    /// ORD, keeping the flags (values above 14 bits are cut).
    pub fn set_ord(&mut self, v: u16) {
        set_value(&mut self.buffer.as_mut()[field::ORD], v);
    }
}

/// The low 14 bits of a big-endian IRD or ORD word.
fn set_value(word: &mut [u8], v: u16) {
    let flags = u16::from(word[0]) << 8 & !IrdOrd::MAX;
    word.copy_from_slice(&(flags | (v & IrdOrd::MAX)).to_be_bytes());
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

    pub fn parse<T: AsRef<[u8]>>(p: &IrdOrdPacket<T>) -> Result<Self, WireError> {
        p.check_len()?;
        Ok(Self {
            ird: p.ird(),
            ord: p.ord(),
            p2p: p.p2p(),
            send_rtr: p.send_rtr(),
            write_rtr: p.write_rtr(),
            read_rtr: p.read_rtr(),
        })
    }

    pub fn buffer_len(&self) -> usize {
        IrdOrdPacket::<&[u8]>::LEN
    }

    /// # Panics
    /// If the buffer is shorter than `buffer_len()`.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut IrdOrdPacket<T>) {
        p.buffer.as_mut()[..IrdOrdPacket::<&[u8]>::LEN].fill(0);
        p.set_ird(self.ird);
        p.set_ord(self.ord);
        p.set_p2p(self.p2p);
        p.set_send_rtr(self.send_rtr);
        p.set_write_rtr(self.write_rtr);
        p.set_read_rtr(self.read_rtr);
    }
}

view!(
    /// A read/write view of an MPA Request or Reply frame (RFC 5044 §7.1):
    /// key, flags, revision, PD_Length, then the private data.
    MpaPacket
);

be_fields!(MpaPacket {
    /// PD_Length: the private data's bytes, IRD/ORD words included.
    pd_length, set_pd_length: u16 = field::PD_LENGTH;
});

bit_fields!(MpaPacket {
    /// M: the sender wants to receive markers.
    markers, set_markers = field::FLAGS, M;
    /// C: the sender wants CRCs.
    crc, set_crc = field::FLAGS, C;
    /// R: a Reply that rejects the connection.
    reject, set_reject = field::FLAGS, R;
    /// RFC 6581 enhanced connection setup.
    enhanced, set_enhanced = field::FLAGS, ENHANCED;
});

impl<T: AsRef<[u8]>> MpaPacket<T> {
    /// The buffer holds the fixed header and the private data PD_Length
    /// announces.
    pub fn check_len(&self) -> Result<(), WireError> {
        let len = self.buffer.as_ref().len();
        if len < MpaFrame::HEADER_LEN || len < self.frame_len() {
            return Err(WireError::Truncated);
        }
        Ok(())
    }

    fn frame_len(&self) -> usize {
        field::PRIVATE_DATA + usize::from(self.pd_length())
    }

    pub fn key(&self) -> &[u8] {
        &self.buffer.as_ref()[field::KEY]
    }

    /// The flags byte, reserved bits and all.
    pub fn flags(&self) -> u8 {
        self.buffer.as_ref()[field::FLAGS]
    }

    pub fn rev(&self) -> u8 {
        self.buffer.as_ref()[field::REV]
    }

    /// PD_Length bytes of private data.
    pub fn private_data(&self) -> &[u8] {
        &self.buffer.as_ref()[field::PRIVATE_DATA..self.frame_len()]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> MpaPacket<T> {
    pub fn set_key(&mut self, key: &[u8; 16]) {
        self.buffer.as_mut()[field::KEY].copy_from_slice(key);
    }

    pub fn set_flags(&mut self, v: u8) {
        self.buffer.as_mut()[field::FLAGS] = v;
    }

    pub fn set_rev(&mut self, v: u8) {
        self.buffer.as_mut()[field::REV] = v;
    }

    pub fn private_data_mut(&mut self) -> &mut [u8] {
        let end = self.frame_len();
        &mut self.buffer.as_mut()[field::PRIVATE_DATA..end]
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

impl MpaFrame {
    /// Key, flags, revision and PD_Length.
    pub const HEADER_LEN: usize = field::PRIVATE_DATA;
    /// The most private data RFC 5044 allows (Linux takes 256).
    pub const MAX_PRIVATE_DATA: u16 = 512;

    /// A frame at the start of `b`, and its length; `None` while `b` holds
    /// only part of one. A wrong key, revision or PD_Length is refused as
    /// soon as it is in, before the private data.
    pub fn parse_prefix(b: &[u8]) -> Result<Option<(MpaFrame, usize)>, WireError> {
        if b.len() < field::KEY.end {
            let key_so_far = |k: &[u8; 16]| k.starts_with(b);
            return if key_so_far(KEY_REQUEST) || key_so_far(KEY_REPLY) {
                Ok(None)
            } else {
                Err(WireError::BadKey)
            };
        }
        MpaKind::from_key(&b[field::KEY]).ok_or(WireError::BadKey)?;
        if b.len() < Self::HEADER_LEN {
            return Ok(None);
        }
        let len = Self::check_header(&MpaPacket::new_unchecked(&b[..Self::HEADER_LEN]))?.1;
        match b.get(..len) {
            Some(frame) => Ok(Some((Self::parse(&MpaPacket::new_checked(frame)?)?, len))),
            None => Ok(None),
        }
    }

    /// The fixed header's checks, on a view holding at least that: the
    /// kind, and the whole frame's length.
    fn check_header<T: AsRef<[u8]>>(p: &MpaPacket<T>) -> Result<(MpaKind, usize), WireError> {
        let kind = MpaKind::from_key(p.key()).ok_or(WireError::BadKey)?;
        if !(1..=2).contains(&p.rev()) {
            return Err(WireError::BadRevision(p.rev()));
        }
        if p.pd_length() > Self::MAX_PRIVATE_DATA {
            return Err(WireError::PrivateDataTooLong(p.pd_length()));
        }
        Ok((kind, p.frame_len()))
    }

    /// A whole frame.
    pub fn parse<T: AsRef<[u8]>>(p: &MpaPacket<T>) -> Result<MpaFrame, WireError> {
        p.check_len()?;
        let (kind, _) = Self::check_header(p)?;
        let (rev, enhanced) = (p.rev(), p.enhanced());
        let mut pd = p.private_data();
        let ird_ord = if rev == 2 && enhanced {
            let io = IrdOrd::parse(&IrdOrdPacket::new_checked(pd)?)?;
            pd = &pd[IrdOrdPacket::<&[u8]>::LEN..];
            Some(io)
        } else {
            None
        };
        Ok(MpaFrame {
            kind,
            markers: p.markers(),
            crc: p.crc(),
            reject: p.reject(),
            enhanced,
            rev,
            ird_ord,
            private_data: pd.to_vec(),
        })
    }

    /// PD_Length: the IRD/ORD words and the ULP's private data.
    pub fn pd_len(&self) -> usize {
        self.private_data.len() + self.ird_ord.map_or(0, |io| io.buffer_len())
    }

    pub fn buffer_len(&self) -> usize {
        Self::HEADER_LEN + self.pd_len()
    }

    /// # Panics
    /// If the buffer is shorter than `buffer_len()`.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut MpaPacket<T>) {
        p.set_key(self.kind.key());
        p.set_flags(0);
        p.set_markers(self.markers);
        p.set_crc(self.crc);
        p.set_reject(self.reject);
        p.set_enhanced(self.enhanced);
        p.set_rev(self.rev);
        p.set_pd_length(self.pd_len() as u16);
        let mut pd = p.private_data_mut();
        if let Some(io) = &self.ird_ord {
            let (words, rest) = pd.split_at_mut(io.buffer_len());
            io.emit(&mut IrdOrdPacket::new_unchecked(words));
            pd = rest;
        }
        pd.copy_from_slice(&self.private_data);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::tests::{hex, mpa_frame};

    fn emit(f: &MpaFrame) -> Vec<u8> {
        let mut out = vec![0; f.buffer_len()];
        f.emit(&mut MpaPacket::new_unchecked(&mut out));
        out
    }

    fn ird_ord(b: &[u8]) -> IrdOrd {
        IrdOrd::parse(&IrdOrdPacket::new_unchecked(b)).unwrap()
    }

    /// Linux's MPA Request to nvmet-rdma, byte for byte (the reference's
    /// frame 4): enhanced, revision 2, IRD 128, ORD 0, 36 bytes of PD
    /// (the fixture of `wire::tests`).
    #[test]
    fn the_linux_hosts_request() {
        let (bytes, want) = (mpa_frame::bytes(), mpa_frame::repr());
        assert_eq!(MpaFrame::parse_prefix(&bytes), Ok(Some((want.clone(), 56))));
        assert_eq!(emit(&want), bytes);
        assert_eq!(want.buffer_len(), 56);
        // Every prefix is "more, please", never an error.
        for n in 0..bytes.len() {
            assert_eq!(MpaFrame::parse_prefix(&bytes[..n]), Ok(None), "{n} bytes");
        }
    }

    #[test]
    fn siws_reply_and_rejects() {
        // nvmet's Reply: IRD 0, ORD = the requester's IRD.
        let mut rep = b"MPA ID Rep Frame".to_vec();
        rep.extend(hex("10 02 0024 0000 0080"));
        rep.extend(hex("0000 2000"));
        rep.resize(56, 0);
        let (f, n) = MpaFrame::parse_prefix(&rep).unwrap().unwrap();
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
        assert_eq!(&emit(&rej)[16..], hex("30 02 0004 0000 0000"));
        // The NVMe/RDMA CM reject of an admin HSQSIZE 32: IRD/ORD then
        // recfmt 0, sts 4 (little-endian).
        let mut nvme = b"MPA ID Rep Frame".to_vec();
        nvme.extend(hex("30 02 0008 0000 0010 0000 0400"));
        let (f, _) = MpaFrame::parse_prefix(&nvme).unwrap().unwrap();
        assert!(f.reject);
        assert_eq!(f.private_data, hex("0000 0400"));
    }

    #[test]
    fn rtr_bits_and_refusals() {
        // Request for peer-to-peer with Write RTR; siw's Reply 8000 / 8010.
        let io = ird_ord(&hex("8000 8010"));
        assert_eq!(io, IrdOrd { ird: 0, ord: 16, p2p: true, write_rtr: true, ..IrdOrd::default() });
        let mut out = [0; 4];
        io.emit(&mut IrdOrdPacket::new_unchecked(&mut out));
        assert_eq!(out[..], hex("8000 8010"));
        assert!(ird_ord(&hex("c001 4010")).send_rtr);
        assert!(ird_ord(&hex("8001 4010")).read_rtr);

        let frame = |flags: u8, rev: u8, pd: u16| {
            let mut b = b"MPA ID Req Frame".to_vec();
            b.extend([flags, rev]);
            b.extend(pd.to_be_bytes());
            b.resize(20 + usize::from(pd), 0);
            b
        };
        assert_eq!(MpaFrame::parse_prefix(&frame(0x10, 3, 4)), Err(WireError::BadRevision(3)));
        assert_eq!(MpaFrame::parse_prefix(&frame(0x10, 0, 4)), Err(WireError::BadRevision(0)));
        assert_eq!(
            MpaFrame::parse_prefix(&frame(0, 1, 513)),
            Err(WireError::PrivateDataTooLong(513))
        );
        assert_eq!(MpaFrame::parse_prefix(&frame(0x10, 2, 2)), Err(WireError::NoIrdOrd));
        assert_eq!(MpaFrame::parse_prefix(b"MPA ID Req Fraxx"), Err(WireError::BadKey));
        assert_eq!(MpaFrame::parse_prefix(b"GET /"), Err(WireError::BadKey));
        // Revision 1 carries no IRD/ORD: all private data is the ULP's.
        let (f, _) = MpaFrame::parse_prefix(&frame(0xd0, 1, 4)).unwrap().unwrap();
        assert!(f.markers && f.crc && f.ird_ord.is_none() && f.private_data.len() == 4);
    }
}
