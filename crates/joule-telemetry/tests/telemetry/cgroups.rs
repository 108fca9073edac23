//! cgroup accounting on fixtures: v1 (cpu and cpuacct mounted apart) with a controller-less
//! unified v2 beside it, and a pure v2 root where a cgroup vanishes between samples.

use crate::common::{assert_close, sample, Staged};
use joule_core::snapshot::CgroupCpu;
use joule_core::Origin;
use joule_telemetry::CgroupSource;
use std::fs;

fn find<'a>(cgs: &'a [CgroupCpu], hierarchy: &str, path: &str) -> &'a CgroupCpu {
    cgs.iter().find(|c| c.hierarchy == hierarchy && c.path == path).unwrap_or_else(|| panic!("{hierarchy} {path} missing in {cgs:#?}"))
}

#[test]
fn v1_usage_and_throttling_with_hybrid_unified() {
    let staged = Staged::new("cgroup-v1");
    let mut src = CgroupSource::new(staged.root());
    let first = sample(&mut src, 0);
    assert!(first.cgroups.iter().all(|c| c.usage_cpus.is_none()), "no rate on the first sample");
    staged.advance();
    let snap = sample(&mut src, 100);
    let cg = &snap.cgroups;
    let root = find(cg, "v1", "/");
    assert_eq!(root.usage_us, 10_150_000);
    assert_close(root.usage_cpus.unwrap(), 1.5);
    let app = find(cg, "v1", "/app");
    assert_close(app.usage_cpus.unwrap(), 0.5);
    assert_eq!((app.nr_throttled, app.throttled_us), (4, 4500));
    let web = find(cg, "v1", "/app/web");
    assert_close(web.usage_cpus.unwrap(), 0.25);
    assert_eq!((web.nr_throttled, web.throttled_us), (1, 1500));
    // Only in the cpu hierarchy: throttling known, usage not.
    let only = find(cg, "v1", "/only-cpu");
    assert_eq!((only.nr_throttled, only.throttled_us, only.usage_us), (2, 7, 0));
    // The controller-less cgroup2 still has usage_usec.
    assert_close(find(cg, "v2", "/").usage_cpus.unwrap(), 1.0);
    assert_close(find(cg, "v2", "/app").usage_cpus.unwrap(), 0.2);
    assert!(!cg.iter().any(|c| c.path.contains("memory")));
    assert!(cg.iter().all(|c| c.source == Origin::Kernel), "cgroup CPU is kernel accounting: {cg:#?}");
}

#[test]
fn v2_pure_root_and_a_vanished_cgroup() {
    let staged = Staged::new("cgroup-v2");
    let mut src = CgroupSource::new(staged.root());
    let first = sample(&mut src, 0);
    find(&first.cgroups, "v2", "/gone.slice");
    fs::remove_dir_all(staged.root().join("gone.slice")).unwrap();
    staged.advance();
    let snap = sample(&mut src, 100);
    let cg = &snap.cgroups;
    assert!(cg.iter().all(|c| c.hierarchy == "v2"));
    assert!(!cg.iter().any(|c| c.path == "/gone.slice"));
    assert_close(find(cg, "v2", "/").usage_cpus.unwrap(), 1.8);
    let sys = find(cg, "v2", "/system.slice");
    assert_close(sys.usage_cpus.unwrap(), 1.0);
    assert_eq!((sys.nr_throttled, sys.throttled_us), (6, 262_000));
    assert_close(find(cg, "v2", "/user.slice/user-1000.slice").usage_cpus.unwrap(), 0.6);
}

#[test]
fn no_cgroup_hierarchy_is_a_note() {
    let empty = tempfile::tempdir().unwrap();
    let snap = sample(&mut CgroupSource::new(empty.path()), 0);
    assert!(snap.cgroups.is_empty());
    assert!(snap.notes.iter().any(|n| n.starts_with("no cgroup CPU accounting")));
}

#[test]
fn v1_cpu_and_cpuacct_symlinked_to_one_comounted_hierarchy() {
    // The usual systemd v1 layout: `cpu` and `cpuacct` are symlinks to `cpu,cpuacct`.
    let t = tempfile::tempdir().unwrap();
    let shared = t.path().join("cpu,cpuacct");
    let write = |usage_root: u64, usage_app: u64, nr: u64| {
        for (dir, usage) in [(shared.clone(), usage_root), (shared.join("app"), usage_app)] {
            fs::create_dir_all(&dir).unwrap();
            fs::write(dir.join("cpuacct.usage"), format!("{usage}\n")).unwrap();
            fs::write(dir.join("cpu.stat"), format!("nr_periods 10\nnr_throttled {nr}\nthrottled_time {}\n", nr * 1_000_000)).unwrap();
        }
    };
    write(1_000_000_000, 400_000_000, 1);
    std::os::unix::fs::symlink("cpu,cpuacct", t.path().join("cpu")).unwrap();
    std::os::unix::fs::symlink("cpu,cpuacct", t.path().join("cpuacct")).unwrap();
    let mut src = CgroupSource::new(t.path());
    sample(&mut src, 0);
    write(1_150_000_000, 450_000_000, 3);
    let snap = sample(&mut src, 100);
    let paths: Vec<(&str, &str)> = snap.cgroups.iter().map(|c| (c.hierarchy.as_str(), c.path.as_str())).collect();
    assert_eq!(paths, [("v1", "/"), ("v1", "/app")], "each cgroup once");
    let app = find(&snap.cgroups, "v1", "/app");
    assert_close(app.usage_cpus.unwrap(), 0.5);
    assert_eq!((app.usage_us, app.nr_throttled, app.throttled_us), (450_000, 3, 3000));
    assert_close(find(&snap.cgroups, "v1", "/").usage_cpus.unwrap(), 1.5);
}

#[test]
fn layout_is_detected_once_then_every_ten_seconds() {
    let t = tempfile::tempdir().unwrap();
    let mut src = CgroupSource::new(t.path());
    assert!(sample(&mut src, 0).notes.iter().any(|n| n.starts_with("no cgroup CPU accounting")));
    // cgroup2 mounted later: picked up at the next detection, not on every sample.
    fs::write(t.path().join("cgroup.controllers"), "cpu\n").unwrap();
    fs::write(t.path().join("cpu.stat"), "usage_usec 1000\n").unwrap();
    assert!(sample(&mut src, 100).cgroups.is_empty());
    let snap = sample(&mut src, 9_900);
    assert_eq!(find(&snap.cgroups, "v2", "/").usage_us, 1000);
}
