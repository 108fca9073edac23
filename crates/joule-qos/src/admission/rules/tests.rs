//! Each rule on its own, at its boundary: the last value it admits and the first it refuses.

use super::*;
use crate::admission::{AdmissionEnv, ClassPlan, CoreSum, DeadlineOffer, DlBw, Plan, RtBw, ShareKind};
use joule_core::config::ClassConfig;
use std::collections::BTreeMap;

fn class(name: &str, cpus: &[usize], rt: Option<RtBw>) -> ClassPlan {
    ClassPlan {
        name: name.into(),
        parent: None,
        cpus: cpus.to_vec(),
        rt,
        cfs: None,
        dl: None,
        rt_backend: None,
        rt_why: None,
        weight: None,
        kind: if rt.is_some() { ShareKind::RtGuarantee } else { ShareKind::Relative },
        thermal_capped: false,
        idle: false,
        expected_pct_per_cpu: BTreeMap::new(),
        expected_pct: 0.0,
    }
}

fn core(pcts: &[f64]) -> CoreSum {
    CoreSum { cpu: 1, rt_members: pcts.iter().enumerate().map(|(i, p)| (format!("c{i}"), *p)).collect(), rt_sum_pct: pcts.iter().sum() }
}

#[test]
fn runtime_may_equal_its_period_but_not_exceed_it() {
    assert!(runtime_over_period("a", 1000, 1000).is_none());
    assert_eq!(runtime_over_period("a", 1001, 1000).unwrap().rule, Rule::RuntimeOverPeriod);
    assert!(runtime_over_period("a", 0, 0).is_some(), "a zero period has no ratio");
}

#[test]
fn the_minimum_period_itself_is_admitted() {
    assert!(period_below_minimum("a", PeriodOf::Cfs, 100_000, 100_000).is_none());
    let r = period_below_minimum("a", PeriodOf::Rt { runtime_us: 300 }, 1000, 100_000).unwrap();
    assert_eq!(r.rule, Rule::PeriodBelowMinimum);
    // The same ratio at the minimum period: 300/1000 = 30000/100000.
    assert!(r.message.contains("rt_runtime_us = 30000 / rt_period_us = 100000"), "{}", r.message);
    let r = period_below_minimum("a", PeriodOf::Cfs, 99_999, 100_000).unwrap();
    assert!(r.message.starts_with("class a: period_us = 99999"), "{}", r.message);
}

#[test]
fn cfs_numbers_stay_within_the_kernels_bounds() {
    for ok in [1000, 1_000_000] {
        assert!(cfs_period_outside_kernel_range("a", ok).is_none(), "{ok}");
    }
    for bad in [999, 1_000_001] {
        assert_eq!(cfs_period_outside_kernel_range("a", bad).unwrap().rule, Rule::BadConfig, "{bad}");
    }
    assert!(cfs_quota_below_kernel_minimum("a", 1000).is_none());
    assert!(cfs_quota_below_kernel_minimum("a", 999).is_some());
}

#[test]
fn weight_is_within_cpu_weights_range_or_absent() {
    for ok in [None, Some(1), Some(10_000)] {
        assert!(weight_outside_range("a", ok).is_none(), "{ok:?}");
    }
    for bad in [0, 10_001] {
        assert!(weight_outside_range("a", Some(bad)).unwrap().message.contains(&format!("weight = {bad} ")));
    }
}

#[test]
fn rt_fallback_is_a_quota_of_the_same_time_over_all_cpus_and_never_below_1ms() {
    let c = ClassConfig { name: "a".into(), ..Default::default() };
    let rt = RtBw { runtime_us: 250_000, period_us: 1_000_000 };
    let (cfs, note) = rt_fallback_to_cfs(&c, rt, 3, true, "no RT group").unwrap();
    assert_eq!((cfs.quota_us, cfs.period_us), (75_000, 100_000), "25 % of each of 3 CPUs");
    assert!(note.contains("no RT group; using the CFS equivalent"), "{note}");
    let tiny = RtBw { runtime_us: 1, period_us: 1_000_000 };
    assert_eq!(rt_fallback_to_cfs(&c, tiny, 1, true, "").unwrap().0.quota_us, 1000);
    // Not allowed, or the class has a quota of its own: refused, with the equivalent offered.
    assert_eq!(rt_fallback_to_cfs(&c, rt, 3, false, "").unwrap_err().rule, Rule::NoRtGroupSched);
    let own = ClassConfig { quota_us: Some(50_000), ..c };
    assert!(rt_fallback_to_cfs(&own, rt, 3, true, "").unwrap_err().message.contains("quota_us = 75000"));
}

#[test]
fn deadline_params_stay_within_the_kernels_bounds() {
    let offer = DeadlineOffer::default_612();
    let ok = DlBw { runtime_us: 2, period_us: 100, threads: 1 };
    assert!(deadline_bad_params("a", ok, &offer).is_none());
    assert!(deadline_bad_params("a", DlBw { period_us: 4_194_304, ..ok }, &offer).is_none());
    for bad in [DlBw { period_us: 99, ..ok }, DlBw { period_us: 4_194_305, ..ok }, DlBw { runtime_us: 1, ..ok }, DlBw { threads: 0, ..ok }] {
        assert_eq!(deadline_bad_params("a", bad, &offer).unwrap().rule, Rule::DeadlineBadParams, "{bad:?}");
    }
}

#[test]
fn a_deadline_class_must_span_the_root_domain() {
    assert!(deadline_needs_root_domain("a", &[0, 1], &[0, 1]).is_none());
    let r = deadline_needs_root_domain("a", &[1], &[0, 1]).unwrap();
    assert_eq!(r.rule, Rule::DeadlineNeedsRootDomain);
    assert!(r.message.contains("cpus 1 on the deadline backend") && r.message.contains("(0-1)"), "{}", r.message);
}

#[test]
fn deadline_reservations_fit_the_global_limit_minus_the_fair_server() {
    // 2 CPUs × (95 % − 5 %) = 1.8 CPUs.
    let env = AdmissionEnv::new(2);
    let plan_with = |threads: u32, runtime_us: u64| {
        let mut p = Plan::empty(&env);
        let mut c = class("a", &[0, 1], None);
        c.dl = Some(DlBw { runtime_us, period_us: 1_000_000, threads });
        p.classes.push(c);
        check_deadline_budget(&mut p, &env);
        p
    };
    assert!(plan_with(2, 900_000).admitted(), "exactly the budget");
    let p = plan_with(2, 900_001);
    assert_eq!(p.refusals[0].rule, Rule::DeadlineOverBudget);
    assert!(p.refusals[0].message.contains("exceed the kernel's deadline bandwidth 1.8000"), "{}", p.refusals[0].message);
    assert!(p.arithmetic[0].contains("5.0% fair server [model]"), "{}", p.arithmetic[0]);
    // No fair server (before 6.12): the whole global limit.
    let old = AdmissionEnv { deadline: DeadlineOffer { fair_server_runtime_us: 0, ..DeadlineOffer::default_612() }, ..env.clone() };
    assert!((old.deadline_budget(2) - 1.9).abs() < 1e-9);
}

#[test]
fn cpus_default_to_the_parents_and_must_stay_within_them() {
    let parent = class("p", &[2, 3], None);
    let c = ClassConfig { name: "c".into(), ..Default::default() };
    assert_eq!(class_cpus(&c, Some(&parent), &[0, 1, 2, 3]).unwrap(), vec![2, 3]);
    assert_eq!(class_cpus(&c, None, &[0, 1]).unwrap(), vec![0, 1]);
    let c = ClassConfig { cpus: Some("1-2".into()), ..c };
    let r = class_cpus(&c, Some(&parent), &[0, 1, 2, 3]).unwrap_err();
    assert!(r.message.contains("CPU 1 is not among the CPUs of its parent p (2-3)"), "{}", r.message);
    let c = ClassConfig { cpus: Some("".into()), ..c };
    assert_eq!(class_cpus(&c, None, &[0, 1]).unwrap_err().rule, Rule::BadCpus, "an empty list is no CPU list");
}

#[test]
fn a_child_may_ask_exactly_its_parents_share() {
    let half = RtBw { runtime_us: 500_000, period_us: 1_000_000 };
    let parent = class("p", &[0], Some(half));
    assert!(child_rt_exceeds_parent("c", Some(half), &parent).is_none());
    assert!(child_rt_exceeds_parent("c", Some(RtBw { runtime_us: 500_001, ..half }), &parent).is_some());
    assert!(child_rt_exceeds_parent("c", None, &class("q", &[0], None)).is_none(), "no RT asked, none needed");
    let r = child_rt_exceeds_parent("c", Some(half), &class("q", &[0], None)).unwrap();
    assert!(r.message.ends_with("has no RT runtime (0 %)") && r.classes == ["c", "q"], "{r:?}");
}

#[test]
fn siblings_may_fill_their_parents_budget_exactly() {
    let s = hierarchy::Siblings { parent: Some("p".into()), kids: vec![("a".into(), 0.25), ("b".into(), 0.25)] };
    assert!(hierarchy::v1_siblings_exceed_parent(&s, 0.5, "p's", true).is_none());
    let r = hierarchy::v1_siblings_exceed_parent(&s, 0.49, "p's", true).unwrap();
    assert_eq!(r.classes, ["a", "b", "p"]);
    assert!(hierarchy::v1_siblings_exceed_parent(&s, 0.49, "p's", false).is_none(), "no RT group bandwidth, no such check");
}

#[test]
fn a_core_may_be_full_but_not_over() {
    assert!(cores::core_over_100(&core(&[60.0, 40.0])).is_none());
    assert_eq!(cores::core_over_100(&core(&[60.0, 40.1])).unwrap().rule, Rule::CoreOver100);
    let env = AdmissionEnv::new(2);
    assert!(cores::core_over_global_rt(&core(&[95.0]), &env).is_none());
    assert_eq!(cores::core_over_global_rt(&core(&[95.1]), &env).unwrap().classes, ["c0"]);
    let unlimited = AdmissionEnv { global_rt_runtime_us: -1, ..env };
    assert!(cores::core_over_global_rt(&core(&[100.0]), &unlimited).is_none(), "-1: no global limit");
}
