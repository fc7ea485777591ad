//! The smoltcp stack: an `Interface`, its TCP sockets and the medium under
//! it, with the calls a driver makes on each turn of its loop.
//!
//! [`TcpConn`] hands a socket's receive ring to the upper layer with
//! `recv(|bytes| taken)` and its send ring with `send(|sink| queued)`, a
//! [`TxSink`] that takes bytes by copy or, for a NIC that gathers, by
//! reference; stream offsets are counted on the way (the offsets NIC
//! receive hints are keyed by).

use crate::Medium;
use crate::medium::tap::steered_queue;
use smoltcp::iface::{Config, Interface, SocketHandle, SocketSet};
use smoltcp::socket::tcp::{self, CongestionControl, State};
use smoltcp::time::{Duration, Instant};
use smoltcp::wire::{EthernetAddress, HardwareAddress, IpCidr, IpEndpoint, Ipv4Cidr};
use std::net::{Ipv4Addr, SocketAddrV4};
use ulp_ddp::TxSink;

/// How a stack presents itself.
#[derive(Debug, Clone)]
pub struct StackConfig {
    pub mac: EthernetAddress,
    pub ip: Ipv4Cidr,
    /// TCP receive and send ring sizes per connection.
    pub rx_buffer: usize,
    pub tx_buffer: usize,
    /// Seeds TCP initial sequence numbers and ephemeral ports.
    pub seed: u64,
    /// The least retransmission timeout a measured RTT gives: Linux's
    /// `TCP_RTO_MIN`, 200 ms, rather than RFC 6298's 1 s.
    pub rto_min: Duration,
    /// On one queue of a multi-queue TAP, which (of how many): the stack
    /// connects only from ports the TAP steers back to that queue
    /// ([`steered_queue`]).
    pub queue: Option<(usize, usize)>,
}

impl StackConfig {
    /// A stack at `ip`, with a locally administered MAC derived from it.
    pub fn new(ip: Ipv4Cidr) -> Self {
        let o = ip.address().octets();
        Self {
            mac: EthernetAddress([0x02, 0x00, o[0], o[1], o[2], o[3]]),
            ip,
            rx_buffer: 1 << 20,
            tx_buffer: 1 << 20,
            seed: u64::from(u32::from_be_bytes(o)),
            rto_min: Duration::from_millis(200),
            queue: None,
        }
    }
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum StackError {
    #[error("cannot connect: {0}")]
    Connect(tcp::ConnectError),
    #[error("cannot listen: {0}")]
    Listen(tcp::ListenError),
}

/// One TCP connection of a [`Stack`].
#[derive(Debug)]
pub struct TcpConn {
    handle: SocketHandle,
    rx_offset: u64,
    tx_offset: u64,
}

impl TcpConn {
    pub fn handle(&self) -> SocketHandle {
        self.handle
    }

    /// Stream offset of the next byte `recv` will hand out.
    pub fn rx_offset(&self) -> u64 {
        self.rx_offset
    }

    /// Stream offset of the next byte `send` will queue.
    pub fn tx_offset(&self) -> u64 {
        self.tx_offset
    }
}

/// A socket's send ring as a [`TxSink`].
struct Sink<'s> {
    sock: &'s mut tcp::Socket<'static>,
    /// Stream offset of the next byte queued.
    offset: u64,
}

impl TxSink for Sink<'_> {
    fn room(&self) -> usize {
        match self.sock.may_send() {
            true => self.sock.send_capacity() - self.sock.send_queue(),
            false => 0,
        }
    }

    fn write(&mut self, bytes: &[u8]) -> usize {
        let n = self.sock.send_slice(bytes).unwrap_or(0);
        self.offset += n as u64;
        n
    }

    fn write_by_reference(&mut self, len: usize, token: u64, token_offset: u64) -> usize {
        let n = self.sock.send_by_reference(len, token, token_offset).unwrap_or(0);
        self.offset += n as u64;
        n
    }

    fn end_record(&mut self) {
        self.sock.end_record();
    }

    fn end_records(&mut self, len: usize, stride: usize) {
        self.sock.end_records(len, stride);
    }

    fn offset(&self) -> u64 {
        self.offset
    }

    fn acked(&self) -> u64 {
        self.offset - self.sock.send_queue() as u64
    }
}

/// Offer `f` the first bytes of `s`'s receive ring copied together across
/// its wrap, and take from the ring what it took. Returns that.
fn bounce(s: &mut tcp::Socket, buf: &mut Vec<u8>, f: &mut impl FnMut(&[u8]) -> usize) -> usize {
    buf.resize(s.recv_queue().min(BOUNCE), 0);
    let len = s.peek_slice(buf).unwrap_or(0);
    let n = f(&buf[..len]).min(len);
    let mut left = n;
    while left > 0 {
        let k = s.recv(|b| (b.len().min(left), b.len().min(left))).unwrap_or(0);
        if k == 0 {
            break;
        }
        left -= k;
    }
    n - left
}

/// smoltcp over a medium.
pub struct Stack<D: Medium> {
    iface: Interface,
    sockets: SocketSet<'static>,
    device: D,
    cfg: StackConfig,
    listening: Vec<(u16, SocketHandle)>,
    next_port: u16,
    /// Bytes across the receive ring's wrap, copied together for a ULP
    /// that takes its units whole.
    bounce: Vec<u8>,
}

/// What a ULP is offered across the receive ring's wrap at most: one TLS
/// record (2^14 + 256 bytes and a header) and more.
const BOUNCE: usize = 32 * 1024;

impl<D: Medium> Stack<D> {
    pub fn new(mut device: D, cfg: StackConfig, now: Instant) -> Self {
        let mut config = Config::new(HardwareAddress::Ethernet(cfg.mac));
        config.random_seed = cfg.seed;
        let mut iface = Interface::new(config, &mut device, now);
        iface.update_ip_addrs(|addrs| {
            let _ = addrs.push(IpCidr::Ipv4(cfg.ip));
        });
        let next_port = 49152 + (cfg.seed % 8192) as u16;
        Self {
            iface,
            sockets: SocketSet::new(Vec::new()),
            device,
            cfg,
            listening: Vec::new(),
            next_port,
            bounce: Vec::new(),
        }
    }

    fn socket(&self) -> tcp::Socket<'static> {
        let rx = tcp::SocketBuffer::new(vec![0; self.cfg.rx_buffer]);
        let tx = tcp::SocketBuffer::new(vec![0; self.cfg.tx_buffer]);
        let mut s = tcp::Socket::new(rx, tx);
        s.set_congestion_control(CongestionControl::Cubic);
        // NVMe/TCP sends small PDUs it wants on the wire now.
        s.set_nagle_enabled(false);
        s.set_rto_min(self.cfg.rto_min);
        s
    }

    fn sock(&self, conn: &TcpConn) -> &tcp::Socket<'static> {
        self.sockets.get::<tcp::Socket>(conn.handle)
    }

    fn sock_mut(&mut self, conn: &TcpConn) -> &mut tcp::Socket<'static> {
        self.sockets.get_mut::<tcp::Socket>(conn.handle)
    }

    pub fn config(&self) -> &StackConfig {
        &self.cfg
    }

    /// Open a connection to `remote` from an ephemeral port (on a queue of
    /// a TAP, one steered back to it).
    pub fn connect(&mut self, remote: SocketAddrV4) -> Result<TcpConn, StackError> {
        let mut port = self.next_port;
        for _ in 49152..=u16::MAX {
            port = self.next_port;
            self.next_port = if port == u16::MAX { 49152 } else { port + 1 };
            match self.cfg.queue {
                Some((queue, queues)) if steered_queue(port, remote.port(), queues) != queue => {}
                _ => break,
            }
        }
        let mut s = self.socket();
        let remote = IpEndpoint::new((*remote.ip()).into(), remote.port());
        s.connect(self.iface.context(), remote, port).map_err(StackError::Connect)?;
        let handle = self.sockets.add(s);
        Ok(TcpConn { handle, rx_offset: 0, tx_offset: 0 })
    }

    /// Accept connections on `port`, with `backlog` handshakes at once.
    pub fn listen(&mut self, port: u16, backlog: usize) -> Result<(), StackError> {
        for _ in 0..backlog.max(1) {
            let mut s = self.socket();
            s.listen(port).map_err(StackError::Listen)?;
            let h = self.sockets.add(s);
            self.listening.push((port, h));
        }
        Ok(())
    }

    /// A connection a listening socket has taken on since the last call.
    /// Its place is taken by a fresh listening socket.
    pub fn accept(&mut self) -> Option<TcpConn> {
        let i = self.listening.iter().position(|&(_, h)| {
            let s = self.sockets.get::<tcp::Socket>(h);
            !matches!(s.state(), State::Listen)
        })?;
        let (port, handle) = self.listening.swap_remove(i);
        let mut s = self.socket();
        if s.listen(port).is_ok() {
            let h = self.sockets.add(s);
            self.listening.push((port, h));
        }
        Some(TcpConn { handle, rx_offset: 0, tx_offset: 0 })
    }

    /// Move frames between the medium and the sockets. Returns whether any
    /// socket may have changed.
    pub fn poll(&mut self, now: Instant) -> bool {
        let r = self.iface.poll(now, &mut self.device, &mut self.sockets);
        self.device.flush();
        r == smoltcp::iface::PollResult::SocketStateChanged
    }

    /// When the stack or its medium next needs a poll.
    pub fn poll_at(&mut self, now: Instant) -> Option<Instant> {
        let a = self.iface.poll_at(now, &self.sockets);
        [a, self.device.poll_at()].into_iter().flatten().min()
    }

    /// Block until the medium has something or `until` comes.
    pub fn wait(&self, now: Instant, until: Option<Instant>) {
        let timeout = until.map(|t| if t > now { t - now } else { Duration::ZERO });
        if timeout != Some(Duration::ZERO) {
            self.device.wait(timeout);
        }
    }

    /// Hand received bytes to `f`, which returns how many it took; repeats
    /// while the ring has bytes and `f` takes them. Returns the total.
    ///
    /// The ring hands its bytes over in at most two pieces, split where
    /// it wraps. A ULP that takes units only whole (TLS records, with a
    /// NIC that decrypts them) may take nothing of a first piece that ends
    /// inside one; it is then offered the bytes across the wrap once more,
    /// copied together (at most `BOUNCE` of them), as a driver bounces
    /// a buffer that straddles a page.
    pub fn recv(&mut self, conn: &mut TcpConn, mut f: impl FnMut(&[u8]) -> usize) -> usize {
        let s = self.sockets.get_mut::<tcp::Socket>(conn.handle);
        let mut total = 0;
        while s.can_recv() {
            let mut cut = false;
            let queued = s.recv_queue();
            let n = s
                .recv(|buf| {
                    let n = f(buf);
                    debug_assert!(n <= buf.len(), "took {n} of {} bytes", buf.len());
                    let n = n.min(buf.len());
                    cut = n == 0 && buf.len() < queued.min(BOUNCE);
                    (n, n)
                })
                .unwrap_or(0);
            total += n;
            if cut {
                total += bounce(s, &mut self.bounce, &mut f);
                break;
            }
            if n == 0 {
                break;
            }
        }
        conn.rx_offset += total as u64;
        total
    }

    /// Let `f` queue bytes to send through a [`TxSink`] over the send
    /// ring. Returns how many it queued.
    ///
    /// Queueing that stops short of the room there was ends a record (a
    /// PDU, an FPDU): segments start where records start, as an MPA-aware
    /// TCP sends them, so a NIC can take each one whole.
    pub fn send(&mut self, conn: &mut TcpConn, f: impl FnOnce(&mut dyn TxSink) -> usize) -> usize {
        let sock = self.sockets.get_mut::<tcp::Socket>(conn.handle);
        let mut sink = Sink { sock, offset: conn.tx_offset };
        let n = f(&mut sink);
        debug_assert_eq!(sink.offset - conn.tx_offset, n as u64, "queued {n} bytes");
        if n > 0 && sink.room() > 0 {
            sink.sock.end_record();
        }
        conn.tx_offset = sink.offset;
        n
    }

    /// Let `f` write into the free part of the send ring; repeats while
    /// there is room and `f` writes. Returns the total. A write that stops
    /// short of the room it was given ends a record.
    pub fn send_with(
        &mut self,
        conn: &mut TcpConn,
        mut f: impl FnMut(&mut [u8]) -> usize,
    ) -> usize {
        let s = self.sockets.get_mut::<tcp::Socket>(conn.handle);
        let mut total = 0;
        while s.can_send() {
            let mut short = false;
            let n = s
                .send(|buf| {
                    let n = f(buf).min(buf.len());
                    short = n < buf.len();
                    (n, n)
                })
                .unwrap_or(0);
            total += n;
            if n == 0 {
                break;
            }
            if short {
                s.end_record();
            }
        }
        conn.tx_offset += total as u64;
        total
    }

    /// Bytes queued to send and not yet acknowledged.
    pub fn send_queue(&self, conn: &TcpConn) -> usize {
        self.sock(conn).send_queue()
    }

    pub fn state(&self, conn: &TcpConn) -> State {
        self.sock(conn).state()
    }

    pub fn is_established(&self, conn: &TcpConn) -> bool {
        self.state(conn) == State::Established
    }

    /// The peer closed its side, or the connection is gone.
    pub fn is_finished(&self, conn: &TcpConn) -> bool {
        let s = self.sock(conn);
        !s.is_open()
            || matches!(
                s.state(),
                State::CloseWait | State::LastAck | State::TimeWait | State::Closing
            )
    }

    /// (local, remote) addresses, once connected.
    pub fn endpoints(&self, conn: &TcpConn) -> Option<(SocketAddrV4, SocketAddrV4)> {
        let s = self.sock(conn);
        let v4 = |e: IpEndpoint| match e.addr {
            smoltcp::wire::IpAddress::Ipv4(a) => {
                Some(SocketAddrV4::new(Ipv4Addr::from(a.octets()), e.port))
            }
        };
        Some((v4(s.local_endpoint()?)?, v4(s.remote_endpoint()?)?))
    }

    /// Close gracefully (FIN once the send ring drains).
    pub fn close(&mut self, conn: &TcpConn) {
        self.sock_mut(conn).close();
    }

    /// Close at once (RST).
    pub fn abort(&mut self, conn: &TcpConn) {
        self.sock_mut(conn).abort();
    }

    /// Forget a connection's socket.
    pub fn release(&mut self, conn: TcpConn) {
        self.sockets.remove(conn.handle);
    }

    pub fn device(&self) -> &D {
        &self.device
    }

    pub fn device_mut(&mut self) -> &mut D {
        &mut self.device
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::VirtualWire;

    #[test]
    fn a_stack_on_a_queue_connects_from_ports_steered_back_to_it() {
        let remote = SocketAddrV4::new(Ipv4Addr::new(198, 18, 0, 2), 4420);
        for queue in 0..3 {
            let (end, _peer) = VirtualWire::pair(1514, 16);
            let ip = Ipv4Cidr::new(Ipv4Addr::new(198, 18, 0, 3), 24);
            let cfg = StackConfig { queue: Some((queue, 3)), ..StackConfig::new(ip) };
            let mut stack = Stack::new(end, cfg, Instant::ZERO);
            let mut ports = Vec::new();
            for _ in 0..8 {
                let conn = stack.connect(remote).unwrap();
                let (local, _) = stack.endpoints(&conn).unwrap();
                assert_eq!(steered_queue(local.port(), remote.port(), 3), queue);
                ports.push(local.port());
            }
            ports.dedup();
            assert_eq!(ports.len(), 8, "a port each: {ports:?}");
        }
    }
}
