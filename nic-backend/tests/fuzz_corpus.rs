//! Replays the `nic_rx`, `nic_mpa_rx` and `nic_tls_rx` fuzz corpora (and any saved crash
//! regressions) through the NIC's receive and transmit paths: none may
//! panic or write outside a mapping.

fn replay(target: &str, run: fn(&[u8]) -> ulp_ddp::Stats) {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz");
    let mut n = 0;
    for dir in [format!("corpus/{target}"), format!("regressions/{target}")] {
        let Ok(entries) = std::fs::read_dir(root.join(dir)) else { continue };
        for entry in entries {
            let path = entry.expect("readable corpus directory").path();
            let data = std::fs::read(&path).expect("readable corpus file");
            let ran = std::panic::catch_unwind(|| run(&data));
            assert!(ran.is_ok(), "{} fails", path.display());
            n += 1;
        }
    }
    assert!(n > 0, "the {target} corpus is missing");
}

#[test]
fn nic_rx_corpus_replays_cleanly() {
    replay("nic_rx", nic_backend::fuzzing::rx);
}

#[test]
fn nic_mpa_rx_corpus_replays_cleanly() {
    replay("nic_mpa_rx", nic_backend::fuzzing::mpa_rx);
}

#[test]
fn nic_tls_rx_corpus_replays_cleanly() {
    replay("nic_tls_rx", nic_backend::fuzzing::tls_rx);
}
