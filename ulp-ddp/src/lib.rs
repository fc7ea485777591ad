//! The ULP DDP offload contract between an upper-layer protocol (NVMe/TCP,
//! or iWARP's MPA/DDP/RDMAP) and a NIC: capabilities, limits, per-socket
//! configuration, per-I/O buffer mappings (by CID, or by STag), receive
//! hints, resync, and statistics, named as in Linux's
//! `include/net/ulp_ddp.h` so a reader of either finds the other.
//!
//! Types and traits only: no logic that belongs to one NIC or one protocol.
//!
//! Where this contract differs from Linux's, it is because the ULP here runs
//! above a user-space TCP (smoltcp) rather than inside the kernel:
//! - Stream positions are 64-bit *stream offsets* (bytes since the start of
//!   one direction of the connection) instead of 32-bit TCP sequence
//!   numbers, which smoltcp does not expose to its users. The NIC, which
//!   sees the handshake, translates.
//! - What Linux's NIC reports per skb (`ulp_crc`, placement) it reports here
//!   as [`RxHint`]s keyed by stream offset, because smoltcp copies payload
//!   into its ring and forgets packet boundaries.
//! - The NIC's calls into the ULP (`resync_request`, `ddp_teardown_done`)
//!   are left in the socket's [`SkCtx`] mailbox and collected by the ULP
//!   when it next runs, instead of being called from softirq context.
//! - Besides Linux's receive capabilities there are two more: transmit data
//!   digest offload (from the v4/v5 series) and one-shot mappings.
//! - Transmit by reference ([`Caps::ZC_TX`]): the ULP maps a buffer with
//!   [`DdpSk::tx_setup`], queues its bytes in the stack by the token it
//!   got, and the device gathers them into each segment that carries
//!   them, first transmission and retransmissions alike, until the ULP
//!   calls [`DdpSk::tx_teardown`] once the peer acknowledged them. Linux
//!   needs no such call: an skb's fragments are the pages, which the
//!   driver maps as it posts them. On an iWARP socket the device may also
//!   take a whole tagged message and cut it into FPDUs itself
//!   ([`IwarpSk::tx_setup_fpdus`], [`TxFpdus`]), as an RNIC does.
//! - Beside Linux's one ULP type there is a second, iWARP
//!   ([`IwarpDevice`]), whose mappings are tagged buffers ([`StagIo`]).
//!   The capabilities keep their meanings on it: placement of tagged
//!   segments, MPA CRC verify and compute, and one-shot STags (armed by
//!   the Send that advertises them, freed by the Send that closes them).
//! - TLS record offload ([`Caps::TLS_RX`], [`Caps::TLS_TX`]) is a device
//!   trait of its own ([`TlsDevice`]), as Linux keeps `tls_device` apart,
//!   so that one device may do both: [`TlsDevice::tls_dev_add`] hands it
//!   a direction's crypto state (see [`tls`]).
//!
//! # The contract in one page
//!
//! A NIC vendor implements [`DdpDevice`] (and [`IwarpDevice`] and
//! [`TlsDevice`] if it has them); a protocol adds its sockets to it, gets
//! a handle typed by protocol ([`NvmeTcpSk`], [`IwarpSk`]), maps each
//! I/O's buffer by tag through it, and reads back from the socket's
//! [`SkCtx`] mailbox what the device did with the bytes it received. Here
//! a device that places NVMe/TCP C2HData by CID, and nothing else, and a
//! host that maps a read's buffer, learns that the data were placed, and
//! so copies nothing:
//!
//! ```
//! use std::collections::HashMap;
//! use std::sync::{Arc, Mutex};
//! use ulp_ddp::*;
//!
//! /// Places data by CID; verifies and computes no digest.
//! #[derive(Default)]
//! struct PlacingNic {
//!     sk: Mutex<Option<Arc<Socket>>>,
//!     stats: Arc<Mutex<Stats>>,
//! }
//!
//! /// The one socket it offloads.
//! #[derive(Default)]
//! struct Socket {
//!     ctx: Arc<SkCtx>,
//!     maps: Mutex<HashMap<u16, DdpIo>>,
//!     stats: Arc<Mutex<Stats>>,
//! }
//!
//! impl PlacingNic {
//!     /// The wire: a C2HData PDU's `data` for `cid`, at stream offsets
//!     /// from `start`. A real device parses the PDU out of the segments.
//!     fn receive(&self, cid: u16, start: u64, data: &[u8]) {
//!         let Some(sk) = self.sk.lock().unwrap().clone() else { return };
//!         let Some(io) = sk.maps.lock().unwrap().remove(&cid) else { return };
//!         let e = &io.sgl[0];
//!         e.buf.lock()[e.offset..e.offset + data.len()].copy_from_slice(data);
//!         sk.ctx.push_hint(start, start + data.len() as u64, HintFlags::PLACED);
//!         self.stats.lock().unwrap().nic_placed_bytes += data.len() as u64;
//!     }
//! }
//!
//! impl DdpDevice for PlacingNic {
//!     fn limits(&self) -> Limits {
//!         Limits { max_ddp_sgl_len: 1, io_threshold: 0, tls: false,
//!                  full_ccid_range: true, max_stags: 0 }
//!     }
//!     fn caps(&self) -> (Caps, Caps) {
//!         (Caps::DDP, Caps::DDP)
//!     }
//!     fn set_caps(&self, wanted: Caps) -> Result<Caps, DdpError> {
//!         match wanted.without(Caps::DDP) {
//!             extra if extra.is_empty() => Ok(wanted),
//!             extra => Err(DdpError::Unsupported(extra)),
//!         }
//!     }
//!     fn stats(&self) -> Stats {
//!         *self.stats.lock().unwrap()
//!     }
//!     fn sk_add(&self, _flow: FlowId, _config: &NvmeTcpConfig)
//!         -> Result<Arc<dyn NvmeTcpSk>, DdpError> {
//!         let sk = Arc::new(Socket { stats: self.stats.clone(), ..Socket::default() });
//!         *self.sk.lock().unwrap() = Some(sk.clone());
//!         self.stats.lock().unwrap().sk_add += 1;
//!         Ok(sk)
//!     }
//! }
//!
//! impl DdpSk for Socket {
//!     fn ctx(&self) -> &Arc<SkCtx> {
//!         &self.ctx
//!     }
//!     fn offloads(&self) -> Caps {
//!         Caps::DDP
//!     }
//!     fn resync(&self, _seq: u64) {}
//!     fn tx_setup(&self, _sg: SgEntry) -> Result<u64, DdpError> {
//!         Err(DdpError::NotActive(Caps::ZC_TX))
//!     }
//!     fn tx_teardown(&self, _token: u64) {}
//!     fn sk_del(&self) {
//!         self.maps.lock().unwrap().clear();
//!         self.stats.lock().unwrap().sk_del += 1;
//!     }
//! }
//!
//! impl NvmeTcpSk for Socket {
//!     fn setup(&self, io: DdpIo) -> Result<(), DdpError> {
//!         if io.sgl.len() > 1 {
//!             return Err(DdpError::TooManyEntries(io.sgl.len()));
//!         }
//!         self.maps.lock().unwrap().insert(io.tag, io);
//!         Ok(())
//!     }
//!     fn teardown(&self, tag: u16) {
//!         self.maps.lock().unwrap().remove(&tag);
//!         self.ctx.teardown_done(tag);
//!     }
//! }
//!
//! // The host's side: offload the socket, map a 4 KiB read as CID 7.
//! let nic = PlacingNic::default();
//! let addr = |port| std::net::SocketAddrV4::new([198, 18, 0, 3].into(), port);
//! let flow = FlowId { local: addr(40000), remote: addr(4420) };
//! let config = NvmeTcpConfig {
//!     role: Role::Host, pfv: 0, cpda: 0, hpda: 0, dgst: NvmeTcpConfig::DGST_DATA,
//!     queue_size: 128, rx_start: 0, tx_start: 0,
//! };
//! let sk = nic.sk_add(flow, &config).unwrap();
//! let buf = IoBuf::new(4096);
//! let sgl = sgl![SgEntry { buf: buf.clone(), offset: 0, len: 4096 }];
//! sk.setup(DdpIo { tag: 7, sgl, oneshot: false }).unwrap();
//!
//! // The C2HData's payload crosses the wire at stream offsets 24..4120.
//! nic.receive(7, 24, &[0xab; 4096]);
//!
//! // Reading those offsets, the host finds them placed: no copy.
//! let mut to_copy = 0;
//! sk.ctx().with_hints(24, 4120, |start, end, hint| {
//!     if !hint.flags.contains(HintFlags::PLACED) {
//!         to_copy += end - start;
//!     }
//! });
//! assert_eq!(to_copy, 0);
//! assert_eq!(buf.to_vec(), vec![0xab; 4096]);
//! assert_eq!(nic.stats().nic_placed_bytes, 4096);
//!
//! // Done with CID 7: unmap it; the device confirms through the mailbox.
//! sk.teardown(7);
//! assert_eq!(sk.ctx().take_teardown_done(), [7]);
//! sk.sk_del();
//! ```

mod device;
mod fpdus;
mod iobuf;
mod sk;
mod stag;
pub mod tls;
mod tx;

pub use device::{DdpDevice, DdpSk, IwarpDevice, IwarpSk, NvmeTcpSk, TlsDevice, TlsSk};
pub use fpdus::TxFpdus;
pub use iobuf::{Bytes, IoBuf};
pub use sk::{Frag, Freed, HintFlags, RxHint, SkCtx, TaggedRun};
pub use smallvec::smallvec as sgl;
pub use stag::{Access, Stag, StagIo};
pub use tls::{TlsCipher, TlsCryptoInfo, TlsDirection, TlsStart};
pub use tx::{SliceSink, TxMode, TxSink, ZeroCopyTx};

use smallvec::SmallVec;
use std::fmt;
use std::net::SocketAddrV4;

/// Offload capabilities, as a bit set (`ULP_DDP_CAP_*`).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Caps(u32);

impl Caps {
    /// Direct data placement: of NVMe/TCP data PDUs by CID
    /// (`ULP_DDP_CAP_NVME_TCP`), of an iWARP socket's tagged segments by
    /// STag (RDMA Write, Read Response).
    #[doc(alias = "ULP_DDP_CAP_NVME_TCP")]
    pub const DDP: Caps = Caps(1 << 0);
    /// Receive CRC32C verification: NVMe/TCP data digests
    /// (`ULP_DDP_CAP_NVME_TCP_DDGST_RX`), the MPA CRC on an iWARP socket.
    #[doc(alias = "ULP_DDP_CAP_NVME_TCP_DDGST_RX")]
    pub const CRC_RX: Caps = Caps(1 << 1);
    /// Transmit CRC32C computation: NVMe/TCP data digests, the MPA CRC.
    pub const CRC_TX: Caps = Caps(1 << 2);
    /// One-shot mappings: armed by the command capsule going out, freed by
    /// the response coming in; on an iWARP socket, STags armed by the Send
    /// that advertises them and freed by the peer's Send that closes them.
    pub const ONESHOT: Caps = Caps(1 << 3);
    /// Zero-copy transmit: payload the ULP queued by reference is gathered
    /// by the device from the buffer it mapped (`tx_setup`), as a NIC
    /// gathers the pages of an `MSG_SPLICE_PAGES` send by DMA.
    #[doc(alias = "MSG_ZEROCOPY")]
    pub const ZC_TX: Caps = Caps(1 << 4);
    /// TLS receive offload: records decrypted and authenticated by the
    /// device (`NETIF_F_HW_TLS_RX`).
    #[doc(alias = "NETIF_F_HW_TLS_RX")]
    pub const TLS_RX: Caps = Caps(1 << 5);
    /// TLS transmit offload: records encrypted by the device
    /// (`NETIF_F_HW_TLS_TX`).
    #[doc(alias = "NETIF_F_HW_TLS_TX")]
    pub const TLS_TX: Caps = Caps(1 << 6);

    pub const NONE: Caps = Caps(0);
    pub const ALL: Caps = Caps(0x7f);

    /// Every offload but one-shot: mappings set up and torn down (RDMA:
    /// STags registered and invalidated) by calls of their own.
    pub const CLASSIC: Caps = Caps::ALL.without(Caps::ONESHOT);
    /// Data digest offload both ways (on an iWARP socket, the MPA CRC).
    pub const CRC: Caps = Caps::CRC_RX.union(Caps::CRC_TX);
    /// TLS record offload both ways.
    pub const TLS: Caps = Caps::TLS_RX.union(Caps::TLS_TX);

    /// Names as the command line writes them: whole sets, which print as
    /// their own name, then the parts other sets print as, joined by `+`.
    const SETS: [(Caps, &'static str); 3] =
        [(Caps::NONE, "none"), (Caps::ALL, "all"), (Caps::CLASSIC, "classic")];
    const PARTS: [(Caps, &'static str); 9] = [
        (Caps::DDP, "ddp"),
        (Caps::CRC, "crc"),
        (Caps::CRC_RX, "crc-rx"),
        (Caps::CRC_TX, "crc-tx"),
        (Caps::ONESHOT, "oneshot"),
        (Caps::ZC_TX, "zc-tx"),
        (Caps::TLS, "tls"),
        (Caps::TLS_RX, "tls-rx"),
        (Caps::TLS_TX, "tls-tx"),
    ];

    fn names() -> impl Iterator<Item = &'static (Caps, &'static str)> {
        Caps::SETS.iter().chain(&Caps::PARTS)
    }

    pub const fn bits(self) -> u32 {
        self.0
    }

    pub const fn from_bits(bits: u32) -> Caps {
        Caps(bits & Caps::ALL.0)
    }

    pub const fn contains(self, other: Caps) -> bool {
        self.0 & other.0 == other.0
    }

    pub const fn intersects(self, other: Caps) -> bool {
        self.0 & other.0 != 0
    }

    pub const fn union(self, other: Caps) -> Caps {
        Caps(self.0 | other.0)
    }

    pub const fn intersection(self, other: Caps) -> Caps {
        Caps(self.0 & other.0)
    }

    pub const fn without(self, other: Caps) -> Caps {
        Caps(self.0 & !other.0)
    }

    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// Parse one offload set: names joined by `+`, e.g. `all`, `none`,
    /// `classic`, `ddp+crc`, `ddp+crc-rx+oneshot`.
    pub fn parse(s: &str) -> Result<Caps, String> {
        if s.contains(',') {
            return Err(format!(
                "{s:?}: one offload set here; join offloads with '+' (e.g. ddp+crc)"
            ));
        }
        s.split('+').map(str::trim).try_fold(Caps::NONE, |caps, word| {
            let one = Caps::names().find(|(_, n)| *n == word).map(|(c, _)| *c);
            one.map(|c| caps.union(c)).ok_or_else(|| {
                format!(
                    "unknown offload {word:?} (use none, all, classic, crc, ddp, crc-rx, crc-tx, oneshot, zc-tx, tls, tls-rx, tls-tx, joined by '+')"
                )
            })
        })
    }
}

/// The shortest name `parse` reads back: a set's own name, or its parts
/// joined by `+`.
impl fmt::Display for Caps {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some((_, name)) = Caps::names().find(|(c, _)| c == self) {
            return f.write_str(name);
        }
        let mut rest = *self;
        let mut names = Vec::new();
        for (c, name) in &Caps::PARTS {
            if rest.contains(*c) {
                names.push(*name);
                rest = rest.without(*c);
            }
        }
        f.write_str(&names.join("+"))
    }
}

impl fmt::Debug for Caps {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Caps({self})")
    }
}

/// What a device supports (`ulp_ddp_limits`, NVMe/TCP flavour).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Most scatter-gather entries one mapping may have; 0 for no limit.
    pub max_ddp_sgl_len: u32,
    /// Smallest transfer worth mapping, in bytes.
    pub io_threshold: u32,
    /// Whether offload works together with TLS.
    pub tls: bool,
    /// Whether tags may use the full 16-bit range; if not, they must be
    /// below the socket's queue size (the device indexes a table by tag).
    pub full_ccid_range: bool,
    /// Tagged buffers (and, as many again, posted receive buffers) one
    /// iWARP socket may have mapped at once; 0 for a device that does not
    /// follow MPA/DDP streams at all.
    pub max_stags: u32,
}

/// Which end of NVMe/TCP a socket is: it decides which PDUs the device
/// places (C2HData by CCCID for a host, H2CData by TTAG for a controller)
/// and which it digests on transmit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Host,
    Controller,
}

/// An iWARP socket, from the first FPDU on (after MPA setup).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IwarpConfig {
    /// MPA CRCs are in force (RFC 5044 §7.1, the C bit).
    pub crc: bool,
    /// Both ends agreed, while connecting, to the one-shot encodings:
    /// opcode 0x8 (a Send that advertises an STag) and 0xC (a Send that
    /// closes one).
    pub oneshot_opcodes: bool,
    /// Stream offset where the next received FPDU starts.
    pub rx_start: u64,
    /// Stream offset where the next transmitted FPDU starts.
    pub tx_start: u64,
    /// MPA markers (RFC 5044 §5.2) every 512 octets from `rx_start` in
    /// what is received, and from `tx_start` in what is sent.
    pub rx_markers: bool,
    pub tx_markers: bool,
}

/// An NVMe/TCP socket (`nvme_tcp_ddp_config`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NvmeTcpConfig {
    pub role: Role,
    /// PDU format version (0).
    pub pfv: u16,
    /// Controller PDU data alignment (H2C data), 0-based dwords.
    pub cpda: u8,
    /// Host PDU data alignment (C2H data), 0-based dwords.
    pub hpda: u8,
    /// Header digest (bit 0) and data digest (bit 1) in force.
    pub dgst: u8,
    /// Queue entries; tags must be below this unless `full_ccid_range`.
    pub queue_size: u32,
    /// Stream offset where the next received PDU starts.
    pub rx_start: u64,
    /// Stream offset where the next transmitted PDU starts.
    pub tx_start: u64,
}

impl NvmeTcpConfig {
    pub const DGST_HEADER: u8 = 1 << 0;
    pub const DGST_DATA: u8 = 1 << 1;
}

/// A socket as the device knows it: its TCP 4-tuple, from the ULP's side.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FlowId {
    pub local: SocketAddrV4,
    pub remote: SocketAddrV4,
}

/// One scatter-gather entry: `len` bytes of `buf` from `offset`.
#[derive(Debug, Clone)]
pub struct SgEntry {
    pub buf: IoBuf,
    pub offset: usize,
    pub len: usize,
}

/// A scatter-gather list. The few entries of a work request or a mapping
/// are held in place, as a NIC's descriptor holds its SGEs, so that
/// posting one allocates nothing; longer lists spill to the heap. Built
/// with [`sgl!`] as `vec!` builds a `Vec`.
pub type Sgl = SmallVec<[SgEntry; 2]>;

impl SgEntry {
    /// Whether the entry lies inside its buffer.
    pub fn in_bounds(&self) -> bool {
        self.offset.checked_add(self.len).is_some_and(|end| end <= self.buf.len())
    }
}

/// A per-I/O mapping (`ulp_ddp_io`): data for `tag` goes to `sgl`, byte 0
/// of the command's data at the first entry's offset.
#[derive(Debug, Clone)]
pub struct DdpIo {
    /// CCCID on a host socket, TTAG on a controller socket.
    pub tag: u16,
    pub sgl: Sgl,
    /// One-shot: live once the capsule with this tag leaves, freed by the
    /// response; otherwise live now, freed by `teardown`.
    pub oneshot: bool,
}

impl DdpIo {
    /// Bytes the mapping covers.
    pub fn len(&self) -> usize {
        self.sgl.iter().map(|e| e.len).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Why a device refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DdpError {
    #[error("capability {0} is not active")]
    NotActive(Caps),
    #[error("capabilities {0} are not supported by the device")]
    Unsupported(Caps),
    #[error("unknown socket")]
    NoSocket,
    #[error("socket already offloaded")]
    Exists,
    #[error("the device never saw this connection's handshake")]
    NoHandshake,
    #[error("tag {0} is already mapped")]
    Busy(u16),
    #[error("tag {0} is out of range")]
    BadTag(u16),
    #[error("mapping has {0} entries, more than the device takes")]
    TooManyEntries(usize),
    #[error("empty mapping")]
    Empty,
    #[error("scatter-gather entry {0} lies outside its buffer")]
    BadEntry(usize),
    #[error("STag {0} is already mapped")]
    StagBusy(Stag),
    #[error("the socket has {0} STags mapped, as many as the device takes")]
    TooManyStags(u32),
    #[error("the socket does not carry that protocol")]
    WrongUlp,
    #[error("too many transmit mappings on the socket ({0})")]
    TooManyTxMaps(usize),
    #[error("TLS crypto state the device cannot use (a key of the wrong length?)")]
    BadCrypto,
}

/// Device counters: Linux's ten `rx_nvmeotcp_*` stats, then the work the
/// device did that the host therefore did not.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Stats {
    pub sk_add: u64,
    pub sk_add_fail: u64,
    pub sk_del: u64,
    pub ddp_setup: u64,
    pub ddp_setup_fail: u64,
    pub ddp_teardown: u64,
    /// Received frames the device withheld from the stack. The only kind
    /// it withholds is a segment whose TCP checksum is wrong (receive
    /// checksum offload), so this equals `rx_csum_bad`.
    pub drop: u64,
    /// Resync requests sent to the ULP.
    pub resync: u64,
    /// Received packets processed in sequence for an offloaded socket.
    pub packets: u64,
    /// Payload bytes of those packets.
    pub bytes: u64,
    /// Data bytes written into mapped buffers.
    pub nic_placed_bytes: u64,
    /// Of those, bytes the device kept out of the stack's receive ring
    /// (header/data split): written once, into the buffer. The rest were
    /// written to the ring as well.
    pub nic_zero_copy_bytes: u64,
    /// Received data bytes whose digest the device computed.
    pub nic_crc_bytes: u64,
    /// Transmitted data bytes whose digest the device computed.
    pub tx_crc_offloaded_bytes: u64,
    /// Resyncs the ULP confirmed.
    pub resync_confirmed: u64,
    /// FPDU boundaries found again from an MPA marker, with nothing to
    /// ask the ULP.
    pub resync_marker: u64,
    /// One-shot mappings armed by a departing capsule / freed by a response.
    pub oneshot_armed: u64,
    pub oneshot_freed: u64,
    /// Digests restored into retransmitted segments.
    pub tx_digest_restored: u64,
    /// Received segments with a bad TCP checksum, dropped by checksum
    /// offload where the stack would have dropped them.
    pub rx_csum_bad: u64,
    /// STag mappings made, refused, and removed by a local invalidate.
    pub stag_setup: u64,
    pub stag_setup_fail: u64,
    pub stag_invalidate: u64,
    /// STags freed by the device on a peer's Send with Invalidate (or
    /// one-shot close), before the message went up.
    pub stag_remote_invalidate: u64,
    /// Tagged segments the device would not place: no such STag, a stale
    /// key, no remote-write right, or a range outside the buffer.
    pub stag_refused: u64,
    /// Posted receive buffers mapped, and Send segments the device would
    /// not place in the one mapped for their MSN (a range outside it).
    pub recv_setup: u64,
    pub recv_refused: u64,
    /// RDMA Write FPDUs the device consumed whole, header to CRC, and
    /// handed to the ULP as runs ([`TaggedRun`]) it need not parse.
    pub whole_fpdus: u64,
    /// Transmit mappings made, refused, and torn down (zero-copy transmit).
    pub tx_setup: u64,
    pub tx_setup_fail: u64,
    pub tx_teardown: u64,
    /// Payload bytes the device gathered into outgoing segments from
    /// transmit mappings, retransmissions included.
    pub tx_gathered_bytes: u64,
    /// Outgoing segments the device dropped because they named bytes of
    /// no transmit mapping (one torn down before the peer acknowledged
    /// it): sending whatever the frame held would corrupt the stream.
    pub tx_gather_refused: u64,
    /// FPDUs the device framed itself, of messages mapped with
    /// [`IwarpSk::tx_setup_fpdus`], retransmissions included.
    pub tx_fpdus_framed: u64,
    /// TLS contexts handed to the device and taken back
    /// (`tls_dev_add`, `tls_dev_del`), either direction.
    pub tls_dev_add: u64,
    pub tls_dev_del: u64,
    /// Received records the device decrypted and authenticated whole
    /// (their packets: `rx_tls_decrypted_packets`), and their bytes
    /// (`rx_tls_decrypted_bytes`, the body: inner plaintext and tag).
    pub rx_tls_records: u64,
    pub rx_tls_decrypted_packets: u64,
    pub rx_tls_decrypted_bytes: u64,
    /// Records whose tag did not verify: left to software, which fails
    /// the connection.
    pub rx_tls_auth_fail: u64,
    /// Record resyncs asked of the ULP (`rx_tls_resync_req_pkt`), and
    /// those it confirmed (`rx_tls_resync_res_ok`).
    pub rx_tls_resync_req: u64,
    pub rx_tls_resync_res_ok: u64,
    /// Records found again after a lost header by a guess of their
    /// number, and the guesses their tag proved right.
    pub rx_tls_resync_guess: u64,
    pub rx_tls_resync_guess_ok: u64,
    /// Records encrypted for the first time (`tx_tls_encrypted_packets`
    /// counts their packets), their body bytes
    /// (`tx_tls_encrypted_bytes`), and retransmitted segments encrypted
    /// again from the records kept (`tx_tls_ooo`).
    pub tx_tls_records: u64,
    pub tx_tls_encrypted_packets: u64,
    pub tx_tls_encrypted_bytes: u64,
    pub tx_tls_ooo: u64,
}

impl std::ops::AddAssign<&Stats> for Stats {
    /// The counters of several devices, or of a device's queues, summed
    /// (as ethtool sums a NIC's queues).
    fn add_assign(&mut self, o: &Stats) {
        // Every field named: a new counter cannot be left out.
        let Stats {
            sk_add,
            sk_add_fail,
            sk_del,
            ddp_setup,
            ddp_setup_fail,
            ddp_teardown,
            drop,
            resync,
            packets,
            bytes,
            nic_placed_bytes,
            nic_zero_copy_bytes,
            nic_crc_bytes,
            tx_crc_offloaded_bytes,
            resync_confirmed,
            resync_marker,
            oneshot_armed,
            oneshot_freed,
            tx_digest_restored,
            rx_csum_bad,
            stag_setup,
            stag_setup_fail,
            stag_invalidate,
            stag_remote_invalidate,
            stag_refused,
            recv_setup,
            recv_refused,
            whole_fpdus,
            tx_setup,
            tx_setup_fail,
            tx_teardown,
            tx_gathered_bytes,
            tx_gather_refused,
            tx_fpdus_framed,
            tls_dev_add,
            tls_dev_del,
            rx_tls_records,
            rx_tls_decrypted_packets,
            rx_tls_decrypted_bytes,
            rx_tls_auth_fail,
            rx_tls_resync_req,
            rx_tls_resync_res_ok,
            rx_tls_resync_guess,
            rx_tls_resync_guess_ok,
            tx_tls_records,
            tx_tls_encrypted_packets,
            tx_tls_encrypted_bytes,
            tx_tls_ooo,
        } = *o;
        self.sk_add += sk_add;
        self.sk_add_fail += sk_add_fail;
        self.sk_del += sk_del;
        self.ddp_setup += ddp_setup;
        self.ddp_setup_fail += ddp_setup_fail;
        self.ddp_teardown += ddp_teardown;
        self.drop += drop;
        self.resync += resync;
        self.packets += packets;
        self.bytes += bytes;
        self.nic_placed_bytes += nic_placed_bytes;
        self.nic_zero_copy_bytes += nic_zero_copy_bytes;
        self.nic_crc_bytes += nic_crc_bytes;
        self.tx_crc_offloaded_bytes += tx_crc_offloaded_bytes;
        self.resync_confirmed += resync_confirmed;
        self.resync_marker += resync_marker;
        self.oneshot_armed += oneshot_armed;
        self.oneshot_freed += oneshot_freed;
        self.tx_digest_restored += tx_digest_restored;
        self.rx_csum_bad += rx_csum_bad;
        self.stag_setup += stag_setup;
        self.stag_setup_fail += stag_setup_fail;
        self.stag_invalidate += stag_invalidate;
        self.stag_remote_invalidate += stag_remote_invalidate;
        self.stag_refused += stag_refused;
        self.recv_setup += recv_setup;
        self.recv_refused += recv_refused;
        self.whole_fpdus += whole_fpdus;
        self.tx_setup += tx_setup;
        self.tx_setup_fail += tx_setup_fail;
        self.tx_teardown += tx_teardown;
        self.tx_gathered_bytes += tx_gathered_bytes;
        self.tx_gather_refused += tx_gather_refused;
        self.tx_fpdus_framed += tx_fpdus_framed;
        self.tls_dev_add += tls_dev_add;
        self.tls_dev_del += tls_dev_del;
        self.rx_tls_records += rx_tls_records;
        self.rx_tls_decrypted_packets += rx_tls_decrypted_packets;
        self.rx_tls_decrypted_bytes += rx_tls_decrypted_bytes;
        self.rx_tls_auth_fail += rx_tls_auth_fail;
        self.rx_tls_resync_req += rx_tls_resync_req;
        self.rx_tls_resync_res_ok += rx_tls_resync_res_ok;
        self.rx_tls_resync_guess += rx_tls_resync_guess;
        self.rx_tls_resync_guess_ok += rx_tls_resync_guess_ok;
        self.tx_tls_records += tx_tls_records;
        self.tx_tls_encrypted_packets += tx_tls_encrypted_packets;
        self.tx_tls_encrypted_bytes += tx_tls_encrypted_bytes;
        self.tx_tls_ooo += tx_tls_ooo;
    }
}

#[cfg(test)]
mod tests {
    use super::Caps;

    #[test]
    fn offload_sets_print_as_the_names_they_parse_from() {
        for (name, caps) in [
            ("none", Caps::NONE),
            ("all", Caps::ALL),
            ("classic", Caps::ALL.without(Caps::ONESHOT)),
            ("crc", Caps::CRC_RX.union(Caps::CRC_TX)),
            ("ddp+crc-rx", Caps::DDP.union(Caps::CRC_RX)),
            ("ddp+oneshot", Caps::DDP.union(Caps::ONESHOT)),
            ("crc+oneshot", Caps::CRC.union(Caps::ONESHOT)),
            ("ddp+crc-tx+oneshot+zc-tx+tls", Caps::ALL.without(Caps::CRC_RX)),
            ("ddp+zc-tx", Caps::DDP.union(Caps::ZC_TX)),
            ("tls", Caps::TLS),
            ("crc+tls-rx", Caps::CRC.union(Caps::TLS_RX)),
            ("ddp+tls-tx", Caps::DDP.union(Caps::TLS_TX)),
        ] {
            assert_eq!(Caps::parse(name), Ok(caps), "{name}");
            assert_eq!(caps.to_string(), name);
        }
        assert_eq!(Caps::parse("ddp+crc-rx+crc-tx+zc-tx+tls-rx+tls-tx"), Ok(Caps::CLASSIC));
        assert!(Caps::parse("ddp,crc").unwrap_err().contains("join offloads with '+'"));
        assert!(Caps::parse("dpp").unwrap_err().contains("unknown offload \"dpp\""));
        assert!(Caps::parse("").is_err());
    }
}
