//! Which NVMe-oF transport a run speaks, and how each side makes its ends
//! of it: the host's queues, and a controller connection per accepted
//! TCP connection. The drivers move bytes and time the same way for both.
//!
//! It picks and builds the binding; it must never move bytes itself.

use iwarp::{Device, QpConfig};
use nvme_of::Instant;
use nvme_of::controller::{self, ControllerQueue, Target};
use nvme_of::host::{Host, HostConfig};
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
        match self {
            TransportType::Tcp => nvme_tcp::host::new(cfg),
            TransportType::Rdma => {
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
    pub fn with_tls(
        self,
        port: nvme_tcp::tls::controller::TlsPort,
    ) -> Result<Self, UnknownTransport> {
        match self {
            Listener::Tcp(_) | Listener::Tls(_) => {
                Ok(Listener::Tls(nvme_tcp::tls::controller::SecureTcp(port)))
            }
            Listener::Rdma(_) => Err(UnknownTransport("rdma with TLS".into())),
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
