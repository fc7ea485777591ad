//! Fabrics and admin commands: Connect, Property Get/Set, Identify, Get Log
//! Page, Get/Set Features, Asynchronous Event Request, Keep Alive, Abort.

use super::queue::{Data, DataPtr, Outcome, Queue};
use super::{Association, CtrlQueue, lock};
use crate::namespace::Namespace;
use crate::nvme::identify::{self, IdentifyController, IdentifyNamespace, cns, nidt};
use crate::nvme::log::{self, DiscoveryEntry, GetLogPage, SmartLog, lid};
use crate::nvme::{
    ConnectData, DISCOVERY_NQN, FabricsCommand, NQN_MAX_LEN, PropertySize, Sqe, Status, admin, fid,
    io, property,
};
use crate::time::Instant;
use std::sync::atomic::Ordering;
use std::time::Duration;
use ulp_ddp::SgEntry;

/// Keep alive timeout a discovery controller gets when the host asks for none.
const DISCOVERY_KATO: Duration = Duration::from_secs(120);
/// Keep alive granularity (KAS) in 100 ms units.
const KAS: u16 = 10;
/// Asynchronous Event Requests a host may have outstanding, 0-based (AERL).
const AERL: u8 = 3;
/// The fewest admin queue entries a port may offer (ASQSZ).
const MIN_ASQSZ: u16 = 32;
/// CAP.TO: worst-case enable time, in 500 ms units.
const CAP_TO: u8 = 15;
/// Connect response DW0 bit 17, ATR: the host must authenticate the queue.
pub(crate) const CONNECT_ATR: u64 = 1 << 17;

/// Connect Invalid Parameters, naming the offending byte: `in_data` says
/// whether the offset is into the Connect data (IATTR) or the SQE.
fn invalid_param(in_data: bool, offset: u16) -> Outcome {
    let result = (u64::from(in_data) << 16) | u64::from(offset);
    Outcome::Complete { status: Status::CONNECT_INVALID_PARAMETERS, result, data: None }
}

fn result(value: u64) -> Outcome {
    Outcome::Complete { status: Status::SUCCESS, result: value, data: None }
}

/// A namespace GUID: a hash of the subsystem and what identifies the
/// stored data (the serial number for data that dies with the target),
/// then the NSID.
fn nguid(subnqn: &str, serial: &str, ns: &dyn Namespace, nsid: u32) -> [u8; 16] {
    let store = match ns.identity() {
        Some(id) => id.to_le_bytes().to_vec(),
        None => serial.as_bytes().to_vec(),
    };
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in subnqn.bytes().chain([0]).chain(store) {
        h = (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3);
    }
    let mut g = [0u8; 16];
    g[..8].copy_from_slice(&h.to_be_bytes());
    g[12..].copy_from_slice(&nsid.to_be_bytes());
    g
}

impl CtrlQueue {
    pub(super) fn fabrics(&mut self, sqe: &Sqe, data: Data, now: Instant) -> Outcome {
        match FabricsCommand::parse(sqe) {
            FabricsCommand::Connect { recfmt, qid, sqsize, cattr, kato } => {
                self.connect(sqe, data, recfmt, qid, sqsize, cattr, kato, now)
            }
            FabricsCommand::PropertyGet { size, offset } => self.property_get(size, offset),
            FabricsCommand::PropertySet { size, offset, value } => {
                self.property_set(size, offset, value, now)
            }
            FabricsCommand::AuthSend { secp, spsp, tl } if self.queue.is_some() => {
                self.auth_send(sqe, data, secp, spsp, tl, now)
            }
            FabricsCommand::AuthReceive { secp, spsp, al } if self.queue.is_some() => {
                self.auth_receive(sqe, secp, spsp, al, now)
            }
            // Before Connect, as anything else: Invalid Opcode, as nvmet.
            FabricsCommand::AuthSend { .. }
            | FabricsCommand::AuthReceive { .. }
            | FabricsCommand::Other(_) => Outcome::status(Status::INVALID_OPCODE),
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn connect(
        &mut self,
        sqe: &Sqe,
        data: Data,
        recfmt: u16,
        qid: u16,
        sqsize: u16,
        cattr: u8,
        kato: u32,
        now: Instant,
    ) -> Outcome {
        if self.queue.is_some() {
            return Outcome::status(Status::COMMAND_SEQUENCE_ERROR);
        }
        // Connect data travels in the capsule on TCP (an R2T for it crashed
        // Linux nvmet once); RDMA has no in-capsule data on the admin queue,
        // so the controller reads it from the host's keyed buffer.
        let fetch = self.binding.admin_inline == 0 && self.data_ptr(sqe) == DataPtr::Remote;
        let d = match self.host_data(sqe, data, ConnectData::LEN) {
            Ok(None) if fetch => return Outcome::NeedData(ConnectData::LEN as u32),
            Ok(Some((buf, _))) if sqe.sgl.data_len() as usize == ConnectData::LEN => {
                let mut raw = [0u8; ConnectData::LEN];
                raw.copy_from_slice(&buf.lock()[..ConnectData::LEN]);
                ConnectData::parse(&raw)
            }
            _ => return Outcome::status(Status::DATA_SGL_LENGTH_INVALID),
        };
        if recfmt != 0 {
            return Outcome::status(Status::CONNECT_INCOMPATIBLE_FORMAT);
        }
        let discovery = d.subnqn == DISCOVERY_NQN;
        if !discovery && d.subnqn != self.target.subnqn() {
            return invalid_param(true, ConnectData::OFFSET_SUBNQN);
        }
        // A HOSTNQN that does not end within its field is malformed. An
        // empty one is let in where any host is (as Linux nvmet and SPDK
        // let it in).
        if d.hostnqn.len() > NQN_MAX_LEN {
            return invalid_param(true, ConnectData::OFFSET_HOSTNQN);
        }
        // Any host may ask the discovery controller; what it lists is
        // filtered by the same allow-list.
        let access = &self.target.config().access;
        if !discovery && !access.allows(&d.hostnqn) {
            self.target.counters.hosts_refused.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(
                hostnqn = %d.hostnqn,
                subnqn = %d.subnqn,
                "host refused: not on the subsystem's allow-list (`controller --allow-host NQN` admits it)"
            );
            // Linux nvmet points at the HOSTNQN the way Invalid Parameters does.
            let result = (1 << 16) | u64::from(ConnectData::OFFSET_HOSTNQN);
            return Outcome::Complete { status: Status::CONNECT_INVALID_HOST, result, data: None };
        }
        let size = u32::from(sqsize) + 1;
        let max = u32::from(self.queue_size(discovery));
        if sqsize == 0 || size > max {
            return invalid_param(false, 44);
        }
        // A host with a secret authenticates every queue (ATR in the
        // result, as nvmet sets it); the discovery controller asks none.
        let must_auth = !discovery && access.keys(&d.hostnqn).is_some();
        let sq_flow_control = cattr & FabricsCommand::CATTR_DISABLE_SQ_FLOW_CONTROL == 0;
        let assoc = if qid == 0 {
            if d.cntlid != ConnectData::DYNAMIC_CNTLID {
                return invalid_param(true, ConnectData::OFFSET_CNTLID);
            }
            let kato = match kato {
                0 if discovery => Some(DISCOVERY_KATO),
                0 => None,
                ms => Some(Duration::from_millis(u64::from(ms))),
            };
            let mut fresh = Association {
                discovery,
                subnqn: d.subnqn.clone(),
                hostnqn: d.hostnqn.clone(),
                hostid: d.hostid,
                authenticated: !must_auth,
                ..Association::default()
            };
            fresh.set_kato(kato, now);
            if must_auth {
                // Keep alive starts once the host has authenticated: a
                // host sends none while it works out a large group's
                // Diffie-Hellman (Linux's first use of ffdhe8192 self-tests
                // for seconds), and the connect timeout bounds the wait.
                fresh.pause_keep_alive();
            }
            match self.target.create_association(fresh) {
                Some(a) => a,
                None => return Outcome::status(Status::CONNECT_CONTROLLER_BUSY),
            }
        } else {
            let found = self.target.find_association(d.cntlid).filter(|a| {
                let a = lock(a);
                !a.hot.dead() && !a.discovery && a.hostnqn == d.hostnqn && a.subnqn == d.subnqn
            });
            let Some(assoc) = found else {
                return invalid_param(true, ConnectData::OFFSET_CNTLID);
            };
            let a = lock(&assoc);
            if !a.authenticated {
                // nvmet 6.12 would take the queue and have it authenticate
                // on its own; the specification ties I/O queues to an
                // authenticated admin queue, and so do we.
                tracing::warn!(cntlid = a.cntlid, qid, hostnqn = %d.hostnqn, "I/O queue Connect before the admin queue authenticated; refused");
                return Outcome::status(Status::AUTH_REQUIRED);
            }
            if !a.ready() {
                return Outcome::status(Status::COMMAND_SEQUENCE_ERROR);
            }
            let allowed =
                if a.io_queues > 0 { a.io_queues } else { self.target.config().max_io_queues };
            if qid > allowed {
                return invalid_param(false, 42);
            }
            if a.connected.contains(&qid) {
                return Outcome::status(Status::COMMAND_SEQUENCE_ERROR);
            }
            a.traffic(now);
            drop(a);
            assoc
        };
        let (cntlid, generation, hot) = {
            let mut a = lock(&assoc);
            a.connected.insert(qid);
            (a.cntlid, a.hot.generation(), a.hot.clone())
        };
        match qid {
            // An association is news to whoever runs the controller; its
            // I/O queues are detail.
            0 => tracing::info!(cntlid, hostnqn = %d.hostnqn, subnqn = %d.subnqn, "host connected"),
            _ => tracing::debug!(cntlid, qid, hostnqn = %d.hostnqn, size, "queue connected"),
        }
        let auth = must_auth.then(crate::auth::CtrlAuth::default);
        if !must_auth {
            self.connect_by = None;
        }
        let queue =
            Queue { assoc, hot, qid, size, sq_flow_control, sqhd: 0, cntlid, generation, auth };
        self.bind(queue);
        result(u64::from(cntlid) | if must_auth { CONNECT_ATR } else { 0 })
    }

    /// Entries a queue may have (CAP.MQES + 1, MAXCMD). A discovery
    /// controller offers the subsystem's size, as Linux's nvmet does, so a
    /// host asking for its default 128 need not be clamped; never fewer
    /// than the 32 an admin queue must allow.
    fn queue_size(&self, discovery: bool) -> u16 {
        let size = self.target.config().queue_size.min(self.binding.max_queue_size);
        if discovery { size.max(MIN_ASQSZ) } else { size }
    }

    fn admin_queue(&self) -> Option<&Queue> {
        self.queue.as_ref().filter(|q| q.qid == 0)
    }

    fn property_get(&mut self, size: PropertySize, offset: u32) -> Outcome {
        let Some(q) = self.admin_queue() else { return Outcome::status(Status::INVALID_OPCODE) };
        let a = lock(&q.assoc);
        let mqes = self.queue_size(a.discovery) - 1;
        match (offset, size) {
            (property::CAP, PropertySize::Eight) => result(property::cap(mqes, CAP_TO)),
            (property::VS, PropertySize::Four) => result(u64::from(property::VS_1_3)),
            (property::CC, PropertySize::Four) => result(u64::from(a.cc)),
            (property::CSTS, PropertySize::Four) => result(u64::from(a.csts())),
            _ => Outcome::status(Status::INVALID_FIELD),
        }
    }

    fn property_set(
        &mut self,
        size: PropertySize,
        offset: u32,
        value: u64,
        now: Instant,
    ) -> Outcome {
        let Some(q) = self.admin_queue() else { return Outcome::status(Status::INVALID_OPCODE) };
        if (offset, size) != (property::CC, PropertySize::Four) {
            return Outcome::status(Status::INVALID_FIELD);
        }
        let mut a = lock(&q.assoc);
        let (old, new) = (a.cc, value as u32);
        a.cc = new;
        if new & property::CC_EN != 0 && old & property::CC_EN == 0 {
            let field = |shift: u32, mask: u32| (new >> shift) & mask;
            let entry_sizes_ok = a.discovery || (field(16, 0xf) == 6 && field(20, 0xf) == 4);
            let css_ok = matches!(field(4, 0x7), 0 | 6);
            if entry_sizes_ok && css_ok && field(7, 0xf) == 0 && field(11, 0x7) == 0 {
                a.set_csts(property::CSTS_RDY);
                a.traffic(now);
            } else {
                a.set_csts(property::CSTS_CFS);
            }
        } else if new & property::CC_EN == 0 && old & property::CC_EN != 0 {
            // Controller reset: the I/O queues are deleted (their
            // connections close) and must be connected again, after
            // Number of Queues is set again.
            let csts = a.csts() & !(property::CSTS_RDY | property::CSTS_SHST_MASK);
            a.set_csts(csts);
            a.connected.retain(|&qid| qid == 0);
            a.io_queues = 0;
            a.bump_generation();
        }
        if new & property::CC_SHN_MASK != 0 && old & property::CC_SHN_MASK == 0 {
            let csts = (a.csts() & !property::CSTS_SHST_MASK) | property::CSTS_SHST_COMPLETE;
            a.set_csts(csts);
        } else if new & property::CC_SHN_MASK == 0 {
            let csts = a.csts() & !property::CSTS_SHST_MASK;
            a.set_csts(csts);
        }
        Outcome::ok()
    }

    /// Commands of the admin queue, after Connect.
    pub(super) fn admin(&mut self, sqe: &Sqe, _data: Data, now: Instant) -> Outcome {
        let Some(q) = &self.queue else { return Outcome::status(Status::COMMAND_SEQUENCE_ERROR) };
        let assoc = q.assoc.clone();
        let (ready, discovery) = {
            let a = lock(&assoc);
            (a.ready(), a.discovery)
        };
        if !ready {
            return Outcome::status(Status::COMMAND_SEQUENCE_ERROR);
        }
        match sqe.opcode {
            admin::IDENTIFY => self.identify(sqe, discovery),
            admin::GET_LOG_PAGE => self.get_log_page(sqe, discovery),
            admin::SET_FEATURES => self.set_features(sqe, discovery, now),
            admin::GET_FEATURES => self.get_features(sqe, discovery),
            admin::ASYNC_EVENT_REQUEST if self.held_aers() > usize::from(AERL) => {
                Outcome::status(Status::AER_LIMIT_EXCEEDED)
            }
            admin::ASYNC_EVENT_REQUEST => Outcome::Hold,
            admin::KEEP_ALIVE => {
                let a = lock(&assoc);
                if a.kato.is_none() {
                    return Outcome::status(Status::KEEP_ALIVE_INVALID);
                }
                a.traffic(now);
                Outcome::ok()
            }
            // Abort: the command was not aborted (DW0 bit 0).
            admin::ABORT if !discovery => result(1),
            _ => Outcome::status(Status::INVALID_OPCODE),
        }
    }

    /// Send `bytes` as the command's data, which the host asked to receive
    /// by the transport (C2HData, RDMA Write), exactly that long.
    pub(super) fn data_out(&mut self, sqe: &Sqe, bytes: &[u8]) -> Outcome {
        if self.data_ptr(sqe) != DataPtr::Remote {
            return Outcome::status(Status::SGL_DESCRIPTOR_TYPE_INVALID);
        }
        if sqe.sgl.data_len() as usize != bytes.len() {
            return Outcome::status(Status::DATA_SGL_LENGTH_INVALID);
        }
        let buf = self.pool.get(bytes.len());
        buf.lock()[..bytes.len()].copy_from_slice(bytes);
        let data = Some(SgEntry { buf, offset: 0, len: bytes.len() });
        Outcome::Complete { status: Status::SUCCESS, result: 0, data }
    }

    fn cntlid(&self) -> u16 {
        self.queue.as_ref().map_or(0, |q| q.cntlid)
    }

    fn identify(&mut self, sqe: &Sqe, discovery: bool) -> Outcome {
        let cns = sqe.cdw10 as u8;
        let csi = (sqe.cdw11 >> 24) as u8;
        let mut page = vec![0u8; identify::IDENTIFY_LEN];
        let cfg = self.target.config();
        let namespaces = self.target.namespaces();
        match cns {
            cns::CONTROLLER => self.controller_identity(discovery).emit(&mut page),
            _ if discovery => return Outcome::status(Status::INVALID_FIELD),
            cns::NAMESPACE => {
                let Some(ns) = self.namespace(sqe.nsid) else {
                    return Outcome::status(Status::INVALID_NAMESPACE);
                };
                let blocks = ns.blocks();
                IdentifyNamespace {
                    nsze: blocks,
                    ncap: blocks,
                    nuse: blocks,
                    nmic: 1,
                    dlfeat: 1,
                    nguid: nguid(&cfg.subnqn, &cfg.serial, ns.as_ref(), sqe.nsid),
                    lbads: ns.block_size().trailing_zeros() as u8,
                    ..IdentifyNamespace::default()
                }
                .emit(&mut page)
            }
            cns::ACTIVE_NS_LIST | cns::CSI_ACTIVE_NS_LIST if csi == 0 => {
                if sqe.nsid >= 0xffff_fffe {
                    return Outcome::status(Status::INVALID_NAMESPACE);
                }
                identify::emit_ns_list(&mut page, 1..=namespaces.len() as u32, sqe.nsid)
            }
            cns::NS_DESCRIPTORS => {
                let Some(ns) = self.namespace(sqe.nsid) else {
                    return Outcome::status(Status::INVALID_NAMESPACE);
                };
                let g = nguid(&cfg.subnqn, &cfg.serial, ns.as_ref(), sqe.nsid);
                identify::emit_ns_descriptors(&mut page, &[(nidt::NGUID, &g), (nidt::CSI, &[0])]);
            }
            // The NVM command set's own structures carry nothing we set.
            cns::CSI_NAMESPACE if csi == 0 && self.namespace(sqe.nsid).is_some() => {}
            cns::CSI_CONTROLLER if csi == 0 => {}
            _ => return Outcome::status(Status::INVALID_FIELD),
        }
        self.data_out(sqe, &page)
    }

    fn namespace(&self, nsid: u32) -> Option<&std::sync::Arc<dyn crate::namespace::Namespace>> {
        let i = usize::try_from(nsid).ok()?.checked_sub(1)?;
        self.target.namespaces().get(i)
    }

    fn controller_identity(&self, discovery: bool) -> IdentifyController {
        let cfg = self.target.config();
        let volatile = self.target.namespaces().iter().any(|n| n.volatile_write_cache());
        let mut id = IdentifyController {
            sn: cfg.serial.clone(),
            mn: cfg.model.clone(),
            fr: cfg.firmware.clone(),
            rab: 6,
            cntlid: self.cntlid(),
            ver: property::VS_1_3,
            kas: KAS,
            aerl: AERL,
            elpe: 63,
            // Bit 0: byte-aligned SGLs; bit 2: keyed data blocks (RDMA);
            // bit 18: SGLs longer than the transfer are fine; bit 20:
            // in-capsule data offsets.
            sgls: 1 | (u32::from(self.binding.is_rdma()) << 2) | (1 << 18) | (1 << 20),
            icdoff: 0,
            msdbd: 1,
            ..IdentifyController::default()
        };
        if discovery {
            id.cntrltype = identify::CNTRLTYPE_DISCOVERY;
            id.subnqn = DISCOVERY_NQN.into();
            id.lpa = 1 << 2;
            id.maxcmd = self.queue_size(true);
            return id;
        }
        IdentifyController {
            cntrltype: identify::CNTRLTYPE_IO,
            subnqn: cfg.subnqn.clone(),
            // Several controllers (one per host association) share the subsystem.
            cmic: 1 << 1,
            mdts: cfg.mdts,
            // 128-bit host identifier; any command resets the keep alive timer (TBKAS).
            ctratt: 1 | (1 << 6),
            acl: 3,
            // Commands supported and effects; extended data for Get Log Page.
            lpa: (1 << 1) | (1 << 2),
            sqes: 0x66,
            cqes: 0x44,
            maxcmd: cfg.queue_size,
            nn: self.target.namespaces().len() as u32,
            // Dataset Management and Write Zeroes.
            oncs: (1 << 2) | (1 << 3),
            vwc: u8::from(volatile),
            ioccsz: (64 + cfg.inline_data_size) / 16,
            iorcsz: 1,
            ..id
        }
    }

    fn get_log_page(&mut self, sqe: &Sqe, discovery: bool) -> Outcome {
        let g = GetLogPage::parse(sqe);
        if !g.lpo.is_multiple_of(4) || (discovery != (g.lid == lid::DISCOVERY)) {
            return Outcome::status(Status::INVALID_FIELD);
        }
        let page = match g.lid {
            lid::SUPPORTED => {
                let mut p = vec![0u8; 1024];
                for l in [
                    lid::SUPPORTED,
                    lid::ERROR_INFO,
                    lid::SMART,
                    lid::FW_SLOT,
                    lid::CHANGED_NS,
                    lid::EFFECTS,
                ] {
                    p[usize::from(l) * 4] = 1;
                }
                p
            }
            lid::ERROR_INFO => {
                let a = self.queue.as_ref().map(|q| lock(&q.assoc));
                let errors =
                    a.as_ref().map(|a| a.errors.iter().collect::<Vec<_>>()).unwrap_or_default();
                let mut p = vec![0u8; log::ErrorLogEntry::LEN * errors.len().max(1)];
                for (i, e) in errors.iter().enumerate() {
                    e.emit(&mut p[i * log::ErrorLogEntry::LEN..]);
                }
                p
            }
            lid::SMART => {
                let c = &self.target.counters;
                let io = c.io.sum();
                let units = |bytes: u64| bytes.div_ceil(512_000);
                let error_log_entries =
                    self.queue.as_ref().map_or(0, |q| lock(&q.assoc).error_count);
                let smart = SmartLog {
                    temperature: 300,
                    available_spare: 100,
                    spare_threshold: 10,
                    data_units_read: units(io.bytes_read),
                    data_units_written: units(io.bytes_written),
                    host_reads: io.reads,
                    host_writes: io.writes,
                    power_cycles: 1,
                    media_errors: c.media_errors.load(Ordering::Relaxed),
                    error_log_entries,
                    ..SmartLog::default()
                };
                let mut p = vec![0u8; SmartLog::LEN];
                smart.emit(&mut p);
                p
            }
            lid::FW_SLOT => {
                let mut p = vec![0u8; 512];
                p[0] = 1;
                let fr = self.target.config().firmware.as_bytes();
                let n = fr.len().min(8);
                p[8..16].fill(b' ');
                p[8..8 + n].copy_from_slice(&fr[..n]);
                p
            }
            lid::CHANGED_NS => vec![0u8; 4096],
            lid::EFFECTS => {
                if sqe.cdw14 >> 24 != 0 {
                    return Outcome::status(Status::INVALID_LOG_PAGE);
                }
                let mut p = vec![0u8; 4096];
                let admin_ops = [
                    admin::GET_LOG_PAGE,
                    admin::IDENTIFY,
                    admin::ABORT,
                    admin::SET_FEATURES,
                    admin::GET_FEATURES,
                    admin::ASYNC_EVENT_REQUEST,
                    admin::KEEP_ALIVE,
                ];
                // CSUPP, and LBCC (bit 1) for commands that change the data.
                let io_ops = [
                    (io::FLUSH, 1),
                    (io::WRITE, 3),
                    (io::READ, 1),
                    (io::WRITE_ZEROES, 3),
                    (io::DATASET_MANAGEMENT, 3),
                ];
                log::emit_effects(&mut p, &admin_ops, &io_ops);
                p
            }
            lid::DISCOVERY => log::emit_discovery_log(1, &self.discovery_entries()),
            _ => return Outcome::status(Status::INVALID_FIELD),
        };
        // Serve [LPO, LPO + length) of the page, zeros past its end.
        let mut out = vec![0u8; usize::try_from(g.len).unwrap_or(usize::MAX).min(1 << 20)];
        if out.len() as u64 != g.len {
            return Outcome::status(Status::INVALID_FIELD);
        }
        if let Some(src) = usize::try_from(g.lpo).ok().and_then(|o| page.get(o..)) {
            let n = src.len().min(out.len());
            out[..n].copy_from_slice(&src[..n]);
        }
        self.data_out(sqe, &out)
    }

    /// The subsystem, if the asking host may reach it.
    fn discovery_entries(&self) -> Vec<DiscoveryEntry> {
        let Some(port) = &self.target.config().port else { return Vec::new() };
        let asking = self.queue.as_ref().map(|q| lock(&q.assoc).hostnqn.clone());
        if !asking.is_some_and(|h| self.target.config().access.allows(&h)) {
            return Vec::new();
        }
        let unspecified = port.traddr.parse::<std::net::IpAddr>().is_ok_and(|a| a.is_unspecified());
        let traddr = match (unspecified, self.local_addr) {
            (true, Some(local)) => local.to_string(),
            _ => port.traddr.clone(),
        };
        let adrfam = if traddr.contains(':') { log::ADRFAM_IPV6 } else { log::ADRFAM_IPV4 };
        vec![DiscoveryEntry {
            trtype: self.binding.trtype,
            adrfam,
            subtype: log::SUBTYPE_NVME,
            treq: self.binding.treq,
            portid: port.portid,
            cntlid: 0xffff,
            asqsz: self.queue_size(true),
            trsvcid: port.trsvcid.clone(),
            subnqn: self.target.subnqn().into(),
            traddr,
            tsas: self.binding.tsas,
        }]
    }

    fn set_features(&mut self, sqe: &Sqe, discovery: bool, now: Instant) -> Outcome {
        let f = sqe.cdw10 as u8;
        if sqe.cdw10 & (1 << 31) != 0 {
            return Outcome::status(Status::FEATURE_NOT_SAVEABLE);
        }
        if discovery && !matches!(f, fid::KEEP_ALIVE_TIMER | fid::ASYNC_EVENT_CONFIG) {
            return Outcome::status(Status::INVALID_FIELD);
        }
        let max_queues = self.target.config().max_io_queues;
        let volatile = self.target.namespaces().iter().any(|n| n.volatile_write_cache());
        let Some(q) = &self.queue else { return Outcome::status(Status::COMMAND_SEQUENCE_ERROR) };
        let mut a = lock(&q.assoc);
        let v = sqe.cdw11;
        match f {
            fid::NUMBER_OF_QUEUES => {
                let (nsqr, ncqr) = (v & 0xffff, v >> 16);
                if nsqr == 0xffff || ncqr == 0xffff {
                    return Outcome::status(Status::INVALID_FIELD);
                }
                if a.connected.iter().any(|&qid| qid > 0) {
                    return Outcome::status(Status::COMMAND_SEQUENCE_ERROR);
                }
                let nsq = (nsqr + 1).min(u32::from(max_queues));
                let ncq = (ncqr + 1).min(u32::from(max_queues));
                a.io_queues = nsq.min(ncq) as u16;
                result(u64::from((nsq - 1) | ((ncq - 1) << 16)))
            }
            fid::ASYNC_EVENT_CONFIG => {
                a.aec = v;
                result(u64::from(v))
            }
            fid::KEEP_ALIVE_TIMER => {
                a.set_kato((v > 0).then(|| Duration::from_millis(u64::from(v))), now);
                Outcome::ok()
            }
            fid::VOLATILE_WRITE_CACHE if volatile => {
                a.set_vwc(v & 1 != 0);
                Outcome::ok()
            }
            fid::ARBITRATION
            | fid::POWER_MANAGEMENT
            | fid::TEMPERATURE_THRESHOLD
            | fid::ERROR_RECOVERY
            | fid::WRITE_ATOMICITY => {
                a.plain_features.insert(f, v);
                Outcome::ok()
            }
            fid::HOST_IDENTIFIER => Outcome::status(Status::COMMAND_SEQUENCE_ERROR),
            _ => Outcome::status(Status::INVALID_FIELD),
        }
    }

    fn get_features(&mut self, sqe: &Sqe, discovery: bool) -> Outcome {
        let f = sqe.cdw10 as u8;
        let sel = (sqe.cdw10 >> 8) & 0x7;
        if discovery && !matches!(f, fid::KEEP_ALIVE_TIMER | fid::ASYNC_EVENT_CONFIG) {
            return Outcome::status(Status::INVALID_FIELD);
        }
        // SEL 3: supported capabilities; every feature here is changeable.
        if sel == 3 {
            return result(1 << 2);
        }
        let max_queues = u32::from(self.target.config().max_io_queues);
        let volatile = self.target.namespaces().iter().any(|n| n.volatile_write_cache());
        let Some(q) = &self.queue else { return Outcome::status(Status::COMMAND_SEQUENCE_ERROR) };
        let a = lock(&q.assoc);
        let value = match f {
            fid::NUMBER_OF_QUEUES => {
                let n = if a.io_queues > 0 { u32::from(a.io_queues) } else { max_queues };
                (n - 1) | ((n - 1) << 16)
            }
            fid::ASYNC_EVENT_CONFIG => a.aec,
            fid::KEEP_ALIVE_TIMER => a.kato().map_or(0, |k| k.as_millis() as u32),
            fid::VOLATILE_WRITE_CACHE if volatile => u32::from(a.hot.vwc()),
            fid::ARBITRATION
            | fid::POWER_MANAGEMENT
            | fid::TEMPERATURE_THRESHOLD
            | fid::ERROR_RECOVERY
            | fid::WRITE_ATOMICITY => a.plain_features.get(&f).copied().unwrap_or(0),
            fid::HOST_IDENTIFIER if sqe.cdw11 & 1 != 0 => {
                let hostid = a.hostid;
                drop(a);
                return self.data_out(sqe, &hostid);
            }
            _ => return Outcome::status(Status::INVALID_FIELD),
        };
        result(u64::from(value))
    }
}
