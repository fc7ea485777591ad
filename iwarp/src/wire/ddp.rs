//! DDP segment headers (RFC 5041 §4) with the RDMAP control byte (RFC 5040
//! §4): the two control bytes every segment starts with, then tagged
//! (STag, TO) or untagged (QN, MSN, MO) fields; views and reprs.
//!
//! The header's shape comes from the opcode alone (as Linux siw takes
//! it), and the T bit must agree. Nothing here panics on a peer's bytes
//! or allocates.

use super::{Field, WireError};

mod field {
    use super::Field;

    /// DDP control: T, L, reserved, DV.
    pub const DDP_CTRL: usize = 0;
    /// RDMAP control (DDP's first RsvdULP byte): RV, reserved, opcode.
    pub const RDMAP_CTRL: usize = 1;
    pub const CTRL_LEN: usize = 2;

    // Tagged (RFC 5041 §4.2).
    pub const STAG: Field = 2..6;
    pub const TO: Field = 6..14;

    // Untagged (RFC 5041 §4.3): the rest of RsvdULP, which RDMAP uses
    // for the Invalidate STag (RFC 5040 §4.1), then the queue fields.
    pub const INVAL_STAG: Field = 2..6;
    pub const QN: Field = 6..10;
    pub const MSN: Field = 10..14;
    pub const MO: Field = 14..18;
}

/// DDP control bits.
const T: u8 = 0x80;
const L: u8 = 0x40;
const DV: u8 = 0x03;
/// RDMAP control bits.
const RV_SHIFT: u8 = 6;
const OPCODE: u8 = 0x0f;
const DDP_VERSION: u8 = 1;
const RDMAP_VERSION: u8 = 1;

/// RDMAP opcodes (RFC 5040 §4.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Opcode {
    Write = 0,
    ReadRequest = 1,
    ReadResponse = 2,
    Send = 3,
    SendInvalidate = 4,
    SendSe = 5,
    SendSeInvalidate = 6,
    Terminate = 7,
    /// One-shot initiation (not RFC 5040; only where both ends agreed at
    /// connection setup): a Send whose STag field advertises a buffer.
    SendAdvertise = 8,
    /// One-shot completion (likewise): a Send whose STag field names a
    /// buffer the receiver invalidates and frees before it completes.
    SendClose = 0xC,
}

impl Opcode {
    pub fn from_u8(v: u8) -> Option<Opcode> {
        use Opcode::*;
        Some(match v {
            0 => Write,
            1 => ReadRequest,
            2 => ReadResponse,
            3 => Send,
            4 => SendInvalidate,
            5 => SendSe,
            6 => SendSeInvalidate,
            7 => Terminate,
            8 => SendAdvertise,
            0xC => SendClose,
            _ => return None,
        })
    }

    /// Carried in tagged segments (placed at STag + TO).
    pub fn tagged(self) -> bool {
        matches!(self, Opcode::Write | Opcode::ReadResponse)
    }

    /// The untagged queue: 0 Sends, 1 Read Requests, 2 Terminates.
    pub fn queue(self) -> Option<u32> {
        match self {
            Opcode::Write | Opcode::ReadResponse => None,
            Opcode::ReadRequest => Some(1),
            Opcode::Terminate => Some(2),
            _ => Some(0),
        }
    }

    /// Sends that carry an STag for the receiver to invalidate.
    pub fn invalidates(self) -> bool {
        matches!(self, Opcode::SendInvalidate | Opcode::SendSeInvalidate | Opcode::SendClose)
    }

    /// The one-shot encodings, outside RFC 5040.
    pub fn oneshot(self) -> bool {
        matches!(self, Opcode::SendAdvertise | Opcode::SendClose)
    }

    /// Sends with the solicited event bit.
    pub fn solicited(self) -> bool {
        matches!(self, Opcode::SendSe | Opcode::SendSeInvalidate)
    }

    /// DDP header bytes (control included) for this opcode.
    pub fn header_len(self) -> usize {
        if self.tagged() { DdpHeader::TAGGED_LEN } else { DdpHeader::UNTAGGED_LEN }
    }
}

/// The two control bytes: DDP's T and L flags and version, RDMAP's version
/// and opcode. Versions are 1 on the wire and checked on parse.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ctrl {
    /// L: the last segment of its message.
    pub last: bool,
    pub opcode: Opcode,
}

view!(
    /// A read/write view of the two control bytes that open every DDP
    /// segment: DDP control (RFC 5041 §4.1) and RDMAP control (RFC 5040
    /// §4.2).
    CtrlPacket
);

bit_fields!(CtrlPacket {
    /// T: a tagged segment.
    tagged, set_tagged = field::DDP_CTRL, T;
    /// L: the last segment of its message.
    last, set_last = field::DDP_CTRL, L;
});

impl<T: AsRef<[u8]>> CtrlPacket<T> {
    /// The buffer holds both control bytes.
    pub fn check_len(&self) -> Result<(), WireError> {
        let len = self.buffer.as_ref().len();
        if len < field::CTRL_LEN {
            return Err(WireError::ShortUlpdu { len: len as u16, need: field::CTRL_LEN as u16 });
        }
        Ok(())
    }

    /// DV: the DDP version.
    pub fn dv(&self) -> u8 {
        self.buffer.as_ref()[field::DDP_CTRL] & DV
    }

    /// RV: the RDMAP version.
    pub fn rv(&self) -> u8 {
        self.buffer.as_ref()[field::RDMAP_CTRL] >> RV_SHIFT
    }

    /// The opcode's four bits, known to RFC 5040 or not.
    pub fn opcode(&self) -> u8 {
        self.buffer.as_ref()[field::RDMAP_CTRL] & OPCODE
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> CtrlPacket<T> {
    pub fn set_dv(&mut self, v: u8) {
        let b = &mut self.buffer.as_mut()[field::DDP_CTRL];
        *b = (*b & !DV) | (v & DV);
    }

    pub fn set_rv(&mut self, v: u8) {
        let b = &mut self.buffer.as_mut()[field::RDMAP_CTRL];
        *b = (*b & !(0x3 << RV_SHIFT)) | ((v & 0x3) << RV_SHIFT);
    }

    pub fn set_opcode(&mut self, v: u8) {
        let b = &mut self.buffer.as_mut()[field::RDMAP_CTRL];
        *b = (*b & !OPCODE) | (v & OPCODE);
    }
}

impl Ctrl {
    /// `oneshot`: the one-shot opcodes were agreed to.
    pub fn parse<T: AsRef<[u8]>>(p: &CtrlPacket<T>, oneshot: bool) -> Result<Ctrl, WireError> {
        p.check_len()?;
        if p.dv() != DDP_VERSION {
            return Err(WireError::BadDdpVersion { tagged: p.tagged(), version: p.dv() });
        }
        if p.rv() != RDMAP_VERSION {
            return Err(WireError::BadRdmapVersion(p.rv()));
        }
        let opcode = Opcode::from_u8(p.opcode())
            .filter(|o| oneshot || !o.oneshot())
            .ok_or(WireError::BadOpcode(p.opcode()))?;
        // Linux siw takes the header's shape from the opcode alone; the T
        // bit must agree with it (RFC 5040 §4.1), and here it must.
        if p.tagged() != opcode.tagged() {
            return Err(WireError::BadOpcode(opcode as u8));
        }
        Ok(Ctrl { last: p.last(), opcode })
    }

    /// The control bytes of a view that is `tagged` or not: the opcode
    /// must be one for that shape of header.
    fn parse_shaped(p: &CtrlPacket<&[u8]>, oneshot: bool, tagged: bool) -> Result<Ctrl, WireError> {
        let ctrl = Ctrl::parse(p, oneshot)?;
        if ctrl.opcode.tagged() != tagged {
            return Err(WireError::BadOpcode(ctrl.opcode as u8));
        }
        Ok(ctrl)
    }

    pub fn buffer_len(&self) -> usize {
        field::CTRL_LEN
    }

    /// Both bytes, reserved bits zero, T as the opcode has it.
    ///
    /// # Panics
    /// If the buffer is shorter than `buffer_len()`.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut CtrlPacket<T>) {
        p.buffer.as_mut()[..field::CTRL_LEN].fill(0);
        p.set_tagged(self.opcode.tagged());
        p.set_last(self.last);
        p.set_dv(DDP_VERSION);
        p.set_rv(RDMAP_VERSION);
        p.set_opcode(self.opcode as u8);
    }
}

view!(
    /// A read/write view of a tagged DDP header (RFC 5041 §4.2): the
    /// control bytes, the sink STag and the tagged offset.
    TaggedPacket
);

be_fields!(TaggedPacket {
    /// The data sink STag.
    stag, set_stag: u32 = field::STAG;
    /// TO: the tagged offset in the sink STag.
    to, set_to: u64 = field::TO;
});

view!(
    /// A read/write view of an untagged DDP header (RFC 5041 §4.3): the
    /// control bytes, the Invalidate STag RDMAP keeps in RsvdULP, and QN,
    /// MSN and MO.
    UntaggedPacket
);

be_fields!(UntaggedPacket {
    /// The STag the Send-with-Invalidate opcodes invalidate (RFC 5040
    /// §4.1); zero for others.
    inval_stag, set_inval_stag: u32 = field::INVAL_STAG;
    /// QN: the queue number.
    qn, set_qn: u32 = field::QN;
    /// MSN: the message sequence number in its queue.
    msn, set_msn: u32 = field::MSN;
    /// MO: the segment's byte offset in its message.
    mo, set_mo: u32 = field::MO;
});

/// What the tagged and untagged views share: the control bytes first,
/// then a fixed-length header, then the payload.
macro_rules! ddp_view {
    ($name:ident, $len:expr) => {
        impl<T: AsRef<[u8]>> $name<T> {
            /// The buffer holds the whole header.
            pub fn check_len(&self) -> Result<(), WireError> {
                let len = self.buffer.as_ref().len();
                if len < $len {
                    return Err(WireError::ShortUlpdu { len: len as u16, need: $len as u16 });
                }
                Ok(())
            }

            pub fn ctrl(&self) -> CtrlPacket<&[u8]> {
                CtrlPacket::new_unchecked(&self.buffer.as_ref()[..field::CTRL_LEN])
            }

            /// The segment's payload, where the buffer holds one.
            pub fn payload(&self) -> &[u8] {
                &self.buffer.as_ref()[$len..]
            }
        }

        impl<T: AsRef<[u8]> + AsMut<[u8]>> $name<T> {
            pub fn ctrl_mut(&mut self) -> CtrlPacket<&mut [u8]> {
                CtrlPacket::new_unchecked(&mut self.buffer.as_mut()[..field::CTRL_LEN])
            }

            pub fn payload_mut(&mut self) -> &mut [u8] {
                &mut self.buffer.as_mut()[$len..]
            }
        }
    };
}

ddp_view!(TaggedPacket, DdpHeader::TAGGED_LEN);
ddp_view!(UntaggedPacket, DdpHeader::UNTAGGED_LEN);

/// A DDP segment header, tagged or untagged: the repr of
/// [`TaggedPacket`] and [`UntaggedPacket`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DdpHeader {
    Tagged {
        ctrl: Ctrl,
        stag: u32,
        to: u64,
    },
    /// `inval_stag` is the STag to invalidate for the Send-with-Invalidate
    /// opcodes, zero otherwise.
    Untagged {
        ctrl: Ctrl,
        inval_stag: u32,
        qn: u32,
        msn: u32,
        mo: u32,
    },
}

impl DdpHeader {
    pub const TAGGED_LEN: usize = field::TO.end;
    pub const UNTAGGED_LEN: usize = field::MO.end;

    /// The opcode of a header starting at `b`, from its first two bytes:
    /// how long the header is.
    pub fn peek(b: &[u8], oneshot: bool) -> Result<Ctrl, WireError> {
        Ctrl::parse(&CtrlPacket::new_checked(b)?, oneshot)
    }

    /// The header at the start of a ULPDU (RFC opcodes only).
    pub fn parse(b: &[u8]) -> Result<DdpHeader, WireError> {
        Self::parse_with(b, false)
    }

    /// The header at the start of a ULPDU; `oneshot`: the one-shot
    /// opcodes were agreed to. The opcode says which view `b` is.
    pub fn parse_with(b: &[u8], oneshot: bool) -> Result<DdpHeader, WireError> {
        let ctrl = Self::peek(b, oneshot)?;
        if ctrl.opcode.tagged() {
            Self::parse_tagged(&TaggedPacket::new_checked(b)?, oneshot)
        } else {
            Self::parse_untagged(&UntaggedPacket::new_checked(b)?, oneshot)
        }
    }

    pub fn parse_tagged<T: AsRef<[u8]>>(
        p: &TaggedPacket<T>,
        oneshot: bool,
    ) -> Result<DdpHeader, WireError> {
        p.check_len()?;
        let ctrl = Ctrl::parse_shaped(&p.ctrl(), oneshot, true)?;
        Ok(DdpHeader::Tagged { ctrl, stag: p.stag(), to: p.to() })
    }

    pub fn parse_untagged<T: AsRef<[u8]>>(
        p: &UntaggedPacket<T>,
        oneshot: bool,
    ) -> Result<DdpHeader, WireError> {
        p.check_len()?;
        let ctrl = Ctrl::parse_shaped(&p.ctrl(), oneshot, false)?;
        let (inval_stag, qn, msn, mo) = (p.inval_stag(), p.qn(), p.msn(), p.mo());
        Ok(DdpHeader::Untagged { ctrl, inval_stag, qn, msn, mo })
    }

    pub fn ctrl(&self) -> Ctrl {
        match *self {
            DdpHeader::Tagged { ctrl, .. } | DdpHeader::Untagged { ctrl, .. } => ctrl,
        }
    }

    /// Bytes the header takes.
    pub fn buffer_len(&self) -> usize {
        self.ctrl().opcode.header_len()
    }

    /// Write the header into the first `buffer_len()` bytes of `b`,
    /// through the view its opcode calls for.
    ///
    /// # Panics
    /// If `b` is shorter than `buffer_len()`.
    pub fn emit(&self, b: &mut [u8]) {
        match *self {
            DdpHeader::Tagged { ctrl, stag, to } => {
                let mut p = TaggedPacket::new_unchecked(b);
                ctrl.emit(&mut p.ctrl_mut());
                p.set_stag(stag);
                p.set_to(to);
            }
            DdpHeader::Untagged { ctrl, inval_stag, qn, msn, mo } => {
                let mut p = UntaggedPacket::new_unchecked(b);
                ctrl.emit(&mut p.ctrl_mut());
                p.set_inval_stag(inval_stag);
                p.set_qn(qn);
                p.set_msn(msn);
                p.set_mo(mo);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::tests::hex;

    fn untagged(last: bool, opcode: Opcode, inval_stag: u32, msn: u32, mo: u32) -> DdpHeader {
        let qn = opcode.queue().unwrap();
        DdpHeader::Untagged { ctrl: Ctrl { last, opcode }, inval_stag, qn, msn, mo }
    }

    /// The headers of a Linux NVMe/RDMA exchange (the reference's capture,
    /// MPA length stripped), each parsed and emitted back byte for byte.
    #[test]
    fn headers_from_a_linux_capture() {
        let cases = [
            // Connect capsule: Send, last, QN 0, MSN 1, MO 0.
            ("4143 00000000 00000000 00000001 00000000", untagged(true, Opcode::Send, 0, 1, 0)),
            // Read Request header (QN 1, MSN 1).
            (
                "4141 00000000 00000001 00000001 00000000",
                untagged(true, Opcode::ReadRequest, 0, 1, 0),
            ),
            // Read Response, last, to the target's sink.
            (
                "c142 842e7201 ff29a58f50051000",
                DdpHeader::Tagged {
                    ctrl: Ctrl { last: true, opcode: Opcode::ReadResponse },
                    stag: 0x842e7201,
                    to: 0xff29a58f50051000,
                },
            ),
            // Send with Invalidate carrying the host's key.
            (
                "4144 7fe79101 00000000 00000001 00000000",
                untagged(true, Opcode::SendInvalidate, 0x7fe79101, 1, 0),
            ),
            // RDMA Write, not the last segment.
            (
                "8140 7fe79102 ff2af64142a6e000",
                DdpHeader::Tagged {
                    ctrl: Ctrl { last: false, opcode: Opcode::Write },
                    stag: 0x7fe79102,
                    to: 0xff2af64142a6e000,
                },
            ),
            // Send with Solicited Event, and with SE and Invalidate.
            ("4145 00000000 00000000 00000003 00000000", untagged(true, Opcode::SendSe, 0, 3, 0)),
            (
                "4146 7fe79102 00000000 00000004 00000000",
                untagged(true, Opcode::SendSeInvalidate, 0x7fe79102, 4, 0),
            ),
            // A middle segment of a Send: L clear, MO 1424.
            (
                "0143 00000000 00000000 00000002 00000590",
                untagged(false, Opcode::Send, 0, 2, 0x590),
            ),
            // Terminate: QN 2, MSN 1.
            (
                "4147 00000000 00000002 00000001 00000000",
                untagged(true, Opcode::Terminate, 0, 1, 0),
            ),
        ];
        for (bytes, want) in cases {
            let b = hex(bytes);
            assert_eq!(DdpHeader::parse(&b), Ok(want), "{bytes}");
            assert_eq!(want.buffer_len(), b.len());
            let mut out = vec![0; want.buffer_len()];
            want.emit(&mut out);
            assert_eq!(out, b, "{bytes}");
        }
    }

    #[test]
    fn bad_control_bytes() {
        assert_eq!(
            DdpHeader::parse(&hex("4248")),
            Err(WireError::BadDdpVersion { tagged: false, version: 2 })
        );
        assert_eq!(DdpHeader::parse(&hex("4103")), Err(WireError::BadRdmapVersion(0)));
        assert_eq!(DdpHeader::parse(&hex("4148")), Err(WireError::BadOpcode(8)));
        // T must agree with the opcode: an untagged Write, a tagged Send.
        assert_eq!(DdpHeader::parse(&hex("4140")), Err(WireError::BadOpcode(0)));
        assert_eq!(DdpHeader::parse(&hex("c143")), Err(WireError::BadOpcode(3)));
        assert_eq!(
            DdpHeader::parse(&hex("c140 00000001")),
            Err(WireError::ShortUlpdu { len: 6, need: 14 })
        );
    }
}
