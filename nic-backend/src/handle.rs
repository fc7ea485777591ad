//! The NIC as its driver sees it, [`NicHandle`]: the ULP DDP device
//! operations (`limits`, `caps`, `stats`, `sk_add`), its iWARP and TLS
//! ones, and the sockets added to it (`NicSocket`, handed out as the
//! socket trait of its protocol): `setup`, `teardown`, `resync`, the STag
//! table, posted receives and transmit mappings.
//!
//! It must never place or parse frames; it only changes what the flows may
//! do, under the same lock the data path takes.

use crate::classify::{Shared, State};
use crate::flow::iwarp::{Iwarp, StagMapping};
use crate::flow::nvme_tcp::NvmeTcp;
use crate::flow::tls::Tls;
use crate::flow::{Flow, Protocol, Socket};
use crate::place::Mapping;
use std::any::Any;
use std::sync::Arc;
use ulp_ddp::{
    Caps, DdpDevice, DdpError, DdpIo, DdpSk, FlowId, IwarpConfig, IwarpDevice, IwarpSk, Limits,
    NvmeTcpConfig, NvmeTcpSk, SgEntry, Sgl, SkCtx, Stag, StagIo, Stats, TlsCryptoInfo, TlsDevice,
    TlsDirection, TlsSk, TlsStart, TxFpdus,
};

/// A socket as the NIC's table knows it: its slot, its mailbox (which
/// tells it from a later socket in the same slot), and what was granted.
#[derive(Debug, Clone)]
struct SkHandle {
    id: u32,
    ctx: Arc<SkCtx>,
    offloads: Caps,
}

/// What a socket is added as.
enum Config {
    NvmeTcp(NvmeTcpConfig),
    Iwarp(IwarpConfig),
}

/// A socket added to the NIC, as its ULP holds it: an NVMe/TCP socket
/// ([`NvmeTcpSk`]), an iWARP one ([`IwarpSk`]) or a TLS connection
/// ([`TlsSk`]), each handed out as that trait alone.
struct NicSocket {
    nic: NicHandle,
    sk: SkHandle,
}

/// The NIC as its driver sees it: the ULP DDP device operations.
#[derive(Clone)]
pub struct NicHandle {
    shared: Arc<Shared>,
}

impl NicHandle {
    pub(crate) fn new(shared: Arc<Shared>) -> Self {
        Self { shared }
    }

    /// Turn header/data split on or off ([`NicConfig::zero_copy`](crate::NicConfig::zero_copy)).
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

    fn stats(&self) -> Stats {
        self.shared.lock().stats
    }

    fn sk_add(&self, flow: FlowId, config: &NvmeTcpConfig) -> Result<Arc<dyn NvmeTcpSk>, DdpError> {
        self.add(flow, &Config::NvmeTcp(*config)).map(|sk| self.socket(sk) as _)
    }

    /// Only a NIC that keeps STags follows iWARP streams.
    fn iwarp(&self) -> Option<&dyn IwarpDevice> {
        (self.shared.lock().cfg.limits.max_stags > 0).then_some(self)
    }

    fn tls(&self) -> Option<&dyn TlsDevice> {
        self.shared.lock().cfg.hw.intersects(Caps::TLS).then_some(self)
    }
}

impl TlsDevice for NicHandle {
    fn tls_dev_add(
        &self,
        flow: FlowId,
        dir: TlsDirection,
        crypto: &TlsCryptoInfo,
        start: TlsStart,
    ) -> Result<Arc<dyn TlsSk>, DdpError> {
        self.tls_add(flow, dir, crypto, start).map(|sk| self.socket(sk) as _)
    }
}

impl DdpSk for NicSocket {
    fn ctx(&self) -> &Arc<SkCtx> {
        &self.sk.ctx
    }

    fn offloads(&self) -> Caps {
        self.sk.offloads
    }

    fn resync(&self, seq: u64) {
        self.nic.resync(&self.sk, seq)
    }

    fn tx_setup(&self, sg: SgEntry) -> Result<u64, DdpError> {
        self.nic.tx_setup(&self.sk, sg)
    }

    fn tx_teardown(&self, token: u64) {
        self.nic.tx_teardown(&self.sk, token)
    }

    fn sk_del(&self) {
        self.nic.sk_del(&self.sk)
    }
}

impl NvmeTcpSk for NicSocket {
    fn setup(&self, io: DdpIo) -> Result<(), DdpError> {
        self.nic.setup(&self.sk, io)
    }

    fn teardown(&self, tag: u16) {
        self.nic.teardown(&self.sk, tag)
    }
}

impl IwarpSk for NicSocket {
    fn stag_setup(&self, io: StagIo) -> Result<(), DdpError> {
        self.nic.map_stag(&self.sk, io, None)
    }

    fn stag_advertise(&self, io: StagIo, send_at: u64) -> Result<(), DdpError> {
        self.nic.map_stag(&self.sk, io, Some(send_at))
    }

    fn stag_invalidate(&self, stag: Stag) {
        self.nic.stag_invalidate(&self.sk, stag)
    }

    fn recv_setup(&self, msn: u32, sgl: Sgl) -> Result<(), DdpError> {
        self.nic.recv_setup(&self.sk, msn, sgl)
    }

    fn tx_setup_fpdus(&self, fpdus: Arc<TxFpdus>) -> Result<u64, DdpError> {
        self.nic.tx_setup_fpdus(&self.sk, fpdus)
    }
}

impl TlsSk for NicSocket {
    fn ctx(&self) -> &Arc<SkCtx> {
        &self.sk.ctx
    }

    fn tls_dev_resync(&self, at: TlsStart, rec_seq: u64) {
        self.nic.tls_dev_resync(&self.sk, at, rec_seq)
    }

    fn tls_dev_del(&self, dir: TlsDirection) {
        self.nic.tls_dev_del(&self.sk, dir)
    }
}

impl IwarpDevice for NicHandle {
    fn sk_add(&self, flow: FlowId, config: &IwarpConfig) -> Result<Arc<dyn IwarpSk>, DdpError> {
        self.add(flow, &Config::Iwarp(*config)).map(|sk| self.socket(sk) as _)
    }
}

impl NicHandle {
    fn socket(&self, sk: SkHandle) -> Arc<NicSocket> {
        Arc::new(NicSocket { nic: self.clone(), sk })
    }

    fn add(&self, id: FlowId, config: &Config) -> Result<SkHandle, DdpError> {
        let mut st = self.shared.lock();
        let key = (id.local, id.remote);
        let result = (|| {
            if st.cfg.active.is_empty() {
                return Err(DdpError::NotActive(Caps::ALL));
            }
            // A connection whose records the NIC follows takes the flow
            // inside them; any other may have one flow.
            let under_tls = match st.by_key.get(&key).copied() {
                Some(slot) if tls(&mut st, slot).is_some_and(|t| t.inner.is_none()) => Some(slot),
                Some(_) => return Err(DdpError::Exists),
                None => None,
            };
            let isn = st.handshakes.get(&key).copied().unwrap_or_default();
            let (Some(peer), Some(local)) = (isn.peer, isn.local) else {
                return Err(DdpError::NoHandshake);
            };
            let (sock, tx_crc): (Box<dyn Socket>, bool) = match config {
                Config::NvmeTcp(config) => {
                    let data_digest = config.dgst & NvmeTcpConfig::DGST_DATA != 0;
                    // Inside TLS, digests are written only into records
                    // the NIC seals.
                    let sealed =
                        under_tls.is_none_or(|slot| tls(&mut st, slot).is_some_and(|t| t.seals()));
                    let tx_crc = data_digest && sealed && st.cfg.active.contains(Caps::CRC_TX);
                    let table = if st.cfg.limits.full_ccid_range {
                        65536
                    } else {
                        config.queue_size.clamp(1, 65536) as usize
                    };
                    (Box::new(NvmeTcp::flow(*config, peer, local, tx_crc, table)), tx_crc)
                }
                Config::Iwarp(config) => {
                    if st.cfg.limits.max_stags == 0 {
                        return Err(DdpError::WrongUlp);
                    }
                    let tx_crc = config.crc && st.cfg.active.contains(Caps::CRC_TX);
                    let oneshot = st.cfg.active.contains(Caps::ONESHOT);
                    (Box::new(Iwarp::flow(*config, peer, local, tx_crc, oneshot)), tx_crc)
                }
            };
            let ctx = sock.ctx().clone();
            let slot = match under_tls {
                Some(slot) => {
                    tls(&mut st, slot).ok_or(DdpError::NoSocket)?.inner = Some(sock);
                    slot
                }
                None => {
                    let slot = st.flows.insert(sock);
                    st.by_key.insert(key, slot);
                    slot
                }
            };
            let mut granted = st.cfg.active.without(Caps::TLS);
            if !tx_crc {
                granted = granted.without(Caps::CRC_TX);
            }
            if under_tls.is_some_and(|slot| !tls(&mut st, slot).is_some_and(|t| t.seals())) {
                // Records software seals are sealed from a copy: nothing
                // to gather from. Records the NIC seals take payload by
                // reference like any stream, gathered, then sealed.
                granted = granted.without(Caps::ZC_TX);
            }
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
        // The flow inside a TLS connection goes alone; the records are
        // the driver's to give back (`tls_dev_del`).
        if let Some(t) = tls(&mut st, sk.id as usize) {
            if t.inner.as_ref().is_some_and(|f| Arc::ptr_eq(f.ctx(), &sk.ctx)) {
                t.inner = None;
                st.stats.sk_del += 1;
            }
            return;
        }
        // The socket the handle names, not another in its slot since.
        if st.flows.get(sk.id as usize).is_some_and(|f| Arc::ptr_eq(f.ctx(), &sk.ctx)) {
            // Transmit mappings stay until torn down: the stack may
            // still be sending their bytes.
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
            check_sgl(&limits, active, io.oneshot, &io.sgl)?;
            if io.sgl.is_empty() {
                return Err(DdpError::Empty);
            }
            let slot =
                proto::<NvmeTcp>(&mut st, sk)?.slot(io.tag).ok_or(DdpError::BadTag(io.tag))?;
            if slot.is_some() {
                return Err(DdpError::Busy(io.tag));
            }
            *slot = Some(Mapping::new(io.sgl, io.oneshot, !io.oneshot));
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
        if let Ok(flow) = proto::<NvmeTcp>(&mut st, sk)
            && let Some(slot) = flow.slot(tag)
            && slot.take().is_some()
        {
            st.stats.ddp_teardown += 1;
        }
        // Linux's teardown may complete later; ours is done at once, but the
        // ULP still learns of it through the mailbox, as it would.
        sk.ctx.teardown_done(tag);
    }

    fn resync(&self, sk: &SkHandle, seq: u64) {
        let mut st = self.shared.lock();
        let State { flows, stats, .. } = &mut *st;
        if let Some(f) = flows.get_mut(sk.id as usize) {
            f.resync(seq, stats);
        }
    }

    fn stag_invalidate(&self, sk: &SkHandle, stag: Stag) {
        let mut st = self.shared.lock();
        if let Ok(f) = proto::<Iwarp>(&mut st, sk)
            && f.remove_stag(stag)
        {
            st.stats.stag_invalidate += 1;
        }
    }

    fn tx_setup(&self, sk: &SkHandle, sg: SgEntry) -> Result<u64, DdpError> {
        let mut st = self.shared.lock();
        let result = match () {
            _ if !st.cfg.active.contains(Caps::ZC_TX) => Err(DdpError::NotActive(Caps::ZC_TX)),
            _ if !st.flows.contains(sk.id as usize) => Err(DdpError::NoSocket),
            _ => st.tx_maps.insert(sk.id, sg),
        };
        match &result {
            Ok(_) => st.stats.tx_setup += 1,
            Err(_) => st.stats.tx_setup_fail += 1,
        }
        result
    }

    /// Only an iWARP socket's messages are cut into FPDUs.
    fn tx_setup_fpdus(&self, sk: &SkHandle, fpdus: Arc<TxFpdus>) -> Result<u64, DdpError> {
        let mut st = self.shared.lock();
        let iwarp = proto::<Iwarp>(&mut st, sk).map(|_| ());
        let result = match iwarp {
            _ if !st.cfg.active.contains(Caps::ZC_TX) => Err(DdpError::NotActive(Caps::ZC_TX)),
            Err(e) => Err(e),
            Ok(()) => st.tx_maps.insert_fpdus(sk.id, fpdus),
        };
        match &result {
            Ok(_) => st.stats.tx_setup += 1,
            Err(_) => st.stats.tx_setup_fail += 1,
        }
        result
    }

    fn tx_teardown(&self, sk: &SkHandle, token: u64) {
        let mut st = self.shared.lock();
        if st.tx_maps.remove(sk.id, token) {
            st.stats.tx_teardown += 1;
        }
    }

    fn tls_add(
        &self,
        id: FlowId,
        dir: TlsDirection,
        crypto: &TlsCryptoInfo,
        start: TlsStart,
    ) -> Result<SkHandle, DdpError> {
        let mut st = self.shared.lock();
        let key = (id.local, id.remote);
        let cap = match dir {
            TlsDirection::Rx => Caps::TLS_RX,
            TlsDirection::Tx => Caps::TLS_TX,
        };
        let result = (|| {
            if !st.cfg.active.contains(cap) {
                return Err(DdpError::NotActive(cap));
            }
            // Decrypting rewrites segments: a stack that checks their
            // checksums itself would drop every one.
            if dir == TlsDirection::Rx && !st.cfg.checksum && !st.verified_below {
                return Err(DdpError::Unsupported(cap));
            }
            let (slot, made) = match st.by_key.get(&key) {
                Some(&slot) => (slot, false),
                None => {
                    let isn = st.handshakes.get(&key).copied().unwrap_or_default();
                    let (Some(peer), Some(local)) = (isn.peer, isn.local) else {
                        return Err(DdpError::NoHandshake);
                    };
                    let slot = st.flows.insert(Box::new(Tls::new(peer, local, isn.rx_seen)));
                    st.by_key.insert(key, slot);
                    (slot, true)
                }
            };
            let tls = tls(&mut st, slot).ok_or(DdpError::Exists)?;
            let added = tls.add(dir, crypto, start);
            let ctx = tls.ctx.clone();
            if added.is_err() && made {
                // Made for this call alone: gone with it.
                st.flows.remove(slot);
                st.by_key.remove(&key);
            }
            added.map(|()| SkHandle { id: slot as u32, ctx, offloads: cap })
        })();
        self.shared.update_placing(&st);
        match &result {
            Ok(_) => st.stats.tls_dev_add += 1,
            Err(e) => {
                st.stats.sk_add_fail += 1;
                tracing::debug!(error = %e, ?dir, "tls_dev_add refused");
            }
        }
        result
    }

    fn tls_dev_del(&self, sk: &SkHandle, dir: TlsDirection) {
        let mut st = self.shared.lock();
        let Some(tls) = tls(&mut st, sk.id as usize) else { return };
        if !Arc::ptr_eq(&tls.ctx, &sk.ctx) {
            return;
        }
        tls.del(dir);
        if tls.finished() {
            // Otherwise it goes once the peer has every record it sealed.
            st.flows.remove(sk.id as usize);
            st.by_key.retain(|_, v| *v != sk.id as usize);
        }
        st.stats.tls_dev_del += 1;
        self.shared.update_placing(&st);
    }

    fn tls_dev_resync(&self, sk: &SkHandle, at: TlsStart, rec_seq: u64) {
        let mut st = self.shared.lock();
        let State { flows, stats, .. } = &mut *st;
        let flow: Option<&mut dyn Any> = flows.get_mut(sk.id as usize).map(|f| f.as_mut() as _);
        if let Some(tls) = flow.and_then(|f| f.downcast_mut::<Tls>()) {
            tls.tls_resync(at, rec_seq, stats);
        }
    }

    fn recv_setup(&self, sk: &SkHandle, msn: u32, sgl: Sgl) -> Result<(), DdpError> {
        let mut st = self.shared.lock();
        let (active, limits) = (st.cfg.active, st.cfg.limits);
        check_sgl(&limits, active, false, &sgl)?;
        let flow = proto::<Iwarp>(&mut st, sk)?;
        if flow.recvs() >= limits.max_stags as usize {
            return Err(DdpError::TooManyStags(limits.max_stags));
        }
        flow.insert_recv(msn, sgl).ok_or(DdpError::Empty)?;
        st.stats.recv_setup += 1;
        Ok(())
    }
}

/// The protocol side of socket `sk`, if it speaks `P` (inside TLS, or
/// not).
fn proto<'a, P: Protocol>(st: &'a mut State, sk: &SkHandle) -> Result<&'a mut P, DdpError> {
    let mut flow: &mut dyn Any =
        st.flows.get_mut(sk.id as usize).ok_or(DdpError::NoSocket)?.as_mut();
    if flow.is::<Tls>() {
        let inner = flow.downcast_mut::<Tls>().and_then(|t| t.inner.as_mut());
        flow = inner.ok_or(DdpError::NoSocket)?.as_mut();
    }
    Ok(&mut flow.downcast_mut::<Flow<P>>().ok_or(DdpError::WrongUlp)?.proto)
}

/// The TLS socket in slot `slot`, if it is one.
fn tls(st: &mut State, slot: usize) -> Option<&mut Tls> {
    let flow: &mut dyn Any = st.flows.get_mut(slot)?.as_mut();
    flow.downcast_mut::<Tls>()
}

/// Check a request to map `sgl` against the offloads it needs (one-shot
/// too, if `oneshot`) and the device's limits. The only check of an SGL.
fn check_sgl(
    limits: &Limits,
    active: Caps,
    oneshot: bool,
    sgl: &[SgEntry],
) -> Result<(), DdpError> {
    if !active.contains(Caps::DDP) {
        return Err(DdpError::NotActive(Caps::DDP));
    }
    if oneshot && !active.contains(Caps::ONESHOT) {
        return Err(DdpError::NotActive(Caps::ONESHOT));
    }
    if limits.max_ddp_sgl_len > 0 && sgl.len() > limits.max_ddp_sgl_len as usize {
        return Err(DdpError::TooManyEntries(sgl.len()));
    }
    match sgl.iter().position(|e| e.len == 0 || !e.in_bounds()) {
        Some(i) => Err(DdpError::BadEntry(i)),
        None => Ok(()),
    }
}

impl NicHandle {
    /// Map a tagged buffer, live now or when the Send at `arm_at` leaves.
    fn map_stag(&self, sk: &SkHandle, io: StagIo, arm_at: Option<u64>) -> Result<(), DdpError> {
        let mut st = self.shared.lock();
        let (active, limits) = (st.cfg.active, st.cfg.limits);
        let result = (|| {
            check_sgl(&limits, active, false, &io.sgl)?;
            if arm_at.is_some() && !active.contains(Caps::ONESHOT) {
                return Err(DdpError::NotActive(Caps::ONESHOT));
            }
            let flow = proto::<Iwarp>(&mut st, sk)?;
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
