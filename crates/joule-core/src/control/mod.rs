//! The control loop's parts, as every mechanism plugs into them:
//! sources → [`Snapshot`] → [`Policy`] (pure) → [`Plan`] → [`Actuator`] (journal first) → exporters.
//! A mechanism is one module that implements [`Actuator`] (and a policy, and a source if it
//! senses), added to the agent's lists of components; [`Actuators`] gives them all one lifecycle.

pub mod knob;
mod lifecycle;
mod merge;
pub mod pace;
mod plan;
mod words;

pub use knob::{owner, Conflict, Held, Knob, Request, Rule, Setting};
pub use lifecycle::{ActuatorStatus, Actuators};
pub use merge::{merge, Facts};
pub use plan::{Decision, FreqLimit, Plan, ThermalPath, Want};

use crate::effects::Effects;
use crate::journal::Journal;
use crate::Snapshot;

/// Decides from readings. Pure: a function of the snapshot, the config it was built with and
/// its own state (a hysteresis, a timer); it never touches the system, so it is unit-tested
/// with a hand-made Snapshot.
pub trait Policy: Send {
    fn name(&self) -> &'static str;
    fn decide(&mut self, snap: &Snapshot, plan: &mut Plan);
}

/// Runs every policy in order on one snapshot, then merges their wants per knob (`facts`:
/// the config's side of what the merge needs; the snapshot gives the machine's).
pub fn decide(policies: &mut [Box<dyn Policy>], facts: &Facts, snap: &Snapshot) -> Plan {
    let mut plan = Plan::new(snap.taken_at_ms);
    plan.members = snap.membership.clone();
    for p in policies.iter_mut() {
        p.decide(snap, &mut plan);
    }
    merge(&mut plan, &facts.with_snapshot(snap));
    plan
}

/// What an actuator gets to act with: the undo journal it records into *before* each change,
/// the seam every side effect goes through, and the event log.
pub struct ActCx<'a> {
    pub journal: &'a Journal,
    pub fx: &'a dyn Effects,
    pub events: &'a mut dyn FnMut(&str, serde_json::Value),
}

pub type ActError = Box<dyn std::error::Error + Send + Sync>;

/// What an actuator holds now, typed by the actuator: its JSON (in `/plan.json`'s actuator
/// list) and its own metric families. Exporters never read fields out of the JSON.
pub trait ActuatorState: std::fmt::Debug + Send + Sync {
    fn to_json(&self) -> serde_json::Value;
    /// This actuator's metric families (each actuator module lists their definitions in its
    /// `METRICS`, so `--list-metrics` knows them without a running actuator).
    fn families(&self) -> Vec<crate::metric::Family> {
        Vec::new()
    }
}

/// The state of an actuator that has reported none yet.
#[derive(Debug, Default)]
pub struct NoState;

impl ActuatorState for NoState {
    fn to_json(&self) -> serde_json::Value {
        serde_json::Value::Null
    }
}

/// Any serialisable state without metric families of its own.
#[derive(Debug)]
pub struct JsonState<T>(pub T);

impl<T: serde::Serialize + std::fmt::Debug + Send + Sync> ActuatorState for JsonState<T> {
    fn to_json(&self) -> serde_json::Value {
        serde_json::to_value(&self.0).unwrap_or_default()
    }
}

/// The only code with side effects. Never decides: it makes the machine hold what the Plan's
/// decisions addressed to it ask for.
pub trait Actuator: Send {
    /// Also the `actuator` name decisions are addressed to, and its journal owner.
    fn name(&self) -> &'static str;
    /// Takes hold at start-up (checks, initial state, journal first). The first failing init
    /// stops the agent: the actuators already started are shut down and the journal replayed.
    /// Nothing by default: most actuators take hold at their first reconcile.
    fn init(&mut self, _cx: &mut ActCx<'_>) -> Result<(), ActError> {
        Ok(())
    }
    /// Brings the machine to what `plan` asks of this actuator (its knobs, and the decisions
    /// addressed to it). An error is reported (event, state, metrics) and the next period tries
    /// again.
    fn reconcile(&mut self, plan: &Plan, cx: &mut ActCx<'_>) -> Result<(), ActError>;
    /// What it holds now.
    fn state(&self) -> std::sync::Arc<dyn ActuatorState>;
    /// Lets go: undoes what it holds (its journal records).
    fn shutdown(&mut self, cx: &mut ActCx<'_>) -> Result<(), ActError>;
}
