//! The TLS layer under one NVMe/TCP connection: ciphertext from the wire
//! becomes plaintext for the queue above, and what the queue sends leaves
//! in records. The queue (host or controller) is the cleartext one,
//! unchanged: it never knows TLS is there.
//!
//! With a NIC that offloads TLS, the channel is also the driver's half of
//! `tls_device`: once the handshake is done it hands each direction's
//! crypto state to the NIC, at a record boundary.
//! - Receive: a record whose every body byte the NIC hinted `DECRYPTED`
//!   and whose tag it hinted `TAG_OK` is plaintext where it lies, and its
//!   application data goes to the queue from there, uncopied. Any other
//!   record is opened here: bytes the NIC decrypted of it are encrypted
//!   back first, as `tls_device_reencrypt` does, so a record the NIC cut
//!   short or could not authenticate costs a copy and nothing else. With
//!   a NIC, records are taken whole from the transport's buffer (which
//!   hands a record over its wrap in one piece).
//! - Transmit: records are framed in the clear, the tag left to the NIC.
//! - The NIC's record resync requests are answered here, where the record
//!   boundaries and sequence numbers are known; a record the NIC decrypted
//!   under a number it guessed wrong is encrypted back under that number.
//! - The queue inside may be offloaded too, once the NIC has the records
//!   ([`Channel::take_inner_offload`]): its PDUs are placed and digested
//!   inside them. Bytes the NIC kept out of the stack's ring are put back
//!   from where it placed them before a record is opened here.

use super::error::TlsError;
use super::record::{HEADER, RecordStats, TAG, record_len};
use super::session::TlsSession;
use nvme_of::{TxStats, UlpStats};
use std::sync::Arc;
use ulp_ddp::{
    Caps, DdpDevice, FlowId, HintFlags, SliceSink, TlsDirection, TlsSk, TlsStart, TxSink,
};

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
    /// Stream offsets of the TCP connection: of the next byte received,
    /// and of the next byte queued to send.
    rx_at: u64,
    tx_at: u64,
    nic: Option<Nic>,
}

/// A NIC that may take the records over, and what it took.
struct Nic {
    dev: Arc<dyn DdpDevice>,
    flow: FlowId,
    /// Once a direction is handed over.
    sk: Option<Arc<dyn TlsSk>>,
    rx: bool,
    tx: bool,
    /// Each direction is offered once.
    offered_rx: bool,
    offered_tx: bool,
    /// Inside a record the NIC opened: its application data ends at the
    /// first offset, the record at the second.
    opened: Option<(u64, u64)>,
    /// Body ranges the NIC decrypted of the record at hand.
    decrypted: Vec<(usize, usize)>,
    /// The queue inside may now be offloaded, and has not been told.
    inner_due: bool,
}

impl Channel {
    pub fn new(session: TlsSession) -> Self {
        Self {
            session,
            plain_in: Vec::new(),
            out: vec![0; HEADER + RECORD + 1 + TAG],
            rx_at: 0,
            tx_at: 0,
            nic: None,
        }
    }

    /// A NIC that may take the records over once the handshake is done.
    pub fn offload(&mut self, dev: Arc<dyn DdpDevice>, flow: FlowId) {
        self.nic = Some(Nic {
            dev,
            flow,
            sk: None,
            rx: false,
            tx: false,
            offered_rx: false,
            offered_tx: false,
            opened: None,
            decrypted: Vec::new(),
            inner_due: false,
        });
    }

    /// Once the NIC has taken the records: the device and connection the
    /// queue inside may be offloaded with, once.
    pub fn take_inner_offload(&mut self) -> Option<(Arc<dyn DdpDevice>, FlowId)> {
        let nic = self.nic.as_mut().filter(|n| n.inner_due)?;
        nic.inner_due = false;
        Some((nic.dev.clone(), nic.flow))
    }

    /// Whether a NIC took either direction over.
    pub fn is_offloaded(&self) -> bool {
        self.nic.as_ref().is_some_and(|n| n.rx || n.tx)
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
        rx.tls_decrypt_bytes += r.opened_bytes + r.reencrypted_bytes;
        tx.tls_encrypt_bytes += r.sealed_bytes;
        (rx, tx)
    }

    /// Ciphertext arrived; `take` is the queue's input. Returns how much
    /// of it was taken: none while too much plaintext waits for the queue;
    /// with a NIC, whole records only. Plaintext decrypted before a
    /// failure stays, to be delivered.
    pub fn receive(
        &mut self,
        ciphertext: &[u8],
        mut take: impl FnMut(&[u8]) -> usize,
    ) -> Result<usize, TlsError> {
        deliver(&mut self.plain_in, &mut take);
        self.hand_over();
        let received = if self.nic.as_ref().is_some_and(|n| n.rx) {
            self.receive_records(ciphertext, &mut take)
        } else if self.plain_in.len() >= PLAIN_LIMIT {
            Ok(0)
        } else {
            self.session.receive(ciphertext, &mut self.plain_in).map(|()| ciphertext.len())
        };
        self.rx_at += *received.as_ref().unwrap_or(&ciphertext.len()) as u64;
        // The handshake may have ended in these bytes.
        self.hand_over();
        deliver(&mut self.plain_in, &mut take);
        received
    }

    /// Hand waiting plaintext to the queue, which takes what it can.
    pub fn deliver(&mut self, mut take: impl FnMut(&[u8]) -> usize) {
        deliver(&mut self.plain_in, &mut take);
    }

    /// Offer the NIC each direction it may take, once the handshake is
    /// done: transmit after the records already sealed, receive at the
    /// first record boundary the input ends on.
    fn hand_over(&mut self) {
        let Channel { session, nic: Some(nic), rx_at, tx_at, .. } = self else { return };
        if nic.offered_rx && nic.offered_tx || !session.is_established() {
            return;
        }
        let unsent = session.unsent().len() as u64;
        let Ok(Some(records)) = session.records() else { return };
        let active = nic.dev.caps().1;
        let mut offer = |dir, info, start, wanted: Caps| {
            let Some(tls) = nic.dev.tls().filter(|_| active.contains(wanted)) else {
                return false;
            };
            match tls.tls_dev_add(nic.flow, dir, &info, start) {
                Ok(sk) => {
                    nic.sk.get_or_insert(sk);
                    true
                }
                Err(e) => {
                    tracing::debug!(error = %e, ?dir, "the NIC did not take the records");
                    false
                }
            }
        };
        if !nic.offered_tx {
            let start = TlsStart { tcp: *tx_at + unsent, inner: records.tx_content };
            nic.tx = offer(TlsDirection::Tx, records.tx.crypto_info(), start, Caps::TLS_TX);
            nic.offered_tx = true;
        }
        if !nic.offered_rx && records.at_boundary() {
            let start = TlsStart { tcp: *rx_at, inner: records.rx_content };
            nic.rx = offer(TlsDirection::Rx, records.rx.crypto_info(), start, Caps::TLS_RX);
            nic.offered_rx = true;
            // Both ways settled: the queue inside may follow.
            nic.inner_due = nic.rx || nic.tx;
        }
    }

    /// Whole records from `input` with the NIC's hints: opened by the NIC
    /// and delivered where they lie, or opened here.
    fn receive_records(
        &mut self,
        input: &[u8],
        take: &mut impl FnMut(&[u8]) -> usize,
    ) -> Result<usize, TlsError> {
        let Channel { session, plain_in, nic: Some(nic), rx_at, .. } = self else { return Ok(0) };
        let Some(records) = session.records()? else { return Ok(0) };
        let mut pos = 0;
        let walked = (|| {
            while !records.peer_done {
                let here = *rx_at + pos as u64;
                if let Some((content_end, end)) = nic.opened {
                    let k = ((content_end.max(here) - here) as usize).min(input.len() - pos);
                    if k > 0 {
                        let t = take(&input[pos..pos + k]);
                        pos += t;
                        if t < k {
                            break;
                        }
                        continue;
                    }
                    // The content type, padding and tag: nothing to deliver.
                    let k = ((end - here) as usize).min(input.len() - pos);
                    pos += k;
                    if here + (k as u64) < end {
                        break;
                    }
                    nic.opened = None;
                    continue;
                }
                // Opened here, and not yet taken: it goes first.
                if !plain_in.is_empty() {
                    break;
                }
                // A record cut short before the NIC took over ends first.
                if let Some(need) = records.partial_need()? {
                    let k = need.min(input.len() - pos);
                    records.receive(&input[pos..pos + k], plain_in)?;
                    pos += k;
                    deliver(plain_in, take);
                    if k == need {
                        continue;
                    }
                    break;
                }
                let boundary = TlsStart { tcp: here, inner: records.rx_content };
                answer_resync(nic, boundary, records.rx.seq);
                let rest = &input[pos..];
                let Some(len) = record_len(rest)?.filter(|&n| n <= rest.len()) else { break };
                let record = &rest[..len];
                let body = here + HEADER as u64;
                let tag_at = len - HEADER - TAG;
                nic.decrypted.clear();
                let mut tag_ok = false;
                if let Some(sk) = &nic.sk {
                    sk.ctx().with_hints(body, here + len as u64, |a, b, h| {
                        let (a, b) = ((a - body) as usize, (b - body) as usize);
                        if h.flags.contains(HintFlags::DECRYPTED) {
                            nic.decrypted.push((a, b));
                        }
                        tag_ok |=
                            h.flags.contains(HintFlags::TAG_OK) && a <= tag_at && b == len - HEADER;
                    });
                }
                if tag_ok && nic.decrypted[..] == [(0, tag_at)] {
                    // Where the NIC placed this record's data, and the
                    // number it guessed for it, are not needed.
                    if let Some(sk) = &nic.sk {
                        sk.ctx().forget_frags(here + len as u64);
                        sk.ctx().take_guess(body);
                    }
                    match records.take_opened(&record[HEADER..len - TAG])? {
                        Some(n) => {
                            nic.opened = Some((body + n as u64, here + len as u64));
                            pos += HEADER;
                        }
                        None => pos += len,
                    }
                    continue;
                }
                // Not vouched for: whatever the NIC decrypted of the body
                // goes back to ciphertext, and the record is opened here
                // (where a tag that failed in the NIC fails again).
                nic.decrypted.retain_mut(|r| {
                    r.1 = r.1.min(tag_at);
                    r.0 < r.1
                });
                tracing::trace!(at = here, len, decrypted = ?nic.decrypted, "record opened in software");
                let restore = |copy: &mut [u8]| {
                    if let Some(sk) = &nic.sk {
                        sk.ctx().with_frags(here, here + len as u64, |f| {
                            let at = (f.start - here) as usize;
                            let g = f.buf.lock();
                            if let (Some(dst), Some(src)) =
                                (copy.get_mut(at..at + f.len), g.get(f.offset..f.offset + f.len))
                            {
                                dst.copy_from_slice(src);
                            }
                        });
                    }
                };
                let guess = nic.sk.as_ref().and_then(|sk| sk.ctx().take_guess(body));
                records.take_mixed(record, &nic.decrypted, guess, restore, plain_in)?;
                pos += len;
                deliver(plain_in, take);
            }
            if records.peer_done {
                // Nothing after close_notify is read.
                pos = input.len();
            }
            Ok(())
        })();
        match walked {
            Ok(()) => Ok(pos),
            Err(e) => Err(session.failed(e)),
        }
    }

    /// Put ciphertext into `sink`: the handshake's, then the queue's
    /// output (from `queue`) sealed into records, or framed for the NIC to
    /// seal, while there is room. Returns the bytes put in, and the
    /// session's failure if sealing failed (what was put in before it
    /// still counts).
    pub fn send(
        &mut self,
        sink: &mut dyn TxSink,
        queue: &mut dyn Plaintext,
    ) -> (usize, Option<TlsError>) {
        self.hand_over();
        let mut sent = self.flush(sink);
        let mut failed = None;
        let framing = self.nic.as_ref().is_some_and(|n| n.tx);
        while self.session.is_established() && self.session.unsent().is_empty() && sink.room() > 0 {
            if framing {
                match self.frame(sink, queue) {
                    Ok(0) => break,
                    Ok(n) => sent += n,
                    Err(e) => {
                        failed = Some(self.session.failed(e));
                        break;
                    }
                }
                continue;
            }
            // A record's worth at most, and no more than room for (the
            // record's 22 bytes of overhead wait for the next call).
            let room = RECORD.min(sink.room());
            let n = queue.send(&mut SliceSink::new(&mut self.out[..room]));
            if n == 0 {
                break;
            }
            if let Err(e) = self.session.send(&self.out[..n]) {
                sent += self.flush(sink);
                failed = Some(e);
                break;
            }
            sent += self.flush(sink);
        }
        self.tx_at += sent as u64;
        (sent, failed)
    }

    /// One record of the queue's output, framed in the clear for the NIC
    /// to seal: the header, then the content straight from the queue into
    /// `sink` (the bytes it has waiting, as many as fit), then the content
    /// type and room for the tag. A whole record or none: the NIC reads
    /// them as they go. Returns the bytes put in.
    fn frame(
        &mut self,
        sink: &mut dyn TxSink,
        queue: &mut dyn Plaintext,
    ) -> Result<usize, TlsError> {
        let Some(room) = sink.room().checked_sub(HEADER + 1 + TAG).filter(|&r| r > 0) else {
            return Ok(0);
        };
        let Some(records) = self.session.records()? else { return Ok(0) };
        let n = queue.pending().min(room).min(RECORD);
        if n == 0 {
            // Nothing counted as waiting; the queue may still have some
            // (answers it makes as it sends): through a copy.
            let n =
                queue.send(&mut SliceSink::new(&mut self.out[HEADER..HEADER + room.min(RECORD)]));
            if n == 0 {
                return Ok(0);
            }
            let len = records.frame(n, &mut self.out)?;
            return Ok(sink.write(&self.out[..len]));
        }
        let (header, trailer) = records.frame_around(n)?;
        let mut put = sink.write(&header);
        let content = queue.send(&mut Limited { sink: &mut *sink, room: n });
        if content != n {
            return Err(TlsError::Record(format!(
                "the queue gave {content} of the {n} bytes it had waiting for a record"
            )));
        }
        put += content + sink.write(&trailer);
        Ok(put)
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

    /// Give the NIC its directions back (the connection is going).
    pub fn release(&mut self) {
        if let Some(nic) = &mut self.nic
            && let Some(sk) = nic.sk.take()
        {
            for (on, dir) in [(nic.rx, TlsDirection::Rx), (nic.tx, TlsDirection::Tx)] {
                if on {
                    sk.tls_dev_del(dir);
                }
            }
            (nic.rx, nic.tx) = (false, false);
        }
    }
}

impl Drop for Channel {
    fn drop(&mut self) {
        self.release();
    }
}

/// The queue above, as the channel takes its output.
pub(crate) trait Plaintext {
    /// Bytes waiting to go, every one of which `send` gives when there is
    /// room.
    fn pending(&self) -> usize;
    /// Queue output into `out`, as much as it has room for; how many.
    fn send(&mut self, out: &mut dyn TxSink) -> usize;
}

/// A sink that takes at most `room` bytes more.
struct Limited<'a> {
    sink: &'a mut dyn TxSink,
    room: usize,
}

impl TxSink for Limited<'_> {
    fn room(&self) -> usize {
        self.room.min(self.sink.room())
    }

    fn write(&mut self, bytes: &[u8]) -> usize {
        let n = self.sink.write(&bytes[..bytes.len().min(self.room)]);
        self.room -= n;
        n
    }

    /// The NIC gathers them into the record, then seals it.
    fn write_by_reference(&mut self, len: usize, token: u64, token_offset: u64) -> usize {
        let n = self.sink.write_by_reference(len.min(self.room), token, token_offset);
        self.room -= n;
        n
    }

    fn offset(&self) -> u64 {
        self.sink.offset()
    }

    fn acked(&self) -> u64 {
        self.sink.acked()
    }
}

/// Hand `plain` to the queue, which takes what it can; the rest stays.
fn deliver(plain: &mut Vec<u8>, take: &mut impl FnMut(&[u8]) -> usize) {
    let mut at = 0;
    while at < plain.len() {
        let n = take(&plain[at..]);
        if n == 0 {
            break;
        }
        at += n;
    }
    plain.drain(..at);
}

/// Answer the NIC's record resync request if it names the record
/// boundary `here`, record `seq`; forget one the records went past.
fn answer_resync(nic: &Nic, here: TlsStart, seq: u64) {
    let Some(sk) = &nic.sk else { return };
    match sk.ctx().resync_request() {
        Some(asked) if asked == here.tcp => {
            sk.ctx().take_resync_request();
            sk.tls_dev_resync(here, seq);
        }
        Some(asked) if asked < here.tcp => {
            sk.ctx().take_resync_request();
        }
        _ => {}
    }
}
