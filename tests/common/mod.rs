//! What the end-to-end tests that need root share: the check for it, and
//! a network namespace removed however the test ends.

use std::process::Command;

pub fn root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// Removes the namespace however the test ends.
pub struct Netns(pub String);

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
    }
}
