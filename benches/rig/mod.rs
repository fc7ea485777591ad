//! A host with one I/O queue and its controller, joined by memory, for
//! the benches of the host's receive path and the controller's read path:
//! each step of a read (submit, serve, take in) on its own, so a bench
//! times or counts just the one it is about. A device that vouches for
//! everything stands in for the NIC.

use nvme_of::Digests;
use nvme_of::Instant;
use nvme_of::controller::{ControllerQueue, Target, TargetConfig};
use nvme_of::host::{Host, HostConfig, HostEvent, Io, IoKind};
use nvme_of::namespace::Namespace;
use nvme_storage::RamNamespace;
use nvme_tcp::controller::Connection;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use ulp_ddp::{
    Caps, DdpDevice, DdpError, DdpIo, DdpSk, FlowId, HintFlags, IoBuf, Limits, NvmeTcpConfig,
    NvmeTcpSk, SgEntry, SkCtx, Stats,
};

const SUBNQN: &str = "nqn.2026-11.io.nvme-ddp:bench";

/// A device that places and digests everything: every byte it is asked
/// about has already been vouched for by the bench.
#[derive(Default)]
pub struct Vouching {
    sk: Mutex<Option<Arc<Socket>>>,
}

/// Its one socket.
#[derive(Default)]
struct Socket {
    ctx: Arc<SkCtx>,
}

const CAPS: Caps = Caps::DDP.union(Caps::CRC_RX);

impl DdpDevice for Vouching {
    fn limits(&self) -> Limits {
        Limits {
            max_ddp_sgl_len: 0,
            io_threshold: 0,
            tls: false,
            full_ccid_range: true,
            max_stags: 0,
        }
    }
    fn caps(&self) -> (Caps, Caps) {
        (CAPS, CAPS)
    }
    fn set_caps(&self, wanted: Caps) -> Result<Caps, DdpError> {
        Ok(wanted.intersection(CAPS))
    }
    fn sk_add(&self, _flow: FlowId, _: &NvmeTcpConfig) -> Result<Arc<dyn NvmeTcpSk>, DdpError> {
        let sk = Arc::new(Socket::default());
        *self.sk.lock().unwrap() = Some(sk.clone());
        Ok(sk)
    }
    fn stats(&self) -> Stats {
        Stats::default()
    }
}

impl DdpSk for Socket {
    fn ctx(&self) -> &Arc<SkCtx> {
        &self.ctx
    }
    fn offloads(&self) -> Caps {
        CAPS
    }
    fn resync(&self, _seq: u64) {}
    fn tx_setup(&self, _sg: SgEntry) -> Result<u64, DdpError> {
        Err(DdpError::NotActive(Caps::ZC_TX))
    }
    fn tx_teardown(&self, _token: u64) {}
    fn sk_del(&self) {}
}

impl NvmeTcpSk for Socket {
    fn setup(&self, _io: DdpIo) -> Result<(), DdpError> {
        Ok(())
    }
    fn teardown(&self, tag: u16) {
        self.ctx.teardown_done(tag);
    }
}

/// A host with one I/O queue and its controller, joined by memory.
pub struct Rig {
    pub host: Host,
    target: Arc<Target>,
    conns: Vec<(u16, Connection)>,
    dev: Option<Arc<Vouching>>,
    /// Bytes the host has received on the I/O queue: its stream offset.
    rx_io: u64,
    now: Instant,
    pub buf: Vec<u8>,
}

impl Rig {
    pub fn new(hints: bool) -> Self {
        let ns: Arc<dyn Namespace> = Arc::new(RamNamespace::new(64 << 20, 512).unwrap());
        let cfg = TargetConfig { subnqn: SUBNQN.into(), ..TargetConfig::default() };
        let target = Target::new(cfg, vec![ns]).unwrap();
        let host_cfg = HostConfig {
            subnqn: SUBNQN.into(),
            digests: Digests { header: false, data: true },
            io_queues: 1,
            queue_depth: 32,
            kato: Duration::ZERO,
            ..HostConfig::default()
        };
        let host = nvme_tcp::host::new(host_cfg);
        let dev = hints.then(|| Arc::new(Vouching::default()));
        let mut rig = Rig {
            host,
            target,
            conns: Vec::new(),
            dev,
            rx_io: 0,
            now: Instant::from_millis(1),
            buf: vec![0; 4 << 20],
        };
        for _ in 0..1000 {
            if rig.host.is_ready() {
                // The device takes the I/O queue once it is up, as a
                // driver offloads a socket once it is connected.
                if let Some(d) = &rig.dev {
                    let any = SocketAddrV4::new(Ipv4Addr::LOCALHOST, 4420);
                    rig.host.attach_ddp(1, d.clone(), FlowId { local: any, remote: any });
                }
                return rig;
            }
            rig.exchange();
        }
        panic!("the host never became ready");
    }

    /// Move bytes both ways once.
    fn exchange(&mut self) {
        while let Some(qid) = self.host.poll_connect() {
            self.conns.push((qid, Connection::new(self.target.clone(), None)));
            self.host.connected(qid, self.now);
        }
        for (qid, conn) in &mut self.conns {
            let n = self.host.poll_transmit(*qid, &mut self.buf);
            conn.handle_input(&self.buf[..n], self.now);
            let n = conn.poll_transmit(&mut self.buf);
            let mut at = 0;
            while at < n {
                at += self.host.handle_input(*qid, &self.buf[at..n], self.now);
            }
            if *qid == 1 {
                self.rx_io += n as u64;
            }
        }
        while self.host.poll_event().is_some() {}
    }

    /// The host submits a read of `len` bytes into `dst`: the bytes of
    /// its command capsule, in `self.buf`.
    pub fn submit(&mut self, len: u32, dst: &IoBuf) -> usize {
        let io = Io {
            kind: IoKind::Read,
            nsid: 1,
            slba: 0,
            nlb: len / 512,
            buf: Some(dst.clone()),
            tag: 1,
        };
        self.host.submit(1, io, self.now).unwrap();
        self.host.poll_transmit(1, &mut self.buf)
    }

    /// The controller takes the `n` bytes of a command and answers: the
    /// bytes of its response, in `self.buf`, vouched for by the device if
    /// there is one.
    pub fn serve(&mut self, n: usize) -> usize {
        let conn = &mut self.conns.iter_mut().find(|(q, _)| *q == 1).unwrap().1;
        conn.handle_input(&self.buf[..n], self.now);
        conn.poll_transmit(&mut self.buf)
    }

    /// The device vouches for the `n` bytes of a response: placed, and
    /// their digests right.
    pub fn vouch(&mut self, n: usize) {
        if let Some(d) = &self.dev {
            let sk = d.sk.lock().unwrap().clone().unwrap();
            let ctx = sk.ctx();
            let flags = HintFlags::PLACED.union(HintFlags::CRC_OK);
            ctx.push_hint(self.rx_io, self.rx_io + n as u64, flags);
        }
    }

    /// The host takes in the `n` bytes of a response; whether the read
    /// completed.
    pub fn take(&mut self, n: usize) -> bool {
        let mut at = 0;
        while at < n {
            at += self.host.handle_input(1, &self.buf[at..n], self.now);
        }
        let mut done = false;
        while let Some(ev) = self.host.poll_event() {
            done |= matches!(ev, HostEvent::Completion { tag: 1, .. });
        }
        self.rx_io += n as u64;
        done
    }
}
