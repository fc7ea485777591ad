//! `nvme-ddp`: an NVMe/TCP host and controller on a software NIC that models
//! ULP DDP offload.

use clap::Parser;

/// NVMe/TCP host and controller with a software model of NIC offload (ULP DDP).
#[derive(Parser, Debug)]
#[command(version, about, long_about = None)]
struct Cli {}

fn main() {
    let _cli = Cli::parse();
}
