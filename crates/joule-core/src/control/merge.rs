//! The merge: after every policy has decided, the wants that name a kernel knob become one
//! setting per knob, by the knob's stated rule (knob.rs), keeping every request and its reason.
//! Caps merge to the lowest (a frequency, a class's CPU share, a rate): each requester gets at
//! most what it asked for, as the kernel's freq QoS and thermal cooling devices do. A class's
//! affinity goes to the request that ranks first (elevate, then placement), bounded by the
//! class's cpuset; a request that cannot hold is a [`Conflict`] the Plan publishes.
//! Pure: what it needs of the machine comes in [`Facts`].

use super::knob::{precedence, Conflict, Held, Knob, Request, Rule, Setting};
use super::plan::{FreqLimit, Plan, Want};
use crate::config::ClassConfig;
use crate::Snapshot;
use std::collections::BTreeMap;

/// What the merge needs to know of the machine and the config.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Facts {
    /// Per CPU with cpufreq: (cpuinfo_min_freq, cpuinfo_max_freq), kHz.
    pub cpufreq: BTreeMap<usize, (u64, u64)>,
    /// Per class with a `cpus` in its config: those CPUs (its cpuset).
    pub cpusets: BTreeMap<String, Vec<usize>>,
}

impl Facts {
    /// The classes' cpusets from the config.
    pub fn from_classes(classes: &[ClassConfig]) -> Facts {
        let cpusets = classes.iter().filter_map(|c| Some((c.name.clone(), crate::cpulist::parse(c.cpus.as_deref()?)?))).collect();
        Facts { cpufreq: BTreeMap::new(), cpusets }
    }

    /// These facts with the cpufreq limits of `snap` (its `frequency` readings).
    pub fn with_snapshot(&self, snap: &Snapshot) -> Facts {
        let cpufreq = snap.frequency.iter().filter(|f| f.cpuinfo_max_khz > 0).map(|f| (f.cpu as usize, (f.cpuinfo_min_khz, f.cpuinfo_max_khz))).collect();
        Facts { cpufreq, cpusets: self.cpusets.clone() }
    }
}

impl FreqLimit {
    /// This limit on a CPU whose frequency lies within `min..=max` kHz.
    pub fn resolve(&self, (min, max): (u64, u64)) -> Setting {
        match *self {
            FreqLimit::Pct(p) if p >= 100.0 => Setting::Unlimited,
            FreqLimit::Pct(p) => Setting::Khz(((max as f64 * p.max(0.0) / 100.0).round() as u64).max(min)),
            FreqLimit::Khz(k) => Setting::Khz(k.clamp(min, max)),
        }
    }

    fn as_said(&self) -> String {
        match *self {
            FreqLimit::Pct(p) if p >= 100.0 => "no cap".into(),
            FreqLimit::Pct(p) => format!("{p} % of the maximum"),
            FreqLimit::Khz(k) => Setting::Khz(k).to_string(),
        }
    }
}

/// Each knob's requests, in the order the policies made them.
type Asked = Vec<(Knob, Request)>;

/// Fills `plan.knobs`, `plan.conflicts` and the merge's notes from `plan.decisions`.
pub fn merge(plan: &mut Plan, facts: &Facts) {
    let mut asked: Asked = Vec::new();
    let mut notes = Vec::new();
    for d in &plan.decisions {
        let req = |asked: Setting, as_said: String| Request { policy: d.policy.clone(), asked, as_said, reason: d.reason.clone() };
        match &d.want {
            Want::FreqCap { cpus, limit } => {
                let on: Vec<usize> = match cpus {
                    Some(c) => c.clone(),
                    None => facts.cpufreq.keys().copied().collect(),
                };
                let (known, unknown): (Vec<usize>, Vec<usize>) = on.into_iter().partition(|c| facts.cpufreq.contains_key(c));
                if known.is_empty() || !unknown.is_empty() {
                    let which = if unknown.is_empty() { "this machine".to_string() } else { format!("CPUs {}", crate::cpulist::format(&unknown)) };
                    notes.push(format!("{}: no cpufreq on {which}, so its frequency cap ({}) is not held there", d.policy, limit.as_said()));
                }
                for cpu in known {
                    asked.push((Knob::CpufreqMax { cpu }, req(limit.resolve(facts.cpufreq[&cpu]), limit.as_said())));
                }
            }
            Want::CapClass { class, cpu_pct } => {
                let s = if *cpu_pct >= 100.0 { Setting::Unlimited } else { Setting::CpuPct(*cpu_pct) };
                asked.push((Knob::ClassCpuCap { class: class.clone() }, req(s, String::new())));
            }
            Want::Affinity { class, cpus } => asked.push((Knob::ClassAffinity { class: class.clone() }, req(Setting::Cpus(cpus.clone()), String::new()))),
            Want::Slice { class, slice_us } => asked.push((Knob::ClassSlice { class: class.clone() }, req(Setting::SliceUs(*slice_us), String::new()))),
            Want::Elevate { class, cpu, .. } => asked.push((Knob::ClassAffinity { class: class.clone() }, req(Setting::Cpus(vec![*cpu]), String::new()))),
            Want::LimitRate { interface, direction, class, flow, rate_mbit } => {
                let knob = Knob::RateLimit { interface: interface.clone(), direction: *direction, class: class.clone(), flow: flow.clone() };
                asked.push((knob, req(Setting::Mbit(*rate_mbit), String::new())));
            }
            Want::HoldClasses { .. } | Want::ThermalStage { .. } | Want::Nap { .. } => {}
        }
    }
    let mut knobs: Vec<(Knob, Vec<Request>)> = Vec::new();
    for (knob, r) in asked {
        match knobs.iter_mut().find(|(k, _)| *k == knob) {
            Some((_, rs)) => rs.push(r),
            None => knobs.push((knob, vec![r])),
        }
    }
    plan.knobs.clear();
    plan.conflicts.clear();
    for (knob, requests) in knobs {
        let held = match knob.rule() {
            Rule::Lowest => Some(lowest(knob, requests)),
            Rule::Precedence => by_precedence(knob, requests, facts, &mut plan.conflicts),
        };
        plan.knobs.extend(held);
    }
    plan.notes.extend(notes);
}

/// The lowest cap holds; the requests stay in order of how tight they are (ties: first asked).
fn lowest(knob: Knob, mut requests: Vec<Request>) -> Held {
    requests.sort_by(|a, b| {
        if a.asked.below(&b.asked) {
            std::cmp::Ordering::Less
        } else if b.asked.below(&a.asked) {
            std::cmp::Ordering::Greater
        } else {
            std::cmp::Ordering::Equal
        }
    });
    let setting = requests[0].asked.clone();
    Held::new(knob, setting, requests)
}

/// The first-ranked request holds, within the class's cpuset; the others that asked for other
/// CPUs lost, and so did the winner when its CPUs lie wholly outside the cpuset.
fn by_precedence(knob: Knob, mut requests: Vec<Request>, facts: &Facts, conflicts: &mut Vec<Conflict>) -> Option<Held> {
    requests.sort_by_key(|r| precedence(&r.policy));
    let winner = requests[0].clone();
    for r in requests.iter().skip(1).filter(|r| r.asked != winner.asked) {
        conflicts.push(Conflict {
            knob: knob.clone(),
            won: winner.policy.clone(),
            lost: r.policy.clone(),
            why: format!(
                "{} asked for {} and {} for {}: {} ranks first ({})",
                winner.policy,
                winner.asked,
                r.policy,
                r.asked,
                winner.policy,
                Rule::Precedence.describe()
            ),
        });
    }
    let Knob::ClassAffinity { class } = &knob else { return Some(Held::new(knob, winner.asked, requests)) };
    let (Setting::Cpus(want), Some(cpuset)) = (&winner.asked, facts.cpusets.get(class)) else {
        return Some(Held::new(knob, winner.asked, requests));
    };
    let inside: Vec<usize> = want.iter().copied().filter(|c| cpuset.contains(c)).collect();
    if inside.is_empty() {
        conflicts.push(Conflict {
            knob: knob.clone(),
            won: "cpuset".into(),
            lost: winner.policy.clone(),
            why: format!(
                "{} asked for {} but class {class}'s cpuset is CPUs {}: the cpuset holds (the kernel refuses an affinity outside it) and the class is not pinned",
                winner.policy,
                winner.asked,
                crate::cpulist::format(cpuset)
            ),
        });
        return None;
    }
    if inside.len() < want.len() {
        requests[0].as_said = format!("{}, within class {class}'s cpuset {}", winner.asked, crate::cpulist::format(cpuset));
    }
    Some(Held::new(knob, Setting::Cpus(inside), requests))
}

#[cfg(test)]
#[path = "merge_tests.rs"]
mod tests;
