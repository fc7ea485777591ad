//! Sans-IO NVMe/TCP (NVMe/TCP Transport Specification 1.0): the TCP
//! binding of the NVMe over Fabrics core in `nvme-of`.
//!
//! - [`wire`]: PDU views and representations, digests, and a streaming framer.
//! - [`controller`]: one controller connection: ICReq/ICResp, capsules,
//!   R2T/H2CData and C2HData around the core's command handling.
//! - [`host`]: the host's queues over TCP.
//!
//! The core's modules are re-exported, so `nvme_tcp::nvme`,
//! `nvme_tcp::namespace` and the rest read as before.
//!
//! This crate never touches a socket, a device or a clock: bytes in, bytes
//! out, time passed in by the caller. It runs unchanged over kernel TCP and
//! over smoltcp.

pub mod controller;
mod ddp;
pub mod host;
pub mod wire;

pub use nvme_of::{Binding, Instant, UlpStats, earliest, namespace, nvme};

#[doc(hidden)]
pub mod fuzzing;
