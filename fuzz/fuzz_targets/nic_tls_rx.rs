//! The software NIC's TLS receive path, with NVMe/TCP placement inside the
//! records, on arbitrary records, cuts and corruptions: no panic, no byte
//! outside a mapping, no record vouched for that does not authenticate.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    nic_backend::fuzzing::tls_rx(data);
});
