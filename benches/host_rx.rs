//! The host's receive path for reads, with and without the device's hints:
//! the bytes of whole read responses (C2HData PDUs with data digests, then
//! the CapsuleResp) handed to the host state machine, timing only the host.
//! Without a device it copies and digests every data byte; with one whose
//! hints vouch for placement and digest, it skips both.

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
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
    Caps, Config, DdpDevice, DdpError, DdpIo, FlowId, HintFlags, IoBuf, Limits, SkCtx, SkHandle,
    Stats,
};

const SUBNQN: &str = "nqn.2026-11.io.nvme-ddp:bench";

/// A device that places and digests everything: every byte it is asked
/// about has already been vouched for by the bench.
#[derive(Default)]
struct Vouching {
    ctx: Mutex<Option<Arc<SkCtx>>>,
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
    fn sk_add(&self, _flow: FlowId, _config: &Config) -> Result<SkHandle, DdpError> {
        let ctx = Arc::new(SkCtx::new());
        *self.ctx.lock().unwrap() = Some(ctx.clone());
        Ok(SkHandle { id: 0, ctx, offloads: CAPS })
    }
    fn sk_del(&self, _sk: &SkHandle) {}
    fn setup(&self, _sk: &SkHandle, _io: DdpIo) -> Result<(), DdpError> {
        Ok(())
    }
    fn teardown(&self, sk: &SkHandle, tag: u16) {
        sk.ctx.teardown_done(tag);
    }
    fn resync(&self, _sk: &SkHandle, _seq: u64) {}
    fn stats(&self) -> Stats {
        Stats::default()
    }
}

/// A host with one I/O queue and its controller, joined by memory.
struct Rig {
    host: Host,
    target: Arc<Target>,
    conns: Vec<(u16, Connection)>,
    dev: Option<Arc<Vouching>>,
    /// Bytes the host has received on the I/O queue: its stream offset.
    rx_io: u64,
    now: Instant,
    buf: Vec<u8>,
}

impl Rig {
    fn new(hints: bool) -> Self {
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
        let mut host = nvme_tcp::host::new(host_cfg);
        let dev = hints.then(|| Arc::new(Vouching::default()));
        if let Some(d) = &dev {
            let any = SocketAddrV4::new(Ipv4Addr::LOCALHOST, 4420);
            host.attach_ddp(1, d.clone(), FlowId { local: any, remote: any });
        }
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

    /// One read of `len` bytes; returns the time the host spent taking in
    /// its response.
    fn read(&mut self, len: u32, dst: &IoBuf) -> Duration {
        let io = Io {
            kind: IoKind::Read,
            nsid: 1,
            slba: 0,
            nlb: len / 512,
            buf: Some(dst.clone()),
            tag: 1,
        };
        self.host.submit(1, io, self.now).unwrap();
        let n = self.host.poll_transmit(1, &mut self.buf);
        let conn = &mut self.conns.iter_mut().find(|(q, _)| *q == 1).unwrap().1;
        conn.handle_input(&self.buf[..n], self.now);
        let n = conn.poll_transmit(&mut self.buf);
        if let Some(d) = &self.dev {
            let ctx = d.ctx.lock().unwrap().clone().unwrap();
            ctx.push_hint(
                self.rx_io,
                self.rx_io + n as u64,
                HintFlags::PLACED.union(HintFlags::CRC_OK),
            );
        }
        let started = std::time::Instant::now();
        let mut at = 0;
        while at < n {
            at += self.host.handle_input(1, &self.buf[at..n], self.now);
        }
        let mut done = false;
        while let Some(ev) = self.host.poll_event() {
            done |= matches!(ev, HostEvent::Completion { tag: 1, .. });
        }
        let took = started.elapsed();
        assert!(done, "the read did not complete");
        self.rx_io += n as u64;
        took
    }
}

fn host_rx(c: &mut Criterion) {
    let mut g = c.benchmark_group("host_rx");
    for len in [4096u32, 128 << 10] {
        g.throughput(Throughput::Bytes(u64::from(len)));
        for hints in [false, true] {
            let mut rig = Rig::new(hints);
            assert_eq!(rig.host.is_offloaded(1), hints);
            let dst = IoBuf::new(len as usize);
            // One read first, to check the rig measures what it says.
            rig.read(len, &dst);
            let (ulp, _) = rig.host.stats();
            if hints {
                assert_eq!(
                    (ulp.copy_bytes, ulp.crc_bytes),
                    (0, 0),
                    "hints must spare the work: {ulp:?}"
                );
            } else {
                assert_eq!(
                    (ulp.copy_bytes, ulp.crc_bytes),
                    (u64::from(len), u64::from(len)),
                    "{ulp:?}"
                );
            }
            let name = if hints { "hints" } else { "no_hints" };
            g.bench_function(BenchmarkId::new(name, len), |b| {
                b.iter_custom(|iters| (0..iters).map(|_| rig.read(len, &dst)).sum())
            });
        }
    }
    g.finish();
}

criterion_group!(benches, host_rx);
criterion_main!(benches);
