//! Which NVMe-oF transport a run speaks, and how each side makes its ends
//! of it: the host's queues, and a controller connection per accepted
//! TCP connection. The drivers move bytes and time the same way for both.

use iwarp::{Device, QpConfig};
use nvme_tcp::Instant;
use nvme_tcp::UlpStats;
use nvme_tcp::controller::Target;
use nvme_tcp::host::{Host, HostConfig};
use nvme_tcp::wire::TxStats;
use std::net::IpAddr;
use std::sync::Arc;
use ulp_ddp::{DdpDevice, FlowId};

/// NVMe/TCP, or NVMe/RDMA over user-space iWARP.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Transport {
    #[default]
    Tcp,
    Rdma,
}

impl Transport {
    pub const ALL: [Transport; 2] = [Transport::Tcp, Transport::Rdma];

    pub fn name(self) -> &'static str {
        match self {
            Transport::Tcp => "tcp",
            Transport::Rdma => "rdma",
        }
    }

    pub fn parse(s: &str) -> Result<Self, String> {
        Self::ALL
            .into_iter()
            .find(|t| t.name() == s)
            .ok_or_else(|| format!("{s:?}: use tcp or rdma"))
    }

    /// A host speaking this transport. Over RDMA, `digests.data` asks for
    /// MPA CRCs, `oneshot` registers and sends in one call, and FPDUs are
    /// cut for `mtu`.
    pub fn host(self, cfg: HostConfig, oneshot: bool, mtu: usize) -> Host {
        match self {
            Transport::Tcp => nvme_tcp::host::new(cfg),
            Transport::Rdma => {
                let rdma = nvme_rdma::host::Rdma::new(cfg.digests.data, oneshot).path_mtu(mtu);
                nvme_rdma::host::new(cfg, rdma)
            }
        }
    }

    /// What a controller accepts connections with.
    pub fn listener(self, mtu: usize) -> Listener {
        match self {
            Transport::Tcp => Listener::Tcp,
            Transport::Rdma => {
                let dev = Device::new();
                let qp = QpConfig::new(dev.alloc_pd()).path_mtu(mtu);
                Listener::Rdma { dev, qp }
            }
        }
    }
}

/// A controller's way of making connections: NVMe/TCP, or NVMe/RDMA with
/// the controller's memory and how its queue pairs answer (the CRC follows
/// what each host asks).
#[derive(Debug, Clone, Default)]
pub enum Listener {
    #[default]
    Tcp,
    Rdma {
        dev: Device,
        qp: QpConfig,
    },
}

impl Listener {
    /// Insist on MPA CRCs on every connection, as a responder may (RFC
    /// 5044 §7.1: either side asking turns them on). NVMe/TCP leaves its
    /// digests to the host, so this changes nothing there.
    pub fn require_crc(mut self, crc: bool) -> Self {
        if let Listener::Rdma { qp, .. } = &mut self {
            qp.crc |= crc;
        }
        self
    }

    /// The controller end of a TCP connection just accepted.
    pub fn accept(
        &self,
        target: Arc<Target>,
        local: Option<IpAddr>,
        now: Instant,
    ) -> Box<dyn ControllerConn> {
        match self {
            Listener::Tcp => Box::new(nvme_tcp::controller::Connection::new(target, local)),
            Listener::Rdma { dev, qp } => Box::new(nvme_rdma::controller::Connection::new(
                target,
                local,
                dev,
                qp.clone(),
                now,
            )),
        }
    }

    pub fn transport(&self) -> Transport {
        match self {
            Listener::Tcp => Transport::Tcp,
            Listener::Rdma { .. } => Transport::Rdma,
        }
    }
}

/// One controller connection, sans-IO, whatever its transport.
pub trait ControllerConn: Send {
    fn attach_ddp(&mut self, dev: Arc<dyn DdpDevice>, flow: FlowId);
    fn handle_input(&mut self, data: &[u8], now: Instant) -> usize;
    fn poll_transmit(&mut self, out: &mut [u8]) -> usize;
    fn poll_timeout(&self) -> Option<Instant>;
    fn handle_timeout(&mut self, now: Instant);
    fn is_closed(&self) -> bool;
    fn transport_closed(&mut self);
    fn qid(&self) -> Option<u16>;
    fn stats(&self) -> (UlpStats, TxStats);
    /// Why the connection closed, unless it closed as transports do.
    fn abnormal_close(&self) -> Option<String>;
}

macro_rules! controller_conn {
    ($t:ty, $reason:ty) => {
        impl ControllerConn for $t {
            fn attach_ddp(&mut self, dev: Arc<dyn DdpDevice>, flow: FlowId) {
                <$t>::attach_ddp(self, dev, flow)
            }
            fn handle_input(&mut self, data: &[u8], now: Instant) -> usize {
                <$t>::handle_input(self, data, now)
            }
            fn poll_transmit(&mut self, out: &mut [u8]) -> usize {
                <$t>::poll_transmit(self, out)
            }
            fn poll_timeout(&self) -> Option<Instant> {
                <$t>::poll_timeout(self)
            }
            fn handle_timeout(&mut self, now: Instant) {
                <$t>::handle_timeout(self, now)
            }
            fn is_closed(&self) -> bool {
                <$t>::is_closed(self)
            }
            fn transport_closed(&mut self) {
                <$t>::transport_closed(self)
            }
            fn qid(&self) -> Option<u16> {
                <$t>::qid(self)
            }
            fn stats(&self) -> (UlpStats, TxStats) {
                <$t>::stats(self)
            }
            fn abnormal_close(&self) -> Option<String> {
                match <$t>::close_reason(self)? {
                    <$reason>::TransportClosed => None,
                    r => Some(format!("{r:?}")),
                }
            }
        }
    };
}

controller_conn!(nvme_tcp::controller::Connection, nvme_tcp::controller::CloseReason);
controller_conn!(nvme_rdma::controller::Connection, nvme_rdma::controller::CloseReason);
