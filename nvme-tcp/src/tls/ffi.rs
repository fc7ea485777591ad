//! TLS 1.3 external PSKs through OpenSSL's session callbacks, which the
//! `openssl` crate does not wrap.
//!
//! OpenSSL's older PSK callbacks (the ones the crate wraps) bind every
//! TLS 1.3 PSK to SHA-256. A PSK hashed with SHA-384 (`hh` 02, used with
//! TLS_AES_256_GCM_SHA384) has to be handed over as an `SSL_SESSION`
//! carrying the key, a suite whose hash is the PSK's, and the protocol
//! version: `SSL_CTX_set_psk_use_session_callback` on the client,
//! `SSL_CTX_set_psk_find_session_callback` on the server. A server picks
//! its suite before it looks at the PSK, so it looks the offered identity
//! up first, from a ClientHello callback, and allows only the suite of
//! the key it found.
//!
//! Only declarations and glue live here; OpenSSL does all of TLS.

use openssl::ssl::SslContextBuilder;
use openssl_sys as ffi;
use std::ffi::{c_char, c_int, c_uchar, c_void};
use std::sync::{Mutex, OnceLock, PoisonError};
use zeroize::Zeroizing;

use super::psk::PskLookup;
use super::record::Suite;

// In libssl 3 (and 1.1.1), not declared by openssl-sys.
unsafe extern "C" {
    fn SSL_CTX_set_psk_use_session_callback(ctx: *mut ffi::SSL_CTX, cb: Option<UseSession>);
    fn SSL_CTX_set_psk_find_session_callback(ctx: *mut ffi::SSL_CTX, cb: Option<FindSession>);
    fn SSL_SESSION_new() -> *mut ffi::SSL_SESSION;
    fn SSL_SESSION_set1_master_key(
        s: *mut ffi::SSL_SESSION,
        key: *const c_uchar,
        len: usize,
    ) -> c_int;
    fn SSL_SESSION_set_cipher(s: *mut ffi::SSL_SESSION, cipher: *const ffi::SSL_CIPHER) -> c_int;
    fn SSL_SESSION_set_protocol_version(s: *mut ffi::SSL_SESSION, version: c_int) -> c_int;
    fn SSL_CIPHER_find(ssl: *mut ffi::SSL, id: *const c_uchar) -> *const ffi::SSL_CIPHER;
    fn SSL_has_pending(ssl: *const ffi::SSL) -> c_int;
}

/// Whether OpenSSL holds received bytes it has not handed out, processed
/// or not: after the handshake there must be none, the records being ours.
pub(super) fn has_pending(ssl: &openssl::ssl::SslRef) -> bool {
    use foreign_types::ForeignTypeRef;
    // SAFETY: a live connection.
    unsafe { SSL_has_pending(ssl.as_ptr()) == 1 }
}

type UseSession = unsafe extern "C" fn(
    *mut ffi::SSL,
    *const ffi::EVP_MD,
    *mut *const c_uchar,
    *mut usize,
    *mut *mut ffi::SSL_SESSION,
) -> c_int;
type FindSession =
    unsafe extern "C" fn(*mut ffi::SSL, *const c_uchar, usize, *mut *mut ffi::SSL_SESSION) -> c_int;

/// A client's PSK: offered under `identity`.
struct ClientPsk {
    identity: Vec<u8>,
    key: Zeroizing<Vec<u8>>,
    suite: Suite,
}

/// What a ClientHello's identities came to on the server: the identity a
/// key was found by, or the first one offered when none was.
pub(super) type FoundIdentity = std::sync::Arc<Mutex<Option<Result<String, String>>>>;

/// A server's PSKs, and the one the ClientHello's identity found.
struct ServerPsk {
    lookup: PskLookup,
    found: FoundIdentity,
    key: Mutex<Option<Offered>>,
}

/// An identity a ClientHello offered, and our key for it.
type Offered = (Vec<u8>, Zeroizing<Vec<u8>>);

fn client_index() -> openssl::ex_data::Index<openssl::ssl::SslContext, ClientPsk> {
    static I: OnceLock<openssl::ex_data::Index<openssl::ssl::SslContext, ClientPsk>> =
        OnceLock::new();
    *I.get_or_init(|| openssl::ssl::SslContext::new_ex_index().expect("an SSL_CTX ex_data index"))
}

fn server_index() -> openssl::ex_data::Index<openssl::ssl::SslContext, ServerPsk> {
    static I: OnceLock<openssl::ex_data::Index<openssl::ssl::SslContext, ServerPsk>> =
        OnceLock::new();
    *I.get_or_init(|| openssl::ssl::SslContext::new_ex_index().expect("an SSL_CTX ex_data index"))
}

/// Make `b` offer `key` under `identity`, with the suite of its length.
pub(super) fn client(b: &mut SslContextBuilder, identity: &[u8], key: &[u8], suite: Suite) {
    let psk = ClientPsk { identity: identity.to_vec(), key: Zeroizing::new(key.to_vec()), suite };
    b.set_ex_data(client_index(), psk);
    // SAFETY: the callback reads the ClientPsk just stored in this
    // context's ex_data, which lives as long as the context.
    unsafe { SSL_CTX_set_psk_use_session_callback(b.as_ptr(), Some(use_session)) };
}

/// Make `b` take the PSK `lookup` finds for the identity a client offers;
/// `found` learns that identity, or the one offered in vain.
pub(super) fn server(b: &mut SslContextBuilder, lookup: PskLookup, found: FoundIdentity) {
    b.set_ex_data(server_index(), ServerPsk { lookup, found, key: Mutex::new(None) });
    // SAFETY: both callbacks read the ServerPsk just stored in this
    // context's ex_data, which lives as long as the context.
    unsafe {
        ffi::SSL_CTX_set_client_hello_cb(b.as_ptr(), Some(client_hello), std::ptr::null_mut());
        SSL_CTX_set_psk_find_session_callback(b.as_ptr(), Some(find_session));
    }
}

/// The value of type `T` stored at `index` in the context of `ssl`.
///
/// # Safety
/// `ssl` is a live connection, and the context's slot `index` holds a `T`
/// or nothing.
unsafe fn context_data<'a, T>(
    ssl: *mut ffi::SSL,
    index: openssl::ex_data::Index<openssl::ssl::SslContext, T>,
) -> Option<&'a T> {
    // SAFETY: as the caller promises.
    unsafe {
        let ctx = ffi::SSL_get_SSL_CTX(ssl);
        (ffi::SSL_CTX_get_ex_data(ctx, index.as_raw()) as *const T).as_ref()
    }
}

/// A TLS 1.3 session carrying `key` for `suite`: what OpenSSL takes an
/// external PSK as. Null if any step fails.
///
/// # Safety
/// `ssl` is a live connection.
unsafe fn psk_session(ssl: *mut ffi::SSL, key: &[u8], suite: Suite) -> *mut ffi::SSL_SESSION {
    // SAFETY: every pointer is checked before use; a session that could
    // not be filled in is freed here and never handed out.
    unsafe {
        let cipher = SSL_CIPHER_find(ssl, suite.id().as_ptr());
        if cipher.is_null() {
            return std::ptr::null_mut();
        }
        let s = SSL_SESSION_new();
        if s.is_null() {
            return s;
        }
        if SSL_SESSION_set1_master_key(s, key.as_ptr(), key.len()) != 1
            || SSL_SESSION_set_cipher(s, cipher) != 1
            || SSL_SESSION_set_protocol_version(s, ffi::TLS1_3_VERSION) != 1
        {
            ffi::SSL_SESSION_free(s);
            return std::ptr::null_mut();
        }
        s
    }
}

/// The client's PSK, as OpenSSL asks for it before the ClientHello (`md`
/// null) and again after a HelloRetryRequest (`md` the hash of the suite
/// the server chose: a PSK of another hash cannot be offered then).
unsafe extern "C" fn use_session(
    ssl: *mut ffi::SSL,
    md: *const ffi::EVP_MD,
    id: *mut *const c_uchar,
    idlen: *mut usize,
    sess: *mut *mut ffi::SSL_SESSION,
) -> c_int {
    // SAFETY: OpenSSL passes a live connection and valid out-pointers;
    // the identity's bytes live in the context, past the handshake.
    unsafe {
        *sess = std::ptr::null_mut();
        let Some(psk) = context_data(ssl, client_index()) else { return 0 };
        let s = psk_session(ssl, &psk.key, psk.suite);
        if s.is_null() {
            return 0;
        }
        if !md.is_null() {
            let ours =
                ffi::SSL_CIPHER_get_handshake_digest(SSL_CIPHER_find(ssl, psk.suite.id().as_ptr()));
            if ours.is_null() || ffi::EVP_MD_type(ours) != ffi::EVP_MD_type(md) {
                ffi::SSL_SESSION_free(s);
                return 1;
            }
        }
        *id = psk.identity.as_ptr();
        *idlen = psk.identity.len();
        *sess = s;
        1
    }
}

/// The ClientHello's `pre_shared_key` extension (RFC 8446, 4.2.11).
const PRE_SHARED_KEY: u32 = 41;
/// Offered identities looked up, at most.
const MAX_IDENTITIES: usize = 4;

/// The identities a `pre_shared_key` extension offers, in order.
fn offered_identities(ext: &[u8]) -> impl Iterator<Item = &[u8]> {
    let list = ext
        .get(..2)
        .map(|n| usize::from(u16::from_be_bytes([n[0], n[1]])))
        .and_then(|n| ext.get(2..2 + n))
        .unwrap_or_default();
    let mut at = 0;
    std::iter::from_fn(move || {
        let n = usize::from(u16::from_be_bytes(list.get(at..at + 2)?.try_into().ok()?));
        let id = list.get(at + 2..at + 2 + n)?;
        // The identity, then its 4-byte obfuscated_ticket_age.
        at += 2 + n + 4;
        (at <= list.len()).then_some(id)
    })
}

/// Before the server picks a suite: find the first offered identity we
/// hold a PSK for, and allow only that key's suite.
unsafe extern "C" fn client_hello(ssl: *mut ffi::SSL, _alert: *mut c_int, _: *mut c_void) -> c_int {
    // SAFETY: OpenSSL passes a live connection in its ClientHello
    // callback, and the extension's bytes stay valid during it.
    unsafe {
        let Some(psk) = context_data(ssl, server_index()) else { return 0 };
        let (mut p, mut n) = (std::ptr::null(), 0usize);
        if ffi::SSL_client_hello_get0_ext(ssl, PRE_SHARED_KEY, &mut p, &mut n) != 1 || p.is_null() {
            // No PSK offered: the handshake fails without one.
            return ffi::SSL_CLIENT_HELLO_SUCCESS;
        }
        let ext = std::slice::from_raw_parts(p, n);
        if let Some(first) = offered_identities(ext).next() {
            let first = String::from_utf8_lossy(first).into_owned();
            *psk.found.lock().unwrap_or_else(PoisonError::into_inner) = Some(Err(first));
        }
        // A host offers one identity (Linux) or a few: a ClientHello is not
        // to make us derive keys for thousands.
        for id in offered_identities(ext).take(MAX_IDENTITIES) {
            let Ok(name) = std::str::from_utf8(id) else { continue };
            // A lookup that panics must not unwind into OpenSSL.
            let lookup = std::panic::AssertUnwindSafe(|| (psk.lookup)(name));
            let Some(key) = std::panic::catch_unwind(lookup).ok().flatten() else { continue };
            let Some(suite) = Suite::for_key(&key) else { continue };
            if ffi::SSL_set_ciphersuites(ssl, suite.c_name().as_ptr().cast::<c_char>()) != 1 {
                return 0;
            }
            *psk.key.lock().unwrap_or_else(PoisonError::into_inner) = Some((id.to_vec(), key));
            break;
        }
        ffi::SSL_CLIENT_HELLO_SUCCESS
    }
}

/// The server's PSK for an identity: the key the ClientHello callback
/// found for it, or none (the handshake then fails).
unsafe extern "C" fn find_session(
    ssl: *mut ffi::SSL,
    identity: *const c_uchar,
    len: usize,
    sess: *mut *mut ffi::SSL_SESSION,
) -> c_int {
    // SAFETY: OpenSSL passes a live connection, `len` bytes at
    // `identity`, and a valid out-pointer.
    unsafe {
        *sess = std::ptr::null_mut();
        let Some(psk) = context_data(ssl, server_index()) else { return 0 };
        let id = std::slice::from_raw_parts(identity, len);
        let held = psk.key.lock().unwrap_or_else(PoisonError::into_inner);
        let Some((_, key)) = held.as_ref().filter(|(found, _)| found == id) else { return 1 };
        let Some(suite) = Suite::for_key(key) else { return 1 };
        let s = psk_session(ssl, key, suite);
        if s.is_null() {
            return 0;
        }
        let name = String::from_utf8_lossy(id).into_owned();
        *psk.found.lock().unwrap_or_else(PoisonError::into_inner) = Some(Ok(name));
        *sess = s;
        1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offered_identities_are_read_and_a_cut_list_ends_them() {
        // Two identities, "ab" and "cde", each with a ticket age; then
        // binders, which are not ours to read.
        let ext = [0, 17, 0, 2, b'a', b'b', 0, 0, 0, 0, 0, 3, b'c', b'd', b'e', 0, 0, 0, 0, 0, 33];
        let ids: Vec<&[u8]> = offered_identities(&ext).collect();
        assert_eq!(ids, [&b"ab"[..], &b"cde"[..]]);
        // Cut inside the second identity's age: only the first stands.
        let mut cut = ext[..15].to_vec();
        cut[1] = 13;
        assert_eq!(offered_identities(&cut).count(), 1);
        for garbage in [&[][..], &[0xff][..], &[0, 200, 0, 1][..], &[0, 2, 0xff, 0xff][..]] {
            assert_eq!(offered_identities(garbage).count(), 0, "{garbage:?}");
        }
    }
}
