//! Reusable data buffers, so the data path does not allocate per command.

use ulp_ddp::IoBuf;

const CLASSES: usize = 24;
/// Buffers kept per size class; more than this are dropped when freed.
const KEEP: usize = 256;

/// Buffers in power-of-two size classes from 4 KiB. A buffer is free again
/// once no other handle to it remains (the transmit queue and any NIC
/// mapping have let go).
#[derive(Default)]
pub struct BufPool {
    classes: Vec<Vec<IoBuf>>,
}

impl BufPool {
    /// A buffer of at least `len` bytes, reused when one is free.
    pub fn get(&mut self, len: usize) -> IoBuf {
        let size = len.max(4096).next_power_of_two();
        let class = size.trailing_zeros() as usize - 12;
        if class >= CLASSES {
            return IoBuf::new(len);
        }
        if self.classes.is_empty() {
            self.classes.resize_with(CLASSES, Vec::new);
        }
        let bucket = &mut self.classes[class];
        if let Some(free) = bucket.iter().find(|b| !b.is_shared()) {
            return free.clone();
        }
        let buf = IoBuf::new(size);
        if bucket.len() < KEEP {
            bucket.push(buf.clone());
        }
        buf
    }
}
