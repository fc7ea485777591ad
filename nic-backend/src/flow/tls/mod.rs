//! A TLS connection as the NIC follows it ([`Tls`]): each direction whose
//! crypto state the driver handed over (`tls_dev_add`), records decrypted
//! on the way up ([`rx`]) and encrypted on the way down ([`tx`]), with
//! OpenSSL's AES-GCM ([`aead`]).
//!
//! It is a socket of its own, as Linux's `tls_device` is beside ULP DDP;
//! its mailbox carries the `DECRYPTED` hints, record resync requests and
//! the fragments of records kept out of the ring, by stream offsets of the
//! TCP connection. A ULP DDP flow added to the same connection runs
//! inside it (`inner`), on the records' content, with a mailbox of its
//! own keyed by its own offsets.

mod aead;
mod rx;
#[cfg(test)]
mod tests;
mod tx;

use crate::flow::{Env, Socket};
use aead::Aead;
use rx::{Inner, RxRecords};
use std::sync::Arc;
use tx::TxRecords;
use ulp_ddp::{Caps, DdpError, SkCtx, Stats, TlsCryptoInfo, TlsDirection, TlsStart};

pub(crate) struct Tls {
    pub ctx: Arc<SkCtx>,
    peer_isn: u32,
    local_isn: u32,
    rx: Option<RxRecords>,
    tx: Option<TxRecords>,
    /// The ULP DDP flow inside the records.
    pub inner: Inner,
    /// How far each direction has come when it is not offloaded, as a
    /// reference for unwrapping sequence numbers.
    rx_seen: u64,
    tx_seen: u64,
}

impl Tls {
    /// A connection whose received stream has come as far as `rx_seen`.
    pub fn new(peer_isn: u32, local_isn: u32, rx_seen: u64) -> Self {
        Self {
            ctx: Arc::new(SkCtx::new()),
            peer_isn,
            local_isn,
            rx: None,
            tx: None,
            inner: None,
            rx_seen,
            tx_seen: 0,
        }
    }

    /// Take over direction `dir` from stream offset `start` on.
    pub fn add(
        &mut self,
        dir: TlsDirection,
        crypto: &TlsCryptoInfo,
        start: TlsStart,
    ) -> Result<(), DdpError> {
        let encrypt = dir == TlsDirection::Tx;
        let aead = Aead::new(crypto, encrypt).ok_or(DdpError::BadCrypto)?;
        match dir {
            TlsDirection::Rx if self.rx.is_none() => {
                let mut rx = RxRecords::new(aead, start, crypto.rec_seq);
                // Bytes past the start that went by as they were: the
                // stack may hold them already, and a copy that comes again
                // must not be decrypted in its place.
                if self.rx_seen > start.tcp {
                    rx.lost_until(self.rx_seen);
                }
                self.rx = Some(rx);
            }
            TlsDirection::Tx if self.tx.is_none() => {
                self.tx = Some(TxRecords::new(aead, start, crypto.rec_seq));
            }
            _ => return Err(DdpError::Exists),
        }
        Ok(())
    }

    /// Whether the NIC seals this connection's records.
    pub fn seals(&self) -> bool {
        self.tx.is_some()
    }

    /// Give direction `dir` back. Transmit records already sealed stay
    /// the NIC's until acknowledged.
    pub fn del(&mut self, dir: TlsDirection) {
        match dir {
            TlsDirection::Rx => {
                if let Some(r) = self.rx.take() {
                    self.rx_seen = r.next;
                }
            }
            TlsDirection::Tx => {
                if let Some(t) = &mut self.tx {
                    t.close();
                }
            }
        }
    }

    /// Whether the NIC holds nothing of the connection any more: no
    /// receive offload, and every record it sealed acknowledged (or it
    /// sealed none).
    pub fn finished(&self) -> bool {
        self.rx.is_none() && self.tx.as_ref().is_none_or(|t| t.closed() && t.drained())
    }

    /// The ULP confirmed that record `rec_seq` starts at `at`.
    pub fn tls_resync(&mut self, at: TlsStart, rec_seq: u64, stats: &mut Stats) {
        if self.rx.as_mut().is_some_and(|r| r.resync(at, rec_seq)) {
            stats.rx_tls_resync_res_ok += 1;
        }
    }
}

impl Socket for Tls {
    fn ctx(&self) -> &Arc<SkCtx> {
        &self.ctx
    }

    fn isns(&self) -> (u32, u32) {
        (self.peer_isn, self.local_isn)
    }

    fn rx_next(&self) -> u64 {
        self.rx.as_ref().map_or(self.rx_seen, |r| r.next)
    }

    fn tx_next(&self) -> u64 {
        self.tx.as_ref().map_or(self.tx_seen, |t| t.next)
    }

    fn rx_segment(&mut self, off: u64, payload: &[u8], _env: &mut Env) {
        let end = off + payload.len() as u64;
        match &mut self.rx {
            Some(r) => r.pass(off, payload.len()),
            None => self.rx_seen = self.rx_seen.max(end),
        }
    }

    fn rx_rewrites(&self) -> bool {
        self.rx.is_some()
    }

    fn rx_segment_mut(&mut self, off: u64, payload: &mut [u8], env: &mut Env) {
        let Tls { rx, ctx, rx_seen, inner, .. } = self;
        match rx {
            Some(r) => r.segment(off, payload, inner, ctx, env),
            None => *rx_seen = (*rx_seen).max(off + payload.len() as u64),
        }
    }

    #[cfg(test)]
    fn rx_synced(&self) -> bool {
        self.rx.as_ref().is_some_and(|r| r.synced())
    }

    fn released(&self) -> bool {
        self.rx.is_none() && self.tx.as_ref().is_none_or(|t| t.closed())
    }

    fn finished(&self) -> bool {
        Tls::finished(self)
    }

    /// PDU resyncs are the flow inside's; records resync by `tls_resync`.
    fn resync(&mut self, seq: u64, stats: &mut Stats) -> bool {
        self.inner.as_mut().is_some_and(|f| f.resync(seq, stats))
    }

    fn rx_acked(&mut self, ack: u64) {
        if let Some(r) = &mut self.rx {
            r.acked(ack);
        }
    }

    /// The flow inside keeps its digests until the records that carry
    /// them are acknowledged whole.
    fn tx_acked(&mut self, ack: u64) {
        if let Some(t) = &mut self.tx {
            let inner_ack = t.acked(ack);
            if let Some(f) = &mut self.inner {
                f.tx_acked(inner_ack);
            }
        }
    }

    /// Transmit records are the NIC's to encrypt from `tls_dev_add` on,
    /// whatever becomes of the capability: software left them to it.
    fn tx_wanted(&self, _active: Caps) -> bool {
        true
    }

    fn tx_segment(&mut self, off: u64, payload: &mut [u8], env: &mut Env) -> bool {
        match &mut self.tx {
            Some(t) => t.segment(off, payload, &mut self.inner, env),
            None => {
                self.tx_seen = self.tx_seen.max(off + payload.len() as u64);
                false
            }
        }
    }
}
