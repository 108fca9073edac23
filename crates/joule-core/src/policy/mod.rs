//! Pure policies: functions of a snapshot, the config and their own state, no I/O. Each turns
//! readings into decisions of the [`Plan`](crate::control::Plan); the agent lists them in
//! `policies()`.

mod classes;
mod elevate;
mod nap;
mod net;
pub mod placement;
mod stage_rule;
mod thermal;

pub use classes::{ClassPolicy, QOS_ACTUATOR};
pub use elevate::{ElevatePolicy, ELEVATE_ACTUATOR};
pub use nap::{NapPolicy, NAP_ACTUATOR};
pub use net::{NetPolicy, NETLIMIT_ACTUATOR};
pub use placement::{PlacementPolicy, PLACEMENT_ACTUATOR};
pub use stage_rule::thermal_stage;
pub use thermal::{ThermalActions, ThermalPolicy, CPUFREQ_ACTUATOR, SCX_ACTUATOR};
