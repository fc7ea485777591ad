//! The TLS 1.3 record layer once the handshake is done (RFC 8446, 5.2),
//! as Linux splits it: the handshake in a TLS library (tlshd and GnuTLS
//! there, OpenSSL here), the records of application data in kTLS. The split
//! is what lets a NIC take the records over (`tls_device`): the library
//! hands over each direction's traffic secret, and from then on a record
//! is an AEAD seal or open with that direction's key and nonce, whoever
//! does it.
//!
//! The AEAD is OpenSSL's AES-GCM, the key and IV come from the traffic
//! secret by HKDF-Expand-Label (RFC 8446, 7.1 and 7.3) with the `hkdf`
//! crate; here is only the framing around them.

use hkdf::Hkdf;
use openssl::cipher::{Cipher, CipherRef};
use openssl::cipher_ctx::CipherCtx;
use openssl::error::ErrorStack;
use sha2::{Sha256, Sha384};
use zeroize::Zeroizing;

use super::error::TlsError;
use ulp_ddp::{TlsCipher, TlsCryptoInfo};

/// A TLSCiphertext's header: opaque_type, legacy_record_version, length.
pub(crate) const HEADER: usize = 5;
/// The AEAD tag of both suites.
pub(crate) const TAG: usize = 16;
/// The most plaintext a record carries (2^14).
pub(super) const MAX_PLAIN: usize = 16 * 1024;
/// The longest ciphertext a record may carry: 2^14 + 256 (RFC 8446, 5.2).
const MAX_CIPHERTEXT: usize = MAX_PLAIN + 256;
/// Records one key may protect: AES-GCM's margin runs out at about 2^24.5
/// full records (RFC 8446, 5.5). Without KeyUpdate (which Linux's kTLS
/// lacks as well) the connection ends there, and the host reconnects.
const MAX_RECORDS: u64 = 1 << 24;

const APPLICATION_DATA: u8 = 23;
/// The record type of a handshake message: the first byte a ClientHello
/// arrives in. An ICReq's is 00h.
pub(crate) const HANDSHAKE_RECORD: u8 = 22;
const ALERT: u8 = 21;
/// The alert descriptions that end nothing by themselves (RFC 8446, 6.1).
const CLOSE_NOTIFY: u8 = 0;
const USER_CANCELED: u8 = 90;
const HANDSHAKE: u8 = 22;
const LEGACY_VERSION: [u8; 2] = [3, 3];
/// A post-handshake NewSessionTicket (RFC 8446, 4.6.1): a client may let
/// it go, as we never resume.
const NEW_SESSION_TICKET: u8 = 4;

/// The two suites NVMe/TCP uses: the NVMe/TCP specification pairs SHA-256
/// PSKs (32 bytes) with TLS_AES_128_GCM_SHA256 and SHA-384 ones (48 bytes)
/// with TLS_AES_256_GCM_SHA384.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Suite {
    Aes128GcmSha256,
    Aes256GcmSha384,
}

impl Suite {
    /// The suite a PSK of this length goes with.
    pub(super) fn for_key(key: &[u8]) -> Option<Self> {
        match key.len() {
            32 => Some(Suite::Aes128GcmSha256),
            48 => Some(Suite::Aes256GcmSha384),
            _ => None,
        }
    }

    pub(super) fn name(self) -> &'static str {
        match self {
            Suite::Aes128GcmSha256 => "TLS_AES_128_GCM_SHA256",
            Suite::Aes256GcmSha384 => "TLS_AES_256_GCM_SHA384",
        }
    }

    /// Its name as a C string, for OpenSSL.
    pub(super) fn c_name(self) -> &'static [u8] {
        match self {
            Suite::Aes128GcmSha256 => b"TLS_AES_128_GCM_SHA256\0",
            Suite::Aes256GcmSha384 => b"TLS_AES_256_GCM_SHA384\0",
        }
    }

    /// Its two-byte code point (RFC 8446, Appendix B.4).
    pub(super) fn id(self) -> [u8; 2] {
        match self {
            Suite::Aes128GcmSha256 => [0x13, 0x01],
            Suite::Aes256GcmSha384 => [0x13, 0x02],
        }
    }

    /// The suite of an OpenSSL cipher name, if it is one of ours.
    pub(super) fn from_name(name: &str) -> Option<Self> {
        [Suite::Aes128GcmSha256, Suite::Aes256GcmSha384].into_iter().find(|s| s.name() == name)
    }

    fn cipher(self) -> &'static CipherRef {
        match self {
            Suite::Aes128GcmSha256 => Cipher::aes_128_gcm(),
            Suite::Aes256GcmSha384 => Cipher::aes_256_gcm(),
        }
    }

    fn key_len(self) -> usize {
        match self {
            Suite::Aes128GcmSha256 => 16,
            Suite::Aes256GcmSha384 => 32,
        }
    }

    /// The AEAD as the offload contract names it.
    fn offload_cipher(self) -> TlsCipher {
        match self {
            Suite::Aes128GcmSha256 => TlsCipher::Aes128Gcm,
            Suite::Aes256GcmSha384 => TlsCipher::Aes256Gcm,
        }
    }

    /// GCM's counter mode alone.
    fn ctr(self) -> &'static CipherRef {
        match self {
            Suite::Aes128GcmSha256 => Cipher::aes_128_ctr(),
            Suite::Aes256GcmSha384 => Cipher::aes_256_ctr(),
        }
    }
}

/// One direction's record protection: what a NIC would be handed.
pub(crate) struct Direction {
    pub suite: Suite,
    pub key: Zeroizing<Vec<u8>>,
    pub iv: [u8; 12],
    /// The sequence number of the next record.
    pub seq: u64,
    /// OpenSSL's AES-GCM: the key is set once (`keyed`), each record sets
    /// its nonce.
    ctx: CipherCtx,
    keyed: bool,
}

fn record_error(e: ErrorStack) -> TlsError {
    TlsError::Record(e.to_string())
}

impl Direction {
    /// The keys of `secret`, a direction's application traffic secret,
    /// from its first record on.
    pub fn from_secret(suite: Suite, secret: &[u8]) -> Result<Self, TlsError> {
        let mut key = Zeroizing::new(vec![0u8; suite.key_len()]);
        let mut iv = [0u8; 12];
        let (k, i) = (label_info("key", key.len()), label_info("iv", iv.len()));
        let expanded = match suite {
            Suite::Aes128GcmSha256 => Hkdf::<Sha256>::from_prk(secret)
                .ok()
                .and_then(|h| h.expand(&k, &mut key).and(h.expand(&i, &mut iv)).ok()),
            Suite::Aes256GcmSha384 => Hkdf::<Sha384>::from_prk(secret)
                .ok()
                .and_then(|h| h.expand(&k, &mut key).and(h.expand(&i, &mut iv)).ok()),
        };
        expanded.ok_or_else(|| TlsError::Setup("a traffic secret of the wrong length".into()))?;
        let ctx = CipherCtx::new().map_err(record_error)?;
        Ok(Self { suite, key, iv, seq: 0, ctx, keyed: false })
    }

    /// The per-record nonce: the IV with the sequence number XORed into
    /// its last eight bytes (RFC 8446, 5.3).
    fn nonce(&self) -> [u8; 12] {
        self.nonce_of(self.seq)
    }

    fn nonce_of(&self, seq: u64) -> [u8; 12] {
        let mut n = self.iv;
        for (b, s) in n[4..].iter_mut().zip(seq.to_be_bytes()) {
            *b ^= s;
        }
        n
    }

    /// What a NIC is handed to take this direction over from the next
    /// record on (`tls12_crypto_info_aes_gcm_*`).
    pub fn crypto_info(&self) -> TlsCryptoInfo {
        let (salt, iv) = self.iv.split_at(4);
        TlsCryptoInfo {
            cipher: self.suite.offload_cipher(),
            key: self.key.clone(),
            salt: salt.try_into().unwrap_or_default(),
            iv: iv.try_into().unwrap_or_default(),
            rec_seq: self.seq,
        }
    }

    /// Count a record the NIC sealed or opened: the next nonce moves on.
    pub fn skip(&mut self) -> Result<(), TlsError> {
        self.check_seq()?;
        self.seq += 1;
        Ok(())
    }

    fn check_seq(&self) -> Result<(), TlsError> {
        if self.seq >= MAX_RECORDS {
            return Err(TlsError::Record(format!(
                "{MAX_RECORDS} records under one key, as many as AES-GCM may protect (RFC 8446, 5.5): the connection must start over"
            )));
        }
        Ok(())
    }

    /// XOR into `buf` the next record's keystream from body byte `pos`:
    /// GCM's counter mode alone, whose first body block is counter 2
    /// (NIST SP 800-38D, 7.1). It turns bytes a NIC decrypted back into
    /// the ciphertext the tag covers.
    fn keystream(&self, seq: u64, pos: usize, buf: &mut [u8]) -> Result<(), TlsError> {
        let mut iv = [0u8; 16];
        iv[..12].copy_from_slice(&self.nonce_of(seq));
        iv[12..].copy_from_slice(&(2 + (pos / 16) as u32).to_be_bytes());
        let mut ctx = CipherCtx::new().map_err(record_error)?;
        ctx.encrypt_init(Some(self.suite.ctr()), Some(&self.key), Some(&iv))
            .map_err(record_error)?;
        let skip = pos % 16;
        ctx.cipher_update_inplace(&mut [0u8; 16][..skip], skip).map_err(record_error)?;
        ctx.cipher_update_inplace(buf, buf.len()).map_err(record_error)?;
        Ok(())
    }

    /// Ready the cipher for the next record, its header `aad`. A direction
    /// only ever seals or only ever opens.
    fn start(&mut self, encrypt: bool, aad: &[u8]) -> Result<(), TlsError> {
        self.check_seq()?;
        let nonce = self.nonce();
        let (cipher, key) = match self.keyed {
            // Only the nonce changes.
            true => (None, None),
            false => (Some(self.suite.cipher()), Some(&self.key[..])),
        };
        match encrypt {
            true => self.ctx.encrypt_init(cipher, key, Some(&nonce)),
            false => self.ctx.decrypt_init(cipher, key, Some(&nonce)),
        }
        .map_err(record_error)?;
        self.keyed = true;
        self.ctx.cipher_update(aad, None).map_err(record_error)?;
        Ok(())
    }

    /// Seal `plain` (at most [`MAX_PLAIN`]) as one application data record
    /// appended to `out`.
    pub fn seal(&mut self, plain: &[u8], out: &mut Vec<u8>) -> Result<(), TlsError> {
        if plain.len() > MAX_PLAIN {
            return Err(TlsError::Record(format!("{} bytes for one record", plain.len())));
        }
        self.seal_inner(&[plain, &[APPLICATION_DATA]], out)
    }

    /// Seal an inner plaintext (content, content type, any padding), given
    /// in pieces, as one record appended to `out`: the pieces are copied in
    /// and encrypted where they lie.
    fn seal_inner(&mut self, inner: &[&[u8]], out: &mut Vec<u8>) -> Result<(), TlsError> {
        let len = inner.iter().map(|p| p.len()).sum::<usize>();
        let at = out.len();
        out.push(APPLICATION_DATA);
        out.extend_from_slice(&LEGACY_VERSION);
        out.extend_from_slice(&((len + TAG) as u16).to_be_bytes());
        let sealed = (|| {
            self.start(true, &out[at..at + HEADER])?;
            for piece in inner {
                out.extend_from_slice(piece);
            }
            let body = &mut out[at + HEADER..];
            self.ctx.cipher_update_inplace(body, len).map_err(record_error)?;
            self.ctx.cipher_final(&mut []).map_err(record_error)?;
            let mut tag = [0u8; TAG];
            self.ctx.tag(&mut tag).map_err(record_error)?;
            out.extend_from_slice(&tag);
            Ok(())
        })();
        if sealed.is_err() {
            out.truncate(at);
        }
        self.seq += 1;
        sealed
    }

    /// Open the record `record` (header and body) onto the end of `plain`:
    /// its content type, the inner plaintext (content and padding) left
    /// there. Nothing is left there if it does not authenticate.
    fn open(&mut self, record: &[u8], plain: &mut Vec<u8>) -> Result<u8, TlsError> {
        let (header, body) = record.split_at(HEADER);
        let (sealed, tag) = body.split_at(body.len() - TAG);
        // A GCM record's inner plaintext is its ciphertext's length: at
        // most 2^14 bytes and the content type (RFC 8446, 5.4).
        if sealed.len() > MAX_PLAIN + 1 {
            return Err(TlsError::Record(format!("record_overflow: {} bytes", sealed.len())));
        }
        let at = plain.len();
        plain.extend_from_slice(sealed);
        let opened = (|| {
            self.start(false, header)?;
            self.ctx.set_tag(tag).map_err(record_error)?;
            self.ctx.cipher_update_inplace(&mut plain[at..], sealed.len()).map_err(record_error)?;
            self.ctx
                .cipher_final(&mut [])
                .map_err(|_| TlsError::Record("a record that does not authenticate".into()))
        })();
        self.seq += 1;
        if let Err(e) = opened {
            plain.truncate(at);
            return Err(e);
        }
        // The content type is the last byte that is not padding.
        let Some(end) = plain[at..].iter().rposition(|&b| b != 0) else {
            plain.truncate(at);
            return Err(TlsError::Record("a record with no content type".into()));
        };
        let kind = plain[at + end];
        plain.truncate(at + end);
        Ok(kind)
    }
}

/// HKDF-Expand-Label's info for `label`, no context, `len` bytes out
/// (RFC 8446, 7.1).
fn label_info(label: &str, len: usize) -> Vec<u8> {
    let full = format!("tls13 {label}");
    let mut info = Vec::with_capacity(4 + full.len());
    info.extend_from_slice(&(len as u16).to_be_bytes());
    info.push(full.len() as u8);
    info.extend_from_slice(full.as_bytes());
    info.push(0);
    info
}

/// The work the record layer did in software.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct RecordStats {
    /// Ciphertext bytes of records opened (decrypted and authenticated).
    pub opened_bytes: u64,
    /// Inner plaintext bytes sealed (encrypted).
    pub sealed_bytes: u64,
    /// Body bytes a NIC decrypted in records it could not vouch for,
    /// encrypted back before the record was opened here.
    pub reencrypted_bytes: u64,
    /// Body bytes of records a NIC opened and authenticated, and inner
    /// plaintext bytes of records framed for a NIC to seal.
    pub nic_opened_bytes: u64,
    pub nic_sealed_bytes: u64,
}

/// Both directions of a connection's records after the handshake.
pub(crate) struct Records {
    pub rx: Direction,
    pub tx: Direction,
    pub stats: RecordStats,
    /// Received bytes of a record not yet whole.
    partial: Vec<u8>,
    /// The peer sent close_notify: nothing after it is read.
    pub peer_done: bool,
    /// Application data bytes received and sent so far: the stream
    /// offsets, in the layer the records carry, of the next content byte
    /// each way.
    pub rx_content: u64,
    pub tx_content: u64,
}

impl Records {
    pub fn new(rx: Direction, tx: Direction) -> Self {
        Self {
            rx,
            tx,
            stats: RecordStats::default(),
            partial: Vec::new(),
            peer_done: false,
            rx_content: 0,
            tx_content: 0,
        }
    }

    /// Ciphertext from the peer: the application data of every whole record
    /// in it is appended to `plain`. What was opened before a failure stays
    /// in `plain`.
    pub fn receive(&mut self, mut input: &[u8], plain: &mut Vec<u8>) -> Result<(), TlsError> {
        while !input.is_empty() && !self.peer_done {
            // Whole records straight from the input.
            if self.partial.is_empty()
                && let Some(n) = record_len(input)?
                && n <= input.len()
            {
                self.take(&input[..n], plain)?;
                input = &input[n..];
                continue;
            }
            // A record cut short waits in `partial` for the rest.
            let need = record_len(&self.partial)?.unwrap_or(HEADER) - self.partial.len();
            let k = need.min(input.len());
            self.partial.extend_from_slice(&input[..k]);
            input = &input[k..];
            if record_len(&self.partial)? == Some(self.partial.len()) {
                let record = std::mem::take(&mut self.partial);
                let taken = self.take(&record, plain);
                // Its room is kept for the next one.
                self.partial = record;
                self.partial.clear();
                taken?;
            }
        }
        Ok(())
    }

    /// Bytes that complete the record cut short in `partial`, if one is
    /// (the rest of its header first).
    pub fn partial_need(&self) -> Result<Option<usize>, TlsError> {
        if self.partial.is_empty() {
            return Ok(None);
        }
        Ok(Some(record_len(&self.partial)?.unwrap_or(HEADER) - self.partial.len()))
    }

    /// Whether what was received ends on a record boundary: where a NIC
    /// may take over.
    pub fn at_boundary(&self) -> bool {
        self.partial.is_empty()
    }

    /// One whole record, its body bytes in `decrypted` (ranges of the
    /// body) decrypted by a NIC that could not vouch for the record:
    /// `restore` puts back into a copy of it the bytes the NIC kept out of
    /// the ring, the decrypted ones are encrypted back, and the record is
    /// opened here.
    /// `nic_seq` is the number the NIC decrypted under, if not the
    /// record's own (a guess that failed).
    pub fn take_mixed(
        &mut self,
        record: &[u8],
        decrypted: &[(usize, usize)],
        nic_seq: Option<u64>,
        restore: impl FnOnce(&mut [u8]),
        plain: &mut Vec<u8>,
    ) -> Result<(), TlsError> {
        if decrypted.is_empty() {
            return self.take(record, plain);
        }
        let mut copy = std::mem::take(&mut self.partial);
        copy.extend_from_slice(record);
        restore(&mut copy);
        let mut taken = Ok(());
        for &(a, b) in decrypted {
            let seq = nic_seq.unwrap_or(self.rx.seq);
            taken =
                taken.and_then(|()| self.rx.keystream(seq, a, &mut copy[HEADER + a..HEADER + b]));
            self.stats.reencrypted_bytes += (b - a) as u64;
        }
        let taken = taken.and_then(|()| self.take(&copy, plain));
        copy.clear();
        self.partial = copy;
        taken
    }

    /// A record a NIC opened and authenticated, its inner plaintext
    /// `inner` (content, content type, padding) where it lies. Returns
    /// the length of its application data, for the caller to deliver
    /// from there; anything else is taken here.
    pub fn take_opened(&mut self, inner: &[u8]) -> Result<Option<usize>, TlsError> {
        self.rx.skip()?;
        self.stats.nic_opened_bytes += (inner.len() + TAG) as u64;
        if inner.len() > MAX_PLAIN + 1 {
            return Err(TlsError::Record(format!("record_overflow: {} bytes", inner.len())));
        }
        let Some(end) = inner.iter().rposition(|&b| b != 0) else {
            return Err(TlsError::Record("a record with no content type".into()));
        };
        match inner[end] {
            APPLICATION_DATA => {
                self.rx_content += end as u64;
                Ok(Some(end))
            }
            kind => self.other(kind, &inner[..end]).map(|()| None),
        }
    }

    /// Frame the `n` bytes of plaintext at `out[HEADER..]` (at most
    /// [`MAX_PLAIN`]) as an application data record for a NIC to seal:
    /// the header before them, their content type and room for the tag
    /// after. Returns the record's length.
    pub fn frame(&mut self, n: usize, out: &mut [u8]) -> Result<usize, TlsError> {
        let len = HEADER + n + 1 + TAG;
        if out.len() < len {
            return Err(TlsError::Record(format!("{n} bytes for one record")));
        }
        let (header, trailer) = self.frame_around(n)?;
        out[..HEADER].copy_from_slice(&header);
        out[HEADER + n..len].copy_from_slice(&trailer);
        Ok(len)
    }

    /// The header and trailer (content type, room for the tag) of the
    /// next application data record, of `n` content bytes (at most
    /// [`MAX_PLAIN`]), for a NIC to seal: the caller puts them around the
    /// content.
    pub fn frame_around(&mut self, n: usize) -> Result<([u8; HEADER], [u8; 1 + TAG]), TlsError> {
        if n > MAX_PLAIN {
            return Err(TlsError::Record(format!("{n} bytes for one record")));
        }
        self.tx.skip()?;
        let mut header = [APPLICATION_DATA, LEGACY_VERSION[0], LEGACY_VERSION[1], 0, 0];
        header[3..].copy_from_slice(&((n + 1 + TAG) as u16).to_be_bytes());
        let mut trailer = [0u8; 1 + TAG];
        trailer[0] = APPLICATION_DATA;
        self.stats.nic_sealed_bytes += n as u64 + 1;
        self.tx_content += n as u64;
        Ok((header, trailer))
    }

    /// One whole record: application data is left in `plain`.
    fn take(&mut self, record: &[u8], plain: &mut Vec<u8>) -> Result<(), TlsError> {
        let at = plain.len();
        let kind = self.rx.open(record, plain)?;
        self.stats.opened_bytes += (record.len() - HEADER - TAG) as u64;
        if kind == APPLICATION_DATA {
            self.rx_content += (plain.len() - at) as u64;
            return Ok(());
        }
        let content = plain.split_off(at);
        self.other(kind, &content)
    }

    /// A record of a content type other than application data.
    fn other(&mut self, kind: u8, content: &[u8]) -> Result<(), TlsError> {
        match kind {
            // close_notify ends the stream (whatever its level, which TLS
            // 1.3 has one ignore), user_canceled nothing by itself; any
            // other alert ends the connection.
            ALERT if content.len() == 2 && content[1] == CLOSE_NOTIFY => self.peer_done = true,
            ALERT if content.len() == 2 && content[1] == USER_CANCELED => {}
            ALERT => {
                let what = content.get(1).copied().unwrap_or(0);
                return Err(TlsError::Record(format!("the peer sent alert {what}")));
            }
            HANDSHAKE if only_tickets(content) => {}
            HANDSHAKE => {
                return Err(TlsError::Record(
                    "a handshake message after the handshake (KeyUpdate is not supported)".into(),
                ));
            }
            other => return Err(TlsError::Record(format!("a record of content type {other}"))),
        }
        Ok(())
    }

    /// Seal `plain` into records appended to `out`.
    pub fn send(&mut self, plain: &[u8], out: &mut Vec<u8>) -> Result<(), TlsError> {
        for chunk in plain.chunks(MAX_PLAIN) {
            self.tx.seal(chunk, out)?;
            self.stats.sealed_bytes += chunk.len() as u64 + 1;
            self.tx_content += chunk.len() as u64;
        }
        Ok(())
    }
}

/// The length of the record starting `bytes`, header included, once its
/// header is there; an error if the header is not one of TLS 1.3's
/// protected records.
pub(crate) fn record_len(bytes: &[u8]) -> Result<Option<usize>, TlsError> {
    let Some(h) = bytes.get(..HEADER) else { return Ok(None) };
    let len = usize::from(u16::from_be_bytes([h[3], h[4]]));
    if h[0] != APPLICATION_DATA || h[1..3] != LEGACY_VERSION {
        return Err(TlsError::Record(format!("not a protected TLS 1.3 record: {:02x?}", &h[..3])));
    }
    if !(TAG + 1..=MAX_CIPHERTEXT).contains(&len) {
        return Err(TlsError::Record(format!("a record of {len} bytes")));
    }
    Ok(Some(HEADER + len))
}

/// Whether handshake messages are all whole NewSessionTickets, and at
/// least one (a handshake record is never empty, RFC 8446, 5.1).
fn only_tickets(mut msgs: &[u8]) -> bool {
    if msgs.is_empty() {
        return false;
    }
    while let [kind, a, b, c, rest @ ..] = msgs {
        let n = usize::from(*a) << 16 | usize::from(*b) << 8 | usize::from(*c);
        if *kind != NEW_SESSION_TICKET || rest.len() < n {
            return false;
        }
        msgs = &rest[n..];
    }
    msgs.is_empty()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(s: &str) -> Vec<u8> {
        (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
    }

    /// RFC 8448 (TLS 1.3 traces), section 3: the server's application
    /// traffic secret, and the key and IV it expands to.
    #[test]
    fn traffic_keys_are_rfc_8448s() {
        let secret = hex("a11af9f05531f856ad47116b45a950328204b4f44bfb6b3a4b4f1f3fcb631643");
        let d = Direction::from_secret(Suite::Aes128GcmSha256, &secret).unwrap();
        assert_eq!(&d.key[..], &hex("9f02283b6c9c07efc26bb9f2ac92e356")[..]);
        assert_eq!(&d.iv[..], &hex("cf782b88dd83549aadf1e984")[..]);
    }

    #[test]
    fn a_key_protects_at_most_2_to_the_24_records() {
        let (mut c, mut s) = pair(Suite::Aes128GcmSha256);
        c.tx.seq = MAX_RECORDS - 1;
        s.rx.seq = MAX_RECORDS - 1;
        let mut w = Vec::new();
        c.send(b"last", &mut w).unwrap();
        s.receive(&w, &mut Vec::new()).unwrap();
        assert!(c.send(b"one more", &mut w).is_err());
    }

    impl Records {
        /// A copy of the transmit keys from the next record on.
        fn tx_for_tests(&self) -> Direction {
            let hash = if self.tx.suite == Suite::Aes128GcmSha256 { 32 } else { 48 };
            let mut d = Direction::from_secret(self.tx.suite, &[0; 48][..hash]).unwrap();
            d.key = self.tx.key.clone();
            d.iv = self.tx.iv;
            d
        }
    }

    fn pair(suite: Suite) -> (Records, Records) {
        let len = if suite == Suite::Aes128GcmSha256 { 32 } else { 48 };
        let (a, b) = (vec![1u8; len], vec![2u8; len]);
        let d = |s: &[u8]| Direction::from_secret(suite, s).unwrap();
        (Records::new(d(&a), d(&b)), Records::new(d(&b), d(&a)))
    }

    #[test]
    fn records_cut_anywhere_open_in_order() {
        for suite in [Suite::Aes128GcmSha256, Suite::Aes256GcmSha384] {
            let (mut client, mut server) = pair(suite);
            let data: Vec<u8> = (0..40_000u32).map(|i| i as u8).collect();
            let mut wire = Vec::new();
            client.send(&data, &mut wire).unwrap();
            assert_eq!(wire.len(), data.len() + 3 * (HEADER + 1 + TAG), "three records");
            for cut in [1, 5, 6, 997, 16_406] {
                let (mut c, mut s) = pair(suite);
                let mut w = Vec::new();
                c.send(&data, &mut w).unwrap();
                let mut got = Vec::new();
                for piece in w.chunks(cut) {
                    s.receive(piece, &mut got).unwrap();
                }
                assert_eq!(got, data, "{suite:?} cut {cut}");
            }
            let mut got = Vec::new();
            server.receive(&wire, &mut got).unwrap();
            assert_eq!((got.len(), server.rx.seq), (data.len(), 3));
        }
    }

    /// What a NIC leaves: records decrypted whole, or in part. Software
    /// takes the first as it is and encrypts the second back to open it.
    #[test]
    fn records_a_nic_opened_whole_or_in_part_are_taken() {
        for suite in [Suite::Aes128GcmSha256, Suite::Aes256GcmSha384] {
            let (mut c, mut s) = pair(suite);
            let data: Vec<u8> = (0..5000u32).map(|i| (i * 3) as u8).collect();
            let mut sent = Vec::new();
            for _ in 0..3 {
                c.send(&data, &mut sent).unwrap();
            }
            let len = sent.len() / 3;
            let body = len - HEADER;
            // The NIC's work, done here with the sender's keys.
            let mut nic = Records::new(c.tx_for_tests(), c.tx_for_tests());
            let mut records: Vec<Vec<u8>> = sent.chunks(len).map(<[u8]>::to_vec).collect();
            for (k, (a, b)) in [(0, body - TAG), (17, 4000), (0, 1)].into_iter().enumerate() {
                nic.rx.seq = k as u64;
                nic.rx.keystream(k as u64, a, &mut records[k][HEADER + a..HEADER + b]).unwrap();
            }
            let opened = s.take_opened(&records[0][HEADER..len - TAG]).unwrap();
            assert_eq!(opened, Some(data.len()));
            assert_eq!(records[0][HEADER..HEADER + data.len()], data[..]);
            let mut got = Vec::new();
            s.take_mixed(&records[1], &[(17, 4000)], None, |_| {}, &mut got).unwrap();
            // A byte the NIC kept out of the ring, put back.
            let kept = records[2][HEADER];
            records[2][HEADER] = 0;
            s.take_mixed(&records[2], &[(0, 1)], None, |r| r[HEADER] = kept, &mut got).unwrap();
            assert_eq!(got, [&data[..], &data[..]].concat());
            assert_eq!(s.stats.reencrypted_bytes, 3983 + 1);
            // A record the NIC decrypted under a number it guessed wrong:
            // encrypted back under that number, it opens.
            let mut wrong = Vec::new();
            c.send(&data, &mut wrong).unwrap();
            nic.rx.keystream(99, 0, &mut wrong[HEADER..HEADER + 100]).unwrap();
            s.take_mixed(&wrong, &[(0, 100)], Some(99), |_| {}, &mut got).unwrap();
            assert_eq!(got.len(), 3 * data.len());
            // A NIC's word that is wrong fails the record.
            let (mut c, mut s) = pair(suite);
            let mut w = Vec::new();
            c.send(&data, &mut w).unwrap();
            assert!(s.take_mixed(&w, &[(0, 10)], None, |_| {}, &mut Vec::new()).is_err());
        }
    }

    #[test]
    fn a_forged_reordered_or_foreign_record_is_refused() {
        let (mut c, _) = pair(Suite::Aes128GcmSha256);
        let mut wire = Vec::new();
        c.send(b"one", &mut wire).unwrap();
        let first = wire.len();
        c.send(b"two", &mut wire).unwrap();
        // A flipped bit anywhere, header included.
        for i in [0, 4, 5, first - 1] {
            let (_, mut s) = pair(Suite::Aes128GcmSha256);
            let mut bad = wire.clone();
            bad[i] ^= 1;
            let mut got = Vec::new();
            assert!(s.receive(&bad, &mut got).is_err(), "byte {i}");
            assert!(got.is_empty());
        }
        // The second record first: its sequence number does not fit.
        let (_, mut s) = pair(Suite::Aes128GcmSha256);
        assert!(s.receive(&wire[first..], &mut Vec::new()).is_err());
        // Too long, too short, an unprotected handshake record.
        for h in [[23, 3, 3, 0x41, 1], [23, 3, 3, 0, 16], [22, 3, 3, 0, 40], [23, 3, 1, 0, 40]] {
            let (_, mut s) = pair(Suite::Aes128GcmSha256);
            assert!(s.receive(&h, &mut Vec::new()).is_err(), "{h:?}");
        }
    }

    #[test]
    fn close_notify_ends_the_stream_and_tickets_are_let_go() {
        let (mut c, mut s) = pair(Suite::Aes256GcmSha384);
        let mut wire = Vec::new();
        c.send(b"data", &mut wire).unwrap();
        // Inner plaintexts of other types, padded: a ticket, data,
        // close_notify, and data after it.
        let ticket = [NEW_SESSION_TICKET, 0, 0, 2, 9, 9];
        for (content, kind) in [
            (&ticket[..], HANDSHAKE),
            (b" more", APPLICATION_DATA),
            (&[1, 0], ALERT),
            (b" after", APPLICATION_DATA),
        ] {
            c.tx.seal_inner(&[content, &[kind], &[0, 0, 0]], &mut wire).unwrap();
        }
        let mut got = Vec::new();
        s.receive(&wire, &mut got).unwrap();
        assert_eq!(got, b"data more");
        assert!(s.peer_done);
        // close_notify at level 2 ends it too; user_canceled does not.
        let (mut c, mut s) = pair(Suite::Aes128GcmSha256);
        let mut w = Vec::new();
        c.tx.seal_inner(&[&[1, USER_CANCELED], &[ALERT]], &mut w).unwrap();
        c.send(b"still", &mut w).unwrap();
        c.tx.seal_inner(&[&[2, CLOSE_NOTIFY], &[ALERT]], &mut w).unwrap();
        let mut got = Vec::new();
        s.receive(&w, &mut got).unwrap();
        assert_eq!((got.as_slice(), s.peer_done), (&b"still"[..], true));
        // A KeyUpdate, a fatal alert, an empty handshake record, a record
        // of no type, an inner plaintext past 2^14 + 1 bytes: errors.
        let long = vec![1u8; MAX_PLAIN + 1];
        for (content, kind) in [
            (&[24u8, 0, 0, 1, 0][..], HANDSHAKE),
            (&[2, 20][..], ALERT),
            (&[][..], HANDSHAKE),
            (&[][..], 0),
            (&long[..], APPLICATION_DATA),
        ] {
            let (mut c, mut s) = pair(Suite::Aes256GcmSha384);
            let mut w = Vec::new();
            c.tx.seal_inner(&[content, &[kind]], &mut w).unwrap();
            assert!(s.receive(&w, &mut Vec::new()).is_err(), "{kind} {content:?}");
        }
    }
}
