//! The cpufreq owner on a fake sysfs: caps from the merged Plan, journalled first, never below
//! the minimum; several mechanisms' caps at once (the lowest holds, lifting one leaves the
//! others); a request held between periods (the nap's) that, dropped, never restores a value
//! another mechanism still wants.

use super::*;
use joule_core::control::{merge, Actuators, Facts, FreqLimit, Want};
use joule_core::effects::FakeEffects;
use joule_core::journal;

/// Two CPUs with cpufreq (3 GHz max, 800 MHz min; cpu1 already limited by someone to 2.8
/// GHz) and a `cpufreq`-less entry that is not a CPU.
fn tree() -> Arc<FakeEffects> {
    let mut fx = FakeEffects::default().with_dir("/sys/devices/system/cpu").with_dir("/sys/devices/system/cpu/cpuidle");
    for (n, cur) in [(0, "3000000"), (1, "2800000")] {
        let d = format!("/sys/devices/system/cpu/cpu{n}/cpufreq");
        fx = fx
            .with_dir(format!("/sys/devices/system/cpu/cpu{n}"))
            .with_dir(d.as_str())
            .with_file(format!("{d}/cpuinfo_max_freq"), "3000000\n")
            .with_file(format!("{d}/cpuinfo_min_freq"), "800000\n")
            .with_file(format!("{d}/scaling_max_freq"), &format!("{cur}\n"));
    }
    Arc::new(fx)
}

fn facts() -> Facts {
    Facts { cpufreq: [(0, (800_000, 3_000_000)), (1, (800_000, 3_000_000))].into_iter().collect(), ..Facts::default() }
}

/// The merged plan of these (policy, cpus, limit) frequency wants.
fn plan(wants: &[(&str, Option<Vec<usize>>, FreqLimit)]) -> Plan {
    let mut p = Plan::default();
    for (policy, cpus, limit) in wants {
        p.push(policy, Some(owner::CPUFREQ), Want::FreqCap { cpus: cpus.clone(), limit: *limit }, format!("{policy}'s reason"));
    }
    merge(&mut p, &facts());
    p
}

fn knob(fx: &FakeEffects, cpu: u32) -> String {
    fx.file(format!("/sys/devices/system/cpu/cpu{cpu}/cpufreq/scaling_max_freq")).unwrap().trim().to_string()
}

/// Runs `body` on a started cpufreq actuator over `fx`, journalling in a fresh directory.
fn with_actuator(fx: &Arc<FakeEffects>, body: impl FnOnce(&mut Actuators, FreqRequests, &mut ActCx<'_>, &Journal)) {
    let jd = tempfile::tempdir().unwrap();
    let journal = Journal::open(jd.path()).unwrap();
    let mut sink = |_: &str, _: serde_json::Value| {};
    let mut cx = ActCx { journal: &journal, fx: fx.as_ref(), events: &mut sink };
    let a = CpufreqActuator::new("/sys/devices/system/cpu", fx.clone());
    let requests = a.requests();
    let mut acts = Actuators::new(vec![Box::new(a)]);
    acts.init_all(&mut cx).unwrap();
    body(&mut acts, requests, &mut cx, &journal);
}

#[test]
fn caps_every_cpu_journalled_first_never_below_min_and_restores_the_original() {
    let fx = tree();
    with_actuator(&fx, |acts, _, cx, journal| {
        acts.reconcile_all(&plan(&[("thermal", None, FreqLimit::Pct(100.0))]), cx);
        assert!(fx.calls().is_empty(), "100 % at start writes nothing");
        acts.reconcile_all(&plan(&[("thermal", None, FreqLimit::Pct(85.0))]), cx);
        assert_eq!((knob(&fx, 0), knob(&fx, 1)), ("2550000".into(), "2550000".into()));
        let recs = journal.entries().unwrap();
        assert_eq!(recs.len(), 2);
        assert_eq!(recs[1].undo, Undo::Write { path: "/sys/devices/system/cpu/cpu1/cpufreq/scaling_max_freq".into(), old: "2800000".into() });
        acts.reconcile_all(&plan(&[("thermal", None, FreqLimit::Pct(85.0))]), cx);
        acts.reconcile_all(&plan(&[("thermal", None, FreqLimit::Pct(10.0))]), cx);
        assert_eq!(knob(&fx, 0), "800000", "never below cpuinfo_min_freq");
        assert_eq!(fx.calls().len(), 4, "written only when the value changes");
        assert_eq!(journal.entries().unwrap().len(), 2, "one undo record per CPU, holding the original");
        acts.reconcile_all(&plan(&[("thermal", None, FreqLimit::Pct(100.0))]), cx);
        assert_eq!(knob(&fx, 1), "2800000", "no cap puts back the original");
        assert!(acts.status()[0].ok);
        // Killed at a capped stage: the journal alone restores.
        acts.reconcile_all(&plan(&[("thermal", None, FreqLimit::Pct(70.0))]), cx);
        journal.restore_all(fx.as_ref()).unwrap();
        assert_eq!((knob(&fx, 0), knob(&fx, 1)), ("3000000".into(), "2800000".into()));
    });
}

/// Issue 15: thermal, placement and nap ask for different caps; the lowest holds; lifting one
/// leaves the others; the nap's wake puts back what the others still want, not the original.
#[test]
fn three_mechanisms_caps_the_lowest_holds_and_a_nap_wake_restores_only_what_others_do_not_want() {
    let fx = tree();
    with_actuator(&fx, |acts, nap, cx, journal| {
        let thermal = ("thermal", None, FreqLimit::Pct(85.0)); // 2.55 GHz everywhere
        let placement = ("placement", Some(vec![1]), FreqLimit::Khz(1_600_000)); // its domain, CPU 1
        acts.reconcile_all(&plan(&[thermal.clone(), placement.clone()]), cx);
        assert_eq!((knob(&fx, 0), knob(&fx, 1)), ("2550000".into(), "1600000".into()));

        // The nap enters: the lowest frequency everywhere while napping.
        nap.hold("nap", HeldLimit::Min, "napping").unwrap();
        assert_eq!((knob(&fx, 0), knob(&fx, 1)), ("800000".into(), "800000".into()));
        // A period passes while napping: the plan's caps do not lift the nap's.
        acts.reconcile_all(&plan(&[thermal.clone(), placement.clone()]), cx);
        assert_eq!((knob(&fx, 0), knob(&fx, 1)), ("800000".into(), "800000".into()));
        let st = acts.status()[0].state.to_json();
        assert_eq!(st["cpus"][1]["asked_by"], serde_json::json!(["placement (1.6 GHz)", "thermal (2.55 GHz)", "nap (800 MHz)"]));

        // The first packet: the waiter drops the nap's request. Each CPU goes back to what the
        // others still want, never to its original value.
        assert_eq!(nap.drop_request("nap").unwrap(), 2);
        assert_eq!((knob(&fx, 0), knob(&fx, 1)), ("2550000".into(), "1600000".into()));

        // The stage cools: thermal lifts its cap; placement's stays.
        acts.reconcile_all(&plan(&[("thermal", None, FreqLimit::Pct(100.0)), placement.clone()]), cx);
        assert_eq!((knob(&fx, 0), knob(&fx, 1)), ("3000000".into(), "1600000".into()));
        // Placement lets go too: CPU 1 is back at the 2.8 GHz someone had set.
        acts.reconcile_all(&plan(&[("thermal", None, FreqLimit::Pct(100.0))]), cx);
        assert_eq!(knob(&fx, 1), "2800000");
        assert_eq!(journal.entries().unwrap().len(), 2, "each knob journalled once, with its original");
        assert!(acts.shutdown_all(cx).is_empty());
        assert!(journal::entries(journal.dir()).unwrap().is_empty());
    });
}

#[test]
fn without_cpufreq_it_says_so_once_and_does_nothing() {
    let fx = Arc::new(FakeEffects::default().with_dir("/sys/devices/system/cpu").with_dir("/sys/devices/system/cpu/cpu0"));
    with_actuator(&fx, |acts, nap, cx, journal| {
        let mut p = Plan::default();
        p.push("thermal", Some(owner::CPUFREQ), Want::FreqCap { cpus: None, limit: FreqLimit::Pct(70.0) }, "stage 2");
        merge(&mut p, &Facts::default());
        acts.reconcile_all(&p, cx);
        assert_eq!(nap.hold("nap", HeldLimit::Min, "napping").unwrap(), 0);
        assert!(!nap.available());
        let st = &acts.status()[0];
        assert!(st.ok, "{:?}", st.last_error);
        assert!(st.state.to_json()["notes"][0].as_str().unwrap().contains("no cpufreq"), "{:?}", st.state);
        assert!(fx.calls().is_empty());
        assert!(journal.entries().unwrap().is_empty());
        assert!(acts.shutdown_all(cx).is_empty());
    });
}

/// Runs `body` on a started cpufreq actuator over `fx` that reads its knobs back each period,
/// with the events it reported so far.
fn with_watching_actuator(fx: &Arc<FakeEffects>, body: impl FnOnce(&mut Actuators, &mut ActCx<'_>, &Journal, &dyn Fn() -> Vec<serde_json::Value>)) {
    let jd = tempfile::tempdir().unwrap();
    let journal = Journal::open(jd.path()).unwrap();
    let events = std::rc::Rc::new(std::cell::RefCell::new(Vec::new()));
    let log = events.clone();
    let mut sink = move |name: &str, v: serde_json::Value| {
        if name == "cpufreq_drift" {
            log.borrow_mut().push(v);
        }
    };
    let mut cx = ActCx { journal: &journal, fx: fx.as_ref(), events: &mut sink };
    let a = CpufreqActuator::new("/sys/devices/system/cpu", fx.clone()).with_drift_check(std::time::Duration::ZERO);
    let mut acts = Actuators::new(vec![Box::new(a)]);
    acts.init_all(&mut cx).unwrap();
    body(&mut acts, &mut cx, &journal, &|| events.borrow().clone());
}

/// What another tool (thermald, tuned, cpupower) does: writes the knob behind joule's back.
fn other_tool_writes(fx: &FakeEffects, cpu: u32, khz: &str) {
    fx.files.lock().unwrap().insert(format!("/sys/devices/system/cpu/cpu{cpu}/cpufreq/scaling_max_freq").into(), format!("{khz}\n"));
}

/// Issue 34: a cap joule wrote, rewritten by another tool, is reported once, never written
/// again (not by the same stage, a hotter one or the cool stage's lift), and its undo record is
/// gone, so neither shutdown nor a replay puts joule's original over the other tool's value.
#[test]
fn a_limit_another_tool_rewrote_is_reported_once_left_alone_and_forgotten_by_the_journal() {
    let fx = tree();
    with_watching_actuator(&fx, |acts, cx, journal, drift| {
        acts.reconcile_all(&plan(&[("thermal", None, FreqLimit::Pct(85.0))]), cx);
        assert_eq!((knob(&fx, 0), knob(&fx, 1)), ("2550000".into(), "2550000".into()));
        assert_eq!(journal.entries().unwrap().len(), 2);
        other_tool_writes(&fx, 0, "2000000");
        acts.reconcile_all(&plan(&[("thermal", None, FreqLimit::Pct(85.0))]), cx);
        assert_eq!(drift(), vec![serde_json::json!({ "cpu": 0, "joule_khz": 2_550_000, "found_khz": 2_000_000 })]);
        assert_eq!(knob(&fx, 0), "2000000", "the other tool's value stands");
        let recs = journal.entries().unwrap();
        assert_eq!(recs.len(), 1, "cpu0's record is forgotten: {recs:?}");
        assert_eq!(recs[0].undo, Undo::Write { path: "/sys/devices/system/cpu/cpu1/cpufreq/scaling_max_freq".into(), old: "2800000".into() });

        // Hotter, then cool: cpu1 follows the plan, cpu0 is never written again.
        let writes_before = fx.calls().len();
        acts.reconcile_all(&plan(&[("thermal", None, FreqLimit::Pct(70.0))]), cx);
        acts.reconcile_all(&plan(&[("thermal", None, FreqLimit::Pct(100.0))]), cx);
        let writes: Vec<String> = fx.calls()[writes_before..].to_vec();
        assert!(writes.iter().all(|w| w.contains("/cpu1/")), "{writes:?}");
        assert_eq!((knob(&fx, 0), knob(&fx, 1)), ("2000000".into(), "2800000".into()));
        assert_eq!(drift().len(), 1, "reported once");
        let st = &acts.status()[0];
        assert!(st.ok, "{:?}", st.last_error);
        assert_eq!(st.state.to_json()["yielded"], serde_json::json!([{ "cpu": 0, "joule_khz": 2_550_000, "found_khz": 2_000_000 }]));
        let families = st.state.families();
        let drift_family = families.iter().find(|f| f.def.name == "joule_cpufreq_drift").unwrap();
        assert_eq!(drift_family.samples, vec![(joule_core::metric::l(&[("cpu", "0")]), joule_core::metric::Value::Number(1.0))]);
        let yielded = families.iter().find(|f| f.def.name == "joule_cpufreq_yielded_cpus").unwrap();
        assert_eq!(yielded.samples, vec![(vec![], joule_core::metric::Value::Number(1.0))]);

        acts.reconcile_all(&plan(&[("thermal", None, FreqLimit::Pct(70.0))]), cx);
        assert!(acts.shutdown_all(cx).is_empty());
        assert_eq!((knob(&fx, 0), knob(&fx, 1)), ("2000000".into(), "2800000".into()), "shutdown puts back only what joule still holds");
        assert!(journal.entries().unwrap().is_empty());
    });
}

/// The knob is read before every write: a change between two drift checks is never
/// overwritten by the next stage's cap; a knob changed while joule held nothing there is the
/// new original, not drift; a lower value while the kernel's own cpufreq cooling limits is the
/// kernel's.
#[test]
fn a_write_reads_first_a_new_original_is_adopted_and_the_kernels_cooling_is_not_drift() {
    let fx = Arc::new(
        Arc::try_unwrap(tree())
            .unwrap()
            .with_dir("/sys/class/thermal")
            .with_dir("/sys/class/thermal/cooling_device0")
            .with_file("/sys/class/thermal/cooling_device0/type", "cpufreq-cpu0\n")
            .with_file("/sys/class/thermal/cooling_device0/cur_state", "0\n"),
    );
    let jd = tempfile::tempdir().unwrap();
    let journal = Journal::open(jd.path()).unwrap();
    let mut n_drift = 0;
    let mut sink = |name: &str, _: serde_json::Value| n_drift += usize::from(name == "cpufreq_drift");
    let mut cx = ActCx { journal: &journal, fx: fx.as_ref(), events: &mut sink };
    // The default check interval (1 s): only the read before a write sees the change here.
    let mut acts = Actuators::new(vec![Box::new(CpufreqActuator::new("/sys/devices/system/cpu", fx.clone()))]);
    acts.init_all(&mut cx).unwrap();
    other_tool_writes(&fx, 1, "2400000"); // before joule ever capped cpu1: its new original
    acts.reconcile_all(&plan(&[("thermal", None, FreqLimit::Pct(85.0))]), &mut cx);
    assert_eq!((knob(&fx, 0), knob(&fx, 1)), ("2550000".into(), "2400000".into()), "85 % is above cpu1's new original: nothing to write");
    acts.reconcile_all(&plan(&[("thermal", None, FreqLimit::Pct(70.0))]), &mut cx);
    assert_eq!(knob(&fx, 1), "2100000");
    let cpu1 = Undo::Write { path: "/sys/devices/system/cpu/cpu1/cpufreq/scaling_max_freq".into(), old: "2400000".into() };
    assert!(journal.entries().unwrap().iter().any(|e| e.undo == cpu1), "the undo record holds the new original");

    // The kernel's cooling device limits cpu0 below joule's cap: not drift.
    fx.files.lock().unwrap().insert("/sys/class/thermal/cooling_device0/cur_state".into(), "3\n".into());
    other_tool_writes(&fx, 0, "1600000"); // policy->max under the cooling device's request
    acts.reconcile_all(&plan(&[("thermal", None, FreqLimit::Pct(60.0))]), &mut cx);
    assert_eq!(knob(&fx, 0), "1800000", "joule's 60 % cap still went into its request");
    assert_eq!(knob(&fx, 1), "1800000");
    // Another tool raises cpu1 between checks; the next stage's write reads first and yields.
    other_tool_writes(&fx, 1, "2900000");
    acts.reconcile_all(&plan(&[("thermal", None, FreqLimit::Pct(50.0))]), &mut cx);
    assert_eq!((knob(&fx, 0), knob(&fx, 1)), ("1500000".into(), "2900000".into()));
    assert_eq!(n_drift, 1);
}
