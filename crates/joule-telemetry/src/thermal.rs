//! Temperatures from sysfs: thermal zones (`class/thermal/thermal_zone*`, with their trip
//! points) and hwmon chips (`class/hwmon/hwmon*/temp*_input`), all labelled `sensor`. With
//! neither present the source says so in a note and the RC model stands in.

use crate::fsread::{numbered_entries, read_i64, read_trimmed};
use crate::{Source, SourceError};
use joule_core::snapshot::{ThermalZone, TripPoint};
use joule_core::{Origin, Snapshot};
use std::fs;
use std::path::{Path, PathBuf};

pub struct ThermalSource {
    sysfs_root: PathBuf,
}

impl ThermalSource {
    pub fn new(sysfs_root: impl Into<PathBuf>) -> Self {
        Self { sysfs_root: sysfs_root.into() }
    }
}

fn millis_to_celsius(m: i64) -> f64 {
    m as f64 / 1000.0
}

/// One thermal zone; an error when its temperature cannot be read (some firmware zones return
/// EAGAIN/ENODATA until they are enabled), reported by the caller as a note.
fn read_zone(dir: &Path, name: &str) -> Result<ThermalZone, std::io::Error> {
    let temp = read_i64(&dir.join("temp"))?;
    let mut trips = Vec::new();
    for i in 0.. {
        let Ok(kind) = read_trimmed(&dir.join(format!("trip_point_{i}_type"))) else { break };
        let Ok(t) = read_i64(&dir.join(format!("trip_point_{i}_temp"))) else { continue };
        let hyst = read_i64(&dir.join(format!("trip_point_{i}_hyst"))).unwrap_or(0);
        trips.push(TripPoint { kind, temp_celsius: millis_to_celsius(t), hysteresis_celsius: millis_to_celsius(hyst) });
    }
    Ok(ThermalZone {
        name: name.to_string(),
        kind: read_trimmed(&dir.join("type")).unwrap_or_default(),
        temp_celsius: millis_to_celsius(temp),
        trips,
        source: Origin::Sensor,
    })
}

/// `temp*_input` of one hwmon chip; `temp<N>_crit` (with `_crit_hyst`) and `temp<N>_max`
/// become `critical` and `hot` trip points.
fn read_hwmon(dir: &Path, hwmon: &str, out: &mut Vec<ThermalZone>) {
    let chip = read_trimmed(&dir.join("name")).unwrap_or_default();
    let Ok(rd) = fs::read_dir(dir) else { return };
    let mut inputs: Vec<u32> = rd
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.strip_prefix("temp")?.strip_suffix("_input")?.parse().ok())
        .collect();
    inputs.sort_unstable();
    for n in inputs {
        let Ok(t) = read_i64(&dir.join(format!("temp{n}_input"))) else { continue };
        let mut trips = Vec::new();
        if let Ok(max) = read_i64(&dir.join(format!("temp{n}_max"))) {
            trips.push(TripPoint { kind: "hot".into(), temp_celsius: millis_to_celsius(max), hysteresis_celsius: 0.0 });
        }
        if let Ok(crit) = read_i64(&dir.join(format!("temp{n}_crit"))) {
            // tempN_crit_hyst is an absolute temperature, TripPoint wants the distance.
            let hyst = read_i64(&dir.join(format!("temp{n}_crit_hyst"))).map(|h| crit - h).unwrap_or(0);
            trips.push(TripPoint { kind: "critical".into(), temp_celsius: millis_to_celsius(crit), hysteresis_celsius: millis_to_celsius(hyst) });
        }
        out.push(ThermalZone { name: format!("{hwmon}/temp{n}"), kind: chip.clone(), temp_celsius: millis_to_celsius(t), trips, source: Origin::Sensor });
    }
}

impl Source for ThermalSource {
    fn name(&self) -> &'static str {
        "thermal"
    }

    fn sample(&mut self, snap: &mut Snapshot) -> Result<(), SourceError> {
        let mut zones = Vec::new();
        let thermal_dir = self.sysfs_root.join("class/thermal");
        for (n, dir) in numbered_entries(&thermal_dir, "thermal_zone") {
            let name = format!("thermal_zone{n}");
            match read_zone(&dir, &name) {
                Ok(z) => zones.push(z),
                Err(e) => snap.notes.push(format!("{name}: temperature unreadable ({e})")),
            }
        }
        for (n, dir) in numbered_entries(&self.sysfs_root.join("class/hwmon"), "hwmon") {
            read_hwmon(&dir, &format!("hwmon{n}"), &mut zones);
        }
        if zones.is_empty() {
            snap.notes.push("no thermal sensor (no /sys/class/thermal zones, no hwmon temp): temperature is a model".into());
        }
        snap.thermal.zones = zones;
        Ok(())
    }
}
