//! Temperatures from sysfs: thermal zones (`class/thermal/thermal_zone*`, with their trip
//! points) and hwmon chips (`class/hwmon/hwmon*/temp*_input`), all labelled `sensor`. With
//! neither present the source says so in a note and the RC model stands in. Zones, names and
//! trip points are discovered on the first sample and again every ~10 s (or after a sensor
//! went away); each sample reads only the temperatures.

use crate::fsread::{numbered_files, read_num};
use crate::rediscover::{gone, Rediscover};
use crate::{Source, SourceError};
use joule_core::effects::RealEffects;
use joule_core::fsread::read_trimmed;
use joule_core::snapshot::{ThermalZone, TripPoint};
use joule_core::{Origin, Snapshot};
use std::path::{Path, PathBuf};

/// One discovered sensor: everything but its temperature.
struct Sensor {
    name: String,
    kind: String,
    temp: PathBuf,
    trips: Vec<TripPoint>,
    /// A thermal zone (an unreadable temperature is a note), not a hwmon channel.
    zone: bool,
}

pub struct ThermalSource {
    sysfs_root: PathBuf,
    sensors: Vec<Sensor>,
    rediscover: Rediscover,
}

impl ThermalSource {
    pub fn new(sysfs_root: impl Into<PathBuf>) -> Self {
        Self { sysfs_root: sysfs_root.into(), sensors: Vec::new(), rediscover: Rediscover::default() }
    }

    fn discover(&mut self) {
        self.sensors.clear();
        for (n, dir) in numbered_files(&self.sysfs_root.join("class/thermal"), "thermal_zone", "") {
            self.sensors.push(zone(&dir, format!("thermal_zone{n}")));
        }
        for (n, dir) in numbered_files(&self.sysfs_root.join("class/hwmon"), "hwmon", "") {
            hwmon(&dir, &format!("hwmon{n}"), &mut self.sensors);
        }
    }
}

/// Every sensor under `sysfs_root` with its temperature and trip points, read once (for the
/// choice of sensors and thresholds at start, and `joule doctor`).
pub fn read_once(sysfs_root: &Path) -> Vec<ThermalZone> {
    let mut src = ThermalSource::new(sysfs_root);
    let mut snap = Snapshot::default();
    let _ = src.sample(&mut snap);
    snap.thermal.zones
}

fn millis_to_celsius(m: i64) -> f64 {
    m as f64 / 1000.0
}

/// One thermal zone with its trip points.
fn zone(dir: &Path, name: String) -> Sensor {
    let mut trips = Vec::new();
    for i in 0.. {
        let Ok(kind) = read_trimmed(&RealEffects, &dir.join(format!("trip_point_{i}_type"))) else { break };
        let Ok(t) = read_num::<i64>(&dir.join(format!("trip_point_{i}_temp"))) else { continue };
        let hyst = read_num::<i64>(&dir.join(format!("trip_point_{i}_hyst"))).unwrap_or(0);
        trips.push(TripPoint { kind, temp_celsius: millis_to_celsius(t), hysteresis_celsius: millis_to_celsius(hyst) });
    }
    Sensor { name, kind: read_trimmed(&RealEffects, &dir.join("type")).unwrap_or_default(), temp: dir.join("temp"), trips, zone: true }
}

/// `temp*_input` of one hwmon chip; `temp<N>_crit` (with `_crit_hyst`) and `temp<N>_max`
/// become `critical` and `hot` trip points.
fn hwmon(dir: &Path, hwmon: &str, out: &mut Vec<Sensor>) {
    let chip = read_trimmed(&RealEffects, &dir.join("name")).unwrap_or_default();
    for (n, temp) in numbered_files(dir, "temp", "_input") {
        let mut trips = Vec::new();
        if let Ok(max) = read_num::<i64>(&dir.join(format!("temp{n}_max"))) {
            trips.push(TripPoint { kind: "hot".into(), temp_celsius: millis_to_celsius(max), hysteresis_celsius: 0.0 });
        }
        if let Ok(crit) = read_num::<i64>(&dir.join(format!("temp{n}_crit"))) {
            // tempN_crit_hyst is an absolute temperature, TripPoint wants the distance.
            let hyst = read_num::<i64>(&dir.join(format!("temp{n}_crit_hyst"))).map(|h| crit - h).unwrap_or(0);
            trips.push(TripPoint { kind: "critical".into(), temp_celsius: millis_to_celsius(crit), hysteresis_celsius: millis_to_celsius(hyst) });
        }
        out.push(Sensor { name: format!("{hwmon}/temp{n}"), kind: chip.clone(), temp, trips, zone: false });
    }
}

impl Source for ThermalSource {
    fn name(&self) -> &'static str {
        "thermal"
    }

    fn sample(&mut self, snap: &mut Snapshot) -> Result<(), SourceError> {
        if self.rediscover.due(snap.interval_ms) {
            self.discover();
        }
        let mut zones = Vec::with_capacity(self.sensors.len());
        for s in &self.sensors {
            match read_num::<i64>(&s.temp) {
                Ok(t) => zones.push(ThermalZone {
                    name: s.name.clone(),
                    kind: s.kind.clone(),
                    temp_celsius: millis_to_celsius(t),
                    trips: s.trips.clone(),
                    source: Origin::Sensor,
                }),
                Err(e) => {
                    if gone(&e) {
                        self.rediscover.invalidate();
                    }
                    // Some firmware zones return EAGAIN/ENODATA until they are enabled.
                    if s.zone {
                        snap.notes.push(format!("{}: temperature unreadable ({e})", s.name));
                    }
                }
            }
        }
        if zones.is_empty() {
            snap.notes.push("no thermal sensor (no /sys/class/thermal zones, no hwmon temp): temperature is a model".into());
        }
        snap.thermal.zones = zones;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use joule_core::config::ThermalConfig;
    use joule_core::thermal_sensors::choose;

    fn board(name: &str) -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/boards").join(name).join("sys")
    }

    #[test]
    fn the_boards_cpu_zones_and_trip_points_place_the_stages() {
        let th = ThermalConfig::default();
        let rk = choose(&read_once(&board("rk3588")), &th);
        let used: Vec<_> = rk.used().collect();
        assert_eq!(used, ["thermal_zone0", "thermal_zone1", "thermal_zone2", "thermal_zone3"], "{rk:#?}");
        assert!(rk.sensors.iter().any(|s| s.kind == "gpu-thermal" && !s.used), "{rk:#?}");
        assert_eq!(rk.thresholds_celsius, vec![70.0, 75.0, 80.0], "below the 85 °C passive trips: {}", rk.thresholds_from);
        let pi = choose(&read_once(&board("rpi5")), &th);
        // The zone and its hwmon twin (`cpu_thermal`, the same sensor); the fan is no sensor.
        assert_eq!(pi.used().collect::<Vec<_>>(), ["thermal_zone0", "hwmon0/temp1"], "{pi:#?}");
        assert_eq!(pi.thresholds_celsius, vec![75.0, 80.0, 85.0], "110 °C critical minus 20, minus the offsets: {}", pi.thresholds_from);
        // With the board read from its device tree, the firmware's 80 °C comes first.
        let fw = joule_core::board_limits::read(&board("rpi5"), &board("rpi5").join("no-boot"));
        let pi = joule_core::thermal_sensors::choose_on(&read_once(&board("rpi5")), &th, fw.as_ref());
        assert_eq!((pi.limit_celsius, pi.limit_from.as_str()), (80.0, "firmware"), "{pi:#?}");
        assert_eq!(pi.thresholds_celsius, vec![77.0, 79.0, 79.6]);
        let rk = joule_core::thermal_sensors::choose_on(&read_once(&board("rk3588")), &th, None);
        assert_eq!((rk.limit_celsius, rk.limit_from.as_str()), (85.0, "passive_trip"));
        assert_eq!(joule_core::board_limits::read(&board("rk3588"), &board("rk3588")), None, "no device tree in that fixture");
    }
}
