//! What a bench run measures: the options, and the matrix of settings they
//! make. Only the choice of points; it must never run or judge one.

use crate::driver::transport::TransportType;
use crate::workload::Rw;
use serde::Serialize;
use smoltcp_glue::LinkName;
use std::fmt;
use std::time::Duration;
use ulp_ddp::Caps;

/// The offload sets the bench compares by default.
pub const OFFLOAD_SETS: [Caps; 4] = [Caps::NONE, Caps::CRC, Caps::DDP, Caps::ALL];

/// What to measure.
#[derive(Debug, Clone)]
pub struct BenchOptions {
    pub bs: Vec<u32>,
    pub rw: Vec<Rw>,
    pub qd: Vec<u16>,
    pub ddgst: Vec<bool>,
    pub offload: Vec<Caps>,
    pub mtu: Vec<usize>,
    /// NVMe/TCP, NVMe/RDMA, or both on the same matrix.
    pub transport: Vec<TransportType>,
    pub queues: u16,
    pub reps: usize,
    pub warmup: Duration,
    pub duration: Duration,
    /// Run over these interfaces (host's, controller's: TAPs, or any
    /// through AF_XDP or AF_PACKET) instead of the in-process wire; their
    /// MTU is the interfaces'.
    pub link: Option<(LinkName, LinkName)>,
    /// Host, NIC and controller on threads of their own instead of in
    /// lockstep on one thread (over TAP they always are).
    pub threads: bool,
    /// On threads, how long host and controller poll after their last
    /// progress before they sleep (zero: at once).
    pub busy_poll: Duration,
}

impl BenchOptions {
    /// Whether the parts run on threads of their own.
    pub fn threaded(&self) -> bool {
        self.threads || self.link.is_some()
    }

    /// Every point of the matrix, in order.
    pub fn settings(&self) -> Vec<Setting> {
        let mut v = Vec::new();
        for &transport in &self.transport {
            for &rw in &self.rw {
                for &ddgst in &self.ddgst {
                    for &mtu in &self.mtu {
                        for &qd in &self.qd {
                            for &bs in &self.bs {
                                for &offload in &self.offload {
                                    v.push(Setting { transport, bs, rw, qd, mtu, ddgst, offload });
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
            offload: OFFLOAD_SETS.to_vec(),
            mtu: vec![1500, 9000],
            transport: vec![TransportType::Tcp],
            queues: 1,
            reps: 5,
            warmup: Duration::from_millis(200),
            duration: Duration::from_secs(1),
            link: None,
            busy_poll: Duration::ZERO,
            threads: false,
        }
    }
}

/// One setting of the matrix: what a point runs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Setting {
    pub transport: TransportType,
    pub bs: u32,
    pub rw: Rw,
    pub qd: u16,
    pub mtu: usize,
    pub ddgst: bool,
    /// Written as its name ("none", "crc", "all", "ddp+crc").
    #[serde(serialize_with = "as_name")]
    pub offload: Caps,
}

fn as_name<S: serde::Serializer>(caps: &Caps, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(caps)
}

impl fmt::Display for Setting {
    /// `tcp read bs=131072 qd=32 mtu=9000 ddgst=true offload=all`
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
        )
    }
}
