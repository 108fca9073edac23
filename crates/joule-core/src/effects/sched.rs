//! Sched: a thread's scheduling policy and RT priority, and the CPUs it may run on
//! (sched_setaffinity, which the user-space scheduler of mechanism 5 places threads with).

use super::{FakeEffects, RealEffects};
use serde::{Deserialize, Serialize};
use std::io;

/// A thread's scheduling policy, as `sched_getscheduler`/`sched_getparam` report it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SchedAttr {
    /// SCHED_OTHER = 0, SCHED_FIFO = 1, SCHED_RR = 2, SCHED_BATCH = 3, SCHED_IDLE = 5.
    pub policy: i32,
    /// Real-time priority (0 for non-RT policies).
    pub priority: i32,
}

impl SchedAttr {
    pub const OTHER: SchedAttr = SchedAttr { policy: libc::SCHED_OTHER, priority: 0 };
}

pub trait Sched {
    fn get_sched(&self, tid: i32) -> io::Result<SchedAttr>;
    fn set_sched(&self, tid: i32, attr: SchedAttr) -> io::Result<()>;
    /// The CPUs thread `tid` may run on, ascending.
    fn get_affinity(&self, tid: i32) -> io::Result<Vec<usize>>;
    /// Lets thread `tid` run only on `cpus` (EINVAL when none of them is online).
    fn set_affinity(&self, tid: i32, cpus: &[usize]) -> io::Result<()>;
}

impl Sched for RealEffects {
    fn get_sched(&self, tid: i32) -> io::Result<SchedAttr> {
        // SAFETY: plain syscalls on a caller-chosen tid; errors come back through errno.
        let policy = unsafe { libc::sched_getscheduler(tid) };
        if policy < 0 {
            return Err(io::Error::last_os_error());
        }
        let mut param = libc::sched_param { sched_priority: 0 };
        // SAFETY: as above; the kernel writes into `param`, which we own.
        if unsafe { libc::sched_getparam(tid, &mut param) } < 0 {
            return Err(io::Error::last_os_error());
        }
        // Mask SCHED_RESET_ON_FORK so the policy compares equal to what we set.
        Ok(SchedAttr { policy: policy & !libc::SCHED_RESET_ON_FORK, priority: param.sched_priority })
    }
    fn set_sched(&self, tid: i32, attr: SchedAttr) -> io::Result<()> {
        let param = libc::sched_param { sched_priority: attr.priority };
        // SAFETY: as above.
        if unsafe { libc::sched_setscheduler(tid, attr.policy, &param) } < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
    fn get_affinity(&self, tid: i32) -> io::Result<Vec<usize>> {
        let set = nix::sched::sched_getaffinity(nix::unistd::Pid::from_raw(tid))?;
        Ok((0..nix::sched::CpuSet::count()).filter(|&c| set.is_set(c).unwrap_or(false)).collect())
    }
    fn set_affinity(&self, tid: i32, cpus: &[usize]) -> io::Result<()> {
        let mut set = nix::sched::CpuSet::new();
        for &c in cpus {
            set.set(c)?; // EINVAL past the 1024 CPUs a cpu_set_t holds
        }
        nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(tid), &set)?;
        Ok(())
    }
}

fn no_thread() -> io::Error {
    io::Error::from_raw_os_error(libc::ESRCH)
}

/// `0,2,3` (the log's form of a CPU list).
fn cpu_list(cpus: &[usize]) -> String {
    cpus.iter().map(usize::to_string).collect::<Vec<_>>().join(",")
}

impl Sched for FakeEffects {
    fn get_sched(&self, tid: i32) -> io::Result<SchedAttr> {
        self.sched.lock().unwrap().get(&tid).copied().ok_or_else(no_thread)
    }
    fn set_sched(&self, tid: i32, attr: SchedAttr) -> io::Result<()> {
        self.act(format!("sched {tid} {} {}", attr.policy, attr.priority), || {
            *self.sched.lock().unwrap().get_mut(&tid).ok_or_else(no_thread)? = attr;
            Ok(())
        })
    }
    fn get_affinity(&self, tid: i32) -> io::Result<Vec<usize>> {
        self.affinity.lock().unwrap().get(&tid).cloned().ok_or_else(no_thread)
    }
    fn set_affinity(&self, tid: i32, cpus: &[usize]) -> io::Result<()> {
        self.act(format!("affinity {tid} {}", cpu_list(cpus)), || {
            if cpus.is_empty() {
                return Err(io::Error::from_raw_os_error(libc::EINVAL));
            }
            let mut sorted = cpus.to_vec();
            sorted.sort_unstable();
            sorted.dedup();
            *self.affinity.lock().unwrap().get_mut(&tid).ok_or_else(no_thread)? = sorted;
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fake_affinity_is_per_thread_sorted_and_refuses_unknown_threads_and_empty_sets() {
        let fx = FakeEffects::default();
        fx.affinity.lock().unwrap().insert(7, vec![0, 1, 2, 3]);
        fx.set_affinity(7, &[3, 1, 3]).unwrap();
        assert_eq!(fx.get_affinity(7).unwrap(), vec![1, 3]);
        assert_eq!(fx.set_affinity(8, &[0]).unwrap_err().raw_os_error(), Some(libc::ESRCH));
        assert_eq!(fx.set_affinity(7, &[]).unwrap_err().raw_os_error(), Some(libc::EINVAL));
        assert_eq!(fx.get_affinity(8).unwrap_err().raw_os_error(), Some(libc::ESRCH));
        assert_eq!(fx.calls(), vec!["affinity 7 3,1,3"]);
    }

    #[test]
    fn fake_sched_changes_only_known_threads() {
        let fx = FakeEffects::default();
        fx.sched.lock().unwrap().insert(7, SchedAttr::OTHER);
        let fifo = SchedAttr { policy: libc::SCHED_FIFO, priority: 10 };
        fx.set_sched(7, fifo).unwrap();
        assert_eq!(fx.get_sched(7).unwrap(), fifo);
        assert_eq!(fx.set_sched(9, fifo).unwrap_err().raw_os_error(), Some(libc::ESRCH));
        assert_eq!(fx.calls(), vec!["sched 7 1 10"]);
    }

    #[test]
    fn real_affinity_of_this_thread_reads_back_what_was_set() {
        // Setting this thread's affinity needs no privilege.
        // SAFETY: gettid has no preconditions.
        let tid = unsafe { libc::gettid() };
        let fx = RealEffects;
        let old = fx.get_affinity(tid).unwrap();
        assert!(!old.is_empty());
        fx.set_affinity(tid, &old[..1]).unwrap();
        assert_eq!(fx.get_affinity(tid).unwrap(), old[..1]);
        fx.set_affinity(tid, &old).unwrap();
        assert_eq!(fx.get_affinity(tid).unwrap(), old);
    }
}
