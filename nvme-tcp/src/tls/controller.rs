//! The controller's side: a port that requires TLS, or offers it (a
//! connection whose first byte starts a TLS handshake record is taken as
//! TLS, else as NVMe/TCP in the clear, as nvmet-tcp peeks to decide).

use super::channel::Channel;
use super::psk::{ConfiguredPsk, Derivation};
use super::session::{PskLookup, TlsError, TlsSession};
use crate::controller::Connection;
use nvme_of::controller::{CloseReason, ControllerQueue, Target, Transport};
use nvme_of::nvme::log;
use nvme_of::{Binding, Instant, TxStats, UlpStats};
use std::net::IpAddr;
use std::sync::Arc;
use std::task::Waker;
use ulp_ddp::{DdpDevice, FlowId, TxSink};

/// TLS's record type of a handshake message: the first byte a
/// ClientHello arrives in. An ICReq's is 00h.
const HANDSHAKE_RECORD: u8 = 0x16;

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
        Box::new(Secured { inner, mode: Mode::Detect, port: self.0.clone(), close: None })
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
}

impl Secured {
    fn fail(&mut self, e: TlsError) {
        tracing::info!(error = %e, "TLS failed; closing the connection");
        self.close.get_or_insert(CloseReason::transport(e));
        self.inner.transport_closed();
    }
}

impl ControllerQueue for Secured {
    /// A NIC sees only ciphertext: nothing to offload.
    fn attach_ddp(&mut self, _dev: Arc<dyn DdpDevice>, _flow: FlowId) {}

    fn is_offloaded(&self) -> bool {
        false
    }

    fn handle_input(&mut self, data: &[u8], now: Instant) -> usize {
        if self.close.is_some() || data.is_empty() {
            return data.len();
        }
        if let Mode::Detect = self.mode {
            self.mode = if data[0] == HANDSHAKE_RECORD {
                match TlsSession::server(self.port.lookup.clone()) {
                    Ok(s) => Mode::Tls(Box::new(Channel::new(s))),
                    Err(e) => {
                        self.fail(e);
                        return data.len();
                    }
                }
            } else if self.port.required {
                self.fail(TlsError::Handshake(
                    "NVMe/TCP in the clear on a port that requires TLS".into(),
                ));
                return data.len();
            } else {
                Mode::Clear
            };
        }
        match &mut self.mode {
            Mode::Clear => self.inner.handle_input(data, now),
            Mode::Tls(ch) => {
                let taken = match ch.receive(data) {
                    Ok(n) => n,
                    Err(e) => {
                        self.fail(e);
                        return data.len();
                    }
                };
                let inner = &mut self.inner;
                ch.deliver(|plain| inner.handle_input(plain, now));
                taken
            }
            Mode::Detect => unreachable!(),
        }
    }

    fn poll_send(&mut self, out: &mut dyn TxSink) -> usize {
        match &mut self.mode {
            Mode::Clear => self.inner.poll_send(out),
            Mode::Tls(ch) => {
                let inner = &mut self.inner;
                match ch.send(out, |buf| inner.poll_transmit(buf)) {
                    Ok(n) => n,
                    Err(e) => {
                        self.fail(e);
                        0
                    }
                }
            }
            Mode::Detect => 0,
        }
    }

    fn pending_output(&self) -> usize {
        let tls = if let Mode::Tls(ch) = &self.mode { ch.pending() } else { 0 };
        tls + self.inner.pending_output()
    }

    fn poll_timeout(&self) -> Option<Instant> {
        self.inner.poll_timeout()
    }

    fn handle_timeout(&mut self, now: Instant) {
        self.inner.handle_timeout(now);
    }

    fn is_closed(&self) -> bool {
        let tls_pending = if let Mode::Tls(ch) = &self.mode { ch.pending() } else { 0 };
        (self.close.is_some() || self.inner.is_closed()) && tls_pending == 0
    }

    fn transport_closed(&mut self) {
        self.inner.transport_closed();
    }

    fn qid(&self) -> Option<u16> {
        self.inner.qid()
    }

    fn stats(&self) -> (UlpStats, TxStats) {
        self.inner.stats()
    }

    fn close_reason(&self) -> Option<&CloseReason> {
        self.close.as_ref().or_else(|| self.inner.close_reason())
    }

    fn wake_with(&mut self, waker: Waker) {
        self.inner.wake_with(waker);
    }
}
