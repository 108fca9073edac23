//! The baseline: Linux's energy-aware wake-up path (`find_energy_efficient_cpu` in
//! kernel/sched/fair.c, `em_cpu_energy` in include/linux/energy_model.h) with schedutil,
//! reduced to its steady state and run on the same energy model joule decides with:
//!
//! - threads are placed one by one (apps in order). For each performance domain the candidate is
//!   the CPU with the most spare capacity where the thread fits: the CPU's task utilisation with
//!   the thread added, × 1.25 (the kernel's 20 % margin, `util_fits_cpu`), within the CPU's
//!   capacity less the RT and softirq work already on it (`capacity_of`);
//! - each candidate is priced as the kernel prices it: the domain's energy with the thread there
//!   minus its energy without it. A domain's energy is `P(OPP) × Σ util / capacity(OPP)` over its
//!   CPUs (each CPU's busy share at that OPP, `PerfDomain::power_mw`, so a `static_mw` in the
//!   model is counted too), at the OPP schedutil would pick for its busiest CPU (lowest capacity
//!   ≥ 1.25 × util), the top OPP while an RT thread runs there. The candidate with the least
//!   energy delta wins. The kernel also prices the thread's previous CPU and prefers it on a
//!   tie; in steady state there is no previous CPU to keep, so that is left out;
//! - a thread that fits no CPU anywhere (over-utilised: EAS stands aside and load balancing
//!   spreads the load, misfit tasks pulled to the biggest CPUs) goes to the least loaded of the
//!   biggest CPUs, whichever domain they are in (the RK3588's four A76s are two domains). A
//!   CPU-bound thread's utilisation is 1024 (it always runs), so it always lands here;
//! - an RT thread is not placed by EAS: it goes to the least loaded CPU (RT push/pull), and its
//!   domain runs at the top OPP (schedutil's default for RT);
//! - softirq: a network app's own utilisation is its thread's work only (softirq time is not the
//!   task's, so EAS neither fits nor prices it), but once the thread sits on a CPU its flow's
//!   softirq work runs there too (receive flow steering) and schedutil's OPP and the CPU's
//!   capacity for later threads see it (IRQ time counts in both);
//! - bandwidth: a network app sends what it offers, or at most the limit the caller gives it (the
//!   benchmark's `limits: same`, joule's limits lent to the baseline).
//!
//! Left out: PELT and util_est dynamics, uclamp, thermal pressure, the kernel's integer rounding.

use super::{eval::rate_mbit, net_demand_cap, App, AppKind, Placement};
use crate::energy::{EnergyModel, NetCost, PerfDomain, CAPACITY_SCALE};

/// The kernel's capacity margin (`fits_capacity`, `map_util_perf`): 1280 / 1024.
const MARGIN: f64 = 1.25;

/// One thread as the scheduler sees it, in capacity units.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Thread {
    /// The task's own utilisation (what EAS fits and prices).
    pub task_util: f64,
    /// The softirq work that follows it to its CPU (seen by schedutil only).
    pub softirq_util: f64,
    pub rt: bool,
}

/// What is on each CPU so far, in capacity units.
#[derive(Debug, Clone)]
struct Load {
    task: Vec<f64>,
    softirq: Vec<f64>,
    rt: Vec<f64>,
    rt_on: Vec<bool>,
}

impl Load {
    fn new(ncpu: usize) -> Load {
        Load { task: vec![0.0; ncpu], softirq: vec![0.0; ncpu], rt: vec![0.0; ncpu], rt_on: vec![false; ncpu] }
    }

    /// Everything that keeps `cpu` busy (schedutil's and the energy estimate's view).
    fn busy_util(&self, cpu: usize) -> f64 {
        self.task[cpu] + self.softirq[cpu] + self.rt[cpu]
    }

    /// The capacity CFS tasks get on `cpu` (the kernel's `capacity_of`).
    fn cfs_capacity(&self, d: &PerfDomain, cpu: usize) -> f64 {
        (d.max_capacity() - self.rt[cpu] - self.softirq[cpu]).max(0.0)
    }

    fn add(&mut self, cpu: usize, t: &Thread) {
        if t.rt {
            self.rt[cpu] += t.task_util;
            self.rt_on[cpu] = true;
        } else {
            self.task[cpu] += t.task_util;
        }
        self.softirq[cpu] += t.softirq_util;
    }
}

/// The OPP schedutil picks for domain `d`: the top one where an RT thread runs, else the lowest
/// whose capacity is ≥ 1.25 × the busiest CPU's utilisation (`extra` added on `extra_cpu`).
fn domain_opp(d: &PerfDomain, load: &Load, extra_cpu: Option<usize>, extra: f64) -> usize {
    if d.cpus.iter().any(|c| load.rt_on[*c]) {
        return d.opps.len() - 1;
    }
    let util = |c: usize| load.busy_util(c) + if Some(c) == extra_cpu { extra } else { 0.0 };
    let busiest = d.cpus.iter().map(|c| util(*c)).fold(0.0, f64::max);
    d.opp_for(busiest * MARGIN)
}

/// The domain's modelled power, mW, with `extra` utilisation added on `extra_cpu`: the energy
/// estimate `em_cpu_energy` makes (per unit of time).
fn domain_power_mw(d: &PerfDomain, load: &Load, extra_cpu: Option<usize>, extra: f64) -> f64 {
    let opp = domain_opp(d, load, extra_cpu, extra);
    let capacity = d.opps[opp].capacity;
    let busy: Vec<f64> = d.cpus.iter().map(|c| (load.busy_util(*c) + if Some(*c) == extra_cpu { extra } else { 0.0 }) / capacity).collect();
    d.power_mw(opp, &busy)
}

/// The CPU of `cpus` with the least CFS + RT load (the first on a tie).
fn least_loaded(cpus: impl Iterator<Item = usize>, load: &Load) -> usize {
    cpus.min_by(|a, b| (load.task[*a] + load.rt[*a]).total_cmp(&(load.task[*b] + load.rt[*b]))).unwrap_or(0)
}

/// The CPU EAS puts `t` on, given `load`.
fn pick(model: &EnergyModel, load: &Load, t: &Thread) -> usize {
    if t.rt {
        return least_loaded(model.domains.iter().flat_map(|d| d.cpus.iter().copied()), load);
    }
    let mut best: Option<(f64, usize)> = None;
    for d in &model.domains {
        // The candidate: most spare capacity among the CPUs where the thread fits.
        let fits = d.cpus.iter().copied().filter_map(|c| {
            let (util, cap) = (load.task[c] + t.task_util, load.cfs_capacity(d, c));
            (util * MARGIN <= cap + 1e-9).then_some((cap - util, c))
        });
        let Some((_, cpu)) = fits.fold(None, |acc: Option<(f64, usize)>, x| if acc.is_some_and(|a| a.0 >= x.0) { acc } else { Some(x) }) else {
            continue;
        };
        let delta_mw = domain_power_mw(d, load, Some(cpu), t.task_util) - domain_power_mw(d, load, None, 0.0);
        if best.is_none_or(|(b, _)| delta_mw < b - 1e-12) {
            best = Some((delta_mw, cpu));
        }
    }
    best.map(|b| b.1).unwrap_or_else(|| {
        let top = model.domains.iter().map(|d| d.max_capacity()).fold(0.0, f64::max);
        let biggest = model.domains.iter().filter(|d| d.max_capacity() >= top - 1e-9);
        least_loaded(biggest.flat_map(|d| d.cpus.iter().copied()), load)
    })
}

/// Places `threads` one by one; per thread its CPU, and per domain the OPP schedutil ends at.
pub(super) fn place(model: &EnergyModel, threads: &[Thread]) -> (Vec<usize>, Vec<usize>) {
    let ncpu = model.domains.iter().flat_map(|d| d.cpus.iter()).max().map_or(0, |m| m + 1);
    let mut load = Load::new(ncpu);
    let cpus = threads
        .iter()
        .map(|t| {
            let cpu = pick(model, &load, t);
            load.add(cpu, t);
            cpu
        })
        .collect();
    (cpus, model.domains.iter().map(|d| domain_opp(d, &load, None, 0.0)).collect())
}

/// The baseline's placement of `apps`, each network app sending at most `limits_mbit[i]` (None:
/// what it offers).
pub fn decide(model: &EnergyModel, apps: &[App], cost: &NetCost, limits_mbit: &[Option<f64>]) -> Placement {
    let limit = |i: usize| limits_mbit.get(i).copied().flatten();
    let mut owner = Vec::new();
    let mut threads = Vec::new();
    for (i, a) in apps.iter().enumerate() {
        let (n, t) = match &a.kind {
            AppKind::Net { mean_packet_bytes, .. } => {
                let (app, soft) = net_demand_cap(model, cost, rate_mbit(&a.kind, limit(i)), *mean_packet_bytes);
                (1, Thread { task_util: app, softirq_util: soft, rt: false })
            }
            AppKind::Cpu { threads, .. } => (*threads, Thread { task_util: CAPACITY_SCALE, softirq_util: 0.0, rt: false }),
            AppKind::Rt { runtime_us, period_us, .. } => {
                (1, Thread { task_util: CAPACITY_SCALE * *runtime_us as f64 / *period_us as f64, softirq_util: 0.0, rt: true })
            }
        };
        owner.extend(std::iter::repeat_n(i, n as usize));
        threads.extend(std::iter::repeat_n(t, n as usize));
    }
    let (cpus, opp) = place(model, &threads);
    let mut per_app = vec![Vec::new(); apps.len()];
    for (i, cpu) in owner.into_iter().zip(cpus) {
        per_app[i].push(cpu);
    }
    let domains = per_app
        .iter()
        .map(|t| {
            let mut ds: Vec<usize> = t.iter().filter_map(|c| model.domains.iter().position(|d| d.cpus.contains(c))).collect();
            ds.sort_unstable();
            ds.dedup();
            ds
        })
        .collect();
    Placement { threads: per_app, opp, limit_mbit: (0..apps.len()).map(limit).collect(), domains }
}

#[cfg(test)]
mod tests;
