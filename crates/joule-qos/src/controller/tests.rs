//! Controller logic on an in-memory cgroup tree (FakeEffects plus the files the kernel would
//! create in a new cgroup) and a fixture /proc.

use super::*;
use crate::backend::Step;
use crate::seed;
use joule_core::config::MatchRules;
use joule_core::effects::{FakeEffects, Files, Mounts, Net, Qdisc, Sched, SchedAttr, UnitValue, Units};
use joule_core::journal;
use std::io;

/// FakeEffects that behaves like cgroupfs: new directories get their knob files; writes can
/// be made to fail; a read-only flag fails mkdir too.
#[derive(Default)]
struct CgFake {
    fx: FakeEffects,
    /// (path suffix, only this value or any, errno)
    fail: Mutex<Vec<(String, Option<String>, i32)>>,
}

const KNOBS: &[(&str, &str)] = &[
    ("cgroup.procs", ""),
    ("tasks", ""),
    ("cpu.rt_runtime_us", "0"),
    ("cpu.rt_period_us", "1000000"),
    ("cpu.cfs_quota_us", "-1"),
    ("cpu.cfs_period_us", "100000"),
    ("cpu.shares", "1024"),
    ("cpu.stat", "nr_periods 0\nnr_throttled 0\nthrottled_time 0\n"),
    ("cpu.max", "max 100000"),
    ("cpu.max.burst", "0"),
    ("cpu.weight", "100"),
    ("cpu.idle", "0"),
    ("cgroup.subtree_control", ""),
    ("cpuset.cpus", ""),
    ("cpuset.mems", ""),
    ("cpuacct.usage", "0"),
];

impl CgFake {
    /// The tests' fixture /proc trees live in temporary directories: read from disk, as the
    /// machine's /proc would be, through the same seam.
    fn new() -> Self {
        CgFake { fx: FakeEffects::default().with_tree(std::env::temp_dir()), ..Default::default() }
    }
    fn v1() -> Self {
        let f = CgFake::new();
        for h in ["cpu", "cpuset", "cpuacct"] {
            f.mkdir_raw(&format!("/cg/{h}"));
        }
        f.set("/cg/cpu/cpu.rt_runtime_us", "950000");
        f.set("/cg/cpuset/cpuset.cpus", "0-1");
        f.set("/cg/cpuset/cpuset.effective_cpus", "0-1");
        f.set("/cg/cpuset/cpuset.mems", "0");
        f.set("/p/sys/kernel/sched_rt_runtime_us", "950000");
        f.set("/p/sys/kernel/sched_rt_period_us", "1000000");
        f.fx.log.lock().unwrap().clear();
        f
    }
    /// A v2 root at /cg offering cpuset and cpu, with `cpus` effective.
    fn v2(cpus: &str) -> Self {
        let f = CgFake::new();
        f.mkdir_raw("/cg");
        f.set("/cg/cgroup.controllers", "cpuset cpu io memory");
        f.set("/cg/cpuset.cpus.effective", cpus);
        f.fx.log.lock().unwrap().clear();
        f
    }
    fn mkdir_raw(&self, d: &str) {
        self.fx.dirs.lock().unwrap().insert(d.into(), ());
        self.populate(d);
    }
    /// The files a new cgroup gets, per hierarchy (v2 gets all but cpuacct's).
    fn populate(&self, d: &str) {
        for (k, v) in KNOBS {
            let h = if d.starts_with("/cg/cpuacct") {
                "cpuacct"
            } else if d.starts_with("/cg/cpuset") {
                "cpuset"
            } else if d.starts_with("/cg/cpu") {
                "cpu"
            } else {
                "v2"
            };
            let ok = match h {
                "cpuacct" => k.starts_with("cgroup") || *k == "tasks" || k.starts_with("cpuacct"),
                "cpuset" => k.starts_with("cgroup") || *k == "tasks" || k.starts_with("cpuset"),
                "cpu" => !k.starts_with("cpuset") && !k.starts_with("cpuacct"),
                _ => !k.starts_with("cpuacct") && *k != "tasks",
            };
            if ok {
                self.set(&format!("{d}/{k}"), v);
            }
        }
    }
    fn set(&self, p: &str, v: &str) {
        self.fx.files.lock().unwrap().insert(p.into(), v.into());
    }
    /// Every write to a path ending in `suffix` fails (its undo too).
    fn fail(&self, suffix: &str, errno: i32) {
        self.fail.lock().unwrap().push((suffix.into(), None, errno));
    }
    /// Writing `value` to a path ending in `suffix` fails, as the kernel refuses one value
    /// of a knob and accepts its old one back.
    fn fail_value(&self, suffix: &str, value: &str, errno: i32) {
        self.fail.lock().unwrap().push((suffix.into(), Some(value.into()), errno));
    }
    fn joule_dirs(&self) -> Vec<PathBuf> {
        self.fx.dirs.lock().unwrap().keys().filter(|d| d.to_string_lossy().contains("joule")).cloned().collect()
    }
}

impl Files for CgFake {
    fn read(&self, p: &Path) -> io::Result<String> {
        self.fx.read(p)
    }
    fn read_bytes(&self, p: &Path) -> io::Result<Vec<u8>> {
        self.fx.read_bytes(p)
    }
    fn read_link(&self, p: &Path) -> io::Result<PathBuf> {
        self.fx.read_link(p)
    }
    fn write(&self, p: &Path, v: &str) -> io::Result<()> {
        if let Some((_, _, e)) =
            self.fail.lock().unwrap().iter().find(|(s, val, _)| p.to_string_lossy().ends_with(s.as_str()) && val.as_ref().is_none_or(|x| x == v))
        {
            return Err(io::Error::from_raw_os_error(*e));
        }
        self.fx.write(p, v)
    }
    fn create_dir(&self, p: &Path) -> io::Result<()> {
        if self.fx.read_only.lock().unwrap().iter().any(|r| p.starts_with(r)) {
            return Err(io::Error::from_raw_os_error(libc::EROFS));
        }
        self.fx.create_dir(p)?;
        self.populate(&p.display().to_string());
        Ok(())
    }
    fn remove_dir(&self, p: &Path) -> io::Result<()> {
        self.fx.remove_dir(p)
    }
    fn remove_file(&self, p: &Path) -> io::Result<()> {
        self.fx.remove_file(p)
    }
    fn exists(&self, p: &Path) -> bool {
        self.fx.exists(p)
    }
    fn list_dir(&self, p: &Path) -> io::Result<Vec<String>> {
        self.fx.list_dir(p)
    }
    fn cgroup_id(&self, p: &Path) -> io::Result<u64> {
        self.fx.cgroup_id(p)
    }
}

// The concerns a cgroup tree does not change are the plain fake's.
impl Sched for CgFake {
    fn get_sched(&self, t: i32) -> io::Result<SchedAttr> {
        self.fx.get_sched(t)
    }
    fn set_sched(&self, t: i32, a: SchedAttr) -> io::Result<()> {
        self.fx.set_sched(t, a)
    }
    fn get_slice_ns(&self, t: i32) -> io::Result<Option<u64>> {
        self.fx.get_slice_ns(t)
    }
    fn set_slice_ns(&self, t: i32, ns: u64) -> io::Result<()> {
        self.fx.set_slice_ns(t, ns)
    }
    fn get_affinity(&self, t: i32) -> io::Result<Vec<usize>> {
        self.fx.get_affinity(t)
    }
    fn set_affinity(&self, t: i32, cpus: &[usize]) -> io::Result<()> {
        self.fx.set_affinity(t, cpus)
    }
    fn set_deadline(&self, t: i32, dl: joule_core::effects::Deadline) -> io::Result<()> {
        self.fx.set_deadline(t, dl)
    }
}

impl Mounts for CgFake {
    fn fs_magic(&self, p: &Path) -> io::Result<i64> {
        self.fx.fs_magic(p)
    }
    fn mount(&self, fstype: &str, p: &Path) -> io::Result<()> {
        self.fx.mount(fstype, p)
    }
    fn unmount(&self, p: &Path) -> io::Result<()> {
        self.fx.unmount(p)
    }
}

impl Units for CgFake {
    fn unit_property(&self, unit: &str, property: &str) -> io::Result<UnitValue> {
        self.fx.unit_property(unit, property)
    }
    fn set_unit_property(&self, unit: &str, property: &str, value: &UnitValue) -> io::Result<()> {
        self.fx.set_unit_property(unit, property, value)
    }
    fn unit_freezer_state(&self, unit: &str) -> io::Result<String> {
        self.fx.unit_freezer_state(unit)
    }
    fn freeze_unit(&self, unit: &str) -> io::Result<()> {
        self.fx.freeze_unit(unit)
    }
    fn thaw_unit(&self, unit: &str) -> io::Result<()> {
        self.fx.thaw_unit(unit)
    }
    fn start_gate(&self, gate: &joule_core::effects::Gate) -> io::Result<()> {
        self.fx.start_gate(gate)
    }
    fn stop_gates(&self) -> io::Result<usize> {
        self.fx.stop_gates()
    }
}

impl Net for CgFake {
    fn link_index(&self, ns: Option<&Path>, ifname: &str) -> io::Result<u32> {
        self.fx.link_index(ns, ifname)
    }
    fn qdiscs(&self, ns: Option<&Path>, ifindex: u32) -> io::Result<Vec<Qdisc>> {
        self.fx.qdiscs(ns, ifindex)
    }
    fn replace_qdisc(&self, ns: Option<&Path>, ifindex: u32, q: &Qdisc) -> io::Result<()> {
        self.fx.replace_qdisc(ns, ifindex, q)
    }
    fn delete_qdisc(&self, ns: Option<&Path>, ifindex: u32, parent: u32, handle: u32) -> io::Result<()> {
        self.fx.delete_qdisc(ns, ifindex, parent, handle)
    }
    fn replace_class(&self, ns: Option<&Path>, ifindex: u32, c: &Qdisc) -> io::Result<()> {
        self.fx.replace_class(ns, ifindex, c)
    }
    fn link_kind(&self, ns: Option<&Path>, ifname: &str) -> io::Result<String> {
        self.fx.link_kind(ns, ifname)
    }
    fn add_link(&self, ns: Option<&Path>, ifname: &str, kind: &str) -> io::Result<u32> {
        Net::add_link(&self.fx, ns, ifname, kind)
    }
    fn delete_link(&self, ns: Option<&Path>, ifname: &str) -> io::Result<()> {
        self.fx.delete_link(ns, ifname)
    }
}

fn opts(procfs: &Path) -> QosOpts {
    QosOpts { cgroup_root: "/cg".into(), procfs_root: procfs.into(), ..Default::default() }
}

fn proc_fixture(dir: &Path, pid: i32, comm: &str) {
    let d = dir.join(pid.to_string());
    std::fs::create_dir_all(&d).unwrap();
    std::fs::write(d.join("stat"), stat_line(pid, comm)).unwrap();
    std::fs::write(d.join("comm"), format!("{comm}\n")).unwrap();
    std::fs::write(d.join("cgroup"), "3:cpuset:/\n2:cpuacct:/\n1:cpu:/\n0::/\n").unwrap();
}

/// /proc/PID/stat with start time 1000 + pid (field 22).
fn stat_line(pid: i32, comm: &str) -> String {
    format!("{pid} ({comm}) S 1 {pid} {pid} 0 -1 0 0 0 0 0 1 2 0 0 20 0 1 0 {}\n", 1000 + pid)
}

/// The process as the journal's replay sees it (through the fake's /proc): the same start time
/// as the fixture, so undoing a move finds the process it moved.
fn alive_in_fake(f: &CgFake, pid: i32, comm: &str) {
    f.fx.files.lock().unwrap().insert(format!("/proc/{pid}/stat").into(), stat_line(pid, comm));
}

fn log(f: &CgFake) -> Vec<String> {
    f.fx.log.lock().unwrap().clone()
}

#[test]
fn v1_apply_writes_parent_budget_first_and_release_removes_everything() {
    let f = CgFake::v1();
    let pd = tempfile::tempdir().unwrap();
    let jd = tempfile::tempdir().unwrap();
    let mut c = QosController::new_with(&seed::classes(1_000_000, [425_000, 425_000, 100_000]), opts(pd.path()), &f).unwrap();
    let j = Journal::open(jd.path()).unwrap();
    let r = c.apply(&j, &f).unwrap();
    assert_eq!(r.created.len(), 12, "joule + 3 classes in cpu, cpuset, cpuacct");
    let l = log(&f);
    let pos = |s: &str| l.iter().position(|x| x == s).unwrap_or_else(|| panic!("{s} not in {l:#?}"));
    assert!(pos("write /cg/cpu/joule/cpu.rt_runtime_us 950000") < pos("write /cg/cpu/joule/cgA/cpu.rt_runtime_us 100000"));
    assert!(pos("write /cg/cpuset/joule/cpuset.mems 0") < pos("mkdir /cg/cpuset/joule/cg0"));
    assert_eq!(f.fx.file("/cg/cpuset/joule/cgA/cpuset.cpus").as_deref(), Some("1"));
    // The journal can undo the RT budget: the joule group's old runtime, and its removal
    // recorded after its knobs (so a replay evacuates and removes it before resetting them).
    let undos: Vec<Undo> = journal::entries(jd.path()).unwrap().into_iter().map(|e| e.undo).collect();
    let budget = undos.iter().position(|u| *u == Undo::Write { path: "/cg/cpu/joule/cpu.rt_runtime_us".into(), old: "0".into() });
    let barrier = undos.iter().rposition(
        |u| matches!(u, Undo::RemoveDir { path, evacuate_to: Some(e) } if path == Path::new("/cg/cpu/joule") && e == Path::new("/cg/cpu/cgroup.procs")),
    );
    assert!(budget.is_some() && barrier > budget, "{undos:#?}");
    let rep = c.release(&Journal::open(jd.path()).unwrap(), &f).unwrap();
    assert!(rep.failed.is_empty(), "{:?}", rep.failed);
    assert!(f.joule_dirs().is_empty(), "{:?}", f.joule_dirs());
    assert_eq!(f.fx.file("/cg/cpu/joule/cpu.rt_runtime_us"), None, "the joule group and its RT budget are gone");
    assert!(journal::entries(jd.path()).unwrap().is_empty());
    // joule takes RT budget by creating groups, never by writing the root's or the global one.
    let l = log(&f);
    assert!(!l.iter().any(|x| x.starts_with("write /cg/cpu/cpu.rt_runtime_us") || x.contains("sched_rt_runtime_us")), "{l:#?}");
}

#[test]
fn failure_mid_apply_rolls_back_and_names_the_value() {
    let f = CgFake::v1();
    f.fail_value("joule/cgA/cpu.rt_runtime_us", "350000", libc::EINVAL);
    let pd = tempfile::tempdir().unwrap();
    let jd = tempfile::tempdir().unwrap();
    let mut c = QosController::new_with(&seed::classes(1_000_000, [300_000, 300_000, 350_000]), opts(pd.path()), &f).unwrap();
    let j = Journal::open(jd.path()).unwrap();
    let e = c.apply(&j, &f).unwrap_err().to_string();
    assert!(e.contains("\"350000\"") && e.contains("/cg/cpu/joule/cgA/cpu.rt_runtime_us") && e.contains("RT budget"), "{e}");
    assert!(f.joule_dirs().is_empty(), "half-applied: {:?}", f.joule_dirs());
    // The rollback took its records out of the journal: a later `joule restore` has nothing
    // of this apply's to replay (no MoveTask on a reused pid, no knob rewritten).
    let left = journal::entries(jd.path()).unwrap();
    assert!(left.is_empty(), "rolled-back records left in the journal: {left:#?}");
    f.fail.lock().unwrap().clear();
    f.fx.log.lock().unwrap().clear();
    let r = journal::Journal::open(jd.path()).and_then(|j| j.restore_all(&f)).unwrap();
    assert!(r.failed.is_empty());
    assert!(log(&f).is_empty(), "restore replayed: {:#?}", log(&f));
}

#[test]
fn failed_move_rolls_back_the_moves_out_of_the_journal_and_keeps_other_records() {
    let f = CgFake::v1();
    f.set("/other/knob", "changed");
    // The cpu and cpuset moves succeed, the cpuacct one is refused.
    f.fail_value("/cg/cpuacct/joule/cgA/cgroup.procs", "500", libc::EINVAL);
    let pd = tempfile::tempdir().unwrap();
    proc_fixture(pd.path(), 500, "thirdparty");
    alive_in_fake(&f, 500, "thirdparty");
    let jd = tempfile::tempdir().unwrap();
    let j = Journal::open(jd.path()).unwrap();
    let other = Undo::Write { path: "/other/knob".into(), old: "orig".into() };
    let older = Undo::Write { path: "/older/qos/knob".into(), old: "x".into() };
    j.record("thermal", other.clone()).unwrap();
    j.record(crate::OWNER, older.clone()).unwrap();
    let mut cs = seed::classes(1_000_000, [0, 0, 100_000]);
    cs[2].matches = MatchRules { comm: vec!["thirdparty".into()], ..Default::default() };
    let mut c = QosController::new_with(&cs, opts(pd.path()), &f).unwrap();
    let e = c.apply(&j, &f).unwrap_err().to_string();
    assert!(e.contains("moving pid 500 into class cgA"), "{e}");
    assert!(f.joule_dirs().is_empty(), "half-applied: {:?}", f.joule_dirs());
    let l = log(&f);
    assert!(l.contains(&"write /cg/cpu/cgroup.procs 500".to_string()) && l.contains(&"write /cg/cpuset/cgroup.procs 500".to_string()), "{l:#?}");
    let left: Vec<_> = journal::entries(jd.path()).unwrap().into_iter().map(|e| (e.owner, e.undo)).collect();
    assert_eq!(
        left,
        vec![("thermal".to_string(), other), (crate::OWNER.to_string(), older)],
        "this apply's records (its MoveTasks included) leave the journal; others' and older ones stay"
    );
    assert_eq!(f.fx.file("/other/knob").as_deref(), Some("changed"));
    assert_eq!(f.fx.file("/older/qos/knob"), None, "an older qos record is not this apply's to undo");
    // Appending to the same journal still works after the rollback rewrote it.
    j.record("thermal", Undo::RemoveFile { path: "/x".into() }).unwrap();
    assert_eq!(journal::entries(jd.path()).unwrap().len(), 3);
}

#[test]
fn a_rollback_record_that_fails_stays_in_the_journal_for_a_retry() {
    let f = CgFake::v1();
    // Every write to this knob fails, its undo too.
    f.fail("joule/cgA/cpu.rt_runtime_us", libc::EINVAL);
    let pd = tempfile::tempdir().unwrap();
    let jd = tempfile::tempdir().unwrap();
    let mut c = QosController::new_with(&seed::classes(1_000_000, [300_000, 300_000, 350_000]), opts(pd.path()), &f).unwrap();
    let j = Journal::open(jd.path()).unwrap();
    c.apply(&j, &f).unwrap_err();
    assert!(f.joule_dirs().is_empty(), "half-applied: {:?}", f.joule_dirs());
    let left: Vec<_> = journal::entries(jd.path()).unwrap().into_iter().map(|e| e.undo).collect();
    assert_eq!(left, vec![Undo::Write { path: "/cg/cpu/joule/cgA/cpu.rt_runtime_us".into(), old: "0".into() }]);
    // The retry finds the group gone: settled, and the journal is empty.
    f.fail.lock().unwrap().clear();
    let r = journal::Journal::open(jd.path()).and_then(|j| j.restore_all(&f)).unwrap();
    assert!(r.failed.is_empty() && r.already_gone == 1, "{r:?}");
    assert!(journal::entries(jd.path()).unwrap().is_empty());
}

#[test]
fn read_only_cgroupfs_is_a_clear_error() {
    let f = CgFake::v1();
    f.fx.read_only.lock().unwrap().push("/cg".into());
    let pd = tempfile::tempdir().unwrap();
    let jd = tempfile::tempdir().unwrap();
    let mut c = QosController::new_with(&seed::classes(1_000_000, [0, 0, 100_000]), opts(pd.path()), &f).unwrap();
    let e = c.apply(&Journal::open(jd.path()).unwrap(), &f).unwrap_err();
    assert!(matches!(e, QosError::ReadOnly { .. }), "{e}");
    assert!(e.to_string().contains("read-only"));
}

#[test]
fn refused_classes_never_reach_the_tree() {
    let f = CgFake::v1();
    let pd = tempfile::tempdir().unwrap();
    let e = QosController::new_with(&seed::classes(10_000, [250, 250, 9_000]), opts(pd.path()), &f).err().unwrap();
    assert!(e.to_string().contains("rt_period_us = 10000 µs is below the minimum 100000 µs"), "{e}");
    assert!(log(&f).is_empty());
}

#[test]
fn tasks_are_moved_with_undo_and_vanished_pids_are_skipped() {
    let f = CgFake::v1();
    let pd = tempfile::tempdir().unwrap();
    proc_fixture(pd.path(), 500, "thirdparty");
    proc_fixture(pd.path(), 501, "thirdparty");
    alive_in_fake(&f, 500, "thirdparty");
    let jd = tempfile::tempdir().unwrap();
    let mut cs = seed::classes(1_000_000, [0, 0, 100_000]);
    cs[2].matches = MatchRules { comm: vec!["thirdparty".into()], ..Default::default() };
    let mut c = QosController::new_with(&cs, opts(pd.path()), &f).unwrap();
    // pid 501 exits between the scan and the move.
    f.fail_value("", "501", libc::ESRCH);
    let r = c.apply(&Journal::open(jd.path()).unwrap(), &f).unwrap();
    assert_eq!(r.moved, vec![(500, "cgA".to_string())]);
    assert_eq!(r.vanished, vec![501]);
    assert_eq!(f.fx.file("/cg/cpu/joule/cgA/cgroup.procs").as_deref(), Some("500"));
    let moves: Vec<_> = journal::entries(jd.path()).unwrap().into_iter().filter(|e| matches!(e.undo, Undo::MoveTask { pid: 500, .. })).collect();
    assert_eq!(moves.len(), 3, "one per hierarchy");
    c.release(&Journal::open(jd.path()).unwrap(), &f).unwrap();
    assert!(log(&f).contains(&"write /cg/cpu/cgroup.procs 500".to_string()));
}

#[test]
fn reconcile_recreates_a_deleted_cgroup_and_is_rate_limited() {
    let f = CgFake::v1();
    let pd = tempfile::tempdir().unwrap();
    let jd = tempfile::tempdir().unwrap();
    let mut o = opts(pd.path());
    o.reconcile_interval = Duration::ZERO;
    let mut c = QosController::new_with(&seed::classes(1_000_000, [0, 100_000, 100_000]), o, &f).unwrap();
    let j = Journal::open(jd.path()).unwrap();
    c.apply(&j, &f).unwrap();
    f.fx.remove_dir(Path::new("/cg/cpu/joule/cg1")).unwrap();
    let r = c.reconcile(&j, &f).unwrap();
    assert_eq!(r.recreated, vec![PathBuf::from("/cg/cpu/joule/cg1")]);
    assert_eq!(f.fx.file("/cg/cpu/joule/cg1/cpu.rt_runtime_us").as_deref(), Some("100000"));
    c.opts.reconcile_interval = Duration::from_secs(60);
    assert!(c.reconcile(&j, &f).unwrap().skipped_rate_limit);
    c.release(&Journal::open(jd.path()).unwrap(), &f).unwrap();
    assert!(f.joule_dirs().is_empty());
}

#[test]
fn release_leaves_other_owners_records() {
    let f = CgFake::v1();
    f.set("/other/knob", "changed");
    let pd = tempfile::tempdir().unwrap();
    let jd = tempfile::tempdir().unwrap();
    let j = Journal::open(jd.path()).unwrap();
    j.record("thermal", Undo::Write { path: "/other/knob".into(), old: "orig".into() }).unwrap();
    let mut c = QosController::new_with(&seed::classes(1_000_000, [0, 0, 100_000]), opts(pd.path()), &f).unwrap();
    c.apply(&j, &f).unwrap();
    c.release(&Journal::open(jd.path()).unwrap(), &f).unwrap();
    let left = journal::entries(jd.path()).unwrap();
    assert_eq!(left.len(), 1);
    assert_eq!(left[0].owner, "thermal");
    assert_eq!(f.fx.file("/other/knob").as_deref(), Some("changed"));
}

#[test]
fn v2_fixture_writes_cpu_max_and_undoes_the_controller_enable() {
    let f = CgFake::v2("0-1");
    let pd = tempfile::tempdir().unwrap();
    let jd = tempfile::tempdir().unwrap();
    let cs = vec![
        ClassConfig {
            name: "apps".into(),
            quota_us: Some(30_000),
            period_us: Some(100_000),
            burst_us: Some(5_000),
            weight: Some(50),
            cpus: Some("1".into()),
            ..Default::default()
        },
        ClassConfig { name: "main".into(), rt_runtime_us: Some(300_000), ..Default::default() },
    ];
    // RT group bandwidth does not exist on v2: the RT class gets deadline reservations ...
    let c = QosController::new_with(&cs, opts(pd.path()), &f).unwrap();
    assert_eq!(c.plan().class("main").unwrap().rt_backend, Some(crate::RtBackend::Deadline));
    // ... the group backend asked for is refused with the CFS equivalent offered ...
    let o = QosOpts { rt_backend: Some(crate::RtBackend::Group), ..opts(pd.path()) };
    let e = QosController::new_with(&cs, o, &f).err().unwrap().to_string();
    assert!(e.contains("there is no cpu.rt_runtime_us") && e.contains("quota_us = 60000 / period_us = 100000"), "{e}");
    // ... or applied as that equivalent when asked.
    let o = QosOpts { rt_fallback_to_cfs: true, ..opts(pd.path()) };
    let mut c = QosController::new_with(&cs, o, &f).unwrap();
    assert_eq!(c.layout().kind, BackendKind::V2);
    c.apply(&Journal::open(jd.path()).unwrap(), &f).unwrap();
    assert_eq!(f.fx.file("/cg/joule/apps/cpu.max").as_deref(), Some("30000 100000"));
    assert_eq!(f.fx.file("/cg/joule/apps/cpu.max.burst").as_deref(), Some("5000"));
    assert_eq!(f.fx.file("/cg/joule/apps/cpu.weight").as_deref(), Some("50"));
    assert_eq!(f.fx.file("/cg/joule/main/cpu.max").as_deref(), Some("60000 100000"));
    assert_eq!(f.fx.file("/cg/cgroup.subtree_control").as_deref(), Some("+cpuset"));
    c.release(&Journal::open(jd.path()).unwrap(), &f).unwrap();
    assert!(f.joule_dirs().is_empty());
    let l = log(&f);
    assert!(l.contains(&"write /cg/cgroup.subtree_control -cpu".to_string()) && l.contains(&"write /cg/cgroup.subtree_control -cpuset".to_string()), "{l:#?}");
}

#[test]
fn status_reports_achieved_share_from_usage_deltas() {
    let f = CgFake::v1();
    let pd = tempfile::tempdir().unwrap();
    let jd = tempfile::tempdir().unwrap();
    let mut c = QosController::new_with(&seed::classes(1_000_000, [0, 0, 300_000]), opts(pd.path()), &f).unwrap();
    c.apply(&Journal::open(jd.path()).unwrap(), &f).unwrap();
    assert!(c.status(&f).iter().all(|s| s.achieved_pct.is_none()));
    std::thread::sleep(Duration::from_millis(100));
    f.set("/cg/cpuacct/joule/cgA/cpuacct.usage", "30000000"); // 30 ms in ~100 ms
    let s = c.status(&f);
    let a = s.iter().find(|s| s.name == "cgA").unwrap();
    assert!((a.expected_pct - 30.0).abs() < 1e-9);
    let got = a.achieved_pct.unwrap();
    assert!(got > 20.0 && got <= 30.0, "{got}");
    let (_, _, failed) = c.rollback(&Journal::open(jd.path()).unwrap(), &f);
    assert!(failed.is_empty(), "{failed:?}");
    assert!(f.joule_dirs().is_empty(), "{:?}", f.joule_dirs());
    assert!(journal::entries(jd.path()).unwrap().is_empty(), "rollback left its records in the journal");
}

#[test]
fn a_custom_group_name_is_used_at_every_depth_and_by_status() {
    let f = CgFake::v1();
    let pd = tempfile::tempdir().unwrap();
    let jd = tempfile::tempdir().unwrap();
    let cs = vec![
        ClassConfig { name: "main".into(), rt_runtime_us: Some(300_000), cpus: Some("1".into()), ..Default::default() },
        ClassConfig { name: "audio".into(), parent: Some("main".into()), rt_runtime_us: Some(100_000), ..Default::default() },
    ];
    let o = QosOpts { group_name: "joule-bench".into(), ..opts(pd.path()) };
    let mut c = QosController::new_with(&cs, o, &f).unwrap();
    for PlannedWrite(s) in c.writes() {
        let (Step::Mkdir { path, .. } | Step::Barrier { path, .. } | Step::Write { path, .. }) = s;
        let top = path.components().nth(3).map(|x| x.as_os_str().to_string_lossy().into_owned());
        assert_eq!(top.as_deref(), Some("joule-bench"), "{}", path.display());
    }
    c.apply(&Journal::open(jd.path()).unwrap(), &f).unwrap();
    assert_eq!(f.fx.file("/cg/cpu/joule-bench/main/audio/cpu.rt_runtime_us").as_deref(), Some("100000"));
    assert_eq!(f.fx.file("/cg/cpuset/joule-bench/main/audio/cpuset.cpus").as_deref(), Some("1"));
    assert!(!f.fx.exists(Path::new("/cg/cpu/joule")), "the default group was made too");
    assert_eq!(c.class_dir(Hier::Cpu, "audio"), Some(PathBuf::from("/cg/cpu/joule-bench/main/audio")));
    f.set("/cg/cpuacct/joule-bench/main/audio/cpuacct.usage", "12345");
    f.set("/cg/cpu/joule-bench/main/audio/cpu.stat", "nr_periods 3\nnr_throttled 2\nthrottled_time 5000000\n");
    assert_eq!(c.usage_ns(&f, "audio"), Some(12345));
    let st = c.status(&f).into_iter().find(|s| s.name == "audio").unwrap();
    assert!(st.present && st.nr_throttled == Some(2) && st.throttled_ms == Some(5.0), "{st:?}");
    let (_, _, failed) = c.rollback(&Journal::open(jd.path()).unwrap(), &f);
    assert!(failed.is_empty() && f.joule_dirs().is_empty(), "{failed:?} {:?}", f.joule_dirs());
}

/// Admission counts the RT budget of joule's sibling groups in the v1 cpu hierarchy (read
/// through the effects seam, so a fake tree shows it), and not joule's own group.
#[test]
fn machine_env_sums_the_rt_budget_of_sibling_groups_only() {
    let f = CgFake::v1();
    f.mkdir_raw("/cg/cpu/other");
    f.set("/cg/cpu/other/cpu.rt_runtime_us", "200000");
    f.mkdir_raw("/cg/cpu/joule");
    f.set("/cg/cpu/joule/cpu.rt_runtime_us", "500000");
    let pd = tempfile::tempdir().unwrap();
    let layout = Layout::detect(Path::new("/cg"), &f, None, "joule").unwrap();
    let env = machine_env(&layout, &opts(pd.path()), &f);
    assert!((env.others_rt_ratio - 0.2).abs() < 1e-9, "{}", env.others_rt_ratio);
}

fn best_effort(name: &str, quota_us: Option<u64>) -> ClassConfig {
    ClassConfig {
        name: name.into(),
        quota_us,
        period_us: quota_us.map(|_| 100_000),
        thermal: joule_core::config::ThermalRole::BestEffort,
        ..Default::default()
    }
}

fn writes_to(f: &CgFake, suffix: &str) -> usize {
    log(f).iter().filter(|l| l.starts_with("write ") && l.contains(suffix)).count()
}

/// v1 (2 CPUs): 35 % of the machine = 0.35 × 2 × 100 ms; a configured 50 ms quota wins over a
/// looser cap; 100 % puts the configured value back; the same cap twice is one write; the
/// journal holds the pre-cap value first, and a replay (SIGKILL then `joule restore`) leaves
/// no cap and no cgroup.
#[test]
fn v1_thermal_cap_is_min_of_configured_and_machine_share_written_once_and_journalled() {
    let f = CgFake::v1();
    let pd = tempfile::tempdir().unwrap();
    let jd = tempfile::tempdir().unwrap();
    let mut c = QosController::new_with(&[best_effort("batch", None), best_effort("capped", Some(50_000))], opts(pd.path()), &f).unwrap();
    let j = Journal::open(jd.path()).unwrap();
    c.apply(&j, &f).unwrap();
    // Best-effort classes are idle groups beside joule's (docs/qos.md, "Best-effort classes"),
    // in every hierarchy; a stray process in one is still taken back as joule's.
    assert_eq!(f.fx.file("/cg/cpu/joule.batch/cpu.idle").as_deref(), Some("1"));
    assert!(f.fx.exists(Path::new("/cg/cpuset/joule.batch")) && f.fx.exists(Path::new("/cg/cpu/joule")));
    let plan = c.plan();
    assert!(c.layout().is_ours(Path::new("/cg/cpu"), plan, Path::new("/cg/cpu/joule.capped")));
    assert!(!c.layout().is_ours(Path::new("/cg/cpu"), plan, Path::new("/cg/cpu/joule.other")));
    let knob = "/cg/cpu/joule.batch/cpu.cfs_quota_us";
    assert_eq!(f.fx.file(knob).as_deref(), Some("-1"));
    assert!(!c.set_cap(&j, &f, "batch", 100.0).unwrap(), "100 % at start changes nothing");
    assert_eq!(writes_to(&f, "batch/cpu.cfs_quota_us"), 0);
    assert!(c.set_cap(&j, &f, "batch", 35.0).unwrap());
    assert_eq!(f.fx.file(knob).as_deref(), Some("70000"));
    assert_eq!(c.caps()["batch"].ratio, 0.35);
    assert!(!c.set_cap(&j, &f, "batch", 35.0).unwrap(), "an unchanged cap is not written again");
    assert_eq!(writes_to(&f, "batch/cpu.cfs_quota_us"), 1);
    let rec = journal::entries(jd.path()).unwrap();
    assert_eq!(rec.last().unwrap().undo, Undo::Write { path: knob.into(), old: "-1".into() }, "journalled before the write");
    // A configured 50 ms is tighter than 60 % (120 ms): it stays; 15 % (30 ms) is tighter.
    assert!(!c.set_cap(&j, &f, "capped", 60.0).unwrap());
    assert_eq!(c.caps()["capped"].quota_us, Some(50_000));
    assert!(c.set_cap(&j, &f, "capped", 15.0).unwrap());
    assert_eq!(f.fx.file("/cg/cpu/joule.capped/cpu.cfs_quota_us").as_deref(), Some("30000"));
    assert!(c.set_cap(&j, &f, "capped", 100.0).unwrap());
    assert_eq!(f.fx.file("/cg/cpu/joule.capped/cpu.cfs_quota_us").as_deref(), Some("50000"), "back to the configured quota");
    assert!(matches!(c.set_cap(&j, &f, "nope", 10.0), Err(QosError::UnknownClass(_))));
    // Killed at the hot stage: the replay of the journal alone leaves nothing.
    drop(c);
    let r = journal::Journal::open(jd.path()).and_then(|j| j.restore_all(&f)).unwrap();
    assert!(r.failed.is_empty(), "{r:?}");
    assert!(f.joule_dirs().is_empty(), "{:?}", f.joule_dirs());
    assert!(log(&f).contains(&format!("write {knob} -1")), "the cap was undone before the group went");
}

#[test]
fn v2_thermal_cap_writes_cpu_max_and_enables_the_cpu_controller_for_it() {
    let f = CgFake::v2("0-3");
    let pd = tempfile::tempdir().unwrap();
    let jd = tempfile::tempdir().unwrap();
    let mut c = QosController::new_with(&[best_effort("batch", None)], opts(pd.path()), &f).unwrap();
    let j = Journal::open(jd.path()).unwrap();
    c.apply(&j, &f).unwrap();
    assert_eq!(f.fx.file("/cg/cgroup.subtree_control").as_deref(), Some("+cpu"), "a best-effort class needs cpu.max");
    assert_eq!(f.fx.file("/cg/joule.batch/cpu.idle").as_deref(), Some("1"));
    assert!(c.set_cap(&j, &f, "batch", 15.0).unwrap());
    assert_eq!(f.fx.file("/cg/joule.batch/cpu.max").as_deref(), Some("60000 100000"), "15 % of 4 CPUs");
    assert!(c.set_cap(&j, &f, "batch", 100.0).unwrap());
    assert_eq!(f.fx.file("/cg/joule.batch/cpu.max").as_deref(), Some("max 100000"));
    c.release(&Journal::open(jd.path()).unwrap(), &f).unwrap();
    assert!(f.joule_dirs().is_empty());
}

/// pid's threads as /proc/PID/task lists them, each known to the fake as a SCHED_OTHER thread
/// with the fixture's start time.
fn threads_fixture(f: &CgFake, dir: &Path, pid: i32, tids: &[i32]) {
    for &t in tids {
        std::fs::create_dir_all(dir.join(format!("{pid}/task/{t}"))).unwrap();
        f.fx.sched.lock().unwrap().insert(t, SchedAttr::OTHER);
        alive_in_fake(f, t, "main");
    }
}

/// Issue 33, item 2: a reservation ends with the membership that earned it. A member's thread
/// that stops matching (here: it exec'd another program, as a member's child that switched to
/// another uid and exec'd `sleep` did) gets its old policy back at the next hold; a thread whose
/// tid was reused meanwhile is another thread and is left alone.
#[test]
fn regression_a_deadline_reservation_is_taken_back_when_its_thread_leaves_the_class() {
    use joule_core::effects::SCHED_DEADLINE;
    let f = CgFake::v1();
    let pd = tempfile::tempdir().unwrap();
    let jd = tempfile::tempdir().unwrap();
    for pid in [500, 600, 700] {
        proc_fixture(pd.path(), pid, "main");
        threads_fixture(&f, pd.path(), pid, &[pid]);
    }
    let cs = vec![ClassConfig {
        name: "main".into(),
        matches: MatchRules { comm: vec!["main".into()], ..Default::default() },
        rt_runtime_us: Some(100_000),
        rt_threads: Some(4),
        ..Default::default()
    }];
    let o = QosOpts { rt_backend: Some(crate::RtBackend::Deadline), ..opts(pd.path()) };
    let mut c = QosController::new_with(&cs, o, &f).unwrap();
    let j = Journal::open(jd.path()).unwrap();
    c.apply(&j, &f).unwrap();
    let dl = SchedAttr { policy: SCHED_DEADLINE, priority: 0 };
    for t in [500, 600, 700] {
        assert_eq!(f.fx.get_sched(t).unwrap(), dl, "thread {t}");
    }
    // 600 exec's `sleep` (no longer a member); 700 exits and its tid goes to a new thread
    // (another start time) that is not a member either and already holds SCHED_DEADLINE of its own.
    proc_fixture(pd.path(), 600, "sleep");
    proc_fixture(pd.path(), 700, "other");
    f.fx.files.lock().unwrap().insert("/proc/700/stat".into(), stat_line(700, "other").replace(" 1700\n", " 9999\n"));
    let members = c.scan_members(&f);
    let r = c.hold(&j, &f, &members).unwrap();
    assert_eq!(f.fx.get_sched(600).unwrap(), SchedAttr::OTHER, "600 left the class: its reservation must end");
    assert!(r.notes.iter().any(|n| n.contains("thread 600 left the class")), "{:?}", r.notes);
    assert_eq!(f.fx.get_sched(700).unwrap(), dl, "a reused tid is another thread: not joule's to change");
    assert_eq!(f.fx.get_sched(500).unwrap(), dl, "a member keeps its reservation");
    // Taken back once: the next hold says nothing more.
    let r = c.hold(&j, &f, &members).unwrap();
    assert!(r.notes.is_empty(), "{:?}", r.notes);
    c.release(&j, &f).unwrap();
    assert_eq!(f.fx.get_sched(500).unwrap(), SchedAttr::OTHER);
}

#[test]
fn deadline_backend_reserves_threads_up_to_rt_threads_journals_first_and_release_gives_the_policy_back() {
    use joule_core::effects::SCHED_DEADLINE;
    let f = CgFake::v1();
    let pd = tempfile::tempdir().unwrap();
    let jd = tempfile::tempdir().unwrap();
    proc_fixture(pd.path(), 500, "main");
    threads_fixture(&f, pd.path(), 500, &[500, 502, 503]);
    let cs = vec![ClassConfig {
        name: "main".into(),
        matches: MatchRules { comm: vec!["main".into()], ..Default::default() },
        rt_runtime_us: Some(300_000),
        rt_threads: Some(2),
        ..Default::default()
    }];
    // This fixture has RT group scheduling: the deadline backend is asked for.
    let o = QosOpts { rt_backend: Some(crate::RtBackend::Deadline), ..opts(pd.path()) };
    let mut c = QosController::new_with(&cs, o, &f).unwrap();
    assert_eq!(c.plan().class("main").unwrap().rt_backend, Some(crate::RtBackend::Deadline));
    // The kernel refuses the third thread's reservation (its bandwidth is full): a note, not a failure.
    f.fx.fail_calls("deadline 502", libc::EBUSY);
    let j = Journal::open(jd.path()).unwrap();
    let r = c.apply(&j, &f).unwrap();
    assert!(r.notes.iter().any(|n| n.contains("thread 502 keeps its policy") && n.contains("deadline bandwidth is full")), "{:?}", r.notes);
    let dl = SchedAttr { policy: SCHED_DEADLINE, priority: 0 };
    assert_eq!(f.fx.get_sched(500).unwrap(), dl);
    assert_eq!(f.fx.get_sched(502).unwrap(), SchedAttr::OTHER);
    assert_eq!(f.fx.get_sched(503).unwrap(), dl, "rt_threads = 2: 500 and 503");
    assert_eq!(c.reserved("main"), Some(crate::Reserved { threads: 2, unreserved: 1 }));
    assert!(log(&f).contains(&"deadline 500 300000000 1000000000 1000000000".to_string()), "{:#?}", log(&f));
    // No RT runtime on the class's group: the reservations are the guarantee.
    assert!(!log(&f).iter().any(|l| l.contains("main/cpu.rt_runtime_us")), "{:#?}", log(&f));
    let sched_records = |jd: &Path| journal::entries(jd).unwrap().into_iter().filter(|e| matches!(e.undo, Undo::Sched { .. })).count();
    assert_eq!(sched_records(jd.path()), 3, "each thread's old policy before its first change");
    // A later hold changes nothing and records nothing; the reserved threads' status says so.
    let members = c.scan_members(&f);
    let rr = c.hold(&j, &f, &members).unwrap();
    assert!(rr.notes.is_empty(), "a refusal is said once: {:?}", rr.notes);
    assert_eq!(sched_records(jd.path()), 3);
    assert!(c.status(&f)[0].configured.contains("deadline 300000/1000000 µs × 2 thread(s), 2 held, 1 not"), "{:?}", c.status(&f));
    // Thread 503 exits and a new thread gets its tid (another start time): its own policy is
    // journalled before its reservation, not taken for the old thread's.
    f.fx.files.lock().unwrap().insert("/proc/503/stat".into(), stat_line(503, "main").replace(" 1503\n", " 9999\n"));
    f.fx.sched.lock().unwrap().insert(503, SchedAttr::OTHER);
    c.hold(&j, &f, &members).unwrap();
    assert_eq!(f.fx.get_sched(503).unwrap(), dl);
    assert_eq!(sched_records(jd.path()), 4, "the new thread's old policy is journalled too");
    c.release(&j, &f).unwrap();
    for t in [500, 502, 503] {
        assert_eq!(f.fx.get_sched(t).unwrap(), SchedAttr::OTHER, "thread {t}");
    }
    assert!(journal::entries(jd.path()).unwrap().is_empty());
}

/// A member named in any bytes, in a cgroup whose owner named it in any bytes: it is moved in,
/// its origin journalled exactly and put back there; a member whose stat cannot be read at the
/// write is neither moved (it could not be pinned) nor called vanished, and the others move.
#[test]
fn a_member_named_in_any_bytes_goes_back_to_its_cgroup_named_in_any_bytes_and_an_unpinned_one_waits() {
    use std::os::unix::ffi::OsStringExt;
    let f = CgFake::v1();
    let pd = tempfile::tempdir().unwrap();
    let jd = tempfile::tempdir().unwrap();
    let cs = vec![ClassConfig { name: "u".into(), matches: MatchRules { uid: vec![64001], ..Default::default() }, ..Default::default() }];
    let mut c = QosController::new_with(&cs, opts(pd.path()), &f).unwrap();
    let j = Journal::open(jd.path()).unwrap();
    c.apply(&j, &f).unwrap();
    let origin = PathBuf::from(std::ffi::OsString::from_vec(b"/cg/cpu/\xff\x1b/cgroup.procs".to_vec()));
    f.fx.files.lock().unwrap().insert(origin.clone(), String::new());
    for pid in [500, 501] {
        let d = pd.path().join(pid.to_string());
        std::fs::create_dir_all(&d).unwrap();
        let stat = [format!("{pid} (").as_bytes(), b"\xff\xfeaudjx", &stat_line(pid, "x").as_bytes()[format!("{pid} (x").len()..]].concat();
        std::fs::write(d.join("stat"), &stat).unwrap();
        std::fs::write(d.join("status"), b"Name:\t\xff\xfeaudjx\nUid:\t64001\t64001\t64001\t64001\n").unwrap();
        std::fs::write(d.join("cgroup"), b"3:cpuset:/\n2:cpuacct:/\n1:cpu:/\xff\x1b\n0::/\n").unwrap();
        f.fx.raw.lock().unwrap().insert(format!("/proc/{pid}/stat").into(), stat);
        // the journal's /proc
    }
    let members = c.scan_members(&f);
    assert_eq!(members.of("u").count(), 2, "both seen, by uid");
    f.fx.fail_calls_times(&format!("read {}/501/stat", pd.path().display()), libc::EACCES, 1);
    let e = c.hold(&j, &f, &members).unwrap_err().to_string();
    assert!(e.contains("pin pid 501 by its start time"), "{e}");
    let l = log(&f);
    assert!(l.contains(&"write /cg/cpu/joule/u/cgroup.procs 500".to_string()), "{l:#?}");
    assert!(!l.iter().any(|x| x.ends_with(" 501")), "an unpinned pid is not moved: {l:#?}");
    let r = c.hold(&j, &f, &members).unwrap();
    assert!(r.vanished.is_empty() && log(&f).contains(&"write /cg/cpu/joule/u/cgroup.procs 501".to_string()), "moved once /proc could say");
    let moves: Vec<PathBuf> = journal::entries(jd.path())
        .unwrap()
        .into_iter()
        .filter_map(|e| match e.undo {
            Undo::MoveTask { pid: 500, procs_file, .. } => Some(procs_file),
            _ => None,
        })
        .collect();
    assert!(moves.contains(&origin), "the origin, byte for byte: {moves:?}");
    c.release(&j, &f).unwrap();
    let l = log(&f);
    let back = |pid: i32| l.contains(&format!("write {} {pid}", origin.display()));
    assert!(back(500) && back(501), "both back where they came from: {l:#?}");
    assert_eq!(f.fx.file(&origin).as_deref(), Some("500"), "at the exact path (newest first: 500 last)");
}
