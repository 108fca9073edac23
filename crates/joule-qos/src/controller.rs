//! `QosController`: admission at construction, then apply / reconcile / status / release.
//! Every change goes through `Effects` and is recorded in the undo journal *before* it is
//! made; an apply that fails part-way undoes its own records and takes them out of the
//! journal, so nothing is half-applied and nothing is left for a later `joule restore`.

use crate::admission::{admit, AdmissionEnv, Plan, ShareKind};
use crate::backend::{steps, BackendKind, Hier, Layout, PlannedWrite, Step};
use crate::matching::{assign, read_proc, scan, ProcInfo};
use crate::QosError;
use joule_core::config::ClassConfig;
use joule_core::effects::{Effects, RealEffects};
use joule_core::fsread::{keyed_u64, read_trimmed};
use joule_core::journal::{Journal, RestoreReport, Undo};
use serde::Serialize;
use std::collections::BTreeMap;
use std::io;
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
    /// Model RT runtime borrowing (`RT_RUNTIME_SHARE`, off by default since Linux 5.10).
    pub rt_borrowing: bool,
    /// `reconcile` does nothing when called again sooner than this.
    pub reconcile_interval: Duration,
    /// Refuse classes admission rejects. Only the benchmark turns this off, to show what the
    /// seed saw with configurations joule would refuse.
    pub enforce_admission: bool,
    /// Name of the top cgroup in each hierarchy.
    pub group_name: String,
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
            rt_borrowing: false,
            reconcile_interval: Duration::from_secs(1),
            enforce_admission: true,
            group_name: crate::backend::JOULE_DIR.into(),
            owner: crate::OWNER.into(),
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

/// (pid, class) of processes moved.
type Moved = Vec<(i32, String)>;

pub struct QosController {
    classes: Vec<ClassConfig>,
    opts: QosOpts,
    layout: Layout,
    plan: Plan,
    applied: Vec<Undo>,
    last_reconcile: Option<Instant>,
    samples: Mutex<BTreeMap<String, (Instant, u64)>>,
}

/// Reads what admission needs from the cgroup and proc trees.
pub fn machine_env(layout: &Layout, opts: &QosOpts, fx: &dyn Effects) -> AdmissionEnv {
    let cpus_file = match layout.kind {
        BackendKind::V1 => layout.mount(Hier::Cpuset).map(|m| m.join("cpuset.effective_cpus")),
        BackendKind::V2 => layout.mount(Hier::Unified).map(|m| m.join("cpuset.cpus.effective")),
    };
    let cpus = cpus_file
        .and_then(|f| read_trimmed(fx, &f).or_else(|_| read_trimmed(fx, &f.with_file_name("cpuset.cpus"))).ok())
        .and_then(|s| crate::cpulist::parse(&s))
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| {
            let n = read_trimmed(fx, &opts.procfs_root.join("stat"))
                .ok()
                .map(|s| s.lines().filter(|l| l.starts_with("cpu") && l.as_bytes().get(3).is_some_and(u8::is_ascii_digit)).count())
                .unwrap_or(1);
            (0..n.max(1)).collect()
        });
    let k = opts.procfs_root.join("sys/kernel");
    let rt_rt = read_trimmed(fx, &k.join("sched_rt_runtime_us")).ok().and_then(|s| s.parse().ok()).unwrap_or(950_000);
    let rt_p = read_trimmed(fx, &k.join("sched_rt_period_us")).ok().and_then(|s| s.parse().ok()).unwrap_or(1_000_000);
    // RT bandwidth other groups at joule's level already hold (v1 checks siblings' sum).
    let mut others = 0.0;
    if let (BackendKind::V1, Some(cpu)) = (layout.kind, layout.mount(Hier::Cpu)) {
        if let Ok(rd) = std::fs::read_dir(cpu) {
            for e in rd.flatten().filter(|e| e.path().is_dir() && e.file_name() != opts.group_name.as_str()) {
                let r: f64 = read_trimmed(fx, &e.path().join("cpu.rt_runtime_us")).ok().and_then(|s| s.parse().ok()).unwrap_or(0.0);
                let p: f64 = read_trimmed(fx, &e.path().join("cpu.rt_period_us")).ok().and_then(|s| s.parse().ok()).unwrap_or(1e6);
                if r > 0.0 {
                    others += r / p;
                }
            }
        }
    }
    AdmissionEnv {
        cpus,
        global_rt_runtime_us: rt_rt,
        global_rt_period_us: rt_p,
        others_rt_ratio: others,
        min_period_us: opts.min_period_us,
        rt_group_sched: layout.rt_group_sched,
        rt_borrowing: opts.rt_borrowing,
        rt_fallback_to_cfs: opts.rt_fallback_to_cfs,
    }
}

fn hint_for(path: &Path, e: &io::Error) -> String {
    let f = path.file_name().and_then(|s| s.to_str()).unwrap_or("");
    match (f, e.raw_os_error()) {
        ("cpu.rt_runtime_us", Some(libc::EINVAL)) => " — the parent's cpu.rt_runtime_us, or kernel.sched_rt_runtime_us, leaves too little RT budget".into(),
        ("cpu.rt_runtime_us", Some(libc::EBUSY)) => " — the group still has RT tasks and cannot get 0 runtime".into(),
        ("cgroup.procs" | "tasks", Some(libc::EINVAL)) => " — a real-time task cannot join a v1 group with cpu.rt_runtime_us = 0; give its class rt_runtime_us".into(),
        ("cpuset.cpus", _) => " — the CPUs must be a subset of the parent cpuset's".into(),
        ("cgroup.subtree_control", _) => " — the controller is bound to a cgroup v1 hierarchy, or the cgroup has tasks of its own".into(),
        _ => String::new(),
    }
}

impl QosController {
    /// Detects the backend on the real system and runs admission.
    pub fn new(classes: &[ClassConfig], opts: QosOpts) -> Result<Self, QosError> {
        Self::new_with(classes, opts, &RealEffects)
    }

    /// As `new`, reading the machine through `fx` (fixture trees in tests).
    pub fn new_with(classes: &[ClassConfig], opts: QosOpts, fx: &dyn Effects) -> Result<Self, QosError> {
        let layout = Layout::detect(&opts.cgroup_root, fx, opts.backend, &opts.group_name)?;
        let env = machine_env(&layout, &opts, fx);
        let mut plan = admit(classes, &env);
        if layout.kind == BackendKind::V2 && !layout.v2_controllers.iter().any(|c| c == "cpu") {
            plan.notes.push(format!(
                "cgroup v2 at {} offers no cpu controller (cgroup.controllers: {:?}); on this machine it is bound to a v1 hierarchy, so only grouping and accounting work here",
                layout.hiers[0].1.display(),
                layout.v2_controllers.join(" ")
            ));
        }
        if !plan.admitted() && opts.enforce_admission {
            return Err(QosError::Refused(plan.refusal_text()));
        }
        plan.writes = steps(&layout, &plan, fx).into_iter().map(PlannedWrite).collect();
        Ok(Self { classes: classes.to_vec(), opts, layout, plan, applied: Vec::new(), last_reconcile: None, samples: Mutex::new(BTreeMap::new()) })
    }

    pub fn plan(&self) -> &Plan {
        &self.plan
    }

    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// Directory of `class` in hierarchy `h` (where its knobs are).
    pub fn class_dir(&self, h: Hier, class: &str) -> Option<PathBuf> {
        Some(self.layout.class_dir(self.layout.mount(h)?, &self.plan, class))
    }

    fn task_dir(&self, m: &Path, class: &str) -> PathBuf {
        self.layout.task_dir(m, &self.plan, class)
    }

    fn record(&mut self, journal: &mut Journal, undo: Undo) -> Result<(), QosError> {
        journal.record(&self.opts.owner, undo.clone())?;
        self.applied.push(undo);
        Ok(())
    }

    /// Creates the class cgroups, writes their knobs and moves matching tasks in. On any
    /// failure everything this call did is undone and the error names the offending value.
    pub fn apply(&mut self, journal: &mut Journal, fx: &dyn Effects) -> Result<ApplyReport, QosError> {
        let mut report = ApplyReport::default();
        let mark = self.applied.len();
        let result = self.run_steps(journal, fx, &mut report).and_then(|_| {
            let (moved, vanished) = self.move_matching(journal, fx)?;
            report.moved = moved;
            report.vanished = vanished;
            Ok(())
        });
        if let Err(e) = result {
            let mine = self.applied.split_off(mark);
            let failed = self.undo(&mine, journal.path().parent(), fx).failed;
            if !failed.is_empty() {
                tracing::warn!("rollback left {} record(s) for `joule restore`: {:?}", failed.len(), failed);
            }
            return Err(e);
        }
        for v in &report.vanished {
            report.notes.push(format!("pid {v} exited before it could be moved; skipped"));
        }
        Ok(report)
    }

    fn run_steps(&mut self, journal: &mut Journal, fx: &dyn Effects, report: &mut ApplyReport) -> Result<(), QosError> {
        let mut made = std::collections::BTreeSet::new();
        for PlannedWrite(step) in self.plan.writes.clone() {
            match step {
                Step::Mkdir { path, evacuate_to } => {
                    if fx.exists(&path) {
                        report.adopted.push(path);
                        continue;
                    }
                    self.record(journal, Undo::RemoveDir { path: path.clone(), evacuate_to: Some(evacuate_to) })?;
                    fx.create_dir(&path).map_err(|e| QosError::io("create a cgroup", &path, e))?;
                    made.insert(path.clone());
                    report.created.push(path);
                }
                Step::Barrier { path, evacuate_to } => {
                    if made.contains(&path) {
                        self.record(journal, Undo::RemoveDir { path, evacuate_to: Some(evacuate_to) })?;
                    }
                }
                Step::Write { path, value, what, undo } => {
                    let old = match fx.read(&path) {
                        Ok(s) => s.trim().to_string(),
                        Err(e) => return Err(QosError::io(format!("read {what} (was the cgroup deleted under joule?)"), &path, e)),
                    };
                    if old == value && undo.is_none() {
                        continue;
                    }
                    self.record(journal, Undo::Write { path: path.clone(), old: undo.unwrap_or(old) })?;
                    write_retrying(fx, &path, &value).map_err(|e| match e.raw_os_error() {
                        Some(libc::EROFS) | Some(libc::EACCES) | Some(libc::EPERM) => QosError::io(what.clone(), &path, e),
                        _ => QosError::KernelRefused { hint: hint_for(&path, &e), what, path: path.clone(), value: value.clone(), source: e },
                    })?;
                    report.writes += 1;
                }
            }
        }
        Ok(())
    }

    /// Moves every process matching a class (and not yet in place) into its class.
    fn move_matching(&mut self, journal: &mut Journal, fx: &dyn Effects) -> Result<(Moved, Vec<i32>), QosError> {
        let procs = scan(&self.opts.procfs_root);
        let me = std::process::id() as i32;
        let want = assign(&procs, &self.classes);
        let (mut moved, mut vanished) = (Vec::new(), Vec::new());
        // The scan already read each process's cgroups: place from that, not from /proc again.
        for info in procs.iter().filter(|p| p.pid != me) {
            let Some(class) = want.get(&info.pid) else { continue };
            match self.place_info(journal, fx, class, info, false) {
                Ok(true) => moved.push((info.pid, class.clone())),
                Ok(false) => {}
                Err(Some(e)) => return Err(e),
                Err(None) => vanished.push(info.pid),
            }
        }
        Ok((moved, vanished))
    }

    /// Moves one process (or, with `thread`, one thread) into `class` in every hierarchy,
    /// recording where it came from first. Ok(false): already there. Err(None): it vanished.
    pub fn place(&mut self, journal: &mut Journal, fx: &dyn Effects, class: &str, pid: i32, thread: bool) -> Result<bool, Option<QosError>> {
        let Some(info) = read_proc(&self.opts.procfs_root, pid) else { return Err(None) };
        self.place_info(journal, fx, class, &info, thread)
    }

    /// `place` for a process whose /proc entry was just read (by `scan`).
    fn place_info(&mut self, journal: &mut Journal, fx: &dyn Effects, class: &str, info: &ProcInfo, thread: bool) -> Result<bool, Option<QosError>> {
        let pid = info.pid;
        let mut any = false;
        let file = if thread && self.layout.kind == BackendKind::V1 { "tasks" } else { "cgroup.procs" };
        for i in 0..self.layout.hiers.len() {
            let (target, old_dir) = {
                let (h, m) = &self.layout.hiers[i];
                let old_rel = info.cgroups.path(h.controller()).unwrap_or("/");
                (self.task_dir(m, class), m.join(old_rel.trim_start_matches('/')))
            };
            if old_dir == target && !thread {
                continue;
            }
            self.record(journal, Undo::move_task(fx, pid, old_dir.join(file))).map_err(Some)?;
            let dest = target.join(file);
            match fx.write(&dest, &pid.to_string()) {
                Ok(()) => any = true,
                Err(e) if e.raw_os_error() == Some(libc::ESRCH) => return Err(None),
                Err(e) => {
                    return Err(Some(match e.raw_os_error() {
                        Some(libc::EROFS) | Some(libc::EACCES) | Some(libc::EPERM) => QosError::io("move a task", &dest, e),
                        _ => QosError::KernelRefused { hint: hint_for(&dest, &e), what: format!("moving pid {pid} into class {class}"), path: dest, value: pid.to_string(), source: e },
                    }))
                }
            }
        }
        Ok(any)
    }

    /// Keeps the classes in place: recreates cgroups deleted under joule and moves newly
    /// matching tasks in. Rate-limited to `reconcile_interval`, so it can be called from a
    /// 100 ms control loop (a /proc scan costs a few ms per thousand processes).
    pub fn reconcile(&mut self, journal: &mut Journal, fx: &dyn Effects) -> Result<ReconcileReport, QosError> {
        let mut r = ReconcileReport::default();
        if self.last_reconcile.is_some_and(|t| t.elapsed() < self.opts.reconcile_interval) {
            r.skipped_rate_limit = true;
            return Ok(r);
        }
        self.last_reconcile = Some(Instant::now());
        let gone = self.plan.writes.iter().any(|PlannedWrite(s)| matches!(s, Step::Mkdir { path, .. } if !fx.exists(path)));
        if gone {
            let mut rep = ApplyReport::default();
            self.run_steps(journal, fx, &mut rep)?;
            r.recreated = rep.created;
        }
        let (moved, vanished) = self.move_matching(journal, fx)?;
        r.moved = moved;
        r.vanished = vanished;
        Ok(r)
    }

    /// Per class: configured, expected and achieved share (since the previous call),
    /// throttled time and task count.
    pub fn status(&self, fx: &dyn Effects) -> Vec<ClassStatus> {
        let now = Instant::now();
        let mut samples = self.samples.lock().unwrap();
        let mut out = Vec::new();
        for c in &self.plan.classes {
            let configured = [
                c.rt.map(|r| format!("rt {}/{} µs", r.runtime_us, r.period_us)),
                c.cfs.map(|q| format!("cfs {}/{} µs", q.quota_us, q.period_us)),
                c.weight.map(|w| format!("weight {w}")),
                Some(format!("cpus {}", crate::cpulist::format(&c.cpus))),
            ]
            .into_iter()
            .flatten()
            .collect::<Vec<_>>()
            .join(", ");
            let usage_ns = self.usage_ns(fx, &c.name);
            let achieved = usage_ns.and_then(|u| {
                let prev = samples.insert(c.name.clone(), (now, u));
                prev.map(|(t, p)| u.saturating_sub(p) as f64 / now.duration_since(t).as_nanos().max(1) as f64 * 100.0)
            });
            let (thr, nthr) = self.throttled(fx, &c.name);
            let first = self.layout.hiers.first().map(|(_, m)| self.task_dir(m, &c.name));
            let tasks = first.as_ref().and_then(|d| fx.read(&d.join("cgroup.procs")).ok()).map(|s| s.lines().count()).unwrap_or(0);
            out.push(ClassStatus {
                name: c.name.clone(),
                kind: c.kind,
                configured,
                expected_pct: c.expected_pct,
                achieved_pct: achieved,
                throttled_ms: thr,
                nr_throttled: nthr,
                tasks,
                present: first.is_some_and(|d| fx.exists(&d)),
            });
        }
        out
    }

    /// Cumulative CPU time of a class, ns (v1 cpuacct.usage, v2 cpu.stat usage_usec).
    pub fn usage_ns(&self, fx: &dyn Effects, class: &str) -> Option<u64> {
        for (h, _) in &self.layout.hiers {
            let Some(d) = self.class_dir(*h, class) else { continue };
            match h {
                Hier::Cpuacct | Hier::Cpu => {
                    if let Some(v) = read_trimmed(fx, &d.join("cpuacct.usage")).ok().and_then(|s| s.parse().ok()) {
                        return Some(v);
                    }
                }
                Hier::Unified => return stat_field(fx, &d.join("cpu.stat"), "usage_usec").map(|u| u * 1000),
                Hier::Cpuset => {}
            }
        }
        None
    }

    fn throttled(&self, fx: &dyn Effects, class: &str) -> (Option<f64>, Option<u64>) {
        let Some(&(h, _)) = self.layout.hiers.first() else { return (None, None) };
        let Some(d) = self.class_dir(h, class) else { return (None, None) };
        let f = d.join("cpu.stat");
        match h {
            Hier::Unified => (stat_field(fx, &f, "throttled_usec").map(|u| u as f64 / 1e3), stat_field(fx, &f, "nr_throttled")),
            _ => (stat_field(fx, &f, "throttled_time").map(|n| n as f64 / 1e6), stat_field(fx, &f, "nr_throttled")),
        }
    }

    /// Undoes what this controller did in this process, newest first, taking its records out
    /// of the journal in `journal_dir` as they are undone (a later `joule restore` must not
    /// replay them: a MoveTask could hit a reused pid). Other records stay.
    pub fn rollback(&mut self, journal_dir: &Path, fx: &dyn Effects) -> (usize, usize, Vec<String>) {
        let mine = std::mem::take(&mut self.applied);
        let r = self.undo(&mine, Some(journal_dir), fx);
        (r.undone, r.already_gone, r.failed)
    }

    /// Undoes `records` (this controller's, newest last) through the journal in `journal_dir`,
    /// which drops each record it undid and keeps the failed ones for a retry. Only without a
    /// journal (or when it cannot be read) are they replayed from memory, leaving the journal
    /// as it is.
    fn undo(&self, records: &[Undo], journal_dir: Option<&Path>, fx: &dyn Effects) -> RestoreReport {
        if records.is_empty() {
            return RestoreReport::default();
        }
        if let Some(dir) = journal_dir {
            let owner = self.opts.owner.as_str();
            match joule_core::journal::restore_where(dir, fx, |e| e.owner == owner && records.contains(&e.undo)) {
                Ok(r) => return r,
                Err(e) => tracing::warn!("rolling back from memory, the journal's records stay: {e}"),
            }
        }
        joule_core::journal::replay(records, fx)
    }

    /// Undoes every record of this owner in the journal in `journal_dir` — this process's and
    /// any left by a crashed one — and leaves other mechanisms' records alone.
    pub fn release(&mut self, journal_dir: &Path, fx: &dyn Effects) -> Result<RestoreReport, QosError> {
        self.applied.clear();
        Ok(joule_core::journal::restore_owner(journal_dir, &self.opts.owner, fx)?)
    }
}

/// Writes a knob; RT runtime refused with EINVAL is retried for up to 2 s, because the kernel
/// returns a removed group's RT budget to its parent asynchronously (after an RCU grace
/// period), so a re-apply right after a release would otherwise fail.
fn write_retrying(fx: &dyn Effects, path: &Path, value: &str) -> io::Result<()> {
    let rt = path.file_name().is_some_and(|f| f == "cpu.rt_runtime_us");
    let deadline = Instant::now() + Duration::from_secs(2);
    loop {
        match fx.write(path, value) {
            Err(e) if rt && e.raw_os_error() == Some(libc::EINVAL) && Instant::now() < deadline => std::thread::sleep(Duration::from_millis(50)),
            r => return r,
        }
    }
}

/// One key of a `key value` file (`cpu.stat`).
fn stat_field(fx: &dyn Effects, f: &Path, key: &str) -> Option<u64> {
    keyed_u64(&fx.read(f).ok()?, key)
}

#[cfg(test)]
#[path = "controller_tests.rs"]
mod tests;
