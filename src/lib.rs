//! The `nvme-ddp` program's library: transport drivers that run the sans-IO
//! host and controller, workloads, and reports. `src/bin/nvme-ddp/` is the
//! command line over it; `tests/` and `benches/` use it directly.

pub mod app;
pub mod bench;
pub mod clock;
pub mod demo;
pub mod endpoint;
pub mod kernel_tcp;
pub mod plot;
pub mod rawtcp;
pub mod report;
pub mod size;
pub mod transport;
pub mod userspace;
pub mod workload;
