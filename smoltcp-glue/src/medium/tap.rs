//! A Linux TAP device: Ethernet frames to and from the kernel.
//!
//! Non-blocking, one preallocated buffer each way (no allocation per
//! frame), readiness through `poll(2)`. Opening needs CAP_NET_ADMIN or a
//! persistent TAP owned by the user, in the caller's network namespace.
//!
//! Each frame carries a virtio-net header (`IFF_VNET_HDR`), and the TAP
//! takes checksum and TCP segmentation offload (`TUNSETOFFLOAD`), as a NIC
//! does. On transmit the stack computes no TCP checksum (the kernel
//! finishes it where a frame leaves for a device that needs it, and
//! nowhere else) and, told the TAP segments, hands down TCP segments of up
//! to 64 KiB in one `write` (a frame below the TAP's `gso_max_size`, a
//! whole number of MSS), which the kernel cuts to the stack's segment
//! size only where it must (a peer without TSO); another TAP with TSO
//! reads them whole, through a bridge or a `tc` redirect. On receive,
//! frames come up as large as the sender made them; one the kernel
//! vouches for (sent by this host, its checksum left for a NIC, or
//! already verified) goes up as it is, any other TCP segment has its
//! checksum verified here, and a bad one is dropped. The link's MTU still
//! bounds what the other end sends, through the MSS the stack advertises.
//!
//! A driver that owns its buffers (a NIC's engine and its ring) reads a
//! frame into one and writes one from where it lies
//! ([`Medium::receive_into`], [`Medium::transmit_from`]), with `readv` and
//! `writev` behind the virtio-net header: the kernel's copy is the only
//! one.
//!
//! A TAP made with `IFF_MULTI_QUEUE` opens as several queues
//! ([`Tap::open_queues`]), each its own descriptor for a stack on its own
//! thread, all with one address. A steering program picks each frame's
//! queue from its TCP ports, so that a connection stays on one queue;
//! frames that are not TCP go to queue 0, which hands a copy of every ARP
//! frame to the others, so that each stack knows its neighbours without
//! asking on a queue where the answer would not come back.

use crate::medium::bpf::{self, insn};
use crate::medium::sleep::FdSleep;
use crate::medium::vnet::{self, TxToken, VNET_HDR};
use crate::medium::{
    ETHERNET_HEADER, IfReq, LARGEST_FRAME, LinkStats, context, interface_mtu, tcp_checksum_ok,
};
use crate::{Medium, WireEnd};
use smoltcp::phy::{self, Device, DeviceCapabilities, PacketMeta};
use smoltcp::time::{Duration, Instant};
use smoltcp::wire::{ArpOperation, ArpPacket, EthernetFrame, EthernetProtocol};
use std::collections::VecDeque;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::{AsFd, AsRawFd, RawFd};
use std::os::unix::fs::OpenOptionsExt;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::Waker;

const TUNSETIFF: libc::c_ulong = 0x4004_54ca;
const TUNSETOFFLOAD: libc::c_ulong = 0x4004_54d0;
const TUNSETSTEERINGEBPF: libc::c_ulong = 0x8004_54e0;
const IFF_TAP: libc::c_short = 0x0002;
const IFF_NO_PI: libc::c_short = 0x1000;
const IFF_VNET_HDR: libc::c_short = 0x4000;
const IFF_MULTI_QUEUE: libc::c_short = 0x0100;
const BPF_PROG_TYPE_SOCKET_FILTER: u32 = 1;
const TUN_F_CSUM: libc::c_uint = 0x01;
const TUN_F_TSO4: libc::c_uint = 0x02;

/// A TAP interface opened in the current network namespace.
pub struct Tap {
    file: File,
    name: String,
    /// Largest frame the link carries, Ethernet header included; larger
    /// ones go down as GSO.
    mtu: usize,
    /// The frame last received, without its virtio-net header.
    rx: Vec<u8>,
    rx_len: usize,
    tx: Vec<u8>,
    stats: LinkStats,
    sleep: FdSleep,
    /// This queue's place among several, if the TAP was opened as several.
    queues: Option<(usize, Arc<Queues>)>,
}

/// What the queues of one multi-queue TAP share: the ARP frames each has
/// yet to see, and the bells that wake their threads.
struct Queues {
    arp: Vec<Mutex<VecDeque<Vec<u8>>>>,
    bells: Vec<Waker>,
}

impl Tap {
    /// Attach to TAP interface `name` (created if it does not exist and we
    /// may). `mtu` is the IP MTU; without it, the interface's is used.
    pub fn open(name: &str, mtu: Option<usize>) -> io::Result<Self> {
        Self::attach(name, mtu, false)
    }

    /// Attach to `queues` queues of TAP `name` (created multi-queue if it
    /// does not exist), frames steered to them by TCP ports. Each queue is
    /// a medium of its own, for a stack with the same address.
    pub fn open_queues(name: &str, mtu: Option<usize>, queues: usize) -> io::Result<Vec<Self>> {
        let mut taps =
            (0..queues).map(|_| Self::attach(name, mtu, true)).collect::<io::Result<Vec<_>>>()?;
        if queues > 1 {
            steer_by_ports(taps[0].fd(), name)?;
            let shared = Arc::new(Queues {
                arp: (0..queues).map(|_| Mutex::default()).collect(),
                bells: taps.iter().map(|t| t.sleep.waker()).collect(),
            });
            for (i, t) in taps.iter_mut().enumerate() {
                t.queues = Some((i, shared.clone()));
            }
        }
        Ok(taps)
    }

    fn attach(name: &str, mtu: Option<usize>, multi_queue: bool) -> io::Result<Self> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_NONBLOCK)
            .open("/dev/net/tun")
            .map_err(context("cannot open /dev/net/tun"))?;
        let set_iff = |multi_queue: bool| {
            let mut req = IfReq::new(name)?;
            let mut flags = IFF_TAP | IFF_NO_PI | IFF_VNET_HDR;
            if multi_queue {
                flags |= IFF_MULTI_QUEUE;
            }
            req.data[..2].copy_from_slice(&flags.to_ne_bytes());
            // SAFETY: TUNSETIFF reads an `ifreq` we own, of the size the kernel expects.
            match unsafe { libc::ioctl(file.as_raw_fd(), TUNSETIFF, &mut req as *mut IfReq) } {
                0.. => Ok(()),
                _ => Err(io::Error::last_os_error()),
            }
        };
        // A TAP takes only attachments that agree on IFF_MULTI_QUEUE: one
        // queue of a multi-queue TAP says so too.
        let einval = |e: &io::Error| e.raw_os_error() == Some(libc::EINVAL);
        match set_iff(multi_queue) {
            Err(e) if einval(&e) && !multi_queue => set_iff(true),
            r => r,
        }
        .map_err(|e| {
            let why = match multi_queue && einval(&e) {
                true => format!(
                    "it has one queue; make it with several (ip tuntap add dev {name} mode tap multi_queue, or nvme-ddp net up)"
                ),
                false => e.to_string(),
            };
            io::Error::new(e.kind(), format!("cannot attach to TAP {name}: {why}"))
        })?;
        let ip_mtu = match mtu {
            Some(m) => m,
            None => interface_mtu(name)?,
        };
        let offload = TUN_F_CSUM | TUN_F_TSO4;
        // SAFETY: TUNSETOFFLOAD takes its flags by value.
        if unsafe { libc::ioctl(file.as_raw_fd(), TUNSETOFFLOAD, offload as libc::c_ulong) } < 0 {
            return Err(context(format!("TAP {name}: no offloads"))(io::Error::last_os_error()));
        }
        Ok(Self {
            sleep: FdSleep::new()?,
            file,
            name: name.into(),
            mtu: ip_mtu + ETHERNET_HEADER,
            rx: vec![0; LARGEST_FRAME],
            rx_len: 0,
            tx: vec![0; LARGEST_FRAME],
            stats: LinkStats::default(),
            queues: None,
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn stats(&self) -> LinkStats {
        self.stats
    }

    fn fd(&self) -> RawFd {
        self.file.as_raw_fd()
    }

    /// The next frame for us, into `buf` (grown to the largest frame if
    /// shorter) with its virtio-net header into `hdr`: one another queue
    /// shared, or one read from the TAP, whose checksum the kernel vouches
    /// for or that verifies. Its length, or `None` if none has come.
    fn next_frame(&mut self, hdr: &mut [u8; VNET_HDR], buf: &mut Vec<u8>) -> Option<usize> {
        if buf.len() < LARGEST_FRAME {
            buf.resize(LARGEST_FRAME, 0);
        }
        loop {
            let n = match self.take_shared(buf) {
                Some(n) => {
                    hdr.fill(0);
                    n
                }
                None => {
                    let iov = [
                        libc::iovec { iov_base: hdr.as_mut_ptr().cast(), iov_len: VNET_HDR },
                        libc::iovec { iov_base: buf.as_mut_ptr().cast(), iov_len: buf.len() },
                    ];
                    // SAFETY: a read into two buffers we own, of their lengths.
                    let n = unsafe { libc::readv(self.fd(), iov.as_ptr(), 2) };
                    if n < 0 {
                        let e = io::Error::last_os_error();
                        if e.kind() != io::ErrorKind::WouldBlock {
                            tracing::debug!(error = %e, "TAP read failed");
                        }
                        return None;
                    }
                    let n = (n as usize).checked_sub(VNET_HDR).filter(|&n| n > 0)?;
                    self.share_arp(&buf[..n]);
                    n
                }
            };
            if !vnet::vouched(hdr) && !tcp_checksum_ok(&buf[..n]) {
                self.stats.rx_dropped += 1;
                continue;
            }
            self.stats.rx_frames += 1;
            self.stats.rx_largest = self.stats.rx_largest.max(n);
            return Some(n);
        }
    }

    /// An ARP frame another queue received, into `buf`: its length.
    fn take_shared(&mut self, buf: &mut [u8]) -> Option<usize> {
        let (me, q) = self.queues.as_ref()?;
        let mut inbox = q.arp[*me].lock().unwrap_or_else(PoisonError::into_inner);
        let frame = inbox.pop_front()?;
        buf[..frame.len()].copy_from_slice(&frame);
        Some(frame.len())
    }

    /// Hand the ARP frame just read to the other queues: a request as a
    /// reply, so that their stacks learn the sender and answer nothing.
    fn share_arp(&self, frame: &[u8]) {
        let Some((me, q)) = &self.queues else { return };
        if EthernetFrame::new_checked(frame).map(|f| f.ethertype()) != Ok(EthernetProtocol::Arp) {
            return;
        }
        let mut copy = frame.to_vec();
        let mut eth = EthernetFrame::new_unchecked(&mut copy[..]);
        let Ok(mut arp) = ArpPacket::new_checked(eth.payload_mut()) else { return };
        arp.set_operation(ArpOperation::Reply);
        let others = q.arp.iter().zip(&q.bells).enumerate().filter(|(i, _)| i != me);
        for (_, (inbox, bell)) in others {
            inbox.lock().unwrap_or_else(PoisonError::into_inner).push_back(copy.clone());
            bell.wake_by_ref();
        }
    }
}

/// The queue, of `queues`, that `steer_by_ports` sends a TCP segment
/// between ports `a` and `b` to, whichever way it goes: a stack on one
/// queue of a TAP that connects out picks its ports by it, so that the
/// answers come back to it.
pub fn steered_queue(a: u16, b: u16, queues: usize) -> usize {
    let sum = u32::from(a) + u32::from(b);
    ((sum ^ (sum >> 1)) % queues.max(1) as u32) as usize
}

/// Attach to TAP `name` (through `fd`, one of its queues) a program that
/// steers each frame to queue `g % queues`, where `g` is the Gray code of
/// the sum of its TCP ports (`x ^ x >> 1`), if it is a TCP/IPv4 segment
/// (not a later fragment), else to queue 0. The Gray code, not the sum
/// itself, because Linux's `connect()` takes only even ports: the sum's
/// parity would send every connection from a Linux host to one of two
/// queues, while the Gray code's low bits follow the port's higher bits
/// too. Consecutive ports (our host's) differ in the low bit of it within
/// every pair from an even port, so they still alternate.
fn steer_by_ports(fd: RawFd, name: &str) -> io::Result<()> {
    use bpf::op::*;
    // Offsets in the frame, which starts at its Ethernet header.
    let (ethertype, protocol, fragment, ihl) = (12, 23, 20, 14);
    let tcp = ETHERNET_HEADER as i32;
    let insns = [
        insn(MOV_X, 6, 1, 0, 0),            // r6 = the frame (LD_ABS reads it)
        insn(LD_ABS_H, 0, 0, 0, ethertype), // r0 = ethertype
        insn(JNE_K, 0, 0, 17, 0x0800),      // not IPv4: queue 0
        insn(LD_ABS_B, 0, 0, 0, protocol),  // r0 = IP protocol
        insn(JNE_K, 0, 0, 15, 6),           // not TCP: queue 0
        insn(LD_ABS_H, 0, 0, 0, fragment),  // r0 = flags and fragment offset
        insn(AND_K, 0, 0, 0, 0x1fff),       //
        insn(JNE_K, 0, 0, 12, 0),           // a later fragment: queue 0
        insn(LD_ABS_B, 0, 0, 0, ihl),       // r7 = IP header length
        insn(AND_K, 0, 0, 0, 0xf),          //
        insn(LSH_K, 0, 0, 0, 2),            //
        insn(MOV_X, 7, 0, 0, 0),            //
        insn(LD_IND_H, 0, 7, 0, tcp),       // r8 = source port
        insn(MOV_X, 8, 0, 0, 0),            //
        insn(LD_IND_H, 0, 7, 0, tcp + 2),   // r0 = destination port + r8
        insn(ADD_X, 0, 8, 0, 0),            //
        insn(MOV_X, 8, 0, 0, 0),            // r0 ^= r0 >> 1
        insn(RSH_K, 8, 0, 0, 1),            //
        insn(XOR_X, 0, 8, 0, 0),            //
        insn(EXIT, 0, 0, 0, 0),             // the kernel takes it modulo the queues
        insn(MOV_K, 0, 0, 0, 0),            // queue 0
        insn(EXIT, 0, 0, 0, 0),
    ];
    let prog = bpf::load(BPF_PROG_TYPE_SOCKET_FILTER, 0, &insns, "TAP steering")?;
    let prog_fd: libc::c_int = prog.as_raw_fd();
    // SAFETY: TUNSETSTEERINGEBPF reads the program's descriptor; the TAP
    // keeps its own reference to the program.
    if unsafe { libc::ioctl(fd, TUNSETSTEERINGEBPF, &prog_fd as *const libc::c_int) } < 0 {
        let e = io::Error::last_os_error();
        return Err(context(format!("TAP {name}: cannot steer its queues"))(e));
    }
    Ok(())
}

/// Queue 0 takes the steering program off as it closes: a persistent TAP
/// would otherwise keep it for whoever opens the TAP next.
impl Drop for Tap {
    fn drop(&mut self) {
        if matches!(self.queues, Some((0, _))) {
            let none: libc::c_int = -1;
            // SAFETY: TUNSETSTEERINGEBPF reads a descriptor; -1 detaches.
            unsafe { libc::ioctl(self.fd(), TUNSETSTEERINGEBPF, &none as *const libc::c_int) };
        }
    }
}

pub struct RxToken<'a> {
    frame: &'a [u8],
}

impl phy::RxToken for RxToken<'_> {
    fn consume<R, F: FnOnce(&[u8]) -> R>(self, f: F) -> R {
        f(self.frame)
    }
}

impl Device for Tap {
    type RxToken<'a> = RxToken<'a>;
    type TxToken<'a> = TxToken<'a>;

    fn receive(&mut self, _now: Instant) -> Option<(RxToken<'_>, TxToken<'_>)> {
        let mut rx = std::mem::take(&mut self.rx);
        let got = self.next_frame(&mut [0; VNET_HDR], &mut rx);
        self.rx = rx;
        self.rx_len = got?;
        let Tap { file, rx, rx_len, tx, stats, mtu, .. } = self;
        Some((RxToken { frame: &rx[..*rx_len] }, TxToken::new((*file).as_fd(), tx, *mtu, stats)))
    }

    fn transmit(&mut self, _now: Instant) -> Option<TxToken<'_>> {
        let Tap { file, tx, stats, mtu, .. } = self;
        Some(TxToken::new((*file).as_fd(), tx, *mtu, stats))
    }

    fn capabilities(&self) -> DeviceCapabilities {
        vnet::capabilities(self.mtu)
    }
}

impl Medium for Tap {
    /// Rings the bell `wait` listens for too.
    fn waker(&self) -> std::task::Waker {
        self.sleep.waker()
    }

    fn wait(&self, timeout: Option<Duration>) {
        self.sleep.sleep(self.fd(), timeout)
    }

    fn wait_with(&self, also: &WireEnd, timeout: Option<Duration>) {
        self.sleep.sleep_with(self.fd(), also, timeout)
    }

    /// Read straight into `buf`: the frame's only copy is the kernel's.
    fn receive_into(&mut self, _now: Instant, buf: &mut Vec<u8>) -> Option<(usize, PacketMeta)> {
        Some((self.next_frame(&mut [0; VNET_HDR], buf)?, PacketMeta::default()))
    }

    /// Written from where it lies: the frame's only copy is the kernel's.
    fn transmit_from(&mut self, _now: Instant, frame: &mut [u8], meta: PacketMeta) -> bool {
        let gso = meta.segmentation_offload_size.map(u16::from);
        vnet::send(self.file.as_fd(), frame, self.mtu, gso, &mut self.stats);
        true
    }
}
