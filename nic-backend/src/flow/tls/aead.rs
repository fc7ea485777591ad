//! One direction's AES-GCM as the NIC runs it: a record at a time,
//! streamed through the segments that carry it (the tag at its end), and
//! bare CTR for bytes that pass a second time, which need the keystream
//! at their place and nothing else.
//!
//! The cipher is OpenSSL's; nothing here but where a record's counter
//! blocks start.

use openssl::cipher::{Cipher, CipherRef};
use openssl::cipher_ctx::CipherCtx;
use ulp_ddp::tls::record::TAG;
use ulp_ddp::{TlsCipher, TlsCryptoInfo};

pub(crate) struct Aead {
    info: TlsCryptoInfo,
    encrypt: bool,
    gcm: CipherCtx,
    /// The key is set once; each record sets its nonce.
    keyed: bool,
    ctr: CipherCtx,
}

impl Aead {
    /// `info`'s cipher, to encrypt (transmit) or decrypt (receive); `None`
    /// if the key does not fit the cipher or OpenSSL refuses it.
    pub fn new(info: &TlsCryptoInfo, encrypt: bool) -> Option<Self> {
        if info.key.len() != info.cipher.key_len() {
            return None;
        }
        let (gcm, ctr) = (CipherCtx::new().ok()?, CipherCtx::new().ok()?);
        Some(Self { info: info.clone(), encrypt, gcm, keyed: false, ctr })
    }

    fn ciphers(&self) -> (&'static CipherRef, &'static CipherRef) {
        match self.info.cipher {
            TlsCipher::Aes128Gcm => (Cipher::aes_128_gcm(), Cipher::aes_128_ctr()),
            TlsCipher::Aes256Gcm => (Cipher::aes_256_gcm(), Cipher::aes_256_ctr()),
        }
    }

    /// Start record `seq`, its header `aad`.
    pub fn begin(&mut self, seq: u64, aad: &[u8]) -> bool {
        let nonce = self.info.nonce(seq);
        let (cipher, key) = match self.keyed {
            true => (None, None),
            false => (Some(self.ciphers().0), Some(&self.info.key[..])),
        };
        let init = match self.encrypt {
            true => self.gcm.encrypt_init(cipher, key, Some(&nonce)),
            false => self.gcm.decrypt_init(cipher, key, Some(&nonce)),
        };
        self.keyed |= init.is_ok();
        init.is_ok() && self.gcm.cipher_update(aad, None).is_ok()
    }

    /// The record's next body bytes, encrypted or decrypted where they lie.
    pub fn update(&mut self, buf: &mut [u8]) -> bool {
        self.gcm.cipher_update_inplace(buf, buf.len()).is_ok()
    }

    /// Transmit: the record's tag, after its last body byte.
    pub fn seal(&mut self) -> Option<[u8; TAG]> {
        let mut tag = [0u8; TAG];
        self.gcm.cipher_final(&mut []).ok()?;
        self.gcm.tag(&mut tag).ok()?;
        Some(tag)
    }

    /// Receive: whether the record's body, all of it given to `update`,
    /// authenticates under `tag`.
    pub fn verify(&mut self, tag: &[u8; TAG]) -> bool {
        self.gcm.set_tag(tag).is_ok() && self.gcm.cipher_final(&mut []).is_ok()
    }

    /// XOR into `buf` record `seq`'s keystream from body byte `pos`: GCM's
    /// counter mode alone, whose first block for the body is counter 2
    /// (NIST SP 800-38D, 7.1). Encrypts plaintext and decrypts ciphertext
    /// alike, and leaves the record in progress alone.
    pub fn keystream(&mut self, seq: u64, pos: usize, buf: &mut [u8]) -> bool {
        let mut iv = [0u8; 16];
        iv[..12].copy_from_slice(&self.info.nonce(seq));
        iv[12..].copy_from_slice(&(2 + (pos / 16) as u32).to_be_bytes());
        let cipher = self.ciphers().1;
        let skip = pos % 16;
        let mut lead = [0u8; 16];
        self.ctr.encrypt_init(Some(cipher), Some(&self.info.key), Some(&iv)).is_ok()
            && self.ctr.cipher_update_inplace(&mut lead[..skip], skip).is_ok()
            && self.ctr.cipher_update_inplace(buf, buf.len()).is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use zeroize::Zeroizing;

    fn info(cipher: TlsCipher) -> TlsCryptoInfo {
        TlsCryptoInfo {
            cipher,
            key: Zeroizing::new((0..cipher.key_len() as u8).collect()),
            salt: [1, 2, 3, 4],
            iv: [5, 6, 7, 8, 9, 10, 11, 12],
            rec_seq: 0,
        }
    }

    /// A record sealed in pieces opens in other pieces; the keystream at
    /// any place is the difference between plaintext and ciphertext.
    #[test]
    fn records_stream_through_pieces_and_the_keystream_seeks() {
        for cipher in [TlsCipher::Aes128Gcm, TlsCipher::Aes256Gcm] {
            let plain: Vec<u8> = (0..1000u32).map(|i| (i * 7) as u8).collect();
            let aad = [23, 3, 3, 0x03, 0xf8];
            let mut tx = Aead::new(&info(cipher), true).unwrap();
            let mut rx = Aead::new(&info(cipher), false).unwrap();
            for seq in [0, 5] {
                let mut sealed = plain.clone();
                assert!(tx.begin(seq, &aad));
                for piece in sealed.chunks_mut(333) {
                    assert!(tx.update(piece));
                }
                let tag = tx.seal().unwrap();
                for (pos, len) in [(0, 16), (5, 30), (17, 983), (999, 1)] {
                    let mut k = plain[pos..pos + len].to_vec();
                    assert!(tx.keystream(seq, pos, &mut k));
                    assert_eq!(k, sealed[pos..pos + len], "{cipher:?} seq {seq} at {pos}");
                }
                let mut opened = sealed.clone();
                assert!(rx.begin(seq, &aad));
                for piece in opened.chunks_mut(100) {
                    assert!(rx.update(piece));
                }
                assert!(rx.verify(&tag));
                assert_eq!(opened, plain);
                // One flipped bit anywhere fails it.
                let mut bad = sealed.clone();
                bad[500] ^= 1;
                assert!(rx.begin(seq, &aad) && rx.update(&mut bad));
                assert!(!rx.verify(&tag));
            }
        }
    }

    #[test]
    fn a_key_of_the_wrong_length_is_refused() {
        let mut i = info(TlsCipher::Aes128Gcm);
        i.key = Zeroizing::new(vec![0; 32]);
        assert!(Aead::new(&i, false).is_none());
    }
}
