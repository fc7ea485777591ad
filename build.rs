//! Records the commit the binary was built from, for the bench's report.

fn main() {
    let git = |args: &[&str]| {
        std::process::Command::new("git")
            .args(args)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
    };
    let commit = match (git(&["rev-parse", "HEAD"]), git(&["status", "--porcelain", "-uno"])) {
        (Some(c), Some(s)) if !s.is_empty() => format!("{c}-dirty"),
        (Some(c), _) => c,
        _ => "unknown".into(),
    };
    println!("cargo:rustc-env=NVME_DDP_COMMIT={commit}");
    if let Some(dir) = git(&["rev-parse", "--git-dir"]) {
        println!("cargo:rerun-if-changed={dir}/HEAD");
        println!("cargo:rerun-if-changed={dir}/index");
    }
}
