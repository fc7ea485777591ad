//! The operations: a device's (`ulp_ddp_dev_ops`), and a socket's once it
//! is added, typed by protocol so that each handle has only the verbs its
//! protocol has. What a device does not offload it has no operations for:
//! [`DdpDevice::iwarp`] and [`DdpDevice::tls`] are absent, as a Linux
//! `net_device` without `tlsdev_ops` has none to call.

use crate::tls::{TlsCryptoInfo, TlsDirection, TlsStart};
use crate::{
    Caps, DdpError, DdpIo, FlowId, IwarpConfig, Limits, NvmeTcpConfig, SgEntry, Sgl, SkCtx, Stag,
    StagIo, Stats, TxFpdus,
};
use std::sync::Arc;

/// What every offloading device has: its capabilities and counters, and
/// NVMe/TCP sockets added to it (`sk_add`).
pub trait DdpDevice: Send + Sync {
    /// What the device supports.
    fn limits(&self) -> Limits;
    /// (supported, active) capabilities (`get_caps`).
    fn caps(&self) -> (Caps, Caps);
    /// Turn capabilities on or off (`set_caps`); returns the active set.
    fn set_caps(&self, wanted: Caps) -> Result<Caps, DdpError>;
    fn stats(&self) -> Stats;
    /// Start offloading an NVMe/TCP socket (`sk_add`).
    fn sk_add(&self, flow: FlowId, config: &NvmeTcpConfig) -> Result<Arc<dyn NvmeTcpSk>, DdpError>;
    /// The device's iWARP operations, if it follows MPA streams.
    fn iwarp(&self) -> Option<&dyn IwarpDevice> {
        None
    }
    /// The device's TLS record offload (`tlsdev_ops`), if it has one.
    fn tls(&self) -> Option<&dyn TlsDevice> {
        None
    }
}

/// A device that follows iWARP streams: tagged placement by STag, the MPA
/// CRC, one-shot STags.
pub trait IwarpDevice: Send + Sync {
    /// Start offloading an iWARP socket from its first FPDU on.
    fn sk_add(&self, flow: FlowId, config: &IwarpConfig) -> Result<Arc<dyn IwarpSk>, DdpError>;
}

/// A device that offloads TLS records (Linux's `tlsdev_ops`, kept apart
/// from ULP DDP as Linux keeps it; see [`tls`](crate::tls)).
pub trait TlsDevice: Send + Sync {
    /// Hand the device one direction of a TLS connection (`tls_dev_add`):
    /// records from `start` on, the first of them numbered
    /// `crypto.rec_seq`. Both directions of one connection share a
    /// socket, whose mailbox carries the receive hints, record resync
    /// requests and the fragments of records kept out of the stack's
    /// ring, by stream offsets of the TCP connection. A ULP DDP socket
    /// added to the same connection afterwards runs inside the records.
    fn tls_dev_add(
        &self,
        flow: FlowId,
        dir: TlsDirection,
        crypto: &TlsCryptoInfo,
        start: TlsStart,
    ) -> Result<Arc<dyn TlsSk>, DdpError>;
}

/// What every offloaded socket has, whatever its protocol.
pub trait DdpSk: Send + Sync {
    /// The socket's mailbox: what the device did with received bytes. A
    /// ULP may keep a handle to it, to read it without a call through
    /// the socket.
    fn ctx(&self) -> &Arc<SkCtx>;
    /// What the device does for this socket. Receive offloads also follow
    /// the device's active capabilities from unit to unit; transmit
    /// digest offload is fixed here, since the ULP leaves digests to the
    /// device.
    fn offloads(&self) -> Caps;
    /// Confirm a resync request: a unit (PDU, FPDU) starts at stream
    /// offset `seq`.
    fn resync(&self, seq: u64);
    /// Map `sg` for transmit by reference ([`Caps::ZC_TX`]): returns the
    /// token under which the stack names its bytes
    /// (`PacketMeta::gather`), with offsets into `sg` as the token
    /// offsets. The device gathers from it every segment that carries
    /// them until `tx_teardown`, `sk_del` or not (the stack may still be
    /// sending when the ULP lets the socket go); the buffer must stay as
    /// it is until then.
    fn tx_setup(&self, sg: SgEntry) -> Result<u64, DdpError>;
    /// Unmap the transmit mapping `token`: the peer acknowledged its
    /// bytes, and no segment will carry them again.
    fn tx_teardown(&self, token: u64);
    /// Stop offloading the socket (`sk_del`); its mappings are dropped.
    fn sk_del(&self);
}

/// An NVMe/TCP socket: buffers mapped by command tag.
pub trait NvmeTcpSk: DdpSk {
    /// Map a tag's data to buffers (`setup`).
    fn setup(&self, io: DdpIo) -> Result<(), DdpError>;
    /// Unmap a tag (`teardown`); `teardown_done` follows in the mailbox.
    fn teardown(&self, tag: u16);
}

/// An iWARP socket: tagged buffers (STags), posted receives, and tagged
/// messages the device frames.
pub trait IwarpSk: DdpSk {
    /// Map a tagged buffer: tagged segments addressed to it may be placed
    /// from now on (a registration).
    fn stag_setup(&self, io: StagIo) -> Result<(), DdpError>;
    /// One-shot initiation: map a tagged buffer that goes live when the
    /// Send advertising it, the FPDU at stream offset `send_at`, leaves,
    /// and that the peer's close frees (reported through the mailbox).
    fn stag_advertise(&self, io: StagIo, send_at: u64) -> Result<(), DdpError>;
    /// Unmap a tagged buffer (a local invalidate). Unknown STags are
    /// ignored: the peer may have closed it first.
    fn stag_invalidate(&self, stag: Stag);
    /// Map a posted receive buffer: the payload of the untagged Send with
    /// message sequence number `msn` (queue 0) lands in `sgl` at its MO,
    /// never past its end. The device forgets the mapping once that
    /// message, or a later one, has gone by.
    fn recv_setup(&self, msn: u32, sgl: Sgl) -> Result<(), DdpError>;
    /// Map a tagged message that the device cuts into FPDUs itself (see
    /// [`TxFpdus`]): the token offsets are offsets into the framed
    /// message, and the device writes every octet of it, each FPDU's
    /// length, header, payload, pad and CRC field, into the segments that
    /// carry them, as [`tx_setup`](DdpSk::tx_setup)'s mappings are
    /// gathered and torn down.
    fn tx_setup_fpdus(&self, fpdus: Arc<TxFpdus>) -> Result<u64, DdpError>;
}

/// A TLS connection whose records the device follows.
pub trait TlsSk: Send + Sync {
    /// The connection's mailbox: decrypted ranges, record resync
    /// requests, guesses and the fragments kept out of the ring.
    fn ctx(&self) -> &Arc<SkCtx>;
    /// Answer a record resync request (`tls_dev_resync`): the record
    /// numbered `rec_seq` starts at `at`.
    fn tls_dev_resync(&self, at: TlsStart, rec_seq: u64);
    /// Take one direction back (`tls_dev_del`); the socket goes with the
    /// last. Transmit records already queued are still encrypted.
    fn tls_dev_del(&self, dir: TlsDirection);
}
