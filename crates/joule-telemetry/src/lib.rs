//! joule-telemetry: sources that read the machine (procfs, sysfs, cgroupfs) and the models that
//! stand in for missing sensors; they fill a Snapshot and never decide.
//!
//! Every source implements [`Source`] and takes its filesystem root as a parameter, so tests run
//! on the fixture trees under `testdata/`. Every reading carries its [`joule_core::Origin`] in
//! its `source` field (cpu, PSI, cgroup CPU, task waits, power and its domains, thermal zones,
//! the model temperature, frequency, sched_ext).
//! [`Sampler`] runs them all, in order, once per control period; the agent appends its eBPF
//! sources and the thermal stage to the same list.

mod cgroup;
mod cpu;
mod freq;
mod fsread;
mod membership;
mod model;
pub mod nap;
mod power;
mod psi;
mod rediscover;
mod sampler;
mod sched_ext;
mod source;
mod task_wait;
pub mod thermal;

pub use cgroup::CgroupSource;
pub use cpu::CpuSource;
pub use freq::FreqSource;
pub use membership::MembershipSource;
pub use model::{PowerModel, RcThermalModel};
pub use power::PowerSource;
pub use psi::PsiSource;
pub use sampler::Sampler;
pub use sched_ext::SchedExtSource;
pub use source::{Source, SourceError};
pub use task_wait::TaskWaitSource;
pub use thermal::ThermalSource;
