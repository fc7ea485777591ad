//! Connection setup: the MPA Request/Reply exchange (RFC 5044 §7.1) with
//! RFC 6581's IRD/ORD and peer-to-peer RTR, negotiated as Linux siw does.

use std::time::Duration;

use super::{Close, Down, Event, Hold, Qp, QpConfig, QpState, Rtr, SetupError, VerbsError};
use crate::mr::Device;
use crate::wire::{FpduFramer, IrdOrd, MpaFrame, MpaKind, MpaPacket, append_with};

/// What this side sends in its own frames (Linux takes at most 256):
/// room is kept for the IRD/ORD words and the one-shot offer.
const MAX_PRIVATE_DATA: usize = MpaFrame::MAX_PRIVATE_DATA as usize - 4 - ONESHOT_OFFER.len();

/// Appended to the ULP's private data to offer (in the Request) and
/// accept (in the Reply) the one-shot opcodes 0x8 and 0xC. A standard
/// peer passes it to its ULP as trailing bytes, which NVMe/RDMA ignores,
/// and never answers it: the extension is used only when both ends sent
/// it.
const ONESHOT_OFFER: [u8; 8] = *b"1SHOT\x08\x0c\x01";

/// The most inbound RDMA Reads a responder serves at once however many
/// the initiator asks to issue: siw's device limit (`max_qp_rd_atom`).
/// It also bounds what a peer can make a connection hold with queued
/// Read Requests (zero-length ones need no STag).
const MAX_IRD: u16 = 128;

/// `pd` with the offer appended when `offer`.
fn with_offer(pd: &[u8], offer: bool) -> Vec<u8> {
    let mut v = pd.to_vec();
    if offer {
        v.extend_from_slice(&ONESHOT_OFFER);
    }
    v
}

/// Take the offer off the end of `pd`: whether it was there.
fn take_offer(pd: &mut Vec<u8>) -> bool {
    let there = pd.ends_with(&ONESHOT_OFFER);
    if there {
        pd.truncate(pd.len() - ONESHOT_OFFER.len());
    }
    there
}

impl Qp {
    /// Active side: the TCP connection is up; the MPA Request with
    /// `private_data` is the first thing `poll_transmit` gives.
    pub fn connect(
        dev: &Device,
        cfg: QpConfig,
        private_data: &[u8],
        now: Duration,
    ) -> Result<Qp, VerbsError> {
        if private_data.len() > MAX_PRIVATE_DATA {
            return Err(VerbsError::PrivateData(private_data.len()));
        }
        let mut qp = Qp::new(dev, cfg, QpState::AwaitReply);
        let c = &qp.cfg;
        let ird_ord = IrdOrd {
            ird: c.ird.min(IrdOrd::MAX),
            ord: c.ord.min(IrdOrd::MAX),
            p2p: c.p2p.is_some(),
            send_rtr: c.p2p == Some(Rtr::Send),
            write_rtr: c.p2p == Some(Rtr::Write),
            read_rtr: c.p2p == Some(Rtr::Read),
        };
        let pd = with_offer(private_data, c.oneshot_opcodes);
        let mut req = frame(MpaKind::Request, c.crc, false, Some(ird_ord), &pd);
        req.markers = c.markers;
        put_frame(qp.tx.setup_bytes(), &req);
        qp.deadline = Some(now + qp.cfg.reply_timeout);
        Ok(qp)
    }

    /// Passive side: a TCP connection was accepted; wait for the Request.
    pub fn listen(dev: &Device, cfg: QpConfig, now: Duration) -> Qp {
        let mut qp = Qp::new(dev, cfg, QpState::AwaitRequest);
        qp.deadline = Some(now + qp.cfg.request_timeout);
        qp
    }

    /// Accept the Request reported by `Event::ConnectRequest`, answering
    /// with `private_data`.
    pub fn accept(&mut self, private_data: &[u8]) -> Result<(), VerbsError> {
        if private_data.len() > MAX_PRIVATE_DATA {
            return Err(VerbsError::PrivateData(private_data.len()));
        }
        let Some(req) = self.request.take().filter(|_| self.state == QpState::AwaitAccept) else {
            return Err(VerbsError::NotConnected);
        };
        self.crc = req.crc || self.cfg.crc;
        // Relaxed negotiation, as siw: serve as many Reads as the initiator
        // will issue (up to a device's limit), and issue no more than it
        // serves.
        let peer = req.ird_ord.unwrap_or(IrdOrd {
            ird: self.cfg.ord,
            ord: self.cfg.ird,
            ..IrdOrd::default()
        });
        self.ird = self.cfg.ird.max(peer.ord.min(MAX_IRD)).min(IrdOrd::MAX);
        self.ord = self.cfg.ord.min(peer.ird);
        // Peer-to-peer: echo it and pick the RTR, Write first.
        let rtr = peer.p2p.then_some({
            if peer.write_rtr || !(peer.read_rtr || peer.send_rtr) {
                Rtr::Write
            } else if peer.read_rtr {
                Rtr::Read
            } else {
                Rtr::Send
            }
        });
        let ird_ord = req.ird_ord.map(|_| IrdOrd {
            ird: self.ird,
            ord: self.ord,
            p2p: rtr.is_some(),
            send_rtr: rtr == Some(Rtr::Send),
            write_rtr: rtr == Some(Rtr::Write),
            read_rtr: rtr == Some(Rtr::Read),
        });
        let pd = with_offer(private_data, self.oneshot);
        let mut reply = frame(MpaKind::Reply, self.crc, false, ird_ord, &pd);
        reply.rev = req.rev;
        reply.markers = self.cfg.markers;
        put_frame(self.tx.setup_bytes(), &reply);
        // Each side gets markers if it asked for them (RFC 5044 §7.1).
        self.framer = FpduFramer::new(self.crc)
            .with_oneshot(self.oneshot)
            .start(self.rx_off, self.cfg.markers);
        self.tx.start(self.cfg.emss, req.markers);
        match rtr {
            Some(rtr) => self.state = QpState::AwaitRtr(rtr),
            None => self.established(Vec::new()),
        }
        self.start_offload(self.tx.stream_end());
        Ok(())
    }

    /// Reject the Request with `private_data`, then close.
    pub fn reject(&mut self, private_data: &[u8]) -> Result<(), VerbsError> {
        if private_data.len() > MAX_PRIVATE_DATA {
            return Err(VerbsError::PrivateData(private_data.len()));
        }
        let Some(req) = self.request.take().filter(|_| self.state == QpState::AwaitAccept) else {
            return Err(VerbsError::NotConnected);
        };
        self.send_reject(&req, private_data);
        self.state = QpState::Error;
        self.close = Some(Close::Graceful);
        Ok(())
    }

    /// A Reply with R: the request's revision, IRD/ORD zero when enhanced.
    fn send_reject(&mut self, req: &MpaFrame, private_data: &[u8]) {
        let io = req.ird_ord.map(|_| IrdOrd::default());
        let mut rej = frame(MpaKind::Reply, false, true, io, private_data);
        rej.rev = req.rev;
        rej.enhanced = req.enhanced;
        put_frame(self.tx.setup_bytes(), &rej);
    }

    fn established(&mut self, private_data: Vec<u8>) {
        self.state = QpState::Rts;
        self.deadline = None;
        self.events.push_back(Event::Established { private_data });
    }

    /// Passive, peer-to-peer: the RTR arrived.
    pub(super) fn established_after_rtr(&mut self) {
        self.established(Vec::new());
    }

    pub(super) fn fail_setup(&mut self, e: SetupError, close: Close) {
        tracing::debug!(error = %e, "iwarp: connection setup failed");
        self.go_down(Down::Setup(e), close);
    }

    /// Give up on a connection still being set up, at the ULP's request.
    pub(super) fn fail_setup_quietly(&mut self, close: Close) {
        self.go_down(Down::Closed, close);
    }

    /// Bytes while the MPA exchange runs. Returns what is left over for
    /// the FPDU path (the initiator may get FPDUs right behind the Reply).
    pub(super) fn setup_input<'a>(&mut self, data: &'a [u8]) -> &'a [u8] {
        if self.state == QpState::AwaitAccept {
            // The initiator must wait for the Reply (siw: -EPROTO).
            if !data.is_empty() {
                self.fail_setup(SetupError::EarlyData, Close::Abortive);
            }
            return &[];
        }
        // Take at most one frame's worth into the setup buffer.
        let before = self.mpa.len();
        self.mpa.extend_from_slice(data);
        let (f, len) = match MpaFrame::parse_prefix(&self.mpa) {
            Ok(Some(x)) => x,
            Ok(None) => return &[],
            Err(e) => {
                self.fail_setup(e.into(), Close::Abortive);
                return &[];
            }
        };
        let rest = &data[len - before..];
        self.mpa = Vec::new();
        match (self.state.clone(), f.kind) {
            (QpState::AwaitRequest, MpaKind::Request) => {
                self.deadline = None;
                if !rest.is_empty() {
                    self.fail_setup(SetupError::EarlyData, Close::Abortive);
                    return &[];
                }
                let mut f = f;
                self.oneshot = take_offer(&mut f.private_data) && self.cfg.oneshot_opcodes;
                self.events.push_back(Event::ConnectRequest {
                    rev: f.rev,
                    ird_ord: f.ird_ord,
                    crc: f.crc,
                    private_data: f.private_data.clone(),
                });
                self.request = Some(f);
                self.state = QpState::AwaitAccept;
                &[]
            }
            (QpState::AwaitReply, MpaKind::Reply) => {
                self.got_reply(f, self.rx_off + (len - before) as u64);
                if self.state == QpState::Rts { rest } else { &[] }
            }
            (_, MpaKind::Request) => {
                self.fail_setup(SetupError::Unexpected("Request"), Close::Abortive);
                &[]
            }
            (_, MpaKind::Reply) => {
                self.fail_setup(SetupError::Unexpected("Reply"), Close::Abortive);
                &[]
            }
        }
    }

    /// The Reply, whose last byte was the stream's byte `fpdus_at - 1`.
    fn got_reply(&mut self, mut f: MpaFrame, fpdus_at: u64) {
        self.oneshot = take_offer(&mut f.private_data) && self.cfg.oneshot_opcodes;
        if f.reject {
            self.events.push_back(Event::Rejected { private_data: f.private_data });
            self.state = QpState::Error;
            self.deadline = None;
            self.close = Some(Close::Graceful);
            return;
        }
        if f.rev == 2 && !f.enhanced {
            return self.fail_setup(SetupError::NotEnhanced, Close::Abortive);
        }
        self.crc = f.crc || self.cfg.crc;
        self.framer =
            FpduFramer::new(self.crc).with_oneshot(self.oneshot).start(fpdus_at, self.cfg.markers);
        self.tx.start(self.cfg.emss, f.markers);
        self.pending_tx_start = Some(self.tx.stream_end());
        if let Some(io) = f.ird_ord {
            self.ord = self.cfg.ord.min(io.ird);
            self.ird = self.cfg.ird;
            if io.p2p {
                // The responder's pick; with none, a Write (as siw).
                let rtr = if io.read_rtr && self.ord > 0 {
                    Rtr::Read
                } else if io.send_rtr {
                    Rtr::Send
                } else {
                    Rtr::Write
                };
                self.send_rtr(rtr);
            }
        }
        if !self.cfg.reply_settle.is_zero() {
            self.hold = Hold::Start;
        }
        self.established(f.private_data);
    }
}

fn frame(
    kind: MpaKind,
    crc: bool,
    reject: bool,
    ird_ord: Option<IrdOrd>,
    private_data: &[u8],
) -> MpaFrame {
    MpaFrame {
        kind,
        markers: false,
        crc,
        reject,
        enhanced: ird_ord.is_some(),
        rev: 2,
        ird_ord,
        private_data: private_data.to_vec(),
    }
}

/// Setup frames go out ahead of any FPDU, in the transmit buffer.
fn put_frame(out: &mut Vec<u8>, f: &MpaFrame) {
    append_with(out, f.buffer_len(), |b| f.emit(&mut MpaPacket::new_unchecked(b)));
}
