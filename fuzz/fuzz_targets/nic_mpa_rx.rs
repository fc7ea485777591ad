//! The software NIC's iWARP flow (its own MPA/DDP tracker, STag placement,
//! CRC both ways, one-shot close) on arbitrary segment streams and STag
//! tables: no panic, no byte outside a writable STag.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    nic_backend::fuzzing::mpa_rx(data);
});
