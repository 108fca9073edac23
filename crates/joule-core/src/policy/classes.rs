//! Class guarantees as a policy: every configured `[[class]]` is to be held, all the time. The
//! qos actuator does the holding (and its own admission control, before anything is written).

use crate::config::Config;
use crate::control::{owner, Plan, Policy, Want};
use crate::Snapshot;

pub struct ClassPolicy {
    classes: Vec<String>,
}

impl ClassPolicy {
    /// None when there is nothing to hold (no `[[class]]`, or `agent.apply_classes = false`).
    pub fn from_config(cfg: &Config) -> Option<ClassPolicy> {
        (cfg.agent.apply_classes && !cfg.classes.is_empty()).then(|| ClassPolicy { classes: cfg.classes.iter().map(|c| c.name.clone()).collect() })
    }
}

impl Policy for ClassPolicy {
    fn name(&self) -> &'static str {
        "classes"
    }
    fn decide(&mut self, _snap: &Snapshot, plan: &mut Plan) {
        let reason = format!("{} [[class]] in the config, apply_classes = true", self.classes.len());
        plan.push(self.name(), Some(owner::CGROUP_CPU), Want::HoldClasses { classes: self.classes.clone() }, reason);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holds_every_configured_class_and_nothing_without_classes() {
        let mut cfg = Config::default();
        assert!(ClassPolicy::from_config(&cfg).is_none());
        cfg.classes = Config::parse("[[class]]\nname = \"main\"\nweight = 200\n").unwrap().classes;
        let mut p = ClassPolicy::from_config(&cfg).unwrap();
        let mut plan = Plan::default();
        p.decide(&Snapshot::default(), &mut plan);
        let d: Vec<_> = plan.for_actuator(owner::CGROUP_CPU).collect();
        assert_eq!(d.len(), 1);
        assert_eq!(d[0].want, Want::HoldClasses { classes: vec!["main".into()] });
        cfg.agent.apply_classes = false;
        assert!(ClassPolicy::from_config(&cfg).is_none());
    }
}
