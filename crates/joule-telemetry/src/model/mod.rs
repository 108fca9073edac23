//! Models that stand in for sensors this machine lacks. Their values are always labelled
//! `model`: joule never shows an estimate as a measurement.

mod power;
mod thermal;

pub use power::PowerModel;
pub use thermal::RcThermalModel;
