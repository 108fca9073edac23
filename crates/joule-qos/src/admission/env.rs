//! What admission knows about the machine: its CPUs, the kernel's RT limits, which RT
//! model applies and which mechanism an RT class gets here (RT group scheduling,
//! SCHED_DEADLINE reservations, or a CFS quota). The controller fills it from the cgroup and
//! proc trees; tests build it.

use serde::{Deserialize, Serialize};

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
    /// The RT mechanism asked for; `None` chooses (`rt_choice`).
    pub rt_backend: Option<RtBackend>,
    /// What SCHED_DEADLINE offers on this kernel.
    pub deadline: DeadlineOffer,
}

/// The mechanism behind an RT class's guarantee (docs/qos.md, "Three RT backends").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RtBackend {
    /// `cpu.rt_runtime_us`/`cpu.rt_period_us` on the class's v1 cgroup (RT group scheduling).
    Group,
    /// A SCHED_DEADLINE reservation for each thread of the class.
    Deadline,
    /// The CFS quota of the same CPU time: a ceiling, no floor.
    Cfs,
}

impl RtBackend {
    pub fn name(self) -> &'static str {
        match self {
            RtBackend::Group => "group",
            RtBackend::Deadline => "deadline",
            RtBackend::Cfs => "cfs",
        }
    }

    /// Parses `group`, `deadline` or `cfs` (the `--rt-backend` values).
    pub fn parse(s: &str) -> Option<RtBackend> {
        [RtBackend::Group, RtBackend::Deadline, RtBackend::Cfs].into_iter().find(|b| b.name() == s)
    }
}

/// SCHED_DEADLINE on this kernel: whether it admits reservations, the kernel's period bounds,
/// and the bandwidth the deadline fair server (Linux 6.12+) takes on every CPU.
#[derive(Debug, Clone, Serialize)]
pub struct DeadlineOffer {
    /// None: reservations work here; Some(why not).
    pub unsupported: Option<String>,
    /// `kernel.sched_deadline_period_min_us` / `_max_us`.
    pub period_min_us: u64,
    pub period_max_us: u64,
    /// The fair server's runtime and period on each CPU, µs (0 before 6.12).
    pub fair_server_runtime_us: u64,
    pub fair_server_period_us: u64,
    /// Where the fair server's numbers come from: `kernel` (read from debugfs) or `model` (the
    /// kernel's default, when debugfs cannot be read).
    pub fair_server_source: String,
}

impl DeadlineOffer {
    /// Linux 6.12+'s defaults: 100 µs–4.19 s periods, a fair server of 50 ms per second.
    pub fn default_612() -> DeadlineOffer {
        DeadlineOffer {
            unsupported: None,
            period_min_us: 100,
            period_max_us: 4_194_304,
            fair_server_runtime_us: 50_000,
            fair_server_period_us: 1_000_000,
            fair_server_source: "model".into(),
        }
    }

    pub fn fair_server_ratio(&self) -> f64 {
        if self.fair_server_period_us == 0 {
            0.0
        } else {
            self.fair_server_runtime_us as f64 / self.fair_server_period_us as f64
        }
    }
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
            rt_backend: None,
            deadline: DeadlineOffer::default_612(),
        }
    }

    /// The mechanism RT classes get here and why, or why none can be had: RT group scheduling
    /// where the hierarchy has it; else the CFS equivalent when the fallback is asked for; else
    /// SCHED_DEADLINE reservations. A forced backend the kernel lacks is an error.
    pub fn rt_choice(&self) -> Result<(RtBackend, String), String> {
        let no_group = "there is no cpu.rt_runtime_us (cgroup v2, or a kernel without CONFIG_RT_GROUP_SCHED)";
        match (self.rt_backend, &self.deadline.unsupported) {
            (Some(RtBackend::Group), _) if !self.rt_group_sched => Err(format!("the group backend was asked for, but {no_group}")),
            (Some(RtBackend::Deadline), Some(why)) => Err(format!("the deadline backend was asked for, but {why}")),
            (Some(b), _) => Ok((b, format!("{} backend asked for (--rt-backend {})", b.name(), b.name()))),
            (None, _) if self.rt_group_sched => {
                Ok((RtBackend::Group, "the cpu hierarchy has cpu.rt_runtime_us (RT group scheduling): runtime/period on the class's cgroup".into()))
            }
            (None, _) if self.rt_fallback_to_cfs => Ok((RtBackend::Cfs, format!("{no_group}; the CFS equivalent was asked for"))),
            (None, None) => Ok((RtBackend::Deadline, format!("{no_group}; SCHED_DEADLINE gives each thread of the class its own reservation"))),
            (None, Some(why)) => Err(format!("{no_group}, and {why}")),
        }
    }

    /// SCHED_DEADLINE bandwidth classes may reserve on `ncpus` CPUs of one root domain: the
    /// kernel's limit (`sched_rt_runtime_us/sched_rt_period_us` of each CPU, which deadline
    /// admission uses too) minus what the fair server holds on each.
    pub fn deadline_budget(&self, ncpus: usize) -> f64 {
        ((self.global_rt_ratio() - self.deadline.fair_server_ratio()) * ncpus as f64).max(0.0)
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
