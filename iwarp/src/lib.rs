//! iWARP in user space, sans-IO: bytes in, bytes out, like `nvme-tcp`. It
//! runs unchanged over kernel TCP and over smoltcp.
//!
//! - [`wire`] knows the bytes: MPA connection setup frames and FPDU
//!   framing (RFC 5044, with RFC 6581's enhanced setup), and the DDP and
//!   RDMAP headers (RFC 5041, RFC 5040) they carry.
//! - [`mr`] is the verbs side of memory: protection domains and the STag
//!   table every tagged access is checked against.
//! - [`qp`] is a queue pair: connection setup, send and receive queues,
//!   completions, and every check a peer's bytes must pass.
//!
//! Nothing here touches a socket, a device or the clock.

#[doc(hidden)]
pub mod fuzzing;
pub mod mr;
pub mod qp;
pub mod wire;

pub use mr::{Access, Device, MrError, Pd, Stag};
pub use qp::{
    Close, Down, Event, Qp, QpConfig, QpState, RecvWr, Rtr, SendOp, SendWr, SetupError, VerbsError,
    Wc, WcOpcode, WcStatus,
};
