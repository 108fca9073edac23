//! "Can joule's BPF programs run here?" answered before trying, naming what is missing.

use crate::error::BpfError;
use std::path::Path;

const BTF: &str = "/sys/kernel/btf/vmlinux";
const BPFFS: &str = "/sys/fs/bpf";
const BPF_FS_MAGIC: i64 = 0xcafe_4a11;

/// Ok when running as root, the kernel has BTF and bpffs is mounted at /sys/fs/bpf. It does
/// not mount anything: mounting is the administrator's (or systemd's) decision.
pub fn probe() -> Result<(), BpfError> {
    let mut missing = Vec::new();
    if !nix_is_root() {
        missing.push("root (CAP_BPF + CAP_PERFMON + CAP_SYS_ADMIN): run as root".to_string());
    }
    if !Path::new(BTF).exists() {
        missing.push(format!("kernel BTF ({BTF}): needs CONFIG_DEBUG_INFO_BTF=y"));
    }
    if !is_bpffs(Path::new(BPFFS)) {
        missing.push(format!("bpffs at {BPFFS}: `mount -t bpf bpf {BPFFS}`"));
    }
    if missing.is_empty() { Ok(()) } else { Err(BpfError::Unavailable(missing.join("; "))) }
}

fn nix_is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

fn is_bpffs(path: &Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let Ok(c) = std::ffi::CString::new(path.as_os_str().as_bytes()) else { return false };
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: valid C string and a zeroed out-struct.
    unsafe { libc::statfs(c.as_ptr(), &mut st) == 0 && st.f_type as i64 == BPF_FS_MAGIC }
}
