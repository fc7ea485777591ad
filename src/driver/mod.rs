//! The drivers: each moves bytes and time between the sans-IO host or
//! controller and one transport, and nothing more. They must never decide
//! what a run does (that is a [`HostApp`](crate::app::HostApp)'s) or how its
//! results are shown.
//!
//! - [`kernel_tcp`]: over the kernel's TCP sockets (mio).
//! - [`smoltcp`]: over smoltcp, on the software NIC and any medium.
//! - [`rawtcp`]: plain TCP over smoltcp, the ceiling NVMe/TCP is measured
//!   against.
//! - [`transport`]: which NVMe-oF transport (TCP or RDMA) a run speaks, and
//!   how each side makes its ends of it.
//! - [`endpoint`]: the two sans-IO ends a driver moves bytes for.
//! - [`clock`]: wall-clock time in the sans-IO code's units.
//! - [`cpus`]: the CPUs poll groups run on.
//! - [`valgrind`]: Valgrind's event collection, switched around one part
//!   of a lockstep run.

pub mod clock;
pub mod cpus;
pub mod endpoint;
pub mod kernel_tcp;
pub mod rawtcp;
pub mod smoltcp;
pub mod transport;
pub mod valgrind;
