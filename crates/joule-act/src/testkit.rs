//! Fakes the actuators' unit tests share: cgroupfs trees whose new cgroups come with their
//! knobs (FakeEffects' `on_mkdir`), and /proc fixture entries.

use joule_core::effects::FakeEffects;
use std::path::Path;
use std::sync::Arc;

/// A cgroup v2 tree at /cg offering cpuset and cpu, `cpus` effective.
pub fn cgroup_v2(cpus: &str) -> Arc<FakeEffects> {
    let mut fx = FakeEffects::default()
        .with_dir("/cg")
        .with_file("/cg/cgroup.controllers", "cpuset cpu")
        .with_file("/cg/cgroup.subtree_control", "")
        .with_file("/cg/cgroup.procs", "")
        .with_file("/cg/cpuset.cpus.effective", cpus);
    for (k, v) in [
        ("cgroup.procs", ""),
        ("cgroup.subtree_control", ""),
        ("cpu.max", "max 100000"),
        ("cpu.weight", "100"),
        ("cpu.idle", "0"),
        ("cpuset.cpus", ""),
        ("cgroup.freeze", "0"),
        ("cgroup.events", "populated 0\nfrozen 0\n"),
    ] {
        fx = fx.on_mkdir("/cg", k, v);
    }
    Arc::new(fx)
}

/// A cgroup v1 machine at /cg: cpu (with RT groups), cpuset, cpuacct and freezer hierarchies.
pub fn cgroup_v1() -> Arc<FakeEffects> {
    let mut fx = FakeEffects::default();
    let hiers: [(&str, &[(&str, &str)]); 4] = [
        (
            "cpu",
            &[
                ("cpu.shares", "1024"),
                ("cpu.rt_runtime_us", "0"),
                ("cpu.rt_period_us", "1000000"),
                ("cpu.cfs_quota_us", "-1"),
                ("cpu.cfs_period_us", "100000"),
                ("cpu.idle", "0"),
            ],
        ),
        ("cpuset", &[("cpuset.cpus", ""), ("cpuset.mems", "")]),
        ("cpuacct", &[("cpuacct.usage", "0")]),
        ("freezer", &[("freezer.state", "THAWED")]),
    ];
    for (h, knobs) in hiers {
        let root = format!("/cg/{h}");
        fx = fx.with_dir(root.as_str()).with_file(format!("{root}/cgroup.procs"), "").with_file(format!("{root}/tasks"), "");
        fx = fx.on_mkdir(root.as_str(), "cgroup.procs", "").on_mkdir(root.as_str(), "tasks", "");
        for (k, v) in knobs {
            fx = fx.on_mkdir(root.as_str(), k, v);
        }
    }
    let fx = fx
        .with_file("/cg/cpu/cpu.shares", "1024")
        .with_file("/cg/cpu/cpu.rt_runtime_us", "950000")
        .with_file("/cg/cpuset/cpuset.cpus", "0-1")
        .with_file("/cg/cpuset/cpuset.effective_cpus", "0-1")
        .with_file("/cg/cpuset/cpuset.mems", "0")
        .with_file("/cg/cpuacct/cpuacct.usage", "0");
    Arc::new(fx)
}

/// `<dir>/<pid>`: a process `comm`, child of 1, in cgroup `cg` of every hierarchy.
pub fn proc_fixture(dir: &Path, pid: i32, comm: &str, cg: &str) {
    let d = dir.join(pid.to_string());
    std::fs::create_dir_all(d.join(format!("task/{pid}"))).unwrap();
    std::fs::write(d.join("stat"), format!("{pid} ({comm}) S 1 {pid} {pid} 0 -1 0 0 0 0 0 1 2 0 0 20 0 1 0 {}\n", 1000 + pid)).unwrap();
    std::fs::write(d.join("comm"), format!("{comm}\n")).unwrap();
    set_cgroup(dir, pid, cg);
}

/// What `<dir>/<pid>/cgroup` says: `cg` in every hierarchy (the kernel's view after a move).
pub fn set_cgroup(dir: &Path, pid: i32, cg: &str) {
    std::fs::write(dir.join(pid.to_string()).join("cgroup"), format!("4:freezer:{cg}\n3:cpuset:{cg}\n2:cpuacct:{cg}\n1:cpu:{cg}\n0::{cg}\n")).unwrap();
}
