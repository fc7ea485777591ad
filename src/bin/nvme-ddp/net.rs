//! `nvme-ddp net`: the network namespace, TAPs, bridge and veth pair the
//! `--tap` and `--iface` runs use.
//!
//! It sets up and tears down namespaces; it must never run NVMe.

use anyhow::{Context, Result, bail};
use clap::{Args, Subcommand, ValueEnum};

#[derive(Args, Debug)]
pub(crate) struct NetArgs {
    #[command(subcommand)]
    action: NetAction,
    /// Network namespace name.
    #[arg(long, default_value = "nvmeddp", global = true)]
    netns: String,
}

#[derive(Subcommand, Debug)]
pub(crate) enum NetAction {
    /// Namespace with TAPs tap0 and tap1, joined to each other, and a veth
    /// pair veth0-veth1 with no address (for --iface).
    Up {
        /// IP MTU of the TAPs, the bridge and the veths.
        #[arg(long, default_value_t = 9000, value_parser = crate::args::parse_whole::<usize>)]
        mtu: usize,
        /// How the TAPs are joined: `redirect` hands each frame written
        /// to one straight to the other (tc mirred), the faster; `bridge`
        /// puts both on bridge br0 at 198.18.0.1/24, where the kernel's
        /// own stack (nvme connect, a ping) reaches them too.
        #[arg(long, value_enum, default_value_t = Join::Redirect)]
        link: Join,
    },
    /// Remove the namespace and everything in it.
    Down,
}

/// How `net up` joins its two TAPs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum Join {
    Redirect,
    Bridge,
}

pub(crate) fn sh(args: &[&str]) -> Result<()> {
    let status = std::process::Command::new(args[0])
        .args(&args[1..])
        .status()
        .with_context(|| format!("cannot run {}", args[0]))?;
    if !status.success() {
        bail!("`{}` failed ({status})", args.join(" "));
    }
    Ok(())
}

pub(crate) fn run(a: NetArgs) -> Result<()> {
    let ns = a.netns.as_str();
    match a.action {
        NetAction::Up { mtu, link } => {
            let mtu = mtu.to_string();
            if netns_exists(ns) {
                bail!(
                    "namespace {ns} already exists (`nvme-ddp net down --netns {ns}` removes it)"
                );
            }
            // SAFETY: geteuid has no preconditions.
            if unsafe { libc::geteuid() } != 0 {
                bail!("creating a network namespace needs root");
            }
            sh(&["ip", "netns", "add", ns])?;
            let ip = |args: &[&str]| sh(&[&["ip", "-n", ns], args].concat());
            let setup = || -> Result<()> {
                ip(&["link", "set", "lo", "up"])?;
                // Multi-queue, for `controller --tap-queues`; one queue opens too.
                for tap in ["tap0", "tap1"] {
                    ip(&["tuntap", "add", "dev", tap, "mode", "tap", "multi_queue"])?;
                    ip(&["link", "set", tap, "mtu", &mtu, "up"])?;
                }
                match link {
                    Join::Bridge => {
                        ip(&["link", "add", "br0", "type", "bridge"])?;
                        ip(&["addr", "add", "198.18.0.1/24", "dev", "br0"])?;
                        for tap in ["tap0", "tap1"] {
                            ip(&["link", "set", tap, "master", "br0"])?;
                        }
                        ip(&["link", "set", "br0", "mtu", &mtu, "up"])?;
                    }
                    // What enters one TAP leaves by the other, whole: no
                    // bridge, no netfilter, no forwarding database.
                    Join::Redirect => {
                        for (from, to) in [("tap0", "tap1"), ("tap1", "tap0")] {
                            let tc = |args: &[&str]| sh(&[&["tc", "-n", ns], args].concat());
                            tc(&["qdisc", "add", "dev", from, "ingress"])?;
                            tc(&[
                                "filter", "add", "dev", from, "ingress", "protocol", "all", "u32",
                                "match", "u32", "0", "0", "action", "mirred", "egress", "redirect",
                                "dev", to,
                            ])?;
                        }
                    }
                }
                ip(&["link", "add", "veth0", "type", "veth", "peer", "veth1"])?;
                for veth in ["veth0", "veth1"] {
                    ip(&["link", "set", veth, "mtu", &mtu, "up"])?;
                }
                Ok(())
            };
            if let Err(e) = setup() {
                let _ = sh(&["ip", "netns", "del", ns]);
                return Err(e);
            }
            let exe =
                std::env::current_exe().map_or("nvme-ddp".into(), |p| p.display().to_string());
            let joined = match link {
                Join::Redirect => "joined by a tc redirect",
                Join::Bridge => "on bridge br0 198.18.0.1/24",
            };
            println!(
                "namespace {ns}: TAPs tap0 and tap1 {joined}, veth pair veth0-veth1 (MTU {mtu})"
            );
            println!(
                "controller: ip netns exec {ns} {exe} controller --tap tap0 --ip 198.18.0.2/24 --ns ram:1G --allow-any-host"
            );
            println!(
                "host:       ip netns exec {ns} {exe} host --tap tap1 --ip 198.18.0.3/24 --connect 198.18.0.2:4420 io --rw read --bs 128k"
            );
            println!("(or --iface veth0 and --iface veth1 for the same over AF_XDP or AF_PACKET)");
            println!("remove:     {exe} net down --netns {ns}");
        }
        NetAction::Down if !netns_exists(ns) => {
            println!("namespace {ns} does not exist; nothing to remove");
        }
        NetAction::Down => {
            sh(&["ip", "netns", "del", ns]).with_context(|| format!("removing namespace {ns}"))?;
            println!("namespace {ns} removed");
        }
    }
    Ok(())
}

/// Whether `ip netns` knows a namespace of this name.
fn netns_exists(name: &str) -> bool {
    std::path::Path::new("/run/netns").join(name).exists()
}
