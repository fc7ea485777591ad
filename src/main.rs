//! `nvme-ddp`: an NVMe/TCP host and controller on a software NIC that models
//! ULP DDP offload.

use anyhow::{Context, Result, bail};
use clap::{Args, Parser, Subcommand};
use nvme_ddp::app::{DiscoverApp, HostApp, IdentifyApp, IoApp};
use nvme_ddp::clock::Clock;
use nvme_ddp::kernel_tcp::{ControllerServer, run_host};
use nvme_ddp::report::{OffloadReport, PhaseReport, human_bytes};
use nvme_ddp::size::{format_size, parse_size};
use nvme_ddp::transport::Transport;
use nvme_ddp::workload::{Limit, Rw, WorkloadSpec};
use nvme_ddp::{bench, demo, plot, userspace};
use nvme_tcp::controller::{Port, Target, TargetConfig};
use nvme_tcp::host::HostConfig;
use nvme_tcp::namespace::{FileNamespace, Namespace, RamNamespace};
use nvme_tcp::nvme::DISCOVERY_NQN;
use nvme_tcp::nvme::log::{SUBTYPE_NVME, TRTYPE_RDMA, TRTYPE_TCP};
use nvme_tcp::wire::Digests;
use smoltcp_glue::{Profile, Stack, StackConfig, Tap};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use ulp_ddp::{Caps, DdpDevice};

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
    Controller(ControllerArgs),
    /// Connect to a controller and identify, discover, or run I/O.
    Host(HostArgs),
    /// Host and controller in one process over an in-process wire: a write
    /// pass, a verified read pass, and a report. No root needed.
    Demo(DemoArgs),
    /// Create or remove a network namespace with a bridge and two TAPs for
    /// running host and controller over smoltcp (needs root).
    Net(NetArgs),
    /// Measure what the offloads save: a matrix of workloads with and
    /// without them, as a table, JSON and charts.
    Bench(BenchArgs),
}

/// A comma-separated list argument.
#[derive(Debug, Clone)]
struct List<T>(Vec<T>);

fn list<T>(s: &str, one: impl Fn(&str) -> Result<T, String>) -> Result<List<T>, String> {
    let v: Vec<T> =
        s.split(',').map(str::trim).filter(|w| !w.is_empty()).map(one).collect::<Result<_, _>>()?;
    if v.is_empty() {
        return Err("the list is empty".into());
    }
    Ok(List(v))
}

fn parse_on_off(s: &str) -> Result<bool, String> {
    match s {
        "on" | "true" | "1" => Ok(true),
        "off" | "false" | "0" => Ok(false),
        _ => Err(format!("{s:?}: use on or off")),
    }
}

fn parse_rw(s: &str) -> Result<Rw, String> {
    <Rw as clap::ValueEnum>::from_str(s, true)
}

#[derive(Args, Debug)]
struct BenchArgs {
    /// Block sizes, e.g. 4k,128k (default: 4k,32k,128k,1M).
    #[arg(long, value_parser = |s: &str| list(s, |w| parse_size(w).and_then(|n| u32::try_from(n).map_err(|_| format!("{w}: too large")))))]
    bs: Option<List<u32>>,
    /// Directions: read, write (default both).
    #[arg(long, value_parser = |s: &str| list(s, parse_rw))]
    rw: Option<List<Rw>>,
    /// Queue depths (default 1,32).
    #[arg(long, value_parser = |s: &str| list(s, |w| w.parse::<u16>().map_err(|e| format!("{w}: {e}"))))]
    qd: Option<List<u16>>,
    /// Data digest: on, off (default on).
    #[arg(long, value_parser = |s: &str| list(s, parse_on_off))]
    ddgst: Option<List<bool>>,
    /// Offload sets: none, crc, ddp, all (default all four).
    #[arg(long, value_parser = |s: &str| list(s, bench::OffloadSet::parse))]
    offload: Option<List<bench::OffloadSet>>,
    /// Transports: tcp, rdma, or tcp,rdma to compare them on the same
    /// matrix (default tcp).
    #[arg(long, value_parser = |s: &str| list(s, Transport::parse))]
    transport: Option<List<Transport>>,
    /// IP MTUs of the in-process wire (default 1500,9000).
    #[arg(long, value_parser = |s: &str| list(s, |w| w.parse::<usize>().map_err(|e| format!("{w}: {e}"))))]
    mtu: Option<List<usize>>,
    /// I/O queues.
    #[arg(long, default_value_t = 1)]
    queues: u16,
    /// Runs per point (reported as median and spread).
    #[arg(long, default_value_t = 5)]
    reps: usize,
    /// Seconds measured per run.
    #[arg(long, default_value_t = 1.0)]
    time: f64,
    /// Seconds of warm-up per run.
    #[arg(long, default_value_t = 0.2)]
    warmup: f64,
    /// Run host, NIC and controller on threads of their own, each one's CPU
    /// read from its thread's clock, instead of in lockstep on one thread
    /// (the default on the in-process wire, and the one whose numbers hold
    /// still). Over TAP they always run on threads.
    #[arg(long)]
    threads: bool,
    /// Run over two TAP devices, HOSTTAP,CTRLTAP (e.g. tap1,tap0 after
    /// `net up`, inside the namespace) instead of the in-process wire.
    #[arg(long)]
    tap: Option<String>,
    /// Write the points as JSON to this file.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Write charts (SVG and PNG) into this directory.
    #[arg(long)]
    plot: Option<PathBuf>,
    /// Skip measuring raw TCP (reported as 0; for profiling).
    #[arg(long)]
    no_raw: bool,
}

/// A user-space (smoltcp) transport on a TAP device instead of kernel TCP.
#[derive(Args, Debug, Clone)]
struct TapArgs {
    /// Run over smoltcp on this TAP device (inside its network namespace).
    #[arg(long, requires = "ip")]
    tap: Option<String>,
    /// Our address on the TAP, e.g. 198.18.0.2/24.
    #[arg(long, requires = "tap")]
    ip: Option<String>,
    /// IP MTU of the TAP (default: the interface's).
    #[arg(long)]
    mtu: Option<usize>,
    /// Capture our frames into this pcap file.
    #[arg(long)]
    pcap: Option<PathBuf>,
    /// Offloads of the software NIC under smoltcp: a list of ddp, crc-rx,
    /// crc-tx, oneshot, or all, or none (default: all).
    #[arg(long, requires = "tap", value_parser = Caps::parse)]
    offload: Option<Caps>,
    /// Map transfers from this size (default: the NIC's threshold, 32k).
    #[arg(long, requires = "tap", value_parser = parse_threshold)]
    ddp_threshold: Option<u32>,
}

/// A TAP with its decorators, and its NIC as the driver sees it.
type TapDevice = (userspace::Chain<Tap>, Arc<dyn DdpDevice>);

fn parse_threshold(s: &str) -> Result<u32, String> {
    u32::try_from(parse_size(s)?).map_err(|_| format!("{s:?} is too large"))
}

impl TapArgs {
    fn cidr(&self) -> Result<Option<smoltcp::wire::Ipv4Cidr>> {
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
    fn device(&self, seed: u64) -> Result<Option<TapDevice>> {
        let Some(name) = &self.tap else { return Ok(None) };
        let tap = Tap::open(name, self.mtu)?;
        let offload = self.offload.unwrap_or(Caps::ALL);
        let (dev, nic) =
            userspace::chain(tap, Profile::default(), seed, self.pcap.as_deref(), offload)?;
        Ok(Some((dev, Arc::new(nic))))
    }
}

#[derive(Args, Debug)]
struct NetArgs {
    #[command(subcommand)]
    action: NetAction,
    /// Network namespace name.
    #[arg(long, default_value = "nvmeddp", global = true)]
    netns: String,
}

#[derive(Subcommand, Debug)]
enum NetAction {
    /// Namespace, bridge br0 (198.18.0.1/24), TAPs tap0 and tap1.
    Up {
        /// IP MTU of the bridge and TAPs.
        #[arg(long, default_value_t = 9000)]
        mtu: usize,
    },
    /// Remove the namespace and everything in it.
    Down,
}

#[derive(Args, Debug)]
struct DemoArgs {
    /// Namespace size and bytes per pass.
    #[arg(long, default_value = "256M", value_parser = parse_bytes)]
    size: u64,
    /// Bytes per I/O.
    #[arg(long, default_value = "128k", value_parser = parse_bytes)]
    bs: u64,
    /// Commands outstanding per I/O queue.
    #[arg(long, default_value_t = 32)]
    qd: u16,
    /// I/O queues.
    #[arg(long, default_value_t = 2)]
    queues: u16,
    /// IP MTU of the in-process wire.
    #[arg(long, default_value_t = 9000)]
    mtu: usize,
    #[arg(long)]
    hdgst: bool,
    #[arg(long)]
    ddgst: bool,
    /// Chance a frame is lost (each direction), e.g. 0.01.
    #[arg(long, default_value_t = 0.0, value_parser = parse_chance)]
    loss: f64,
    /// Chance a frame is held back and overtaken.
    #[arg(long, default_value_t = 0.0, value_parser = parse_chance)]
    reorder: f64,
    /// Chance a frame arrives twice.
    #[arg(long, default_value_t = 0.0, value_parser = parse_chance)]
    duplicate: f64,
    /// Chance a bit of a frame flips (caught by TCP's checksum).
    #[arg(long, default_value_t = 0.0, value_parser = parse_chance)]
    corrupt: f64,
    /// One-way delay added to every frame, in microseconds.
    #[arg(long, default_value_t = 0)]
    delay_us: u64,
    /// Seed of the impairments and the data pattern.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Capture the host's frames into this pcap file.
    #[arg(long)]
    pcap: Option<PathBuf>,
    /// Run both sides in one thread in simulated time (deterministic).
    #[arg(long)]
    simulated: bool,
    /// Offloads of both software NICs: a list of ddp, crc-rx, crc-tx,
    /// oneshot, or all, or none.
    #[arg(long, default_value = "all", value_parser = Caps::parse)]
    offload: Caps,
    /// NVMe/TCP, or NVMe/RDMA over user-space iWARP (tcp, rdma). Over
    /// RDMA, --ddgst asks for MPA CRCs and oneshot registers and sends
    /// in one call.
    #[arg(long, default_value = "tcp", value_parser = Transport::parse)]
    transport: Transport,
    /// Map transfers from this size (default: the NIC's threshold, 32k).
    #[arg(long, value_parser = parse_threshold)]
    ddp_threshold: Option<u32>,
    /// Keep alive timeout in seconds (default 5, or 30 with impairments:
    /// smoltcp's 1 s minimum retransmission timeout doubles on repeats).
    #[arg(long)]
    kato: Option<u64>,
    /// Seconds a command may take (default 30, or 120 with impairments).
    #[arg(long)]
    io_timeout: Option<u64>,
    /// Print a machine-readable JSON report.
    #[arg(long)]
    json: bool,
}

fn parse_chance(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(p) if (0.0..=1.0).contains(&p) => Ok(p),
        _ => Err(format!("{s:?} is not a probability between 0 and 1")),
    }
}

/// A namespace: `ram:SIZE` or `file:PATH` (a regular file or block device).
#[derive(Debug, Clone)]
enum NsSpec {
    Ram(u64),
    File(PathBuf),
}

fn parse_ns(s: &str) -> Result<NsSpec, String> {
    match s.split_once(':') {
        Some(("ram", size)) => parse_size(size).map(NsSpec::Ram),
        Some(("file", path)) if !path.is_empty() => Ok(NsSpec::File(path.into())),
        _ => Err(format!("{s:?}: use ram:SIZE (e.g. ram:1G) or file:PATH")),
    }
}

fn parse_bytes(s: &str) -> Result<u64, String> {
    parse_size(s)
}

fn parse_block_size(s: &str) -> Result<u32, String> {
    match parse_size(s)? {
        512 => Ok(512),
        4096 => Ok(4096),
        n => Err(format!("block size {n} is not supported (use 512 or 4096)")),
    }
}

#[derive(Args, Debug)]
struct ControllerArgs {
    /// Address to listen on (repeatable, e.g. also :8009 for discovery).
    #[arg(long, default_value = "0.0.0.0:4420")]
    listen: Vec<SocketAddr>,
    /// Namespace: ram:SIZE or file:PATH (repeatable; default ram:1G).
    #[arg(long = "ns", value_parser = parse_ns)]
    namespaces: Vec<NsSpec>,
    /// Logical block size of every namespace.
    #[arg(long, default_value = "512", value_parser = parse_block_size)]
    block_size: u32,
    /// NVM subsystem NQN.
    #[arg(long, default_value = "nqn.2026-11.io.nvme-ddp:target")]
    nqn: String,
    /// Entries per queue (MAXCMD, CAP.MQES + 1).
    #[arg(long, default_value_t = 128)]
    queue_size: u16,
    /// Most data bytes per C2HData PDU.
    #[arg(long, default_value = "128k", value_parser = parse_bytes)]
    c2h_pdu: u64,
    /// Never replace the CapsuleResp of a read with the SUCCESS flag.
    #[arg(long)]
    no_c2h_success: bool,
    /// NVMe-oF transport to serve: tcp, or rdma (iWARP over TCP).
    #[arg(long, default_value = "tcp", value_parser = Transport::parse)]
    transport: Transport,
    /// Require data integrity from every host: MPA CRCs on rdma (the
    /// responder may insist). NVMe/TCP hosts choose their own digests.
    #[arg(long)]
    ddgst: bool,
    #[command(flatten)]
    tap: TapArgs,
}

#[derive(Args, Debug)]
struct HostArgs {
    /// Controller address.
    #[arg(long)]
    connect: SocketAddr,
    /// NVMe-oF transport: tcp, or rdma (iWARP over TCP).
    #[arg(long, default_value = "tcp", value_parser = Transport::parse)]
    transport: Transport,
    /// Subsystem NQN; without it, the first subsystem discovery lists.
    #[arg(long)]
    nqn: Option<String>,
    /// Host NQN.
    #[arg(
        long,
        default_value = "nqn.2014-08.org.nvmexpress:uuid:5f0d2c44-6a1e-4c8b-9d3e-000000000000"
    )]
    hostnqn: String,
    /// Ask for header digests.
    #[arg(long)]
    hdgst: bool,
    /// Ask for data digests.
    #[arg(long)]
    ddgst: bool,
    /// I/O queues (each its own TCP connection).
    #[arg(long, default_value_t = 1)]
    queues: u16,
    /// Commands outstanding per I/O queue.
    #[arg(long, default_value_t = 32)]
    qd: u16,
    /// Keep alive timeout in seconds (0 for none).
    #[arg(long, default_value_t = 5)]
    kato: u64,
    /// Print a machine-readable JSON report.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    tap: TapArgs,
    #[command(subcommand)]
    action: HostAction,
}

#[derive(Subcommand, Debug)]
enum HostAction {
    /// Print the controller's identity and namespaces.
    Identify,
    /// Print the discovery log.
    Discover,
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
    /// Total bytes to transfer (default: the whole namespace once).
    #[arg(long, value_parser = parse_bytes, conflicts_with = "time")]
    size: Option<u64>,
    /// Run for this many seconds instead.
    #[arg(long)]
    time: Option<f64>,
    /// Write a pattern and check it when reading back.
    #[arg(long)]
    verify: bool,
    /// Seed of the data pattern and of random offsets.
    #[arg(long, default_value_t = 1)]
    seed: u64,
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
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
        Command::Controller(a) => controller(a),
        Command::Host(a) => host(a),
        Command::Demo(a) => demo(a),
        Command::Net(a) => net(a),
        Command::Bench(a) => bench_cmd(a),
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn build_target(a: &ControllerArgs, port: Option<Port>) -> Result<Arc<Target>> {
    let specs =
        if a.namespaces.is_empty() { vec![NsSpec::Ram(1 << 30)] } else { a.namespaces.clone() };
    let mut namespaces: Vec<Arc<dyn Namespace>> = Vec::new();
    for spec in &specs {
        let ns: Arc<dyn Namespace> = match spec {
            NsSpec::Ram(size) => Arc::new(RamNamespace::new(*size, a.block_size)?),
            NsSpec::File(path) => Arc::new(FileNamespace::open(path, a.block_size)?),
        };
        namespaces.push(ns);
    }
    let cfg = TargetConfig {
        subnqn: a.nqn.clone(),
        queue_size: a.queue_size,
        c2h_data_len: u32::try_from(a.c2h_pdu).context("--c2h-pdu is too large")?,
        c2h_success: !a.no_c2h_success,
        port,
        ddp_threshold: a.tap.ddp_threshold,
        ..TargetConfig::default()
    };
    Ok(Target::new(cfg, namespaces)?)
}

fn controller(a: ControllerArgs) -> Result<()> {
    let first = a.listen.first().context("no --listen address")?;
    if a.ddgst && a.transport == Transport::Tcp {
        bail!("--ddgst on the controller needs --transport rdma: NVMe/TCP hosts choose digests");
    }
    if let Some(cidr) = a.tap.cidr()? {
        let port = Port {
            traddr: cidr.address().to_string(),
            trsvcid: first.port().to_string(),
            portid: 1,
        };
        let target = build_target(&a, Some(port))?;
        let (dev, nic) = a.tap.device(1)?.context("--tap is required with --ip")?;
        let listener = a.transport.listener(ip_mtu(&dev)).require_crc(a.ddgst);
        let clock = Clock::new();
        let stack = Stack::new(dev, fresh_stack_config(cidr), userspace::to_smol(clock.now()));
        let mut side =
            userspace::ControllerSide::new(stack, target.clone(), first.port(), Some(nic.clone()))?
                .with_listener(listener);
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        ctrlc::set_handler(move || flag.store(true, Ordering::Relaxed))
            .context("cannot install the Ctrl-C handler")?;
        tracing::info!(tap = ?a.tap.tap, ip = %cidr, port = first.port(), nqn = %target.subnqn(), transport = a.transport.name(), "listening on smoltcp");
        userspace::serve(&mut side, &clock, &stop);
        let (ulp, tx) = side.stats();
        for line in OffloadReport::new(nic.caps().1, nic.stats(), ulp, tx).lines("controller") {
            tracing::info!("{line}");
        }
        return Ok(());
    }
    let port =
        Port { traddr: first.ip().to_string(), trsvcid: first.port().to_string(), portid: 1 };
    let target = build_target(&a, Some(port))?;
    let listener = a.transport.listener(KERNEL_TCP_MTU).require_crc(a.ddgst);
    let server = ControllerServer::spawn(target.clone(), &a.listen, listener)?;
    let stop = server.stop_flag();
    ctrlc::set_handler(move || stop.store(true, Ordering::Relaxed))
        .context("cannot install the Ctrl-C handler")?;
    for (ns, i) in target.namespaces().iter().zip(1..) {
        tracing::info!(nsid = i, size = %format_size(ns.size()), block = ns.block_size(), "namespace");
    }
    for addr in server.local_addrs() {
        tracing::info!(%addr, nqn = %target.subnqn(), transport = a.transport.name(), "listening (discovery NQN too)");
    }
    let mut server = server;
    server.join()?;
    let s = target.stats();
    tracing::info!(reads = s.reads, writes = s.writes, read = %human_bytes(s.bytes_read as f64), written = %human_bytes(s.bytes_written as f64), "stopped");
    Ok(())
}

fn host_config(a: &HostArgs, subnqn: String) -> HostConfig {
    HostConfig {
        subnqn,
        hostnqn: a.hostnqn.clone(),
        digests: Digests { header: a.hdgst, data: a.ddgst },
        io_queues: a.queues.max(1),
        queue_depth: a.qd.max(1),
        kato: Duration::from_secs(a.kato),
        ddp_threshold: a.tap.ddp_threshold,
        ..HostConfig::default()
    }
}

/// Run `app` on a host; over smoltcp, also report what the NIC did.
fn run(
    a: &HostArgs,
    cfg: HostConfig,
    app: &mut dyn HostApp,
    limit: Duration,
) -> Result<Option<OffloadReport>> {
    let oneshot = a.tap.offload.unwrap_or(Caps::ALL).contains(Caps::NVME_TCP_ONESHOT);
    let offload = match (a.tap.cidr()?, a.tap.device(2)?) {
        (Some(cidr), Some((dev, nic))) => {
            let host = a.transport.host(cfg, oneshot, ip_mtu(&dev));
            let remote = match a.connect {
                SocketAddr::V4(v4) => v4,
                SocketAddr::V6(_) => bail!("smoltcp mode speaks IPv4 only"),
            };
            let clock = Clock::new();
            let stack = Stack::new(dev, fresh_stack_config(cidr), userspace::to_smol(clock.now()));
            let mut side = userspace::HostSide::new(stack, host, remote, Some(nic.clone()));
            userspace::run_host(&mut side, app, &clock, limit)?;
            let (ulp, tx) = side.host.stats();
            Some(OffloadReport::new(nic.caps().1, nic.stats(), ulp, tx))
        }
        _ => {
            let mut host = a.transport.host(cfg, oneshot, KERNEL_TCP_MTU);
            run_host(a.connect, &mut host, app, limit)?;
            None
        }
    };
    match app.error() {
        Some(e) => bail!("{e}"),
        None => Ok(offload),
    }
}

/// The subsystem to use: the one given, or the first one discovery lists.
fn resolve_nqn(a: &HostArgs) -> Result<String> {
    if let Some(nqn) = &a.nqn {
        return Ok(nqn.clone());
    }
    let mut app = DiscoverApp::default();
    run(a, host_config(a, DISCOVERY_NQN.into()), &mut app, Duration::from_secs(60))
        .context("discovery (give --nqn to skip it)")?;
    let entries = app.entries.unwrap_or_default();
    let e = entries
        .iter()
        .find(|e| e.subtype == SUBTYPE_NVME)
        .context("discovery lists no NVM subsystem")?;
    Ok(e.subnqn.clone())
}

fn host(a: HostArgs) -> Result<()> {
    match &a.action {
        HostAction::Discover => {
            let mut app = DiscoverApp::default();
            run(&a, host_config(&a, DISCOVERY_NQN.into()), &mut app, Duration::from_secs(60))?;
            let entries = app.entries.unwrap_or_default();
            if a.json {
                let v: Vec<_> = entries
                    .iter()
                    .map(|e| serde_json::json!({"trtype": e.trtype, "adrfam": e.adrfam, "subtype": e.subtype, "treq": e.treq, "portid": e.portid, "trsvcid": e.trsvcid, "subnqn": e.subnqn, "traddr": e.traddr}))
                    .collect();
                println!("{}", serde_json::to_string_pretty(&v)?);
            } else {
                println!("Discovery log: {} record(s)", entries.len());
                for (i, e) in entries.iter().enumerate() {
                    let kind =
                        if e.subtype == SUBTYPE_NVME { "nvme subsystem" } else { "discovery" };
                    let trtype = match e.trtype {
                        TRTYPE_TCP => "tcp".to_string(),
                        TRTYPE_RDMA => "rdma".to_string(),
                        t => format!("trtype {t}"),
                    };
                    println!(
                        "  {i}: {kind} {} at {trtype} {}:{} (port {}, treq {:#x})",
                        e.subnqn, e.traddr, e.trsvcid, e.portid, e.treq
                    );
                }
            }
        }
        HostAction::Identify => {
            let nqn = resolve_nqn(&a)?;
            let mut app = IdentifyApp::default();
            run(&a, host_config(&a, nqn), &mut app, Duration::from_secs(60))?;
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
        HostAction::Io(io) => {
            let nqn = resolve_nqn(&a)?;
            let bs = u32::try_from(io.bs).context("--bs is too large")?;
            let limit = match (io.size, io.time) {
                (_, Some(t)) if t > 0.0 => Limit::Time(Duration::from_secs_f64(t)),
                (_, Some(_)) => bail!("--time must be positive"),
                (Some(n), None) => Limit::Bytes(n),
                // The whole namespace once; resolved after bring-up.
                (None, None) => Limit::Bytes(u64::MAX),
            };
            let spec = WorkloadSpec {
                rw: io.rw,
                bs,
                limit,
                qd: usize::from(a.qd),
                verify: io.verify,
                seed: io.seed,
            };
            let mut phases = vec![spec];
            if matches!(limit, Limit::Bytes(u64::MAX)) {
                // Size the run to the namespace with a quick identify first.
                let mut id = IdentifyApp::default();
                run(&a, host_config(&a, nqn.clone()), &mut id, Duration::from_secs(60))?;
                let ns = id.namespaces.first().context("the subsystem has no namespace")?;
                phases[0].limit = Limit::Bytes(ns.blocks * u64::from(ns.block_size));
            }
            let mut app = IoApp::new(phases);
            let result =
                run(&a, host_config(&a, nqn), &mut app, Duration::from_secs(30 * 24 * 3600));
            let offload = result.as_ref().ok().cloned().flatten();
            let reports: Vec<PhaseReport> = app
                .results
                .iter()
                .map(|(spec, stats)| {
                    PhaseReport::new(spec, stats.clone(), app.io_queues, app.queue_depth)
                })
                .collect();
            if a.json {
                let j = serde_json::json!({ "phases": reports, "offload": offload });
                println!("{}", serde_json::to_string_pretty(&j)?);
            } else {
                for r in &reports {
                    println!("{}", r.line());
                }
                for line in offload.iter().flat_map(|o| o.lines("host")) {
                    println!("  {line}");
                }
            }
            result?;
        }
    }
    Ok(())
}

fn demo(a: DemoArgs) -> Result<()> {
    let o = demo::DemoOptions {
        size: a.size,
        bs: u32::try_from(a.bs).context("--bs is too large")?,
        qd: a.qd.max(1),
        queues: a.queues.max(1),
        mtu: a.mtu,
        digests: Digests { header: a.hdgst, data: a.ddgst },
        impair: Profile {
            loss: a.loss,
            reorder: a.reorder,
            duplicate: a.duplicate,
            corrupt: a.corrupt,
            delay: smoltcp::time::Duration::from_micros(a.delay_us),
            jitter: smoltcp::time::Duration::ZERO,
        },
        seed: a.seed,
        pcap: a.pcap,
        simulated: a.simulated,
        offload: a.offload,
        ddp_threshold: a.ddp_threshold,
        kato: Duration::ZERO,
        io_timeout: Duration::ZERO,
        transport: a.transport,
    };
    let impaired = !o.impair.is_clean();
    let o = demo::DemoOptions {
        kato: Duration::from_secs(a.kato.unwrap_or(if impaired { 30 } else { 5 })),
        io_timeout: Duration::from_secs(a.io_timeout.unwrap_or(if impaired { 120 } else { 30 })),
        ..o
    };
    if !(576..=65521).contains(&o.mtu) {
        bail!("--mtu {} is out of range (576..=65521)", o.mtu);
    }
    if o.bs == 0 || !o.bs.is_multiple_of(512) || u64::from(o.bs) > o.size {
        bail!("--bs must be a multiple of 512 and at most --size");
    }
    let report = demo::run(&o)?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        let mode = if report.simulated { "simulated time" } else { "real time" };
        let integrity = match report.transport {
            Transport::Tcp => {
                format!("digests: header {}, data {}", on_off(report.hdgst), on_off(report.ddgst))
            }
            Transport::Rdma => format!("MPA CRC {}", on_off(report.ddgst)),
        };
        println!(
            "nvme-ddp demo: {} RAM namespace, host and controller over an in-process wire ({}, MTU {}, {mode}, {integrity})",
            human_bytes(report.size as f64),
            match report.transport {
                Transport::Tcp => "NVMe/TCP",
                Transport::Rdma => "NVMe/RDMA over iWARP",
            },
            report.mtu,
        );
        for p in &report.phases {
            println!("  {}", p.line());
        }
        let w = &report.wire;
        println!(
            "  wire: host->controller {} frames / {}, controller->host {} frames / {}",
            w.h2c_frames,
            human_bytes(w.h2c_bytes as f64),
            w.c2h_frames,
            human_bytes(w.c2h_bytes as f64)
        );
        for line in report
            .offload
            .lines("  host      ")
            .into_iter()
            .chain(report.controller_offload.lines("  controller"))
        {
            println!("{line}");
        }
        for (dir, s) in
            [("host->controller", &report.impaired_h2c), ("controller->host", &report.impaired_c2h)]
        {
            if s.dropped + s.corrupted + s.duplicated + s.reordered > 0 {
                println!(
                    "  impaired {dir}: {} lost, {} corrupted, {} duplicated, {} reordered of {} frames",
                    s.dropped, s.corrupted, s.duplicated, s.reordered, s.frames
                );
            }
        }
    }
    if let Some(e) = report.error {
        bail!("{e}");
    }
    Ok(())
}

/// A stack config whose seed differs from run to run, so a restarted
/// process picks new ephemeral ports and initial sequence numbers and does
/// not collide with connections its predecessor left behind.
fn fresh_stack_config(cidr: smoltcp::wire::Ipv4Cidr) -> StackConfig {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    StackConfig { seed: t ^ (u64::from(std::process::id()) << 32), ..StackConfig::new(cidr) }
}

/// The IP MTU a medium carries, which sizes iWARP FPDUs.
fn ip_mtu(dev: &impl smoltcp::phy::Device) -> usize {
    let ethernet = smoltcp::wire::EthernetFrame::<&[u8]>::header_len();
    dev.capabilities().max_transmission_unit - ethernet
}

/// The MTU iWARP FPDUs are cut for over kernel TCP: Ethernet's, so that
/// each fills one segment on the usual path (the stream takes any size).
const KERNEL_TCP_MTU: usize = 1500;

fn on_off(b: bool) -> &'static str {
    if b { "on" } else { "off" }
}

fn sh(args: &[&str]) -> Result<()> {
    let status = std::process::Command::new(args[0])
        .args(&args[1..])
        .status()
        .with_context(|| format!("cannot run {}", args[0]))?;
    if !status.success() {
        bail!("`{}` failed ({status})", args.join(" "));
    }
    Ok(())
}

fn net(a: NetArgs) -> Result<()> {
    let ns = a.netns.as_str();
    match a.action {
        NetAction::Up { mtu } => {
            let mtu = mtu.to_string();
            sh(&["ip", "netns", "add", ns]).context("creating the namespace needs root")?;
            let setup = || -> Result<()> {
                sh(&["ip", "-n", ns, "link", "set", "lo", "up"])?;
                sh(&["ip", "-n", ns, "link", "add", "br0", "type", "bridge"])?;
                sh(&["ip", "-n", ns, "addr", "add", "198.18.0.1/24", "dev", "br0"])?;
                for tap in ["tap0", "tap1"] {
                    sh(&["ip", "-n", ns, "tuntap", "add", "dev", tap, "mode", "tap"])?;
                    sh(&["ip", "-n", ns, "link", "set", tap, "mtu", &mtu, "master", "br0", "up"])?;
                }
                sh(&["ip", "-n", ns, "link", "set", "br0", "mtu", &mtu, "up"])
            };
            if let Err(e) = setup() {
                let _ = sh(&["ip", "netns", "del", ns]);
                return Err(e);
            }
            let exe =
                std::env::current_exe().map_or("nvme-ddp".into(), |p| p.display().to_string());
            println!("namespace {ns}: bridge br0 198.18.0.1/24, TAPs tap0 and tap1 (MTU {mtu})");
            println!(
                "controller: ip netns exec {ns} {exe} controller --tap tap0 --ip 198.18.0.2/24 --ns ram:1G"
            );
            println!(
                "host:       ip netns exec {ns} {exe} host --tap tap1 --ip 198.18.0.3/24 --connect 198.18.0.2:4420 io --rw read --bs 128k"
            );
            println!("remove:     {exe} net down --netns {ns}");
        }
        NetAction::Down => {
            sh(&["ip", "netns", "del", ns]).with_context(|| format!("removing namespace {ns}"))?;
            println!("namespace {ns} removed");
        }
    }
    Ok(())
}

fn bench_cmd(a: BenchArgs) -> Result<()> {
    let d = bench::BenchOptions::default();
    let tap = match &a.tap {
        Some(t) => {
            let (h, c) = t.split_once(',').context("--tap takes HOSTTAP,CTRLTAP")?;
            for name in [h, c] {
                // Opening a TAP that does not exist would create a new, unwired one.
                if !std::path::Path::new("/sys/class/net").join(name).exists() {
                    bail!(
                        "no network interface {name:?} here (`nvme-ddp net up` makes tap0 and tap1; run inside its namespace)"
                    );
                }
            }
            Some((h.to_string(), c.to_string()))
        }
        None => None,
    };
    if !(a.time > 0.0 && a.warmup >= 0.0) {
        bail!("--time must be positive and --warmup not negative");
    }
    let o = bench::BenchOptions {
        bs: a.bs.map_or(d.bs, |l| l.0),
        rw: a.rw.map_or(d.rw, |l| l.0),
        qd: a.qd.map_or(d.qd, |l| l.0),
        ddgst: a.ddgst.map_or(d.ddgst, |l| l.0),
        offload: a.offload.map_or(d.offload, |l| l.0),
        transport: a.transport.map_or(d.transport, |l| l.0),
        // Over TAP the interfaces decide the MTU.
        mtu: match &tap {
            Some((h, _)) => {
                let dev = Tap::open(h, None).with_context(|| format!("opening TAP {h}"))?;
                vec![smoltcp::phy::Device::capabilities(&dev).max_transmission_unit - 14]
            }
            None => a.mtu.map_or(d.mtu, |l| l.0),
        },
        queues: a.queues.max(1),
        reps: a.reps.max(1),
        warmup: Duration::from_secs_f64(a.warmup),
        duration: Duration::from_secs_f64(a.time),
        threads: a.threads,
        tap,
    };
    if o.bs.iter().any(|&b| b == 0 || b % 512 != 0) || o.qd.contains(&0) {
        bail!("block sizes must be multiples of 512 and queue depths positive");
    }
    if o.tap.is_none() && o.mtu.iter().any(|&m| !(576..=65521).contains(&m)) {
        bail!("MTUs must be within 576..=65521");
    }
    let points = bench::points(&o);
    let bar = indicatif::ProgressBar::new((points.len() * o.reps) as u64);
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "{bar:40} {pos}/{len} runs, {elapsed} elapsed, ~{eta} left  {msg}",
        )
        .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    let mut raw = std::collections::HashMap::new();
    let mut out = Vec::new();
    for p in &points {
        if let std::collections::hash_map::Entry::Vacant(e) = raw.entry(p.mtu) {
            bar.set_message(format!("raw TCP at mtu {}", p.mtu));
            let bps = if a.no_raw {
                (0.0, 0.0)
            } else {
                bench::raw_tcp(&o, p.mtu).map_err(anyhow::Error::msg)?
            };
            e.insert(bps);
        }
        bar.set_message(format!(
            "{} {} bs={} qd={} mtu={} ddgst={} offload={}",
            p.transport.name(),
            p.rw.name(),
            format_size(u64::from(p.bs)),
            p.qd,
            p.mtu,
            on_off(p.ddgst),
            p.offload.name()
        ));
        out.push(bench::run_point(p, &o, raw[&p.mtu], || bar.inc(1)).map_err(anyhow::Error::msg)?);
    }
    bar.finish_and_clear();
    println!(
        "{:<4} {:<5} {:>5} {:>3} {:>5} {:>5} {:>7} | {:>9} {:>6} {:>9} {:>7} {:>8} | {:>9} {:>6} {:>8} | {:>8} {:>8} {:>8} {:>8} {:>5} | {:>9}",
        "tr",
        "rw",
        "bs",
        "qd",
        "mtu",
        "ddgst",
        "offload",
        "MB/s",
        "+-%",
        "IOPS",
        "p50 us",
        "p99 us",
        "host ns/IO",
        "+-%",
        "NIC ns/IO",
        "copy/IO",
        "crc/IO",
        "placed/IO",
        "nicCRC/IO",
        "calls",
        "raw MB/s"
    );
    for p in &out {
        println!(
            "{:<4} {:<5} {:>5} {:>3} {:>5} {:>5} {:>7} | {:>9.1} {:>6.1} {:>9.0} {:>7.0} {:>8.0} | {:>9.0} {:>6.1} {:>8.0} | {:>8.0} {:>8.0} {:>8.0} {:>8.0} {:>5.1} | {:>9.1}{}",
            p.transport,
            p.rw,
            format_size(u64::from(p.bs)),
            p.qd,
            p.mtu,
            on_off(p.ddgst),
            p.offload,
            p.bytes_per_sec / 1e6,
            p.bytes_per_sec_spread * 100.0,
            p.iops,
            p.lat_p50_us,
            p.lat_p99_us,
            p.host_cpu_ns_per_io,
            p.host_cpu_spread * 100.0,
            p.nic_cpu_ns_per_io,
            p.host_copy_bytes_per_io,
            p.host_crc_bytes_per_io,
            p.nic_placed_bytes_per_io,
            p.nic_crc_bytes_per_io,
            p.control_calls_per_io,
            p.raw_tcp_bytes_per_sec / 1e6,
            if p.steady { "" } else { "  noisy" },
        );
    }
    if out.iter().any(|p| !p.steady) {
        println!(
            "noisy: a spread (max - min over median of {} runs) above {:.0}%; no verdict rests on it",
            o.reps,
            bench::SPREAD_LIMIT * 100.0
        );
    }
    let report = bench::Report::new(&o, out);
    println!(
        "this machine: a fixed copy-and-CRC loop spreads {:.0}% over 7 runs by itself",
        report.machine.baseline_spread * 100.0
    );
    if !report.targets.is_empty() {
        println!();
        for t in &report.targets {
            let verdict = match t.verdict {
                bench::Verdict::Met => "met",
                bench::Verdict::Missed => "MISSED",
                bench::Verdict::Inconclusive => "inconclusive",
            };
            println!(
                "target {}: {} (measured {:.2}x, spread {:.0}%) {verdict}",
                t.what,
                t.limit,
                t.measured,
                t.spread * 100.0
            );
        }
    }
    if let Some(path) = &a.json {
        std::fs::write(path, serde_json::to_string_pretty(&report)?)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    let out = report.points;
    if let Some(dir) = &a.plot {
        let files = plot::charts(&out, dir).map_err(anyhow::Error::msg)?;
        if !files.iter().any(|f| f.extension().is_some_and(|e| e == "png")) {
            eprintln!(
                "note: no TrueType font found (install fonts-dejavu-core); PNG charts skipped, SVG written"
            );
        }
        for f in files {
            println!("chart: {}", f.display());
        }
    }
    Ok(())
}
