//! joule's decision: the search over where each class runs. A class goes to one performance
//! domain, or to every domain of one core type where that type has several clocks (the RK3588's
//! A76s are two clusters of two: a four-thread class needs both). Within its domains its threads
//! go worst-fit onto the CPUs; each domain runs at the lowest OPP where its busiest CPU fits.
//! The search is exhaustive over class → domain set (≤ 4096 combinations; beyond that one class
//! at a time, greedily), each candidate judged by the policy's evaluation (`eval.rs`), with OPPs
//! raised where it misses a target; the least modelled power that meets every target wins.

use super::{evaluate, App, AppKind, Outcome, Placement};
use crate::energy::{EnergyModel, NetCost, CAPACITY_SCALE};

const MAX_COMBINATIONS: usize = 4096;

/// Per thread of `a`: (the capacity it needs, the least OPP capacity it needs to run at all).
pub(super) fn thread_needs(model: &EnergyModel, cost: &NetCost, a: &App) -> Vec<(f64, f64)> {
    match &a.kind {
        // Sized for the target (what it needs to meet it); what it sends past the target where no
        // limit holds it is counted by the evaluation, which sees it take its CPU first.
        AppKind::Net { target_mbit, mean_packet_bytes, offered_mbit, .. } => {
            let (app, soft) = super::net_demand_cap(model, cost, target_mbit.min(*offered_mbit), *mean_packet_bytes);
            vec![(app + soft, 0.0)]
        }
        AppKind::Cpu { perf_fraction, threads } => vec![(perf_fraction * CAPACITY_SCALE, perf_fraction * CAPACITY_SCALE); *threads as usize],
        AppKind::Rt { deadline_us, runtime_us, period_us } => {
            vec![(CAPACITY_SCALE * *runtime_us as f64 / *period_us as f64, CAPACITY_SCALE * *runtime_us as f64 / *deadline_us as f64)]
        }
    }
}

/// Where a class may go: each domain alone, then, per core type (top capacity) that has several
/// domains, all of them together.
pub(super) fn domain_sets(model: &EnergyModel) -> Vec<Vec<usize>> {
    let mut sets: Vec<Vec<usize>> = (0..model.domains.len()).map(|d| vec![d]).collect();
    for (k, d) in model.domains.iter().enumerate() {
        let same: Vec<usize> = (0..model.domains.len()).filter(|j| (model.domains[*j].max_capacity() - d.max_capacity()).abs() < 1e-9).collect();
        if same.len() > 1 && same[0] == k {
            sets.push(same);
        }
    }
    sets
}

/// Places every app on its set of domains: worst-fit packing over the set's CPUs, then per domain
/// the lowest OPP where the busiest CPU fits: network and RT work under `1 - headroom` (bursts,
/// model error), CPU-bound work exactly (it takes whatever it gets; its target is a capacity).
fn pack(model: &EnergyModel, apps: &[App], cost: &NetCost, sets: &[&[usize]], headroom: f64) -> Placement {
    let ncpu = model.domains.iter().flat_map(|d| d.cpus.iter()).max().map_or(0, |m| m + 1);
    let (mut elastic, mut bound) = (vec![0.0f64; ncpu], vec![0.0f64; ncpu]);
    let mut floor = vec![0.0f64; model.domains.len()];
    let mut items: Vec<(usize, f64, f64)> =
        apps.iter().enumerate().flat_map(|(i, a)| thread_needs(model, cost, a).into_iter().map(move |(n, f)| (i, n, f))).collect();
    items.sort_by(|a, b| b.1.total_cmp(&a.1));
    let mut threads = vec![Vec::new(); apps.len()];
    for (i, need, min_cap) in items {
        let cpus = sets[i].iter().flat_map(|d| model.domains[*d].cpus.iter().copied());
        let cpu = cpus.min_by(|a, b| (elastic[*a] + bound[*a]).total_cmp(&(elastic[*b] + bound[*b]))).unwrap_or(0);
        if matches!(apps[i].kind, AppKind::Cpu { .. }) {
            bound[cpu] += need;
        } else {
            elastic[cpu] += need;
        }
        if let Some(k) = model.domains.iter().position(|d| d.cpus.contains(&cpu)) {
            floor[k] = floor[k].max(min_cap);
        }
        threads[i].push(cpu);
    }
    let opp = model
        .domains
        .iter()
        .enumerate()
        .map(|(k, d)| {
            let busiest = d.cpus.iter().map(|c| elastic[*c] / (1.0 - headroom) + bound[*c]).fold(0.0, f64::max);
            d.opp_for(busiest.max(floor[k]))
        })
        .collect();
    // A limit only where one is held: the evaluation then sees an unheld sender's whole rate.
    let limit_mbit = apps.iter().map(|a| if let AppKind::Net { target_mbit, limit_held: true, .. } = a.kind { Some(target_mbit) } else { None }).collect();
    Placement { threads, opp, limit_mbit, domains: sets.iter().map(|s| s.to_vec()).collect() }
}

/// Better = meets every target, then more performance when not, then less power.
fn better(a: &Outcome, b: &Outcome) -> bool {
    match (a.all_met(), b.all_met()) {
        (true, false) => true,
        (false, true) => false,
        (true, true) => a.power_mw < b.power_mw - 1e-9,
        (false, false) => a.perf() > b.perf() + 1e-9 || ((a.perf() - b.perf()).abs() <= 1e-9 && a.power_mw < b.power_mw - 1e-9),
    }
}

/// Scores one assignment; where the packing's OPPs miss a target (the model's max-min sharing
/// is stricter than the sum of needs, an unheld sender takes more than its target), raises the
/// domains of the apps that miss, one OPP at a time.
fn try_assign(model: &EnergyModel, apps: &[App], cost: &NetCost, sets: &[&[usize]], headroom: f64) -> (Placement, Outcome) {
    let mut p = pack(model, apps, cost, sets, headroom);
    loop {
        let o = evaluate(model, apps, &p, cost);
        let mut raised = false;
        for (i, a) in o.apps.iter().enumerate() {
            for &d in sets[i] {
                if !a.qos_met && p.opp[d] + 1 < model.domains[d].opps.len() {
                    p.opp[d] += 1;
                    raised = true;
                }
            }
        }
        if !raised {
            return (p, o);
        }
    }
}

/// joule's decision: the least modelled energy that meets every target.
pub fn decide_joule(model: &EnergyModel, apps: &[App], cost: &NetCost, headroom_pct: f64) -> (Placement, Outcome) {
    let (sets, headroom) = (domain_sets(model), headroom_pct / 100.0);
    let n = sets.len();
    let combos = (0..apps.len()).try_fold(1usize, |acc, _| acc.checked_mul(n).filter(|c| *c <= MAX_COMBINATIONS));
    let score = |choice: &[usize]| {
        let chosen: Vec<&[usize]> = choice.iter().map(|c| sets[*c].as_slice()).collect();
        try_assign(model, apps, cost, &chosen, headroom)
    };
    let keep = |best: Option<(Placement, Outcome)>, cand: (Placement, Outcome)| match best {
        Some(b) if !better(&cand.1, &b.1) => Some(b),
        _ => Some(cand),
    };
    let mut best = None;
    match combos {
        Some(total) => {
            for k in 0..total {
                let choice: Vec<usize> = (0..apps.len()).map(|i| k / n.pow(i as u32) % n).collect();
                best = keep(best, score(&choice));
            }
        }
        None => {
            // Too many to enumerate: one app at a time, each to its best set given the rest.
            let last = model.domains.len().saturating_sub(1);
            let mut choice = vec![last; apps.len()];
            for i in 0..apps.len() {
                let pick = (0..n).map(|c| {
                    choice[i] = c;
                    (c, score(&choice).1)
                });
                choice[i] = pick.reduce(|x, y| if better(&y.1, &x.1) { y } else { x }).map_or(last, |x| x.0);
            }
            best = Some(score(&choice));
        }
    }
    best.unwrap_or_else(|| score(&[]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_core_type_split_over_several_clocks_is_also_one_choice() {
        let sets = domain_sets(&crate::energy::fixtures::rk3588());
        assert_eq!(sets, [vec![0], vec![1], vec![2], vec![1, 2]], "A55s, each A76 pair, both A76 pairs");
        assert_eq!(domain_sets(&EnergyModel::odroid_xu4()), [vec![0], vec![1]], "one clock per core type: nothing to add");
    }

    #[test]
    fn four_threads_at_75_percent_need_both_a76_pairs_of_the_rk3588() {
        let m = crate::energy::fixtures::rk3588();
        let apps = [App { class: "parsec".into(), kind: AppKind::Cpu { perf_fraction: 0.75, threads: 4 } }];
        let (p, o) = decide_joule(&m, &apps, &NetCost::default(), 10.0);
        assert!(o.all_met(), "{o:?}");
        assert_eq!(p.domains[0], [1, 2]);
        let mut cpus = p.threads[0].clone();
        cpus.sort_unstable();
        assert_eq!(cpus, [4, 5, 6, 7]);
        assert_eq!((m.domains[1].opps[p.opp[1]].frequency_khz, m.domains[2].opps[p.opp[2]].frequency_khz), (1_800_000, 1_800_000), "768 of 1024 is 1.8 GHz");
    }
}
