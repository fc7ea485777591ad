//! An NVMe/TCP controller connection fed arbitrary bytes by its host, from
//! the first byte or on an I/O queue after a real bring-up.
#![no_main]

use nvme_storage::RamNamespace;
use std::sync::Arc;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let ns = Arc::new(RamNamespace::new(1 << 20, 512).expect("RAM namespace"));
    nvme_tcp::fuzzing::controller(data, ns)
});
