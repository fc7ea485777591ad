//! Work counters a transport binding keeps, so that NVMe/TCP and NVMe/RDMA
//! report the copy and CRC work an offload saved in the same terms, and
//! the integrity checks both can be asked for.

/// What the upper layer did on its side of an offload, per queue or summed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct UlpStats {
    /// Data bytes received in data PDUs.
    pub data_bytes: u64,
    /// Of those, bytes copied out of the receive stream into buffers.
    pub copy_bytes: u64,
    /// Bytes not copied because the device had placed them.
    pub placed_bytes: u64,
    /// Received data bytes whose digest was computed in software.
    pub crc_bytes: u64,
    /// Received data bytes whose digest the device vouched for.
    pub hw_crc_bytes: u64,
    /// Data PDUs that should have been offloaded but needed software work.
    pub fallback_pdus: u64,
    /// Driver-device control calls and notices: setup, teardown,
    /// teardown_done, resync.
    pub control_calls: u64,
    /// Transfers mapped for placement.
    pub ddp_ios: u64,
    /// Resyncs confirmed to the device.
    pub resyncs: u64,
    /// Times offload stopped (a data PDU it should have handled came with
    /// no hint at all, as after a lost header) and then resumed, and the
    /// PDUs of any kind that passed meanwhile.
    pub offload_gaps: u64,
    pub offload_gap_pdus: u64,
    /// TLS: ciphertext bytes of received records decrypted in software.
    pub tls_decrypt_bytes: u64,
}

impl UlpStats {
    pub fn add(&mut self, o: &UlpStats) {
        self.data_bytes += o.data_bytes;
        self.copy_bytes += o.copy_bytes;
        self.placed_bytes += o.placed_bytes;
        self.crc_bytes += o.crc_bytes;
        self.hw_crc_bytes += o.hw_crc_bytes;
        self.fallback_pdus += o.fallback_pdus;
        self.control_calls += o.control_calls;
        self.ddp_ios += o.ddp_ios;
        self.resyncs += o.resyncs;
        self.offload_gaps += o.offload_gaps;
        self.offload_gap_pdus += o.offload_gap_pdus;
        self.tls_decrypt_bytes += o.tls_decrypt_bytes;
    }

    /// What was counted since `earlier`, a reading of the same counters.
    pub fn since(&self, earlier: &UlpStats) -> UlpStats {
        let d = |now: u64, then: u64| now.saturating_sub(then);
        UlpStats {
            data_bytes: d(self.data_bytes, earlier.data_bytes),
            copy_bytes: d(self.copy_bytes, earlier.copy_bytes),
            placed_bytes: d(self.placed_bytes, earlier.placed_bytes),
            crc_bytes: d(self.crc_bytes, earlier.crc_bytes),
            hw_crc_bytes: d(self.hw_crc_bytes, earlier.hw_crc_bytes),
            fallback_pdus: d(self.fallback_pdus, earlier.fallback_pdus),
            control_calls: d(self.control_calls, earlier.control_calls),
            ddp_ios: d(self.ddp_ios, earlier.ddp_ios),
            resyncs: d(self.resyncs, earlier.resyncs),
            offload_gaps: d(self.offload_gaps, earlier.offload_gaps),
            offload_gap_pdus: d(self.offload_gap_pdus, earlier.offload_gap_pdus),
            tls_decrypt_bytes: d(self.tls_decrypt_bytes, earlier.tls_decrypt_bytes),
        }
    }

    /// Share of received data bytes the device placed.
    pub fn offload_share(&self) -> f64 {
        if self.data_bytes == 0 { 0.0 } else { self.placed_bytes as f64 / self.data_bytes as f64 }
    }

    /// PDUs that passed, on average, between offload stopping and resuming.
    pub fn resync_latency_pdus(&self) -> f64 {
        if self.offload_gaps == 0 {
            0.0
        } else {
            self.offload_gap_pdus as f64 / self.offload_gaps as f64
        }
    }
}

/// Counters of the transmit path's work.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TxStats {
    /// Data bytes copied out of command buffers.
    pub data_bytes: u64,
    /// Data bytes whose digest was computed here.
    pub crc_bytes: u64,
    /// Data bytes whose digest was left to the NIC.
    pub crc_offloaded_bytes: u64,
    /// Data bytes queued by reference: gathered from the command's
    /// buffer by the NIC, never copied here.
    pub zero_copy_bytes: u64,
    /// TLS: plaintext bytes of sent records encrypted in software (the
    /// queue's whole output, not only data).
    pub tls_encrypt_bytes: u64,
}

impl TxStats {
    pub fn add(&mut self, o: &TxStats) {
        self.data_bytes += o.data_bytes;
        self.crc_bytes += o.crc_bytes;
        self.crc_offloaded_bytes += o.crc_offloaded_bytes;
        self.zero_copy_bytes += o.zero_copy_bytes;
        self.tls_encrypt_bytes += o.tls_encrypt_bytes;
    }
}

/// The integrity checks a host asks for: NVMe/TCP's header and data
/// digests (the DGST field of ICReq/ICResp). NVMe/RDMA has one CRC per
/// FPDU instead (MPA CRC, over header and data), asked for with `data`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub struct Digests {
    /// HDGST_ENABLE, bit 0.
    pub header: bool,
    /// DDGST_ENABLE, bit 1.
    pub data: bool,
}

impl Digests {
    pub const NONE: Digests = Digests { header: false, data: false };

    pub const fn from_bits(v: u8) -> Self {
        Self { header: v & 1 != 0, data: v & 2 != 0 }
    }

    pub const fn bits(self) -> u8 {
        self.header as u8 | (self.data as u8) << 1
    }

    pub const fn header_len(self) -> usize {
        if self.header { 4 } else { 0 }
    }
}
