//! An in-memory binding: capsules and data pass between a host queue and
//! a controller queue in the plainest framing there is, so that the core's
//! bring-up, keep alive, abort, retry, reconnect and reset can be tested
//! without a transport's PDUs, digests or registrations.
//!
//! It plays NVMe's intra-host transport (TRTYPE 254, Linux's nvme-loop):
//! host data goes in the command capsule when it fits `inline`, else the
//! controller asks for it; controller data comes back with the response.
//! Each message is an 8-byte header (kind, 0, CID, total length, little
//! endian) and a body. The kinds are numbered as NVMe/TCP's PDU types, and
//! the length counts the header as PLEN does, so a test's filter that
//! reads a capsule's SQE or CQE at its offset reads both bindings alike.
//! Never for production use: the test harness is its only driver.

use crate::binding::{Binding, DataSgl};
use crate::controller::{self, Action, CloseReason, ControllerQueue, CtrlQueue, Target};
use crate::host::{
    self, Cmd, CmdData, Command, CommandTable, Commands, Dir, HostQueue, Owner, QueueError,
    QueueEvent,
};
use crate::nvme::{Cqe, SglDescriptor, Sqe, Status};
use crate::stats::{TxStats, UlpStats};
use crate::time::Instant;
use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;
use std::sync::Arc;
use ulp_ddp::TxSink;

/// The intra-host transport's facts.
pub const LOOPBACK: Binding = Binding {
    trtype: 254,
    tsas: [0; 3],
    treq: 0,
    data_sgl: DataSgl::Transport,
    admin_inline: 8192,
    max_queue_size: 1024,
};

/// A command capsule: the SQE, then in-capsule data.
const CMD: u8 = 0x04;
/// A response capsule: the CQE, then the command's data from the controller.
const RESP: u8 = 0x05;
/// Host data for a command, as asked.
const DATA: u8 = 0x06;
/// The controller asks for a command's data: how many bytes, a u32.
const FETCH: u8 = 0x09;
const HEADER_LEN: usize = 8;

/// Why a loopback queue stopped.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LoopError {
    #[error("malformed message: {0}")]
    Malformed(&'static str),
}

fn push(out: &mut Vec<u8>, kind: u8, cid: u16, body: &[&[u8]]) {
    let len: usize = HEADER_LEN + body.iter().map(|b| b.len()).sum::<usize>();
    out.extend_from_slice(&[kind, 0]);
    out.extend_from_slice(&cid.to_le_bytes());
    out.extend_from_slice(&(len as u32).to_le_bytes());
    for b in body {
        out.extend_from_slice(b);
    }
}

/// Move what `tx` holds into `out`, as much as fits.
fn send(tx: &mut Vec<u8>, out: &mut dyn TxSink) -> usize {
    let n = out.write(tx);
    tx.drain(..n);
    n
}

/// The first whole message in `rx`, taken off its front: (kind, CID, body).
fn next_message(rx: &mut Vec<u8>) -> Option<(u8, u16, Vec<u8>)> {
    let header: [u8; HEADER_LEN] = rx.get(..HEADER_LEN)?.try_into().ok()?;
    let len = u32::from_le_bytes([header[4], header[5], header[6], header[7]]) as usize;
    // A length shorter than the header is taken as the header alone; the
    // kind's own checks refuse the message then.
    let end = len.max(HEADER_LEN);
    let body = rx.get(HEADER_LEN..end)?.to_vec();
    rx.drain(..end);
    Some((header[0], u16::from_le_bytes([header[2], header[3]]), body))
}

/// Both sides of the loopback binding.
#[derive(Debug, Clone, Copy, Default)]
pub struct Loopback;

impl host::Transport for Loopback {
    fn queue(&self, _qid: u16, size: u16, inline: usize) -> Box<dyn HostQueue> {
        Box::new(LoopHostQueue {
            inline,
            cmds: CommandTable::new(size),
            rx: Vec::new(),
            tx: Vec::new(),
            events: VecDeque::new(),
            live: false,
            closing: false,
        })
    }

    fn binding(&self) -> Binding {
        LOOPBACK
    }
}

impl controller::Transport for Loopback {
    fn accept(
        &self,
        target: Arc<Target>,
        local_addr: Option<IpAddr>,
        now: Instant,
    ) -> Box<dyn ControllerQueue> {
        let mut core = CtrlQueue::new(target, local_addr, LOOPBACK);
        core.accepted(now);
        Box::new(LoopCtrlQueue {
            core,
            fetching: HashMap::new(),
            rx: Vec::new(),
            tx: Vec::new(),
            close: None,
        })
    }

    fn binding(&self) -> Binding {
        LOOPBACK
    }
}

struct LoopHostQueue {
    inline: usize,
    cmds: CommandTable<()>,
    rx: Vec<u8>,
    tx: Vec<u8>,
    events: VecDeque<QueueEvent>,
    live: bool,
    closing: bool,
}

impl LoopHostQueue {
    fn fail(&mut self, why: &'static str) {
        if !self.closing {
            self.close();
            self.events
                .push_back(QueueEvent::Failed(QueueError::transport(LoopError::Malformed(why))));
        }
    }

    fn on_message(&mut self, kind: u8, cid: u16, body: &[u8]) {
        match kind {
            RESP => {
                let Some((cqe, data)) = body.split_first_chunk::<{ Cqe::LEN }>() else {
                    return self.fail("short response");
                };
                let cqe = Cqe::parse(cqe);
                let Some(cmd) = self.cmds.get(cqe.cid) else { return self.fail("unknown CID") };
                if !data.is_empty() {
                    let Some(buf) = cmd.buf.as_ref().filter(|_| data.len() <= cmd.len) else {
                        return self.fail("data past the command's buffer");
                    };
                    buf.lock()[..data.len()].copy_from_slice(data);
                }
                let status = cmd.status.unwrap_or(cqe.status());
                if let Some(ev) = self.cmds.complete(cqe.cid, status, cqe) {
                    self.events.push_back(ev);
                }
            }
            FETCH => {
                let Ok(len) = <[u8; 4]>::try_from(body).map(u32::from_le_bytes) else {
                    return self.fail("malformed fetch");
                };
                let Some(cmd) = self.cmds.get(cid) else { return self.fail("unknown CID") };
                let asked = len as usize;
                let Some(buf) = cmd.buf.as_ref().filter(|_| cmd.dir == Dir::ToController) else {
                    return self.fail("fetch of a command without host data");
                };
                if asked > cmd.len {
                    return self.fail("fetch past the command's data");
                }
                let data = buf.lock()[..asked].to_vec();
                push(&mut self.tx, DATA, cid, &[&data]);
            }
            _ => self.fail("unknown message kind"),
        }
    }
}

impl HostQueue for LoopHostQueue {
    fn connected(&mut self, _now: Instant) {
        self.live = true;
        self.events.push_back(QueueEvent::Established);
    }

    fn offload(
        &mut self,
        _dev: Arc<dyn ulp_ddp::DdpDevice>,
        _flow: ulp_ddp::FlowId,
        _: Option<u32>,
    ) {
    }

    fn is_offloaded(&self) -> bool {
        false
    }

    fn ddp_max_transfer(&self) -> Option<u64> {
        None
    }

    fn is_live(&self) -> bool {
        self.live && !self.closing
    }

    fn submit(
        &mut self,
        owner: Owner,
        mut sqe: Sqe,
        data: CmdData,
        deadline: Instant,
    ) -> Option<u16> {
        let cmd = Cmd::new(owner, sqe, data, deadline, ());
        let (buf, len, dir) = (cmd.buf.clone(), cmd.len, cmd.dir);
        let cid = self.cmds.insert(cmd)?;
        let in_capsule = dir == Dir::ToController && len <= self.inline;
        sqe.cid = cid;
        sqe.flags = (sqe.flags & 0x3f) | Sqe::FLAGS_SGL;
        sqe.sgl = if in_capsule {
            SglDescriptor::in_capsule(len as u32)
        } else {
            SglDescriptor::transport(if dir == Dir::None { 0 } else { len as u32 })
        };
        let mut raw = [0u8; Sqe::LEN];
        sqe.emit(&mut raw);
        let inline = match (&buf, in_capsule) {
            (Some(b), true) => b.lock()[..len].to_vec(),
            _ => Vec::new(),
        };
        push(&mut self.tx, CMD, cid, &[&raw, &inline]);
        Some(cid)
    }

    fn handle_input(&mut self, data: &[u8], _now: Instant) -> usize {
        if self.closing {
            return data.len();
        }
        self.rx.extend_from_slice(data);
        while !self.closing {
            let Some((kind, cid, body)) = next_message(&mut self.rx) else { break };
            self.on_message(kind, cid, &body);
        }
        data.len()
    }

    fn poll_send(&mut self, out: &mut dyn TxSink) -> usize {
        send(&mut self.tx, out)
    }

    fn pending_output(&self) -> usize {
        self.tx.len()
    }

    fn poll_event(&mut self) -> Option<QueueEvent> {
        self.events.pop_front()
    }

    fn is_closed(&self) -> bool {
        self.closing && self.tx.is_empty()
    }

    fn transport_closed(&mut self) {
        self.tx.clear();
        if !self.closing {
            self.close();
            self.events.push_back(QueueEvent::Failed(QueueError::TransportClosed));
        }
    }

    fn close(&mut self) {
        self.closing = true;
    }

    fn stats(&self) -> (UlpStats, TxStats) {
        Default::default()
    }

    fn commands(&self) -> &dyn Commands {
        &self.cmds
    }

    fn commands_mut(&mut self) -> &mut dyn Commands {
        &mut self.cmds
    }

    fn abort_all(&mut self) -> Vec<(Command, Option<(Status, Cqe)>)> {
        if !self.closing {
            self.tx.clear();
        }
        self.cmds.take_all()
    }
}

struct LoopCtrlQueue {
    core: CtrlQueue,
    /// Commands whose host data was asked for, by CID.
    fetching: HashMap<u16, Sqe>,
    rx: Vec<u8>,
    tx: Vec<u8>,
    close: Option<CloseReason>,
}

impl LoopCtrlQueue {
    fn shut(&mut self, why: CloseReason) {
        self.close.get_or_insert(why);
    }

    fn act(&mut self, sqe: &Sqe, action: Action) {
        match action {
            Action::Respond { cqe, data } => {
                let mut raw = [0u8; Cqe::LEN];
                cqe.emit(&mut raw);
                let data = data
                    .map(|d| d.buf.lock()[d.offset..d.offset + d.len].to_vec())
                    .unwrap_or_default();
                push(&mut self.tx, RESP, cqe.cid, &[&raw, &data]);
            }
            Action::Fetch(len) => {
                self.fetching.insert(sqe.cid, *sqe);
                push(&mut self.tx, FETCH, sqe.cid, &[&len.to_le_bytes()]);
            }
            Action::Hold => {}
        }
    }

    fn on_message(&mut self, kind: u8, cid: u16, body: &[u8], now: Instant) {
        self.core.traffic(now);
        let (sqe, data, resume) = match kind {
            CMD => {
                let Some((raw, data)) = body.split_first_chunk::<{ Sqe::LEN }>() else {
                    return self
                        .shut(CloseReason::transport(LoopError::Malformed("short capsule")));
                };
                (Sqe::parse(raw), data, false)
            }
            DATA => {
                let Some(sqe) = self.fetching.remove(&cid) else {
                    return self.shut(CloseReason::transport(LoopError::Malformed("unasked data")));
                };
                (sqe, body, true)
            }
            _ => return self.shut(CloseReason::transport(LoopError::Malformed("unknown kind"))),
        };
        let data = (!data.is_empty()).then(|| {
            let buf = self.core.buffer(data.len());
            buf.lock()[..data.len()].copy_from_slice(data);
            (buf, data.len())
        });
        let action = if resume {
            self.core.resume(&sqe, data, None, now)
        } else {
            self.core.submit(&sqe, data, None, now)
        };
        self.act(&sqe, action);
    }
}

impl ControllerQueue for LoopCtrlQueue {
    fn wake_with(&mut self, waker: std::task::Waker) {
        self.core.wake_with(waker);
    }

    fn attach_ddp(&mut self, _dev: Arc<dyn ulp_ddp::DdpDevice>, _flow: ulp_ddp::FlowId) {}

    fn is_offloaded(&self) -> bool {
        false
    }

    fn handle_input(&mut self, data: &[u8], now: Instant) -> usize {
        if self.close.is_some() {
            return data.len();
        }
        self.rx.extend_from_slice(data);
        while self.close.is_none() {
            let Some((kind, cid, body)) = next_message(&mut self.rx) else { break };
            self.on_message(kind, cid, &body, now);
        }
        data.len()
    }

    fn poll_send(&mut self, out: &mut dyn TxSink) -> usize {
        send(&mut self.tx, out)
    }

    fn pending_output(&self) -> usize {
        self.tx.len()
    }

    fn poll_timeout(&self) -> Option<Instant> {
        if self.close.is_some() { None } else { self.core.poll_timeout() }
    }

    fn handle_timeout(&mut self, now: Instant) {
        if self.close.is_some() {
            return;
        }
        while let Some((sqe, action)) = self.core.storage_answer() {
            self.act(&sqe, action);
        }
        match self.core.handle_timeout(now) {
            Some(CloseReason::ControllerGone) => {
                for (sqe, action) in self.core.abort_outstanding() {
                    self.act(&sqe, action);
                }
                self.shut(CloseReason::ControllerGone)
            }
            Some(why) => self.shut(why),
            None => {}
        }
    }

    fn is_closed(&self) -> bool {
        self.close.is_some() && self.tx.is_empty()
    }

    fn transport_closed(&mut self) {
        self.core.transport_closed();
        self.close.get_or_insert(CloseReason::TransportClosed);
        self.tx.clear();
    }

    fn qid(&self) -> Option<u16> {
        self.core.qid()
    }

    fn stats(&self) -> (UlpStats, TxStats) {
        Default::default()
    }

    fn close_reason(&self) -> Option<&CloseReason> {
        self.close.as_ref()
    }
}
