//! The seed's experiment (Teshigawara et al.): Table 1's eight configurations and its groups —
//! cg0 on core 0, cg1 and cgA on core 1 — as joule classes, shared by tests and the benchmark.

use joule_core::config::ClassConfig;

/// One row of the seed's Table 1 plus what the seed measured (Table 2, "CPU 使用率 T", top %).
#[derive(Debug, Clone, Copy)]
pub struct SeedRow {
    pub no: u32,
    pub period_us: u64,
    /// rt_runtime_us of cg0, cg1, cgA.
    pub runtime_us: [u64; 3],
    /// Seed Table 2: top % of cg0, cg1, cgA.
    pub seed_top_pct: [f64; 3],
}

pub const GROUPS: [&str; 3] = ["cg0", "cg1", "cgA"];
pub const GROUP_CPUS: [&str; 3] = ["0", "1", "1"];

pub const TABLE1: [SeedRow; 8] = [
    SeedRow { no: 1, period_us: 1_000_000, runtime_us: [425_000, 425_000, 100_000], seed_top_pct: [84.0, 82.0, 19.0] },
    SeedRow { no: 2, period_us: 1_000_000, runtime_us: [300_000, 300_000, 350_000], seed_top_pct: [60.0, 43.0, 57.0] },
    SeedRow { no: 3, period_us: 1_000_000, runtime_us: [225_000, 225_000, 500_000], seed_top_pct: [45.0, 19.0, 81.0] },
    SeedRow { no: 4, period_us: 1_000_000, runtime_us: [25_000, 25_000, 900_000], seed_top_pct: [5.0, 1.0, 100.0] },
    SeedRow { no: 5, period_us: 100_000, runtime_us: [2_500, 2_500, 90_000], seed_top_pct: [5.0, 0.0, 100.0] },
    SeedRow { no: 6, period_us: 10_000, runtime_us: [250, 250, 9_000], seed_top_pct: [5.0, 0.0, 100.0] },
    SeedRow { no: 7, period_us: 2_000, runtime_us: [50, 50, 1_800], seed_top_pct: [5.0, 0.0, 100.0] },
    SeedRow { no: 8, period_us: 1_000, runtime_us: [25, 25, 900], seed_top_pct: [5.0, 0.0, 100.0] },
];

/// Classes cg0 (CPU 0), cg1 and cgA (CPU 1) with the given RT runtimes and period.
pub fn classes(period_us: u64, runtime_us: [u64; 3]) -> Vec<ClassConfig> {
    (0..3)
        .map(|i| ClassConfig {
            name: GROUPS[i].into(),
            rt_runtime_us: Some(runtime_us[i]),
            rt_period_us: Some(period_us),
            cpus: Some(GROUP_CPUS[i].into()),
            ..Default::default()
        })
        .collect()
}
