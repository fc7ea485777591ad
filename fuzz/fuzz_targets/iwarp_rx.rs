//! The iWARP QP's receive path (FPDU framing, DDP/RDMAP checks,
//! placement, Read Responses it then sends) on arbitrary peer streams:
//! no panic, no byte outside a registered region.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    iwarp::fuzzing::rx(data);
});
