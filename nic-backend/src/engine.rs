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
    /// The frame being sent, taken off the ring.
    tx: Vec<u8>,
}

impl<D: Medium> NicEngine<D> {
    /// The engine around `nic`, and the host's end of its descriptor ring:
    /// the device the host's stack runs on.
    pub fn new(nic: OffloadNic<D>) -> (WireEnd, Self) {
        let caps = nic.capabilities();
        let (host, ring) = VirtualWire::ring(&caps, RING_FRAMES);
        (host, Self { nic, ring, tx: Vec::new() })
    }

    /// Move what can be moved each way, as the device does on its own;
    /// whether anything was.
    pub fn step(&mut self, now: Instant) -> bool {
        let (nic, ring, tx) = (&mut self.nic, &mut self.ring, &mut self.tx);
        let mut progress = false;
        for _ in 0..BUDGET {
            let Some(slot) = ring.transmit(now) else { break };
            if !nic.receive_into(now, slot) {
                break;
            }
            progress = true;
        }
        for _ in 0..BUDGET {
            if ring.queued() == 0 || !nic.has_room(now) {
                break;
            }
            // The posted frame's buffer is the NIC's until sent: taken off
            // the ring for one of ours, which goes back to the host.
            let Some((len, meta)) = ring.receive_into(now, tx) else { break };
            // A TSO segment keeps its segment size on the way down.
            nic.transmit_from(now, &mut tx[..len], meta);
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::NicConfig;
    use smoltcp::phy::{DeviceCapabilities, PacketMeta, RxToken as _, TxToken as _};
    use smoltcp_glue::WireEnd;

    /// A port that says where each frame it sent from lay.
    struct Port {
        end: WireEnd,
        sent_from: Vec<*const u8>,
    }

    impl Device for Port {
        type RxToken<'a> = <WireEnd as Device>::RxToken<'a>;
        type TxToken<'a> = <WireEnd as Device>::TxToken<'a>;

        fn receive(&mut self, now: Instant) -> Option<(Self::RxToken<'_>, Self::TxToken<'_>)> {
            self.end.receive(now)
        }

        fn transmit(&mut self, now: Instant) -> Option<Self::TxToken<'_>> {
            self.end.transmit(now)
        }

        fn capabilities(&self) -> DeviceCapabilities {
            self.end.capabilities()
        }
    }

    impl Medium for Port {
        fn wait(&self, timeout: Option<Duration>) {
            self.end.wait(timeout)
        }

        fn wait_with(&self, also: &WireEnd, timeout: Option<Duration>) {
            self.end.wait_with(also, timeout)
        }

        fn waker(&self) -> std::task::Waker {
            self.end.waker()
        }

        fn receive_into(&mut self, now: Instant, buf: &mut Vec<u8>) -> Option<(usize, PacketMeta)> {
            self.end.receive_into(now, buf)
        }

        fn transmit_from(&mut self, now: Instant, frame: &mut [u8], meta: PacketMeta) -> bool {
            self.sent_from.push(frame.as_ptr());
            self.end.transmit_from(now, frame, meta)
        }
    }

    /// A frame no socket is placed into goes from the port to the host in
    /// the buffer it arrived in, and one the host posts leaves from the
    /// buffer the host wrote it in: the NIC copies neither (a medium that
    /// reads into a buffer of the caller's, or writes from one, as a TAP
    /// does, copies nothing of its own either).
    #[test]
    fn frames_cross_the_engine_in_the_buffers_they_came_in() {
        let now = Instant::from_millis(0);
        let (mut peer, end) = VirtualWire::pair(1514, 8);
        let port = Port { end, sent_from: Vec::new() };
        let cfg = NicConfig { checksum: false, ..NicConfig::default() };
        let (mut host, mut engine) = NicEngine::new(OffloadNic::new(port, cfg));

        let mut arrived = std::ptr::null();
        peer.transmit(now).unwrap().consume(100, |f| {
            f.fill(7);
            arrived = f.as_ptr();
        });
        assert!(engine.step(now));
        let (rx, _) = host.receive(now).unwrap();
        assert!(rx.consume(|f| f.as_ptr() == arrived && f == [7; 100]), "not copied on the way up");

        let mut posted = std::ptr::null();
        host.transmit(now).unwrap().consume(80, |f| {
            f.fill(9);
            posted = f.as_ptr();
        });
        host.flush();
        assert!(engine.step(now));
        assert_eq!(engine.nic.get_ref().sent_from, [posted], "sent from where the host wrote it");
        assert!(peer.receive(now).unwrap().0.consume(|f| f == [9; 80]));
    }
}
