//! The scx actuator on a fixture sysfs: the sched_ext slot held by another scheduler is left to
//! it (no load, one report, the metric), looked at again each period, and taken once free.

use super::*;
use joule_core::journal::Journal;
use std::cell::Cell;
use std::path::Path;

thread_local! {
    /// Loads this thread's actuators asked for.
    static LOADS: Cell<usize> = const { Cell::new(0) };
}

/// Stands in for `Scx::load` (no kernel here): counts the attempt, fails like a refused load.
fn counting_load(_: ScxOpts) -> Result<Scx, BpfError> {
    LOADS.with(|n| n.set(n.get() + 1));
    Err(BpfError::Unavailable("test: no kernel".into()))
}

/// `<root>/kernel/sched_ext` saying `state`, with `root/ops` naming `ops` (None: absent).
fn set_kernel(root: &Path, state: &str, ops: Option<&str>) {
    let d = root.join(SYSFS_SCHED_EXT);
    std::fs::create_dir_all(d.join("root")).unwrap();
    std::fs::write(d.join("state"), format!("{state}\n")).unwrap();
    match ops {
        Some(o) => std::fs::write(d.join("root/ops"), format!("{o}\n")).unwrap(),
        None => {
            let _ = std::fs::remove_file(d.join("root/ops"));
        }
    }
}

fn actuator(sysfs: &Path) -> ScxActuator {
    let cfg = Config::parse(&format!("[thermal]\nscheduler = \"scx\"\n[telemetry]\nsysfs_root = \"{}\"\n", sysfs.display())).unwrap();
    let mut a = ScxActuator::new(&cfg, None);
    a.load = counting_load;
    a
}

fn held_metric(a: &ScxActuator) -> Vec<(joule_core::metric::Labels, joule_core::metric::Value)> {
    let fams = a.state().families();
    fams.into_iter().find(|f| f.def.name == "joule_knob_held_by_other").unwrap().samples
}

#[test]
fn a_slot_another_scheduler_holds_is_left_to_it_reported_once_and_taken_once_free() {
    let sysfs = tempfile::tempdir().unwrap();
    let jd = tempfile::tempdir().unwrap();
    let journal = Journal::open(jd.path()).unwrap();
    let fx = joule_core::effects::FakeEffects::default();
    let mut events: Vec<(String, serde_json::Value)> = Vec::new();
    let mut sink = |n: &str, v: serde_json::Value| events.push((n.to_string(), v));
    let mut cx = ActCx { journal: &journal, fx: &fx, events: &mut sink };
    set_kernel(sysfs.path(), "enabled", Some("jother"));
    let mut a = actuator(sysfs.path());
    a.init(&mut cx).unwrap();
    for _ in 0..5 {
        a.reconcile(&Plan::default(), &mut cx).unwrap();
    }
    assert_eq!(LOADS.with(Cell::get), 0, "no load while another scheduler holds the slot");
    let st = a.state().to_json();
    assert_eq!((st["running"].as_bool(), st["held_by"].as_str(), st["down_reason"].as_str()), (Some(false), Some("jother"), Some("held by jother")), "{st}");
    let l = joule_core::metric::l(&[("knob", "sched_ext"), ("holder", "jother")]);
    assert_eq!(held_metric(&a), vec![(l, joule_core::metric::Value::Number(1.0))]);

    // The other scheduler is on its way out, then gone: joule loads its own at once (no back-off).
    set_kernel(sysfs.path(), "disabling", Some("jother"));
    a.reconcile(&Plan::default(), &mut cx).unwrap();
    assert_eq!(LOADS.with(Cell::get), 0);
    set_kernel(sysfs.path(), "disabled", None);
    a.reconcile(&Plan::default(), &mut cx).unwrap();
    assert_eq!(LOADS.with(Cell::get), 1, "the free slot is taken the next period");
    let st = a.state().to_json();
    assert!(st["held_by"].is_null() && st["down_reason"].as_str().is_some_and(|r| r.starts_with("loading failed")), "{st}");
    assert!(held_metric(&a).is_empty());

    // Another one takes it during the (failed) load's back-off, and later a third: each
    // holder reported once.
    set_kernel(sysfs.path(), "enabled", Some("scx_rusty"));
    a.backoff = Backoff::default();
    for _ in 0..3 {
        a.reconcile(&Plan::default(), &mut cx).unwrap();
    }
    let conflicts: Vec<&serde_json::Value> = events.iter().filter(|(n, _)| n == "conflict").map(|(_, v)| v).collect();
    assert_eq!(
        conflicts,
        [
            &serde_json::json!({ "knob": "sched_ext", "holder": "jother", "action": "yield" }),
            &serde_json::json!({ "knob": "sched_ext", "holder": "scx_rusty", "action": "yield" })
        ]
    );
    assert_eq!(LOADS.with(Cell::get), 1);
}

/// Only a loaded scheduler not named joule holds the slot: joule's own name (a `joule scx` run
/// by hand) is tried as before (the kernel refuses it and the load backs off), and a name left
/// in a disabled slot is stale.
#[test]
fn only_a_loaded_scheduler_not_named_joule_holds_the_slot() {
    let sysfs = tempfile::tempdir().unwrap();
    set_kernel(sysfs.path(), "enabled", Some("joule"));
    assert_eq!(other_holder(&KernelState::read(&sysfs.path().join(SYSFS_SCHED_EXT))), None);
    set_kernel(sysfs.path(), "disabled", Some("jother")); // a stale name: the slot is free
    assert_eq!(other_holder(&KernelState::read(&sysfs.path().join(SYSFS_SCHED_EXT))), None);
    set_kernel(sysfs.path(), "enabling", Some("jother"));
    assert_eq!(other_holder(&KernelState::read(&sysfs.path().join(SYSFS_SCHED_EXT))).as_deref(), Some("jother"));
}
