//! The NVMe/TCP host against a controller that sends arbitrary bytes, from
//! its first byte or on an I/O queue with commands in flight.
#![no_main]

use nvme_storage::RamNamespace;
use std::sync::Arc;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let ns = Arc::new(RamNamespace::new(1 << 20, 512).expect("RAM namespace"));
    nvme_tcp::fuzzing::host(data, ns)
});
