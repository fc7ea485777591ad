//! The receive path: FPDUs from the framer, each segment checked before
//! any of its bytes lands (RFC 5041 §7, RFC 5040 §7), then placed.
//!
//! Tagged segments land in the STag they name, after the table agrees on
//! key, PD, rights and bounds. Untagged Sends land in the posted receive
//! at MO, never past its end. A Read Request is checked against the
//! source STag and the IRD before it is queued. Anything else earns the
//! RFC's Terminate, and the stream stops there.

use super::{
    Close, Down, Inbound, Qp, QpState, RecvWr, Rtr, Wc, WcOpcode, WcStatus, wire_terminate,
};
use crate::mr::{Access, MrError, Stag, sgl_len, walk};
use crate::wire::{
    DdpHeader, Event, Opcode, ReadRequest, ReadRequestPacket, TermLayer, Terminate, TerminatePacket,
};
use smallvec::SmallVec;
use ulp_ddp::{HintFlags, RxHint, SgEntry, Sgl, TaggedRun};

/// The longest Terminate body: header, length, DDP and RDMAP headers.
const MAX_TERMINATE: usize = 4 + 2 + DdpHeader::UNTAGGED_LEN + ReadRequest::LEN;

/// A Send message being received, across its segments.
#[derive(Debug)]
struct OpenSend {
    wr: RecvWr,
    placed: u32,
    opcode: Opcode,
    inval: u32,
    /// The zero-length Send RTR: no receive buffer behind it.
    rtr: bool,
    /// The receive is mapped on the NIC, which may place into it.
    nic: bool,
}

/// What the segment whose header came last is doing with its payload.
#[derive(Debug, Default)]
enum Seg {
    #[default]
    Idle,
    /// Placed nowhere (a zero-length tagged segment).
    Skip,
    Send {
        mo: u32,
    },
    Write {
        stag: Stag,
        to: u64,
    },
    ReadResponse {
        to: u64,
    },
    /// A Read Request or Terminate body, gathered whole (never longer
    /// than the longest Terminate: checked at its header).
    Gather(SmallVec<[u8; MAX_TERMINATE]>),
}

#[derive(Debug, Default)]
pub(super) struct RxState {
    /// Messages completed per untagged queue; the next MSN is one more.
    done: [u32; 3],
    send: Option<OpenSend>,
    seg: Seg,
    /// The segment being received, for a Terminate to quote.
    header: Option<DdpHeader>,
    payload_len: u32,
}

impl RxState {
    /// A Send is being received.
    pub(super) fn open(&self) -> bool {
        self.send.is_some()
    }

    /// The MSN the next message on untagged queue `q` carries.
    pub(super) fn next_msn(&self, q: usize) -> u32 {
        self.done[q].wrapping_add(1)
    }

    /// The receive a Send was landing in, if one was open.
    pub(super) fn abandon(&mut self) -> Option<RecvWr> {
        self.seg = Seg::Idle;
        self.send.take().filter(|s| !s.rtr).map(|s| s.wr)
    }
}

impl Qp {
    /// Bytes from the transport, in any pieces. Everything is consumed.
    pub fn handle_input(&mut self, data: &[u8]) {
        let mut data = data;
        if matches!(self.state, QpState::AwaitReply | QpState::AwaitRequest | QpState::AwaitAccept)
        {
            let rest = self.setup_input(data);
            self.rx_off += (data.len() - rest.len()) as u64;
            data = rest;
            if let Some(tx_start) = self.pending_tx_start.take() {
                self.start_offload(tx_start);
            }
        }
        if data.is_empty() || !self.in_fpdus() {
            self.rx_off += data.len() as u64;
            return;
        }
        let start = self.rx_off;
        let hints = self.hints(start, start + data.len() as u64);
        for (a, b, hint) in &hints {
            match hint.run {
                Some(run) => self.whole_fpdus(*a, *b, hint, run),
                None => {
                    self.framer.set_hint(hint.flags);
                    self.fpdus(&data[(a - start) as usize..(b - start) as usize]);
                }
            }
        }
        self.hints = hints;
        self.rx_off = start + data.len() as u64;
    }

    /// Stream bytes `[a, b)` of a run of RDMA Write FPDUs the NIC consumed
    /// whole (`hint`): checked and counted at the run's first byte as one
    /// Write over the span it wrote, then passed over unread.
    fn whole_fpdus(&mut self, a: u64, b: u64, hint: &RxHint, run: TaggedRun) {
        if !self.in_fpdus() {
            return;
        }
        let checked = if a == hint.start {
            self.check_run(a, hint.flags, run).map(|()| self.run_end = hint.end)
        } else if b <= self.run_end {
            Ok(())
        } else {
            // Part of a run whose start went by unseen.
            Err(Terminate::new(TermLayer::Llp, 0, 5))
        };
        if let Err(t) = checked {
            return self.fail(t);
        }
        self.framer.skip_whole(b - a);
        self.rx_off = b;
    }

    /// What the header of each FPDU in `run` would have been checked for:
    /// an RDMA Write between FPDUs, in RTS, into an STag that lets the
    /// peer write the whole span, with its CRC checked if CRCs are on.
    fn check_run(&mut self, at: u64, flags: HintFlags, run: TaggedRun) -> Result<(), Terminate> {
        let vouched = flags.contains(HintFlags::CRC_OK);
        let between = self.framer.at_fpdu_start() && self.framer.markers().is_none();
        if !between || self.rx.header.is_some() || (self.crc && !vouched) {
            return Err(Terminate::new(TermLayer::Llp, 0, 5));
        }
        if let QpState::AwaitRtr(_) = self.state {
            return Err(Terminate::new(TermLayer::Llp, 0, 7));
        }
        self.at_boundary(at);
        let (stag, len) = (Stag(run.stag), run.to_end.saturating_sub(run.to));
        let w = Access::REMOTE_WRITE;
        self.dev.check(self.cfg.pd, stag, run.to, len, w).map_err(|e| self.ddp_tagged(e))?;
        self.stats.tagged_bytes += run.payload;
        self.stats.placed_bytes += run.payload;
        if vouched {
            self.framer.nic_vouched(run.payload);
        }
        Ok(())
    }

    fn in_fpdus(&self) -> bool {
        matches!(self.state, QpState::Rts | QpState::Closing | QpState::AwaitRtr(_))
    }

    /// Stream bytes that all came with the same hint.
    fn fpdus(&mut self, mut data: &[u8]) {
        while self.in_fpdus() {
            let (used, ev) = match self.framer.next(data) {
                Ok(x) => x,
                Err(e) => return self.fail(wire_terminate(e)),
            };
            data = &data[used..];
            self.rx_off += used as u64;
            match ev {
                None => break,
                Some(Event::Header { header, payload_len }) => {
                    self.at_boundary(self.framer.fpdu_start());
                    self.rx.header = Some(header);
                    self.rx.payload_len = payload_len;
                    if let Err(t) = self.on_header(header, payload_len) {
                        self.fail(t);
                    }
                }
                Some(Event::Data { offset, bytes }) => {
                    if let Err(t) = self.on_data(offset, bytes) {
                        self.fail(t);
                    }
                }
                Some(Event::End) => {
                    let r = self.check_unverified().and_then(|()| self.on_end());
                    if let Err(t) = r {
                        self.fail(t);
                    }
                    self.rx.header = None;
                }
            }
        }
    }

    /// An FPDU the NIC took on and did not vouch for: its CRC, from the
    /// header, the payload where it landed, the markers among them, and
    /// the PAD.
    fn check_unverified(&mut self) -> Result<(), Terminate> {
        let Some(trailer) = self.framer.take_unverified() else { return Ok(()) };
        let len = self.rx.payload_len as usize;
        let (mut crc, mut at) = (self.framer.header_crc(), 0);
        for (off, marker) in self.framer.payload_marks() {
            crc = self.payload_crc(crc, at, off as usize - at);
            crc = crc32c::crc32c_append(crc, &marker);
            at = off as usize;
        }
        let crc = self.payload_crc(crc, at, len - at);
        let crc = self.framer.pad_crc(crc);
        if crc == trailer { Ok(()) } else { Err(wire_terminate(crate::wire::WireError::BadCrc)) }
    }

    /// `crc` continued over `n` payload bytes from `from` of the segment
    /// at hand, where they landed (a region that went away gives a wrong
    /// CRC).
    fn payload_crc(&self, crc: u32, from: usize, n: usize) -> u32 {
        let (pd, off) = (self.cfg.pd, from as u64);
        match &self.rx.seg {
            Seg::Write { stag, to } => {
                let w = Access::REMOTE_WRITE;
                self.dev.crc(pd, *stag, *to + off, n, w, crc).unwrap_or(!crc)
            }
            Seg::ReadResponse { to } => {
                let sink = self.orq.front().map_or(Stag(0), |o| o.sink);
                self.dev.crc(pd, sink, *to + off, n, Access::LOCAL_WRITE, crc).unwrap_or(!crc)
            }
            Seg::Send { mo } => {
                let mut crc = crc;
                if let Some(open) = &self.rx.send {
                    walk(&open.wr.sgl, u64::from(*mo) + off, n, |e, o, k| {
                        crc = crc32c::crc32c_append(crc, &e.buf.lock()[o..o + k]);
                    });
                }
                crc
            }
            Seg::Gather(body) => crc32c::crc32c_append(crc, &body[from..from + n]),
            Seg::Idle | Seg::Skip => crc,
        }
    }

    /// A Terminate quoting the segment at hand: its length and DDP header
    /// (M, D), and the Read Request body when `rdmap` (R).
    fn term(&self, layer: TermLayer, etype: u8, code: u8, rdmap: Option<&[u8]>) -> Terminate {
        let mut t = Terminate::new(layer, etype, code);
        if let Some(h) = self.rx.header {
            let mut b = vec![0; h.buffer_len()];
            h.emit(&mut b);
            t.seg_len = Some((b.len() as u32 + self.rx.payload_len) as u16);
            t.ddp_header = Some(b);
        }
        t.rdmap_header = rdmap.map(<[u8]>::to_vec);
        t
    }

    fn ddp_tagged(&self, e: MrError) -> Terminate {
        self.term(TermLayer::Ddp, 1, e.ddp_code(), None)
    }

    fn ddp_untagged(&self, code: u8) -> Terminate {
        self.term(TermLayer::Ddp, 2, code, None)
    }

    fn on_header(&mut self, h: DdpHeader, len: u32) -> Result<(), Terminate> {
        let opcode = h.ctrl().opcode;
        if let QpState::AwaitRtr(rtr) = self.state {
            let ok = match (rtr, h) {
                (Rtr::Write, DdpHeader::Tagged { .. }) => opcode == Opcode::Write && len == 0,
                (Rtr::Read, _) => opcode == Opcode::ReadRequest,
                (Rtr::Send, _) => opcode == Opcode::Send && len == 0,
                _ => false,
            };
            if !ok {
                return Err(Terminate::new(TermLayer::Llp, 0, 7));
            }
        }
        let pd = self.cfg.pd;
        self.rx.seg = match h {
            // siw checks nothing for a zero-length Write (the RTR's STag 1).
            DdpHeader::Tagged { .. } if opcode == Opcode::Write && len == 0 => Seg::Skip,
            DdpHeader::Tagged { stag, to, .. } if opcode == Opcode::Write => {
                let stag = Stag(stag);
                let w = Access::REMOTE_WRITE;
                self.dev.check(pd, stag, to, u64::from(len), w).map_err(|e| self.ddp_tagged(e))?;
                Seg::Write { stag, to }
            }
            DdpHeader::Tagged { stag, to, .. } => {
                // A Read Response: the oldest outbound Read, exactly.
                let Some(o) = self.orq.front() else {
                    return Err(self.term(TermLayer::Rdmap, 2, 6, None));
                };
                if stag != o.sink.0 {
                    return Err(self.ddp_tagged(MrError::InvalidStag));
                }
                if Some(to) != o.sink_to.checked_add(u64::from(o.got))
                    || o.got.checked_add(len).is_none_or(|end| end > o.len)
                {
                    return Err(self.ddp_tagged(MrError::BaseBounds));
                }
                if len > 0 {
                    let w = Access::LOCAL_WRITE;
                    self.dev
                        .check(pd, o.sink, to, u64::from(len), w)
                        .map_err(|e| self.ddp_tagged(e))?;
                }
                Seg::ReadResponse { to }
            }
            DdpHeader::Untagged { ctrl, inval_stag, qn, msn, mo } => {
                let q = opcode.queue().expect("untagged opcodes have a queue");
                if qn != q {
                    return Err(self.ddp_untagged(1));
                }
                if msn != self.rx.done[q as usize].wrapping_add(1) {
                    return Err(self.ddp_untagged(3));
                }
                match opcode {
                    Opcode::ReadRequest | Opcode::Terminate => {
                        if mo != 0 {
                            return Err(self.ddp_untagged(4));
                        }
                        let max = if opcode == Opcode::Terminate {
                            MAX_TERMINATE
                        } else {
                            ReadRequest::LEN
                        };
                        let fits = len as usize <= max;
                        if !ctrl.last
                            || !fits
                            || (opcode == Opcode::ReadRequest && len as usize != max)
                        {
                            return Err(self.ddp_untagged(5));
                        }
                        Seg::Gather(SmallVec::new())
                    }
                    _ => self.send_segment(opcode, inval_stag, mo, len)?,
                }
            }
        };
        Ok(())
    }

    /// A segment of a Send: the first opens a posted receive.
    fn send_segment(
        &mut self,
        opcode: Opcode,
        inval: u32,
        mo: u32,
        len: u32,
    ) -> Result<Seg, Terminate> {
        if self.rx.send.is_none() {
            if mo != 0 {
                return Err(self.ddp_untagged(4));
            }
            let rtr = matches!(self.state, QpState::AwaitRtr(Rtr::Send));
            let (wr, nic) = if rtr {
                (RecvWr { wr_id: 0, sgl: Sgl::new() }, false)
            } else {
                self.rq.pop_front().ok_or_else(|| self.ddp_untagged(2))?
            };
            self.rx.send = Some(OpenSend { wr, placed: 0, opcode, inval, rtr, nic });
        }
        let open = self.rx.send.as_ref().expect("opened above");
        if mo != open.placed || opcode != open.opcode {
            return Err(self.ddp_untagged(4));
        }
        let room = sgl_len(&open.wr.sgl).min(u32::MAX.into());
        if u64::from(mo) + u64::from(len) > room {
            let t = self.ddp_untagged(5);
            let open = self.rx.send.take().expect("open");
            self.complete_recv(open, WcStatus::LocalLength, None);
            return Err(t);
        }
        Ok(Seg::Send { mo })
    }

    fn on_data(&mut self, offset: u32, bytes: &[u8]) -> Result<(), Terminate> {
        let pd = self.cfg.pd;
        let n = bytes.len() as u64;
        let tagged = match &self.rx.seg {
            Seg::Write { stag, to } => Some((*stag, *to + u64::from(offset), Access::REMOTE_WRITE)),
            Seg::ReadResponse { to } => {
                let sink = self.orq.front().expect("checked at the header").sink;
                Some((sink, *to + u64::from(offset), Access::LOCAL_WRITE))
            }
            _ => None,
        };
        if let Some((stag, to, right)) = tagged {
            self.stats.tagged_bytes += n;
            if !self.framer.placed() {
                self.dev.write(pd, stag, to, bytes, right).map_err(|e| self.ddp_tagged(e))?;
                self.stats.copy_bytes += n;
            } else {
                // The NIC wrote them where the header (checked) says.
                self.stats.placed_bytes += n;
                if self.framer.wants_payload_crc() {
                    let crc = self.dev.crc(pd, stag, to, bytes.len(), right, self.framer.crc());
                    let crc = crc.map_err(|e| self.ddp_tagged(e))?;
                    self.framer.digested(crc, bytes.len());
                }
            }
            return Ok(());
        }
        if let Seg::Send { mo } = self.rx.seg {
            let open = self.rx.send.as_ref().expect("a Send segment has a receive");
            let at = u64::from(mo + offset);
            self.stats.send_bytes += n;
            if !self.framer.placed() {
                let mut done = 0;
                walk(&open.wr.sgl, at, bytes.len(), |e, off, k| {
                    e.buf.lock()[off..off + k].copy_from_slice(&bytes[done..done + k]);
                    done += k;
                });
                self.stats.copy_bytes += n;
                return Ok(());
            }
            if !open.nic {
                // Placed into a receive the NIC was never given.
                return Err(Terminate::new(TermLayer::Llp, 0, 5));
            }
            // The NIC wrote them into this receive at their MO.
            self.stats.placed_bytes += n;
            if self.framer.wants_payload_crc() {
                let crc = self.payload_crc(self.framer.crc(), offset as usize, bytes.len());
                self.framer.digested(crc, bytes.len());
            }
            return Ok(());
        }
        if self.framer.placed() {
            // Nothing else is ever placed: these bytes are not in the
            // stream, and no one can say what they were.
            return Err(Terminate::new(TermLayer::Llp, 0, 5));
        }
        if let Seg::Gather(buf) = &mut self.rx.seg {
            buf.extend_from_slice(bytes);
        }
        Ok(())
    }

    fn on_end(&mut self) -> Result<(), Terminate> {
        let Some(h) = self.rx.header else { return Ok(()) };
        let last = h.ctrl().last;
        let len = self.rx.payload_len;
        match std::mem::take(&mut self.rx.seg) {
            Seg::Idle => {}
            Seg::Skip | Seg::Write { .. } => {}
            Seg::ReadResponse { .. } => {
                let o = self.orq.front_mut().expect("checked at the header");
                o.got += len;
                if last {
                    if o.got != o.len {
                        return Err(self.ddp_tagged(MrError::BaseBounds));
                    }
                    let o = self.orq.pop_front().expect("front");
                    if let (Some(wr_id), true) = (o.wr_id, o.signaled) {
                        self.cq.push_back(Wc {
                            wr_id,
                            opcode: WcOpcode::RdmaRead,
                            status: WcStatus::Success,
                            byte_len: o.len,
                            invalidated: None,
                            solicited: false,
                            advertised: None,
                        });
                    }
                }
            }
            Seg::Send { .. } => {
                let open = self.rx.send.as_mut().expect("a Send segment has a receive");
                open.placed += len;
                if last {
                    let open = self.rx.send.take().expect("open");
                    self.rx.done[0] = self.rx.done[0].wrapping_add(1);
                    if open.rtr {
                        // Consumed by the connection manager.
                    } else if open.opcode.invalidates() {
                        // Invalidate first; the completion says it is done.
                        // A NIC may have freed its copy already: it must
                        // have freed this one and nothing else.
                        let stag = Stag(open.inval);
                        let freed = match self.nic_freed(self.framer.fpdu_start(), stag) {
                            Ok(freed) => freed,
                            Err(other) => {
                                tracing::warn!(%stag, freed = %Stag(other), "NIC freed another STag");
                                self.complete_recv(open, WcStatus::RemoteInvalidate, None);
                                return Err(Terminate::new(TermLayer::Llp, 0, 5));
                            }
                        };
                        let invalidated = self.dev.invalidate(self.cfg.pd, stag);
                        if freed {
                            self.stats.remote_invalidates += 1;
                        } else {
                            // The NIC let the Send pass (out of step after
                            // a loss, or it came as a retransmission): its
                            // copy of the STag, if it has one, goes now, or
                            // the index, once given out again, could not be.
                            self.nic_invalidate(stag, invalidated.ok());
                        }
                        match invalidated {
                            Ok(_) => {
                                // The one-shot close frees the region too.
                                if open.opcode == Opcode::SendClose {
                                    let _ = self.dev.dereg_mr(stag);
                                }
                                self.complete_recv(open, WcStatus::Success, Some(stag))
                            }
                            Err(e) => {
                                let etype = if e == MrError::WrongPd { 1 } else { 2 };
                                let t = self.term(TermLayer::Rdmap, etype, 9, None);
                                self.complete_recv(open, WcStatus::RemoteInvalidate, None);
                                return Err(t);
                            }
                        }
                    } else {
                        self.complete_recv(open, WcStatus::Success, None);
                    }
                }
            }
            Seg::Gather(body) => match h.ctrl().opcode {
                Opcode::ReadRequest => {
                    self.rx.done[1] = self.rx.done[1].wrapping_add(1);
                    self.read_request(&body)?;
                }
                _ => {
                    self.rx.done[2] = self.rx.done[2].wrapping_add(1);
                    self.terminate_received(&body);
                }
            },
        }
        if let QpState::AwaitRtr(_) = self.state {
            self.established_after_rtr();
        }
        Ok(())
    }

    fn read_request(&mut self, body: &[u8]) -> Result<(), Terminate> {
        let r =
            ReadRequest::parse(&ReadRequestPacket::new_unchecked(body)).map_err(wire_terminate)?;
        let rdmap = Some(body);
        if self.irq.len() >= usize::from(self.ird) {
            return Err(self.term(TermLayer::Rdmap, 2, 7, rdmap));
        }
        let mut src = Sgl::new();
        if r.size > 0 {
            let (pd, stag, len) = (self.cfg.pd, Stag(r.src_stag), r.size as usize);
            let found = self.dev.pieces(pd, stag, r.src_to, len, Access::REMOTE_READ, |e, o, k| {
                src.push(SgEntry { buf: e.buf.clone(), offset: o, len: k })
            });
            found.map_err(|e| self.term(TermLayer::Rdmap, 1, e.rdmap_code(), rdmap))?;
        }
        self.irq.push_back(Inbound {
            sink: r.sink_stag,
            sink_to: r.sink_to,
            len: r.size,
            src,
            sent: 0,
        });
        Ok(())
    }

    fn terminate_received(&mut self, body: &[u8]) {
        // A Terminate that does not parse still ends the stream.
        let t = TerminatePacket::new_checked(body)
            .and_then(|p| Terminate::parse(&p, self.cfg.term_layout))
            .unwrap_or_else(|_| Terminate::new(TermLayer::Rdmap, 2, 0xff));
        let status = if t.etype == 1 { WcStatus::RemoteAccess } else { WcStatus::RemoteOperation };
        // The oldest request in flight is the one the peer refused.
        if let Some(o) = self.orq.pop_front()
            && let Some(wr_id) = o.wr_id
        {
            self.cq.push_back(Wc {
                wr_id,
                opcode: WcOpcode::RdmaRead,
                status,
                byte_len: 0,
                invalidated: None,
                solicited: false,
                advertised: None,
            });
        }
        self.go_down(Down::TerminateReceived(t), Close::Graceful);
    }

    fn complete_recv(&mut self, open: OpenSend, status: WcStatus, invalidated: Option<Stag>) {
        self.cq.push_back(Wc {
            wr_id: open.wr.wr_id,
            opcode: WcOpcode::Recv,
            status,
            byte_len: open.placed,
            invalidated,
            solicited: open.opcode.solicited(),
            advertised: (open.opcode == Opcode::SendAdvertise).then_some(Stag(open.inval)),
        });
    }
}
