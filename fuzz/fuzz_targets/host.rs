//! The NVMe/TCP host against a controller that sends arbitrary bytes, from
//! its first byte or on an I/O queue with commands in flight.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| nvme_tcp::fuzzing::host(data));
