//! Packet capture to a pcap file any tool opens (Wireshark, tshark,
//! tcpdump): [`Capture`], a decorator that writes every frame its device
//! sends and receives through smoltcp's `PcapSink`, with a file sink that
//! never panics (a failed write stops the capture and says so once). Off,
//! it is not there at all: frames pass as they would without it, read
//! straight into a driver's buffers where the medium can
//! ([`Medium::receive_into`]).

use crate::{Medium, WireEnd};
use smoltcp::phy::{self, Device, DeviceCapabilities, PacketMeta, PcapLinkType, PcapSink};
use smoltcp::time::{Duration, Instant};
use std::cell::RefCell;
use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::Path;

/// A pcap file being written.
pub struct PcapFile {
    out: Option<BufWriter<File>>,
}

impl PcapFile {
    pub fn create(path: &Path) -> io::Result<Self> {
        let f = File::create(path).map_err(|e| {
            io::Error::new(e.kind(), format!("cannot create capture {}: {e}", path.display()))
        })?;
        Ok(Self { out: Some(BufWriter::new(f)) })
    }
}

impl PcapSink for PcapFile {
    fn write(&mut self, data: &[u8]) {
        if let Some(out) = &mut self.out
            && let Err(e) = out.write_all(data)
        {
            tracing::warn!(error = %e, "packet capture stopped");
            self.out = None;
        }
    }

    fn flush(&mut self) {
        if let Some(out) = &mut self.out {
            let _ = Write::flush(out);
        }
    }
}

impl Drop for PcapFile {
    fn drop(&mut self) {
        PcapSink::flush(self);
    }
}

/// Device `D`, its frames both ways written to a pcap file when one is
/// given.
pub struct Capture<D> {
    inner: D,
    sink: Option<RefCell<PcapFile>>,
}

impl<D: Device> Capture<D> {
    /// `device`, captured into `sink` if there is one.
    pub fn new(device: D, sink: Option<PcapFile>) -> Self {
        // Every medium here carries Ethernet frames.
        let sink = sink.map(|mut s| {
            s.global_header(PcapLinkType::Ethernet);
            RefCell::new(s)
        });
        Self { inner: device, sink }
    }

    pub fn get_ref(&self) -> &D {
        &self.inner
    }

    pub fn get_mut(&mut self) -> &mut D {
        &mut self.inner
    }
}

/// A token and where (and when) to capture its frame.
pub struct Token<'a, T> {
    inner: T,
    sink: Option<&'a RefCell<PcapFile>>,
    now: Instant,
}

impl<'a, T> Token<'a, T> {
    fn record(&self, frame: &[u8]) {
        if let Some(s) = self.sink {
            s.borrow_mut().packet(self.now, frame);
        }
    }
}

impl<T: phy::RxToken> phy::RxToken for Token<'_, T> {
    fn consume<R, F: FnOnce(&[u8]) -> R>(self, f: F) -> R {
        let Token { inner, sink, now } = self;
        inner.consume(|frame| {
            Token { inner: (), sink, now }.record(frame);
            f(frame)
        })
    }

    fn meta(&self) -> PacketMeta {
        self.inner.meta()
    }
}

impl<T: phy::TxToken> phy::TxToken for Token<'_, T> {
    fn consume<R, F: FnOnce(&mut [u8]) -> R>(self, len: usize, f: F) -> R {
        let Token { inner, sink, now } = self;
        inner.consume(len, |frame| {
            let r = f(frame);
            Token { inner: (), sink, now }.record(frame);
            r
        })
    }

    fn set_meta(&mut self, meta: PacketMeta) {
        self.inner.set_meta(meta)
    }
}

impl<D: Device> Device for Capture<D> {
    type RxToken<'a>
        = Token<'a, D::RxToken<'a>>
    where
        Self: 'a;
    type TxToken<'a>
        = Token<'a, D::TxToken<'a>>
    where
        Self: 'a;

    fn receive(&mut self, now: Instant) -> Option<(Self::RxToken<'_>, Self::TxToken<'_>)> {
        let sink = self.sink.as_ref();
        let (rx, tx) = self.inner.receive(now)?;
        Some((Token { inner: rx, sink, now }, Token { inner: tx, sink, now }))
    }

    fn transmit(&mut self, now: Instant) -> Option<Self::TxToken<'_>> {
        let sink = self.sink.as_ref();
        self.inner.transmit(now).map(|tx| Token { inner: tx, sink, now })
    }

    fn capabilities(&self) -> DeviceCapabilities {
        self.inner.capabilities()
    }
}

impl<D: Medium> Medium for Capture<D> {
    fn poll_at(&self) -> Option<Instant> {
        self.inner.poll_at()
    }

    fn flush(&self) {
        self.inner.flush()
    }

    fn wait(&self, timeout: Option<Duration>) {
        self.inner.wait(timeout)
    }

    fn wait_with(&self, also: &WireEnd, timeout: Option<Duration>) {
        self.inner.wait_with(also, timeout)
    }

    fn waker(&self) -> std::task::Waker {
        self.inner.waker()
    }

    fn receive_into(&mut self, now: Instant, buf: &mut Vec<u8>) -> Option<(usize, PacketMeta)> {
        let (n, meta) = self.inner.receive_into(now, buf)?;
        if let Some(s) = &self.sink {
            s.borrow_mut().packet(now, &buf[..n]);
        }
        Some((n, meta))
    }

    fn transmit_from(&mut self, now: Instant, frame: &mut [u8], meta: PacketMeta) -> bool {
        let sent = self.inner.transmit_from(now, frame, meta);
        if let (true, Some(s)) = (sent, &self.sink) {
            s.borrow_mut().packet(now, frame);
        }
        sent
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::VirtualWire;
    use smoltcp::phy::{RxToken as _, TxToken as _};

    /// Frames both ways, however they were received, land in the file as
    /// pcap records after its header.
    #[test]
    fn every_frame_is_recorded_each_way() {
        let path =
            std::env::temp_dir().join(format!("nvmeddp-capture-{}.pcap", std::process::id()));
        let (a, mut b) = VirtualWire::pair(1514, 8);
        let mut cap = Capture::new(a, Some(PcapFile::create(&path).unwrap()));
        let now = Instant::from_millis(1);
        cap.transmit(now).unwrap().consume(60, |f| f.fill(1));
        b.transmit(now).unwrap().consume(70, |f| f.fill(2));
        b.transmit(now).unwrap().consume(80, |f| f.fill(3));
        assert_eq!(cap.receive(now).unwrap().0.consume(|f| f.len()), 70);
        let mut buf = Vec::new();
        assert_eq!(cap.receive_into(now, &mut buf).map(|(n, _)| n), Some(80));
        assert!(cap.transmit_from(now, &mut [4; 90], PacketMeta::default()));
        assert_eq!(b.receive(now).unwrap().0.consume(|f| f.len()), 60);
        assert_eq!(b.receive(now).unwrap().0.consume(|f| f.to_vec()), [4; 90]);
        drop(cap);
        let file = std::fs::read(&path).unwrap();
        let _ = std::fs::remove_file(&path);
        // The global header, then each record's 16-byte header and frame.
        assert_eq!(file.len(), 24 + (16 + 60) + (16 + 70) + (16 + 80) + (16 + 90));
        assert_eq!(&file[..4], &0xa1b2_c3d4u32.to_ne_bytes());
    }
}
