//! What the placement section prints and writes: the rows, joule / EAS per scenario (never as a
//! win where joule missed a target: the ratio is withheld and the reason printed), the means
//! beside the seed's figures, each decision beside the baseline's for the boards' models, the
//! plot and the assumptions.

use super::{PlacementOpts, PlacementRow, LIMITS, STEP_S};
use crate::report::{bar_plot, print_table};
use serde::Serialize;
use std::path::Path;

/// joule / eas perf per watt for one (model, scenario, limits).
#[derive(Debug, Clone, Serialize)]
pub struct Ratio {
    pub model: String,
    pub scenario: String,
    pub group: String,
    pub limits: String,
    /// `None` where joule missed a target in some step: a placement that misses QoS is no win.
    pub capped: Option<f64>,
    /// The headline: performance past the target counts.
    pub uncapped: Option<f64>,
    pub joule_qos_met: bool,
    pub eas_qos_met: bool,
}

pub fn ratios(rows: &[PlacementRow]) -> Vec<Ratio> {
    rows.iter()
        .filter(|r| r.policy == "joule")
        .filter_map(|j| {
            let e = rows.iter().find(|e| e.policy == "eas" && e.scenario == j.scenario && e.model == j.model && e.limits == j.limits)?;
            let win = |v: f64| j.qos_met.then_some(v);
            Some(Ratio {
                model: j.model.clone(),
                scenario: j.scenario.clone(),
                group: j.group.clone(),
                limits: j.limits.clone(),
                capped: win(j.perf_per_watt / e.perf_per_watt),
                uncapped: win(j.perf_per_watt_uncapped / e.perf_per_watt_uncapped),
                joule_qos_met: j.qos_met,
                eas_qos_met: e.qos_met,
            })
        })
        .collect()
}

/// The seed's figures: (group, joule-vs-EAS perf/W on the Odroid-XU4).
pub const SEED: [(&str, f64); 3] = [("ftp", 4.79), ("parsec50", 3.11), ("parsec75", 2.35)];

/// Per seed group and bandwidth rule on `model`: the mean of our ratios beside the seed's
/// (`scenario` empty). A group where joule missed a target in any scenario has no mean.
pub fn versus_seed(rows: &[PlacementRow], model: &str) -> Vec<(Ratio, f64)> {
    let r = ratios(rows);
    SEED.iter()
        .flat_map(|g| LIMITS.iter().map(move |l| (g, l)))
        .map(|((g, seed), limits)| {
            let mine: Vec<&Ratio> = r.iter().filter(|x| x.model == model && x.group == *g && x.limits == *limits).collect();
            let mean = |f: fn(&Ratio) -> Option<f64>| {
                let v: Option<Vec<f64>> = mine.iter().map(|x| f(x)).collect();
                v.filter(|v| !v.is_empty()).map(|v| v.iter().sum::<f64>() / v.len() as f64)
            };
            let ratio = Ratio {
                model: model.into(),
                scenario: String::new(),
                group: g.to_string(),
                limits: limits.to_string(),
                capped: mean(|x| x.capped),
                uncapped: mean(|x| x.uncapped),
                joule_qos_met: mine.iter().all(|x| x.joule_qos_met),
                eas_qos_met: mine.iter().all(|x| x.eas_qos_met),
            };
            (ratio, *seed)
        })
        .collect()
}

fn times(v: Option<f64>) -> String {
    v.map_or_else(|| "n/a (joule misses QoS)".into(), |v| format!("{v:.2}×"))
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
    let r: Vec<Vec<String>> = ratios(rows)
        .into_iter()
        .map(|r| {
            let eas = if r.eas_qos_met { "" } else { " (eas misses QoS)" };
            vec![r.model, r.scenario, r.group, r.limits, format!("{}{eas}", times(r.uncapped)), times(r.capped)]
        })
        .collect();
    print_table(&["model", "scenario", "seed group", "limits", "joule/eas perf/W", "capped"], &r);
    for m in rows.iter().filter(|r| !r.qos_met) {
        println!("{} misses QoS: {} {} limits {}: {}", m.policy, m.model, m.scenario, m.limits, m.qos_missed.join("; "));
    }
    println!();
    // Per model, the mean over each seed group's scenarios (the seed's figures are the XU4's).
    let mut models: Vec<&str> = rows.iter().map(|r| r.model.as_str()).collect();
    models.dedup();
    for (k, model) in models.into_iter().enumerate() {
        if k > 0 {
            println!();
        }
        let s: Vec<Vec<String>> =
            versus_seed(rows, model).into_iter().map(|(r, seed)| vec![r.group, r.limits, times(r.uncapped), times(r.capped), format!("{seed:.2}×")]).collect();
        print_table(&[&format!("group ({model})"), "limits", "joule/eas (model)", "capped", "seed (measured, XU4)"], &s);
    }
    println!("all values: source = model (energy model + the bench's plant; nothing measured); perf/W counts performance past the target, capped counts it up to the target; a ratio is reported only where joule met every class's target in every step");
}

/// Each class's decision per step, joule's beside the baseline's, for the rows of `model`.
pub fn decisions_table(rows: &[PlacementRow], model: &str) {
    let mut table: Vec<Vec<String>> = Vec::new();
    for j in rows.iter().filter(|r| r.model == model && r.policy == "joule") {
        let Some(e) = rows.iter().find(|e| e.policy == "eas" && e.model == model && e.scenario == j.scenario && e.limits == j.limits) else { continue };
        for jc in &j.choices {
            let ec = e.choices.iter().find(|c| c.step == jc.step && c.class == jc.class);
            let show = |c: &super::Choice| {
                let mhz: Vec<String> = c.freq_mhz.iter().map(|f| f.to_string()).collect();
                let limit = c.bandwidth_mbit.map_or(String::new(), |l| format!(", ≤ {l} Mbit/s"));
                let miss = if c.qos_met { "" } else { ", MISSES" };
                format!("{} @ {} MHz{limit} ({:.2}{miss})", c.domain, mhz.join("/"), c.perf)
            };
            let step_s = (jc.step as f64 * STEP_S) as u64;
            let row = vec![j.scenario.clone(), j.limits.clone(), format!("{step_s} s"), jc.class.clone(), show(jc), ec.map_or("-".into(), show)];
            // Classes of one step decided alike share a row (`ftp0,ftp1`).
            match table.last_mut() {
                Some(last) if last[..3] == row[..3] && last[4..] == row[4..] => last[3] = format!("{},{}", last[3], row[3]),
                _ => table.push(row),
            }
        }
    }
    println!("decisions on {model} (domain @ frequency, limit, achieved/target on the bench's plant):");
    print_table(&["scenario", "limits", "step", "class", "joule", "eas"], &table);
}

/// One bar per scenario and bandwidth rule: joule / EAS performance per watt (uncapped) on the
/// first model, where joule met every target (perf per watt itself spans two orders of
/// magnitude between scenarios), then the seed's three figures.
pub fn plot(rows: &[PlacementRow], path: &Path) -> anyhow::Result<()> {
    let first = rows.first().map(|r| r.model.clone()).unwrap_or_default();
    let mut groups: Vec<(String, Vec<f64>)> =
        ratios(rows).into_iter().filter(|r| r.model == first).filter_map(|r| Some((format!("{} ({})", r.scenario, r.limits), vec![r.uncapped?]))).collect();
    groups.extend(SEED.iter().map(|(g, v)| (format!("seed: {g}"), vec![*v])));
    bar_plot(path, &format!("joule / EAS perf per watt (uncapped), limits none / same, {first} energy model (model); seed's (measured)"), "ratio", &groups)
}

/// The assumptions behind every number of this section.
pub fn assumptions(opts: &PlacementOpts) -> Vec<String> {
    let c = &opts.cost;
    let mut v = vec![
        "every value is computed (source = model): no workload runs, no power is measured".to_string(),
        "both policies are scored by the bench's own plant (crates/joule-bench/src/netqos/placement/plant.rs), not by the estimate joule's search minimises".into(),
        format!("network CPU cost (model): {} softirq cycles/packet, {} app cycles/packet + {} app cycles/byte, in cycles of the biggest core at its top OPP; joule's policy is given the same coefficients", c.softirq_cycles_per_packet, c.app_cycles_per_packet, c.app_cycles_per_byte),
        "softirq work of a flow runs on the CPU of its app thread (receive flow steering), for both policies".into(),
        format!("an unlimited bulk sender fills the {} Mbit/s link, shared by its flows; a held limit holds a flow to its target", opts.link_mbit),
        "limits none: nothing holds a sender to its target — joule decides knowing it (as the agent does for a target without interface), the baseline unlimited; limits same: joule holds its limits, the baseline's senders are held to the limits joule chose for that step".into(),
        "performance = Σ over apps of achieved/target, uncapped (headline) and capped at 1 (beside it); PARSEC-like app = one CPU-bound thread per CPU of the biggest core type, perf = capacity served / 1024".into(),
        "network work (softirq + app thread) is served before CPU-bound threads and, when it does not fit, slowed as a whole (TCP flow control), not starved".into(),
        format!("power = energy model (Σ busy × P(OPP) per CPU, plus each domain's static_mw when busy) + {} mW for the rest of the board", opts.board_mw),
        "EAS baseline: threads placed one by one; per domain the CPU with the most spare capacity where the thread's own util × 1.25 fits (capacity less RT and softirq work), priced by the domain's energy delta on the same model (P(OPP) × Σ util / capacity(OPP), OPP = schedutil's for 1.25 × the busiest CPU, softirq included), least delta wins; no fit anywhere: the least loaded of the biggest CPUs, any domain; RT: least loaded CPU, top OPP; no previous-CPU preference (steady state)".into(),
        format!("joule: exhaustive search of class → domain (or every domain of one core type split over several clocks), worst-fit packing, {} % headroom for network/RT work", opts.headroom_pct),
        "a ratio is reported only where joule met every class's target in every step of the trace".into(),
        format!("trace steps of {STEP_S} s; each policy decides once per step"),
    ];
    for (n, m) in &opts.models {
        v.extend(m.notes.iter().map(|x| format!("{n} model: {x}")));
    }
    v
}
