//! The undo records of the newer concerns (affinity, freezer, qdisc) replayed through the
//! journal on `FakeEffects`: what each one asks of the seam, and when it counts as gone.
//! No root needed; the same records on the real kernel are in `root_effects.rs`.

use joule_core::effects::{tc_handle, FakeEffects, FreezeState, Freezer, Net, Qdisc, Sched, Units, TC_H_ROOT};
use joule_core::journal::{self, Journal, Undo};
use std::path::Path;

/// /proc/PID/stat with start time `start` (field 22).
fn stat(pid: i32, start: u64) -> String {
    let mut f: Vec<String> = (3..=21).map(|i| i.to_string()).collect();
    f[0] = "S".into();
    f.push(start.to_string());
    format!("{pid} (worker) {}", f.join(" "))
}

#[test]
fn affinity_is_put_back_on_the_same_thread_only() {
    let fx = FakeEffects::default().with_file("/proc/7/stat", &stat(7, 100));
    fx.affinity.lock().unwrap().insert(7, vec![0, 1, 2, 3]);
    let undo = Undo::affinity(&fx, 7, fx.get_affinity(7).unwrap());
    assert_eq!(undo, Undo::Affinity { tid: 7, old_cpus: vec![0, 1, 2, 3], started: Some(100) });
    fx.set_affinity(7, &[2]).unwrap();
    let r = journal::replay(std::slice::from_ref(&undo), &fx);
    assert_eq!((r.undone, r.already_gone), (1, 0));
    assert_eq!(fx.get_affinity(7).unwrap(), vec![0, 1, 2, 3]);
    // The thread exits and its tid is reused: the newcomer is left alone.
    fx.set_affinity(7, &[2]).unwrap();
    fx.files.lock().unwrap().insert("/proc/7/stat".into(), stat(7, 999));
    let r = journal::replay(&[undo], &fx);
    assert_eq!((r.undone, r.already_gone), (0, 1));
    assert_eq!(fx.get_affinity(7).unwrap(), vec![2]);
    assert_eq!(fx.calls(), vec!["affinity 7 2", "affinity 7 0,1,2,3", "affinity 7 2"]);
}

#[test]
fn an_exited_thread_counts_as_gone_and_a_refused_affinity_stays_for_a_retry() {
    let dir = tempfile::tempdir().unwrap();
    // Thread 8 started at tick 777 (field 22); 4242 has exited.
    let fx = FakeEffects::default().with_file("/proc/8/stat", "8 (t) S 1 8 8 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 777 0 0");
    fx.affinity.lock().unwrap().insert(8, vec![1]);
    let j = Journal::open(dir.path()).unwrap();
    j.record("t", Undo::Affinity { tid: 4242, old_cpus: vec![0], started: Some(1) }).unwrap();
    j.record("t", Undo::Affinity { tid: 8, old_cpus: vec![0, 1], started: Some(777) }).unwrap();
    fx.fail_calls("affinity 8", libc::EPERM);
    let r = journal::Journal::open(dir.path()).and_then(|j| j.restore_all(&fx)).unwrap();
    assert_eq!((r.undone, r.already_gone, r.failed.len()), (0, 1, 1), "{r:?}");
    assert_eq!(journal::entries(dir.path()).unwrap().len(), 1);
    fx.fail.lock().unwrap().clear();
    assert_eq!(journal::Journal::open(dir.path()).and_then(|j| j.restore_all(&fx)).unwrap().undone, 1);
    assert_eq!(fx.get_affinity(8).unwrap(), vec![0, 1]);
}

#[test]
fn thaw_undoes_a_v1_freeze_and_a_removed_cgroup_is_gone() {
    let dir = tempfile::tempdir().unwrap();
    let fx = FakeEffects::default().with_dir("/fz/joule").with_file("/fz/joule/freezer.state", "THAWED\n");
    let cg = Path::new("/fz/joule");
    let j = Journal::open(dir.path()).unwrap();
    j.record("t", Undo::Thaw { cgroup: cg.into() }).unwrap();
    fx.freeze(cg, joule_core::effects::FREEZE_SETTLE).unwrap();
    j.record("t", Undo::Thaw { cgroup: "/fz/removed".into() }).unwrap();
    let r = journal::Journal::open(dir.path()).and_then(|j| j.restore_all(&fx)).unwrap();
    assert_eq!((r.undone, r.already_gone, r.failed.len()), (1, 1, 0), "{r:?}");
    assert_eq!(fx.freezer_state(cg).unwrap(), FreezeState::Thawed);
    assert_eq!(fx.calls(), vec!["write /fz/joule/freezer.state FROZEN", "write /fz/joule/freezer.state THAWED"]);
}

#[test]
fn thaw_undoes_a_v2_freeze() {
    let fx = FakeEffects::default()
        .with_dir("/cg/joule")
        .with_file("/cg/joule/cgroup.freeze", "1\n")
        .with_file("/cg/joule/cgroup.events", "populated 1\nfrozen 1\n");
    // The kernel clears `frozen` once the tasks run again.
    fx.then_reads("/cg/joule/cgroup.events", &["populated 1\nfrozen 1\n", "populated 1\nfrozen 0\n"]);
    let r = journal::replay(&[Undo::Thaw { cgroup: "/cg/joule".into() }], &fx);
    assert_eq!((r.undone, r.failed.len()), (1, 0), "{r:?}");
    assert_eq!(fx.calls(), vec!["write /cg/joule/cgroup.freeze 0"]);
}

#[test]
fn qdisc_delete_removes_only_the_qdisc_joule_put() {
    let ns = Some(Path::new("/proc/1/task/9/ns/net"));
    let fx = FakeEffects::default();
    fx.add_link(ns, 3, "jv0", "noqueue");
    let fq = Qdisc::new("fq", tc_handle(0x4a, 0), TC_H_ROOT);
    fx.replace_qdisc(ns, 3, &fq).unwrap();
    let undo = |ifname: &str, kind: &str| Undo::QdiscDelete {
        netns: ns.map(Path::to_path_buf),
        ifname: ifname.into(),
        ifindex: 3,
        parent: TC_H_ROOT,
        handle: fq.handle,
        kind: kind.into(),
    };
    // Another kind at that handle, or another interface of that index: not ours, kept.
    let r = journal::replay(&[undo("jv0", "tbf"), undo("jv1", "fq")], &fx);
    assert_eq!((r.undone, r.already_gone), (0, 2));
    assert_eq!(fx.qdiscs(ns, 3).unwrap(), vec![fq.clone()]);
    let r = journal::replay(&[undo("jv0", "fq")], &fx);
    assert_eq!((r.undone, r.already_gone), (1, 0));
    assert_eq!(fx.qdiscs(ns, 3).unwrap(), vec![Qdisc::new("noqueue", 0, TC_H_ROOT)]);
    // Twice: gone.
    assert_eq!(journal::replay(&[undo("jv0", "fq")], &fx).already_gone, 1);
    // Its records read back from the journal as written.
    let dir = tempfile::tempdir().unwrap();
    Journal::open(dir.path()).unwrap().record("net", undo("jv0", "fq")).unwrap();
    assert_eq!(journal::entries(dir.path()).unwrap()[0].undo, undo("jv0", "fq"));
}

#[test]
fn a_unit_joule_froze_is_thawed_by_replay_and_a_running_one_is_left_alone() {
    let fx = FakeEffects::default().with_unit("nginx.service").with_unit("other.service");
    fx.freeze_unit("nginx.service").unwrap();
    let r = journal::replay(&[Undo::ThawUnit { unit: "nginx.service".into() }, Undo::ThawUnit { unit: "other.service".into() }], &fx);
    assert!(r.failed.is_empty(), "{r:?}");
    assert_eq!(fx.unit_freezer_state("nginx.service").unwrap(), "running");
    assert_eq!(fx.calls(), ["freeze-unit nginx.service", "thaw-unit nginx.service"], "the running unit got no call");
    let r = journal::replay(&[Undo::ThawUnit { unit: "../x.service".into() }], &fx);
    assert_eq!(r.failed.len(), 1, "{r:?}");
    assert_eq!(fx.calls().len(), 2);
}

#[test]
fn a_controller_someone_else_now_uses_below_stays_enabled() {
    let fx = FakeEffects::default().with_file("/cg/cgroup.subtree_control", "cpu memory");
    fx.fail_calls("write /cg/cgroup.subtree_control -cpu", libc::EBUSY);
    let r = journal::replay(&[Undo::Write { path: "/cg/cgroup.subtree_control".into(), old: "-cpu".into() }], &fx);
    assert!(r.failed.is_empty() && r.already_gone == 1, "{r:?}");
    // Any other failure of that write is still one.
    fx.fail_calls("write /cg/cgroup.subtree_control -memory", libc::EIO);
    let r = journal::replay(&[Undo::Write { path: "/cg/cgroup.subtree_control".into(), old: "-memory".into() }], &fx);
    assert_eq!(r.failed.len(), 1, "{r:?}");
}
