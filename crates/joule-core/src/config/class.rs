//! `[[class]]`: a named set of tasks and what it is promised or limited to. Classes are the
//! vocabulary every mechanism shares; the QoS crate (`joule-qos`) turns them into cgroups.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClassConfig {
    pub name: String,
    /// Which tasks belong to the class. A task matching any rule belongs; children follow
    /// their parent.
    #[serde(rename = "match", default)]
    pub matches: MatchRules,
    /// Name of the enclosing class, for nested guarantees (a child cannot ask more).
    #[serde(default)]
    pub parent: Option<String>,
    /// RT bandwidth (cgroup v1 `cpu.rt_runtime_us` / `cpu.rt_period_us`).
    pub rt_runtime_us: Option<u64>,
    pub rt_period_us: Option<u64>,
    /// CFS bandwidth (v1 `cpu.cfs_quota_us`/`cpu.cfs_period_us`, v2 `cpu.max`, `cpu.max.burst`).
    pub quota_us: Option<u64>,
    pub period_us: Option<u64>,
    pub burst_us: Option<u64>,
    /// CPU weight (v2 `cpu.weight` 1–10000; v1 `cpu.shares` derived from it).
    pub weight: Option<u64>,
    /// CPUs the class may use, in cpuset list syntax ("0", "1-3,6").
    pub cpus: Option<String>,
    /// What the thermal stages do to the class (see `[[thermal.stage]]`).
    #[serde(default)]
    pub thermal: ThermalRole,
}

/// A class's part in thermal degradation.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ThermalRole {
    /// Untouched by the stages (cpufreq caps still apply to the whole machine).
    #[default]
    None,
    /// Protected: the scheduler's always-served queue; never capped.
    Labelled,
    /// Takes the cuts: capped to the stage's `best_effort_cpu_pct`.
    BestEffort,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MatchRules {
    /// cgroup paths relative to the hierarchy root ("/system.slice/foo.service").
    pub cgroup: Vec<String>,
    /// Task command names as in /proc/PID/comm (15 characters at most).
    pub comm: Vec<String>,
    /// Executable paths as in /proc/PID/exe.
    pub exe: Vec<String>,
    pub pid: Vec<i32>,
    pub uid: Vec<u32>,
}

impl MatchRules {
    /// Whether the cgroup `path` is one of the `cgroup` rules or lies below one ("" or "/"
    /// matches everything).
    pub fn cgroup_matches(&self, path: &str) -> bool {
        self.cgroup.iter().any(|rule| {
            let rule = rule.trim_end_matches('/');
            rule.is_empty() || path == rule || path.strip_prefix(rule).is_some_and(|r| r.starts_with('/'))
        })
    }

    pub fn is_empty(&self) -> bool {
        self.cgroup.is_empty() && self.comm.is_empty() && self.exe.is_empty() && self.pid.is_empty() && self.uid.is_empty()
    }
}
