//! Any Linux network interface through an AF_XDP socket: frames go between
//! the driver and the stack through rings in memory we share with the
//! kernel (the UMEM), skipping the kernel's network stack, and with a
//! driver that supports it, without a copy.
//!
//! An XDP program on the interface hands every frame of receive queue 0 to
//! the socket. It is six instructions, loaded with the `bpf` system call
//! and attached in the driver (native XDP) through a BPF link, so closing
//! the medium detaches it. The interface then belongs to the stack: the
//! kernel sees none of its frames.
//!
//! Where this does not work, [`Xdp::open`] fails with the reason and the
//! caller falls back to AF_PACKET: a kernel or driver without native XDP,
//! more than one receive queue (only queue 0 is bound), or frames larger
//! than a UMEM chunk (an IP MTU above 3,826 bytes; a veth refuses XDP above
//! about 3,500). No checksum or segmentation offload crosses AF_XDP: the
//! stack (or the software NIC below it) computes every checksum and sends
//! segments that fit the link, and the medium verifies every received TCP
//! checksum, finishing those a sender on this host left partial.
//! Needs CAP_NET_ADMIN and CAP_BPF (root).

mod bpf;

use crate::medium::bpf::owned;
use crate::medium::sleep::FdSleep;
use crate::medium::{
    ETHERNET_HEADER, LinkStats, Mapping, context, interface_index, interface_mtu, setsockopt,
    tcp_checksum_finished,
};
use crate::{Medium, WireEnd};
use bpf::Redirect;
use smoltcp::phy::{self, Device, DeviceCapabilities};
use smoltcp::time::{Duration, Instant};
use std::cell::Cell;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU32, Ordering};

/// Bytes in one UMEM chunk: one frame each.
const CHUNK: usize = 4096;
/// Room the kernel keeps before a received frame in its chunk.
const XDP_PACKET_HEADROOM: usize = 256;
/// Chunks for receiving, and as many for sending: more than the 4 MiB a
/// QD-32 128 KiB read has in flight, in 1,500-byte frames (2,048 dropped
/// some). Every ring holds this many entries, so none can overflow.
const FRAMES: usize = 4096;
/// Frames queued to send before the kernel is told.
const KICK_BATCH: u32 = 64;

/// An interface opened through AF_XDP in the current network namespace.
pub struct Xdp {
    name: String,
    zero_copy: bool,
    /// Largest frame, Ethernet header included.
    mtu: usize,
    rx: RxSide,
    tx: TxSide,
    sleep: FdSleep,
    // Dropped in this order: the program leaves the interface first.
    _redirect: Redirect,
    sock: OwnedFd,
    _umem: Mapping,
}

/// One of the four rings: a power-of-two array of `T` with a producer and
/// a consumer index, one of them ours.
struct Ring<T> {
    _map: Mapping,
    producer: *const AtomicU32,
    consumer: *const AtomicU32,
    flags: *const AtomicU32,
    desc: *mut T,
    /// Our copy of the index we own, and of the kernel's as last read.
    ours: u32,
    theirs: u32,
}

// SAFETY: its pointers are into its own mapping, as `Mapping`'s are.
unsafe impl<T> Send for Ring<T> {}

impl<T: Copy> Ring<T> {
    fn map(fd: RawFd, off: &libc::xdp_ring_offset, pgoff: u64) -> io::Result<Self> {
        let len = off.desc as usize + FRAMES * size_of::<T>();
        let map = Mapping::new(Some(fd), len, pgoff, true)?;
        // SAFETY: the offsets the kernel gave for this ring lie inside it.
        let (producer, consumer, flags, desc) = unsafe {
            (
                map.base.add(off.producer as usize).cast::<AtomicU32>(),
                map.base.add(off.consumer as usize).cast::<AtomicU32>(),
                map.base.add(off.flags as usize).cast::<AtomicU32>(),
                map.base.add(off.desc as usize).cast::<T>(),
            )
        };
        Ok(Self { _map: map, producer, consumer, flags, desc, ours: 0, theirs: 0 })
    }

    fn word(&self, p: *const AtomicU32) -> &AtomicU32 {
        // SAFETY: `p` points into `self.map`, which lives as long as `self`.
        unsafe { &*p }
    }

    fn slot(&self, i: u32) -> *mut T {
        // SAFETY: masked to the ring's `FRAMES` entries.
        unsafe { self.desc.add(i as usize & (FRAMES - 1)) }
    }

    fn needs_wakeup(&self) -> bool {
        self.word(self.flags).load(Ordering::Relaxed) & libc::XDP_RING_NEED_WAKEUP != 0
    }

    /// As the consumer: the next entry, if the kernel has produced one.
    fn peek(&mut self) -> Option<T> {
        if self.ours == self.theirs {
            self.theirs = self.word(self.producer).load(Ordering::Acquire);
            if self.ours == self.theirs {
                return None;
            }
        }
        // SAFETY: an entry the kernel produced (acquire above).
        Some(unsafe { self.slot(self.ours).read() })
    }

    /// As the consumer: hand the entry `peek` returned back.
    fn release(&mut self) {
        self.ours = self.ours.wrapping_add(1);
        let ours = self.ours;
        self.word(self.consumer).store(ours, Ordering::Release);
    }

    /// As the producer: queue `entry`. The rings hold every frame there is,
    /// so there is always room.
    fn push(&mut self, entry: T) {
        // SAFETY: an entry the kernel has consumed or never had.
        unsafe { self.slot(self.ours).write(entry) };
        self.ours = self.ours.wrapping_add(1);
        let ours = self.ours;
        self.word(self.producer).store(ours, Ordering::Release);
    }
}

/// The receive ring and the fill ring that gives the kernel chunks to
/// receive into.
struct RxSide {
    rx: Ring<libc::xdp_desc>,
    fill: Ring<u64>,
    umem: *mut u8,
    fd: RawFd,
    frames: u64,
    dropped: u64,
    largest: usize,
}

// SAFETY: `umem` points into the medium's own mapping.
unsafe impl Send for RxSide {}

impl RxSide {
    /// Done with the frame `peek` returned: its chunk may receive again.
    fn give_back(&mut self, chunk: u64) {
        self.rx.release();
        self.fill.push(chunk);
    }

    /// With nothing received, wake a driver that waits to be told about
    /// chunks to receive into (zero-copy drivers may).
    fn wake_driver(&self) {
        if self.fill.needs_wakeup() {
            // SAFETY: an empty non-blocking receive on our socket.
            unsafe {
                libc::recvfrom(
                    self.fd,
                    std::ptr::null_mut(),
                    0,
                    libc::MSG_DONTWAIT,
                    std::ptr::null_mut(),
                    std::ptr::null_mut(),
                )
            };
        }
    }
}

/// The transmit ring, the completion ring that returns sent chunks, and the
/// chunks free to send from.
struct TxSide {
    tx: Ring<libc::xdp_desc>,
    completion: Ring<u64>,
    free: Vec<u64>,
    umem: *mut u8,
    fd: RawFd,
    /// Frames queued since the kernel was last told.
    pending: Cell<u32>,
    /// Where a frame with no chunk to go in is written, and dropped.
    scratch: Vec<u8>,
    frames: u64,
    dropped: u64,
    largest: usize,
}

// SAFETY: as for `RxSide`.
unsafe impl Send for TxSide {}

impl TxSide {
    /// Take back the chunks the kernel has sent.
    fn reclaim(&mut self) {
        while let Some(addr) = self.completion.peek() {
            self.free.push(addr);
            self.completion.release();
        }
    }

    /// Tell the kernel about the frames queued (copy mode sends only then).
    fn kick(&self) {
        let pending = self.pending.replace(0);
        if pending == 0 || !self.tx.needs_wakeup() {
            return;
        }
        // In copy mode one send takes 32 frames at most and says EAGAIN
        // while more wait: go on until they are all taken (or the kernel
        // cannot, EBUSY or ENOBUFS, when the next kick tries again).
        for _ in 0..=pending / 32 {
            // SAFETY: an empty non-blocking send on our socket.
            let r = unsafe {
                libc::sendto(self.fd, std::ptr::null(), 0, libc::MSG_DONTWAIT, std::ptr::null(), 0)
            };
            if r >= 0 || io::Error::last_os_error().raw_os_error() != Some(libc::EAGAIN) {
                break;
            }
        }
    }

    /// Whether a chunk is free to send from, asking the kernel for sent
    /// ones if none is.
    fn has_chunk(&mut self) -> bool {
        if self.free.is_empty() {
            self.reclaim();
            if self.free.is_empty() {
                self.kick();
                self.reclaim();
            }
        }
        !self.free.is_empty()
    }
}

/// Read option `opt`, a plain C struct the kernel fills.
fn getsockopt<T>(fd: RawFd, opt: libc::c_int) -> io::Result<T> {
    // SAFETY: the options read here are plain integers, valid all zero.
    let mut val: T = unsafe { std::mem::zeroed() };
    let mut len = size_of::<T>() as libc::socklen_t;
    // SAFETY: the kernel writes at most `len` bytes into `val`.
    let r =
        unsafe { libc::getsockopt(fd, libc::SOL_XDP, opt, (&mut val as *mut T).cast(), &mut len) };
    if r < 0 { Err(io::Error::last_os_error()) } else { Ok(val) }
}

/// Receive queues of interface `name` the kernel has set up.
fn rx_queues(name: &str) -> io::Result<usize> {
    let dir = std::fs::read_dir(format!("/sys/class/net/{name}/queues"))?;
    Ok(dir.flatten().filter(|e| e.file_name().to_string_lossy().starts_with("rx-")).count())
}

impl Xdp {
    /// Attach to interface `name`. `mtu` is the IP MTU; without it, the
    /// interface's is used. Fails, with the reason, where the interface,
    /// its driver or the kernel cannot do it.
    pub fn open(name: &str, mtu: Option<usize>) -> io::Result<Self> {
        let ifindex = interface_index(name)?;
        let frame = mtu.map_or_else(|| interface_mtu(name), Ok)? + ETHERNET_HEADER;
        if frame > CHUNK - XDP_PACKET_HEADROOM {
            return Err(io::Error::other(format!(
                "{frame}-byte frames do not fit a {CHUNK}-byte UMEM chunk"
            )));
        }
        let queues = rx_queues(name).map_err(context("counting receive queues"))?;
        if queues != 1 {
            return Err(io::Error::other(format!(
                "{queues} receive queues; AF_XDP binds queue 0 only (ethtool -L {name} combined 1)"
            )));
        }

        // SAFETY: socket returns a new descriptor or -1.
        let fd = unsafe { libc::socket(libc::AF_XDP, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) };
        if fd < 0 {
            return Err(context("AF_XDP socket")(io::Error::last_os_error()));
        }
        let sock = owned(fd.into());
        let umem = Mapping::new(None, 2 * FRAMES * CHUNK, 0, true).map_err(context("UMEM"))?;
        let reg = libc::xdp_umem_reg {
            addr: umem.base as u64,
            len: umem.len as u64,
            chunk_size: CHUNK as u32,
            headroom: 0,
            flags: 0,
            tx_metadata_len: 0,
        };
        setsockopt(fd, libc::SOL_XDP, libc::XDP_UMEM_REG, &reg)
            .map_err(context("registering the UMEM"))?;
        for opt in [
            libc::XDP_UMEM_FILL_RING,
            libc::XDP_UMEM_COMPLETION_RING,
            libc::XDP_RX_RING,
            libc::XDP_TX_RING,
        ] {
            setsockopt(fd, libc::SOL_XDP, opt, &(FRAMES as u32)).map_err(context("ring sizes"))?;
        }
        let off: libc::xdp_mmap_offsets =
            getsockopt(fd, libc::XDP_MMAP_OFFSETS).map_err(context("ring offsets"))?;
        let rx = Ring::map(fd, &off.rx, libc::XDP_PGOFF_RX_RING as u64)?;
        let tx = Ring::map(fd, &off.tx, libc::XDP_PGOFF_TX_RING as u64)?;
        let mut fill = Ring::map(fd, &off.fr, libc::XDP_UMEM_PGOFF_FILL_RING)?;
        let completion = Ring::map(fd, &off.cr, libc::XDP_UMEM_PGOFF_COMPLETION_RING)?;
        // The first half of the chunks receive, the second half send.
        for i in 0..FRAMES {
            fill.push((i * CHUNK) as u64);
        }

        let redirect = Redirect::attach(ifindex, name)?;
        let addr = libc::sockaddr_xdp {
            sxdp_family: libc::AF_XDP as u16,
            sxdp_flags: libc::XDP_USE_NEED_WAKEUP,
            sxdp_ifindex: ifindex,
            sxdp_queue_id: 0,
            sxdp_shared_umem_fd: 0,
        };
        // A socket closed on this queue a moment ago holds it until the
        // kernel's deferred release runs: wait for that, a second at most.
        let mut tries = 0;
        loop {
            // SAFETY: `addr` is a sockaddr_xdp of the length we pass.
            let r = unsafe {
                libc::bind(
                    fd,
                    (&addr as *const libc::sockaddr_xdp).cast(),
                    size_of::<libc::sockaddr_xdp>() as u32,
                )
            };
            if r == 0 {
                break;
            }
            let e = io::Error::last_os_error();
            if e.raw_os_error() != Some(libc::EBUSY) || tries == 100 {
                return Err(context(&format!("binding to {name} queue 0"))(e));
            }
            tries += 1;
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        redirect.to(fd)?;
        let zero_copy = getsockopt::<libc::xdp_options>(fd, libc::XDP_OPTIONS)
            .is_ok_and(|o| o.flags & libc::XDP_OPTIONS_ZEROCOPY != 0);
        let base = umem.base;
        Ok(Self {
            name: name.into(),
            zero_copy,
            mtu: frame,
            rx: RxSide { rx, fill, umem: base, fd, frames: 0, dropped: 0, largest: 0 },
            tx: TxSide {
                tx,
                completion,
                free: (FRAMES..2 * FRAMES).rev().map(|i| (i * CHUNK) as u64).collect(),
                umem: base,
                fd,
                pending: Cell::new(0),
                scratch: vec![0; CHUNK],
                frames: 0,
                dropped: 0,
                largest: 0,
            },
            sleep: FdSleep::new()?,
            _redirect: redirect,
            sock,
            _umem: umem,
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// Whether the driver places frames in the UMEM itself (no copy).
    pub fn zero_copy(&self) -> bool {
        self.zero_copy
    }

    pub fn stats(&self) -> LinkStats {
        LinkStats {
            rx_frames: self.rx.frames,
            rx_dropped: self.rx.dropped,
            rx_largest: self.rx.largest,
            tx_frames: self.tx.frames,
            tx_dropped: self.tx.dropped,
            tx_largest: self.tx.largest,
        }
    }

    fn fd(&self) -> RawFd {
        self.sock.as_raw_fd()
    }
}

/// A received frame, read in its chunk; the chunk goes back to the fill
/// ring when the token drops.
pub struct RxToken<'a> {
    frame: &'a [u8],
    chunk: u64,
    side: &'a mut RxSide,
}

impl Drop for RxToken<'_> {
    fn drop(&mut self) {
        self.side.give_back(self.chunk);
    }
}

impl phy::RxToken for RxToken<'_> {
    fn consume<R, F: FnOnce(&[u8]) -> R>(self, f: F) -> R {
        f(self.frame)
    }
}

/// A frame to send, written straight into a UMEM chunk.
pub struct TxToken<'a> {
    side: &'a mut TxSide,
    mtu: usize,
}

impl phy::TxToken for TxToken<'_> {
    fn consume<R, F: FnOnce(&mut [u8]) -> R>(self, len: usize, f: F) -> R {
        let side = self.side;
        let chunk = if len <= self.mtu && side.has_chunk() { side.free.pop() } else { None };
        let Some(chunk) = chunk else {
            side.dropped += 1;
            side.scratch.resize(len.max(side.scratch.len()), 0);
            return f(&mut side.scratch[..len]);
        };
        // SAFETY: a free chunk of the UMEM, ours until the completion ring
        // returns it; `len` fits it.
        let buf = unsafe { std::slice::from_raw_parts_mut(side.umem.add(chunk as usize), len) };
        let r = f(buf);
        side.tx.push(libc::xdp_desc { addr: chunk, len: len as u32, options: 0 });
        side.frames += 1;
        side.largest = side.largest.max(len);
        side.pending.set(side.pending.get() + 1);
        if side.pending.get() >= KICK_BATCH {
            side.kick();
        }
        r
    }
}

impl Device for Xdp {
    type RxToken<'a> = RxToken<'a>;
    type TxToken<'a> = TxToken<'a>;

    fn receive(&mut self, _now: Instant) -> Option<(RxToken<'_>, TxToken<'_>)> {
        let rx = &mut self.rx;
        loop {
            let Some(desc) = rx.rx.peek() else {
                rx.wake_driver();
                return None;
            };
            let chunk = desc.addr & !(CHUNK as u64 - 1);
            // SAFETY: the kernel wrote this frame into a receive chunk and
            // handed it over; it stays ours until it goes back to the fill
            // ring.
            let frame = unsafe {
                std::slice::from_raw_parts_mut(rx.umem.add(desc.addr as usize), desc.len as usize)
            };
            if !tcp_checksum_finished(frame) {
                rx.dropped += 1;
                rx.give_back(chunk);
                continue;
            }
            rx.frames += 1;
            rx.largest = rx.largest.max(frame.len());
            let tx = TxToken { side: &mut self.tx, mtu: self.mtu };
            return Some((RxToken { frame, chunk, side: rx }, tx));
        }
    }

    fn transmit(&mut self, _now: Instant) -> Option<TxToken<'_>> {
        if !self.tx.has_chunk() {
            return None;
        }
        Some(TxToken { side: &mut self.tx, mtu: self.mtu })
    }

    fn capabilities(&self) -> DeviceCapabilities {
        let mut caps = DeviceCapabilities::default();
        caps.medium = phy::Medium::Ethernet;
        caps.max_transmission_unit = self.mtu;
        // Received checksums are checked (or finished) here; sent ones are
        // the stack's.
        caps.checksum.tcp = phy::Checksum::Tx;
        caps
    }
}

impl Medium for Xdp {
    fn flush(&self) {
        self.tx.kick()
    }

    fn waker(&self) -> std::task::Waker {
        self.sleep.waker()
    }

    fn wait(&self, timeout: Option<Duration>) {
        self.tx.kick();
        self.sleep.sleep(self.fd(), timeout)
    }

    fn wait_with(&self, also: &WireEnd, timeout: Option<Duration>) {
        self.tx.kick();
        self.sleep.sleep_with(self.fd(), also, timeout)
    }
}
