//! What admission produces: per class what will be configured and what it should get, the
//! per-core sums, the arithmetic as text, and every refusal with the rule that made it.

use super::{AdmissionEnv, RtBackend};
use serde::Serialize;
use std::collections::BTreeMap;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ShareKind {
    /// RT bandwidth: the class's RT tasks are guaranteed (and limited to) the share.
    RtGuarantee,
    /// CFS quota: a ceiling, not a floor.
    CfsCap,
    /// Only a weight or a cpuset: relative, no number to expect.
    Relative,
    /// SCHED_DEADLINE: each reserved thread is guaranteed (and limited to) runtime/period of
    /// a CPU, on whichever CPU of its root domain is free.
    DeadlineReservation,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct RtBw {
    pub runtime_us: u64,
    pub period_us: u64,
}

impl RtBw {
    /// runtime/period: the fraction of each CPU the group's RT tasks may use.
    pub(crate) fn ratio(&self) -> f64 {
        self.runtime_us as f64 / self.period_us as f64
    }
}

/// A class's SCHED_DEADLINE reservations: `runtime_us` every `period_us` for each of up to
/// `threads` of its threads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct DlBw {
    pub runtime_us: u64,
    pub period_us: u64,
    pub threads: u32,
}

impl DlBw {
    /// The bandwidth all its reservations take together, in CPUs.
    pub(crate) fn total(&self) -> f64 {
        self.runtime_us as f64 / self.period_us as f64 * f64::from(self.threads)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct CfsBw {
    pub quota_us: u64,
    pub period_us: u64,
    pub burst_us: Option<u64>,
}

impl CfsBw {
    /// quota/period: how many CPUs' worth of time the group may use, all its CPUs together.
    pub(crate) fn ratio(&self) -> f64 {
        self.quota_us as f64 / self.period_us as f64
    }
}

/// One class after admission: what will be configured and what it should get.
#[derive(Debug, Clone, Serialize)]
pub struct ClassPlan {
    pub name: String,
    pub parent: Option<String>,
    pub cpus: Vec<usize>,
    pub rt: Option<RtBw>,
    pub cfs: Option<CfsBw>,
    /// Per-thread SCHED_DEADLINE reservations (the deadline backend).
    pub dl: Option<DlBw>,
    /// The mechanism its RT bandwidth gets on this kernel, and why (None: it asks for none).
    pub rt_backend: Option<RtBackend>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rt_why: Option<String>,
    pub weight: Option<u64>,
    pub kind: ShareKind,
    /// `thermal = "best_effort"`: the thermal stages may cap its CFS bandwidth, so its cgroup
    /// needs the cpu controller even without a quota or weight of its own.
    pub thermal_capped: bool,
    /// `cpu.idle` on its cgroup (`ClassConfig::idle`); a top-level idle class's cgroup lives
    /// beside joule's group (`Layout::class_dir`).
    pub idle: bool,
    /// Expected share of each of its CPUs, in % of that CPU.
    pub expected_pct_per_cpu: BTreeMap<usize, f64>,
    /// Sum over its CPUs, top-style (100 % = one CPU): the seed's "CPU 使用率".
    pub expected_pct: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct CoreSum {
    pub cpu: usize,
    /// (class, % of this CPU) for top-level RT classes on it.
    pub rt_members: Vec<(String, f64)>,
    pub rt_sum_pct: f64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Rule {
    CoreOver100,
    CoreOverGlobalRt,
    PeriodBelowMinimum,
    ChildExceedsParent,
    V1SiblingsExceedParent,
    RuntimeOverPeriod,
    NoRtGroupSched,
    /// SCHED_DEADLINE reservations over the kernel's deadline bandwidth.
    DeadlineOverBudget,
    /// A period or runtime SCHED_DEADLINE does not accept.
    DeadlineBadParams,
    /// A deadline class confined to some CPUs (its threads' affinity must span a root domain).
    DeadlineNeedsRootDomain,
    BadCpus,
    BadConfig,
}

#[derive(Debug, Clone, Serialize)]
pub struct Refusal {
    pub rule: Rule,
    pub classes: Vec<String>,
    pub message: String,
}

/// The arithmetic and the verdict. `writes` is filled by the controller (backend-specific).
#[derive(Debug, Clone, Serialize)]
pub struct Plan {
    pub env: AdmissionEnv,
    pub classes: Vec<ClassPlan>,
    pub cores: Vec<CoreSum>,
    /// Human-readable arithmetic, one line per step.
    pub arithmetic: Vec<String>,
    pub refusals: Vec<Refusal>,
    pub notes: Vec<String>,
}

impl Plan {
    /// A plan with nothing in it yet, for `env`.
    pub(crate) fn empty(env: &AdmissionEnv) -> Plan {
        Plan { env: env.clone(), classes: Vec::new(), cores: Vec::new(), arithmetic: Vec::new(), refusals: Vec::new(), notes: Vec::new() }
    }

    pub fn admitted(&self) -> bool {
        self.refusals.is_empty()
    }

    pub fn class(&self, name: &str) -> Option<&ClassPlan> {
        self.classes.iter().find(|c| c.name == name)
    }

    /// One message listing every refusal (empty when admitted).
    pub fn refusal_text(&self) -> String {
        self.refusals.iter().map(|r| format!("  - {}", r.message)).collect::<Vec<_>>().join("\n")
    }
}
