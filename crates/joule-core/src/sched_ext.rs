//! What the kernel's sysfs says about sched_ext, read in one place for everyone who asks:
//! the telemetry source (the snapshot's `sched_ext`), the agent's scheduler actuator and
//! `joule scx`. `<sysfs>/kernel/sched_ext/state` is "disabled", "enabling", "enabled" or
//! "disabling"; `root/ops` names the loaded scheduler, and exists only while one is.

use std::path::{Path, PathBuf};

/// Where the kernel shows sched_ext's state, under sysfs.
pub const SYSFS_SCHED_EXT: &str = "kernel/sched_ext";

/// One read of `<dir>` (`<sysfs>/`[`SYSFS_SCHED_EXT`]).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct KernelState {
    /// `state` (None: unreadable, e.g. a kernel without sched_ext).
    pub state: Option<String>,
    /// `root/ops`: the name of the loaded scheduler, only while one is.
    pub ops: Option<String>,
}

impl KernelState {
    pub fn read(dir: &Path) -> KernelState {
        let read = |p: PathBuf| std::fs::read_to_string(p).ok().map(|s| s.trim().to_string());
        KernelState { state: read(dir.join("state")), ops: read(dir.join("root/ops")) }
    }
}
