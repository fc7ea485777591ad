//! An NVMe/TCP controller connection fed arbitrary bytes by its host, from
//! the first byte or on an I/O queue after a real bring-up.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| nvme_tcp::fuzzing::controller(data));
