//! `nvme-ddp host`: connect to a controller and identify, discover or run I/O.

use anyhow::{Context, Result, bail};
use clap::{ArgAction, Args, Subcommand};
use nvme_ddp::app::{HostApp, IoApp};
use nvme_ddp::clock::Clock;
use nvme_ddp::kernel_tcp::run_host;
use nvme_ddp::report::{OffloadReport, PhaseReport, human_bytes};
use nvme_ddp::size::format_size;
use nvme_ddp::transport::TransportType;
use nvme_ddp::userspace;
use nvme_ddp::workload::{Limit, Rw, WorkloadSpec};
use nvme_of::Digests;
use nvme_of::host::HostConfig;
use smoltcp_glue::Stack;
use std::net::SocketAddr;
use std::time::Duration;
use ulp_ddp::Caps;

use crate::admin::{self, GetLogArgs, IdNsArgs, resolve_nqn};
use crate::args::{
    CtrlLossTmo, parse_bytes, parse_ctrl_loss_tmo, parse_nqn, parse_on_off, parse_qd, parse_queues,
    parse_seconds,
};
use crate::link::{KERNEL_TCP_MTU, LinkArgs, fresh_stack_config};
use crate::progress::{Eta, cpu_times, interrupt_flag, watch};

/// Options of `host`; like nvme-cli's, they go before or after the verb.
#[derive(Args, Debug)]
pub(crate) struct HostArgs {
    /// Controller address, ADDR:PORT (required).
    #[arg(long, global = true)]
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
        default_value = "nqn.2014-08.org.nvmexpress:uuid:5f0d2c44-6a1e-4c8b-9d3e-000000000000"
    )]
    hostnqn: String,
    /// Header digests: --hdgst (on) or --hdgst=on|off.
    #[arg(long, global = true, default_value = "off", num_args = 0..=1, require_equals = true, default_missing_value = "on", value_parser = parse_on_off, action = ArgAction::Set)]
    hdgst: bool,
    /// Data digests: --ddgst (on) or --ddgst=on|off.
    #[arg(long, global = true, default_value = "off", num_args = 0..=1, require_equals = true, default_missing_value = "on", value_parser = parse_on_off, action = ArgAction::Set)]
    ddgst: bool,
    /// I/O queues (each its own TCP connection), 1 to 128.
    #[arg(long, global = true, default_value = "1", value_parser = parse_queues)]
    queues: u16,
    /// Commands outstanding per I/O queue, 1 to 1024.
    #[arg(long, global = true, default_value = "32", value_parser = parse_qd)]
    qd: u16,
    /// Keep alive timeout in seconds (0 for none).
    #[arg(long, global = true, default_value_t = 5)]
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
    eta: Eta,
    #[command(flatten)]
    link: LinkArgs,
    #[command(subcommand)]
    action: HostAction,
}

#[derive(Subcommand, Debug)]
enum HostAction {
    /// Print the controller's identity and namespaces in brief.
    Identify,
    /// Print the discovery log (as `get-log discovery`).
    Discover,
    /// List the namespaces of the subsystem, or of every subsystem
    /// discovery lists (as `nvme list`).
    List,
    /// Print the Identify Controller data (as `nvme id-ctrl`).
    IdCtrl,
    /// Print a namespace's Identify Namespace data (as `nvme id-ns`).
    IdNs(IdNsArgs),
    /// Print a log page: error, smart, discovery, or one by identifier.
    GetLog(GetLogArgs),
    /// Run an I/O workload and print IOPS, throughput and latency.
    Io(IoArgs),
}

#[derive(Args, Debug)]
struct IoArgs {
    #[arg(long, value_enum, default_value = "read")]
    rw: Rw,
    /// Bytes per I/O.
    #[arg(long, default_value = "4k", value_parser = parse_bytes)]
    bs: u64,
    /// Total bytes to transfer, at most the namespace (default: the whole
    /// namespace once).
    #[arg(long, value_parser = parse_bytes, conflicts_with = "time")]
    size: Option<u64>,
    /// Run for this many seconds instead.
    #[arg(long)]
    time: Option<f64>,
    /// Namespace to use (default: the first).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..0xffff_ffff))]
    nsid: Option<u32>,
    /// Write a pattern and check it when reading back.
    #[arg(long)]
    verify: bool,
    /// Seed of the data pattern and of random offsets.
    #[arg(long, default_value_t = 1)]
    seed: u64,
}

impl HostArgs {
    fn connect(&self) -> Result<SocketAddr> {
        self.connect.context("host needs --connect ADDR:PORT, the controller's address")
    }
}

pub(crate) fn host_config(a: &HostArgs, subnqn: String) -> HostConfig {
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
        ..HostConfig::default()
    }
}

/// Run `app` on a host; over smoltcp, also report what the NIC did.
pub(crate) fn run_app(
    a: &HostArgs,
    cfg: HostConfig,
    app: &mut dyn HostApp,
    limit: Duration,
) -> Result<Option<OffloadReport>> {
    let oneshot = a.link.offload.unwrap_or(Caps::ALL).contains(Caps::NVME_TCP_ONESHOT);
    let offload = match (a.link.cidr()?, a.link.device(2)?) {
        (Some(cidr), Some((dev, nic, mtu))) => {
            let host = a.transport.host(cfg, oneshot, mtu);
            let remote = match a.connect()? {
                SocketAddr::V4(v4) => v4,
                SocketAddr::V6(_) => bail!("smoltcp mode speaks IPv4 only"),
            };
            let clock = Clock::new();
            let stack = Stack::new(dev, fresh_stack_config(cidr), userspace::to_smol(clock.now()));
            let mut side = userspace::HostSide::new(stack, host, remote, Some(nic.clone()));
            userspace::run_host(&mut side, app, &clock, limit, a.link.busy_poll())?;
            let (ulp, tx) = side.host.stats();
            Some(OffloadReport::new(nic.caps().1, nic.stats(), ulp, tx))
        }
        _ => {
            let mut host = a.transport.host(cfg, oneshot, KERNEL_TCP_MTU);
            run_host(a.connect()?, &mut host, app, limit)?;
            None
        }
    };
    match app.error() {
        Some(e) => bail!("{e}"),
        None => Ok(offload),
    }
}

pub(crate) fn run(a: HostArgs) -> Result<()> {
    match &a.action {
        HostAction::Discover => admin::print_discovery(&a)?,
        HostAction::List => admin::list(&a)?,
        HostAction::IdCtrl => admin::id_ctrl(&a)?,
        HostAction::IdNs(args) => admin::id_ns(&a, args)?,
        HostAction::GetLog(args) => admin::get_log(&a, args)?,
        HostAction::Identify => {
            let app = admin::admin(&a, resolve_nqn(&a)?, |_| Vec::new(), "Identify")?;
            let c = app.controller.context("no Identify Controller data")?;
            let v = app.version;
            if a.json {
                let ns: Vec<_> = app
                    .namespaces
                    .iter()
                    .map(|n| serde_json::json!({"nsid": n.nsid, "blocks": n.blocks, "block_size": n.block_size}))
                    .collect();
                let j = serde_json::json!({
                    "subnqn": c.subnqn, "cntlid": c.cntlid, "sn": c.sn, "mn": c.mn, "fr": c.fr,
                    "version": format!("{}.{}.{}", v >> 16, (v >> 8) & 0xff, v & 0xff),
                    "mdts": c.mdts, "maxcmd": c.maxcmd, "nn": c.nn, "ioccsz": c.ioccsz, "kas": c.kas,
                    "io_queues": app.io_queues, "queue_depth": app.queue_depth, "namespaces": ns,
                });
                println!("{}", serde_json::to_string_pretty(&j)?);
            } else {
                println!("subnqn  : {}", c.subnqn);
                println!("cntlid  : {}", c.cntlid);
                println!("sn / mn : {} / {} (fr {})", c.sn, c.mn, c.fr);
                println!("version : {}.{}.{}", v >> 16, (v >> 8) & 0xff, v & 0xff);
                println!(
                    "mdts    : {}  maxcmd: {}  ioccsz: {}  kas: {}",
                    c.mdts, c.maxcmd, c.ioccsz, c.kas
                );
                println!("queues  : {} I/O x {} deep", app.io_queues, app.queue_depth);
                for n in &app.namespaces {
                    let bytes = n.blocks * u64::from(n.block_size);
                    println!(
                        "nsid {:<4}: {} blocks of {} B ({})",
                        n.nsid,
                        n.blocks,
                        n.block_size,
                        human_bytes(bytes as f64)
                    );
                }
            }
        }
        HostAction::Io(io) => io_run(&a, io)?,
    }
    Ok(())
}

fn io_run(a: &HostArgs, io: &IoArgs) -> Result<()> {
    let bs = u32::try_from(io.bs).ok().filter(|&b| b > 0).context("--bs must be 1..4G")?;
    let limit = match (io.size, io.time) {
        (_, Some(t)) if t > 0.0 && t.is_finite() => Limit::Time(Duration::from_secs_f64(t)),
        (_, Some(_)) => bail!("--time must be a positive number of seconds"),
        (Some(0), None) => bail!("--size 0 transfers nothing"),
        (Some(n), None) if n % u64::from(bs) != 0 => {
            bail!("--size {} is not a multiple of --bs {}", format_size(n), format_size(io.bs))
        }
        (Some(n), None) => Limit::Bytes(n),
        (None, None) => Limit::Namespace,
    };
    let spec = WorkloadSpec {
        rw: io.rw,
        bs,
        limit,
        qd: usize::from(a.qd),
        verify: io.verify,
        seed: io.seed,
        nsid: io.nsid,
    };
    let nqn = resolve_nqn(a)?;
    let stop = interrupt_flag()?;
    let mut app = IoApp::new([spec]).with_watch(watch(a.eta, stop));
    let cpu0 = cpu_times();
    let t0 = std::time::Instant::now();
    let result = run_app(a, host_config(a, nqn), &mut app, Duration::from_secs(30 * 24 * 3600));
    let (cpu1, wall) = (cpu_times(), t0.elapsed().as_secs_f64().max(1e-9));
    let share = |a: Duration, b: Duration| (b - a).as_secs_f64() / wall * 100.0;
    let (user_pct, sys_pct) = (share(cpu0.0, cpu1.0), share(cpu0.1, cpu1.1));
    let offload = result.as_ref().ok().cloned().flatten();
    let reports: Vec<PhaseReport> = app
        .results
        .iter()
        .map(|(spec, stats)| PhaseReport::new(spec, stats.clone(), app.io_queues, app.queue_depth))
        .collect();
    if a.json {
        let j = serde_json::json!({
            "phases": reports, "offload": offload, "interrupted": app.interrupted,
            "recovery": app.recovery,
            "cpu": { "user_pct": user_pct, "sys_pct": sys_pct },
        });
        println!("{}", serde_json::to_string_pretty(&j)?);
    } else if !reports.is_empty() {
        if app.queue_depth > 0 && app.queue_depth < usize::from(a.qd) {
            println!(
                "note: the controller's queues hold {} commands; --qd {} ran at {}",
                app.queue_depth + 1,
                a.qd,
                app.queue_depth
            );
        }
        if app.io_queues > 0 && app.io_queues < a.queues {
            println!("note: the controller granted {} of {} I/O queues", app.io_queues, a.queues);
        }
        for r in &reports {
            for line in r.lines() {
                println!("{line}");
            }
        }
        println!("  cpu: usr {user_pct:.1}%, sys {sys_pct:.1}% of one core");
        println!("  {}", app.recovery.line());
        for line in offload.iter().flat_map(|o| o.lines("host")) {
            println!("  {line}");
        }
    }
    result?;
    if app.interrupted {
        bail!("interrupted; the results above are of what ran till then");
    }
    Ok(())
}
