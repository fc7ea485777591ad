//! The NVMe/TCP framer and PDU parser on arbitrary bytes, cut arbitrarily.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| nvme_tcp::fuzzing::framer(data));
