//! DH-HMAC-CHAP secrets in the interchange format nvme-cli and Linux use
//! (`nvme gen-dhchap-key` prints one): `DHHC-1:hh:<base64>:`, where the
//! base64 holds the secret and then its CRC-32 (little endian), and `hh`
//! says how the secret is transformed before use: `00` not at all, `01`
//! `02` `03` by HMAC-SHA-256, -384, -512 keyed with it over the NQN it
//! belongs to and "NVMe-over-Fabrics" (NVMe Base 2.0, 8.13.5.7).

use super::{Hash, crypto};
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use std::fmt;
use zeroize::Zeroizing;

/// A configured secret, held only as long as it is in use and wiped
/// when dropped; it never prints.
#[derive(Clone)]
pub struct Secret {
    /// The transformation `hh` names; `None` for `00`.
    transform: Option<Hash>,
    key: Zeroizing<Vec<u8>>,
}

/// Why a string is not a secret. None of them quotes the secret.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SecretError {
    #[error("a DH-HMAC-CHAP secret reads DHHC-1:hh:<base64>: (as `nvme gen-dhchap-key` prints)")]
    Format,
    #[error("transformation {0:?} is not 00 (none), 01, 02 or 03 (SHA-256, -384, -512)")]
    Transform(String),
    #[error("the secret is not valid base64")]
    Base64,
    #[error("the secret is {0} bytes; it must be 32, 48 or 64")]
    Length(usize),
    #[error("the secret's CRC does not match: it was mistyped or cut short")]
    Crc,
}

impl Secret {
    /// Secret lengths the format allows.
    pub const LENGTHS: [usize; 3] = [32, 48, 64];

    /// A secret from its bytes, to be transformed with `transform`.
    pub fn new(key: &[u8], transform: Option<Hash>) -> Result<Self, SecretError> {
        if !Self::LENGTHS.contains(&key.len()) {
            return Err(SecretError::Length(key.len()));
        }
        Ok(Self { transform, key: Zeroizing::new(key.to_vec()) })
    }

    /// A fresh random secret of `len` bytes, as `nvme gen-dhchap-key` makes one.
    pub fn generate(len: usize, transform: Option<Hash>) -> Result<Self, SecretError> {
        let key = crypto::random(len).map_err(|_| SecretError::Length(0))?;
        Self::new(&key, transform)
    }

    pub fn transform(&self) -> Option<Hash> {
        self.transform
    }

    /// The key DH-HMAC-CHAP uses, for the entity named `nqn` (the host's
    /// NQN for a host secret, the subsystem's for a controller secret).
    pub fn transformed(&self, nqn: &str) -> Zeroizing<Vec<u8>> {
        match self.transform {
            None => self.key.clone(),
            Some(h) => crypto::hmac(h, &self.key, &[nqn.as_bytes(), b"NVMe-over-Fabrics"]),
        }
    }

    /// The interchange form, `DHHC-1:hh:<base64>:`, for writing to a key
    /// file; it is the secret itself, so treat it as one.
    pub fn to_interchange(&self) -> Zeroizing<String> {
        let mut raw = Zeroizing::new(self.key.to_vec());
        raw.extend_from_slice(&crc32fast::hash(&self.key).to_le_bytes());
        let hh = self.transform.map_or(0, Hash::id);
        let b64 = Zeroizing::new(STANDARD.encode(&raw));
        Zeroizing::new(format!("DHHC-1:{hh:02x}:{}:", b64.as_str()))
    }
}

impl std::str::FromStr for Secret {
    type Err = SecretError;

    fn from_str(s: &str) -> Result<Self, SecretError> {
        let mut fields = s.trim().split(':');
        let (Some("DHHC-1"), Some(hh), Some(b64), Some(""), None) =
            (fields.next(), fields.next(), fields.next(), fields.next(), fields.next())
        else {
            return Err(SecretError::Format);
        };
        let transform = match hh {
            "00" => None,
            _ => Some(
                u8::from_str_radix(hh, 16)
                    .ok()
                    .filter(|_| hh.len() == 2)
                    .and_then(Hash::from_id)
                    .ok_or_else(|| SecretError::Transform(hh.into()))?,
            ),
        };
        let raw = Zeroizing::new(STANDARD.decode(b64).map_err(|_| SecretError::Base64)?);
        let Some(split) = raw.len().checked_sub(4) else { return Err(SecretError::Length(0)) };
        let (key, crc) = raw.split_at(split);
        if !Self::LENGTHS.contains(&key.len()) {
            return Err(SecretError::Length(key.len()));
        }
        if crc32fast::hash(key).to_le_bytes() != crc {
            return Err(SecretError::Crc);
        }
        Self::new(key, transform)
    }
}

/// Compared in constant time.
impl PartialEq for Secret {
    fn eq(&self, other: &Self) -> bool {
        self.transform == other.transform && crypto::same(&self.key, &other.key)
    }
}

impl Eq for Secret {}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Secret({} bytes, transform {:?})", self.key.len(), self.transform)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interchange_round_trips_and_its_crc_is_checked() {
        let s = Secret::generate(48, Some(Hash::Sha384)).unwrap();
        let text = s.to_interchange();
        assert!(text.starts_with("DHHC-1:02:") && text.ends_with(':'));
        assert_eq!(text.parse::<Secret>().unwrap(), s);
        // One character of the base64 changed: the CRC no longer matches.
        let mut bad = text.to_string();
        let i = "DHHC-1:02:".len() + 3;
        let c = if &bad[i..=i] == "A" { "B" } else { "A" };
        bad.replace_range(i..=i, c);
        assert_eq!(bad.parse::<Secret>(), Err(SecretError::Crc));
        assert!(!format!("{s:?}").contains(&text[10..20]), "a secret never prints");
    }

    #[test]
    fn malformed_secrets_say_what_is_wrong() {
        let ok = Secret::new(&[7; 32], None).unwrap().to_interchange();
        let b64 = &ok["DHHC-1:00:".len()..ok.len() - 1];
        for (s, e) in [
            ("DHHC-1:00:abc", SecretError::Format),
            ("DHHC-2:00:abc:", SecretError::Format),
            (&format!("DHHC-1:04:{b64}:"), SecretError::Transform("04".into())),
            (&format!("DHHC-1:1:{b64}:"), SecretError::Transform("1".into())),
            ("DHHC-1:00:!!!!:", SecretError::Base64),
            ("DHHC-1:00:AAAAAAAA:", SecretError::Length(2)),
        ] {
            assert_eq!(s.parse::<Secret>(), Err(e), "{s}");
        }
        assert_eq!(format!(" {}\n", *ok).parse::<Secret>().unwrap().transform(), None);
    }

    #[test]
    fn transformation_is_hmac_over_the_nqn() {
        let key = [0x11u8; 32];
        let plain = Secret::new(&key, None).unwrap();
        assert_eq!(&plain.transformed("nqn.x")[..], &key);
        let t = Secret::new(&key, Some(Hash::Sha256)).unwrap();
        let want = crypto::hmac(Hash::Sha256, &key, &[b"nqn.xNVMe-over-Fabrics"]);
        assert_eq!(t.transformed("nqn.x"), want);
        assert_ne!(t.transformed("nqn.y"), want);
    }
}
