//! The PSKs of NVMe/TCP secure channels (NVMe/TCP transport specification
//! 3.6.1): the configured PSK in the interchange format nvme-cli writes
//! (`NVMeTLSkey-1:hh:<base64>:`, what `nvme gen-tls-key` prints), the
//! retained PSK derived from it with the host's NQN, the PSK identity, and
//! the TLS PSK derived for that identity, which is what TLS 1.3 is given.
//!
//! The derivations are HKDF (RustCrypto's `hkdf`) with the labels of
//! TLS 1.3's HKDF-Expand-Label. libnvme up to 1.15, and so nvme-cli 2.13
//! (Debian 13's), encoded the label differently (the length little
//! endian, no length bytes before label and context); libnvme 1.16 made it
//! RFC 8446's and kept the old one as "compat". Both are here, as
//! [`Derivation`], since the TLS PSKs of the two never match.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use hkdf::Hkdf;
use hmac::{Hmac, KeyInit, Mac};
use sha2::{Sha256, Sha384};
use std::fmt;
use std::sync::Arc;
use zeroize::Zeroizing;

/// The hash a PSK goes with: SHA-256 (TLS_AES_128_GCM_SHA256) or
/// SHA-384 (TLS_AES_256_GCM_SHA384); `hh` 01 and 02.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PskHash {
    Sha256,
    Sha384,
}

impl PskHash {
    pub fn id(self) -> u8 {
        match self {
            PskHash::Sha256 => 1,
            PskHash::Sha384 => 2,
        }
    }

    fn for_len(len: usize) -> Self {
        if len == 48 { PskHash::Sha384 } else { PskHash::Sha256 }
    }
}

/// How the HKDF labels are encoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Derivation {
    /// RFC 8446's HkdfLabel, as the specification means and libnvme 1.16
    /// on does.
    #[default]
    Rfc8446,
    /// libnvme 1.13 to 1.15 (nvme-cli 2.13 to 2.15; 2.16's `--compat`).
    Compat,
}

/// A configured PSK: its bytes, and the hash its retained PSK is derived
/// with (`None` for `hh` 00: the configured PSK is the retained PSK).
#[derive(Clone)]
pub struct ConfiguredPsk {
    key: Zeroizing<Vec<u8>>,
    transform: Option<PskHash>,
}

/// Why a string is not a configured PSK; none quotes the key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PskError {
    #[error(
        "a TLS PSK reads NVMeTLSkey-1:hh:<base64>: (as `nvme gen-tls-key` prints), 65 or 89 characters"
    )]
    Format,
    #[error("hash {0:?} is not 00, 01 (SHA-256) or 02 (SHA-384), or does not fit the key's length")]
    Hash(String),
    #[error("the PSK is not valid base64")]
    Base64,
    #[error("the PSK's CRC does not match: it was mistyped or cut short")]
    Crc,
}

impl ConfiguredPsk {
    /// A PSK of 32 or 48 bytes.
    pub fn new(key: &[u8], transform: Option<PskHash>) -> Option<Self> {
        let fits = match transform {
            None => matches!(key.len(), 32 | 48),
            Some(h) => key.len() == if h == PskHash::Sha256 { 32 } else { 48 },
        };
        fits.then(|| Self { key: Zeroizing::new(key.to_vec()), transform })
    }

    /// A fresh random PSK for `hash`, as `nvme gen-tls-key` makes one.
    pub fn generate(hash: PskHash) -> Result<Self, super::TlsError> {
        let mut key = Zeroizing::new(vec![0u8; if hash == PskHash::Sha256 { 32 } else { 48 }]);
        openssl::rand::rand_bytes(&mut key).map_err(|e| super::TlsError::Setup(e.to_string()))?;
        Ok(Self { key, transform: Some(hash) })
    }

    /// The hash of the identity and of the cipher suite.
    pub fn hash(&self) -> PskHash {
        self.transform.unwrap_or(PskHash::for_len(self.key.len()))
    }

    /// The interchange form, for a key file; it is the key, so treat it as one.
    pub fn to_interchange(&self) -> Zeroizing<String> {
        let mut raw = Zeroizing::new(self.key.to_vec());
        raw.extend_from_slice(&crc32fast::hash(&self.key).to_le_bytes());
        let b64 = Zeroizing::new(STANDARD.encode(&raw));
        let hh = self.transform.map_or(0, PskHash::id);
        Zeroizing::new(format!("NVMeTLSkey-1:{hh:02x}:{}:", b64.as_str()))
    }

    /// The retained PSK for the host `hostnqn`.
    pub fn retained(&self, hostnqn: &str, d: Derivation) -> Zeroizing<Vec<u8>> {
        match self.transform {
            None => self.key.clone(),
            Some(h) => expand(h, &self.key, "HostNQN", hostnqn.as_bytes(), self.key.len(), d),
        }
    }

    /// The PSK identity a host offers and the TLS PSK it stands for,
    /// version 0 (`NVMe0R0h <hostnqn> <subnqn>`, what nvme-cli 2.13
    /// inserts by default) or 1 (with the PSK digest; Linux looks it up
    /// first).
    pub fn tls_psk(
        &self,
        version: u8,
        hostnqn: &str,
        subnqn: &str,
        d: Derivation,
    ) -> (String, Zeroizing<Vec<u8>>) {
        let hash = self.hash();
        let hh = hash.id();
        let retained = self.retained(hostnqn, d);
        let (identity, context) = if version == 0 {
            let id = format!("NVMe0R{hh:02} {hostnqn} {subnqn}");
            (id.clone(), id)
        } else {
            let seed = format!("{hostnqn} {subnqn} NVMe-over-Fabrics");
            let digest = STANDARD.encode(&*hmac(hash, &retained, seed.as_bytes()));
            (format!("NVMe1R{hh:02} {hostnqn} {subnqn} {digest}"), format!("{hh:02} {digest}"))
        };
        let psk = expand(hash, &retained, "nvme-tls-psk", context.as_bytes(), self.key.len(), d);
        (identity, psk)
    }
}

impl std::str::FromStr for ConfiguredPsk {
    type Err = PskError;

    fn from_str(s: &str) -> Result<Self, PskError> {
        let s = s.trim();
        let (Some(rest), 65 | 89) = (s.strip_prefix("NVMeTLSkey-1:"), s.len()) else {
            return Err(PskError::Format);
        };
        let (hh, b64) = rest.split_once(':').ok_or(PskError::Format)?;
        let b64 = b64.strip_suffix(':').ok_or(PskError::Format)?;
        let transform = match hh {
            "00" => None,
            "01" => Some(PskHash::Sha256),
            "02" => Some(PskHash::Sha384),
            _ if hh.len() == 2 => return Err(PskError::Hash(hh.into())),
            _ => return Err(PskError::Format),
        };
        let raw = Zeroizing::new(STANDARD.decode(b64).map_err(|_| PskError::Base64)?);
        let (key, crc) = raw.split_at(raw.len().saturating_sub(4));
        if crc32fast::hash(key).to_le_bytes() != crc {
            return Err(PskError::Crc);
        }
        Self::new(key, transform).ok_or_else(|| PskError::Hash(hh.into()))
    }
}

impl fmt::Debug for ConfiguredPsk {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ConfiguredPsk({} bytes, transform {:?})", self.key.len(), self.transform)
    }
}

/// HKDF-Extract with no salt, then HKDF-Expand with TLS 1.3's label.
fn expand(
    hash: PskHash,
    ikm: &[u8],
    label: &str,
    context: &[u8],
    len: usize,
    d: Derivation,
) -> Zeroizing<Vec<u8>> {
    let mut info = Vec::new();
    let label = format!("tls13 {label}");
    match d {
        Derivation::Rfc8446 => {
            info.extend_from_slice(&(len as u16).to_be_bytes());
            info.push(label.len() as u8);
            info.extend_from_slice(label.as_bytes());
            info.push(context.len() as u8);
        }
        Derivation::Compat => {
            info.extend_from_slice(&(len as u16).to_le_bytes());
            info.extend_from_slice(label.as_bytes());
        }
    }
    info.extend_from_slice(context);
    let mut out = Zeroizing::new(vec![0u8; len]);
    // 32 or 48 bytes are well within what HKDF may expand to.
    let ok = match hash {
        PskHash::Sha256 => Hkdf::<Sha256>::new(None, ikm).expand(&info, &mut out),
        PskHash::Sha384 => Hkdf::<Sha384>::new(None, ikm).expand(&info, &mut out),
    };
    debug_assert!(ok.is_ok());
    out
}

fn hmac(hash: PskHash, key: &[u8], msg: &[u8]) -> Zeroizing<Vec<u8>> {
    fn run<M: Mac + KeyInit>(key: &[u8], msg: &[u8]) -> Vec<u8> {
        let mut m = <M as KeyInit>::new_from_slice(key).unwrap_or_else(|_| unreachable!());
        m.update(msg);
        m.finalize().into_bytes().to_vec()
    }
    Zeroizing::new(match hash {
        PskHash::Sha256 => run::<Hmac<Sha256>>(key, msg),
        PskHash::Sha384 => run::<Hmac<Sha384>>(key, msg),
    })
}

/// Looks up the PSK for an identity a client offered (the controller's
/// side); `None` refuses it.
pub type PskLookup = Arc<dyn Fn(&str) -> Option<Zeroizing<Vec<u8>>> + Send + Sync>;

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(s: &str) -> Vec<u8> {
        (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
    }

    const KEY: &str = "5512DBB6737D0106F65975B773DFB011FFC344BCF442E2DD6D8BC4870B5D5B03";
    const HOST: &str = "nqn.psk-test-host";
    const SUB: &str = "nqn.psk-test-subsys";

    /// libnvme's own test vectors (test/psk.c).
    #[test]
    fn interchange_strings_are_libnvmes() {
        let k = ConfiguredPsk::new(&hex(KEY), Some(PskHash::Sha256)).unwrap();
        let s = "NVMeTLSkey-1:01:VRLbtnN9AQb2WXW3c9+wEf/DRLz0QuLdbYvEhwtdWwNf9LrZ:";
        assert_eq!(k.to_interchange().as_str(), s);
        assert_eq!(s.parse::<ConfiguredPsk>().unwrap().key, k.key);
        let k48 = [hex(KEY), hex(&KEY[32..])].concat();
        let s48 = "NVMeTLSkey-1:02:VRLbtnN9AQb2WXW3c9+wEf/DRLz0QuLdbYvEhwtdWwP/w0S89ELi3W2LxIcLXVsDn8kXZQ==:";
        assert_eq!(
            ConfiguredPsk::new(&k48, Some(PskHash::Sha384)).unwrap().to_interchange().as_str(),
            s48
        );
        let mut bad = s.to_string();
        bad.replace_range(20..21, if &s[20..21] == "A" { "B" } else { "A" });
        assert_eq!(bad.parse::<ConfiguredPsk>().err(), Some(PskError::Crc));
        assert_eq!(
            s.replace(":01:", ":03:").parse::<ConfiguredPsk>().err(),
            Some(PskError::Hash("03".into()))
        );
        assert_eq!(s[..60].parse::<ConfiguredPsk>().err(), Some(PskError::Format));
        assert!(!format!("{k:?}").contains("VRLb"));
    }

    #[test]
    fn identities_and_tls_psks_match_libnvme_both_ways() {
        let k = ConfiguredPsk::new(&hex(KEY), Some(PskHash::Sha256)).unwrap();
        let cases = [
            (
                Derivation::Rfc8446,
                1,
                "iSbjiStwJ/1TrTvDlt2fjFmzvsytOJelidNnA+X5lEU=",
                "8fc3c0badfd4c0c66fa3ca33aadd0314f85536cc9bc47338b60f3e6e563786ca",
            ),
            (
                Derivation::Rfc8446,
                0,
                "",
                "05c6503551ad136e6ee32e6eeb3f6d500b69701d84ec71e328f65c7f51566f68",
            ),
            (
                Derivation::Compat,
                1,
                "66GuqV08TsAGII39teWUfwQwizjv06Jy8jOcX3NAAzM=",
                "b9f5ab2a41ba6e72a23a12066302a2f775fa6c0942c8e0b18ca8ac07edf305e2",
            ),
            (
                Derivation::Compat,
                0,
                "",
                "09fb1983ac6d6d0353e7cae4f23daddd651c367fa347c59d9cf6936f5a83eafb",
            ),
        ];
        for (d, version, digest, psk) in cases {
            let (id, tls) = k.tls_psk(version, HOST, SUB, d);
            let want = match version {
                0 => format!("NVMe0R01 {HOST} {SUB}"),
                _ => format!("NVMe1R01 {HOST} {SUB} {digest}"),
            };
            assert_eq!(id, want, "{d:?} v{version}");
            assert_eq!(&tls[..], &hex(psk)[..], "{d:?} v{version}");
        }
        assert_eq!(
            &k.retained(HOST, Derivation::Rfc8446)[..],
            &hex("073311dec37e219ff3acd43f130130c5bdd443c066e1cc3424e49030234ff7d5")[..]
        );
        let k48 = ConfiguredPsk::new(&[hex(KEY), hex(&KEY[32..])].concat(), Some(PskHash::Sha384))
            .unwrap();
        let (id, tls) = k48.tls_psk(1, HOST, SUB, Derivation::Rfc8446);
        assert!(id.ends_with(" QhW2+Rp6RzHlNtCslyRxMnwJ11tKKhz8JCAQpQ+XUD8f9td1VeH5h53yz2wKJG1a"));
        assert_eq!(
            &tls[..],
            &hex(
                "a2b2f943f479fc682555cec89857c80ed004ce92f32a973d5764155bb7e36b17a85368a0666d250afac9282dda2e62ca"
            )[..]
        );
    }
}
