//! cgroup backends: which hierarchies a plan uses (v1 `cpu`/`cpuset`/`cpuacct` or the v2
//! unified tree, out of what `joule_core::cgroupfs` finds) and which files it writes, in an
//! order the kernel accepts. Pure given the reads it does through `Effects`; the controller
//! executes the steps.

use crate::admission::Plan;
use joule_core::cgroupfs::{self, Controller};
use joule_core::effects::Effects;
use joule_core::fsread::read_trimmed;
use serde::Serialize;
use std::path::{Path, PathBuf};

/// Default name of the directory joule creates in each hierarchy; classes live below it.
pub const JOULE_DIR: &str = "joule";

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum BackendKind {
    V1,
    V2,
}

/// Which hierarchy a step or a task move is about (joule-core's, shared with the membership
/// reading).
pub use joule_core::cgroupfs::Hier;

/// The hierarchies joule uses on this machine.
#[derive(Debug, Clone, Serialize)]
pub struct Layout {
    pub kind: BackendKind,
    /// (hierarchy, mount point). v1: cpu first (a refused move fails before anything else).
    pub hiers: Vec<(Hier, PathBuf)>,
    /// `cpu.rt_runtime_us` exists (v1 with CONFIG_RT_GROUP_SCHED).
    pub rt_group_sched: bool,
    /// v2: controllers the root offers (cgroup.controllers).
    pub v2_controllers: Vec<String>,
    /// Name of the top group joule creates right under each mount (`joule`, or the
    /// benchmark's and tests' own); classes live below it.
    pub group: String,
}

impl Layout {
    /// Chooses among the hierarchies under `cgroup_root`. A v1 `cpu` hierarchy wins (the cpu
    /// controller can be bound to only one hierarchy); `prefer` forces a kind. `group` names
    /// the top group under each mount.
    pub fn detect(cgroup_root: &Path, fx: &dyn Effects, prefer: Option<BackendKind>, group: &str) -> Result<Layout, crate::QosError> {
        Self::choose(cgroup_root, &cgroupfs::Layout::detect(cgroup_root, fx), fx, prefer, group)
    }

    /// `detect` among hierarchies already found under `cgroup_root`.
    pub fn choose(cgroup_root: &Path, found: &cgroupfs::Layout, fx: &dyn Effects, prefer: Option<BackendKind>, group: &str) -> Result<Layout, crate::QosError> {
        let v1 = Self::v1(found, fx, group);
        let v2 = Self::v2(found, group);
        let pick = match prefer {
            Some(BackendKind::V1) => v1,
            Some(BackendKind::V2) => v2,
            None => v1.or(v2.filter(|l| l.v2_offers("cpu"))),
        };
        pick.ok_or_else(|| crate::QosError::NoCpuController(cgroup_root.into()))
    }

    fn v1(found: &cgroupfs::Layout, fx: &dyn Effects, group: &str) -> Option<Layout> {
        let cpu = found.v1(Controller::Cpu)?;
        let mut hiers = vec![(Hier::Cpu, cpu.to_path_buf())];
        if let Some(cpuset) = found.v1(Controller::Cpuset) {
            hiers.push((Hier::Cpuset, cpuset.to_path_buf()));
        }
        // Accounting: a cpuacct co-mounted with cpu is read in the cpu hierarchy.
        if let Some(acct) = found.v1(Controller::Cpuacct).filter(|_| !found.comounted(Controller::Cpu, Controller::Cpuacct)) {
            hiers.push((Hier::Cpuacct, acct.to_path_buf()));
        }
        Some(Layout { kind: BackendKind::V1, rt_group_sched: fx.exists(&cpu.join("cpu.rt_runtime_us")), hiers, v2_controllers: vec![], group: group.into() })
    }

    fn v2(found: &cgroupfs::Layout, group: &str) -> Option<Layout> {
        let unified = found.unified.as_ref()?;
        Some(Layout {
            kind: BackendKind::V2,
            hiers: vec![(Hier::Unified, unified.dir.clone())],
            rt_group_sched: false,
            v2_controllers: unified.controllers.clone(),
            group: group.into(),
        })
    }

    /// Adds the grouping-only hierarchies of `also` that this machine has apart from the
    /// layout's own: a v1 `freezer` hierarchy, and on a v1 layout the v2 unified one. A v2
    /// layout needs neither (its freezer is `cgroup.freeze` in the class's own cgroup).
    pub fn group_also_in(&mut self, found: &cgroupfs::Layout, also: &[Hier]) {
        if also.is_empty() || self.kind == BackendKind::V2 {
            return;
        }
        for h in also {
            let dir = match h {
                Hier::Freezer => found.v1(Controller::Freezer).map(Path::to_path_buf),
                Hier::Unified => found.unified.as_ref().map(|u| u.dir.clone()),
                _ => None,
            };
            if let Some(dir) = dir.filter(|d| !self.hiers.iter().any(|(x, m)| x == h || m == d)) {
                self.hiers.push((*h, dir));
            }
        }
    }

    /// Whether the v2 hierarchy offers controller `name` (its `cgroup.controllers`).
    pub fn v2_offers(&self, name: &str) -> bool {
        self.v2_controllers.iter().any(|c| c == name)
    }

    pub fn mount(&self, h: Hier) -> Option<&Path> {
        self.hiers.iter().find(|(x, _)| *x == h).map(|(_, p)| p.as_path())
    }

    /// The top group in hierarchy mount `m`.
    pub fn top_dir(&self, m: &Path) -> PathBuf {
        m.join(&self.group)
    }

    /// Directory of `class` (with its ancestors) in hierarchy mount `m`: `<group>/<ancestors>/
    /// <class>`, except below a top-level idle class, which lives beside the group as
    /// `<group>.<class>`. A capped group one level down delays the wake-ups of the tasks above
    /// it by up to a tick, and `cpu.idle` only lets a waking task preempt an idle group it
    /// meets at its own level (docs/qos.md, "Best-effort classes").
    pub fn class_dir(&self, m: &Path, plan: &Plan, class: &str) -> PathBuf {
        let mut chain = vec![class.to_string()];
        let mut cur = plan.class(class).and_then(|c| c.parent.clone());
        while let Some(p) = cur {
            cur = plan.class(&p).and_then(|c| c.parent.clone());
            chain.push(p);
        }
        chain.reverse();
        let mut d = match plan.class(&chain[0]) {
            Some(top) if top.idle => m.join(format!("{}.{}", self.group, top.name)),
            _ => self.top_dir(m).join(&chain[0]),
        };
        for c in &chain[1..] {
            d.push(c);
        }
        d
    }

    /// Whether `dir` (in hierarchy mount `m`) is joule's: its group or a class's cgroup beside
    /// it, or below either.
    pub fn is_ours(&self, m: &Path, plan: &Plan, dir: &Path) -> bool {
        dir.starts_with(self.top_dir(m))
            || plan.classes.iter().filter(|c| c.idle && c.parent.is_none()).any(|c| dir.starts_with(self.class_dir(m, plan, &c.name)))
    }

    /// Where the tasks of `class` go. v2 forbids tasks in a cgroup that has controllers
    /// enabled for children, so a v2 class with child classes keeps its tasks in `self/`.
    pub fn task_dir(&self, m: &Path, plan: &Plan, class: &str) -> PathBuf {
        let d = self.class_dir(m, plan, class);
        if self.kind == BackendKind::V2 && plan.classes.iter().any(|c| c.parent.as_deref() == Some(class)) {
            d.join("self")
        } else {
            d
        }
    }
}

/// One step of an apply, in order.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "step", rename_all = "snake_case")]
pub enum Step {
    /// Create a cgroup (skipped when it exists; joule then adopts it).
    Mkdir { path: PathBuf, evacuate_to: PathBuf },
    /// Write a knob; `undo` overrides "write back the old content" (v2 subtree_control).
    Write { path: PathBuf, value: String, what: String, undo: Option<String> },
    /// Records a second removal of a cgroup joule made, after its knobs: a replay then
    /// evacuates and removes the group *before* resetting knobs a populated group would refuse
    /// (v1 will not set rt_runtime_us to 0 while RT tasks are inside).
    Barrier { path: PathBuf, evacuate_to: PathBuf },
}

/// A step as `joule qos plan` shows it.
#[derive(Debug, Clone, Serialize)]
pub struct PlannedWrite(pub Step);

impl std::fmt::Display for PlannedWrite {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.0 {
            Step::Mkdir { path, .. } => write!(f, "mkdir {}", path.display()),
            Step::Write { path, value, what, .. } => write!(f, "{} <- {value:?}   ({what})", path.display()),
            Step::Barrier { .. } => Ok(()),
        }
    }
}

/// The writes as `joule qos plan` lists them (made, or that would be made if `admitted`).
pub fn render_writes(writes: &[PlannedWrite], admitted: bool) -> String {
    let mut s = String::new();
    if !writes.is_empty() {
        s.push_str(if admitted { "writes, in order:\n" } else { "writes it would make if admitted (none made):\n" });
        for w in writes.iter().filter(|w| !matches!(w.0, Step::Barrier { .. })) {
            s.push_str(&format!("  {w}\n"));
        }
    }
    s
}

/// v1 `cpu.shares` from a v2-style weight (100 ↔ 1024).
pub fn shares_from_weight(w: u64) -> u64 {
    (w * 1024 / 100).clamp(2, 262_144)
}

/// Whether the kernel has `cpu.idle` (Linux 5.15+, v1 and v2). Judged by the release, since the
/// root cgroup has no such file; a release that cannot be read counts as a recent kernel.
fn kernel_has_cpu_idle(fx: &dyn Effects) -> bool {
    let release = read_trimmed(fx, Path::new("/proc/sys/kernel/osrelease")).unwrap_or_default();
    joule_core::procfs::kernel_version(&release).is_none_or(|v| v >= (5, 15))
}

/// The steps that realise `plan` on `layout`, parents before children. An idle class on a
/// kernel without `cpu.idle` (before 5.15) gets an ordinary group, beside joule's all the same.
pub fn steps(layout: &Layout, plan: &Plan, fx: &dyn Effects) -> Vec<Step> {
    let mut out = Vec::new();
    let idle_ok = kernel_has_cpu_idle(fx);
    let w = |out: &mut Vec<Step>, path: PathBuf, value: String, what: &str| out.push(Step::Write { path, value, what: what.into(), undo: None });
    // plan.classes is already parents-first (admission visits in topological order).
    for (h, m) in &layout.hiers {
        let (h, m) = (*h, m.as_path());
        let root_procs = m.join("cgroup.procs");
        let jd = layout.top_dir(m);
        if h == Hier::Unified && layout.kind == BackendKind::V2 {
            let mut want = Vec::new();
            if plan.classes.iter().any(|c| c.cfs.is_some() || c.weight.is_some() || c.thermal_capped || c.idle) {
                want.push("cpu");
            }
            if plan.classes.iter().any(|c| c.cpus != plan.env.cpus) {
                want.push("cpuset");
            }
            let plus = want.iter().map(|c| format!("+{c}")).collect::<Vec<_>>().join(" ");
            let enabled = read_trimmed(fx, &m.join("cgroup.subtree_control")).unwrap_or_default();
            for c in &want {
                if !enabled.split_whitespace().any(|e| e == *c) {
                    out.push(Step::Write {
                        path: m.join("cgroup.subtree_control"),
                        value: format!("+{c}"),
                        what: format!("enable the {c} controller for joule's groups"),
                        undo: Some(format!("-{c}")),
                    });
                }
            }
            out.push(Step::Mkdir { path: jd.clone(), evacuate_to: root_procs.clone() });
            if !want.is_empty() {
                w(&mut out, jd.join("cgroup.subtree_control"), plus.clone(), "let classes use the controllers");
            }
            out.push(Step::Barrier { path: jd.clone(), evacuate_to: root_procs.clone() });
            for c in &plan.classes {
                let d = layout.class_dir(m, plan, &c.name);
                out.push(Step::Mkdir { path: d.clone(), evacuate_to: root_procs.clone() });
                if c.cpus != plan.env.cpus {
                    w(&mut out, d.join("cpuset.cpus"), crate::cpulist::format(&c.cpus), "CPUs the class may use");
                }
                if let Some(q) = c.cfs {
                    w(&mut out, d.join("cpu.max"), format!("{} {}", q.quota_us, q.period_us), "CFS bandwidth: quota period");
                    if let Some(b) = q.burst_us {
                        w(&mut out, d.join("cpu.max.burst"), b.to_string(), "CFS burst");
                    }
                }
                if let Some(wt) = c.weight {
                    w(&mut out, d.join("cpu.weight"), wt.to_string(), "CPU weight");
                }
                if c.idle && idle_ok {
                    w(&mut out, d.join("cpu.idle"), "1".into(), "idle group: every waking task preempts it");
                }
                let has_kids = plan.classes.iter().any(|k| k.parent.as_deref() == Some(c.name.as_str()));
                if has_kids {
                    if !want.is_empty() {
                        w(&mut out, d.join("cgroup.subtree_control"), plus.clone(), "let child classes use the controllers");
                    }
                    out.push(Step::Mkdir { path: d.join("self"), evacuate_to: root_procs.clone() });
                    out.push(Step::Barrier { path: d.join("self"), evacuate_to: root_procs.clone() });
                }
                out.push(Step::Barrier { path: d, evacuate_to: root_procs.clone() });
            }
            continue;
        }
        // cgroup v1 (and a v2 hierarchy beside them, for grouping only: directories, no knob).
        out.push(Step::Mkdir { path: jd.clone(), evacuate_to: root_procs.clone() });
        if h == Hier::Cpuset {
            for k in ["cpuset.cpus", "cpuset.mems"] {
                let v = read_trimmed(fx, &m.join(k)).unwrap_or_default();
                w(&mut out, jd.join(k), v, "copied from the root: a cpuset needs both before it can hold tasks");
            }
        }
        if h == Hier::Cpu && layout.rt_group_sched {
            let period = read_trimmed(fx, &jd.join("cpu.rt_period_us")).ok().and_then(|s| s.parse::<u64>().ok()).unwrap_or(1_000_000);
            let need: u128 = plan
                .classes
                .iter()
                .filter(|c| c.parent.is_none())
                .filter_map(|c| c.rt)
                .map(|r| (r.runtime_us as u128 * period as u128).div_ceil(r.period_us as u128))
                .sum();
            if need > 0 {
                w(
                    &mut out,
                    jd.join("cpu.rt_runtime_us"),
                    need.min(period as u128).to_string(),
                    "RT budget of all classes (parent before children; from the global budget)",
                );
            }
        }
        out.push(Step::Barrier { path: jd.clone(), evacuate_to: root_procs.clone() });
        for c in &plan.classes {
            let d = layout.class_dir(m, plan, &c.name);
            out.push(Step::Mkdir { path: d.clone(), evacuate_to: root_procs.clone() });
            match h {
                Hier::Cpuset => {
                    w(&mut out, d.join("cpuset.cpus"), crate::cpulist::format(&c.cpus), "CPUs the class may use");
                    let mems = read_trimmed(fx, &m.join("cpuset.mems")).unwrap_or_default();
                    w(&mut out, d.join("cpuset.mems"), mems, "memory nodes, copied from the root");
                }
                Hier::Cpu => {
                    if let Some(r) = c.rt {
                        w(&mut out, d.join("cpu.rt_period_us"), r.period_us.to_string(), "RT period (runtime is 0 until the next write)");
                        w(&mut out, d.join("cpu.rt_runtime_us"), r.runtime_us.to_string(), "RT runtime per period, per CPU");
                    }
                    if let Some(q) = c.cfs {
                        w(&mut out, d.join("cpu.cfs_period_us"), q.period_us.to_string(), "CFS period");
                        w(&mut out, d.join("cpu.cfs_quota_us"), q.quota_us.to_string(), "CFS quota per period, all CPUs together");
                        if let Some(b) = q.burst_us {
                            w(&mut out, d.join("cpu.cfs_burst_us"), b.to_string(), "CFS burst");
                        }
                    }
                    if let Some(wt) = c.weight {
                        w(&mut out, d.join("cpu.shares"), shares_from_weight(wt).to_string(), "cpu.shares = weight × 1024 / 100");
                    }
                    if c.idle && idle_ok {
                        w(&mut out, d.join("cpu.idle"), "1".into(), "idle group: every waking task preempts it");
                    }
                }
                _ => {}
            }
            out.push(Step::Barrier { path: d, evacuate_to: root_procs.clone() });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use joule_core::effects::RealEffects;

    fn layout(tree: &str, prefer: Option<BackendKind>) -> Result<Layout, crate::QosError> {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/cgroupfs").join(tree);
        Layout::detect(&root, &RealEffects, prefer, JOULE_DIR)
    }

    fn hiers(l: &Layout) -> Vec<(Hier, String)> {
        l.hiers.iter().map(|(h, p)| (*h, p.file_name().unwrap().to_string_lossy().into_owned())).collect()
    }

    #[test]
    fn cpu_idle_is_judged_by_the_kernel_release() {
        let fx = |r: &str| joule_core::effects::FakeEffects::default().with_file("/proc/sys/kernel/osrelease", r);
        assert!(kernel_has_cpu_idle(&fx("6.18.44-fc-v657\n")) && kernel_has_cpu_idle(&fx("5.15.0-91-generic")));
        assert!(!kernel_has_cpu_idle(&fx("5.10.0-28-amd64")) && !kernel_has_cpu_idle(&fx("4.19.0")));
        assert!(kernel_has_cpu_idle(&joule_core::effects::FakeEffects::default()), "unreadable: a recent kernel");
    }

    #[test]
    fn v1_hierarchies_apart_comounted_and_the_v2_choice() {
        let hybrid = layout("hybrid", None).unwrap();
        assert_eq!(hybrid.kind, BackendKind::V1);
        assert_eq!(hiers(&hybrid), [(Hier::Cpu, "cpu".into()), (Hier::Cpuset, "cpuset".into()), (Hier::Cpuacct, "cpuacct".into())]);
        assert!(hybrid.rt_group_sched);
        // systemd's `cpu`/`cpuacct` symlinks: one hierarchy, which also does the accounting.
        let comounted = layout("comounted", None).unwrap();
        assert_eq!(hiers(&comounted), [(Hier::Cpu, "cpu,cpuacct".into()), (Hier::Cpuset, "cpuset".into())]);
        assert!(!comounted.rt_group_sched);
        // The hybrid's unified/ offers no cpu: only when asked for, never chosen by itself.
        let v2 = layout("hybrid", Some(BackendKind::V2)).unwrap();
        assert_eq!((hiers(&v2), v2.v2_controllers), (vec![(Hier::Unified, "unified".into())], vec!["hugetlb".to_string()]));
        assert!(matches!(layout("comounted", Some(BackendKind::V2)), Err(crate::QosError::NoCpuController(_))));
        let pure = layout("v2-child-named-cpu", None).unwrap();
        assert_eq!((pure.kind, pure.hiers[0].0), (BackendKind::V2, Hier::Unified));
        assert!(pure.hiers[0].1.ends_with("v2-child-named-cpu"), "the root itself, not its child `cpu`");
    }
}
