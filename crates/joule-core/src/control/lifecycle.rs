//! One lifecycle for every actuator: init in order (the first failure shuts down those already
//! started, in reverse), reconcile each period, shut down in reverse. What each did last is
//! kept as its status for the exporters.

use super::{ActCx, ActError, Actuator, ActuatorState, NoState, Plan};
use serde::ser::SerializeStruct;
use std::sync::Arc;

/// What an actuator did in its last period, as the exporters publish it.
#[derive(Debug, Clone)]
pub struct ActuatorStatus {
    pub name: String,
    /// Whether its last init or reconcile succeeded.
    pub ok: bool,
    pub last_error: Option<String>,
    pub errors_total: u64,
    /// What it holds, typed by the actuator.
    pub state: Arc<dyn ActuatorState>,
}

impl Default for ActuatorStatus {
    fn default() -> Self {
        ActuatorStatus { name: String::new(), ok: false, last_error: None, errors_total: 0, state: Arc::new(NoState) }
    }
}

impl serde::Serialize for ActuatorStatus {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut st = s.serialize_struct("ActuatorStatus", 5)?;
        st.serialize_field("name", &self.name)?;
        st.serialize_field("ok", &self.ok)?;
        st.serialize_field("last_error", &self.last_error)?;
        st.serialize_field("errors_total", &self.errors_total)?;
        st.serialize_field("state", &self.state.to_json())?;
        st.end()
    }
}

/// The agent's actuators, in the order they start.
pub struct Actuators {
    list: Vec<Box<dyn Actuator>>,
    status: Vec<ActuatorStatus>,
    started: usize,
}

impl Actuators {
    pub fn new(list: Vec<Box<dyn Actuator>>) -> Actuators {
        let status = list.iter().map(|a| ActuatorStatus { name: a.name().into(), ..Default::default() }).collect();
        Actuators { list, status, started: 0 }
    }

    /// Starts each in order. On the first failure, shuts down those already started (in
    /// reverse) and returns that failure, naming the actuator.
    pub fn init_all(&mut self, cx: &mut ActCx<'_>) -> Result<(), (String, ActError)> {
        for (i, a) in self.list.iter_mut().enumerate() {
            if let Err(e) = a.init(cx) {
                let name = a.name().to_string();
                self.status[i].last_error = Some(e.to_string());
                self.started = i;
                for (other, why) in self.shutdown_all(cx) {
                    tracing::warn!("stopping the {other} actuator after {name} failed to start: {why} (the journal replay that follows retries)");
                }
                return Err((name, e));
            }
            self.status[i].ok = true;
            self.status[i].state = a.state();
            (cx.events)("actuator_started", serde_json::json!({ "actuator": a.name() }));
        }
        self.started = self.list.len();
        Ok(())
    }

    /// Reconciles every started actuator to `plan`; a failure is logged, counted and reported
    /// in its status, and does not stop the others.
    pub fn reconcile_all(&mut self, plan: &Plan, cx: &mut ActCx<'_>) {
        for (a, st) in self.list.iter_mut().zip(self.status.iter_mut()).take(self.started) {
            let r = a.reconcile(plan, cx);
            st.state = a.state();
            match r {
                Ok(()) => {
                    st.ok = true;
                    st.last_error = None;
                }
                Err(e) => {
                    st.ok = false;
                    st.errors_total += 1;
                    if st.last_error.as_deref() != Some(&e.to_string()) {
                        tracing::warn!(actuator = a.name(), "reconcile failed: {e}");
                    }
                    (cx.events)("actuator_error", serde_json::json!({ "actuator": a.name(), "error": e.to_string() }));
                    st.last_error = Some(e.to_string());
                }
            }
        }
    }

    /// Shuts down the started actuators in reverse order; returns the failures (the caller
    /// replays the journal after this anyway).
    pub fn shutdown_all(&mut self, cx: &mut ActCx<'_>) -> Vec<(String, String)> {
        let mut failed = Vec::new();
        for a in self.list.iter_mut().take(self.started).rev() {
            if let Err(e) = a.shutdown(cx) {
                failed.push((a.name().to_string(), e.to_string()));
            }
        }
        self.started = 0;
        failed
    }

    pub fn status(&self) -> &[ActuatorStatus] {
        &self.status
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::effects::FakeEffects;
    use crate::journal::Journal;
    use std::sync::Mutex;

    /// Records its lifecycle calls into a shared log; fails where told.
    struct Probe {
        name: &'static str,
        log: Arc<Mutex<Vec<String>>>,
        fail_init: bool,
        fail_reconcile: bool,
    }

    impl Actuator for Probe {
        fn name(&self) -> &'static str {
            self.name
        }
        fn init(&mut self, _: &mut ActCx<'_>) -> Result<(), ActError> {
            self.log.lock().unwrap().push(format!("init {}", self.name));
            if self.fail_init {
                Err("no cgroupfs".into())
            } else {
                Ok(())
            }
        }
        fn reconcile(&mut self, plan: &Plan, _: &mut ActCx<'_>) -> Result<(), ActError> {
            self.log.lock().unwrap().push(format!("reconcile {} {}", self.name, plan.for_actuator(self.name).count()));
            if self.fail_reconcile {
                Err("EBUSY".into())
            } else {
                Ok(())
            }
        }
        fn state(&self) -> Arc<dyn ActuatorState> {
            Arc::new(crate::control::JsonState(serde_json::json!({ "held": 1 })))
        }
        fn shutdown(&mut self, _: &mut ActCx<'_>) -> Result<(), ActError> {
            self.log.lock().unwrap().push(format!("shutdown {}", self.name));
            Ok(())
        }
    }

    fn probes(log: &Arc<Mutex<Vec<String>>>, fail_init: &str, fail_reconcile: &str) -> Actuators {
        let mk =
            |name| -> Box<dyn Actuator> { Box::new(Probe { name, log: log.clone(), fail_init: name == fail_init, fail_reconcile: name == fail_reconcile }) };
        Actuators::new(vec![mk("a"), mk("b"), mk("c")])
    }

    fn with_cx(f: impl FnOnce(&mut ActCx<'_>)) -> Vec<String> {
        let dir = tempfile::tempdir().unwrap();
        let journal = Journal::open(dir.path()).unwrap();
        let fx = FakeEffects::default();
        let mut events = Vec::new();
        let mut sink = |e: &str, _: serde_json::Value| events.push(e.to_string());
        f(&mut ActCx { journal: &journal, fx: &fx, events: &mut sink });
        events
    }

    #[test]
    fn the_first_failing_init_stops_the_ones_already_started_in_reverse() {
        let log = Arc::new(Mutex::new(Vec::new()));
        let mut acts = probes(&log, "c", "");
        with_cx(|cx| {
            let (name, e) = acts.init_all(cx).unwrap_err();
            assert_eq!((name.as_str(), e.to_string().as_str()), ("c", "no cgroupfs"));
            // Nothing is left to reconcile or shut down.
            acts.reconcile_all(&Plan::default(), cx);
            assert!(acts.shutdown_all(cx).is_empty());
        });
        assert_eq!(*log.lock().unwrap(), ["init a", "init b", "init c", "shutdown b", "shutdown a"]);
        assert_eq!(acts.status()[2].last_error.as_deref(), Some("no cgroupfs"));
    }

    #[test]
    fn a_failing_reconcile_is_reported_and_does_not_stop_the_others() {
        let log = Arc::new(Mutex::new(Vec::new()));
        let mut acts = probes(&log, "", "b");
        let mut plan = Plan::default();
        plan.push("p", Some("c"), crate::control::Want::HoldClasses { classes: vec![] }, "r");
        let events = with_cx(|cx| {
            acts.init_all(cx).unwrap();
            acts.reconcile_all(&plan, cx);
            acts.reconcile_all(&plan, cx);
            acts.shutdown_all(cx);
        });
        let log = log.lock().unwrap().clone();
        assert_eq!(&log[3..6], ["reconcile a 0", "reconcile b 0", "reconcile c 1"]);
        assert_eq!(&log[9..], ["shutdown c", "shutdown b", "shutdown a"]);
        let b = &acts.status()[1];
        assert_eq!((b.ok, b.errors_total, b.last_error.as_deref()), (false, 2, Some("EBUSY")));
        assert_eq!(acts.status()[2].state.to_json()["held"], 1);
        assert_eq!(events.iter().filter(|e| *e == "actuator_error").count(), 2);
    }
}
