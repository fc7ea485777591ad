//! Replays the framer fuzz corpus (and any saved crash regressions) through
//! the same checks the fuzz target runs, so a regression fails `cargo test`.

use std::path::Path;

#[test]
fn framer_corpus_replays_cleanly() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz");
    let mut n = 0;
    for dir in ["corpus/framer", "regressions/framer"] {
        let Ok(entries) = std::fs::read_dir(root.join(dir)) else { continue };
        for entry in entries {
            let path = entry.expect("readable corpus directory").path();
            let data = std::fs::read(&path).expect("readable corpus file");
            nvme_tcp::fuzzing::framer(&data);
            n += 1;
        }
    }
    assert!(n > 0, "the framer corpus is missing");
}
