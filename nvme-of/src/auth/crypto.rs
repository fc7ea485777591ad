//! The hash functions DH-HMAC-CHAP names, and HMAC over them, from
//! RustCrypto: nothing of either is computed here.

use super::Hash;
use hmac::{Hmac, KeyInit, Mac};
use sha2::{Digest, Sha256, Sha384, Sha512};
use zeroize::Zeroizing;

/// H(parts...), the parts hashed in order.
pub(crate) fn digest(hash: Hash, parts: &[&[u8]]) -> Zeroizing<Vec<u8>> {
    fn run<D: Digest>(parts: &[&[u8]]) -> Vec<u8> {
        let mut d = D::new();
        for p in parts {
            d.update(p);
        }
        d.finalize().to_vec()
    }
    Zeroizing::new(match hash {
        Hash::Sha256 => run::<Sha256>(parts),
        Hash::Sha384 => run::<Sha384>(parts),
        Hash::Sha512 => run::<Sha512>(parts),
    })
}

/// HMAC-H(key, parts...), the parts fed in order.
pub(crate) fn hmac(hash: Hash, key: &[u8], parts: &[&[u8]]) -> Zeroizing<Vec<u8>> {
    fn run<M: Mac + KeyInit>(key: &[u8], parts: &[&[u8]]) -> Vec<u8> {
        // HMAC takes a key of any length.
        let mut m = <M as KeyInit>::new_from_slice(key).unwrap_or_else(|_| unreachable!());
        for p in parts {
            m.update(p);
        }
        m.finalize().into_bytes().to_vec()
    }
    Zeroizing::new(match hash {
        Hash::Sha256 => run::<Hmac<Sha256>>(key, parts),
        Hash::Sha384 => run::<Hmac<Sha384>>(key, parts),
        Hash::Sha512 => run::<Hmac<Sha512>>(key, parts),
    })
}

/// Compare two MACs in time that does not depend on where they differ.
pub(crate) fn same(a: &[u8], b: &[u8]) -> bool {
    use subtle::ConstantTimeEq;
    a.len() == b.len() && bool::from(a.ct_eq(b))
}

/// `n` bytes from the operating system's random source. A host or
/// controller that cannot get them cannot authenticate at all, so this
/// failing is reported, never papered over with weaker bytes.
pub(crate) fn random(n: usize) -> Result<Zeroizing<Vec<u8>>, getrandom::Error> {
    let mut v = Zeroizing::new(vec![0u8; n]);
    getrandom::fill(&mut v)?;
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hmac_matches_rfc_4231_case_2() {
        // RFC 4231 test case 2: key "Jefe", data "what do ya want for nothing?".
        let mac = hmac(Hash::Sha256, b"Jefe", &[b"what do ya want ", b"for nothing?"]);
        assert_eq!(
            mac[..8],
            [0x5b, 0xdc, 0xc1, 0x46, 0xbf, 0x60, 0x75, 0x4e],
            "parts are fed in order, as one message"
        );
        assert_eq!(
            hmac(Hash::Sha512, b"Jefe", &[b"what do ya want for nothing?"])[..4],
            [0x16, 0x4b, 0x7a, 0x7b]
        );
        assert_eq!(digest(Hash::Sha384, &[b"abc"])[..4], [0xcb, 0x00, 0x75, 0x3f]);
        assert!(same(&mac, &mac.clone()) && !same(&mac, &mac[1..]));
    }
}
