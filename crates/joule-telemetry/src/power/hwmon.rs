//! hwmon power meters: `<sysfs>/class/hwmon/hwmon*/power*_input` (µW, instantaneous). hwmon
//! gives no energy counter here, so `energy_joules_total` is joule's own integration of these
//! point readings (each reading × the interval), derived from sensor power: it is labelled
//! `sensor` like the power it comes from, but it misses whatever the power did between two
//! readings.

use crate::fsread::{numbered_files, read_num};
use crate::rediscover::gone;
use joule_core::effects::RealEffects;
use joule_core::fsread::read_trimmed;
use joule_core::snapshot::PowerDomain;
use joule_core::Origin;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// What one pass over the hwmon chips found.
#[derive(Debug, Default)]
pub(crate) struct HwmonReading {
    /// Every `power<N>_input` of every chip, as a domain `hwmon<M>/power<N>`.
    pub domains: Vec<PowerDomain>,
    /// Machine power, when some channel is a machine total (see [`is_machine_total`]): the sum
    /// of those channels, marked `part_of_total`.
    pub machine_watts: Option<f64>,
}

/// Whether a channel measures the whole machine. The sum of every hwmon power channel is
/// not machine power: a PSU's `pin` and `pout` measure the same energy twice and a GPU's
/// board power is one part among others. Only the ACPI power meter (chip `power_meter`) and
/// channels whose label names a system or total power are machine totals.
fn is_machine_total(chip: &str, label: Option<&str>) -> bool {
    if chip == "power_meter" {
        return true;
    }
    label.map(str::to_ascii_lowercase).is_some_and(|l| l.contains("system") || l.contains("total"))
}

/// A discovered channel: all but its reading.
struct Channel {
    name: String,
    input: PathBuf,
    part_of_total: bool,
}

#[derive(Default)]
pub(crate) struct HwmonPower {
    channels: Vec<Channel>,
    total_joules: HashMap<String, f64>,
}

impl HwmonPower {
    /// Lists every `power<N>_input` of every chip, with the chip's name and the channel's label.
    pub(crate) fn discover(&mut self, sysfs_root: &Path) {
        self.channels.clear();
        for (m, dir) in numbered_files(&sysfs_root.join("class/hwmon"), "hwmon", "") {
            let chip = read_trimmed(&RealEffects, &dir.join("name")).unwrap_or_default();
            for (n, input) in numbered_files(&dir, "power", "_input") {
                let label = read_trimmed(&RealEffects, &dir.join(format!("power{n}_label"))).ok();
                self.channels.push(Channel { name: format!("hwmon{m}/power{n}"), input, part_of_total: is_machine_total(&chip, label.as_deref()) });
            }
        }
    }

    /// Reads every discovered channel. The flag is true when one read as gone.
    pub(crate) fn read(&mut self, interval_ms: u64) -> (HwmonReading, bool) {
        let mut domains = Vec::with_capacity(self.channels.len());
        let mut stale = false;
        for c in &self.channels {
            let uw = match read_num::<u64>(&c.input) {
                Ok(uw) => uw,
                Err(e) => {
                    stale |= gone(&e);
                    continue;
                }
            };
            let watts = uw as f64 / 1e6;
            let total = self.total_joules.entry(c.name.clone()).or_insert(0.0);
            *total += watts * interval_ms as f64 / 1000.0;
            domains.push(PowerDomain { name: c.name.clone(), watts, energy_joules_total: *total, source: Origin::Sensor, part_of_total: c.part_of_total });
        }
        let totals: Vec<f64> = domains.iter().filter(|d| d.part_of_total).map(|d| d.watts).collect();
        (HwmonReading { machine_watts: (!totals.is_empty()).then(|| totals.iter().sum()), domains }, stale)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_power_meter_and_system_or_total_labels_are_machine_totals() {
        assert!(is_machine_total("power_meter", None));
        assert!(is_machine_total("ipmi", Some("System Power")));
        assert!(is_machine_total("xyz", Some("Total input")));
        assert!(!is_machine_total("dps920ab", Some("pin")));
        assert!(!is_machine_total("dps920ab", Some("pout1")));
        assert!(!is_machine_total("amdgpu", Some("PPT")));
        assert!(!is_machine_total("amdgpu", None));
    }
}
