//! The merge rules on hand-made plans: the lowest cap holds and keeps every request with its
//! reason; lifting one cap leaves the others; affinity goes by precedence within the cpuset.

use super::*;
use crate::config::Direction;
use crate::control::owner;

/// Two CPUs with cpufreq, 800 MHz to 3 GHz; class `web` confined to CPU 1 by its cpuset.
fn facts() -> Facts {
    let cpufreq = [(0, (800_000, 3_000_000)), (1, (800_000, 3_000_000))].into_iter().collect();
    Facts { cpufreq, cpusets: [("web".to_string(), vec![1])].into_iter().collect() }
}

fn merged(wants: &[(&str, Want)]) -> Plan {
    let mut plan = Plan::new(0);
    for (policy, want) in wants {
        plan.push(policy, None, want.clone(), format!("{policy} wants it"));
    }
    merge(&mut plan, &facts());
    plan
}

fn freq(cpus: Option<Vec<usize>>, limit: FreqLimit) -> Want {
    Want::FreqCap { cpus, limit }
}

fn setting(plan: &Plan, knob: Knob) -> Option<Setting> {
    plan.held(&knob).map(|h| h.setting.clone())
}

#[test]
fn the_lowest_frequency_cap_holds_per_cpu_with_every_request_and_its_reason() {
    let thermal = ("thermal", freq(None, FreqLimit::Pct(85.0)));
    let placement = ("placement", freq(Some(vec![1]), FreqLimit::Khz(1_600_000)));
    let plan = merged(&[thermal.clone(), placement.clone()]);
    // CPU 0: only thermal asks; CPU 1: placement's 1.6 GHz is below thermal's 2.55 GHz.
    assert_eq!(setting(&plan, Knob::CpufreqMax { cpu: 0 }), Some(Setting::Khz(2_550_000)));
    let cpu1 = plan.held(&Knob::CpufreqMax { cpu: 1 }).unwrap();
    assert_eq!((cpu1.setting.clone(), cpu1.won_by(), cpu1.actuator.as_str()), (Setting::Khz(1_600_000), "placement", owner::CPUFREQ));
    assert_eq!(cpu1.why, "cpu1 max 1.6 GHz: placement (1.6 GHz), thermal (85 % of the maximum)");
    assert_eq!(cpu1.requests[1].reason, "thermal wants it");
    assert!(plan.conflicts.is_empty(), "caps never conflict: each requester gets at most what it asked for");

    // The stage cools: thermal lifts its cap; placement's stays where placement asked.
    let cool = ("thermal", freq(None, FreqLimit::Pct(100.0)));
    let plan = merged(&[cool.clone(), placement.clone()]);
    assert_eq!(setting(&plan, Knob::CpufreqMax { cpu: 0 }), Some(Setting::Unlimited));
    assert_eq!(setting(&plan, Knob::CpufreqMax { cpu: 1 }), Some(Setting::Khz(1_600_000)));
    // Placement lets go (its class left): only thermal's cap is left, on both CPUs.
    let plan = merged(&[("thermal", freq(None, FreqLimit::Pct(50.0)))]);
    assert_eq!(setting(&plan, Knob::CpufreqMax { cpu: 1 }), Some(Setting::Khz(1_500_000)));
    // Never below the CPU's minimum.
    let plan = merged(&[("thermal", freq(None, FreqLimit::Pct(10.0))), placement]);
    assert_eq!(setting(&plan, Knob::CpufreqMax { cpu: 1 }), Some(Setting::Khz(800_000)));
}

#[test]
fn a_frequency_cap_on_a_machine_without_cpufreq_is_a_note_not_a_knob() {
    let mut plan = Plan::new(0);
    plan.push("thermal", None, freq(None, FreqLimit::Pct(70.0)), "stage 2");
    plan.push("placement", None, freq(Some(vec![0, 5]), FreqLimit::Khz(1_000_000)), "domain a7");
    merge(&mut plan, &Facts::default());
    assert!(plan.knobs.is_empty());
    assert_eq!(plan.notes.len(), 2, "{:?}", plan.notes);
    assert!(plan.notes[0].contains("no cpufreq on this machine") && plan.notes[1].contains("CPUs 0,5"), "{:?}", plan.notes);
}

#[test]
fn class_caps_and_rates_merge_to_the_lowest() {
    let cap = |p| Want::CapClass { class: "batch".into(), cpu_pct: p };
    let plan = merged(&[("thermal", cap(35.0)), ("other", cap(60.0))]);
    let held = plan.held(&Knob::ClassCpuCap { class: "batch".into() }).unwrap();
    assert_eq!((held.setting.clone(), held.won_by(), held.actuator.as_str()), (Setting::CpuPct(35.0), "thermal", owner::CGROUP_CPU));
    let rate = |r| Want::LimitRate { interface: "veth0".into(), direction: Direction::Egress, class: Some("ftp".into()), flow: None, rate_mbit: r };
    let plan = merged(&[("net", rate(80.0)), ("placement", rate(50.0)), ("net", cap(100.0))]);
    let knob = Knob::RateLimit { interface: "veth0".into(), direction: Direction::Egress, class: Some("ftp".into()), flow: None };
    let held = plan.held(&knob).unwrap();
    assert_eq!((held.setting.clone(), held.won_by(), held.requests.len()), (Setting::Mbit(50.0), "placement", 2));
    assert_eq!(setting(&plan, Knob::ClassCpuCap { class: "batch".into() }), Some(Setting::Unlimited));
}

#[test]
fn affinity_goes_by_precedence_and_says_who_lost() {
    let elevate = ("elevate", Want::Elevate { class: "lat".into(), cpu: 0, slice_us: 50, pattern: "shared".into() });
    let place = ("placement", Want::Affinity { class: "lat".into(), cpus: vec![0, 1] });
    // Placement asked first; elevate still ranks first.
    let plan = merged(&[place.clone(), elevate.clone()]);
    let held = plan.held(&Knob::ClassAffinity { class: "lat".into() }).unwrap();
    assert_eq!((held.setting.clone(), held.won_by(), held.actuator.as_str()), (Setting::Cpus(vec![0]), "elevate", owner::TASK_SCHED));
    assert_eq!(plan.conflicts.len(), 1);
    let c = &plan.conflicts[0];
    assert_eq!((c.won.as_str(), c.lost.as_str()), ("elevate", "placement"));
    assert!(c.why.contains("CPUs 0-1") && c.why.contains("ranks first"), "{}", c.why);
    // Alone, placement holds.
    let plan = merged(&[place]);
    assert_eq!(setting(&plan, Knob::ClassAffinity { class: "lat".into() }), Some(Setting::Cpus(vec![0, 1])));
    assert!(plan.conflicts.is_empty());
}

#[test]
fn the_cpuset_bounds_affinity_and_wins_when_nothing_of_it_is_inside() {
    // web's cpuset is CPU 1: CPUs 0-1 become 1; CPU 0 alone cannot hold.
    let plan = merged(&[("placement", Want::Affinity { class: "web".into(), cpus: vec![0, 1] })]);
    let held = plan.held(&Knob::ClassAffinity { class: "web".into() }).unwrap();
    assert_eq!(held.setting, Setting::Cpus(vec![1]));
    assert!(held.why.contains("within class web's cpuset 1"), "{}", held.why);
    let plan = merged(&[("elevate", Want::Elevate { class: "web".into(), cpu: 0, slice_us: 50, pattern: "shared".into() })]);
    assert_eq!(plan.held(&Knob::ClassAffinity { class: "web".into() }), None, "not pinned at all");
    let c = &plan.conflicts[0];
    assert_eq!((c.won.as_str(), c.lost.as_str()), ("cpuset", "elevate"));
    assert!(c.why.contains("cpuset is CPUs 1"), "{}", c.why);
}

#[test]
fn decisions_that_name_no_knob_stay_out_of_the_merge_and_the_json_keeps_both() {
    let plan = merged(&[("classes", Want::HoldClasses { classes: vec!["a".into()] }), ("nap", Want::Nap { nap: true, idle_for_ms: 5 })]);
    assert!(plan.knobs.is_empty() && plan.conflicts.is_empty());
    let plan = merged(&[("thermal", freq(None, FreqLimit::Pct(85.0)))]);
    let v = serde_json::to_value(&plan).unwrap();
    assert_eq!(v["knobs"][0]["knob"], "cpufreq_max");
    assert_eq!(v["knobs"][0]["cpu"], 0);
    assert_eq!(v["knobs"][0]["setting"]["khz"], 2_550_000);
    assert_eq!(v["knobs"][0]["rule"], "lowest");
    let back = serde_json::from_value::<Plan>(v).unwrap();
    assert_eq!((back.knobs, back.decisions), (plan.knobs, plan.decisions), "the plan's JSON reads back");
}
