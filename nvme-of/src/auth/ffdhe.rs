//! Finite-field Diffie-Hellman in RFC 7919's groups, as DH-HMAC-CHAP uses
//! it: an ephemeral key pair per transaction, public values big endian and
//! as long as the prime, the shared secret likewise. The exponentiation is
//! crypto-bigint's (constant time, Montgomery form); the primes are the
//! RFC's, and a test holds them against OpenSSL's copies.

use super::DhGroup;
use crypto_bigint::modular::{BoxedMontyForm, BoxedMontyParams};
use crypto_bigint::{BoxedUint, Resize};
use hex_literal::hex;
use zeroize::Zeroizing;

/// The peer's public value is not one of the group's (NVMe Base 2.0
/// 8.13.5.4: the receiver checks it), or is not as long as the prime.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the peer's Diffie-Hellman value is not a valid public value of the group")]
pub struct BadPublicValue;

/// An ephemeral key pair, its private half wiped when dropped.
pub(crate) struct KeyPair {
    params: BoxedMontyParams,
    bits: u32,
    private: Zeroizing<Vec<u8>>,
    public: Vec<u8>,
}

impl KeyPair {
    /// A fresh key pair in `group` (not the NULL group). The private
    /// exponent has twice the group's security strength in bits, rounded
    /// up to 64 (NIST SP 800-56A's bound for safe-prime groups; Linux's
    /// choice too), so a connection with ffdhe8192 costs one 448-bit
    /// exponentiation each way, not an 8192-bit one.
    pub fn generate(group: DhGroup) -> Result<Self, getrandom::Error> {
        let (p, strength) = prime(group);
        let bits = (p.len() * 8) as u32;
        let modulus = BoxedUint::from_be_slice(p, bits).unwrap_or_else(|_| unreachable!());
        let params = BoxedMontyParams::new_vartime(
            crypto_bigint::Odd::new(modulus).expect("an RFC 7919 prime is odd"),
        );
        let mut private = super::crypto::random(strength.div_ceil(32) * 8)?;
        // A private exponent of 0 or 1 would give away the key.
        private[0] |= 0x80;
        let g = BoxedMontyForm::new(BoxedUint::from(2u8).resize(bits), &params);
        let mut pair = Self { params, bits, private, public: Vec::new() };
        pair.public = pair.exp(&g).to_vec();
        Ok(pair)
    }

    /// g^x mod p, big endian, as long as the prime.
    pub fn public(&self) -> &[u8] {
        &self.public
    }

    /// The shared secret with a peer whose public value is `peer`.
    pub fn shared(&self, peer: &[u8]) -> Result<Zeroizing<Vec<u8>>, BadPublicValue> {
        let len = self.bits as usize / 8;
        if peer.len() != len {
            return Err(BadPublicValue);
        }
        let y = BoxedUint::from_be_slice(peer, self.bits).map_err(|_| BadPublicValue)?;
        // 1 < y < p - 1: 0, 1 and p - 1 confine the secret to a
        // subgroup of order at most two, and y >= p is not in the group.
        let p = self.params.modulus().as_ref();
        let one = BoxedUint::one_with_precision(self.bits);
        let p_minus_1 = p.wrapping_sub(&one);
        if y <= one || y >= p_minus_1 {
            return Err(BadPublicValue);
        }
        Ok(self.exp(&BoxedMontyForm::new(y, &self.params)))
    }

    /// base^x mod p, big endian, as long as the prime; wiped when dropped
    /// (it is the shared secret when the base is the peer's value).
    fn exp(&self, base: &BoxedMontyForm) -> Zeroizing<Vec<u8>> {
        let x_bits = (self.private.len() * 8) as u32;
        let mut x = BoxedUint::from_be_slice(&self.private, x_bits)
            .unwrap_or_else(|_| unreachable!())
            .resize(self.bits);
        let mut out = base.pow_bounded_exp(&x, x_bits).retrieve();
        let mut bytes = out.to_be_bytes();
        let value = Zeroizing::new(bytes.to_vec());
        zeroize::Zeroize::zeroize(&mut x);
        zeroize::Zeroize::zeroize(&mut out);
        zeroize::Zeroize::zeroize(&mut bytes[..]);
        value
    }
}

/// A group's prime and its security strength in bits (SP 800-56A).
fn prime(group: DhGroup) -> (&'static [u8], usize) {
    match group {
        DhGroup::Ffdhe2048 | DhGroup::Null => (&FFDHE2048, 112),
        DhGroup::Ffdhe3072 => (&FFDHE3072, 128),
        DhGroup::Ffdhe4096 => (&FFDHE4096, 152),
        DhGroup::Ffdhe6144 => (&FFDHE6144, 176),
        DhGroup::Ffdhe8192 => (&FFDHE8192, 200),
    }
}

/// ffdhe2048's prime (RFC 7919 appendix A).
const FFDHE2048: [u8; 256] = hex!(
    "FFFFFFFFFFFFFFFFADF85458A2BB4A9AAFDC5620273D3CF1D8B9C583CE2D3695"
    "A9E13641146433FBCC939DCE249B3EF97D2FE363630C75D8F681B202AEC4617A"
    "D3DF1ED5D5FD65612433F51F5F066ED0856365553DED1AF3B557135E7F57C935"
    "984F0C70E0E68B77E2A689DAF3EFE8721DF158A136ADE73530ACCA4F483A797A"
    "BC0AB182B324FB61D108A94BB2C8E3FBB96ADAB760D7F4681D4F42A3DE394DF4"
    "AE56EDE76372BB190B07A7C8EE0A6D709E02FCE1CDF7E2ECC03404CD28342F61"
    "9172FE9CE98583FF8E4F1232EEF28183C3FE3B1B4C6FAD733BB5FCBC2EC22005"
    "C58EF1837D1683B2C6F34A26C1B2EFFA886B423861285C97FFFFFFFFFFFFFFFF"
);

/// ffdhe3072's prime (RFC 7919 appendix A).
const FFDHE3072: [u8; 384] = hex!(
    "FFFFFFFFFFFFFFFFADF85458A2BB4A9AAFDC5620273D3CF1D8B9C583CE2D3695"
    "A9E13641146433FBCC939DCE249B3EF97D2FE363630C75D8F681B202AEC4617A"
    "D3DF1ED5D5FD65612433F51F5F066ED0856365553DED1AF3B557135E7F57C935"
    "984F0C70E0E68B77E2A689DAF3EFE8721DF158A136ADE73530ACCA4F483A797A"
    "BC0AB182B324FB61D108A94BB2C8E3FBB96ADAB760D7F4681D4F42A3DE394DF4"
    "AE56EDE76372BB190B07A7C8EE0A6D709E02FCE1CDF7E2ECC03404CD28342F61"
    "9172FE9CE98583FF8E4F1232EEF28183C3FE3B1B4C6FAD733BB5FCBC2EC22005"
    "C58EF1837D1683B2C6F34A26C1B2EFFA886B4238611FCFDCDE355B3B6519035B"
    "BC34F4DEF99C023861B46FC9D6E6C9077AD91D2691F7F7EE598CB0FAC186D91C"
    "AEFE130985139270B4130C93BC437944F4FD4452E2D74DD364F2E21E71F54BFF"
    "5CAE82AB9C9DF69EE86D2BC522363A0DABC521979B0DEADA1DBF9A42D5C4484E"
    "0ABCD06BFA53DDEF3C1B20EE3FD59D7C25E41D2B66C62E37FFFFFFFFFFFFFFFF"
);

/// ffdhe4096's prime (RFC 7919 appendix A).
const FFDHE4096: [u8; 512] = hex!(
    "FFFFFFFFFFFFFFFFADF85458A2BB4A9AAFDC5620273D3CF1D8B9C583CE2D3695"
    "A9E13641146433FBCC939DCE249B3EF97D2FE363630C75D8F681B202AEC4617A"
    "D3DF1ED5D5FD65612433F51F5F066ED0856365553DED1AF3B557135E7F57C935"
    "984F0C70E0E68B77E2A689DAF3EFE8721DF158A136ADE73530ACCA4F483A797A"
    "BC0AB182B324FB61D108A94BB2C8E3FBB96ADAB760D7F4681D4F42A3DE394DF4"
    "AE56EDE76372BB190B07A7C8EE0A6D709E02FCE1CDF7E2ECC03404CD28342F61"
    "9172FE9CE98583FF8E4F1232EEF28183C3FE3B1B4C6FAD733BB5FCBC2EC22005"
    "C58EF1837D1683B2C6F34A26C1B2EFFA886B4238611FCFDCDE355B3B6519035B"
    "BC34F4DEF99C023861B46FC9D6E6C9077AD91D2691F7F7EE598CB0FAC186D91C"
    "AEFE130985139270B4130C93BC437944F4FD4452E2D74DD364F2E21E71F54BFF"
    "5CAE82AB9C9DF69EE86D2BC522363A0DABC521979B0DEADA1DBF9A42D5C4484E"
    "0ABCD06BFA53DDEF3C1B20EE3FD59D7C25E41D2B669E1EF16E6F52C3164DF4FB"
    "7930E9E4E58857B6AC7D5F42D69F6D187763CF1D5503400487F55BA57E31CC7A"
    "7135C886EFB4318AED6A1E012D9E6832A907600A918130C46DC778F971AD0038"
    "092999A333CB8B7A1A1DB93D7140003C2A4ECEA9F98D0ACC0A8291CDCEC97DCF"
    "8EC9B55A7F88A46B4DB5A851F44182E1C68A007E5E655F6AFFFFFFFFFFFFFFFF"
);

/// ffdhe6144's prime (RFC 7919 appendix A).
const FFDHE6144: [u8; 768] = hex!(
    "FFFFFFFFFFFFFFFFADF85458A2BB4A9AAFDC5620273D3CF1D8B9C583CE2D3695"
    "A9E13641146433FBCC939DCE249B3EF97D2FE363630C75D8F681B202AEC4617A"
    "D3DF1ED5D5FD65612433F51F5F066ED0856365553DED1AF3B557135E7F57C935"
    "984F0C70E0E68B77E2A689DAF3EFE8721DF158A136ADE73530ACCA4F483A797A"
    "BC0AB182B324FB61D108A94BB2C8E3FBB96ADAB760D7F4681D4F42A3DE394DF4"
    "AE56EDE76372BB190B07A7C8EE0A6D709E02FCE1CDF7E2ECC03404CD28342F61"
    "9172FE9CE98583FF8E4F1232EEF28183C3FE3B1B4C6FAD733BB5FCBC2EC22005"
    "C58EF1837D1683B2C6F34A26C1B2EFFA886B4238611FCFDCDE355B3B6519035B"
    "BC34F4DEF99C023861B46FC9D6E6C9077AD91D2691F7F7EE598CB0FAC186D91C"
    "AEFE130985139270B4130C93BC437944F4FD4452E2D74DD364F2E21E71F54BFF"
    "5CAE82AB9C9DF69EE86D2BC522363A0DABC521979B0DEADA1DBF9A42D5C4484E"
    "0ABCD06BFA53DDEF3C1B20EE3FD59D7C25E41D2B669E1EF16E6F52C3164DF4FB"
    "7930E9E4E58857B6AC7D5F42D69F6D187763CF1D5503400487F55BA57E31CC7A"
    "7135C886EFB4318AED6A1E012D9E6832A907600A918130C46DC778F971AD0038"
    "092999A333CB8B7A1A1DB93D7140003C2A4ECEA9F98D0ACC0A8291CDCEC97DCF"
    "8EC9B55A7F88A46B4DB5A851F44182E1C68A007E5E0DD9020BFD64B645036C7A"
    "4E677D2C38532A3A23BA4442CAF53EA63BB454329B7624C8917BDD64B1C0FD4C"
    "B38E8C334C701C3ACDAD0657FCCFEC719B1F5C3E4E46041F388147FB4CFDB477"
    "A52471F7A9A96910B855322EDB6340D8A00EF092350511E30ABEC1FFF9E3A26E"
    "7FB29F8C183023C3587E38DA0077D9B4763E4E4B94B2BBC194C6651E77CAF992"
    "EEAAC0232A281BF6B3A739C1226116820AE8DB5847A67CBEF9C9091B462D538C"
    "D72B03746AE77F5E62292C311562A846505DC82DB854338AE49F5235C95B9117"
    "8CCF2DD5CACEF403EC9D1810C6272B045B3B71F9DC6B80D63FDD4A8E9ADB1E69"
    "62A69526D43161C1A41D570D7938DAD4A40E329CD0E40E65FFFFFFFFFFFFFFFF"
);

/// ffdhe8192's prime (RFC 7919 appendix A).
const FFDHE8192: [u8; 1024] = hex!(
    "FFFFFFFFFFFFFFFFADF85458A2BB4A9AAFDC5620273D3CF1D8B9C583CE2D3695"
    "A9E13641146433FBCC939DCE249B3EF97D2FE363630C75D8F681B202AEC4617A"
    "D3DF1ED5D5FD65612433F51F5F066ED0856365553DED1AF3B557135E7F57C935"
    "984F0C70E0E68B77E2A689DAF3EFE8721DF158A136ADE73530ACCA4F483A797A"
    "BC0AB182B324FB61D108A94BB2C8E3FBB96ADAB760D7F4681D4F42A3DE394DF4"
    "AE56EDE76372BB190B07A7C8EE0A6D709E02FCE1CDF7E2ECC03404CD28342F61"
    "9172FE9CE98583FF8E4F1232EEF28183C3FE3B1B4C6FAD733BB5FCBC2EC22005"
    "C58EF1837D1683B2C6F34A26C1B2EFFA886B4238611FCFDCDE355B3B6519035B"
    "BC34F4DEF99C023861B46FC9D6E6C9077AD91D2691F7F7EE598CB0FAC186D91C"
    "AEFE130985139270B4130C93BC437944F4FD4452E2D74DD364F2E21E71F54BFF"
    "5CAE82AB9C9DF69EE86D2BC522363A0DABC521979B0DEADA1DBF9A42D5C4484E"
    "0ABCD06BFA53DDEF3C1B20EE3FD59D7C25E41D2B669E1EF16E6F52C3164DF4FB"
    "7930E9E4E58857B6AC7D5F42D69F6D187763CF1D5503400487F55BA57E31CC7A"
    "7135C886EFB4318AED6A1E012D9E6832A907600A918130C46DC778F971AD0038"
    "092999A333CB8B7A1A1DB93D7140003C2A4ECEA9F98D0ACC0A8291CDCEC97DCF"
    "8EC9B55A7F88A46B4DB5A851F44182E1C68A007E5E0DD9020BFD64B645036C7A"
    "4E677D2C38532A3A23BA4442CAF53EA63BB454329B7624C8917BDD64B1C0FD4C"
    "B38E8C334C701C3ACDAD0657FCCFEC719B1F5C3E4E46041F388147FB4CFDB477"
    "A52471F7A9A96910B855322EDB6340D8A00EF092350511E30ABEC1FFF9E3A26E"
    "7FB29F8C183023C3587E38DA0077D9B4763E4E4B94B2BBC194C6651E77CAF992"
    "EEAAC0232A281BF6B3A739C1226116820AE8DB5847A67CBEF9C9091B462D538C"
    "D72B03746AE77F5E62292C311562A846505DC82DB854338AE49F5235C95B9117"
    "8CCF2DD5CACEF403EC9D1810C6272B045B3B71F9DC6B80D63FDD4A8E9ADB1E69"
    "62A69526D43161C1A41D570D7938DAD4A40E329CCFF46AAA36AD004CF600C838"
    "1E425A31D951AE64FDB23FCEC9509D43687FEB69EDD1CC5E0B8CC3BDF64B10EF"
    "86B63142A3AB8829555B2F747C932665CB2C0F1CC01BD70229388839D2AF05E4"
    "54504AC78B7582822846C0BA35C35F5C59160CC046FD8251541FC68C9C86B022"
    "BB7099876A460E7451A8A93109703FEE1C217E6C3826E52C51AA691E0E423CFC"
    "99E9E31650C1217B624816CDAD9A95F9D5B8019488D9C0A0A1FE3075A577E231"
    "83F81D4A3F2FA4571EFC8CE0BA8A4FE8B6855DFE72B0A66EDED2FBABFBE58A30"
    "FAFABE1C5D71A87E2F741EF8C1FE86FEA6BBFDE530677F0D97D11D49F7A8443D"
    "0822E506A9F4614E011E2A94838FF88CD68C8BB7C5C6424CFFFFFFFFFFFFFFFF"
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_sides_derive_the_same_secret_and_refuse_degenerate_values() {
        for group in [DhGroup::Ffdhe2048, DhGroup::Ffdhe3072] {
            let a = KeyPair::generate(group).unwrap();
            let b = KeyPair::generate(group).unwrap();
            let len = prime(group).0.len();
            assert_eq!(a.public().len(), len);
            let s = a.shared(b.public()).unwrap();
            assert_eq!(s, b.shared(a.public()).unwrap());
            assert_eq!(s.len(), len);
            let mut p_minus_1 = prime(group).0.to_vec();
            p_minus_1[len - 1] -= 1;
            let mut one = vec![0; len];
            one[len - 1] = 1;
            for bad in [vec![0; len], one, p_minus_1, vec![0xff; len], vec![2; len - 1]] {
                assert_eq!(a.shared(&bad), Err(BadPublicValue));
            }
        }
    }

    /// The primes are RFC 7919's: OpenSSL's named groups, where the
    /// openssl command is installed, must be the same numbers.
    #[test]
    fn primes_are_openssls_named_groups() {
        use base64::Engine;
        for (group, name) in [
            (DhGroup::Ffdhe2048, "ffdhe2048"),
            (DhGroup::Ffdhe3072, "ffdhe3072"),
            (DhGroup::Ffdhe4096, "ffdhe4096"),
            (DhGroup::Ffdhe6144, "ffdhe6144"),
            (DhGroup::Ffdhe8192, "ffdhe8192"),
        ] {
            let p = prime(group).0;
            assert_eq!(
                (&p[..8], &p[p.len() - 8..]),
                (&[0xff; 8][..], &[0xff; 8][..]),
                "RFC 7919 shape"
            );
            let out = std::process::Command::new("openssl")
                .args(["genpkey", "-genparam", "-algorithm", "DH", "-pkeyopt"])
                .arg(format!("group:{name}"))
                .output();
            let Ok(out) = out.and_then(|o| {
                o.status.success().then_some(o).ok_or(std::io::ErrorKind::Other.into())
            }) else {
                eprintln!("openssl not installed: {name} checked by shape only");
                continue;
            };
            let pem = String::from_utf8_lossy(&out.stdout);
            let b64: String = pem.lines().filter(|l| !l.starts_with("-----")).collect();
            let der = base64::engine::general_purpose::STANDARD.decode(b64).unwrap();
            // SEQUENCE { INTEGER p (with a leading 00), INTEGER g = 2 }.
            let at = der.windows(p.len() + 1).position(|w| w[0] == 0 && &w[1..] == p);
            assert!(at.is_some(), "{name}'s prime differs from OpenSSL's");
            assert_eq!(der[der.len() - 3..], [2, 1, 2], "{name}'s generator is 2");
        }
    }
}
