//! Unit classes against a fake systemd ([`FakeEffects::with_unit`]): what reaches which unit,
//! the journal that undoes it, refusals, thermal caps and drift.

use super::*;
use joule_core::config::Config;
use joule_core::effects::{FakeEffects, Units};

fn classes(text: &str) -> Vec<ClassConfig> {
    Config::parse(text).unwrap_or_else(|e| panic!("{e:?}")).classes
}

fn journal() -> (tempfile::TempDir, Journal) {
    let d = tempfile::tempdir().unwrap();
    let j = Journal::open(d.path()).unwrap();
    (d, j)
}

const WEB: &str = "[[class]]\nname = \"web\"\nmatch = { unit = [\"nginx.service\"] }\nquota_us = 30000\nperiod_us = 100000\ncpus = \"1\"\nweight = 200\n\n\
                   [[class]]\nname = \"batch\"\nthermal = \"best_effort\"\nmatch = { slice = [\"batch.slice\"] }\n\n\
                   [[class]]\nname = \"other\"\nmatch = { comm = [\"x\"], uid = [0] }\n";

#[test]
fn a_unit_class_sets_its_units_properties_through_systemd_and_restore_puts_them_back() {
    let fx = FakeEffects::default().with_unit("nginx.service").with_unit("batch.slice");
    let (_d, j) = journal();
    let mut u = UnitClasses::new(&classes(WEB), 2).unwrap();
    assert_eq!(u.class_names(), vec!["web", "batch"], "the comm class is the cgroupfs controller's");
    let r = u.apply(&j, &fx).unwrap();
    assert_eq!(r.writes, 4);
    assert_eq!(
        fx.calls(),
        vec![
            "set-property nginx.service CPUQuotaPerSecUSec=300000",
            "set-property nginx.service CPUQuotaPeriodUSec=100000",
            "set-property nginx.service CPUWeight=200",
            "set-property nginx.service AllowedCPUs=02",
        ]
    );
    // Applying again writes nothing; the journal holds each old value once.
    assert_eq!(u.apply(&j, &fx).unwrap().writes, 0);
    assert_eq!(j.entries().unwrap().len(), 4);
    let rep = j.restore_all(&fx).unwrap();
    assert_eq!(rep.failed.len(), 0, "{rep:?}");
    for p in joule_core::effects::UNIT_PROPERTIES {
        let want = if *p == "AllowedCPUs" { UnitValue::Bytes(vec![]) } else { UnitValue::U64(u64::MAX) };
        assert_eq!(fx.unit_property("nginx.service", p).unwrap(), want, "{p} as found");
    }
}

#[test]
fn a_failure_half_way_undoes_what_was_set_and_names_the_unit() {
    let fx = FakeEffects::default().with_unit("nginx.service");
    fx.fail_calls("set-property nginx.service CPUWeight=200", libc::EPERM);
    let (_d, j) = journal();
    let mut u = UnitClasses::new(&classes(WEB), 2).unwrap();
    let e = u.apply(&j, &fx).unwrap_err().to_string();
    assert!(e.contains("CPUWeight of nginx.service") && e.contains("200"), "{e}");
    assert_eq!(fx.unit_property("nginx.service", "CPUQuotaPerSecUSec").unwrap(), UnitValue::U64(u64::MAX), "rolled back");
    assert!(j.entries().unwrap().is_empty());
    // A unit that does not exist is an error naming it, and nothing is left set.
    let fx = FakeEffects::default();
    let e = UnitClasses::new(&classes(WEB), 2).unwrap().apply(&j, &fx).unwrap_err().to_string();
    assert!(e.contains("nginx.service"), "{e}");
}

#[test]
fn what_a_unit_cannot_have_is_refused_with_the_reason() {
    let e = UnitClasses::new(&classes("[[class]]\nname = \"rt\"\nmatch = { unit = [\"a.service\"] }\nrt_runtime_us = 1000\nrt_period_us = 100000\n"), 2)
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("no RT bandwidth"), "{e}");
}

#[test]
fn a_thermal_cap_lowers_the_quota_and_lifting_it_goes_back_to_the_configured_one() {
    let fx = FakeEffects::default().with_unit("nginx.service").with_unit("batch.slice");
    let (_d, j) = journal();
    let mut u = UnitClasses::new(&classes(WEB), 2).unwrap();
    u.apply(&j, &fx).unwrap();
    assert!(u.set_cap(&j, &fx, "batch", 15.0).unwrap());
    assert_eq!(fx.unit_property("batch.slice", "CPUQuotaPerSecUSec").unwrap(), UnitValue::U64(300_000), "15 % of 2 CPUs");
    assert!((u.caps()["batch"].ratio - 0.15).abs() < 1e-9);
    assert!(u.set_cap(&j, &fx, "batch", 100.0).unwrap());
    assert_eq!(fx.unit_property("batch.slice", "CPUQuotaPerSecUSec").unwrap(), UnitValue::U64(u64::MAX), "no quota configured: none");
    u.set_cap(&j, &fx, "web", 50.0).unwrap();
    assert_eq!(fx.unit_property("nginx.service", "CPUQuotaPerSecUSec").unwrap(), UnitValue::U64(300_000), "the configured 30 % is lower than the cap");
    // Held at what it asks: no D-Bus call at all (the agent asks every period).
    let calls = fx.calls().len();
    assert!(!u.set_cap(&j, &fx, "batch", 100.0).unwrap());
    assert_eq!(fx.calls().len(), calls);
    // Changed by an administrator before drift() looked: a new cap does not overwrite it.
    fx.set_unit_property("batch.slice", "CPUQuotaPerSecUSec", &UnitValue::U64(700_000)).unwrap();
    assert!(!u.set_cap(&j, &fx, "batch", 15.0).unwrap());
    assert_eq!(fx.unit_property("batch.slice", "CPUQuotaPerSecUSec").unwrap(), UnitValue::U64(700_000));
    assert_eq!(u.drift(&fx).len(), 1, "and drift() reports it");
    assert!(matches!(u.set_cap(&j, &fx, "nope", 50.0), Err(QosError::UnknownClass(_))));
}

#[test]
fn a_change_by_someone_else_is_reported_once_and_then_left_alone() {
    let fx = FakeEffects::default().with_unit("nginx.service").with_unit("batch.slice");
    let (_d, j) = journal();
    let mut u = UnitClasses::new(&classes(WEB), 2).unwrap();
    u.apply(&j, &fx).unwrap();
    assert!(u.drift(&fx).is_empty());
    // `systemctl set-property nginx.service CPUWeight=50` by hand.
    fx.set_unit_property("nginx.service", "CPUWeight", &UnitValue::U64(50)).unwrap();
    let d = u.drift(&fx);
    assert_eq!(d, vec![Drift { unit: "nginx.service".into(), property: "CPUWeight".into(), set: "200".into(), found: "50".into() }]);
    assert!(u.drift(&fx).is_empty(), "reported once");
    u.apply(&j, &fx).unwrap();
    assert_eq!(fx.unit_property("nginx.service", "CPUWeight").unwrap(), UnitValue::U64(50), "the administrator wins");
    // And keeps winning at restore: joule puts back only what still reads as joule set it.
    j.restore_all(&fx).unwrap();
    assert_eq!(fx.unit_property("nginx.service", "CPUWeight").unwrap(), UnitValue::U64(50));
    assert_eq!(fx.unit_property("nginx.service", "CPUQuotaPerSecUSec").unwrap(), UnitValue::U64(u64::MAX));
}

#[test]
fn a_cap_changed_twice_is_walked_back_to_the_value_found() {
    let fx = FakeEffects::default().with_unit("batch.slice").with_unit("nginx.service");
    let (_d, j) = journal();
    let mut u = UnitClasses::new(&classes(WEB), 2).unwrap();
    u.set_cap(&j, &fx, "batch", 60.0).unwrap();
    u.set_cap(&j, &fx, "batch", 15.0).unwrap();
    j.restore_all(&fx).unwrap();
    assert_eq!(fx.unit_property("batch.slice", "CPUQuotaPerSecUSec").unwrap(), UnitValue::U64(u64::MAX));
}

#[test]
fn cpu_masks_put_cpu_n_in_bit_n() {
    assert_eq!(cpu_mask(&[0]), vec![1]);
    assert_eq!(cpu_mask(&[1, 3]), vec![0b1010]);
    assert_eq!(cpu_mask(&[9]), vec![0, 2]);
}
