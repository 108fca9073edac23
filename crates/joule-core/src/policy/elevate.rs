//! The user-space scheduler as a policy: `[elevate] class = "..."` asks the elevate actuator
//! to keep that class's threads under the scheduler, every period (the actuator keeps one
//! running and follows the class's threads).

use crate::config::Config;
use crate::control::{owner, Plan, Policy, Want};
use crate::Snapshot;

pub struct ElevatePolicy {
    want: Want,
}

impl ElevatePolicy {
    /// None unless `[elevate] class` is set.
    pub fn from_config(cfg: &Config) -> Option<ElevatePolicy> {
        let e = &cfg.elevate;
        e.enabled().then(|| ElevatePolicy { want: Want::Elevate { class: e.class.clone(), cpu: e.cpu, slice_us: e.slice_us, pattern: e.pattern.clone() } })
    }
}

impl Policy for ElevatePolicy {
    fn name(&self) -> &'static str {
        "elevate"
    }
    fn decide(&mut self, _snap: &Snapshot, plan: &mut Plan) {
        plan.push(self.name(), Some(owner::TASK_SCHED), self.want.clone(), "[elevate] class is set in the config");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn asks_for_the_configured_class_and_nothing_when_off() {
        assert!(ElevatePolicy::from_config(&Config::default()).is_none());
        let cfg = Config::parse("[[class]]\nname = \"lat\"\nweight = 100\n[elevate]\nclass = \"lat\"\nslice_us = 40\n").unwrap();
        let mut p = ElevatePolicy::from_config(&cfg).unwrap();
        let mut plan = Plan::new(0);
        p.decide(&Snapshot::default(), &mut plan);
        let d: Vec<_> = plan.for_actuator(owner::TASK_SCHED).collect();
        assert_eq!(d.len(), 1);
        assert_eq!(d[0].want, Want::Elevate { class: "lat".into(), cpu: 0, slice_us: 40, pattern: "shared".into() });
    }
}
