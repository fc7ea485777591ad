//! The TLS layer under one NVMe/TCP connection: ciphertext from the wire
//! becomes plaintext for the queue above, and what the queue sends leaves
//! in records. The queue (host or controller) is the cleartext one,
//! unchanged: it never knows TLS is there.

use super::record::RecordStats;
use super::session::{TlsError, TlsSession};
use nvme_of::{TxStats, UlpStats};
use ulp_ddp::TxSink;

/// Plaintext received and not yet taken by the queue, at most: past it,
/// the channel takes no more ciphertext until the queue has taken some (as
/// the queue itself pushes back when its output waits). The wrappers hand
/// waiting plaintext over again whenever the queue may have room: on
/// input, on output and on timers.
const PLAIN_LIMIT: usize = 256 * 1024;
/// What one record carries at most (TLS 1.3's 2^14).
const RECORD: usize = 16 * 1024;

pub(crate) struct Channel {
    session: TlsSession,
    plain_in: Vec<u8>,
    /// The queue's plaintext, on its way into a record.
    out: Vec<u8>,
}

impl Channel {
    pub fn new(session: TlsSession) -> Self {
        Self { session, plain_in: Vec::new(), out: vec![0; RECORD] }
    }

    pub fn is_established(&self) -> bool {
        self.session.is_established()
    }

    /// What the records cost in software so far.
    pub fn record_stats(&self) -> RecordStats {
        self.session.record_stats()
    }

    /// The queue's counters with the TLS layer's added.
    pub fn add_stats(&self, (mut rx, mut tx): (UlpStats, TxStats)) -> (UlpStats, TxStats) {
        let r = self.record_stats();
        rx.tls_decrypt_bytes += r.opened_bytes;
        tx.tls_encrypt_bytes += r.sealed_bytes;
        (rx, tx)
    }

    /// Ciphertext arrived; how much of it was taken (none while too much
    /// plaintext waits for the queue). Plaintext decrypted before a
    /// failure stays, to be delivered.
    pub fn receive(&mut self, ciphertext: &[u8]) -> Result<usize, TlsError> {
        if self.plain_in.len() >= PLAIN_LIMIT {
            return Ok(0);
        }
        self.session.receive(ciphertext, &mut self.plain_in)?;
        Ok(ciphertext.len())
    }

    /// Hand waiting plaintext to the queue, which takes what it can.
    pub fn deliver(&mut self, mut take: impl FnMut(&[u8]) -> usize) {
        let mut at = 0;
        while at < self.plain_in.len() {
            let n = take(&self.plain_in[at..]);
            if n == 0 {
                break;
            }
            at += n;
        }
        self.plain_in.drain(..at);
    }

    /// Put ciphertext into `sink`: the handshake's, then the queue's
    /// output (from `produce`) sealed into records, while there is room.
    /// Returns the bytes put in, and the session's failure if sealing
    /// failed (what was put in before it still counts).
    pub fn send(
        &mut self,
        sink: &mut dyn TxSink,
        mut produce: impl FnMut(&mut [u8]) -> usize,
    ) -> (usize, Option<TlsError>) {
        let mut sent = self.flush(sink);
        while self.session.is_established() && self.session.unsent().is_empty() && sink.room() > 0 {
            // A record's worth at most, and no more than room for (the
            // record's 22 bytes of overhead wait for the next call).
            let n = produce(&mut self.out[..RECORD.min(sink.room())]);
            if n == 0 {
                break;
            }
            if let Err(e) = self.session.send(&self.out[..n]) {
                return (sent + self.flush(sink), Some(e));
            }
            sent += self.flush(sink);
        }
        (sent, None)
    }

    /// Ciphertext into `sink`, as much as it takes; the rest waits.
    fn flush(&mut self, sink: &mut dyn TxSink) -> usize {
        let n = sink.write(self.session.unsent());
        self.session.sent(n);
        n
    }

    /// Ciphertext waiting for room.
    pub fn pending(&self) -> usize {
        self.session.unsent().len()
    }
}
