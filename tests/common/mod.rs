//! What the end-to-end tests that need root share: the check for it, and
//! a network namespace removed however the test ends.

use std::process::Command;

/// Fails the test, saying what it lacks, unless it may make network
/// namespaces, TAPs and veths: root and iproute2. The tests that call it
/// are `#[ignore]`d, so `cargo test` lists them as skipped with the reason,
/// and `--include-ignored` (`.ci/run`, as root) runs them.
pub fn needs_namespaces() {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() == 0 };
    assert!(root, "this test makes a network namespace and TAPs: run it as root");
    let ip = Command::new("ip").arg("-V").output();
    assert!(ip.is_ok(), "this test needs iproute2 (`ip`): apt-get install iproute2");
}

/// Removes the namespace however the test ends.
pub struct Netns(pub String);

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
    }
}
