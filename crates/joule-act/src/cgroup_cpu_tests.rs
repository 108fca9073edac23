//! The class cgroups' actuator on a fake cgroupfs (v2 here; tests/one_owner.rs has v1 with
//! the freezer): init applies, reconcile moves the processes the membership reading lists
//! while the plan holds the classes, holds the merged cap, shutdown releases.

use super::*;
use crate::testkit::{cgroup_v2, proc_fixture};
use joule_core::control::{merge, Actuators, Facts};
use joule_core::effects::{Files, Units};
use joule_core::journal;
use joule_qos::{AdmissionEnv, QosOpts};

#[test]
fn applies_holds_the_members_and_the_merged_cap_then_releases() {
    let fx = cgroup_v2("0-3");
    let pd = tempfile::tempdir().unwrap();
    fx.trees.lock().unwrap().push(pd.path().into()); // its fixture /proc, read through the fake
    let jd = tempfile::tempdir().unwrap();
    let cfg = joule_core::config::Config::parse("[[class]]\nname = \"batch\"\nthermal = \"best_effort\"\nmatch = { comm = [\"thirdparty\"] }\n").unwrap();
    let ctl =
        QosController::new_with(&cfg.classes, QosOpts { cgroup_root: "/cg".into(), procfs_root: pd.path().into(), ..Default::default() }, fx.as_ref()).unwrap();
    let places = ctl.places();
    let mut acts = Actuators::new(vec![Box::new(CgroupCpuActuator::new(Box::new(ctl)))]);
    let journal = Journal::open(jd.path()).unwrap();
    let mut events = Vec::new();
    let mut sink = |e: &str, _: serde_json::Value| events.push(e.to_string());
    let mut cx = ActCx { journal: &journal, fx: fx.as_ref(), events: &mut sink };
    acts.init_all(&mut cx).unwrap();
    // A best-effort class is an idle group beside joule's (docs/qos.md, "Best-effort classes").
    assert!(fx.exists(std::path::Path::new("/cg/joule.batch")));
    assert_eq!(fx.file("/cg/joule.batch/cpu.idle").as_deref(), Some("1"));

    // A process starts matching. Without a decision to hold the classes, nothing moves.
    proc_fixture(pd.path(), 600, "thirdparty", "/");
    let plan_of = |wants: Vec<Want>| {
        let mut plan = Plan::default();
        for w in wants {
            plan.push("thermal", Some(owner::CGROUP_CPU), w, "test");
        }
        merge(&mut plan, &Facts::default());
        plan.members = Arc::new(Membership::scan(pd.path(), &cfg.classes, &places, fx.as_ref()));
        plan
    };
    acts.reconcile_all(&plan_of(vec![]), &mut cx);
    assert_eq!(acts.status()[0].state.to_json()["holding"], false);
    assert_eq!(fx.file("/cg/joule.batch/cgroup.procs").as_deref(), Some(""), "moved without a decision to hold");

    let hold = Want::HoldClasses { classes: vec!["batch".into()] };
    acts.reconcile_all(&plan_of(vec![hold.clone(), Want::CapClass { class: "batch".into(), cpu_pct: 15.0 }]), &mut cx);
    let st = &acts.status()[0];
    assert!(st.ok, "{:?}", st.last_error);
    assert_eq!(fx.file("/cg/joule.batch/cgroup.procs").as_deref(), Some("600"));
    assert_eq!(fx.file("/cg/joule.batch/cpu.max").as_deref(), Some("60000 100000"), "15 % of 4 CPUs");
    let fams = st.state.families();
    assert_eq!(fams[0].samples, vec![(l(&[("class", "batch")]), joule_core::metric::Value::Number(0.15))]);
    // The stage cools: the cap lifts.
    acts.reconcile_all(&plan_of(vec![hold, Want::CapClass { class: "batch".into(), cpu_pct: 100.0 }]), &mut cx);
    assert_eq!(fx.file("/cg/joule.batch/cpu.max").as_deref(), Some("max 100000"));

    assert!(acts.shutdown_all(&mut cx).is_empty());
    assert!(!fx.exists(std::path::Path::new("/cg/joule")) && !fx.exists(std::path::Path::new("/cg/joule.batch")), "released");
    assert!(journal::entries(jd.path()).unwrap().is_empty());
    assert_eq!(&events[..2], ["qos_applied", "actuator_started"]);
    assert!(events.contains(&"qos_reconciled".to_string()) && events.contains(&"class_caps".to_string()), "{events:?}");
}

#[test]
fn an_unmanaged_tree_is_left_alone_and_says_who_owns_it() {
    let fx = cgroup_v2("0-1");
    let jd = tempfile::tempdir().unwrap();
    let journal = Journal::open(jd.path()).unwrap();
    let mut events = Vec::new();
    let mut sink = |e: &str, v: serde_json::Value| events.push((e.to_string(), v));
    let mut cx = ActCx { journal: &journal, fx: fx.as_ref(), events: &mut sink };
    let mut a = CgroupCpuActuator::new(Box::new(Unmanaged { manager: "kubelet".into() }));
    a.init(&mut cx).unwrap();
    let mut plan = Plan::default();
    plan.push("thermal", Some(owner::CGROUP_CPU), Want::CapClass { class: "batch".into(), cpu_pct: 15.0 }, "stage 3");
    merge(&mut plan, &Facts::default());
    a.reconcile(&plan, &mut cx).unwrap();
    assert!(fx.calls().is_empty(), "nothing written: {:?}", fx.calls());
    assert!(a.state().to_json()["backend"].as_str().unwrap().contains("kubelet"));
    assert!(events[0].1["notes"][0].as_str().unwrap().contains("belong to kubelet"), "{events:?}");
}

#[test]
fn unit_classes_go_to_systemd_beside_cgroupfs_ones_and_drift_is_reported_once() {
    let fx = joule_core::effects::FakeEffects::default().with_unit("batch.slice").with_unit("nginx.service");
    let jd = tempfile::tempdir().unwrap();
    let journal = Journal::open(jd.path()).unwrap();
    let cfg = joule_core::config::Config::parse(
        "[[class]]\nname = \"web\"\nmatch = { unit = [\"nginx.service\"] }\nweight = 300\n\n[[class]]\nname = \"batch\"\nthermal = \"best_effort\"\nmatch = { slice = [\"batch.slice\"] }\n",
    )
    .unwrap();
    let units = UnitClasses::new(&cfg.classes, &AdmissionEnv::new(2)).unwrap();
    let mut acts = Actuators::new(vec![Box::new(CgroupCpuActuator::new(Box::new(WithUnits { units, fs: None })))]);
    let mut events = Vec::new();
    let mut sink = |e: &str, _: serde_json::Value| events.push(e.to_string());
    let mut cx = ActCx { journal: &journal, fx: &fx, events: &mut sink };
    acts.init_all(&mut cx).unwrap();
    assert_eq!(fx.calls(), vec!["set-property nginx.service CPUWeight=300"]);
    let mut plan = Plan::default();
    plan.push("thermal", Some(owner::CGROUP_CPU), Want::CapClass { class: "batch".into(), cpu_pct: 15.0 }, "stage 3");
    merge(&mut plan, &Facts::default());
    acts.reconcile_all(&plan, &mut cx);
    assert!(acts.status()[0].ok, "{:?}", acts.status()[0].last_error);
    assert_eq!(fx.calls()[1], "set-property batch.slice CPUQuotaPerSecUSec=300000", "15 % of 2 CPUs");
    // An administrator's change: reported once (event and metric), then left alone.
    fx.set_unit_property("nginx.service", "CPUWeight", &joule_core::effects::UnitValue::U64(50)).unwrap();
    std::thread::sleep(DRIFT_CHECK);
    acts.reconcile_all(&plan, &mut cx);
    std::thread::sleep(DRIFT_CHECK);
    acts.reconcile_all(&plan, &mut cx);
    let fams = acts.status()[0].state.families();
    assert_eq!(fams[2].samples, vec![(l(&[("unit", "nginx.service"), ("property", "CPUWeight")]), joule_core::metric::Value::Number(1.0))]);
    assert!(acts.shutdown_all(&mut cx).is_empty());
    assert_eq!(events.iter().filter(|e| *e == "unit_drift").count(), 1, "{events:?}");
    assert_eq!(fx.unit_property("batch.slice", "CPUQuotaPerSecUSec").unwrap(), joule_core::effects::UnitValue::U64(u64::MAX), "restored");
    assert_eq!(fx.unit_property("nginx.service", "CPUWeight").unwrap(), joule_core::effects::UnitValue::U64(50), "the administrator's stays");
}

#[test]
fn a_process_of_no_class_joining_a_unit_a_class_had_to_itself_gives_the_unit_back_within_a_check() {
    let fx = joule_core::effects::FakeEffects::default().with_unit("nginx.service").with_file("/cg/system.slice/nginx.service/cgroup.procs", "10\n");
    let jd = tempfile::tempdir().unwrap();
    let journal = Journal::open(jd.path()).unwrap();
    let cfg = joule_core::config::Config::parse("[[class]]\nname = \"by-name\"\nmatch = { comm = [\"nginx\"], uid = [0] }\nweight = 50\n").unwrap();
    let units = UnitClasses::for_systemd(&cfg.classes, &AdmissionEnv::new(2), std::path::Path::new("/cg")).unwrap();
    let mut acts = Actuators::new(vec![Box::new(CgroupCpuActuator::new(Box::new(WithUnits { units, fs: None })))]);
    let mut events = Vec::new();
    let mut sink = |e: &str, _: serde_json::Value| events.push(e.to_string());
    let mut cx = ActCx { journal: &journal, fx: &fx, events: &mut sink };
    acts.init_all(&mut cx).unwrap();
    let mut m = Membership { full: true, generation: 1, ..Default::default() };
    let cgroups = joule_core::procfs::TaskCgroups::parse("0::/system.slice/nginx.service\n");
    m.members.insert(10, joule_core::membership::Member { pid: 10, class: "by-name".into(), started: Some(1), cgroups, uid: Some(0) });
    let mut plan = Plan { members: Arc::new(m), ..Default::default() };
    plan.push("classes", Some(owner::CGROUP_CPU), Want::HoldClasses { classes: vec!["by-name".into()] }, "r");
    merge(&mut plan, &Facts::default());
    acts.reconcile_all(&plan, &mut cx);
    assert!(acts.status()[0].ok, "{:?}", acts.status()[0].last_error);
    assert_eq!(fx.unit_property("nginx.service", "CPUWeight").unwrap(), joule_core::effects::UnitValue::U64(50));
    // A shell of no class lands in the unit; the membership (and its generation) is unchanged.
    fx.write(std::path::Path::new("/cg/system.slice/nginx.service/cgroup.procs"), "10\n99\n").unwrap();
    std::thread::sleep(DRIFT_CHECK);
    acts.reconcile_all(&plan, &mut cx);
    assert_eq!(fx.unit_property("nginx.service", "CPUWeight").unwrap(), joule_core::effects::UnitValue::U64(u64::MAX), "given back");
    assert!(acts.shutdown_all(&mut cx).is_empty());
    assert!(events.iter().any(|e| e == "qos_reconciled"), "{events:?}");
}
