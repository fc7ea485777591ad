//! A TLS 1.3 session with an external pre-shared key, sans-IO: ciphertext
//! in and out as bytes, plaintext in and out as bytes. The handshake, the
//! key schedule and the record layer are OpenSSL's (through the `openssl`
//! crate, over in-memory buffers); nothing of TLS is written here.
//!
//! A SHA-256 PSK (32 bytes) is used with TLS_AES_128_GCM_SHA256, a
//! SHA-384 one (48 bytes) with TLS_AES_256_GCM_SHA384, as the NVMe/TCP
//! specification pairs them; OpenSSL takes them as sessions (`ffi`).
//!
//! Once the handshake is done, OpenSSL hands over the application traffic
//! secrets (through its key log callback) and the records are `record`'s,
//! as Linux hands them from tlshd to kTLS: a NIC can then take them over.

use openssl::error::ErrorStack;
use openssl::ssl::{ErrorCode, Ssl, SslContext, SslMethod, SslStream, SslVersion};
use std::collections::VecDeque;
use std::io::{self, Read, Write};
use std::sync::Arc;
use zeroize::Zeroizing;

use super::error::TlsError;
use super::ffi;
use super::psk::PskLookup;
use super::record::{Direction, RecordStats, Records, Suite};

/// The suites a server allows before a ClientHello names its PSK.
const SUITES: &str = "TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384";

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
    /// The identity the PSK was found by, or the one offered in vain (the
    /// controller's side).
    identity: ffi::FoundIdentity,
    /// The first byte the peer sent: a TLS record's content type, or not.
    peer_first: Option<u8>,
    /// The application traffic secrets, as OpenSSL logs them.
    secrets: Arc<std::sync::Mutex<Secrets>>,
    /// The records after the handshake.
    records: Option<Records>,
    server: bool,
    /// Tests only: records left to OpenSSL, a peer that is not us.
    #[cfg(test)]
    openssl_records: bool,
    /// The peer sent close_notify (to OpenSSL's records; tests only).
    #[cfg(test)]
    peer_done: bool,
}

/// A connection's application traffic secrets (the first of each
/// direction: there is no KeyUpdate).
#[derive(Default)]
struct Secrets {
    client: Option<Zeroizing<Vec<u8>>>,
    server: Option<Zeroizing<Vec<u8>>>,
}

impl Secrets {
    /// Take a line of OpenSSL's key log (`LABEL <client random> <secret>`
    /// in hex, as SSLKEYLOGFILE has it).
    fn log(&mut self, line: &str) {
        let mut words = line.split(' ');
        let (Some(label), Some(_random), Some(hex)) = (words.next(), words.next(), words.next())
        else {
            return;
        };
        let slot = match label {
            "CLIENT_TRAFFIC_SECRET_0" => &mut self.client,
            "SERVER_TRAFFIC_SECRET_0" => &mut self.server,
            _ => return,
        };
        let bytes: Option<Vec<u8>> = (0..hex.len())
            .step_by(2)
            .map(|i| hex.get(i..i + 2).and_then(|h| u8::from_str_radix(h, 16).ok()))
            .collect();
        *slot = bytes.map(Zeroizing::new);
    }
}

/// The longest PSK identity TLS 1.3 carries (`opaque identity<1..2^16-1>`,
/// RFC 8446 4.2.11). A version 1 identity of two 223-byte NQNs and a
/// SHA-384 digest is about 530 bytes: OpenSSL's older PSK callbacks, which
/// stopped at 255, would have refused it; its session callbacks do not.
const MAX_IDENTITY: usize = u16::MAX as usize;

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

/// Have `b` keep the traffic secrets its connection logs.
fn keep_secrets(b: &mut openssl::ssl::SslContextBuilder) -> Arc<std::sync::Mutex<Secrets>> {
    let secrets = Arc::new(std::sync::Mutex::new(Secrets::default()));
    let into = secrets.clone();
    b.set_keylog_callback(move |_, line| {
        into.lock().unwrap_or_else(std::sync::PoisonError::into_inner).log(line);
    });
    secrets
}

impl TlsSession {
    /// The host's side: offers `identity` with `psk`.
    pub fn client(identity: &str, psk: &[u8]) -> Result<Self, TlsError> {
        let Some(suite) = Suite::for_key(psk) else {
            return Err(TlsError::Setup(format!(
                "a {}-byte TLS PSK: TLS PSKs are 32 (SHA-256) or 48 (SHA-384) bytes",
                psk.len()
            )));
        };
        if identity.len() > MAX_IDENTITY {
            return Err(TlsError::Setup(format!(
                "the PSK identity is {} bytes, more than TLS carries (65535)",
                identity.len()
            )));
        }
        let mut b = context(false)?;
        b.set_ciphersuites(suite.name()).map_err(setup)?;
        ffi::client(&mut b, identity.as_bytes(), psk, suite);
        let secrets = keep_secrets(&mut b);
        let ssl = Ssl::new(&b.build()).map_err(setup)?;
        Self::start(ssl, false, secrets)
    }

    /// The controller's side: takes the PSK `lookup` gives for the
    /// identity offered.
    pub fn server(lookup: PskLookup) -> Result<Self, TlsError> {
        let mut b = context(true)?;
        let found = Arc::new(std::sync::Mutex::new(None));
        ffi::server(&mut b, lookup, found.clone());
        let secrets = keep_secrets(&mut b);
        let ssl = Ssl::new(&b.build()).map_err(setup)?;
        let mut s = Self::start(ssl, true, secrets)?;
        s.identity = found;
        Ok(s)
    }

    fn start(
        mut ssl: Ssl,
        server: bool,
        secrets: Arc<std::sync::Mutex<Secrets>>,
    ) -> Result<Self, TlsError> {
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
            peer_first: None,
            secrets,
            records: None,
            server,
            #[cfg(test)]
            openssl_records: false,
            #[cfg(test)]
            peer_done: false,
        };
        s.advance()?;
        Ok(s)
    }

    pub fn is_established(&self) -> bool {
        self.established
    }

    /// What the records cost in software so far.
    pub(crate) fn record_stats(&self) -> RecordStats {
        self.records.as_ref().map(|r| r.stats).unwrap_or_default()
    }

    /// The cipher suite negotiated, once established.
    pub fn cipher(&self) -> Option<&'static str> {
        self.established.then(|| self.stream.ssl().current_cipher().map(|c| c.name())).flatten()
    }

    /// The PSK identity the server took (on the server's side).
    pub fn psk_identity(&self) -> Option<String> {
        if !self.established {
            return None;
        }
        let found = self.identity.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        found.clone().and_then(Result::ok)
    }

    /// Ciphertext from the peer; the plaintext it carried is appended to
    /// `plain`.
    pub fn receive(&mut self, ciphertext: &[u8], plain: &mut Vec<u8>) -> Result<(), TlsError> {
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        if let Some(r) = &mut self.records {
            let got = r.receive(ciphertext, plain);
            return got.map_err(|e| self.fail(e));
        }
        #[cfg(test)]
        if self.openssl_records && self.established {
            return self.openssl_receive(ciphertext, plain);
        }
        if self.peer_first.is_none() {
            self.peer_first = ciphertext.first().copied();
        }
        self.stream.get_mut().rx.extend(ciphertext);
        self.advance()?;
        #[cfg(test)]
        if self.openssl_records && self.established {
            return self.openssl_receive(&[], plain);
        }
        // What came after the handshake is the records'.
        match &mut self.records {
            Some(r) => {
                let rest: Vec<u8> = self.stream.get_mut().rx.drain(..).collect();
                let got = r.receive(&rest, plain);
                got.map_err(|e| self.fail(e))
            }
            None => Ok(()),
        }
    }

    /// Plaintext to send, sealed into records at once.
    pub fn send(&mut self, plain: &[u8]) -> Result<(), TlsError> {
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        #[cfg(test)]
        if self.openssl_records && self.established {
            return self.openssl_send(plain);
        }
        let Some(r) = &mut self.records else {
            return Err(TlsError::Handshake("plaintext before the handshake finished".into()));
        };
        let sealed = r.send(plain, &mut self.stream.get_mut().tx);
        sealed.map_err(|e| self.fail(e))
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
                #[cfg(test)]
                if self.openssl_records {
                    return Ok(());
                }
                let records = self.take_records();
                self.records = Some(records.map_err(|e| self.fail(e))?);
                Ok(())
            }
            Err(e) if e.code() == ErrorCode::WANT_READ => Ok(()),
            Err(e) => {
                let why = e.ssl_error().map_or_else(|| e.to_string(), ToString::to_string);
                let why = self.explain(&why).unwrap_or(why);
                Err(self.fail(TlsError::Handshake(why)))
            }
        }
    }

    /// What a failed handshake most likely means for the user, and which
    /// setting fixes it, where OpenSSL's reason (`why`) would not say.
    fn explain(&self, why: &str) -> Option<String> {
        // A TLS record starts with its content type, 20 to 23.
        let in_the_clear = self.peer_first.is_some_and(|b| !(20..=23).contains(&b));
        if !self.server && in_the_clear {
            return Some(
                "the controller answered in the clear, not in TLS: its port takes no TLS; \
                 connect without --tls, or give the port --tls"
                    .into(),
            );
        }
        if !self.server && why.contains("alert handshake failure") {
            return Some(
                "the controller took none of our PSKs (a handshake_failure alert): --tls-key \
                 is not the port's, or --hostnqn is not the one it was made for"
                    .into(),
            );
        }
        // Either way a host's key is not the port's: the key, or (Linux
        // with nvme-cli 2.13 to 2.15's keys) the derivation.
        const WHICH: &str = "the host's key is not this port's --tls-key, or the host is \
                             Linux with keys from nvme-cli 2.13 to 2.15, which derive them as \
                             --tls-compat does";
        // The identity named a key here, but the host's PSK binder was made
        // with another: a wrong key under the right name (identity version
        // 0 carries no digest), or the other derivation.
        if self.server && why.contains("binder does not verify") {
            return Some(format!(
                "the host's PSK is not the one this port holds for its identity: {WHICH}"
            ));
        }
        let found = self.identity.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        match found.as_ref() {
            Some(Err(offered)) if self.server => Some(format!(
                "no key here matches the PSK identity the host offered ({offered}): {WHICH}"
            )),
            None if self.server && !in_the_clear => {
                Some("the host offered no PSK: NVMe/TCP's TLS takes only PSKs".into())
            }
            _ => None,
        }
    }

    /// The records from here on, from the secrets OpenSSL logged and the
    /// suite it negotiated.
    fn take_records(&mut self) -> Result<Records, TlsError> {
        if ffi::has_pending(self.stream.ssl()) {
            return Err(TlsError::Handshake("OpenSSL read past the handshake".into()));
        }
        let name = self.stream.ssl().current_cipher().map(|c| c.name());
        let suite = name.and_then(Suite::from_name).ok_or_else(|| {
            TlsError::Handshake(format!("an unexpected cipher suite {}", name.unwrap_or("(none)")))
        })?;
        let mut secrets = self.secrets.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let (Some(client), Some(server)) = (secrets.client.take(), secrets.server.take()) else {
            return Err(TlsError::Handshake("OpenSSL logged no traffic secrets".into()));
        };
        let (rx, tx) = if self.server { (client, server) } else { (server, client) };
        Ok(Records::new(Direction::from_secret(suite, &rx)?, Direction::from_secret(suite, &tx)?))
    }

    /// Tests only: a session whose records stay OpenSSL's, to check ours
    /// against.
    #[cfg(test)]
    fn with_openssl_records(mut self) -> Self {
        self.openssl_records = true;
        self
    }

    #[cfg(test)]
    fn openssl_receive(&mut self, ciphertext: &[u8], plain: &mut Vec<u8>) -> Result<(), TlsError> {
        self.stream.get_mut().rx.extend(ciphertext);
        let mut buf = [0u8; 16384];
        while !self.peer_done {
            match self.stream.ssl_read(&mut buf) {
                Ok(n) => plain.extend_from_slice(&buf[..n]),
                Err(e) if e.code() == ErrorCode::WANT_READ => break,
                Err(e) if e.code() == ErrorCode::ZERO_RETURN => self.peer_done = true,
                Err(e) => return Err(self.fail(TlsError::Record(e.to_string()))),
            }
        }
        Ok(())
    }

    #[cfg(test)]
    fn openssl_send(&mut self, plain: &[u8]) -> Result<(), TlsError> {
        let mut at = 0;
        while at < plain.len() {
            match self.stream.ssl_write(&plain[at..]) {
                Ok(n) => at += n,
                Err(e) => return Err(self.fail(TlsError::Record(e.to_string()))),
            }
        }
        Ok(())
    }

    fn fail(&mut self, e: TlsError) -> TlsError {
        self.failed = Some(e.clone());
        e
    }

    /// The records after the handshake, for a channel that works them
    /// with a NIC; `None` before (or, in tests, while they are OpenSSL's).
    pub(crate) fn records(&mut self) -> Result<Option<&mut Records>, TlsError> {
        match &self.failed {
            Some(e) => Err(e.clone()),
            None => Ok(self.records.as_mut()),
        }
    }

    /// A failure of the records found outside the session: it is final.
    pub(crate) fn failed(&mut self, e: TlsError) -> TlsError {
        self.fail(e)
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

    #[test]
    fn each_psk_length_gets_the_suite_of_its_hash() {
        for (len, suite) in [(32, "TLS_AES_128_GCM_SHA256"), (48, "TLS_AES_256_GCM_SHA384")] {
            let key: &'static [u8] = Box::leak(vec![9u8; len].into_boxed_slice());
            let mut c = TlsSession::client(ID, key).unwrap();
            let mut s = server_knowing(key);
            let _ = pump(&mut c, &mut s);
            assert_eq!((c.cipher(), s.cipher()), (Some(suite), Some(suite)), "{len}-byte PSK");
            assert_eq!(s.psk_identity().as_deref(), Some(ID));
            c.send(b"ICReq").unwrap();
            assert_eq!(pump(&mut c, &mut s).1.unwrap(), b"ICReq");
        }
        // A SHA-384 key against a SHA-256 one with the same first bytes,
        // either way round: no handshake.
        for (ours, theirs) in [(48, 32), (32, 48)] {
            let theirs: &'static [u8] = Box::leak(vec![9u8; theirs].into_boxed_slice());
            let mut c = TlsSession::client(ID, &vec![9u8; ours]).unwrap();
            let mut s = server_knowing(theirs);
            let (rc, rs) = pump(&mut c, &mut s);
            assert!(rc.is_err() || rs.is_err(), "{ours} against {}", theirs.len());
            assert!(!c.is_established() || !s.is_established());
        }
        assert!(TlsSession::client(ID, &[9u8; 40]).is_err(), "neither 32 nor 48 bytes");
    }

    /// A version 1 identity of two NQNs of the longest kind (223 bytes) and
    /// a SHA-384 digest: past the 255 bytes OpenSSL's older callbacks took.
    #[test]
    fn an_identity_of_the_longest_nqns_is_carried() {
        let nqn = |who: &str| {
            format!("nqn.2026-11.io.nvme-ddp:{who}{}", "x".repeat(223 - 24 - who.len()))
        };
        let digest = "A".repeat(64);
        let id = format!("NVMe1R02 {} {} {digest}", nqn("h"), nqn("s"));
        assert!(id.len() > 500, "{}", id.len());
        let key: &'static [u8] = Box::leak(vec![3u8; 48].into_boxed_slice());
        let want = id.clone();
        let mut s = TlsSession::server(Arc::new(move |offered| {
            (offered == want).then(|| Zeroizing::new(key.to_vec()))
        }))
        .unwrap();
        let mut c = TlsSession::client(&id, key).unwrap();
        let _ = pump(&mut c, &mut s);
        assert!(c.is_established() && s.is_established());
        assert_eq!(s.psk_identity(), Some(id));
        assert!(TlsSession::client(&"x".repeat(70_000), key).is_err(), "past what TLS carries");
    }

    /// The client's first record right behind its Finished, in one read:
    /// OpenSSL leaves it unread, and the records take it over.
    /// A client and a server two flights into a handshake: the client is
    /// done, its Finished not yet sent.
    fn up_to_the_clients_finished() -> (TlsSession, TlsSession, Vec<u8>) {
        let mut c = TlsSession::client(ID, &[7u8; 32]).unwrap();
        let mut s = server_knowing(&[7u8; 32]);
        let mut buf = vec![0u8; 65536];
        let n = transmit(&mut c, &mut buf);
        s.receive(&buf[..n], &mut Vec::new()).unwrap();
        let m = transmit(&mut s, &mut buf);
        c.receive(&buf[..m], &mut Vec::new()).unwrap();
        assert!(c.is_established() && !s.is_established());
        (c, s, buf)
    }

    #[test]
    fn data_right_behind_the_handshake_is_the_records() {
        let (mut c, mut s, mut buf) = up_to_the_clients_finished();
        c.send(b"ICReq right behind Finished").unwrap();
        let n = transmit(&mut c, &mut buf);
        let mut got = Vec::new();
        s.receive(&buf[..n], &mut got).unwrap();
        assert!(s.is_established());
        assert_eq!(got, b"ICReq right behind Finished");
    }

    /// Our records against OpenSSL's, both ways and both suites: records
    /// of every size up to the largest, and close_notify.
    #[test]
    fn our_records_are_openssls() {
        for len in [32, 48] {
            let key: &'static [u8] = Box::leak(vec![5u8; len].into_boxed_slice());
            for ours_is_client in [true, false] {
                let mut c = TlsSession::client(ID, key).unwrap();
                let mut s = server_knowing(key);
                if ours_is_client {
                    s = s.with_openssl_records();
                } else {
                    c = c.with_openssl_records();
                }
                let _ = pump(&mut c, &mut s);
                assert!(c.is_established() && s.is_established());
                assert_eq!(c.records.is_some(), ours_is_client);
                let data: Vec<u8> = (0..100_000u32).map(|i| (i * 7) as u8).collect();
                for n in [1, 16_383, 16_384, 16_385, 100_000] {
                    c.send(&data[..n]).unwrap();
                    s.send(&data[..n]).unwrap();
                    let (pc, ps) = pump(&mut c, &mut s);
                    let what =
                        format!("{len}-byte PSK, ours the client: {ours_is_client}, {n} bytes");
                    assert_eq!(ps.unwrap(), &data[..n], "{what}");
                    assert_eq!(pc.unwrap(), &data[..n], "{what}");
                }
                // OpenSSL's close_notify ends our stream.
                let (theirs, ours) =
                    if ours_is_client { (&mut s, &mut c) } else { (&mut c, &mut s) };
                theirs.send(b"last").unwrap();
                let _ = theirs.stream.shutdown();
                let mut buf = vec![0u8; 4096];
                let n = transmit(theirs, &mut buf);
                let mut got = Vec::new();
                ours.receive(&buf[..n], &mut got).unwrap();
                assert_eq!(got, b"last");
                assert!(ours.records.as_ref().unwrap().peer_done);
            }
        }
    }

    /// After its Finished, the server sends nothing until it has data:
    /// no NewSessionTicket, which kTLS under a Linux host cannot take.
    #[test]
    fn the_server_sends_no_ticket_after_the_handshake() {
        let (mut c, mut s, mut buf) = up_to_the_clients_finished();
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
