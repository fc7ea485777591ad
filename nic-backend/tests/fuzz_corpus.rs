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

/// Every corpus input, in name order, with what the NIC did with it
/// (`fuzzing::journal`), fingerprinted per target against
/// `corpus-journal.txt`: a change of the NIC or of its seam that is meant
/// to keep behaviour must keep every journal as it was. The journals
/// themselves are written under the target directory, to diff against
/// those of the commit before; `UPDATE_CORPUS_JOURNAL=1` records the new
/// fingerprints, for a change whose differences are fixes.
#[test]
fn nic_corpora_do_what_the_record_says() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let record_path = root.join("tests/corpus-journal.txt");
    let out = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("corpus-journal");
    std::fs::create_dir_all(&out).expect("a directory for the journals");
    let mut record = String::new();
    for target in ["nic_rx", "nic_mpa_rx", "nic_tls_rx"] {
        let mut paths = Vec::new();
        for dir in ["corpus", "regressions"] {
            let Ok(entries) = std::fs::read_dir(root.join("../fuzz").join(dir).join(target)) else {
                continue;
            };
            paths.extend(entries.map(|e| e.expect("readable corpus directory").path()));
        }
        paths.sort();
        let mut journal = String::new();
        for path in &paths {
            let data = std::fs::read(path).expect("readable corpus file");
            let name = path.file_name().unwrap_or_default().to_string_lossy();
            journal.push_str(&format!("# {name}\n"));
            journal.push_str(&nic_backend::fuzzing::journal(target, &data));
        }
        let file = out.join(format!("{target}.txt"));
        std::fs::write(&file, &journal).expect("journal written");
        let fingerprint = journal.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
        });
        record.push_str(&format!("{target} {} inputs {fingerprint:016x}\n", paths.len()));
    }
    if std::env::var_os("UPDATE_CORPUS_JOURNAL").is_some() {
        std::fs::write(&record_path, &record).expect("record written");
        return;
    }
    let recorded = std::fs::read_to_string(&record_path).expect("tests/corpus-journal.txt");
    assert_eq!(
        recorded,
        record,
        "the NIC does something else with its fuzz corpora: the journals are in {}; diff them \
         against those the commit before writes, and if every difference is a fix, record the \
         new ones with UPDATE_CORPUS_JOURNAL=1",
        out.display()
    );
}
