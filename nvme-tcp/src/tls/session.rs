//! A TLS 1.3 session with an external pre-shared key, sans-IO: ciphertext
//! in and out as bytes, plaintext in and out as bytes. The handshake, the
//! key schedule and the record layer are OpenSSL's (through the `openssl`
//! crate, over in-memory buffers); nothing of TLS is written here.
//!
//! OpenSSL takes an external PSK for TLS 1.3 through its PSK callbacks,
//! which bind the key to SHA-256: TLS_AES_128_GCM_SHA256, the suite the
//! NVMe/TCP specification makes mandatory for a SHA-256 PSK.

use openssl::error::ErrorStack;
use openssl::ssl::{ErrorCode, Ssl, SslContext, SslMethod, SslStream, SslVersion};
use std::collections::VecDeque;
use std::io::{self, Read, Write};
use std::sync::Arc;
use zeroize::Zeroizing;

/// The TLS 1.3 cipher suites a PSK hashed with SHA-256 may use.
const SUITES: &str = "TLS_AES_128_GCM_SHA256";

/// Looks up the PSK for an identity a client offered (the controller's
/// side); `None` refuses it.
pub type PskLookup = Arc<dyn Fn(&str) -> Option<Zeroizing<Vec<u8>>> + Send + Sync>;

/// Why a session failed. Closing the connection is the only answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TlsError {
    #[error("TLS handshake failed: {0}")]
    Handshake(String),
    #[error("TLS record rejected: {0}")]
    Record(String),
    #[error("TLS setup failed: {0}")]
    Setup(String),
}

/// The two directions of ciphertext, as OpenSSL's transport.
#[derive(Default)]
struct Pipe {
    rx: VecDeque<u8>,
    tx: Vec<u8>,
}

impl Read for Pipe {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.rx.is_empty() {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        self.rx.read(buf)
    }
}

impl Write for Pipe {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.tx.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// One side of a session.
pub struct TlsSession {
    stream: SslStream<Pipe>,
    established: bool,
    failed: Option<TlsError>,
    /// The identity the PSK was found by (the controller's side).
    identity: Arc<std::sync::Mutex<Option<String>>>,
    /// The peer sent close_notify.
    peer_done: bool,
}

/// The TLS PSK length OpenSSL's PSK callbacks can take for TLS 1.3: they
/// bind the key to SHA-256.
pub const PSK_LEN: usize = 32;
/// The longest identity OpenSSL's PSK callbacks pass (PSK_MAX_IDENTITY_LEN).
const MAX_IDENTITY: usize = 255;

fn setup(e: ErrorStack) -> TlsError {
    TlsError::Setup(e.to_string())
}

fn context(server: bool) -> Result<openssl::ssl::SslContextBuilder, TlsError> {
    let method = if server { SslMethod::tls_server() } else { SslMethod::tls_client() };
    let mut b = SslContext::builder(method).map_err(setup)?;
    b.set_min_proto_version(Some(SslVersion::TLS1_3)).map_err(setup)?;
    b.set_max_proto_version(Some(SslVersion::TLS1_3)).map_err(setup)?;
    b.set_ciphersuites(SUITES).map_err(setup)?;
    // No session tickets: every connection starts from the external PSK,
    // and a TLS 1.3 server must send none after the handshake at all
    // (OpenSSL sends stateful ones even with NO_TICKET): Linux hands the
    // socket to kTLS once tlshd's handshake is done, and the NVMe/TCP
    // host takes a handshake record arriving there for a broken stream.
    b.set_options(openssl::ssl::SslOptions::NO_TICKET);
    b.set_num_tickets(0).map_err(setup)?;
    Ok(b)
}

impl TlsSession {
    /// The host's side: offers `identity` with `psk`.
    pub fn client(identity: &str, psk: &[u8]) -> Result<Self, TlsError> {
        if psk.len() != PSK_LEN {
            return Err(TlsError::Setup(format!(
                "a {}-byte TLS PSK: only 32-byte (SHA-256, hh 01) PSKs are supported",
                psk.len()
            )));
        }
        if identity.len() > MAX_IDENTITY {
            return Err(TlsError::Setup(format!(
                "the PSK identity is {} bytes, more than TLS with OpenSSL's PSK callbacks takes (255): shorter NQNs",
                identity.len()
            )));
        }
        let mut b = context(false)?;
        let (id, key) = (identity.as_bytes().to_vec(), Zeroizing::new(psk.to_vec()));
        b.set_psk_client_callback(move |_, _hint, id_out, psk_out| {
            if id.len() >= id_out.len() || key.len() > psk_out.len() {
                return Ok(0);
            }
            id_out[..id.len()].copy_from_slice(&id);
            id_out[id.len()] = 0;
            psk_out[..key.len()].copy_from_slice(&key);
            Ok(key.len())
        });
        let ssl = Ssl::new(&b.build()).map_err(setup)?;
        Self::start(ssl, false)
    }

    /// The controller's side: takes the PSK `lookup` gives for the
    /// identity offered.
    pub fn server(lookup: PskLookup) -> Result<Self, TlsError> {
        let mut b = context(true)?;
        let found = Arc::new(std::sync::Mutex::new(None));
        let into = found.clone();
        b.set_psk_server_callback(move |_, identity, psk_out| {
            let identity = identity.and_then(|i| std::str::from_utf8(i).ok()).unwrap_or("");
            match lookup(identity) {
                Some(key) if key.len() == PSK_LEN && key.len() <= psk_out.len() => {
                    psk_out[..key.len()].copy_from_slice(&key);
                    let mut f = into.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                    *f = Some(identity.to_string());
                    Ok(key.len())
                }
                _ => Ok(0),
            }
        });
        let ssl = Ssl::new(&b.build()).map_err(setup)?;
        let mut s = Self::start(ssl, true)?;
        s.identity = found;
        Ok(s)
    }

    fn start(mut ssl: Ssl, server: bool) -> Result<Self, TlsError> {
        if server {
            ssl.set_accept_state();
        } else {
            ssl.set_connect_state();
        }
        let stream = SslStream::new(ssl, Pipe::default()).map_err(setup)?;
        let mut s = Self {
            stream,
            established: false,
            failed: None,
            identity: Arc::default(),
            peer_done: false,
        };
        s.advance()?;
        Ok(s)
    }

    pub fn is_established(&self) -> bool {
        self.established
    }

    /// The PSK identity the server took (on the server's side).
    pub fn psk_identity(&self) -> Option<String> {
        if !self.established {
            return None;
        }
        let found = self.identity.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        found.clone()
    }

    /// Ciphertext from the peer; the plaintext it carried is appended to
    /// `plain`.
    pub fn receive(&mut self, ciphertext: &[u8], plain: &mut Vec<u8>) -> Result<(), TlsError> {
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        if self.peer_done {
            return Ok(());
        }
        self.stream.get_mut().rx.extend(ciphertext);
        self.advance()?;
        if !self.established {
            return Ok(());
        }
        let mut buf = [0u8; 16384];
        loop {
            match self.stream.ssl_read(&mut buf) {
                Ok(0) => return Ok(()),
                Ok(n) => plain.extend_from_slice(&buf[..n]),
                Err(e) if e.code() == ErrorCode::WANT_READ => return Ok(()),
                // close_notify: the peer sends no more; what it sent
                // before stays delivered, and its TCP close follows.
                Err(e) if e.code() == ErrorCode::ZERO_RETURN => {
                    self.peer_done = true;
                    return Ok(());
                }
                Err(e) => return Err(self.fail(TlsError::Record(e.to_string()))),
            }
        }
    }

    /// Plaintext to send, sealed into records at once.
    pub fn send(&mut self, plain: &[u8]) -> Result<(), TlsError> {
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        if !self.established {
            return Err(TlsError::Handshake("plaintext before the handshake finished".into()));
        }
        let mut at = 0;
        while at < plain.len() {
            match self.stream.ssl_write(&plain[at..]) {
                Ok(n) => at += n,
                Err(e) => return Err(self.fail(TlsError::Record(e.to_string()))),
            }
        }
        Ok(())
    }

    /// Ciphertext waiting to go, left in place until [`sent`](Self::sent).
    pub fn unsent(&self) -> &[u8] {
        &self.stream.get_ref().tx
    }

    /// The first `n` bytes of [`unsent`](Self::unsent) went.
    pub fn sent(&mut self, n: usize) {
        self.stream.get_mut().tx.drain(..n);
    }

    /// Move the handshake on as far as the bytes received allow.
    fn advance(&mut self) -> Result<(), TlsError> {
        if self.established {
            return Ok(());
        }
        match self.stream.do_handshake() {
            Ok(()) => {
                self.established = true;
                Ok(())
            }
            Err(e) if e.code() == ErrorCode::WANT_READ => Ok(()),
            Err(e) => {
                let why = e.ssl_error().map_or_else(|| e.to_string(), ToString::to_string);
                Err(self.fail(TlsError::Handshake(why)))
            }
        }
    }

    fn fail(&mut self, e: TlsError) -> TlsError {
        self.failed = Some(e.clone());
        e
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Take the ciphertext waiting to go, up to `out.len()`.
    fn transmit(s: &mut TlsSession, out: &mut [u8]) -> usize {
        let n = s.unsent().len().min(out.len());
        out[..n].copy_from_slice(&s.unsent()[..n]);
        s.sent(n);
        n
    }

    const ID: &str = "NVMe0R01 nqn.2014-08.org.nvmexpress:uuid:h nqn.2026-11.io.nvme-ddp:t";

    fn server_knowing(key: &'static [u8]) -> TlsSession {
        TlsSession::server(Arc::new(move |id| (id == ID).then(|| Zeroizing::new(key.to_vec()))))
            .unwrap()
    }

    /// Move ciphertext both ways until neither side has any to send.
    fn pump(
        a: &mut TlsSession,
        b: &mut TlsSession,
    ) -> (Result<Vec<u8>, TlsError>, Result<Vec<u8>, TlsError>) {
        let (mut pa, mut pb) = (Vec::new(), Vec::new());
        let mut buf = vec![0u8; 65536];
        for _ in 0..16 {
            let n = transmit(a, &mut buf);
            if n > 0
                && let Err(e) = b.receive(&buf[..n], &mut pb)
            {
                return (Ok(pa), Err(e));
            }
            let m = transmit(b, &mut buf);
            if m > 0
                && let Err(e) = a.receive(&buf[..m], &mut pa)
            {
                return (Err(e), Ok(pb));
            }
            if n == 0 && m == 0 {
                break;
            }
        }
        (Ok(pa), Ok(pb))
    }

    #[test]
    fn a_shared_psk_carries_data_both_ways() {
        let key = [7u8; 32];
        let mut c = TlsSession::client(ID, &key).unwrap();
        let mut s = server_knowing(&[7u8; 32]);
        let _ = pump(&mut c, &mut s);
        assert!(c.is_established() && s.is_established());
        assert_eq!(s.psk_identity().as_deref(), Some(ID));
        c.send(b"ICReq, in a record").unwrap();
        s.send(b"ICResp").unwrap();
        let (pc, ps) = pump(&mut c, &mut s);
        assert_eq!(ps.unwrap(), b"ICReq, in a record");
        assert_eq!(pc.unwrap(), b"ICResp");
    }

    /// After its Finished, the server sends nothing until it has data:
    /// no NewSessionTicket, which kTLS under a Linux host cannot take.
    #[test]
    fn the_server_sends_no_ticket_after_the_handshake() {
        let mut c = TlsSession::client(ID, &[7u8; 32]).unwrap();
        let mut s = server_knowing(&[7u8; 32]);
        let mut buf = vec![0u8; 65536];
        let n = transmit(&mut c, &mut buf);
        s.receive(&buf[..n], &mut Vec::new()).unwrap();
        let m = transmit(&mut s, &mut buf);
        c.receive(&buf[..m], &mut Vec::new()).unwrap();
        let n = transmit(&mut c, &mut buf);
        s.receive(&buf[..n], &mut Vec::new()).unwrap();
        assert!(c.is_established() && s.is_established());
        assert_eq!(transmit(&mut s, &mut buf), 0, "a record after Finished (a session ticket)");
    }

    #[test]
    fn a_wrong_psk_or_garbage_fails_the_handshake_on_both_sides() {
        let mut c = TlsSession::client(ID, &[8u8; 32]).unwrap();
        let mut s = server_knowing(&[7u8; 32]);
        let (rc, rs) = pump(&mut c, &mut s);
        assert!(rc.is_err() || rs.is_err(), "one side refuses");
        assert!(!c.is_established() || !s.is_established());

        // An unknown identity, garbage instead of a ClientHello, and an
        // NVMe/TCP ICReq in the clear: refused, never a panic.
        let mut s = server_knowing(&[7u8; 32]);
        let mut c = TlsSession::client("NVMe0R01 someone else", &[7u8; 32]).unwrap();
        assert!(pump(&mut c, &mut s).1.is_err());
        for junk in [&[0x55u8; 64][..], &[0x00, 0x00, 0x80, 0x00, 0x80, 0, 0, 0][..]] {
            let mut s = server_knowing(&[7u8; 32]);
            assert!(s.receive(junk, &mut Vec::new()).is_err());
            assert!(s.receive(b"more", &mut Vec::new()).is_err(), "failure sticks");
        }
    }

    #[test]
    fn a_record_with_a_bad_tag_is_rejected() {
        let mut c = TlsSession::client(ID, &[7u8; 32]).unwrap();
        let mut s = server_knowing(&[7u8; 32]);
        let _ = pump(&mut c, &mut s);
        c.send(&[1u8; 100]).unwrap();
        let mut buf = vec![0u8; 4096];
        let n = transmit(&mut c, &mut buf);
        buf[n - 1] ^= 1;
        let mut plain = Vec::new();
        assert!(matches!(s.receive(&buf[..n], &mut plain), Err(TlsError::Record(_))));
        assert!(plain.is_empty(), "nothing of a forged record comes out");
    }
}
