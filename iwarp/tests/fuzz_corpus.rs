//! Replays the `iwarp_rx` fuzz corpus (and any saved crash regressions)
//! through a QP's receive path: none may panic or write outside a region.

#[test]
fn iwarp_rx_corpus_replays_cleanly() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz");
    let mut n = 0;
    for dir in ["corpus/iwarp_rx", "regressions/iwarp_rx"] {
        let Ok(entries) = std::fs::read_dir(root.join(dir)) else { continue };
        for entry in entries {
            let path = entry.expect("readable corpus directory").path();
            let data = std::fs::read(&path).expect("readable corpus file");
            iwarp::fuzzing::rx(&data);
            n += 1;
        }
    }
    assert!(n > 0, "the iwarp_rx corpus is missing");
}
