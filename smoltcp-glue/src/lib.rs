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
pub use medium::wire::{TxToken as WireTx, VirtualWire, WireEnd, WireStats};
pub use medium::xdp::Xdp;
pub use pcap::{Capture, PcapFile};
pub use stack::{Stack, StackConfig, TcpConn};

use smoltcp::phy::{Device, PacketMeta};
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

    /// Receive the next frame into `buf`, from its start (growing it if
    /// need be; it is never shrunk): the frame's length and metadata, or
    /// `None` if none came. For a driver that hands the buffer on whole,
    /// as a NIC DMAs into the buffers of its descriptor ring: a medium
    /// that can (a TAP) reads the frame there, a wire trades buffers, and
    /// the rest copy the frame from [`Device::receive`].
    fn receive_into(&mut self, now: Instant, buf: &mut Vec<u8>) -> Option<(usize, PacketMeta)> {
        medium::receive_copied(self, now, buf)
    }

    /// Send `frame`, with its metadata (a TSO segment's size), from where
    /// it lies, for a driver that holds it in a buffer of its own, as a
    /// NIC sends from its ring; the medium may change its headers on the
    /// way (a checksum it leaves to the kernel). A medium that can (a TAP)
    /// hands the kernel the frame from there, the rest copy it into a
    /// [`Device::transmit`] token. False, and nothing sent, if the medium
    /// has no room: a driver that must not lose the frame asks first, with
    /// `transmit`.
    fn transmit_from(&mut self, now: Instant, frame: &mut [u8], meta: PacketMeta) -> bool {
        medium::transmit_copied(self, now, frame, meta)
    }
}
