//! `nvme-ddp`: an NVMe/TCP host and controller on a software NIC that models
//! ULP DDP offload.
//!
//! The CLI's edge: the only place errors become text and exit codes
//! (anyhow stays in this binary); it must never hold the library's logic.

mod admin;
mod args;
mod bench;
mod controller;
mod demo;
mod host;
mod keys;
mod link;
mod net;
mod progress;
mod session;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};

/// NVMe/TCP host and controller with a software model of NIC offload (ULP DDP).
#[derive(Parser, Debug)]
#[command(version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Serve an NVM subsystem (and a discovery controller) until interrupted.
    Controller(controller::ControllerArgs),
    /// Connect to a controller and identify, discover, or run I/O.
    Host(host::HostArgs),
    /// Host and controller in one process over an in-process wire: a write
    /// pass, a verified read pass, and a report. No root needed.
    Demo(demo::DemoArgs),
    /// Create or remove a network namespace with a bridge and two TAPs for
    /// running host and controller over smoltcp (needs root).
    Net(net::NetArgs),
    /// Measure what the offloads save: a matrix of workloads with and
    /// without them, as a table, JSON and charts.
    Bench(bench::BenchArgs),
    /// Make a DH-HMAC-CHAP secret (`DHHC-1:...`), as `nvme gen-dhchap-key`.
    GenDhchapKey(keys::GenDhchapKeyArgs),
    /// Make a TLS PSK (`NVMeTLSkey-1:...`), as `nvme gen-tls-key`.
    GenTlsKey(keys::GenTlsKeyArgs),
}

/// Let every option take a negative number, so that `--loss -0.1` meets
/// the option's own check and its message, not clap's guess that `-0.1`
/// is an option of its own.
fn negatives(cmd: clap::Command) -> clap::Command {
    cmd.mut_args(|a| match a.get_action().takes_values() {
        true => a.allow_negative_numbers(true),
        false => a,
    })
    .mut_subcommands(negatives)
}

fn main() -> std::process::ExitCode {
    let matches = negatives(Cli::command()).get_matches();
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    let default = match cli.command {
        Command::Controller(_) => "info",
        _ => "warn",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    use std::io::IsTerminal;
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .init();
    let result = match cli.command {
        Command::Controller(a) => controller::run(a),
        Command::Host(a) => host::run(a),
        Command::Demo(a) => demo::run(a),
        Command::Net(a) => net::run(a),
        Command::Bench(a) => bench::run(a),
        Command::GenDhchapKey(a) => keys::gen_dhchap_key(a),
        Command::GenTlsKey(a) => keys::gen_tls_key(a),
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
