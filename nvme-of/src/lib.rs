//! Sans-IO NVMe over Fabrics (NVMe over Fabrics 1.1), the part every
//! transport shares.
//!
//! - [`nvme`]: the structures capsules carry (SQE, CQE, SGL, status,
//!   Fabrics commands, Identify, log pages).
//! - [`controller`]: an NVM subsystem and its discovery controller; the
//!   command handling of one queue, whatever carries it.
//! - [`host`]: an association with a controller: bring-up, keep alive,
//!   I/O submission, shutdown, over queues a transport binding provides.
//! - [`Binding`]: what a transport binding tells this core.
//!
//! The NVMe/TCP binding (`nvme-tcp`) and the NVMe/RDMA binding
//! (`nvme-rdma`) move capsules and data; the meaning of every command is
//! here, once. Nothing here touches a socket, a device or a clock.

pub mod auth;
mod binding;
#[doc(hidden)]
pub mod bytes;
pub mod controller;
pub mod host;
pub mod namespace;
pub mod nvme;
#[doc(hidden)]
pub mod pair;
#[doc(hidden)]
pub mod pool;
mod stats;
mod time;

pub use binding::{Binding, DataSgl};
pub use stats::{Digests, TxStats, UlpStats};
pub use time::{Instant, earliest};
