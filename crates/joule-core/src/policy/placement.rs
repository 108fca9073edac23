//! Energy-aware placement (mechanism 2): given each class's QoS target, choose per class the
//! performance domain (its threads' affinity), the domain's frequency cap and, for network apps,
//! a bandwidth limit (held on the interface the target names), so every target is met at the
//! least modelled energy. The seed's (EANeM) point is built in: a network app's CPU demand comes
//! from its flow state (bandwidth and mean packet size, `energy::NetCost`), softirq work
//! included, and where joule holds its bandwidth to the target that bounds the softirq work.
//! Where nothing holds it, a placement is judged with the app sending what it offers, so a
//! decision never counts on a limit nobody enforces. `eas.rs` is the baseline: the kernel's
//! energy-aware wake-up rule priced on the same model; `eval.rs` is the policy's own estimate of
//! a placement (what the search minimises; a benchmark scores decisions with its own plant).
//!
//! The search is exhaustive over class → domain (domains^classes, ≤ 4096 combinations; beyond
//! that one class at a time, greedily); within a domain threads go worst-fit onto its CPUs and
//! the domain runs at the lowest OPP where the busiest CPU's need fits under the headroom.
//! Pure: [`PlacementPolicy`] turns config + snapshot into knob wants per class — its threads'
//! affinity, its domain's frequency cap, its traffic's rate where the target names the
//! interface — with a hysteresis so jittering readings do not move threads.

mod eas;
mod eval;
mod search;

pub use eval::{evaluate, AppOutcome, Outcome};
pub use search::decide_joule;

use crate::config::{ClassConfig, Config, Direction, EnergyTarget, PlacementPolicyKind};
use crate::control::{owner, FreqLimit, Plan, Policy, Want};
use crate::energy::{EnergyModel, FlowState, NetCost};
use crate::Snapshot;
use serde::Serialize;

/// Mean packet size assumed for a network class until measured: a full Ethernet TCP segment.
pub const DEFAULT_PACKET_BYTES: f64 = 1448.0;

/// One class as placement sees it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct App {
    pub class: String,
    pub kind: AppKind,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum AppKind {
    /// A network app (one thread) and its flow: the target, the packet size, what it would send
    /// unlimited, and whether joule can hold it to its target (`limit_held`: the target names the
    /// interface its traffic leaves by). Where nothing holds the limit the app sends what it
    /// offers, and a placement is judged at that rate: its network work runs before any thread
    /// on its CPU, so a placement that is fine for the target can starve the threads beside it.
    Net { target_mbit: f64, mean_packet_bytes: f64, offered_mbit: f64, limit_held: bool },
    /// A CPU-bound app: `threads` threads, each wanting `perf_fraction` of the biggest CPU at
    /// its top OPP.
    Cpu { perf_fraction: f64, threads: u32 },
    /// A periodic RT thread (run time measured at the top OPP of the biggest CPU).
    Rt { deadline_us: u64, runtime_us: u64, period_us: u64 },
}

/// A placement: per app its threads' CPUs (the model's packing), the performance domains its
/// threads may run on and its bandwidth limit; per domain its OPP index.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Placement {
    pub threads: Vec<Vec<usize>>,
    pub opp: Vec<usize>,
    pub limit_mbit: Vec<Option<f64>>,
    /// Per app, ascending: one domain, or (joule) every domain of one core type where that
    /// type has several clocks (the RK3588's two A76 pairs), or (EAS) wherever its threads went.
    /// Empty when no thread of it is placed.
    pub domains: Vec<Vec<usize>>,
}

/// (thread work, softirq work) of a network app at `mbit`, in capacity units.
pub(crate) fn net_demand_cap(model: &EnergyModel, cost: &NetCost, mbit: f64, mean_packet_bytes: f64) -> (f64, f64) {
    let d = cost.demand(&FlowState { bandwidth_mbit: mbit, mean_packet_bytes });
    (model.capacity_for(d.app_cycles_per_s), model.capacity_for(d.softirq_cycles_per_s))
}

/// The EAS baseline's decision, scored on the same model. `limits_mbit` (one per app, or
/// empty): the bandwidth each network app is held to; None sends what it offers.
pub fn decide_eas(model: &EnergyModel, apps: &[App], cost: &NetCost, limits_mbit: &[Option<f64>]) -> (Placement, Outcome) {
    let p = eas::decide(model, apps, cost, limits_mbit);
    let o = evaluate(model, apps, &p, cost);
    (p, o)
}

/// One flow as the flow monitor reports it over an interval: the fields of the snapshot's flow
/// sample that placement reads.
#[derive(Debug, Clone, PartialEq)]
pub struct FlowReading {
    /// The socket's cgroup2 path (relative to the hierarchy root).
    pub cgroup: String,
    pub bytes: u64,
    pub packets: u64,
    pub rate_bytes_per_second: f64,
}

/// A class's measured traffic: the flows whose socket cgroup is the class's — its last path
/// component is the class name (the cgroups joule makes for classes), or it lies under one of
/// the class's `match.cgroup` rules. `None` without packets.
pub fn class_flow(flows: &[FlowReading], class: &ClassConfig) -> Option<FlowState> {
    let mine = flows.iter().filter(|f| f.cgroup.rsplit('/').next() == Some(class.name.as_str()) || class.matches.cgroup_matches(&f.cgroup));
    let (bytes, packets, rate) = mine.fold((0u64, 0u64, 0.0), |(b, p, r), f| (b + f.bytes, p + f.packets, r + f.rate_bytes_per_second));
    (packets > 0).then(|| FlowState { bandwidth_mbit: rate * 8.0 / 1e6, mean_packet_bytes: bytes as f64 / packets as f64 })
}

/// The flow monitor's readings in this snapshot, per cgroup (`snapshot.net.cgroups`: every
/// flow of the cgroup's sockets, not only the top N by name; both directions: each packet
/// costs the CPU whichever way it goes). None when `[net] flow_monitor` is off: network
/// classes are then modelled from their targets.
fn flow_readings(snap: &Snapshot) -> Vec<FlowReading> {
    let cgroups = snap.net.iter().flat_map(|n| &n.cgroups);
    cgroups.map(|c| FlowReading { cgroup: c.cgroup.clone(), bytes: c.bytes, packets: c.packets, rate_bytes_per_second: c.rate_bytes_per_second }).collect()
}

/// The agent's placement policy: `[[energy.target]]` classes → per class `Want::Affinity`, a
/// `Want::FreqCap` on its domain and, for a network class with an `interface`, a
/// `Want::LimitRate`.
pub struct PlacementPolicy {
    model: EnergyModel,
    targets: Vec<EnergyTarget>,
    /// The `[[class]]`es the targets name (to find their flows).
    classes: Vec<ClassConfig>,
    cost: NetCost,
    kind: PlacementPolicyKind,
    hysteresis: f64,
    headroom_pct: f64,
    held: Option<Held>,
}

/// The decision the policy holds, and the per-class demands (capacity units) it was made for.
#[derive(Debug, Clone, PartialEq)]
struct Held {
    demands: Vec<f64>,
    /// (the knob's actuator, want, reason): per class its affinity, its domain's frequency cap
    /// and its bandwidth limit.
    decisions: Vec<(&'static str, Want, String)>,
}

impl PlacementPolicy {
    /// `None` when `[energy]` is off or has no targets.
    pub fn from_config(cfg: &Config, model: EnergyModel) -> Option<PlacementPolicy> {
        let e = &cfg.energy;
        (e.enabled && !e.targets.is_empty()).then(|| PlacementPolicy {
            model,
            targets: e.targets.clone(),
            classes: cfg.classes.iter().filter(|c| e.targets.iter().any(|t| t.class == c.name)).cloned().collect(),
            cost: e.net_cost,
            kind: e.policy,
            hysteresis: e.hysteresis_pct / 100.0,
            headroom_pct: e.headroom_pct,
            held: None,
        })
    }

    /// The apps as this snapshot shows them. A network class's measured flows (`flows`) give
    /// its mean packet size and, where it sends more than its target, what it offers; a class's
    /// measured CPU use (its cgroup's `usage_cpus`, where the snapshot has a cgroup named after
    /// the class) raises a CPU app's thread count. Without readings: the target and the
    /// configured packet size.
    pub fn apps(&self, snap: &Snapshot, flows: &[FlowReading]) -> Vec<App> {
        self.targets
            .iter()
            .map(|t| {
                let used = snap.cgroups.iter().find(|c| c.path.rsplit('/').next() == Some(t.class.as_str())).and_then(|c| c.usage_cpus);
                let kind = if let Some(b) = t.bandwidth_mbit {
                    let seen = self.classes.iter().find(|c| c.name == t.class).and_then(|c| class_flow(flows, c));
                    let bytes = seen.map_or(t.mean_packet_bytes.unwrap_or(DEFAULT_PACKET_BYTES), |f| f.mean_packet_bytes);
                    let offered_mbit = seen.map_or(b, |f| f.bandwidth_mbit.max(b));
                    AppKind::Net { target_mbit: b, mean_packet_bytes: bytes, offered_mbit, limit_held: t.interface.is_some() }
                } else if let Some(p) = t.perf_fraction {
                    let threads = t.threads.unwrap_or(1).max(used.map_or(0, |u| (u - 0.05).ceil().max(0.0) as u32));
                    AppKind::Cpu { perf_fraction: p, threads }
                } else {
                    AppKind::Rt { deadline_us: t.deadline_us.unwrap_or(0), runtime_us: t.runtime_us.unwrap_or(0), period_us: t.period_us.unwrap_or(1).max(1) }
                };
                App { class: t.class.clone(), kind }
            })
            .collect()
    }

    /// What each class loads the CPUs with: its needs, and for a sender nothing holds, what it
    /// sends (a sender growing past its target changes what it takes from the threads beside it).
    fn demands(&self, apps: &[App]) -> Vec<f64> {
        let load = |a: &App| match &a.kind {
            AppKind::Net { mean_packet_bytes, offered_mbit, limit_held: false, .. } => {
                let (app, soft) = net_demand_cap(&self.model, &self.cost, *offered_mbit, *mean_packet_bytes);
                app + soft
            }
            _ => search::thread_needs(&self.model, &self.cost, a).iter().map(|n| n.0).sum(),
        };
        apps.iter().map(load).collect()
    }

    fn moved(&self, now: &[f64]) -> bool {
        match &self.held {
            None => true,
            Some(h) => h.demands.len() != now.len() || h.demands.iter().zip(now).any(|(a, b)| (a - b).abs() > self.hysteresis * a.abs().max(1e-9)),
        }
    }

    fn decisions(&self, apps: &[App]) -> Vec<(&'static str, Want, String)> {
        let (p, o) = match self.kind {
            PlacementPolicyKind::Joule => decide_joule(&self.model, apps, &self.cost, self.headroom_pct),
            PlacementPolicyKind::Eas => decide_eas(&self.model, apps, &self.cost, &[]),
        };
        let mut out = Vec::new();
        for (i, a) in apps.iter().enumerate() {
            let set = &p.domains[i];
            if set.is_empty() {
                continue;
            }
            let doms: Vec<&crate::energy::PerfDomain> = set.iter().map(|k| &self.model.domains[*k]).collect();
            let mhz: Vec<String> = set.iter().map(|k| (self.model.domains[*k].opps[p.opp[*k]].frequency_khz / 1000).to_string()).collect();
            let why = format!(
                "{} policy: class {} on domain {} at {} MHz meets {:.0} % of its target (model), {:.0} mW modelled for all classes",
                if self.kind == PlacementPolicyKind::Joule { "joule" } else { "eas" },
                a.class,
                doms.iter().map(|d| d.name.as_str()).collect::<Vec<_>>().join("+"),
                mhz.join("/"),
                o.apps[i].perf_uncapped * 100.0,
                o.power_mw
            );
            let mut cpus: Vec<usize> = doms.iter().flat_map(|d| d.cpus.iter().copied()).collect();
            cpus.sort_unstable();
            out.push((owner::TASK_SCHED, Want::Affinity { class: a.class.clone(), cpus }, why.clone()));
            for k in set {
                let d = &self.model.domains[*k];
                let khz = d.opps[p.opp[*k]].frequency_khz;
                if khz > 0 {
                    out.push((owner::CPUFREQ, Want::FreqCap { cpus: Some(d.cpus.clone()), limit: FreqLimit::Khz(khz) }, why.clone()));
                }
            }
            let interface = self.targets.iter().find(|t| t.class == a.class).and_then(|t| t.interface.clone());
            if let (Some(rate_mbit), Some(interface)) = (p.limit_mbit[i], interface) {
                let want = Want::LimitRate { interface, direction: Direction::Egress, class: Some(a.class.clone()), flow: None, rate_mbit };
                out.push((owner::TC, want, format!("{why}; its traffic held to the {rate_mbit} Mbit/s the model counted")));
            }
        }
        out
    }
}

impl Policy for PlacementPolicy {
    fn name(&self) -> &'static str {
        "placement"
    }

    fn decide(&mut self, snap: &Snapshot, plan: &mut Plan) {
        let apps = self.apps(snap, &flow_readings(snap));
        let now = self.demands(&apps);
        if self.moved(&now) {
            self.held = Some(Held { demands: now, decisions: self.decisions(&apps) });
        }
        for (to, want, why) in self.held.iter().flat_map(|h| h.decisions.iter()) {
            plan.push("placement", Some(to), want.clone(), why.clone());
        }
    }
}

#[cfg(test)]
mod tests;
