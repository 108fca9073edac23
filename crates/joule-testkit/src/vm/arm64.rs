//! The arm64 guest (docs/arm64.md): `scripts/arm64/run.sh` boots Debian's arm64 cloud kernel
//! under qemu-system-aarch64 (TCG) on the root image `scripts/arm64/setup.sh guest` built, with
//! the cross-built joule and joule-bpf's root tests (`make build-arm64`) at `/joule/bin/`, the
//! repo's guest scripts and the batch's checks copied in as files: the root is arm64, so nothing of the host's is shared.

use super::{collect, repo_root, without_debug_info, VmOutput, GUEST_CHECKS};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The binary the guest runs: what `make build-arm64` builds (natively on an aarch64 host).
pub fn binary() -> PathBuf {
    repo_root().join("target/aarch64-unknown-linux-gnu/release/joule")
}

/// joule-bpf's root tests, built for aarch64 by `make build-arm64` beside the binary.
pub fn bpf_tests() -> PathBuf {
    repo_root().join("target/aarch64-unknown-linux-gnu/release/joule-bpf-root-tests")
}

fn cache() -> PathBuf {
    std::env::var_os("JOULE_ARM64_CACHE").map(PathBuf::from).unwrap_or_else(|| PathBuf::from("/var/cache/joule-arm64"))
}

/// What `make vm-deps` / `make build-arm64` should have made and did not, if anything.
pub fn missing() -> Option<String> {
    let c = cache();
    for (rel, what) in [("kernel/current/Image", "the arm64 kernel"), ("root.img", "the arm64 guest's root")] {
        if !c.join(rel).exists() {
            return Some(format!("{what} ({}); run make vm-deps", c.join(rel).display()));
        }
    }
    if !Command::new("qemu-system-aarch64").arg("--version").output().is_ok_and(|o| o.status.success()) {
        return Some("qemu-system-aarch64; run make vm-deps".into());
    }
    for b in [binary(), bpf_tests()] {
        if !b.exists() {
            return Some(format!("the aarch64 build ({}); run make build-arm64", b.display()));
        }
    }
    None
}

/// Boots once and runs `cmd` in `/joule` of the guest; the `.sh` files in `rwdir` go to
/// [`GUEST_CHECKS`], and what the guest left in `$JOULE_VM_OUT` comes back to `rwdir`.
pub fn run(rwdir: &Path, cmd: &str, timeout_s: u64, mem: &str) -> VmOutput {
    let root = repo_root();
    let out = tempfile::tempdir().expect("guest output dir");
    let bin_dir = tempfile::tempdir().expect("a dir for the guest's binary");
    let mut c = Command::new("bash");
    c.arg(root.join("scripts/arm64/run.sh"))
        .args(["--timeout", &timeout_s.to_string(), "--mem", mem, "--out"])
        .arg(out.path())
        .env("JOULE_ARM64_CACHE", cache())
        .current_dir(&root);
    for b in [binary(), bpf_tests()] {
        let name = b.file_name().expect("a file name").to_string_lossy().into_owned();
        c.arg("--file").arg(format!("{}:/joule/bin/{name}", without_debug_info(&b, bin_dir.path()).display()));
    }
    let scripts = std::fs::read_dir(root.join("scripts/vm"))
        .expect("scripts/vm")
        .flatten()
        .map(|e| (e.path(), format!("/joule/scripts/vm/{}", e.file_name().to_string_lossy())));
    let checks = std::fs::read_dir(rwdir)
        .expect("results dir")
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().ends_with(".sh"))
        .map(|e| (e.path(), format!("{GUEST_CHECKS}/{}", e.file_name().to_string_lossy())));
    for (src, dest) in scripts.chain(checks) {
        c.arg("--file").arg(format!("{}:{dest}", src.display()));
    }
    let run = c.arg("--").arg(cmd).output().expect("run scripts/arm64/run.sh");
    collect(out.path(), rwdir, &run)
}
