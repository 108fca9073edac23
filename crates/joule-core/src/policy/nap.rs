//! The nap policy (issue 10): idle or not, from the monitors' readings in `snap.nap`. Idle
//! means no monitor active, no wake and no packet on the watched ports for `[nap] idle_ms`;
//! then it asks the "nap" actuator to nap, else to stay (or come) awake. Pure: its only state
//! is when activity was last seen and the counters it saw then.

use crate::config::Config;
use crate::control::{owner, Plan, Policy, Want};
use crate::Snapshot;

pub struct NapPolicy {
    idle_ms: u64,
    /// Snapshot time of the last activity; None before the first reading.
    last_active_ms: Option<u64>,
    seen: (u64, u64),
}

impl NapPolicy {
    /// None when `[nap]` is off.
    pub fn from_config(cfg: &Config) -> Option<Self> {
        cfg.nap.enabled.then_some(Self { idle_ms: cfg.nap.idle_ms, last_active_ms: None, seen: (0, 0) })
    }
}

impl Policy for NapPolicy {
    fn name(&self) -> &'static str {
        "nap"
    }
    fn decide(&mut self, snap: &Snapshot, plan: &mut Plan) {
        let Some(r) = &snap.nap else { return };
        let now = snap.taken_at_ms;
        let counters = (r.wakes_total, r.port_hits_total);
        let mut why: Vec<String> = r.monitors.iter().filter(|m| m.active).map(|m| format!("{}: {}", m.name, m.detail)).collect();
        if counters.0 != self.seen.0 {
            why.push(format!("woken {} time(s) since the last period", counters.0.wrapping_sub(self.seen.0)));
        }
        if counters.1 != self.seen.1 {
            why.push(format!("{} packet(s) on the watched ports (ebpf)", counters.1.wrapping_sub(self.seen.1)));
        }
        self.seen = counters;
        if !why.is_empty() || self.last_active_ms.is_none() {
            self.last_active_ms = Some(now);
        }
        let idle_for_ms = now.saturating_sub(self.last_active_ms.unwrap_or(now));
        let nap = why.is_empty() && idle_for_ms >= self.idle_ms;
        let reason = if !why.is_empty() {
            format!("active: {}", why.join("; "))
        } else if nap {
            format!("idle for {idle_for_ms} ms ≥ {} ms", self.idle_ms)
        } else {
            format!("idle for {idle_for_ms} ms < {} ms", self.idle_ms)
        };
        plan.push(self.name(), Some(owner::NAP), Want::Nap { nap, idle_for_ms }, reason);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::{MonitorReading, NapReadings};

    fn snap(at_ms: u64, active: bool, wakes: u64, hits: u64) -> Snapshot {
        let m = MonitorReading { name: "tcp".into(), active, detail: "x".into(), ..Default::default() };
        Snapshot {
            taken_at_ms: at_ms,
            nap: Some(NapReadings { monitors: vec![m], wakes_total: wakes, port_hits_total: hits, napping: false }),
            ..Default::default()
        }
    }

    fn want(p: &mut NapPolicy, s: &Snapshot) -> (bool, u64, String) {
        let mut plan = Plan::new(s.taken_at_ms);
        p.decide(s, &mut plan);
        let d = plan.for_actuator(owner::NAP).next().expect("a decision for the nap actuator");
        match d.want {
            Want::Nap { nap, idle_for_ms } => (nap, idle_for_ms, d.reason.clone()),
            ref w => panic!("{w:?}"),
        }
    }

    fn policy(idle_ms: u64) -> NapPolicy {
        let mut cfg = Config::default();
        cfg.nap.enabled = true;
        cfg.nap.idle_ms = idle_ms;
        NapPolicy::from_config(&cfg).unwrap()
    }

    #[test]
    fn naps_only_after_idle_ms_without_activity_and_wakes_on_activity() {
        let mut p = policy(1000);
        assert!(!want(&mut p, &snap(0, false, 0, 0)).0, "the first reading starts the idle clock");
        assert!(!want(&mut p, &snap(900, false, 0, 0)).0);
        let (nap, idle, reason) = want(&mut p, &snap(1000, false, 0, 0));
        assert!(nap && idle == 1000, "{reason}");
        let (nap, idle, reason) = want(&mut p, &snap(1100, true, 0, 0));
        assert!(!nap && idle == 0 && reason.contains("tcp: x"), "{reason}");
        assert!(!want(&mut p, &snap(2000, false, 0, 0)).0, "the clock restarted at the activity");
        assert!(want(&mut p, &snap(2100, false, 0, 0)).0);
    }

    #[test]
    fn a_wake_or_a_packet_between_periods_is_activity_even_when_the_monitors_saw_nothing() {
        let mut p = policy(500);
        want(&mut p, &snap(0, false, 0, 0));
        assert!(want(&mut p, &snap(600, false, 0, 0)).0);
        // The waiter thawed the service and the request was served before this snapshot.
        let (nap, _, reason) = want(&mut p, &snap(700, false, 1, 1));
        assert!(!nap && reason.contains("woken 1") && reason.contains("1 packet"), "{reason}");
        assert!(!want(&mut p, &snap(1100, false, 1, 1)).0);
        assert!(want(&mut p, &snap(1200, false, 1, 1)).0);
    }

    #[test]
    fn off_by_default_and_silent_without_readings() {
        assert!(NapPolicy::from_config(&Config::default()).is_none());
        let mut plan = Plan::new(0);
        policy(100).decide(&Snapshot::default(), &mut plan);
        assert!(plan.decisions.is_empty());
    }
}
