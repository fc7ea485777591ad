//! The software NIC's receive and transmit paths on arbitrary segment
//! streams and mappings: no panic, no byte outside a mapping.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    nic_backend::fuzzing::rx(data);
});
