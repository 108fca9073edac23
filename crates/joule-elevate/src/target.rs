//! Which threads a schedule manages: one pid (its main thread), every thread of a process, or
//! the vCPU threads of a QEMU/KVM process (threads named `CPU n/KVM`). Kernel threads are
//! refused with an error naming the pid.

use crate::ElevateError;
use joule_core::effects::Effects;
use joule_core::procfs::Stat;
use std::path::Path;

/// What the user named.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TargetSpec {
    /// One task (a process's main thread, or a thread id).
    Pid(i32),
    /// Every thread of process `pid` at the time it is taken.
    Threads(i32),
    /// The vCPU threads of QEMU process `pid`, in vCPU order.
    Vcpus(i32),
}

/// One managed thread.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub tid: i32,
    /// What it is, for messages (`1234`, `1234/1240`, `1234 CPU 1/KVM`).
    pub label: String,
}

/// The threads `spec` names, read from `procfs` (normally `/proc`).
pub fn resolve(fx: &dyn Effects, procfs: &Path, spec: &TargetSpec) -> Result<Vec<Target>, ElevateError> {
    match *spec {
        TargetSpec::Pid(pid) => {
            check_user_task(fx, procfs, pid)?;
            Ok(vec![Target { tid: pid, label: pid.to_string() }])
        }
        TargetSpec::Threads(pid) => {
            check_user_task(fx, procfs, pid)?;
            Ok(threads(fx, procfs, pid)?.into_iter().map(|tid| Target { tid, label: format!("{pid}/{tid}") }).collect())
        }
        TargetSpec::Vcpus(pid) => {
            check_user_task(fx, procfs, pid)?;
            let mut v: Vec<(u32, Target)> = threads(fx, procfs, pid)?
                .into_iter()
                .filter_map(|tid| {
                    // A thread's name is its process's to choose, in any bytes: read them all.
                    let comm = fx.read_bytes(&procfs.join(format!("{pid}/task/{tid}/comm"))).ok()?;
                    let comm = std::str::from_utf8(comm.trim_ascii()).ok()?;
                    let n = vcpu_index(comm)?;
                    Some((n, Target { tid, label: format!("{pid} {comm}") }))
                })
                .collect();
            if v.is_empty() {
                return Err(ElevateError::NoVcpus { pid });
            }
            v.sort_by_key(|(n, _)| *n);
            Ok(v.into_iter().map(|(_, t)| t).collect())
        }
    }
}

/// `CPU 3/KVM` → 3 (QEMU names its KVM vCPU threads so).
pub fn vcpu_index(comm: &str) -> Option<u32> {
    comm.strip_prefix("CPU ")?.strip_suffix("/KVM")?.parse().ok()
}

fn threads(fx: &dyn Effects, procfs: &Path, pid: i32) -> Result<Vec<i32>, ElevateError> {
    let mut tids: Vec<i32> =
        fx.list_dir(&procfs.join(format!("{pid}/task"))).map_err(|_| ElevateError::NoSuchTask(pid))?.iter().filter_map(|n| n.parse().ok()).collect();
    tids.sort_unstable();
    Ok(tids)
}

/// Refuses a pid that does not exist or is a kernel thread.
pub fn check_user_task(fx: &dyn Effects, procfs: &Path, pid: i32) -> Result<(), ElevateError> {
    let stat = Stat::read(fx, procfs, pid).ok_or(ElevateError::NoSuchTask(pid))?;
    if stat.is_kernel_thread() {
        return Err(ElevateError::KernelThread { pid, comm: stat.comm });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use joule_core::effects::FakeEffects;

    fn stat(pid: i32, comm: &str, ppid: i32, flags: u64) -> String {
        format!("{pid} ({comm}) S {ppid} 1 1 0 -1 {flags} 0 0 0 0 0 0 0 0 20 0 1 0 100 0 0")
    }

    fn fake() -> FakeEffects {
        FakeEffects::default()
            .with_file("/p/100/stat", &stat(100, "qemu-system-x86", 1, 0x400000))
            .with_dir("/p/100/task")
            .with_dir("/p/100/task/100")
            .with_dir("/p/100/task/101")
            .with_dir("/p/100/task/102")
            .with_dir("/p/100/task/103")
            .with_file("/p/100/task/100/comm", "qemu-system-x86\n")
            .with_file("/p/100/task/101/comm", "CPU 1/KVM\n")
            .with_file("/p/100/task/102/comm", "CPU 0/KVM\n")
            .with_file("/p/100/task/103/comm", "IO mon_iothread\n")
            .with_file("/p/2/stat", &stat(2, "kthreadd", 0, 0x208040))
            .with_file("/p/50/stat", &stat(50, "kworker/0:1", 2, 0))
    }

    #[test]
    fn vcpus_are_the_threads_named_cpu_n_kvm_in_vcpu_order() {
        let fx = fake();
        let v = resolve(&fx, Path::new("/p"), &TargetSpec::Vcpus(100)).unwrap();
        assert_eq!(v.iter().map(|t| t.tid).collect::<Vec<_>>(), vec![102, 101]);
        assert_eq!(v[0].label, "100 CPU 0/KVM");
        let all = resolve(&fx, Path::new("/p"), &TargetSpec::Threads(100)).unwrap();
        assert_eq!(all.len(), 4);
        assert_eq!(vcpu_index("CPU 12/KVM"), Some(12));
        assert_eq!(vcpu_index("CPU 1/TCG"), None);
    }

    #[test]
    fn kernel_threads_and_missing_pids_are_refused_by_pid() {
        let fx = fake();
        for pid in [2, 50] {
            let e = resolve(&fx, Path::new("/p"), &TargetSpec::Pid(pid)).unwrap_err();
            assert!(matches!(e, ElevateError::KernelThread { pid: p, .. } if p == pid), "{e}");
            assert!(e.to_string().contains(&pid.to_string()));
        }
        assert!(matches!(resolve(&fx, Path::new("/p"), &TargetSpec::Pid(77)), Err(ElevateError::NoSuchTask(77))));
        let fx = fx.with_file("/p/200/stat", &stat(200, "sh", 1, 0)).with_dir("/p/200/task").with_dir("/p/200/task/200");
        fx.files.lock().unwrap().insert("/p/200/task/200/comm".into(), "sh\n".into());
        assert!(matches!(resolve(&fx, Path::new("/p"), &TargetSpec::Vcpus(200)), Err(ElevateError::NoVcpus { pid: 200 })));
    }
}
