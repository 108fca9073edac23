//! What to do at each thermal stage. The stage itself is a reading (computed in the kernel
//! from temperature and, with a power budget, power); this policy turns it into the stage's
//! actions (`[[thermal.stage]]`) and picks the path that carries them out: joule's sched_ext
//! scheduler when it is the one running, else the cgroup path (CFS bandwidth of best-effort
//! classes) — so an ejected scheduler is replaced by the cgroup path the very next period.

use crate::config::{Config, ThermalConfig, ThermalRole, ThermalScheduler};
use crate::control::{owner, FreqLimit, Plan, Policy, ThermalPath, Want};
use crate::snapshot::StageEngine;
use crate::Snapshot;

pub struct ThermalPolicy {
    cfg: ThermalConfig,
    best_effort: Vec<String>,
    /// The best-effort classes that are pod classes: a cap's reason names their pods.
    pod_classes: Vec<String>,
    /// Per pod class, the pods last named: read again only when a reading says the membership
    /// or the pod index changed, not every period.
    named: std::collections::HashMap<String, String>,
    /// The pod index those names came from.
    named_for: Option<std::sync::Arc<crate::config::PodIndex>>,
}

impl ThermalPolicy {
    pub fn from_config(cfg: &Config) -> ThermalPolicy {
        let best_effort = cfg.classes.iter().filter(|c| c.thermal == ThermalRole::BestEffort).map(|c| c.name.clone()).collect();
        let pod_classes = cfg.classes.iter().filter(|c| c.thermal == ThermalRole::BestEffort && !c.matches.pod.is_empty()).map(|c| c.name.clone()).collect();
        ThermalPolicy { cfg: cfg.thermal.clone(), best_effort, pod_classes, named: Default::default(), named_for: None }
    }
}

/// The Burstable and BestEffort pods `class`'s members live in, as `namespace/name` (the UID where the runtime did not
/// name it), the first few and how many more: for a cap's reason.
fn pods_named(snap: &Snapshot, class: &str) -> String {
    const SHOWN: usize = 5;
    let m = &snap.membership;
    let mut pods = std::collections::BTreeSet::new();
    for member in m.of(class) {
        for p in member.cgroups.paths() {
            // A Guaranteed pod is never capped (joule-act's pod_cpu): not named either.
            if let Some(crate::kubepods::KubeCgroup::Pod(pc)) =
                crate::kubepods::parse(p).filter(|k| !matches!(k, crate::kubepods::KubeCgroup::Pod(pc) if pc.qos == crate::kubepods::Qos::Guaranteed))
            {
                pods.insert(m.pods.get(&pc.pod_uid).map_or(pc.pod_uid.clone(), |x| format!("{}/{}", x.namespace, x.name)));
            }
        }
    }
    let shown: Vec<&str> = pods.iter().take(SHOWN).map(String::as_str).collect();
    match pods.len() {
        0 => "no pod now".into(),
        n if n > SHOWN => format!("pods {} and {} more", shown.join(", "), n - SHOWN),
        _ => format!("pods {}", shown.join(", ")),
    }
}

impl Policy for ThermalPolicy {
    fn name(&self) -> &'static str {
        "thermal"
    }
    fn decide(&mut self, snap: &Snapshot, plan: &mut Plan) {
        let st = &snap.stage;
        let stage = st.value;
        let actions = self.cfg.actions(stage);
        let why = match st.computed_by {
            StageEngine::None => "no CPU temperature acted on (no CPU sensor read; a model counts only with act_on_model)".to_string(),
            by => format!("{:.1} °C ({}), stage computed by {}", st.temp_celsius, st.temp_source, by.as_str()),
        };
        let why = match (st.driven_by, st.power) {
            (crate::snapshot::StageDriver::Power, Some(p)) => format!("the power budget: {:.1} W ({}) is at power stage {}; {why}", p.watts, p.source, p.stage),
            _ => why,
        };
        let wants_scx = self.cfg.scheduler == ThermalScheduler::Scx;
        let path = if wants_scx && snap.sched_ext.ours() { ThermalPath::Scx } else { ThermalPath::Cgroup };
        let path_why = match (wants_scx, path) {
            (false, _) => "thermal.scheduler = \"cgroup\"".to_string(),
            (true, ThermalPath::Scx) => "joule's sched_ext scheduler is running".to_string(),
            (true, ThermalPath::Cgroup) => {
                format!("thermal.scheduler = \"scx\" but sched_ext is {:?} with {:?}: cgroup path", snap.sched_ext.state, snap.sched_ext.ops)
            }
        };
        let reason = format!("stage {stage} from {why}; {path_why}");
        // The scheduler's actuator sees the stage on every path: it (re)loads, or backs off.
        let to = wants_scx.then_some(owner::SCX);
        plan.push(self.name(), to, Want::ThermalStage { stage, path, actions }, reason);

        for class in &self.best_effort {
            let (cpu_pct, why) = match path {
                ThermalPath::Cgroup => {
                    (actions.best_effort_cpu_pct, format!("stage {stage}: best-effort classes get {}% of the machine", actions.best_effort_cpu_pct))
                }
                ThermalPath::Scx => (100.0, "the sched_ext scheduler degrades best-effort classes itself".to_string()),
            };
            let why = if cpu_pct < 100.0 && self.pod_classes.contains(class) {
                let m = &snap.membership;
                let unchanged = !m.full && m.changed.is_empty() && self.named_for.as_ref().is_some_and(|p| std::sync::Arc::ptr_eq(p, &m.pods));
                let pods = match self.named.get(class).filter(|_| unchanged) {
                    Some(p) => p.clone(),
                    None => {
                        let p = pods_named(snap, class);
                        self.named.insert(class.clone(), p.clone());
                        p
                    }
                };
                format!("{why} ({pods})")
            } else {
                // Not named this period: the changes of the readings in between are not seen.
                self.named.remove(class);
                why
            };
            plan.push(self.name(), Some(owner::CGROUP_CPU), Want::CapClass { class: class.clone(), cpu_pct }, why);
        }
        if !self.pod_classes.is_empty() {
            self.named_for = Some(snap.membership.pods.clone());
        }
        // The machine's frequency is the kernel's and its other tools' unless the operator let
        // the stages cap it: no want at all then, so the cpufreq actuator never writes for us.
        if self.cfg.cpufreq_caps {
            let why = format!("stage {stage}: CPU frequency capped to {}% of the maximum", actions.cpufreq_max_pct);
            plan.push(self.name(), Some(owner::CPUFREQ), Want::FreqCap { cpus: None, limit: FreqLimit::Pct(actions.cpufreq_max_pct) }, why);
        }
    }
}

/// What the thermal policy asked of the machine in one plan: the stage, the path and the caps.
/// The agent logs an event when it changes and shows it on its status line.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct ThermalActions {
    pub stage: u32,
    pub path: ThermalPath,
    /// Per best-effort class: % of the whole machine it may use (100 = uncapped).
    pub class_cpu_pct: std::collections::BTreeMap<String, f64>,
    pub cpufreq_max_pct: f64,
}

impl ThermalActions {
    /// Read back from `plan` (None when the thermal policy decided nothing).
    pub fn from_plan(plan: &Plan) -> Option<ThermalActions> {
        let mut out = None;
        for d in plan.decisions.iter().filter(|d| d.policy == "thermal") {
            match &d.want {
                Want::ThermalStage { stage, path, .. } => {
                    out = Some(ThermalActions { stage: *stage, path: *path, class_cpu_pct: Default::default(), cpufreq_max_pct: 100.0 })
                }
                Want::CapClass { class, cpu_pct } => {
                    if let Some(a) = out.as_mut() {
                        a.class_cpu_pct.insert(class.clone(), *cpu_pct);
                    }
                }
                Want::FreqCap { limit: FreqLimit::Pct(pct), .. } => {
                    if let Some(a) = out.as_mut() {
                        a.cpufreq_max_pct = *pct;
                    }
                }
                _ => {}
            }
        }
        out
    }
}

impl std::fmt::Display for ThermalActions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let path = match self.path {
            ThermalPath::Scx => "scx",
            ThermalPath::Cgroup => "cgroup",
        };
        write!(f, "{path} path")?;
        for (c, p) in &self.class_cpu_pct {
            write!(f, ", {c} ≤ {p:.0}%")?;
        }
        write!(f, ", freq ≤ {:.0}%", self.cpufreq_max_pct)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::StageActions;
    use crate::snapshot::{SchedExt, Stage};
    use crate::Origin;

    fn cfg(scheduler: &str) -> Config {
        toml::from_str(&format!(
            "[thermal]\nscheduler = \"{scheduler}\"\ncpufreq_caps = true\n[[class]]\nname = \"batch\"\nthermal = \"best_effort\"\nmatch = {{ comm = [\"x\"] }}\n[[class]]\nname = \"ui\"\nthermal = \"labelled\"\nmatch = {{ comm = [\"y\"] }}\n"
        ))
        .unwrap()
    }

    fn hot(stage: u32) -> Snapshot {
        let stage = Stage { value: stage, temp_celsius: 81.5, computed_by: StageEngine::Ebpf, temp_source: Origin::Model, ..Default::default() };
        Snapshot { stage, ..Snapshot::default() }
    }

    #[test]
    fn cgroup_path_caps_best_effort_classes_only_and_caps_cpufreq() {
        let mut p = ThermalPolicy::from_config(&cfg("cgroup"));
        let mut plan = Plan::default();
        p.decide(&hot(2), &mut plan);
        let d = &plan.decisions[0];
        assert_eq!(
            (d.actuator.as_deref(), &d.want),
            (None, &Want::ThermalStage { stage: 2, path: ThermalPath::Cgroup, actions: StageActions::default_for(2) })
        );
        assert!(d.reason.contains("81.5 °C (model), stage computed by ebpf"), "{}", d.reason);
        let caps: Vec<_> = plan.for_actuator(owner::CGROUP_CPU).map(|d| d.want.clone()).collect();
        assert_eq!(caps, vec![Want::CapClass { class: "batch".into(), cpu_pct: 35.0 }], "labelled classes are never capped");
        assert_eq!(plan.for_actuator(owner::CPUFREQ).last().unwrap().want, Want::FreqCap { cpus: None, limit: FreqLimit::Pct(85.0) });
        let a = ThermalActions::from_plan(&plan).unwrap();
        assert_eq!((a.stage, a.path, a.class_cpu_pct["batch"], a.cpufreq_max_pct), (2, ThermalPath::Cgroup, 35.0, 85.0));
        assert_eq!(a.to_string(), "cgroup path, batch ≤ 35%, freq ≤ 85%");
    }

    #[test]
    fn scx_path_only_while_joules_scheduler_runs_else_cgroup_fallback() {
        let mut p = ThermalPolicy::from_config(&cfg("scx"));
        let mut snap = hot(3);
        snap.sched_ext = SchedExt { state: "enabled".into(), ops: "joule".into(), source: Origin::Kernel };
        let mut plan = Plan::default();
        p.decide(&snap, &mut plan);
        let stage = plan.for_actuator(owner::SCX).next().expect("the scx actuator sees the stage");
        assert!(matches!(stage.want, Want::ThermalStage { path: ThermalPath::Scx, stage: 3, .. }), "{stage:?}");
        assert_eq!(plan.for_actuator(owner::CGROUP_CPU).next().unwrap().want, Want::CapClass { class: "batch".into(), cpu_pct: 100.0 });

        // Ejected (or another scheduler): the cgroup path caps at once.
        snap.sched_ext = SchedExt { state: "disabled".into(), ops: String::new(), source: Origin::Kernel };
        let mut plan = Plan::default();
        p.decide(&snap, &mut plan);
        let stage = plan.for_actuator(owner::SCX).next().unwrap();
        assert!(matches!(stage.want, Want::ThermalStage { path: ThermalPath::Cgroup, .. }), "{stage:?}");
        assert!(stage.reason.contains("cgroup path"), "{}", stage.reason);
        assert_eq!(plan.for_actuator(owner::CGROUP_CPU).next().unwrap().want, Want::CapClass { class: "batch".into(), cpu_pct: 15.0 });
    }

    #[test]
    fn a_stage_the_power_budget_holds_says_so_with_the_watts() {
        let mut p = ThermalPolicy::from_config(&cfg("cgroup"));
        let mut snap = hot(2);
        snap.stage.driven_by = crate::snapshot::StageDriver::Power;
        snap.stage.power = Some(crate::snapshot::StagePower { stage: 2, watts: 41.25, source: Origin::Sensor });
        let mut plan = Plan::default();
        p.decide(&snap, &mut plan);
        assert!(plan.decisions[0].reason.starts_with("stage 2 from the power budget: 41.2 W (sensor) is at power stage 2"), "{}", plan.decisions[0].reason);
    }

    /// Out of the box the stages cap no frequency: no want reaches the cpufreq actuator.
    #[test]
    fn without_cpufreq_caps_no_stage_asks_anything_of_cpufreq() {
        let mut c = cfg("cgroup");
        c.thermal.cpufreq_caps = false;
        let mut p = ThermalPolicy::from_config(&c);
        let mut plan = Plan::default();
        p.decide(&hot(3), &mut plan);
        assert_eq!(plan.for_actuator(owner::CPUFREQ).count(), 0, "{plan:?}");
        assert_eq!(ThermalActions::from_plan(&plan).unwrap().cpufreq_max_pct, 100.0);
    }

    #[test]
    fn stage_zero_lifts_every_cap() {
        let mut p = ThermalPolicy::from_config(&cfg("cgroup"));
        let mut plan = Plan::default();
        p.decide(&hot(0), &mut plan);
        assert_eq!(plan.for_actuator(owner::CGROUP_CPU).next().unwrap().want, Want::CapClass { class: "batch".into(), cpu_pct: 100.0 });
        assert_eq!(plan.for_actuator(owner::CPUFREQ).next().unwrap().want, Want::FreqCap { cpus: None, limit: FreqLimit::Pct(100.0) });
    }
}
