//! The hot paths, counted by Callgrind (gungraun): instructions, not time,
//! so the counts repeat on any machine for the same binary and a rise is
//! the code's. `.ci/hot-paths` runs them and holds each count to the one
//! committed in `benches/hot_paths.counts`.
//!
//! Each bench does one unit of work; what sets it up (connections,
//! handshakes, mappings, the bytes it takes in) runs in its setup, which
//! is not counted. Gungraun counts the whole bench function, so each one
//! hands back what it was given: dropped by the caller, its teardown is
//! not counted either.

use gungraun::{library_benchmark, library_benchmark_group, main};
use iwarp::wire::{Ctrl, DdpHeader, Event as FpduEvent, FpduFramer, Opcode, emit_fpdu};
use nic_backend::{NicConfig, OffloadNic};
use nvme_of::Digests;
use nvme_tcp::tls::TlsSession;
use nvme_tcp::wire::{DataPdu, Framing, Header, PduRepr, crc32c_append};
use smoltcp::phy::{ChecksumCapabilities, Device, RxToken, TxToken};
use smoltcp::time::Instant;
use smoltcp::wire::{
    EthernetAddress, EthernetFrame, EthernetProtocol, EthernetRepr, IpAddress, IpProtocol,
    Ipv4Address, Ipv4Packet, Ipv4Repr, TcpControl, TcpPacket, TcpRepr, TcpSeqNumber,
};
use smoltcp_glue::{VirtualWire, WireEnd};
use std::hint::black_box;
use std::net::SocketAddrV4;
use std::sync::Arc;
use ulp_ddp::{DdpDevice, DdpIo, FlowId, IoBuf, NvmeTcpConfig, Role, SgEntry, sgl};
use zeroize::Zeroizing;

mod rig;
use rig::Rig;

fn pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect()
}

// ---- NVMe/TCP framing ----

const DATA_DIGEST: Framing = Framing { digests: Digests { header: false, data: true }, pda: 0 };

fn c2h_data(len: usize) -> (PduRepr, Vec<u8>, Vec<u8>) {
    let d = DataPdu { cccid: 7, ttag: 0, datao: 0, last: true, success: false };
    let repr = PduRepr::new(Header::C2hData(d), DATA_DIGEST, len as u32);
    (repr, pattern(len), Vec::with_capacity(len + 64))
}

// A controller frames one C2HData PDU in software: header, data, digest.
#[library_benchmark]
#[bench::data_8k(args = (8192), setup = c2h_data)]
fn frame_c2h_data((repr, data, mut out): (PduRepr, Vec<u8>, Vec<u8>)) -> [Vec<u8>; 2] {
    out.resize(repr.header_len(), 0);
    repr.emit_header(&mut out);
    out.extend_from_slice(black_box(&data));
    out.extend_from_slice(&crc32c_append(0, &data).to_le_bytes());
    [data, out]
}

// ---- The NIC ----

const CONTROLLER: Ipv4Address = Ipv4Address::new(198, 18, 0, 2);
const HOST: Ipv4Address = Ipv4Address::new(198, 18, 0, 3);
/// The controller's first sequence number after its SYN: stream offset 0.
const ISS: u32 = 1000;

/// A frame from the controller to the host carrying `payload` at stream
/// offset `at`, its checksums right.
fn from_controller(control: TcpControl, seq: u32, payload: &[u8]) -> Vec<u8> {
    segment((CONTROLLER, 4420), (HOST, 50000), control, seq, payload)
}

fn segment(
    (src, src_port): (Ipv4Address, u16),
    (dst, dst_port): (Ipv4Address, u16),
    control: TcpControl,
    seq: u32,
    payload: &[u8],
) -> Vec<u8> {
    let tcp = TcpRepr {
        src_port,
        dst_port,
        control,
        seq_number: TcpSeqNumber(seq as i32),
        ack_number: Some(TcpSeqNumber(1)),
        window_len: 65535,
        window_scale: None,
        max_seg_size: None,
        sack_permitted: false,
        sack_ranges: [None; 3],
        timestamp: None,
        payload,
    };
    let ip = Ipv4Repr {
        src_addr: src,
        dst_addr: dst,
        next_header: IpProtocol::Tcp,
        payload_len: tcp.header_len() + payload.len(),
        hop_limit: 64,
    };
    let eth = EthernetRepr {
        src_addr: EthernetAddress([2, 0, 0, 0, 0, 1]),
        dst_addr: EthernetAddress([2, 0, 0, 0, 0, 2]),
        ethertype: EthernetProtocol::Ipv4,
    };
    let caps = ChecksumCapabilities::default();
    let mut buf = vec![0u8; eth.buffer_len() + ip.buffer_len() + ip.payload_len];
    let mut f = EthernetFrame::new_unchecked(&mut buf[..]);
    eth.emit(&mut f);
    let mut p = Ipv4Packet::new_unchecked(f.payload_mut());
    ip.emit(&mut p, &caps);
    let mut t = TcpPacket::new_unchecked(p.payload_mut());
    tcp.emit(&mut t, &IpAddress::Ipv4(src), &IpAddress::Ipv4(dst), &caps);
    buf
}

/// Bytes of TCP payload in a 9000-byte IP packet.
const SEGMENT: usize = 9000 - 40;

/// A host's NIC with a socket offloaded and a 128 KiB read of CID 7
/// mapped, which has taken the segment with the C2HData header and the
/// first data bytes; the next segment, all data, waits on the wire.
fn nic_mid_c2h_data() -> (OffloadNic<WireEnd>, WireEnd) {
    let now = Instant::from_millis(0);
    let (mut wire, end) = VirtualWire::pair(9014, 8);
    let mut nic = OffloadNic::new(end, NicConfig::default());
    let dev = nic.handle();
    let syn = segment((HOST, 50000), (CONTROLLER, 4420), TcpControl::Syn, 0, &[]);
    nic.transmit(now).unwrap().consume(syn.len(), |b| b.copy_from_slice(&syn));
    wire.receive(now).unwrap().0.consume(|_| ());
    let send = |wire: &mut WireEnd, frame: Vec<u8>| {
        wire.transmit(now).unwrap().consume(frame.len(), |b| b.copy_from_slice(&frame))
    };
    send(&mut wire, from_controller(TcpControl::Syn, ISS - 1, &[]));
    nic.receive(now).unwrap().0.consume(|_| ());
    let flow = FlowId {
        local: SocketAddrV4::new(HOST, 50000),
        remote: SocketAddrV4::new(CONTROLLER, 4420),
    };
    let config = NvmeTcpConfig {
        role: Role::Host,
        pfv: 0,
        cpda: 0,
        hpda: 0,
        dgst: NvmeTcpConfig::DGST_DATA,
        queue_size: 32,
        rx_start: 0,
        tx_start: 0,
    };
    let sk = dev.sk_add(flow, &config).unwrap();
    let len = 128 << 10;
    let buf = IoBuf::new(len);
    let io = DdpIo { tag: 7, sgl: sgl![SgEntry { buf, offset: 0, len }], oneshot: false };
    sk.setup(io).unwrap();
    let (repr, data, mut first) = c2h_data(len);
    first.resize(repr.header_len(), 0);
    repr.emit_header(&mut first);
    let head = SEGMENT - first.len();
    first.extend_from_slice(&data[..head]);
    send(&mut wire, from_controller(TcpControl::Psh, ISS, &first));
    nic.receive(now).unwrap().0.consume(|_| ());
    let next = &data[head..head + SEGMENT];
    send(&mut wire, from_controller(TcpControl::Psh, ISS + SEGMENT as u32, next));
    assert_eq!(dev.stats().nic_placed_bytes, head as u64, "the first segment was placed");
    (nic, wire)
}

// The NIC takes one 9000-byte segment of C2HData payload: checks it,
// places it into the read's buffer and digests it in one pass.
#[library_benchmark]
#[bench::segment_9000(setup = nic_mid_c2h_data)]
fn nic_rx_placed_segment(
    (mut nic, wire): (OffloadNic<WireEnd>, WireEnd),
) -> (OffloadNic<WireEnd>, WireEnd, usize) {
    let (rx, _) = nic.receive(Instant::from_millis(0)).unwrap();
    let n = rx.consume(|frame| frame.len());
    (nic, wire, n)
}

// ---- The host and the controller ----

/// A host whose NIC placed and digested a 128 KiB read's response, which
/// waits to be taken in.
fn host_with_placed_response() -> (Rig, usize) {
    let mut rig = Rig::new(true);
    let dst = IoBuf::new(128 << 10);
    let n = rig.submit(128 << 10, &dst);
    let n = rig.serve(n);
    rig.vouch(n);
    (rig, n)
}

// The host takes in a placed 128 KiB C2HData and its CapsuleResp: the
// hints vouch for every byte, so it neither copies nor digests.
#[library_benchmark]
#[bench::c2h_data_128k(setup = host_with_placed_response)]
fn host_rx_placed_c2h_data((mut rig, n): (Rig, usize)) -> Rig {
    assert!(rig.take(n));
    rig
}

/// A controller with a host's 4 KiB read command waiting.
fn controller_with_read() -> (Rig, usize) {
    let mut rig = Rig::new(false);
    let dst = IoBuf::new(4096);
    let n = rig.submit(4096, &dst);
    (rig, n)
}

// The controller serves one 4 KiB read: parses the command, reads the
// namespace, frames C2HData with its digest and the response.
#[library_benchmark]
#[bench::read_4k(setup = controller_with_read)]
fn controller_serves_read((mut rig, n): (Rig, usize)) -> (Rig, usize) {
    let n = rig.serve(n);
    (rig, n)
}

// ---- TLS ----

const PSK_ID: &str = "NVMe0R01 nqn.2014-08.org.nvmexpress:uuid:h nqn.2026-11.io.nvme-ddp:t";

/// Move ciphertext both ways until neither side has any to send.
fn pump(a: &mut TlsSession, b: &mut TlsSession) {
    let mut plain = Vec::new();
    for _ in 0..16 {
        let n = a.unsent().len();
        if n > 0 {
            let ct = a.unsent().to_vec();
            a.sent(n);
            b.receive(&ct, &mut plain).unwrap();
        }
        let m = b.unsent().len();
        if m > 0 {
            let ct = b.unsent().to_vec();
            b.sent(m);
            a.receive(&ct, &mut plain).unwrap();
        }
        if n == 0 && m == 0 {
            return;
        }
    }
}

/// Two ends of an established TLS 1.3 session (AES-128-GCM) and 16 KiB
/// to send.
fn tls_pair() -> (TlsSession, TlsSession, Vec<u8>, Vec<u8>) {
    let key = [7u8; 32];
    let mut client = TlsSession::client(PSK_ID, &key).unwrap();
    let lookup = Arc::new(move |id: &str| (id == PSK_ID).then(|| Zeroizing::new(key.to_vec())));
    let mut server = TlsSession::server(lookup).unwrap();
    pump(&mut client, &mut server);
    assert!(client.is_established() && server.is_established());
    (client, server, pattern(16 << 10), Vec::with_capacity(16 << 10))
}

// One 16 KiB record sealed by one end and opened by the other.
#[library_benchmark]
#[bench::record_16k(setup = tls_pair)]
fn tls_record_seal_and_open(
    (mut client, mut server, data, mut plain): (TlsSession, TlsSession, Vec<u8>, Vec<u8>),
) -> (TlsSession, TlsSession, [Vec<u8>; 2]) {
    client.send(black_box(&data)).unwrap();
    let n = client.unsent().len();
    server.receive(client.unsent(), &mut plain).unwrap();
    client.sent(n);
    assert_eq!(plain.len(), data.len());
    (client, server, [data, plain])
}

// ---- iWARP ----

fn write_header() -> DdpHeader {
    DdpHeader::Tagged { ctrl: Ctrl { last: true, opcode: Opcode::Write }, stag: 0x101, to: 4096 }
}

fn fpdu_parts() -> (DdpHeader, Vec<u8>, Vec<u8>) {
    (write_header(), pattern(8192), Vec::with_capacity(8192 + 64))
}

// The sender frames one tagged FPDU (an RDMA Write of 8 KiB): MPA length,
// DDP header, payload, PAD and CRC32C.
#[library_benchmark]
#[bench::write_8k(setup = fpdu_parts)]
fn iwarp_fpdu_emit((header, payload, mut out): (DdpHeader, Vec<u8>, Vec<u8>)) -> [Vec<u8>; 2] {
    emit_fpdu(&header, black_box(&payload), true, &mut out);
    [payload, out]
}

fn fpdu() -> Vec<u8> {
    let mut out = Vec::new();
    emit_fpdu(&write_header(), &pattern(8192), true, &mut out);
    out
}

// The receiver walks one such FPDU in software: header, payload, CRC
// checked.
#[library_benchmark]
#[bench::write_8k(setup = fpdu)]
fn iwarp_fpdu_receive(stream: Vec<u8>) -> Vec<u8> {
    let mut framer = FpduFramer::new(true);
    let (mut at, mut payload) = (0, 0);
    loop {
        match framer.next(black_box(&stream[at..])).unwrap() {
            (n, Some(FpduEvent::Data { bytes, .. })) => {
                at += n;
                payload += bytes.len();
            }
            (n, Some(FpduEvent::End)) => {
                at += n;
                break;
            }
            (n, _) => at += n,
        }
    }
    assert_eq!((at, payload), (stream.len(), 8192));
    stream
}

library_benchmark_group!(
    name = hot_paths,
    benchmarks = [
        frame_c2h_data,
        nic_rx_placed_segment,
        host_rx_placed_c2h_data,
        controller_serves_read,
        tls_record_seal_and_open,
        iwarp_fpdu_emit,
        iwarp_fpdu_receive
    ]
);

main!(library_benchmark_groups = hot_paths);
