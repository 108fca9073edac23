//! Admission arithmetic, including the seed's eight rows under both RT models.

use super::*;
use crate::seed::{classes, TABLE1};

fn env() -> AdmissionEnv {
    AdmissionEnv::new(2)
}

fn rules(p: &Plan) -> Vec<Rule> {
    p.refusals.iter().map(|r| r.rule).collect()
}

#[test]
fn seed_rows_on_this_kernel_model_refuse_only_small_periods() {
    for row in TABLE1 {
        let p = admit(&classes(row.period_us, row.runtime_us), &env());
        if row.period_us >= 100_000 {
            assert!(p.admitted(), "row {} refused: {}", row.no, p.refusal_text());
            let r: Vec<f64> = row.runtime_us.iter().map(|x| *x as f64 / row.period_us as f64 * 100.0).collect();
            assert!((p.class("cg0").unwrap().expected_pct - r[0]).abs() < 1e-9);
            assert!((p.class("cgA").unwrap().expected_pct_per_cpu[&1] - r[2]).abs() < 1e-9);
            assert!((p.cores[1].rt_sum_pct - (r[1] + r[2])).abs() < 1e-9);
        } else {
            assert_eq!(rules(&p), vec![Rule::PeriodBelowMinimum; 3], "row {}", row.no);
            assert!(p.refusals[0].message.contains(&format!("rt_period_us = {} µs is below the minimum 100000", row.period_us)));
        }
    }
}

#[test]
fn seed_rows_under_borrowing_are_all_refused_for_core_1_over_100() {
    let e = AdmissionEnv { rt_borrowing: true, ..env() };
    // The seed's formula: cg1 and cgA's × 2 shares on core 1 (Table 2's discussion).
    let core1 = [105.0, 130.0, 145.0, 105.0, 105.0, 105.0, 105.0, 105.0];
    for (row, want) in TABLE1.iter().zip(core1) {
        let p = admit(&classes(row.period_us, row.runtime_us), &e);
        assert!(rules(&p).contains(&Rule::CoreOver100), "row {}: {:?}", row.no, rules(&p));
        let c1 = p.cores.iter().find(|c| c.cpu == 1).unwrap();
        assert!((c1.rt_sum_pct - want).abs() < 1e-6, "row {}: {}", row.no, c1.rt_sum_pct);
        let msg = &p.refusals.iter().find(|r| r.rule == Rule::CoreOver100).unwrap().message;
        assert!(msg.starts_with("core 1: cg1") && msg.contains("> 100%"), "{msg}");
        assert_eq!(rules(&p).contains(&Rule::PeriodBelowMinimum), row.period_us < 100_000);
    }
    // Row 1 under borrowing: cg0 gets 2 × 42.5 % = 85 % (the seed measured 84).
    let p = admit(&classes(1_000_000, TABLE1[0].runtime_us), &e);
    assert!((p.class("cg0").unwrap().expected_pct - 85.0).abs() < 1e-9);
}

#[test]
fn per_core_sum_over_global_limit_is_refused_with_numbers() {
    // 0.5 + 0.47 on core 1 = 97 % ≤ 100 but > 95 %; machine-wide 0.97 > 0.95 too.
    let p = admit(&classes(1_000_000, [0, 500_000, 470_000]), &env());
    let m = &p.refusals.iter().find(|r| r.rule == Rule::CoreOverGlobalRt).unwrap().message;
    assert!(m.contains("cg1 50.0% + cgA 47.0% = 97.0% > 95.0%"), "{m}");
    assert!(rules(&p).contains(&Rule::V1SiblingsExceedParent));
}

#[test]
fn v1_machine_wide_sum_refuses_groups_on_different_cores() {
    // Each core is fine (60 %, 60 %) but v1 sums ratios machine-wide: 1.2 > 0.95.
    let p = admit(&classes(1_000_000, [600_000, 300_000, 300_000]), &env());
    assert_eq!(rules(&p), vec![Rule::V1SiblingsExceedParent]);
    assert!(p.refusals[0].message.contains("cg0 0.6000 + cg1 0.3000 + cgA 0.3000 = 1.2000 exceeds the joule group's budget 0.9500"));
    // Another group outside joule already holding 0.1 shrinks the budget.
    let e = AdmissionEnv { others_rt_ratio: 0.1, ..env() };
    let p = admit(&classes(1_000_000, [425_000, 425_000, 100_000]), &e);
    assert_eq!(rules(&p), vec![Rule::V1SiblingsExceedParent]);
}

#[test]
fn child_cannot_ask_more_than_parent() {
    let mut cs = vec![
        ClassConfig { name: "main".into(), rt_runtime_us: Some(300_000), ..Default::default() },
        ClassConfig { name: "audio".into(), parent: Some("main".into()), rt_runtime_us: Some(400_000), ..Default::default() },
    ];
    let p = admit(&cs, &env());
    let m: Vec<_> = p.refusals.iter().map(|r| r.message.as_str()).collect();
    assert!(m.iter().any(|m| m.contains("class audio asks RT 40.0% but its parent main has only 30.0%")), "{m:?}");
    cs[1].rt_runtime_us = Some(200_000);
    cs.push(ClassConfig { name: "video".into(), parent: Some("main".into()), rt_runtime_us: Some(200_000), ..Default::default() });
    let p = admit(&cs, &env());
    assert_eq!(rules(&p), vec![Rule::V1SiblingsExceedParent], "{}", p.refusal_text());
    assert!(p.refusals[0].message.contains("parent main's 0.3000"));
    // A child with RT under a parent without RT.
    let cs = vec![
        ClassConfig { name: "apps".into(), quota_us: Some(50_000), ..Default::default() },
        ClassConfig { name: "rt".into(), parent: Some("apps".into()), rt_runtime_us: Some(1000), ..Default::default() },
    ];
    assert!(rules(&admit(&cs, &env())).contains(&Rule::ChildExceedsParent));
}

#[test]
fn min_period_is_overridable() {
    let e = AdmissionEnv { min_period_us: 1000, ..env() };
    assert!(admit(&classes(1000, [25, 25, 900]), &e).admitted());
}

#[test]
fn cfs_quota_is_a_cap_spread_over_cpus() {
    let cs = vec![ClassConfig { name: "apps".into(), quota_us: Some(60_000), period_us: Some(100_000), cpus: Some("0-1".into()), ..Default::default() }];
    let p = admit(&cs, &env());
    assert!(p.admitted());
    let c = p.class("apps").unwrap();
    assert_eq!(c.kind, ShareKind::CfsCap);
    assert!((c.expected_pct_per_cpu[&0] - 30.0).abs() < 1e-9 && (c.expected_pct - 60.0).abs() < 1e-9);
}

#[test]
fn without_rt_group_sched_offers_the_cfs_equivalent() {
    let cs =
        vec![ClassConfig { name: "main".into(), rt_runtime_us: Some(300_000), rt_period_us: Some(1_000_000), cpus: Some("0-1".into()), ..Default::default() }];
    let no_dl = DeadlineOffer { unsupported: Some("no SCHED_DEADLINE".into()), ..DeadlineOffer::default_612() };
    let e = AdmissionEnv { rt_group_sched: false, deadline: no_dl, ..env() };
    let p = admit(&cs, &e);
    assert_eq!(rules(&p), vec![Rule::NoRtGroupSched]);
    assert!(p.refusals[0].message.contains("and no SCHED_DEADLINE"), "{}", p.refusals[0].message);
    assert!(p.refusals[0].message.contains("quota_us = 60000 / period_us = 100000"), "{}", p.refusals[0].message);
    let p = admit(&cs, &AdmissionEnv { rt_fallback_to_cfs: true, ..e });
    assert!(p.admitted());
    assert_eq!(p.class("main").unwrap().cfs.unwrap().quota_us, 60_000);
}

#[test]
fn cpus_outside_the_parent_or_machine_are_refused() {
    let cs = vec![ClassConfig { name: "x".into(), cpus: Some("3".into()), ..Default::default() }];
    assert_eq!(rules(&admit(&cs, &env())), vec![Rule::BadCpus]);
    let cs = vec![
        ClassConfig { name: "p".into(), cpus: Some("0".into()), ..Default::default() },
        ClassConfig { name: "c".into(), parent: Some("p".into()), cpus: Some("1".into()), ..Default::default() },
    ];
    assert!(admit(&cs, &env()).refusals[0].message.contains("not among the CPUs of its parent p (0)"));
}

#[test]
fn without_rt_group_sched_an_rt_class_gets_deadline_reservations_and_the_plan_says_why() {
    let main = ClassConfig { name: "main".into(), rt_runtime_us: Some(300_000), rt_period_us: Some(1_000_000), ..Default::default() };
    let e = AdmissionEnv { rt_group_sched: false, ..env() };
    let p = admit(std::slice::from_ref(&main), &e);
    assert!(p.admitted(), "{}", p.refusal_text());
    let c = p.class("main").unwrap();
    assert_eq!((c.rt_backend, c.kind, c.rt), (Some(RtBackend::Deadline), ShareKind::DeadlineReservation, None));
    assert_eq!(c.dl, Some(DlBw { runtime_us: 300_000, period_us: 1_000_000, threads: 2 }), "one thread per CPU by default");
    assert!((c.expected_pct - 60.0).abs() < 1e-9);
    assert!(p.render().contains("main             deadline: there is no cpu.rt_runtime_us"), "{}", p.render());
    assert!(p.cores.is_empty(), "reservations are not per-core RT sums");
    // Does not fit: 2 × 0.95 > 1.8.
    let big = ClassConfig { rt_runtime_us: Some(950_000), ..main.clone() };
    let p = admit(&[big], &e);
    assert_eq!(rules(&p), vec![Rule::DeadlineOverBudget]);
    // Confined to one CPU: refused with the reason.
    let pinned = ClassConfig { cpus: Some("1".into()), ..main.clone() };
    assert_eq!(rules(&admit(&[pinned], &e)), vec![Rule::DeadlineNeedsRootDomain]);
    // With RT group scheduling the group backend wins; forcing deadline there works too.
    let p = admit(std::slice::from_ref(&main), &env());
    assert_eq!(p.class("main").unwrap().rt_backend, Some(RtBackend::Group));
    let p = admit(std::slice::from_ref(&main), &AdmissionEnv { rt_backend: Some(RtBackend::Deadline), ..env() });
    let c = p.class("main").unwrap();
    assert_eq!(c.rt_backend, Some(RtBackend::Deadline));
    assert!(c.rt_why.as_deref().unwrap().contains("--rt-backend deadline"));
    // Forcing the group backend where there is none is refused.
    let p = admit(&[main], &AdmissionEnv { rt_backend: Some(RtBackend::Group), ..e });
    assert_eq!(rules(&p), vec![Rule::NoRtGroupSched]);
}
