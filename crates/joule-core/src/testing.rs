//! Test-tier helpers shared by every crate. Tier-2 (root) tests are `#[ignore]`d tests whose
//! names start with `root_`, tier-3 (VM) tests start with `vm_`; `make test` runs them with
//! `--ignored root_` / `--ignored vm_`. A test skips only when a capability is truly absent,
//! and says which; with `JOULE_TEST_STRICT=1` (set by `.ci/run` on this machine) a skip is a
//! failure instead, so CI cannot go green by skipping. Outside CI every skip is also appended
//! to `$JOULE_SKIP_LOG`, which `scripts/test-tier.sh` counts in its summary.

/// Returns true when `present`; otherwise reports the missing capability and returns false
/// (or panics under `JOULE_TEST_STRICT=1`). Use as `if !require(cond, "what") { return; }`.
pub fn require(present: bool, capability: &str) -> bool {
    if present {
        return true;
    }
    if std::env::var("JOULE_TEST_STRICT").as_deref() == Ok("1") {
        panic!("capability absent: {capability} (JOULE_TEST_STRICT=1 forbids skipping)");
    }
    eprintln!("SKIP: capability absent: {capability}");
    // The test runner captures stderr of passing tests, so `make test` counts skips from here.
    if let Some(log) = std::env::var_os("JOULE_SKIP_LOG") {
        use std::io::Write;
        let test = std::thread::current().name().unwrap_or("?").to_string();
        if let Ok(mut f) = std::fs::OpenOptions::new().create(true).append(true).open(log) {
            let _ = writeln!(f, "{test}: {capability}");
        }
    }
    false
}

/// True when running with root's effective uid (CAP_SYS_ADMIN and friends on this machine).
pub fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

/// A bpffs of a test's own, mounted on a fresh directory under the temp dir, so root tests pin
/// without touching (or needing) the machine's /sys/fs/bpf. Unmounted and removed on drop.
pub struct TempBpffs {
    path: std::path::PathBuf,
}

impl TempBpffs {
    pub fn new() -> std::io::Result<TempBpffs> {
        use crate::effects::{Mounts, RealEffects};
        static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let path = std::env::temp_dir().join(format!("joule-test-bpffs-{}-{n}", std::process::id()));
        std::fs::create_dir(&path)?;
        if let Err(e) = RealEffects.mount("bpf", &path) {
            let _ = std::fs::remove_dir(&path);
            return Err(e);
        }
        Ok(TempBpffs { path })
    }

    pub fn path(&self) -> &std::path::Path {
        &self.path
    }
}

impl Drop for TempBpffs {
    fn drop(&mut self) {
        // Lazily: a pin a failed test left must not keep the mount (and the directory) behind.
        let _ = nix::mount::umount2(&self.path, nix::mount::MntFlags::MNT_DETACH);
        let _ = std::fs::remove_dir(&self.path);
    }
}
