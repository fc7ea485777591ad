//! Sans-IO NVMe/TCP (NVMe/TCP Transport Specification 1.0, NVMe over Fabrics 1.1).
//!
//! - [`wire`]: PDU views and representations, digests, and a streaming framer.
//! - [`nvme`]: the NVMe structures capsules carry (SQE, CQE, SGL, status, Fabrics).
//!
//! This crate never touches a socket, a device or a clock: bytes in, bytes
//! out, time passed in by the caller. It runs unchanged over kernel TCP and
//! over smoltcp.

mod bytes;
pub mod controller;
mod ddp;
pub mod host;
pub mod namespace;
pub mod nvme;
mod pool;
mod time;
pub mod wire;

pub use ddp::UlpStats;
pub use time::{Instant, earliest};

#[doc(hidden)]
pub mod fuzzing;
