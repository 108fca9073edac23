//! What to do at each thermal stage. The stage itself is a reading (computed in the kernel);
//! this policy turns it into the stage's actions. No actuator acts on stages yet — mechanism 1
//! brings the sched_ext scheduler and the cgroup degradation — so the decision is published
//! for the user and addressed to no actuator.

use crate::config::{Config, ThermalScheduler};
use crate::control::{Plan, Policy, Want};
use crate::snapshot::StageEngine;
use crate::Snapshot;

pub struct ThermalPolicy {
    scheduler: ThermalScheduler,
}

impl ThermalPolicy {
    pub fn from_config(cfg: &Config) -> ThermalPolicy {
        ThermalPolicy { scheduler: cfg.thermal.scheduler }
    }
}

impl Policy for ThermalPolicy {
    fn name(&self) -> &'static str {
        "thermal"
    }
    fn decide(&mut self, snap: &Snapshot, plan: &mut Plan) {
        let st = &snap.stage;
        let why = match st.computed_by {
            StageEngine::None => "no temperature reading yet".to_string(),
            by => format!("{:.1} °C ({}), stage computed by {}", st.temp_celsius, st.temp_source, by.as_str()),
        };
        let reason = format!("stage {} from {why}; thermal.scheduler = {:?}: no actuator acts on the stage yet", st.value, self.scheduler);
        plan.push(self.name(), None, Want::ThermalStage { stage: st.value, actions: Vec::new() }, reason);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Origin;

    #[test]
    fn publishes_the_stage_with_where_it_came_from_and_acts_on_nothing_yet() {
        let mut p = ThermalPolicy::from_config(&Config::default());
        let mut snap = Snapshot::default();
        let mut plan = Plan::default();
        p.decide(&snap, &mut plan);
        assert!(plan.decisions[0].reason.starts_with("stage 0 from no temperature reading yet"), "{}", plan.decisions[0].reason);
        snap.stage = crate::snapshot::Stage { value: 2, temp_celsius: 81.5, computed_by: StageEngine::Ebpf, temp_source: Origin::Model };
        let mut plan = Plan::default();
        p.decide(&snap, &mut plan);
        let d = &plan.decisions[0];
        assert_eq!((d.actuator.as_deref(), &d.want), (None, &Want::ThermalStage { stage: 2, actions: vec![] }));
        assert!(d.reason.contains("81.5 °C (model), stage computed by ebpf"), "{}", d.reason);
    }
}
