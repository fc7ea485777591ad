//! iWARP in user space, sans-IO: bytes in, bytes out, like `nvme-tcp`. It
//! runs unchanged over kernel TCP and over smoltcp.
//!
//! [`wire`] knows the bytes: MPA connection setup frames and FPDU framing
//! (RFC 5044, with RFC 6581's enhanced setup), and the DDP and RDMAP
//! headers (RFC 5041, RFC 5040) they carry. It never touches a socket, a
//! device or the clock.

pub mod wire;
