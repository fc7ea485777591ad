//! The controller's side: a port that requires TLS, or offers it. On an
//! optional port a connection whose first byte starts a TLS handshake
//! record is taken as TLS, any other in the clear (nvmet-tcp peeks at 8
//! bytes for an ICReq and takes anything else as TLS; both tell a
//! ClientHello from an ICReq).

use super::channel::{Channel, Plaintext};
use super::error::TlsError;
use super::psk::PskLookup;
use super::psk::{ConfiguredPsk, Derivation};
use super::record::HANDSHAKE_RECORD;
use super::session::TlsSession;
use crate::controller::Connection;
use nvme_of::controller::{CloseReason, ControllerQueue, Target, Transport};
use nvme_of::nvme::log;
use nvme_of::{Binding, Instant, TxStats, UlpStats};
use std::net::IpAddr;
use std::sync::Arc;
use std::task::Waker;
use ulp_ddp::{DdpDevice, FlowId, TxSink};

/// What a port asks of its hosts.
#[derive(Clone)]
pub struct TlsPort {
    /// Every connection must be TLS (TREQ: secure channel required);
    /// otherwise a host may connect in the clear too (not required).
    pub required: bool,
    /// The TLS PSK for the identity a host offers.
    pub lookup: PskLookup,
}

impl TlsPort {
    /// A port whose hosts hold `psk` (the configured PSK): the TLS PSK
    /// for an identity a host offers, `NVMe<v>R<hh> <hostnqn> <subnqn>
    /// [<digest>]`, is derived from it for that host and subsystem, and
    /// taken only if the identity is the one that derivation gives (the
    /// hash, and in version 1 the digest, must match).
    pub fn configured(required: bool, psk: ConfiguredPsk, d: Derivation) -> Self {
        let lookup = move |identity: &str| {
            let mut words = identity.split(' ');
            let (version, host, sub) = (words.next()?, words.next()?, words.next()?);
            let v = match version.get(..5)? {
                "NVMe0" => 0,
                "NVMe1" => 1,
                _ => return None,
            };
            let (id, tls) = psk.tls_psk(v, host, sub, d);
            (id == identity).then_some(tls)
        };
        Self { required, lookup: Arc::new(lookup) }
    }
}

/// NVMe/TCP with TLS 1.3 on the controller's side.
#[derive(Clone)]
pub struct SecureTcp(pub TlsPort);

impl std::fmt::Debug for SecureTcp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SecureTcp").field("required", &self.0.required).finish_non_exhaustive()
    }
}

impl Transport for SecureTcp {
    fn accept(
        &self,
        target: Arc<Target>,
        local_addr: Option<IpAddr>,
        now: Instant,
    ) -> Box<dyn ControllerQueue> {
        let mut c = Connection::with_binding(target, local_addr, self.binding());
        c.core.accepted(now);
        let inner = Box::new(c);
        Box::new(Secured {
            inner,
            mode: Mode::Detect,
            port: self.0.clone(),
            close: None,
            now,
            ddp: None,
        })
    }

    /// The discovery log says what the port requires: TSAS secure channel
    /// type TLS 1.3, TREQ required or not.
    fn binding(&self) -> Binding {
        let mut b = Binding::TCP;
        let treq =
            if self.0.required { log::TREQ_SECURE_REQUIRED } else { log::TREQ_SECURE_NOT_REQUIRED };
        b.treq = (b.treq & !0x3) | treq;
        b.tsas[0] = log::SECTYPE_TLS13;
        b
    }
}

enum Mode {
    /// Nothing received yet.
    Detect,
    Tls(Box<Channel>),
    Clear,
}

/// A controller connection behind TLS.
struct Secured {
    inner: Box<dyn ControllerQueue>,
    mode: Mode,
    port: TlsPort,
    close: Option<CloseReason>,
    /// The latest time passed in, for plaintext handed over on output.
    now: Instant,
    /// A device that may offload the connection: the queue, if it turns
    /// out to be in the clear; the records, if TLS.
    ddp: Option<(Arc<dyn DdpDevice>, FlowId)>,
}

impl Secured {
    fn fail(&mut self, e: TlsError) {
        tracing::info!(error = %e, "TLS failed; closing the connection");
        self.close.get_or_insert(CloseReason::transport(e));
        self.inner.transport_closed();
    }

    /// Ciphertext waiting for room.
    fn tls_pending(&self) -> usize {
        if let Mode::Tls(ch) = &self.mode { ch.pending() } else { 0 }
    }

    /// Once the NIC has the records, the queue inside may be offloaded
    /// inside them.
    fn offload_inner(&mut self) {
        if let Mode::Tls(ch) = &mut self.mode
            && let Some((dev, flow)) = ch.take_inner_offload()
        {
            self.inner.attach_ddp(dev, flow);
        }
    }

    /// Hand waiting plaintext to the queue, which may have room again.
    fn deliver(&mut self) {
        if let Mode::Tls(ch) = &mut self.mode {
            let (inner, now) = (&mut self.inner, self.now);
            ch.deliver(|plain| inner.handle_input(plain, now));
        }
    }
}

impl ControllerQueue for Secured {
    /// A connection in the clear is the queue's to offload; under TLS the
    /// NIC may take the records over once the handshake is done.
    fn attach_ddp(&mut self, dev: Arc<dyn DdpDevice>, flow: FlowId) {
        match &mut self.mode {
            Mode::Clear => self.inner.attach_ddp(dev, flow),
            Mode::Detect => self.ddp = Some((dev, flow)),
            Mode::Tls(ch) => ch.offload(dev, flow),
        }
    }

    fn is_offloaded(&self) -> bool {
        match &self.mode {
            Mode::Clear => self.inner.is_offloaded(),
            Mode::Tls(ch) => ch.is_offloaded() || self.inner.is_offloaded(),
            Mode::Detect => false,
        }
    }

    fn handle_input(&mut self, data: &[u8], now: Instant) -> usize {
        self.now = now;
        if self.close.is_some() || data.is_empty() {
            return data.len();
        }
        if let Mode::Detect = self.mode {
            self.mode = if data[0] == HANDSHAKE_RECORD {
                match TlsSession::server(self.port.lookup.clone()) {
                    Ok(s) => {
                        let mut ch = Channel::new(s);
                        if let Some((dev, flow)) = self.ddp.take() {
                            ch.offload(dev, flow);
                        }
                        Mode::Tls(Box::new(ch))
                    }
                    Err(e) => {
                        self.fail(e);
                        return data.len();
                    }
                }
            } else if self.port.required {
                self.fail(TlsError::Handshake(
                    "the host spoke NVMe/TCP in the clear on a port that requires TLS: \
                     connect with --tls and --tls-key"
                        .into(),
                ));
                return data.len();
            } else {
                if let Some((dev, flow)) = self.ddp.take() {
                    self.inner.attach_ddp(dev, flow);
                }
                Mode::Clear
            };
        }
        match &mut self.mode {
            Mode::Clear => self.inner.handle_input(data, now),
            Mode::Tls(_) => {
                // Room the queue made since, first; then the new bytes.
                self.deliver();
                let Mode::Tls(ch) = &mut self.mode else { unreachable!() };
                let inner = &mut self.inner;
                let received = ch.receive(data, |plain| inner.handle_input(plain, now));
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
            Mode::Detect => unreachable!(),
        }
    }

    fn poll_send(&mut self, out: &mut dyn TxSink) -> usize {
        self.deliver();
        match &mut self.mode {
            Mode::Clear => self.inner.poll_send(out),
            Mode::Tls(ch) => {
                let (sent, failed) = ch.send(out, &mut self.inner);
                if let Some(e) = failed {
                    self.fail(e);
                }
                self.offload_inner();
                sent
            }
            Mode::Detect => 0,
        }
    }

    fn pending_output(&self) -> usize {
        self.tls_pending() + self.inner.pending_output()
    }

    fn poll_timeout(&self) -> Option<Instant> {
        self.inner.poll_timeout()
    }

    fn handle_timeout(&mut self, now: Instant) {
        self.now = now;
        self.inner.handle_timeout(now);
        self.deliver();
    }

    fn is_closed(&self) -> bool {
        (self.close.is_some() || self.inner.is_closed()) && self.tls_pending() == 0
    }

    fn transport_closed(&mut self) {
        self.inner.transport_closed();
    }

    fn qid(&self) -> Option<u16> {
        self.inner.qid()
    }

    fn stats(&self) -> (UlpStats, TxStats) {
        match &self.mode {
            Mode::Tls(ch) => ch.add_stats(self.inner.stats()),
            _ => self.inner.stats(),
        }
    }

    fn close_reason(&self) -> Option<&CloseReason> {
        self.close.as_ref().or_else(|| self.inner.close_reason())
    }

    fn wake_with(&mut self, waker: Waker) {
        self.inner.wake_with(waker);
    }
}

impl Plaintext for Box<dyn ControllerQueue> {
    fn pending(&self) -> usize {
        self.pending_output()
    }

    fn send(&mut self, out: &mut dyn TxSink) -> usize {
        self.poll_send(out)
    }
}
