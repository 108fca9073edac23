//! The kernel knobs joule's actuators hold, as the Plan names them after the merge: a knob, the
//! setting it holds, the rule that chose it and every request that shaped it. Each knob has
//! exactly one actuator (its only writer); several policies may ask for it, and
//! [`merge`](super::merge) settles what it holds.

use crate::config::{Direction, FlowMatch};
use serde::{Deserialize, Serialize};

/// The actuators that own knobs, by the kernel resource they write.
pub mod owner {
    /// Class cgroups: where a class's tasks live, CPU quota, weight, RT runtime, cpuset.
    pub const CGROUP_CPU: &str = "cgroup_cpu";
    /// `cpufreq/scaling_max_freq` of every CPU.
    pub const CPUFREQ: &str = "cpufreq";
    /// Threads' scheduling policy, priority and CPU affinity (placement's pins, the
    /// user-space scheduler's elevation).
    pub const TASK_SCHED: &str = "task_sched";
    /// Traffic control: HTB trees, their classifiers, ifb devices.
    pub const TC: &str = "tc";
    /// The freezer of class cgroups (v1 `freezer.state`, v2 `cgroup.freeze`).
    pub const FREEZER: &str = "freezer";
    /// joule's sched_ext scheduler (a BPF struct_ops).
    pub const SCX: &str = "scx";
    /// The nap's own knobs (CPU hotplug, device runtime PM), its fast-wake program and waiter.
    pub const NAP: &str = "nap";
}

/// One knob, named by what it is: the key requests are merged by.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "knob", rename_all = "snake_case")]
pub enum Knob {
    /// `cpuN/cpufreq/scaling_max_freq`.
    CpufreqMax { cpu: usize },
    /// The CFS bandwidth a class may use, % of the whole machine, on top of its configured quota.
    ClassCpuCap { class: String },
    /// The CPUs every thread of a class may run on (sched_setaffinity).
    ClassAffinity { class: String },
    /// The EEVDF slice of every fair thread of a class (sched_setattr's `sched_runtime`).
    ClassSlice { class: String },
    /// The rate of the traffic of `interface` in `direction`: all of it, a class's or a flow's.
    RateLimit {
        interface: String,
        direction: Direction,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        class: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        flow: Option<FlowMatch>,
    },
}

impl Knob {
    /// The one actuator that writes this knob.
    pub fn owner(&self) -> &'static str {
        match self {
            Knob::CpufreqMax { .. } => owner::CPUFREQ,
            Knob::ClassCpuCap { .. } => owner::CGROUP_CPU,
            Knob::ClassAffinity { .. } | Knob::ClassSlice { .. } => owner::TASK_SCHED,
            Knob::RateLimit { .. } => owner::TC,
        }
    }

    /// The stated rule the merge applies to this knob's requests.
    pub fn rule(&self) -> Rule {
        match self {
            Knob::ClassAffinity { .. } => Rule::Precedence,
            _ => Rule::Lowest,
        }
    }

    /// The label of its kind in metrics (`cpufreq_max`, `class_affinity`, ...).
    pub fn kind(&self) -> &'static str {
        match self {
            Knob::CpufreqMax { .. } => "cpufreq_max",
            Knob::ClassCpuCap { .. } => "class_cpu_cap",
            Knob::ClassAffinity { .. } => "class_affinity",
            Knob::ClassSlice { .. } => "class_slice",
            Knob::RateLimit { .. } => "rate_limit",
        }
    }
}

impl std::fmt::Display for Knob {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Knob::CpufreqMax { cpu } => write!(f, "cpu{cpu} max"),
            Knob::ClassCpuCap { class } => write!(f, "class {class} cpu cap"),
            Knob::ClassAffinity { class } => write!(f, "class {class} affinity"),
            Knob::ClassSlice { class } => write!(f, "class {class} slice"),
            Knob::RateLimit { interface, direction, class, flow } => {
                let dir = if *direction == Direction::Ingress { "ingress" } else { "egress" };
                match (class, flow) {
                    (Some(c), _) => write!(f, "{interface} {dir} rate of class {c}"),
                    (None, Some(fl)) => write!(f, "{interface} {dir} rate of flow {fl:?}"),
                    (None, None) => write!(f, "{interface} {dir} rate"),
                }
            }
        }
    }
}

/// How the requests for one knob become its setting.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Rule {
    /// The lowest cap asked for holds (as the kernel's freq QoS does for `FREQ_QOS_MAX`): every
    /// requester gets at most what it asked for.
    Lowest,
    /// The request of the policy that ranks first holds ([`precedence`]); the class's cpuset,
    /// when it has one, bounds it.
    Precedence,
}

impl Rule {
    pub fn describe(self) -> &'static str {
        match self {
            Rule::Lowest => "the lowest cap asked for holds",
            Rule::Precedence => "by precedence (elevate, then placement), within the class's cpuset",
        }
    }
}

/// Rank of a policy's affinity request: lower wins. The user-space scheduler binds a class to
/// its CPU for every slice it switches, so it ranks before placement, which would move the
/// same threads to a domain.
pub fn precedence(policy: &str) -> u8 {
    match policy {
        "elevate" => 0,
        "placement" => 1,
        _ => 2,
    }
}

/// A knob's setting.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Setting {
    /// A frequency, kHz.
    Khz(u64),
    /// No cap: the knob's own value (what the machine had before joule).
    Unlimited,
    /// % of the whole machine's CPU (100 = all of it).
    CpuPct(f64),
    /// CPU numbers, ascending.
    Cpus(Vec<usize>),
    /// Mbit/s.
    Mbit(f64),
    /// A time slice, µs.
    SliceUs(u32),
}

impl Setting {
    /// The order of the `Lowest` rule: `None` for settings that are not caps (CPU lists).
    fn cap_value(&self) -> Option<f64> {
        match self {
            Setting::Khz(k) => Some(*k as f64),
            Setting::Unlimited => Some(f64::INFINITY),
            Setting::CpuPct(p) => Some(*p),
            Setting::Mbit(m) => Some(*m),
            Setting::SliceUs(us) => Some(f64::from(*us)),
            Setting::Cpus(_) => None,
        }
    }

    /// Whether `self` is a lower (tighter) cap than `other`.
    pub fn below(&self, other: &Setting) -> bool {
        matches!((self.cap_value(), other.cap_value()), (Some(a), Some(b)) if a < b)
    }
}

impl std::fmt::Display for Setting {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Setting::Khz(k) if *k >= 1_000_000 => write!(f, "{} GHz", *k as f64 / 1e6),
            Setting::Khz(k) => write!(f, "{} MHz", *k as f64 / 1e3),
            Setting::Unlimited => write!(f, "no cap"),
            Setting::CpuPct(p) => write!(f, "{p} %"),
            Setting::Cpus(c) => write!(f, "CPUs {}", crate::cpulist::format(c)),
            Setting::Mbit(m) => write!(f, "{m} Mbit/s"),
            Setting::SliceUs(us) => write!(f, "{us} µs slice"),
        }
    }
}

/// One policy's request for a knob, as the merge saw it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Request {
    pub policy: String,
    /// What it asked for, resolved to the knob's unit.
    pub asked: Setting,
    /// How it asked (`85 % of the maximum`, `1.6 GHz`), when that differs from `asked`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub as_said: String,
    /// The policy's reason.
    pub reason: String,
}

impl Request {
    fn said(&self) -> String {
        if self.as_said.is_empty() {
            self.asked.to_string()
        } else {
            self.as_said.clone()
        }
    }
}

/// What one knob holds this period and why: the merged setting, the rule, and every request
/// that shaped it, the one that holds first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Held {
    #[serde(flatten)]
    pub knob: Knob,
    /// The actuator that writes it.
    pub actuator: String,
    pub setting: Setting,
    pub rule: Rule,
    /// Every request for this knob, the holding one first.
    pub requests: Vec<Request>,
    /// One line for humans: `cpu2 max 1.4 GHz: thermal (85 % of the maximum), placement (1.6 GHz)`.
    pub why: String,
}

impl Held {
    pub(super) fn new(knob: Knob, setting: Setting, requests: Vec<Request>) -> Held {
        let asked: Vec<String> = requests.iter().map(|r| format!("{} ({})", r.policy, r.said())).collect();
        let why = format!("{knob} {setting}: {}", asked.join(", "));
        Held { actuator: knob.owner().to_string(), rule: knob.rule(), knob, setting, requests, why }
    }

    /// The policy whose request holds.
    pub fn won_by(&self) -> &str {
        self.requests.first().map_or("", |r| r.policy.as_str())
    }
}

/// Two wants for one knob that could not both hold: which won, which lost, and why.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Conflict {
    #[serde(flatten)]
    pub knob: Knob,
    /// The policy (or bound, `cpuset`) whose want holds.
    pub won: String,
    pub lost: String,
    pub why: String,
}
