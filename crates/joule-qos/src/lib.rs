//! joule-qos: CPU guarantees for task classes with cgroups (RT and CFS bandwidth, weights,
//! cpusets) behind admission control.
//!
//! Flow: `[[class]]` config → [`admission::admit`] (pure arithmetic, the seed's formula) →
//! [`Plan`] → [`QosController::apply`] (cgroup v1 or v2 writes through `Effects`, every change
//! recorded in the undo journal first, rolled back as a whole on failure) → `reconcile` keeps
//! newly matching tasks in place → `status` reports achieved shares → `release` undoes it.
//! In the agent, joule-act's `cgroup_cpu` actuator runs that flow in the control loop, with
//! the class membership the agent reads once per period. Classes that are systemd units go
//! to [`UnitClasses`] instead: systemd's D-Bus API, never its cgroup files (docs/systemd.md).

pub mod admission;
pub mod backend;
pub mod controller;
pub mod cpulist;
pub mod deadline;
pub mod seed;
pub mod units;

pub use admission::{admit, AdmissionEnv, ClassPlan, CoreSum, DeadlineOffer, DlBw, Plan, Refusal, RtBackend, Rule, ShareKind};
pub use backend::{BackendKind, Layout};
pub use controller::{ApplyReport, ClassCap, ClassStatus, QosController, QosOpts, ReconcileReport};
pub use deadline::Reserved;
pub use units::{Drift, UnitClasses};

use std::path::PathBuf;

/// Owner tag of every undo record this crate writes.
pub const OWNER: &str = "qos";

/// Default smallest period admitted (µs): the seed measured CPU lost to scheduling overhead
/// below 100 ms on its board.
pub const DEFAULT_MIN_PERIOD_US: u64 = 100_000;

#[derive(Debug, thiserror::Error)]
pub enum QosError {
    #[error("admission refused the classes:\n{0}")]
    Refused(String),
    #[error("no cgroup cpu controller found under {0} (looked for a v1 `cpu` hierarchy and a v2 root with `cpu` in cgroup.controllers)")]
    NoCpuController(PathBuf),
    #[error("the cgroup filesystem is read-only at {path}: mount it read-write or run where cgroups are delegated to joule")]
    ReadOnly { path: PathBuf },
    #[error("permission denied at {path}: joule needs root (or a delegated cgroup subtree) to {what}")]
    Permission { path: PathBuf, what: String },
    #[error("the kernel refused {what} (writing {value:?} to {path}): {source}{hint}")]
    KernelRefused { what: String, path: PathBuf, value: String, source: std::io::Error, hint: String },
    #[error("cannot {what} at {path}: {source}")]
    Io { what: String, path: PathBuf, source: std::io::Error },
    #[error("no class named {0:?} in the config")]
    UnknownClass(String),
    #[error("another joule agent holds {path} (its class cgroups); two agents sharing one tree would undo each other's changes: stop the other, or give this one another journal and group")]
    AnotherAgent { path: PathBuf },
    #[error(transparent)]
    Journal(#[from] joule_core::journal::JournalError),
}

impl QosError {
    /// Classifies an I/O error at `path` so read-only and permission problems read clearly.
    pub(crate) fn io(what: impl Into<String>, path: &std::path::Path, source: std::io::Error) -> Self {
        let what = what.into();
        match source.raw_os_error() {
            Some(libc::EROFS) => QosError::ReadOnly { path: path.into() },
            Some(libc::EACCES) | Some(libc::EPERM) => QosError::Permission { path: path.into(), what },
            _ => QosError::Io { what, path: path.into(), source },
        }
    }
}
