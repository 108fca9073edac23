//! The Plan: what every actuator should hold this period, and why. Policies write its
//! decisions from a Snapshot; the merge (merge.rs) turns the decisions that name a kernel knob
//! into one setting per knob, with every request that shaped it; actuators read their knobs and
//! the decisions addressed to them and reconcile the machine to them; exporters publish it next
//! to the Snapshot, so a user can always see *why* joule acts.

use super::knob::{Conflict, Held, Knob};
use crate::config::{Direction, FlowMatch, StageActions};
use serde::{Deserialize, Serialize};

/// One period's decisions, made from the snapshot taken at `taken_at_ms`, and what each knob
/// holds after the merge.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Plan {
    pub taken_at_ms: u64,
    /// What each policy asked for, and why.
    pub decisions: Vec<Decision>,
    /// Per knob, the merged setting and every request that shaped it (filled by the merge).
    #[serde(default)]
    pub knobs: Vec<Held>,
    /// Wants for one knob that could not both hold: which won and why.
    #[serde(default)]
    pub conflicts: Vec<Conflict>,
    /// What the merge could not do on this machine (a frequency cap without cpufreq).
    #[serde(default)]
    pub notes: Vec<String>,
    /// The class membership the plan was made from (the snapshot's reading): which process is
    /// in which class, where each class lives. Actuators act on these processes.
    #[serde(skip)]
    pub members: std::sync::Arc<crate::membership::Membership>,
}

/// What one policy wants one actuator to hold.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Decision {
    /// The policy that decided it.
    pub policy: String,
    /// The actuator that acts on it; `None` when no actuator acts on this yet (the decision is
    /// published so the user sees what joule would do).
    pub actuator: Option<String>,
    pub want: Want,
    /// Why, in words a user understands (values with units, where they came from).
    pub reason: String,
}

/// The vocabulary of intents. Each mechanism adds the variants its actuators understand.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Want {
    /// Keep these `[[class]]`es' CPU guarantees in place (cgroups created, tasks in them).
    HoldClasses { classes: Vec<String> },
    /// The thermal stage, the path acting on it and the stage's actions (`[[thermal.stage]]`).
    /// Addressed to the sched_ext actuator on the scx path; informational on the cgroup path,
    /// where [`Want::CapClass`] and [`Want::FreqCap`] carry the actions.
    ThermalStage { stage: u32, path: ThermalPath, actions: StageActions },
    /// Cap a class's CPU to `cpu_pct` % of the whole machine (CFS bandwidth); 100 lifts the
    /// cap back to the class's configured quota.
    CapClass { class: String, cpu_pct: f64 },
    /// Cap the frequency of `cpus` (None: every CPU with cpufreq) to `limit`; the merge keeps
    /// the lowest cap any policy asks for, per CPU.
    FreqCap { cpus: Option<Vec<usize>>, limit: FreqLimit },
    /// Run every thread of `[[class]]` `class` on `cpus` (energy-aware placement's domain);
    /// merged by precedence with the user-space scheduler's binding, within the class's cpuset.
    Affinity { class: String, cpus: Vec<usize> },
    /// Give every fair thread of `[[class]]` `class` an EEVDF slice of `slice_us` (its
    /// `latency_slice_us`): it preempts on wake-up what runs with a longer one.
    Slice { class: String, slice_us: u32 },
    /// Run the user-space scheduler (mechanism 5, docs/elevate.md) on every thread of
    /// `[[class]]` `class`: bound to `cpu`, round-robin with `slice_us` slices, `pattern`
    /// "shared" or "dedicated". No such decision: the scheduler stops and the threads go back.
    Elevate { class: String, cpu: usize, slice_us: u64, pattern: String },
    /// Nap (`[nap]`): `nap` true asks the "nap" actuator to enter the nap (freeze the class,
    /// machine nap, system sleep, as configured), false to be awake. `idle_for_ms` is how long
    /// no monitor has reported activity (0 while active). Waking on the first packet does not
    /// wait for this: the actuator's waiter thread thaws at once and the next decision follows.
    Nap { nap: bool, idle_for_ms: u64 },
    // --- issue 11, network (actuator "netlimit") ---
    /// Pace the traffic of `interface` (in the `[net]` namespace) in `direction` to
    /// `rate_mbit`: all of it, or only the sockets of `class` (a `[[class]]` name; egress
    /// only), or only the packets of `flow`. Ingress goes through an ifb device.
    LimitRate {
        interface: String,
        #[serde(default)]
        direction: Direction,
        class: Option<String>,
        flow: Option<FlowMatch>,
        rate_mbit: f64,
    },
}

/// A frequency cap as a policy says it.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FreqLimit {
    /// % of the CPU's maximum (`cpuinfo_max_freq`), never below its minimum; 100 = no cap.
    Pct(f64),
    /// An absolute frequency, kHz (clamped to the CPU's range).
    Khz(u64),
}

/// Which mechanism acts on the thermal stage this period.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ThermalPath {
    /// joule's sched_ext scheduler runs and reads the stage in the kernel.
    Scx,
    /// cgroup CFS bandwidth of best-effort classes, and cpufreq limits.
    Cgroup,
}

impl Want {
    /// Its kind, as the JSON's `kind` field and the metrics' `kind` label name it.
    pub fn kind(&self) -> &'static str {
        match self {
            Want::HoldClasses { .. } => "hold_classes",
            Want::ThermalStage { .. } => "thermal_stage",
            Want::CapClass { .. } => "cap_class",
            Want::FreqCap { .. } => "freq_cap",
            Want::Affinity { .. } => "affinity",
            Want::Slice { .. } => "slice",
            Want::Elevate { .. } => "elevate",
            Want::Nap { .. } => "nap",
            Want::LimitRate { .. } => "limit_rate",
        }
    }
}

impl Plan {
    pub fn new(taken_at_ms: u64) -> Plan {
        Plan { taken_at_ms, ..Plan::default() }
    }

    pub fn push(&mut self, policy: &str, actuator: Option<&str>, want: Want, reason: impl Into<String>) {
        self.decisions.push(Decision { policy: policy.into(), actuator: actuator.map(Into::into), want, reason: reason.into() });
    }

    /// The decisions addressed to `actuator`, in the order the policies made them.
    pub fn for_actuator<'a>(&'a self, actuator: &'a str) -> impl Iterator<Item = &'a Decision> + 'a {
        self.decisions.iter().filter(move |d| d.actuator.as_deref() == Some(actuator))
    }

    /// The merged knobs `actuator` writes.
    pub fn knobs_of<'a>(&'a self, actuator: &'a str) -> impl Iterator<Item = &'a Held> + 'a {
        self.knobs.iter().filter(move |h| h.actuator == actuator)
    }

    /// What `knob` holds, if any policy asked for it.
    pub fn held(&self, knob: &Knob) -> Option<&Held> {
        self.knobs.iter().find(|h| h.knob == *knob)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn actuators_see_only_their_decisions_and_json_names_the_kind() {
        let mut p = Plan::new(7);
        p.push("classes", Some("qos"), Want::HoldClasses { classes: vec!["main".into()] }, "configured");
        let actions = StageActions::default_for(2);
        p.push("thermal", None, Want::ThermalStage { stage: 2, path: ThermalPath::Cgroup, actions }, "81.0 °C (model)");
        assert_eq!(p.for_actuator("qos").count(), 1);
        assert_eq!(p.for_actuator("thermal").count(), 0, "an informational decision reaches no actuator");
        let v = serde_json::to_value(&p).unwrap();
        assert_eq!(v["decisions"][1]["want"]["kind"], "thermal_stage");
        assert_eq!(p.decisions[1].want.kind(), "thermal_stage", "kind() says what the JSON says");
        assert_eq!(v["decisions"][1]["actuator"], serde_json::Value::Null);
    }
}
