//! Models for unit tests: a homogeneous 4-CPU machine with three OPPs (the shape of an x86
//! laptop with cpufreq), beside the shipped XU4 model (`EnergyModel::odroid_xu4`).

use super::{EnergyModel, Opp, PerfDomain};
use crate::Origin;

pub fn homogeneous() -> EnergyModel {
    let opp = |mhz: u64, power_mw: f64| Opp { frequency_khz: mhz * 1000, capacity: 1024.0 * mhz as f64 / 3000.0, power_mw };
    EnergyModel {
        domains: vec![PerfDomain {
            name: "all".into(),
            cpus: vec![0, 1, 2, 3],
            opps: vec![opp(1000, 800.0), opp(2000, 2400.0), opp(3000, 6000.0)],
            static_mw: 50.0,
            power_source: Origin::Model,
        }],
        from: "test".into(),
        notes: vec![],
    }
}
