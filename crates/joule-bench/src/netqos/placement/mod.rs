//! `joule-bench net-qos`, section `placement`: joule's placement policy and the EAS baseline
//! (the kernel's energy-aware wake-up rule on the same model) decide over the same traces on
//! energy models — the shipped Odroid-XU4 one, optionally this machine's own (`--host-model`)
//! and boards' kernel models read from a sysfs/debugfs tree (`--model-root`) — and every
//! decision is scored by the bench's own plant (`plant.rs`), not by the estimate joule's search
//! minimises. Nothing here runs on the CPU being modelled: every number is `model`, and the
//! assumptions are listed in the JSON and in docs/results/net-qos-placement.md beside the seed's
//! 4.79× / 3.11× / 2.35×.
//!
//! A trace is a list of 10-second steps, each a set of apps with targets (FTP-like bulk flows
//! whose bandwidth target steps up; a PARSEC-like CPU app at a performance target). Per step
//! both policies decide; perf per watt of a trace = (Σ perf × dt) / (Σ energy), i.e. mean
//! performance over mean modelled CPU power. Performance counts each app's achieved/target,
//! uncapped (a baseline that sends more gets credit for it: the headline), and capped at 1
//! beside it. Each trace runs with two bandwidth rules, so joule's gain from limiting shows
//! apart from its placement: `limits: none` (nothing holds a sender to its target: joule
//! decides knowing that, as the agent does when a target names no interface; the baseline
//! unlimited) and `limits: same` (joule holds its limits; the baseline is held to the limits
//! joule chose for that step). A row where joule misses a class's target is no win: its ratio
//! is not reported, and the report says why.

pub mod plant;
mod report;

pub use report::{assumptions, decisions_table, plot, print, versus_seed};

use joule_core::energy::{EnergyModel, NetCost};
use joule_core::policy::placement::{decide_eas, decide_joule, App, AppKind, Placement};
use plant::Score;
use serde::Serialize;

/// Seconds each step of a trace lasts.
pub const STEP_S: f64 = 10.0;

pub struct PlacementOpts {
    /// (name, model): the XU4 model first; this machine's and boards' models when asked.
    pub models: Vec<(String, EnergyModel)>,
    /// The per-packet CPU cost the bench's plant charges. joule's policy is told the same
    /// coefficients (`[energy.net_cost]`), as an operator who measured them would set them.
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
    /// The domains its threads may run on (`a15`, `cpu4-5+cpu6-7`).
    pub domain: String,
    /// Each of those domains' frequency, MHz, in the same order.
    pub freq_mhz: Vec<u64>,
    pub bandwidth_mbit: Option<f64>,
    pub achieved_mbit: Option<f64>,
    pub perf: f64,
    pub qos_met: bool,
}

#[derive(Debug, Clone, Serialize)]
pub struct PlacementRow {
    pub scenario: String,
    /// The seed's figure this scenario stands beside ("ftp" 4.79×, "parsec50" 3.11×,
    /// "parsec75" 2.35×).
    pub group: String,
    pub model: String,
    pub policy: String,
    /// "none": no sender held to its target; "same": joule's limits, for the baseline too.
    pub limits: String,
    pub perf_per_watt: f64,
    pub perf_per_watt_uncapped: f64,
    /// Mean Σ capped performance over the trace.
    pub perf: f64,
    pub perf_uncapped: f64,
    pub mean_power_mw: f64,
    pub energy_j: f64,
    /// Steps where every app met its target (the bench's plant says so), of `steps`.
    pub qos_met_steps: usize,
    pub steps: usize,
    pub qos_met: bool,
    /// Per step where a class missed: which, by how much, and whether the policy's own search
    /// found any placement meeting every target (joule's rows).
    pub qos_missed: Vec<String>,
    pub choices: Vec<Choice>,
    pub source: &'static str,
}

struct Scenario {
    name: &'static str,
    group: &'static str,
    steps: Vec<Vec<App>>,
}

fn ftp(n: usize, target_mbit: f64, bytes: f64, link_mbit: f64) -> Vec<App> {
    let flow = |i: usize| App {
        class: format!("ftp{i}"),
        kind: AppKind::Net { target_mbit, mean_packet_bytes: bytes, offered_mbit: link_mbit / n as f64, limit_held: false },
    };
    (0..n).map(flow).collect()
}

/// A PARSEC-like app: one CPU-bound thread per CPU of the biggest core type (4 on the XU4, 4 on
/// the RK3588, whose four A76s are two domains).
fn parsec(frac: f64, threads: u32) -> App {
    App { class: "parsec".into(), kind: AppKind::Cpu { perf_fraction: frac, threads } }
}

/// The CPUs of the biggest core type, whichever domains they are in.
fn big_cpus(model: &EnergyModel) -> u32 {
    let top = model.domains.iter().map(|d| d.max_capacity()).fold(0.0, f64::max);
    model.domains.iter().filter(|d| d.max_capacity() >= top - 1e-9).map(|d| d.cpus.len() as u32).sum::<u32>().max(1)
}

/// The traces: FTP-like bulk flows at several bandwidths (1 and 4 flows, full-size and small
/// packets), and a PARSEC-like app at 50 % and 75 % co-running with two FTP flows.
fn scenarios(model: &EnergyModel, link: f64) -> Vec<Scenario> {
    let ramp = [25.0, 50.0, 100.0, 200.0, 400.0];
    let big = big_cpus(model);
    let co = |frac: f64| ramp[..4].iter().map(|b| [vec![parsec(frac, big)], ftp(2, *b / 2.0, 1448.0, link)].concat()).collect();
    vec![
        Scenario { name: "ftp-1flow", group: "ftp", steps: ramp.iter().map(|b| ftp(1, *b, 1448.0, link)).collect() },
        Scenario { name: "ftp-4flows", group: "ftp", steps: ramp.iter().map(|b| ftp(4, *b / 4.0, 1448.0, link)).collect() },
        Scenario { name: "ftp-small-packets", group: "ftp", steps: ramp[..4].iter().map(|b| ftp(1, *b, 256.0, link)).collect() },
        Scenario { name: "parsec50+ftp", group: "parsec50", steps: co(0.5) },
        Scenario { name: "parsec75+ftp", group: "parsec75", steps: co(0.75) },
    ]
}

/// The same apps, each network app's limit held (`true`) or not.
fn held(apps: &[App], limit_held: bool) -> Vec<App> {
    let set = |a: &App| {
        let mut a = a.clone();
        if let AppKind::Net { limit_held: h, .. } = &mut a.kind {
            *h = limit_held;
        }
        a
    };
    apps.iter().map(set).collect()
}

fn choices(model: &EnergyModel, step: usize, apps: &[App], p: &Placement, s: &Score) -> Vec<Choice> {
    apps.iter()
        .enumerate()
        .filter(|(i, _)| !p.domains[*i].is_empty())
        .map(|(i, a)| Choice {
            step,
            class: a.class.clone(),
            domain: p.domains[i].iter().map(|k| model.domains[*k].name.as_str()).collect::<Vec<_>>().join("+"),
            freq_mhz: p.domains[i].iter().map(|k| model.domains[*k].opps[p.opp[*k]].frequency_khz / 1000).collect(),
            bandwidth_mbit: p.limit_mbit[i],
            achieved_mbit: s.apps[i].achieved_mbit,
            perf: s.apps[i].perf,
            qos_met: s.apps[i].met,
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
    missed: Vec<String>,
    picks: Vec<Choice>,
}

/// (policy, limits) of each row a trace gives, in `decide_step`'s order.
const RUNS: [(&str, &str); 4] = [("joule", "none"), ("eas", "none"), ("joule", "same"), ("eas", "same")];

/// One step's decision per entry of [`RUNS`], scored by the plant; for joule's rows also
/// whether its own search believed every target met (`None` for the baseline's).
fn decide_step(model: &EnergyModel, apps: &[App], opts: &PlacementOpts) -> [(Placement, Score, Option<bool>); 4] {
    let (free, kept) = (held(apps, false), held(apps, true));
    let score = |a: &[App], p: Placement| {
        let s = plant::score(model, a, &p, &opts.cost);
        (p, s)
    };
    let (jn, jn_self) = decide_joule(model, &free, &opts.cost, opts.headroom_pct);
    let (js, js_self) = decide_joule(model, &kept, &opts.cost, opts.headroom_pct);
    let lent = js.limit_mbit.clone();
    let (jn, jn_s) = score(&free, jn);
    let (en, en_s) = score(&free, decide_eas(model, &free, &opts.cost, &[]).0);
    let (js, js_s) = score(&kept, js);
    let (es, es_s) = score(&free, decide_eas(model, &free, &opts.cost, &lent).0);
    [(jn, jn_s, Some(jn_self.all_met())), (en, en_s, None), (js, js_s, Some(js_self.all_met())), (es, es_s, None)]
}

/// Why a step missed: each class short of its target, and what the policy's search believed.
fn missed(step: usize, apps: &[App], s: &Score, searched: Option<bool>) -> String {
    let short: Vec<String> = apps.iter().zip(&s.apps).filter(|(_, a)| !a.met).map(|(app, a)| format!("{} at {:.2} of its target", app.class, a.perf)).collect();
    let why = match searched {
        Some(false) => "; joule's search found no placement meeting every target on this model",
        Some(true) => "; joule's search expected its placement to meet them (its estimate and the bench's plant disagree)",
        None => "",
    };
    format!("step {step}: {}{why}", short.join(", "))
}

pub fn run(opts: &PlacementOpts) -> anyhow::Result<Vec<PlacementRow>> {
    let mut rows = Vec::new();
    for (mname, model) in &opts.models {
        model.validate()?;
        for sc in scenarios(model, opts.link_mbit) {
            let mut acc: [Acc; 4] = Default::default();
            for (k, apps) in sc.steps.iter().enumerate() {
                for (a, (p, s, searched)) in acc.iter_mut().zip(decide_step(model, apps, opts)) {
                    a.perf += s.perf_capped() * STEP_S;
                    a.unc += s.perf() * STEP_S;
                    a.energy_j += (s.power_mw + opts.board_mw) / 1000.0 * STEP_S;
                    if s.all_met() {
                        a.met += 1;
                    } else {
                        a.missed.push(missed(k, apps, &s, searched));
                    }
                    a.picks.extend(choices(model, k, apps, &p, &s));
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
                    qos_missed: a.missed,
                    choices: a.picks,
                    source: "model",
                });
            }
        }
    }
    Ok(rows)
}

#[cfg(test)]
mod tests;
