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
