//! joule-testkit: the harnesses every crate's tests share, in one dev-only place, so a test
//! tier has one harness instead of a copy (or a `#[path]` include) per crate. Only ever a
//! `[dev-dependencies]` entry: nothing here reaches the agent or the libraries.
//!
//! - [`vm`]: tier 3, commands as root in a VM booted on the cached sched_ext kernel;
//! - [`TempBpffs`]: tier 2, a bpffs of a test's own to pin on;
//! - [`sigkill_agent_and_guardian`]: tier 2, an agent killed with nothing left to replay its journal;
//! - [`containerd`]: tier 2, a real containerd with its CRI plugin and pods made as a kubelet makes them.
//!
//! `require` and `is_root` stay in `joule_core::testing`: production code asks `is_root` too.

mod bpffs;
#[cfg(feature = "containerd")]
pub mod containerd;
mod kill;
pub mod vm;

pub use bpffs::TempBpffs;
pub use kill::{guardians_of, kill_agent, sigkill_agent_and_guardian};
