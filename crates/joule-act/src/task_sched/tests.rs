//! The task-scheduling actuator on fake affinities and a /proc fixture: placement's pins,
//! journalled first and put back by the journal alone; the user-space scheduler's precedence.

use super::*;
use crate::testkit::proc_fixture;
use joule_core::control::{merge, Actuators, Facts};
use joule_core::effects::{FakeEffects, Sched};
use joule_core::journal::{self, Journal};
use joule_core::membership::Membership;

/// Class `ftp` (process 11 with threads 11 and 12) in a /proc fixture.
fn procfs() -> (tempfile::TempDir, joule_core::config::Config) {
    let d = tempfile::tempdir().unwrap();
    proc_fixture(d.path(), 11, "ftpd", "/");
    std::fs::create_dir_all(d.path().join("11/task/12")).unwrap();
    let cfg = joule_core::config::Config::parse("[[class]]\nname = \"ftp\"\nmatch = { comm = [\"ftpd\"] }\n").unwrap();
    (d, cfg)
}

fn plan(wants: &[(&str, Want)], members: &Membership) -> Plan {
    let mut p = Plan::default();
    for (policy, w) in wants {
        p.push(policy, Some(owner::TASK_SCHED), w.clone(), "test");
    }
    merge(&mut p, &Facts::default());
    p.members = Arc::new(members.clone());
    p
}

#[test]
fn pins_the_class_threads_journalled_first_and_the_journal_alone_puts_them_back() {
    let (pd, cfg) = procfs();
    let members = Membership::scan(pd.path(), &cfg.classes, &[], &FakeEffects::default().with_tree(pd.path()));
    let fx = FakeEffects::default();
    for tid in [11, 12] {
        fx.affinity.lock().unwrap().insert(tid, vec![0, 1, 2, 3]);
        // The threads as the journal sees them (start time, field 22): records are pinned to it.
        fx.files.lock().unwrap().insert(format!("/proc/{tid}/stat").into(), format!("{tid} (ftpd) S 1 11 11 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 {}", 5000 + tid));
    }
    let jd = tempfile::tempdir().unwrap();
    let journal = Journal::open(jd.path()).unwrap();
    let mut sink = |_: &str, _: serde_json::Value| {};
    let mut cx = ActCx { journal: &journal, fx: &fx, events: &mut sink };
    let mut acts = Actuators::new(vec![Box::new(TaskSchedActuator::new())]);
    acts.init_all(&mut cx).unwrap();
    let place = |cpus: Vec<usize>| ("placement", Want::Affinity { class: "ftp".into(), cpus });
    acts.reconcile_all(&plan(&[place(vec![0, 1])], &members), &mut cx);
    assert!(acts.status()[0].ok, "{:?}", acts.status()[0].last_error);
    assert_eq!((fx.get_affinity(11).unwrap(), fx.get_affinity(12).unwrap()), (vec![0, 1], vec![0, 1]));
    let recs = journal.entries().unwrap();
    assert_eq!(recs.len(), 2, "each thread journalled once: {recs:?}");
    assert!(matches!(&recs[0].undo, Undo::Affinity { tid: 11, old_cpus, .. } if old_cpus == &vec![0, 1, 2, 3]));
    let calls = fx.calls().len();
    acts.reconcile_all(&plan(&[place(vec![0, 1])], &members), &mut cx);
    assert_eq!(fx.calls().len(), calls, "held: nothing rewritten");
    // The class moves to another domain: pinned again, still one record per thread.
    acts.reconcile_all(&plan(&[place(vec![2, 3])], &members), &mut cx);
    assert_eq!(fx.get_affinity(12).unwrap(), vec![2, 3]);
    assert_eq!(journal.entries().unwrap().len(), 2);
    let st = acts.status()[0].state.to_json();
    assert_eq!(st["pinned"][0]["threads"], 2);
    assert!(st["pinned"][0]["why"].as_str().unwrap().starts_with("class ftp affinity CPUs 2-3"), "{st}");
    // Killed here: the journal alone puts everything back.
    journal.restore_all(&fx).unwrap();
    assert_eq!(fx.get_affinity(12).unwrap(), vec![0, 1, 2, 3]);
    assert!(journal::entries(jd.path()).unwrap().is_empty());
}

/// The user-space scheduler ranks before placement for one class's threads: the actuator does
/// not pin them for placement (the engine binds them), and the state says elevate holds them.
#[test]
fn a_class_the_user_space_scheduler_holds_is_not_pinned_for_placement() {
    let (pd, cfg) = procfs();
    let members = Membership::scan(pd.path(), &cfg.classes, &[], &FakeEffects::default().with_tree(pd.path()));
    let fx = FakeEffects::default();
    fx.affinity.lock().unwrap().insert(11, vec![0, 1]);
    let jd = tempfile::tempdir().unwrap();
    let journal = Journal::open(jd.path()).unwrap();
    let mut sink = |_: &str, _: serde_json::Value| {};
    let mut cx = ActCx { journal: &journal, fx: &fx, events: &mut sink };
    let mut a = TaskSchedActuator::new();
    // elevate asks for class `lat`, which has no process now (so no engine starts here), and
    // placement for `lat` as well: elevate ranks first.
    let wants = [
        ("placement", Want::Affinity { class: "lat".into(), cpus: vec![1] }),
        ("elevate", Want::Elevate { class: "lat".into(), cpu: 0, slice_us: 50, pattern: "shared".into() }),
    ];
    let p = plan(&wants, &members);
    assert_eq!(p.conflicts.len(), 1);
    a.reconcile(&p, &mut cx).unwrap();
    assert!(fx.calls().is_empty(), "{:?}", fx.calls());
    let st = a.state().to_json();
    assert_eq!(st["pinned"], serde_json::json!([]));
    assert_eq!((st["elevate"]["class"].as_str(), st["elevate"]["running"].as_bool()), (Some("lat"), Some(false)));
    assert!(st["elevate"].get("not_running_because").is_none(), "it won; it waits for threads");
    a.shutdown(&mut cx).unwrap();
}

/// A class's latency slice: each fair thread gets it, its old slice journalled first (the
/// kernel's default recorded as 0), a real-time thread is left alone, and the journal alone
/// gives the default back; a kernel that reports no slice is said to have none.
#[test]
fn slices_the_fair_threads_journalled_first_and_the_journal_alone_gives_the_default_back() {
    use joule_core::effects::FAKE_DEFAULT_SLICE_NS;
    let (pd, cfg) = procfs();
    let members = Membership::scan(pd.path(), &cfg.classes, &[], &FakeEffects::default().with_tree(pd.path()));
    let fx = FakeEffects::default();
    // tid 0: the agent's own thread, which has the kernel's default.
    fx.slice.lock().unwrap().extend([(0, FAKE_DEFAULT_SLICE_NS), (11, FAKE_DEFAULT_SLICE_NS), (12, FAKE_DEFAULT_SLICE_NS)]);
    fx.sched.lock().unwrap().insert(12, joule_core::effects::SchedAttr { policy: libc::SCHED_FIFO, priority: 10 });
    for tid in [11, 12] {
        fx.files.lock().unwrap().insert(format!("/proc/{tid}/stat").into(), format!("{tid} (ftpd) S 1 11 11 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 {}", 5000 + tid));
    }
    let jd = tempfile::tempdir().unwrap();
    let journal = Journal::open(jd.path()).unwrap();
    let mut events = Vec::new();
    let mut sink = |k: &str, v: serde_json::Value| events.push((k.to_string(), v));
    let mut cx = ActCx { journal: &journal, fx: &fx, events: &mut sink };
    let mut acts = Actuators::new(vec![Box::new(TaskSchedActuator::new())]);
    acts.init_all(&mut cx).unwrap();
    let slice = ("classes", Want::Slice { class: "ftp".into(), slice_us: 300 });
    acts.reconcile_all(&plan(std::slice::from_ref(&slice), &members), &mut cx);
    assert!(acts.status()[0].ok, "{:?}", acts.status()[0].last_error);
    assert_eq!(fx.get_slice_ns(11).unwrap(), Some(300_000));
    assert_eq!(fx.calls(), vec!["slice 11 300000"], "the FIFO thread 12 is not touched");
    let recs = journal.entries().unwrap();
    assert_eq!(recs.len(), 1);
    assert_eq!(recs[0].undo, Undo::Slice { tid: 11, old_ns: 0, started: Some(5011) });
    acts.reconcile_all(&plan(std::slice::from_ref(&slice), &members), &mut cx);
    assert_eq!(fx.calls().len(), 1, "held: nothing rewritten");
    let st = acts.status()[0].state.to_json();
    assert_eq!((st["slices"][0]["slice_us"].as_u64(), st["slices"][0]["threads"].as_u64()), (Some(300), Some(1)), "{st}");
    // Killed here: the journal alone gives back the default.
    journal.restore_all(&fx).unwrap();
    assert_eq!(fx.get_slice_ns(11).unwrap(), Some(FAKE_DEFAULT_SLICE_NS));
    assert_eq!(fx.calls().last().unwrap(), "slice 11 0");
    assert_eq!(events.iter().filter(|(k, _)| k == "slice").count(), 1, "{events:?}");
    // A kernel before 6.12 reports 0 for every fair thread: nothing is written, and the state says why.
    fx.slice.lock().unwrap().insert(11, 0);
    let mut sink = |_: &str, _: serde_json::Value| {};
    let mut cx = ActCx { journal: &journal, fx: &fx, events: &mut sink };
    let calls = fx.calls().len();
    acts.reconcile_all(&plan(&[slice], &members), &mut cx);
    assert_eq!(fx.calls().len(), calls);
    let st = acts.status()[0].state.to_json();
    assert!(st["slices_unsupported"].as_str().unwrap().contains("6.12"), "{st}");
}

/// Issue 33: the actuator's per-thread records follow the class's threads: a thread that left
/// the class gets its affinity back (and is forgotten), and a reused tid is another thread,
/// whose own affinity is journalled before it is pinned.
#[test]
fn a_thread_that_leaves_the_class_gets_its_affinity_back_and_a_reused_tid_is_journalled_anew() {
    let (pd, cfg) = procfs();
    let members = Membership::scan(pd.path(), &cfg.classes, &[], &FakeEffects::default().with_tree(pd.path()));
    let fx = FakeEffects::default();
    for tid in [11, 12] {
        fx.affinity.lock().unwrap().insert(tid, vec![0, 1, 2, 3]);
        fx.files.lock().unwrap().insert(format!("/proc/{tid}/stat").into(), format!("{tid} (ftpd) S 1 11 11 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 {}", 5000 + tid));
    }
    let jd = tempfile::tempdir().unwrap();
    let journal = Journal::open(jd.path()).unwrap();
    let mut sink = |_: &str, _: serde_json::Value| {};
    let mut cx = ActCx { journal: &journal, fx: &fx, events: &mut sink };
    let mut acts = Actuators::new(vec![Box::new(TaskSchedActuator::new())]);
    acts.init_all(&mut cx).unwrap();
    let place = ("placement", Want::Affinity { class: "ftp".into(), cpus: vec![0, 1] });
    acts.reconcile_all(&plan(std::slice::from_ref(&place), &members), &mut cx);
    assert_eq!(fx.get_affinity(12).unwrap(), vec![0, 1]);
    // Thread 12 ends; its tid goes to a new thread of the class (another start time).
    fx.files.lock().unwrap().insert("/proc/12/stat".into(), "12 (ftpd) S 1 11 11 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 9999".into());
    fx.affinity.lock().unwrap().insert(12, vec![2, 3]);
    acts.reconcile_all(&plan(std::slice::from_ref(&place), &members), &mut cx);
    let recs: Vec<_> = journal.entries().unwrap().into_iter().filter(|e| matches!(e.undo, Undo::Affinity { tid: 12, .. })).collect();
    assert_eq!(recs.len(), 2, "the new thread 12's own affinity is journalled: {recs:?}");
    assert!(matches!(&recs[1].undo, Undo::Affinity { old_cpus, started: Some(9999), .. } if old_cpus == &vec![2, 3]));
    // The process leaves the class (nothing matches it now): both threads get their affinity back.
    let gone = Membership::scan(pd.path(), &[], &[], &FakeEffects::default().with_tree(pd.path()));
    acts.reconcile_all(&plan(&[place], &gone), &mut cx);
    assert_eq!((fx.get_affinity(11).unwrap(), fx.get_affinity(12).unwrap()), (vec![0, 1, 2, 3], vec![2, 3]));
}
