//! Replays the NVMe/TCP fuzz corpora (and any saved crash regressions)
//! through the same checks the fuzz targets run, so a regression fails
//! `cargo test`.

use nvme_storage::RamNamespace;
use std::path::Path;
use std::sync::Arc;

/// The controller's namespace in the host and controller targets.
fn ram() -> Arc<RamNamespace> {
    Arc::new(RamNamespace::new(1 << 20, 512).expect("RAM namespace"))
}

fn replay(target: &str, run: fn(&[u8])) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz");
    let mut n = 0;
    for dir in ["corpus", "regressions"] {
        let Ok(entries) = std::fs::read_dir(root.join(dir).join(target)) else { continue };
        for entry in entries {
            let path = entry.expect("readable corpus directory").path();
            let data = std::fs::read(&path).expect("readable corpus file");
            run(&data);
            n += 1;
        }
    }
    assert!(n > 0, "the {target} corpus is missing");
}

#[test]
fn framer_corpus_replays_cleanly() {
    replay("framer", nvme_tcp::fuzzing::framer);
}

#[test]
fn host_corpus_replays_cleanly() {
    replay("host", |data| nvme_tcp::fuzzing::host(data, ram()));
}

#[test]
fn controller_corpus_replays_cleanly() {
    replay("controller", |data| nvme_tcp::fuzzing::controller(data, ram()));
}

/// A real host's authenticated admin queue played again to a fresh
/// controller, whole and cut at every 7th byte: a replayed Reply, and
/// every truncation of the messages before it, end in a close.
#[test]
fn a_replayed_authentication_closes_cleanly_wherever_it_is_cut() {
    let transcript = nvme_tcp::fuzzing::auth_transcript(ram());
    for end in (2..transcript.len()).step_by(7).chain([transcript.len()]) {
        nvme_tcp::fuzzing::controller(&transcript[..end], ram());
    }
}

/// A real host's TLS admin queue played again to a fresh TLS port, whole
/// and cut every 13 bytes: the controller closes cleanly wherever.
#[test]
fn a_replayed_tls_session_closes_cleanly_wherever_it_is_cut() {
    let transcript = nvme_tcp::fuzzing::tls_transcript(ram());
    assert_eq!(transcript[2], 0x16, "a ClientHello first");
    for end in (2..transcript.len()).step_by(13).chain([transcript.len()]) {
        nvme_tcp::fuzzing::controller(&transcript[..end], ram());
    }
}
