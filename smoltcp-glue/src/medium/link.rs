//! A Linux network interface the stack runs on, by how it is reached: a
//! TAP device the kernel bridges, or any interface through AF_XDP where it
//! can be, AF_PACKET where not.

use crate::medium::packet::{self, Packet};
use crate::medium::tap::{self, Tap};
use crate::medium::vnet;
use crate::medium::xdp::{self, Xdp};
use crate::{Medium, WireEnd};
use smoltcp::phy::{self, Device, DeviceCapabilities};
use smoltcp::time::{Duration, Instant};
use std::fmt;
use std::io;

/// Which interface, and how to reach it (`--tap NAME`, `--iface NAME`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LinkName {
    Tap(String),
    Iface(String, Via),
}

/// How an interface that is not a TAP is reached.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Via {
    /// AF_XDP where the interface takes it, else AF_PACKET.
    #[default]
    Auto,
    Xdp,
    Packet,
}

impl LinkName {
    /// Open it; `mtu` is the IP MTU, the interface's when not given. An
    /// interface is opened through AF_XDP if it can be, else AF_PACKET.
    pub fn open(&self, mtu: Option<usize>) -> io::Result<Link> {
        Ok(match self {
            LinkName::Tap(n) => Link::Tap(Tap::open(n, mtu)?),
            LinkName::Iface(n, Via::Xdp) => Link::Xdp(Box::new(Xdp::open(n, mtu)?)),
            LinkName::Iface(n, Via::Packet) => Link::Packet(Packet::open(n, mtu)?),
            LinkName::Iface(n, Via::Auto) => match Xdp::open(n, mtu) {
                Ok(x) => Link::Xdp(Box::new(x)),
                Err(e) => {
                    let p = Packet::open(n, mtu)?;
                    tracing::info!(iface = %n, "no AF_XDP ({e}); AF_PACKET instead");
                    Link::Packet(p)
                }
            },
        })
    }

    /// Open `queues` queues of it, each a link for a stack of its own
    /// with the same address: only a TAP has them (IFF_MULTI_QUEUE).
    pub fn open_queues(&self, mtu: Option<usize>, queues: usize) -> io::Result<Vec<Link>> {
        match self {
            LinkName::Tap(n) => {
                Ok(Tap::open_queues(n, mtu, queues)?.into_iter().map(Link::Tap).collect())
            }
            LinkName::Iface(n, _) => Err(io::Error::new(
                io::ErrorKind::Unsupported,
                format!("{n}: several queues need a TAP (--tap)"),
            )),
        }
    }
}

impl fmt::Display for LinkName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LinkName::Tap(n) => write!(f, "tap {n}"),
            LinkName::Iface(n, _) => write!(f, "iface {n}"),
        }
    }
}

pub enum Link {
    Tap(Tap),
    Packet(Packet),
    /// Boxed: its four rings make it the largest by far.
    Xdp(Box<Xdp>),
}

impl Link {
    /// How frames reach the stack, for people reading logs.
    pub fn kind(&self) -> &'static str {
        match self {
            Link::Tap(_) => "TAP",
            Link::Packet(_) => "AF_PACKET",
            Link::Xdp(x) if x.zero_copy() => "AF_XDP (zero copy)",
            Link::Xdp(_) => "AF_XDP (copy mode)",
        }
    }

    /// The link's IP MTU.
    pub fn ip_mtu(&self) -> usize {
        self.capabilities().max_transmission_unit - 14
    }
}

pub enum RxToken<'a> {
    Tap(tap::RxToken<'a>),
    Packet(packet::RxToken<'a>),
    Xdp(xdp::RxToken<'a>),
}

impl phy::RxToken for RxToken<'_> {
    fn consume<R, F: FnOnce(&[u8]) -> R>(self, f: F) -> R {
        match self {
            RxToken::Tap(t) => t.consume(f),
            RxToken::Packet(t) => t.consume(f),
            RxToken::Xdp(t) => t.consume(f),
        }
    }
}

pub enum TxToken<'a> {
    Vnet(vnet::TxToken<'a>),
    Xdp(xdp::TxToken<'a>),
}

impl phy::TxToken for TxToken<'_> {
    fn set_meta(&mut self, meta: phy::PacketMeta) {
        if let TxToken::Vnet(t) = self {
            t.set_meta(meta)
        }
    }

    fn consume<R, F: FnOnce(&mut [u8]) -> R>(self, len: usize, f: F) -> R {
        match self {
            TxToken::Vnet(t) => t.consume(len, f),
            TxToken::Xdp(t) => t.consume(len, f),
        }
    }
}

impl Device for Link {
    type RxToken<'a> = RxToken<'a>;
    type TxToken<'a> = TxToken<'a>;

    fn receive(&mut self, now: Instant) -> Option<(RxToken<'_>, TxToken<'_>)> {
        match self {
            Link::Tap(t) => t.receive(now).map(|(r, x)| (RxToken::Tap(r), TxToken::Vnet(x))),
            Link::Packet(p) => p.receive(now).map(|(r, x)| (RxToken::Packet(r), TxToken::Vnet(x))),
            Link::Xdp(d) => d.receive(now).map(|(r, x)| (RxToken::Xdp(r), TxToken::Xdp(x))),
        }
    }

    fn transmit(&mut self, now: Instant) -> Option<TxToken<'_>> {
        match self {
            Link::Tap(t) => t.transmit(now).map(TxToken::Vnet),
            Link::Packet(p) => p.transmit(now).map(TxToken::Vnet),
            Link::Xdp(d) => d.transmit(now).map(TxToken::Xdp),
        }
    }

    fn capabilities(&self) -> DeviceCapabilities {
        match self {
            Link::Tap(t) => t.capabilities(),
            Link::Packet(p) => p.capabilities(),
            Link::Xdp(d) => d.capabilities(),
        }
    }
}

impl Medium for Link {
    fn flush(&self) {
        if let Link::Xdp(d) = self {
            d.flush()
        }
    }

    fn waker(&self) -> std::task::Waker {
        match self {
            Link::Tap(t) => t.waker(),
            Link::Packet(p) => p.waker(),
            Link::Xdp(d) => d.waker(),
        }
    }

    fn wait(&self, timeout: Option<Duration>) {
        match self {
            Link::Tap(t) => t.wait(timeout),
            Link::Packet(p) => p.wait(timeout),
            Link::Xdp(d) => d.wait(timeout),
        }
    }

    fn wait_with(&self, also: &WireEnd, timeout: Option<Duration>) {
        match self {
            Link::Tap(t) => t.wait_with(also, timeout),
            Link::Packet(p) => p.wait_with(also, timeout),
            Link::Xdp(d) => d.wait_with(also, timeout),
        }
    }
}
