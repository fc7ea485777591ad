//! What a bench run measures: the options, and the matrix of settings they
//! make (impairments of the wire included). Only the choice of points; it must never run or judge one.

use crate::driver::transport::TransportType;
use crate::driver::valgrind::Part;
use crate::workload::Rw;
use serde::Serialize;
use smoltcp_glue::{LinkName, Profile};
use std::fmt;
use std::time::Duration;
use ulp_ddp::Caps;

/// The offload sets the bench compares by default.
pub const OFFLOAD_SETS: [Caps; 4] = [Caps::NONE, Caps::CRC, Caps::DDP, Caps::ALL];

/// What a part's cost is counted in.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Meter {
    /// CPU time, from the threads' clocks: what a user pays, on this
    /// machine, as busy as it is.
    #[default]
    Cpu,
    /// Instructions, memory accesses, cache misses and mispredicted
    /// branches, counted by Valgrind (Callgrind, under a fixed cache
    /// model): the same run after run, whatever else the machine does.
    Instructions,
}

impl Meter {
    pub fn parse(s: &str) -> Result<Self, String> {
        match s {
            "cpu" => Ok(Meter::Cpu),
            "instructions" => Ok(Meter::Instructions),
            _ => Err(format!("{s:?}: use cpu or instructions")),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Meter::Cpu => "cpu",
            Meter::Instructions => "instructions",
        }
    }
}

/// What to measure.
#[derive(Debug, Clone)]
pub struct BenchOptions {
    pub bs: Vec<u32>,
    pub rw: Vec<Rw>,
    pub qd: Vec<u16>,
    pub ddgst: Vec<bool>,
    /// NVMe/TCP in the clear, over TLS 1.3 (the NIC takes the records
    /// over where the offload set has tls-rx/tls-tx), or both: an axis of
    /// the matrix. TLS is NVMe/TCP's: there are no RDMA points over it.
    pub tls: Vec<bool>,
    pub offload: Vec<Caps>,
    pub mtu: Vec<usize>,
    /// NVMe/TCP, NVMe/RDMA, or both on the same matrix.
    pub transport: Vec<TransportType>,
    pub queues: u16,
    /// Jobs run at once (fio's numjobs): each a host with its own wire (or
    /// queue of the TAPs) against a controller stack of its own, the one
    /// target shared: an axis of the matrix.
    pub jobs: Vec<u16>,
    pub reps: usize,
    pub warmup: Duration,
    pub duration: Duration,
    /// Measure this many I/Os a run, after a warm-up of a quarter as many
    /// (see [`window_ios`](Self::window_ios)), instead of `duration` after
    /// `warmup`. The instructions meter always counts I/Os:
    /// [`window_ios`](Self::window_ios) says how many.
    pub ios: Option<u64>,
    /// What costs are counted in.
    pub meter: Meter,
    /// This process runs under Valgrind, collecting this part's events
    /// (the instructions meter starts such a process per part).
    pub collect: Option<Part>,
    /// Run over these interfaces (host's, controller's: TAPs, or any
    /// through AF_XDP or AF_PACKET) instead of the in-process wire; their
    /// MTU is the interfaces'.
    pub link: Option<(LinkName, LinkName)>,
    /// Each side (host and NIC, controller) on a thread of its own instead of in
    /// lockstep on one thread (over TAP they always are).
    pub threads: bool,
    /// On threads, how long host and controller poll after their last
    /// progress before they sleep (zero: at once).
    pub busy_poll: Duration,
    /// Chances per frame, each direction, that the in-process wire loses,
    /// reorders or duplicates it (as `demo --loss` etc.): axes of the
    /// matrix.
    pub loss: Vec<f64>,
    pub reorder: Vec<f64>,
    pub duplicate: Vec<f64>,
    /// Where the impairments' seeds come from: repetition `r` uses
    /// [`rep_seed`]`(seed, r)`.
    pub seed: u64,
}

/// The impairments' seed of repetition `rep`: a different one each
/// repetition, the same for every point (so points at one setting meet
/// the same luck), and the same from one bench run to the next.
pub fn rep_seed(seed: u64, rep: usize) -> u64 {
    // splitmix64 of the pair.
    let mut z = seed.wrapping_add((rep as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15));
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

impl BenchOptions {
    /// The I/Os a run of point `p` warms up with and then measures, when
    /// it counts them: `ios`, or under the instructions meter, 16 MiB worth
    /// within 64 to 1024 (a point's counts repeat, so a short window is
    /// exact; Valgrind runs some 500 times slower than the CPU); the
    /// warm-up a quarter as many, and at least two queues' worth.
    pub fn window_ios(&self, p: &Setting) -> Option<(u64, u64)> {
        let measured = match (self.ios, self.meter) {
            (Some(n), _) => n,
            (None, Meter::Instructions) => ((16u64 << 20) / u64::from(p.bs)).clamp(64, 1024),
            (None, Meter::Cpu) => return None,
        };
        Some(((measured / 4).max(2 * u64::from(p.qd)), measured))
    }

    /// Whether the parts run on threads of their own.
    pub fn threaded(&self) -> bool {
        self.threads || self.link.is_some()
    }

    /// Every impairment of the matrix, in order.
    pub fn impairments(&self) -> Vec<Impair> {
        let mut v = Vec::new();
        for &reorder in &self.reorder {
            for &duplicate in &self.duplicate {
                for &loss in &self.loss {
                    v.push(Impair { loss, reorder, duplicate });
                }
            }
        }
        v
    }

    /// Every point of the matrix, in order.
    pub fn settings(&self) -> Vec<Setting> {
        let mut v = Vec::new();
        for &transport in &self.transport {
            for &rw in &self.rw {
                for (&ddgst, &tls) in
                    self.ddgst.iter().flat_map(|d| self.tls.iter().map(move |t| (d, t)))
                {
                    if tls && transport != TransportType::Tcp {
                        continue;
                    }
                    for &mtu in &self.mtu {
                        for impair in self.impairments() {
                            for &jobs in &self.jobs {
                                for &qd in &self.qd {
                                    for &bs in &self.bs {
                                        for &offload in &self.offload {
                                            v.push(Setting {
                                                transport,
                                                bs,
                                                rw,
                                                qd,
                                                jobs,
                                                mtu,
                                                ddgst,
                                                tls,
                                                offload,
                                                impair,
                                            });
                                        }
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
        v
    }
}

impl Default for BenchOptions {
    /// The default matrix: about a quarter of an hour on two cores, each
    /// point run long enough and often enough to hold within 10%.
    fn default() -> Self {
        Self {
            bs: vec![4 << 10, 32 << 10, 128 << 10, 1 << 20],
            rw: vec![Rw::Read, Rw::Write],
            qd: vec![1, 32],
            ddgst: vec![true],
            tls: vec![false],
            offload: OFFLOAD_SETS.to_vec(),
            mtu: vec![1500, 9000],
            transport: vec![TransportType::Tcp],
            queues: 1,
            jobs: vec![1],
            reps: 5,
            warmup: Duration::from_millis(200),
            duration: Duration::from_secs(1),
            ios: None,
            meter: Meter::Cpu,
            collect: None,
            link: None,
            busy_poll: Duration::ZERO,
            threads: false,
            loss: vec![0.0],
            reorder: vec![0.0],
            duplicate: vec![0.0],
            seed: 1,
        }
    }
}

/// What the in-process wire does to frames, each direction: chances per
/// frame, as `demo --loss/--reorder/--duplicate` take them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Impair {
    pub loss: f64,
    pub reorder: f64,
    pub duplicate: f64,
}

impl Impair {
    /// The profile each end's impairments apply to the frames it receives.
    pub fn profile(&self) -> Profile {
        Profile {
            loss: self.loss,
            reorder: self.reorder,
            duplicate: self.duplicate,
            ..Profile::default()
        }
    }

    pub fn is_clean(&self) -> bool {
        self.profile().is_clean()
    }
}

impl fmt::Display for Impair {
    /// `loss=0.01 reorder=0 duplicate=0`
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "loss={} reorder={} duplicate={}", self.loss, self.reorder, self.duplicate)
    }
}

/// One setting of the matrix: what a point runs.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Setting {
    pub transport: TransportType,
    pub bs: u32,
    pub rw: Rw,
    pub qd: u16,
    /// Jobs at once, each with its own host and controller stack.
    pub jobs: u16,
    pub mtu: usize,
    pub ddgst: bool,
    /// NVMe/TCP over TLS 1.3, in software.
    #[serde(default)]
    pub tls: bool,
    /// Written as its name ("none", "crc", "all", "ddp+crc").
    #[serde(serialize_with = "as_name")]
    pub offload: Caps,
    /// Written as its fields: loss, reorder, duplicate.
    #[serde(flatten)]
    pub impair: Impair,
}

impl Default for Setting {
    /// One job; every other setting its type's default.
    fn default() -> Self {
        Self {
            transport: TransportType::default(),
            bs: 0,
            rw: Rw::default(),
            qd: 0,
            jobs: 1,
            mtu: 0,
            ddgst: false,
            tls: false,
            offload: Caps::default(),
            impair: Impair::default(),
        }
    }
}

fn as_name<S: serde::Serializer>(caps: &Caps, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(caps)
}

impl fmt::Display for Setting {
    /// `tcp read bs=131072 qd=32 mtu=9000 ddgst=true offload=all`, then
    /// ` tls` over TLS, ` jobs=2` if more than one ran, and ` loss=0.01
    /// reorder=0 duplicate=0` if the wire is impaired.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {} bs={} qd={} mtu={} ddgst={} offload={}",
            self.transport.name(),
            self.rw.name(),
            self.bs,
            self.qd,
            self.mtu,
            self.ddgst,
            self.offload
        )?;
        if self.tls {
            write!(f, " tls")?;
        }
        if self.jobs > 1 {
            write!(f, " jobs={}", self.jobs)?;
        }
        match self.impair.is_clean() {
            true => Ok(()),
            false => write!(f, " {}", self.impair),
        }
    }
}
