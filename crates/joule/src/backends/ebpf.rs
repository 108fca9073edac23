//! Whether the agent loads its eBPF programs here: on, off for a reason the agent runs with,
//! or refused (the agent stops with the reason before it changes anything). The agent's start
//! takes this answer and `joule doctor`'s thermal-stage row says it, so both name one reason.

use super::Facts;
use crate::sense::BpfOff;
use joule_core::config::Config;

/// The running kernel's BTF, where the agent and the doctor look for it.
pub use joule_bpf::BTF_VMLINUX;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ebpf {
    /// The programs load (the agent pins the stage map for a scheduler).
    On,
    /// Not loaded, for this reason; the agent runs without them and every snapshot says so.
    Off(BpfOff),
    /// Asked for and impossible here: the agent refuses to start, with this message.
    Refused(String),
}

/// The agent's eBPF decision for this config on a machine with these facts, run with
/// `--no-bpf` or not, as root or not.
pub fn ebpf(cfg: &Config, no_bpf_flag: bool, root: bool, f: &Facts) -> Ebpf {
    match BpfOff::reason(no_bpf_flag, cfg, root) {
        Some(BpfOff::NotRoot) => Ebpf::Refused(
            "the agent loads eBPF programs, which needs root: run it as root, or pass --no-bpf (or set telemetry.bpf = false) to run without them".into(),
        ),
        Some(off) => Ebpf::Off(off),
        None if !f.btf => Ebpf::Refused(format!(
            "telemetry.bpf = true and this kernel has no BTF at {BTF_VMLINUX} (it needs CONFIG_DEBUG_INFO_BTF=y): joule's eBPF programs cannot load; set telemetry.bpf = false, or pass --no-bpf, to run without them"
        )),
        None => Ebpf::On,
    }
}
