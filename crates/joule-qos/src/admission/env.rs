//! What admission knows about the machine: its CPUs, the kernel's RT limits and which RT
//! model applies. The controller fills it from the cgroup and proc trees; tests build it.

use serde::Serialize;

/// Kernel default RT period, used when a class gives a runtime without a period.
pub const DEFAULT_RT_PERIOD_US: u64 = 1_000_000;
/// Kernel default CFS period.
pub const DEFAULT_CFS_PERIOD_US: u64 = 100_000;

/// What admission needs to know about the machine. Tests build it by hand; the controller
/// reads it from the cgroup and proc trees.
#[derive(Debug, Clone, Serialize)]
pub struct AdmissionEnv {
    /// CPUs classes may use (the root cpuset), ascending.
    pub cpus: Vec<usize>,
    /// `kernel.sched_rt_runtime_us`; negative = unlimited.
    pub global_rt_runtime_us: i64,
    pub global_rt_period_us: u64,
    /// RT ratio already granted to groups outside joule at joule's level (v1 siblings).
    pub others_rt_ratio: f64,
    pub min_period_us: u64,
    /// The chosen hierarchy has `cpu.rt_runtime_us` (v1 with RT_GROUP_SCHED).
    pub rt_group_sched: bool,
    /// RT runtime borrowing between CPUs (`RT_RUNTIME_SHARE`), as on the seed's kernel.
    pub rt_borrowing: bool,
    /// Translate RT bandwidth into a CFS quota where RT group bandwidth does not exist,
    /// instead of refusing.
    pub rt_fallback_to_cfs: bool,
}

impl AdmissionEnv {
    /// This machine's shape with the defaults joule assumes until it has read the kernel.
    pub fn new(ncpus: usize) -> Self {
        Self {
            cpus: (0..ncpus).collect(),
            global_rt_runtime_us: 950_000,
            global_rt_period_us: 1_000_000,
            others_rt_ratio: 0.0,
            min_period_us: crate::DEFAULT_MIN_PERIOD_US,
            rt_group_sched: true,
            rt_borrowing: false,
            rt_fallback_to_cfs: false,
        }
    }

    /// The global RT limit as a fraction of each CPU.
    pub fn global_rt_ratio(&self) -> f64 {
        if self.global_rt_runtime_us < 0 {
            1.0
        } else {
            self.global_rt_runtime_us as f64 / self.global_rt_period_us as f64
        }
    }
}
