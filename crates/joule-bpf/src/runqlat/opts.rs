//! What `RunqLat::load` is told before the program goes into the kernel: which cgroup
//! hierarchy names the cgroups (a `const volatile` of runqlat.bpf.c) and how big its maps are.

use crate::intf::{JOULE_HIER_V1_CPU, JOULE_HIER_V2, JOULE_RUNQ_MAX_CGROUPS, JOULE_RUNQ_MAX_TASKS};
use joule_core::cgroupfs::{Controller, Layout};
use joule_core::effects::RealEffects;
use std::path::{Path, PathBuf};

/// Which cgroup hierarchy names the cgroups.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hierarchy {
    /// The cgroup v1 `cpu` controller's hierarchy (where tasks live on a v1 machine).
    V1Cpu,
    /// The cgroup v2 default hierarchy.
    V2,
}

impl Hierarchy {
    /// The value of runqlat.bpf.c's `hierarchy` (enum joule_hierarchy).
    pub(crate) fn to_raw(self) -> u32 {
        match self {
            Hierarchy::V1Cpu => JOULE_HIER_V1_CPU,
            Hierarchy::V2 => JOULE_HIER_V2,
        }
    }
}

#[derive(Debug, Clone)]
pub struct RunqLatOpts {
    pub hierarchy: Hierarchy,
    /// Mount point of that hierarchy (`/sys/fs/cgroup/cpu`, `/sys/fs/cgroup`): reported paths
    /// are relative to it.
    pub cgroup_root: PathBuf,
    /// Most cgroups tracked at once; a cgroup beyond it is not measured. Entries are allocated
    /// on first use (~2.2 KiB per CPU each), so a high limit costs nothing until used.
    pub max_cgroups: u32,
    /// Live threads whose cumulative wait is kept at once (an exited thread's entry is freed
    /// at exit); beyond it the least recently waiting are evicted, and an evicted thread's
    /// wait restarts from zero. The map is preallocated: ~100 bytes of kernel memory per entry,
    /// 1.6 MiB at the default 16,384. Reading costs O(entries), not O(max_tasks).
    pub max_tasks: u32,
}

impl RunqLatOpts {
    /// Chooses from the cgroup filesystem root (`--cgroup-root`, normally `/sys/fs/cgroup`), as
    /// `joule_core::cgroupfs` lays it out: the v1 `cpu` hierarchy when there is one (a `cpu`
    /// symlink resolved to the `cpu,cpuacct` co-mount), since a v1 machine's tasks are named by
    /// it; else the cgroup2 hierarchy at the root itself or at `unified/` (hybrid layout); else
    /// v2 at the root.
    pub fn for_root(cgroup_fs_root: &Path) -> Self {
        let layout = Layout::detect(cgroup_fs_root, &RealEffects);
        let (hierarchy, cgroup_root) = match (layout.v1(Controller::Cpu), &layout.unified) {
            (Some(cpu), _) => (Hierarchy::V1Cpu, cpu.to_path_buf()),
            (None, Some(v2)) => (Hierarchy::V2, v2.dir.clone()),
            (None, None) => (Hierarchy::V2, cgroup_fs_root.to_path_buf()),
        };
        Self { hierarchy, cgroup_root, max_cgroups: JOULE_RUNQ_MAX_CGROUPS, max_tasks: JOULE_RUNQ_MAX_TASKS }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree(files: &[&str]) -> tempfile::TempDir {
        let root = tempfile::tempdir().unwrap();
        for f in files {
            let p = root.path().join(f);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, "").unwrap();
        }
        root
    }

    #[test]
    fn for_root_prefers_the_v1_cpu_hierarchy_then_v2() {
        let hybrid = tree(&["cpu/cpu.shares", "cpuset/cpuset.cpus", "unified/cgroup.controllers"]);
        let o = RunqLatOpts::for_root(hybrid.path());
        assert_eq!((o.hierarchy, o.cgroup_root), (Hierarchy::V1Cpu, hybrid.path().join("cpu")));

        let comounted = tree(&["cpu,cpuacct/cpu.shares"]);
        assert_eq!(RunqLatOpts::for_root(comounted.path()).cgroup_root, comounted.path().join("cpu,cpuacct"));
        // systemd's layout: `cpu` is a symlink to the co-mount, which names the hierarchy.
        std::os::unix::fs::symlink("cpu,cpuacct", comounted.path().join("cpu")).unwrap();
        assert_eq!(RunqLatOpts::for_root(comounted.path()).cgroup_root, comounted.path().join("cpu,cpuacct"));

        let v2 = tree(&["cgroup.controllers", "system.slice/cgroup.procs"]);
        let o = RunqLatOpts::for_root(v2.path());
        assert_eq!((o.hierarchy, o.cgroup_root), (Hierarchy::V2, v2.path().to_path_buf()));

        let hybrid_v2_only = tree(&["unified/cgroup.controllers", "systemd/tasks"]);
        let o = RunqLatOpts::for_root(hybrid_v2_only.path());
        assert_eq!((o.hierarchy, o.cgroup_root), (Hierarchy::V2, hybrid_v2_only.path().join("unified")));

        let nothing = tree(&[]);
        let o = RunqLatOpts::for_root(nothing.path());
        assert_eq!((o.hierarchy, o.cgroup_root), (Hierarchy::V2, nothing.path().to_path_buf()));
    }
}
