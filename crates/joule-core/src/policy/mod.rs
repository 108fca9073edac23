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

pub use classes::ClassPolicy;
pub use elevate::ElevatePolicy;
pub use nap::NapPolicy;
pub use net::NetPolicy;
pub use placement::PlacementPolicy;
pub use stage_rule::thermal_stage;
pub use thermal::{ThermalActions, ThermalPolicy};
