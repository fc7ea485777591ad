//! The NVMe core is sans-IO: time reaches it as an argument (`Instant`),
//! so what it does repeats under a driver's clock, simulated or real.
//! Nothing in its sources reads a clock or sleeps.

use std::path::Path;

fn sources(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn nothing_in_the_core_reads_a_clock() {
    let mut files = Vec::new();
    sources(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"), &mut files);
    assert!(files.len() > 10, "{files:?}");
    let banned = ["SystemTime::now", "Instant::now", "thread::sleep", "UNIX_EPOCH"];
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        for (n, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap_or("");
            for b in banned {
                assert!(!code.contains(b), "{}:{}: {}", file.display(), n + 1, line.trim());
            }
        }
    }
}
