//! Replays the `nic_rx` fuzz corpus (and any saved crash regressions)
//! through the NIC's receive and transmit paths: none may panic or write
//! outside a mapping.

#[test]
fn nic_rx_corpus_replays_cleanly() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz");
    let mut n = 0;
    for dir in ["corpus/nic_rx", "regressions/nic_rx"] {
        let Ok(entries) = std::fs::read_dir(root.join(dir)) else { continue };
        for entry in entries {
            let path = entry.expect("readable corpus directory").path();
            let data = std::fs::read(&path).expect("readable corpus file");
            nic_backend::fuzzing::rx(&data);
            n += 1;
        }
    }
    assert!(n > 0, "the nic_rx corpus is missing");
}
