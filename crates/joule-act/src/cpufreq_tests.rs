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
