//! The kernel's run-time statistics of loaded BPF programs (BPF_ENABLE_STATS): how long each
//! program ran in total and how often. This is how a benchmark charges the in-kernel cost of
//! joule's programs, which the kernel bills to whatever task was running when they fired.

use crate::error::BpfError;
use std::os::fd::{FromRawFd, OwnedFd};

/// Turns on the kernel's BPF run-time statistics for as long as the returned fd lives (the
/// kernel counts holders; `kernel.bpf_stats_enabled` may keep them on as well). Needs root.
pub fn enable_run_stats() -> Result<OwnedFd, BpfError> {
    // SAFETY: plain syscall wrapper; returns an fd we then own, or a negative errno.
    let fd = unsafe { libbpf_sys::bpf_enable_stats(libbpf_sys::BPF_STATS_RUN_TIME) };
    if fd < 0 {
        return Err(BpfError::Unavailable(format!("BPF_ENABLE_STATS: {}", std::io::Error::from_raw_os_error(-fd))));
    }
    // SAFETY: fd >= 0 is a fresh fd returned to us by the kernel.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// One loaded program's cumulative counters (zero while statistics are off).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProgRunStats {
    pub id: u32,
    pub name: String,
    pub run_time_ns: u64,
    pub run_cnt: u64,
}

/// The counters of the loaded programs whose id is in `ids` (others are skipped; an id whose
/// program was unloaded meanwhile is simply missing). Needs root.
pub fn prog_run_stats(ids: &[u32]) -> Vec<ProgRunStats> {
    let opts = libbpf_rs::query::ProgInfoQueryOptions::default().include_func_info(true);
    libbpf_rs::query::ProgInfoIter::with_query_opts(opts)
        .filter(|p| ids.contains(&p.id))
        .map(|p| ProgRunStats { id: p.id, name: full_name(&p), run_time_ns: p.run_time_ns, run_cnt: p.run_cnt })
        .collect()
}

/// The kernel keeps only 15 bytes of a program's name (`joule_sched_wakeup` and
/// `joule_sched_wakeup_new` both become `joule_sched_wak`); the program's BTF has the function
/// name whole, which is where bpftool finds it too.
fn full_name(p: &libbpf_rs::query::ProgramInfo) -> String {
    let short = p.name.to_string_lossy().into_owned();
    let from_btf = || {
        let btf = libbpf_rs::Btf::from_prog_id(p.id).ok()?;
        let func: libbpf_rs::btf::BtfType<'_> = btf.type_by_id(p.func_info.first()?.type_id.into())?;
        Some(func.name()?.to_string_lossy().into_owned())
    };
    from_btf().filter(|full| full.starts_with(&short)).unwrap_or(short)
}
