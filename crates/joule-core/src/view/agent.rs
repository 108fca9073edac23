//! The agent's own counters as the view carries them (and `/metrics` renders them): one type
//! for the agent that counts and the clients that read.

use serde::{Deserialize, Serialize};

/// Counters about the agent itself, kept next to the snapshot.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct AgentStats {
    pub samples_total: u64,
    pub cpu_seconds_total: f64,
    pub last_loop_seconds: f64,
    /// The longest iteration since the agent started.
    pub max_loop_seconds: f64,
    pub stage_transitions_total: u64,
    /// Conflicts the plans reported (each counted once, when it first appears).
    pub conflicts_total: u64,
    /// Iterations whose wall time exceeded the period.
    pub loop_overruns_total: u64,
    /// The sleep the loop chose after its last iteration, and why (a rest is its own decision, so clients show its reason).
    pub pace: crate::control::pace::Pace,
    /// Rests an event ended before their time (a stage change, a process event, a signal).
    pub rests_ended_total: u64,
    /// When the stage took its present value (unix ms of that snapshot).
    pub stage_since_unix_ms: u64,
    /// What the stage acts against, chosen once at start (None: an agent from before it said).
    pub limits: Option<Limits>,
    /// What the start's replay of the undo journal found a previous run had left (None: an
    /// agent from before it said).
    pub recovered: Option<Recovered>,
    /// When the loop published the reading these stats came with: a scrape serves it as it
    /// is, and says how old it is (freshen.rs).
    #[serde(skip)]
    pub published_at: Option<std::time::Instant>,
}

/// The thermal stage's thresholds and the limit they keep under (`joule_thermal_limit_celsius`).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Limits {
    pub stage_thresholds_celsius: Vec<f64>,
    /// `config`, `trip points`, `firmware` or `built-in`.
    pub thresholds_kind: String,
    pub limit_celsius: Option<f64>,
    pub limit_from: crate::thermal_sensors::LimitFrom,
    pub power_thresholds_watts: Vec<f64>,
}

/// Changes a previous run left in the journal, by what the start's replay made of them.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Recovered {
    pub undone: usize,
    pub already_gone: usize,
    /// They stay in the journal (`joule restore` retries them).
    pub failed: usize,
}
