//! Argument parsers shared by the subcommands: lists, sizes, switches.
//!
//! Parsing only; it must never act on what it parsed.

use nvme_ddp::report::human_bytes;
use nvme_ddp::size::{format_size, parse_size};
use nvme_ddp::workload::Rw;
use nvme_of::auth::{DhGroup, Hash, Secret};
use nvme_tcp::tls::ConfiguredPsk;
use smoltcp_glue::Via;
use std::net::SocketAddr;
use std::path::PathBuf;

/// A comma-separated list argument.
#[derive(Debug, Clone)]
pub(crate) struct List<T>(pub(crate) Vec<T>);

pub(crate) fn list<T>(s: &str, one: impl Fn(&str) -> Result<T, String>) -> Result<List<T>, String> {
    let v: Vec<T> =
        s.split(',').map(str::trim).filter(|w| !w.is_empty()).map(one).collect::<Result<_, _>>()?;
    if v.is_empty() {
        return Err("the list is empty".into());
    }
    Ok(List(v))
}

pub(crate) fn parse_on_off(s: &str) -> Result<bool, String> {
    match s {
        "on" | "true" | "1" => Ok(true),
        "off" | "false" | "0" => Ok(false),
        _ => Err(format!("{s:?}: use on or off")),
    }
}

/// An access pattern, by fio's names.
pub(crate) fn parse_rw(s: &str) -> Result<Rw, String> {
    use clap::ValueEnum;
    Rw::from_str(s, true).map_err(|_| {
        let names: Vec<&str> = Rw::value_variants().iter().map(|rw| rw.name()).collect();
        format!("{s:?} is not an access pattern: use {} (fio's names)", names.join(", "))
    })
}

/// A namespace ID (nvme-cli's -n, --namespace-id): 1 to FFFFFFFEh.
pub(crate) fn parse_nsid(s: &str) -> Result<u32, String> {
    let n = match s.strip_prefix("0x") {
        Some(hex) => u32::from_str_radix(hex, 16).ok(),
        None => s.parse().ok(),
    };
    n.filter(|n| (1..0xffff_ffff).contains(n))
        .ok_or_else(|| format!("{s:?} is not a namespace ID: give 1..=4294967294"))
}

/// fio's rwmixread: the percent of a mixed workload's I/Os that read.
pub(crate) fn parse_percent(s: &str) -> Result<u8, String> {
    s.parse::<u8>()
        .ok()
        .filter(|p| *p <= 100)
        .ok_or_else(|| format!("{s:?}: give a percentage, 0..=100"))
}

pub(crate) fn parse_chance(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(p) if (0.0..=1.0).contains(&p) => Ok(p),
        _ => Err(format!("{s:?} is not a probability between 0 and 1")),
    }
}

/// A namespace: `ram:SIZE` or `file:PATH` (a regular file or block device).
#[derive(Debug, Clone)]
pub(crate) enum NsSpec {
    Ram(u64),
    File(PathBuf),
}

pub(crate) fn parse_ns(s: &str) -> Result<NsSpec, String> {
    match s.split_once(':') {
        Some(("ram", size)) => parse_size(size).map(NsSpec::Ram).map_err(|e| e.to_string()),
        Some(("file", path)) if !path.is_empty() => Ok(NsSpec::File(path.into())),
        _ => Err(format!("{s:?}: use ram:SIZE (e.g. ram:1G) or file:PATH")),
    }
}

/// A RAM namespace's size, the same rule for every command: whole blocks,
/// at least one, and no more than this machine's memory (it fills as it
/// is written).
pub(crate) fn check_ram(size: u64, block: u32) -> Result<(), String> {
    nvme_storage::check_size(size, block).map_err(|e| e.to_string())?;
    // SAFETY: sysconf has no preconditions.
    let (pages, page) =
        unsafe { (libc::sysconf(libc::_SC_PHYS_PAGES), libc::sysconf(libc::_SC_PAGESIZE)) };
    let memory = (pages.max(0) as u64).saturating_mul(page.max(0) as u64);
    if memory > 0 && size > memory {
        return Err(format!(
            "{} is more than this machine's memory ({}); a RAM namespace must fit in it (the controller takes file:PATH for one that large)",
            format_size(size),
            human_bytes(memory as f64)
        ));
    }
    Ok(())
}

pub(crate) fn parse_bytes(s: &str) -> Result<u64, String> {
    parse_size(s).map_err(|e| e.to_string())
}

pub(crate) fn parse_block_size(s: &str) -> Result<u32, String> {
    match parse_bytes(s)? {
        512 => Ok(512),
        4096 => Ok(4096),
        n => Err(format!("block size {n} is not supported (use 512 or 4096)")),
    }
}

pub(crate) fn parse_threshold(s: &str) -> Result<u32, String> {
    u32::try_from(parse_bytes(s)?).map_err(|_| format!("{s:?} is too large"))
}

pub(crate) fn on_off(b: bool) -> &'static str {
    if b { "on" } else { "off" }
}

/// An NQN, checked as the spec writes them.
pub(crate) fn parse_nqn(s: &str) -> Result<String, String> {
    nvme_of::nvme::check_nqn(s)
        .map(|()| s.to_string())
        .map_err(|why| format!("{s:?} is not an NQN: {why}"))
}

/// A key given as it is or as `@FILE` holding it; errors name the file,
/// never the key.
fn key_or_file<T>(s: &str) -> Result<T, String>
where
    T: std::str::FromStr,
    T::Err: std::fmt::Display,
{
    match s.strip_prefix('@') {
        Some(path) => {
            let text = zeroize::Zeroizing::new(
                std::fs::read_to_string(path).map_err(|e| format!("{path}: {e}"))?,
            );
            text.parse().map_err(|e| format!("{path}: {e}"))
        }
        None => s.parse().map_err(|e: T::Err| e.to_string()),
    }
}

/// A DH-HMAC-CHAP secret, as `nvme gen-dhchap-key` prints it, or `@FILE`.
pub(crate) fn parse_secret(s: &str) -> Result<Secret, String> {
    key_or_file(s)
}

/// A parser for arguments that hold a secret: clap would quote the value
/// it could not parse in its error, so this one says only what is wrong.
#[derive(Clone)]
pub(crate) struct SecretArg<T>(pub(crate) fn(&str) -> Result<T, String>);

impl<T: Clone + Send + Sync + 'static> clap::builder::TypedValueParser for SecretArg<T> {
    type Value = T;

    fn parse_ref(
        &self,
        cmd: &clap::Command,
        arg: Option<&clap::Arg>,
        value: &std::ffi::OsStr,
    ) -> Result<T, clap::Error> {
        let name = arg.map(ToString::to_string).unwrap_or_default();
        let refuse = |why: String| {
            let msg = format!("invalid value for '{name}': {why}\n");
            clap::Error::raw(clap::error::ErrorKind::ValueValidation, msg).with_cmd(cmd)
        };
        let s = value.to_str().ok_or_else(|| refuse("not UTF-8".into()))?;
        (self.0)(s).map_err(refuse)
    }
}

/// A configured TLS PSK, as `nvme gen-tls-key` prints it, or `@FILE`.
pub(crate) fn parse_tls_key(s: &str) -> Result<ConfiguredPsk, String> {
    key_or_file(s)
}

/// `NQN=SECRET`: a host's secret on the controller (SECRET as above).
pub(crate) fn parse_host_secret(s: &str) -> Result<(String, Secret), String> {
    let (nqn, secret) =
        s.split_once('=').ok_or("give NQN=SECRET (the secret, or @FILE holding it)")?;
    Ok((parse_nqn(nqn)?, parse_secret(secret)?))
}

/// Hash functions by nvmet's names (`hmac(sha256)`) or short ones (`sha256`).
pub(crate) fn parse_hash(s: &str) -> Result<Hash, String> {
    Hash::parse(s).ok_or_else(|| format!("{s:?} is not a hash: use sha256, sha384 or sha512"))
}

/// Diffie-Hellman groups by nvmet's names: null, ffdhe2048 ... ffdhe8192.
pub(crate) fn parse_dhgroup(s: &str) -> Result<DhGroup, String> {
    DhGroup::parse(s).ok_or_else(|| {
        format!("{s:?} is not a DH group: use null, ffdhe2048, ffdhe3072, ffdhe4096, ffdhe6144 or ffdhe8192")
    })
}

/// A listening address; `:PORT` means every IPv4 address.
pub(crate) fn parse_listen(s: &str) -> Result<SocketAddr, String> {
    let full = if s.starts_with(':') { format!("0.0.0.0{s}") } else { s.to_string() };
    full.parse().map_err(|_| format!("{s:?}: use ADDR:PORT or :PORT (e.g. 0.0.0.0:4420, :8009)"))
}

/// A controller's address, `HOST:PORT`: an IP address (IPv6 in brackets)
/// or a host name, resolved here, its IPv4 address first (smoltcp speaks
/// IPv4 only). NVMe/TCP has no port to assume: 4420 is I/O's, 8009
/// discovery's, and either may be moved.
pub(crate) fn parse_connect(s: &str) -> Result<SocketAddr, String> {
    use std::net::{IpAddr, ToSocketAddrs};
    if let Ok(addr) = s.parse::<SocketAddr>() {
        return Ok(addr);
    }
    let no_port = || format!("{s:?} has no port: give HOST:PORT, e.g. {s}:4420");
    let bare = s.parse::<IpAddr>().is_ok() || s.ends_with(']');
    let Some((host, port)) = s.rsplit_once(':').filter(|_| !bare) else {
        return Err(no_port());
    };
    if host.is_empty() {
        return Err(format!("{s:?} has no address: give HOST:PORT, e.g. 127.0.0.1{s}"));
    }
    let port: u16 = port.parse().map_err(|_| format!("{s:?}: {port:?} is not a port number"))?;
    let found = (host, port).to_socket_addrs().map_err(|e| format!("{host:?}: {e}"))?;
    let found: Vec<_> = found.collect();
    found
        .iter()
        .find(|a| a.is_ipv4())
        .or(found.first())
        .copied()
        .ok_or_else(|| format!("{host:?} resolves to no address"))
}

/// Commands outstanding per I/O queue: 1 to Linux's largest fabrics
/// queue (NVMF_MAX_QUEUE_SIZE, 1024 entries).
pub(crate) const QD_RANGE: std::ops::RangeInclusive<u16> = 1..=1024;
/// I/O queues a host may ask for.
pub(crate) const QUEUES_RANGE: std::ops::RangeInclusive<u16> = 1..=128;

pub(crate) fn parse_qd(s: &str) -> Result<u16, String> {
    in_range(s, QD_RANGE, "commands per queue")
}

pub(crate) fn parse_queues(s: &str) -> Result<u16, String> {
    in_range(s, QUEUES_RANGE, "I/O queues")
}

/// Jobs at once (fio's numjobs), 1 to 256.
pub(crate) fn parse_jobs(s: &str) -> Result<u16, String> {
    in_range(s, 1..=256, "jobs")
}

fn in_range(s: &str, range: std::ops::RangeInclusive<u16>, what: &str) -> Result<u16, String> {
    s.parse::<u16>()
        .ok()
        .filter(|n| range.contains(n))
        .ok_or_else(|| format!("{s:?}: {what} must be {}..={}", range.start(), range.end()))
}

/// The name of a network interface that exists here: opening a TAP by a
/// name that does not would create a new, unwired one.
pub(crate) fn existing_iface(name: &str) -> Result<String, String> {
    if std::path::Path::new("/sys/class/net").join(name).exists() {
        Ok(name.to_string())
    } else {
        Err(format!(
            "no network interface {name:?} here (`nvme-ddp net up` makes tap0, tap1, veth0 and veth1; run inside its namespace)"
        ))
    }
}

/// A list of CPUs as taskset and SPDK take them: `0-3,6`.
pub(crate) fn parse_cpus(s: &str) -> Result<List<usize>, String> {
    let mut cpus = Vec::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let n = |t: &str| {
            t.trim()
                .parse::<usize>()
                .map_err(|_| format!("{part:?} is not a CPU or a range of CPUs (e.g. 0-3,6)"))
        };
        let (lo, hi) = match part.split_once('-') {
            Some((a, b)) => (n(a)?, n(b)?),
            None => (n(part)?, n(part)?),
        };
        if lo > hi {
            return Err(format!("{part:?}: a range goes up (e.g. 0-3)"));
        }
        for c in lo..=hi {
            if !cpus.contains(&c) {
                cpus.push(c);
            }
        }
    }
    if cpus.is_empty() {
        return Err("the list of CPUs is empty".into());
    }
    Ok(List(cpus))
}

/// `--via`: how an interface is reached.
pub(crate) fn parse_via(s: &str) -> Result<Via, String> {
    match s {
        "auto" => Ok(Via::Auto),
        "xdp" => Ok(Via::Xdp),
        "packet" => Ok(Via::Packet),
        _ => Err(format!("{s:?}: --via takes auto, xdp or packet")),
    }
}

/// `--busy-poll`: microseconds, 1 to 1000000.
pub(crate) fn parse_busy_poll(s: &str) -> Result<std::time::Duration, String> {
    s.parse::<u64>()
        .ok()
        .filter(|us| (0..=1_000_000).contains(us))
        .map(std::time::Duration::from_micros)
        .ok_or_else(|| format!("{s:?}: give microseconds, 0..=1000000"))
}

/// A whole number, 0 or more, that fits its type.
pub(crate) fn parse_whole<T: std::str::FromStr>(s: &str) -> Result<T, String> {
    s.parse::<T>().map_err(|_| match s.parse::<i128>() {
        Ok(n) if n < 0 => format!("{s:?}: give a whole number, 0 or more"),
        Ok(_) => format!("{s:?} is too large"),
        Err(_) => format!("{s:?} is not a whole number"),
    })
}

/// A non-negative number of seconds, fractions allowed.
pub(crate) fn parse_seconds(s: &str) -> Result<std::time::Duration, String> {
    s.parse::<f64>()
        .ok()
        .and_then(|t| std::time::Duration::try_from_secs_f64(t).ok())
        .ok_or_else(|| format!("{s:?}: give a number of seconds, 0 or more"))
}

/// ctrl-loss-tmo: how long a lost association is retried; `None` for
/// forever.
#[derive(Debug, Clone, Copy)]
pub(crate) struct CtrlLossTmo(pub(crate) Option<std::time::Duration>);

/// ctrl-loss-tmo: seconds, or -1 for forever.
pub(crate) fn parse_ctrl_loss_tmo(s: &str) -> Result<CtrlLossTmo, String> {
    match s.trim() {
        "-1" => Ok(CtrlLossTmo(None)),
        t => parse_seconds(t)
            .map(|d| CtrlLossTmo(Some(d)))
            .map_err(|e| format!("{e}, or -1 for forever")),
    }
}
