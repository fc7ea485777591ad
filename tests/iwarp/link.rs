//! The iWARP tests' two links and their common workload: a `Link` moves
//! bytes between two queue pairs, over kernel TCP on loopback or over
//! smoltcp with the software NIC on the in-process wire, and `workload`
//! and `refused` run the same exchanges on either.

use std::io::{ErrorKind, Read, Write};
use std::net::{Ipv4Addr, Shutdown, SocketAddrV4, TcpListener, TcpStream};
use std::time::{Duration, Instant};

use iwarp::{
    Access, Close, Device, Down, Event, Pd, Qp, QpConfig, RecvWr, Rtr, SendOp, SendWr, Stag, Wc,
    WcStatus,
};
use nic_backend::{NicConfig, NicHandle, OffloadNic};
use smoltcp::wire::Ipv4Cidr;
use smoltcp_glue::{Impairments, Profile, Stack, StackConfig, VirtualWire, WireEnd};
use std::sync::Arc;
use ulp_ddp::{Caps, DdpDevice, FlowId, IoBuf, SgEntry};

/// Liveness only: a hang fails instead of blocking CI for ever.
pub(crate) const GIVE_UP: Duration = Duration::from_secs(120);

/// A byte stream between two QPs: moves what each has to send and
/// delivers what arrived, and ends each side's transport when asked.
pub(crate) trait Link {
    /// One turn for both sides; whether anything moved.
    fn step(&mut self, qps: [&mut Qp; 2]) -> bool;

    /// Give each QP its end's NIC, if it has one.
    fn offload(&self, _qps: [&mut Qp; 2]) {}
}

/// Step until `done` holds.
pub(crate) fn run(
    link: &mut dyn Link,
    a: &mut Qp,
    b: &mut Qp,
    mut done: impl FnMut(&mut Qp, &mut Qp) -> bool,
) {
    let start = Instant::now();
    while !done(a, b) {
        assert!(
            start.elapsed() < GIVE_UP,
            "stalled: a {:?} {:?}, b {:?} {:?}",
            a.state(),
            a.stats(),
            b.state(),
            b.stats()
        );
        if !link.step([a, b]) {
            std::thread::yield_now();
        }
    }
}

pub(crate) struct Kernel {
    socks: [TcpStream; 2],
    pending: [Vec<u8>; 2],
    eof: [bool; 2],
    shut: [bool; 2],
    buf: Vec<u8>,
}

impl Kernel {
    pub(crate) fn new() -> Kernel {
        let l = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let a = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (b, _) = l.accept().unwrap();
        for s in [&a, &b] {
            s.set_nonblocking(true).unwrap();
            s.set_nodelay(true).unwrap();
        }
        Kernel {
            socks: [a, b],
            pending: Default::default(),
            eof: [false; 2],
            shut: [false; 2],
            buf: vec![0; 256 << 10],
        }
    }
}

impl Link for Kernel {
    fn step(&mut self, qps: [&mut Qp; 2]) -> bool {
        let mut moved = false;
        for (i, qp) in qps.into_iter().enumerate() {
            let s = &mut self.socks[i];
            while self.pending[i].len() < self.buf.len() {
                let n = qp.poll_transmit(&mut self.buf);
                if n == 0 {
                    break;
                }
                self.pending[i].extend_from_slice(&self.buf[..n]);
            }
            if !self.pending[i].is_empty() {
                match s.write(&self.pending[i]) {
                    Ok(n) => {
                        self.pending[i].drain(..n);
                        moved = true;
                    }
                    Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                    Err(_) => self.pending[i].clear(),
                }
            }
            if !self.eof[i] {
                loop {
                    match s.read(&mut self.buf) {
                        Ok(0) => {
                            self.eof[i] = true;
                            qp.transport_closed();
                            moved = true;
                            break;
                        }
                        Ok(n) => {
                            qp.handle_input(&self.buf[..n]);
                            moved = true;
                        }
                        Err(_) => break,
                    }
                }
            }
            if self.pending[i].is_empty() && !qp.has_output() && !self.shut[i] {
                match qp.close_action() {
                    Some(Close::Graceful) => {
                        let _ = s.shutdown(Shutdown::Write);
                        self.shut[i] = true;
                    }
                    Some(Close::Abortive) => {
                        let _ = s.shutdown(Shutdown::Both);
                        self.shut[i] = true;
                    }
                    None => {}
                }
            }
        }
        moved
    }
}

pub(crate) const A_IP: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 1);
pub(crate) const B_IP: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 2);

type SmolDev = OffloadNic<Impairments<WireEnd>>;

pub(crate) struct Smol {
    stacks: [Stack<SmolDev>; 2],
    conns: [smoltcp_glue::TcpConn; 2],
    pub(crate) nics: [NicHandle; 2],
    closed: [bool; 2],
    shut: [bool; 2],
}

impl Smol {
    /// No NIC work and a clean link.
    pub(crate) fn new() -> Smol {
        let off = NicConfig { hw: Caps::NONE, active: Caps::NONE, checksum: false, ..nic() };
        Smol::with([off, off], Profile::default())
    }

    /// Each end's NIC as `nics` say; frames towards b suffer `to_b`.
    pub(crate) fn with(nics: [NicConfig; 2], to_b: Profile) -> Smol {
        let now = smoltcp::time::Instant::now();
        let (wa, wb) = VirtualWire::pair(1500 + 14, 512);
        let clean = Profile::default();
        let da = OffloadNic::new(Impairments::new(wa, clean, clean, 1), nics[0]);
        let db = OffloadNic::new(Impairments::new(wb, to_b, clean, 2), nics[1]);
        let handles = [da.handle(), db.handle()];
        let mut a = Stack::new(da, StackConfig::new(Ipv4Cidr::new(A_IP, 24)), now);
        let mut b = Stack::new(db, StackConfig::new(Ipv4Cidr::new(B_IP, 24)), now);
        b.listen(4420, 1).unwrap();
        let ca = a.connect(SocketAddrV4::new(B_IP, 4420)).unwrap();
        let start = Instant::now();
        let cb = loop {
            let now = smoltcp::time::Instant::now();
            a.poll(now);
            b.poll(now);
            if let Some(c) = b.accept() {
                break c;
            }
            assert!(start.elapsed() < GIVE_UP, "no TCP connection");
        };
        Smol {
            stacks: [a, b],
            conns: [ca, cb],
            nics: handles,
            closed: [false; 2],
            shut: [false; 2],
        }
    }
}

/// A NIC with every offload (and a threshold of one byte).
pub(crate) fn nic() -> NicConfig {
    let mut c = NicConfig::default();
    c.limits.io_threshold = 1;
    c
}

impl Link for Smol {
    fn step(&mut self, qps: [&mut Qp; 2]) -> bool {
        let now = smoltcp::time::Instant::now();
        let mut moved = false;
        for (i, qp) in qps.into_iter().enumerate() {
            let (stack, conn) = (&mut self.stacks[i], &mut self.conns[i]);
            moved |= stack.poll(now);
            // Zero-copy both ways: FPDUs are built in the send ring and
            // parsed from the receive ring.
            moved |= stack.send(conn, |out| qp.poll_send(out)) > 0;
            moved |= stack.recv(conn, |bytes| {
                qp.handle_input(bytes);
                bytes.len()
            }) > 0;
            if !self.closed[i] && stack.is_finished(conn) && !stack.is_established(conn) {
                self.closed[i] = true;
                qp.transport_closed();
                moved = true;
            }
            if !self.shut[i] && !qp.has_output() {
                match qp.close_action() {
                    Some(Close::Graceful) => stack.close(conn),
                    Some(Close::Abortive) => stack.abort(conn),
                    None => continue,
                }
                self.shut[i] = true;
            }
            moved |= stack.poll(now);
        }
        moved
    }

    fn offload(&self, qps: [&mut Qp; 2]) {
        for (i, qp) in qps.into_iter().enumerate() {
            let (local, remote) = self.stacks[i].endpoints(&self.conns[i]).unwrap();
            let dev: Arc<dyn DdpDevice> = Arc::new(self.nics[i].clone());
            qp.offload(dev, FlowId { local, remote });
        }
    }
}

pub(crate) struct End {
    pub(crate) dev: Device,
    pub(crate) pd: Pd,
}

pub(crate) fn end() -> End {
    let dev = Device::new();
    let pd = dev.alloc_pd();
    End { dev, pd }
}

pub(crate) fn pattern(len: usize, seed: u8) -> IoBuf {
    IoBuf::from_vec(
        (0..len).map(|i| (i as u8).wrapping_mul(29).wrapping_add(seed) ^ (i >> 9) as u8).collect(),
    )
}

pub(crate) fn sgl(buf: &IoBuf) -> ulp_ddp::Sgl {
    ulp_ddp::sgl![SgEntry { buf: buf.clone(), offset: 0, len: buf.len() }]
}

pub(crate) fn config(pd: Pd, active: bool) -> QpConfig {
    let mut c = QpConfig::new(pd);
    c.crc = active;
    c.p2p = active.then_some(Rtr::Read);
    c
}

pub(crate) fn drain(qp: &mut Qp, into: &mut Vec<Wc>) -> usize {
    into.extend(std::iter::from_fn(|| qp.poll_cq()));
    into.len()
}

/// Connect `a` to `b` over `link`, with private data both ways.
pub(crate) fn connect(link: &mut dyn Link, ea: &End, eb: &End) -> (Qp, Qp) {
    connect_with(link, ea, eb, |_, _| {})
}

/// [`connect`], each side's config changed by `tweak` (true for `a`).
pub(crate) fn connect_with(
    link: &mut dyn Link,
    ea: &End,
    eb: &End,
    tweak: impl Fn(&mut QpConfig, bool),
) -> (Qp, Qp) {
    let (mut ca, mut cb) = (config(ea.pd, true), config(eb.pd, false));
    tweak(&mut ca, true);
    tweak(&mut cb, false);
    let mut a = Qp::connect(&ea.dev, ca, b"iwarp over a stream", Duration::ZERO).unwrap();
    let mut b = Qp::listen(&eb.dev, cb, Duration::ZERO);
    link.offload([&mut a, &mut b]);
    let mut asked = None;
    run(link, &mut a, &mut b, |_, b| {
        asked = asked.take().or_else(|| b.poll_event());
        asked.is_some()
    });
    match asked {
        Some(Event::ConnectRequest { private_data, crc, ird_ord, .. }) => {
            assert_eq!(private_data, b"iwarp over a stream");
            assert!(crc && ird_ord.unwrap().p2p && ird_ord.unwrap().read_rtr);
        }
        other => panic!("{other:?}"),
    }
    b.accept(b"accepted").unwrap();
    let (mut ea_up, mut eb_up) = (None, None);
    run(link, &mut a, &mut b, |a, b| {
        ea_up = ea_up.take().or_else(|| a.poll_event());
        eb_up = eb_up.take().or_else(|| b.poll_event());
        ea_up.is_some() && eb_up.is_some()
    });
    assert_eq!(ea_up, Some(Event::Established { private_data: b"accepted".to_vec() }));
    assert!(matches!(eb_up, Some(Event::Established { .. })));
    assert!(a.crc() && b.crc());
    (a, b)
}

pub(crate) fn workload(link: &mut dyn Link) {
    let (ea, eb) = (end(), end());
    let (mut a, mut b) = connect(link, &ea, &eb);
    const MIB: usize = 1 << 20;
    let rw = Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ;
    let b_sink = IoBuf::new(MIB);
    let b_sink_stag = eb.dev.reg_mr(eb.pd, sgl(&b_sink), 0x7000_0000, rw).unwrap();
    let b_src = pattern(MIB, 3);
    let b_src_stag = eb.dev.reg_mr(eb.pd, sgl(&b_src), 0x1000, Access::REMOTE_READ).unwrap();
    let a_sink = IoBuf::new(MIB);
    let a_sink_stag = ea.dev.reg_mr(ea.pd, sgl(&a_sink), 0, rw).unwrap();
    let sizes: Vec<usize> = (0..64).map(|i| (i * 67) % 4097).collect();
    let recvs: Vec<IoBuf> = (0..=sizes.len()).map(|_| IoBuf::new(4096)).collect();
    for (i, r) in recvs.iter().enumerate() {
        b.post_recv(RecvWr { wr_id: i as u64, sgl: sgl(r) }).unwrap();
    }
    let post = |qp: &mut Qp, wr_id, op| qp.post_send(SendWr { wr_id, signaled: true, op }).unwrap();
    let data = pattern(MIB, 1);
    post(&mut a, 1, SendOp::Write { sgl: sgl(&data), stag: b_sink_stag, to: 0x7000_0000 });
    post(
        &mut a,
        2,
        SendOp::Read {
            sink: a_sink_stag,
            sink_to: 0,
            len: MIB as u32,
            stag: b_src_stag,
            to: 0x1000,
        },
    );
    let sends: Vec<IoBuf> = sizes.iter().map(|&n| pattern(n, n as u8)).collect();
    for (i, s) in sends.iter().enumerate() {
        post(
            &mut a,
            10 + i as u64,
            SendOp::Send { sgl: sgl(s), solicited: i % 2 == 1, invalidate: None },
        );
    }
    // The last Send invalidates the STag the Write went to.
    post(
        &mut a,
        99,
        SendOp::Send { sgl: ulp_ddp::Sgl::new(), solicited: false, invalidate: Some(b_sink_stag) },
    );
    let (mut wa, mut wb) = (Vec::new(), Vec::new());
    let want_a = 3 + sizes.len();
    run(link, &mut a, &mut b, |a, b| {
        drain(a, &mut wa) == want_a && drain(b, &mut wb) == recvs.len()
    });
    assert!(wa.iter().chain(&wb).all(|w| w.status == WcStatus::Success), "{wa:?} {wb:?}");
    assert_eq!(b_sink.to_vec(), data.to_vec(), "RDMA Write");
    assert_eq!(a_sink.to_vec(), b_src.to_vec(), "RDMA Read");
    for (i, n) in sizes.iter().enumerate() {
        assert_eq!(wb[i].byte_len as usize, *n);
        assert_eq!(wb[i].solicited, i % 2 == 1);
        assert_eq!(recvs[i].to_vec()[..*n], sends[i].to_vec()[..], "Send {i}");
    }
    assert_eq!(wb.last().unwrap().invalidated, Some(b_sink_stag));
    assert!(!eb.dev.is_valid(b_sink_stag));

    // A clean close from a: FIN, then b closes too.
    a.disconnect();
    run(link, &mut a, &mut b, |a, b| {
        *a.state() == iwarp::QpState::Closed && *b.state() == iwarp::QpState::Closed
    });
    assert_eq!(b.poll_event(), Some(Event::Down(Down::Closed)));
}

/// A Write to an STag that is not there: the responder terminates with
/// DDP / tagged / invalid STag and both sides close.
pub(crate) fn refused(link: &mut dyn Link) {
    let (ea, eb) = (end(), end());
    let (mut a, mut b) = connect(link, &ea, &eb);
    let data = pattern(4096, 9);
    a.post_send(SendWr {
        wr_id: 1,
        signaled: true,
        op: SendOp::Write { sgl: sgl(&data), stag: Stag(0x4201), to: 0 },
    })
    .unwrap();
    let mut got = None;
    run(link, &mut a, &mut b, |a, _| {
        got = got.take().or_else(|| a.poll_event());
        got.is_some()
    });
    match got {
        Some(Event::Down(Down::TerminateReceived(t))) => {
            assert_eq!((t.layer, t.etype, t.code), (iwarp::wire::TermLayer::Ddp, 1, 0));
        }
        other => panic!("{other:?}"),
    }
    run(link, &mut a, &mut b, |a, b| {
        *a.state() == iwarp::QpState::Closed && *b.state() == iwarp::QpState::Closed
    });
}
