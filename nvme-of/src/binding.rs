//! What a transport binding tells the core: how host data is described,
//! how much a capsule may carry, how large a queue may be, and how the
//! discovery log names the transport.

use crate::nvme::log;

/// How a command's data that is not in the capsule is described (NVMe
/// over Fabrics, "SGL Descriptor Types").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DataSgl {
    /// Transport SGL Data Block (0x5A): the transport moves the data
    /// (C2HData, R2T + H2CData on TCP).
    Transport,
    /// Keyed SGL Data Block (0x4x): the controller reads and writes the
    /// host's memory by key (RDMA Read and Write).
    Keyed,
}

/// The transport-specific facts of one binding.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Binding {
    /// TRTYPE in discovery log entries.
    pub trtype: u8,
    /// TSAS bytes of discovery log entries.
    pub tsas: [u8; 3],
    /// TREQ of discovery log entries.
    pub treq: u8,
    pub data_sgl: DataSgl,
    /// In-capsule data the admin queue and Fabrics commands accept.
    pub admin_inline: usize,
    /// Most entries a queue may have on this transport (CAP.MQES + 1).
    pub max_queue_size: u16,
}

impl Binding {
    /// NVMe/TCP (NVMe/TCP Transport Specification 1.0).
    pub const TCP: Binding = Binding {
        trtype: log::TRTYPE_TCP,
        tsas: [0; 3],
        treq: log::TREQ_DISABLE_SQFLOW,
        data_sgl: DataSgl::Transport,
        admin_inline: 8192,
        max_queue_size: 4096,
    };

    /// NVMe/RDMA (NVMe over Fabrics RDMA Transport Specification): no
    /// in-capsule data on the admin queue (Linux posts 64-byte receives
    /// there), 128 entries per queue at most, as Linux offers; TSAS says
    /// reliable connected, no provider type, RDMA_CM.
    pub const RDMA: Binding = Binding {
        trtype: log::TRTYPE_RDMA,
        tsas: [1, 1, 1],
        treq: 0,
        data_sgl: DataSgl::Keyed,
        admin_inline: 0,
        max_queue_size: 128,
    };

    pub fn is_rdma(&self) -> bool {
        self.data_sgl == DataSgl::Keyed
    }
}
