//! First-order RC thermal model, C·dT/dt = P − (T − T_amb)/R, driven by the snapshot's power
//! (sensor or model). Each interval is integrated exactly for a constant P over it:
//! T(t+Δt) = T_ss + (T − T_ss)·e^(−Δt/RC), T_ss = T_amb + P·R, which is stable for any Δt.

use crate::{Source, SourceError};
use joule_core::config::ThermalModelConfig;
use joule_core::snapshot::ModelTemperature;
use joule_core::{Origin, Snapshot};

pub struct RcThermalModel {
    cfg: ThermalModelConfig,
    temp_celsius: Option<f64>,
}

impl RcThermalModel {
    /// A model whose first step starts at the steady state of the first power it sees (a
    /// machine that has been running a while), not at ambient.
    pub fn new(cfg: &ThermalModelConfig) -> Self {
        Self { cfg: cfg.clone(), temp_celsius: None }
    }

    /// A model starting at a given temperature.
    #[cfg(test)]
    pub(crate) fn with_initial_celsius(cfg: &ThermalModelConfig, temp_celsius: f64) -> Self {
        Self { cfg: cfg.clone(), temp_celsius: Some(temp_celsius) }
    }

    #[cfg(test)]
    pub(crate) fn temp_celsius(&self) -> Option<f64> {
        self.temp_celsius
    }

    /// R·C, the time to close 63% of the gap to steady state.
    pub(crate) fn time_constant_s(&self) -> f64 {
        self.cfg.resistance_celsius_per_watt * self.cfg.capacitance_joules_per_celsius
    }

    /// Where the temperature settles under a constant power.
    pub(crate) fn steady_state_celsius(&self, power_watts: f64) -> f64 {
        self.cfg.ambient_celsius + power_watts * self.cfg.resistance_celsius_per_watt
    }

    /// Advances the model by `dt_s` seconds of constant `power_watts`; returns the new
    /// temperature.
    pub(crate) fn step(&mut self, power_watts: f64, dt_s: f64) -> f64 {
        let t_ss = self.steady_state_celsius(power_watts);
        let tau = self.time_constant_s();
        let t = match self.temp_celsius {
            None => t_ss,
            // A degenerate (zero) capacitance has no memory: it sits at steady state.
            Some(_) if !(tau > 0.0 && tau.is_finite()) => t_ss,
            Some(t) => t_ss + (t - t_ss) * (-dt_s.max(0.0) / tau).exp(),
        };
        self.temp_celsius = Some(t);
        t
    }
}

impl Source for RcThermalModel {
    fn name(&self) -> &'static str {
        "thermal_model"
    }

    fn sample(&mut self, snap: &mut Snapshot) -> Result<(), SourceError> {
        let temp_celsius = self.step(snap.power.watts, snap.interval_ms as f64 / 1000.0);
        snap.thermal.model = Some(ModelTemperature { temp_celsius, source: Origin::Model });
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> ThermalModelConfig {
        ThermalModelConfig { ambient_celsius: 25.0, resistance_celsius_per_watt: 1.2, capacitance_joules_per_celsius: 40.0 }
    }

    #[test]
    fn steady_state_is_ambient_plus_power_times_resistance() {
        let mut m = RcThermalModel::with_initial_celsius(&cfg(), 25.0);
        for _ in 0..10_000 {
            m.step(20.0, 1.0);
        }
        assert!((m.temp_celsius().unwrap() - (25.0 + 20.0 * 1.2)).abs() < 1e-9);
    }

    #[test]
    fn one_time_constant_closes_63_percent_of_the_gap() {
        let mut m = RcThermalModel::with_initial_celsius(&cfg(), 25.0);
        assert_eq!(m.time_constant_s(), 48.0);
        let t = m.step(20.0, 48.0);
        let expected = 25.0 + 24.0 * (1.0 - (-1.0f64).exp());
        assert!((t - expected).abs() < 1e-12, "{t} vs {expected}");
    }

    #[test]
    fn exact_step_matches_fine_euler_and_is_stable_for_huge_steps() {
        let c = cfg();
        let (r, cap) = (c.resistance_celsius_per_watt, c.capacitance_joules_per_celsius);
        let mut exact = RcThermalModel::with_initial_celsius(&c, 60.0);
        let mut euler = 60.0f64;
        let powers = [5.0, 30.0, 0.0, 12.5];
        for &p in &powers {
            exact.step(p, 10.0);
            let h = 1e-4;
            for _ in 0..(10.0 / h) as usize {
                euler += h * (p - (euler - c.ambient_celsius) / r) / cap;
            }
        }
        assert!((exact.temp_celsius().unwrap() - euler).abs() < 1e-3, "{:?} vs {euler}", exact.temp_celsius());
        // Explicit Euler would oscillate and blow up at dt ≫ RC; the exact step lands on T_ss.
        let t = exact.step(10.0, 1e6);
        assert!((t - exact.steady_state_celsius(10.0)).abs() < 1e-9);
    }

    #[test]
    fn first_sample_starts_at_steady_state_and_is_labelled_model() {
        let mut m = RcThermalModel::new(&cfg());
        let mut snap = Snapshot::default();
        snap.power.watts = 10.0;
        m.sample(&mut snap).unwrap();
        let t = snap.thermal.model.unwrap();
        assert_eq!(t.source, Origin::Model);
        assert!((t.temp_celsius - 37.0).abs() < 1e-12);
    }
}
