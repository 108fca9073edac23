//! Linear utilisation power model, P = idle + Σ_cpu util_cpu × cpu_dynamic_watts, used only
//! when no power sensor was read this sample. Coefficients come from `[telemetry.power_model]`
//! and are placeholders until someone calibrates them against a meter.

use crate::{Source, SourceError};
use joule_core::config::PowerModelConfig;
use joule_core::snapshot::{Power, PowerDomain};
use joule_core::{Origin, Snapshot};

pub struct PowerModel {
    cfg: PowerModelConfig,
    energy_joules_total: f64,
}

impl PowerModel {
    pub fn new(cfg: &PowerModelConfig) -> Self {
        Self { cfg: cfg.clone(), energy_joules_total: 0.0 }
    }

    /// Power for per-CPU busy fractions (each clamped to 0..1).
    pub(crate) fn watts(&self, utilization: &[f64]) -> f64 {
        self.cfg.idle_watts + utilization.iter().map(|u| u.clamp(0.0, 1.0)).sum::<f64>() * self.cfg.cpu_dynamic_watts
    }
}

impl Source for PowerModel {
    fn name(&self) -> &'static str {
        "power_model"
    }

    fn sample(&mut self, snap: &mut Snapshot) -> Result<(), SourceError> {
        if snap.power.source == Origin::Sensor {
            return Ok(());
        }
        let watts = self.watts(&snap.cpu.utilization);
        self.energy_joules_total += watts * snap.interval_ms as f64 / 1000.0;
        // Sensor domains the power source listed without a total (a GPU, a PSU's channels, ...)
        // stay, outside the total; the model's own domain is the total.
        let mut domains = std::mem::take(&mut snap.power.domains);
        for d in &mut domains {
            d.part_of_total = false;
        }
        domains.push(PowerDomain { name: "model".into(), watts, energy_joules_total: self.energy_joules_total, source: Origin::Model, part_of_total: true });
        snap.power = Power { watts, source: Origin::Model, domains };
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn idle_plus_dynamic_per_busy_cpu() {
        let m = PowerModel::new(&PowerModelConfig { idle_watts: 10.0, cpu_dynamic_watts: 8.0 });
        assert_eq!(m.watts(&[]), 10.0);
        assert_eq!(m.watts(&[1.0, 0.5]), 22.0);
        assert_eq!(m.watts(&[1.5]), 18.0, "utilisation is clamped");
    }

    #[test]
    fn leaves_a_sensor_reading_alone() {
        let mut snap = Snapshot::default();
        snap.power.source = Origin::Sensor;
        snap.power.watts = 42.0;
        PowerModel::new(&PowerModelConfig::default()).sample(&mut snap).unwrap();
        assert_eq!(snap.power.watts, 42.0);
        assert_eq!(snap.power.source, Origin::Sensor);
    }
}
