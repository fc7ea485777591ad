//! A Linux network interface the stack runs on, by how it is reached: a
//! TAP device the kernel bridges, or any interface through AF_PACKET.

use crate::medium::packet::{self, Packet};
use crate::medium::tap::{self, Tap};
use crate::medium::vnet::TxToken;
use crate::{Medium, WireEnd};
use smoltcp::phy::{self, Device, DeviceCapabilities};
use smoltcp::time::{Duration, Instant};
use std::fmt;
use std::io;

/// Which interface, and how to reach it (`--tap NAME`, `--iface NAME`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LinkName {
    Tap(String),
    Iface(String),
}

impl LinkName {
    /// Open it; `mtu` is the IP MTU, the interface's when not given.
    pub fn open(&self, mtu: Option<usize>) -> io::Result<Link> {
        Ok(match self {
            LinkName::Tap(n) => Link::Tap(Tap::open(n, mtu)?),
            LinkName::Iface(n) => Link::Packet(Packet::open(n, mtu)?),
        })
    }
}

impl fmt::Display for LinkName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LinkName::Tap(n) => write!(f, "tap {n}"),
            LinkName::Iface(n) => write!(f, "iface {n}"),
        }
    }
}

pub enum Link {
    Tap(Tap),
    Packet(Packet),
}

impl Link {
    /// The link's IP MTU.
    pub fn ip_mtu(&self) -> usize {
        self.capabilities().max_transmission_unit - 14
    }
}

pub enum RxToken<'a> {
    Tap(tap::RxToken<'a>),
    Packet(packet::RxToken<'a>),
}

impl phy::RxToken for RxToken<'_> {
    fn consume<R, F: FnOnce(&[u8]) -> R>(self, f: F) -> R {
        match self {
            RxToken::Tap(t) => t.consume(f),
            RxToken::Packet(t) => t.consume(f),
        }
    }
}

impl Device for Link {
    type RxToken<'a> = RxToken<'a>;
    type TxToken<'a> = TxToken<'a>;

    fn receive(&mut self, now: Instant) -> Option<(RxToken<'_>, TxToken<'_>)> {
        match self {
            Link::Tap(t) => t.receive(now).map(|(r, x)| (RxToken::Tap(r), x)),
            Link::Packet(p) => p.receive(now).map(|(r, x)| (RxToken::Packet(r), x)),
        }
    }

    fn transmit(&mut self, now: Instant) -> Option<TxToken<'_>> {
        match self {
            Link::Tap(t) => t.transmit(now),
            Link::Packet(p) => p.transmit(now),
        }
    }

    fn capabilities(&self) -> DeviceCapabilities {
        match self {
            Link::Tap(t) => t.capabilities(),
            Link::Packet(p) => p.capabilities(),
        }
    }
}

impl Medium for Link {
    fn waker(&self) -> std::task::Waker {
        match self {
            Link::Tap(t) => t.waker(),
            Link::Packet(p) => p.waker(),
        }
    }

    fn wait(&self, timeout: Option<Duration>) {
        match self {
            Link::Tap(t) => t.wait(timeout),
            Link::Packet(p) => p.wait(timeout),
        }
    }

    fn wait_with(&self, also: &WireEnd, timeout: Option<Duration>) {
        match self {
            Link::Tap(t) => t.wait_with(also, timeout),
            Link::Packet(p) => p.wait_with(also, timeout),
        }
    }
}
