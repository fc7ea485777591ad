//! Sans-IO NVMe/TCP (NVMe/TCP Transport Specification 1.0): the TCP
//! binding of the NVMe over Fabrics core in `nvme-of`.
//!
//! - [`wire`]: PDU views and representations, digests, and a streaming framer.
//! - [`controller`]: one controller connection: ICReq/ICResp, capsules,
//!   R2T/H2CData and C2HData around the core's command handling.
//! - [`host`]: the host's queues over TCP.
//!
//! What the commands mean, the host's association and the controller's
//! subsystem are `nvme-of`'s; this crate exports only its binding types
//! ([`host::Tcp`], [`controller::Tcp`]), their queues and their errors.
//!
//! This crate never touches a socket, a device or a clock: bytes in, bytes
//! out, time passed in by the caller. It runs unchanged over kernel TCP and
//! over smoltcp.

pub mod controller;
mod ddp;
pub mod host;
pub mod tls;
pub mod wire;

#[doc(hidden)]
pub mod fuzzing;
