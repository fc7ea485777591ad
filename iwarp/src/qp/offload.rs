//! A queue pair over a NIC that speaks the ULP DDP contract: the socket
//! is handed to the device when FPDUs start, STags the peer may write
//! into are mirrored to it, and what it reports back is checked.
//!
//! The device is an accelerator, never an authority. The QP's own STag
//! table decides every access; placement and CRC verdicts are hints taken
//! only where they agree with what the QP would have done, and the QP
//! recomputes what the device did not vouch for.

use std::sync::Arc;

use ulp_ddp::{
    Access, Caps, DdpDevice, FlowId, HintFlags, IwarpConfig, IwarpSk, RxHint, SgEntry, Sgl, Stag,
    ZeroCopyTx,
};

use super::Qp;

/// What the QP did with received and sent payload: the work a NIC saves.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct QpStats {
    /// Payload bytes of tagged segments received.
    pub tagged_bytes: u64,
    /// Payload bytes of Sends received.
    pub send_bytes: u64,
    /// Received payload bytes (tagged or sent) the QP copied out of the
    /// stream.
    pub copy_bytes: u64,
    /// Received payload bytes the NIC placed.
    pub placed_bytes: u64,
    /// Received payload bytes whose MPA CRC the QP computed, and that the
    /// NIC vouched for instead.
    pub crc_bytes: u64,
    pub nic_crc_bytes: u64,
    /// Payload bytes sent (Sends, Writes, Read Responses); of those, the
    /// bytes whose MPA CRC this side computed, and those it left to the
    /// NIC.
    pub tx_bytes: u64,
    pub tx_crc_bytes: u64,
    pub tx_nic_crc_bytes: u64,
    /// Of the payload bytes sent, those queued by reference: gathered from
    /// their buffers by the NIC, never copied here.
    pub tx_zero_copy_bytes: u64,
    /// Calls into the device per I/O path: registrations, posted Sends,
    /// local invalidates, one-shot advertisements, mapped receives.
    pub control_calls: u64,
    /// STags the NIC freed on a peer's close, and that the QP confirmed.
    pub remote_invalidates: u64,
    /// Resyncs the QP confirmed to the NIC.
    pub resyncs: u64,
}

pub(super) enum Offload {
    Off,
    /// To be handed over when FPDUs start.
    Pending(Arc<dyn DdpDevice>, FlowId),
    On(Active),
}

pub(super) struct Active {
    pub sk: Arc<dyn IwarpSk>,
    /// The NIC writes our MPA CRCs.
    pub tx_crc: bool,
    /// The NIC gathers our payload.
    pub zc: Option<ZeroCopyTx>,
    /// A resync the NIC asked to confirm: an FPDU starting there.
    pub resync: Option<u64>,
}

impl Active {
    pub fn oneshot(&self) -> bool {
        self.sk.offloads().contains(Caps::ONESHOT)
    }
}

impl Qp {
    /// Let `dev` offload this QP's socket (`flow`) once FPDUs start. Call
    /// before the connection is set up.
    pub fn offload(&mut self, dev: Arc<dyn DdpDevice>, flow: FlowId) {
        self.offload = Offload::Pending(dev, flow);
    }

    /// Whether a device took the socket.
    pub fn is_offloaded(&self) -> bool {
        matches!(self.offload, Offload::On(_))
    }

    /// What the QP and its NIC did.
    pub fn stats(&self) -> QpStats {
        let mut s = self.stats;
        (s.crc_bytes, s.nic_crc_bytes) = self.framer.crc_bytes();
        s
    }

    pub(super) fn active(&self) -> Option<&Active> {
        match &self.offload {
            Offload::On(a) => Some(a),
            _ => None,
        }
    }

    /// FPDUs start here, both ways: hand the socket over if asked to.
    pub(super) fn start_offload(&mut self, tx_start: u64) {
        let Offload::Pending(dev, flow) = std::mem::replace(&mut self.offload, Offload::Off) else {
            return;
        };
        let config = IwarpConfig {
            crc: self.crc,
            oneshot_opcodes: self.oneshot,
            rx_start: self.rx_off,
            tx_start,
            rx_markers: self.framer.markers().is_some(),
            tx_markers: self.tx.markers().is_some(),
        };
        let Some(iwarp) = dev.iwarp() else {
            return tracing::debug!("the NIC does not follow iWARP streams; software only");
        };
        match iwarp.sk_add(flow, &config) {
            Ok(sk) => {
                let tx_crc = self.crc && sk.offloads().contains(Caps::CRC_TX);
                // Markers interleave with payload every 512 octets: such
                // FPDUs are copied whole.
                let zc = match self.tx.markers() {
                    Some(_) => None,
                    None => ZeroCopyTx::new(sk.clone()),
                };
                self.tx.by_reference = zc.is_some();
                self.offload = Offload::On(Active { sk, tx_crc, zc, resync: None });
            }
            Err(e) => return tracing::debug!(error = %e, "offload refused; software only"),
        }
        // Receives posted to be placed before there was a socket to map.
        let posted: Vec<_> = self.rq.iter().map(|(wr, placed)| (*placed, wr.sgl.clone())).collect();
        for (i, (placed, sgl)) in posted.into_iter().enumerate() {
            if placed {
                self.nic_recv(self.recv_msn(i), &sgl);
            }
        }
    }

    /// Map the posted receive the Send with `msn` lands in.
    pub(super) fn nic_recv(&mut self, msn: u32, sgl: &[SgEntry]) {
        let Some(a) = self.active() else { return };
        match a.sk.recv_setup(msn, Sgl::from(sgl)) {
            Ok(()) => self.stats.control_calls += 1,
            Err(e) => tracing::debug!(error = %e, msn, "receive not offloaded"),
        }
    }

    /// The NIC's hints for received stream bytes `[start, end)`: ranges,
    /// each with the whole hint it falls in.
    pub(super) fn hints(&mut self, start: u64, end: u64) -> Vec<(u64, u64, RxHint)> {
        let mut hints = std::mem::take(&mut self.hints);
        hints.clear();
        match &mut self.offload {
            Offload::On(a) => {
                if let Some(r) = a.sk.ctx().take_resync_request() {
                    a.resync = Some(r);
                }
                a.sk.ctx().with_hints(start, end, |s, e, h| hints.push((s, e, *h)));
            }
            _ => hints.push((start, end, RxHint { start, end, flags: HintFlags::NONE, run: None })),
        }
        hints
    }

    /// At an FPDU boundary at stream offset `at`: confirm the NIC's
    /// resync request if it named this very place.
    pub(super) fn at_boundary(&mut self, at: u64) {
        let Offload::On(a) = &mut self.offload else { return };
        match a.resync {
            Some(r) if r == at => {
                a.sk.resync(r);
                a.resync = None;
                self.stats.resyncs += 1;
            }
            Some(r) if r < at => a.resync = None,
            _ => {}
        }
    }

    /// Mirror a registration to the NIC (live now), if the NIC has a use
    /// for it: see [`nic_places`].
    pub(super) fn nic_register(&mut self, stag: Stag, access: Access) {
        let Some(a) = self.active().filter(|_| nic_places(access)) else { return };
        if let Some(io) = self.dev.stag_io(stag)
            && let Err(e) = a.sk.stag_setup(io)
        {
            tracing::debug!(error = %e, %stag, "STag not offloaded");
        }
    }

    /// Mirror an invalidate to the NIC, of an STag that granted `access`
    /// (or, not knowing it, of any).
    pub(super) fn nic_invalidate(&mut self, stag: Stag, access: Option<Access>) {
        if let Some(a) = self.active()
            && access.is_none_or(nic_places)
        {
            a.sk.stag_invalidate(stag);
        }
    }

    /// One-shot initiation: `stag` goes live on the NIC when the Send at
    /// stream offset `send_at` leaves. Falls back to a plain registration
    /// where the NIC cannot; the NIC is not told of it at all where it has
    /// no use for it ([`nic_places`]).
    pub(super) fn nic_advertise(&mut self, stag: Stag, access: Access, send_at: u64) {
        let Some(a) = self.active().filter(|_| nic_places(access)) else { return };
        let Some(io) = self.dev.stag_io(stag) else { return };
        let r = if a.oneshot() { a.sk.stag_advertise(io, send_at) } else { a.sk.stag_setup(io) };
        if let Err(e) = r {
            tracing::debug!(error = %e, %stag, "STag not offloaded");
        }
    }

    /// The NIC's report for the closing Send whose last FPDU started at
    /// `at`: `Ok(true)` if it freed `stag`, `Ok(false)` if it did nothing,
    /// `Err` with what it freed instead (a protocol violation).
    pub(super) fn nic_freed(&self, at: u64, stag: Stag) -> Result<bool, u32> {
        let Some(a) = self.active() else { return Ok(false) };
        match a.sk.ctx().take_freed(at) {
            None => Ok(false),
            Some(f) if f.offset == at && f.tag == stag.0 => Ok(true),
            Some(f) => Err(f.tag),
        }
    }
}

impl Drop for Qp {
    fn drop(&mut self) {
        if let Offload::On(a) = &self.offload {
            a.sk.sk_del();
        }
    }
}

/// Whether the NIC is told of an STag granting `access`: only if the peer
/// may write into it, since placing tagged data is what the NIC does with
/// an STag. (That takes in the sinks of our own Reads, where the NIC
/// places Read Responses: a Read is posted only into an STag granting
/// remote write too, `SINK_ACCESS`.) The NIC does not answer Read
/// Requests: this QP does, and with zero-copy transmit the NIC gathers
/// the Read Response under a transmit mapping of its own. So a read-only
/// STag on the NIC would be registered, and freed by the close, for
/// nothing: the QP checks, and invalidates, it alone.
fn nic_places(access: Access) -> bool {
    access.contains(Access::REMOTE_WRITE)
}
