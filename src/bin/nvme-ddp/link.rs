//! `--tap/--iface/--ip`: running a side over smoltcp on a TAP device or any
//! interface (AF_XDP or AF_PACKET), behind the software NIC, instead of over kernel
//! TCP.
//!
//! It opens links; it must never run a host or a controller.

use anyhow::{Context, Result, bail};
use clap::Args;
use nvme_ddp::driver::smoltcp::{Chain, chain};
use smoltcp_glue::{Link, LinkName, Profile, StackConfig, Via};
use std::path::PathBuf;
use std::sync::Arc;
use ulp_ddp::{Caps, DdpDevice};

use crate::args::{existing_iface, parse_busy_poll, parse_threshold, parse_via, parse_whole};

/// A user-space (smoltcp) transport on a TAP device or another interface
/// instead of kernel TCP.
#[derive(Args, Debug, Clone)]
pub(crate) struct LinkArgs {
    /// Run over smoltcp on this TAP device (inside its network namespace).
    #[arg(long, global = true, value_parser = existing_iface)]
    pub(crate) tap: Option<String>,
    /// Run over smoltcp on this network interface (a NIC or a veth end
    /// with no address of its own; GRO and LRO off), through AF_XDP where
    /// it can be, else AF_PACKET (see --via).
    #[arg(long, global = true, value_parser = existing_iface)]
    pub(crate) iface: Option<String>,
    /// How --iface reaches the interface: auto (AF_XDP where the driver
    /// runs native XDP on one receive queue and frames fit 4 KiB, else
    /// AF_PACKET), xdp or packet (that one, or an error saying why not).
    #[arg(long, global = true, value_parser = parse_via)]
    pub(crate) via: Option<Via>,
    /// Our address on the interface, e.g. 198.18.0.2/24.
    #[arg(long, global = true)]
    pub(crate) ip: Option<String>,
    /// IP MTU of the interface (default: the interface's).
    #[arg(long, global = true, value_parser = parse_whole::<usize>)]
    pub(crate) mtu: Option<usize>,
    /// Capture our frames into this pcap file (over kernel TCP, capture
    /// with tcpdump).
    #[arg(long, global = true)]
    pub(crate) pcap: Option<PathBuf>,
    /// Offloads of the software NIC under smoltcp (default all): none,
    /// all, classic, crc, ddp, crc-rx, crc-tx, oneshot, zc-tx, tls, tls-rx,
    /// tls-tx, or several joined by '+' (ddp+crc).
    #[arg(long, global = true, value_parser = Caps::parse)]
    pub(crate) offload: Option<Caps>,
    /// Keep polling this many microseconds after the last progress before
    /// sleeping (default 0: sleep at once). Costs a core while it spins;
    /// for latency runs.
    #[arg(long, value_name = "USECS", global = true, value_parser = parse_busy_poll)]
    pub(crate) busy_poll: Option<std::time::Duration>,
    /// Map transfers from this size (default: the NIC's threshold, 32k).
    #[arg(long, global = true, value_parser = parse_threshold)]
    pub(crate) ddp_threshold: Option<u32>,
}

/// An interface with its decorators, its NIC as the driver sees it, and
/// the link's IP MTU (which sizes iWARP FPDUs).
pub(crate) type LinkDevice = (Chain<Link>, Arc<dyn DdpDevice>, usize);

impl LinkArgs {
    /// What the link options need of each other. Checked here, not by
    /// clap's `requires`: on `host` they are global, given before or after
    /// the verb, and clap checks each side of the verb apart.
    pub(crate) fn check(&self) -> Result<()> {
        let link = self.tap.is_some() || self.iface.is_some();
        if self.tap.is_some() && self.iface.is_some() {
            bail!("give --tap or --iface, not both");
        }
        if link && self.ip.is_none() {
            bail!("--tap and --iface need --ip ADDR/PREFIX, our address on the link");
        }
        if self.via.is_some() && self.iface.is_none() {
            bail!("--via says how --iface reaches its interface: it needs --iface");
        }
        let smoltcp_only = [
            ("--ip", self.ip.is_some()),
            ("--mtu", self.mtu.is_some()),
            ("--pcap", self.pcap.is_some()),
            ("--offload", self.offload.is_some()),
            ("--busy-poll", self.busy_poll.is_some()),
            ("--ddp-threshold", self.ddp_threshold.is_some()),
        ];
        match smoltcp_only.iter().find(|(_, given)| *given) {
            Some((flag, _)) if !link => bail!(
                "{flag} applies to a smoltcp link: give --tap or --iface (over kernel TCP there \
                 is no software NIC; capture with tcpdump)"
            ),
            _ => Ok(()),
        }
    }

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

    /// How long the loop polls before it sleeps.
    pub(crate) fn busy_poll(&self) -> std::time::Duration {
        self.busy_poll.unwrap_or_default()
    }

    /// The interface's name (a TAP's or another's), if one was asked for.
    pub(crate) fn iface_name(&self) -> Option<&str> {
        self.tap.as_deref().or(self.iface.as_deref())
    }

    /// The interface asked for, if any.
    pub(crate) fn name(&self) -> Option<LinkName> {
        match (&self.tap, &self.iface) {
            (Some(t), _) => Some(LinkName::Tap(t.clone())),
            (_, Some(i)) => Some(LinkName::Iface(i.clone(), self.via.unwrap_or_default())),
            _ => None,
        }
    }

    /// Open the interface with the standard decorators and the software NIC.
    pub(crate) fn device(&self, seed: u64) -> Result<Option<LinkDevice>> {
        let Some(name) = self.name() else { return Ok(None) };
        let link = name.open(self.mtu).with_context(|| format!("opening {name}"))?;
        self.decorate(&name, link, seed).map(Some)
    }

    /// Open `queues` queues of the TAP, each with its decorators and a
    /// software NIC of its own (a NIC queue).
    pub(crate) fn queues(&self, seed: u64, queues: usize) -> Result<Vec<LinkDevice>> {
        let name = self.name().context("--tap-queues needs --tap")?;
        if self.pcap.is_some() && queues > 1 {
            bail!("--pcap captures one queue; capture a multi-queue TAP with dumpcap -i {name}");
        }
        let links =
            name.open_queues(self.mtu, queues).with_context(|| format!("opening {name}"))?;
        links.into_iter().zip(seed..).map(|(link, seed)| self.decorate(&name, link, seed)).collect()
    }

    fn decorate(&self, name: &LinkName, link: Link, seed: u64) -> Result<LinkDevice> {
        let mtu = link.ip_mtu();
        tracing::info!(%name, via = link.kind(), mtu, "link open");
        let offload = self.offload.unwrap_or(Caps::ALL);
        let (dev, nic) = chain(link, Profile::default(), seed, self.pcap.as_deref(), offload)?;
        Ok((dev, Arc::new(nic), mtu))
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

/// The MTU iWARP FPDUs are cut for over kernel TCP: Ethernet's, so that
/// each fills one segment on the usual path (the stream takes any size).
pub(crate) const KERNEL_TCP_MTU: usize = 1500;
