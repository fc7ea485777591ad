//! Bring-up, discovery and shutdown: the admin commands a Linux host sends
//! to make an association (Connect, CAP, CC.EN, CSTS.RDY, VS, Identify,
//! Number of Queues, I/O queue Connects, AER, namespace scan), to read a
//! discovery log, and to end one (CC.SHN), each step started when the one
//! before it completes. Recovery is not here: a failed step hands its
//! error to `recovery`.

use super::step::{AuthStep, Step};
use super::timer::Timer;
use super::{CmdData, Dir, Host, HostError, HostEvent, NamespaceInfo, Owner, State};
use crate::nvme::identify::{self, IdentifyController, IdentifyNamespace, cns};
use crate::nvme::log::{DiscoveryEntry, GetLogPage, lid};
use crate::nvme::{
    ConnectData, DISCOVERY_NQN, FabricsCommand, PropertySize, Sqe, Status, admin, fid, property,
};
use crate::time::Instant;
use std::time::Duration;
use tracing::{debug, info};
use ulp_ddp::IoBuf;

/// I/O queues connecting at once. Linux connects them one after another;
/// a few at once bring a many-queue association up sooner, and stay within
/// what a listener holds in its backlog (smoltcp's is a number of
/// listening sockets; a SYN beyond them is reset).
const CONNECTS_AT_ONCE: u16 = 8;

/// How often CSTS is read while waiting for it to change.
const CSTS_POLL: Duration = Duration::from_millis(2);
/// How long shutdown may take (Linux's default shutdown_timeout).
const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(5);

impl Host {
    /// Shut the association down: close the I/O queues, then CC.SHN on the
    /// admin queue, then close it. `Closed` follows.
    pub fn shutdown(&mut self, now: Instant) {
        self.now = self.now.max(now);
        match self.state {
            State::Ready | State::BringUp if self.queues[0].is_live() && self.cntlid != 0 => {
                self.state = State::ShuttingDown;
                for q in &mut self.queues[1..] {
                    q.close();
                }
                self.timers.stop(Timer::KeepAlive);
                let cc = (self.cc & !property::CC_SHN_MASK) | property::CC_SHN_NORMAL;
                self.property_set(Step::Shutdown, property::CC, cc, now);
            }
            State::Failed | State::Closed => {}
            _ => self.close_all(),
        }
    }

    /// The next bring-up, discovery or shutdown step after `step` completed.
    pub(super) fn advance(
        &mut self,
        qid: u16,
        step: Step,
        status: Status,
        result: u64,
        buf: Option<IoBuf>,
        now: Instant,
    ) -> Result<(), HostError> {
        if let Step::Auth(a @ AuthStep::Failure2) = step {
            return self.auth_advance(qid, a, buf, now).map(drop);
        }
        if !status.is_success() {
            let subnqn_refused = (result >> 16) & 0xff == 1
                && result & 0xffff == u64::from(ConnectData::OFFSET_SUBNQN);
            return Err(match step {
                Step::Connect | Step::ConnectIo
                    if status == Status::CONNECT_INVALID_PARAMETERS && subnqn_refused =>
                {
                    HostError::NoSuchSubsystem(self.cfg.subnqn.clone())
                }
                Step::Connect | Step::ConnectIo if status == Status::CONNECT_INVALID_HOST => {
                    HostError::HostNotAllowed(self.cfg.hostnqn.clone())
                }
                _ => HostError::Refused { step: step.name(), status },
            });
        }
        let page = |buf: &Option<IoBuf>| buf.as_ref().map(IoBuf::to_vec).unwrap_or_default();
        match step {
            Step::Connect => {
                self.cntlid = result as u16;
                debug!(parent: &self.span, cntlid = self.cntlid, "admin queue connected");
                if !self.authenticate(0, result, now)? {
                    self.queue_ready(0, now);
                }
            }
            Step::ConnectIo => {
                if !self.authenticate(qid, result, now)? {
                    self.queue_ready(qid, now);
                }
            }
            Step::Auth(a) => {
                if self.auth_advance(qid, a, buf, now)? {
                    self.queue_ready(qid, now);
                }
            }
            Step::GetCap => {
                self.cap = result;
                if (self.cap >> 48) & 0xf != 0 {
                    return Err(HostError::Incompatible("CAP.MPSMIN above 4 KiB".into()));
                }
                // EN clear first, as Linux does, then EN.
                self.property_set(
                    Step::WriteCc,
                    property::CC,
                    property::CC_ENABLE & !property::CC_EN,
                    now,
                );
            }
            Step::WriteCc => {
                self.property_set(Step::EnableCc, property::CC, property::CC_ENABLE, now)
            }
            Step::EnableCc => {
                let timeout = Duration::from_millis(property::cap_timeout_ms(self.cap).max(500));
                self.timers.set(Timer::CstsLimit, now + timeout);
                self.property_get(Step::PollReady, property::CSTS, PropertySize::Four, now);
            }
            Step::PollReady => {
                let csts = result as u32;
                if csts & property::CSTS_CFS != 0 {
                    return Err(HostError::Incompatible(
                        "controller fatal status while enabling".into(),
                    ));
                }
                if csts & property::CSTS_RDY == 0 {
                    self.timers.set(Timer::CstsPoll, now + CSTS_POLL);
                    return Ok(());
                }
                self.timers.stop(Timer::CstsLimit);
                self.property_get(Step::GetVs, property::VS, PropertySize::Four, now);
            }
            Step::GetVs => {
                self.vs = result as u32;
                self.identify(Step::IdentifyController, cns::CONTROLLER, 0, now);
            }
            Step::IdentifyController => {
                let id = IdentifyController::parse(&page(&buf)).ok_or_else(|| {
                    HostError::Incompatible("short Identify Controller data".into())
                })?;
                self.check_controller(&id)?;
                if self.cfg.kato > Duration::ZERO && id.kas > 0 {
                    self.timers.set(Timer::KeepAlive, now + self.cfg.kato / 2);
                }
                self.ctrl = Some(id);
                if self.discovery {
                    self.get_log(Step::DiscoveryHeader, lid::DISCOVERY, 0, 1024, now);
                } else {
                    let n = u32::from(self.cfg.io_queues.max(1)) - 1;
                    let mut sqe = Sqe::new(admin::SET_FEATURES, 0, Default::default());
                    sqe.cdw10 = u32::from(fid::NUMBER_OF_QUEUES);
                    sqe.cdw11 = n | (n << 16);
                    self.step(Step::SetQueues, sqe, None, now);
                }
            }
            Step::SetQueues => {
                let granted = (result as u16).min((result >> 16) as u16).saturating_add(1);
                let n = self.cfg.io_queues.max(1).min(granted);
                let mqes = property::cap_mqes(self.cap).saturating_add(1).max(2);
                let maxcmd = self.ctrl.as_ref().map_or(0, |c| c.maxcmd);
                let mut size = self.cfg.queue_depth.saturating_add(1).min(mqes);
                if maxcmd >= 2 {
                    size = size.min(maxcmd);
                }
                self.io_queue_size = size.max(2);
                let inline =
                    self.ctrl.as_ref().map_or(0, |c| (c.ioccsz as usize * 16).saturating_sub(64));
                for qid in 1..=n {
                    self.queues.push(self.transport.queue(qid, self.io_queue_size, inline));
                }
                self.connect_pending.extend(1..=n.min(CONNECTS_AT_ONCE));
                debug!(parent: &self.span, queues = n, size = self.io_queue_size, "connecting I/O queues");
            }
            Step::NsList => {
                self.ns_pending = identify::parse_ns_list(&page(&buf)).into();
                self.next_namespace(now);
            }
            Step::IdentifyNs(nsid) => {
                if let Some(ns) = IdentifyNamespace::parse(&page(&buf))
                    && ns.ncap > 0
                    && (512..=65536).contains(&ns.block_size())
                {
                    let block_size = ns.block_size() as u32;
                    self.namespaces.push(NamespaceInfo {
                        nsid,
                        blocks: ns.nsze,
                        used: ns.nuse,
                        block_size,
                    });
                }
                self.next_namespace(now);
            }
            Step::DiscoveryHeader => {
                let (genctr, numrec) =
                    crate::nvme::log::parse_discovery_header(&page(&buf)).unwrap_or((0, 0));
                self.discovery_genctr = genctr;
                self.discovery_numrec = numrec.min(1024);
                if self.discovery_numrec == 0 {
                    self.events.push_back(HostEvent::Discovered(Vec::new()));
                    self.shutdown(now);
                } else {
                    let len = self.discovery_numrec as usize * DiscoveryEntry::LEN;
                    self.get_log(
                        Step::DiscoveryEntries,
                        lid::DISCOVERY,
                        DiscoveryEntry::LEN as u64,
                        len,
                        now,
                    );
                }
            }
            Step::DiscoveryEntries => {
                let raw = page(&buf);
                let entries =
                    raw.chunks(DiscoveryEntry::LEN).filter_map(DiscoveryEntry::parse).collect();
                self.events.push_back(HostEvent::Discovered(entries));
                self.shutdown(now);
            }
            Step::Disable => self.begin_reconnect(None, Duration::ZERO),
            Step::Shutdown => {
                self.timers.set(Timer::CstsLimit, now + SHUTDOWN_TIMEOUT);
                self.property_get(Step::PollShutdown, property::CSTS, PropertySize::Four, now);
            }
            Step::PollShutdown => {
                let done = result as u32 & property::CSTS_SHST_MASK == property::CSTS_SHST_COMPLETE;
                if done {
                    self.close_all();
                } else {
                    self.timers.set(Timer::CstsPoll, now + CSTS_POLL);
                }
            }
        }
        Ok(())
    }

    /// Queue `qid` is connected (and authenticated, where it had to be):
    /// bring-up goes on.
    fn queue_ready(&mut self, qid: u16, now: Instant) {
        if qid == 0 {
            self.property_get(Step::GetCap, property::CAP, PropertySize::Eight, now);
            return;
        }
        self.io_connected += 1;
        debug!(parent: &self.span, qid, "I/O queue connected");
        let next = self.io_connected + CONNECTS_AT_ONCE;
        if next <= self.io_queues() {
            self.connect_pending.push_back(next);
        }
        if self.io_connected == self.io_queues() {
            self.admin_cmd(
                Owner::Aer,
                Sqe::new(admin::ASYNC_EVENT_REQUEST, 0, Default::default()),
                None,
                now,
            );
            self.identify(Step::NsList, cns::ACTIVE_NS_LIST, 0, now);
        }
    }

    pub(super) fn next_namespace(&mut self, now: Instant) {
        match self.ns_pending.pop_front() {
            Some(nsid) => self.identify(Step::IdentifyNs(nsid), cns::NAMESPACE, nsid, now),
            None => {
                info!(parent: &self.span, cntlid = self.cntlid, queues = self.io_queues(), namespaces = self.namespaces.len(), "ready");
                self.state = State::Ready;
                self.association += 1;
                self.timers.stop(Timer::BringUp);
                if self.lost_at.take().is_some() {
                    self.recovery.reconnects += 1;
                    self.last_error = None;
                    self.events.push_back(HostEvent::Reconnected);
                    self.resubmit(now);
                } else {
                    self.events.push_back(HostEvent::Ready);
                }
            }
        }
    }

    /// Refuse controllers a Linux host would refuse.
    pub(super) fn check_controller(&self, id: &IdentifyController) -> Result<(), HostError> {
        let bad = |why: String| Err(HostError::Incompatible(why));
        if id.cntlid != self.cntlid {
            return bad(format!(
                "Identify CNTLID {} differs from Connect's {}",
                id.cntlid, self.cntlid
            ));
        }
        if id.icdoff != 0 {
            return bad("in-capsule data offset (ICDOFF) is not 0".into());
        }
        if id.sgls & 0x3 == 0 {
            return bad("controller does not support SGLs".into());
        }
        if self.discovery {
            if id.cntrltype != identify::CNTRLTYPE_DISCOVERY && id.subnqn != DISCOVERY_NQN {
                return bad("not a discovery controller".into());
            }
        } else if id.ioccsz < 4 || id.iorcsz < 1 {
            return bad(format!(
                "capsule sizes IOCCSZ {} / IORCSZ {} too small",
                id.ioccsz, id.iorcsz
            ));
        }
        Ok(())
    }

    pub(super) fn connect(&mut self, qid: u16, sqsize: u16, now: Instant) {
        let kato =
            if qid == 0 { self.cfg.kato.as_millis().min(u128::from(u32::MAX)) as u32 } else { 0 };
        let cattr = if self.cfg.disable_sq_flow_control {
            FabricsCommand::CATTR_DISABLE_SQ_FLOW_CONTROL
        } else {
            0
        };
        let cmd = FabricsCommand::Connect { recfmt: 0, qid, sqsize, cattr, kato };
        let data = ConnectData {
            hostid: self.cfg.hostid,
            cntlid: if qid == 0 { ConnectData::DYNAMIC_CNTLID } else { self.cntlid },
            subnqn: self.cfg.subnqn.clone(),
            hostnqn: self.cfg.hostnqn.clone(),
        };
        let mut raw = [0u8; ConnectData::LEN];
        data.emit(&mut raw);
        let buf = IoBuf::from_vec(raw.to_vec());
        let owner = Owner::Admin(if qid == 0 { Step::Connect } else { Step::ConnectIo });
        let deadline = now + self.cfg.command_timeout;
        let sqe = cmd.to_sqe(Default::default());
        let q = &mut self.queues[usize::from(qid)];
        if q.submit(owner, sqe, Some((buf, ConnectData::LEN, Dir::ToController)), deadline)
            .is_none()
        {
            self.fail(HostError::Incompatible("queue full at Connect".into()));
        }
    }

    pub(super) fn identify(&mut self, step: Step, cns: u8, nsid: u32, now: Instant) {
        let sqe = identify::command(cns, nsid);
        let buf = IoBuf::new(identify::IDENTIFY_LEN);
        self.step(step, sqe, Some((buf, identify::IDENTIFY_LEN, Dir::FromController)), now);
    }

    pub(super) fn get_log(&mut self, step: Step, lid: u8, lpo: u64, len: usize, now: Instant) {
        let sqe = GetLogPage { lid, lsp: 0, rae: false, len: len as u64, lpo }.to_sqe();
        self.step(step, sqe, Some((IoBuf::new(len), len, Dir::FromController)), now);
    }

    pub(super) fn property_get(
        &mut self,
        step: Step,
        offset: u32,
        size: PropertySize,
        now: Instant,
    ) {
        let sqe = FabricsCommand::PropertyGet { size, offset }.to_sqe(Default::default());
        self.step(step, sqe, None, now);
    }

    pub(super) fn property_set(&mut self, step: Step, offset: u32, value: u32, now: Instant) {
        if offset == property::CC {
            self.cc = value;
        }
        let cmd = FabricsCommand::PropertySet {
            size: PropertySize::Four,
            offset,
            value: u64::from(value),
        };
        self.step(step, cmd.to_sqe(Default::default()), None, now);
    }

    pub(super) fn step(
        &mut self,
        step: Step,
        sqe: Sqe,
        data: Option<(IoBuf, usize, Dir)>,
        now: Instant,
    ) {
        self.admin_cmd(Owner::Admin(step), sqe, data, now);
    }

    pub(super) fn admin_cmd(
        &mut self,
        owner: Owner,
        sqe: Sqe,
        data: Option<(IoBuf, usize, Dir)>,
        now: Instant,
    ) {
        self.admin_cmd_until(owner, sqe, data, now + self.cfg.command_timeout);
    }

    pub(super) fn admin_cmd_until(
        &mut self,
        owner: Owner,
        sqe: Sqe,
        data: CmdData,
        deadline: Instant,
    ) {
        if self.queues[0].submit(owner, sqe, data, deadline).is_none() {
            self.fail(HostError::Incompatible("admin queue full".into()));
        }
    }
}
