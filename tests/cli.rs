//! The command line as a user runs it: the binary, its output and its exit
//! status. Bad input fails at once with one clear line; results read in
//! the units the user typed them in; Ctrl-C ends a run with what it did.

use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Arc, Mutex};
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
    /// What it logged so far.
    log: Arc<Mutex<String>>,
}

impl Controller {
    fn start(extra: &[&str]) -> Self {
        Self::start_as(&["--allow-any-host"], extra)
    }

    /// One that admits the hosts `access` says.
    fn start_as(access: &[&str], extra: &[&str]) -> Self {
        let addr = closed_port();
        let mut child = Command::new(env!("CARGO_BIN_EXE_nvme-ddp"))
            .args(["controller", "--listen", &addr, "--ns", "ram:64M"])
            .args(access)
            .args(extra)
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // It says "listening" once its socket is bound.
        let mut log = BufReader::new(child.stderr.take().unwrap());
        let mut lines = String::new();
        while log.read_line(&mut lines).unwrap() > 0 && !lines.contains("listening") {}
        assert!(lines.contains("listening"), "the controller did not start");
        let kept = Arc::new(Mutex::new(lines));
        let into = kept.clone();
        std::thread::spawn(move || {
            let mut line = String::new();
            while log.read_line(&mut line).is_ok_and(|n| n > 0) {
                into.lock().unwrap().push_str(&std::mem::take(&mut line));
            }
        });
        Controller { child, addr, log: kept }
    }

    /// What it logged so far.
    fn log(&self) -> String {
        self.log.lock().unwrap().clone()
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

/// The allow-list and DH-HMAC-CHAP through the binary, over both
/// transports: the right secrets (both ways) connect every queue; a wrong
/// one, a missing one and an unlisted host are refused with what to do.
#[test]
fn only_listed_hosts_with_their_secret_connect_over_tcp_and_rdma() {
    use nvme_of::auth::{Hash, Secret};
    const HOST: &str = "nqn.2014-08.org.nvmexpress:uuid:cli-auth";
    let secret = |len, hash| Secret::generate(len, hash).unwrap().to_interchange().to_string();
    let (key, ctrl_key, wrong) =
        (secret(32, Some(Hash::Sha256)), secret(48, None), secret(32, None));
    let dir = std::env::temp_dir().join(format!("nvme-ddp-auth-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let key_file = dir.join("key");
    std::fs::write(&key_file, format!("{key}\n")).unwrap();
    let at_file = format!("@{}", key_file.display());
    for transport in ["tcp", "rdma"] {
        let access = [
            "--dhchap-key",
            &format!("{HOST}={at_file}"),
            "--dhchap-ctrl-key",
            &format!("{HOST}={ctrl_key}"),
            "--dhchap-dhgroup",
            "ffdhe2048",
        ];
        let c = Controller::start_as(&access, &["--transport", transport]);
        let host = |extra: &[&str]| {
            let mut a = vec!["host", "--connect", &c.addr, "--transport", transport];
            a.extend(["--hostnqn", HOST]);
            a.extend(extra);
            a.extend(["io", "--rw", "randrw", "--bs", "4k", "--time", "1", "--queues", "2"]);
            a.into_iter().map(String::from).collect::<Vec<_>>()
        };
        let run = |a: Vec<String>| nvme_ddp(&a.iter().map(String::as_str).collect::<Vec<_>>());
        let o = run(host(&["--dhchap-secret", &key, "--dhchap-ctrl-secret", &ctrl_key]));
        assert!(o.status.success(), "{transport}: {}", text(&o).1);
        for (extra, says) in [
            (
                &["--dhchap-secret", &wrong][..],
                "the host's secret (--dhchap-secret) is not the one",
            ),
            (&["--dhchap-secret", &key, "--dhchap-ctrl-secret", &wrong][..], "did not prove"),
            (&[][..], "give its secret (--dhchap-secret"),
        ] {
            let o = run(host(extra));
            let err = text(&o).1;
            assert!(!o.status.success() && err.contains(says), "{transport} {extra:?}: {err}");
            assert!(
                !err.contains(&key[10..30]) && !err.contains(&wrong[10..30]),
                "no secret printed"
            );
        }
        // Nothing to list is a failure, not an empty table.
        let stranger = ["host", "--connect", &c.addr, "--transport", transport, "list"];
        refused(&stranger, "discovery lists no NVM subsystem this host may reach");
        let named = [&stranger[..5], &["--nqn", "nqn.2026-11.io.nvme-ddp:target", "list"]].concat();
        let err = text(&nvme_ddp(&named)).1;
        assert!(err.contains("is not allowed into the subsystem"), "{err}");
        std::thread::sleep(Duration::from_millis(200));
        let log = c.log();
        assert!(log.contains("host refused: not on the subsystem's allow-list"), "{log}");
        assert!(log.contains("authentication failed"), "{log}");
    }
    let _ = std::fs::remove_dir_all(dir);
    // A secret that does not parse is not printed back.
    let typo = format!("{}x:", &key[..key.len() - 1]);
    let nqn_typo = format!("not-an-nqn={key}");
    for args in [
        ["host", "--connect", "127.0.0.1:1", "--dhchap-secret", &typo, "list"],
        ["controller", "--listen", "127.0.0.1:0", "--dhchap-key", &nqn_typo, "--allow-any-host"],
    ] {
        let (out, err) = text(&nvme_ddp(&args));
        assert!(err.starts_with("error: invalid value for '--dhchap-"), "{err}");
        assert!(!out.contains(&key[10..40]) && !err.contains(&key[10..40]), "{err}");
    }
    let closed = Controller::start_as(&[], &[]);
    assert!(
        closed.log().contains("no host may connect: give --allow-host NQN"),
        "{}",
        closed.log()
    );
}

/// NVMe/TCP over TLS 1.3 through the binary, with nvme-cli's PSK format:
/// the host and a TLS-required controller share the configured PSK and
/// verify I/O; a wrong PSK and a host in the clear are refused.
#[test]
fn a_tls_port_serves_hosts_with_its_psk_and_no_other() {
    use nvme_tcp::tls::{ConfiguredPsk, PskHash};
    let psk = |b, hash, len| {
        ConfiguredPsk::new(&vec![b; len], Some(hash)).unwrap().to_interchange().to_string()
    };
    let (sha256, sha384) = (PskHash::Sha256, PskHash::Sha384);
    // SHA-256 keys (TLS_AES_128_GCM_SHA256), both derivations, and a
    // SHA-384 one (TLS_AES_256_GCM_SHA384).
    for (hash, len, compat) in [(sha256, 32, false), (sha256, 32, true), (sha384, 48, false)] {
        let (key, wrong) = (psk(0x42, hash, len), psk(0x43, hash, len));
        let mut extra = vec!["--tls", "required", "--tls-key", &key];
        if compat {
            extra.push("--tls-compat");
        }
        let c = Controller::start(&extra);
        let mut good = vec!["host", "--connect", &c.addr, "--tls", "--tls-key", &key];
        if compat {
            good.extend(["--tls-compat", "--tls-identity", "0"]);
        }
        let io = ["io", "--rw", "randrw", "--bs", "4k", "--time", "1", "--queues", "2", "--verify"];
        let o = nvme_ddp(&[&good[..], &io].concat());
        assert!(o.status.success(), "compat {compat}: {}", text(&o).1);
        let bad = ["host", "--connect", &c.addr, "--tls", "--tls-key", &wrong, "list"];
        let (_, err) = text(&nvme_ddp(&bad));
        assert!(err.contains("the controller took none of our PSKs"), "{err}");
        assert!(err.contains("--tls-key is not the port's"), "{err}");
        assert!(!err.contains(&wrong[16..40]), "no key printed");
        // A host in the clear is told the port wants TLS, and the flags.
        let clear = ["host", "--connect", &c.addr, "--ctrl-loss-tmo", "0", "list"];
        refused(&clear, "if its port requires TLS, connect with --tls and --tls-key");
        std::thread::sleep(Duration::from_millis(200));
        let log = c.log();
        for says in [
            "tls=required (hosts need --tls --tls-key)",
            "the host spoke NVMe/TCP in the clear on a port that requires TLS",
            "no key here matches the PSK identity the host offered",
        ] {
            assert!(log.contains(says) || compat, "the controller's log lacks {says:?}: {log}");
        }
        // Discovery says the port takes TLS 1.3 only.
        let discover = ["host", "--connect", &c.addr, "--tls", "--tls-key", &key];
        let compat_flag = if compat { &["--tls-compat"][..] } else { &[] };
        let out = ok(&[&discover[..], compat_flag, &["discover"]].concat());
        assert!(out.contains("treq    : required") && out.contains("sectype : tls13"), "{out}");
        // The same bytes under the other hash are another key.
        let other = match hash {
            PskHash::Sha256 => psk(0x42, sha384, 48),
            PskHash::Sha384 => psk(0x42, sha256, 32),
        };
        let (_, err) =
            text(&nvme_ddp(&["host", "--connect", &c.addr, "--tls", "--tls-key", &other, "list"]));
        assert!(err.contains("TLS handshake failed"), "{err}");
    }
    // A TLS host against a port in the clear: each side names the fix.
    let key = psk(0x42, sha256, 32);
    let c = Controller::start(&[]);
    refused(
        &["host", "--connect", &c.addr, "--ctrl-loss-tmo", "0", "--tls", "--tls-key", &key, "list"],
        "the controller answered in the clear, not in TLS: its port takes no TLS",
    );
    std::thread::sleep(Duration::from_millis(200));
    let log = c.log();
    assert!(log.contains("tls=none (hosts connect in the clear)"), "{log}");
    assert!(log.contains("the host began TLS (a ClientHello) on a port without TLS"), "{log}");
    let out = ok(&["host", "--connect", &c.addr, "discover"]);
    assert!(out.contains("treq    : not specified") && out.contains("sectype : none"), "{out}");
    refused(
        &[
            "controller",
            "--transport",
            "rdma",
            "--tls",
            "required",
            "--tls-key",
            &key,
            "--allow-any-host",
            "--listen",
            "127.0.0.1:0",
        ],
        "needs the tcp transport",
    );
    refused(&["host", "--connect", "127.0.0.1:1", "--tls", "list"], "--tls needs --tls-key");
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
    refused(&["host", "identify"], "--connect HOST:PORT");
    // Options that need each other may stand on either side of the verb.
    let psk = ok(&["gen-tls-key"]).trim().to_string();
    let secret = ok(&["gen-dhchap-key"]).trim().to_string();
    for split in [
        &["--tls", "--tls-key", &psk, "list", "--tls-compat"][..],
        &["--tls", "list", "--tls-key", &psk],
        &["--dhchap-secret", &secret, "list", "--dhchap-ctrl-secret", &secret],
        &["--iface", "lo", "identify", "--ip", "198.18.0.3/24", "--via", "packet"],
    ] {
        let o =
            nvme_ddp(&[&["host", "--connect", &port, "--ctrl-loss-tmo", "0"][..], split].concat());
        let err = text(&o).1;
        assert!(err.contains("cannot connect") || err.contains("AF_PACKET"), "{split:?}: {err}");
    }
    refused(&["host", "--connect", &port, "list", "--tls-key", &psk], "--tls-key needs --tls");
    refused(&["host", "--connect", &port, "--tap", "lo", "list", "--iface", "lo"], "not both");
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
    refused(
        &["host", "--connect", p, "--ip", "198.18.0.3/24", "identify"],
        "--ip applies to a smoltcp link",
    );
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
        "give --tap or --iface, not both",
    );
    refused(&["bench", "--iface", "lo"], "--iface takes HOSTIF,CTRLIF");
    refused(&["bench", "--iface", "lo,lo", "--via", "dpdk"], "--via takes auto, xdp or packet");
    refused(&["host", "--connect", p, "--via", "xdp", "identify"], "--via says how --iface");
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
    refused(&["bench", "--busy-poll", "2000000"], "give microseconds, 0..=1000000");
    refused(&["bench", "--tap", "lo,lo", "--mtu", "9000"], "the links' MTU is used");
    // A bad argument leaves no empty report behind.
    let json = std::env::temp_dir().join(format!("nvme-ddp-bad-{}.json", std::process::id()));
    refused(&["bench", "--bs", "1000", "--json", json.to_str().unwrap()], "multiples of 512");
    assert!(!json.exists(), "bench created {} before refusing", json.display());
    refused(&["host", "--connect", p, "--busy-poll", "50", "identify"], "--busy-poll applies");
    // What only a smoltcp link has is refused without one, not ignored.
    refused(&["host", "--connect", p, "--pcap", "x.pcap", "identify"], "--pcap applies");
    refused(&["controller", "--allow-any-host", "--mtu", "9000"], "--mtu applies");
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
    let rows: Vec<&str> = list.lines().filter(|l| l.starts_with("nvme+tcp://")).collect();
    assert_eq!(rows.len(), 2, "a row per namespace:\n{list}");
    assert!(rows[0].contains("64 MiB / 64 MiB") && rows[1].contains("16 MiB / 16 MiB"), "{list}");
    // nvme-cli's columns; where it names a device node, the namespace's URI.
    assert!(list.starts_with("Node ") && list.contains("512 B + 0 B"), "{list}");
    let node = format!("nvme+tcp://{a}/nqn.2026-11.io.nvme-ddp:target/2 ");
    assert!(rows[1].starts_with(&node), "{list}");
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
    assert!(disc.starts_with("Discovery Log Number of Records 1, Generation counter "), "{disc}");
    assert!(json(&host(&["discover", "--json"]))["genctr"].as_u64().is_some());
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
#[ignore = "needs tshark: apt-get install tshark, then --include-ignored"]
fn a_lossy_capture_dissects_clean_in_tshark() {
    let tshark = Command::new("tshark").arg("-v").output();
    assert!(tshark.is_ok(), "tshark is not installed: apt-get install tshark");
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
    assert!(out.contains("no savings measured: every offload is off (--offload none)"), "{out}");
    // One-shot is a host thing: the controller does not list it.
    let out = ok(&["demo", "--size", "4M"]);
    assert!(
        out.contains("controller offload [classic; one-shot maps a host's buffers, so not here]"),
        "{out}"
    );
    // What the offloads saved, against a software-only run measured too.
    assert!(out.contains("  offloads saved: host CPU "), "{out}");
    assert!(
        out.contains(
            "(against no offload, measured alongside on a clean wire: randrw 128k, 3 runs each, spread"
        ),
        "{out}"
    );
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

/// The demo over TLS 1.3: every byte verified, with the NICs taking the
/// records over and placing inside them, or in software; the bench's TLS
/// axis runs points of its own; TLS over RDMA is refused.
#[test]
fn the_demo_and_bench_run_over_tls() {
    let n = |v: &serde_json::Value, f: &str| v[f].as_u64().unwrap();
    let size = 4u64 << 20;
    let report = json(&["demo", "--tls", "--size", "4M", "--baseline", "off", "--json"]);
    assert_eq!(report["tls"], true, "{report}");
    assert_eq!(n(&report["phases"][1], "verified_bytes"), size, "{report}");
    // All offloads: the NIC decrypted the records and placed the data
    // read inside them; the host opened only its admin queue's records.
    assert_eq!(n(&report["offload"], "nic_placed_bytes"), size, "{report}");
    assert!(n(&report["offload"], "nic_decrypt_bytes") > size, "{report}");
    assert!(n(&report["offload"], "nic_encrypt_bytes") > size, "{report}");
    assert!(n(&report["offload"], "host_decrypt_bytes") < 64 << 10, "{report}");
    // None: the host decrypted every record it received (the data read,
    // and the responses) and encrypted every one it sent.
    let args = ["demo", "--tls", "--size", "4M", "--offload", "none", "--baseline", "off"];
    let report = json(&[&args[..], &["--json"]].concat());
    assert_eq!(n(&report["phases"][1], "verified_bytes"), size, "{report}");
    assert_eq!(n(&report["offload"], "nic_placed_bytes"), 0, "{report}");
    assert!(n(&report["offload"], "host_decrypt_bytes") > size, "{report}");
    assert!(n(&report["offload"], "host_encrypt_bytes") > size, "{report}");
    let points = std::env::temp_dir().join(format!("nvme-ddp-tls-{}.json", std::process::id()));
    let args = [
        "bench",
        "--bs",
        "4k",
        "--rw",
        "read",
        "--qd",
        "4",
        "--mtu",
        "9000",
        "--offload",
        "none,tls",
    ];
    let more =
        ["--tls", "on,off", "--reps", "1", "--time", "0.2", "--json", points.to_str().unwrap()];
    let out = ok(&[&args[..], &more].concat());
    assert!(out.lines().any(|l| l.starts_with("tls  read")), "{out}");
    assert!(out.lines().any(|l| l.starts_with("tcp  read")), "{out}");
    // Per 4 KiB read: the data's record and more decrypted over TLS, by
    // the host without the offload and by its NIC with it; nothing in
    // the clear.
    let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(&points).unwrap()).unwrap();
    std::fs::remove_file(&points).ok();
    for p in doc["points"].as_array().unwrap() {
        let host = p["host_decrypt_bytes_per_io"].as_f64().unwrap();
        let nic = p["nic_decrypt_bytes_per_io"].as_f64().unwrap();
        match (p["tls"].as_bool().unwrap(), p["offload"].as_str().unwrap()) {
            (true, "none") => assert!(host > 4096.0 && nic == 0.0, "{p}"),
            (true, _) => assert!(nic > 4096.0 && host < nic / 10.0, "{p}"),
            (false, _) => assert_eq!(host + nic, 0.0, "{p}"),
        }
    }
    refused(&["demo", "--tls", "--transport", "rdma"], "TLS");
}

/// `demo --jobs 2`: two hosts at once, each over its own wire against a
/// controller stack of its own, one namespace between them; each writes and
/// reads back all of it, verified. The report adds them up (frames, NIC
/// work, I/Os, verified bytes) and gives each job's phases; in simulated
/// time as in real time. A job count of 0 is refused.
#[test]
fn demo_jobs_run_at_once_and_add_up() {
    let size = 4u64 << 20;
    for mode in [&[][..], &["--simulated"]] {
        let args = ["demo", "--size", "4M", "--jobs", "2", "--baseline", "off", "--json"];
        let report = json(&[&args[..], mode].concat());
        assert_eq!(report["jobs"], 2, "{report}");
        let jobs = report["per_job"].as_array().unwrap();
        assert_eq!(jobs.len(), 2);
        let (write, read) = (&report["phases"][0], &report["phases"][1]);
        let n = |v: &serde_json::Value, f: &str| v[f].as_u64().unwrap();
        assert_eq!(n(write, "bytes"), 2 * size, "{write}");
        assert_eq!(n(read, "verified_bytes"), 2 * size, "{read}");
        let ios: u64 = jobs.iter().map(|j| n(&j[0], "ios")).sum();
        assert_eq!(ios, n(write, "ios"));
        for j in jobs {
            assert_eq!(n(&j[1], "verified_bytes"), size, "{j}");
        }
        // Both jobs' NICs placed what their hosts read.
        assert_eq!(n(&report["offload"], "nic_placed_bytes"), 2 * size, "{report}");
    }
    let out = ok(&["demo", "--size", "4M", "--jobs", "2", "--baseline", "off"]);
    assert!(out.contains("2 jobs at once; together:") && out.contains("job 1: write"), "{out}");
    refused(&["demo", "--jobs", "0"], "jobs must be 1..=256");
}

/// The VM scripts name their network namespace from a prefix a user (or
/// CI) may set, and refuse one that is no namespace name before doing
/// anything.
#[test]
fn vm_scripts_take_their_namespace_prefix_from_the_environment() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/vm");
    for script in ["interop.sh", "selftest.sh", "auth-interop.sh", "tls-interop.sh"] {
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

/// How long a stopped run may take to exit: the runs are built to end
/// within a second of the signal; this leaves room for a busy machine.
const STOP_BOUND: Duration = Duration::from_secs(10);

/// `nvme-ddp ARGS`, its output piped.
fn spawn(args: &[&str]) -> Child {
    Command::new(env!("CARGO_BIN_EXE_nvme-ddp"))
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Send `sig` to `child` and take its output once it exits, which it must
/// within [`STOP_BOUND`].
#[track_caller]
fn stopped_by(child: Child, sig: libc::c_int) -> Output {
    signal(&child, sig);
    let start = Instant::now();
    let o = wait_output(child);
    let (out, err) = text(&o);
    assert!(start.elapsed() < STOP_BOUND, "{:?} after the signal:\n{out}{err}", start.elapsed());
    o
}

/// A host whose controller died mid-run is reconnecting (for ten minutes,
/// by default): Ctrl-C and SIGTERM still end it at once, with the results
/// of what ran and what recovery tried.
#[test]
fn ctrl_c_and_sigterm_stop_a_host_whose_controller_died() {
    for sig in [libc::SIGINT, libc::SIGTERM] {
        let mut c = Controller::start(&[]);
        let host =
            spawn(&["host", "--connect", &c.addr, "io", "--rw", "randread", "--time", "600"]);
        std::thread::sleep(Duration::from_millis(1500));
        c.child.kill().unwrap();
        // The host sees the connection go and starts reconnecting.
        std::thread::sleep(Duration::from_millis(1000));
        let o = stopped_by(host, sig);
        let (out, err) = text(&o);
        assert!(!o.status.success(), "{out}{err}");
        assert!(out.starts_with("randread bs=4k") && out.contains(" IOPS, "), "{out}\n{err}");
        assert!(out.contains("recovery: association lost 1 time, "), "{out}");
        assert!(err.contains("error: interrupted; the results above are of what ran"), "{err}");
    }
}

/// When the first stop waits on I/O in flight (a controller that stopped
/// answering but has not yet been found dead), a second Ctrl-C exits at
/// once.
#[test]
fn a_second_ctrl_c_exits_at_once() {
    let c = Controller::start(&[]);
    let host = spawn(&["host", "--connect", &c.addr, "io", "--rw", "randread", "--time", "600"]);
    std::thread::sleep(Duration::from_millis(1500));
    signal(&c.child, libc::SIGSTOP);
    std::thread::sleep(Duration::from_millis(200));
    signal(&host, libc::SIGINT);
    // Past the pause that tells a second signal from one sent twice, and
    // well within the half second the first gives I/O in flight.
    std::thread::sleep(Duration::from_millis(150));
    let o = stopped_by(host, libc::SIGINT);
    signal(&c.child, libc::SIGCONT);
    let (out, err) = text(&o);
    assert_eq!(o.status.code(), Some(130), "{out}{err}");
    assert!(err.contains("error: interrupted again; exiting without waiting"), "{err}");
}

/// The in-process demo with every frame lost cannot even connect: Ctrl-C
/// ends it; in simulated time it ends by itself, saying what it waited
/// for and that the time was simulated.
#[test]
fn a_demo_that_cannot_connect_stops_and_says_why() {
    let demo = spawn(&["demo", "--loss", "1", "--size", "4M"]);
    std::thread::sleep(Duration::from_millis(1000));
    let o = stopped_by(demo, libc::SIGINT);
    let (out, err) = text(&o);
    assert!(!o.status.success(), "{out}{err}");
    assert!(err.contains("error: interrupted"), "{err}");
    let o = nvme_ddp(&["demo", "--loss", "1", "--size", "4M", "--simulated"]);
    let (out, err) = text(&o);
    assert!(!o.status.success(), "{out}{err}");
    assert_eq!(
        err.trim(),
        "error: cannot connect to 198.18.0.2:4420: no answer in 10 s (no controller at that \
         address, or none reachable), in simulated time",
    );
}

/// A controller lost for good: the recovery line counts the attempts to
/// reconnect, and the error says the controller was lost before what the
/// I/O in flight failed with.
#[test]
fn a_lost_controller_is_reported_as_such() {
    let mut c = Controller::start(&[]);
    let args = ["--ctrl-loss-tmo", "2", "--reconnect-delay", "0.2", "io", "--time", "60"];
    let host = spawn(&[&["host", "--connect", &c.addr][..], &args].concat());
    std::thread::sleep(Duration::from_millis(1000));
    c.child.kill().unwrap();
    let o = wait_output(host);
    let (out, err) = text(&o);
    assert!(!o.status.success(), "{out}{err}");
    let recovery = out.lines().find(|l| l.contains("recovery: ")).unwrap_or_default();
    let attempts: u64 = recovery
        .split("association lost 1 time, ")
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{out}"));
    assert!(attempts >= 2, "{recovery}");
    let error = err.lines().find(|l| l.starts_with("error: ")).unwrap_or_default();
    assert!(error.starts_with("error: controller lost: no association for 2."), "{err}");
    assert!(
        error.contains("past ctrl-loss-tmo; the last attempt: queue 0: cannot connect to "),
        "{err}"
    );
    // The loss is the cause; I/O that failed with it, if any was in flight
    // (the controller may have answered all of it before it died), comes
    // after.
    if out.contains(" errors, ") {
        assert!(error.contains("; the I/O in flight failed with it (Read of LBA "), "{err}");
    }
    // One warning for the loss, not one per attempt.
    assert_eq!(err.matches("association lost").count(), 1, "{err}");
}

/// What --verify checked and what it could not, in words that say why.
#[test]
fn verify_says_what_it_checked_against() {
    let c = Controller::start(&[]);
    let a = c.addr.as_str();
    let o = nvme_ddp(&["host", "--connect", a, "io", "--rw", "read", "--verify", "--size", "1M"]);
    let (out, err) = text(&o);
    assert!(!o.status.success(), "a namespace never written: {out}{err}");
    assert!(
        err.contains(
            "error: data read at LBA 0 differs at byte 0 from the pattern of seed 1: a \
             verified read expects what a verified write with the same seed left there"
        ),
        "{err}"
    );
    let out = ok(&["host", "--connect", a, "io", "--rw", "randrw", "--verify", "--size", "8M"]);
    assert!(out.contains(" read unchecked from blocks this run had not yet written)"), "{out}");
    // Once written, a read checks all of it.
    ok(&["host", "--connect", a, "io", "--rw", "write", "--verify", "--size", "1M"]);
    let out = ok(&["host", "--connect", a, "io", "--rw", "read", "--verify", "--size", "1M"]);
    assert!(out.contains(", 1 MiB verified)"), "{out}");
}

/// fio's access patterns and mix, nvme-cli's namespace flag, and a
/// controller log that names the hosts that come and go.
#[test]
fn names_users_know_from_fio_and_nvme_cli() {
    let c = Controller::start(&[]);
    let a = c.addr.as_str();
    let io = |extra: &[&str]| {
        let args = [&["host", "--connect", a, "io", "--size", "1M", "--json"][..], extra].concat();
        json(&args)["phases"][0].clone()
    };
    let p = io(&["--rw", "randrw", "--rwmixread", "100"]);
    assert_eq!((p["rw"].as_str(), p["write"]["ios"].as_u64()), (Some("randrw"), Some(0)), "{p}");
    let p = io(&["--rw", "readwrite", "--rwmixread", "0", "-n", "1"]);
    assert_eq!((p["rw"].as_str(), p["read"]["ios"].as_u64()), (Some("rw"), Some(0)), "{p}");
    io(&["--namespace-id", "1"]);
    refused(&["host", "--connect", a, "io", "--rwmixread", "101"], "give a percentage, 0..=100");
    let log = c.log();
    assert!(log.contains("host connected cntlid="), "{log}");
    assert!(log.contains("hostnqn=nqn.2014-08.org.nvmexpress:uuid:"), "{log}");
    assert!(log.contains("host disconnected"), "{log}");
}

/// Every value is checked before any work, with one rule and message
/// across commands.
#[test]
fn inputs_are_refused_before_any_work() {
    refused(&["demo", "--size", "1T"], "--size 1T: 1T is more than this machine's memory");
    refused(&["demo", "--size", "0"], "--size 0: 0 bytes is smaller than one 512-byte block");
    refused(&["demo", "--size", "1000"], "not a whole number of 512-byte blocks");
    refused(
        &["controller", "--listen", "127.0.0.1:0", "--ns", "ram:1000"],
        "--ns ram:1000: 1000 bytes is not a whole number of 512-byte blocks",
    );
    let file = std::env::temp_dir().join(format!("nvme-ddp-cli-{}", std::process::id()));
    std::fs::write(&file, vec![0u8; 1_000_000]).unwrap();
    let ns = format!("file:{}", file.display());
    let args = ["controller", "--listen", "127.0.0.1:0", "--block-size", "4096", "--ns", &ns];
    let named = format!("namespace {}: 1000000 bytes is not a whole number", file.display());
    refused(&args, &named);
    std::fs::remove_file(&file).unwrap();
    refused(
        &["controller", "--listen", "127.0.0.1:0", "--ns", "file:/proc/version"],
        "namespace /proc/version: cannot find its size",
    );
    // Negative numbers meet each option's own check.
    let port = closed_port();
    let p = port.as_str();
    refused(&["demo", "--loss", "-0.1"], "is not a probability between 0 and 1");
    refused(&["demo", "--delay-us", "-5"], "give a whole number, 0 or more");
    refused(&["host", "--connect", p, "io", "--time", "-1"], "give a number of seconds");
    refused(&["host", "--connect", p, "--kato", "-1", "identify"], "give a whole number, 0");
    refused(
        &["bench", "--rw", "readwrite,sideways"],
        "use read, write, randread, randwrite, rw, randrw",
    );
    refused(&["controller", "--cpus", "3-1"], "a range goes up");
    refused(&["controller", "--cpus", "0,100000"], "may not run on CPU 100000");
    // Charts that cannot be written fail before the matrix runs.
    let tiny = ["--bs", "4k", "--rw", "read", "--qd", "1", "--offload", "none", "--no-raw"];
    let tiny = [&tiny[..], &["--mtu", "1500", "--reps", "1", "--time", "0.1", "--warmup", "0"]];
    refused(&[&["bench", "--plot", "/proc/nvme-ddp"][..], &tiny.concat()].concat(), "--plot");
}

/// `--cpus` pins a poll group to each CPU given, and the controller says
/// what each did when it stops.
#[test]
fn the_controller_serves_on_the_cpus_given() {
    let mut c = Controller::start(&["--cpus", "0"]);
    ok(&["host", "--connect", &c.addr, "io", "--size", "1M"]);
    signal(&c.child, libc::SIGTERM);
    assert!(c.child.wait().unwrap().success());
    // The log thread reads to the end of what the controller wrote.
    std::thread::sleep(Duration::from_millis(200));
    let log = c.log();
    let groups: Vec<&str> = log.lines().filter(|l| l.contains("poll group")).collect();
    assert_eq!(groups.len(), 1, "{log}");
    assert!(groups[0].contains("group=0 on=CPU 0 connections=3 io_queues=1 cpu_s="), "{log}");
}

/// `io --cpus LIST` runs one association's I/O queues in sets, a thread
/// each on its CPU, dealt round robin; the pass is shared out (each set
/// writes its part, and the read back verifies all of it); the report is
/// the phase as one and each set's share. Refused where it cannot run.
#[test]
fn io_queues_run_on_the_cpus_given() {
    let two = std::thread::available_parallelism().map_or(1, usize::from) >= 2;
    let cpus = if two { "0,1" } else { "0" };
    let c = Controller::start(&[]);
    let host = ["host", "--connect", &c.addr, "--queues", "4", "--json", "io", "--bs", "128k"];
    let write = json(&[&host[..], &["--rw", "write", "--verify", "--cpus", cpus]].concat());
    let read = json(&[&host[..], &["--rw", "read", "--verify", "--cpus", cpus]].concat());
    let size = 64u64 << 20;
    assert_eq!(write["phases"][0]["bytes"], size, "{write}");
    assert_eq!(write["phases"][0]["queues"], 4, "{write}");
    assert_eq!(read["phases"][0]["verified_bytes"], size, "{read}");
    let sets = read["sets"].as_array().unwrap();
    let qids: Vec<&serde_json::Value> = sets.iter().map(|s| &s["qids"]).collect();
    match two {
        true => assert_eq!(qids, [&serde_json::json!([1, 3]), &serde_json::json!([2, 4])]),
        false => assert_eq!(qids, [&serde_json::json!([1, 2, 3, 4])]),
    }
    let ios: u64 = sets.iter().map(|s| s["ios"].as_u64().unwrap()).sum();
    assert_eq!(ios, size / (128 << 10), "each set moved its part: {read}");
    assert!(sets.iter().all(|s| s["host_cpu_ns_per_io"].as_f64().unwrap() > 0.0), "{read}");
    let text =
        ok(&[&host[..5], &["io", "--rw", "randread", "--time", "0.3", "--cpus", cpus]].concat());
    assert!(text.contains("queues [1, 3] on CPU 0") || !two, "{text}");
    // NVMe/RDMA's queues go to their sets the same way.
    let r = Controller::start(&["--transport", "rdma"]);
    let rdma = ["host", "--connect", &r.addr, "--transport", "rdma", "--queues", "2", "--json"];
    let v = json(
        &[&rdma[..], &["io", "--rw", "write", "--size", "4M", "--verify", "--cpus", cpus]].concat(),
    );
    assert_eq!(v["phases"][0]["bytes"], 4 << 20, "{v}");
    refused(&[&host[..5], &["io", "--jobs", "2", "--cpus", "0"]].concat(), "with --jobs");
    refused(&[&host[..5], &["io", "--cpus", "100000"]].concat(), "may not run on CPU 100000");
}

/// `io --jobs N` runs N hosts at once, a thread and an association each,
/// and the controller's poll groups share their I/O queues out.
#[test]
fn jobs_run_at_once_against_the_poll_groups() {
    // A poll group per CPU by default.
    let cpus = std::thread::available_parallelism().map_or(1, usize::from);
    let mut c = Controller::start(&[]);
    let args = ["host", "--connect", &c.addr, "io", "--rw", "randread", "--time", "1"];
    let v = json(&[&args[..], &["--jobs", "2", "--json"]].concat());
    let jobs = v["jobs"].as_array().unwrap();
    assert_eq!(jobs.len(), 2, "{v}");
    let ios: Vec<u64> = jobs.iter().map(|j| j["phase"]["ios"].as_u64().unwrap()).collect();
    assert!(ios.iter().all(|&n| n > 0), "{v}");
    assert_eq!(v["total"]["ios"].as_u64(), Some(ios.iter().sum()), "{v}");
    assert!(jobs.iter().all(|j| j["host_cpu_ns_per_io"].as_f64().unwrap() > 0.0), "{v}");
    signal(&c.child, libc::SIGTERM);
    assert!(c.child.wait().unwrap().success());
    std::thread::sleep(Duration::from_millis(200));
    let log = c.log();
    let groups: Vec<&str> = log.lines().filter(|l| l.contains("poll group")).collect();
    assert_eq!(groups.len(), cpus, "{log}");
    if cpus >= 2 {
        let one = groups.iter().filter(|g| g.contains(" io_queues=1 ")).count();
        assert_eq!(one, 2, "one I/O queue in each of two groups: {log}");
    }
    refused(
        &[
            "host",
            "--connect",
            &c.addr,
            "--tap",
            "lo",
            "--ip",
            "198.18.0.3/24",
            "io",
            "--jobs",
            "2",
        ],
        "--jobs runs over kernel TCP",
    );
}

/// The demo takes what the embedded controller can serve: many queues
/// (more than a smoltcp listener's backlog) and the deepest queues.
#[test]
fn the_demo_serves_the_queues_and_depth_it_accepts() {
    let run = |extra: &[&str]| {
        let args = ["demo", "--size", "16M", "--simulated", "--baseline", "off", "--json"];
        json(&[&args[..], extra].concat())
    };
    let r = run(&["--queues", "40"]);
    assert_eq!(r["io_queues"], 40, "{r}");
    let r = run(&["--qd", "1024"]);
    assert_eq!(
        (r["queue_depth"].as_u64(), r["phases"][1]["qd"].as_u64()),
        (Some(1024), Some(1024))
    );
}

/// After a lossy run, the savings line says it was measured on a clean
/// wire, apart from the run whose counters it follows.
#[test]
fn the_savings_after_a_lossy_demo_say_they_are_of_a_clean_wire() {
    let out = ok(&["demo", "--size", "8M", "--loss", "0.01", "--simulated"]);
    let line = out.lines().find(|l| l.contains(" save: host CPU ")).unwrap_or_default();
    assert!(
        line.starts_with(
            "  on a clean wire (not this run's impaired one, whose counters are above), offloads save"
        ),
        "{out}"
    );
}

/// `gen-dhchap-key` and `gen-tls-key` print what nvme-cli prints for the
/// same flags (the answers are nvme-cli 2.3's), and a fresh pair of keys
/// connects a host to a controller with nothing but this binary.
#[test]
fn keys_are_made_as_nvme_cli_makes_them_and_connect() {
    const S: &str = "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f";
    const NQN: &str = "nqn.2014-08.org.nvmexpress:uuid:5f0d2c44-6a1e-4c8b-9d3e-000000000000";
    let line = |args: &[&str]| ok(args).trim_end().to_string();
    // Untransformed, the secret as given and its CRC; for SHA-256, HMAC'd
    // with the NQN first, as nvme-cli 2.x does.
    assert_eq!(
        line(&["gen-dhchap-key", "--secret", S, "--key-length", "32", "--hmac", "0"]),
        "DHHC-1:00:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh+KfiaR:"
    );
    assert_eq!(
        line(&["gen-dhchap-key", "-s", S, "-l", "32", "-m", "1", "-n", NQN]),
        "DHHC-1:01:pyPkJLzr7F2PHvVuPDr5hHZN7KeuNALJHqy+B32qMNnOcQnz:"
    );
    assert_eq!(
        line(&["gen-tls-key", "--secret", S, "--hmac", "1"]),
        "NVMeTLSkey-1:01:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh+KfiaR:"
    );
    for (args, len) in [(&["gen-dhchap-key"][..], 32), (&["gen-dhchap-key", "-m", "3"], 64)] {
        let key: nvme_of::auth::Secret = line(args).parse().expect("a DHHC-1 secret");
        assert!(format!("{key:?}").contains(&format!("{len} bytes")), "{key:?}");
    }
    assert_ne!(line(&["gen-tls-key"]), line(&["gen-tls-key"]), "random keys");
    refused(&["gen-dhchap-key", "--hmac", "2", "--key-length", "32"], "it takes 48");
    refused(&["gen-dhchap-key", "--secret", "0011"], "--secret is 2 bytes; this key takes 32");
    refused(&["gen-dhchap-key", "--secret", "xyz"], "--secret is not hex");
    refused(&["gen-dhchap-key", "--hmac", "4"], "4 is not in 0..=3");
    refused(&["gen-tls-key", "--insert"], "run without --insert");

    let secret = line(&["gen-dhchap-key", "--hmac", "1", "--nqn", NQN]);
    let psk = line(&["gen-tls-key", "--hostnqn", NQN]);
    let auth = format!("{NQN}={secret}");
    let c =
        Controller::start_as(&["--dhchap-key", &auth], &["--tls", "required", "--tls-key", &psk]);
    let host =
        ["host", "--connect", &c.addr, "--dhchap-secret", &secret, "--tls", "--tls-key", &psk];
    let out = ok(&[&host[..], &["io", "--rw", "randrw", "--time", "0.5", "--verify"]].concat());
    assert!(out.contains("IOPS"), "{out}");
}

/// `--connect` takes a host name, as nvme-cli's `--traddr` does not but
/// users type; an address without its port says so.
#[test]
fn connect_takes_host_names_and_says_when_the_port_is_missing() {
    let c = Controller::start(&[]);
    let port = c.addr.rsplit_once(':').unwrap().1;
    let out = ok(&["host", "--connect", &format!("localhost:{port}"), "list"]);
    assert!(out.contains(&format!("nvme+tcp://127.0.0.1:{port}/")), "{out}");
    refused(&["host", "--connect", "127.0.0.1", "list"], "has no port: give HOST:PORT");
    refused(&["host", "--connect", "localhost", "list"], "has no port: give HOST:PORT");
    refused(&["host", "--connect", ":4420", "list"], "has no address");
    refused(&["host", "--connect", "localhost:http", "list"], "is not a port number");
    refused(&["host", "--connect", "no-such-host.invalid:4420", "list"], "no-such-host.invalid");
}
