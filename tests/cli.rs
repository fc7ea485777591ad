//! The command line as a user runs it: the binary, its output and its exit
//! status. Bad input fails at once with one clear line; results read in
//! the units the user typed them in; Ctrl-C ends a run with what it did.

use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

fn nvme_ddp(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_nvme-ddp")).args(args).output().expect("the binary runs")
}

fn text(o: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// Fails with one error line that says `what`, and did no work.
#[track_caller]
fn refused(args: &[&str], what: &str) {
    let o = nvme_ddp(args);
    let (out, err) = text(&o);
    assert!(!o.status.success(), "{args:?} succeeded:\n{out}{err}");
    let first = err.lines().next().unwrap_or_default();
    assert!(first.starts_with("error: ") && first.contains(what), "{args:?}: {err}");
    assert!(out.is_empty(), "{args:?} printed results before failing:\n{out}");
}

/// Succeeds; stdout.
#[track_caller]
fn ok(args: &[&str]) -> String {
    let o = nvme_ddp(args);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{args:?}:\n{out}{err}");
    out
}

#[track_caller]
fn json(args: &[&str]) -> serde_json::Value {
    serde_json::from_str(&ok(args)).expect("JSON")
}

/// A loopback port nothing listens on.
fn closed_port() -> String {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().to_string()
}

/// A kernel-TCP controller with a 64 MiB RAM namespace; killed on drop.
struct Controller {
    child: Child,
    addr: String,
}

impl Controller {
    fn start(extra: &[&str]) -> Self {
        let addr = closed_port();
        let mut child = Command::new(env!("CARGO_BIN_EXE_nvme-ddp"))
            .args(["controller", "--listen", &addr, "--ns", "ram:64M"])
            .args(extra)
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // It says "listening" once its socket is bound.
        let mut log = BufReader::new(child.stderr.take().unwrap());
        let mut line = String::new();
        while log.read_line(&mut line).unwrap() > 0 && !line.contains("listening") {
            line.clear();
        }
        assert!(line.contains("listening"), "the controller did not start");
        std::thread::spawn(move || std::io::copy(&mut log, &mut std::io::sink()));
        Controller { child, addr }
    }
}

impl Drop for Controller {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn signal(child: &Child, sig: libc::c_int) {
    // SAFETY: kill has no memory preconditions; the pid is our child's.
    unsafe { libc::kill(child.id() as libc::pid_t, sig) };
}

/// Wait for `child` to exit, killing it after a minute (a hang is a failure).
fn wait_output(mut child: Child) -> Output {
    let start = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            panic!("the process did not end");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    child.wait_with_output().unwrap()
}

#[test]
fn host_options_go_before_or_after_the_verb() {
    let port = closed_port();
    for args in [
        ["host", "--connect", &port, "io", "--time", "1", "--json", "--queues", "2"],
        ["host", "io", "--time", "1", "--connect", &port, "--json", "--queues", "2"],
    ] {
        // Parsed in full: what fails is the connection, said once.
        let o = nvme_ddp(&args);
        let (_, err) = text(&o);
        assert!(!o.status.success());
        assert_eq!(err.matches("Connection refused").count(), 1, "{err}");
        assert!(err.starts_with(&format!("error: cannot connect to {port}")), "{err}");
        assert!(!err.contains("discovery"), "{err}");
    }
    refused(&["host", "identify"], "--connect ADDR:PORT");
}

#[test]
fn bad_numbers_and_names_fail_before_any_work() {
    let port = closed_port();
    let p = port.as_str();
    for qd in ["0", "5000"] {
        refused(
            &["host", "--connect", p, "--qd", qd, "identify"],
            "commands per queue must be 1..=1024",
        );
        refused(&["demo", "--qd", qd], "commands per queue must be 1..=1024");
        refused(&["bench", "--qd", &format!("1,{qd}")], "commands per queue must be 1..=1024");
    }
    for queues in ["0", "1000"] {
        refused(
            &["host", "--connect", p, "--queues", queues, "identify"],
            "I/O queues must be 1..=128",
        );
        refused(&["demo", "--queues", queues], "I/O queues must be 1..=128");
    }
    refused(&["bench", "--reps", "0"], "--reps");
    for loss in ["1.5", "x", "0,0.01,2"] {
        refused(&["bench", "--loss", loss], "is not a probability between 0 and 1");
    }
    refused(&["host", "--connect", p, "io", "--size", "0"], "--size 0 transfers nothing");
    refused(&["host", "--connect", p, "--nqn", "not an nqn", "identify"], "is not an NQN");
    refused(&["controller", "--nqn", "not an nqn"], "is not an NQN");
    refused(&["controller", "--io-depth", "0"], "0 is not in 1..=4096");
    refused(&["controller", "--max-connections", "0"], "0 is not in 1..=65536");
    refused(&["controller", "--connect-timeout", "0"], "more than 0 seconds");
    refused(&["controller", "--connect-timeout", "soon"], "a number of seconds");
    refused(
        &["controller", "--listen", "127.0.0.1:0", "--ns", "ram:100"],
        "smaller than one 512-byte block",
    );
    refused(
        &["controller", "--listen", "127.0.0.1:0", "--ns", "ram:65536T"],
        "more than this machine's memory",
    );
    refused(
        &[
            "host",
            "--connect",
            p,
            "--tap",
            "nvmeddp-no-such-tap",
            "--ip",
            "198.18.0.3/24",
            "identify",
        ],
        "no network interface",
    );
    refused(
        &[
            "controller",
            "--tap",
            "lo",
            "--ip",
            "198.18.0.2/24",
            "--listen",
            ":4420",
            "--listen",
            ":8009",
        ],
        "one port",
    );
    refused(&["host", "--connect", p, "--ip", "198.18.0.3/24", "identify"], "required arguments");
    refused(
        &[
            "host",
            "--connect",
            p,
            "--tap",
            "lo",
            "--iface",
            "lo",
            "--ip",
            "198.18.0.3/24",
            "identify",
        ],
        "cannot be used with",
    );
    refused(&["bench", "--iface", "lo"], "--iface takes HOSTIF,CTRLIF");
    refused(&["bench", "--iface", "lo,lo", "--via", "dpdk"], "--via takes auto, xdp or packet");
    refused(&["host", "--connect", p, "--via", "xdp", "identify"], "required arguments");
    // AF_XDP asked for where it cannot be had says why, before any traffic.
    let lo = ["--iface", "lo", "--via", "xdp", "--ip", "198.18.0.3/24", "identify"];
    refused(&[&["host", "--connect", p][..], &lo].concat(), "do not fit a 4096-byte UMEM chunk");
    refused(&["controller", "--tap-queues", "2"], "required arguments");
    refused(
        &["controller", "--tap", "lo", "--ip", "198.18.0.2/24", "--tap-queues", "0"],
        "not in 1..=64",
    );
    let queues = ["--tap", "lo", "--ip", "198.18.0.2/24", "--tap-queues", "2"];
    refused(
        &[&["controller", "--pcap", "/tmp/x.pcap"][..], &queues].concat(),
        "--pcap captures one queue",
    );
    refused(&["bench", "--busy-poll", "0"], "give microseconds, 1..=1000000");
    refused(&["host", "--connect", p, "--busy-poll", "50", "identify"], "required arguments");
    // The matrix would run for minutes before finding out.
    refused(&["bench", "--json", "/no/such/dir/x.json"], "cannot write /no/such/dir/x.json");
}

#[test]
fn one_offload_vocabulary() {
    refused(&["demo", "--offload", "ddp,crc"], "join offloads with '+'");
    refused(&["demo", "--offload", "dpp"], "unknown offload");
    let out = ok(&[
        "bench",
        "--offload",
        "none,ddp+crc-rx",
        "--bs",
        "4k",
        "--rw",
        "read",
        "--qd",
        "1",
        "--mtu",
        "1500",
        "--ddgst",
        "on",
        "--reps",
        "1",
        "--time",
        "0.1",
        "--warmup",
        "0",
        "--no-raw",
    ]);
    assert!(out.lines().any(|l| l.contains(" ddp+crc-rx |")), "{out}");
}

#[test]
fn the_controller_takes_its_own_example_and_the_host_names_what_is_missing() {
    // `--listen :PORT` is every address, as the help says.
    let c = Controller::start(&["--listen", ":0"]);
    let a = c.addr.as_str();
    refused(
        &["host", "--connect", a, "--nqn", "nqn.2026-11.io.nvme-ddp:nope", "identify"],
        "subsystem nqn.2026-11.io.nvme-ddp:nope not found",
    );
    refused(
        &["host", "--connect", a, "io", "--size", "1G"],
        "1G to transfer exceed namespace 1 (64M)",
    );
    refused(&["host", "--connect", a, "io", "--nsid", "2"], "no namespace 2");
}

#[test]
fn io_reports_reads_and_writes_apart_in_the_units_typed() {
    let c = Controller::start(&[]);
    let out = ok(&[
        "host",
        "--connect",
        &c.addr,
        "io",
        "--rw",
        "rw",
        "--bs",
        "64k",
        "--size",
        "16M",
        "--verify",
    ]);
    assert!(out.starts_with("rw bs=64k queues=1 qd=32: "), "{out}");
    assert!(out.contains(", 16 MiB in "), "{out}");
    for what in [
        "  lat: mean ",
        ", stdev ",
        ", p90 ",
        ", p99.9 ",
        "\n  read: ",
        "\n  write: ",
        "\n  cpu: usr ",
    ] {
        assert!(out.contains(what), "no {what:?} in\n{out}");
    }
    assert!(!out.contains(" MB") && !out.contains(" /s"), "{out}");
}

#[test]
fn nvme_cli_verbs_list_identify_and_read_logs() {
    let c = Controller::start(&["--ns", "ram:16M"]);
    let a = c.addr.as_str();
    let host = |verb: &[&'static str]| [&["host", "--connect", a][..], verb].concat();

    let list = ok(&host(&["list"]));
    let rows: Vec<&str> = list.lines().filter(|l| l.starts_with("nqn.")).collect();
    assert_eq!(rows.len(), 2, "a row per namespace:\n{list}");
    assert!(rows[0].contains("64 MiB / 64 MiB") && rows[1].contains("16 MiB / 16 MiB"), "{list}");
    assert!(list.starts_with("Subsystem") && list.contains("512 B + 0 B"), "{list}");
    let devices = json(&host(&["list", "--json"]))["Devices"].clone();
    assert_eq!(devices[1]["NameSpace"], 2);
    assert_eq!(devices[1]["PhysicalSize"], 16 << 20);

    let id = ok(&host(&["id-ctrl"]));
    for line in ["mn        : nvme-ddp", "nn        : 2", "ver       : 0x10300", "subnqn    : nqn."]
    {
        assert!(id.contains(line), "no {line:?} in\n{id}");
    }
    assert_eq!(json(&host(&["id-ctrl", "--json"]))["cntrltype"], 1);
    let ns = json(&host(&["id-ns", "--nsid", "2", "--json"]));
    assert_eq!((ns["nsze"].as_u64(), ns["nuse"].as_u64()), (Some(32768), Some(32768)), "{ns}");
    assert!(ok(&host(&["id-ns"])).contains("lbaf 0 : ms:0 lbads:9 rp:0 (in use)"));

    ok(&host(&["io", "--rw", "write", "--bs", "4k", "--size", "1M"]));
    let smart = json(&host(&["get-log", "smart", "--json"]));
    assert_eq!(smart["host_write_commands"], 256, "{smart}");
    assert!(ok(&host(&["get-log", "smart"])).contains("temperature               : 27 °C (300 K)"));
    // Errors are logged per controller, so a new association has none.
    assert!(ok(&host(&["get-log", "error"])).starts_with("Error Log Entries: 0 logged"));
    let disc = ok(&host(&["get-log", "discovery"]));
    assert!(disc.starts_with("Discovery Log Number of Records 1"), "{disc}");
    assert!(disc.contains("subtype : nvme subsystem"), "{disc}");
    assert_eq!(disc, ok(&host(&["discover"])), "discover is get-log discovery");
    let raw = ok(&host(&["get-log", "0x05", "--log-len", "32"]));
    assert_eq!(raw.lines().count(), 2, "two rows of 16 bytes:\n{raw}");

    refused(&host(&["id-ns", "--nsid", "9"]), "Identify Namespace 9 failed: Invalid Namespace");
    refused(&host(&["get-log", "0x99"]), "Get Log Page 0x99 failed: Invalid Field");
    refused(&host(&["get-log", "health"]), "unknown log page \"health\"");
    refused(&host(&["get-log", "5", "--log-len", "6"]), "--log-len must be a multiple of 4");
}

#[test]
fn ctrl_c_ends_io_with_the_results_so_far_and_sigterm_stops_the_controller() {
    let mut c = Controller::start(&[]);
    let host = Command::new(env!("CARGO_BIN_EXE_nvme-ddp"))
        .args(["host", "--connect", &c.addr, "io", "--rw", "randread", "--time", "600"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    signal(&host, libc::SIGINT);
    let o = wait_output(host);
    let (out, err) = text(&o);
    assert!(!o.status.success(), "{out}{err}");
    assert!(out.starts_with("randread bs=4k") && out.contains(" IOPS, "), "{out}\n{err}");
    assert!(err.contains("interrupted"), "{err}");

    signal(&c.child, libc::SIGTERM);
    let start = Instant::now();
    while c.child.try_wait().unwrap().is_none() {
        assert!(start.elapsed() < Duration::from_secs(60), "SIGTERM did not stop the controller");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(c.child.try_wait().unwrap().unwrap().success(), "SIGTERM is a clean stop");
}

/// A capture of a lossy run dissects clean in tshark: NVMe/TCP in every
/// data PDU, each data digest good, retransmissions marked as such, no
/// malformed frame and no expert error. The host captures what reaches it,
/// so a frame lost on the way leaves a hole in the capture; tshark
/// reassembles PDUs across such holes only with
/// `tcp.reassemble_out_of_order` (without it, tshark 4.0 calls some
/// retransmissions malformed, whose bytes are those sent first).
#[test]
fn a_lossy_capture_dissects_clean_in_tshark() {
    if Command::new("tshark").arg("-v").output().is_err() {
        eprintln!("skipping: tshark is not installed (CI installs it)");
        return;
    }
    let pcap = std::env::temp_dir().join(format!("nvme-ddp-lossy-{}.pcap", std::process::id()));
    let path = pcap.to_str().unwrap();
    let args = ["demo", "--simulated", "--loss", "0.01", "--seed", "11", "--size", "8M"];
    let out = ok(&[&args[..], &["--baseline", "off", "--pcap", path]].concat());
    assert!(out.contains("8 MiB verified"), "{out}");
    let tshark = |extra: &[&str]| {
        let prefs = [
            "-o",
            "tcp.reassemble_out_of_order:TRUE",
            "-o",
            "nvme-tcp.check_ddgst:TRUE",
            "-o",
            "nvme-tcp.check_hdgst:TRUE",
        ];
        let o = Command::new("tshark").args(["-r", path]).args(prefs).args(extra).output();
        let o = o.expect("tshark runs");
        assert!(o.status.success(), "tshark {extra:?}: {}", text(&o).1);
        text(&o).0
    };
    // Every value of `field` in the capture, over all frames.
    let values = |field: &str| -> Vec<String> {
        let out = tshark(&["-T", "fields", "-e", field]);
        out.split([',', '\n']).filter(|v| !v.is_empty()).map(str::to_owned).collect()
    };
    let expert = tshark(&["-q", "-z", "expert"]);
    let retransmitted = values("tcp.analysis.retransmission").len();
    let types = values("nvme-tcp.type");
    let digests = values("nvme-tcp.ddgst.status");
    let _ = std::fs::remove_file(&pcap);
    assert!(!expert.contains("Errors (") && !expert.contains("Malformed"), "{expert}");
    assert!(retransmitted > 0, "no retransmission marked:\n{expert}");
    // 8 MiB in 128 KiB both ways: 64 H2CData PDUs (6) and 64 C2HData (7),
    // and the Identify data.
    let data_pdus = types.iter().filter(|t| *t == "6" || *t == "7").count();
    assert!(data_pdus >= 128, "{data_pdus} data PDUs dissected");
    // Status 1 is "Good"; every data PDU's digest was checked.
    assert!(digests.iter().all(|d| d == "1"), "a data digest not good: {digests:?}");
    assert!(digests.len() >= data_pdus, "{} digests for {data_pdus} data PDUs", digests.len());
}

#[test]
fn demo_shows_progress_digests_by_default_and_says_what_off_means() {
    let o = nvme_ddp(&["demo", "--size", "16M", "--eta", "always", "--offload", "none"]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}{err}");
    assert!(out.contains("digests: header off, data on"), "{out}");
    assert!(err.contains("ETA"), "no progress line on stderr: {err}");
    assert!(out.contains("the NIC offloads nothing"), "{out}");
    assert!(!out.contains("(fail"), "{out}");
    // "copied" counts what was sent too, as bench does.
    assert!(
        out.contains(
            "host       offload [none]: the NIC offloads nothing; software copied 16 MiB rx / 16"
        ),
        "{out}"
    );
    assert!(!out.contains("offloads saved"), "nothing to compare with: {out}");
    // One-shot is a host thing: the controller does not list it.
    let out = ok(&["demo", "--size", "4M"]);
    assert!(out.contains("controller offload [classic]"), "{out}");
    // What the offloads saved, against a software-only run measured too.
    assert!(out.contains("  offloads saved: host CPU "), "{out}");
    assert!(out.contains("(against no offload, measured alongside: rw 128k, 3 runs"), "{out}");
    let report = json(&["demo", "--size", "4M", "--offload", "crc", "--json"]);
    let (with, without) = (&report["savings"]["offloaded"], &report["savings"]["software"]);
    let num = |p: &serde_json::Value, f: &str| p[f].as_f64().unwrap();
    assert_eq!(
        (with["offload"].as_str(), without["offload"].as_str()),
        (Some("crc"), Some("none"))
    );
    assert_eq!(num(without, "host_crc_bytes_per_io"), 131072.0, "{without}");
    assert_eq!(num(with, "host_crc_bytes_per_io"), 0.0, "the NIC digests: {with}");
    assert_eq!(num(with, "host_copy_bytes_per_io"), 131072.0, "crc alone places nothing");
    assert!(num(with, "host_cpu_ns_per_io") > 0.0 && num(without, "host_cpu_ns_per_io") > 0.0);
    let report = json(&["demo", "--size", "4M", "--baseline", "off", "--json"]);
    assert!(report["savings"].is_null(), "{report}");
}

/// The VM scripts name their network namespace from a prefix a user (or
/// CI) may set, and refuse one that is no namespace name before doing
/// anything.
#[test]
fn vm_scripts_take_their_namespace_prefix_from_the_environment() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/vm");
    for script in ["interop.sh", "selftest.sh"] {
        let o = Command::new("bash")
            .arg(format!("{dir}/{script}"))
            .env("NVME_DDP_NETNS_PREFIX", "no/such name")
            .output()
            .unwrap();
        let (out, err) = text(&o);
        assert_eq!(o.status.code(), Some(2), "{script}: {out}{err}");
        assert_eq!(
            err.trim(),
            format!(
                "{script}: NVME_DDP_NETNS_PREFIX=\"no/such name\" is no namespace name: \
                 use 1 to 40 letters, digits, '.', '_' or '-'"
            ),
            "{script}"
        );
    }
}

#[test]
fn net_says_what_exists() {
    let ns = format!("nvmeddp-cli-{}", std::process::id());
    let out = ok(&["net", "down", "--netns", &ns]);
    assert!(out.contains("does not exist"), "{out}");
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        refused(&["net", "up", "--netns", &ns], "needs root");
        return;
    }
    assert!(Command::new("ip").args(["netns", "add", &ns]).status().unwrap().success());
    let o = nvme_ddp(&["net", "up", "--netns", &ns]);
    let _ = Command::new("ip").args(["netns", "del", &ns]).status();
    let (out, err) = text(&o);
    assert!(!o.status.success() && err.contains("already exists"), "{out}{err}");
}
