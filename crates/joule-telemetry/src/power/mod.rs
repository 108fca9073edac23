//! Machine power from sensors: RAPL energy counters first, hwmon power meters otherwise, all
//! labelled `sensor`. Without either the source leaves `snap.power` alone and notes it; the
//! power model fills it afterwards.

mod hwmon;
mod rapl;

use crate::{Source, SourceError};
use joule_core::snapshot::Power;
use joule_core::{Origin, Snapshot};
use std::path::PathBuf;

pub struct PowerSource {
    sysfs_root: PathBuf,
    rapl: rapl::Rapl,
    hwmon: hwmon::HwmonPower,
}

impl PowerSource {
    pub fn new(sysfs_root: impl Into<PathBuf>) -> Self {
        Self { sysfs_root: sysfs_root.into(), rapl: rapl::Rapl::default(), hwmon: hwmon::HwmonPower::default() }
    }
}

impl Source for PowerSource {
    fn name(&self) -> &'static str {
        "power"
    }

    fn sample(&mut self, snap: &mut Snapshot) -> Result<(), SourceError> {
        let rapl = self.rapl.read(&self.sysfs_root, snap.interval_ms);
        let hwmon = self.hwmon.read(&self.sysfs_root, snap.interval_ms);
        let watts = rapl.machine_watts.or_else(|| (!hwmon.is_empty()).then(|| hwmon.iter().map(|d| d.watts).sum()));
        let mut domains = rapl.domains;
        domains.extend(hwmon);
        if let Some(watts) = watts {
            snap.power = Power { watts, source: Origin::Sensor, domains };
            return Ok(());
        }
        if rapl.denied {
            snap.notes.push("RAPL energy_uj not readable (root only since Linux 5.10): power is a model".into());
        } else if !rapl.present {
            snap.notes.push("no power sensor (no powercap intel-rapl zones, no hwmon power*_input): power is a model".into());
        }
        // RAPL present but on its first reading: no rate yet, the model stands in once.
        Ok(())
    }
}
