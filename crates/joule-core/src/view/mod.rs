//! The one document the agent's status socket sends and every client reads (`joule status`,
//! `joule monitor`'s dashboard, `joule nap status`, joule-bench's nap setup): owned types
//! that the agent builds and the clients deserialise, so a renamed field fails to build on
//! both sides at once instead of reading as 0. It lives in joule-core because the bench must
//! read it without depending on the `joule` binary crate, and Snapshot and Plan live here.
//!
//! Parts an older agent did not send are `Option`s: a client says them as missing, never as
//! 0. [`View::version`] is [`VERSION`] for this build's agent; a client tells the operator
//! when the agent's is older or newer ([`View::version_note`]).

pub mod agent;
pub mod client;
pub mod nap;

pub use agent::{AgentStats, Limits, Recovered};
pub use nap::{NapStatus, NapView, WakeInfo};

use crate::control::{ActuatorStatus, Plan};
use crate::Snapshot;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The view's layout version: raised when a part is added, renamed or removed.
pub const VERSION: u32 = 1;

/// The socket's name in the journal directory.
pub const SOCKET: &str = "agent.sock";

/// One connection's document.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct View {
    /// None: an agent from before the view had a version.
    pub version: Option<u32>,
    pub budget: Budget,
    pub snapshot: Snapshot,
    pub plan: Plan,
    pub actuators: Vec<ActuatorView>,
    pub agent: AgentStats,
    /// How long ago the loop published this, ms (None: nothing published yet).
    pub published_ms_ago: Option<u64>,
}

/// What the agent acts against, beside what it published.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Budget {
    /// The stage thresholds, °C, and where they came from (`config`, a trip point, built-in).
    pub thresholds_celsius: Vec<f64>,
    pub thresholds_from: String,
    /// The sensors the stage follows.
    pub sensors: Vec<String>,
    /// `thermal.power_thresholds_watts`, when a power budget is set.
    pub power_thresholds_watts: Vec<f64>,
    /// The loop's period and rest, ms.
    pub period_ms: u64,
    pub rest_period_ms: u64,
    pub pid: u32,
    pub started_unix_ms: u64,
    pub metrics_url: String,
    /// The classes as configured (what each is promised or limited to).
    pub classes: Vec<crate::config::ClassConfig>,
}

/// One actuator's last period. Its `state` is each actuator's own shape (carried as the
/// actuator wrote it, for `--json` readers); clients read the parts they show through the
/// typed views below ([`ActuatorView::state_as`]), never by key.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ActuatorView {
    pub name: String,
    pub ok: bool,
    pub last_error: Option<String>,
    pub errors_total: u64,
    pub state: serde_json::Value,
}

impl From<&ActuatorStatus> for ActuatorView {
    fn from(a: &ActuatorStatus) -> ActuatorView {
        ActuatorView { name: a.name.clone(), ok: a.ok, last_error: a.last_error.clone(), errors_total: a.errors_total, state: a.state.to_json() }
    }
}

impl ActuatorView {
    /// The state read as `T`; None when it has not that shape (another actuator, or one
    /// from an agent that wrote it otherwise).
    pub fn state_as<T: DeserializeOwned>(&self) -> Option<T> {
        T::deserialize(&self.state).ok()
    }
}

/// The thermal caps the class actuator holds (`cgroup_cpu`'s state).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct CapsView {
    pub caps: BTreeMap<String, CapView>,
}

/// One class's cap: the share of the machine it may use (1: uncapped).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct CapView {
    pub ratio: f64,
}

/// What an actuator found changed by someone else, per knob.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct DriftView {
    pub drift_total: BTreeMap<String, u64>,
}

impl View {
    /// The named actuator's entry.
    pub fn actuator(&self, name: &str) -> Option<&ActuatorView> {
        self.actuators.iter().find(|a| a.name == name)
    }

    /// The nap actuator's state, when the agent runs one.
    pub fn nap(&self) -> Option<NapView> {
        self.actuator(nap::ACTUATOR)?.state_as()
    }

    /// What to tell the operator about the view's version against this build's, if anything.
    pub fn version_note(&self) -> Option<String> {
        match self.version {
            Some(VERSION) => None,
            None => Some(format!(
                "the agent's view has no version: missing (agent too old; this joule reads version {VERSION}): restart the agent to see every part"
            )),
            Some(v) if v < VERSION => Some(format!("the agent's view is version {v}, older than this joule's {VERSION}: parts it lacks are shown as missing")),
            Some(v) => Some(format!("the agent's view is version {v}, newer than this joule's {VERSION}: parts this joule does not know are not shown")),
        }
    }
}

/// A view from `partial` JSON laid over [`View::default`]'s (objects merged key by key), for
/// tests' fixtures: they name only what they are about, and still go through the one type.
pub fn over_default(partial: &serde_json::Value) -> Result<View, serde_json::Error> {
    fn merge(base: &mut serde_json::Value, over: &serde_json::Value) {
        match (base, over) {
            (serde_json::Value::Object(b), serde_json::Value::Object(o)) => {
                for (k, v) in o {
                    match b.get_mut(k) {
                        Some(slot) => merge(slot, v),
                        None => {
                            b.insert(k.clone(), v.clone());
                        }
                    }
                }
            }
            (b, o) => *b = o.clone(),
        }
    }
    let mut base = serde_json::to_value(View::default())?;
    merge(&mut base, partial);
    serde_json::from_value(base)
}

#[cfg(test)]
#[path = "view_tests.rs"]
mod tests;
