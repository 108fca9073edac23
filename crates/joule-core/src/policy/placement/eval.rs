//! What a placement gives, on the energy model: each app's achieved performance (and whether its
//! QoS target is met) and the modelled power. Both policies are scored by this one function, so
//! the benchmark compares decisions, not two different models.
//!
//! Per CPU, at its domain's OPP capacity `C`: network work (the softirq work of the flows whose
//! app thread runs there — receive flow steering assumed — together with that thread's own
//! work) is served first, because softirq runs above every thread and TCP's flow control ties
//! the app's rate to what the stack gets through: a network app that does not fit is slowed as
//! a whole (`served / demanded`), not starved to zero. RT work is served next; what is left is
//! shared max-min fairly by CPU-bound threads. A CPU app thread's performance is its served
//! capacity / 1024. The CPU is busy for what was served; the domain's power is the energy
//! model's `Σ busy × P(OPP)` plus its static term.

use super::{App, AppKind, Placement};
use crate::energy::{EnergyModel, NetCost, CAPACITY_SCALE};
use serde::Serialize;

/// One app's result.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AppOutcome {
    pub class: String,
    /// Achieved / target, capped at 1: performance only counts up to what was asked for.
    pub perf: f64,
    /// Achieved / target, uncapped.
    pub perf_uncapped: f64,
    pub qos_met: bool,
    /// Network apps: the rate achieved, Mbit/s.
    pub achieved_mbit: Option<f64>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Outcome {
    pub apps: Vec<AppOutcome>,
    pub power_mw: f64,
}

impl Outcome {
    pub fn all_met(&self) -> bool {
        self.apps.iter().all(|a| a.qos_met)
    }
    pub fn perf(&self) -> f64 {
        self.apps.iter().map(|a| a.perf).sum()
    }
    pub fn perf_uncapped(&self) -> f64 {
        self.apps.iter().map(|a| a.perf_uncapped).sum()
    }
    /// Σ capped performance per watt of modelled CPU power.
    pub fn perf_per_watt(&self) -> f64 {
        self.perf() / (self.power_mw / 1000.0).max(1e-9)
    }
}

/// The rate a network app sends at under `limit` (None: what it offers).
pub(super) fn rate_mbit(kind: &AppKind, limit: Option<f64>) -> f64 {
    match kind {
        AppKind::Net { offered_mbit, .. } => limit.map_or(*offered_mbit, |l| l.min(*offered_mbit)),
        _ => 0.0,
    }
}

pub fn evaluate(model: &EnergyModel, apps: &[App], p: &Placement, cost: &NetCost) -> Outcome {
    let ncpu = model.domains.iter().flat_map(|d| d.cpus.iter()).max().map_or(0, |m| m + 1);
    let cap_of = |cpu: usize| model.domains.iter().enumerate().find(|(_, d)| d.cpus.contains(&cpu)).map_or(0.0, |(i, d)| d.opps[p.opp[i]].capacity);
    // Per CPU, in capacity units: network work per app, RT work, CPU-bound threads per app.
    let mut net = vec![Vec::new(); ncpu];
    let mut rt = vec![0.0; ncpu];
    let mut bound: Vec<Vec<usize>> = vec![Vec::new(); ncpu];
    for (i, a) in apps.iter().enumerate() {
        for &cpu in &p.threads[i] {
            match &a.kind {
                AppKind::Net { mean_packet_bytes, .. } => {
                    let d =
                        cost.demand(&crate::energy::FlowState { bandwidth_mbit: rate_mbit(&a.kind, p.limit_mbit[i]), mean_packet_bytes: *mean_packet_bytes });
                    net[cpu].push((i, model.capacity_for(d.total_cycles_per_s())));
                }
                AppKind::Cpu { .. } => bound[cpu].push(i),
                AppKind::Rt { runtime_us, period_us, .. } => rt[cpu] += CAPACITY_SCALE * *runtime_us as f64 / *period_us as f64,
            }
        }
    }
    let mut busy = vec![0.0; ncpu];
    let mut net_frac = vec![1.0f64; apps.len()];
    let mut cpu_perf = vec![Vec::new(); apps.len()];
    let mut rt_ok = vec![true; apps.len()];
    for cpu in 0..ncpu {
        let c = cap_of(cpu);
        let net_total: f64 = net[cpu].iter().map(|x| x.1).sum();
        let net_served = net_total.min(c);
        for (app, _) in &net[cpu] {
            net_frac[*app] = net_frac[*app].min(if net_total > 0.0 { net_served / net_total } else { 1.0 });
        }
        let rt_served = rt[cpu].min(c - net_served);
        let left = c - net_served - rt_served;
        let each = if bound[cpu].is_empty() { 0.0 } else { left / bound[cpu].len() as f64 };
        for app in &bound[cpu] {
            cpu_perf[*app].push(each / CAPACITY_SCALE);
        }
        busy[cpu] = if c > 0.0 { (net_served + rt_served + each * bound[cpu].len() as f64) / c } else { 0.0 };
        for (i, a) in apps.iter().enumerate() {
            if let AppKind::Rt { deadline_us, runtime_us, .. } = a.kind {
                if p.threads[i].contains(&cpu) {
                    // A job runs at the capacity network work leaves it.
                    let rate = (c - net_served) / CAPACITY_SCALE;
                    rt_ok[i] &= rt_served + 1e-9 >= rt[cpu] && rate > 0.0 && runtime_us as f64 / rate <= deadline_us as f64;
                }
            }
        }
    }
    let outcomes = apps
        .iter()
        .enumerate()
        .map(|(i, a)| {
            let (raw, achieved) = match &a.kind {
                AppKind::Net { target_mbit, .. } => {
                    let got = rate_mbit(&a.kind, p.limit_mbit[i]) * net_frac[i];
                    (got / target_mbit, Some(got))
                }
                AppKind::Cpu { perf_fraction, .. } => {
                    let v = &cpu_perf[i];
                    (if v.is_empty() { 0.0 } else { v.iter().sum::<f64>() / v.len() as f64 } / perf_fraction, None)
                }
                AppKind::Rt { .. } => (if rt_ok[i] && !p.threads[i].is_empty() { 1.0 } else { 0.0 }, None),
            };
            AppOutcome { class: a.class.clone(), perf: raw.min(1.0), perf_uncapped: raw, qos_met: raw >= 0.999, achieved_mbit: achieved }
        })
        .collect();
    let power_mw = model
        .domains
        .iter()
        .enumerate()
        .map(|(i, d)| {
            let b: Vec<f64> = d.cpus.iter().map(|c| busy[*c]).collect();
            d.power_mw(p.opp[i], &b)
        })
        .sum();
    Outcome { apps: outcomes, power_mw }
}
