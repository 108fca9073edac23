//! One owner of "where a process lives" (issue 15): on a v1 machine with a freezer hierarchy,
//! the class mover puts a class's process into the class's cgroup in every hierarchy, the
//! freezer included, and the nap freezes exactly that cgroup; nobody else moves the process,
//! and a period later nothing moves at all.

use crate::cgroup_cpu::CgroupCpuActuator;
use crate::freezer::{CgroupfsFreezer, FreezerActuator};
use crate::nap::core::{Entered, NapActions, NapCore, Trigger};
use crate::testkit::{cgroup_v1, proc_fixture, set_cgroup};
use joule_core::cgroupfs::Hier;
use joule_core::control::{owner, ActCx, Actuators, Plan, Want};
use joule_core::effects::Effects;
use joule_core::journal::Journal;
use joule_core::membership::Membership;
use joule_qos::{QosController, QosOpts};
use std::io;
use std::sync::Arc;

struct NoTrigger;

impl Trigger for NoTrigger {
    fn arm(&self) -> io::Result<()> {
        Ok(())
    }
    fn disarm(&self) -> io::Result<()> {
        Ok(())
    }
    fn fired(&self) -> bool {
        false
    }
}

#[test]
fn the_class_mover_and_the_nap_agree_on_one_cgroup_per_process() {
    let fx = cgroup_v1();
    let pd = tempfile::tempdir().unwrap();
    fx.trees.lock().unwrap().push(pd.path().into()); // its fixture /proc, read through the fake
    let jd = tempfile::tempdir().unwrap();
    let cfg = joule_core::config::Config::parse("[[class]]\nname = \"web\"\nweight = 100\nmatch = { comm = [\"nginx\"] }\n").unwrap();
    let opts = QosOpts { cgroup_root: "/cg".into(), procfs_root: pd.path().into(), also_in: vec![Hier::Freezer], ..Default::default() };
    let ctl = QosController::new_with(&cfg.classes, opts, fx.as_ref()).unwrap();
    let places = ctl.places();
    let web = places.iter().find(|p| p.class == "web").unwrap().clone();
    assert_eq!(web.task_dir(Hier::Freezer), Some(std::path::Path::new("/cg/freezer/joule/web")), "the class lives in the freezer hierarchy too");

    let journal = Journal::open(jd.path()).unwrap();
    let mut sink = |_: &str, _: serde_json::Value| {};
    let mut cx = ActCx { journal: &journal, fx: fx.as_ref(), events: &mut sink };
    let freezer = FreezerActuator::new(Box::new(CgroupfsFreezer::new(fx.clone(), places.clone())), fx.clone(), vec!["web".into()]);
    let freezing = freezer.handle();
    let mut acts = Actuators::new(vec![Box::new(CgroupCpuActuator::new(Box::new(ctl))), Box::new(freezer)]);
    acts.init_all(&mut cx).unwrap();

    // nginx starts; the next period's membership reading lists it and the mover places it.
    proc_fixture(pd.path(), 700, "nginx", "/");
    let plan = |fx: &dyn Effects| {
        let mut p = Plan::default();
        p.push("classes", Some(owner::CGROUP_CPU), Want::HoldClasses { classes: vec!["web".into()] }, "configured");
        p.members = Arc::new(Membership::scan(pd.path(), &cfg.classes, &places, fx));
        p
    };
    acts.reconcile_all(&plan(fx.as_ref()), &mut cx);
    assert!(acts.status().iter().all(|s| s.ok), "{:?}", acts.status());
    let moves: Vec<String> = fx.calls().into_iter().filter(|c| c.ends_with(" 700")).collect();
    assert_eq!(
        moves,
        [
            "write /cg/cpu/joule/web/cgroup.procs 700",
            "write /cg/cpuset/joule/web/cgroup.procs 700",
            "write /cg/cpuacct/joule/web/cgroup.procs 700",
            "write /cg/freezer/joule/web/cgroup.procs 700",
        ],
        "one cgroup per hierarchy, all the class's own"
    );
    // The kernel now lists it there: the next period moves nothing.
    set_cgroup(pd.path(), 700, "/joule/web");
    let before = fx.calls().len();
    acts.reconcile_all(&plan(fx.as_ref()), &mut cx);
    assert_eq!(fx.calls().len(), before, "{:?}", &fx.calls()[before..]);

    // The nap freezes the class's own cgroup — the one the mover keeps nginx in — and moves
    // nothing.
    let actions = NapActions { freeze: Some((freezing.clone(), "web".into())), writes: vec![], cpufreq_min: None };
    let nap = NapCore::new(fx.clone(), journal.clone(), actions, Arc::default());
    assert_eq!(nap.enter(&NoTrigger, &mut || Ok(None)).unwrap(), Entered::Napping);
    let after: Vec<String> = fx.calls()[before..].to_vec();
    assert_eq!(after, ["write /cg/freezer/joule/web/freezer.state FROZEN"]);
    // A period while napping: the mover moves nothing, not even to "fix" a frozen process.
    acts.reconcile_all(&plan(fx.as_ref()), &mut cx);
    assert_eq!(fx.calls().len(), before + 1);
    assert!(nap.wake("tcp:80", std::time::Instant::now()).unwrap());
    assert_eq!(fx.file("/cg/freezer/joule/web/freezer.state").as_deref(), Some("THAWED"));
    assert!(acts.shutdown_all(&mut cx).is_empty());
    assert!(journal.entries().unwrap().is_empty(), "{:?}", journal.entries());
}
