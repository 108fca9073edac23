//! The freezer actuator: the only writer of the freezer of class cgroups (v1 `freezer.state`,
//! v2 `cgroup.freeze`). It freezes a class's *own* cgroup — the one the class mover keeps the
//! class's processes in — so no other mechanism ever moves a process to freeze it: one owner
//! of where a process lives, one owner of whether its cgroup is frozen.
//!
//! The nap freezes and thaws through a [`Freezing`] handle: the thaw runs on the nap waiter's
//! thread the moment the first packet arrives, so it writes no journal; each freeze is
//! journalled before its cgroup's first freeze (`Undo::Thaw`, which stands until shutdown:
//! replaying it on a thawed cgroup changes nothing). Behind [`FreezerBackend`] the writes can go to cgroupfs (here), to systemd
//! (`FreezeUnit`/`ThawUnit` over D-Bus, for a class that is a unit) or nowhere (another
//! manager owns the cgroup): the production-hosts issue fills in the other two.

use joule_core::cgroupfs::Hier;
use joule_core::control::{owner, ActCx, ActError, Actuator, ActuatorState, Plan};
use joule_core::effects::{Effects, Freezer, FREEZE_SETTLE};
use joule_core::journal::{Journal, Undo};
use joule_core::membership::ClassPlace;
use serde::Serialize;
use std::collections::BTreeSet;
use std::io;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};

/// Who writes a class's freezer.
pub trait FreezerBackend: Send + Sync {
    /// `cgroupfs`, ... as the status names it.
    fn kind(&self) -> &'static str;
    /// The cgroup `class` freezes as; an error saying why when it has none.
    fn cgroup(&self, class: &str) -> Result<PathBuf, String>;
    fn freeze(&self, class: &str) -> io::Result<()>;
    fn thaw(&self, class: &str) -> io::Result<()>;
}

/// Writes the freezer files of the classes' own cgroups: the v1 `freezer` hierarchy's
/// directory where the class has one, else its v2 directory (`cgroup.freeze`).
pub struct CgroupfsFreezer {
    fx: Arc<dyn Effects + Send + Sync>,
    places: Vec<ClassPlace>,
}

impl CgroupfsFreezer {
    pub fn new(fx: Arc<dyn Effects + Send + Sync>, places: Vec<ClassPlace>) -> Self {
        Self { fx, places }
    }
}

impl FreezerBackend for CgroupfsFreezer {
    fn kind(&self) -> &'static str {
        "cgroupfs"
    }
    fn cgroup(&self, class: &str) -> Result<PathBuf, String> {
        let p = self
            .places
            .iter()
            .find(|p| p.class == class)
            .ok_or_else(|| format!("class {class} has no cgroups (joule makes them with agent.apply_classes = true)"))?;
        p.task_dir(Hier::Freezer)
            .or_else(|| p.task_dir(Hier::Unified))
            .map(|d| d.to_path_buf())
            .ok_or_else(|| format!("class {class} lives in no freezer hierarchy: neither a v1 freezer nor cgroup v2 is mounted"))
    }
    fn freeze(&self, class: &str) -> io::Result<()> {
        self.fx.freeze(&self.cgroup(class).map_err(io::Error::other)?, FREEZE_SETTLE)
    }
    fn thaw(&self, class: &str) -> io::Result<()> {
        self.fx.thaw(&self.cgroup(class).map_err(io::Error::other)?, FREEZE_SETTLE)
    }
}

/// The actuator's state.
#[derive(Debug, Clone, Default, Serialize)]
pub struct FreezerState {
    pub backend: &'static str,
    pub frozen: Vec<String>,
    pub freezes_total: u64,
}

impl ActuatorState for FreezerState {
    fn to_json(&self) -> serde_json::Value {
        serde_json::to_value(self).unwrap_or_default()
    }
}

struct Core {
    backend: Box<dyn FreezerBackend>,
    journal: Option<Journal>,
    fx: Arc<dyn Effects + Send + Sync>,
    frozen: BTreeSet<String>,
    /// Cgroups whose `Undo::Thaw` stands in the journal: recorded before their first freeze
    /// and kept while the actuator runs (replaying it on a thawed cgroup changes nothing), so
    /// a nap's entry does not wait for a journal fsync each time (issue 19: the entry took
    /// ~4.5 ms, most of it that fsync on this machine's disk-backed /run).
    journalled: BTreeSet<PathBuf>,
    freezes_total: u64,
}

/// The handle the nap freezes and thaws with.
#[derive(Clone)]
pub struct Freezing(Arc<Mutex<Core>>);

impl Freezing {
    fn lock(&self) -> MutexGuard<'_, Core> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The cgroup `class` freezes as (checked at start: a class without one is refused).
    pub fn cgroup(&self, class: &str) -> Result<PathBuf, String> {
        self.lock().backend.cgroup(class)
    }

    /// Freezes `class`'s cgroup, its thaw journalled first; waits (bounded) for it to settle.
    pub fn freeze(&self, class: &str) -> io::Result<()> {
        let mut core = self.lock();
        let cgroup = core.backend.cgroup(class).map_err(io::Error::other)?;
        let j = core.journal.clone().ok_or_else(|| io::Error::other("the freezer actuator has not started (no journal)"))?;
        if !core.journalled.contains(&cgroup) {
            j.record(owner::FREEZER, Undo::Thaw { cgroup: cgroup.clone() }).map_err(io::Error::other)?;
            core.journalled.insert(cgroup);
        }
        core.backend.freeze(class)?;
        core.frozen.insert(class.to_string());
        core.freezes_total += 1;
        Ok(())
    }

    /// Thaws `class`'s cgroup at once, with no journal write (the wake path: a request waits).
    pub fn thaw(&self, class: &str) -> io::Result<()> {
        let mut core = self.lock();
        core.backend.thaw(class)?;
        core.frozen.remove(class);
        Ok(())
    }

    fn state(&self) -> FreezerState {
        let core = self.lock();
        FreezerState { backend: core.backend.kind(), frozen: core.frozen.iter().cloned().collect(), freezes_total: core.freezes_total }
    }
}

pub struct FreezerActuator {
    core: Freezing,
    /// The classes it must be able to freeze (checked at start).
    classes: Vec<String>,
}

impl FreezerActuator {
    pub fn new(backend: Box<dyn FreezerBackend>, fx: Arc<dyn Effects + Send + Sync>, classes: Vec<String>) -> Self {
        let core = Core { backend, journal: None, fx, frozen: BTreeSet::new(), journalled: BTreeSet::new(), freezes_total: 0 };
        Self { core: Freezing(Arc::new(Mutex::new(core))), classes }
    }

    pub fn handle(&self) -> Freezing {
        self.core.clone()
    }

    /// Replays the freezer's records (thawing what is still frozen: idempotent) and drops them
    /// from the journal: at shutdown.
    fn compact(&self) -> Result<(), ActError> {
        let mut core = self.core.lock();
        let Some(j) = core.journal.clone() else { return Ok(()) };
        let r = j.restore_owner(owner::FREEZER, core.fx.as_ref())?;
        if !r.failed.is_empty() {
            return Err(format!("could not thaw {:?}; the records stay in the journal", r.failed).into());
        }
        core.frozen.clear();
        core.journalled.clear();
        Ok(())
    }
}

impl Actuator for FreezerActuator {
    fn name(&self) -> &'static str {
        owner::FREEZER
    }

    fn init(&mut self, cx: &mut ActCx<'_>) -> Result<(), ActError> {
        for class in &self.classes {
            let cg = self.core.cgroup(class)?;
            if !cx.fx.exists(&cg) {
                return Err(format!("class {class}'s cgroup {} does not exist: the class mover makes it first", cg.display()).into());
            }
        }
        self.core.lock().journal = Some(cx.journal.clone());
        Ok(())
    }

    fn reconcile(&mut self, _plan: &Plan, _cx: &mut ActCx<'_>) -> Result<(), ActError> {
        Ok(())
    }

    fn state(&self) -> Arc<dyn ActuatorState> {
        Arc::new(self.core.state())
    }

    fn shutdown(&mut self, _cx: &mut ActCx<'_>) -> Result<(), ActError> {
        self.compact()
    }
}
