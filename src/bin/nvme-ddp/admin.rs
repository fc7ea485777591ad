//! `nvme-ddp host list | id-ctrl | id-ns | get-log | discover`: nvme-cli's
//! admin verbs, printed as nvme-cli prints them (`name : value`), or as
//! JSON with nvme-cli's field names.
//!
//! It asks and prints; it must never hold connection options of its own
//! (they are `session`'s, shared with the other verbs).

use anyhow::{Context, Result, bail};
use clap::Args;
use nvme_ddp::app::{AdminApp, DiscoverApp};
use nvme_ddp::report::human_bytes;
use nvme_of::host::Host;
use nvme_of::nvme::identify::{self, IDENTIFY_LEN, IdentifyController, IdentifyNamespace, cns};
use nvme_of::nvme::log::{
    self, ADRFAM_IPV4, ADRFAM_IPV6, DiscoveryEntry, ErrorLogEntry, GetLogPage, SUBTYPE_NVME,
    SmartLog, TRTYPE_RDMA, TRTYPE_TCP, lid,
};
use nvme_of::nvme::{DISCOVERY_NQN, Sqe, Status};
use serde_json::{Map, Value, json};
use std::sync::atomic::Ordering;
use std::time::Duration;

use crate::args::{parse_bytes, parse_nsid};
use crate::progress::interrupt_flag;
use crate::session::{ConnectArgs, host_config, run_app};

/// How long an admin run may take.
const LIMIT: Duration = Duration::from_secs(60);

#[derive(Args, Debug)]
pub(crate) struct IdNsArgs {
    /// Namespace to identify (default: the first).
    #[arg(short = 'n', long = "namespace-id", visible_alias = "nsid", value_parser = parse_nsid)]
    nsid: Option<u32>,
}

#[derive(Args, Debug)]
pub(crate) struct GetLogArgs {
    /// The page: error, smart, discovery, or a log identifier (2, 0x05, ...).
    #[arg(value_parser = LogPage::parse)]
    page: LogPage,
    /// Bytes to read of a page given by identifier.
    #[arg(long, default_value = "4k", value_parser = parse_bytes)]
    log_len: u64,
}

#[derive(Debug, Clone, Copy)]
enum LogPage {
    Error,
    Smart,
    Discovery,
    Id(u8),
}

impl LogPage {
    fn parse(s: &str) -> Result<Self, String> {
        let id = match s {
            "error" => return Ok(Self::Error),
            "smart" => return Ok(Self::Smart),
            "discovery" => return Ok(Self::Discovery),
            _ => match s.strip_prefix("0x") {
                Some(hex) => u8::from_str_radix(hex, 16),
                None => s.parse(),
            },
        };
        id.map(Self::Id).map_err(|_| {
            format!("unknown log page {s:?}: use error, smart, discovery or an identifier 0..=255")
        })
    }
}

/// A field as nvme-cli prints it: a number (in hex for bit fields) or text.
enum F {
    Dec(u64),
    Hex(u64),
    Text(String),
}

fn to_json(fields: &[(&str, F)]) -> Value {
    let map: Map<String, Value> = fields
        .iter()
        .map(|(k, v)| {
            let v = match v {
                F::Dec(n) | F::Hex(n) => json!(n),
                F::Text(s) => json!(s),
            };
            (k.to_string(), v)
        })
        .collect();
    Value::Object(map)
}

/// Print `name : value` lines, or one JSON object.
fn print_fields(fields: &[(&str, F)], json: bool) -> Result<()> {
    if json {
        println!("{}", serde_json::to_string_pretty(&to_json(fields))?);
        return Ok(());
    }
    let width = fields.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
    for (k, v) in fields {
        match v {
            F::Dec(n) => println!("{k:<width$} : {n}"),
            F::Hex(n) => println!("{k:<width$} : {n:#x}"),
            F::Text(s) => println!("{k:<width$} : {s}"),
        }
    }
    Ok(())
}

/// Bring an association up with subsystem `nqn`, run the commands `plan`
/// picks, and return what it learned; a failed command is an error
/// naming `what`.
pub(crate) fn admin(
    a: &ConnectArgs,
    nqn: String,
    plan: impl FnOnce(&Host) -> Vec<(Sqe, usize)> + Send + 'static,
    what: &str,
) -> Result<AdminApp> {
    let mut app = AdminApp::new(plan);
    run_app(a, host_config(a, nqn), &mut app, LIMIT)?;
    if interrupt_flag()?.load(Ordering::Relaxed) {
        bail!("interrupted before {what} finished");
    }
    if let Some((status, _)) = app.replies.iter().find(|(s, _)| !s.is_success()) {
        bail!("{what} failed: {status}");
    }
    Ok(app)
}

/// `list`: every namespace of the subsystem (`--nqn`), or of every NVM
/// subsystem discovery lists, as `nvme list`.
pub(crate) fn list(a: &ConnectArgs) -> Result<()> {
    let nqns = match &a.nqn {
        Some(nqn) => vec![nqn.clone()],
        None => discover(a)?
            .into_iter()
            .filter(|e| e.subtype == SUBTYPE_NVME)
            .map(|e| e.subnqn)
            .collect(),
    };
    if nqns.is_empty() {
        bail!("{NONE_DISCOVERED}");
    }
    let mut rows = Vec::new();
    for nqn in nqns {
        let app = admin(a, nqn.clone(), |_| Vec::new(), "Identify")?;
        let c = app.controller.context("no Identify Controller data")?;
        for n in &app.namespaces {
            // Where nvme-cli names the block device, the namespace's URI
            // as the NVMe Boot specification writes it.
            let node = format!("nvme+{}://{}/{nqn}/{}", a.transport_name(), a.connect()?, n.nsid);
            rows.push((node, c.clone(), *n));
        }
    }
    if a.json {
        let devices: Vec<Value> = rows
            .iter()
            .map(|(nqn, c, n)| {
                let bs = u64::from(n.block_size);
                json!({
                    "DevicePath": nqn, "NameSpace": n.nsid, "Firmware": c.fr,
                    "ModelNumber": c.mn, "SerialNumber": c.sn, "UsedBytes": n.used * bs,
                    "MaximumLBA": n.blocks, "PhysicalSize": n.blocks * bs, "SectorSize": bs,
                })
            })
            .collect();
        println!("{}", serde_json::to_string_pretty(&json!({ "Devices": devices }))?);
        return Ok(());
    }
    let nqn_width = rows.iter().map(|(q, ..)| q.len()).max().unwrap_or(0).max(4);
    println!(
        "{:<nqn_width$} {:<7} {:<20} {:<24} {:<9} {:<25} {:<12} {:<8}",
        "Node", "Generic", "SN", "Model", "Namespace", "Usage", "Format", "FW Rev"
    );
    println!(
        "{:-<nqn_width$} {:-<7} {:-<20} {:-<24} {:-<9} {:-<25} {:-<12} {:-<8}",
        "", "", "", "", "", "", "", ""
    );
    for (nqn, c, n) in &rows {
        let bs = u64::from(n.block_size);
        let usage = format!(
            "{} / {}",
            human_bytes((n.used * bs) as f64),
            human_bytes((n.blocks * bs) as f64)
        );
        println!(
            "{nqn:<nqn_width$} {:<7} {:<20} {:<24} {:<9} {usage:<25} {:<12} {:<8}",
            "-",
            c.sn,
            c.mn,
            n.nsid,
            format!("{bs} B + 0 B"),
            c.fr
        );
    }
    Ok(())
}

/// `id-ctrl`: the Identify Controller data, as `nvme id-ctrl`.
pub(crate) fn id_ctrl(a: &ConnectArgs) -> Result<()> {
    let app = admin(a, resolve_nqn(a)?, |_| Vec::new(), "Identify Controller")?;
    let c: IdentifyController = app.controller.context("no Identify Controller data")?;
    let n = |v: u64| F::Dec(v);
    let h = |v: u64| F::Hex(v);
    print_fields(
        &[
            ("vid", h(c.vid.into())),
            ("ssvid", h(c.ssvid.into())),
            ("sn", F::Text(c.sn)),
            ("mn", F::Text(c.mn)),
            ("fr", F::Text(c.fr)),
            ("rab", n(c.rab.into())),
            ("cmic", h(c.cmic.into())),
            ("mdts", n(c.mdts.into())),
            ("cntlid", h(c.cntlid.into())),
            ("ver", h(c.ver.into())),
            ("oaes", h(c.oaes.into())),
            ("ctratt", h(c.ctratt.into())),
            ("cntrltype", n(c.cntrltype.into())),
            ("oacs", h(c.oacs.into())),
            ("acl", n(c.acl.into())),
            ("aerl", n(c.aerl.into())),
            ("frmw", h(c.frmw.into())),
            ("lpa", h(c.lpa.into())),
            ("elpe", n(c.elpe.into())),
            ("kas", n(c.kas.into())),
            ("sqes", h(c.sqes.into())),
            ("cqes", h(c.cqes.into())),
            ("maxcmd", n(c.maxcmd.into())),
            ("nn", n(c.nn.into())),
            ("oncs", h(c.oncs.into())),
            ("vwc", h(c.vwc.into())),
            ("sgls", h(c.sgls.into())),
            ("subnqn", F::Text(c.subnqn)),
            ("ioccsz", n(c.ioccsz.into())),
            ("iorcsz", n(c.iorcsz.into())),
            ("icdoff", n(c.icdoff.into())),
            ("fcatt", h(c.fcatt.into())),
            ("msdbd", n(c.msdbd.into())),
        ],
        a.json,
    )
}

/// `id-ns`: a namespace's Identify Namespace data, as `nvme id-ns`.
pub(crate) fn id_ns(a: &ConnectArgs, args: &IdNsArgs) -> Result<()> {
    let want = args.nsid;
    let plan = move |host: &Host| {
        let nsid = want.or_else(|| host.namespaces().first().map(|n| n.nsid)).unwrap_or(0);
        vec![(identify::command(cns::NAMESPACE, nsid), IDENTIFY_LEN)]
    };
    let what = want.map_or("Identify Namespace".into(), |n| format!("Identify Namespace {n}"));
    let app = admin(a, resolve_nqn(a)?, plan, &what)?;
    let nsid = match want {
        Some(nsid) => nsid,
        None => app.namespaces.first().context("the subsystem has no namespace")?.nsid,
    };
    let ns = app.replies.first().and_then(|(_, b)| IdentifyNamespace::parse(b));
    let ns = ns.context("short Identify Namespace data")?;
    let hex = |b: &[u8]| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
    let lbaf = format!(
        "ms:0 lbads:{} rp:0{}",
        ns.lbads,
        if ns.flbas & 0xf == 0 { " (in use)" } else { "" }
    );
    let n = |v: u64| F::Dec(v);
    let h = |v: u64| F::Hex(v);
    print_fields(
        &[
            ("nsid", n(nsid.into())),
            ("nsze", h(ns.nsze)),
            ("ncap", h(ns.ncap)),
            ("nuse", h(ns.nuse)),
            ("nsfeat", h(ns.nsfeat.into())),
            ("nlbaf", n(ns.nlbaf.into())),
            ("flbas", h(ns.flbas.into())),
            ("nmic", h(ns.nmic.into())),
            ("dlfeat", n(ns.dlfeat.into())),
            ("nguid", F::Text(hex(&ns.nguid))),
            ("eui64", F::Text(hex(&ns.eui64))),
            ("lbaf 0", F::Text(lbaf)),
        ],
        a.json,
    )
}

/// Discovery lists only the subsystems the asking host may reach.
const NONE_DISCOVERED: &str = "discovery lists no NVM subsystem this host may reach (check --hostnqn against the controller's allowed hosts, or give --nqn)";

/// The subsystem to use: the one given, or the first one discovery lists.
pub(crate) fn resolve_nqn(a: &ConnectArgs) -> Result<String> {
    if let Some(nqn) = &a.nqn {
        return Ok(nqn.clone());
    }
    let entries = discover(a)?;
    let e = entries.iter().find(|e| e.subtype == SUBTYPE_NVME);
    Ok(e.context(NONE_DISCOVERED)?.subnqn.clone())
}

/// The discovery log of the discovery controller at `--connect`.
fn discover(a: &ConnectArgs) -> Result<Vec<DiscoveryEntry>> {
    discovery_log(a).map(|(_, entries)| entries)
}

/// The discovery log: its generation counter and its entries.
fn discovery_log(a: &ConnectArgs) -> Result<(u64, Vec<DiscoveryEntry>)> {
    let mut app = DiscoverApp::default();
    run_app(a, host_config(a, DISCOVERY_NQN.into()), &mut app, LIMIT)?;
    if interrupt_flag()?.load(Ordering::Relaxed) {
        bail!("interrupted before the discovery log was read");
    }
    Ok((app.genctr, app.entries.unwrap_or_default()))
}

/// `discover` and `get-log discovery`: the discovery log, as `nvme discover`.
pub(crate) fn print_discovery(a: &ConnectArgs) -> Result<()> {
    let (genctr, entries) = discovery_log(a)?;
    if a.json {
        let records: Vec<Value> = entries
            .iter()
            .map(|e| {
                let mut record = json!({
                    "trtype": trtype(e.trtype), "adrfam": adrfam(e.adrfam),
                    "subtype": subtype(e.subtype), "treq": treq(e.treq), "portid": e.portid,
                    "trsvcid": e.trsvcid, "subnqn": e.subnqn, "traddr": e.traddr,
                    "asqsz": e.asqsz,
                });
                for (k, v) in tsas(e) {
                    record[k] = json!(v);
                }
                record
            })
            .collect();
        let log = json!({ "genctr": genctr, "records": records });
        println!("{}", serde_json::to_string_pretty(&log)?);
        return Ok(());
    }
    println!("Discovery Log Number of Records {}, Generation counter {genctr}", entries.len());
    for (i, e) in entries.iter().enumerate() {
        println!("=====Discovery Log Entry {i}======");
        print_fields(
            &[
                ("trtype", F::Text(trtype(e.trtype))),
                ("adrfam", F::Text(adrfam(e.adrfam).into())),
                ("subtype", F::Text(subtype(e.subtype).into())),
                ("treq", F::Text(treq(e.treq).into())),
                ("portid", F::Dec(e.portid.into())),
                ("trsvcid", F::Text(e.trsvcid.clone())),
                ("subnqn", F::Text(e.subnqn.clone())),
                ("traddr", F::Text(e.traddr.clone())),
                ("asqsz", F::Dec(e.asqsz.into())),
            ]
            .into_iter()
            .chain(tsas(e).into_iter().map(|(k, v)| (k, F::Text(v.into()))))
            .collect::<Vec<_>>(),
            false,
        )?;
    }
    Ok(())
}

fn trtype(t: u8) -> String {
    match t {
        TRTYPE_TCP => "tcp".into(),
        TRTYPE_RDMA => "rdma".into(),
        t => format!("{t}"),
    }
}

fn adrfam(a: u8) -> &'static str {
    match a {
        ADRFAM_IPV4 => "ipv4",
        ADRFAM_IPV6 => "ipv6",
        _ => "unrecognized",
    }
}

fn subtype(s: u8) -> &'static str {
    match s {
        SUBTYPE_NVME => "nvme subsystem",
        log::SUBTYPE_DISCOVERY_REFERRAL | log::SUBTYPE_CURRENT_DISCOVERY => "discovery subsystem",
        _ => "unrecognized",
    }
}

/// The transport specific address subtype, by nvme-cli's names: on TCP
/// the security type (whether the port takes TLS), on RDMA the queue pair,
/// provider and connection management types.
fn tsas(e: &DiscoveryEntry) -> Vec<(&'static str, &'static str)> {
    match e.trtype {
        TRTYPE_TCP => vec![(
            "sectype",
            match e.tsas[0] {
                0 => "none",
                1 => "tls",
                log::SECTYPE_TLS13 => "tls13",
                _ => "unrecognized",
            },
        )],
        TRTYPE_RDMA => vec![
            (
                "rdma_prtype",
                match e.tsas[1] {
                    1 => "not specified",
                    2 => "infiniband",
                    3 => "roce",
                    4 => "roce-v2",
                    5 => "iwarp",
                    _ => "unrecognized",
                },
            ),
            (
                "rdma_qptype",
                match e.tsas[0] {
                    1 => "connected",
                    2 => "datagram",
                    _ => "unrecognized",
                },
            ),
            ("rdma_cms", if e.tsas[2] == 1 { "rdma-cm" } else { "unrecognized" }),
        ],
        _ => Vec::new(),
    }
}

fn treq(t: u8) -> &'static str {
    match (t & 0x3, t & log::TREQ_DISABLE_SQFLOW != 0) {
        (0, true) => "not specified, sq flow control disable supported",
        (0, false) => "not specified",
        (1, _) => "required",
        _ => "not required",
    }
}

/// `get-log`: a log page, as `nvme smart-log`, `error-log`, `discover` or
/// (by identifier) `get-log` print it.
pub(crate) fn get_log(a: &ConnectArgs, args: &GetLogArgs) -> Result<()> {
    let len = args.log_len;
    if len == 0 || !len.is_multiple_of(4) || len > 1 << 20 {
        bail!("--log-len must be a multiple of 4 up to 1M");
    }
    let (id, len) = match args.page {
        LogPage::Discovery => return print_discovery(a),
        LogPage::Smart => (lid::SMART, Some(SmartLog::LEN as u64)),
        // Every entry the controller keeps (ELPE + 1), as nvme-cli reads.
        LogPage::Error => (lid::ERROR_INFO, None),
        LogPage::Id(id) => (id, Some(len)),
    };
    let plan = move |host: &Host| {
        let elpe = host.controller().map_or(0, |c| c.elpe);
        let len = len.unwrap_or((u64::from(elpe) + 1) * ErrorLogEntry::LEN as u64);
        let sqe = GetLogPage { lid: id, lsp: 0, rae: false, len, lpo: 0 }.to_sqe();
        vec![(sqe, len as usize)]
    };
    let app = admin(a, resolve_nqn(a)?, plan, &format!("Get Log Page {id:#04x}"))?;
    let page = app.replies.first().map(|(_, b)| b.as_slice()).unwrap_or_default();
    match args.page {
        LogPage::Smart => print_smart(&SmartLog::parse(page).context("short SMART log")?, a.json),
        LogPage::Error => print_errors(page, a.json),
        _ => {
            print_hex(page);
            Ok(())
        }
    }
}

fn print_smart(s: &SmartLog, json: bool) -> Result<()> {
    // A data unit is a thousand 512-byte blocks.
    let units = |u: u64| match json {
        true => F::Dec(u),
        false => F::Text(format!("{u} ({})", human_bytes(u as f64 * 512_000.0))),
    };
    let celsius = i32::from(s.temperature) - 273;
    print_fields(
        &[
            ("critical_warning", F::Hex(s.critical_warning.into())),
            (
                "temperature",
                match json {
                    true => F::Dec(s.temperature.into()),
                    false => F::Text(format!("{celsius} °C ({} K)", s.temperature)),
                },
            ),
            ("available_spare", F::Dec(s.available_spare.into())),
            ("available_spare_threshold", F::Dec(s.spare_threshold.into())),
            ("percentage_used", F::Dec(s.percentage_used.into())),
            ("data_units_read", units(s.data_units_read)),
            ("data_units_written", units(s.data_units_written)),
            ("host_read_commands", F::Dec(s.host_reads)),
            ("host_write_commands", F::Dec(s.host_writes)),
            ("power_cycles", F::Dec(s.power_cycles)),
            ("media_errors", F::Dec(s.media_errors)),
            ("num_err_log_entries", F::Dec(s.error_log_entries)),
        ],
        json,
    )
}

fn print_errors(page: &[u8], json: bool) -> Result<()> {
    let entries: Vec<ErrorLogEntry> = page
        .chunks_exact(ErrorLogEntry::LEN)
        .filter_map(ErrorLogEntry::parse)
        .filter(|e| e.error_count != 0)
        .collect();
    let fields = |e: &ErrorLogEntry| {
        let status = Status::from_field(e.status);
        vec![
            ("error_count", F::Dec(e.error_count)),
            ("sqid", F::Dec(e.sqid.into())),
            ("cmdid", F::Hex(e.cid.into())),
            ("status_field", F::Hex((e.status >> 1).into())),
            ("status", F::Text(status.to_string())),
            ("parm_err_location", F::Hex(e.param_loc.into())),
            ("lba", F::Dec(e.lba)),
            ("nsid", F::Hex(e.nsid.into())),
            ("trtype", F::Text(trtype(e.trtype))),
        ]
    };
    if json {
        let v: Vec<Value> = entries.iter().map(|e| to_json(&fields(e))).collect();
        println!("{}", serde_json::to_string_pretty(&json!({ "errors": v }))?);
        return Ok(());
    }
    println!("Error Log Entries: {} logged", entries.len());
    for (i, e) in entries.iter().enumerate() {
        println!("=====Entry {i}======");
        print_fields(&fields(e), false)?;
    }
    Ok(())
}

/// Raw bytes as nvme-cli dumps them: offset, 16 bytes in hex, and ASCII.
fn print_hex(page: &[u8]) {
    for (i, row) in page.chunks(16).enumerate() {
        let hex: Vec<String> = row.iter().map(|b| format!("{b:02x}")).collect();
        let ascii: String =
            row.iter().map(|&b| if b.is_ascii_graphic() { b as char } else { '.' }).collect();
        println!("{:04x}: {:<47} \"{ascii}\"", i * 16, hex.join(" "));
    }
}
