//! The network policy (issue 11): the `[[net.limit]]`s of the config as `Want::LimitRate`
//! decisions for the "netlimit" actuator, every period. What moves a limit at run time (the
//! energy-aware placement, which reads the flow monitor) adds its own decisions; the actuator
//! holds the last one per interface and target.

use crate::config::{Config, Direction, NetLimit};
use crate::control::{owner, Plan, Policy, Want};
use crate::Snapshot;

pub struct NetPolicy {
    limits: Vec<NetLimit>,
}

impl NetPolicy {
    /// `None` when the config has no limit (the policy would never decide anything).
    pub fn from_config(cfg: &Config) -> Option<NetPolicy> {
        (!cfg.net.limits.is_empty()).then(|| NetPolicy { limits: cfg.net.limits.clone() })
    }
}

impl Policy for NetPolicy {
    fn name(&self) -> &'static str {
        "net"
    }
    fn decide(&mut self, _snap: &Snapshot, plan: &mut Plan) {
        for l in &self.limits {
            let what = match (&l.class, &l.flow) {
                (Some(c), _) => format!("class {c}"),
                (None, Some(f)) => format!("flow {f:?}"),
                (None, None) => "all traffic".to_string(),
            };
            plan.push(
                self.name(),
                Some(owner::TC),
                Want::LimitRate {
                    interface: l.interface.clone(),
                    direction: l.direction,
                    class: l.class.clone(),
                    flow: l.flow.clone(),
                    rate_mbit: l.rate_mbit,
                },
                format!(
                    "[[net.limit]]: {what} {} {} at most {} Mbit/s",
                    if l.direction == Direction::Ingress { "arriving on" } else { "leaving" },
                    l.interface,
                    l.rate_mbit
                ),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_decision_per_configured_limit_and_none_without() {
        assert!(NetPolicy::from_config(&Config::default()).is_none());
        let mut cfg = Config::default();
        cfg.net.limits = vec![NetLimit { interface: "veth0".into(), rate_mbit: 5.0, ..Default::default() }];
        let mut p = NetPolicy::from_config(&cfg).unwrap();
        let mut plan = Plan::default();
        p.decide(&Snapshot::default(), &mut plan);
        let d: Vec<_> = plan.for_actuator(owner::TC).collect();
        assert_eq!(d.len(), 1);
        assert_eq!(d[0].want, Want::LimitRate { interface: "veth0".into(), direction: Direction::Egress, class: None, flow: None, rate_mbit: 5.0 });
        assert!(d[0].reason.contains("5 Mbit/s"), "{}", d[0].reason);
    }
}
