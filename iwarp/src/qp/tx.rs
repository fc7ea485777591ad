//! The transmit path: work requests become FPDUs, one at a time, cut at
//! MULPDU (RFC 5044 §8.1.2), when the caller has room for them.
//!
//! An FPDU's framing is built here; its payload goes from the work
//! request's buffers to the transport by reference when the NIC gathers
//! (zero-copy transmit, without markers), else copied once, into the
//! FPDU. The MPA CRC is computed over the buffers, or left to the NIC.
//!
//! Between messages, Read Responses go first (the peer waits on them),
//! then the send queue in order. Outbound Reads stop at the ORD; local
//! work requests (fast register, local invalidate) run when reached.

use super::offload::{Active, Offload, QpStats};
use super::{Hold, Outbound, Qp, QpState, Rtr, SendOp, SendWr, Wc, WcOpcode, WcStatus};
use crate::mr::{Stag, sgl_len, walk};
use crate::wire::marker::{self, Markers};
use crate::wire::{
    Ctrl, DdpHeader, Opcode, ReadRequest, ReadRequestPacket, TerminatePacket, append_with,
    crc32c_append, emit_fpdu_with, fpdu_pad, mulpdu,
};
use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::Arc;
use ulp_ddp::{IoBuf, SgEntry, Sgl, SliceSink, TxFpdus, TxMode, TxSink, ZeroCopyTx};

/// The STag siw puts in RTRs (tagged STag 0 upsets some NICs).
const RTR_STAG: u32 = 1;

/// Messages shorter than this are copied into their FPDUs even where the
/// NIC gathers: mapping a few bytes and unmapping them once they are
/// acknowledged costs more than copying them (a capsule's 64-byte SQE, a
/// 16-byte CQE). Linux siw draws the line at a page too
/// (`SENDPAGE_THRESH`), message by message.
const ZERO_COPY_MIN: u32 = 4096;

/// A message being cut into FPDUs.
#[derive(Debug)]
enum Msg {
    Sq {
        wr: SendWr,
        sent: u32,
        len: u32,
        msn: u32,
    },
    /// The Read Response at the head of the IRQ.
    ReadResponse,
}

/// Octets queued by reference, in the stream where byte `at` of the
/// framing buffer is: `len` of them, `done` handed to the transport.
#[derive(Debug)]
struct Ref {
    at: usize,
    len: usize,
    done: usize,
    run: Run,
}

#[derive(Debug)]
enum Run {
    /// Payload: `buf` from `offset`, going out as `mode` says.
    Payload { buf: IoBuf, offset: usize, mode: TxMode },
    /// A whole tagged message, framed by the NIC under mapping `token`
    /// (or, where the transport cannot take references, here, by copy);
    /// its completion once all of it is handed to the transport.
    Fpdus { fpdus: Arc<TxFpdus>, token: Option<u64>, wc: Option<Wc> },
}

#[derive(Debug)]
pub(super) struct TxState {
    pub(super) mulpdu: usize,
    /// Framing (and copied payload) to send, from `at` on, with the
    /// payload queued by reference among it.
    buf: Vec<u8>,
    at: usize,
    refs: VecDeque<Ref>,
    /// Payload goes by reference (the NIC gathers, and no markers).
    pub(super) by_reference: bool,
    /// Messages sent per untagged queue; the next MSN is one more.
    sent: [u32; 3],
    cur: Option<Msg>,
    scratch: Vec<u8>,
    /// Completions of messages the NIC frames, all handed to the
    /// transport: the QP's once it has drained.
    completed: Vec<Wc>,
    /// Bytes handed to the transport so far.
    drained: u64,
    /// The markers the peer asked for, if it did, and where an FPDU is
    /// built before they go in.
    markers: Option<Markers>,
    unmarked: Vec<u8>,
}

impl TxState {
    pub(super) fn new(emss: usize) -> Self {
        // Room for the largest header and a byte of payload, at least.
        let mulpdu = mulpdu(emss).max(DdpHeader::UNTAGGED_LEN + ReadRequest::LEN);
        Self {
            mulpdu,
            buf: Vec::new(),
            at: 0,
            refs: VecDeque::new(),
            by_reference: false,
            sent: [0; 3],
            cur: None,
            scratch: Vec::new(),
            completed: Vec::new(),
            drained: 0,
            markers: None,
            unmarked: Vec::new(),
        }
    }

    /// FPDUs start at the stream's end; with markers in them (and MULPDU
    /// cut to leave room) if the peer asked for them.
    pub(super) fn start(&mut self, emss: usize, markers: bool) {
        if markers {
            self.markers = Some(Markers { origin: self.stream_end() });
            self.mulpdu = marker::mulpdu(emss).max(DdpHeader::UNTAGGED_LEN + ReadRequest::LEN);
        }
    }

    pub(super) fn markers(&self) -> Option<Markers> {
        self.markers
    }

    /// Append the FPDU of `header` and the `payload_len` bytes `fill`
    /// writes, with its CRC when `crc`, and markers where they fall.
    fn put<E>(
        &mut self,
        header: &DdpHeader,
        payload_len: usize,
        crc: bool,
        fill: impl FnOnce(&mut Vec<u8>) -> Result<(), E>,
    ) -> Result<(), E> {
        let Some(m) = self.markers else {
            return emit_fpdu_with(header, payload_len, crc, &mut self.buf, fill);
        };
        let at = self.stream_end();
        self.unmarked.clear();
        emit_fpdu_with(header, payload_len, false, &mut self.unmarked, fill)?;
        marker::append(&mut self.buf, &self.unmarked, at, m, crc);
        Ok(())
    }

    /// Append the FPDU of `header` carrying the `payload_len` bytes of
    /// `sgl` from its byte `from`, with its CRC when `crc`: by reference
    /// where it can and the message (of `msg_len` bytes) is long enough,
    /// else copied.
    fn put_payload(
        &mut self,
        header: &DdpHeader,
        (sgl, msg_len): (&[SgEntry], u32),
        from: u64,
        payload_len: usize,
        crc: bool,
    ) {
        if !self.gathers(msg_len) || payload_len == 0 {
            let fill = |out: &mut Vec<u8>| {
                walk(sgl, from, payload_len, |e, off, k| {
                    out.extend_from_slice(&e.buf.lock()[off..off + k])
                });
                Ok::<_, Infallible>(())
            };
            let Ok(()) = self.put(header, payload_len, crc, fill);
            return;
        }
        let start = self.buf.len();
        let ulpdu = header.buffer_len() + payload_len;
        self.buf.extend_from_slice(&(ulpdu as u16).to_be_bytes());
        let at = self.buf.len();
        self.buf.resize(at + header.buffer_len(), 0);
        header.emit(&mut self.buf[at..]);
        let mut sum = if crc { crc32c_append(0, &self.buf[start..]) } else { 0 };
        walk(sgl, from, payload_len, |e, offset, len| {
            if crc {
                sum = crc32c_append(sum, &e.buf.lock()[offset..offset + len]);
            }
            let (at, buf) = (self.buf.len(), e.buf.clone());
            let run = Run::Payload { buf, offset, mode: TxMode::Unsent };
            self.refs.push_back(Ref { at, len, done: 0, run });
        });
        let trailer = self.buf.len();
        self.buf.resize(trailer + fpdu_pad(ulpdu), 0);
        let sum = if crc { crc32c_append(sum, &self.buf[trailer..]) } else { 0 };
        self.buf.extend_from_slice(&sum.to_le_bytes());
    }

    /// Whether the payload of a message of `msg_len` bytes goes by
    /// reference, for the NIC to gather: the transport takes references,
    /// and the message is long enough for a mapping to pay.
    fn gathers(&self, msg_len: u32) -> bool {
        self.by_reference && msg_len >= ZERO_COPY_MIN
    }

    /// Where setup frames go: straight out, ahead of any FPDU.
    pub(super) fn setup_bytes(&mut self) -> &mut Vec<u8> {
        &mut self.buf
    }

    /// The stream offset the next byte put in the buffer will have.
    pub(super) fn stream_end(&self) -> u64 {
        let refs = self.refs.iter().map(|r| (r.len - r.done) as u64).sum::<u64>();
        self.drained + (self.buf.len() - self.at) as u64 + refs
    }

    /// Nothing buffered and no message half sent.
    pub(super) fn idle(&self) -> bool {
        self.drained_all() && self.cur.is_none()
    }

    pub(super) fn clear(&mut self) {
        self.buf.clear();
        self.at = 0;
        self.refs.clear();
    }

    /// The send-queue request half sent, given up.
    pub(super) fn abandon(&mut self) -> Option<SendWr> {
        match self.cur.take() {
            Some(Msg::Sq { wr, .. }) => Some(wr),
            _ => None,
        }
    }

    fn next_msn(&mut self, q: usize) -> u32 {
        self.sent[q] = self.sent[q].wrapping_add(1);
        self.sent[q]
    }

    /// Nothing is left in the buffer to drain.
    fn drained_all(&self) -> bool {
        self.at == self.buf.len() && self.refs.is_empty()
    }

    /// Queue a message the NIC frames, mapped as `token`; `wc` is owed
    /// once it is all handed to the transport.
    fn put_fpdus(&mut self, fpdus: Arc<TxFpdus>, token: u64, wc: Option<Wc>) {
        let (at, len) = (self.buf.len(), fpdus.len());
        let run = Run::Fpdus { fpdus, token: Some(token), wc };
        self.refs.push_back(Ref { at, len, done: 0, run });
    }

    /// A message the NIC frames stops after the FPDU in progress (the
    /// queue pair is going down): the rest is not sent, and the
    /// completion it owed is returned, to be flushed.
    pub(super) fn cut_framed(&mut self) -> Option<Wc> {
        let r = self.refs.back_mut()?;
        let Run::Fpdus { fpdus, wc, .. } = &mut r.run else { return None };
        let wc = wc.take();
        if r.done == 0 {
            self.refs.pop_back();
        } else {
            let (i, start) = fpdus.fpdu_at(r.done - 1);
            r.len = start + fpdus.fpdu_len(i);
        }
        wc
    }

    /// Hand what is buffered to `out`, payload by reference through `zc`
    /// where it was queued so; how many bytes.
    fn drain(
        &mut self,
        out: &mut dyn TxSink,
        mut zc: Option<&mut ZeroCopyTx>,
        stats: &mut QpStats,
    ) -> usize {
        let mut n = 0;
        loop {
            let copied_to = self.refs.front().map_or(self.buf.len(), |r| r.at);
            if self.at < copied_to {
                let k = out.write(&self.buf[self.at..copied_to]);
                self.at += k;
                n += k;
                if self.at < copied_to {
                    break;
                }
            }
            let Some(r) = self.refs.front_mut() else { break };
            let zc = zc.as_deref_mut();
            let k = match &mut r.run {
                Run::Payload { buf, offset, mode } => {
                    let by_ref = zc.and_then(|z| z.send(out, mode, buf, *offset, r.len, r.done));
                    match by_ref {
                        Some(k) => {
                            stats.tx_zero_copy_bytes += k as u64;
                            k
                        }
                        None => out.write(&buf.lock()[*offset + r.done..*offset + r.len]),
                    }
                }
                Run::Fpdus { fpdus, token, .. } => {
                    let run = (r.done, r.len);
                    drain_fpdus(out, zc, fpdus, token, run, &mut self.scratch, stats)
                }
            };
            r.done += k;
            n += k;
            if r.done < r.len {
                break;
            }
            if let Some(Ref { run: Run::Fpdus { wc: Some(wc), .. }, .. }) = self.refs.pop_front() {
                self.completed.push(wc);
            }
        }
        self.drained += n as u64;
        if self.drained_all() {
            self.clear();
        }
        n
    }
}

/// Hand `out` octets `done..len` of a message the NIC frames: by
/// reference, as many as there is room for, in one run whose every whole
/// FPDU ends a record; or by copy, framed here, FPDU by FPDU, once the
/// transport turned out not to take references (`token` is then gone).
/// How many.
fn drain_fpdus(
    out: &mut dyn TxSink,
    zc: Option<&mut ZeroCopyTx>,
    fpdus: &TxFpdus,
    token: &mut Option<u64>,
    (mut done, len): (usize, usize),
    scratch: &mut Vec<u8>,
    stats: &mut QpStats,
) -> usize {
    if done == len {
        return 0;
    }
    if let (Some(z), Some(t)) = (zc, *token) {
        if let Some(k) = z.send_mapped(out, t, done as u64, len - done) {
            stats.tx_zero_copy_bytes += fpdus.payload_in(done, done + k) as u64;
            // Every FPDU but the last is as long as the first, and each
            // whole one ends a record here. The last, which ends where the
            // message does, has its record ended by `Qp::poll_send` once
            // all of the message is handed over, as any FPDU has.
            let (_, at) = fpdus.fpdu_at(done);
            out.end_records(done + k - at, fpdus.fpdu_len(0));
            return k;
        }
        *token = None;
    }
    let start = done;
    while done < len {
        let (i, at) = fpdus.fpdu_at(done);
        let end = at + fpdus.fpdu_len(i);
        scratch.resize((end - done).min(out.room()), 0);
        fpdus.fill(done, scratch);
        let k = out.write(scratch);
        done += k;
        if done == end {
            out.end_record();
        }
        if done < end {
            break;
        }
    }
    done - start
}

impl Qp {
    /// Queue stream bytes to send in `out`; how many. Each FPDU ends a
    /// record, so that the transport starts its segments with FPDUs
    /// (RFC 5044 Section 8.1).
    pub fn poll_send(&mut self, out: &mut dyn TxSink) -> usize {
        if let Offload::On(Active { zc: Some(zc), .. }) = &mut self.offload {
            zc.release(out.acked());
        }
        let mut n = 0;
        loop {
            let zc = match &mut self.offload {
                Offload::On(a) => a.zc.as_mut(),
                _ => None,
            };
            let k = self.tx.drain(out, zc, &mut self.stats);
            n += k;
            self.cq.extend(self.tx.completed.drain(..));
            if !self.tx.drained_all() {
                break;
            }
            // The FPDUs now all handed over end a record, unless the last
            // call (or turn) ended it already.
            if k > 0 {
                out.end_record();
            }
            if out.room() == 0 || !self.next_fpdu() {
                break;
            }
        }
        self.maybe_closed_clean();
        n
    }

    /// [`poll_send`](Self::poll_send) into a plain buffer, by copy.
    pub fn poll_transmit(&mut self, out: &mut [u8]) -> usize {
        self.poll_send(&mut SliceSink::new(out))
    }

    /// Whether `poll_transmit` has something to give.
    pub fn has_output(&self) -> bool {
        if !self.tx.drained_all() || self.terminate.is_some() {
            return true;
        }
        if !matches!(self.state, QpState::Rts | QpState::Closing) || self.hold != Hold::Off {
            return false;
        }
        self.tx.cur.is_some()
            || !self.irq.is_empty()
            || self.sq.front().is_some_and(|wr| match wr.op {
                SendOp::Read { .. } => self.orq.len() < usize::from(self.ord),
                _ => true,
            })
    }

    /// The initiator's RTR, right behind the Reply (RFC 6581 §7.1).
    pub(super) fn send_rtr(&mut self, rtr: Rtr) {
        match rtr {
            Rtr::Write => {
                let ctrl = Ctrl { last: true, opcode: Opcode::Write };
                self.emit(DdpHeader::Tagged { ctrl, stag: RTR_STAG, to: 0 }, false);
            }
            Rtr::Read => {
                let sink = Stag(RTR_STAG);
                let r = ReadRequest {
                    sink_stag: sink.0,
                    sink_to: 0,
                    size: 0,
                    src_stag: RTR_STAG,
                    src_to: 0,
                };
                self.emit_read_request(&r);
                let o = Outbound { wr_id: None, signaled: false, sink, sink_to: 0, len: 0, got: 0 };
                self.orq.push_back(o);
            }
            Rtr::Send => {
                let msn = self.tx.next_msn(0);
                let ctrl = Ctrl { last: true, opcode: Opcode::Send };
                self.emit(DdpHeader::Untagged { ctrl, inval_stag: 0, qn: 0, msn, mo: 0 }, false);
            }
        }
    }

    /// One FPDU of `header` carrying `self.tx.scratch` (or nothing): the
    /// small bodies (Read Request, Terminate), not data.
    fn emit(&mut self, header: DdpHeader, with_payload: bool) {
        let crc = self.our_crc();
        let payload = if with_payload { std::mem::take(&mut self.tx.scratch) } else { Vec::new() };
        let fill = |out: &mut Vec<u8>| {
            out.extend_from_slice(&payload);
            Ok::<_, Infallible>(())
        };
        let Ok(()) = self.tx.put(&header, payload.len(), crc, fill);
        self.tx.scratch = payload;
    }

    fn emit_read_request(&mut self, r: &ReadRequest) {
        let msn = self.tx.next_msn(1);
        self.tx.scratch.clear();
        append_with(&mut self.tx.scratch, r.buffer_len(), |b| {
            r.emit(&mut ReadRequestPacket::new_unchecked(b))
        });
        let ctrl = Ctrl { last: true, opcode: Opcode::ReadRequest };
        self.emit(DdpHeader::Untagged { ctrl, inval_stag: 0, qn: 1, msn, mo: 0 }, true);
    }

    /// Whether we compute the MPA CRC of what we send (else the NIC does,
    /// over the zeros we leave).
    fn our_crc(&self) -> bool {
        self.crc && !self.active().is_some_and(|a| a.tx_crc)
    }

    /// `n` payload bytes went from a buffer into an FPDU.
    fn count_tx(&mut self, n: u32) {
        let n = u64::from(n);
        self.stats.tx_bytes += n;
        match (self.crc, self.our_crc()) {
            (true, true) => self.stats.tx_crc_bytes += n,
            (true, false) => self.stats.tx_nic_crc_bytes += n,
            (false, _) => {}
        }
    }

    /// Put the next FPDU into the buffer; false when there is none.
    fn next_fpdu(&mut self) -> bool {
        if let Some(t) = self.terminate.take() {
            let msn = self.tx.next_msn(2);
            let layout = self.cfg.term_layout;
            self.tx.scratch.clear();
            append_with(&mut self.tx.scratch, t.buffer_len(), |b| {
                t.emit(&mut TerminatePacket::new_unchecked(b), layout)
            });
            let ctrl = Ctrl { last: true, opcode: Opcode::Terminate };
            self.emit(DdpHeader::Untagged { ctrl, inval_stag: 0, qn: 2, msn, mo: 0 }, true);
            return true;
        }
        if !matches!(self.state, QpState::Rts | QpState::Closing) || self.hold != Hold::Off {
            return false;
        }
        loop {
            let msg = match self.tx.cur.take() {
                Some(m) => m,
                None if !self.irq.is_empty() => Msg::ReadResponse,
                None => {
                    let Some(wr) = self.sq.front() else { return false };
                    match &wr.op {
                        SendOp::Read { .. } if self.orq.len() >= usize::from(self.ord) => {
                            return false;
                        }
                        SendOp::FastReg { .. } | SendOp::LocalInv { .. } => {
                            let wr = self.sq.pop_front().expect("front");
                            self.run_local(wr);
                            continue;
                        }
                        _ => {}
                    }
                    let wr = self.sq.pop_front().expect("front");
                    let (len, msn) = match &wr.op {
                        SendOp::Send { sgl, .. } | SendOp::Advertise { sgl, .. } => {
                            (sgl_len(sgl) as u32, self.tx.next_msn(0))
                        }
                        SendOp::Write { sgl, .. } => (sgl_len(sgl) as u32, 0),
                        _ => (0, 0),
                    };
                    Msg::Sq { wr, sent: 0, len, msn }
                }
            };
            return match msg {
                Msg::ReadResponse => self.read_response_fpdu(),
                Msg::Sq { wr, sent, len, msn } => self.sq_fpdu(wr, sent, len, msn),
            };
        }
    }

    fn sq_fpdu(&mut self, wr: SendWr, sent: u32, len: u32, msn: u32) -> bool {
        let (header, n, sgl) = match &wr.op {
            SendOp::Read { sink, sink_to, len, stag, to } => {
                let granted = self.dev.check(
                    self.cfg.pd,
                    *sink,
                    *sink_to,
                    u64::from(*len),
                    super::SINK_ACCESS,
                );
                if granted.is_err() {
                    // A chained registration failed: the Read never leaves.
                    let mut wc = ok(wr.wr_id, WcOpcode::RdmaRead, 0);
                    wc.status = WcStatus::LocalProtection;
                    self.cq.push_back(wc);
                    return true;
                }
                let r = ReadRequest {
                    sink_stag: sink.0,
                    sink_to: *sink_to,
                    size: *len,
                    src_stag: stag.0,
                    src_to: *to,
                };
                self.emit_read_request(&r);
                let o = Outbound {
                    wr_id: Some(wr.wr_id),
                    signaled: wr.signaled,
                    sink: *sink,
                    sink_to: *sink_to,
                    len: *len,
                    got: 0,
                };
                self.orq.push_back(o);
                return true;
            }
            SendOp::Send { sgl, solicited, invalidate } => {
                let n = (len - sent).min((self.tx.mulpdu - DdpHeader::UNTAGGED_LEN) as u32);
                let opcode = match (solicited, invalidate.is_some()) {
                    (false, false) => Opcode::Send,
                    (false, true) if self.oneshot => Opcode::SendClose,
                    (false, true) => Opcode::SendInvalidate,
                    (true, false) => Opcode::SendSe,
                    (true, true) => Opcode::SendSeInvalidate,
                };
                let ctrl = Ctrl { last: sent + n == len, opcode };
                let inval_stag = invalidate.map_or(0, |s| s.0);
                (DdpHeader::Untagged { ctrl, inval_stag, qn: 0, msn, mo: sent }, n, sgl)
            }
            SendOp::Advertise { stag, region, iova, access, sgl, solicited } => {
                if sent == 0 {
                    let pd = self.cfg.pd;
                    if let Err(e) = self.dev.fast_reg(pd, *stag, region.clone(), *iova, *access) {
                        tracing::debug!(error = %e, "iwarp: advertised registration failed");
                        // No Send goes out: its MSN is the next one's.
                        self.tx.sent[0] = self.tx.sent[0].wrapping_sub(1);
                        let mut wc = ok(wr.wr_id, WcOpcode::Send, 0);
                        wc.status = WcStatus::LocalProtection;
                        self.cq.push_back(wc);
                        return true;
                    }
                    self.nic_advertise(*stag, *access, self.tx.stream_end());
                }
                let n = (len - sent).min((self.tx.mulpdu - DdpHeader::UNTAGGED_LEN) as u32);
                // The patent's encoding names the STag in the header; the
                // standard one leaves it to the ULP's payload.
                let (opcode, inval_stag) = match (self.oneshot, *solicited) {
                    (true, _) => (Opcode::SendAdvertise, stag.0),
                    (false, true) => (Opcode::SendSe, 0),
                    (false, false) => (Opcode::Send, 0),
                };
                let ctrl = Ctrl { last: sent + n == len, opcode };
                (DdpHeader::Untagged { ctrl, inval_stag, qn: 0, msn, mo: sent }, n, sgl)
            }
            SendOp::Write { sgl, stag, to } => {
                let ctrl = Ctrl { last: true, opcode: Opcode::Write };
                let first = DdpHeader::Tagged { ctrl, stag: stag.0, to: *to };
                let wc = wr.signaled.then(|| ok(wr.wr_id, WcOpcode::RdmaWrite, len));
                if sent == 0 && self.nic_may_frame(len) && self.nic_frames(&first, sgl.clone(), wc)
                {
                    return true;
                }
                let n = (len - sent).min((self.tx.mulpdu - DdpHeader::TAGGED_LEN) as u32);
                let ctrl = Ctrl { last: sent + n == len, opcode: Opcode::Write };
                let to = to.wrapping_add(u64::from(sent));
                (DdpHeader::Tagged { ctrl, stag: stag.0, to }, n, sgl)
            }
            SendOp::FastReg { .. } | SendOp::LocalInv { .. } => unreachable!("run when reached"),
        };
        let crc = self.our_crc();
        self.tx.put_payload(&header, (sgl, len), u64::from(sent), n as usize, crc);
        self.count_tx(n);
        let sent = sent + n;
        if sent == len {
            if wr.signaled {
                let opcode = if matches!(wr.op, SendOp::Write { .. }) {
                    WcOpcode::RdmaWrite
                } else {
                    WcOpcode::Send
                };
                self.cq.push_back(ok(wr.wr_id, opcode, len));
            }
        } else {
            self.tx.cur = Some(Msg::Sq { wr, sent, len, msn });
        }
        true
    }

    fn read_response_fpdu(&mut self) -> bool {
        let crc = self.our_crc();
        let r = self.irq.front().expect("a Read Response is queued");
        if r.sent == 0 && self.nic_may_frame(r.len) {
            let ctrl = Ctrl { last: true, opcode: Opcode::ReadResponse };
            let first = DdpHeader::Tagged { ctrl, stag: r.sink, to: r.sink_to };
            let src = r.src.clone();
            if self.nic_frames(&first, src, None) {
                self.irq.pop_front();
                return true;
            }
        }
        let r = self.irq.front().expect("a Read Response is queued");
        let n = (r.len - r.sent).min((self.tx.mulpdu - DdpHeader::TAGGED_LEN) as u32);
        let last = r.sent + n == r.len;
        let ctrl = Ctrl { last, opcode: Opcode::ReadResponse };
        let header =
            DdpHeader::Tagged { ctrl, stag: r.sink, to: r.sink_to.wrapping_add(u64::from(r.sent)) };
        self.tx.put_payload(&header, (&r.src, r.len), u64::from(r.sent), n as usize, crc);
        self.count_tx(n);
        if last {
            self.irq.pop_front();
        } else {
            self.irq.front_mut().expect("front").sent += n;
            self.tx.cur = Some(Msg::ReadResponse);
        }
        true
    }

    /// Whether the NIC may be handed a tagged message of `len` bytes to
    /// cut into FPDUs: it gathers the message's payload and writes our
    /// CRCs, if we send any, and the message takes more than one FPDU.
    fn nic_may_frame(&self, len: u32) -> bool {
        let per_fpdu = self.tx.mulpdu - DdpHeader::TAGGED_LEN;
        self.tx.gathers(len) && !self.our_crc() && len as usize > per_fpdu
    }

    /// Hand the NIC the tagged message of `sgl`, `first` its first FPDU's
    /// header, to cut into FPDUs as it sends them, `wc` owed when all of it
    /// is handed to the transport; whether it took it. Only where
    /// [`nic_may_frame`](Self::nic_may_frame).
    fn nic_frames(&mut self, first: &DdpHeader, sgl: Sgl, wc: Option<Wc>) -> bool {
        let per_fpdu = self.tx.mulpdu - DdpHeader::TAGGED_LEN;
        let Offload::On(Active { zc: Some(zc), sk, .. }) = &mut self.offload else { return false };
        let mut header = [0u8; TxFpdus::HEADER_LEN];
        first.emit(&mut header);
        let Some(fpdus) = TxFpdus::new(header, per_fpdu, sgl) else { return false };
        let fpdus = Arc::new(fpdus);
        let Some(token) = zc.map_fpdus(&**sk, fpdus.clone()) else { return false };
        self.count_tx(fpdus.payload_len() as u32);
        self.tx.put_fpdus(fpdus, token, wc);
        true
    }

    /// Fast register and local invalidate: no bytes, a completion.
    fn run_local(&mut self, wr: SendWr) {
        let pd = self.cfg.pd;
        let (opcode, res) = match wr.op {
            SendOp::FastReg { stag, sgl, iova, access } => {
                let r = self.dev.fast_reg(pd, stag, sgl, iova, access);
                if r.is_ok() {
                    self.nic_register(stag, access);
                }
                (WcOpcode::FastReg, r)
            }
            SendOp::LocalInv { stag } => {
                let r = self.dev.invalidate(pd, stag);
                self.nic_invalidate(stag, r.ok());
                (WcOpcode::LocalInv, r.map(|_| ()))
            }
            _ => unreachable!("local requests only"),
        };
        match res {
            Ok(()) if wr.signaled => self.cq.push_back(ok(wr.wr_id, opcode, 0)),
            Ok(()) => {}
            Err(e) => {
                tracing::debug!(error = %e, "iwarp: local work request failed");
                let mut wc = ok(wr.wr_id, opcode, 0);
                wc.status = WcStatus::LocalProtection;
                self.cq.push_back(wc);
            }
        }
    }
}

fn ok(wr_id: u64, opcode: WcOpcode, byte_len: u32) -> Wc {
    Wc {
        wr_id,
        opcode,
        status: WcStatus::Success,
        byte_len,
        invalidated: None,
        solicited: false,
        advertised: None,
    }
}
