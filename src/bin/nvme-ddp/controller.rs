//! `nvme-ddp controller`: serve an NVM subsystem and a discovery controller.
//!
//! It parses and serves; the serving itself is the library's drivers', and
//! this file must never reach into a connection.

use anyhow::{Context, Result, anyhow, bail};
use clap::Args;
use nvme_ddp::driver::clock::Clock;
use nvme_ddp::driver::cpus;
use nvme_ddp::driver::kernel_tcp::ControllerServer;
use nvme_ddp::driver::smoltcp::{ControllerSide, serve_queues, to_smol};
use nvme_ddp::driver::transport::TransportType;
use nvme_ddp::driver::transport::{Listener, TlsConfig};
use nvme_ddp::report::{OffloadReport, human_bytes};
use nvme_ddp::size::format_size;
use nvme_of::auth::{DhGroup, Hash, Secret};
use nvme_of::controller::{Access, Port, Target, TargetConfig};
use nvme_of::namespace::Namespace;
use nvme_storage::{FileNamespace, RamNamespace};
use nvme_tcp::tls::{ConfiguredPsk, Derivation};
use smoltcp_glue::Stack;
use std::net::SocketAddr;
use std::sync::Arc;

use crate::args::{
    List, NsSpec, SecretArg, check_ram, list, parse_block_size, parse_bytes, parse_cpus,
    parse_dhgroup, parse_hash, parse_host_secret, parse_listen, parse_nqn, parse_ns, parse_seconds,
    parse_tls_key, parse_whole,
};
use crate::link::{KERNEL_TCP_MTU, LinkArgs, fresh_stack_config};
use crate::progress::interrupt_flag;

#[derive(Args, Debug)]
pub(crate) struct ControllerArgs {
    /// Address to listen on, ADDR:PORT or :PORT (repeatable over kernel
    /// TCP, e.g. also :8009 for discovery; one with --tap).
    #[arg(long, default_value = "0.0.0.0:4420", value_parser = parse_listen)]
    listen: Vec<SocketAddr>,
    /// Namespace: ram:SIZE or file:PATH (repeatable; default ram:1G).
    #[arg(long = "ns", value_parser = parse_ns)]
    namespaces: Vec<NsSpec>,
    /// Logical block size of every namespace.
    #[arg(long, default_value = "512", value_parser = parse_block_size)]
    block_size: u32,
    /// NVM subsystem NQN.
    #[arg(long, default_value = "nqn.2026-11.io.nvme-ddp:target", value_parser = parse_nqn)]
    nqn: String,
    /// Entries per queue (MAXCMD, CAP.MQES + 1).
    #[arg(long, default_value_t = 128, value_parser = parse_whole::<u16>)]
    queue_size: u16,
    /// I/Os a file namespace runs at once, each on a worker thread
    /// started when first needed (default: the queue size).
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..=4096))]
    io_depth: Option<u16>,
    /// Most data bytes per C2HData PDU.
    #[arg(long, default_value = "128k", value_parser = parse_bytes)]
    c2h_pdu: u64,
    /// Never replace the CapsuleResp of a read with the SUCCESS flag.
    #[arg(long)]
    no_c2h_success: bool,
    /// NVMe-oF transport to serve: tcp, or rdma (iWARP over TCP).
    #[arg(long, default_value = "tcp", value_parser = TransportType::parse)]
    transport: TransportType,
    /// Require data integrity from every host: MPA CRCs on rdma (the
    /// responder may insist). NVMe/TCP hosts choose their own digests.
    #[arg(long)]
    ddgst: bool,
    /// Serve over this many queues of the TAP (IFF_MULTI_QUEUE), each
    /// with a thread, a stack and a NIC queue of its own; connections are
    /// spread over them by TCP port.
    #[arg(long, default_value_t = 1, requires = "tap", value_parser = clap::value_parser!(u16).range(1..=64))]
    tap_queues: u16,
    /// Close a connection that has not connected a queue (ICReq or MPA,
    /// then Connect) within this many seconds.
    #[arg(long, default_value = "30", value_parser = parse_seconds)]
    connect_timeout: std::time::Duration,
    /// Most connections each listener holds at once (over smoltcp, each
    /// TAP queue); one more is closed on arrival and counted.
    #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u32).range(1..=65536))]
    max_connections: u32,
    /// CPUs to serve on, a poll group (a thread owning its connections)
    /// pinned to each: e.g. 0-3,6 (default: every CPU this process may
    /// run on, unpinned).
    #[arg(long, value_parser = parse_cpus)]
    cpus: Option<List<usize>>,
    /// Let this host connect (repeatable): its HOSTNQN. Without it or
    /// --allow-any-host no host may connect, as with nvmet and SPDK.
    #[arg(long = "allow-host", value_name = "NQN", value_parser = parse_nqn)]
    allow_hosts: Vec<String>,
    /// Let any host connect (nvmet's attr_allow_any_host); hosts given a
    /// --dhchap-key still authenticate.
    #[arg(long)]
    allow_any_host: bool,
    /// A host's DH-HMAC-CHAP secret, NQN=SECRET or NQN=@FILE (repeatable):
    /// that host must authenticate, and is allowed in.
    #[arg(long = "dhchap-key", value_name = "NQN=KEY", value_parser = SecretArg(parse_host_secret))]
    dhchap_keys: Vec<(String, Secret)>,
    /// The controller's secret for a host that asks it to authenticate
    /// too (bidirectional), NQN=SECRET or NQN=@FILE (repeatable).
    #[arg(long = "dhchap-ctrl-key", value_name = "NQN=KEY", value_parser = SecretArg(parse_host_secret))]
    dhchap_ctrl_keys: Vec<(String, Secret)>,
    /// Hash functions offered, in order of preference (default sha256,sha384,sha512).
    #[arg(long, value_name = "LIST", value_parser = |s: &str| list(s, parse_hash))]
    dhchap_hash: Option<List<Hash>>,
    /// Diffie-Hellman groups offered, in order of preference (default
    /// null,ffdhe2048,...,ffdhe8192).
    #[arg(long, value_name = "LIST", value_parser = |s: &str| list(s, parse_dhgroup))]
    dhchap_dhgroup: Option<List<DhGroup>>,
    /// TLS 1.3 secure channel on the port (NVMe/TCP): `required` (every
    /// host), or `optional` (a host may connect in the clear too). Needs
    /// --tls-key.
    #[arg(long, value_parser = ["required", "optional"], requires = "tls_key")]
    tls: Option<String>,
    /// The configured PSK hosts hold (`NVMeTLSkey-1:...`, as `nvme
    /// gen-tls-key` prints it, or @FILE holding it).
    #[arg(long, value_name = "KEY", value_parser = SecretArg(parse_tls_key), requires = "tls")]
    tls_key: Option<ConfiguredPsk>,
    /// Derive TLS PSKs as libnvme up to 1.15 does (nvme-cli 2.13 to 2.15).
    #[arg(long, requires = "tls")]
    tls_compat: bool,
    #[command(flatten)]
    link: LinkArgs,
}

/// The listener the flags ask for: with TLS on the port, if asked.
fn listener(a: &ControllerArgs, mtu: usize) -> Result<Listener> {
    let listener = a.transport.listener(mtu).require_crc(a.ddgst);
    let (Some(mode), Some(psk)) = (&a.tls, &a.tls_key) else { return Ok(listener) };
    let tls = TlsConfig {
        psk: psk.clone(),
        identity: 1,
        derivation: if a.tls_compat { Derivation::Compat } else { Derivation::Rfc8446 },
        required: mode == "required",
    };
    Ok(listener.with_tls(tls.port())?)
}

/// The allow-list and secrets the flags give.
fn access(a: &ControllerArgs) -> Result<Access> {
    let mut access = Access::no_host();
    access.allow_any_host = a.allow_any_host;
    for nqn in &a.allow_hosts {
        access.hosts.entry(nqn.clone()).or_default();
    }
    for (nqn, key) in &a.dhchap_keys {
        let host = access.hosts.entry(nqn.clone()).or_default();
        if host.key.replace(key.clone()).is_some() {
            bail!("--dhchap-key: {nqn} has two secrets");
        }
    }
    for (nqn, key) in &a.dhchap_ctrl_keys {
        let Some(host) = access.hosts.get_mut(nqn).filter(|h| h.key.is_some()) else {
            bail!(
                "--dhchap-ctrl-key {nqn}=...: give the host's own --dhchap-key {nqn}=... too; the controller only proves itself to a host that proved itself"
            );
        };
        if host.ctrl_key.replace(key.clone()).is_some() {
            bail!("--dhchap-ctrl-key: {nqn} has two controller secrets");
        }
    }
    if let Some(List(h)) = &a.dhchap_hash {
        access.hashes = h.clone();
    }
    if let Some(List(g)) = &a.dhchap_dhgroup {
        access.dhgroups = g.clone();
    }
    Ok(access)
}

pub(crate) fn build_target(a: &ControllerArgs, port: Option<Port>) -> Result<Arc<Target>> {
    let specs =
        if a.namespaces.is_empty() { vec![NsSpec::Ram(1 << 30)] } else { a.namespaces.clone() };
    let mut namespaces: Vec<Arc<dyn Namespace>> = Vec::new();
    for spec in &specs {
        let ns: Arc<dyn Namespace> = match spec {
            NsSpec::Ram(size) => {
                check_ram(*size, a.block_size).map_err(|e| anyhow!("--ns ram:{size}: {e}"))?;
                Arc::new(RamNamespace::new(*size, a.block_size)?)
            }
            NsSpec::File(path) => {
                let depth = a.io_depth.unwrap_or(a.queue_size);
                // Its errors name the file.
                Arc::new(FileNamespace::open(path, a.block_size, usize::from(depth))?)
            }
        };
        namespaces.push(ns);
    }
    let cfg = TargetConfig {
        subnqn: a.nqn.clone(),
        queue_size: a.queue_size,
        c2h_data_len: u32::try_from(a.c2h_pdu).context("--c2h-pdu is too large")?,
        c2h_success: !a.no_c2h_success,
        port,
        ddp_threshold: a.link.ddp_threshold,
        connect_timeout: a.connect_timeout,
        max_connections: a.max_connections as usize,
        access: access(a)?,
        ..TargetConfig::default()
    };
    Ok(Target::new(cfg, namespaces)?)
}

pub(crate) fn run(a: ControllerArgs) -> Result<()> {
    a.link.check()?;
    let first = a.listen.first().context("no --listen address")?;
    if a.link.name().is_some() && a.listen.len() > 1 {
        bail!(
            "over smoltcp (--tap, --iface) the controller listens on one port; give a single --listen"
        );
    }
    if a.connect_timeout.is_zero() {
        bail!("--connect-timeout must be more than 0 seconds");
    }
    if a.ddgst && a.transport == TransportType::Tcp {
        bail!("--ddgst on the controller needs --transport rdma: NVMe/TCP hosts choose digests");
    }
    let pinned = match &a.cpus {
        Some(List(cpus)) => {
            let allowed = cpus::allowed()?;
            if let Some(c) = cpus.iter().find(|c| !allowed.contains(c)) {
                bail!("--cpus: this process may not run on CPU {c} (it may on {allowed:?})");
            }
            Some(cpus.clone())
        }
        None => None,
    };
    if let Some(cidr) = a.link.cidr()? {
        let port = Port {
            traddr: cidr.address().to_string(),
            trsvcid: first.port().to_string(),
            portid: 1,
        };
        let target = build_target(&a, Some(port))?;
        let devices = match a.tap_queues {
            1 => vec![a.link.device(1)?.context("--ip needs --tap or --iface")?],
            n => a.link.queues(1, usize::from(n))?,
        };
        let listener = listener(&a, devices[0].2)?;
        let clock = Clock::new();
        let mut sides = Vec::new();
        let mut nics = Vec::new();
        for ((dev, nic, _), queue) in devices.into_iter().zip(0u64..) {
            let mut cfg = fresh_stack_config(cidr);
            cfg.seed ^= queue;
            let stack = Stack::new(dev, cfg, to_smol(clock.now()));
            let side = ControllerSide::new(stack, target.clone(), first.port(), Some(nic.clone()))?
                .with_listener(listener.clone());
            sides.push(side);
            nics.push(nic);
        }
        let stop = interrupt_flag()?;
        warn_if_closed(&target);
        tracing::info!(iface = %a.link.iface_name().unwrap_or_default(), queues = sides.len(), ip = %cidr, port = first.port(), nqn = %target.subnqn(), transport = %a.transport.name(), tls = %tls_mode(&a), "listening on smoltcp");
        let cpus = pinned.unwrap_or_default();
        serve_queues(&mut sides, &clock, &stop, a.link.busy_poll(), &cpus)?;
        for ((side, nic), queue) in sides.iter().zip(&nics).zip(0..) {
            let (ulp, tx) = side.stats();
            let who = match sides.len() {
                1 => "controller".to_string(),
                _ => format!("controller queue {queue} ({} connections)", side.accepted()),
            };
            for line in OffloadReport::controller(nic.caps().1, nic.stats(), ulp, tx).lines(&who) {
                tracing::info!("{line}");
            }
        }
        report_refusals(&target, a.max_connections);
        return Ok(());
    }
    let port =
        Port { traddr: first.ip().to_string(), trsvcid: first.port().to_string(), portid: 1 };
    let target = build_target(&a, Some(port))?;
    let listener = listener(&a, KERNEL_TCP_MTU)?;
    let groups: Vec<Option<usize>> = match &pinned {
        Some(cpus) => cpus.iter().copied().map(Some).collect(),
        None => vec![None; cpus::allowed().map_or(1, |c| c.len().max(1))],
    };
    let stop = interrupt_flag()?;
    let server = ControllerServer::spawn_until(target.clone(), &a.listen, listener, stop, &groups)?;
    for (ns, i) in target.namespaces().iter().zip(1..) {
        tracing::info!(nsid = i, size = %format_size(ns.size()), block = ns.block_size(), "namespace");
    }
    warn_if_closed(&target);
    for addr in server.local_addrs() {
        tracing::info!(%addr, nqn = %target.subnqn(), transport = %a.transport.name(), tls = %tls_mode(&a), "listening (discovery NQN too)");
    }
    let mut server = server;
    for (g, i) in server.join()?.iter().zip(0..) {
        let cpu = g.cpu.map_or_else(|| "any CPU".into(), |c| format!("CPU {c}"));
        let secs = g.cpu_time.as_secs_f64();
        tracing::info!(group = i, on = %cpu, connections = g.connections, io_queues = g.io_queues, cpu_s = %format!("{secs:.3}"), "poll group");
    }
    let s = target.stats();
    tracing::info!(reads = s.reads, writes = s.writes, read = %human_bytes(s.bytes_read as f64), written = %human_bytes(s.bytes_written as f64), "stopped");
    report_refusals(&target, a.max_connections);
    Ok(())
}

/// Whether the port takes TLS, for its "listening" line: a host that
/// does not match it cannot connect.
fn tls_mode(a: &ControllerArgs) -> String {
    match (a.tls.as_deref(), a.tls_compat) {
        (None, _) => "none (hosts connect in the clear)".into(),
        (Some(mode), false) => format!("{mode} (hosts need --tls --tls-key)"),
        (Some(mode), true) => format!("{mode}, nvme-cli 2.13-2.15's derivation (--tls-compat)"),
    }
}

/// Said once serving starts: a subsystem no host may reach, or secrets
/// that protect nothing.
fn warn_if_closed(target: &Target) {
    let access = &target.config().access;
    if !access.allow_any_host && access.hosts.is_empty() {
        tracing::warn!(
            "no host may connect: give --allow-host NQN (or --dhchap-key NQN=KEY), or --allow-any-host"
        );
    }
    if access.allow_any_host && access.hosts.values().any(|h| h.key.is_some()) {
        tracing::warn!(
            "--allow-any-host lets every other HOSTNQN in without authenticating: the --dhchap-key secrets only hold for hosts that give their own NQN"
        );
    }
}

/// The connections the limits closed, if any.
fn report_refusals(target: &Target, limit: u32) {
    let s = target.stats();
    if s.connections_refused > 0 {
        tracing::info!(
            connections = s.connections_refused,
            limit,
            "closed on arrival: too many at once (--max-connections)"
        );
    }
    if s.hosts_refused > 0 {
        tracing::info!(connects = s.hosts_refused, "refused: host not allowed (--allow-host)");
    }
    if s.connect_timeouts > 0 {
        tracing::info!(
            connections = s.connect_timeouts,
            "closed for connecting no queue in time (--connect-timeout)"
        );
    }
}
