//! The nap's status as the nap actuator holds it and the view carries it: `joule nap status`
//! and joule-bench read it from the agent's socket, the actuator builds it, so both use these
//! types (its state is a [`NapView`]).

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The nap actuator's name in the view's `actuators`.
pub const ACTUATOR: &str = "nap";

/// A wake, as `joule nap status` and the metrics show it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct WakeInfo {
    pub reason: String,
    pub at_ms: u64,
    /// Time from the packet (eBPF timestamp) or the decision to the service thawed.
    pub leave_us: u64,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct NapStatus {
    pub napping: bool,
    pub since_ms: u64,
    pub residency_seconds: f64,
    pub naps_total: u64,
    pub aborted_total: u64,
    pub wakes_total: BTreeMap<String, u64>,
    pub last_wake: Option<WakeInfo>,
    /// Time the last entry took, arm to frozen.
    pub last_enter_us: u64,
    pub last_abort: Option<String>,
}

/// The actuator's state: the nap's status, its class, whether the fast wake is loaded, and notes.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct NapView {
    #[serde(flatten)]
    pub status: NapStatus,
    /// `[nap] class`, the class it freezes (None: no class, machine nap only).
    pub class: Option<String>,
    pub fast_wake: bool,
    pub notes: Vec<String>,
}
