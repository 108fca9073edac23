//! Class guarantees as a policy: every configured `[[class]]` is to be held, all the time. The
//! qos actuator does the holding (and its own admission control, before anything is written);
//! the task-scheduling actuator gives the threads of a class with a latency slice that slice.

use crate::config::Config;
use crate::control::{owner, Plan, Policy, Want};
use crate::Snapshot;

pub struct ClassPolicy {
    classes: Vec<String>,
    /// (class, slice µs, why) for each class whose threads get a slice.
    slices: Vec<(String, u32, String)>,
}

impl ClassPolicy {
    /// None when there is nothing to hold (no `[[class]]`, or `agent.apply_classes = false`).
    pub fn from_config(cfg: &Config) -> Option<ClassPolicy> {
        let slices = cfg
            .classes
            .iter()
            .filter_map(|c| {
                let us = c.slice_us()?;
                let said = if c.latency_slice_us.is_some() { "latency_slice_us" } else { "the default for a labelled class" };
                Some((
                    c.name.clone(),
                    us,
                    format!("class {} gets a {us} µs EEVDF slice ({said}): its threads preempt on wake-up what runs with a longer one", c.name),
                ))
            })
            .collect();
        (cfg.agent.apply_classes && !cfg.classes.is_empty()).then(|| ClassPolicy { classes: cfg.classes.iter().map(|c| c.name.clone()).collect(), slices })
    }
}

impl Policy for ClassPolicy {
    fn name(&self) -> &'static str {
        "classes"
    }
    fn decide(&mut self, _snap: &Snapshot, plan: &mut Plan) {
        let reason = format!("{} [[class]] in the config, apply_classes = true", self.classes.len());
        plan.push(self.name(), Some(owner::CGROUP_CPU), Want::HoldClasses { classes: self.classes.clone() }, reason);
        for (class, slice_us, why) in &self.slices {
            plan.push(self.name(), Some(owner::TASK_SCHED), Want::Slice { class: class.clone(), slice_us: *slice_us }, why.clone());
        }
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

    #[test]
    fn a_labelled_class_gets_the_default_slice_and_a_stated_one_wins_or_turns_it_off() {
        let cfg = Config::parse(concat!(
            "[[class]]\nname = \"web\"\nthermal = \"labelled\"\nmatch = { uid = [0] }\n",
            "[[class]]\nname = \"db\"\nlatency_slice_us = 1000\nmatch = { uid = [0] }\n",
            "[[class]]\nname = \"quiet\"\nthermal = \"labelled\"\nlatency_slice_us = 0\nmatch = { uid = [0] }\n",
            "[[class]]\nname = \"batch\"\nthermal = \"best_effort\"\nmatch = { uid = [1000] }\n",
        ))
        .unwrap();
        let mut plan = Plan::default();
        ClassPolicy::from_config(&cfg).unwrap().decide(&Snapshot::default(), &mut plan);
        let slices: Vec<_> = plan.for_actuator(owner::TASK_SCHED).map(|d| d.want.clone()).collect();
        assert_eq!(
            slices,
            vec![Want::Slice { class: "web".into(), slice_us: crate::config::LABELLED_SLICE_US }, Want::Slice { class: "db".into(), slice_us: 1000 }]
        );
        let e: Vec<String> = Config::parse("[[class]]\nname = \"x\"\nlatency_slice_us = 50\n").unwrap_err().iter().map(|p| p.message.clone()).collect();
        assert!(e.iter().any(|m| m.contains("latency_slice_us = 50 is outside 100..=100000")), "{e:?}");
    }
}
