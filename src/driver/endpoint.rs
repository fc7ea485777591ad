//! The two ends the drivers move bytes for: one host queue, or one
//! controller connection.
//!
//! They adapt the sans-IO calls; they must never buffer bytes or decide
//! what to do with them.

use nvme_of::Instant;
use nvme_of::controller::ControllerQueue;
use nvme_of::host::Host;

/// A sans-IO end of one byte stream.
pub trait Endpoint {
    /// Bytes received; returns how many were taken.
    fn input(&mut self, data: &[u8]) -> usize;
    /// Fill `out` with bytes to send; returns how many.
    fn output(&mut self, out: &mut [u8]) -> usize;
}

/// The host's end of queue `qid`'s byte stream.
pub struct HostEnd<'a> {
    pub host: &'a mut Host,
    pub qid: u16,
    pub now: Instant,
}

impl Endpoint for HostEnd<'_> {
    fn input(&mut self, data: &[u8]) -> usize {
        self.host.handle_input(self.qid, data, self.now)
    }

    fn output(&mut self, out: &mut [u8]) -> usize {
        self.host.poll_transmit(self.qid, out)
    }
}

/// A controller connection.
pub struct ControllerEnd<'a> {
    pub conn: &'a mut dyn ControllerQueue,
    pub now: Instant,
}

impl Endpoint for ControllerEnd<'_> {
    fn input(&mut self, data: &[u8]) -> usize {
        self.conn.handle_input(data, self.now)
    }

    fn output(&mut self, out: &mut [u8]) -> usize {
        self.conn.poll_transmit(out)
    }
}
