//! Host memory a NIC may write into: the model's stand-in for DMA-able pages.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

/// A buffer shared between the upper-layer protocol and the NIC. The ULP
/// owns it; while a mapping names it the NIC may write the mapped range.
/// Cloning shares the same memory.
#[derive(Clone, Default)]
pub struct IoBuf(Arc<Mutex<Box<[u8]>>>);

impl IoBuf {
    /// A zeroed buffer of `len` bytes.
    pub fn new(len: usize) -> Self {
        Self::from_vec(vec![0; len])
    }

    pub fn from_vec(v: Vec<u8>) -> Self {
        Self(Arc::new(Mutex::new(v.into_boxed_slice())))
    }

    pub fn len(&self) -> usize {
        self.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Exclusive access to the bytes. A panic elsewhere never poisons the
    /// data for good: bytes are bytes.
    pub fn lock(&self) -> MutexGuard<'_, Box<[u8]>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
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
