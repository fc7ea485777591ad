//! NVMe/TCP over smoltcp: the demo end to end, host against controller over
//! the in-process wire with each impairment and full data verification (in
//! simulated time, so a lost frame costs no wall-clock time), and over TAP
//! devices, a veth pair and against Linux's TCP in network namespaces.

mod common;

use common::{Netns, needs_namespaces};
use nvme_ddp::demo::{self, DemoOptions};
use nvme_of::Digests;
use smoltcp::time::Duration;
use smoltcp_glue::Profile;
use std::process::Command;

fn small(o: DemoOptions) -> DemoOptions {
    DemoOptions { size: 8 << 20, bs: 64 << 10, qd: 16, queues: 2, ..o }
}

fn check(report: &demo::DemoReport, size: u64) {
    assert_eq!(report.error, None);
    assert_eq!(report.phases.len(), 2, "a write pass and a read pass");
    let (w, r) = (&report.phases[0].stats, &report.phases[1].stats);
    assert_eq!((w.bytes, w.errors), (size, 0));
    assert_eq!((r.bytes, r.errors, r.verify_failures), (size, 0, 0));
    assert_eq!(r.verified_bytes, size, "every byte read back matched what was written");
    assert_eq!(report.recovery.reconnects, 0, "no fault here is fatal");
}

#[test]
fn demo_end_to_end_in_real_time() {
    let o = small(DemoOptions {
        digests: Digests { header: true, data: true },
        ..DemoOptions::default()
    });
    let report = demo::run(&o, None, &Default::default()).unwrap();
    check(&report, o.size);
    assert!(!report.simulated);
    assert!(report.wire.c2h_bytes > o.size, "read data crossed the wire");
}

#[test]
fn demo_command_prints_a_json_report() {
    let out = Command::new(env!("CARGO_BIN_EXE_nvme-ddp"))
        .args(["demo", "--size", "8M", "--bs", "32k", "--mtu", "1500", "--json"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["phases"][0]["rw"], "write");
    assert_eq!(v["phases"][1]["rw"], "read");
    assert_eq!(v["phases"][1]["verified_bytes"], 8 << 20);
    assert_eq!(v["mtu"], 1500);
}

#[test]
fn demo_command_refuses_bad_arguments() {
    for args in [
        &["demo", "--loss", "2"][..],
        &["demo", "--mtu", "100"],
        &["demo", "--size", "1x"],
        &["demo", "--bs", "1000"],
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_nvme-ddp")).args(args).output().unwrap();
        assert!(!out.status.success(), "{args:?} must fail");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
}

fn impaired(p: Profile, seed: u64) {
    for mtu in [1500, 9000] {
        let o = small(DemoOptions {
            mtu,
            impair: p,
            seed,
            simulated: true,
            digests: Digests { header: true, data: true },
            ..DemoOptions::default()
        });
        let report = demo::run(&o, None, &Default::default()).unwrap();
        check(&report, o.size);
        let s = report.impaired_c2h;
        assert!(s.frames > 1000);
        assert!(
            s.dropped + s.corrupted + s.duplicated + s.reordered > 0,
            "the impairment happened: {s:?}"
        );
    }
}

#[test]
fn loss_of_one_percent() {
    impaired(Profile { loss: 0.01, ..Profile::default() }, 11);
}

#[test]
fn reordering() {
    impaired(Profile { reorder: 0.02, ..Profile::default() }, 12);
}

#[test]
fn duplication() {
    impaired(Profile { duplicate: 0.02, ..Profile::default() }, 13);
}

#[test]
fn corruption() {
    impaired(Profile { corrupt: 0.01, ..Profile::default() }, 14);
}

#[test]
fn everything_at_once_with_delay() {
    let p = Profile {
        loss: 0.005,
        reorder: 0.01,
        duplicate: 0.01,
        corrupt: 0.005,
        delay: Duration::from_micros(100),
        jitter: Duration::from_micros(50),
    };
    impaired(p, 15);
}

/// Each impairment from 0.1% to 5% of frames, with every offload and
/// with none: every byte reads back, and no association is lost (the
/// keep alive and command timeouts are the demo's for impaired runs,
/// which allow for smoltcp's retransmission back-off).
#[test]
fn impairment_sweep_keeps_every_byte_without_a_reconnect() {
    use ulp_ddp::Caps;
    let kinds: [fn(f64) -> Profile; 4] = [
        |p| Profile { loss: p, ..Profile::default() },
        |p| Profile { reorder: p, ..Profile::default() },
        |p| Profile { duplicate: p, ..Profile::default() },
        |p| Profile { corrupt: p, ..Profile::default() },
    ];
    for (k, kind) in kinds.iter().enumerate() {
        for rate in [0.001, 0.05] {
            for offload in [Caps::ALL, Caps::NONE] {
                let o = DemoOptions {
                    size: 4 << 20,
                    impair: kind(rate),
                    offload,
                    seed: 20 + k as u64,
                    simulated: true,
                    kato: std::time::Duration::from_secs(30),
                    io_timeout: std::time::Duration::from_secs(120),
                    digests: Digests { header: true, data: true },
                    ..small(DemoOptions::default())
                };
                let report = demo::run(&o, None, &Default::default()).unwrap();
                check(&report, o.size);
            }
        }
    }
}

#[test]
fn raw_tcp_moves_data() {
    let bps =
        nvme_ddp::driver::rawtcp::wire_throughput(9000, std::time::Duration::from_millis(200))
            .unwrap();
    assert!(bps > 0.0);
}

/// `nvme-ddp ARGS` inside namespace `ns`.
fn in_ns(ns: &str, args: &[&str]) -> Command {
    let mut c = Command::new("ip");
    c.args(["netns", "exec", ns, env!("CARGO_BIN_EXE_nvme-ddp")]).args(args);
    c
}

/// Our controller (a RAM namespace of 16 MiB) over `ctrl` in namespace `ns`
/// and our host over `host` (either empty for kernel TCP) write and then
/// read back all of it, verified; returns the read's JSON report and how
/// the host's link was opened (its log line).
fn write_then_read(ns: &str, ctrl: &[&str], host: &[&str], target: &str) -> Read {
    let listen = if ctrl.is_empty() { target } else { "0.0.0.0:4420" };
    let mut args = vec!["controller", "--allow-any-host", "--listen", listen, "--ns", "ram:16M"];
    args.extend_from_slice(ctrl);
    let mut controller = in_ns(ns, &args).spawn().unwrap();
    let run = |what: &[&str]| {
        let mut args = vec!["host", "--connect", target, "--hdgst", "--ddgst", "--queues", "2"];
        args.extend_from_slice(host);
        args.push("--json");
        args.extend_from_slice(what);
        in_ns(ns, &args).env("RUST_LOG", "nvme_ddp::link=info").output().unwrap()
    };
    let write = run(&["io", "--rw", "write", "--bs", "128k", "--verify"]);
    let read = run(&["io", "--rw", "read", "--bs", "128k", "--verify"]);
    let _ = controller.kill();
    let _ = controller.wait();
    for out in [&write, &read] {
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    }
    let v: serde_json::Value = serde_json::from_slice(&read.stdout).unwrap();
    assert_eq!(v["phases"][0]["verified_bytes"], 16 << 20, "{v}");
    assert_eq!(v["phases"][0]["errors"], 0);
    let log = String::from_utf8_lossy(&read.stderr);
    let link = log.lines().filter(|l| l.contains("link open")).map(str::to_owned).collect();
    Read { report: v, link }
}

struct Read {
    report: serde_json::Value,
    link: String,
}

impl Read {
    /// The host's link was opened through `via` (every time it was).
    fn via(&self, via: &str) -> &Self {
        assert!(self.link.contains(&format!("via=\"{via}")), "{}", self.link);
        self
    }
}

/// With every offload on (the default), the host's NIC placed the whole
/// read, and nothing received was copied (what was sent, the Connect
/// data, was).
fn placed_all(v: &serde_json::Value) {
    assert_eq!(v["offload"]["nic_placed_bytes"], 16 << 20, "{v}");
    let copied = |k: &str| v["offload"][k].as_u64().unwrap();
    assert_eq!(copied("host_copy_bytes") - copied("host_tx_copy_bytes"), 0, "{v}");
}

/// The NIC received the data in TCP segments larger than the 9000-byte
/// link carries: TSO at the sender, whole at the receiver.
fn segments_beyond_the_mtu(v: &serde_json::Value) {
    let (packets, bytes) = (v["offload"]["packets"].as_u64(), v["offload"]["bytes"].as_u64());
    let (Some(packets), Some(bytes)) = (packets, bytes) else { panic!("{v}") };
    assert!(packets > 0 && bytes / packets > 9000, "{packets} packets for {bytes} bytes: {v}");
}

/// `net up` in a namespace of its own, removed however the test ends.
fn net_up(tag: &str, mtu: &str) -> Netns {
    net_up_with(tag, mtu, "redirect")
}

/// `net up` with its TAPs joined by `link` (`redirect` or `bridge`).
fn net_up_with(tag: &str, mtu: &str, link: &str) -> Netns {
    let exe = env!("CARGO_BIN_EXE_nvme-ddp");
    let ns = format!("nvmeddp-{tag}{}", std::process::id());
    let args = ["net", "up", "--netns", &ns, "--mtu", mtu, "--link", link];
    let up = Command::new(exe).args(args).output().unwrap();
    assert!(up.status.success(), "net up: {}", String::from_utf8_lossy(&up.stderr));
    Netns(ns)
}

/// The controller and host commands `net up` prints work as pasted (the
/// host's given a time, so a debug build need not read all of 1 GiB).
#[test]
#[ignore = "needs root and iproute2 for a network namespace: --include-ignored, as root"]
fn the_commands_net_up_prints_work_as_printed() {
    needs_namespaces();
    let exe = env!("CARGO_BIN_EXE_nvme-ddp");
    let ns = format!("nvmeddp-p{}", std::process::id());
    let up = Command::new(exe).args(["net", "up", "--netns", &ns]).output().unwrap();
    let _ns = Netns(ns);
    let printed = String::from_utf8_lossy(&up.stdout).into_owned();
    assert!(up.status.success(), "net up: {}", String::from_utf8_lossy(&up.stderr));
    let command = |who: &str| {
        let line = printed.lines().find_map(|l| l.strip_prefix(who));
        let line = line.unwrap_or_else(|| panic!("no {who} line: {printed}"));
        line.split_whitespace().map(str::to_owned).collect::<Vec<_>>()
    };
    let ctrl = command("controller:");
    let mut controller = Command::new(&ctrl[0]).args(&ctrl[1..]).spawn().unwrap();
    let host = command("host:");
    let mut run = Command::new(&host[0]);
    run.args(&host[1..]).args(["--time", "1", "--ctrl-loss-tmo", "0", "--json"]);
    // The controller's stack answers once it runs: the host tries again.
    let mut out = run.output().unwrap();
    for _ in 0..20 {
        if out.status.success() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(250));
        out = run.output().unwrap();
    }
    let _ = controller.kill();
    let _ = controller.wait();
    assert!(out.status.success(), "{printed}\n{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(v["phases"][0]["ios"].as_u64().unwrap() > 0, "{v}");
}

#[test]
#[ignore = "needs root and iproute2 for a network namespace: --include-ignored, as root"]
fn host_against_controller_over_tap_in_a_namespace() {
    needs_namespaces();
    let ns = net_up("t", "9000");
    let ctrl = ["--tap", "tap0", "--ip", "198.18.0.2/24"];
    let host = ["--tap", "tap1", "--ip", "198.18.0.3/24"];
    let v = write_then_read(&ns.0, &ctrl, &host, "198.18.0.2:4420").report;
    placed_all(&v);
    segments_beyond_the_mtu(&v);
}

/// Our controller on two queues of `net up`'s multi-queue TAP, a thread,
/// a stack and a NIC queue each, against our host with four I/O queues:
/// the steering program spreads the host's connections (consecutive ports)
/// over both, and the stack of queue 1 answers though the host's ARP
/// reached queue 0 only. A TAP made with one queue is refused, saying why.
/// The TAPs are on `net up --link bridge`'s bridge, most other tests' are
/// joined by a redirect.
#[test]
#[ignore = "needs root and iproute2 for a network namespace: --include-ignored, as root"]
fn controller_on_two_queues_of_a_multi_queue_tap() {
    needs_namespaces();
    let ns = net_up_with("q", "9000", "bridge");
    let ctrl = ["--tap", "tap0", "--tap-queues", "2", "--ip", "198.18.0.2/24"];
    let mut args = vec!["controller", "--allow-any-host", "--listen", "0.0.0.0:4420"];
    args.extend(["--ns", "ram:16M"]);
    args.extend_from_slice(&ctrl);
    let controller = in_ns(&ns.0, &args).stderr(std::process::Stdio::piped()).spawn().unwrap();
    let run = |what: &[&str]| {
        // A connection that cannot open fails the run at once.
        let host = ["host", "--connect", "198.18.0.2:4420", "--ddgst", "--queues", "4"];
        let host = [&host[..], &["--ctrl-loss-tmo", "0"]].concat();
        let link = ["--tap", "tap1", "--ip", "198.18.0.3/24", "--json"];
        in_ns(&ns.0, &[&host[..], &link, what].concat()).output().unwrap()
    };
    let write = run(&["io", "--rw", "write", "--bs", "128k", "--verify"]);
    let read = run(&["io", "--rw", "read", "--bs", "128k", "--verify"]);
    // (ip netns exec execs the controller: the pid is its own.)
    Command::new("kill").args(["-INT", &controller.id().to_string()]).status().unwrap();
    let log = controller.wait_with_output().unwrap();
    let log = String::from_utf8_lossy(&log.stderr);
    for out in [&write, &read] {
        assert!(out.status.success(), "{}\n{log}", String::from_utf8_lossy(&out.stderr));
    }
    let v: serde_json::Value = serde_json::from_slice(&read.stdout).unwrap();
    assert_eq!(v["phases"][0]["verified_bytes"], 16 << 20, "{v}");
    for queue in 0..2 {
        let placed = log
            .lines()
            .find(|l| {
                l.contains(&format!("controller queue {queue} (")) && l.contains("NIC placed")
            })
            .unwrap_or_else(|| panic!("no report of queue {queue}: {log}"));
        assert!(!placed.contains("NIC placed 0 B"), "queue {queue} received no data: {placed}");
    }
    let add = ["-n", &ns.0, "tuntap", "add", "dev", "tap9", "mode", "tap"];
    assert!(Command::new("ip").args(add).status().unwrap().success());
    let mut args = vec!["controller", "--allow-any-host", "--ns", "ram:1M", "--tap", "tap9"];
    args.extend(["--tap-queues", "2"]);
    args.extend_from_slice(&["--ip", "198.18.0.9/24"]);
    let out = in_ns(&ns.0, &args).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("it has one queue"), "{err}");
}

/// `bench --jobs 2` over `net up`'s TAPs: each job's host and controller
/// stack on a queue of each TAP, the host connecting from ports the TAP
/// steers back to its queue (else the answers reach the other job's stack,
/// which resets the connection); both jobs move data and verify it.
#[test]
#[ignore = "needs root and iproute2 for a network namespace: --include-ignored, as root"]
fn bench_jobs_over_the_queues_of_two_taps() {
    needs_namespaces();
    let ns = net_up("j", "9000");
    let bench = ["bench", "--tap", "tap1,tap0", "--bs", "128k", "--rw", "read", "--qd", "4"];
    let opts = ["--offload", "all", "--jobs", "2", "--reps", "1", "--no-raw"];
    let out = in_ns(&ns.0, &[&bench[..], &opts, &["--time", "0.2", "--warmup", "0.05"]].concat())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    for job in ["job 0: ", "job 1: "] {
        let line = stdout.lines().find(|l| l.contains(job)).unwrap_or_else(|| panic!("{stdout}"));
        assert!(!line.contains(" 0 IOPS"), "{line}");
    }
}

/// `bench` over two TAPs at MTU 1500 measures raw TCP over them and, in
/// the same rounds, over the in-process wire, which a goal holds them
/// against; every byte of the reads is placed.
#[test]
#[ignore = "needs root and iproute2 for a network namespace: --include-ignored, as root"]
fn bench_over_taps_measures_the_wire_beside_them() {
    needs_namespaces();
    let ns = net_up("w", "1500");
    let json = std::env::temp_dir().join(format!("nvmeddp-wire-{}.json", std::process::id()));
    let bench = ["bench", "--tap", "tap1,tap0", "--bs", "128k", "--rw", "read", "--qd", "8"];
    let opts = ["--offload", "all", "--reps", "1", "--time", "0.2", "--warmup", "0.05"];
    let json_arg = json.to_str().unwrap();
    let out = in_ns(&ns.0, &[&bench[..], &opts, &["--json", json_arg]].concat()).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("wire raw"), "{stdout}");
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let _ = std::fs::remove_file(&json);
    let p = &v["points"][0];
    assert_eq!(p["mtu"], 1500, "{v}");
    for k in ["raw_tcp_bytes_per_sec", "raw_tcp_wire_bytes_per_sec", "bytes_per_sec"] {
        assert!(p[k].as_f64().is_some_and(|r| r > 0.0), "{k}: {p}");
    }
    assert_eq!(p["offload_share"], 1.0, "{p}");
}

/// At MTU 9000 a veth's frames do not fit an AF_XDP chunk (nor will a veth
/// run XDP), so `--iface` falls back to AF_PACKET.
#[test]
#[ignore = "needs root and iproute2 for a network namespace: --include-ignored, as root"]
fn host_against_controller_over_a_veth_pair_through_af_packet() {
    over_a_veth_pair("p", "9000", "AF_PACKET");
}

/// At MTU 1500, `--iface` takes AF_XDP at both ends: an XDP program on
/// each veth hands every frame to the socket.
#[test]
#[ignore = "needs root and iproute2 for a network namespace: --include-ignored, as root"]
fn host_against_controller_over_a_veth_pair_through_af_xdp() {
    over_a_veth_pair("x", "1500", "AF_XDP");
}

/// Host and controller on `net up`'s veth pair at `mtu`, through `via`.
fn over_a_veth_pair(tag: &str, mtu: &str, via: &str) {
    needs_namespaces();
    let ns = net_up(tag, mtu);
    let ctrl = ["--iface", "veth0", "--ip", "198.18.0.2/24"];
    let host = ["--iface", "veth1", "--ip", "198.18.0.3/24"];
    let read = write_then_read(&ns.0, &ctrl, &host, "198.18.0.2:4420");
    placed_all(&read.via(via).report);
}

/// The AF_PACKET medium against Linux's own TCP on the other end of a
/// veth: the kernel sends TSO segments of up to 64 KiB unsegmented (veth
/// never cuts them) with their checksums left for a NIC, and the medium
/// must take them whole and complete the checksums.
#[test]
#[ignore = "needs root and iproute2 for a network namespace: --include-ignored, as root"]
fn af_packet_stack_against_the_linux_kernel_both_ways() {
    needs_namespaces();
    let read = against_the_linux_kernel_both_ways("k", "9000");
    let v = &read.via("AF_PACKET").report;
    placed_all(v);
    segments_beyond_the_mtu(v);
}

/// The AF_XDP medium against Linux's own TCP: the kernel's segments cross
/// the veth with their checksums left partial, and AF_XDP carries no word
/// of that; the medium finishes them, or nothing connects.
#[test]
#[ignore = "needs root and iproute2 for a network namespace: --include-ignored, as root"]
fn af_xdp_stack_against_the_linux_kernel_both_ways() {
    needs_namespaces();
    let read = against_the_linux_kernel_both_ways("y", "1500");
    placed_all(&read.via("AF_XDP").report);
}

/// Linux's TCP host against our `--iface` controller, then our `--iface`
/// host against a kernel-TCP controller, across a veth pair of `mtu`;
/// returns the second's read.
fn against_the_linux_kernel_both_ways(tag: &str, mtu: &str) -> Read {
    let ns = Netns(format!("nvmeddp-{tag}{}", std::process::id()));
    let ip = |args: &[&str]| {
        let mut all = vec!["-n", ns.0.as_str()];
        all.extend_from_slice(args);
        let out = Command::new("ip").args(&all).output().unwrap();
        assert!(out.status.success(), "ip {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    };
    let add = Command::new("ip").args(["netns", "add", &ns.0]).output().unwrap();
    assert!(add.status.success(), "{}", String::from_utf8_lossy(&add.stderr));
    ip(&["link", "set", "lo", "up"]);
    ip(&["link", "add", "veth0", "type", "veth", "peer", "veth1"]);
    for veth in ["veth0", "veth1"] {
        ip(&["link", "set", veth, "mtu", mtu, "up"]);
    }
    // The kernel's end.
    ip(&["addr", "add", "198.18.0.1/24", "dev", "veth1"]);
    let ours = ["--iface", "veth0", "--ip", "198.18.0.2/24"];
    // The kernel's host against our controller ...
    write_then_read(&ns.0, &ours, &[], "198.18.0.2:4420");
    // ... and our host against the kernel's controller: the NIC still
    // places every byte the kernel sends.
    write_then_read(&ns.0, &[], &ours, "198.18.0.1:4420")
}

/// A host on a TAP says why it cannot connect, as it does over kernel TCP:
/// a reset is a refusal, and an address nobody answers is ten seconds
/// without an answer, a wait Ctrl-C ends at once. The controller's log
/// names its link as the user typed it.
#[test]
#[ignore = "needs root and iproute2 for a network namespace: --include-ignored, as root"]
fn a_host_on_a_tap_says_why_it_cannot_connect_and_stops_when_asked() {
    needs_namespaces();
    // The kernel's side of the bridge answers (or resets) for 198.18.0.1.
    let ns = net_up_with("c", "1500", "bridge");
    let host = |to: &str| {
        let link = ["--tap", "tap1", "--ip", "198.18.0.3/24"];
        let mut c = in_ns(&ns.0, &[&["host", "--connect", to][..], &link, &["identify"]].concat());
        c.stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped());
        c
    };
    let stderr = |o: &std::process::Output| String::from_utf8_lossy(&o.stderr).into_owned();
    // The bridge's address is the kernel's, which resets a SYN to a port
    // nothing listens on.
    let o = host("198.18.0.1:4420").output().unwrap();
    assert_eq!(
        stderr(&o).trim(),
        "error: cannot connect to 198.18.0.1:4420: connection refused (answered with a reset: \
         nothing listens on that port)"
    );
    let o = host("198.18.0.9:4420").output().unwrap();
    assert_eq!(
        stderr(&o).trim(),
        "error: cannot connect to 198.18.0.9:4420: no answer in 10 s (no controller at that \
         address, or none reachable)"
    );
    // (ip netns exec execs the host: the pid is its own.)
    let waiting = host("198.18.0.9:4420").spawn().unwrap();
    std::thread::sleep(std::time::Duration::from_millis(1000));
    Command::new("kill").args(["-INT", &waiting.id().to_string()]).status().unwrap();
    let start = std::time::Instant::now();
    let o = waiting.wait_with_output().unwrap();
    assert!(start.elapsed() < std::time::Duration::from_secs(5), "{:?}", start.elapsed());
    assert_eq!(stderr(&o).trim(), "error: interrupted before the discovery log was read");
    // Over kernel TCP the connection is made without blocking the loop
    // either: the kernel would wait for its ARP to fail first.
    let args = ["host", "--connect", "198.18.0.9:4420", "identify"];
    let mut kernel = in_ns(&ns.0, &args);
    let waiting = kernel.stderr(std::process::Stdio::piped()).spawn().unwrap();
    std::thread::sleep(std::time::Duration::from_millis(500));
    Command::new("kill").args(["-INT", &waiting.id().to_string()]).status().unwrap();
    let o = waiting.wait_with_output().unwrap();
    assert_eq!(stderr(&o).trim(), "error: interrupted before the discovery log was read");

    let args = [
        "controller",
        "--allow-any-host",
        "--ns",
        "ram:1M",
        "--tap",
        "tap0",
        "--ip",
        "198.18.0.2/24",
    ];
    let mut controller = in_ns(&ns.0, &args).stderr(std::process::Stdio::piped()).spawn().unwrap();
    let mut log = std::io::BufReader::new(controller.stderr.take().unwrap());
    let mut line = String::new();
    while std::io::BufRead::read_line(&mut log, &mut line).unwrap() > 0
        && !line.contains("listening")
    {
        line.clear();
    }
    let _ = controller.kill();
    let _ = controller.wait();
    assert!(line.contains("listening on smoltcp iface=tap0 "), "{line}");
}
