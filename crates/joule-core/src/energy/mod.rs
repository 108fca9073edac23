//! The energy model the placement policy decides with: per performance domain (CPUs that share
//! one clock), its CPUs, the capacity of each CPU and an OPP table (frequency, capacity, power),
//! in the shape of the kernel's Energy Model (`Documentation/power/energy-model.rst`). Read from
//! the kernel where it has one (`kernel.rs`), else built from a spec in the config or a file
//! (`spec.rs`; the shipped `deploy/energy/odroid-xu4.toml`). `netcost.rs` turns a network app's
//! flow state into the CPU work it needs.
//!
//! Units: capacity on the kernel's scale (1024 = the biggest CPU at its highest OPP), power in
//! mW per CPU busy at that OPP, work in *reference cycles* per second (cycles of a capacity-1024
//! CPU at the model's reference frequency), so one number of work can be compared across core
//! types: a CPU at an OPP of capacity `c` retires `c / 1024 × reference_hz` of them per second.

mod kernel;
mod netcost;
mod spec;

pub use kernel::{read_kernel, KernelRoots};
pub use netcost::{FlowState, NetCost, NetDemand};
pub use spec::{build, coefficient_power_mw, DomainSpec, ModelFile, OppSpec};

use crate::Origin;
use serde::{Deserialize, Serialize};

/// The kernel's capacity scale: the biggest CPU at its highest OPP.
pub const CAPACITY_SCALE: f64 = 1024.0;

/// Reference frequency when no domain knows its frequencies (no cpufreq: VMs, this project's
/// CI host). Only the conversion of cycles to capacity uses it; an assumption, said in the
/// model's notes.
pub const FALLBACK_REFERENCE_KHZ: u64 = 2_000_000;

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum EnergyError {
    #[error("energy model: {0}")]
    Invalid(String),
    #[error("energy model: no performance domain found under {0}")]
    NoDomains(String),
}

/// One operating performance point of a domain.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Opp {
    /// 0 when the machine does not say (no cpufreq).
    pub frequency_khz: u64,
    /// Capacity of one CPU of the domain at this OPP (kernel scale).
    pub capacity: f64,
    /// Power of one CPU of the domain busy 100 % at this OPP, mW.
    pub power_mw: f64,
}

/// CPUs sharing one clock (a cpufreq policy, a cluster).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PerfDomain {
    pub name: String,
    pub cpus: Vec<usize>,
    /// OPPs, ascending by frequency (and capacity).
    pub opps: Vec<Opp>,
    /// Power of the domain whenever any of its CPUs is busy (cluster leakage, L2), mW. The
    /// kernel's EM has no such term: 0 unless the config says otherwise.
    pub static_mw: f64,
    /// Where the powers came from: `kernel` (debugfs EM) or `model` (the config, a file, a
    /// coefficient formula).
    pub power_source: Origin,
}

impl PerfDomain {
    pub fn max_capacity(&self) -> f64 {
        self.opps.last().map_or(0.0, |o| o.capacity)
    }

    /// The lowest OPP whose capacity is at least `need` (the highest when none is).
    pub fn opp_for(&self, need: f64) -> usize {
        self.opps.iter().position(|o| o.capacity >= need - 1e-9).unwrap_or(self.opps.len().saturating_sub(1))
    }

    /// Modelled power, mW, of the domain at OPP `opp` with each CPU busy `busy[i]` (0..=1) of
    /// the time: the EAS estimate Σ busy × P(opp), plus the static term when any CPU is busy.
    pub fn power_mw(&self, opp: usize, busy: &[f64]) -> f64 {
        let p = self.opps[opp].power_mw;
        let dynamic: f64 = busy.iter().map(|b| b.clamp(0.0, 1.0) * p).sum();
        dynamic + if busy.iter().any(|b| *b > 0.0) { self.static_mw } else { 0.0 }
    }
}

/// The whole machine's model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EnergyModel {
    pub domains: Vec<PerfDomain>,
    /// Where the model came from (`kernel: /sys…`, a file path, `config`).
    pub from: String,
    /// Every assumption the model carries, in words.
    pub notes: Vec<String>,
}

impl EnergyModel {
    /// Checks what the policy relies on: domains with CPUs and OPPs ascending in capacity,
    /// finite non-negative powers, no CPU in two domains.
    pub fn validate(&self) -> Result<(), EnergyError> {
        let bad = |m: String| Err(EnergyError::Invalid(m));
        if self.domains.is_empty() {
            return bad("no performance domain".into());
        }
        let mut seen = std::collections::BTreeSet::new();
        for d in &self.domains {
            if d.cpus.is_empty() || d.opps.is_empty() {
                return bad(format!("domain {} needs CPUs and at least one OPP", d.name));
            }
            if let Some(c) = d.cpus.iter().find(|c| !seen.insert(**c)) {
                return bad(format!("CPU {c} is in two domains"));
            }
            if d.opps.windows(2).any(|w| w[1].capacity < w[0].capacity || w[1].frequency_khz < w[0].frequency_khz) {
                return bad(format!("domain {}: OPPs must ascend in frequency and capacity", d.name));
            }
            if d.opps.iter().any(|o| !(o.power_mw.is_finite() && o.power_mw >= 0.0 && o.capacity > 0.0)) || !(d.static_mw.is_finite() && d.static_mw >= 0.0) {
                return bad(format!("domain {}: powers must be finite and ≥ 0, capacities > 0", d.name));
            }
        }
        Ok(())
    }

    /// The frequency a capacity of 1024 stands for: the highest known OPP frequency of the
    /// biggest domain, else [`FALLBACK_REFERENCE_KHZ`].
    pub fn reference_khz(&self) -> u64 {
        let big = self.domains.iter().max_by(|a, b| a.max_capacity().total_cmp(&b.max_capacity()));
        big.and_then(|d| d.opps.last()).map(|o| o.frequency_khz).filter(|f| *f > 0).unwrap_or(FALLBACK_REFERENCE_KHZ)
    }

    /// Capacity units needed to retire `cycles_per_s` reference cycles per second.
    pub fn capacity_for(&self, cycles_per_s: f64) -> f64 {
        cycles_per_s / (self.reference_khz() as f64 * 1000.0) * CAPACITY_SCALE
    }

    /// Whether more than one domain, or more than one OPP, gives the policy a choice.
    pub fn is_homogeneous(&self) -> bool {
        self.domains.len() == 1
    }

    pub fn cpu_count(&self) -> usize {
        self.domains.iter().map(|d| d.cpus.len()).sum()
    }

    /// The shipped Odroid-XU4 model (`deploy/energy/odroid-xu4.toml`, compiled in so the
    /// benchmark and the tests use the very file users get).
    pub fn odroid_xu4() -> EnergyModel {
        let f = ModelFile::parse(ODROID_XU4_TOML).expect("the shipped XU4 model parses");
        spec::build(&f.domains, "deploy/energy/odroid-xu4.toml", f.notes).expect("the shipped XU4 model is valid")
    }
}

/// The text of `deploy/energy/odroid-xu4.toml`.
pub const ODROID_XU4_TOML: &str = include_str!("../../../../deploy/energy/odroid-xu4.toml");

#[cfg(test)]
pub(crate) mod fixtures;

#[cfg(test)]
mod tests {
    use super::fixtures::homogeneous;
    use super::*;

    #[test]
    fn xu4_model_has_the_dt_capacities_and_powers() {
        let m = EnergyModel::odroid_xu4();
        m.validate().unwrap();
        let (a7, a15) = (&m.domains[0], &m.domains[1]);
        assert_eq!(a15.max_capacity(), 1024.0);
        // 539 DMIPS/MHz × 1300 MHz against 1024 × 1800 MHz, on 1024.
        assert!((a7.max_capacity() - 389.3).abs() < 0.5, "{}", a7.max_capacity());
        // P = 310 µW/MHz/V² × 1800 MHz × 1.25² V² = 871.9 mW.
        assert!((a15.opps.last().unwrap().power_mw - 871.9).abs() < 0.1);
        assert_eq!(m.reference_khz(), 1_800_000);
        assert!((m.capacity_for(1.8e9) - 1024.0).abs() < 1e-6);
    }

    #[test]
    fn opp_choice_power_and_validation() {
        let m = homogeneous();
        let d = &m.domains[0];
        assert_eq!(d.opp_for(0.0), 0);
        assert_eq!(d.opp_for(d.opps[1].capacity), 1);
        assert_eq!(d.opp_for(5000.0), d.opps.len() - 1, "more than the top asks for the top");
        let p = d.power_mw(1, &[0.5, 0.0, 0.0, 1.0]);
        assert!((p - 1.5 * d.opps[1].power_mw - d.static_mw).abs() < 1e-9);
        assert_eq!(d.power_mw(1, &[0.0; 4]), 0.0, "an idle domain costs nothing in this model");
        let mut twice = m.clone();
        twice.domains.push(twice.domains[0].clone());
        assert!(matches!(twice.validate(), Err(EnergyError::Invalid(m)) if m.contains("two domains")));
        let mut desc = m.clone();
        desc.domains[0].opps.reverse();
        assert!(desc.validate().is_err());
    }
}
