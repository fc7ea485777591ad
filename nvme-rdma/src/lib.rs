//! Sans-IO NVMe/RDMA (NVMe over Fabrics RDMA Transport Specification) over
//! the user-space iWARP engine in `iwarp`: the RDMA binding of the NVMe
//! over Fabrics core in `nvme-of`, as NVMe/TCP is its TCP binding.
//!
//! - [`cm`]: the private data of connection setup (queue sizes, rejects).
//! - [`host`]: the host's queues as queue pairs.
//! - [`controller`]: one controller queue pair around the core's command
//!   handling: capsules from Sends, host data by RDMA Read, controller
//!   data by RDMA Write, responses by Send or Send with Invalidate.
//!
//! Like `nvme-tcp`, nothing here touches a socket, a device or a clock.

pub mod cm;
pub mod controller;
pub mod host;

use iwarp::qp::QpStats;
use iwarp::wire::Terminate;
use iwarp::{Down, VerbsError, WcOpcode, WcStatus};
use nvme_of::{Instant, TxStats, UlpStats};
use std::time::Duration;

/// Why an NVMe/RDMA queue stopped, beyond what every transport shares.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RdmaError {
    #[error("the controller rejected the queue: {}", .0.map_or("no reason".to_string(), |s| s.to_string()))]
    Rejected(Option<cm::CmRejectStatus>),
    #[error("the controller's accept carries no NVMe/RDMA private data")]
    BadAccept,
    #[error("connection setup failed: {0}")]
    Setup(iwarp::SetupError),
    #[error("the peer terminated the connection: {0:?}")]
    TerminateReceived(Terminate),
    #[error("terminated the connection: {0:?}")]
    TerminateSent(Terminate),
    #[error("the connection closed")]
    Closed,
    #[error("malformed capsule: {0}")]
    BadResponse(&'static str),
    #[error("{0:?} completed with {1:?}")]
    Completion(WcOpcode, WcStatus),
    #[error("the queue pair is not connected")]
    NotConnected,
    #[error(transparent)]
    Verbs(VerbsError),
}

impl RdmaError {
    fn down(d: Down) -> Self {
        match d {
            Down::Closed | Down::Aborted => RdmaError::Closed,
            Down::TerminateSent(t) => RdmaError::TerminateSent(t),
            Down::TerminateReceived(t) => RdmaError::TerminateReceived(t),
            Down::Setup(e) => RdmaError::Setup(e),
        }
    }
}

/// The iWARP engine keeps time as a duration since an origin.
fn duration(t: Instant) -> Duration {
    Duration::from_micros(t.as_micros())
}

fn instant(d: Duration) -> Instant {
    Instant::from_micros(d.as_micros().min(u128::from(u64::MAX)) as u64)
}

/// What a queue pair did, in the terms NVMe/TCP reports: received payload
/// (tagged and sent) copied, placed and CRC'd, sent payload and its CRC.
/// The MPA CRC covers every FPDU, so `crc_bytes` counts every payload
/// byte when CRCs are on, where NVMe/TCP counts data digests.
pub fn work(s: &QpStats) -> (UlpStats, TxStats) {
    let rx = UlpStats {
        data_bytes: s.tagged_bytes + s.send_bytes,
        copy_bytes: s.copy_bytes,
        placed_bytes: s.placed_bytes,
        crc_bytes: s.crc_bytes,
        hw_crc_bytes: s.nic_crc_bytes,
        control_calls: s.control_calls,
        resyncs: s.resyncs,
        ..UlpStats::default()
    };
    let tx = TxStats {
        data_bytes: s.tx_bytes - s.tx_zero_copy_bytes,
        crc_bytes: s.tx_crc_bytes,
        crc_offloaded_bytes: s.tx_nic_crc_bytes,
        zero_copy_bytes: s.tx_zero_copy_bytes,
        ..TxStats::default()
    };
    (rx, tx)
}
