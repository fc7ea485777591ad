//! `nvme-ddp demo`: host and controller in one process over the in-process
//! wire, with a report of what the offloads did.
//!
//! It parses and prints; the run itself is the library's and must never
//! be done here.

use anyhow::{Context, Result, anyhow, bail};
use clap::{ArgAction, Args};
use nvme_ddp::bench::meter;
use nvme_ddp::bench::options::{BenchOptions, Meter};
use nvme_ddp::demo as run_demo;
use nvme_ddp::driver::transport::TransportType;
use nvme_ddp::report::{granted_notes, human_bytes};
use nvme_ddp::size::format_size;
use nvme_of::Digests;
use smoltcp_glue::Profile;
use std::path::PathBuf;
use std::time::Duration;
use ulp_ddp::Caps;

use crate::args::{
    check_ram, on_off, parse_bytes, parse_chance, parse_jobs, parse_on_off, parse_qd, parse_queues,
    parse_threshold, parse_whole,
};
use crate::progress::{Eta, interrupt_flag, so_far, watch};

#[derive(Args, Debug)]
pub(crate) struct DemoArgs {
    /// Namespace size and bytes per pass.
    #[arg(long, default_value = "256M", value_parser = parse_bytes)]
    size: u64,
    /// Bytes per I/O.
    #[arg(long, default_value = "128k", value_parser = parse_bytes)]
    bs: u64,
    /// Commands outstanding per I/O queue, 1 to 1024.
    #[arg(long, default_value = "32", value_parser = parse_qd)]
    qd: u16,
    /// I/O queues, 1 to 128.
    #[arg(long, default_value = "2", value_parser = parse_queues)]
    queues: u16,
    /// Jobs at once (fio's numjobs), 1 to 256: each a host with its own
    /// wire against a controller stack of its own (threads of their own),
    /// the one namespace shared; each writes and reads back all of it.
    #[arg(long, default_value_t = 1, value_parser = parse_jobs)]
    jobs: u16,
    /// IP MTU of the in-process wire.
    #[arg(long, default_value_t = 9000, value_parser = parse_whole::<usize>)]
    mtu: usize,
    /// Header digests: on or off (a bare --hdgst is on).
    #[arg(long, default_value = "off", num_args = 0..=1, default_missing_value = "on", value_parser = parse_on_off, action = ArgAction::Set)]
    hdgst: bool,
    /// Data digests (over RDMA, MPA CRCs): on or off. On by default, so
    /// that CRC offload has work to take.
    #[arg(long, default_value = "on", num_args = 0..=1, default_missing_value = "on", value_parser = parse_on_off, action = ArgAction::Set)]
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
    #[arg(long, default_value_t = 0, value_parser = parse_whole::<u64>)]
    delay_us: u64,
    /// Seed of the impairments and the data pattern.
    #[arg(long, default_value_t = 1, value_parser = parse_whole::<u64>)]
    seed: u64,
    /// Capture the host's frames into this pcap file.
    #[arg(long)]
    pcap: Option<PathBuf>,
    /// Run both sides in one thread in simulated time (deterministic).
    #[arg(long)]
    simulated: bool,
    /// Offloads of both software NICs: none, all, classic, crc, ddp,
    /// crc-rx, crc-tx, oneshot, zc-tx, tls, tls-rx, tls-tx, or several
    /// joined by '+' (ddp+crc).
    #[arg(long, default_value = "all", value_parser = Caps::parse)]
    offload: Caps,
    /// NVMe/TCP, or NVMe/RDMA over user-space iWARP (tcp, rdma). Over
    /// RDMA, oneshot registers and sends in one call.
    #[arg(long, default_value = "tcp", value_parser = TransportType::parse)]
    transport: TransportType,
    /// NVMe/TCP over TLS 1.3 with a fresh PSK. With tls-rx/tls-tx among
    /// the offloads (all has them) the NICs take the records over after
    /// the handshake, and place and digest inside them.
    #[arg(long)]
    tls: bool,
    /// Map transfers from this size (default: the NIC's threshold, 32k).
    #[arg(long, value_parser = parse_threshold)]
    ddp_threshold: Option<u32>,
    /// Keep alive timeout in seconds (default 5, or 30 with impairments:
    /// smoltcp's 1 s minimum retransmission timeout doubles on repeats).
    #[arg(long, value_parser = parse_whole::<u64>)]
    kato: Option<u64>,
    /// Seconds a command may take (default 30, or 120 with impairments).
    #[arg(long, value_parser = parse_whole::<u64>)]
    io_timeout: Option<u64>,
    /// Then measure the same I/O with no offload and say what the
    /// offloads saved (host CPU, copies, CRC per I/O): on or off.
    #[arg(long, default_value = "on", value_parser = parse_on_off, action = ArgAction::Set)]
    baseline: bool,
    /// What the baseline's costs are counted in: cpu (CPU time) or
    /// instructions (counted by Valgrind, one job, repeating run after run;
    /// see `bench --meter`).
    #[arg(long, default_value = "cpu", value_parser = Meter::parse)]
    meter: Meter,
    /// Print a machine-readable JSON report.
    #[arg(long)]
    json: bool,
    /// Progress line: auto (on a terminal), always, never.
    #[arg(long, value_enum, default_value = "auto")]
    eta: Eta,
}

pub(crate) fn run(a: DemoArgs) -> Result<()> {
    let o = run_demo::DemoOptions {
        size: a.size,
        bs: u32::try_from(a.bs).context("--bs is too large")?,
        qd: a.qd,
        queues: a.queues,
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
        tls: a.tls,
        baseline: a.baseline,
        meter: a.meter,
        jobs: a.jobs,
    };
    let impaired = !o.impair.is_clean();
    let o = run_demo::DemoOptions {
        kato: Duration::from_secs(a.kato.unwrap_or(if impaired { 30 } else { 5 })),
        io_timeout: Duration::from_secs(a.io_timeout.unwrap_or(if impaired { 120 } else { 30 })),
        ..o
    };
    if !(576..=65521).contains(&o.mtu) {
        bail!("--mtu {} is out of range (576..=65521)", o.mtu);
    }
    // Before any work: the baseline would find it missing only at the end.
    if o.baseline && o.meter == Meter::Instructions {
        meter::check(&BenchOptions::default())?;
    }
    check_ram(o.size, 512).map_err(|e| anyhow!("--size {}: {e}", format_size(a.size)))?;
    if o.bs == 0 || !o.bs.is_multiple_of(512) || u64::from(o.bs) > o.size {
        bail!("--bs must be a multiple of 512 and at most --size");
    }
    let stop = interrupt_flag()?;
    let report = run_demo::run(&o, watch(a.eta), &stop).map_err(|e| match o.simulated {
        true => anyhow!("{e}, in simulated time"),
        false => e.into(),
    })?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        let mode = if report.simulated { "simulated time" } else { "real time" };
        let integrity = match report.transport {
            TransportType::Tcp => {
                let tls = match (report.tls, a.offload.intersects(Caps::TLS)) {
                    (false, _) => "",
                    (true, false) => "TLS 1.3 in software, ",
                    (true, true) => "TLS 1.3 records by the NICs, ",
                };
                format!(
                    "{tls}digests: header {}, data {}",
                    on_off(report.hdgst),
                    on_off(report.ddgst)
                )
            }
            TransportType::Rdma => format!("MPA CRC {}", on_off(report.ddgst)),
        };
        println!(
            "nvme-ddp demo: {} RAM namespace, host and controller over an in-process wire ({}, MTU {}, {mode}, {integrity})",
            human_bytes(report.size as f64),
            match report.transport {
                TransportType::Tcp => "NVMe/TCP",
                TransportType::Rdma => "NVMe/RDMA over iWARP",
            },
            report.mtu,
        );
        for note in granted_notes(a.qd, report.queue_depth, a.queues, report.io_queues) {
            println!("  {note}");
        }
        if report.jobs > 1 {
            println!("  {} jobs at once; together:", report.jobs);
        }
        for p in &report.phases {
            for line in p.lines() {
                println!("  {line}");
            }
        }
        for (job, phases) in report.per_job.iter().enumerate() {
            let each: Vec<String> = phases.iter().map(|p| p.summary()).collect();
            println!("  job {job}: {}", each.join(", "));
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
        match &report.savings {
            Some(s) => println!("  {}", s.line(impaired)),
            None if a.baseline && a.offload == Caps::NONE => {
                println!("  no savings measured: every offload is off (--offload none)")
            }
            None => {}
        }
        println!("  {}", report.recovery.line());
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
    if report.interrupted {
        bail!("interrupted; {}", so_far(report.abandoned));
    }
    Ok(())
}
