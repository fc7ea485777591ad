//! The host's side: each queue's TCP connection does the TLS handshake
//! first (offering one PSK identity, as Linux's host does), then ICReq and
//! everything else inside records.

use super::channel::{Channel, Plaintext};
use super::error::TlsError;
use super::session::TlsSession;
use crate::host::Tcp;
use nvme_of::host::{
    CmdData, Command, Commands, HostQueue, Owner, QueueError, QueueEvent, Transport,
};
use nvme_of::nvme::{Cqe, Sqe, Status};
use nvme_of::{Binding, Instant, TxStats, UlpStats};
use std::sync::Arc;
use ulp_ddp::{DdpDevice, FlowId, TxSink};
use zeroize::Zeroizing;

/// The PSK a host offers: its identity and the TLS PSK it stands for.
#[derive(Clone)]
pub struct TlsClient {
    pub identity: String,
    pub psk: Zeroizing<Vec<u8>>,
}

/// NVMe/TCP with TLS 1.3 on the host's side.
pub struct SecureTcp {
    pub tcp: Tcp,
    pub client: TlsClient,
}

impl Transport for SecureTcp {
    fn queue(&self, qid: u16, size: u16, inline: usize) -> Box<dyn HostQueue> {
        let inner = self.tcp.queue(qid, size, inline);
        Box::new(Secured {
            inner,
            client: self.client.clone(),
            channel: None,
            failed: None,
            dead: false,
            handshake_by: None,
            now: Instant::ZERO,
            nic: None,
            threshold: None,
        })
    }

    fn binding(&self) -> Binding {
        self.tcp.binding()
    }
}

struct Secured {
    inner: Box<dyn HostQueue>,
    client: TlsClient,
    channel: Option<Box<Channel>>,
    /// A failure not yet reported.
    failed: Option<TlsError>,
    /// The session failed: nothing more goes in or out.
    dead: bool,
    /// Until the handshake is done: when it is given up.
    handshake_by: Option<Instant>,
    /// The latest time passed in, for plaintext handed over on output.
    now: Instant,
    /// A NIC that may take the records over (TLS offload).
    nic: Option<(Arc<dyn DdpDevice>, FlowId)>,
    /// What the queue inside maps from, once the NIC has the records.
    threshold: Option<u32>,
}

/// How long a handshake may take (Linux's `tls_handshake_timeout`).
const HANDSHAKE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

impl Secured {
    fn fail(&mut self, e: TlsError) {
        if self.dead {
            return;
        }
        tracing::debug!(error = %e, "TLS failed");
        self.dead = true;
        self.handshake_by = None;
        self.failed = Some(e);
    }

    /// Once the NIC has the records, the queue inside may be offloaded
    /// inside them.
    fn offload_inner(&mut self) {
        if let Some((dev, flow)) = self.channel.as_mut().and_then(|c| c.take_inner_offload()) {
            self.inner.offload(dev, flow, self.threshold);
        }
    }

    /// Hand waiting plaintext to the queue, which may have room again.
    fn deliver(&mut self) {
        if let Some(ch) = self.channel.as_mut().filter(|c| c.is_established()) {
            let (inner, now) = (&mut self.inner, self.now);
            ch.deliver(|plain| inner.handle_input(plain, now));
        }
    }
}

impl HostQueue for Secured {
    fn connected(&mut self, now: Instant) {
        match TlsSession::client(&self.client.identity, &self.client.psk) {
            Ok(s) => {
                let mut ch = Channel::new(s);
                if let Some((dev, flow)) = self.nic.take() {
                    ch.offload(dev, flow);
                }
                self.channel = Some(Box::new(ch));
            }
            Err(e) => self.fail(e),
        }
        self.handshake_by = Some(now + HANDSHAKE_TIMEOUT);
    }

    /// A NIC may take the records over once the handshake is done (TLS
    /// offload), and then the queue inside them.
    fn offload(&mut self, dev: Arc<dyn DdpDevice>, flow: FlowId, threshold: Option<u32>) {
        self.threshold = threshold;
        match &mut self.channel {
            Some(ch) => ch.offload(dev, flow),
            None => self.nic = Some((dev, flow)),
        }
    }

    fn is_offloaded(&self) -> bool {
        self.channel.as_ref().is_some_and(|c| c.is_offloaded()) || self.inner.is_offloaded()
    }

    fn ddp_max_transfer(&self) -> Option<u64> {
        self.inner.ddp_max_transfer()
    }

    fn is_live(&self) -> bool {
        !self.dead && self.inner.is_live()
    }

    fn submit(&mut self, owner: Owner, sqe: Sqe, data: CmdData, deadline: Instant) -> Option<u16> {
        self.inner.submit(owner, sqe, data, deadline)
    }

    fn handle_input(&mut self, data: &[u8], now: Instant) -> usize {
        self.now = now;
        if self.dead || self.channel.is_none() {
            return data.len();
        }
        // Room the queue made since, first; then the new bytes.
        self.deliver();
        let Some(ch) = self.channel.as_mut() else { return data.len() };
        let was = ch.is_established();
        let inner = &mut self.inner;
        let received = ch.receive(data, |plain| inner.handle_input(plain, now));
        if !was && ch.is_established() {
            // The handshake is done: the NVMe/TCP queue starts (ICReq).
            self.handshake_by = None;
            self.inner.connected(now);
        }
        self.offload_inner();
        // What was decrypted before a failure is the peer's too.
        self.deliver();
        match received {
            Ok(taken) => taken,
            Err(e) => {
                self.fail(e);
                data.len()
            }
        }
    }

    fn poll_send(&mut self, out: &mut dyn TxSink) -> usize {
        if self.dead {
            return 0;
        }
        self.deliver();
        let Some(ch) = self.channel.as_mut() else { return 0 };
        let (sent, failed) = ch.send(out, &mut self.inner);
        if let Some(e) = failed {
            self.fail(e);
        }
        self.offload_inner();
        sent
    }

    fn pending_output(&self) -> usize {
        self.channel.as_ref().map_or(0, |c| c.pending()) + self.inner.pending_output()
    }

    fn poll_timeout(&self) -> Option<Instant> {
        nvme_of::earliest(self.handshake_by, self.inner.poll_timeout())
    }

    fn handle_timeout(&mut self, now: Instant) {
        self.now = now;
        if self.handshake_by.is_some_and(|t| now >= t) {
            self.fail(TlsError::Handshake("the controller did not complete it in 10 s".into()));
        }
        self.inner.handle_timeout(now);
        self.deliver();
    }

    fn poll_event(&mut self) -> Option<QueueEvent> {
        if let Some(e) = self.failed.take() {
            self.inner.close();
            return Some(QueueEvent::Failed(QueueError::transport(e)));
        }
        self.inner.poll_event()
    }

    fn is_closed(&self) -> bool {
        self.inner.is_closed() && self.channel.as_ref().is_none_or(|c| c.pending() == 0)
    }

    fn transport_closed(&mut self) {
        // A controller (tlshd under nvmet) that refuses the handshake may
        // just close, without an alert: still a handshake that failed.
        self.handshake_by = None;
        if self.channel.as_ref().is_some_and(|c| !c.is_established()) {
            self.fail(TlsError::Handshake(
                "the controller closed the connection during the handshake (a PSK or identity it does not hold?)".into(),
            ));
        }
        self.inner.transport_closed();
    }

    fn close(&mut self) {
        self.inner.close();
    }

    fn stats(&self) -> (UlpStats, TxStats) {
        match &self.channel {
            Some(ch) => ch.add_stats(self.inner.stats()),
            None => self.inner.stats(),
        }
    }

    fn commands(&self) -> &dyn Commands {
        self.inner.commands()
    }

    fn commands_mut(&mut self) -> &mut dyn Commands {
        self.inner.commands_mut()
    }

    fn abort_all(&mut self) -> Vec<(Command, Option<(Status, Cqe)>)> {
        self.inner.abort_all()
    }
}

impl Plaintext for Box<dyn HostQueue> {
    fn pending(&self) -> usize {
        self.pending_output()
    }

    fn send(&mut self, out: &mut dyn TxSink) -> usize {
        self.poll_send(out)
    }
}
