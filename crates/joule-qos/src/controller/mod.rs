//! `QosController`: admission at construction (env.rs reads the machine), then apply and
//! rollback (apply.rs), reconcile and placing tasks (place.rs), status (status.rs), release.
//! Every change goes through `Effects` and is recorded in the undo journal *before* it is
//! made; an apply that fails part-way undoes its own records and takes them out of the
//! journal, so nothing is half-applied and nothing is left for a later `joule restore`.

mod apply;
mod cap;
mod env;
mod place;
mod status;

pub use cap::ClassCap;
pub use env::{machine_env, units_env};

use crate::admission::{admit, Plan, ShareKind};
use crate::backend::{steps, BackendKind, Hier, Layout, PlannedWrite};
use crate::QosError;
use joule_core::config::ClassConfig;
use joule_core::effects::{Effects, RealEffects};
use joule_core::journal::{Journal, Undo};
use joule_core::membership::{ClassPlace, Membership};
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

#[derive(Debug, Clone)]
pub struct QosOpts {
    pub cgroup_root: PathBuf,
    pub procfs_root: PathBuf,
    /// Smallest RT/CFS period admitted, µs (the seed: 100 ms).
    pub min_period_us: u64,
    /// Force a backend; `None` picks v1 when the cpu controller is bound to v1, else v2.
    pub backend: Option<BackendKind>,
    /// Where RT group bandwidth does not exist, apply the CFS equivalent instead of refusing.
    pub rt_fallback_to_cfs: bool,
    /// Force the RT mechanism (`None`: RT group scheduling where the kernel has it, else
    /// SCHED_DEADLINE reservations; `AdmissionEnv::rt_choice`).
    pub rt_backend: Option<crate::RtBackend>,
    /// Model RT runtime borrowing (`RT_RUNTIME_SHARE`, off by default since Linux 5.10).
    pub rt_borrowing: bool,
    /// `reconcile` does nothing when called again sooner than this.
    pub reconcile_interval: Duration,
    /// Refuse classes admission rejects. Only the benchmark turns this off, to show what the
    /// seed saw with configurations joule would refuse.
    pub enforce_admission: bool,
    /// Name of the top cgroup in each hierarchy.
    pub group_name: String,
    /// Hierarchies every class also lives in, for grouping only (no knob), where this machine
    /// has them apart from the CPU ones: the v1 `freezer` (a nap freezes the class's own
    /// cgroup there) and, on a v1 machine, the v2 `unified` one (a class's sockets carry its v2
    /// cgroup id, which the traffic classifier and the flow monitor read).
    pub also_in: Vec<Hier>,
    /// Owner tag of journal records (`release` undoes only these).
    pub owner: String,
}

impl Default for QosOpts {
    fn default() -> Self {
        Self {
            cgroup_root: "/sys/fs/cgroup".into(),
            procfs_root: "/proc".into(),
            min_period_us: crate::DEFAULT_MIN_PERIOD_US,
            backend: None,
            rt_fallback_to_cfs: false,
            rt_backend: None,
            rt_borrowing: false,
            reconcile_interval: Duration::from_secs(1),
            enforce_admission: true,
            group_name: crate::backend::JOULE_DIR.into(),
            owner: crate::OWNER.into(),
            also_in: Vec::new(),
        }
    }
}

#[derive(Debug, Default, Clone, Serialize)]
pub struct ApplyReport {
    pub created: Vec<PathBuf>,
    pub adopted: Vec<PathBuf>,
    pub writes: usize,
    /// (pid, class)
    pub moved: Vec<(i32, String)>,
    /// PIDs that exited between matching and moving (skipped).
    pub vanished: Vec<i32>,
    pub notes: Vec<String>,
}

#[derive(Debug, Default, Clone, Serialize)]
pub struct ReconcileReport {
    pub skipped_rate_limit: bool,
    pub recreated: Vec<PathBuf>,
    pub moved: Vec<(i32, String)>,
    pub vanished: Vec<i32>,
    /// What changed and what was refused, in words (a class's units on a systemd host).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct ClassStatus {
    pub name: String,
    pub kind: ShareKind,
    pub configured: String,
    /// Top-style %, 100 = one CPU.
    pub expected_pct: f64,
    /// Over the interval since the previous `status` call (None on the first).
    pub achieved_pct: Option<f64>,
    pub throttled_ms: Option<f64>,
    pub nr_throttled: Option<u64>,
    pub tasks: usize,
    pub present: bool,
}

/// The admission plan and the writes that realise it.
#[derive(Debug, Serialize)]
pub struct PlanReport<'a> {
    #[serde(flatten)]
    pub plan: &'a Plan,
    pub writes: &'a [PlannedWrite],
}

impl PlanReport<'_> {
    /// As text: the admission's arithmetic and verdict, then the writes.
    pub fn render(&self) -> String {
        self.plan.render() + &crate::backend::render_writes(self.writes, self.plan.admitted())
    }
}

/// (pid, class) of processes moved.
type Moved = Vec<(i32, String)>;

pub struct QosController {
    classes: Vec<ClassConfig>,
    opts: QosOpts,
    layout: Layout,
    plan: Plan,
    /// The steps that realise `plan` on this machine, in order.
    writes: Vec<PlannedWrite>,
    applied: Vec<Undo>,
    last_reconcile: Option<Instant>,
    samples: Mutex<BTreeMap<String, (Instant, u64)>>,
    /// Thermal caps held now, per class (cap.rs).
    caps: BTreeMap<String, ClassCap>,
    /// Knobs whose pre-cap content is already in the journal.
    cap_journalled: std::collections::BTreeSet<PathBuf>,
    /// Where each process the mover moved came from: per hierarchy mount, the `cgroup.procs`
    /// it left (place.rs: where a process that leaves its class goes back to).
    origins: std::collections::HashMap<i32, Vec<(PathBuf, PathBuf)>>,
    /// The size of `origins` at which the next sweep of exited processes runs (place.rs).
    origins_sweep_at: usize,
    /// The flock on joule's group directory, held while the classes are applied: one agent
    /// per cgroup tree (apply.rs).
    group_lock: Option<std::os::fd::OwnedFd>,
    /// The deadline classes' reservations (crate::deadline).
    dl: crate::deadline::Reservations,
}

impl QosController {
    /// Detects the backend on the real system and runs admission.
    pub fn new(classes: &[ClassConfig], opts: QosOpts) -> Result<Self, QosError> {
        Self::new_with(classes, opts, &RealEffects)
    }

    /// As `new`, reading the machine through `fx` (fixture trees in tests).
    pub fn new_with(classes: &[ClassConfig], opts: QosOpts, fx: &dyn Effects) -> Result<Self, QosError> {
        let found = joule_core::cgroupfs::Layout::detect(&opts.cgroup_root, fx);
        let mut layout = Layout::choose(&opts.cgroup_root, &found, fx, opts.backend, &opts.group_name)?;
        layout.group_also_in(&found, &opts.also_in);
        let env = machine_env(&layout, &opts, fx);
        let mut plan = admit(classes, &env);
        if layout.kind == BackendKind::V2 && !layout.v2_offers("cpu") {
            plan.notes.push(format!(
                "cgroup v2 at {} offers no cpu controller (cgroup.controllers: {:?}); on this machine it is bound to a v1 hierarchy, so only grouping and accounting work here",
                layout.hiers[0].1.display(),
                layout.v2_controllers.join(" ")
            ));
        }
        if !plan.admitted() && opts.enforce_admission {
            return Err(QosError::Refused(plan.refusal_text()));
        }
        let writes = steps(&layout, &plan, fx).into_iter().map(PlannedWrite).collect();
        Ok(Self {
            classes: classes.to_vec(),
            opts,
            layout,
            plan,
            writes,
            applied: Vec::new(),
            last_reconcile: None,
            samples: Mutex::new(BTreeMap::new()),
            caps: BTreeMap::new(),
            cap_journalled: Default::default(),
            origins: Default::default(),
            origins_sweep_at: place::MAX_ORIGINS,
            group_lock: None,
            dl: Default::default(),
        })
    }

    pub fn plan(&self) -> &Plan {
        &self.plan
    }

    /// The writes that realise the plan, in order.
    pub fn writes(&self) -> &[PlannedWrite] {
        &self.writes
    }

    /// The plan with its writes, as `joule qos plan` shows it (text and JSON).
    pub fn report(&self) -> PlanReport<'_> {
        PlanReport { plan: &self.plan, writes: &self.writes }
    }

    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// Directory of `class` in hierarchy `h` (where its knobs are).
    pub fn class_dir(&self, h: Hier, class: &str) -> Option<PathBuf> {
        Some(self.layout.class_dir(self.layout.mount(h)?, &self.plan, class))
    }

    /// Where every class lives: its directory and task directory in each hierarchy (for the
    /// membership reading; their cgroup v2 ids are read there).
    pub fn places(&self) -> Vec<ClassPlace> {
        self.plan
            .classes
            .iter()
            .map(|c| ClassPlace {
                class: c.name.clone(),
                dirs: self.layout.hiers.iter().map(|(h, m)| (*h, self.layout.class_dir(m, &self.plan, &c.name))).collect(),
                task_dirs: self.layout.hiers.iter().map(|(h, m)| (*h, self.task_dir(m, &c.name))).collect(),
                cgroup2_id: None,
            })
            .collect()
    }

    fn task_dir(&self, m: &Path, class: &str) -> PathBuf {
        self.layout.task_dir(m, &self.plan, class)
    }

    /// Holds the deadline classes' reservations on the threads `members` lists, each record
    /// journalled (and kept for a rollback) before its change.
    fn hold_deadline(&mut self, journal: &Journal, fx: &dyn Effects, members: &Membership) -> Result<Vec<String>, QosError> {
        let classes: Vec<_> = self.plan.classes.iter().filter_map(|c| Some((c.name.clone(), c.dl?))).collect();
        if classes.is_empty() {
            return Ok(Vec::new());
        }
        let mut dl = std::mem::take(&mut self.dl);
        let notes = dl.hold(fx, members, &classes, |u| self.record(journal, u));
        self.dl = dl;
        notes
    }

    /// A deadline class's threads as the last hold left them.
    pub fn reserved(&self, class: &str) -> Option<crate::Reserved> {
        self.dl.reserved(class)
    }

    fn record(&mut self, journal: &Journal, undo: Undo) -> Result<(), QosError> {
        self.record_all(journal, vec![undo])
    }

    /// Several records in one journal write and sync.
    fn record_all(&mut self, journal: &Journal, undos: Vec<Undo>) -> Result<(), QosError> {
        journal.record_all(&self.opts.owner, undos.iter().cloned())?;
        self.applied.extend(undos);
        Ok(())
    }
}

#[cfg(test)]
#[path = "tests.rs"]
mod tests;
