//! Where the cgroup hierarchies are under a cgroup filesystem root, found once for every crate:
//! the v1 hierarchy of each controller joule uses (cpu, cpuacct, cpuset, freezer) and the v2
//! unified hierarchy with the controllers it offers. Telemetry reads accounting from these
//! hierarchies, joule-bpf names run-queue latency by one of them, joule-qos writes classes into
//! them, the nap mechanism will freeze in one; all of them agree because they ask this module.
//! The root is a parameter and reads go through `Effects`, so tests run on fixture trees.

use crate::effects::Effects;
use std::path::{Path, PathBuf};

/// A cgroup v1 controller joule uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Controller {
    /// CPU bandwidth, shares and RT groups; the hierarchy a v1 machine's tasks are named by.
    Cpu,
    /// CPU accounting (`cpuacct.usage`).
    Cpuacct,
    /// CPU and memory-node placement.
    Cpuset,
    /// Stops and thaws whole groups (the nap mechanism).
    Freezer,
}

impl Controller {
    pub const ALL: [Controller; 4] = [Controller::Cpu, Controller::Cpuacct, Controller::Cpuset, Controller::Freezer];

    /// The controller's name, as a v1 mount point and /proc/PID/cgroup spell it.
    pub fn name(self) -> &'static str {
        match self {
            Controller::Cpu => "cpu",
            Controller::Cpuacct => "cpuacct",
            Controller::Cpuset => "cpuset",
            Controller::Freezer => "freezer",
        }
    }

    /// Directory names under the root that may hold this controller's hierarchy, in the order
    /// they are tried: its own name (a symlink to a co-mount on systemd machines), then the
    /// co-mounts distributions use.
    fn mount_names(self) -> &'static [&'static str] {
        match self {
            Controller::Cpu => &["cpu", "cpu,cpuacct", "cpuacct,cpu"],
            Controller::Cpuacct => &["cpuacct", "cpu,cpuacct", "cpuacct,cpu"],
            Controller::Cpuset => &["cpuset"],
            Controller::Freezer => &["freezer"],
        }
    }

    /// Files of which any one, in a directory of `mount_names`, proves the hierarchy is there.
    /// The cpu controller's `cpu.stat` needs CFS bandwidth, its `cpu.shares` fair group
    /// scheduling: either will do. The freezer puts no file into a hierarchy's root cgroup
    /// (`freezer.state` exists only below it), so its hierarchy is known by its name and v1's
    /// `tasks`, which cgroup2 does not have.
    fn markers(self) -> &'static [&'static str] {
        match self {
            Controller::Cpu => &["cpu.shares", "cpu.stat"],
            Controller::Cpuacct => &["cpuacct.usage"],
            Controller::Cpuset => &["cpuset.cpus"],
            Controller::Freezer => &["tasks"],
        }
    }
}

/// One hierarchy a class lives in: a v1 controller's, or the v2 unified one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Hier {
    Cpu,
    Cpuset,
    Cpuacct,
    Freezer,
    Unified,
}

impl Hier {
    /// The v1 controller whose hierarchy this is; `None` for the v2 unified one.
    pub fn controller(self) -> Option<Controller> {
        match self {
            Hier::Cpu => Some(Controller::Cpu),
            Hier::Cpuset => Some(Controller::Cpuset),
            Hier::Cpuacct => Some(Controller::Cpuacct),
            Hier::Freezer => Some(Controller::Freezer),
            Hier::Unified => None,
        }
    }
}

/// The cgroup v2 unified hierarchy.
#[derive(Debug, Clone, PartialEq)]
pub struct Unified {
    /// The root itself on a pure-v2 machine, `unified/` on a hybrid one.
    pub dir: PathBuf,
    /// What its `cgroup.controllers` lists (empty when unreadable, or when every controller is
    /// bound to a v1 hierarchy, as on a hybrid machine: accounting still works there).
    pub controllers: Vec<String>,
}

impl Unified {
    /// Whether the v2 hierarchy offers the controller named `name` (`cpu`, `cpuset`, ...).
    pub fn offers(&self, name: &str) -> bool {
        self.controllers.iter().any(|c| c == name)
    }
}

/// The hierarchies under one cgroup filesystem root.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Layout {
    /// (controller, hierarchy directory) for each v1 controller found. Co-mounted controllers
    /// share one directory: a `cpu` or `cpuacct` symlink is resolved to the `cpu,cpuacct`
    /// directory it names, so equal paths mean one hierarchy.
    v1: Vec<(Controller, PathBuf)>,
    pub unified: Option<Unified>,
}

impl Layout {
    /// Finds the hierarchies under `root` (normally `/sys/fs/cgroup`). A `cgroup.controllers`
    /// at the root means a pure v2 machine: nothing below it is a v1 hierarchy (a v2 child
    /// cgroup may well be called `cpu`). Otherwise each v1 controller is looked for in its
    /// `mount_names` and the v2 hierarchy at `unified/` (the hybrid layout).
    pub fn detect(root: &Path, fx: &dyn Effects) -> Layout {
        if fx.exists(&root.join("cgroup.controllers")) {
            return Layout { v1: Vec::new(), unified: Some(unified(root, fx)) };
        }
        let v1 = Controller::ALL
            .into_iter()
            .filter_map(|c| {
                let dir = c.mount_names().iter().map(|n| root.join(n)).find(|d| c.markers().iter().any(|m| fx.exists(&d.join(m))))?;
                Some((c, resolve_link(root, dir)))
            })
            .collect();
        let dir = root.join("unified");
        let unified = fx.exists(&dir.join("cgroup.controllers")).then(|| unified(&dir, fx));
        Layout { v1, unified }
    }

    /// The directory of the v1 hierarchy holding `c`.
    pub fn v1(&self, c: Controller) -> Option<&Path> {
        self.v1.iter().find(|(x, _)| *x == c).map(|(_, d)| d.as_path())
    }

    /// Whether `a` and `b` are both mounted, in one hierarchy (`cpu,cpuacct`).
    pub fn comounted(&self, a: Controller, b: Controller) -> bool {
        self.v1(a).is_some() && self.v1(a) == self.v1(b)
    }

    /// No v1 hierarchy joule uses and no v2 one.
    pub fn is_empty(&self) -> bool {
        self.v1.is_empty() && self.unified.is_none()
    }

    /// Pure cgroup v2: the unified hierarchy at `root` itself, no v1 hierarchy.
    pub fn is_pure_v2(&self, root: &Path) -> bool {
        self.v1.is_empty() && self.unified.as_ref().is_some_and(|u| u.dir == root)
    }
}

/// Whether systemd owns the cgroup tree at `cgroup_root`: PID 1 (under `procfs`) is systemd
/// and the hierarchy is pure v2, where systemd's rule is one writer per subtree
/// (docs/systemd.md). Then joule acts on units through systemd and never moves a process.
pub fn systemd_owns_tree(procfs: &Path, cgroup_root: &Path, fx: &dyn Effects) -> bool {
    fx.read(&procfs.join("1/comm")).is_ok_and(|c| c.trim() == "systemd") && Layout::detect(cgroup_root, fx).is_pure_v2(cgroup_root)
}

fn unified(dir: &Path, fx: &dyn Effects) -> Unified {
    let controllers = fx.read(&dir.join("cgroup.controllers")).unwrap_or_default();
    Unified { dir: dir.to_path_buf(), controllers: controllers.split_whitespace().map(String::from).collect() }
}

/// `dir` with a symlink in its last component followed (systemd's `cpu -> cpu,cpuacct`), so
/// co-mounted controllers compare equal; the path stays under `root` as given. `Effects` has
/// no readlink, so this asks the filesystem directly: on a fake tree the path does not exist
/// there and stays as it is.
fn resolve_link(root: &Path, dir: PathBuf) -> PathBuf {
    match std::fs::read_link(&dir) {
        // A relative target is relative to the link's directory, the root.
        Ok(target) => root.join(target),
        Err(_) => dir,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::effects::{FakeEffects, RealEffects};

    fn fixture(rel: &str) -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata").join(rel)
    }

    #[test]
    fn hybrid_machine_each_v1_controller_apart_and_a_controller_less_unified() {
        let root = fixture("cgroupfs/hybrid");
        let l = Layout::detect(&root, &RealEffects);
        for c in Controller::ALL {
            assert_eq!(l.v1(c), Some(root.join(c.name()).as_path()), "{c:?}");
        }
        assert!(!l.comounted(Controller::Cpu, Controller::Cpuacct));
        let u = l.unified.expect("unified/ has cgroup.controllers");
        assert_eq!(u.dir, root.join("unified"));
        assert_eq!(u.controllers, ["hugetlb"]);
        assert!(!u.offers("cpu"));
    }

    #[test]
    fn systemd_owns_a_pure_v2_tree_only_as_pid_1() {
        let fx = FakeEffects::default().with_file("/cg/cgroup.controllers", "cpu cpuset").with_file("/proc/1/comm", "systemd\n");
        let (proc, cg) = (Path::new("/proc"), Path::new("/cg"));
        assert!(systemd_owns_tree(proc, cg, &fx));
        let other_init = FakeEffects::default().with_file("/cg/cgroup.controllers", "cpu").with_file("/proc/1/comm", "init\n");
        assert!(!systemd_owns_tree(proc, cg, &other_init));
        // The hybrid layout (this development host's): joule owns its joule/ trees.
        let root = fixture("cgroupfs/hybrid");
        let hybrid = FakeEffects::default().with_file("/proc/1/comm", "systemd\n");
        assert!(!Layout::detect(&root, &RealEffects).is_pure_v2(&root));
        assert!(!systemd_owns_tree(proc, &root, &hybrid), "no cgroup.controllers at the fake's root");
    }

    #[test]
    fn systemd_v1_symlinks_resolve_to_the_comounted_hierarchy() {
        let root = fixture("cgroupfs/comounted");
        assert!(root.join("cpu").is_symlink(), "the fixture's cpu is a symlink (git keeps them)");
        let l = Layout::detect(&root, &RealEffects);
        let shared = root.join("cpu,cpuacct");
        assert_eq!(l.v1(Controller::Cpu), Some(shared.as_path()));
        assert_eq!(l.v1(Controller::Cpuacct), Some(shared.as_path()));
        assert!(l.comounted(Controller::Cpu, Controller::Cpuacct));
        assert!(!l.comounted(Controller::Cpu, Controller::Cpuset));
        assert_eq!(l.v1(Controller::Cpuset), Some(root.join("cpuset").as_path()));
        assert_eq!(l.v1(Controller::Freezer), Some(root.join("freezer").as_path()));
        assert_eq!(l.unified, None, "no unified/ here");
    }

    #[test]
    fn a_pure_v2_root_has_no_v1_hierarchy_even_with_a_child_named_cpu() {
        let root = fixture("cgroupfs/v2-child-named-cpu");
        assert!(root.join("cpu/cpu.stat").exists(), "the fixture has the trap");
        let l = Layout::detect(&root, &RealEffects);
        assert!(Controller::ALL.iter().all(|c| l.v1(*c).is_none()), "{l:?}");
        let u = l.unified.unwrap();
        assert_eq!((u.dir.as_path(), u.offers("cpu"), u.offers("cpuset")), (root.as_path(), true, true));
    }

    #[test]
    fn the_telemetry_fixtures_keep_their_layout() {
        // cgroup-v1: cpu with cpu.stat only (no cpu.shares), cpuacct, memory (not used) and a
        // controller-less unified/; no cpuset, no freezer.
        let root = fixture("cgroup-v1/t0");
        let l = Layout::detect(&root, &RealEffects);
        assert_eq!(l.v1(Controller::Cpu), Some(root.join("cpu").as_path()));
        assert_eq!(l.v1(Controller::Cpuacct), Some(root.join("cpuacct").as_path()));
        assert_eq!((l.v1(Controller::Cpuset), l.v1(Controller::Freezer)), (None, None));
        assert_eq!(l.unified, Some(Unified { dir: root.join("unified"), controllers: vec![] }));
        let empty = tempfile::tempdir().unwrap();
        assert!(Layout::detect(empty.path(), &RealEffects).is_empty());
    }

    #[test]
    fn reads_go_through_effects() {
        // Nothing of this exists on disk: only the fake knows it.
        let fx = FakeEffects::default()
            .with_file("/fake/cg/cpu,cpuacct/cpu.shares", "1024")
            .with_file("/fake/cg/freezer/tasks", "")
            .with_file("/fake/cg/unified/cgroup.controllers", "cpu io\n");
        let l = Layout::detect(Path::new("/fake/cg"), &fx);
        assert_eq!(l.v1(Controller::Cpu), Some(Path::new("/fake/cg/cpu,cpuacct")));
        assert_eq!(l.v1(Controller::Cpuacct), None, "a marker of the controller itself is needed");
        assert_eq!(l.v1(Controller::Freezer), Some(Path::new("/fake/cg/freezer")));
        assert_eq!(l.unified.unwrap().controllers, ["cpu", "io"]);
    }
}
