//! "Can joule's BPF programs run here?" answered before trying, naming what is missing. bpffs is
//! not on the list: a caller that pins mounts it where it needs it (`joule_core::mounts`), and
//! programs loaded privately need none.

use crate::error::BpfError;
use std::path::Path;

/// The running kernel's BTF, which libbpf relocates every program against.
pub const BTF_VMLINUX: &str = "/sys/kernel/btf/vmlinux";

/// Ok when running as root and the kernel has BTF (every program here is CO-RE and attaches
/// with `tp_btf`, so neither tracefs nor debugfs is needed).
pub fn probe() -> Result<(), BpfError> {
    let mut missing = Vec::new();
    if !joule_core::testing::is_root() {
        missing.push("root (CAP_BPF + CAP_PERFMON + CAP_SYS_ADMIN): run as root, or pass --no-bpf".to_string());
    }
    if !Path::new(BTF_VMLINUX).exists() {
        missing.push(format!("kernel BTF ({BTF_VMLINUX}): needs CONFIG_DEBUG_INFO_BTF=y, or pass --no-bpf"));
    }
    if missing.is_empty() {
        Ok(())
    } else {
        Err(BpfError::Unavailable(missing.join("; ")))
    }
}
