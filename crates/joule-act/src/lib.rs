//! joule-act: the acting half of joule's control loop. One actuator per kernel resource, each
//! the only writer of its knobs; a mechanism is a policy (in joule-core) that asks for knob
//! settings, never code that writes them (docs/architecture.md has the rule and the map).

pub mod cgroup_cpu;
pub mod cpufreq;
pub mod freezer;
pub mod nap;
pub mod pod_cpu;
pub mod pod_share;
pub mod scx;
pub mod task_sched;
pub mod tc;

use joule_core::metric::MetricDef;

/// Every actuator's metric families, for `joule monitor --list-metrics` and the docs.
pub fn metric_defs() -> Vec<MetricDef> {
    [cgroup_cpu::METRICS, cpufreq::METRICS, nap::METRICS, scx::METRICS, task_sched::METRICS, tc::METRICS].concat()
}

#[cfg(test)]
mod one_owner_tests;
#[cfg(test)]
mod testkit;
