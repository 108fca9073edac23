//! Whether a sched_ext BPF scheduler runs, and which: `<sysfs>/kernel/sched_ext/state`
//! ("disabled", "enabling", "enabled", "disabling") and `root/ops` (the running scheduler's
//! name; joule's is "joule"), labelled `kernel`. The thermal policy picks the scx path from it
//! only while joule's own scheduler is the one running, so an ejection or a scheduler of
//! someone else's turns the cgroup path on in the very next period. A kernel without sched_ext
//! (no directory) reads as state "absent", with a note.

use crate::{Source, SourceError};
use joule_core::sched_ext::{KernelState, SYSFS_SCHED_EXT};
use joule_core::snapshot::SchedExt;
use joule_core::{Origin, Snapshot};
use std::io;
use std::path::PathBuf;

/// The state of a kernel without sched_ext.
pub const ABSENT: &str = "absent";

pub struct SchedExtSource {
    dir: PathBuf,
}

impl SchedExtSource {
    pub fn new(sysfs_root: impl Into<PathBuf>) -> Self {
        Self { dir: sysfs_root.into().join(SYSFS_SCHED_EXT) }
    }
}

impl Source for SchedExtSource {
    fn name(&self) -> &'static str {
        "sched_ext"
    }

    fn sample(&mut self, snap: &mut Snapshot) -> Result<(), SourceError> {
        let KernelState { state, ops } = KernelState::read(&self.dir);
        let Some(state) = state else {
            if !self.dir.exists() {
                snap.sched_ext = SchedExt { state: ABSENT.into(), ops: String::new(), source: Origin::Kernel };
                snap.notes.push(format!("no sched_ext ({} absent): the thermal stage acts through cgroups", self.dir.display()));
                return Ok(());
            }
            let state_path = self.dir.join("state");
            let e = std::fs::read_to_string(&state_path).err().unwrap_or_else(|| io::Error::other("changed while read"));
            return Err(SourceError::read(state_path, e));
        };
        snap.sched_ext = SchedExt { state, ops: ops.unwrap_or_default(), source: Origin::Kernel };
        Ok(())
    }
}
