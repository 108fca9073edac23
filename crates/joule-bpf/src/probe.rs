//! "Can joule's BPF programs run here?" answered before trying, naming what is missing. bpffs is
//! not on the list: a caller that pins mounts it where it needs it (`joule_core::mounts`), and
//! programs loaded privately need none.

use crate::error::BpfError;
use libbpf_rs::skel::SkelBuilder;
use std::path::{Path, PathBuf};
use std::sync::RwLock;

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

/// The BTF file libbpf relocates against instead of the kernel's (`telemetry.btf_path`), for
/// every program this process opens from now on; None: the kernel's own.
static BTF_PATH: RwLock<Option<PathBuf>> = RwLock::new(None);

/// Sets the BTF file for CO-RE relocations (libbpf's `btf_custom_path`). Attaching to a BTF
/// tracepoint (`tp_btf`) or a struct_ops still needs the kernel's own BTF: a file given here
/// cannot stand in for a kernel built without CONFIG_DEBUG_INFO_BTF.
pub fn set_btf_path(path: Option<PathBuf>) {
    *BTF_PATH.write().unwrap_or_else(|e| e.into_inner()) = path;
}

/// The BTF file set by [`set_btf_path`], if any.
fn btf_path() -> Option<PathBuf> {
    BTF_PATH.read().unwrap_or_else(|e| e.into_inner()).clone()
}

/// A skeleton builder that relocates against [`btf_path`] when one is set.
pub(crate) fn with_btf<'obj, B: SkelBuilder<'obj>>(mut b: B) -> libbpf_rs::Result<B> {
    if let Some(p) = btf_path() {
        b.object_builder_mut().btf_custom_path(p)?;
    }
    Ok(b)
}
