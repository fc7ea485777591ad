//! Completion status: Status Code Type, Status Code, Do Not Retry.

use core::fmt;

/// The status field of a completion (CQE DW3 bits 31:17), without the phase tag.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Status(u16);

impl Status {
    /// Status code types.
    pub const SCT_GENERIC: u8 = 0;
    pub const SCT_COMMAND_SPECIFIC: u8 = 1;
    pub const SCT_MEDIA: u8 = 2;
    pub const SCT_PATH: u8 = 3;

    pub const SUCCESS: Status = Status::generic(0x00);
    pub const INVALID_OPCODE: Status = Status::generic(0x01).dnr();
    pub const INVALID_FIELD: Status = Status::generic(0x02).dnr();
    pub const COMMAND_ID_CONFLICT: Status = Status::generic(0x03).dnr();
    pub const DATA_TRANSFER_ERROR: Status = Status::generic(0x04);
    pub const INTERNAL_ERROR: Status = Status::generic(0x06);
    pub const ABORT_REQUESTED: Status = Status::generic(0x07);
    pub const ABORTED_SQ_DELETION: Status = Status::generic(0x08);
    pub const INVALID_NAMESPACE: Status = Status::generic(0x0b).dnr();
    pub const COMMAND_SEQUENCE_ERROR: Status = Status::generic(0x0c).dnr();
    pub const INVALID_SGL_SEGMENT: Status = Status::generic(0x0d).dnr();
    pub const INVALID_SGL_COUNT: Status = Status::generic(0x0e).dnr();
    pub const DATA_SGL_LENGTH_INVALID: Status = Status::generic(0x0f).dnr();
    pub const SGL_DESCRIPTOR_TYPE_INVALID: Status = Status::generic(0x11).dnr();
    pub const SGL_OFFSET_INVALID: Status = Status::generic(0x16).dnr();
    pub const KEEP_ALIVE_EXPIRED: Status = Status::generic(0x19);
    pub const KEEP_ALIVE_INVALID: Status = Status::generic(0x1a);
    pub const TRANSIENT_TRANSPORT_ERROR: Status = Status::generic(0x22);
    pub const LBA_OUT_OF_RANGE: Status = Status::generic(0x80).dnr();
    pub const CAPACITY_EXCEEDED: Status = Status::generic(0x81).dnr();
    pub const NAMESPACE_NOT_READY: Status = Status::generic(0x82);

    pub const INVALID_QUEUE_ID: Status = Status::specific(0x01).dnr();
    pub const INVALID_QUEUE_SIZE: Status = Status::specific(0x02).dnr();
    pub const AER_LIMIT_EXCEEDED: Status = Status::specific(0x05).dnr();
    pub const INVALID_LOG_PAGE: Status = Status::specific(0x09).dnr();
    pub const FEATURE_NOT_SAVEABLE: Status = Status::specific(0x0d).dnr();
    pub const FEATURE_NOT_CHANGEABLE: Status = Status::specific(0x0e).dnr();
    pub const CONNECT_INCOMPATIBLE_FORMAT: Status = Status::specific(0x80).dnr();
    pub const CONNECT_CONTROLLER_BUSY: Status = Status::specific(0x81).dnr();
    pub const CONNECT_INVALID_PARAMETERS: Status = Status::specific(0x82).dnr();
    pub const CONNECT_RESTART_DISCOVERY: Status = Status::specific(0x83).dnr();
    pub const CONNECT_INVALID_HOST: Status = Status::specific(0x84).dnr();
    pub const INVALID_QUEUE_TYPE: Status = Status::specific(0x85).dnr();
    /// The queue has not authenticated (DH-HMAC-CHAP) yet.
    pub const AUTH_REQUIRED: Status = Status::specific(0x91).dnr();

    pub const WRITE_FAULT: Status = Status::new(Status::SCT_MEDIA, 0x80);
    pub const UNRECOVERED_READ_ERROR: Status = Status::new(Status::SCT_MEDIA, 0x81);
    /// Path related statuses the host itself reports: its association is
    /// gone for good, or it gave up on the command.
    pub const HOST_PATH_ERROR: Status = Status::new(Status::SCT_PATH, 0x70).dnr();
    pub const HOST_ABORTED: Status = Status::new(Status::SCT_PATH, 0x71).dnr();

    const DNR: u16 = 1 << 15;
    const MORE: u16 = 1 << 14;

    pub const fn new(sct: u8, sc: u8) -> Status {
        Status(((sct as u16 & 0x7) << 9) | ((sc as u16) << 1))
    }

    pub const fn generic(sc: u8) -> Status {
        Status::new(Self::SCT_GENERIC, sc)
    }

    pub const fn specific(sc: u8) -> Status {
        Status::new(Self::SCT_COMMAND_SPECIFIC, sc)
    }

    /// The same status with Do Not Retry set.
    pub const fn dnr(self) -> Status {
        Status(self.0 | Self::DNR)
    }

    /// From the 16-bit status field of a CQE (bit 0, the phase tag, is dropped).
    pub const fn from_field(raw: u16) -> Status {
        Status(raw & !1)
    }

    /// The 16-bit status field of a CQE, phase tag clear (fabrics have no phase).
    pub const fn to_field(self) -> u16 {
        self.0
    }

    pub const fn sct(self) -> u8 {
        ((self.0 >> 9) & 0x7) as u8
    }

    pub const fn sc(self) -> u8 {
        (self.0 >> 1) as u8
    }

    pub const fn is_dnr(self) -> bool {
        self.0 & Self::DNR != 0
    }

    pub const fn is_more(self) -> bool {
        self.0 & Self::MORE != 0
    }

    pub const fn is_success(self) -> bool {
        self.sct() == 0 && self.sc() == 0
    }

    /// Status code type and code, without DNR/More/CRD: what two statuses
    /// are compared by.
    pub const fn code(self) -> (u8, u8) {
        (self.sct(), self.sc())
    }

    fn name(self) -> Option<&'static str> {
        Some(match self.code() {
            (0, 0x00) => "Success",
            (0, 0x01) => "Invalid Command Opcode",
            (0, 0x02) => "Invalid Field in Command",
            (0, 0x03) => "Command ID Conflict",
            (0, 0x04) => "Data Transfer Error",
            (0, 0x06) => "Internal Error",
            (0, 0x07) => "Command Abort Requested",
            (0, 0x08) => "Command Aborted due to SQ Deletion",
            (0, 0x0b) => "Invalid Namespace or Format",
            (0, 0x0c) => "Command Sequence Error",
            (0, 0x0d) => "Invalid SGL Segment Descriptor",
            (0, 0x0e) => "Invalid Number of SGL Descriptors",
            (0, 0x0f) => "Data SGL Length Invalid",
            (0, 0x11) => "SGL Descriptor Type Invalid",
            (0, 0x16) => "SGL Offset Invalid",
            (0, 0x19) => "Keep Alive Timer Expired",
            (0, 0x1a) => "Keep Alive Timeout Invalid",
            (0, 0x22) => "Transient Transport Error",
            (0, 0x80) => "LBA Out of Range",
            (0, 0x81) => "Capacity Exceeded",
            (0, 0x82) => "Namespace Not Ready",
            (1, 0x01) => "Invalid Queue Identifier",
            (1, 0x02) => "Invalid Queue Size",
            (1, 0x05) => "Asynchronous Event Request Limit Exceeded",
            (1, 0x09) => "Invalid Log Page",
            (1, 0x0d) => "Feature Identifier Not Saveable",
            (1, 0x0e) => "Feature Not Changeable",
            (1, 0x80) => "Connect Incompatible Format",
            (1, 0x81) => "Connect Controller Busy",
            (1, 0x82) => "Connect Invalid Parameters",
            (1, 0x83) => "Connect Restart Discovery",
            (1, 0x84) => "Connect Invalid Host",
            (1, 0x85) => "Invalid Queue Type",
            (1, 0x91) => "Authentication Required",
            (2, 0x80) => "Write Fault",
            (2, 0x81) => "Unrecovered Read Error",
            (3, 0x70) => "Host Pathing Error",
            (3, 0x71) => "Command Aborted By Host",
            _ => return None,
        })
    }
}

impl fmt::Debug for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(name) => write!(f, "{name}")?,
            None => write!(f, "SCT {:#x} SC {:#04x}", self.sct(), self.sc())?,
        }
        if self.is_dnr() {
            write!(f, " (DNR)")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_round_trip() {
        let s = Status::CONNECT_INVALID_PARAMETERS;
        assert_eq!((s.sct(), s.sc(), s.is_dnr()), (1, 0x82, true));
        assert_eq!(Status::from_field(s.to_field() | 1), s);
        assert_eq!(Status::LBA_OUT_OF_RANGE.to_field(), 0x8100);
        assert!(Status::SUCCESS.is_success());
        assert_eq!(Status::new(7, 0xff).to_string(), "SCT 0x7 SC 0xff");
    }
}
