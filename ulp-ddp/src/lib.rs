//! The ULP DDP offload contract between an upper-layer protocol (NVMe/TCP)
//! and a NIC: capabilities, limits, per-socket configuration, per-I/O
//! buffer mappings, resync, and statistics, named as in Linux's
//! `include/net/ulp_ddp.h`.
//!
//! Types and traits only: no logic that belongs to one NIC or one protocol.

mod iobuf;

pub use iobuf::IoBuf;
