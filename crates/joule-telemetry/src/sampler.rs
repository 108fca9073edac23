//! The Sampler: every source and model in a fixed order, run once per control period into a
//! fresh Snapshot. A failing source costs its own fields and a note, never the whole sample.

use crate::model::{PowerModel, RcThermalModel};
use crate::{CgroupSource, CpuSource, FreqSource, PowerSource, PsiSource, SchedExtSource, Source, TaskWaitSource, ThermalSource};
use joule_core::config::TelemetryConfig;
use joule_core::Snapshot;
use std::time::Instant;

/// Runs, in order: cpu, power, psi, cgroup, task_wait, thermal, frequency, then the power
/// model (needs cpu, and only fills in when power gave no sensor reading) and the RC thermal
/// model (needs power). power is read right after cpu, before the sources whose duration
/// varies (the cgroup walk, task_wait's scan of every thread), so that the time between two
/// energy readings stays close to the `interval_ms` its rates are divided by. `stage` and `runq_latency` are left default: the agent fills them from
/// the BPF programs.
pub struct Sampler {
    sources: Vec<Box<dyn Source + Send>>,
    /// Whether each source's current failure streak was already logged.
    warned: Vec<bool>,
    clock_base: Instant,
    last_monotonic_ms: Option<u64>,
}

impl Sampler {
    pub fn new(cfg: &TelemetryConfig) -> Self {
        let sources: Vec<Box<dyn Source + Send>> = vec![
            Box::new(CpuSource::new(&cfg.procfs_root)),
            Box::new(PowerSource::new(&cfg.sysfs_root)),
            Box::new(PsiSource::new(&cfg.procfs_root)),
            Box::new(CgroupSource::new(&cfg.cgroup_root)),
            Box::new(TaskWaitSource::new(&cfg.procfs_root, cfg.task_wait_top)),
            Box::new(ThermalSource::new(cfg.thermal_root())),
            Box::new(FreqSource::new(&cfg.sysfs_root)),
            Box::new(SchedExtSource::new(&cfg.sysfs_root)),
            Box::new(PowerModel::new(&cfg.power_model)),
            Box::new(RcThermalModel::new(&cfg.thermal_model)),
        ];
        Self::from_sources(sources)
    }

    /// A sampler over the given sources, run in the given order (tests, or a reduced set).
    pub fn from_sources(sources: Vec<Box<dyn Source + Send>>) -> Self {
        let warned = vec![false; sources.len()];
        Self { sources, warned, clock_base: Instant::now(), last_monotonic_ms: None }
    }

    /// Adds a source that runs after the others (joule's eBPF sources, the thermal stage,
    /// which reads what the thermal sources and models found).
    pub fn push(&mut self, source: Box<dyn Source + Send>) {
        self.sources.push(source);
        self.warned.push(false);
    }

    /// Drops the source called `name` (e.g. `task_wait` when the eBPF programs measure the
    /// same thing at a cost proportional to active tasks instead of all threads).
    pub fn remove_source(&mut self, name: &str) {
        if let Some(i) = self.sources.iter().position(|s| s.name() == name) {
            self.sources.remove(i);
            self.warned.remove(i);
        }
    }

    /// Names of the sources, in the order they run.
    pub fn source_names(&self) -> Vec<&'static str> {
        self.sources.iter().map(|s| s.name()).collect()
    }

    /// Samples now. `interval_ms` is the monotonic time since the previous call (0 the first
    /// time); rates in the snapshot cover exactly that interval.
    pub fn sample(&mut self) -> Snapshot {
        let taken_at_ms = joule_core::clock::now_ms();
        let monotonic_ms = self.clock_base.elapsed().as_millis() as u64;
        self.sample_at(taken_at_ms, monotonic_ms)
    }

    /// Samples with the clock given: `monotonic_ms` is any monotonic clock in ms. For tests and
    /// replays on fixture trees, where the interval must be known exactly.
    pub fn sample_at(&mut self, taken_at_ms: u64, monotonic_ms: u64) -> Snapshot {
        let interval_ms = self.last_monotonic_ms.map_or(0, |last| monotonic_ms.saturating_sub(last));
        self.last_monotonic_ms = Some(monotonic_ms);
        let mut snap = Snapshot { taken_at_ms, interval_ms, ..Snapshot::default() };
        for (source, warned) in self.sources.iter_mut().zip(self.warned.iter_mut()) {
            match source.sample(&mut snap) {
                Ok(()) => *warned = false,
                Err(e) => {
                    if !*warned {
                        tracing::warn!(source = source.name(), error = %e, "telemetry source failed; its fields stay empty until it recovers");
                        *warned = true;
                    }
                    snap.notes.push(format!("{} failed: {e}", source.name()));
                }
            }
        }
        snap
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn power_is_read_before_task_wait_and_the_models_after_what_they_need() {
        let s = super::Sampler::new(&joule_core::config::TelemetryConfig::default());
        let names = s.source_names();
        let at = |n: &str| names.iter().position(|&x| x == n).unwrap();
        assert_eq!(names.len(), 10);
        assert!(at("power") < at("task_wait") && at("power") < at("cgroup"));
        assert!(at("cpu") < at("power_model") && at("power") < at("power_model"));
        assert!(at("power_model") < at("thermal_model"));
    }

    #[test]
    fn remove_source_drops_only_that_source() {
        let mut s = super::Sampler::new(&joule_core::config::TelemetryConfig::default());
        let before = s.source_names().len();
        s.remove_source("task_wait");
        assert_eq!(s.source_names().len(), before - 1);
        assert!(!s.source_names().contains(&"task_wait"));
        s.remove_source("no-such-source");
        assert_eq!(s.source_names().len(), before - 1);
    }
}
