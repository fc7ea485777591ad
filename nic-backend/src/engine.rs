//! The NIC as the device it models, stepped by its host's loop: it takes
//! frames off its port as they arrive, does its receive work (checksums,
//! placement, digests), and DMAs what is left into a descriptor ring the
//! host's stack reads; the other way it takes the frames the host posted,
//! fills in digests and checksums, and sends them.
//!
//! Its work happens only inside [`NicEngine::step`], so a loop that reads
//! the thread's CPU clock around the steps counts it apart from the
//! host's: the host pays for what a host with this NIC would pay for, the
//! ring included.

use crate::OffloadNic;
use smoltcp::phy::Device;
use smoltcp::time::{Duration, Instant};
use smoltcp_glue::{Medium, VirtualWire, WireEnd};

/// Frames each way the descriptor ring holds.
const RING_FRAMES: usize = 256;
/// Frames moved one way before looking the other way.
const BUDGET: usize = 64;

/// The NIC with its descriptor ring: what a caller's loop drives.
pub struct NicEngine<D> {
    nic: OffloadNic<D>,
    ring: WireEnd,
}

impl<D: Medium> NicEngine<D> {
    /// The engine around `nic`, and the host's end of its descriptor ring:
    /// the device the host's stack runs on.
    pub fn new(nic: OffloadNic<D>) -> (WireEnd, Self) {
        let caps = nic.capabilities();
        let (host, ring) = VirtualWire::ring(&caps, RING_FRAMES);
        (host, Self { nic, ring })
    }

    /// Move what can be moved each way, as the device does on its own;
    /// whether anything was.
    pub fn step(&mut self, now: Instant) -> bool {
        let (nic, ring) = (&mut self.nic, &mut self.ring);
        let mut progress = false;
        for _ in 0..BUDGET {
            let Some(slot) = ring.transmit(now) else { break };
            if !nic.receive_into(now, slot) {
                break;
            }
            progress = true;
        }
        for _ in 0..BUDGET {
            if ring.queued() == 0 {
                break;
            }
            let Some(mut out) = nic.transmit(now) else { break };
            let Some((posted, _)) = ring.receive(now) else { break };
            // A TSO segment keeps its segment size on the way down.
            smoltcp::phy::TxToken::set_meta(&mut out, smoltcp::phy::RxToken::meta(&posted));
            smoltcp::phy::RxToken::consume(posted, |frame| {
                smoltcp::phy::TxToken::consume(out, frame.len(), |buf| buf.copy_from_slice(frame))
            });
            progress = true;
        }
        ring.flush();
        nic.flush();
        progress
    }

    /// When the medium next needs a step on its own (a delayed frame).
    pub fn poll_at(&self) -> Option<Instant> {
        self.nic.poll_at()
    }

    /// Sleep until a frame arrives either way, or `timeout` passes.
    pub fn wait(&self, timeout: Option<Duration>) {
        self.nic.wait_with(&self.ring, timeout)
    }
}
