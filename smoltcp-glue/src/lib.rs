//! smoltcp underneath NVMe/TCP: where frames come from (a TAP device, any
//! interface through AF_XDP or AF_PACKET, an in-process wire), what may
//! happen to them on the way (impairments, capture), and the TCP/IP stack
//! with its poll loop.
//!
//! Every medium and decorator is a `smoltcp::phy::Device` that also
//! implements [`Medium`], so they stack in any order and a driver can ask
//! the whole stack when to wake up.

pub mod impair;
pub mod medium;
pub mod pcap;
pub mod stack;

pub use impair::{ImpairStats, Impairments, Profile};
pub use medium::LinkStats;
pub use medium::link::{Link, LinkName, Via};
pub use medium::packet::Packet;
pub use medium::tap::Tap;
pub use medium::wire::{VirtualWire, WireEnd, WireStats};
pub use medium::xdp::Xdp;
pub use pcap::{PcapFile, capture};
pub use stack::{Stack, StackConfig, TcpConn};

use smoltcp::phy::Device;
use smoltcp::time::{Duration, Instant};

/// A frame source and sink a driver can wait on.
pub trait Medium: Device {
    /// When this medium (or a decorator in it) will next have something to
    /// do on its own, such as release a delayed frame.
    fn poll_at(&self) -> Option<Instant> {
        None
    }

    /// Signal the other end about what was just sent (a doorbell), where
    /// the medium batches its signals. Drivers call it after each burst.
    fn flush(&self) {}

    /// Block until a frame may have arrived, room to send may have opened,
    /// or `timeout` passed. Real-time drivers call this when idle;
    /// simulated-time drivers never do.
    fn wait(&self, timeout: Option<Duration>);

    /// Like [`wait`](Self::wait), but a frame arriving at `also`, another
    /// end the same thread serves (a NIC's ring to its host), wakes it too.
    fn wait_with(&self, also: &WireEnd, timeout: Option<Duration>);

    /// Ends a [`wait`](Self::wait) of the calling thread early, from any
    /// thread: for work finished elsewhere (storage answering a
    /// controller). A wake that comes before the wait ends the next one.
    fn waker(&self) -> std::task::Waker;
}

impl<D: Medium, S: smoltcp::phy::PcapSink> Medium for smoltcp::phy::PcapWriter<D, S> {
    fn poll_at(&self) -> Option<Instant> {
        self.get_ref().poll_at()
    }

    fn flush(&self) {
        self.get_ref().flush()
    }

    fn wait(&self, timeout: Option<Duration>) {
        self.get_ref().wait(timeout)
    }

    fn wait_with(&self, also: &WireEnd, timeout: Option<Duration>) {
        self.get_ref().wait_with(also, timeout)
    }

    fn waker(&self) -> std::task::Waker {
        self.get_ref().waker()
    }
}
