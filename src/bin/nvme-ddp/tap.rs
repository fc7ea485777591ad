//! `--tap/--ip`: running a side over smoltcp on a TAP device, behind the
//! software NIC, instead of over kernel TCP.

use anyhow::{Context, Result};
use clap::Args;
use nvme_ddp::userspace;
use smoltcp_glue::{Profile, StackConfig, Tap};
use std::path::PathBuf;
use std::sync::Arc;
use ulp_ddp::{Caps, DdpDevice};

use crate::args::{existing_tap, parse_threshold};

/// A user-space (smoltcp) transport on a TAP device instead of kernel TCP.
#[derive(Args, Debug, Clone)]
pub(crate) struct TapArgs {
    /// Run over smoltcp on this TAP device (inside its network namespace).
    #[arg(long, requires = "ip", global = true, value_parser = existing_tap)]
    pub(crate) tap: Option<String>,
    /// Our address on the TAP, e.g. 198.18.0.2/24.
    #[arg(long, requires = "tap", global = true)]
    pub(crate) ip: Option<String>,
    /// IP MTU of the TAP (default: the interface's).
    #[arg(long, global = true)]
    pub(crate) mtu: Option<usize>,
    /// Capture our frames into this pcap file.
    #[arg(long, global = true)]
    pub(crate) pcap: Option<PathBuf>,
    /// Offloads of the software NIC under smoltcp (default all): none,
    /// all, classic, crc, ddp, crc-rx, crc-tx, oneshot, or several joined
    /// by '+' (ddp+crc).
    #[arg(long, requires = "tap", global = true, value_parser = Caps::parse)]
    pub(crate) offload: Option<Caps>,
    /// Map transfers from this size (default: the NIC's threshold, 32k).
    #[arg(long, requires = "tap", global = true, value_parser = parse_threshold)]
    pub(crate) ddp_threshold: Option<u32>,
}

/// A TAP with its decorators, and its NIC as the driver sees it.
pub(crate) type TapDevice = (userspace::Chain<Tap>, Arc<dyn DdpDevice>);

impl TapArgs {
    pub(crate) fn cidr(&self) -> Result<Option<smoltcp::wire::Ipv4Cidr>> {
        let Some(ip) = &self.ip else { return Ok(None) };
        let (addr, prefix) =
            ip.split_once('/').context("--ip needs a prefix length, e.g. 198.18.0.2/24")?;
        let addr: std::net::Ipv4Addr =
            addr.parse().with_context(|| format!("--ip {ip}: bad address"))?;
        let prefix: u8 = prefix
            .parse()
            .ok()
            .filter(|p| *p <= 32)
            .with_context(|| format!("--ip {ip}: bad prefix"))?;
        Ok(Some(smoltcp::wire::Ipv4Cidr::new(addr, prefix)))
    }

    /// Open the TAP with the standard decorators and the software NIC.
    pub(crate) fn device(&self, seed: u64) -> Result<Option<TapDevice>> {
        let Some(name) = &self.tap else { return Ok(None) };
        let tap = Tap::open(name, self.mtu)?;
        let offload = self.offload.unwrap_or(Caps::ALL);
        let (dev, nic) =
            userspace::chain(tap, Profile::default(), seed, self.pcap.as_deref(), offload)?;
        Ok(Some((dev, Arc::new(nic))))
    }
}

/// A stack config whose seed differs from run to run, so a restarted
/// process picks new ephemeral ports and initial sequence numbers and does
/// not collide with connections its predecessor left behind.
pub(crate) fn fresh_stack_config(cidr: smoltcp::wire::Ipv4Cidr) -> StackConfig {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    StackConfig { seed: t ^ (u64::from(std::process::id()) << 32), ..StackConfig::new(cidr) }
}

/// The IP MTU a medium carries, which sizes iWARP FPDUs.
pub(crate) fn ip_mtu(dev: &impl smoltcp::phy::Device) -> usize {
    let ethernet = smoltcp::wire::EthernetFrame::<&[u8]>::header_len();
    dev.capabilities().max_transmission_unit - ethernet
}

/// The MTU iWARP FPDUs are cut for over kernel TCP: Ethernet's, so that
/// each fills one segment on the usual path (the stream takes any size).
pub(crate) const KERNEL_TCP_MTU: usize = 1500;
