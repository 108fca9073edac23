//! The one answer to "which way does each of joule's mechanisms act on this machine, and what
//! is refused, and why": the agent picks its backends with it, and `joule doctor`,
//! `joule check-config` and `joule qos` report or refuse with it, so none of them re-derives
//! the agent's choices and none can disagree with what the agent does. The machine is read once
//! ([`Facts`]) from the roots the agent reads ([`Roots::of`]); the choices are pure functions
//! of the config and those facts.

mod choose;
mod ebpf;
pub mod energy;
mod facts;
mod refusals;

#[cfg(test)]
pub(crate) mod fixtures;

pub use choose::{choose, Choice};
pub use ebpf::{ebpf, Ebpf, BTF_VMLINUX};
pub use facts::{Facts, Roots};
pub(crate) use refusals::cgroupfs_classes;
pub use refusals::{nap_refusal, qos_opts, refusals, systemd_host, systemd_refusal, unit_classes_of};
