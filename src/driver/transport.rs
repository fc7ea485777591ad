//! Which NVMe-oF transport a run speaks, and how each side makes its ends
//! of it: the host's queues, and a controller connection per accepted
//! TCP connection. The drivers move bytes and time the same way for both.
//!
//! It picks and builds the binding; it must never move bytes itself.

use iwarp::{Device, QpConfig};
use nvme_of::Instant;
use nvme_of::controller::{self, ControllerQueue, Target};
use nvme_of::host::{Host, HostConfig};
use nvme_tcp::tls::{ConfiguredPsk, Derivation, PskHash};
use std::net::IpAddr;
use std::sync::Arc;

/// Which transport a run speaks (TRTYPE): NVMe/TCP, or NVMe/RDMA over
/// user-space iWARP.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TransportType {
    #[default]
    Tcp,
    Rdma,
}

impl TransportType {
    pub const ALL: [TransportType; 2] = [TransportType::Tcp, TransportType::Rdma];

    pub fn name(self) -> &'static str {
        match self {
            TransportType::Tcp => "tcp",
            TransportType::Rdma => "rdma",
        }
    }

    pub fn parse(s: &str) -> Result<Self, UnknownTransport> {
        Self::ALL.into_iter().find(|t| t.name() == s).ok_or_else(|| UnknownTransport(s.into()))
    }

    /// A host speaking this transport. Over RDMA, `digests.data` asks for
    /// MPA CRCs, `oneshot` registers and sends in one call, and FPDUs are
    /// cut for `mtu`.
    pub fn host(self, cfg: HostConfig, oneshot: bool, mtu: usize) -> Host {
        self.host_with(cfg, oneshot, mtu, None)
    }

    /// A host, over TLS if `tls` is given (NVMe/TCP only: RDMA has no
    /// secure channel here, and ignores it).
    pub fn host_with(
        self,
        cfg: HostConfig,
        oneshot: bool,
        mtu: usize,
        tls: Option<&TlsConfig>,
    ) -> Host {
        match (self, tls) {
            (TransportType::Tcp, Some(tls)) => tls.host(cfg),
            (TransportType::Tcp, None) => nvme_tcp::host::new(cfg),
            (TransportType::Rdma, _) => {
                let rdma = nvme_rdma::host::Rdma::new(cfg.digests.data, oneshot).path_mtu(mtu);
                nvme_rdma::host::new(cfg, rdma)
            }
        }
    }

    /// What a controller accepts connections with.
    pub fn listener(self, mtu: usize) -> Listener {
        match self {
            TransportType::Tcp => Listener::default(),
            TransportType::Rdma => {
                let dev = Device::new();
                let qp = QpConfig::new(dev.alloc_pd()).path_mtu(mtu);
                Listener::Rdma(nvme_rdma::controller::Rdma { dev, qp })
            }
        }
    }
}

/// NVMe/TCP's secure channel as a run uses it: TLS 1.3 with the PSK the
/// host and the controller hold.
#[derive(Clone)]
pub struct TlsConfig {
    /// The configured PSK (nvme-cli's `NVMeTLSkey-1:...`).
    pub psk: ConfiguredPsk,
    /// The PSK identity version a host offers (0 or 1).
    pub identity: u8,
    pub derivation: Derivation,
    /// Whether the controller's port refuses hosts in the clear.
    pub required: bool,
}

impl TlsConfig {
    /// A fresh random PSK both ends of an embedded run hold.
    pub fn embedded() -> Result<Self, nvme_tcp::tls::TlsError> {
        let psk = ConfiguredPsk::generate(PskHash::Sha256)?;
        Ok(Self { psk, identity: 1, derivation: Derivation::Rfc8446, required: true })
    }

    /// A host over NVMe/TCP with TLS under every queue, offering the
    /// identity and TLS PSK `cfg`'s NQNs give.
    pub fn host(&self, cfg: HostConfig) -> Host {
        let (identity, psk) =
            self.psk.tls_psk(self.identity, &cfg.hostnqn, &cfg.subnqn, self.derivation);
        tracing::debug!(%identity, "offering TLS PSK identity");
        let tcp = nvme_tcp::host::Tcp { digests: cfg.digests, maxr2t: cfg.maxr2t };
        let client = nvme_tcp::tls::host::TlsClient { identity, psk };
        Host::new(cfg, Arc::new(nvme_tcp::tls::host::SecureTcp { tcp, client }))
    }

    /// The controller's port.
    pub fn port(&self) -> nvme_tcp::tls::controller::TlsPort {
        nvme_tcp::tls::controller::TlsPort::configured(
            self.required,
            self.psk.clone(),
            self.derivation,
        )
    }
}

/// TLS asked of NVMe/RDMA, which has no secure channel here.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("TLS is NVMe/TCP's secure channel: it needs the tcp transport")]
pub struct NoTlsOverRdma;

/// A transport name that is neither `tcp` nor `rdma`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?}: use tcp or rdma")]
pub struct UnknownTransport(pub String);

/// A controller's way of making connections: NVMe/TCP, or NVMe/RDMA with
/// the controller's memory and how its queue pairs answer (the CRC follows
/// what each host asks).
#[derive(Debug, Clone)]
pub enum Listener {
    Tcp(nvme_tcp::controller::Tcp),
    /// NVMe/TCP with TLS 1.3 under every connection (or offered).
    Tls(nvme_tcp::tls::controller::SecureTcp),
    Rdma(nvme_rdma::controller::Rdma),
}

impl Default for Listener {
    fn default() -> Self {
        Listener::Tcp(nvme_tcp::controller::Tcp)
    }
}

impl Listener {
    /// Insist on MPA CRCs on every connection, as a responder may (RFC
    /// 5044 §7.1: either side asking turns them on). NVMe/TCP leaves its
    /// digests to the host, so this changes nothing there.
    pub fn require_crc(mut self, crc: bool) -> Self {
        if let Listener::Rdma(rdma) = &mut self {
            rdma.qp.crc |= crc;
        }
        self
    }

    /// Serve NVMe/TCP with TLS 1.3 as `port` says; NVMe/RDMA has no
    /// secure channel of its own here.
    pub fn with_tls(self, port: nvme_tcp::tls::controller::TlsPort) -> Result<Self, NoTlsOverRdma> {
        match self {
            Listener::Tcp(_) | Listener::Tls(_) => {
                Ok(Listener::Tls(nvme_tcp::tls::controller::SecureTcp(port)))
            }
            Listener::Rdma(_) => Err(NoTlsOverRdma),
        }
    }

    /// The controller end of a TCP connection just accepted.
    pub fn accept(
        &self,
        target: Arc<Target>,
        local: Option<IpAddr>,
        now: Instant,
    ) -> Box<dyn ControllerQueue> {
        let binding: &dyn controller::Transport = match self {
            Listener::Tcp(tcp) => tcp,
            Listener::Tls(tls) => tls,
            Listener::Rdma(rdma) => rdma,
        };
        binding.accept(target, local, now)
    }

    pub fn transport_type(&self) -> TransportType {
        match self {
            Listener::Tcp(_) | Listener::Tls(_) => TransportType::Tcp,
            Listener::Rdma(_) => TransportType::Rdma,
        }
    }
}
