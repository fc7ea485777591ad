//! NVMe structures that travel inside NVMe/TCP capsules: submission and
//! completion queue entries, status codes, SGL descriptors, the Fabrics
//! commands and the data structures the admin commands return.
//!
//! Pure data: parse from and emit into byte buffers the caller sized. Nothing
//! here knows about queues, connections or time.

mod fabrics;
pub mod identify;
pub mod log;
mod sgl;
mod sqe;
mod status;

pub use fabrics::{ConnectData, FabricsCommand, PropertySize, property};
pub use sgl::{SglDescriptor, SglType};
pub use sqe::{Cqe, Sqe};
pub use status::Status;

/// Admin command opcodes (NVMe Base Specification, Figure "Opcodes for Admin Commands").
pub mod admin {
    pub const DELETE_IO_SQ: u8 = 0x00;
    pub const CREATE_IO_SQ: u8 = 0x01;
    pub const GET_LOG_PAGE: u8 = 0x02;
    pub const DELETE_IO_CQ: u8 = 0x04;
    pub const CREATE_IO_CQ: u8 = 0x05;
    pub const IDENTIFY: u8 = 0x06;
    pub const ABORT: u8 = 0x08;
    pub const SET_FEATURES: u8 = 0x09;
    pub const GET_FEATURES: u8 = 0x0a;
    pub const ASYNC_EVENT_REQUEST: u8 = 0x0c;
    pub const KEEP_ALIVE: u8 = 0x18;
    pub const FABRICS: u8 = 0x7f;
}

/// NVM command set I/O opcodes.
pub mod io {
    pub const FLUSH: u8 = 0x00;
    pub const WRITE: u8 = 0x01;
    pub const READ: u8 = 0x02;
    pub const WRITE_ZEROES: u8 = 0x08;
    pub const DATASET_MANAGEMENT: u8 = 0x09;
    pub const FABRICS: u8 = 0x7f;
}

/// Fabrics command types (FCTYPE, byte 4 of a Fabrics command).
pub mod fctype {
    pub const PROPERTY_SET: u8 = 0x00;
    pub const CONNECT: u8 = 0x01;
    pub const PROPERTY_GET: u8 = 0x04;
    pub const AUTH_SEND: u8 = 0x05;
    pub const AUTH_RECV: u8 = 0x06;
    pub const DISCONNECT: u8 = 0x08;
}

/// Feature identifiers (Get Features / Set Features CDW10 bits 7:0).
pub mod fid {
    pub const ARBITRATION: u8 = 0x01;
    pub const POWER_MANAGEMENT: u8 = 0x02;
    pub const TEMPERATURE_THRESHOLD: u8 = 0x04;
    pub const ERROR_RECOVERY: u8 = 0x05;
    pub const VOLATILE_WRITE_CACHE: u8 = 0x06;
    pub const NUMBER_OF_QUEUES: u8 = 0x07;
    pub const WRITE_ATOMICITY: u8 = 0x0a;
    pub const ASYNC_EVENT_CONFIG: u8 = 0x0b;
    pub const KEEP_ALIVE_TIMER: u8 = 0x0f;
    pub const HOST_IDENTIFIER: u8 = 0x81;
}

/// The direction of a command's data transfer, from opcode bits 1:0.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DataDirection {
    None,
    /// Host to controller (writes).
    HostToController,
    /// Controller to host (reads).
    ControllerToHost,
    Bidirectional,
}

impl DataDirection {
    /// Every NVMe opcode encodes its transfer direction in bits 1:0; Fabrics
    /// commands carry it in FCTYPE instead.
    pub fn of_opcode(opcode: u8) -> Self {
        match opcode & 0x3 {
            0 => Self::None,
            1 => Self::HostToController,
            2 => Self::ControllerToHost,
            _ => Self::Bidirectional,
        }
    }
}

/// The well-known NQN of a discovery controller.
pub const DISCOVERY_NQN: &str = "nqn.2014-08.org.nvmexpress.discovery";
/// NQNs are at most 223 bytes of UTF-8 in a 256-byte field.
pub const NQN_MAX_LEN: usize = 223;

/// Why a string is not an NQN (NVMe Base 2.0, 4.5): `nqn.yyyy-mm.` and a
/// reverse domain name, then `:` and anything the domain's owner chose
/// (or the UUID form `nqn.2014-08.org.nvmexpress:uuid:…`, which has the
/// same shape); at most 223 bytes.
pub fn check_nqn(nqn: &str) -> Result<(), String> {
    if nqn.len() > NQN_MAX_LEN {
        return Err(format!("{} bytes long (at most {NQN_MAX_LEN})", nqn.len()));
    }
    if nqn == DISCOVERY_NQN {
        return Ok(());
    }
    let date_and_domain = nqn.strip_prefix("nqn.").ok_or("does not start with \"nqn.\"")?;
    let (year, rest) = date_and_domain.split_at_checked(4).ok_or("has no date")?;
    let month = rest.strip_prefix('-').and_then(|r| r.get(..2));
    let date_ok = year.bytes().all(|b| b.is_ascii_digit())
        && month.is_some_and(|m| matches!(m.parse::<u8>(), Ok(1..=12)));
    let domain = rest.get(3..).and_then(|r| r.strip_prefix('.'));
    let (Some(domain), true) = (domain, date_ok) else {
        return Err("has no yyyy-mm date after \"nqn.\"".into());
    };
    let (domain, _) = domain.split_once(':').ok_or("has no ':' after the domain name")?;
    let label_ok =
        |l: &str| !l.is_empty() && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-');
    if !domain.split('.').all(label_ok) {
        return Err(format!("{domain:?} is not a reverse domain name"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::check_nqn;

    #[test]
    fn nqns_as_the_spec_writes_them() {
        for ok in [
            "nqn.2014-08.org.nvmexpress.discovery",
            "nqn.2014-08.org.nvmexpress:uuid:5f0d2c44-6a1e-4c8b-9d3e-000000000000",
            "nqn.2026-11.io.nvme-ddp:target",
            "nqn.2016-06.io.spdk:cnode1",
        ] {
            assert_eq!(check_nqn(ok), Ok(()), "{ok}");
        }
        for (bad, why) in [
            ("not an nqn", "does not start"),
            ("nqn.26-11.io:x", "date"),
            ("nqn.2026-13.io.x:y", "date"),
            ("nqn.2026-11.io.x", "':'"),
            ("nqn.2026-11.io..x:y", "reverse domain"),
            ("nqn.2026-11.my domain:y", "reverse domain"),
        ] {
            let e = check_nqn(bad).unwrap_err();
            assert!(e.contains(why), "{bad}: {e}");
        }
        assert!(check_nqn(&format!("nqn.2026-11.io.x:{}", "a".repeat(220))).is_err());
    }
}
