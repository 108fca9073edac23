//! Whether a sched_ext BPF scheduler runs, and which: `<sysfs>/kernel/sched_ext/state`
//! ("disabled", "enabling", "enabled", "disabling") and `root/ops` (the running scheduler's
//! name; joule's is "joule"), labelled `kernel`. The thermal policy picks the scx path from it
//! only while joule's own scheduler is the one running, so an ejection or a scheduler of
//! someone else's turns the cgroup path on in the very next period. A kernel without sched_ext
//! (no directory) reads as state "absent", with a note.

use crate::{Source, SourceError};
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
        Self { dir: sysfs_root.into().join("kernel/sched_ext") }
    }
}

impl Source for SchedExtSource {
    fn name(&self) -> &'static str {
        "sched_ext"
    }

    fn sample(&mut self, snap: &mut Snapshot) -> Result<(), SourceError> {
        let state_path = self.dir.join("state");
        let state = match std::fs::read_to_string(&state_path) {
            Ok(s) => s.trim().to_string(),
            Err(e) if e.kind() == io::ErrorKind::NotFound && !self.dir.exists() => {
                snap.sched_ext = SchedExt { state: ABSENT.into(), ops: String::new(), source: Origin::Kernel };
                snap.notes.push(format!("no sched_ext ({} absent): the thermal stage acts through cgroups", self.dir.display()));
                return Ok(());
            }
            Err(e) => return Err(SourceError::read(state_path, e)),
        };
        // root/ops exists only while a scheduler is loaded.
        let ops = std::fs::read_to_string(self.dir.join("root/ops")).map(|s| s.trim().to_string()).unwrap_or_default();
        snap.sched_ext = SchedExt { state, ops, source: Origin::Kernel };
        Ok(())
    }
}
