//! Power on fixtures: RAPL with a wrapping counter, hwmon power meters, the model standing in
//! when no sensor is read, and the whole Sampler on fixture roots.

use crate::common::{assert_close, fixture, overlay, sample, Staged};
use joule_core::config::TelemetryConfig;
use joule_core::Origin;
use joule_telemetry::{PowerModel, PowerSource, Sampler, Source};

#[test]
fn rapl_wrap_is_counted_and_subzones_are_not_double_counted() {
    let staged = Staged::new("sys-rapl-wrap");
    let mut src = PowerSource::new(staged.root());
    let first = sample(&mut src, 0);
    assert_ne!(first.power.source, Origin::Sensor, "a rate needs two readings");
    staged.advance();
    let snap = sample(&mut src, 500);
    let p = &snap.power;
    assert_eq!(p.source, Origin::Sensor);
    let names: Vec<&str> = p.domains.iter().map(|d| d.name.as_str()).collect();
    assert_eq!(names, ["intel-rapl:0/package-0", "intel-rapl:0:0/core", "intel-rapl:0:1/uncore", "intel-rapl:1/package-1", "intel-rapl:2/psys"]);
    let pkg0 = &p.domains[0];
    // prev = max − 1 J, next = 4 J: 1 J to the wrap plus 4 J after it, over 0.5 s.
    assert_close(pkg0.watts, 10.0);
    assert_close(pkg0.energy_joules_total, (262_143_328_850.0 - 1_000_000.0) / 1e6 + 5.0);
    assert_close(p.domains[1].watts, 4.0);
    assert_close(p.domains[3].watts, 6.0);
    // Machine = package-0 + package-1; core/uncore are inside package-0, psys contains both.
    assert_close(p.watts, 16.0);
    let in_total: Vec<bool> = p.domains.iter().map(|d| d.part_of_total).collect();
    assert_eq!(in_total, [true, false, false, true, false]);
    assert_close(p.domains.iter().filter(|d| d.part_of_total).map(|d| d.watts).sum(), p.watts);
}

#[test]
fn hwmon_power_meter_in_microwatts() {
    let mut src = PowerSource::new(fixture("sys-hwmon-power"));
    sample(&mut src, 0);
    let snap = sample(&mut src, 2000);
    assert_eq!(snap.power.source, Origin::Sensor);
    // The power_meter only: not + the PSU's pin and pout (the same energy twice) + the GPU.
    assert_close(snap.power.watts, 123.456789);
    assert_eq!(snap.power.domains[0].name, "hwmon0/power1");
    assert_close(snap.power.domains[0].energy_joules_total, 123.456789 * 2.0);
    let d: Vec<(&str, bool)> = snap.power.domains.iter().map(|d| (d.name.as_str(), d.part_of_total)).collect();
    assert_eq!(d, [("hwmon0/power1", true), ("hwmon2/power1", false), ("hwmon2/power2", false), ("hwmon3/power1", false)]);
    assert_close(snap.power.domains[3].watts, 75.0);
    assert!(snap.notes.is_empty(), "{:?}", snap.notes);
}

/// One hwmon power channel: number, `power<N>_label`, µW.
type Channel<'a> = (u32, Option<&'a str>, u64);

/// A hwmon tree under a fresh root: `(chip, channels)` per `hwmon<index>`.
fn hwmon_tree(chips: &[(&str, &[Channel])]) -> tempfile::TempDir {
    let t = tempfile::tempdir().unwrap();
    for (m, (chip, channels)) in chips.iter().enumerate() {
        let dir = t.path().join(format!("class/hwmon/hwmon{m}"));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("name"), format!("{chip}\n")).unwrap();
        for (n, label, uw) in channels.iter() {
            std::fs::write(dir.join(format!("power{n}_input")), format!("{uw}\n")).unwrap();
            if let Some(l) = label {
                std::fs::write(dir.join(format!("power{n}_label")), format!("{l}\n")).unwrap();
            }
        }
    }
    t
}

#[test]
fn hwmon_system_labelled_channel_is_the_total_without_a_power_meter() {
    let t = hwmon_tree(&[("nct6798", &[(1, Some("CPU Power"), 40_000_000), (2, Some("System Power"), 90_000_000)])]);
    let snap = sample(&mut PowerSource::new(t.path()), 100);
    assert_eq!(snap.power.source, Origin::Sensor);
    assert_close(snap.power.watts, 90.0);
    let d: Vec<(&str, bool)> = snap.power.domains.iter().map(|d| (d.name.as_str(), d.part_of_total)).collect();
    assert_eq!(d, [("hwmon0/power1", false), ("hwmon0/power2", true)]);
}

#[test]
fn hwmon_without_a_machine_total_is_listed_and_the_model_stands_in() {
    let t = hwmon_tree(&[("dps920ab", &[(1, Some("pin"), 250_000_000), (2, Some("pout1"), 230_000_000)]), ("amdgpu", &[(1, None, 75_000_000)])]);
    let cfg = TelemetryConfig::default();
    let mut sampler = Sampler::from_sources(vec![Box::new(PowerSource::new(t.path())), Box::new(PowerModel::new(&cfg.power_model))]);
    sampler.sample_at(0, 0);
    let snap = sampler.sample_at(100, 100);
    assert_eq!(snap.power.source, Origin::Model);
    assert_close(snap.power.watts, cfg.power_model.idle_watts);
    let d: Vec<(&str, bool, Origin)> = snap.power.domains.iter().map(|d| (d.name.as_str(), d.part_of_total, d.source)).collect();
    assert_eq!(
        d,
        [
            ("hwmon0/power1", false, Origin::Sensor),
            ("hwmon0/power2", false, Origin::Sensor),
            ("hwmon1/power1", false, Origin::Sensor),
            ("model", true, Origin::Model)
        ]
    );
    assert!(snap.notes.iter().any(|n| n.starts_with("no machine power sensor (no RAPL; 3 hwmon power channels")), "{:?}", snap.notes);
}

#[test]
fn rapl_first_reading_lets_the_model_stand_in_not_the_hwmon_meter() {
    let sys = Staged::new("sys-rapl-wrap");
    overlay(&fixture("sys-hwmon-power"), sys.root());
    let cfg = TelemetryConfig::default();
    let mut sampler = Sampler::from_sources(vec![Box::new(PowerSource::new(sys.root())), Box::new(PowerModel::new(&cfg.power_model))]);
    let first = sampler.sample_at(0, 0);
    assert_eq!(first.power.source, Origin::Model);
    assert!(first.notes.iter().any(|n| n.starts_with("RAPL on its first reading")), "{:?}", first.notes);
    let in_total: Vec<&str> = first.power.domains.iter().filter(|d| d.part_of_total).map(|d| d.name.as_str()).collect();
    assert_eq!(in_total, ["model"]);
    sys.advance();
    let snap = sampler.sample_at(500, 500);
    assert_eq!(snap.power.source, Origin::Sensor);
    assert_close(snap.power.watts, 16.0);
    let in_total: Vec<&str> = snap.power.domains.iter().filter(|d| d.part_of_total).map(|d| d.name.as_str()).collect();
    assert_eq!(in_total, ["intel-rapl:0/package-0", "intel-rapl:1/package-1"]);
    assert!(snap.power.domains.iter().any(|d| d.name == "hwmon0/power1"), "the power meter stays listed");
}

#[test]
fn no_power_sensor_is_a_note() {
    let empty = tempfile::tempdir().unwrap();
    let snap = sample(&mut PowerSource::new(empty.path()), 0);
    assert!(snap.notes[0].starts_with("no power sensor"));
    assert!(snap.power.domains.is_empty());
}

fn config(sysfs: &std::path::Path, procfs: &std::path::Path, cgroup: &std::path::Path) -> TelemetryConfig {
    TelemetryConfig { sysfs_root: sysfs.into(), procfs_root: procfs.into(), cgroup_root: cgroup.into(), ..TelemetryConfig::default() }
}

#[test]
fn sampler_on_a_machine_without_sensors_labels_the_models() {
    let proc = Staged::new("proc-two-cpus");
    let sys = tempfile::tempdir().unwrap();
    let cgroup = Staged::new("cgroup-v2");
    let mut sampler = Sampler::new(&config(sys.path(), proc.root(), cgroup.root()));
    sampler.sample_at(1_000, 5_000);
    proc.advance();
    cgroup.advance();
    let snap = sampler.sample_at(1_100, 5_100);
    assert_eq!((snap.taken_at_ms, snap.interval_ms), (1_100, 100));
    // P = idle + Σ util × dynamic = 10 + (0.75 + 30/190) × 8.
    let watts = 10.0 + (0.75 + 30.0 / 190.0) * 8.0;
    assert_eq!(snap.power.source, Origin::Model);
    assert_close(snap.power.watts, watts);
    let model = snap.thermal.model.as_ref().expect("model temperature");
    assert_eq!(model.source, Origin::Model);
    // First sample: since-boot utilisation 1300/5400 on each CPU; the RC model starts at its
    // steady state T_ss(P0) = 25 + P0 × 1.2, then one exact step of 0.1 s towards T_ss(P1)
    // with τ = R·C = 1.2 × 40 = 48 s.
    let p0 = 10.0 + 2.0 * (1300.0 / 5400.0) * 8.0;
    let (t0, t_ss1) = (25.0 + p0 * 1.2, 25.0 + watts * 1.2);
    assert_close(model.temp_celsius, t_ss1 + (t0 - t_ss1) * (-0.1f64 / 48.0).exp());
    assert!(snap.thermal.zones.is_empty());
    for note in ["no thermal sensor", "no power sensor", "no cpufreq"] {
        assert!(snap.notes.iter().any(|n| n.starts_with(note)), "{note} missing from {:?}", snap.notes);
    }
    assert_eq!(snap.stage.value, 0, "left for the agent");
    assert!(snap.runq_latency.is_empty(), "left for the agent");
}

#[test]
fn sampler_prefers_the_rapl_reading_and_drives_the_thermal_model_with_it() {
    let proc = Staged::new("proc-two-cpus");
    let sys = Staged::new("sys-rapl-wrap");
    overlay(&fixture("sys-thermal"), sys.root());
    let mut sampler = Sampler::new(&config(sys.root(), proc.root(), proc.root()));
    let first = sampler.sample_at(0, 0);
    assert_eq!(first.power.source, Origin::Model, "first RAPL reading has no rate: the model stands in once");
    proc.advance();
    sys.advance();
    let snap = sampler.sample_at(500, 500);
    assert_eq!(snap.power.source, Origin::Sensor);
    assert_close(snap.power.watts, 16.0);
    assert_eq!(snap.thermal.zones.len(), 5);
    assert_eq!(snap.thermal.model.as_ref().unwrap().source, Origin::Model);
    assert!(!snap.notes.iter().any(|n| n.starts_with("no thermal sensor") || n.starts_with("no power sensor")));
}

/// A source that always fails, to show one failure costs a note, not the sample.
struct Broken;

impl Source for Broken {
    fn name(&self) -> &'static str {
        "broken"
    }
    fn sample(&mut self, _: &mut joule_core::Snapshot) -> Result<(), joule_telemetry::SourceError> {
        Err(joule_telemetry::SourceError::Parse { path: "/nowhere".into(), detail: "always".into() })
    }
}

#[test]
fn a_failing_source_becomes_a_note_and_the_rest_still_runs() {
    // /proc/stat missing under an empty procfs root: the cpu source fails, the rest runs.
    let empty = tempfile::tempdir().unwrap();
    let mut sampler = Sampler::new(&config(empty.path(), empty.path(), empty.path()));
    let snap = sampler.sample();
    assert!(snap.notes.iter().any(|n| n.starts_with("cpu failed: cannot read")), "{:?}", snap.notes);
    assert_eq!(snap.power.source, Origin::Model);
    assert!(snap.thermal.model.is_some());

    let cfg = TelemetryConfig::default();
    let mut sampler = Sampler::from_sources(vec![Box::new(Broken), Box::new(PowerModel::new(&cfg.power_model))]);
    assert_eq!(sampler.source_names(), ["broken", "power_model"]);
    for _ in 0..2 {
        let snap = sampler.sample();
        assert_eq!(snap.notes, ["broken failed: unexpected content in /nowhere: always"]);
        assert_eq!(snap.power.source, Origin::Model);
    }
}

#[test]
fn hwmon_power_channels_are_discovered_once_then_every_ten_seconds() {
    let t = hwmon_tree(&[("amdgpu", &[(1, None, 75_000_000)])]);
    let mut src = PowerSource::new(t.path());
    sample(&mut src, 0);
    let meter = t.path().join("class/hwmon/hwmon1");
    std::fs::create_dir_all(&meter).unwrap();
    std::fs::write(meter.join("name"), "power_meter\n").unwrap();
    std::fs::write(meter.join("power1_input"), "120000000\n").unwrap();
    std::fs::write(t.path().join("class/hwmon/hwmon0/power1_input"), "80000000\n").unwrap();
    let snap = sample(&mut src, 100);
    assert_ne!(snap.power.source, Origin::Sensor, "the new meter is not listed before the rediscovery");
    assert_close(snap.power.domains[0].watts, 80.0);
    let snap = sample(&mut src, 9_900);
    assert_eq!(snap.power.source, Origin::Sensor);
    assert_close(snap.power.watts, 120.0);
}
