//! A software NIC that implements the ULP DDP contract as a smoltcp `Device`
//! decorator, in the manner of smoltcp's own `FaultInjector<D>`: it wraps
//! any medium, sees every frame on its way up and down, and is invisible
//! when every offload is off.
//!
//! Like every NIC worth the name it offloads TCP checksums both ways
//! (`NETIF_F_RXCSUM`, `NETIF_F_HW_CSUM`), so the stack neither verifies nor
//! computes them. The one kind of frame it withholds is a received segment
//! whose checksum is wrong, which the stack would have dropped; it counts
//! it (`drop`, `rx_csum_bad`). No frame is reordered or edited. The NIC
//! parses each frame, places and digests what it may, leaves hints for the
//! ULP, and hands the frame up. On transmit it writes the data digests the
//! ULP left to it, then the TCP checksum.
//!
//! Placement is zero-copy end to end. While a socket may be placed into,
//! the NIC copies each received frame into a buffer of its own before the
//! stack sees it, as a device DMAs into its receive ring, and splits
//! header from data as it does: payload it placed is written once, into
//! the ULP's buffer, and neither into that ring buffer nor (through
//! `PacketMeta::placed`) into smoltcp's socket ring. Otherwise frames go
//! up in the medium's own buffer.
//!
//! [`OffloadNic`] is the device; [`NicHandle`] is the same NIC as the
//! driver sees it, implementing [`ulp_ddp::DdpDevice`] (and
//! [`ulp_ddp::IwarpDevice`] and [`ulp_ddp::TlsDevice`]); [`NicEngine`] is
//! the NIC behind a descriptor ring to its host, which a caller's loop
//! steps, so that its work is CPU time apart from the host's: read from the
//! thread's clock around each step.

mod classify;
mod config;
mod copy;
mod device;
mod engine;
mod flow;
mod frame;
#[doc(hidden)]
pub mod fuzzing;
mod gather;
mod handle;
mod mpa;
mod pdu;
mod place;
mod track;

/// A table of the NIC's that gains an entry only when its driver adds
/// one (a socket it offloads, by 4-tuple; an STag; a posted receive), and
/// is looked up per frame: hashed quickly, with a seed drawn at random per
/// table, as a NIC's flow-steering hash is keyed, not with SipHash's
/// stronger defence against chosen keys. A peer does choose half of an
/// offloaded socket's 4-tuple, but gets an entry only for a connection
/// the driver offloads. The handshakes the NIC learns from any SYN on the
/// wire stay in a `HashMap` of std's.
pub(crate) type Table<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;

pub use config::NicConfig;
pub use copy::{copy_and_crc, copy_then_crc};
pub use device::{OffloadNic, RxToken, TxToken};
pub use engine::NicEngine;
pub use handle::NicHandle;
