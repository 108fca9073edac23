//! hwmon power meters: `<sysfs>/class/hwmon/hwmon*/power*_input` (µW, instantaneous), with
//! energy integrated over each interval since hwmon gives no counter here.

use crate::fsread::{numbered_entries, read_u64};
use joule_core::snapshot::PowerDomain;
use joule_core::Origin;
use std::collections::HashMap;
use std::fs;
use std::path::Path;

#[derive(Default)]
pub(crate) struct HwmonPower {
    total_joules: HashMap<String, f64>,
}

impl HwmonPower {
    /// Every `power<N>_input` of every chip, as a domain `hwmon<M>/power<N>`.
    pub(crate) fn read(&mut self, sysfs_root: &Path, interval_ms: u64) -> Vec<PowerDomain> {
        let mut out = Vec::new();
        for (m, dir) in numbered_entries(&sysfs_root.join("class/hwmon"), "hwmon") {
            let Ok(rd) = fs::read_dir(&dir) else { continue };
            let mut inputs: Vec<u32> = rd
                .flatten()
                .filter_map(|e| e.file_name().to_str()?.strip_prefix("power")?.strip_suffix("_input")?.parse().ok())
                .collect();
            inputs.sort_unstable();
            for n in inputs {
                let Ok(uw) = read_u64(&dir.join(format!("power{n}_input"))) else { continue };
                let name = format!("hwmon{m}/power{n}");
                let watts = uw as f64 / 1e6;
                let total = self.total_joules.entry(name.clone()).or_insert(0.0);
                *total += watts * interval_ms as f64 / 1000.0;
                out.push(PowerDomain { name, watts, energy_joules_total: *total, source: Origin::Sensor });
            }
        }
        out
    }
}
