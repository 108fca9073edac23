//! `[thermal]`: when the machine is hot (stage thresholds on temperature, and optionally on
//! power), and what each stage does (`[[thermal.stage]]`). Mechanism 1 of docs/architecture.md.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ThermalScheduler {
    /// Degrade with cgroup actuators (works on every kernel).
    #[default]
    Cgroup,
    /// Degrade inside joule's sched_ext BPF scheduler (kernels with CONFIG_SCHED_CLASS_EXT);
    /// the cgroup path takes over where sched_ext is missing or ejected the scheduler.
    Scx,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ThermalConfig {
    /// Stage n is entered when the temperature reaches the n-th threshold (stage 0 = cool).
    /// Empty (the default): placed below the chosen sensors' own trip points, see
    /// `trip_offsets_celsius` and `crate::thermal_sensors::thresholds`.
    pub stage_thresholds_celsius: Vec<f64>,
    /// With thresholds from the trip points: stage n starts `trip_offsets_celsius[n-1]` below
    /// the lowest passive trip point of the chosen sensors (falling values, one per stage).
    pub trip_offsets_celsius: Vec<f64>,
    /// With no passive trip point, the offsets count from this far below the critical one.
    pub critical_margin_celsius: f64,
    /// Which sensors the stage follows: each entry a zone's or hwmon chip's type
    /// (`x86_pkg_temp`, `cpu-thermal`, `k10temp`) or a sensor's name (`thermal_zone3`,
    /// `hwmon2/temp1`). Empty (the default): the CPU/SoC/package sensors, acpitz only when
    /// there is none of those.
    pub zones: Vec<String>,
    /// Let the labelled model (temperature, and power for a power budget) move the stage where
    /// no sensor measures it. Off: a model is reported, never acted on.
    pub act_on_model: bool,
    /// Let the stages cap every CPU's `scaling_max_freq` (`cpufreq_max_pct` of the stage rows).
    /// Off by default: the machine's frequency stays the kernel's and its other tools'.
    pub cpufreq_caps: bool,
    /// A stage is left only when the temperature falls this far below its threshold.
    pub hysteresis_celsius: f64,
    pub scheduler: ThermalScheduler,
    /// A power budget: stage n is also entered when the package power (sensor, or the labelled
    /// model) reaches the n-th value. Empty: power does not raise the stage. Otherwise as many
    /// values as `stage_thresholds_celsius`, strictly increasing.
    pub power_thresholds_watts: Vec<f64>,
    /// A power stage is left only when power falls this far below its threshold.
    pub power_hysteresis_watts: f64,
    /// What each stage does: entry n is stage n, from 0 (cool) to the number of thresholds.
    /// Empty: [`StageActions::default_for`] each stage.
    #[serde(rename = "stage")]
    pub stages: Vec<StageActions>,
}

impl Default for ThermalConfig {
    fn default() -> Self {
        Self {
            stage_thresholds_celsius: Vec::new(),
            trip_offsets_celsius: vec![15.0, 10.0, 5.0],
            critical_margin_celsius: 20.0,
            zones: Vec::new(),
            act_on_model: false,
            cpufreq_caps: false,
            hysteresis_celsius: 3.0,
            scheduler: ThermalScheduler::Cgroup,
            power_thresholds_watts: Vec::new(),
            power_hysteresis_watts: 1.0,
            stages: Vec::new(),
        }
    }
}

impl ThermalConfig {
    /// How many stages above 0 there are: one per configured threshold, else one per trip
    /// offset.
    pub fn stage_count(&self) -> usize {
        if self.stage_thresholds_celsius.is_empty() {
            self.trip_offsets_celsius.len()
        } else {
            self.stage_thresholds_celsius.len()
        }
    }

    /// The actions of `stage` (clamped to the hottest stage there is).
    pub fn actions(&self, stage: u32) -> StageActions {
        let hottest = self.stage_count();
        let s = (stage as usize).min(hottest);
        self.stages.get(s).copied().unwrap_or_else(|| StageActions::default_for(s as u32))
    }

    /// Every stage's actions, stage 0 first.
    pub fn table(&self) -> Vec<StageActions> {
        (0..=self.stage_count() as u32).map(|s| self.actions(s)).collect()
    }
}

/// One row of `[[thermal.stage]]`. A hotter stage is never more generous than a cooler one.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StageActions {
    /// scx path: how many of the scheduler's score queues are served per round (1–4); the
    /// others only through aging. Best score first (interactive and I/O-bound tasks).
    pub queues: u32,
    /// scx path: the time slice of each dispatch.
    pub slice_us: u32,
    /// Both paths: the CPU each `thermal = "best_effort"` class may use, in % of the whole
    /// machine (all CPUs). cgroup path: its CFS bandwidth (`cpu.max`); scx path: the share of
    /// time its tasks are dispatched, the rest is idle time injected so the package cools.
    pub best_effort_cpu_pct: f64,
    /// Both paths, only with `[thermal] cpufreq_caps = true`: every CPU's `scaling_max_freq`,
    /// in % of `cpuinfo_max_freq`, where cpufreq exists (else it is reported and skipped).
    pub cpufreq_max_pct: f64,
}

impl StageActions {
    /// Stage 0 changes nothing; each stage up serves one queue fewer, a millisecond less slice
    /// and roughly halves what best-effort classes may use; cpufreq is capped from stage 2.
    pub fn default_for(stage: u32) -> StageActions {
        const BE_PCT: [f64; 4] = [100.0, 60.0, 35.0, 15.0];
        const FREQ_PCT: [f64; 4] = [100.0, 100.0, 85.0, 70.0];
        let i = (stage as usize).min(3);
        StageActions {
            queues: 4u32.saturating_sub(stage).max(1),
            slice_us: 5_000u32.saturating_sub(1_000 * stage).max(1_000),
            best_effort_cpu_pct: BE_PCT[i],
            cpufreq_max_pct: FREQ_PCT[i],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_table_degrades_monotonically_and_clamps_past_the_hottest_stage() {
        let th = ThermalConfig::default();
        let t = th.table();
        assert_eq!(t.len(), 4);
        assert_eq!(t[0], StageActions { queues: 4, slice_us: 5_000, best_effort_cpu_pct: 100.0, cpufreq_max_pct: 100.0 });
        for w in t.windows(2) {
            assert!(w[1].queues <= w[0].queues && w[1].slice_us <= w[0].slice_us);
            assert!(w[1].best_effort_cpu_pct <= w[0].best_effort_cpu_pct && w[1].cpufreq_max_pct <= w[0].cpufreq_max_pct);
        }
        assert_eq!(th.actions(9), t[3]);
    }

    #[test]
    fn configured_rows_win() {
        let cfg: crate::config::Config = toml::from_str(
            "[thermal]\nstage_thresholds_celsius = [50.0]\n[[thermal.stage]]\nqueues = 4\nslice_us = 4000\nbest_effort_cpu_pct = 100.0\ncpufreq_max_pct = 100.0\n[[thermal.stage]]\nqueues = 2\nslice_us = 2000\nbest_effort_cpu_pct = 20.0\ncpufreq_max_pct = 90.0\n",
        )
        .unwrap();
        assert_eq!(cfg.thermal.actions(1).best_effort_cpu_pct, 20.0);
        assert_eq!(cfg.thermal.actions(0).slice_us, 4_000);
    }

    /// The keys of issue 34: trip offsets, the cpufreq switch and the model switch are checked
    /// like the thresholds, each error naming its key and value.
    #[test]
    fn trip_offsets_cpufreq_caps_and_zones_are_validated() {
        let err = |text: &str| format!("{:?}", crate::config::Config::parse(text).unwrap_err());
        let e = err("[thermal]\ntrip_offsets_celsius = [5.0, 10.0]\n");
        assert!(e.contains("thermal.trip_offsets_celsius") && e.contains("decreasing"), "{e}");
        let e = err("[thermal]\ntrip_offsets_celsius = [10.0, -1.0]\n");
        assert!(e.contains("≥ 0"), "{e}");
        let e = err("[thermal]\ntrip_offsets_celsius = [10.0, 8.0]\nhysteresis_celsius = 3.0\n");
        assert!(e.contains("thermal.hysteresis_celsius"), "{e}");
        let row = |f: f64| format!("[[thermal.stage]]\nqueues = 4\nslice_us = 5000\nbest_effort_cpu_pct = 100.0\ncpufreq_max_pct = {f:?}\n");
        let rows = |f: f64| format!("[thermal]\nstage_thresholds_celsius = [50.0]\n{}{}", row(100.0), row(f));
        let e = err(&rows(80.0));
        assert!(e.contains("cpufreq_max_pct = 80") && e.contains("cpufreq_caps"), "{e}");
        let ok = crate::config::Config::parse(&rows(80.0).replace("[thermal]\n", "[thermal]\ncpufreq_caps = true\n")).unwrap();
        assert_eq!(ok.thermal.actions(1).cpufreq_max_pct, 80.0);
        let e = err("[thermal]\nzones = [\"\"]\n");
        assert!(e.contains("thermal.zones"), "{e}");
        // Defaults: thresholds from the trip points, three stages, no model, no frequency caps.
        let d = ThermalConfig::default();
        assert!(d.stage_thresholds_celsius.is_empty() && !d.act_on_model && !d.cpufreq_caps);
        assert_eq!((d.stage_count(), d.table().len()), (3, 4));
        let e = err("[thermal]\npower_thresholds_watts = [10.0, 20.0]\n");
        assert!(e.contains("2 power thresholds for 3 stages"), "{e}");
    }
}
