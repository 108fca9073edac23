//! `joule bench net-qos`, section `placement`: joule's placement policy and the EAS baseline
//! (the kernel's energy-aware wake-up rule on the same model) decide over the same traces on an energy model (the shipped Odroid-XU4 one by
//! default, optionally this machine's own), and each decision is scored by the same evaluator
//! (`joule_core::policy::placement::evaluate`). Nothing here runs on the CPU being modelled:
//! every number is `model`, and the assumptions are listed in the JSON and in
//! docs/results/net-qos-placement.md beside the seed's 4.79× / 3.11× / 2.35×.
//!
//! A trace is a list of 10-second steps, each a set of apps with targets (FTP-like bulk flows
//! whose bandwidth target steps up; a PARSEC-like CPU app at a performance target). Per step
//! both policies decide; perf per watt of a trace = (Σ perf × dt) / (Σ energy), i.e. mean
//! performance over mean modelled CPU power. Performance counts each app's achieved/target,
//! uncapped (a baseline that sends more gets credit for it: the headline), and capped at 1
//! beside it. Each trace runs with two bandwidth rules, so joule's gain from limiting shows
//! apart from its placement: `limits: none` (joule's placement and frequency caps without its
//! limits, as the agent holds them when a target names no interface; the baseline unlimited)
//! and `limits: same` (joule as it decides; the baseline held to the limits joule chose for
//! that step).

use crate::bench::report::{bar_plot, print_table};
use joule_core::energy::{EnergyModel, NetCost};
use joule_core::policy::placement::{decide_eas, decide_joule, evaluate, App, AppKind, Outcome, Placement};
use serde::Serialize;
use std::path::Path;

/// Seconds each step of a trace lasts.
pub const STEP_S: f64 = 10.0;

pub struct PlacementOpts {
    /// (name, model): the XU4 model first; this machine's model too when asked.
    pub models: Vec<(String, EnergyModel)>,
    pub cost: NetCost,
    pub headroom_pct: f64,
    /// Line rate an unlimited bulk sender fills (shared by its flows), Mbit/s.
    pub link_mbit: f64,
    /// Power of the rest of the board (memory, NIC, USB, regulators), added to every step of
    /// both policies: it changes no decision, only the ratio (sensitivity; 0 by default).
    pub board_mw: f64,
}

impl Default for PlacementOpts {
    fn default() -> Self {
        PlacementOpts {
            models: vec![("odroid-xu4".into(), EnergyModel::odroid_xu4())],
            cost: NetCost::default(),
            headroom_pct: 10.0,
            link_mbit: 1000.0,
            board_mw: 0.0,
        }
    }
}

/// One class's decision at one step.
#[derive(Debug, Clone, Serialize)]
pub struct Choice {
    pub step: usize,
    pub class: String,
    pub domain: String,
    pub freq_mhz: u64,
    pub bandwidth_mbit: Option<f64>,
    pub achieved_mbit: Option<f64>,
    pub perf: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct PlacementRow {
    pub scenario: String,
    /// The seed's figure this scenario stands beside ("ftp" 4.79×, "parsec50" 3.11×,
    /// "parsec75" 2.35×).
    pub group: String,
    pub model: String,
    pub policy: String,
    /// "none": no sender limited; "same": joule's limits, for the baseline too.
    pub limits: String,
    pub perf_per_watt: f64,
    pub perf_per_watt_uncapped: f64,
    /// Mean Σ capped performance over the trace.
    pub perf: f64,
    pub perf_uncapped: f64,
    pub mean_power_mw: f64,
    pub energy_j: f64,
    /// Steps where every app met its target, of `steps`.
    pub qos_met_steps: usize,
    pub steps: usize,
    pub qos_met: bool,
    pub choices: Vec<Choice>,
    pub source: &'static str,
}

struct Scenario {
    name: &'static str,
    group: &'static str,
    steps: Vec<Vec<App>>,
}

fn ftp(n: usize, target_mbit: f64, bytes: f64, link_mbit: f64) -> Vec<App> {
    (0..n).map(|i| App { class: format!("ftp{i}"), kind: AppKind::Net { target_mbit, mean_packet_bytes: bytes, offered_mbit: link_mbit / n as f64 } }).collect()
}

/// A PARSEC-like app: one CPU-bound thread per CPU of the biggest domain (4 on the XU4).
fn parsec(frac: f64, threads: u32) -> App {
    App { class: "parsec".into(), kind: AppKind::Cpu { perf_fraction: frac, threads } }
}

/// The traces: FTP-like bulk flows at several bandwidths (1 and 4 flows, full-size and small
/// packets), and a PARSEC-like app at 50 % and 75 % co-running with two FTP flows.
fn scenarios(model: &EnergyModel, link: f64) -> Vec<Scenario> {
    let ramp = [25.0, 50.0, 100.0, 200.0, 400.0];
    let big = model.domains.iter().max_by(|a, b| a.max_capacity().total_cmp(&b.max_capacity())).map_or(1, |d| d.cpus.len() as u32);
    let co = |frac: f64| ramp[..4].iter().map(|b| [vec![parsec(frac, big)], ftp(2, *b / 2.0, 1448.0, link)].concat()).collect();
    vec![
        Scenario { name: "ftp-1flow", group: "ftp", steps: ramp.iter().map(|b| ftp(1, *b, 1448.0, link)).collect() },
        Scenario { name: "ftp-4flows", group: "ftp", steps: ramp.iter().map(|b| ftp(4, *b / 4.0, 1448.0, link)).collect() },
        Scenario { name: "ftp-small-packets", group: "ftp", steps: ramp[..4].iter().map(|b| ftp(1, *b, 256.0, link)).collect() },
        Scenario { name: "parsec50+ftp", group: "parsec50", steps: co(0.5) },
        Scenario { name: "parsec75+ftp", group: "parsec75", steps: co(0.75) },
    ]
}

fn choices(model: &EnergyModel, step: usize, apps: &[App], p: &Placement, o: &Outcome) -> Vec<Choice> {
    apps.iter()
        .enumerate()
        .filter_map(|(i, a)| {
            let k = p.domain[i]?;
            Some(Choice {
                step,
                class: a.class.clone(),
                domain: model.domains[k].name.clone(),
                freq_mhz: model.domains[k].opps[p.opp[k]].frequency_khz / 1000,
                bandwidth_mbit: p.limit_mbit[i],
                achieved_mbit: o.apps[i].achieved_mbit,
                perf: o.apps[i].perf_uncapped,
            })
        })
        .collect()
}

/// The bandwidth rules each trace runs under.
pub const LIMITS: [&str; 2] = ["none", "same"];

/// One (policy, limits) row's sums over a trace.
#[derive(Default)]
struct Acc {
    perf: f64,
    unc: f64,
    energy_j: f64,
    met: usize,
    picks: Vec<Choice>,
}

impl Acc {
    fn add(&mut self, model: &EnergyModel, board_mw: f64, step: usize, apps: &[App], p: &Placement, o: &Outcome) {
        self.perf += o.perf() * STEP_S;
        self.unc += o.perf_uncapped() * STEP_S;
        self.energy_j += (o.power_mw + board_mw) / 1000.0 * STEP_S;
        self.met += usize::from(o.all_met());
        self.picks.extend(choices(model, step, apps, p, o));
    }
}

/// (policy, limits) of each row a trace gives, in `decide_step`'s order.
const RUNS: [(&str, &str); 4] = [("joule", "none"), ("eas", "none"), ("joule", "same"), ("eas", "same")];

/// One step's placement and outcome per entry of [`RUNS`].
fn decide_step(model: &EnergyModel, apps: &[App], opts: &PlacementOpts) -> [(Placement, Outcome); 4] {
    let (jp, jo) = decide_joule(model, apps, &opts.cost, opts.headroom_pct);
    let free = Placement { limit_mbit: vec![None; apps.len()], ..jp.clone() };
    let free_o = evaluate(model, apps, &free, &opts.cost);
    let (ep, eo) = decide_eas(model, apps, &opts.cost, &[]);
    let (sp, so) = decide_eas(model, apps, &opts.cost, &jp.limit_mbit);
    [(free, free_o), (ep, eo), (jp, jo), (sp, so)]
}

pub fn run(opts: &PlacementOpts) -> anyhow::Result<Vec<PlacementRow>> {
    let mut rows = Vec::new();
    for (mname, model) in &opts.models {
        model.validate()?;
        for sc in scenarios(model, opts.link_mbit) {
            let mut acc: [Acc; 4] = Default::default();
            for (k, apps) in sc.steps.iter().enumerate() {
                for (a, (p, o)) in acc.iter_mut().zip(decide_step(model, apps, opts)) {
                    a.add(model, opts.board_mw, k, apps, &p, &o);
                }
            }
            let t = STEP_S * sc.steps.len() as f64;
            for ((policy, limits), a) in RUNS.into_iter().zip(acc) {
                rows.push(PlacementRow {
                    scenario: sc.name.into(),
                    group: sc.group.into(),
                    model: mname.clone(),
                    policy: policy.into(),
                    limits: limits.into(),
                    perf_per_watt: a.perf / a.energy_j.max(1e-12),
                    perf_per_watt_uncapped: a.unc / a.energy_j.max(1e-12),
                    perf: a.perf / t,
                    perf_uncapped: a.unc / t,
                    mean_power_mw: a.energy_j / t * 1000.0,
                    energy_j: a.energy_j,
                    qos_met_steps: a.met,
                    steps: sc.steps.len(),
                    qos_met: a.met == sc.steps.len(),
                    choices: a.picks,
                    source: "model",
                });
            }
        }
    }
    Ok(rows)
}

/// joule / eas perf per watt for one (model, scenario, limits).
#[derive(Debug, Clone, Serialize)]
pub struct Ratio {
    pub model: String,
    pub scenario: String,
    pub group: String,
    pub limits: String,
    pub capped: f64,
    /// The headline: performance past the target counts.
    pub uncapped: f64,
}

pub fn ratios(rows: &[PlacementRow]) -> Vec<Ratio> {
    rows.iter()
        .filter(|r| r.policy == "joule")
        .filter_map(|j| {
            let e = rows.iter().find(|e| e.policy == "eas" && e.scenario == j.scenario && e.model == j.model && e.limits == j.limits)?;
            Some(Ratio {
                model: j.model.clone(),
                scenario: j.scenario.clone(),
                group: j.group.clone(),
                limits: j.limits.clone(),
                capped: j.perf_per_watt / e.perf_per_watt,
                uncapped: j.perf_per_watt_uncapped / e.perf_per_watt_uncapped,
            })
        })
        .collect()
}

/// The seed's figures: (group, joule-vs-EAS perf/W on the Odroid-XU4).
pub const SEED: [(&str, f64); 3] = [("ftp", 4.79), ("parsec50", 3.11), ("parsec75", 2.35)];

/// Per seed group and bandwidth rule on `model`: the mean of our ratios beside the seed's
/// (`scenario` empty).
pub fn versus_seed(rows: &[PlacementRow], model: &str) -> Vec<(Ratio, f64)> {
    let r = ratios(rows);
    SEED.iter()
        .flat_map(|g| LIMITS.iter().map(move |l| (g, l)))
        .map(|((g, seed), limits)| {
            let mine: Vec<&Ratio> = r.iter().filter(|x| x.model == model && x.group == *g && x.limits == *limits).collect();
            let n = mine.len().max(1) as f64;
            let mean = Ratio {
                model: model.into(),
                scenario: String::new(),
                group: g.to_string(),
                limits: limits.to_string(),
                capped: mine.iter().map(|x| x.capped).sum::<f64>() / n,
                uncapped: mine.iter().map(|x| x.uncapped).sum::<f64>() / n,
            };
            (mean, *seed)
        })
        .collect()
}

pub fn print(rows: &[PlacementRow]) {
    let table: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            vec![
                r.model.clone(),
                r.scenario.clone(),
                r.limits.clone(),
                r.policy.clone(),
                format!("{:.3}", r.perf_per_watt_uncapped),
                format!("{:.3}", r.perf_per_watt),
                format!("{:.0}", r.mean_power_mw),
                format!("{:.2}", r.perf_uncapped),
                format!("{}/{}", r.qos_met_steps, r.steps),
            ]
        })
        .collect();
    print_table(&["model", "scenario", "limits", "policy", "perf/W", "perf/W capped", "power mW", "perf", "QoS met"], &table);
    println!();
    let r: Vec<Vec<String>> =
        ratios(rows).into_iter().map(|r| vec![r.model, r.scenario, r.group, r.limits, format!("{:.2}×", r.uncapped), format!("{:.2}×", r.capped)]).collect();
    print_table(&["model", "scenario", "seed group", "limits", "joule/eas perf/W", "capped"], &r);
    println!();
    let first = rows.first().map(|r| r.model.clone()).unwrap_or_default();
    let s: Vec<Vec<String>> = versus_seed(rows, &first)
        .into_iter()
        .map(|(r, seed)| vec![r.group, r.limits, format!("{:.2}×", r.uncapped), format!("{:.2}×", r.capped), format!("{seed:.2}×")])
        .collect();
    print_table(&[&format!("group ({first})"), "limits", "joule/eas (model)", "capped", "seed (measured, XU4)"], &s);
    println!("all values: source = model (energy model + policy arithmetic; nothing measured); perf/W counts performance past the target, capped counts it up to the target");
}

/// One bar per scenario and bandwidth rule: joule / EAS performance per watt (uncapped) on the
/// first model (perf per watt itself spans two orders of magnitude between scenarios), then the
/// seed's three figures.
pub fn plot(rows: &[PlacementRow], path: &Path) -> anyhow::Result<()> {
    let first = rows.first().map(|r| r.model.clone()).unwrap_or_default();
    let mut groups: Vec<(String, Vec<f64>)> =
        ratios(rows).into_iter().filter(|r| r.model == first).map(|r| (format!("{} ({})", r.scenario, r.limits), vec![r.uncapped])).collect();
    groups.extend(SEED.iter().map(|(g, v)| (format!("seed: {g}"), vec![*v])));
    bar_plot(path, &format!("joule / EAS perf per watt (uncapped), limits none / same, {first} energy model (model); seed's (measured)"), "ratio", &groups)
}

/// The assumptions behind every number of this section.
pub fn assumptions(opts: &PlacementOpts) -> Vec<String> {
    let c = &opts.cost;
    let mut v = vec![
        "every value is computed (source = model): no workload runs, no power is measured".to_string(),
        format!("network CPU cost (model): {} softirq cycles/packet, {} app cycles/packet + {} app cycles/byte, in cycles of the biggest core at its top OPP", c.softirq_cycles_per_packet, c.app_cycles_per_packet, c.app_cycles_per_byte),
        "softirq work of a flow runs on the CPU of its app thread (receive flow steering), for both policies".into(),
        format!("an unlimited bulk sender fills the {} Mbit/s link, shared by its flows; joule limits each flow to its target", opts.link_mbit),
        "limits none: joule's placement and frequency caps without its bandwidth limits (the agent when a target names no interface), the baseline unlimited; limits same: joule as it decides, the baseline's senders held to the limits joule chose for that step".into(),
        "performance = Σ over apps of achieved/target, uncapped (headline) and capped at 1 (beside it); PARSEC-like app = one CPU-bound thread per CPU of the biggest domain, perf = capacity served / 1024".into(),
        "network work (softirq + app thread) is served before CPU-bound threads and, when it does not fit, slowed as a whole (TCP flow control), not starved".into(),
        format!("power = energy model (Σ busy × P(OPP) per CPU, plus each domain's static_mw when busy) + {} mW for the rest of the board", opts.board_mw),
        "EAS baseline: threads placed one by one; per domain the CPU with the most spare capacity where the thread's own util × 1.25 fits (capacity less RT and softirq work), priced by the domain's energy delta on the same model (P(OPP) × Σ util / capacity(OPP), OPP = schedutil's for 1.25 × the busiest CPU, softirq included), least delta wins; no fit anywhere: least loaded CPU of the biggest domain; RT: least loaded CPU, top OPP; no previous-CPU preference (steady state)".into(),
        format!("joule: exhaustive class→domain search, worst-fit packing, {} % headroom for network/RT work", opts.headroom_pct),
        format!("trace steps of {STEP_S} s; each policy decides once per step"),
    ];
    for (n, m) in &opts.models {
        v.extend(m.notes.iter().map(|x| format!("{n} model: {x}")));
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_scenario_runs_under_both_limit_rules_and_the_rules_hold() {
        let rows = run(&PlacementOpts::default()).unwrap();
        assert_eq!(rows.len(), 20, "5 scenarios × 2 policies × 2 limit rules");
        assert!(rows.iter().all(|r| r.source == "model" && r.perf_per_watt.is_finite() && r.perf_per_watt > 0.0));
        assert_eq!(ratios(&rows).len(), 10);
        let row = |p: &'static str, l: &'static str| rows.iter().filter(move |r| r.policy == p && r.limits == l);
        assert!(row("joule", "same").all(|r| r.qos_met), "joule meets every target on the XU4 model with its limits");
        for c in row("joule", "none").chain(row("eas", "none")).flat_map(|r| &r.choices) {
            assert_eq!(c.bandwidth_mbit, None, "limits none: {c:?}");
        }
        // Limits same: every baseline sender is held to what joule gave the same class.
        for (e, j) in row("eas", "same").zip(row("joule", "same")) {
            for (ec, jc) in e.choices.iter().zip(&j.choices) {
                assert_eq!((ec.step, &ec.class, ec.bandwidth_mbit), (jc.step, &jc.class, jc.bandwidth_mbit));
                assert!(ec.achieved_mbit.unwrap_or(0.0) <= jc.bandwidth_mbit.unwrap_or(f64::INFINITY) + 1e-9, "{ec:?}");
            }
        }
        let v = serde_json::to_value(&rows[0]).unwrap();
        for k in ["scenario", "policy", "limits", "perf_per_watt", "perf_per_watt_uncapped", "source", "energy_j", "qos_met"] {
            assert!(v.get(k).is_some(), "{k}");
        }
        assert_eq!(versus_seed(&rows, "odroid-xu4").len(), 6);
    }
}
