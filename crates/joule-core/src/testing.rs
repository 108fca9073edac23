//! Test-tier helpers shared by every crate. Tier-2 (root) tests are `#[ignore]`d tests whose
//! names start with `root_`, tier-3 (VM) tests start with `vm_`; `make test` runs them with
//! `--ignored root_` / `--ignored vm_`. A test skips only when a capability is truly absent,
//! and says which; with `JOULE_TEST_STRICT=1` (set by `.ci/run` on this machine) a skip is a
//! failure instead, so CI cannot go green by skipping. Outside CI every skip is also appended
//! to `$JOULE_SKIP_LOG`, which `scripts/test-tier.sh` counts in its summary.
//!
//! The test harnesses themselves (the VM tier's, a bpffs of a test's own) live in the
//! dev-only crate `joule-testkit`; `require` and `is_root` stay here because production code
//! asks `is_root` too.

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
