//! Thermal zones, hwmon temperatures, cpufreq and sched_ext on fixtures, and the notes when absent.

use crate::common::{fixture, sample};
use joule_core::snapshot::TripPoint;
use joule_core::Origin;
use joule_telemetry::{FreqSource, ThermalSource};

fn trip(kind: &str, temp_celsius: f64, hysteresis_celsius: f64) -> TripPoint {
    TripPoint { kind: kind.into(), temp_celsius, hysteresis_celsius }
}

#[test]
fn zones_with_trips_and_hwmon_temps() {
    let snap = sample(&mut ThermalSource::new(fixture("sys-thermal")), 0);
    let z = &snap.thermal.zones;
    let names: Vec<&str> = z.iter().map(|z| z.name.as_str()).collect();
    assert_eq!(names, ["thermal_zone0", "thermal_zone1", "hwmon0/temp1", "hwmon0/temp2", "hwmon1/temp1"]);
    assert!(z.iter().all(|z| z.source == Origin::Sensor));
    assert_eq!((z[0].kind.as_str(), z[0].temp_celsius), ("acpitz", 47.0));
    assert_eq!(z[0].trips, vec![trip("passive", 80.0, 2.0), trip("critical", 105.0, 0.0)]);
    assert_eq!((z[1].kind.as_str(), z[1].temp_celsius, z[1].trips.len()), ("x86_pkg_temp", 52.5, 0));
    assert_eq!((z[2].kind.as_str(), z[2].temp_celsius), ("coretemp", 55.0));
    assert_eq!(z[2].trips, vec![trip("hot", 90.0, 0.0), trip("critical", 100.0, 5.0)]);
    assert_eq!((z[4].kind.as_str(), z[4].temp_celsius), ("nvme", -1.5));
    // thermal_zone2 has no temp: a note, not an error, and no "no sensor" note.
    assert!(snap.notes.iter().any(|n| n.starts_with("thermal_zone2: temperature unreadable")), "{:?}", snap.notes);
    assert!(!snap.notes.iter().any(|n| n.starts_with("no thermal sensor")));
}

#[test]
fn no_thermal_sensor_is_a_note() {
    let empty = tempfile::tempdir().unwrap();
    let snap = sample(&mut ThermalSource::new(empty.path()), 0);
    assert!(snap.thermal.zones.is_empty());
    assert_eq!(snap.notes, ["no thermal sensor (no /sys/class/thermal zones, no hwmon temp): temperature is a model"]);
}

#[test]
fn cpufreq_of_each_cpu() {
    let snap = sample(&mut FreqSource::new(fixture("sys-cpufreq")), 0);
    let f: Vec<(u32, u64, u64, u64)> = snap.frequency.iter().map(|f| (f.cpu, f.cur_khz, f.min_khz, f.max_khz)).collect();
    assert_eq!(f, [(0, 2_400_000, 800_000, 3_500_000), (1, 800_000, 800_000, 3_500_000)]);
    assert!(snap.frequency.iter().all(|f| f.source == Origin::Kernel), "scaling_cur_freq is the kernel's view, not a sensor");
    let empty = tempfile::tempdir().unwrap();
    assert!(sample(&mut FreqSource::new(empty.path()), 0).notes[0].starts_with("no cpufreq"));
}

#[test]
fn sensors_are_discovered_once_then_every_ten_seconds_or_when_one_goes_away() {
    let root = tempfile::tempdir().unwrap();
    crate::common::overlay(&fixture("sys-thermal"), root.path());
    // thermal_zone2 has no temp: its read failing with ENOENT would rediscover every sample.
    std::fs::remove_dir_all(root.path().join("class/thermal/thermal_zone2")).unwrap();
    let mut src = ThermalSource::new(root.path());
    let names = |s: &joule_core::Snapshot| s.thermal.zones.iter().map(|z| z.name.clone()).collect::<Vec<_>>();
    let first = sample(&mut src, 0);
    assert_eq!(first.thermal.zones.len(), 5);
    assert!(first.notes.is_empty(), "{:?}", first.notes);
    // A new chip appears; between discoveries only the known temperatures are read.
    let chip = root.path().join("class/hwmon/hwmon2");
    std::fs::create_dir_all(&chip).unwrap();
    std::fs::write(chip.join("name"), "k10temp\n").unwrap();
    std::fs::write(chip.join("temp1_input"), "61000\n").unwrap();
    std::fs::write(root.path().join("class/thermal/thermal_zone0/temp"), "48000\n").unwrap();
    let snap = sample(&mut src, 100);
    assert_eq!(snap.thermal.zones.len(), 5);
    assert_eq!(snap.thermal.zones[0].temp_celsius, 48.0, "temperatures are read every sample");
    let snap = sample(&mut src, 9_900);
    assert_eq!(names(&snap).last().map(String::as_str), Some("hwmon2/temp1"), "found at the 10 s rediscovery");
    assert_eq!(snap.thermal.zones.last().unwrap().kind, "k10temp");
    // A chip going away is noticed on its read and rediscovered on the next sample.
    std::fs::remove_dir_all(&chip).unwrap();
    assert_eq!(sample(&mut src, 100).thermal.zones.len(), 5);
    std::fs::create_dir_all(&chip).unwrap();
    std::fs::write(chip.join("name"), "k10temp\n").unwrap();
    std::fs::write(chip.join("temp1_input"), "62000\n").unwrap();
    assert_eq!(sample(&mut src, 100).thermal.zones.len(), 6, "rediscovered after the read that found it gone");
}

#[test]
fn sched_ext_state_and_ops_or_absent() {
    use joule_telemetry::SchedExtSource;
    let snap = sample(&mut SchedExtSource::new(fixture("sys-sched-ext/enabled")), 0);
    assert_eq!((snap.sched_ext.state.as_str(), snap.sched_ext.ops.as_str(), snap.sched_ext.source), ("enabled", "joule", Origin::Kernel));
    assert!(snap.sched_ext.ours());
    let snap = sample(&mut SchedExtSource::new(fixture("sys-sched-ext/disabled")), 0);
    assert_eq!((snap.sched_ext.state.as_str(), snap.sched_ext.ops.as_str()), ("disabled", ""), "root/ops exists only while one is loaded");
    assert!(!snap.sched_ext.ours() && snap.notes.is_empty());
    let empty = tempfile::tempdir().unwrap();
    let snap = sample(&mut SchedExtSource::new(empty.path()), 0);
    assert_eq!((snap.sched_ext.state.as_str(), snap.sched_ext.source), ("absent", Origin::Kernel));
    assert!(snap.notes[0].starts_with("no sched_ext"), "{:?}", snap.notes);
}
