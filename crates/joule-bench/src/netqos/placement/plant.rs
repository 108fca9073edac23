//! The placement bench's own plant: what a decision (threads' CPUs, each domain's OPP, each
//! sender's limit) gives on a machine described by an energy model — each app's achieved
//! performance against its target and the CPUs' power. Both policies are scored here, never
//! with the evaluator joule's search minimises (`joule_core::policy::placement::evaluate`), so
//! a change to the policy's estimate cannot change the bench's verdict. All values `model`.
//!
//! Serving rules, per CPU at its domain's OPP capacity: network work (a flow's softirq work
//! and its app thread's, on the thread's CPU: receive flow steering) runs first, and flows that
//! do not all fit are slowed alike (TCP flow control); then RT work; what is left is split
//! evenly by the CPU-bound threads, which always want more. The CPU is busy for what it served;
//! a domain draws `Σ busy × P(OPP)` (+ its static power while busy), as the kernel's EM prices it.

use joule_core::energy::{EnergyModel, FlowState, NetCost, CAPACITY_SCALE};
use joule_core::policy::placement::{App, AppKind, Placement};

/// One app's result on the plant.
#[derive(Debug, Clone, PartialEq)]
pub struct AppScore {
    /// Achieved / target (past the target counts).
    pub perf: f64,
    pub met: bool,
    pub achieved_mbit: Option<f64>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Score {
    pub apps: Vec<AppScore>,
    pub power_mw: f64,
}

impl Score {
    pub fn all_met(&self) -> bool {
        self.apps.iter().all(|a| a.met)
    }
    pub fn perf(&self) -> f64 {
        self.apps.iter().map(|a| a.perf).sum()
    }
    pub fn perf_capped(&self) -> f64 {
        self.apps.iter().map(|a| a.perf.min(1.0)).sum()
    }
}

/// The rate a network app sends at: its limit where it has one, else what it offers.
fn rate_mbit(offered_mbit: f64, limit: Option<f64>) -> f64 {
    limit.map_or(offered_mbit, |l| l.min(offered_mbit))
}

pub fn score(model: &EnergyModel, apps: &[App], p: &Placement, cost: &NetCost) -> Score {
    let ncpu = model.domains.iter().flat_map(|d| d.cpus.iter()).max().map_or(0, |m| m + 1);
    let mut capacity = vec![0.0; ncpu];
    for (k, d) in model.domains.iter().enumerate() {
        for &c in &d.cpus {
            capacity[c] = d.opps[p.opp[k]].capacity;
        }
    }
    // What each CPU carries: (app, network demand), RT demand, CPU-bound threads' apps.
    let (mut net, mut rt, mut bound) = (vec![Vec::new(); ncpu], vec![Vec::new(); ncpu], vec![Vec::new(); ncpu]);
    for (i, a) in apps.iter().enumerate() {
        for &cpu in &p.threads[i] {
            match &a.kind {
                AppKind::Net { mean_packet_bytes, offered_mbit, .. } => {
                    let flow = FlowState { bandwidth_mbit: rate_mbit(*offered_mbit, p.limit_mbit[i]), mean_packet_bytes: *mean_packet_bytes };
                    net[cpu].push((i, model.capacity_for(cost.demand(&flow).total_cycles_per_s())));
                }
                AppKind::Rt { runtime_us, period_us, .. } => rt[cpu].push((i, CAPACITY_SCALE * *runtime_us as f64 / *period_us as f64)),
                AppKind::Cpu { .. } => bound[cpu].push(i),
            }
        }
    }
    let mut slowed = vec![1.0f64; apps.len()];
    let mut shares: Vec<Vec<f64>> = vec![Vec::new(); apps.len()];
    let mut rt_ok = vec![true; apps.len()];
    let mut busy = vec![0.0; ncpu];
    for cpu in 0..ncpu {
        let c = capacity[cpu];
        let want: f64 = net[cpu].iter().map(|x| x.1).sum();
        let net_got = want.min(c);
        for (i, _) in &net[cpu] {
            slowed[*i] = slowed[*i].min(if want > 0.0 { net_got / want } else { 1.0 });
        }
        let rt_want: f64 = rt[cpu].iter().map(|x| x.1).sum();
        let rt_got = rt_want.min(c - net_got);
        for (i, _) in &rt[cpu] {
            if let AppKind::Rt { deadline_us, runtime_us, .. } = apps[*i].kind {
                // A job runs at the speed the network work leaves it.
                let speed = (c - net_got) / CAPACITY_SCALE;
                rt_ok[*i] &= rt_got + 1e-9 >= rt_want && speed > 0.0 && runtime_us as f64 / speed <= deadline_us as f64;
            }
        }
        let left = c - net_got - rt_got;
        for i in &bound[cpu] {
            shares[*i].push(left / bound[cpu].len() as f64);
        }
        let used = net_got + rt_got + if bound[cpu].is_empty() { 0.0 } else { left };
        busy[cpu] = if c > 0.0 { used / c } else { 0.0 };
    }
    let scores = apps
        .iter()
        .enumerate()
        .map(|(i, a)| {
            let (perf, achieved_mbit) = match &a.kind {
                AppKind::Net { target_mbit, offered_mbit, .. } => {
                    let got = rate_mbit(*offered_mbit, p.limit_mbit[i]) * slowed[i];
                    (if p.threads[i].is_empty() { 0.0 } else { got / target_mbit }, Some(got))
                }
                AppKind::Cpu { perf_fraction, .. } => {
                    let s = &shares[i];
                    (if s.is_empty() { 0.0 } else { s.iter().sum::<f64>() / s.len() as f64 / CAPACITY_SCALE / perf_fraction }, None)
                }
                AppKind::Rt { .. } => (if rt_ok[i] && !p.threads[i].is_empty() { 1.0 } else { 0.0 }, None),
            };
            AppScore { perf, met: perf >= 0.999, achieved_mbit }
        })
        .collect();
    let power_mw = model.domains.iter().enumerate().map(|(k, d)| d.power_mw(p.opp[k], &d.cpus.iter().map(|c| busy[*c]).collect::<Vec<_>>())).sum();
    Score { apps: scores, power_mw }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn xu4_placement(threads: Vec<Vec<usize>>, opp: [usize; 2], limit: Vec<Option<f64>>) -> Placement {
        let domains = threads.iter().map(|t| if t.first().is_some_and(|c| *c >= 4) { vec![1] } else { vec![0] }).collect();
        Placement { threads, opp: opp.to_vec(), limit_mbit: limit, domains }
    }

    #[test]
    fn an_unlimited_flow_takes_its_cpu_first_and_the_cpu_bound_thread_gets_the_rest() {
        let m = EnergyModel::odroid_xu4();
        let flow = App { class: "ftp".into(), kind: AppKind::Net { target_mbit: 50.0, mean_packet_bytes: 1448.0, offered_mbit: 500.0, limit_held: false } };
        let parsec = App { class: "parsec".into(), kind: AppKind::Cpu { perf_fraction: 0.75, threads: 1 } };
        let apps = [parsec, flow];
        // A15 at 1400 MHz (its 8th OPP, capacity 796.4): the flow's 500 Mbit/s is 182.9 of it.
        let p = xu4_placement(vec![vec![4], vec![4]], [0, 7], vec![None, None]);
        assert_eq!(m.domains[1].opps[7].frequency_khz, 1_400_000);
        let s = score(&m, &apps, &p, &NetCost::default());
        let flow_cap = m.capacity_for(NetCost::default().demand(&FlowState { bandwidth_mbit: 500.0, mean_packet_bytes: 1448.0 }).total_cycles_per_s());
        let want = (m.domains[1].opps[7].capacity - flow_cap) / 1024.0 / 0.75;
        assert!((s.apps[0].perf - want).abs() < 1e-9 && !s.apps[0].met, "{s:?}");
        assert_eq!((s.apps[1].achieved_mbit, s.apps[1].met), (Some(500.0), true));
        // One A15 busy all the time at 1400 MHz; the A7s idle cost nothing.
        assert!((s.power_mw - m.domains[1].opps[7].power_mw).abs() < 1e-9);
        // Held to 50 Mbit/s the flow leaves PARSEC its 75 %.
        let held = xu4_placement(vec![vec![4], vec![4]], [0, 7], vec![None, Some(50.0)]);
        assert!(score(&m, &apps, &held, &NetCost::default()).all_met());
    }
}
