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

fn pi_firmware() -> BoardLimit {
    crate::board_limits::for_board(&["raspberrypi,5-model-b".into(), "brcm,bcm2712".into()], None).unwrap()
}

#[test]
fn on_a_pi_the_stages_finish_under_the_firmwares_80_not_the_critical_trip_less_margin() {
    let th = ThermalConfig::default();
    let pi = [zone("thermal_zone0", "cpu-thermal", 40.0, &[("active", 50.0), ("critical", 110.0)])];
    let fw = pi_firmware();
    let c = choose_on(&pi, &th, Some(&fw));
    assert_eq!((c.limit_celsius, c.limit_from, c.limit_from.as_str()), (80.0, LimitFrom::Firmware, "firmware"), "{c:?}");
    assert_eq!(c.thresholds_celsius, vec![77.0, 79.0, 79.6], "{c:?}");
    assert!(c.thresholds_celsius.iter().all(|t| *t < 80.0));
    assert_eq!((c.thresholds_kind, c.hysteresis_celsius), ("firmware", 0.5));
    assert!(c.thresholds_from.contains("firmware limit at 80 °C (raspberrypi,5-model-b"), "{}", c.thresholds_from);
    // Other offsets or another hysteresis: the user's pair, from the firmware's limit.
    let two = ThermalConfig { trip_offsets_celsius: vec![8.0, 2.0], ..ThermalConfig::default() };
    let c = choose_on(&pi, &two, Some(&fw));
    assert_eq!((c.thresholds_celsius.clone(), c.hysteresis_celsius), (vec![72.0, 78.0], 3.0));
    let h = ThermalConfig { hysteresis_celsius: 1.0, ..ThermalConfig::default() };
    assert_eq!(choose_on(&pi, &h, Some(&fw)).thresholds_celsius, vec![65.0, 70.0, 75.0]);
    // Configured thresholds win and keep their hysteresis; the limit stays the firmware's.
    let fixed = ThermalConfig { stage_thresholds_celsius: vec![60.0, 70.0], ..ThermalConfig::default() };
    let c = choose_on(&pi, &fixed, Some(&fw));
    assert_eq!((c.thresholds_celsius.clone(), c.hysteresis_celsius, c.limit_celsius), (vec![60.0, 70.0], 3.0, 80.0));
}

#[test]
fn a_trip_point_under_the_firmwares_limit_still_comes_first_and_other_boards_keep_the_trip_rule() {
    let th = ThermalConfig::default();
    let fw = pi_firmware();
    let early = [zone("thermal_zone0", "cpu-thermal", 40.0, &[("passive", 70.0), ("critical", 110.0)])];
    let c = choose_on(&early, &th, Some(&fw));
    assert_eq!((c.limit_celsius, c.limit_from), (70.0, LimitFrom::PassiveTrip), "{c:?}");
    assert_eq!((c.thresholds_celsius.clone(), c.hysteresis_celsius), (vec![55.0, 60.0, 65.0], 3.0));
    // A tie goes to the firmware: the kernel cannot see it.
    let tie = [zone("thermal_zone0", "plant-rpi5", 40.0, &[("passive", 80.0)])];
    let named = ThermalConfig { zones: vec!["thermal_zone0".into()], ..ThermalConfig::default() };
    assert_eq!(choose_on(&tie, &named, Some(&fw)).limit_from, LimitFrom::Firmware);
    // No board limit: today's rule, unchanged.
    let pi = [zone("thermal_zone0", "cpu-thermal", 40.0, &[("critical", 110.0)])];
    assert_eq!(choose_on(&pi, &th, None), choose(&pi, &th));
    assert_eq!(choose(&pi, &th).limit_from, LimitFrom::CriticalTrip);
}
