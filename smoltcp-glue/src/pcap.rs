//! Packet capture to a pcap file any tool opens (Wireshark, tshark,
//! tcpdump), using smoltcp's `PcapWriter` decorator with a sink that never
//! panics: a failed write stops the capture and says so once.

use smoltcp::phy::{Device, PcapMode, PcapSink, PcapWriter};
use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::Path;

/// A pcap file being written.
pub struct PcapFile {
    out: Option<BufWriter<File>>,
}

impl PcapFile {
    /// A sink that keeps nothing: capture turned off.
    pub fn disabled() -> Self {
        Self { out: None }
    }

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

/// Capture every frame `device` sends and receives into `path`.
pub fn capture<D: Device>(device: D, path: &Path) -> io::Result<PcapWriter<D, PcapFile>> {
    Ok(PcapWriter::new(device, PcapFile::create(path)?, PcapMode::Both))
}
