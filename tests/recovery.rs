//! Error recovery as users meet it: the controller process is killed in
//! the middle of a verified workload and started again on the same file
//! and address; the host reconnects and finishes, and every write it was
//! told had completed reads back. Over kernel TCP, and over smoltcp on TAP
//! devices in a network namespace.

mod common;

use common::{Netns, needs_namespaces};
use nvme_ddp::app::HostApp;
use nvme_ddp::driver::kernel_tcp::run_host;
use nvme_of::Instant;
use nvme_of::host::{Host, HostConfig, HostEvent, Io, IoKind};
use nvme_of::nvme::Status;
use std::io::{BufRead, BufReader};
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;
use ulp_ddp::IoBuf;

const EXE: &str = env!("CARGO_BIN_EXE_nvme-ddp");
const NQN: &str = "nqn.2026-11.io.nvme-ddp:target";
/// The namespace: large enough that a 4 KiB write pass at queue depth 1
/// runs for seconds, so the kill lands in its middle.
const SIZE: u64 = 128 << 20;

/// A file namespace of `SIZE` zero bytes, removed with the guard.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Self {
        let path = std::env::temp_dir().join(format!("nvmeddp-{name}-{}.img", std::process::id()));
        std::fs::File::create(&path).unwrap().set_len(SIZE).unwrap();
        Self(path)
    }

    fn ns(&self) -> String {
        format!("file:{}", self.0.display())
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// A port nothing listens on now.
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// Kills the process however the test ends.
struct Killed(Child);

impl Killed {
    /// SIGKILL, and reap it.
    fn kill(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Drop for Killed {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Start `ctrl` and wait until it takes connections on `addr` (from
/// wherever `probe` runs).
fn start(mut ctrl: Command, ready: &dyn Fn() -> bool) -> Killed {
    let child = Killed(ctrl.stderr(Stdio::null()).spawn().unwrap());
    for _ in 0..200 {
        if ready() {
            return child;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("the controller did not come up");
}

/// Run a verified 4 KiB write pass over the namespace with `host`, kill the
/// controller once the pass is under way, start it again, and let the host
/// finish; then read the namespace back with `host` and verify it.
fn kill_mid_write(
    mut ctrl: impl FnMut() -> Command,
    ready: &dyn Fn() -> bool,
    host: impl Fn(&[&str]) -> Command,
) {
    let mut controller = start(ctrl(), ready);
    let mut write = host(&["--qd", "1", "--eta", "always", "io", "--rw", "write", "--bs", "4k"]);
    let mut write =
        write.arg("--verify").stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    // Progress lines come once a second; the second one is well inside
    // the pass.
    let mut progress = BufReader::new(write.stderr.take().unwrap());
    let mut seen = Vec::new();
    let mut line = String::new();
    while progress.read_line(&mut line).unwrap() > 0 {
        seen.push(std::mem::take(&mut line));
        if seen.iter().filter(|l| l.contains("% ")).count() == 2 {
            break;
        }
    }
    assert!(seen.len() >= 2, "no progress from the host: {seen:?}");
    controller.kill();
    std::thread::sleep(Duration::from_millis(300));
    let _controller = start(ctrl(), ready);
    let rest = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = std::io::Read::read_to_string(&mut progress, &mut s);
        s
    });
    let out = write.wait_with_output().unwrap();
    let stderr = format!("{}{}", seen.concat(), rest.join().unwrap());
    assert!(out.status.success(), "the write pass failed: {stderr}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["phases"][0]["bytes"], SIZE, "{v}");
    assert_eq!(v["phases"][0]["errors"], 0, "{v}");
    assert_eq!(v["recovery"]["reconnects"], 1, "{v}\n{stderr}");
    // Whether a write was in flight at the kill depends on timing (at QD 1
    // the host may see the connection close between two writes); what
    // was in flight went again, and the read pass shows nothing was lost.

    let read = host(&["io", "--rw", "read", "--bs", "128k", "--verify"]).output().unwrap();
    assert!(read.status.success(), "{}", String::from_utf8_lossy(&read.stderr));
    let v: serde_json::Value = serde_json::from_slice(&read.stdout).unwrap();
    assert_eq!(v["phases"][0]["verified_bytes"], SIZE, "every byte written reads back: {v}");
    assert_eq!(
        (&v["phases"][0]["errors"], &v["phases"][0]["verify_failures"]),
        (&0.into(), &0.into())
    );
}

fn host_args<'a>(connect: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let mut v = vec!["host", "--connect", connect, "--nqn", NQN, "--json"];
    v.extend_from_slice(&["--reconnect-delay", "0.2", "--ctrl-loss-tmo", "60", "--kato", "2"]);
    v.extend_from_slice(extra);
    v
}

/// [`kill_mid_write`] over kernel TCP on loopback, the host's `io` verbs
/// given `io_extra` after their own options.
fn kill_mid_write_over_kernel_tcp(name: &str, host_extra: &[&str], io_extra: &[&str]) {
    let ns = Scratch::new(name);
    let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let listen = addr.to_string();
    let ctrl = || {
        let mut c = Command::new(EXE);
        c.args(["controller", "--allow-any-host", "--listen", &listen, "--ns", &ns.ns()]);
        c
    };
    let ready = || std::net::TcpStream::connect(addr).is_ok();
    kill_mid_write(ctrl, &ready, |extra| {
        let mut c = Command::new(EXE);
        c.args(host_args(&listen, &[host_extra, extra, io_extra].concat()));
        c
    });
}

/// A timed run ends at its time, as fio's does, though its controller died
/// and the host would go on reconnecting for ctrl-loss-tmo's ten minutes;
/// the run did not do what was asked, and fails saying why, after
/// printing what it did.
#[test]
fn a_timed_run_ends_at_its_time_when_its_controller_dies_and_fails_saying_why() {
    let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let listen = addr.to_string();
    let mut ctrl = Command::new(EXE);
    ctrl.args(["controller", "--allow-any-host", "--listen", &listen, "--ns", "ram:64M"]);
    let mut controller = start(ctrl, &|| std::net::TcpStream::connect(addr).is_ok());
    let mut host = Command::new(EXE)
        .args(["host", "--connect", &listen, "--json", "--eta", "always", "--reconnect-delay"])
        .args(["0.5", "io", "--rw", "randwrite", "--bs", "4k", "--time", "3"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Progress lines come once a second, the first at the start: the
    // second is a second into the run.
    let mut progress = BufReader::new(host.stderr.take().unwrap());
    let (mut line, mut lines) = (String::new(), 0);
    while lines < 2 && progress.read_line(&mut line).unwrap() > 0 {
        lines += usize::from(line.contains("% "));
        line.clear();
    }
    assert_eq!(lines, 2, "no progress from the host");
    let killed = std::time::Instant::now();
    controller.kill();
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut progress, &mut rest).unwrap();
    let out = host.wait_with_output().unwrap();
    // Well before ctrl-loss-tmo (600 s): the run's 3 s, give or take.
    assert!(killed.elapsed() < Duration::from_secs(30), "ran on: {:?}", killed.elapsed());
    assert!(!out.status.success(), "a run that lost its controller exited 0: {rest}");
    assert!(rest.contains("association lost, reconnecting"), "the progress line: {rest}");
    let error = rest.lines().last().unwrap_or_default();
    assert!(
        error.starts_with("error: the run's time was up with no association")
            && error.contains("in flight given up"),
        "{rest}"
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(v["phases"][0]["ios"].as_u64().unwrap() > 0, "what it did is reported: {v}");
    assert_eq!(v["recovery"]["lost"], 1, "{v}");
}

#[test]
fn a_killed_controller_comes_back_and_the_verified_write_finishes_over_kernel_tcp() {
    kill_mid_write_over_kernel_tcp("ktcp", &[], &[]);
}

/// The same with the host's two I/O queues in sets, a thread each
/// (`io --cpus`): the sets lose their queues with the controller, the main
/// thread makes the association again, and each set takes its new queue
/// and submits again what did not complete.
#[test]
fn a_killed_controller_comes_back_to_queues_on_threads_of_their_own() {
    let cpus = match std::thread::available_parallelism().map_or(1, usize::from) {
        1 => "0",
        _ => "0,1",
    };
    kill_mid_write_over_kernel_tcp("sets", &["--queues", "2"], &["--cpus", cpus]);
}

#[test]
#[ignore = "needs root and iproute2 for a network namespace: --include-ignored, as root"]
fn a_killed_controller_comes_back_and_the_verified_write_finishes_over_tap() {
    needs_namespaces();
    let ns = Scratch::new("tap");
    let netns = format!("nvmeddp-r{}", std::process::id());
    // On the bridge: the kernel's side of it probes the controller.
    let up = ["net", "up", "--netns", &netns, "--mtu", "9000", "--link", "bridge"];
    let up = Command::new(EXE).args(up).output();
    let up = up.unwrap();
    assert!(up.status.success(), "net up: {}", String::from_utf8_lossy(&up.stderr));
    let _guard = Netns(netns.clone());
    let in_ns = |args: &[&str]| {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &netns, EXE]).args(args);
        c
    };
    let ctrl = || {
        let tap = ["controller", "--allow-any-host", "--tap", "tap0", "--ip", "198.18.0.2/24"];
        let mut c = in_ns(&tap);
        c.args(["--ns", &ns.ns()]);
        c
    };
    // The controller's smoltcp stack answers on the bridge once it runs:
    // a kernel TCP connect from the namespace reaches it.
    let ready = || {
        Command::new("ip")
            .args(["netns", "exec", &netns, "bash", "-c", "exec 3<>/dev/tcp/198.18.0.2/4420"])
            .status()
            .is_ok_and(|s| s.success())
    };
    kill_mid_write(ctrl, &ready, |extra| {
        let tap = ["--tap", "tap1", "--ip", "198.18.0.3/24"];
        let mut args = host_args("198.18.0.2:4420", extra);
        args.splice(1..1, tap);
        in_ns(&args)
    });
}

/// Writes with FUA and a Flush, one after another, then ends the run.
struct Durable {
    writes: Vec<(u64, Vec<u8>)>,
    next: usize,
    flushed: bool,
    done: bool,
    error: Option<String>,
}

impl Durable {
    fn submit_next(&mut self, host: &mut Host, now: Instant) {
        let io = match self.writes.get(self.next) {
            Some((slba, data)) => {
                let buf = Some(IoBuf::from_vec(data.clone()));
                // Every other write is FUA; the Flush covers the rest.
                let kind =
                    if self.next.is_multiple_of(2) { IoKind::WriteFua } else { IoKind::Write };
                Io { kind, nsid: 1, slba: *slba, nlb: (data.len() / 512) as u32, buf, tag: 0 }
            }
            None if !self.flushed => {
                self.flushed = true;
                Io { kind: IoKind::Flush, nsid: 1, slba: 0, nlb: 0, buf: None, tag: 0 }
            }
            None => {
                self.done = true;
                return;
            }
        };
        self.next += 1;
        host.submit(1, io, now).unwrap();
    }
}

impl HostApp for Durable {
    fn on_event(&mut self, host: &mut Host, event: HostEvent, now: Instant) {
        match event {
            HostEvent::Ready => self.submit_next(host, now),
            HostEvent::Completion { status, .. } if status == Status::SUCCESS => {
                self.submit_next(host, now)
            }
            HostEvent::Completion { status, .. } => {
                self.error = Some(status.to_string());
                self.done = true;
            }
            HostEvent::Failed(e) => {
                self.error = Some(e.to_string());
                self.done = true;
            }
            _ => {}
        }
    }

    fn is_done(&self) -> bool {
        self.done
    }

    fn error(&self) -> Option<String> {
        self.error.clone()
    }
}

fn file_at(path: &Path, offset: u64, len: usize) -> Vec<u8> {
    use std::os::unix::fs::FileExt;
    let mut buf = vec![0u8; len];
    std::fs::File::open(path).unwrap().read_exact_at(&mut buf, offset).unwrap();
    buf
}

/// FUA writes and flushed writes are in the file once acknowledged: the
/// controller is killed the moment the last one completes, and the file,
/// reopened, holds them all.
#[test]
fn acknowledged_fua_and_flushed_writes_survive_a_killed_controller() {
    let ns = Scratch::new("fua");
    let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let mut ctrl = Command::new(EXE);
    ctrl.args(["controller", "--allow-any-host", "--listen", &addr.to_string()]);
    ctrl.args(["--ns", &ns.ns(), "--nqn", NQN]);
    let mut controller = start(ctrl, &|| std::net::TcpStream::connect(addr).is_ok());
    let writes: Vec<(u64, Vec<u8>)> = (0..8u64)
        .map(|i| (i * 1000, (0..8192).map(|j| (i * 31 + j as u64 * 7) as u8 | 1).collect()))
        .collect();
    let mut app =
        Durable { writes: writes.clone(), next: 0, flushed: false, done: false, error: None };
    let cfg = HostConfig { subnqn: NQN.into(), ..HostConfig::default() };
    let mut host = nvme_tcp::host::new(cfg);
    run_host(addr, &mut host, &mut app, Duration::from_secs(60)).unwrap();
    controller.kill();
    assert_eq!(app.error, None);
    for (slba, data) in &writes {
        assert!(file_at(&ns.0, slba * 512, data.len()) == *data, "LBA {slba} is not in the file");
    }
}
