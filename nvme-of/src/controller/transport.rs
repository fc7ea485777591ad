//! What the controller asks of a transport binding: the twin of the
//! host's [`Transport`](crate::host::Transport) and
//! [`HostQueue`](crate::host::HostQueue).
//!
//! A binding's [`ControllerQueue`] is the controller end of one transport
//! connection (a TCP connection for NVMe/TCP, a queue pair for
//! NVMe/RDMA). It moves capsules and data around a [`CtrlQueue`], which
//! gives them their meaning; the driver moves its bytes and its time. It
//! never touches a socket, a device or a clock itself.
//!
//! [`CtrlQueue`]: super::CtrlQueue

use super::Target;
use crate::Instant;
use crate::binding::Binding;
use crate::stats::{TxStats, UlpStats};
use std::net::IpAddr;
use std::sync::Arc;
use std::task::Waker;
use ulp_ddp::{DdpDevice, FlowId, SliceSink, TxSink};

/// Why a controller connection closed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum CloseReason {
    /// The keep alive timer of the controller expired.
    #[error("keep alive timeout expired")]
    KeepAliveExpired,
    /// The controller this queue belongs to went away.
    #[error("its controller went away")]
    ControllerGone,
    /// The transport closed, as transports do.
    #[error("transport closed")]
    TransportClosed,
    /// No queue was connected (and authenticated, where the host must)
    /// within the target's connect timeout.
    #[error("no queue connected within the connect timeout")]
    ConnectTimeout,
    /// DH-HMAC-CHAP failed on this queue (Failure1 sent or Failure2
    /// received); its controller is gone too, as with nvmet.
    #[error("authentication failed: {0}")]
    AuthenticationFailed(crate::auth::Explanation),
    /// The binding's own reason: a malformed PDU, a TermReq, a refused
    /// queue pair. [`CloseReason::downcast_ref`] gets it back.
    #[error(transparent)]
    Transport(Arc<dyn std::error::Error + Send + Sync>),
}

impl CloseReason {
    pub fn transport(e: impl std::error::Error + Send + Sync + 'static) -> Self {
        CloseReason::Transport(Arc::new(e))
    }

    /// The binding's reason, if it is an `E`.
    pub fn downcast_ref<E: std::error::Error + 'static>(&self) -> Option<&E> {
        match self {
            CloseReason::Transport(e) => e.downcast_ref(),
            _ => None,
        }
    }

    /// Whether the connection ended otherwise than transports end.
    pub fn is_abnormal(&self) -> bool {
        !matches!(self, CloseReason::TransportClosed)
    }
}

impl PartialEq for CloseReason {
    fn eq(&self, other: &Self) -> bool {
        use CloseReason::*;
        match (self, other) {
            (Transport(a), Transport(b)) => a.to_string() == b.to_string(),
            (KeepAliveExpired, KeepAliveExpired)
            | (ControllerGone, ControllerGone)
            | (TransportClosed, TransportClosed) => true,
            _ => false,
        }
    }
}

impl Eq for CloseReason {}

/// The controller end of one connection of one transport binding,
/// sans-IO: bytes in, bytes out, time in, deadlines out.
pub trait ControllerQueue: Send {
    /// A device may offload this connection (`flow`, from our side) once
    /// it is an I/O queue. Admin queues are never offloaded.
    fn attach_ddp(&mut self, dev: Arc<dyn DdpDevice>, flow: FlowId);
    fn is_offloaded(&self) -> bool;
    /// Bytes received from the host; returns how many were taken, fewer
    /// than offered while too much output waits: offer the rest again
    /// after transmitting.
    fn handle_input(&mut self, data: &[u8], now: Instant) -> usize;
    /// Queue pending output in `out`; returns the number of bytes.
    fn poll_send(&mut self, out: &mut dyn TxSink) -> usize;
    /// Pending output, copied into `out`; the number of bytes.
    fn poll_transmit(&mut self, out: &mut [u8]) -> usize {
        self.poll_send(&mut SliceSink::new(out))
    }
    /// Bytes (or, where the binding cannot count them, messages) waiting
    /// to be sent.
    fn pending_output(&self) -> usize;
    /// When [`handle_timeout`](Self::handle_timeout) should next run.
    fn poll_timeout(&self) -> Option<Instant>;
    /// Complete what storage answered, enforce the keep alive timeout.
    fn handle_timeout(&mut self, now: Instant);
    /// Nothing more will be sent: the driver closes the transport.
    fn is_closed(&self) -> bool;
    /// The transport closed under us: release the controller if this was
    /// its admin queue.
    fn transport_closed(&mut self);
    /// The queue this connection serves, once connected.
    fn qid(&self) -> Option<u16>;
    /// Work done on received and sent data.
    fn stats(&self) -> (UlpStats, TxStats);
    /// Why the connection closed, once it has.
    fn close_reason(&self) -> Option<&CloseReason>;
    /// Storage answers for this connection wake `waker`, the loop that
    /// serves it, instead of the target's (a poll group's own, so that an
    /// answer wakes only the thread that owns the command). Call before
    /// any input.
    fn wake_with(&mut self, waker: Waker);
}

/// A binding that makes controller connections.
pub trait Transport: Send + Sync {
    /// The controller end of a connection just accepted. `local_addr` is
    /// our address on it, which the discovery log reports when the port
    /// listens on any address.
    fn accept(
        &self,
        target: Arc<Target>,
        local_addr: Option<IpAddr>,
        now: Instant,
    ) -> Box<dyn ControllerQueue>;
    fn binding(&self) -> Binding;
}
