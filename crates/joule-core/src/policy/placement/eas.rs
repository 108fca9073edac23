//! The baseline: what Linux's Energy Aware Scheduler with schedutil does, reduced to its
//! decision rule (`find_energy_efficient_cpu`'s capacity fit, schedutil's frequency rule):
//!
//! - a thread goes to the smallest domain where its *own* utilisation × 1.25 fits a CPU (the
//!   kernel's 20 % capacity margin), on that domain's CPU with the most spare capacity; a
//!   thread that fits nowhere goes to the biggest domain's least loaded CPU. A network app's
//!   utilisation is its thread's work only: softirq work is not the task's;
//! - an RT thread goes to the least loaded CPU (RT push/pull, not EAS);
//! - each domain runs at the lowest OPP whose capacity is ≥ 1.25 × the busiest CPU's total
//!   utilisation (softirq included: schedutil counts IRQ time), the top OPP where an RT thread
//!   runs (schedutil goes to the maximum for RT by default);
//! - no bandwidth limit: a network app sends what it offers.
//!
//! Left out: EAS turning itself off when a CPU is over-utilised (80 %) and load balancing
//! then spreading tasks; util_est and PELT dynamics (steady state only).

use super::{net_demand_cap, App, AppKind, Placement};
use crate::energy::{EnergyModel, NetCost, CAPACITY_SCALE};

const MARGIN: f64 = 1.25;

pub fn decide(model: &EnergyModel, apps: &[App], cost: &NetCost) -> Placement {
    let mut order: Vec<usize> = (0..model.domains.len()).collect();
    order.sort_by(|a, b| model.domains[*a].max_capacity().total_cmp(&model.domains[*b].max_capacity()));
    let ncpu = model.domains.iter().flat_map(|d| d.cpus.iter()).max().map_or(0, |m| m + 1);
    let mut load = vec![0.0; ncpu]; // what EAS sees of each CPU's tasks
    let mut total = vec![0.0; ncpu]; // what schedutil sees (softirq too)
    let mut rt_on = vec![false; ncpu];
    let mut threads = vec![Vec::new(); apps.len()];
    for (i, a) in apps.iter().enumerate() {
        let (n, seen, all) = match &a.kind {
            AppKind::Net { mean_packet_bytes, offered_mbit, .. } => {
                let (app, soft) = net_demand_cap(model, cost, *offered_mbit, *mean_packet_bytes);
                (1, app, app + soft)
            }
            AppKind::Cpu { threads, .. } => (*threads, CAPACITY_SCALE, CAPACITY_SCALE),
            AppKind::Rt { runtime_us, period_us, .. } => (1, CAPACITY_SCALE * *runtime_us as f64 / *period_us as f64, 0.0),
        };
        for _ in 0..n {
            let cpu = if matches!(a.kind, AppKind::Rt { .. }) {
                least_loaded(model.domains.iter().flat_map(|d| d.cpus.iter().copied()), &load)
            } else {
                let fit = order.iter().find_map(|&d| {
                    let dom = &model.domains[d];
                    let cpu = least_loaded(dom.cpus.iter().copied(), &load);
                    (seen * MARGIN <= dom.max_capacity() - load[cpu]).then_some(cpu)
                });
                fit.unwrap_or_else(|| least_loaded(model.domains[*order.last().unwrap_or(&0)].cpus.iter().copied(), &load))
            };
            load[cpu] += seen;
            total[cpu] += if matches!(a.kind, AppKind::Rt { .. }) { seen } else { all };
            rt_on[cpu] |= matches!(a.kind, AppKind::Rt { .. });
            threads[i].push(cpu);
        }
    }
    let opp = model
        .domains
        .iter()
        .map(|d| {
            if d.cpus.iter().any(|c| rt_on[*c]) {
                return d.opps.len() - 1;
            }
            let busiest = d.cpus.iter().map(|c| total[*c]).fold(0.0, f64::max);
            d.opp_for(busiest * MARGIN)
        })
        .collect();
    let domain = threads.iter().map(|t| t.first().and_then(|c| model.domains.iter().position(|d| d.cpus.contains(c)))).collect();
    Placement { threads, opp, limit_mbit: vec![None; apps.len()], domain }
}

fn least_loaded(cpus: impl Iterator<Item = usize>, load: &[f64]) -> usize {
    cpus.min_by(|a, b| load[*a].total_cmp(&load[*b])).unwrap_or(0)
}
