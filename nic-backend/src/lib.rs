//! A software NIC that implements the ULP DDP contract as a smoltcp `Device`
//! decorator, in the manner of smoltcp's own `FaultInjector<D>`: it wraps
//! any medium, sees every frame on its way up and down, and is invisible
//! when every offload is off.
//!
//! Like every NIC worth the name it offloads TCP checksums both ways
//! (`NETIF_F_RXCSUM`, `NETIF_F_HW_CSUM`), so the stack neither verifies nor
//! computes them. The one kind of frame it withholds is a received segment
//! whose checksum is wrong, which the stack would have dropped; it counts
//! it (`drop`, `rx_csum_bad`). No frame is reordered or edited. The NIC
//! parses each frame, places and digests what it may, leaves hints for the
//! ULP, and hands the frame up. On transmit it writes the data digests the
//! ULP left to it, then the TCP checksum.
//!
//! Placement is zero-copy end to end. While a socket may be placed into,
//! the NIC copies each received frame into a buffer of its own before the
//! stack sees it, as a device DMAs into its receive ring, and splits
//! header from data as it does: payload it placed is written once, into
//! the ULP's buffer, and neither into that ring buffer nor (through
//! `PacketMeta::placed`) into smoltcp's socket ring. Otherwise frames go
//! up in the medium's own buffer.
//!
//! [`OffloadNic`] is the device; [`NicHandle`] is the same NIC as the
//! driver sees it, implementing [`ulp_ddp::DdpDevice`]; [`NicEngine`] is
//! the NIC behind a descriptor ring to its host, which [`NicThread`] runs
//! on a thread of its own (or a caller's loop steps), so that its work is
//! CPU time apart from the host's.

mod copy;
mod flow;
mod frame;
#[doc(hidden)]
pub mod fuzzing;
mod iwarp_flow;
mod mpa;
mod pdu;
mod thread;

pub use copy::{copy_and_crc, copy_then_crc};
pub use thread::{NicEngine, NicThread, thread_cpu_ns};

use flow::{Env, Flow, Mapping, Placed};
use iwarp_flow::{IwarpFlow, StagMapping};
use smoltcp::phy::{self, Device, DeviceCapabilities, PacketMeta};
use smoltcp::time::Instant;
use smoltcp_glue::{Medium, WireEnd};
use std::cell::RefCell;
use std::collections::HashMap;
use std::net::SocketAddrV4;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use ulp_ddp::{
    Caps, Config, DdpDevice, DdpError, DdpIo, FlowId, Limits, NvmeTcpConfig, Role, SgEntry,
    SkHandle, Stag, StagIo, Stats,
};

/// What a NIC offers and what it starts with.
#[derive(Debug, Clone, Copy)]
pub struct NicConfig {
    /// Capabilities the NIC has.
    pub hw: Caps,
    /// Capabilities turned on.
    pub active: Caps,
    pub limits: Limits,
    /// TCP checksum offload, receive and transmit.
    pub checksum: bool,
    /// Keep placed bytes out of the stack's receive ring (header/data
    /// split). Off, placed bytes reach the ring too, and are written twice.
    pub zero_copy: bool,
}

impl Default for NicConfig {
    /// A ConnectX-7-like device: up to 128 SG entries, offload from 32 KiB,
    /// tags below the queue size, 4096 STags per iWARP socket, everything
    /// on.
    fn default() -> Self {
        Self {
            hw: Caps::ALL,
            active: Caps::ALL,
            limits: Limits {
                max_ddp_sgl_len: 128,
                io_threshold: 32 << 10,
                tls: false,
                full_ccid_range: false,
                max_stags: 4096,
            },
            checksum: true,
            zero_copy: true,
        }
    }
}

/// Handshake sequence numbers of a connection, from our side.
#[derive(Debug, Default, Clone, Copy)]
struct Isns {
    peer: Option<u32>,
    local: Option<u32>,
}

/// Connections remembered for their handshakes before the oldest go.
const HANDSHAKES: usize = 4096;

/// An offloaded socket, by the protocol it carries.
enum Sock {
    NvmeTcp(Flow),
    Iwarp(IwarpFlow),
}

impl Sock {
    fn ctx(&self) -> &Arc<ulp_ddp::SkCtx> {
        match self {
            Sock::NvmeTcp(f) => &f.ctx,
            Sock::Iwarp(f) => &f.ctx,
        }
    }

    fn isns(&self) -> (u32, u32) {
        match self {
            Sock::NvmeTcp(f) => (f.peer_isn, f.local_isn),
            Sock::Iwarp(f) => (f.peer_isn, f.local_isn),
        }
    }

    fn rx_next(&self) -> u64 {
        match self {
            Sock::NvmeTcp(f) => f.rx_next(),
            Sock::Iwarp(f) => f.rx_next(),
        }
    }

    fn tx_next(&self) -> u64 {
        match self {
            Sock::NvmeTcp(f) => f.tx_next(),
            Sock::Iwarp(f) => f.tx_next(),
        }
    }

    fn tx_acked(&mut self, ack: u64) {
        match self {
            Sock::NvmeTcp(f) => f.tx_acked(ack),
            Sock::Iwarp(f) => f.tx_acked(ack),
        }
    }

    fn rx_segment(&mut self, off: u64, payload: &[u8], env: &mut Env) {
        match self {
            Sock::NvmeTcp(f) => f.rx_segment(off, payload, env),
            Sock::Iwarp(f) => f.rx_segment(off, payload, env),
        }
    }

    fn rx_synced(&self) -> bool {
        match self {
            Sock::NvmeTcp(f) => f.rx_synced(),
            Sock::Iwarp(f) => f.rx_synced(),
        }
    }

    fn iwarp(&mut self) -> Result<&mut IwarpFlow, DdpError> {
        match self {
            Sock::Iwarp(f) => Ok(f),
            Sock::NvmeTcp(_) => Err(DdpError::WrongUlp),
        }
    }
}

struct State {
    cfg: NicConfig,
    /// The medium below finishes transmit checksums.
    csum_below: bool,
    /// The medium below verified every received checksum.
    verified_below: bool,
    handshakes: HashMap<(SocketAddrV4, SocketAddrV4), Isns>,
    flows: slab::Slab<Sock>,
    by_key: HashMap<(SocketAddrV4, SocketAddrV4), usize>,
    stats: Stats,
}

struct Shared {
    state: Mutex<State>,
    /// Some socket may have data placed: received frames take the DMA path.
    placing: AtomicBool,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A frame on its way up to the stack: `None` withholds it, otherwise
    /// the payload the NIC placed. `split`: the frame is being copied into
    /// the NIC's ring, so placed bytes may be left out of it.
    fn on_rx(&self, frame: &[u8], split: bool) -> Option<Placed> {
        let mut st = self.lock();
        let mut placed = Placed { zero_copy: split && st.cfg.zero_copy, ..Placed::default() };
        st.rx(frame, &mut placed).then_some(placed)
    }

    /// A frame the stack is sending, already written.
    fn on_tx(&self, frame: &mut [u8]) {
        self.lock().tx(frame);
    }

    /// After a change of sockets or capabilities.
    fn update_placing(&self, st: &State) {
        let placing =
            st.cfg.zero_copy && st.cfg.active.contains(Caps::NVME_TCP) && !st.flows.is_empty();
        self.placing.store(placing, Ordering::Relaxed);
    }
}

impl State {
    fn rx(&mut self, frame: &[u8], placed: &mut Placed) -> bool {
        let Some(seg) = frame::parse_headers(frame) else { return true };
        let verified = self.cfg.checksum || self.verified_below;
        if !self.verified_below && self.cfg.checksum && !frame::verify(frame, &seg) {
            self.stats.rx_csum_bad += 1;
            self.stats.drop += 1;
            return false;
        }
        if self.cfg.hw.is_empty() {
            return true;
        }
        // Our side of the connection is the destination.
        let key = (seg.dst, seg.src);
        if seg.syn {
            if verified || frame::verify(frame, &seg) {
                remember(self, key, |i| i.peer = Some(seg.seq));
            }
            return true;
        }
        let Some(&id) = self.by_key.get(&key) else { return true };
        // Nothing is placed from a segment that failed its checksum.
        if !verified && !frame::verify(frame, &seg) {
            return true;
        }
        let State { flows, stats, cfg, .. } = self;
        let Some(flow) = flows.get_mut(id) else { return true };
        let (peer_isn, local_isn) = flow.isns();
        if let Some(ack) = seg.ack {
            let off = frame::stream_offset(ack, local_isn, flow.tx_next());
            flow.tx_acked(off);
        }
        if seg.payload_len > 0 {
            let off = frame::stream_offset(seg.seq, peer_isn, flow.rx_next());
            let payload = &frame[seg.payload_at..seg.payload_at + seg.payload_len];
            placed.base = off;
            let mut env = Env { active: cfg.active, stats, placed };
            flow.rx_segment(off, payload, &mut env);
            placed.frame_at = seg.payload_at;
        }
        true
    }

    fn tx(&mut self, frame: &mut [u8]) {
        let Some(seg) = frame::parse_headers(frame) else { return };
        let wrote = self.tx_digests(frame, &seg);
        if (wrote || self.cfg.checksum) && !self.csum_below {
            seg.fix_checksum(frame);
        }
    }

    /// Write the data digests left to the NIC; whether any were written.
    fn tx_digests(&mut self, frame: &mut [u8], seg: &frame::Segment) -> bool {
        if self.cfg.hw.is_empty() {
            return false;
        }
        let key = (seg.src, seg.dst);
        if seg.syn {
            remember(self, key, |i| i.local = Some(seg.seq));
            return false;
        }
        let Some(&id) = self.by_key.get(&key) else { return false };
        let State { flows, stats, cfg, .. } = self;
        let Some(flow) = flows.get_mut(id) else { return false };
        let wanted = match flow {
            Sock::NvmeTcp(f) => {
                f.tx_crc
                    || (f.config.role == Role::Host && cfg.active.contains(Caps::NVME_TCP_ONESHOT))
            }
            Sock::Iwarp(f) => f.tx_wanted(),
        };
        if seg.payload_len == 0 || !wanted {
            return false;
        }
        let off = frame::stream_offset(seg.seq, flow.isns().1, flow.tx_next());
        let mut unused = Placed::default();
        let mut env = Env { active: cfg.active, stats, placed: &mut unused };
        let payload = &mut frame[seg.payload_at..seg.payload_at + seg.payload_len];
        match flow {
            Sock::NvmeTcp(f) => f.tx_segment(off, payload, &mut env),
            Sock::Iwarp(f) => f.tx_segment(off, payload, &mut env),
        }
    }
}

fn remember(st: &mut State, key: (SocketAddrV4, SocketAddrV4), f: impl FnOnce(&mut Isns)) {
    if st.handshakes.len() >= HANDSHAKES && !st.handshakes.contains_key(&key) {
        let keep = &st.by_key;
        st.handshakes.retain(|k, _| keep.contains_key(k));
    }
    f(st.handshakes.entry(key).or_default());
}

/// The software NIC over device `D`.
pub struct OffloadNic<D> {
    inner: D,
    shared: Arc<Shared>,
    /// `NicConfig::checksum`, fixed at creation; kept here because smoltcp
    /// asks for the capabilities on every poll and they need no lock.
    checksum: bool,
    /// Receive buffers, recycled: the NIC's receive ring.
    ring: RefCell<Vec<Vec<u8>>>,
}

/// The NIC as its driver sees it: the ULP DDP device operations.
#[derive(Clone)]
pub struct NicHandle {
    shared: Arc<Shared>,
}

impl<D> OffloadNic<D> {
    pub fn new(inner: D, cfg: NicConfig) -> Self
    where
        D: Device,
    {
        let state = State {
            cfg: NicConfig { active: cfg.active.intersection(cfg.hw), ..cfg },
            // A medium that finishes transmit checksums itself (a TAP with
            // checksum offload) leaves the NIC none to write, and one that
            // checks received ones none to verify.
            csum_below: !inner.capabilities().checksum.tcp.tx(),
            verified_below: !inner.capabilities().checksum.tcp.rx(),
            handshakes: HashMap::new(),
            flows: slab::Slab::new(),
            by_key: HashMap::new(),
            stats: Stats::default(),
        };
        Self {
            inner,
            shared: Arc::new(Shared { state: Mutex::new(state), placing: AtomicBool::new(false) }),
            checksum: cfg.checksum,
            ring: RefCell::default(),
        }
    }

    pub fn handle(&self) -> NicHandle {
        NicHandle { shared: self.shared.clone() }
    }

    pub fn get_ref(&self) -> &D {
        &self.inner
    }

    pub fn get_mut(&mut self) -> &mut D {
        &mut self.inner
    }
}

impl<D: Device> OffloadNic<D> {
    /// Move one received frame through the NIC into `slot`, a transmit
    /// token of the ring towards the host. False when the medium had none.
    pub(crate) fn receive_into<T: phy::TxToken>(&mut self, now: Instant, mut slot: T) -> bool {
        let Some((rx, _)) = self.inner.receive(now) else { return false };
        self.shared.receive(rx, |frame| {
            if let Some((frame, placed)) = frame {
                slot.set_meta(placed.meta());
                slot.consume(frame.len(), |dst| placed.dma(dst, frame));
            }
        });
        true
    }
}

impl Shared {
    /// Take frame `rx` through the NIC's receive path and give it to
    /// `deliver` with what was placed of it, or `None` if it was withheld.
    fn receive<R>(
        &self,
        rx: impl phy::RxToken,
        deliver: impl FnOnce(Option<(&[u8], &Placed)>) -> R,
    ) -> R {
        rx.consume(|frame| match self.on_rx(frame, true) {
            Some(placed) => deliver(Some((frame, &placed))),
            None => deliver(None),
        })
    }
}

/// A received frame on its way to the stack.
pub struct RxToken<'a, T>(Rx<'a, T>);

enum Rx<'a, T> {
    /// In the medium's buffer, the NIC's work done as it goes up (nothing
    /// is placed, so nothing needs saying before the stack looks).
    Through { inner: T, shared: &'a Shared },
    /// In the NIC's receive ring, with what was placed of it; empty if
    /// withheld. The buffer is reused and may be longer than `len`.
    Ring { frame: Vec<u8>, len: usize, meta: PacketMeta, ring: &'a RefCell<Vec<Vec<u8>>> },
}

pub struct TxToken<'a, T> {
    inner: T,
    shared: &'a Shared,
}

impl<T: phy::RxToken> phy::RxToken for RxToken<'_, T> {
    fn meta(&self) -> PacketMeta {
        match &self.0 {
            Rx::Through { inner, .. } => inner.meta(),
            Rx::Ring { meta, .. } => *meta,
        }
    }

    fn consume<R, F: FnOnce(&[u8]) -> R>(self, f: F) -> R {
        match self.0 {
            // A withheld frame goes up empty: the stack discards it unparsed.
            Rx::Through { inner, shared } => {
                inner.consume(
                    |frame| if shared.on_rx(frame, false).is_some() { f(frame) } else { f(&[]) },
                )
            }
            Rx::Ring { frame, len, ring, .. } => {
                let r = f(&frame[..len]);
                let mut ring = ring.borrow_mut();
                if ring.len() < RING_BUFFERS {
                    ring.push(frame);
                }
                r
            }
        }
    }
}

impl<T: phy::TxToken> phy::TxToken for TxToken<'_, T> {
    fn set_meta(&mut self, meta: PacketMeta) {
        self.inner.set_meta(meta)
    }

    fn consume<R, F: FnOnce(&mut [u8]) -> R>(self, len: usize, f: F) -> R {
        let shared = self.shared;
        self.inner.consume(len, |frame| {
            let r = f(frame);
            shared.on_tx(frame);
            r
        })
    }
}

/// Receive buffers the ring keeps at most.
const RING_BUFFERS: usize = 64;

impl<D: Device> Device for OffloadNic<D> {
    type RxToken<'a>
        = RxToken<'a, D::RxToken<'a>>
    where
        Self: 'a;
    type TxToken<'a>
        = TxToken<'a, D::TxToken<'a>>
    where
        Self: 'a;

    fn receive(&mut self, now: Instant) -> Option<(Self::RxToken<'_>, Self::TxToken<'_>)> {
        if !self.shared.placing.load(Ordering::Relaxed) {
            let shared = &*self.shared;
            let (rx, tx) = self.inner.receive(now)?;
            return Some((
                RxToken(Rx::Through { inner: rx, shared }),
                TxToken { inner: tx, shared },
            ));
        }
        let OffloadNic { inner, shared, ring, .. } = self;
        let shared = &**shared;
        let (rx, tx) = inner.receive(now)?;
        let mut frame = ring.borrow_mut().pop().unwrap_or_default();
        let (len, meta) = shared.receive(rx, |got| match got {
            Some((bytes, placed)) => {
                // Grown once, then reused: never zeroed again.
                if frame.len() < bytes.len() {
                    frame.resize(bytes.len(), 0);
                }
                placed.dma(&mut frame[..bytes.len()], bytes);
                (bytes.len(), placed.meta())
            }
            None => (0, PacketMeta::default()),
        });
        Some((RxToken(Rx::Ring { frame, len, meta, ring }), TxToken { inner: tx, shared }))
    }

    fn transmit(&mut self, now: Instant) -> Option<Self::TxToken<'_>> {
        let shared = &*self.shared;
        self.inner.transmit(now).map(|tx| TxToken { inner: tx, shared })
    }

    fn capabilities(&self) -> DeviceCapabilities {
        let mut caps = self.inner.capabilities();
        if self.checksum {
            caps.checksum.tcp = phy::Checksum::None;
        }
        caps
    }
}

impl<D: Medium> Medium for OffloadNic<D> {
    fn poll_at(&self) -> Option<Instant> {
        self.inner.poll_at()
    }

    fn flush(&self) {
        self.inner.flush()
    }

    fn wait(&self, timeout: Option<smoltcp::time::Duration>) {
        self.inner.wait(timeout)
    }

    fn wait_with(&self, also: &WireEnd, timeout: Option<smoltcp::time::Duration>) {
        self.inner.wait_with(also, timeout)
    }

    fn waker(&self) -> std::task::Waker {
        self.inner.waker()
    }
}

impl NicHandle {
    /// Whether the receive context of a socket follows real PDU boundaries
    /// (for tests and reports).
    pub fn rx_synced(&self, sk: &SkHandle) -> Option<bool> {
        self.shared.lock().flows.get(sk.id as usize).map(Sock::rx_synced)
    }

    /// Offloaded sockets.
    pub fn sockets(&self) -> usize {
        self.shared.lock().flows.len()
    }

    /// Turn header/data split on or off ([`NicConfig::zero_copy`]).
    pub fn set_zero_copy(&self, on: bool) {
        let mut st = self.shared.lock();
        st.cfg.zero_copy = on;
        self.shared.update_placing(&st);
    }
}

impl DdpDevice for NicHandle {
    fn limits(&self) -> Limits {
        self.shared.lock().cfg.limits
    }

    fn caps(&self) -> (Caps, Caps) {
        let st = self.shared.lock();
        (st.cfg.hw, st.cfg.active)
    }

    fn set_caps(&self, wanted: Caps) -> Result<Caps, DdpError> {
        let mut st = self.shared.lock();
        let missing = wanted.without(st.cfg.hw);
        if !missing.is_empty() {
            return Err(DdpError::Unsupported(missing));
        }
        st.cfg.active = wanted;
        self.shared.update_placing(&st);
        Ok(wanted)
    }

    fn sk_add(&self, id: FlowId, config: &Config) -> Result<SkHandle, DdpError> {
        let mut st = self.shared.lock();
        let key = (id.local, id.remote);
        let result = (|| {
            if st.cfg.active.is_empty() {
                return Err(DdpError::NotActive(Caps::ALL));
            }
            if st.by_key.contains_key(&key) {
                return Err(DdpError::Exists);
            }
            let isn = st.handshakes.get(&key).copied().unwrap_or_default();
            let (Some(peer), Some(local)) = (isn.peer, isn.local) else {
                return Err(DdpError::NoHandshake);
            };
            let (sock, tx_crc) = match config {
                Config::NvmeTcp(config) => {
                    let data_digest = config.dgst & NvmeTcpConfig::DGST_DATA != 0;
                    let tx_crc = data_digest && st.cfg.active.contains(Caps::NVME_TCP_DDGST_TX);
                    let table = if st.cfg.limits.full_ccid_range {
                        65536
                    } else {
                        config.queue_size.clamp(1, 65536) as usize
                    };
                    (Sock::NvmeTcp(Flow::new(*config, peer, local, tx_crc, table)), tx_crc)
                }
                Config::Iwarp(config) => {
                    if st.cfg.limits.max_stags == 0 {
                        return Err(DdpError::WrongUlp);
                    }
                    let tx_crc = config.crc && st.cfg.active.contains(Caps::NVME_TCP_DDGST_TX);
                    let oneshot = st.cfg.active.contains(Caps::NVME_TCP_ONESHOT);
                    let flow = IwarpFlow::new(*config, peer, local, tx_crc, oneshot);
                    (Sock::Iwarp(flow), tx_crc)
                }
            };
            let ctx = sock.ctx().clone();
            let slot = st.flows.insert(sock);
            st.by_key.insert(key, slot);
            let granted =
                if tx_crc { st.cfg.active } else { st.cfg.active.without(Caps::NVME_TCP_DDGST_TX) };
            Ok(SkHandle { id: slot as u32, ctx, offloads: granted })
        })();
        self.shared.update_placing(&st);
        match &result {
            Ok(_) => st.stats.sk_add += 1,
            Err(e) => {
                st.stats.sk_add_fail += 1;
                tracing::debug!(error = %e, local = %id.local, remote = %id.remote, "sk_add refused");
            }
        }
        result
    }

    fn sk_del(&self, sk: &SkHandle) {
        let mut st = self.shared.lock();
        if st.flows.contains(sk.id as usize) {
            st.flows.remove(sk.id as usize);
            st.by_key.retain(|_, v| *v != sk.id as usize);
            st.stats.sk_del += 1;
            self.shared.update_placing(&st);
        }
    }

    fn setup(&self, sk: &SkHandle, io: DdpIo) -> Result<(), DdpError> {
        let mut st = self.shared.lock();
        let (active, limits) = (st.cfg.active, st.cfg.limits);
        let result = (|| {
            if !active.contains(Caps::NVME_TCP) {
                return Err(DdpError::NotActive(Caps::NVME_TCP));
            }
            if io.oneshot && !active.contains(Caps::NVME_TCP_ONESHOT) {
                return Err(DdpError::NotActive(Caps::NVME_TCP_ONESHOT));
            }
            if limits.max_ddp_sgl_len > 0 && io.sgl.len() > limits.max_ddp_sgl_len as usize {
                return Err(DdpError::TooManyEntries(io.sgl.len()));
            }
            let mut entries: Vec<(ulp_ddp::IoBuf, usize, usize)> = Vec::new();
            for (i, e) in io.sgl.iter().enumerate() {
                if e.len == 0 || !e.in_bounds() {
                    return Err(DdpError::BadEntry(i));
                }
                match entries.last_mut() {
                    Some((b, off, len)) if b.same(&e.buf) && *off + *len == e.offset => {
                        *len += e.len
                    }
                    _ => entries.push((e.buf.clone(), e.offset, e.len)),
                }
            }
            if entries.is_empty() {
                return Err(DdpError::Empty);
            }
            let Sock::NvmeTcp(flow) = st.flows.get_mut(sk.id as usize).ok_or(DdpError::NoSocket)?
            else {
                return Err(DdpError::WrongUlp);
            };
            let slot = flow.slot(io.tag).ok_or(DdpError::BadTag(io.tag))?;
            if slot.is_some() {
                return Err(DdpError::Busy(io.tag));
            }
            let len = entries.iter().map(|e| e.2).sum();
            *slot = Some(Mapping { entries, len, oneshot: io.oneshot, live: !io.oneshot });
            Ok(())
        })();
        match &result {
            Ok(()) => st.stats.ddp_setup += 1,
            Err(_) => st.stats.ddp_setup_fail += 1,
        }
        result
    }

    fn teardown(&self, sk: &SkHandle, tag: u16) {
        let mut st = self.shared.lock();
        let State { flows, stats, .. } = &mut *st;
        if let Some(Sock::NvmeTcp(flow)) = flows.get_mut(sk.id as usize)
            && let Some(slot) = flow.slot(tag)
            && slot.take().is_some()
        {
            stats.ddp_teardown += 1;
        }
        // Linux's teardown may complete later; ours is done at once, but the
        // ULP still learns of it through the mailbox, as it would.
        sk.ctx.teardown_done(tag);
    }

    fn resync(&self, sk: &SkHandle, seq: u64) {
        let mut st = self.shared.lock();
        let State { flows, stats, .. } = &mut *st;
        match flows.get_mut(sk.id as usize) {
            Some(Sock::NvmeTcp(f)) => {
                f.resync(seq, stats);
            }
            Some(Sock::Iwarp(f)) => {
                f.resync(seq, stats);
            }
            None => {}
        }
    }

    fn stats(&self) -> Stats {
        self.shared.lock().stats
    }

    fn stag_setup(&self, sk: &SkHandle, io: StagIo) -> Result<(), DdpError> {
        self.map_stag(sk, io, None)
    }

    fn stag_advertise(&self, sk: &SkHandle, io: StagIo, send_at: u64) -> Result<(), DdpError> {
        self.map_stag(sk, io, Some(send_at))
    }

    fn stag_invalidate(&self, sk: &SkHandle, stag: Stag) {
        let mut st = self.shared.lock();
        let State { flows, stats, .. } = &mut *st;
        if let Some(Sock::Iwarp(f)) = flows.get_mut(sk.id as usize)
            && f.remove_stag(stag)
        {
            stats.stag_invalidate += 1;
        }
    }

    fn recv_setup(&self, sk: &SkHandle, msn: u32, sgl: Vec<SgEntry>) -> Result<(), DdpError> {
        let mut st = self.shared.lock();
        let (active, limits) = (st.cfg.active, st.cfg.limits);
        self.sgl_ok(&limits, active, &sgl)?;
        let flow = st.flows.get_mut(sk.id as usize).ok_or(DdpError::NoSocket)?.iwarp()?;
        if flow.recvs() >= limits.max_stags as usize {
            return Err(DdpError::TooManyStags(limits.max_stags));
        }
        flow.insert_recv(msn, sgl).ok_or(DdpError::Empty)?;
        st.stats.recv_setup += 1;
        Ok(())
    }
}

impl NicHandle {
    /// Check `sgl` against the device's limits and the socket's state.
    fn sgl_ok(&self, limits: &Limits, active: Caps, sgl: &[SgEntry]) -> Result<(), DdpError> {
        if !active.contains(Caps::NVME_TCP) {
            return Err(DdpError::NotActive(Caps::NVME_TCP));
        }
        if limits.max_ddp_sgl_len > 0 && sgl.len() > limits.max_ddp_sgl_len as usize {
            return Err(DdpError::TooManyEntries(sgl.len()));
        }
        match sgl.iter().position(|e| e.len == 0 || !e.in_bounds()) {
            Some(i) => Err(DdpError::BadEntry(i)),
            None => Ok(()),
        }
    }

    /// Map a tagged buffer, live now or when the Send at `arm_at` leaves.
    fn map_stag(&self, sk: &SkHandle, io: StagIo, arm_at: Option<u64>) -> Result<(), DdpError> {
        let mut st = self.shared.lock();
        let (active, limits) = (st.cfg.active, st.cfg.limits);
        let result = (|| {
            self.sgl_ok(&limits, active, &io.sgl)?;
            if arm_at.is_some() && !active.contains(Caps::NVME_TCP_ONESHOT) {
                return Err(DdpError::NotActive(Caps::NVME_TCP_ONESHOT));
            }
            let flow = st.flows.get_mut(sk.id as usize).ok_or(DdpError::NoSocket)?.iwarp()?;
            if flow.stag_busy(io.stag) {
                return Err(DdpError::StagBusy(io.stag));
            }
            if flow.stags() >= limits.max_stags as usize {
                return Err(DdpError::TooManyStags(limits.max_stags));
            }
            let m = StagMapping::new(io, arm_at).ok_or(DdpError::Empty)?;
            if m.map.len == 0 {
                return Err(DdpError::Empty);
            }
            flow.insert_stag(m, arm_at);
            Ok(())
        })();
        match &result {
            Ok(()) => st.stats.stag_setup += 1,
            Err(_) => st.stats.stag_setup_fail += 1,
        }
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use smoltcp::phy::{ChecksumCapabilities, RxToken as _, TxToken as _};
    use smoltcp::wire::{
        EthernetAddress, EthernetFrame, EthernetProtocol, EthernetRepr, IpAddress, IpProtocol,
        Ipv4Address, Ipv4Packet, Ipv4Repr, TcpControl, TcpPacket, TcpRepr, TcpSeqNumber,
    };
    use smoltcp_glue::VirtualWire;

    const A: Ipv4Address = Ipv4Address::new(198, 18, 0, 2);
    const B: Ipv4Address = Ipv4Address::new(198, 18, 0, 3);

    /// An Ethernet/IPv4/TCP frame carrying `payload`, its TCP checksum
    /// filled in when `checksum` is set and zero otherwise.
    fn frame(payload: &[u8], checksum: bool) -> Vec<u8> {
        let tcp = TcpRepr {
            src_port: 4420,
            dst_port: 50000,
            control: TcpControl::Psh,
            seq_number: TcpSeqNumber(1000),
            ack_number: Some(TcpSeqNumber(2000)),
            window_len: 1024,
            window_scale: None,
            max_seg_size: None,
            sack_permitted: false,
            sack_ranges: [None; 3],
            timestamp: None,
            payload,
        };
        let ip = Ipv4Repr {
            src_addr: A,
            dst_addr: B,
            next_header: IpProtocol::Tcp,
            payload_len: tcp.header_len() + payload.len(),
            hop_limit: 64,
        };
        let eth = EthernetRepr {
            src_addr: EthernetAddress([2, 0, 0, 0, 0, 1]),
            dst_addr: EthernetAddress([2, 0, 0, 0, 0, 2]),
            ethertype: EthernetProtocol::Ipv4,
        };
        let mut caps = ChecksumCapabilities::default();
        if !checksum {
            caps.tcp = phy::Checksum::None;
        }
        let mut buf = vec![0u8; eth.buffer_len() + ip.buffer_len() + ip.payload_len];
        let mut f = EthernetFrame::new_unchecked(&mut buf[..]);
        eth.emit(&mut f);
        let mut p = Ipv4Packet::new_unchecked(f.payload_mut());
        ip.emit(&mut p, &caps);
        let mut t = TcpPacket::new_unchecked(p.payload_mut());
        tcp.emit(&mut t, &IpAddress::Ipv4(A), &IpAddress::Ipv4(B), &caps);
        buf
    }

    fn tcp_checksum_ok(frame: &[u8]) -> bool {
        let eth = EthernetFrame::new_checked(frame).unwrap();
        let ip = Ipv4Packet::new_checked(eth.payload()).unwrap();
        let tcp = TcpPacket::new_checked(ip.payload()).unwrap();
        tcp.verify_checksum(&IpAddress::Ipv4(A), &IpAddress::Ipv4(B))
    }

    #[test]
    fn checksum_offload_drops_bad_segments_and_fills_outgoing_ones() {
        let now = Instant::from_millis(0);
        let (mut peer, end) = VirtualWire::pair(1514, 8);
        let mut nic = OffloadNic::new(end, NicConfig::default());
        let stack_caps = nic.capabilities().checksum;
        assert!(
            !stack_caps.tcp.rx() && !stack_caps.tcp.tx(),
            "the stack leaves TCP checksums to the NIC"
        );

        let good = frame(b"hello, world", true);
        let mut bad = good.clone();
        *bad.last_mut().unwrap() ^= 1;
        for f in [&bad, &good] {
            peer.transmit(now).unwrap().consume(f.len(), |b| b.copy_from_slice(f));
        }
        let (rx, _) = nic.receive(now).unwrap();
        assert!(rx.consume(|f| f.is_empty()), "a corrupted segment never reaches the stack");
        let (rx, _) = nic.receive(now).unwrap();
        assert_eq!(rx.consume(|f| f.to_vec()), good, "a good one goes up unchanged");
        assert_eq!(nic.handle().stats().rx_csum_bad, 1);

        // The stack sends with no checksum; what reaches the wire has one.
        let unsummed = frame(b"odd-length payload", false);
        assert!(!tcp_checksum_ok(&unsummed));
        nic.transmit(now).unwrap().consume(unsummed.len(), |b| b.copy_from_slice(&unsummed));
        let (rx, _) = peer.receive(now).unwrap();
        let sent = rx.consume(|f| f.to_vec());
        assert!(tcp_checksum_ok(&sent));
        assert_eq!(sent, frame(b"odd-length payload", true));
    }

    #[test]
    fn without_checksum_offload_the_stack_keeps_its_checksums() {
        let now = Instant::from_millis(0);
        let (mut peer, end) = VirtualWire::pair(1514, 8);
        let mut nic = OffloadNic::new(end, NicConfig { checksum: false, ..NicConfig::default() });
        let tcp = nic.capabilities().checksum.tcp;
        assert!(tcp.rx() && tcp.tx());
        let mut bad = frame(b"hello", true);
        *bad.last_mut().unwrap() ^= 1;
        peer.transmit(now).unwrap().consume(bad.len(), |b| b.copy_from_slice(&bad));
        let (rx, _) = nic.receive(now).unwrap();
        assert_eq!(rx.consume(|f| f.to_vec()), bad, "passed up for the stack to judge");
    }
}
