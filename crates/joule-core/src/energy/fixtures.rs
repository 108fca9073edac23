//! Models for unit tests: a homogeneous 4-CPU machine with three OPPs (the shape of an x86
//! laptop with cpufreq), a one-little, two-big machine priced by hand, and the RK3588 as its
//! kernel describes it (`testdata/boards/rk3588`), beside the shipped XU4 model
//! (`EnergyModel::odroid_xu4`).

use super::{read_kernel, EnergyModel, KernelRoots, Opp, PerfDomain};
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

/// A little/big machine small enough to price by hand: one little CPU whose top OPP is
/// expensive, two big CPUs. Powers in mW per busy CPU.
pub fn little_big() -> EnergyModel {
    let opp = |mhz: u64, capacity: f64, power_mw: f64| Opp { frequency_khz: mhz * 1000, capacity, power_mw };
    EnergyModel {
        domains: vec![
            PerfDomain {
                name: "little".into(),
                cpus: vec![0],
                opps: vec![opp(500, 200.0, 50.0), opp(1000, 400.0, 600.0)],
                static_mw: 0.0,
                power_source: Origin::Model,
            },
            PerfDomain {
                name: "big".into(),
                cpus: vec![1, 2],
                opps: vec![opp(600, 300.0, 150.0), opp(2000, 1024.0, 1500.0)],
                static_mw: 0.0,
                power_source: Origin::Model,
            },
        ],
        from: "test".into(),
        notes: vec![],
    }
}

/// `testdata/boards/<board>/sys`: a board's sysfs (and debugfs) as its kernel lays it out.
pub fn board_root(board: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/boards").join(board).join("sys")
}

/// The RK3588 read by the kernel model reader from its fixture: A55 ×4 (capacity 397) and two
/// A76 pairs, powers from the kernel's Energy Model.
pub fn rk3588() -> EnergyModel {
    read_kernel(&crate::effects::RealEffects, &KernelRoots::under(&board_root("rk3588")), 1.0).expect("the RK3588 fixture reads")
}
