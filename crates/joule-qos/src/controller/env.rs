//! What admission needs to know about the machine (CPUs, the global and sibling RT budgets),
//! and the hint an error gets when the kernel refuses a value.

use super::QosOpts;
use crate::admission::{AdmissionEnv, DeadlineOffer};
use crate::backend::{BackendKind, Hier, Layout};
use joule_core::effects::Effects;
use joule_core::fsread::read_trimmed;
use std::io;
use std::path::Path;

/// Reads what admission needs from the cgroup and proc trees.
pub fn machine_env(layout: &Layout, opts: &QosOpts, fx: &dyn Effects) -> AdmissionEnv {
    let cpus_file = match layout.kind {
        BackendKind::V1 => layout.mount(Hier::Cpuset).map(|m| m.join("cpuset.effective_cpus")),
        BackendKind::V2 => layout.mount(Hier::Unified).map(|m| m.join("cpuset.cpus.effective")),
    };
    let cpus = cpus_file
        .and_then(|f| read_trimmed(fx, &f).or_else(|_| read_trimmed(fx, &f.with_file_name("cpuset.cpus"))).ok())
        .and_then(|s| crate::cpulist::parse(&s))
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| {
            let n = read_trimmed(fx, &opts.procfs_root.join("stat"))
                .ok()
                .map(|s| s.lines().filter(|l| l.starts_with("cpu") && l.as_bytes().get(3).is_some_and(u8::is_ascii_digit)).count())
                .unwrap_or(1);
            (0..n.max(1)).collect()
        });
    let (rt_rt, rt_p) = global_rt(opts, fx);
    // RT bandwidth other groups at joule's level already hold (v1 checks siblings' sum).
    let mut others = 0.0;
    if let (BackendKind::V1, Some(cpu)) = (layout.kind, layout.mount(Hier::Cpu)) {
        for name in fx.list_dir(cpu).unwrap_or_default().into_iter().filter(|n| *n != opts.group_name) {
            let dir = cpu.join(name);
            // A sibling cgroup is a directory with its own RT knob (files at the root have none).
            if let Ok(r) = read_trimmed(fx, &dir.join("cpu.rt_runtime_us")) {
                let r: f64 = r.parse().unwrap_or(0.0);
                let p: f64 = read_trimmed(fx, &dir.join("cpu.rt_period_us")).ok().and_then(|s| s.parse().ok()).unwrap_or(1e6);
                if r > 0.0 {
                    others += r / p;
                }
            }
        }
    }
    AdmissionEnv {
        cpus,
        global_rt_runtime_us: rt_rt,
        global_rt_period_us: rt_p,
        others_rt_ratio: others,
        min_period_us: opts.min_period_us,
        rt_group_sched: layout.rt_group_sched,
        rt_borrowing: opts.rt_borrowing,
        rt_fallback_to_cfs: opts.rt_fallback_to_cfs,
        rt_backend: opts.rt_backend,
        deadline: deadline_offer(opts, fx),
    }
}

/// `kernel.sched_rt_runtime_us` and `kernel.sched_rt_period_us` (the kernel's defaults when
/// they cannot be read).
fn global_rt(opts: &QosOpts, fx: &dyn Effects) -> (i64, u64) {
    let k = opts.procfs_root.join("sys/kernel");
    let rt_rt = read_trimmed(fx, &k.join("sched_rt_runtime_us")).ok().and_then(|s| s.parse().ok()).unwrap_or(950_000);
    let rt_p = read_trimmed(fx, &k.join("sched_rt_period_us")).ok().and_then(|s| s.parse().ok()).unwrap_or(1_000_000);
    (rt_rt, rt_p)
}

/// What admission knows of a machine whose classes are systemd units (no hierarchy is read):
/// its `ncpus` CPUs, the kernel's RT limit and what SCHED_DEADLINE offers, which RT classes
/// get there (units have no RT bandwidth).
pub fn units_env(opts: &QosOpts, ncpus: usize, fx: &dyn Effects) -> AdmissionEnv {
    let (rt_rt, rt_p) = global_rt(opts, fx);
    AdmissionEnv {
        global_rt_runtime_us: rt_rt,
        global_rt_period_us: rt_p,
        rt_group_sched: false,
        rt_backend: Some(crate::RtBackend::Deadline),
        deadline: deadline_offer(opts, fx),
        ..AdmissionEnv::new(ncpus)
    }
}

/// What SCHED_DEADLINE offers here: the kernel's period bounds (`kernel.sched_deadline_period_
/// {min,max}_us`) and, from Linux 6.12, the fair server's bandwidth — read from debugfs when it
/// can be (`kernel`), else the kernel's default 50 ms per second (`model`).
fn deadline_offer(opts: &QosOpts, fx: &dyn Effects) -> DeadlineOffer {
    let k = opts.procfs_root.join("sys/kernel");
    let num = |f: &Path| read_trimmed(fx, f).ok().and_then(|s| s.parse::<u64>().ok());
    let release = read_trimmed(fx, &k.join("osrelease")).unwrap_or_default();
    let version = joule_core::procfs::kernel_version(&release);
    let mut offer = DeadlineOffer::default_612();
    offer.period_min_us = num(&k.join("sched_deadline_period_min_us")).unwrap_or(offer.period_min_us);
    offer.period_max_us = num(&k.join("sched_deadline_period_max_us")).unwrap_or(offer.period_max_us);
    match version {
        Some(v) if v < (3, 14) => offer.unsupported = Some(format!("kernel {release} predates SCHED_DEADLINE (3.14)")),
        Some(v) if v < (6, 12) => (offer.fair_server_runtime_us, offer.fair_server_source) = (0, "kernel".into()),
        _ => {
            let sys = opts.cgroup_root.parent().and_then(Path::parent).unwrap_or(Path::new("/sys"));
            let fs = sys.join("kernel/debug/sched/fair_server/cpu0");
            if let (Some(r), Some(p)) = (num(&fs.join("runtime")), num(&fs.join("period")).filter(|p| *p > 0)) {
                (offer.fair_server_runtime_us, offer.fair_server_period_us, offer.fair_server_source) = (r / 1000, p / 1000, "kernel".into());
            }
        }
    }
    offer
}

/// Why the kernel likely refused writing to `path` (appended to the error).
pub(super) fn hint_for(path: &Path, e: &io::Error) -> String {
    let f = path.file_name().and_then(|s| s.to_str()).unwrap_or("");
    match (f, e.raw_os_error()) {
        ("cpu.rt_runtime_us", Some(libc::EINVAL)) => " — the parent's cpu.rt_runtime_us, or kernel.sched_rt_runtime_us, leaves too little RT budget".into(),
        ("cpu.rt_runtime_us", Some(libc::EBUSY)) => " — the group still has RT tasks and cannot get 0 runtime".into(),
        ("cgroup.procs" | "tasks", Some(libc::EINVAL)) => {
            " — a real-time task cannot join a v1 group with cpu.rt_runtime_us = 0; give its class rt_runtime_us".into()
        }
        ("cpuset.cpus", _) => " — the CPUs must be a subset of the parent cpuset's".into(),
        ("cgroup.subtree_control", _) => " — the controller is bound to a cgroup v1 hierarchy, or the cgroup has tasks of its own".into(),
        _ => String::new(),
    }
}
