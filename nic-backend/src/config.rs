//! What a NIC offers and what it starts with: [`NicConfig`], fixed when the
//! device is made, its active capabilities changed later through the
//! contract.
//!
//! Data only: it must never hold state that changes while frames pass.

use ulp_ddp::{Caps, Limits};

/// What a NIC offers and what it starts with.
#[derive(Debug, Clone, Copy)]
pub struct NicConfig {
    /// Capabilities the NIC has.
    pub hw: Caps,
    /// Capabilities turned on.
    pub active: Caps,
    pub limits: Limits,
    /// TCP checksum offload, receive and transmit.
    pub checksum: bool,
    /// Keep placed bytes out of the stack's receive ring (header/data
    /// split). Off, placed bytes reach the ring too, and are written twice.
    pub zero_copy: bool,
}

impl Default for NicConfig {
    /// A ConnectX-7-like device: up to 128 SG entries, offload from 32 KiB,
    /// tags below the queue size, 4096 STags per iWARP socket, everything
    /// on; and, unlike ConnectX-7, placement inside TLS.
    fn default() -> Self {
        Self {
            hw: Caps::ALL,
            active: Caps::ALL,
            limits: Limits {
                max_ddp_sgl_len: 128,
                io_threshold: 32 << 10,
                tls: true,
                full_ccid_range: false,
                max_stags: 4096,
            },
            checksum: true,
            zero_copy: true,
        }
    }
}
