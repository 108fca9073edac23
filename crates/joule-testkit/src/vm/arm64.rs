//! The ARM guests (docs/arm64.md): `scripts/arm64/run.sh` boots Debian's arm64 cloud kernel
//! under qemu-system-aarch64, or with `DEB_ARCH=armhf` Debian's armmp-lpae kernel under
//! qemu-system-arm (TCG both), on the root image `scripts/arm64/setup.sh guest` built, with
//! the cross-built joule (`make build-arm64`, `make build-armhf`) at `/joule/bin/` (and on arm64
//! joule-bpf's root tests), the repo's guest scripts, the shipped config and energy model and
//! the batch's checks copied in as files:
//! the root is of the target's architecture, so nothing of the host's is shared.

use super::{collect, repo_root, without_debug_info, VmOutput, GUEST_CHECKS};
use std::path::{Path, PathBuf};
use std::process::Command;

/// One of the two ARM targets; the same table as scripts/arm64/arch.sh.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arm {
    /// aarch64: Raspberry Pi 5, RK3588 boards.
    Arm64,
    /// armv7 hard-float: the Odroid-XU4.
    Armhf,
}

impl Arm {
    /// Debian's name, `DEB_ARCH` of the scripts.
    pub fn deb_arch(self) -> &'static str {
        match self {
            Arm::Arm64 => "arm64",
            Arm::Armhf => "armhf",
        }
    }

    pub fn rust_target(self) -> &'static str {
        match self {
            Arm::Arm64 => "aarch64-unknown-linux-gnu",
            Arm::Armhf => "armv7-unknown-linux-gnueabihf",
        }
    }

    /// The binary the guest runs: what `make build-<arch>` builds.
    pub fn binary(self) -> PathBuf {
        repo_root().join("target").join(self.rust_target()).join("release/joule")
    }

    /// joule-bpf's root tests, built beside the binary. The armhf guest does not run them: its
    /// kernel has no BTF, so each would only skip.
    pub fn bpf_tests(self) -> Option<PathBuf> {
        (self == Arm::Arm64).then(|| self.binary().with_file_name("joule-bpf-root-tests"))
    }

    fn cache(self) -> (&'static str, PathBuf) {
        let var = match self {
            Arm::Arm64 => "JOULE_ARM64_CACHE",
            Arm::Armhf => "JOULE_ARMHF_CACHE",
        };
        (var, std::env::var_os(var).map(PathBuf::from).unwrap_or_else(|| PathBuf::from(format!("/var/cache/joule-{}", self.deb_arch()))))
    }

    fn kernel(self) -> &'static str {
        match self {
            Arm::Arm64 => "kernel/current/Image",
            Arm::Armhf => "kernel/current/zImage",
        }
    }

    fn qemu(self) -> &'static str {
        match self {
            Arm::Arm64 => "qemu-system-aarch64",
            Arm::Armhf => "qemu-system-arm",
        }
    }

    /// What `make vm-deps` / `make build-<arch>` should have made and did not, if anything.
    pub fn missing(self) -> Option<String> {
        let (_, c) = self.cache();
        let a = self.deb_arch();
        for (rel, what) in [(self.kernel(), "kernel"), ("root.img", "guest's root")] {
            if !c.join(rel).exists() {
                return Some(format!("the {a} {what} ({}); run make vm-deps", c.join(rel).display()));
            }
        }
        if !Command::new(self.qemu()).arg("--version").output().is_ok_and(|o| o.status.success()) {
            return Some(format!("{}; run make vm-deps", self.qemu()));
        }
        for b in std::iter::once(self.binary()).chain(self.bpf_tests()) {
            if !b.exists() {
                return Some(format!("the {} build ({}); run make build-{a}", self.rust_target(), b.display()));
            }
        }
        None
    }

    /// Boots once with `cpus` vCPUs and runs `cmd` in `/joule` of the guest; the `.sh` files in
    /// `rwdir` go to [`GUEST_CHECKS`], and what the guest left in `$JOULE_VM_OUT` comes back to
    /// `rwdir`.
    pub fn run(self, rwdir: &Path, cmd: &str, timeout_s: u64, mem: &str, cpus: u32) -> VmOutput {
        let root = repo_root();
        let out = tempfile::tempdir().expect("guest output dir");
        let bin_dir = tempfile::tempdir().expect("a dir for the guest's binary");
        let (var, cache) = self.cache();
        let mut c = Command::new("bash");
        c.arg(root.join("scripts/arm64/run.sh"))
            .args(["--timeout", &timeout_s.to_string(), "--mem", mem, "--cpus", &cpus.to_string(), "--out"])
            .arg(out.path())
            .env("DEB_ARCH", self.deb_arch())
            .env(var, cache)
            .current_dir(&root);
        for b in std::iter::once(self.binary()).chain(self.bpf_tests()) {
            let name = b.file_name().expect("a file name").to_string_lossy().into_owned();
            c.arg("--file").arg(format!("{}:/joule/bin/{name}", without_debug_info(&b, bin_dir.path()).display()));
        }
        let scripts = std::fs::read_dir(root.join("scripts/vm"))
            .expect("scripts/vm")
            .flatten()
            .map(|e| (e.path(), format!("/joule/scripts/vm/{}", e.file_name().to_string_lossy())));
        // The shipped config and energy models, which checks run the agent with.
        let deploy = ["joule.toml", "energy/odroid-xu4.toml"].map(|f| (root.join("deploy").join(f), format!("/joule/deploy/{f}")));
        let checks = std::fs::read_dir(rwdir)
            .expect("results dir")
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().ends_with(".sh"))
            .map(|e| (e.path(), format!("{GUEST_CHECKS}/{}", e.file_name().to_string_lossy())));
        for (src, dest) in scripts.chain(deploy).chain(checks) {
            c.arg("--file").arg(format!("{}:{dest}", src.display()));
        }
        let run = c.arg("--").arg(cmd).output().expect("run scripts/arm64/run.sh");
        collect(out.path(), rwdir, &run)
    }
}

/// The arm64 binary the guest runs: what `make build-arm64` builds (natively on an aarch64 host).
pub fn binary() -> PathBuf {
    Arm::Arm64.binary()
}

/// joule-bpf's root tests, built for aarch64 by `make build-arm64` beside the binary.
pub fn bpf_tests() -> PathBuf {
    Arm::Arm64.bpf_tests().expect("arm64 has them")
}
