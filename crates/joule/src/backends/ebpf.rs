//! Whether the agent loads its eBPF programs here: on, off for a reason the agent runs with
//! (the user's choice, or what the machine lacks under `"auto"`), or refused (`true` where
//! the machine cannot: the agent stops with the reason before it changes anything). The agent's start
//! takes this answer and `joule doctor`'s thermal-stage row says it, so both name one reason.

use super::Facts;
use crate::sense::BpfOff;
use joule_core::config::{BpfMode, Config};

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
/// `--no-bpf` or not, as root or not. Under `telemetry.bpf = "auto"` what the machine lacks is
/// a reason to run without eBPF; under `true` it is a refusal to start. A load the kernel
/// refuses is only known at start: the agent turns it into [`BpfOff::LoadFailed`] (auto) or
/// stops with the kernel's words (true).
pub fn ebpf(cfg: &Config, no_bpf_flag: bool, root: bool, f: &Facts) -> Ebpf {
    let required = cfg.telemetry.bpf == BpfMode::Required;
    match BpfOff::reason(no_bpf_flag, cfg, root) {
        Some(BpfOff::NotRoot) if required => Ebpf::Refused(
            "telemetry.bpf = true and the agent is not root: loading eBPF programs needs root; run it as root, or set telemetry.bpf = \"auto\" to run without them".into(),
        ),
        Some(off) => Ebpf::Off(off),
        None if !f.btf && required => Ebpf::Refused(format!(
            "telemetry.bpf = true and this kernel has no BTF at {BTF_VMLINUX} (it needs CONFIG_DEBUG_INFO_BTF=y): joule's eBPF programs cannot load; set telemetry.bpf = \"auto\" (or false) to run without them"
        )),
        None if !f.btf => Ebpf::Off(BpfOff::NoBtf),
        None => Ebpf::On,
    }
}
