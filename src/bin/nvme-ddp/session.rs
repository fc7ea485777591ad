//! What every `host` verb shares: how it reaches the controller (kernel
//! TCP, or smoltcp on a TAP or an interface), the host configuration those
//! options make, and running a host app over either. The verbs (`host.rs`,
//! `admin.rs`) use it; it must never know about any one verb.

use anyhow::{Context, Result, bail};
use clap::{ArgAction, Args};
use nvme_ddp::app::{HostApp, Stoppable};
use nvme_ddp::driver::clock::Clock;
use nvme_ddp::driver::transport::{TlsConfig, TransportType};
use nvme_ddp::driver::{kernel_tcp, smoltcp};
use nvme_ddp::report::OffloadReport;
use nvme_of::Digests;
use nvme_of::auth::Secret;
use nvme_of::host::{DhchapSecrets, Host, HostConfig};
use nvme_tcp::tls::{ConfiguredPsk, Derivation};
use smoltcp_glue::Stack;
use std::net::SocketAddr;
use std::time::Duration;
use ulp_ddp::Caps;

use crate::args::{
    CtrlLossTmo, SecretArg, parse_connect, parse_ctrl_loss_tmo, parse_nqn, parse_on_off, parse_qd,
    parse_queues, parse_seconds, parse_secret, parse_tls_key, parse_whole,
};
use crate::link::{KERNEL_TCP_MTU, LinkArgs, fresh_stack_config};
use crate::progress::{Eta, interrupt_flag};

/// The host NQN `host` uses unless given one.
pub(crate) const DEFAULT_HOSTNQN: &str =
    "nqn.2014-08.org.nvmexpress:uuid:5f0d2c44-6a1e-4c8b-9d3e-000000000000";

/// How `host` reaches a controller and what it asks of the association;
/// like nvme-cli's, these options go before or after the verb.
#[derive(Args, Debug)]
pub(crate) struct ConnectArgs {
    /// Controller address, HOST:PORT: an IP address or a host name
    /// (required).
    #[arg(long, global = true, value_name = "HOST:PORT", value_parser = parse_connect)]
    connect: Option<SocketAddr>,
    /// NVMe-oF transport: tcp, or rdma (iWARP over TCP).
    #[arg(long, global = true, default_value = "tcp", value_parser = TransportType::parse)]
    transport: TransportType,
    /// Subsystem NQN; without it, the first subsystem discovery lists.
    #[arg(long, global = true, value_parser = parse_nqn)]
    pub(crate) nqn: Option<String>,
    /// Host NQN.
    #[arg(
        long,
        global = true,
        value_parser = parse_nqn,
        default_value = DEFAULT_HOSTNQN
    )]
    hostnqn: String,
    /// DH-HMAC-CHAP secret (`DHHC-1:...`, or @FILE holding it), used when
    /// the controller asks the host to authenticate.
    #[arg(long, global = true, value_name = "KEY", value_parser = SecretArg(parse_secret))]
    dhchap_secret: Option<Secret>,
    /// The controller's secret: the controller must prove itself too
    /// (bidirectional). Needs --dhchap-secret.
    #[arg(long, global = true, value_name = "KEY", value_parser = SecretArg(parse_secret))]
    dhchap_ctrl_secret: Option<Secret>,
    /// Secure channel: TLS 1.3 with a PSK under every queue (NVMe/TCP),
    /// as `nvme connect --tls`. Needs --tls-key.
    #[arg(long, global = true)]
    tls: bool,
    /// The configured PSK (`NVMeTLSkey-1:...`, as `nvme gen-tls-key`
    /// prints it, or @FILE holding it).
    #[arg(long, global = true, value_name = "KEY", value_parser = SecretArg(parse_tls_key))]
    tls_key: Option<ConfiguredPsk>,
    /// PSK identity to offer: 1 (with the PSK digest, Linux's first
    /// choice) or 0 (what `nvme gen-tls-key` inserts by default).
    #[arg(long, global = true, default_value_t = 1, value_parser = clap::value_parser!(u8).range(0..=1))]
    tls_identity: u8,
    /// Derive the TLS PSK as libnvme up to 1.15 does (nvme-cli 2.13 to
    /// 2.15; 2.16's --compat), not as RFC 8446 labels it.
    #[arg(long, global = true)]
    tls_compat: bool,
    /// Header digests: --hdgst (on) or --hdgst=on|off.
    #[arg(long, global = true, default_value = "off", num_args = 0..=1, require_equals = true, default_missing_value = "on", value_parser = parse_on_off, action = ArgAction::Set)]
    hdgst: bool,
    /// Data digests: --ddgst (on) or --ddgst=on|off.
    #[arg(long, global = true, default_value = "off", num_args = 0..=1, require_equals = true, default_missing_value = "on", value_parser = parse_on_off, action = ArgAction::Set)]
    ddgst: bool,
    /// I/O queues (each its own TCP connection), 1 to 128.
    #[arg(long, global = true, default_value = "1", value_parser = parse_queues)]
    pub(crate) queues: u16,
    /// Commands outstanding per I/O queue, 1 to 1024.
    #[arg(long, global = true, default_value = "32", value_parser = parse_qd)]
    pub(crate) qd: u16,
    /// Keep alive timeout in seconds (0 for none).
    #[arg(long, global = true, default_value_t = 5, value_parser = parse_whole::<u64>)]
    kato: u64,
    /// Seconds to wait before each attempt to reconnect a lost
    /// association (as nvme connect's; fractions allowed).
    #[arg(long, global = true, default_value = "10", value_parser = parse_seconds)]
    reconnect_delay: Duration,
    /// Seconds a lost association is retried before its I/O fails: 0
    /// fails at once, -1 retries forever (as nvme connect's).
    #[arg(long, global = true, default_value = "600", allow_negative_numbers = true, value_parser = parse_ctrl_loss_tmo)]
    ctrl_loss_tmo: CtrlLossTmo,
    /// Print a machine-readable JSON report.
    #[arg(long, global = true)]
    pub(crate) json: bool,
    /// Progress line: auto (on a terminal), always, never.
    #[arg(long, global = true, value_enum, default_value = "auto")]
    pub(crate) eta: Eta,
    #[command(flatten)]
    link: LinkArgs,
}

impl ConnectArgs {
    /// What the options need of each other, wherever they stand around
    /// the verb (clap's `requires` would check each side of it apart).
    pub(crate) fn check(&self) -> Result<()> {
        if self.dhchap_ctrl_secret.is_some() && self.dhchap_secret.is_none() {
            bail!("--dhchap-ctrl-secret needs --dhchap-secret: the host authenticates first");
        }
        match (self.tls, self.tls_key.is_some()) {
            (true, false) => bail!("--tls needs --tls-key KEY (or @FILE), the configured PSK"),
            (false, true) => bail!("--tls-key needs --tls"),
            _ if self.tls_compat && !self.tls => bail!("--tls-compat needs --tls"),
            _ => {}
        }
        self.link.check()
    }

    pub(crate) fn connect(&self) -> Result<SocketAddr> {
        self.connect.context("host needs --connect HOST:PORT, the controller's address")
    }

    /// The TAP or interface asked for, if any.
    pub(crate) fn link_name(&self) -> Option<&str> {
        self.link.iface_name()
    }

    /// The transport's name: tcp or rdma.
    pub(crate) fn transport_name(&self) -> &'static str {
        self.transport.name()
    }
}

pub(crate) fn host_config(a: &ConnectArgs, subnqn: String) -> HostConfig {
    HostConfig {
        subnqn,
        hostnqn: a.hostnqn.clone(),
        digests: Digests { header: a.hdgst, data: a.ddgst },
        io_queues: a.queues,
        queue_depth: a.qd,
        kato: Duration::from_secs(a.kato),
        reconnect_delay: a.reconnect_delay,
        ctrl_loss_tmo: a.ctrl_loss_tmo.0,
        ddp_threshold: a.link.ddp_threshold,
        dhchap: a
            .dhchap_secret
            .clone()
            .map(|key| DhchapSecrets { key, ctrl_key: a.dhchap_ctrl_secret.clone() }),
        ..HostConfig::default()
    }
}

impl ConnectArgs {
    /// The host this run speaks with: over TLS when asked.
    pub(crate) fn host(&self, cfg: HostConfig, oneshot: bool, mtu: usize) -> Result<Host> {
        let tls = match self.tls_key.as_ref().filter(|_| self.tls) {
            Some(_) if self.transport != TransportType::Tcp => {
                bail!("{}", nvme_ddp::driver::transport::NoTlsOverRdma)
            }
            Some(psk) => Some(TlsConfig {
                psk: psk.clone(),
                identity: self.tls_identity,
                derivation: if self.tls_compat { Derivation::Compat } else { Derivation::Rfc8446 },
                required: true,
            }),
            None => None,
        };
        Ok(self.transport.host_with(cfg, oneshot, mtu, tls.as_ref()))
    }
}

/// Run `apps` on one association over kernel TCP, each on a set of its
/// I/O queues (dealt round robin) on a thread of its own, pinned to its
/// CPU if given, until every one is done or interrupted (Ctrl-C). Returns
/// the association's recovery and what each set's thread did; the apps
/// hold their errors.
pub(crate) fn run_sets<A: HostApp + Send>(
    a: &ConnectArgs,
    cfg: HostConfig,
    apps: Vec<(&mut A, Option<usize>)>,
    limit: Duration,
) -> Result<(nvme_of::host::Recovery, Vec<kernel_tcp::SetRun>)> {
    let stop = interrupt_flag()?;
    let oneshot = a.link.offload.unwrap_or(Caps::ALL).contains(Caps::ONESHOT);
    let mut host = a.host(cfg, oneshot, KERNEL_TCP_MTU)?;
    let mut stoppable: Vec<_> =
        apps.into_iter().map(|(app, cpu)| (Stoppable::new(app, &stop), cpu)).collect();
    let sets =
        stoppable.iter_mut().map(|(app, cpu)| kernel_tcp::QueueSet { app, cpu: *cpu }).collect();
    let runs = kernel_tcp::run_host_sets(a.connect()?, &mut host, sets, &stop, limit)?;
    Ok((host.recovery(), runs))
}

/// Run `app` on a host until it is done, or interrupted (Ctrl-C); over
/// smoltcp, also report what the NIC did.
pub(crate) fn run_app(
    a: &ConnectArgs,
    cfg: HostConfig,
    app: &mut dyn HostApp,
    limit: Duration,
) -> Result<Option<OffloadReport>> {
    let stop = interrupt_flag()?;
    let app = &mut Stoppable::new(app, &stop);
    let oneshot = a.link.offload.unwrap_or(Caps::ALL).contains(Caps::ONESHOT);
    let offload = match (a.link.cidr()?, a.link.device(2)?) {
        (Some(cidr), Some((dev, nic, mtu))) => {
            let host = a.host(cfg, oneshot, mtu)?;
            let remote = match a.connect()? {
                SocketAddr::V4(v4) => v4,
                SocketAddr::V6(_) => bail!("smoltcp mode speaks IPv4 only"),
            };
            let clock = Clock::new();
            let stack = Stack::new(dev, fresh_stack_config(cidr), smoltcp::to_smol(clock.now()));
            let mut side = smoltcp::HostSide::new(stack, host, remote, Some(nic.clone()));
            smoltcp::run_host(&mut side, app, &clock, limit, a.link.busy_poll())?;
            let (ulp, tx) = side.host.stats();
            Some(OffloadReport::new(nic.caps().1, nic.stats(), ulp, tx))
        }
        _ => {
            let mut host = a.host(cfg, oneshot, KERNEL_TCP_MTU)?;
            kernel_tcp::run_host(a.connect()?, &mut host, app, limit)?;
            None
        }
    };
    match app.error() {
        Some(e) => bail!("{e}"),
        None => Ok(offload),
    }
}
