//! `nvme-ddp bench` end to end on a small matrix: every point is measured,
//! the JSON carries the fields users script against with values that make
//! sense for each offload set, the charts are written, goals come from the
//! file given (and only from it), and bad arguments are refused with a
//! message.

use serde_json::Value;
use std::path::PathBuf;
use std::process::Command;

fn exe() -> Command {
    Command::new(env!("CARGO_BIN_EXE_nvme-ddp"))
}

/// The goals shipped beside the benches.
fn shipped_goals() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("benches/goals.json")
}

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("nvme-ddp-bench-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

const FIELDS: [&str; 19] = [
    "bs",
    "rw",
    "qd",
    "mtu",
    "ddgst",
    "offload",
    "iops",
    "bytes_per_sec",
    "lat_p50_us",
    "lat_p99_us",
    "host_cpu_ns_per_io",
    "nic_cpu_ns_per_io",
    "controller_cpu_ns_per_io",
    "harness_cpu_ns_per_io",
    "process_cpu_ns_per_io",
    "host_copy_bytes_per_io",
    "host_crc_bytes_per_io",
    "nic_placed_bytes_per_io",
    "raw_tcp_bytes_per_sec",
];

#[test]
fn a_small_matrix_gives_json_charts_and_a_table() {
    let dir = scratch("matrix");
    let json = dir.join("points.json");
    let plots = dir.join("charts");
    let out = exe()
        .args(["bench", "--bs", "4k,128k", "--rw", "read,write", "--qd", "4", "--ddgst", "on"])
        .args([
            "--offload",
            "none,all",
            "--mtu",
            "9000",
            "--reps",
            "2",
            "--time",
            "0.05",
            "--warmup",
            "0.01",
        ])
        .arg("--json")
        .arg(&json)
        .arg("--plot")
        .arg(&plots)
        .arg("--goals")
        .arg(shipped_goals())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("host ns/IO"), "a table: {stdout}");
    // Throughput in the charts' unit, binary as sizes are.
    assert!(stdout.contains(" MiB/s ") && !stdout.contains(" MB/s "), "{stdout}");
    assert!(stdout.contains("target read host CPU/IO"), "targets checked: {stdout}");

    let report: Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let machine = &report["machine"];
    assert!(machine["cores"].as_u64().unwrap() >= 1 && machine["cpu_model"].is_string());
    assert!(machine["baseline_spread"].as_f64().unwrap() >= 0.0, "{machine}");
    assert!(report["commit"].as_str().is_some_and(|c| !c.is_empty()), "{report}");
    assert_eq!((report["reps"].as_u64(), report["time_s"].as_f64()), (Some(2), Some(0.05)));
    assert_eq!(report["spread_limit"].as_f64(), Some(0.1));
    for t in report["targets"].as_array().unwrap() {
        let v = t["verdict"].as_str().unwrap();
        assert!(["met", "missed", "inconclusive"].contains(&v), "{t}");
        if t["spread"].as_f64().unwrap() > 0.1 {
            assert_eq!(v, "inconclusive", "no verdict on a noisy point: {t}");
        }
    }
    let points = report["points"].as_array().unwrap();
    assert_eq!(points.len(), 2 * 2 * 2, "every point of the matrix");
    for p in points {
        for f in FIELDS {
            assert!(p.get(f).is_some(), "{f} missing from {p}");
        }
        let num = |f: &str| p[f].as_f64().unwrap();
        let (bs, rw, offload) =
            (num("bs"), p["rw"].as_str().unwrap(), p["offload"].as_str().unwrap());
        assert!(num("iops") > 0.0 && num("bytes_per_sec") > 0.0, "{p}");
        assert!(
            (num("bytes_per_sec") / num("iops") - bs).abs() < 1.0,
            "throughput is IOPS x block size: {p}"
        );
        assert!(num("lat_p99_us") >= num("lat_p50_us"), "{p}");
        assert!(num("host_cpu_ns_per_io") > 0.0 && num("raw_tcp_bytes_per_sec") > 0.0, "{p}");
        let steady = num("bytes_per_sec_spread") <= 0.1 && num("host_cpu_spread") <= 0.1;
        for f in ["iops", "bytes_per_sec", "host_cpu_ns_per_io"] {
            let r = &p[format!("{f}_range")];
            let (lo, hi) = (r[0].as_f64().unwrap(), r[1].as_f64().unwrap());
            assert!(lo <= num(f) && num(f) <= hi, "{f} within its range: {p}");
        }
        assert_eq!(p["steady"].as_bool(), Some(steady), "{p}");
        match (rw, offload) {
            ("read", "none") | ("write", "none") => {
                assert_eq!(num("host_copy_bytes_per_io"), bs, "{p}");
                assert_eq!(num("host_crc_bytes_per_io"), bs, "{p}");
                assert_eq!(num("nic_placed_bytes_per_io"), 0.0, "{p}");
            }
            ("read", "all") if bs >= 32768.0 => {
                assert_eq!(num("host_copy_bytes_per_io"), 0.0, "{p}");
                assert_eq!(num("host_crc_bytes_per_io"), 0.0, "{p}");
                assert_eq!(num("nic_placed_bytes_per_io"), bs, "{p}");
                assert!(num("nic_cpu_ns_per_io") > 0.0, "{p}");
            }
            ("write", "all") => {
                // The NIC gathers the data from the host's buffer, and digests it.
                assert_eq!(num("host_copy_bytes_per_io"), 0.0, "{p}");
                assert_eq!(num("host_crc_bytes_per_io"), 0.0, "{p}");
            }
            _ => {}
        }
    }
    for name in
        ["read-throughput", "read-iops", "read-host-cpu", "write-throughput", "write-host-cpu"]
    {
        let svg = std::fs::read_to_string(plots.join(format!("{name}.svg"))).unwrap();
        assert!(svg.contains("<svg") && svg.contains("all") && svg.contains("none"), "{name}.svg");
        // The panel says what it holds, and each block size is labelled once.
        assert!(svg.contains("qd 4, MTU 9000, data digest on"), "{name}.svg");
        for label in ["\n4k\n", "\n128k\n"] {
            assert_eq!(svg.matches(label).count(), 1, "{label:?} in {name}.svg");
        }
    }
    // IOPS spans orders of magnitude across block sizes: on a linear axis
    // the large blocks' points would sit on zero.
    let svg = std::fs::read_to_string(plots.join("read-iops.svg")).unwrap();
    assert!(svg.contains("thousand IOPS (log scale)"), "read-iops.svg");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Ctrl-C ends the matrix within the run under way, raw TCP's included,
/// with what was measured.
#[test]
fn ctrl_c_stops_the_bench_in_the_run_under_way() {
    let mut bench = exe()
        .args(["bench", "--bs", "4k", "--rw", "read", "--qd", "1", "--offload", "none,all"])
        .args(["--mtu", "1500", "--reps", "3", "--time", "5", "--warmup", "0"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(1500));
    // SAFETY: kill has no memory preconditions; the pid is our child's.
    unsafe { libc::kill(bench.id() as libc::pid_t, libc::SIGINT) };
    let start = std::time::Instant::now();
    while bench.try_wait().unwrap().is_none() {
        if start.elapsed() > std::time::Duration::from_secs(10) {
            let _ = bench.kill();
            panic!("the bench ran on after Ctrl-C");
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let out = bench.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(err.contains("error: interrupted in round 1 of 3"), "{err}");
}

/// NVMe/TCP against NVMe/RDMA on one matrix: RDMA's classic registration
/// costs three calls per I/O and one-shot one, RDMA reads with every
/// offload leave the host nothing to copy or digest, and the charts draw a
/// line per transport and offload set.
#[test]
fn tcp_and_rdma_on_one_matrix() {
    let dir = scratch("transports");
    let json = dir.join("points.json");
    let plots = dir.join("charts");
    let out = exe()
        .args(["bench", "--transport", "tcp,rdma", "--bs", "512,128k", "--rw", "read"])
        .args(["--qd", "4", "--ddgst", "on", "--offload", "none,classic,all", "--mtu", "9000"])
        .args(["--reps", "1", "--time", "0.05", "--warmup", "0.01"])
        .arg("--json")
        .arg(&json)
        .arg("--plot")
        .arg(&plots)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    let report: Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let points = report["points"].as_array().unwrap();
    assert_eq!(points.len(), 2 * 2 * 3, "every point of the matrix");
    for p in points {
        let num = |f: &str| p[f].as_f64().unwrap();
        let (tr, bs, offload) =
            (p["transport"].as_str().unwrap(), num("bs"), p["offload"].as_str().unwrap());
        let calls = num("control_calls_per_io");
        match (tr, offload) {
            ("rdma", "classic") if bs >= 32768.0 => assert!(calls >= 3.0, "{p}"),
            ("rdma", "all") if bs >= 32768.0 => {
                assert!((calls - 1.0).abs() < 0.05, "one call per I/O: {p}");
                // The 64-byte capsule and 16-byte response; no payload.
                assert!(num("host_copy_bytes_per_io") <= 80.0, "{p}");
                assert_eq!(num("host_crc_bytes_per_io"), 0.0, "{p}");
                assert_eq!(num("nic_placed_bytes_per_io"), bs, "{p}");
            }
            // RDMA's host also digests the response Sends.
            (_, "none") => assert!(num("host_crc_bytes_per_io") >= bs, "{p}"),
            _ => {}
        }
    }
    let svg = std::fs::read_to_string(plots.join("read-iops.svg")).unwrap();
    for line in ["tcp none", "tcp all", "rdma none", "rdma classic", "rdma all"] {
        assert!(svg.contains(line), "read-iops.svg has a line for {line}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// The bench holds no goals of its own: without `--goals` it reports
/// measures and no verdict; with a file, the verdicts are the file's goals;
/// a file that cannot be read or makes no sense is refused before anything
/// runs.
#[test]
fn goals_come_only_from_the_file_given() {
    let dir = scratch("goals");
    let json = dir.join("points.json");
    let run = |goals: Option<&std::path::Path>| {
        let mut cmd = exe();
        cmd.args(["bench", "--bs", "128k", "--rw", "read", "--qd", "4", "--ddgst", "on"])
            .args(["--offload", "none,all", "--mtu", "9000", "--reps", "1", "--no-raw"])
            .args(["--time", "0.05", "--warmup", "0.01", "--json"])
            .arg(&json);
        if let Some(g) = goals {
            cmd.arg("--goals").arg(g);
        }
        cmd.output().unwrap()
    };
    let out = run(None);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(!stdout.contains("target "), "no goals given, no verdicts: {stdout}");
    let report: Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert_eq!(report["targets"].as_array().map(Vec::len), Some(0), "{report}");

    let mine = dir.join("mine.json");
    std::fs::write(
        &mine,
        r#"{"goals": [{"what": "read NIC CPU/IO, all vs none", "metric": "nic_cpu_ns_per_io",
            "of": {"rw": "read", "offload": "all"}, "over": {"offload": "none"},
            "at_least": 0.000001}]}"#,
    )
    .unwrap();
    let out = run(Some(&mine));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    let targets: Vec<&str> = stdout.lines().filter(|l| l.starts_with("target ")).collect();
    assert_eq!(targets.len(), 1, "{stdout}");
    assert!(
        targets[0].starts_with(
            "target read NIC CPU/IO, all vs none (128k, data digest, qd 4, mtu 9000): >= 0.000001x"
        ),
        "{stdout}"
    );
    let report: Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert_eq!(report["targets"].as_array().map(Vec::len), Some(1), "{report}");

    std::fs::write(&mine, r#"{"goals": [{"what": "x", "metric": "speed", "at_most": 1}]}"#)
        .unwrap();
    for (goals, says) in
        [(mine.clone(), "unknown variant `speed`"), (dir.join("none.json"), "cannot read goals")]
    {
        let out = run(Some(&goals));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{goals:?} accepted");
        assert!(stderr.contains(says), "{goals:?}: {stderr}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// `--jobs 1,2`: the two-job point runs two hosts at once, each against
/// a controller stack of its own over one target, both measured at the
/// same time; the table and the JSON show each job and the total, and a
/// goal may compare points by their jobs. Random reads, as the scaling
/// goals measure, are checked against the pattern the namespace was
/// filled with, as sequential ones are.
#[test]
fn jobs_run_at_once_and_report_each_and_the_total() {
    let dir = scratch("jobs");
    let json = dir.join("points.json");
    let goals = dir.join("goals.json");
    std::fs::write(
        &goals,
        r#"{"goals": [{"what": "controller CPU/IO, 2 jobs vs 1", "metric": "controller_cpu_ns_per_io",
            "of": {"jobs": 2}, "over": {"jobs": 1}, "at_most": 1000}]}"#,
    )
    .unwrap();
    let out = exe()
        .args(["bench", "--bs", "4k", "--rw", "randread", "--qd", "4", "--ddgst", "on"])
        .args(["--offload", "all", "--mtu", "9000", "--jobs", "1,2", "--reps", "1", "--no-raw"])
        .args(["--time", "0.2", "--warmup", "0.05", "--json"])
        .arg(&json)
        .arg("--goals")
        .arg(&goals)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("job 0: ") && stdout.contains("job 1: "), "{stdout}");
    assert!(stdout.contains("target controller CPU/IO, 2 jobs vs 1"), "{stdout}");
    let report: Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let points = report["points"].as_array().unwrap();
    assert_eq!(points.len(), 2, "{report}");
    assert_eq!(points[0]["jobs"], 1);
    assert!(points[0].get("per_job").is_none(), "one job is the total: {}", points[0]);
    let two = &points[1];
    assert_eq!(two["jobs"], 2);
    let jobs = two["per_job"].as_array().unwrap();
    assert_eq!(jobs.len(), 2, "{two}");
    let num = |v: &Value, f: &str| v[f].as_f64().unwrap();
    for j in jobs {
        for f in ["iops", "host_cpu_ns_per_io", "nic_cpu_ns_per_io", "controller_cpu_ns_per_io"] {
            assert!(num(j, f) > 0.0, "{f}: {j}");
        }
    }
    let sum: f64 = jobs.iter().map(|j| num(j, "iops")).sum();
    assert!((sum - num(two, "iops")).abs() <= 1e-6 * sum, "the total is the jobs' sum: {two}");
    // The jobs' warm-ups checked what they read. (Not more than one job
    // checks in the same warm-up: with both CPUs busy elsewhere, as in CI,
    // two jobs may get through less than one did.)
    assert!(num(two, "verified_bytes") > 0.0, "{two}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bad_arguments_are_refused_with_a_message() {
    for (args, says) in [
        (&["--bs", "1000"][..], "multiples of 512"),
        (&["--offload", "turbo"], "unknown offload \"turbo\""),
        (&["--ddgst", "maybe"], "use on or off"),
        (&["--qd", "0"], "must be 1..=1024"),
        (&["--mtu", "100"], "576"),
        (&["--time", "0"], "--time"),
        (&["--bs", ""], "empty"),
        (&["--tap", "tap0"], "HOSTTAP,CTRLTAP"),
        (&["--loss", "1.5"], "not a probability"),
        (&["--loss", "0,x"], "not a probability"),
        (&["--reorder=-0.1"], "not a probability"),
        (&["--duplicate", ""], "empty"),
        (&["--jobs", "0"], "jobs must be 1..=256"),
        (&["--jobs", "1,x"], "jobs must be 1..=256"),
        (&["--tap", "nvmeddp-none0,nvmeddp-none1"], "no network interface"),
    ] {
        let out = exe().arg("bench").args(args).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} accepted");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
    }
}

/// The loss rate is an axis of the matrix: each point says its own, raw
/// TCP runs under it too, a lossy point still completes I/O (its data
/// digests checked, the host fails on a bad one, and every block its
/// warm-up read checked against what the namespace holds), and the charts
/// against loss are drawn. Nothing here is timed: a lossy run is slow.
#[test]
fn a_loss_sweep_gives_a_point_and_charts_at_each_rate() {
    let dir = scratch("loss");
    let json = dir.join("points.json");
    let plots = dir.join("charts");
    let out = exe()
        .args(["bench", "--bs", "128k", "--rw", "read", "--qd", "4", "--ddgst", "on"])
        .args(["--offload", "none,all", "--mtu", "9000", "--loss", "0,0.01", "--seed", "7"])
        .args(["--reps", "2", "--time", "0.2", "--warmup", "0.05", "--json"])
        .arg(&json)
        .arg("--plot")
        .arg(&plots)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("loss%") && stdout.contains("placed%"), "a table: {stdout}");
    let report: Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert_eq!(report["seed"].as_u64(), Some(7), "{report}");
    let points = report["points"].as_array().unwrap();
    assert_eq!(points.len(), 2 * 2, "every point of the matrix");
    let mut losses: Vec<f64> = points.iter().map(|p| p["loss"].as_f64().unwrap()).collect();
    losses.dedup();
    assert_eq!(losses, [0.0, 0.01], "each point says its loss rate");
    for p in points {
        let num = |f: &str| p[f].as_f64().unwrap();
        assert_eq!((num("reorder"), num("duplicate")), (0.0, 0.0), "{p}");
        assert!(num("iops") > 0.0 && num("bytes_per_sec") > 0.0, "{p}");
        assert!((num("bytes_per_sec") / num("iops") - 131072.0).abs() < 1.0, "{p}");
        assert!(num("lat_p99_us") >= num("lat_p50_us"), "{p}");
        assert!(num("verified_bytes") >= 131072.0, "the warm-up's reads were checked: {p}");
        let share = num("offload_share");
        assert!((0.0..=1.0).contains(&share), "{p}");
        for f in ["lat_p99_us", "offload_share", "raw_tcp_bytes_per_sec"] {
            let r = &p[format!("{f}_range")];
            let (lo, hi) = (r[0].as_f64().unwrap(), r[1].as_f64().unwrap());
            assert!(lo <= num(f) && num(f) <= hi, "{f} within its range: {p}");
        }
        match (p["offload"].as_str().unwrap(), num("loss")) {
            ("none", _) => assert_eq!(share, 0.0, "{p}"),
            ("all", 0.0) => assert_eq!(share, 1.0, "{p}"),
            _ => {}
        }
        if num("loss") == 0.0 {
            assert!(num("raw_tcp_bytes_per_sec") > 0.0, "{p}");
        }
    }
    for m in ["throughput", "p99-latency", "host-cpu", "placed"] {
        let svg = std::fs::read_to_string(plots.join(format!("read-loss-{m}.svg"))).unwrap();
        assert!(svg.contains("against loss") && svg.contains("\n1%\n"), "read-loss-{m}.svg");
        assert!(svg.contains("none") && svg.contains("all"), "read-loss-{m}.svg");
        assert_eq!(svg.contains("raw TCP"), m == "throughput", "read-loss-{m}.svg");
    }
    // By block size, a panel for each loss rate.
    let svg = std::fs::read_to_string(plots.join("read-throughput.svg")).unwrap();
    assert!(svg.contains("data digest on, loss 1%"), "read-throughput.svg");
    let _ = std::fs::remove_dir_all(&dir);
}

/// The host's and the NIC's CPU are CPU time, read from thread clocks, not
/// wall time: with both cores kept busy by other threads they stay
/// positive, and with the controller's (and, in lockstep, the harness's own
/// clock reads) they account for the whole process's CPU time. Both ways of
/// running: in lockstep on one thread, and on threads of their own.
#[test]
fn cpu_accounting_holds_with_both_cores_busy() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    let stop = Arc::new(AtomicBool::new(false));
    let busy: Vec<_> = (0..2)
        .map(|_| {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let give_up = std::time::Instant::now() + std::time::Duration::from_secs(300);
                let mut x = 0u64;
                while !stop.load(Ordering::Relaxed) && std::time::Instant::now() < give_up {
                    x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
                }
            })
        })
        .collect();
    let dir = scratch("busy");
    let mut reports = Vec::new();
    for mode in [None, Some("--threads")] {
        let json = dir.join("points.json");
        let out = exe()
            .args(["bench", "--bs", "128k", "--rw", "read,write", "--qd", "8", "--ddgst", "on"])
            .args(["--offload", "none,all", "--mtu", "9000", "--reps", "1"])
            .args(["--time", "0.2", "--warmup", "0.05", "--json"])
            .arg(&json)
            .args(mode)
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let report: Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
        reports.push(report);
    }
    stop.store(true, Ordering::Relaxed);
    for t in busy {
        t.join().unwrap();
    }
    for (report, mode) in reports.iter().zip(["lockstep", "threads"]) {
        assert_eq!(report["mode"], mode);
        let points = report["points"].as_array().unwrap();
        assert_eq!(points.len(), 4);
        for p in points {
            let num = |f: &str| p[f].as_f64().unwrap();
            let (host, nic, ctrl) = (
                num("host_cpu_ns_per_io"),
                num("nic_cpu_ns_per_io"),
                num("controller_cpu_ns_per_io"),
            );
            assert!(host > 0.0 && nic > 0.0 && ctrl > 0.0, "{mode}: {p}");
            // The parts are all that works during the measurement; their
            // clocks and the process's are read a moment apart.
            let parts = host + nic + ctrl + num("harness_cpu_ns_per_io");
            let share = parts / num("process_cpu_ns_per_io");
            assert!((0.9..=1.05).contains(&share), "{mode}: parts are {share:.3} of the CPU: {p}");
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// `--meter instructions` says what it needs, in one line, before any
/// work: Valgrind (here hidden from it), a build with its client requests,
/// and one job in lockstep on the in-process wire.
#[test]
fn the_instructions_meter_names_what_it_needs_before_any_work() {
    let empty = scratch("no-valgrind");
    let out = exe()
        .args(["bench", "--meter", "instructions", "--bs", "4k", "--rw", "read", "--qd", "1"])
        .env("PATH", &empty)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("apt-get install valgrind"), "{stderr}");
    if !cfg!(feature = "valgrind") {
        assert!(stderr.contains("cargo build --release --features valgrind"), "{stderr}");
    }
    assert_eq!(stderr.trim().lines().count(), 1, "one line: {stderr}");
    assert!(out.stdout.is_empty(), "no work done: {}", String::from_utf8_lossy(&out.stdout));
    for (args, says) in [(&["--jobs", "2"][..], "drop --jobs"), (&["--threads"], "drop --threads")]
    {
        let out = exe().args(["bench", "--meter", "instructions"]).args(args).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} accepted");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
    }
    let out = exe().args(["bench", "--meter", "seconds"]).output().unwrap();
    assert!(String::from_utf8_lossy(&out.stderr).contains("use cpu or instructions"));
}

/// The instructions meter counts each part of each point under Valgrind:
/// every count is there, the same from one repetition to the next to
/// within 0.1%, what time would measure is left out, and the offloads'
/// savings show in instructions as they do in copies.
#[test]
#[cfg_attr(not(feature = "valgrind"), ignore = "needs --features valgrind (and Valgrind)")]
fn the_instructions_meter_counts_every_part_and_repeats() {
    let dir = scratch("counted");
    let json = dir.join("points.json");
    let out = exe()
        .args(["bench", "--meter", "instructions", "--bs", "128k", "--rw", "read", "--qd", "8"])
        .args(["--offload", "all,none", "--mtu", "9000", "--reps", "2", "--ios", "64"])
        .arg("--json")
        .arg(&json)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("host Ir/IO") && stdout.contains("counted by Valgrind"), "{stdout}");
    let report: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(report["meter"], "instructions");
    let points = report["points"].as_array().unwrap();
    assert_eq!(points.len(), 2);
    let f = |p: &Value, k: &str| p[k].as_f64().unwrap_or_else(|| panic!("{k} in {p}"));
    for p in points {
        assert_eq!(p["meter"], "instructions");
        for part in ["host", "nic", "controller", "raw_tcp_sender", "raw_tcp_receiver"] {
            let ir = f(p, &format!("{part}_instructions_per_io"));
            assert!(ir > 1000.0, "{part}: {ir}");
            let cycles = f(p, &format!("{part}_est_cycles_per_io"));
            assert!(cycles >= ir, "{part}: every instruction is fetched at least once");
            for m in ["data_reads", "data_writes", "l1_misses", "ll_misses", "branch_misses"] {
                assert!(p.get(format!("{part}_{m}_per_io")).is_some(), "{part}_{m}");
            }
        }
        for part in ["host", "nic", "controller"] {
            let spread = f(p, &format!("{part}_instructions_spread"));
            assert!(spread <= 0.001, "{part} repeats within 0.1%: {spread}");
        }
        assert_eq!((f(p, "bytes_per_sec"), f(p, "host_cpu_ns_per_io")), (0.0, 0.0));
        assert_eq!(f(p, "ios"), 64.0);
    }
    let by = |o: &str| points.iter().find(|p| p["offload"] == o).unwrap();
    let (all, none) = (by("all"), by("none"));
    assert_eq!(f(none, "host_copy_bytes_per_io"), 131072.0);
    assert_eq!(f(all, "host_copy_bytes_per_io"), 0.0);
    let ratio = f(all, "host_instructions_per_io") / f(none, "host_instructions_per_io");
    assert!(ratio < 0.5, "placement and CRC offload save most of the host's work: {ratio}");
}

/// The demo's savings line counted by Valgrind: in host instructions, two
/// runs each, which repeat.
#[test]
#[cfg_attr(not(feature = "valgrind"), ignore = "needs --features valgrind (and Valgrind)")]
fn the_instructions_meter_counts_the_demo_savings() {
    let out = exe()
        .args(["demo", "--size", "4M", "--meter", "instructions", "--eta", "never"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    let line = stdout.lines().find(|l| l.contains("offloads saved")).expect("a savings line");
    assert!(line.contains("offloads saved: host instructions "), "{line}");
    assert!(
        line.contains("counted by Valgrind on a clean wire: randrw 128k, 2 runs each"),
        "{line}"
    );
    assert!(line.contains("spread 0.0"), "counts repeat: {line}");
    assert!(!line.contains("too noisy"), "{line}");
}
