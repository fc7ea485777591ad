//! TLS record offload in the contract, shaped like Linux's `tls_device`
//! (`include/net/tls.h`, `tlsdev_ops`): after the handshake, which stays
//! in software, the driver hands the device one direction's crypto state
//! ([`TlsCryptoInfo`], `tls12_crypto_info_aes_gcm_*`) and the stream
//! offset where the next record starts (`start_offload_tcp_sn`).
//!
//! Receive: the device follows records through the stream, decrypts and
//! authenticates each one it sees whole and in order, and says so per
//! range ([`HintFlags::DECRYPTED`](crate::HintFlags::DECRYPTED) on body
//! bytes, [`HintFlags::TAG_OK`](crate::HintFlags::TAG_OK) on a verified
//! tag, as `skb->decrypted` does). After a gap over a record header it
//! finds records again by their headers. Where it knew the lost header's
//! place and number it may guess the next one's and let that record's tag
//! prove it, noting the guess ([`SkCtx::push_guess`](crate::SkCtx::push_guess))
//! so that software can undo what it decrypted under a wrong number;
//! otherwise it asks the ULP to confirm a header (`resync_request` in the
//! socket's mailbox), and the ULP answers with the record's sequence
//! number ([`TlsSk::tls_dev_resync`](crate::TlsSk::tls_dev_resync),
//! `tls_dev_resync`).
//!
//! Transmit: software frames each record in plaintext (header, content,
//! content type, sixteen bytes left for the tag) and the device encrypts
//! it and writes the tag, on the first transmission and on every
//! retransmission alike.
//!
//! The layer inside: a ULP DDP socket added (`sk_add`) to a connection
//! whose records the device follows runs on their plaintext, its stream
//! offsets counting the content of application data records
//! ([`TlsStart::inner`]). The device places and digests inside records it
//! decrypts, and digests on the plaintext before it encrypts. Records are
//! taken to be unpadded, as every TLS stack NVMe/TCP runs over sends them;
//! at the first that is not, the device stops following the layer inside
//! and vouches for nothing in that record.

use zeroize::Zeroizing;

/// The AEADs TLS 1.3 offload carries: the two NVMe/TCP uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TlsCipher {
    /// `TLS_CIPHER_AES_GCM_128` (TLS_AES_128_GCM_SHA256).
    Aes128Gcm,
    /// `TLS_CIPHER_AES_GCM_256` (TLS_AES_256_GCM_SHA384).
    Aes256Gcm,
}

impl TlsCipher {
    pub const fn key_len(self) -> usize {
        match self {
            TlsCipher::Aes128Gcm => 16,
            TlsCipher::Aes256Gcm => 32,
        }
    }
}

/// Where a direction's offload starts: the stream offset of a record's
/// header (`start_offload_tcp_sn`), and the stream offset, in the layer
/// the records carry (NVMe/TCP's PDUs), of that record's first content
/// byte. The second is ours: a device that also follows the layer inside
/// counts its offsets over the content of application data records, as
/// the ULP does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TlsStart {
    pub tcp: u64,
    pub inner: u64,
}

/// Which way a connection's records go (`TLS_OFFLOAD_CTX_DIR_RX`/`_TX`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TlsDirection {
    Rx,
    Tx,
}

/// One direction's record protection, as Linux's
/// `tls12_crypto_info_aes_gcm_*` carries it: the TLS 1.3 write IV is
/// `salt` then `iv`, and a record's nonce is that IV with its sequence
/// number XORed into the last eight bytes (RFC 8446, 5.3).
#[derive(Clone)]
pub struct TlsCryptoInfo {
    pub cipher: TlsCipher,
    pub key: Zeroizing<Vec<u8>>,
    pub salt: [u8; 4],
    pub iv: [u8; 8],
    /// Sequence number of the record at the offload's start.
    pub rec_seq: u64,
}

impl TlsCryptoInfo {
    /// The nonce of record `seq`.
    pub fn nonce(&self, seq: u64) -> [u8; 12] {
        let mut n = [0u8; 12];
        n[..4].copy_from_slice(&self.salt);
        n[4..].copy_from_slice(&(u64::from_be_bytes(self.iv) ^ seq).to_be_bytes());
        n
    }
}

impl std::fmt::Debug for TlsCryptoInfo {
    /// Never the key.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsCryptoInfo")
            .field("cipher", &self.cipher)
            .field("rec_seq", &self.rec_seq)
            .finish_non_exhaustive()
    }
}

/// A record's framing as both sides of the contract read it (RFC 8446,
/// 5.2): a five-byte header, the encrypted inner plaintext, a 16-byte tag.
pub mod record {
    /// opaque_type, legacy_record_version, length.
    pub const HEADER: usize = 5;
    /// The AES-GCM tag.
    pub const TAG: usize = 16;
    /// application_data: the only outer type after the handshake.
    pub const APPLICATION_DATA: u8 = 23;
    pub const LEGACY_VERSION: [u8; 2] = [3, 3];
    /// The longest a record's body may be: 2^14 of plaintext, the inner
    /// content type, 255 more (RFC 8446, 5.2).
    pub const MAX_BODY: usize = (1 << 14) + 256;

    /// The body length of the record whose header starts `bytes`, if it
    /// could be one after the handshake: application_data, version 3.3,
    /// and a length a receiver would accept (at least the tag and a
    /// content type).
    pub fn plausible(bytes: &[u8]) -> Option<usize> {
        let h = bytes.get(..HEADER)?;
        let len = usize::from(u16::from_be_bytes([h[3], h[4]]));
        (h[0] == APPLICATION_DATA
            && h[1..3] == LEGACY_VERSION
            && (TAG + 1..=MAX_BODY).contains(&len))
        .then_some(len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_nonce_is_the_iv_with_the_sequence_number_xored_in() {
        // RFC 8448's server write IV (5d313eb2671276ee13000b30), split as
        // Linux splits it; record 1's nonce ends ...13000b31.
        let info = TlsCryptoInfo {
            cipher: TlsCipher::Aes128Gcm,
            key: Zeroizing::new(vec![0; 16]),
            salt: [0x5d, 0x31, 0x3e, 0xb2],
            iv: [0x67, 0x12, 0x76, 0xee, 0x13, 0x00, 0x0b, 0x30],
            rec_seq: 0,
        };
        assert_eq!(
            info.nonce(0)[..],
            [0x5d, 0x31, 0x3e, 0xb2, 0x67, 0x12, 0x76, 0xee, 0x13, 0, 0x0b, 0x30]
        );
        assert_eq!(info.nonce(1)[11], 0x31);
        assert!(!format!("{info:?}").contains("key:"));
    }

    #[test]
    fn headers_are_plausible_only_as_a_receiver_would_take_them() {
        assert_eq!(record::plausible(&[23, 3, 3, 0, 17]), Some(17));
        assert_eq!(record::plausible(&[23, 3, 3, 0x41, 0]), Some(record::MAX_BODY));
        assert_eq!(record::plausible(&[23, 3, 3, 0x41, 1]), None, "too long");
        assert_eq!(record::plausible(&[23, 3, 3, 0, 16]), None, "no room for a content type");
        assert_eq!(record::plausible(&[22, 3, 3, 0, 40]), None);
        assert_eq!(record::plausible(&[23, 3, 1, 0, 40]), None);
        assert_eq!(record::plausible(&[23, 3, 3, 0]), None, "cut short");
    }
}
