//! The `nvme-ddp` program's library. `src/bin/nvme-ddp/` is the command
//! line over it; `tests/` and `benches/` use it directly.
//!
//! Two kinds of module, kept apart:
//!
//! - [`driver`]: the drivers. They move bytes and time between the sans-IO
//!   host and controller (`nvme-of` and its bindings) and a transport:
//!   kernel TCP, or smoltcp on the software NIC. They know nothing of what a
//!   run is for.
//! - The features, at the top: what a run does and what it reports.
//!   [`app`] (what a host does once its association is up), [`workload`]
//!   (which I/O to submit, what came back), [`demo`] (the embedded default
//!   run), [`bench`](mod@bench) (the offload matrix and its measures), [`report`] and
//!   [`plot`] (showing results), and [`size`] (sizes as people write them).
//!
//! Features use drivers; a driver never uses a feature other than the
//! [`app::HostApp`] trait it runs.

pub mod app;
pub mod bench;
pub mod demo;
pub mod driver;
pub mod plot;
pub mod report;
pub mod size;
pub mod workload;
