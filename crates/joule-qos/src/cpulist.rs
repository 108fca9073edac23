//! The kernel's CPU list syntax, kept in joule-core (the energy model reads it too) and
//! re-exported here so the QoS crate's callers keep their path.

pub use joule_core::cpulist::{format, parse};
