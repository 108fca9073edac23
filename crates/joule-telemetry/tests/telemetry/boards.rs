//! The board fixtures (`testdata/boards/`, sysfs as the Raspberry Pi 5's and an RK3588's kernels
//! lay it out, symlinks included): zones with the device tree's trip points read as `sensor`,
//! cpufreq as `kernel`, and — no RAPL, no power meter — power from the model, labelled `model`.

use crate::common::{fixture, sample};
use joule_core::config::PowerModelConfig;
use joule_core::snapshot::TripPoint;
use joule_core::Origin;
use joule_telemetry::{FreqSource, PowerModel, PowerSource, Source, ThermalSource};

fn trip(kind: &str, temp_celsius: f64, hysteresis_celsius: f64) -> TripPoint {
    TripPoint { kind: kind.into(), temp_celsius, hysteresis_celsius }
}

/// Power source then power model on one snapshot, as the Sampler runs them.
fn power_of(board: &str) -> joule_core::Snapshot {
    let mut snap = sample(&mut PowerSource::new(fixture(board)), 0);
    snap.interval_ms = 100;
    PowerModel::new(&PowerModelConfig::default()).sample(&mut snap).unwrap();
    snap
}

#[test]
fn rpi5_cpu_thermal_zone_with_the_fan_trips_and_its_hwmon_mirror() {
    let snap = sample(&mut ThermalSource::new(fixture("boards/rpi5/sys")), 0);
    let z = &snap.thermal.zones;
    let names: Vec<(&str, &str)> = z.iter().map(|z| (z.name.as_str(), z.kind.as_str())).collect();
    assert_eq!(names, [("thermal_zone0", "cpu-thermal"), ("hwmon0/temp1", "cpu_thermal")], "the pwmfan chip has no temperature");
    assert!(z.iter().all(|z| z.source == Origin::Sensor && z.temp_celsius == 52.35));
    assert_eq!(
        z[0].trips,
        [trip("critical", 110.0, 0.0), trip("active", 50.0, 5.0), trip("active", 60.0, 5.0), trip("active", 67.5, 5.0), trip("active", 75.0, 5.0)],
        "bcm2712-ds.dtsi's critical trip first, then the four the Pi 5 board file appends"
    );
    assert_eq!(z[1].trips, [trip("critical", 110.0, 0.0)], "thermal_hwmon's temp1_crit");
    assert!(snap.notes.is_empty(), "{:?}", snap.notes);
}

#[test]
fn rk3588_seven_tsadc_zones_in_channel_order() {
    let snap = sample(&mut ThermalSource::new(fixture("boards/rk3588/sys")), 0);
    let kinds: Vec<&str> = snap.thermal.zones.iter().map(|z| z.kind.as_str()).collect();
    assert_eq!(kinds, ["package-thermal", "bigcore0-thermal", "bigcore2-thermal", "littlecore-thermal", "center-thermal", "gpu-thermal", "npu-thermal"]);
    let z = &snap.thermal.zones;
    assert!(z.iter().all(|z| z.source == Origin::Sensor));
    assert_eq!(z[3].trips, [trip("passive", 85.0, 2.0), trip("critical", 115.0, 0.0)]);
    assert_eq!(z[0].trips, [trip("critical", 115.0, 0.0)], "the package sensor has no passive trip");
    assert_eq!(z[1].temp_celsius, 42.6);
}

#[test]
fn cpufreq_through_the_policy_symlinks_is_the_kernels() {
    let pi = sample(&mut FreqSource::new(fixture("boards/rpi5/sys")), 0);
    let f: Vec<(u32, u64, u64)> = pi.frequency.iter().map(|f| (f.cpu, f.cpuinfo_min_khz, f.cpuinfo_max_khz)).collect();
    assert_eq!(f, [(0, 1_500_000, 2_400_000), (1, 1_500_000, 2_400_000), (2, 1_500_000, 2_400_000), (3, 1_500_000, 2_400_000)]);
    let rk = sample(&mut FreqSource::new(fixture("boards/rk3588/sys")), 0);
    assert_eq!(rk.frequency.len(), 8);
    let max: Vec<u64> = rk.frequency.iter().map(|f| f.max_khz).collect();
    assert_eq!(max, [1_800_000, 1_800_000, 1_800_000, 1_800_000, 2_400_000, 2_400_000, 2_400_000, 2_400_000], "policy0, policy4, policy6");
    assert!(pi.frequency.iter().chain(&rk.frequency).all(|f| f.source == Origin::Kernel));
    assert!(pi.notes.is_empty() && rk.notes.is_empty());
}

#[test]
fn no_rapl_and_no_power_meter_so_power_is_the_model() {
    for board in ["boards/rpi5/sys", "boards/rk3588/sys"] {
        let snap = power_of(board);
        assert_eq!(snap.power.source, Origin::Model, "{board}");
        assert!(snap.power.domains.iter().all(|d| d.source == Origin::Model), "{board}: {:?}", snap.power.domains);
        assert!(snap.notes.iter().any(|n| n.starts_with("no power sensor")), "{board}: {:?}", snap.notes);
    }
}
