//! The freezer actuator: the only writer of the freezer of class cgroups (v1 `freezer.state`,
//! v2 `cgroup.freeze`). It freezes a class's *own* cgroup — the one the class mover keeps the
//! class's processes in — so no other mechanism ever moves a process to freeze it: one owner
//! of where a process lives, one owner of whether its cgroup is frozen.
//!
//! The nap freezes and thaws through a [`Freezing`] handle: the thaw runs on the nap waiter's
//! thread the moment the first packet arrives, so it writes no journal; each freeze is
//! journalled before its cgroup's first freeze (`Undo::Thaw`, which stands until shutdown:
//! replaying it on a thawed cgroup changes nothing). Behind [`FreezerBackend`] the freeze goes
//! to cgroupfs ([`CgroupfsFreezer`]) or, for a class that is systemd units, to systemd
//! ([`SystemdFreezer`]: `FreezeUnit`/`ThawUnit` over D-Bus, `Undo::ThawUnit`), so systemd
//! knows the unit is frozen (docs/systemd.md). A napped slice's services get gate units first
//! (`Gate`), so an operator's reload, restart or stop of one works during the nap.

use joule_core::cgroupfs::Hier;
use joule_core::control::{owner, ActCx, ActError, Actuator, ActuatorState, Plan};
use joule_core::effects::{Effects, Freezer, Gate, GateKind, JobEvent, FREEZE_SETTLE};
use joule_core::journal::{Journal, Undo};
use joule_core::membership::ClassPlace;
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};

/// Who writes a class's freezer.
pub trait FreezerBackend: Send + Sync {
    /// `cgroupfs`, ... as the status names it.
    fn kind(&self) -> &'static str;
    /// What undoes a freeze of `class` (journalled before its first freeze); an error saying
    /// why it cannot be frozen.
    fn undo(&self, class: &str) -> Result<Vec<Undo>, String>;
    /// Whether `class` can be frozen here (at start): its cgroup or units exist.
    fn check(&self, class: &str) -> Result<(), String>;
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
    fn undo(&self, class: &str) -> Result<Vec<Undo>, String> {
        Ok(vec![Undo::Thaw { cgroup: self.cgroup(class)? }])
    }
    fn check(&self, class: &str) -> Result<(), String> {
        let cg = self.cgroup(class)?;
        if !self.fx.exists(&cg) {
            return Err(format!("class {class}'s cgroup {} does not exist: the class mover makes it first", cg.display()));
        }
        Ok(())
    }
    fn freeze(&self, class: &str) -> io::Result<()> {
        self.fx.freeze(&self.cgroup(class).map_err(io::Error::other)?, FREEZE_SETTLE)
    }
    fn thaw(&self, class: &str) -> io::Result<()> {
        self.fx.thaw(&self.cgroup(class).map_err(io::Error::other)?, FREEZE_SETTLE)
    }
}

impl CgroupfsFreezer {
    /// The cgroup `class` freezes as; an error saying why when it has none.
    pub fn cgroup(&self, class: &str) -> Result<PathBuf, String> {
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
}

/// Freezes classes that are systemd units through systemd (`FreezeUnit`/`ThawUnit`): their
/// processes stay in their units, `systemctl show -p FreezerState` agrees, and joule never
/// writes the freezer file of a cgroup systemd owns. A unit someone else froze before the
/// nap (`systemctl freeze`) is left to them: joule neither freezes nor thaws it.
///
/// systemd 257 refuses every job on a frozen unit, and refuses to thaw a unit that has a job
/// queued, but it thaws a slice's services with the slice. So with [`SystemdFreezer::with_gates`]
/// each service running in a napped slice gets two [`Gate`]s before the slice is frozen: a
/// reload, restart or stop of the service then waits for a gate's job, which thaws the slice.
pub struct SystemdFreezer {
    fx: Arc<dyn Effects + Send + Sync>,
    /// class -> its units.
    units: BTreeMap<String, Vec<String>>,
    /// Units this backend froze and has not thawed yet.
    ours: Mutex<BTreeSet<String>>,
    /// The unified hierarchy's root (where a slice's services are found) and the joule binary
    /// the gates run; none: no gates.
    gates: Option<(PathBuf, PathBuf)>,
    jobs: Arc<UnitJobs>,
}

/// The units whose systemd jobs wake a nap: the napped class's units and the services found
/// (and gated) in its slices. The freezer adds, the nap's job watcher asks. A job on a gated
/// service drops it from the gated set (a stop takes its stop gate along), so the next freeze
/// starts its gates again; a service that appears in the slice is gated at the next freeze.
#[derive(Debug, Default)]
pub struct UnitJobs {
    watched: Mutex<BTreeSet<String>>,
    gated: Mutex<BTreeSet<String>>,
    /// Each service ever found running in a napped slice -> (its slice, its cgroup dir).
    seen: Mutex<BTreeMap<String, (String, PathBuf)>>,
    /// The jobs on these units still queued or running (by id).
    pending: Mutex<BTreeSet<u32>>,
}

/// The longest a job on a napped unit holds the nap off while it runs (its `JobRemoved` lost).
pub const JOB_RUNNING_HOLD: std::time::Duration = std::time::Duration::from_secs(600);

impl UnitJobs {
    /// A job was queued on `unit`: whether it is one of the nap's.
    pub fn job_on(&self, unit: &str) -> bool {
        let ours = lock(&self.watched).contains(unit);
        if ours {
            lock(&self.gated).remove(unit);
        }
        ours
    }

    /// A job signal: `Some((why, how long))` when the nap must wake and stay off. A job queued
    /// on one of these units holds it off while it runs (a gate's thaw took seconds under
    /// TCG); when the last of them ends, for `hold` more.
    pub fn on_job(&self, event: JobEvent, id: u32, unit: &str, hold: std::time::Duration) -> Option<(String, std::time::Duration)> {
        let mut pending = lock(&self.pending);
        match event {
            JobEvent::New if self.job_on(unit) => {
                pending.insert(id);
                Some((format!("a job on {unit}"), JOB_RUNNING_HOLD))
            }
            JobEvent::Removed if pending.remove(&id) && pending.is_empty() => Some((format!("the job on {unit} ended"), hold)),
            _ => None,
        }
    }

    pub fn units(&self) -> Vec<String> {
        lock(&self.watched).iter().cloned().collect()
    }

    pub fn gated(&self) -> Vec<String> {
        lock(&self.gated).iter().cloned().collect()
    }

    /// Why the napped slices must stay awake now: a service once running in one is stopped
    /// (its cgroup is gone), and systemd refuses to start a unit in a frozen slice, with no
    /// gate for a start. `None`: nothing stops a nap.
    pub fn stopped(&self, fx: &dyn Effects) -> Option<String> {
        // A job running holds the nap off anyway, and a restart's service has no cgroup for
        // a moment.
        if !lock(&self.pending).is_empty() {
            return None;
        }
        lock(&self.seen).iter().find(|(_, (_, dir))| !fx.exists(dir)).map(|(service, (slice, _))| {
            format!("{service} of the napped {slice} is stopped: systemd would refuse to start it in a frozen slice, so the slice stays awake until it runs")
        })
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// A slice's cgroup, relative to the root: `a-b.slice` is `a.slice/a-b.slice` (each dash of
/// the name opens a parent slice, systemd.slice(5)); `-.slice` is the root.
pub fn slice_dir(slice: &str) -> PathBuf {
    let stem = slice.strip_suffix(".slice").unwrap_or(slice);
    let mut dir = PathBuf::new();
    if stem == "-" {
        return dir;
    }
    let mut prefix = String::new();
    for part in stem.split('-') {
        if !prefix.is_empty() {
            prefix.push('-');
        }
        prefix.push_str(part);
        dir.push(format!("{prefix}.slice"));
    }
    dir
}

impl SystemdFreezer {
    pub fn new(fx: Arc<dyn Effects + Send + Sync>, units: BTreeMap<String, Vec<String>>) -> Self {
        let jobs = UnitJobs::default();
        lock(&jobs.watched).extend(units.values().flatten().cloned());
        Self { fx, units, ours: Mutex::new(BTreeSet::new()), gates: None, jobs: Arc::new(jobs) }
    }

    /// Gates for the services of the napped slices (found under `cgroup_root`), running `exe`.
    pub fn with_gates(mut self, cgroup_root: PathBuf, exe: PathBuf) -> Self {
        self.gates = Some((cgroup_root, exe));
        self
    }

    /// What the nap's job watcher matches jobs against.
    pub fn jobs(&self) -> Arc<UnitJobs> {
        self.jobs.clone()
    }

    fn units(&self, class: &str) -> Result<&[String], String> {
        self.units.get(class).map(Vec::as_slice).ok_or_else(|| format!("class {class} is not a class of systemd units"))
    }

    fn ours(&self) -> MutexGuard<'_, BTreeSet<String>> {
        lock(&self.ours)
    }

    /// The services running in `slice` with their cgroups (its `*.service` dirs, nested
    /// slices included).
    fn services_in(&self, cgroup_root: &std::path::Path, slice: &str) -> Vec<(PathBuf, String)> {
        let mut stack = vec![cgroup_root.join(slice_dir(slice))];
        let mut found = Vec::new();
        while let Some(d) = stack.pop() {
            for name in self.fx.list_dir(&d).unwrap_or_default() {
                if name.ends_with(".slice") {
                    stack.push(d.join(&name));
                } else if name.ends_with(".service") && joule_core::effects::valid_unit_name(&name) {
                    found.push((d.join(&name), name));
                }
            }
        }
        found
    }

    /// Starts the gates of each service in `class`'s slices that has none standing yet.
    fn gate(&self, class: &str) -> io::Result<()> {
        let Some((root, exe)) = &self.gates else { return Ok(()) };
        for slice in self.units(class).map_err(io::Error::other)?.iter().filter(|u| u.ends_with(".slice")) {
            for (dir, service) in self.services_in(root, slice) {
                if lock(&self.jobs.gated).contains(&service) {
                    continue;
                }
                for kind in [GateKind::Reload, GateKind::Stop] {
                    let g = Gate { kind, service: service.clone(), slice: slice.clone(), exe: exe.clone() };
                    self.fx.start_gate(&g).map_err(|e| io::Error::new(e.kind(), format!("{slice}: the gate of {service} ({}): {e}", g.name())))?;
                }
                lock(&self.jobs.seen).insert(service.clone(), (slice.clone(), dir));
                lock(&self.jobs.watched).insert(service.clone());
                lock(&self.jobs.gated).insert(service);
            }
        }
        Ok(())
    }
}

impl FreezerBackend for SystemdFreezer {
    fn kind(&self) -> &'static str {
        "systemd"
    }
    fn undo(&self, class: &str) -> Result<Vec<Undo>, String> {
        let units = self.units(class)?;
        let mut undo: Vec<Undo> = units.iter().map(|u| Undo::ThawUnit { unit: u.clone() }).collect();
        if self.gates.is_some() && units.iter().any(|u| u.ends_with(".slice")) {
            undo.push(Undo::StopGates);
        }
        Ok(undo)
    }
    fn check(&self, class: &str) -> Result<(), String> {
        for u in self.units(class)? {
            self.fx.unit_freezer_state(u).map_err(|e| format!("class {class}: systemd cannot freeze {u}: {e}"))?;
        }
        Ok(())
    }
    /// Gates the slices' services, then freezes each unit that is running; on a failure thaws
    /// the ones this call froze.
    fn freeze(&self, class: &str) -> io::Result<()> {
        self.gate(class)?;
        let mut done: Vec<&String> = Vec::new();
        for u in self.units(class).map_err(io::Error::other)? {
            let r = match self.fx.unit_freezer_state(u) {
                Ok(s) if s == "running" => self.fx.freeze_unit(u).map(|()| done.push(u)),
                Ok(_) => Ok(()),
                // A unit that is not loaded (stopped, not started yet) has nothing to freeze.
                Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
                Err(e) => Err(e),
            };
            if let Err(e) = r {
                for d in &done {
                    let _ = self.fx.thaw_unit(d);
                }
                return Err(e);
            }
        }
        self.ours().extend(done.into_iter().cloned());
        Ok(())
    }
    /// Thaws the units this backend froze (not one someone else froze).
    fn thaw(&self, class: &str) -> io::Result<()> {
        let mut first_err = None;
        for u in self.units(class).map_err(io::Error::other)? {
            if !self.ours().contains(u) {
                continue;
            }
            match self.fx.thaw_unit(u) {
                Ok(()) => {
                    self.ours().remove(u);
                }
                Err(e) if e.kind() == io::ErrorKind::NotFound => {
                    self.ours().remove(u);
                }
                Err(e) => first_err = first_err.or(Some(e)),
            }
        }
        first_err.map_or(Ok(()), Err)
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
    /// Classes whose thaw (`Undo::Thaw`, `Undo::ThawUnit`) stands in the journal: recorded
    /// before their first freeze and kept while the actuator runs (replaying it on a thawed cgroup changes nothing), so
    /// a nap's entry does not wait for a journal fsync each time (issue 19: the entry took
    /// ~4.5 ms, most of it that fsync on this machine's disk-backed /run).
    journalled: BTreeSet<String>,
    freezes_total: u64,
}

/// The handle the nap freezes and thaws with.
#[derive(Clone)]
pub struct Freezing(Arc<Mutex<Core>>);

impl Freezing {
    fn lock(&self) -> MutexGuard<'_, Core> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Freezes `class`, its thaw journalled first; waits (bounded) for it to settle.
    pub fn freeze(&self, class: &str) -> io::Result<()> {
        let mut core = self.lock();
        let j = core.journal.clone().ok_or_else(|| io::Error::other("the freezer actuator has not started (no journal)"))?;
        if !core.journalled.contains(class) {
            for u in core.backend.undo(class).map_err(io::Error::other)? {
                j.record(owner::FREEZER, u).map_err(io::Error::other)?;
            }
            core.journalled.insert(class.to_string());
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
            self.core.lock().backend.check(class)?;
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

#[cfg(test)]
mod tests {
    use super::*;
    use joule_core::control::ActCx;
    use joule_core::effects::{FakeEffects, Files, Units};

    /// A started freezer actuator for class `web` = units a.service and b.service.
    fn systemd(fx: &Arc<FakeEffects>, dir: &std::path::Path) -> (FreezerActuator, Journal) {
        let units = [("web".to_string(), vec!["a.service".to_string(), "b.service".to_string()])].into();
        let mut f = FreezerActuator::new(Box::new(SystemdFreezer::new(fx.clone(), units)), fx.clone(), vec!["web".into()]);
        let journal = Journal::open(dir).unwrap();
        let mut sink = |_: &str, _: serde_json::Value| {};
        f.init(&mut ActCx { journal: &journal, fx: fx.as_ref(), events: &mut sink }).unwrap();
        (f, journal)
    }

    #[test]
    fn a_unit_class_is_frozen_by_systemd_its_thaws_journalled_first() {
        let fx = Arc::new(FakeEffects::default().with_unit("a.service").with_unit("b.service"));
        let dir = tempfile::tempdir().unwrap();
        let (f, journal) = systemd(&fx, dir.path());
        let h = f.handle();
        h.freeze("web").unwrap();
        assert_eq!(fx.calls(), ["freeze-unit a.service", "freeze-unit b.service"]);
        assert_eq!(fx.unit_freezer_state("b.service").unwrap(), "frozen");
        let undo: Vec<Undo> = journal.entries().unwrap().into_iter().map(|e| e.undo).collect();
        assert_eq!(undo, [Undo::ThawUnit { unit: "a.service".into() }, Undo::ThawUnit { unit: "b.service".into() }]);
        h.thaw("web").unwrap();
        assert_eq!(&fx.calls()[2..], ["thaw-unit a.service", "thaw-unit b.service"]);
        // A second nap journals nothing new: the thaws stand until shutdown.
        h.freeze("web").unwrap();
        assert_eq!(journal.entries().unwrap().len(), 2);
    }

    #[test]
    fn a_unit_someone_else_froze_is_neither_frozen_nor_thawed_by_the_nap() {
        let fx = Arc::new(FakeEffects::default().with_unit("a.service").with_unit("b.service"));
        fx.freeze_unit("b.service").unwrap();
        let dir = tempfile::tempdir().unwrap();
        let (f, _journal) = systemd(&fx, dir.path());
        let h = f.handle();
        h.freeze("web").unwrap();
        h.thaw("web").unwrap();
        assert_eq!(&fx.calls()[1..], ["freeze-unit a.service", "thaw-unit a.service"]);
        assert_eq!(fx.unit_freezer_state("b.service").unwrap(), "frozen", "the administrator's freeze stays");
    }

    #[test]
    fn a_failed_freeze_thaws_what_it_froze_and_a_missing_unit_is_refused_at_start() {
        let fx = Arc::new(FakeEffects::default().with_unit("a.service").with_unit("b.service"));
        fx.fail_calls("freeze-unit b.service", libc::EIO);
        let dir = tempfile::tempdir().unwrap();
        let (f, _journal) = systemd(&fx, dir.path());
        assert!(f.handle().freeze("web").is_err());
        assert_eq!(fx.unit_freezer_state("a.service").unwrap(), "running");
        assert!(fx.calls().contains(&"thaw-unit a.service".to_string()), "{:?}", fx.calls());

        let fx = Arc::new(FakeEffects::default().with_unit("a.service"));
        let units = [("web".to_string(), vec!["a.service".to_string(), "b.service".to_string()])].into();
        let mut f = FreezerActuator::new(Box::new(SystemdFreezer::new(fx.clone(), units)), fx.clone(), vec!["web".into()]);
        let journal = Journal::open(dir.path()).unwrap();
        let mut sink = |_: &str, _: serde_json::Value| {};
        let e = f.init(&mut ActCx { journal: &journal, fx: fx.as_ref(), events: &mut sink }).unwrap_err();
        assert!(e.to_string().contains("b.service"), "{e}");
    }

    #[test]
    fn slices_nest_by_the_dashes_of_their_names() {
        assert_eq!(slice_dir("web.slice"), PathBuf::from("web.slice"));
        assert_eq!(slice_dir("a-b-c.slice"), PathBuf::from("a.slice/a-b.slice/a-b-c.slice"));
        assert_eq!(slice_dir("-.slice"), PathBuf::new());
    }

    #[test]
    fn a_napped_slices_services_get_their_gates_before_the_freeze_and_again_after_a_job() {
        let fx = Arc::new(
            FakeEffects::default()
                .with_unit("web.slice")
                .with_dir("/cg/web.slice")
                .with_dir("/cg/web.slice/nginx.service")
                .with_dir("/cg/web.slice/web-inner.slice")
                .with_dir("/cg/web.slice/web-inner.slice/api.service")
                .with_dir("/cg/web.slice/session-1.scope")
                .with_file("/cg/web.slice/nginx.service/cgroup.procs", "10\n")
                .with_file("/cg/web.slice/web-inner.slice/api.service/cgroup.procs", "11\n")
                .with_file("/cg/web.slice/session-1.scope/cgroup.procs", "12\n"),
        );
        let units = [("web".to_string(), vec!["web.slice".to_string()])].into();
        let backend = SystemdFreezer::new(fx.clone(), units).with_gates("/cg".into(), "/usr/bin/joule".into());
        let jobs = backend.jobs();
        let mut f = FreezerActuator::new(Box::new(backend), fx.clone(), vec!["web".into()]);
        let dir = tempfile::tempdir().unwrap();
        let journal = Journal::open(dir.path()).unwrap();
        let mut sink = |_: &str, _: serde_json::Value| {};
        f.init(&mut ActCx { journal: &journal, fx: fx.as_ref(), events: &mut sink }).unwrap();
        let h = f.handle();
        h.freeze("web").unwrap();
        let calls = fx.calls();
        let gates: Vec<&String> = calls.iter().filter(|c| c.starts_with("start-gate")).collect();
        assert_eq!(gates.len(), 4, "two services (not the scope), two gates each: {calls:?}");
        assert!(calls.contains(&"start-gate joule-gate-stop-nginx.service /usr/bin/joule nap gate web.slice nginx.service".to_string()), "{calls:?}");
        assert_eq!(calls.last().unwrap(), "freeze-unit web.slice", "gates first: {calls:?}");
        let undo: Vec<Undo> = journal.entries().unwrap().into_iter().map(|e| e.undo).collect();
        assert_eq!(undo, [Undo::ThawUnit { unit: "web.slice".into() }, Undo::StopGates]);
        assert_eq!(jobs.gated(), ["api.service", "nginx.service"]);
        // A job on a gated service wakes the nap; its gates are started again at the next
        // freeze (a stop took its stop gate along). A unit of no nap is not the nap's.
        assert!(jobs.job_on("nginx.service") && jobs.job_on("web.slice") && !jobs.job_on("other.service"));
        assert_eq!(jobs.gated(), ["api.service"]);
        // Jobs hold the nap off while they run, and `hold` after the last one ends.
        let hold = std::time::Duration::from_secs(3);
        assert_eq!(jobs.on_job(JobEvent::New, 7, "api.service", hold), Some(("a job on api.service".into(), JOB_RUNNING_HOLD)));
        assert_eq!(jobs.on_job(JobEvent::New, 8, "nginx.service", hold).map(|h| h.1), Some(JOB_RUNNING_HOLD));
        assert_eq!(jobs.on_job(JobEvent::New, 9, "other.service", hold), None);
        assert_eq!(jobs.on_job(JobEvent::Removed, 7, "api.service", hold), None, "job 8 still runs");
        assert_eq!(jobs.on_job(JobEvent::Removed, 9, "other.service", hold), None);
        assert_eq!(jobs.on_job(JobEvent::Removed, 8, "nginx.service", hold), Some(("the job on nginx.service ended".into(), hold)));
        h.thaw("web").unwrap();
        h.freeze("web").unwrap();
        assert_eq!(jobs.gated(), ["api.service", "nginx.service"]);
        // A service of the slice that stops (its cgroup goes) holds the nap off: systemd
        // would refuse its start in a frozen slice.
        assert_eq!(jobs.stopped(fx.as_ref()), None);
        fx.remove_dir(std::path::Path::new("/cg/web.slice/web-inner.slice/api.service")).unwrap();
        let why = jobs.stopped(fx.as_ref()).unwrap();
        assert!(why.contains("api.service") && why.contains("web.slice"), "{why}");
        // ... unless a job on it runs (a restart: its cgroup goes for a moment).
        jobs.on_job(JobEvent::New, 10, "api.service", hold);
        assert_eq!(jobs.stopped(fx.as_ref()), None);
        jobs.on_job(JobEvent::Removed, 10, "api.service", hold);
        // The journal's undo stops every gate.
        f.shutdown(&mut ActCx { journal: &journal, fx: fx.as_ref(), events: &mut sink }).unwrap();
        assert_eq!(fx.calls().iter().filter(|c| c.starts_with("stop-unit joule-gate-")).count(), 4, "{:?}", fx.calls());
        assert_eq!(fx.unit_freezer_state("web.slice").unwrap(), "running");
    }
}
