//! What a host asks of a controller, and Linux's defaults for it.

use crate::auth::Secret;
use crate::nvme::DISCOVERY_NQN;
use crate::stats::Digests;
use std::time::Duration;

/// What a host asks of a controller.
#[derive(Debug, Clone)]
pub struct HostConfig {
    /// The subsystem to connect to; the discovery NQN runs discovery instead.
    pub subnqn: String,
    pub hostnqn: String,
    pub hostid: [u8; 16],
    /// Integrity checks to ask for (digests on TCP, MPA CRC on RDMA).
    pub digests: Digests,
    /// I/O queues to ask for.
    pub io_queues: u16,
    /// Commands outstanding per I/O queue (the queue gets one entry more).
    pub queue_depth: u16,
    /// Keep alive timeout; zero for none.
    pub kato: Duration,
    /// How long a command may take before it is aborted, and then the
    /// association reset.
    pub command_timeout: Duration,
    /// How long to wait before each attempt to reconnect a lost
    /// association (Linux's `reconnect_delay`).
    pub reconnect_delay: Duration,
    /// How long a lost association is retried before its commands fail;
    /// zero fails at once, `None` retries forever (Linux's
    /// `ctrl_loss_tmo`, -1 for forever).
    pub ctrl_loss_tmo: Option<Duration>,
    /// R2Ts the controller may have outstanding per command, 0-based
    /// (NVMe/TCP).
    pub maxr2t: u32,
    /// Ask for SQ flow control to be disabled (lets controllers use SUCCESS).
    pub disable_sq_flow_control: bool,
    /// Map reads of at least this many bytes when a device offloads the
    /// queue; `None` takes the device's own threshold.
    pub ddp_threshold: Option<u32>,
    /// DH-HMAC-CHAP secrets (`nvme connect --dhchap-secret`, and
    /// `--dhchap-ctrl-secret` to have the controller authenticate too),
    /// used when a controller asks for authentication.
    pub dhchap: Option<DhchapSecrets>,
}

/// A host's DH-HMAC-CHAP secrets.
#[derive(Debug, Clone)]
pub struct DhchapSecrets {
    /// The host's secret, transformed with its HOSTNQN.
    pub key: Secret,
    /// The controller's, transformed with the subsystem NQN: with it the
    /// host asks the controller to prove itself (bidirectional).
    pub ctrl_key: Option<Secret>,
}

impl Default for HostConfig {
    fn default() -> Self {
        Self {
            subnqn: DISCOVERY_NQN.into(),
            hostnqn: "nqn.2014-08.org.nvmexpress:uuid:5f0d2c44-6a1e-4c8b-9d3e-000000000000".into(),
            hostid: [0x5f, 0x0d, 0x2c, 0x44, 0x6a, 0x1e, 0x4c, 0x8b, 0x9d, 0x3e, 0, 0, 0, 0, 0, 0],
            digests: Digests::NONE,
            io_queues: 1,
            queue_depth: 32,
            kato: Duration::from_secs(5),
            command_timeout: DEFAULT_COMMAND_TIMEOUT,
            reconnect_delay: DEFAULT_RECONNECT_DELAY,
            ctrl_loss_tmo: Some(DEFAULT_CTRL_LOSS_TMO),
            maxr2t: 0,
            disable_sq_flow_control: false,
            ddp_threshold: None,
            dhchap: None,
        }
    }
}

/// Default time a command may take before it is aborted (Linux's
/// `io_timeout`).
pub const DEFAULT_COMMAND_TIMEOUT: Duration = Duration::from_secs(30);
/// Linux's defaults for reconnecting a lost association.
pub const DEFAULT_RECONNECT_DELAY: Duration = Duration::from_secs(10);
pub const DEFAULT_CTRL_LOSS_TMO: Duration = Duration::from_secs(600);
/// Times a command is submitted again before its failure stands (Linux's
/// `nvme_core.max_retries`).
pub const MAX_RETRIES: u8 = 5;
