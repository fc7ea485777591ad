//! The ULP DDP offloads end to end, in simulated time: what the host still
//! does with each offload on and off, identical data under every toggle and
//! both mapping modes, toggling at run time, one-shot mismatch detection,
//! digest errors caught with offload on, and a hostile controller that
//! cannot make the NIC write outside a mapped buffer; reads the namespace
//! lent, overtaken by writes while their data is still being sent again.

use nic_backend::NicHandle;
use nvme_ddp::app::{HostApp, IoApp};
use nvme_ddp::demo::{self, Demo, DemoOptions};
use nvme_ddp::driver::smoltcp::{Peer, run_simulated, to_nvme};
use nvme_ddp::workload::{Limit, Rw, WorkloadSpec};
use nvme_of::Digests;
use nvme_of::controller::ControllerQueue;
use nvme_of::controller::{Target, TargetConfig};
use nvme_of::host::{Host, HostError, HostEvent, Io, IoKind, MAX_RETRIES, QueueError, Recovery};
use nvme_of::namespace::Namespace;
use nvme_of::nvme::Status;
use nvme_storage::RamNamespace;
use nvme_tcp::controller::Connection;
use nvme_tcp::host::TcpError;
use nvme_tcp::wire::{Direction, Event, Fes, Framer, Framing, Header, PduRepr, PduType};
use smoltcp::time::Instant as SmolInstant;
use smoltcp::wire::Ipv4Cidr;
use smoltcp_glue::{Profile, Stack, StackConfig, TcpConn, VirtualWire};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use ulp_ddp::{
    Caps, DdpDevice, DdpError, DdpIo, DdpSk, FlowId, IoBuf, Limits, NvmeTcpConfig, NvmeTcpSk,
    SgEntry, SkCtx, Stats,
};

const MB: u64 = 1 << 20;
const LIMIT: Duration = Duration::from_secs(600);

fn opts(offload: Caps, ddgst: bool) -> DemoOptions {
    DemoOptions {
        size: 4 * MB,
        bs: 128 << 10,
        qd: 8,
        queues: 2,
        digests: Digests { header: false, data: ddgst },
        simulated: true,
        offload,
        ..DemoOptions::default()
    }
}

/// A write pass then a verified read pass; returns the demo (for its
/// counters) after checking every byte came back.
fn run(o: &DemoOptions) -> Demo {
    let mut d = demo::build(o).unwrap();
    let mut app = IoApp::new(demo::passes(o));
    run_simulated(&mut d.host, &mut d.ctrl, &mut app, LIMIT).unwrap();
    assert_eq!(app.error(), None);
    let read = &app.results[1].1;
    assert_eq!((read.bytes, read.verify_failures, read.errors), (o.size, 0, 0));
    assert_eq!(read.verified_bytes, o.size, "identical data");
    d
}

#[test]
fn all_offloads_on_the_host_copies_and_digests_no_read_payload() {
    let o = opts(Caps::ALL, true);
    let d = run(&o);
    let (ulp, tx) = d.host.host.stats();
    let nic = d.host_nic.stats();
    assert_eq!(ulp.copy_bytes, 0, "no read payload copied by the host");
    assert_eq!(ulp.crc_bytes, 0, "no read payload digested by the host");
    assert_eq!(ulp.placed_bytes, o.size);
    assert_eq!(nic.nic_placed_bytes, o.size, "the NIC placed the whole payload");
    assert_eq!(
        nic.nic_zero_copy_bytes, o.size,
        "and kept all of it out of the stack's receive ring: written once"
    );
    assert_eq!(nic.nic_crc_bytes, o.size);
    assert_eq!(ulp.hw_crc_bytes, o.size);
    // Writes: the NIC computed the data digests the host sent.
    assert_eq!(nic.tx_crc_offloaded_bytes, o.size);
    assert_eq!(tx.crc_bytes, 2 * 1024, "only the I/O queues' Connect data, before offload began");
    assert_eq!(ulp.fallback_pdus, 0);
    // One-shot: one call per I/O, every mapping armed by its capsule and
    // freed by its response.
    assert_eq!(nic.oneshot_armed, ulp.ddp_ios);
    assert_eq!(nic.oneshot_freed, ulp.ddp_ios);
    assert_eq!(ulp.control_calls, ulp.ddp_ios);
    assert_eq!(nic.ddp_teardown, 0);
    // The controller's NIC placed the written data by TTAG.
    let (cu, _) = d.ctrl.stats();
    assert_eq!(d.ctrl_nic.stats().nic_placed_bytes, o.size);
    assert_eq!(d.ctrl_nic.stats().nic_zero_copy_bytes, o.size);
    assert_eq!(cu.copy_bytes, 2048, "only the Connect data");
}

/// Zero-copy transmit: the payload of every write (H2CData and in-capsule
/// data) and of every read (C2HData) leaves its buffer once, gathered by
/// the sender's NIC; the upper layers copy none of it. Without the
/// offload, all of it is copied.
#[test]
fn transmitted_payload_is_gathered_by_the_nic_never_copied() {
    for (offload, by_reference) in [(Caps::ALL, true), (Caps::ALL.without(Caps::ZC_TX), false)] {
        let o = opts(offload, true);
        let d = run(&o);
        let (_, host_tx) = d.host.host.stats();
        let (_, ctrl_tx) = d.ctrl.stats();
        let (host_nic, ctrl_nic) = (d.host_nic.stats(), d.ctrl_nic.stats());
        let connect = 2 * 1024;
        if by_reference {
            assert_eq!(host_tx.data_bytes, connect, "{offload}: only the Connect data copied");
            assert_eq!(host_tx.zero_copy_bytes, o.size);
            assert_eq!(ctrl_tx.data_bytes, 0, "{offload}: no read data copied by the controller");
            assert_eq!(ctrl_tx.zero_copy_bytes, o.size);
            assert_eq!(host_nic.tx_gathered_bytes, o.size, "{offload}: a clean wire sends once");
            assert_eq!(ctrl_nic.tx_gathered_bytes, o.size);
            // One mapping per data PDU, each torn down once acknowledged.
            for nic in [&host_nic, &ctrl_nic] {
                assert!(nic.tx_setup > 0 && nic.tx_setup_fail == 0, "{nic:?}");
                assert!(nic.tx_setup - nic.tx_teardown <= 2 * 8, "{nic:?}");
                assert_eq!(nic.tx_gather_refused, 0);
            }
        } else {
            assert_eq!(host_tx.data_bytes, o.size + connect, "{offload}");
            assert_eq!(ctrl_tx.data_bytes, o.size, "{offload}");
            assert_eq!(host_tx.zero_copy_bytes + ctrl_tx.zero_copy_bytes, 0);
            assert_eq!(host_nic.tx_gathered_bytes + ctrl_nic.tx_gathered_bytes, 0);
            assert_eq!(host_nic.tx_setup + ctrl_nic.tx_setup, 0);
        }
    }
}

/// A buffer sent by reference stays the sender's until the peer has
/// acknowledged it: under loss, segments are sent again after their
/// command completed (a read's C2HData lost behind its response), and the
/// NIC gathers them again from buffers neither the controller's pool nor
/// the host's workload has reused.
#[test]
fn retransmissions_after_completion_gather_the_same_bytes() {
    let o = DemoOptions {
        impair: Profile { loss: 0.02, ..Profile::default() },
        seed: 37,
        kato: DemoOptions::IMPAIRED_KATO,
        io_timeout: DemoOptions::IMPAIRED_IO_TIMEOUT,
        ..opts(Caps::ALL, true)
    };
    let d = run(&o);
    let (_, host_tx) = d.host.host.stats();
    let (_, ctrl_tx) = d.ctrl.stats();
    let (host_nic, ctrl_nic) = (d.host_nic.stats(), d.ctrl_nic.stats());
    assert_eq!((host_tx.zero_copy_bytes, ctrl_tx.zero_copy_bytes), (o.size, o.size));
    for (side, nic) in [("host", &host_nic), ("controller", &ctrl_nic)] {
        assert!(nic.tx_gathered_bytes > o.size, "{side}: retransmissions gathered: {nic:?}");
        assert_eq!(nic.tx_gather_refused, 0, "{side}: nothing sent from a mapping torn down");
    }
}

/// The namespace lends 64 KiB reads from the middle of its 128 KiB
/// chunks: each C2HData carries the half its command asked for, gathered
/// by the NIC or copied, with its digest over those bytes.
#[test]
fn reads_lent_from_inside_a_chunk_send_the_right_bytes() {
    for offload in [Caps::ALL, Caps::ALL.without(Caps::ZC_TX), Caps::NONE] {
        let o = DemoOptions { bs: 64 << 10, size: 2 * MB, ..opts(offload, true) };
        let d = run(&o);
        let (_, ctrl_tx) = d.ctrl.stats();
        let zc = offload.contains(Caps::ZC_TX);
        assert_eq!(ctrl_tx.zero_copy_bytes, if zc { o.size } else { 0 }, "{offload}");
        let ns = d.namespace.stats();
        assert_eq!(ns.lent_bytes, o.size, "{offload}: every read lent, none copied");
        assert_eq!(ns.copied_on_write_bytes, 0, "{offload}: the writes came first");
    }
}

/// Reads of whole 128 KiB chunks, each followed at once by a write to the
/// middle half of the same chunk on another queue, round after round on
/// several chunks, over a lossy wire.
struct ReadsOvertaken {
    rounds: u64,
    /// Each chunk's read buffer, round, and what of its round is still out.
    slots: Vec<(IoBuf, u64, u8)>,
    /// Reads that returned the chunk before their write, after it, or
    /// neither (torn).
    before: u64,
    after: u64,
    torn: u64,
    failure: Option<String>,
    done: bool,
}

const CHUNK: usize = 128 << 10;
const MIDDLE: std::ops::Range<usize> = CHUNK / 4..CHUNK * 3 / 4;

/// The bytes of chunk `slot` after round `round`'s write: a base pattern
/// with the middle half written in that round.
fn chunk_after(slot: u64, round: u64) -> Vec<u8> {
    let word = |seed: u64, i: usize| {
        let x = (seed << 32 ^ i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        (x ^ x >> 29).to_le_bytes()
    };
    let mut v: Vec<u8> = (0..CHUNK / 8).flat_map(|i| word(slot << 8, i)).collect();
    if round > 0 {
        for (i, b) in v[MIDDLE].chunks_mut(8).enumerate() {
            b.copy_from_slice(&word(slot << 8 | round, i));
        }
    }
    v
}

impl ReadsOvertaken {
    const READ: u8 = 1;
    const WRITE: u8 = 2;

    fn submit(&mut self, host: &mut Host, slot: usize, now: nvme_of::Instant) {
        let (buf, round, out) = &mut self.slots[slot];
        *round += 1;
        *out = Self::READ | Self::WRITE;
        // Bytes a read fails to bring match neither chunk.
        buf.lock().fill(0xee);
        let slba = (slot * CHUNK / 512) as u64;
        let tag = |kind: u8| (slot as u64) << 8 | u64::from(kind);
        let ios = [
            Io {
                kind: IoKind::Read,
                nsid: 1,
                slba,
                nlb: 256,
                buf: Some(buf.clone()),
                tag: tag(Self::READ),
            },
            Io {
                kind: IoKind::Write,
                nsid: 1,
                slba: slba + (MIDDLE.start / 512) as u64,
                nlb: (MIDDLE.len() / 512) as u32,
                buf: Some(IoBuf::from_vec(chunk_after(slot as u64, *round)[MIDDLE].to_vec())),
                tag: tag(Self::WRITE),
            },
        ];
        // The write goes on the other queue: its data is not held up
        // behind the read's on one connection.
        for (qid, io) in [1, 2].into_iter().zip(ios) {
            if let Err(e) = host.submit(qid, io, now) {
                self.failure = Some(e.to_string());
                self.done = true;
            }
        }
    }
}

impl HostApp for ReadsOvertaken {
    fn on_event(&mut self, host: &mut Host, event: HostEvent, now: nvme_of::Instant) {
        match event {
            HostEvent::Ready => {
                // Round 0: every chunk written whole.
                for slot in 0..self.slots.len() {
                    let buf = IoBuf::from_vec(chunk_after(slot as u64, 0));
                    let slba = (slot * CHUNK / 512) as u64;
                    let io = Io {
                        kind: IoKind::Write,
                        nsid: 1,
                        slba,
                        nlb: 256,
                        buf: Some(buf),
                        tag: (slot as u64) << 8 | u64::from(Self::WRITE),
                    };
                    self.slots[slot].2 = Self::WRITE;
                    host.submit(1, io, now).unwrap();
                }
            }
            HostEvent::Completion { tag, status, .. } => {
                let (slot, kind) = ((tag >> 8) as usize, tag as u8);
                if status != Status::SUCCESS {
                    self.failure = Some(format!("chunk {slot}: {status:?}"));
                }
                let (buf, round, out) = &mut self.slots[slot];
                if kind == Self::READ {
                    let got = buf.to_vec();
                    match () {
                        _ if got == chunk_after(slot as u64, *round - 1) => self.before += 1,
                        _ if got == chunk_after(slot as u64, *round) => self.after += 1,
                        _ => self.torn += 1,
                    }
                }
                *out &= !kind;
                if *out == 0 && *round < self.rounds {
                    self.submit(host, slot, now);
                } else if self.slots.iter().all(|s| s.2 == 0) {
                    host.shutdown(now);
                }
            }
            HostEvent::Failed(e) => {
                self.failure = Some(e.to_string());
                self.done = true;
            }
            HostEvent::Closed => self.done = true,
            _ => {}
        }
    }
    fn is_done(&self) -> bool {
        self.done
    }
    fn error(&self) -> Option<String> {
        self.failure.clone()
    }
}

/// A read the namespace lent is answered with the chunk as it was: a
/// write to that chunk, applied while segments of the read's C2HData are
/// still to be sent again, goes to a copy of the chunk, so what the NIC
/// gathers for the retransmission is what it gathered the first time, and
/// the host gets the chunk from before the write (or, had the write come
/// first, from after it), never a mix of the two.
#[test]
fn a_write_after_a_lent_read_leaves_its_retransmissions_alone() {
    let o = DemoOptions {
        size: 2 * MB,
        qd: 8,
        queues: 2,
        impair: Profile { loss: 0.02, ..Profile::default() },
        seed: 11,
        kato: DemoOptions::IMPAIRED_KATO,
        io_timeout: DemoOptions::IMPAIRED_IO_TIMEOUT,
        ..opts(Caps::ALL, true)
    };
    let mut d = demo::build(&o).unwrap();
    let mut app = ReadsOvertaken {
        rounds: 24,
        slots: (0..8).map(|_| (IoBuf::new(CHUNK), 0, 0)).collect(),
        before: 0,
        after: 0,
        torn: 0,
        failure: None,
        done: false,
    };
    run_simulated(&mut d.host, &mut d.ctrl, &mut app, LIMIT).unwrap();
    assert_eq!(app.error(), None);
    let reads = 8 * 24;
    assert_eq!((app.before + app.after, app.torn), (reads, 0), "no read mixes two writes");
    let ns = d.namespace.stats();
    assert_eq!(ns.lent_bytes, reads * CHUNK as u64, "every read lent");
    // Writes came while reads still held their chunks...
    assert!(ns.copied_on_write_bytes > 0, "{ns:?}");
    // ...and lost C2HData went again, gathered from the lent chunks.
    let (_, ctrl_tx) = d.ctrl.stats();
    let gathered = d.ctrl_nic.stats().tx_gathered_bytes;
    assert!(
        gathered > ctrl_tx.zero_copy_bytes,
        "{gathered} gathered of {}",
        ctrl_tx.zero_copy_bytes
    );
}

#[test]
fn without_header_data_split_placed_bytes_also_reach_the_ring() {
    let o = opts(Caps::ALL, true);
    let mut d = demo::build(&o).unwrap();
    d.host_nic.set_zero_copy(false);
    let mut app = IoApp::new(demo::passes(&o));
    run_simulated(&mut d.host, &mut d.ctrl, &mut app, LIMIT).unwrap();
    assert_eq!(app.results[1].1.verified_bytes, o.size);
    let nic = d.host_nic.stats();
    assert_eq!(nic.nic_placed_bytes, o.size);
    assert_eq!(nic.nic_zero_copy_bytes, 0);
}

#[test]
fn ios_larger_than_a_mapping_are_split_and_placed_whole() {
    // 128 SG entries of 4 KiB hold 512 KiB: a 1 MiB read goes out as two
    // commands, each mapped, as Linux caps max_hw_sectors for offload.
    // At queue depth 1 the second command waits for the first.
    for qd in [8, 1] {
        let o = DemoOptions { bs: 1 << 20, qd, ..opts(Caps::ALL, true) };
        let d = run(&o);
        let (ulp, _) = d.host.host.stats();
        let nic = d.host_nic.stats();
        let ios = o.size / u64::from(o.bs);
        assert_eq!(ulp.ddp_ios, 2 * ios, "two mapped commands per read (qd {qd})");
        assert_eq!(nic.nic_placed_bytes, o.size, "every byte placed (qd {qd})");
        assert_eq!(ulp.copy_bytes, 0);
    }
}

#[test]
fn offloads_off_the_host_does_all_the_work() {
    let o = opts(Caps::NONE, true);
    let d = run(&o);
    let (ulp, tx) = d.host.host.stats();
    let nic = d.host_nic.stats();
    assert_eq!(ulp.copy_bytes, o.size);
    assert_eq!(ulp.crc_bytes, o.size);
    assert_eq!(tx.crc_bytes, o.size + 2048);
    assert_eq!(nic.sk_add, 0);
    assert_eq!(
        nic.nic_placed_bytes + nic.nic_crc_bytes + nic.tx_crc_offloaded_bytes + nic.packets,
        0,
        "{nic:?}"
    );
    assert_eq!(ulp.control_calls, 0);
}

#[test]
fn every_toggle_combination_and_both_mapping_modes_give_identical_data() {
    for bits in 0..16 {
        let caps = Caps::from_bits(bits);
        let o = DemoOptions { size: 2 * MB, ..opts(caps, true) };
        let d = run(&o);
        let (ulp, tx) = d.host.host.stats();
        let nic = d.host_nic.stats();
        let ddp = caps.contains(Caps::DDP);
        assert_eq!(nic.nic_placed_bytes, if ddp { o.size } else { 0 }, "{caps}");
        assert_eq!(ulp.copy_bytes, if ddp { 0 } else { o.size }, "{caps}");
        let crc_rx = caps.contains(Caps::CRC_RX);
        assert_eq!(ulp.hw_crc_bytes, if crc_rx { o.size } else { 0 }, "{caps}");
        assert_eq!(ulp.crc_bytes, if crc_rx { 0 } else { o.size }, "{caps}");
        let crc_tx = caps.contains(Caps::CRC_TX);
        assert_eq!(tx.crc_offloaded_bytes, if crc_tx { o.size } else { 0 }, "{caps}");
        assert_eq!(ulp.fallback_pdus, 0, "{caps}");
        if ddp {
            let per_io = ulp.control_calls as f64 / ulp.ddp_ios as f64;
            let expect = if caps.contains(Caps::ONESHOT) { 1.0 } else { 3.0 };
            assert_eq!(per_io, expect, "{caps}: setup+teardown+teardown_done, or one post");
        }
    }
}

/// Turns the host NIC's offloads off after a few completions and back on
/// later, through the caps operation.
struct Toggler {
    inner: IoApp,
    nic: NicHandle,
    seen: usize,
}

impl HostApp for Toggler {
    fn on_event(&mut self, host: &mut Host, event: HostEvent, now: nvme_of::Instant) {
        if let HostEvent::Completion { .. } = event {
            self.seen += 1;
            match self.seen {
                // 64 writes come first; toggle during the reads.
                74 => assert_eq!(self.nic.set_caps(Caps::NONE), Ok(Caps::NONE)),
                94 => assert_eq!(self.nic.set_caps(Caps::ALL), Ok(Caps::ALL)),
                _ => {}
            }
        }
        self.inner.on_event(host, event, now);
    }

    fn on_poll(&mut self, host: &mut Host, now: nvme_of::Instant) {
        self.inner.on_poll(host, now);
    }

    fn is_done(&self) -> bool {
        self.inner.is_done()
    }

    fn error(&self) -> Option<String> {
        self.inner.error()
    }
}

#[test]
fn offloads_toggle_at_run_time() {
    let o = DemoOptions { size: 8 * MB, qd: 2, queues: 1, ..opts(Caps::ALL, true) };
    let mut d = demo::build(&o).unwrap();
    let spec = |rw| WorkloadSpec {
        rw,
        bs: o.bs,
        limit: Limit::Bytes(o.size),
        qd: 2,
        rwmixread: 50,
        verify: true,
        seed: 5,
        nsid: None,
        part: (0, 1),
    };
    let mut app = Toggler {
        inner: IoApp::new([spec(Rw::Write), spec(Rw::Read)]),
        nic: d.host_nic.clone(),
        seen: 0,
    };
    run_simulated(&mut d.host, &mut d.ctrl, &mut app, LIMIT).unwrap();
    assert_eq!(app.error(), None);
    let read = &app.inner.results[1].1;
    assert_eq!(read.verified_bytes, o.size);
    let (ulp, _) = d.host.host.stats();
    // Some reads were placed, some copied, and all data is right.
    assert!(ulp.placed_bytes > 0 && ulp.copy_bytes > 0, "{ulp:?}");
    assert_eq!(ulp.placed_bytes + ulp.copy_bytes, o.size);
    assert!(d.host_nic.stats().ddp_setup_fail == 0, "setup is not even tried while off");
}

/// A device that lets the test see and meddle with what the host's NIC
/// tells it.
#[derive(Clone)]
struct Spy {
    nic: NicHandle,
    sockets: Arc<Mutex<Vec<Arc<dyn NvmeTcpSk>>>>,
    /// A faulty NIC: mappings go to a buffer of its own, so the host's
    /// buffer never gets the bytes the NIC says it placed.
    misplace: bool,
}

/// A socket of the host's NIC, as the [`Spy`] hands it on.
struct SpiedSk {
    sk: Arc<dyn NvmeTcpSk>,
    misplace: bool,
}

impl DdpDevice for Spy {
    fn limits(&self) -> Limits {
        self.nic.limits()
    }
    fn caps(&self) -> (Caps, Caps) {
        self.nic.caps()
    }
    fn set_caps(&self, wanted: Caps) -> Result<Caps, DdpError> {
        self.nic.set_caps(wanted)
    }
    fn stats(&self) -> Stats {
        self.nic.stats()
    }
    fn sk_add(&self, flow: FlowId, config: &NvmeTcpConfig) -> Result<Arc<dyn NvmeTcpSk>, DdpError> {
        let sk = self.nic.sk_add(flow, config)?;
        self.sockets.lock().unwrap().push(sk.clone());
        Ok(Arc::new(SpiedSk { sk, misplace: self.misplace }))
    }
}

impl DdpSk for SpiedSk {
    fn ctx(&self) -> &Arc<SkCtx> {
        self.sk.ctx()
    }
    fn offloads(&self) -> Caps {
        self.sk.offloads()
    }
    fn resync(&self, seq: u64) {
        self.sk.resync(seq)
    }
    fn tx_setup(&self, sg: SgEntry) -> Result<u64, DdpError> {
        self.sk.tx_setup(sg)
    }
    fn tx_teardown(&self, token: u64) {
        self.sk.tx_teardown(token)
    }
    fn sk_del(&self) {
        self.sk.sk_del()
    }
}

impl NvmeTcpSk for SpiedSk {
    fn setup(&self, mut io: DdpIo) -> Result<(), DdpError> {
        if self.misplace {
            let elsewhere = IoBuf::new(io.sgl.iter().map(|e| e.offset + e.len).max().unwrap_or(0));
            for e in &mut io.sgl {
                e.buf = elsewhere.clone();
            }
        }
        self.sk.setup(io)
    }
    fn teardown(&self, tag: u16) {
        self.sk.teardown(tag)
    }
}

/// Builds a demo whose host sees its NIC through a [`Spy`].
fn spied(o: &DemoOptions) -> (Demo, Spy) {
    let d = demo::build(o).unwrap();
    let spy = Spy { nic: d.host_nic.clone(), sockets: Arc::default(), misplace: false };
    let Demo { host, ctrl, host_nic, ctrl_nic, namespace } = d;
    let host = rebuild_host(host, o, Arc::new(spy.clone()));
    (Demo { host, ctrl, host_nic, ctrl_nic, namespace }, spy)
}

/// The demo's host again, on the same stack, seeing its NIC as `dev`.
fn rebuild_host(
    host: nvme_ddp::driver::smoltcp::HostSide<demo::DemoDevice>,
    o: &DemoOptions,
    dev: Arc<dyn DdpDevice>,
) -> nvme_ddp::driver::smoltcp::HostSide<demo::DemoDevice> {
    let remote = std::net::SocketAddrV4::new(demo::CONTROLLER_IP, demo::PORT);
    let host_cfg = nvme_of::host::HostConfig {
        subnqn: demo::NQN.into(),
        digests: o.digests,
        io_queues: o.queues,
        queue_depth: o.qd,
        // These tests look at what the first association does.
        ctrl_loss_tmo: Some(std::time::Duration::ZERO),
        ..Default::default()
    };
    nvme_ddp::driver::smoltcp::HostSide::new(
        host.stack,
        nvme_tcp::host::new(host_cfg),
        remote,
        Some(dev),
    )
}

/// Submits a fixed list of I/Os once the host is ready, and records what
/// comes back.
struct Script {
    ios: Vec<Io>,
    completions: Vec<(u64, Status)>,
    failure: Option<HostError>,
    done: bool,
    /// What the host's recovery did, at the end.
    recovery: Recovery,
    /// Called once the I/Os are submitted.
    after_submit: Option<Box<dyn FnMut()>>,
}

impl Script {
    fn new(ios: Vec<Io>) -> Self {
        Self {
            ios,
            completions: Vec::new(),
            failure: None,
            done: false,
            recovery: Recovery::default(),
            after_submit: None,
        }
    }
}

impl HostApp for Script {
    fn on_event(&mut self, host: &mut Host, event: HostEvent, now: nvme_of::Instant) {
        match event {
            HostEvent::Ready => {
                for io in self.ios.drain(..) {
                    host.submit(1, io, now).unwrap();
                }
                if let Some(f) = &mut self.after_submit {
                    f();
                }
                if host.outstanding(1) == 0 {
                    host.shutdown(now);
                }
            }
            HostEvent::Completion { tag, status, .. } => {
                self.completions.push((tag, status));
                if host.outstanding(1) == 0 {
                    host.shutdown(now);
                }
            }
            HostEvent::Failed(e) => {
                self.failure = Some(e);
                self.recovery = host.recovery();
                self.done = true;
            }
            HostEvent::Closed => {
                self.recovery = host.recovery();
                self.done = true;
            }
            _ => {}
        }
    }
    fn is_done(&self) -> bool {
        self.done
    }
    fn error(&self) -> Option<String> {
        self.failure.as_ref().map(ToString::to_string)
    }
}

fn read(slba: u64, nlb: u32, buf: &IoBuf, tag: u64) -> Io {
    Io { kind: IoKind::Read, nsid: 1, slba, nlb, buf: Some(buf.clone()), tag }
}

#[test]
fn a_nic_that_places_wrong_bytes_without_vouching_fails_the_read() {
    // Placement without receive digest offload: the host checks each
    // digest itself. The faulty NIC says it placed the data but the host's
    // buffer holds other bytes, while the stream still carries the right
    // ones (no header/data split): a digest taken over the stream would
    // pass; one taken over the buffer, as it must be, fails.
    let o = DemoOptions { qd: 1, queues: 1, ..opts(Caps::DDP, true) };
    let (mut d, mut spy) = spied(&o);
    spy.misplace = true;
    d.host_nic.set_zero_copy(false);
    let faulty = Arc::new(spy);
    d.host = rebuild_host(d.host, &o, faulty.clone());
    // Whatever the buffer held before (the namespace reads as zeros).
    let buf = IoBuf::from_vec(vec![0xee; 128 << 10]);
    let mut app = Script::new(vec![read(0, 256, &buf, 1)]);
    run_simulated(&mut d.host, &mut d.ctrl, &mut app, LIMIT).unwrap();
    assert_eq!(app.failure, None, "a data digest error is not fatal");
    // Retried (DNR clear) as often as Linux would, failing each time.
    assert_eq!(app.completions, vec![(1, Status::TRANSIENT_TRANSPORT_ERROR)]);
    assert_eq!(app.recovery.retried, u64::from(MAX_RETRIES));
    let tries = 1 + u64::from(MAX_RETRIES);
    assert_eq!(faulty.stats().nic_placed_bytes, tries * (128 << 10), "the NIC claimed the bytes");
}

#[test]
fn a_one_shot_free_the_host_did_not_expect_is_fatal() {
    let o = DemoOptions { qd: 1, queues: 1, ..opts(Caps::ALL, true) };
    let (mut d, spy) = spied(&o);
    let buf = IoBuf::new(128 << 10);
    let mut app = Script::new(vec![read(0, 256, &buf, 1)]);
    // The NIC "reports" freeing a tag that is not the CID being completed.
    let sockets = spy.sockets.clone();
    app.after_submit = Some(Box::new(move || {
        let sk = sockets.lock().unwrap()[0].clone();
        sk.ctx().freed(0, 7);
    }));
    run_simulated(&mut d.host, &mut d.ctrl, &mut app, LIMIT).unwrap();
    match app.failure {
        Some(HostError::Queue {
            qid: 1,
            error: QueueError::OneShotMismatch { cid: 0, freed: 7 },
        }) => {}
        other => panic!("expected a one-shot mismatch, got {other:?}"),
    }
    assert_eq!(
        app.completions,
        [(1, Status::HOST_PATH_ERROR)],
        "the read does not complete as if nothing happened"
    );
}

#[test]
fn the_nic_refuses_mappings_it_cannot_honour() {
    let o = DemoOptions { qd: 4, queues: 1, ..opts(Caps::ALL, true) };
    let (mut d, spy) = spied(&o);
    let mut app = Script::new(vec![]);
    let sockets = spy.sockets.clone();
    app.after_submit = Some(Box::new(move || {
        let sk = sockets.lock().unwrap()[0].clone();
        let buf = IoBuf::new(64 << 10);
        let io = |tag, sgl: Vec<SgEntry>| DdpIo { tag, sgl: sgl.into(), oneshot: false };
        let page = |off| SgEntry { buf: buf.clone(), offset: off, len: 4096 };
        assert_eq!(sk.setup(io(1, vec![page(0)])), Ok(()));
        assert_eq!(
            sk.setup(io(1, vec![page(4096)])),
            Err(DdpError::Busy(1)),
            "a CID reused while mapped"
        );
        assert_eq!(
            sk.setup(io(99, vec![page(0)])),
            Err(DdpError::BadTag(99)),
            "tags stay below the queue size"
        );
        let far = SgEntry { buf: buf.clone(), offset: 62 << 10, len: 4096 };
        assert_eq!(
            sk.setup(io(2, vec![far])),
            Err(DdpError::BadEntry(0)),
            "an entry outside its buffer"
        );
        let many =
            (0..129).map(|i| SgEntry { buf: buf.clone(), offset: i * 16, len: 16 }).collect();
        assert_eq!(sk.setup(io(2, many)), Err(DdpError::TooManyEntries(129)));
        sk.teardown(1);
        assert_eq!(sk.ctx().take_teardown_done(), vec![1]);
        assert_eq!(sk.setup(io(1, vec![page(0)])), Ok(()), "free again after teardown");
        sk.teardown(1);
    }));
    run_simulated(&mut d.host, &mut d.ctrl, &mut app, LIMIT).unwrap();
    let s = spy.nic.stats();
    assert_eq!((s.ddp_setup, s.ddp_setup_fail, s.ddp_teardown), (2, 4, 2));
}

// ---- a hostile controller ----

/// How a hostile controller rewrites a stream: called with each PDU header
/// (mutable bytes) and each run of data bytes (the PDU and data offset).
type Rewrite = Box<dyn FnMut(&PduRepr, Option<u32>, &mut [u8])>;

/// Follows one direction of a connection to find PDUs to rewrite.
struct Tamper {
    framer: Framer,
    rewrite: Rewrite,
}

impl Tamper {
    fn new(dir: Direction, rewrite: Rewrite) -> Self {
        Self { framer: Framer::new(dir), rewrite }
    }

    fn apply(&mut self, chunk: &mut [u8]) {
        // Find the pieces first, then rewrite them.
        let mut pieces: Vec<(PduRepr, Option<u32>, std::ops::Range<usize>)> = Vec::new();
        let mut at = 0;
        let mut header_start = 0;
        loop {
            if self.framer.at_pdu_start() {
                header_start = at;
            }
            let Ok((n, ev)) = self.framer.next(&chunk[at..]) else { return };
            match ev {
                None => break,
                Some(Event::Header(repr)) => {
                    if let Header::IcReq(ic) = repr.header {
                        self.framer.set_framing(Framing { digests: ic.digests, pda: 0 });
                    }
                    if let Header::IcResp(ic) = repr.header {
                        self.framer.set_framing(Framing { digests: ic.digests, pda: 0 });
                    }
                    pieces.push((repr, None, header_start..at + n));
                }
                Some(Event::Data { offset, bytes }) => {
                    let start = bytes.as_ptr() as usize - chunk.as_ptr() as usize;
                    if let Some(repr) = self.framer.current().copied() {
                        pieces.push((repr, Some(offset), start..start + bytes.len()));
                    }
                }
                Some(Event::End { .. }) => {}
            }
            at += n;
        }
        for (repr, offset, range) in pieces {
            (self.rewrite)(&repr, offset, &mut chunk[range]);
        }
    }
}

struct HostileConn {
    conn: TcpConn,
    ep: Connection,
    inbound: Tamper,
    outbound: Tamper,
    pending_in: Vec<u8>,
    pending_out: Vec<u8>,
}

/// A controller whose byte streams are rewritten on the way in and out:
/// the real controller logic, lying where the test wants it to.
struct Hostile<D: smoltcp_glue::Medium> {
    stack: Stack<D>,
    target: Arc<Target>,
    conns: Vec<HostileConn>,
    make: Box<dyn FnMut() -> (Rewrite, Rewrite)>,
}

impl<D: smoltcp_glue::Medium> Peer for Hostile<D> {
    fn step(&mut self, now: SmolInstant) -> bool {
        let t = to_nvme(now);
        let mut progress = self.stack.poll(now);
        while let Some(conn) = self.stack.accept() {
            let (rin, rout) = (self.make)();
            self.conns.push(HostileConn {
                conn,
                ep: Connection::new(self.target.clone(), None),
                inbound: Tamper::new(Direction::HostToController, rin),
                outbound: Tamper::new(Direction::ControllerToHost, rout),
                pending_in: Vec::new(),
                pending_out: Vec::new(),
            });
        }
        for c in &mut self.conns {
            let mut got = Vec::new();
            self.stack.recv(&mut c.conn, |b| {
                got.extend_from_slice(b);
                b.len()
            });
            if !got.is_empty() {
                c.inbound.apply(&mut got);
                c.pending_in.extend_from_slice(&got);
                progress = true;
            }
            let n = c.ep.handle_input(&c.pending_in, t);
            c.pending_in.drain(..n);
            if c.pending_out.is_empty() {
                let mut out = vec![0u8; 1 << 20];
                let n = c.ep.poll_transmit(&mut out);
                out.truncate(n);
                c.outbound.apply(&mut out);
                c.pending_out = out;
            }
            let mut at = 0;
            let sent = self.stack.send_with(&mut c.conn, |free| {
                let k = free.len().min(c.pending_out.len() - at);
                free[..k].copy_from_slice(&c.pending_out[at..at + k]);
                at += k;
                k
            });
            c.pending_out.drain(..sent);
            progress |= sent > 0;
            if c.ep.is_closed() && c.pending_out.is_empty() {
                self.stack.close(&c.conn);
            }
        }
        progress | self.stack.poll(now)
    }

    fn poll_at(&mut self, now: SmolInstant) -> Option<SmolInstant> {
        self.stack.poll_at(now)
    }
}

/// Build a host over the NIC and a hostile controller over plain smoltcp,
/// on one wire, and run `app`.
fn against_hostile(
    mut make: impl FnMut() -> (Rewrite, Rewrite) + 'static,
    app: &mut dyn HostApp,
) -> NicHandle {
    let o = DemoOptions { qd: 4, queues: 1, ..opts(Caps::ALL, true) };
    let (h, c) = VirtualWire::pair(o.mtu + 14, 512);
    let now = SmolInstant::from_secs(1);
    let (hdev, nic) =
        nvme_ddp::driver::smoltcp::chain(h, Profile::default(), 1, None, Caps::ALL).unwrap();
    let hstack = Stack::new(hdev, StackConfig::new(Ipv4Cidr::new(demo::HOST_IP, 24)), now);
    let cstack = Stack::new(c, StackConfig::new(Ipv4Cidr::new(demo::CONTROLLER_IP, 24)), now);
    let host_cfg = nvme_of::host::HostConfig {
        subnqn: demo::NQN.into(),
        digests: o.digests,
        io_queues: 1,
        queue_depth: o.qd,
        // A lying controller is not worth reconnecting to.
        ctrl_loss_tmo: Some(std::time::Duration::ZERO),
        ..Default::default()
    };
    let remote = std::net::SocketAddrV4::new(demo::CONTROLLER_IP, demo::PORT);
    let mut host = nvme_ddp::driver::smoltcp::HostSide::new(
        hstack,
        nvme_tcp::host::new(host_cfg),
        remote,
        Some(Arc::new(nic.clone())),
    );
    let ram = RamNamespace::new(o.size, 512).unwrap();
    ram.write_at(0, &vec![0x5a; o.size as usize]).unwrap();
    let ns: Arc<dyn Namespace> = Arc::new(ram);
    let target =
        Target::new(TargetConfig { subnqn: demo::NQN.into(), ..TargetConfig::default() }, vec![ns])
            .unwrap();
    let mut cstack = cstack;
    cstack.listen(demo::PORT, 4).unwrap();
    // The admin queue connects first and is left alone; I/O queues lie.
    let mut admin_seen = false;
    let make = move || {
        if std::mem::replace(&mut admin_seen, true) { make() } else { (pass(), pass()) }
    };
    let mut ctrl = Hostile { stack: cstack, target, conns: Vec::new(), make: Box::new(make) };
    run_simulated(&mut host, &mut ctrl, app, LIMIT).unwrap();
    nic
}

fn pass() -> Rewrite {
    Box::new(|_, _, _| {})
}

/// A buffer bigger than its transfer, the rest filled with a guard value.
fn guarded(len: usize) -> IoBuf {
    IoBuf::from_vec(vec![0xee; len + 8192])
}

fn untouched(buf: &IoBuf) -> bool {
    buf.to_vec().iter().all(|&b| b == 0xee)
}

fn expect_term(app: &Script, fes: Fes) {
    match &app.failure {
        Some(HostError::Queue { qid: 1, error }) => match error.downcast_ref::<TcpError>() {
            Some(TcpError::Protocol(e)) if e.fes() == fes => {}
            other => panic!("expected {fes:?}, got {other:?}"),
        },
        other => panic!("expected {fes:?}, got {other:?}"),
    }
}

#[test]
fn c2h_data_for_an_unmapped_cid_is_refused_and_placed_nowhere() {
    let buf = guarded(64 << 10);
    let mut app = Script::new(vec![read(0, 128, &buf, 1)]);
    let nic = against_hostile(
        || {
            let out: Rewrite = Box::new(|repr, off, bytes| {
                // Retarget the C2HData to a CID nothing was sent with.
                if repr.pdu_type() == PduType::C2hData && off.is_none() {
                    bytes[8..10].copy_from_slice(&3u16.to_le_bytes());
                }
            });
            (pass(), out)
        },
        &mut app,
    );
    expect_term(&app, Fes::InvalidHeaderField);
    assert!(untouched(&buf), "no byte of the host's buffer changed");
    assert_eq!(nic.stats().nic_placed_bytes, 0);
}

#[test]
fn c2h_data_beyond_the_mapping_is_refused_and_placed_nowhere() {
    let buf = guarded(64 << 10);
    let mut app = Script::new(vec![read(0, 128, &buf, 1)]);
    let nic = against_hostile(
        || {
            let inbound: Rewrite = Box::new(|repr, off, bytes| {
                // The controller reads twice what the host asked for: NLB
                // (CDW12) and the SGL length, so its answer is 128 KiB of
                // C2HData for a 64 KiB mapping.
                if let Header::CapsuleCmd(c) = repr.header
                    && c.sqe.opcode == 0x02
                    && off.is_none()
                {
                    bytes[8 + 48..8 + 50].copy_from_slice(&255u16.to_le_bytes());
                    bytes[8 + 32..8 + 36].copy_from_slice(&(128u32 << 10).to_le_bytes());
                }
            });
            (inbound, pass())
        },
        &mut app,
    );
    expect_term(&app, Fes::DataOutOfRange);
    assert!(untouched(&buf), "neither the mapped range nor the guard changed");
    assert_eq!(nic.stats().nic_placed_bytes, 0);
}

#[test]
fn c2h_data_forged_for_a_write_is_refused_and_placed_nowhere() {
    let rbuf = guarded(64 << 10);
    let wbuf = IoBuf::from_vec(vec![0x11; 64 << 10]);
    let write =
        Io { kind: IoKind::Write, nsid: 1, slba: 1024, nlb: 128, buf: Some(wbuf.clone()), tag: 2 };
    let mut app = Script::new(vec![read(0, 128, &rbuf, 1), write]);
    let nic = against_hostile(
        || {
            let out: Rewrite = Box::new(|repr, off, bytes| {
                // Address the read's data to the write's CID (1).
                if repr.pdu_type() == PduType::C2hData && off.is_none() {
                    bytes[8..10].copy_from_slice(&1u16.to_le_bytes());
                }
            });
            (pass(), out)
        },
        &mut app,
    );
    expect_term(&app, Fes::InvalidHeaderField);
    assert!(untouched(&rbuf));
    assert!(wbuf.to_vec().iter().all(|&b| b == 0x11), "the write's buffer is not a target either");
    assert_eq!(nic.stats().nic_placed_bytes, 0);
}

#[test]
fn a_corrupted_data_byte_fails_the_digest_and_the_read_is_retried_with_offload_on() {
    let buf = guarded(128 << 10);
    let mut app =
        Script::new(vec![read(0, 256, &buf, 1), read(256, 256, &IoBuf::new(128 << 10), 2)]);
    let nic = against_hostile(
        || {
            let mut done = false;
            let out: Rewrite = Box::new(move |repr, off, bytes| {
                // Flip a byte of the first read's data, past any checksum.
                if let (Header::C2hData(d), Some(o)) = (repr.header, off)
                    && d.cccid == 0
                    && o < 1000
                    && !done
                {
                    bytes[0] ^= 0x40;
                    done = true;
                }
            });
            (pass(), out)
        },
        &mut app,
    );
    assert_eq!(app.failure, None, "a data digest error is not fatal");
    // The failed read is retried (DNR clear) and the retry is clean.
    app.completions.sort_by_key(|c| c.0);
    assert_eq!(app.completions, vec![(1, Status::SUCCESS), (2, Status::SUCCESS)]);
    assert_eq!(app.recovery.retried, 1);
    let s = nic.stats();
    // Both reads and the retry: the first was placed, but the digest did
    // not vouch for it.
    assert_eq!(s.nic_placed_bytes, 3 * (128 << 10));
}
