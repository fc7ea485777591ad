//! Host memory a NIC may write into: the model's stand-in for DMA-able pages.

use std::ops::{Deref, DerefMut};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

/// A buffer shared between the upper-layer protocol and the NIC. The ULP
/// owns it; while a mapping names it the NIC may write the mapped range.
/// Cloning shares the same memory. Its length is fixed when it is made,
/// so reading it takes no lock.
#[derive(Clone, Default)]
pub struct IoBuf(Arc<Shared>);

#[derive(Default)]
struct Shared {
    len: usize,
    bytes: Mutex<Box<[u8]>>,
}

/// A buffer's bytes, held exclusively: their values may change, their
/// number may not.
pub struct Bytes<'a>(MutexGuard<'a, Box<[u8]>>);

impl Deref for Bytes<'_> {
    type Target = [u8];

    #[inline]
    fn deref(&self) -> &[u8] {
        &self.0
    }
}

impl DerefMut for Bytes<'_> {
    #[inline]
    fn deref_mut(&mut self) -> &mut [u8] {
        &mut self.0
    }
}

impl IoBuf {
    /// A zeroed buffer of `len` bytes.
    pub fn new(len: usize) -> Self {
        Self::from_vec(vec![0; len])
    }

    pub fn from_vec(v: Vec<u8>) -> Self {
        Self(Arc::new(Shared { len: v.len(), bytes: Mutex::new(v.into_boxed_slice()) }))
    }

    #[inline]
    pub fn len(&self) -> usize {
        self.0.len
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Exclusive access to the bytes. A panic elsewhere never poisons the
    /// data for good: bytes are bytes.
    #[inline]
    pub fn lock(&self) -> Bytes<'_> {
        Bytes(self.0.bytes.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// A copy of the contents.
    pub fn to_vec(&self) -> Vec<u8> {
        self.lock().to_vec()
    }

    /// Whether another handle to this memory exists (a NIC mapping, a
    /// queued transmit).
    pub fn is_shared(&self) -> bool {
        Arc::strong_count(&self.0) > 1
    }

    /// Whether two handles share memory.
    pub fn same(&self, other: &IoBuf) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl std::fmt::Debug for IoBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "IoBuf({} bytes)", self.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The NIC may hold a buffer's bytes while the ULP asks its length.
    #[test]
    fn a_length_is_read_while_the_bytes_are_held() {
        let buf = IoBuf::from_vec(vec![7; 24]);
        let mut bytes = buf.lock();
        bytes[0] = 1;
        assert_eq!((buf.len(), bytes.len()), (24, 24));
        drop(bytes);
        assert_eq!(buf.to_vec()[..2], [1, 7]);
    }
}
