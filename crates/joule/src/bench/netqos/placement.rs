//! `joule bench net-qos`, section `placement`: joule's placement policy and the EAS-like
//! baseline decide over the same traces on an energy model (the shipped Odroid-XU4 one by
//! default, optionally this machine's own), and each decision is scored by the same evaluator
//! (`joule_core::policy::placement::evaluate`). Nothing here runs on the CPU being modelled:
//! every number is `model`, and the assumptions are listed in the JSON and in
//! docs/results/net-qos-placement.md beside the seed's 4.79× / 3.11× / 2.35×.
//!
//! A trace is a list of 10-second steps, each a set of apps with targets (FTP-like bulk flows
//! whose bandwidth target steps up; a PARSEC-like CPU app at a performance target). Per step
//! both policies decide; perf per watt of a trace = (Σ perf × dt) / (Σ energy), i.e. mean
//! performance over mean modelled CPU power. Performance counts each app's achieved/target,
//! capped at 1 (more than the target is not more of what was asked for); the uncapped
//! figure is reported beside it.

use crate::bench::report::{bar_plot, print_table};
use joule_core::energy::{EnergyModel, NetCost};
use joule_core::policy::placement::{decide_eas, decide_joule, App, AppKind, Outcome, Placement};
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

pub fn run(opts: &PlacementOpts) -> anyhow::Result<Vec<PlacementRow>> {
    let mut rows = Vec::new();
    for (mname, model) in &opts.models {
        model.validate()?;
        for sc in scenarios(model, opts.link_mbit) {
            for policy in ["joule", "eas"] {
                let (mut perf, mut unc, mut energy_j, mut met, mut picks) = (0.0, 0.0, 0.0, 0, Vec::new());
                for (k, apps) in sc.steps.iter().enumerate() {
                    let (p, o) = if policy == "joule" { decide_joule(model, apps, &opts.cost, opts.headroom_pct) } else { decide_eas(model, apps, &opts.cost) };
                    perf += o.perf() * STEP_S;
                    unc += o.perf_uncapped() * STEP_S;
                    energy_j += (o.power_mw + opts.board_mw) / 1000.0 * STEP_S;
                    met += usize::from(o.all_met());
                    picks.extend(choices(model, k, apps, &p, &o));
                }
                let t = STEP_S * sc.steps.len() as f64;
                rows.push(PlacementRow {
                    scenario: sc.name.into(),
                    group: sc.group.into(),
                    model: mname.clone(),
                    policy: policy.into(),
                    perf_per_watt: perf / energy_j.max(1e-12),
                    perf_per_watt_uncapped: unc / energy_j.max(1e-12),
                    perf: perf / t,
                    perf_uncapped: unc / t,
                    mean_power_mw: energy_j / t * 1000.0,
                    energy_j,
                    qos_met_steps: met,
                    steps: sc.steps.len(),
                    qos_met: met == sc.steps.len(),
                    choices: picks,
                    source: "model",
                });
            }
        }
    }
    Ok(rows)
}

/// joule / eas perf per watt for one (model, scenario).
#[derive(Debug, Clone, Serialize)]
pub struct Ratio {
    pub model: String,
    pub scenario: String,
    pub group: String,
    pub capped: f64,
    pub uncapped: f64,
}

pub fn ratios(rows: &[PlacementRow]) -> Vec<Ratio> {
    rows.iter()
        .filter(|r| r.policy == "joule")
        .filter_map(|j| {
            let e = rows.iter().find(|e| e.policy == "eas" && e.scenario == j.scenario && e.model == j.model)?;
            Some(Ratio {
                model: j.model.clone(),
                scenario: j.scenario.clone(),
                group: j.group.clone(),
                capped: j.perf_per_watt / e.perf_per_watt,
                uncapped: j.perf_per_watt_uncapped / e.perf_per_watt_uncapped,
            })
        })
        .collect()
}

/// The seed's figures: (group, joule-vs-EAS perf/W on the Odroid-XU4).
pub const SEED: [(&str, f64); 3] = [("ftp", 4.79), ("parsec50", 3.11), ("parsec75", 2.35)];

/// Per seed group on `model`: the mean of our ratios beside the seed's (`scenario` = the group,
/// `group` = the seed's figure as text).
pub fn versus_seed(rows: &[PlacementRow], model: &str) -> Vec<(Ratio, f64)> {
    let r = ratios(rows);
    SEED.iter()
        .map(|(g, seed)| {
            let mine: Vec<&Ratio> = r.iter().filter(|x| x.model == model && x.group == *g).collect();
            let n = mine.len().max(1) as f64;
            let mean = Ratio {
                model: model.into(),
                scenario: String::new(),
                group: g.to_string(),
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
                r.policy.clone(),
                format!("{:.3}", r.perf_per_watt),
                format!("{:.3}", r.perf_per_watt_uncapped),
                format!("{:.0}", r.mean_power_mw),
                format!("{:.2}", r.perf),
                format!("{}/{}", r.qos_met_steps, r.steps),
            ]
        })
        .collect();
    print_table(&["model", "scenario", "policy", "perf/W", "perf/W uncapped", "power mW", "perf", "QoS met"], &table);
    println!();
    let r: Vec<Vec<String>> =
        ratios(rows).into_iter().map(|r| vec![r.model, r.scenario, r.group, format!("{:.2}×", r.capped), format!("{:.2}×", r.uncapped)]).collect();
    print_table(&["model", "scenario", "seed group", "joule/eas perf/W", "uncapped"], &r);
    println!();
    let first = rows.first().map(|r| r.model.clone()).unwrap_or_default();
    let s: Vec<Vec<String>> = versus_seed(rows, &first)
        .into_iter()
        .map(|(r, seed)| vec![r.group, format!("{:.2}×", r.capped), format!("{:.2}×", r.uncapped), format!("{seed:.2}×")])
        .collect();
    print_table(&[&format!("group ({first})"), "joule/eas (model)", "uncapped", "seed (measured, XU4)"], &s);
    println!("all values: source = model (energy model + policy arithmetic; nothing measured)");
}

/// One bar per scenario: joule / EAS perf per watt on the first model (perf per watt itself
/// spans two orders of magnitude between scenarios), then the seed's three figures.
pub fn plot(rows: &[PlacementRow], path: &Path) -> anyhow::Result<()> {
    let first = rows.first().map(|r| r.model.clone()).unwrap_or_default();
    let mut groups: Vec<(String, Vec<f64>)> = ratios(rows).into_iter().filter(|r| r.model == first).map(|r| (r.scenario, vec![r.capped])).collect();
    groups.extend(SEED.iter().map(|(g, v)| (format!("seed: {g}"), vec![*v])));
    bar_plot(path, &format!("joule / EAS performance per watt on the {first} energy model (model), and the seed's (measured)"), "ratio", &groups)
}

/// The assumptions behind every number of this section.
pub fn assumptions(opts: &PlacementOpts) -> Vec<String> {
    let c = &opts.cost;
    let mut v = vec![
        "every value is computed (source = model): no workload runs, no power is measured".to_string(),
        format!("network CPU cost (model): {} softirq cycles/packet, {} app cycles/packet + {} app cycles/byte, in cycles of the biggest core at its top OPP", c.softirq_cycles_per_packet, c.app_cycles_per_packet, c.app_cycles_per_byte),
        "softirq work of a flow runs on the CPU of its app thread (receive flow steering), for both policies".into(),
        format!("an unlimited bulk sender fills the {} Mbit/s link, shared by its flows; joule limits each flow to its target", opts.link_mbit),
        "performance = Σ over apps of achieved/target, capped at 1; PARSEC-like app = one CPU-bound thread per CPU of the biggest domain, perf = capacity served / 1024".into(),
        "network work (softirq + app thread) is served before CPU-bound threads and, when it does not fit, slowed as a whole (TCP flow control), not starved".into(),
        format!("power = energy model (Σ busy × P(OPP) per CPU, plus each domain's static_mw when busy) + {} mW for the rest of the board", opts.board_mw),
        "EAS baseline: smallest domain where the thread's own util × 1.25 fits, schedutil OPP = 1.25 × busiest CPU util (softirq included), no over-utilisation fallback, steady state".into(),
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
    fn both_policies_run_every_scenario_and_joule_is_never_less_efficient() {
        let rows = run(&PlacementOpts::default()).unwrap();
        assert_eq!(rows.len(), 10);
        assert!(rows.iter().all(|r| r.source == "model" && r.perf_per_watt.is_finite() && r.perf_per_watt > 0.0));
        for r in ratios(&rows) {
            assert!(r.capped >= 1.0, "{r:?}");
        }
        assert!(rows.iter().filter(|r| r.policy == "joule").all(|r| r.qos_met), "joule meets every target on the XU4 model");
        let v = serde_json::to_value(&rows[0]).unwrap();
        for k in ["scenario", "policy", "perf_per_watt", "source", "energy_j", "qos_met"] {
            assert!(v.get(k).is_some(), "{k}");
        }
        assert_eq!(versus_seed(&rows, "odroid-xu4").len(), 3);
    }
}
