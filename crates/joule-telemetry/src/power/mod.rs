//! Machine power from sensors: RAPL energy counters first, hwmon machine power meters
//! otherwise, all labelled `sensor`. Every hwmon power channel is listed as a domain, but only
//! a machine total (ACPI `power_meter`, a system/total label) makes `snap.power.watts`; each
//! domain's `part_of_total` says which. Without a sensor total the source lists the domains,
//! leaves the rest of `snap.power` alone and notes it; the power model fills it afterwards.

mod hwmon;
mod rapl;

use crate::rediscover::Rediscover;
use crate::{Source, SourceError};
use joule_core::snapshot::Power;
use joule_core::{Origin, Snapshot};
use std::path::PathBuf;

/// RAPL zones (name, `max_energy_range_uj`) and hwmon channels (chip name, label) are
/// discovered on the first sample and again every ~10 s or after one went away; each sample
/// reads only `energy_uj` and `power*_input`.
pub struct PowerSource {
    sysfs_root: PathBuf,
    rapl: rapl::Rapl,
    hwmon: hwmon::HwmonPower,
    rediscover: Rediscover,
}

impl PowerSource {
    pub fn new(sysfs_root: impl Into<PathBuf>) -> Self {
        Self { sysfs_root: sysfs_root.into(), rapl: rapl::Rapl::default(), hwmon: hwmon::HwmonPower::default(), rediscover: Rediscover::default() }
    }
}

impl Source for PowerSource {
    fn name(&self) -> &'static str {
        "power"
    }

    fn sample(&mut self, snap: &mut Snapshot) -> Result<(), SourceError> {
        if self.rediscover.due(snap.interval_ms) {
            self.rapl.discover(&self.sysfs_root);
            self.hwmon.discover(&self.sysfs_root);
        }
        let (rapl, rapl_stale) = self.rapl.read(snap.interval_ms);
        let (mut hwmon, hwmon_stale) = self.hwmon.read(snap.interval_ms);
        if rapl_stale || hwmon_stale {
            self.rediscover.invalidate();
        }
        // RAPL first: a machine with RAPL takes its total from RAPL, also on its first reading
        // (no rate yet: the model stands in), never from hwmon.
        let rapl_counts = rapl.present && !rapl.denied;
        let watts = if rapl_counts { rapl.machine_watts } else { hwmon.machine_watts };
        if rapl_counts {
            for d in &mut hwmon.domains {
                d.part_of_total = false;
            }
        }
        let hwmon_channels = hwmon.domains.len();
        let mut domains = rapl.domains;
        domains.extend(hwmon.domains);
        if let Some(watts) = watts {
            snap.power = Power { watts, source: Origin::Sensor, domains };
            return Ok(());
        }
        // No sensor total: the sensor domains stay listed (none part of the total) and the
        // power model adds its own.
        snap.power.domains = domains;
        if rapl.denied {
            snap.notes.push("RAPL energy_uj not readable (root only since Linux 5.10): power is a model".into());
        } else if rapl.present {
            snap.notes.push("RAPL on its first reading (a rate needs two): power is a model this sample".into());
        } else if hwmon_channels > 0 {
            snap.notes.push(format!(
                "no machine power sensor (no RAPL; {hwmon_channels} hwmon power channels, none a power_meter or a system/total channel): power is a model"
            ));
        } else {
            snap.notes.push("no power sensor (no powercap intel-rapl zones, no hwmon power*_input): power is a model".into());
        }
        Ok(())
    }
}
