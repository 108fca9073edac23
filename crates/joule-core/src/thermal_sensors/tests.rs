//! The choice of sensors and thresholds on made-up machines (the board fixtures are read in
//! joule-telemetry's tests).

use super::*;
use crate::snapshot::TripPoint;
use crate::Origin;

fn zone(name: &str, kind: &str, temp: f64, trips: &[(&str, f64)]) -> ThermalZone {
    ThermalZone {
        name: name.into(),
        kind: kind.into(),
        temp_celsius: temp,
        trips: trips.iter().map(|(k, t)| TripPoint { kind: (*k).into(), temp_celsius: *t, hysteresis_celsius: 0.0 }).collect(),
        source: Origin::Sensor,
    }
}

fn used(c: &SensorChoice) -> Vec<&str> {
    c.used().collect()
}

#[test]
fn cpu_package_and_soc_sensors_count_and_drives_nics_gpus_batteries_do_not() {
    for k in ["x86_pkg_temp", "coretemp", "k10temp", "zenpower"] {
        assert_eq!(classify(k), SensorClass::Package, "{k}");
    }
    for k in ["cpu-thermal", "cpu_thermal", "soc-thermal", "bigcore0-thermal", "littlecore-thermal", "package-thermal", "TCPU", "cpu0-thermal"] {
        assert_eq!(classify(k), SensorClass::Cpu, "{k}");
    }
    assert_eq!(classify("acpitz"), SensorClass::Acpi);
    for k in ["nvme", "iwlwifi_1", "gpu-thermal", "npu-thermal", "BAT0", "pch_cannonlake", "drivetemp", "amdgpu", "nct6775", "center-thermal", "", "plant-rpi5"]
    {
        assert_eq!(classify(k), SensorClass::Other, "{k}");
    }
}

#[test]
fn an_nvme_zone_at_95_is_listed_and_ignored_and_acpitz_stands_in_only_alone() {
    let th = ThermalConfig::default();
    let nvme_only = [zone("hwmon0/temp1", "nvme", 95.0, &[("critical", 85.0)])];
    let c = choose(&nvme_only, &th);
    assert!(!c.any_used(), "{c:?}");
    assert!(c.sensors[0].why.contains("not a CPU sensor"), "{c:?}");

    let with_acpi = [zone("thermal_zone0", "acpitz", 40.0, &[("critical", 105.0)]), nvme_only[0].clone()];
    assert_eq!(used(&choose(&with_acpi, &th)), ["thermal_zone0"]);

    let with_pkg = [with_acpi[0].clone(), zone("thermal_zone1", "x86_pkg_temp", 50.0, &[("passive", 0.0)]), nvme_only[0].clone()];
    let c = choose(&with_pkg, &th);
    assert_eq!(used(&c), ["thermal_zone1"]);
    assert!(c.sensors[0].why.contains("better"), "{c:?}");
}

#[test]
fn the_zones_key_replaces_the_choice_by_type_name_or_hwmon_chip() {
    let zones = [zone("thermal_zone0", "acpitz", 40.0, &[]), zone("hwmon3/temp1", "nvme", 40.0, &[]), zone("hwmon4/temp2", "nct6775", 40.0, &[])];
    let th = |z: &[&str]| ThermalConfig { zones: z.iter().map(|s| s.to_string()).collect(), ..ThermalConfig::default() };
    assert_eq!(used(&choose(&zones, &th(&["nvme"]))), ["hwmon3/temp1"]);
    assert_eq!(used(&choose(&zones, &th(&["thermal_zone0", "hwmon4"]))), ["thermal_zone0", "hwmon4/temp2"]);
    assert!(!choose(&zones, &th(&["x86_pkg_temp"])).any_used());
}

#[test]
fn thresholds_sit_below_the_lowest_passive_trip_else_the_critical_one() {
    let th = ThermalConfig::default();
    // RK3588-like: passive at 85 (and a GPU zone at 70 that is not used), critical at 115.
    let zones = [
        zone("thermal_zone1", "bigcore0-thermal", 40.0, &[("passive", 85.0), ("critical", 115.0)]),
        zone("thermal_zone3", "littlecore-thermal", 40.0, &[("passive", 80.0), ("critical", 115.0)]),
        zone("thermal_zone5", "gpu-thermal", 40.0, &[("passive", 70.0)]),
    ];
    let c = choose(&zones, &th);
    assert_eq!(c.thresholds_celsius, vec![65.0, 70.0, 75.0], "{c:?}");
    assert!(c.thresholds_from.contains("thermal_zone3's passive trip point at 80"), "{}", c.thresholds_from);
    // Raspberry Pi 5-like: only active trips and a critical one at 110.
    let pi = [zone("thermal_zone0", "cpu-thermal", 40.0, &[("active", 50.0), ("active", 75.0), ("critical", 110.0)])];
    let c = choose(&pi, &th);
    assert_eq!(c.thresholds_celsius, vec![75.0, 80.0, 85.0], "{c:?}");
    // A disabled (0 °C) trip is no trip; nothing usable: the built-in thresholds.
    let pkg = [zone("thermal_zone9", "x86_pkg_temp", 40.0, &[("passive", 0.0)])];
    let c = choose(&pkg, &th);
    assert_eq!(c.thresholds_celsius, vec![70.0, 80.0, 90.0]);
    assert!(c.thresholds_from.contains("built-in"), "{}", c.thresholds_from);
    // Configured thresholds win, and other offsets move the stages.
    let fixed = ThermalConfig { stage_thresholds_celsius: vec![60.0, 61.0], ..ThermalConfig::default() };
    assert_eq!(choose(&zones, &fixed).thresholds_celsius, vec![60.0, 61.0]);
    let two = ThermalConfig { trip_offsets_celsius: vec![8.0, 2.0], ..ThermalConfig::default() };
    assert_eq!(choose(&zones, &two).thresholds_celsius, vec![72.0, 78.0]);
    assert_eq!(choose(&pkg, &two).thresholds_celsius, vec![80.0, 90.0]);
}

#[test]
fn the_limit_is_the_passive_trip_else_the_critical_one_less_its_margin_else_past_the_hottest_stage() {
    let th = ThermalConfig::default();
    let rk = [
        zone("thermal_zone1", "bigcore0-thermal", 40.0, &[("passive", 85.0), ("critical", 115.0)]),
        zone("thermal_zone5", "gpu-thermal", 40.0, &[("passive", 70.0)]),
    ];
    let c = choose(&rk, &th);
    assert_eq!((c.limit_celsius, c.limit_from), (85.0, LimitFrom::PassiveTrip), "the GPU's 70 °C trip is not the CPU's: {c:?}");
    // Configured thresholds do not move the hardware's limit.
    let fixed = ThermalConfig { stage_thresholds_celsius: vec![60.0, 61.0], ..ThermalConfig::default() };
    assert_eq!(choose(&rk, &fixed).limit_celsius, 85.0);
    let pi = [zone("thermal_zone0", "cpu-thermal", 40.0, &[("active", 50.0), ("critical", 110.0)])];
    let c = choose(&pi, &th);
    assert_eq!((c.limit_celsius, c.limit_from), (90.0, LimitFrom::CriticalTrip), "{c:?}");
    // No usable trip: past the hottest stage by the smallest offset.
    let pkg = [zone("thermal_zone9", "x86_pkg_temp", 40.0, &[("passive", 0.0)])];
    let c = choose(&pkg, &th);
    assert_eq!((c.limit_celsius, c.limit_from), (95.0, LimitFrom::Thresholds), "{c:?}");
    assert_eq!(choose(&pkg, &fixed).limit_celsius, 66.0);
    assert_eq!(c.limit_from.as_str(), "thresholds");
}
