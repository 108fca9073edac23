//! A bpffs of a test's own, so root tests pin maps without touching (or needing) the
//! machine's /sys/fs/bpf.

use joule_core::effects::{Mounts, RealEffects};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

/// A bpffs mounted on a fresh directory under the temp dir; unmounted and removed on drop.
pub struct TempBpffs {
    path: PathBuf,
}

impl TempBpffs {
    pub fn new() -> std::io::Result<TempBpffs> {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let path = std::env::temp_dir().join(format!("joule-test-bpffs-{}-{n}", std::process::id()));
        std::fs::create_dir(&path)?;
        if let Err(e) = RealEffects.mount("bpf", &path) {
            let _ = std::fs::remove_dir(&path);
            return Err(e);
        }
        Ok(TempBpffs { path })
    }

    pub fn path(&self) -> &Path {
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
