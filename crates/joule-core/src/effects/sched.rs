//! Sched: a thread's scheduling policy and RT priority, its EEVDF slice (the latency hint a
//! fair thread carries since Linux 6.12), a SCHED_DEADLINE reservation (an RT class's
//! guarantee where the kernel has no RT group scheduling), and the CPUs it may run on
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

/// `SCHED_DEADLINE` (uapi/linux/sched.h; the libc crate does not name it).
pub const SCHED_DEADLINE: i32 = 6;

impl SchedAttr {
    pub const OTHER: SchedAttr = SchedAttr { policy: libc::SCHED_OTHER, priority: 0 };

    /// How far up the kernel's scheduling classes the policy is: SCHED_DEADLINE above every
    /// real-time priority, SCHED_FIFO/SCHED_RR by priority, every other policy 0. An undo that
    /// would move a thread up this order is refused.
    pub fn rank(&self) -> i32 {
        match self.policy {
            SCHED_DEADLINE => 1000,
            libc::SCHED_FIFO | libc::SCHED_RR => self.priority.max(1),
            _ => 0,
        }
    }
}

/// A SCHED_DEADLINE reservation: `runtime_ns` of CPU time every `period_ns`, due within
/// `deadline_ns` of each period's start (sched_setattr(2)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Deadline {
    pub runtime_ns: u64,
    pub deadline_ns: u64,
    pub period_ns: u64,
}

pub trait Sched {
    fn get_sched(&self, tid: i32) -> io::Result<SchedAttr>;
    fn set_sched(&self, tid: i32, attr: SchedAttr) -> io::Result<()>;
    /// Thread `tid`'s EEVDF slice, ns: what `sched_getattr` reports as `sched_runtime` for a
    /// fair policy (SCHED_OTHER, SCHED_BATCH). None when the thread runs under another policy.
    /// A kernel before 6.12 has no slice to report and says 0.
    fn get_slice_ns(&self, tid: i32) -> io::Result<Option<u64>>;
    /// Gives fair thread `tid` a custom slice of `ns` (the kernel clamps it to 0.1–100 ms), or
    /// back the kernel's default with 0, keeping its policy, nice value and reset-on-fork.
    /// EINVAL when the thread no longer runs under a fair policy: it is never demoted.
    fn set_slice_ns(&self, tid: i32, ns: u64) -> io::Result<()>;
    /// The CPUs thread `tid` may run on, ascending.
    fn get_affinity(&self, tid: i32) -> io::Result<Vec<usize>>;
    /// Lets thread `tid` run only on `cpus` (EINVAL when none of them is online).
    fn set_affinity(&self, tid: i32, cpus: &[usize]) -> io::Result<()>;
    /// Puts thread `tid` under SCHED_DEADLINE with reservation `dl`, with
    /// `SCHED_FLAG_RESET_ON_FORK` (without it a deadline task's fork() fails with EAGAIN; with
    /// it the child starts under SCHED_OTHER). The kernel refuses with EBUSY a reservation its
    /// deadline bandwidth cannot admit, and with EPERM one for a thread whose affinity does not
    /// span its root domain.
    fn set_deadline(&self, tid: i32, dl: Deadline) -> io::Result<()>;
}

/// `struct sched_attr` of `sched_setattr(2)`, up to the utilisation clamps.
#[repr(C)]
#[derive(Default)]
struct RawSchedAttr {
    size: u32,
    policy: u32,
    flags: u64,
    nice: i32,
    priority: u32,
    runtime_ns: u64,
    deadline_ns: u64,
    period_ns: u64,
    util_min: u32,
    util_max: u32,
}

/// `SCHED_FLAG_KEEP_POLICY`: change the parameters under the policy the thread has now.
const SCHED_FLAG_KEEP_POLICY: u64 = 0x08;
/// `SCHED_FLAG_RESET_ON_FORK`: children start under SCHED_OTHER.
const SCHED_FLAG_RESET_ON_FORK: u64 = 0x01;

fn sched_setattr(tid: i32, a: &RawSchedAttr) -> io::Result<()> {
    // SAFETY: the kernel reads `a.size` bytes of `a`, which the caller owns.
    if unsafe { libc::syscall(libc::SYS_sched_setattr, tid, a as *const RawSchedAttr, 0) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

fn is_fair(policy: i32) -> bool {
    policy == libc::SCHED_OTHER || policy == libc::SCHED_BATCH
}

fn sched_getattr(tid: i32) -> io::Result<RawSchedAttr> {
    let mut a = RawSchedAttr::default();
    let size = std::mem::size_of::<RawSchedAttr>() as libc::c_uint;
    // SAFETY: the kernel writes at most `size` bytes into `a`, which we own.
    if unsafe { libc::syscall(libc::SYS_sched_getattr, tid, &mut a as *mut RawSchedAttr, size, 0) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(a)
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
    fn get_slice_ns(&self, tid: i32) -> io::Result<Option<u64>> {
        let a = sched_getattr(tid)?;
        Ok(is_fair(a.policy as i32).then_some(a.runtime_ns))
    }
    fn set_slice_ns(&self, tid: i32, ns: u64) -> io::Result<()> {
        let now = sched_getattr(tid)?;
        if !is_fair(now.policy as i32) {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        }
        // KEEP_POLICY: if the thread turned real-time since the read, the kernel refuses these
        // fair parameters (priority 0) instead of demoting it.
        let a = RawSchedAttr {
            size: std::mem::size_of::<RawSchedAttr>() as u32,
            policy: now.policy,
            flags: SCHED_FLAG_KEEP_POLICY,
            nice: now.nice,
            runtime_ns: ns,
            ..RawSchedAttr::default()
        };
        sched_setattr(tid, &a)
    }
    fn set_deadline(&self, tid: i32, dl: Deadline) -> io::Result<()> {
        let a = RawSchedAttr {
            size: std::mem::size_of::<RawSchedAttr>() as u32,
            policy: SCHED_DEADLINE as u32,
            flags: SCHED_FLAG_RESET_ON_FORK,
            runtime_ns: dl.runtime_ns,
            deadline_ns: dl.deadline_ns,
            period_ns: dl.period_ns,
            ..RawSchedAttr::default()
        };
        sched_setattr(tid, &a)
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

/// The slice the fake reports for a thread without a custom one (this host's kernel: 1.4 ms).
pub const FAKE_DEFAULT_SLICE_NS: u64 = 1_400_000;

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
    fn get_slice_ns(&self, tid: i32) -> io::Result<Option<u64>> {
        let slice = *self.slice.lock().unwrap().get(&tid).ok_or_else(no_thread)?;
        let fair = self.sched.lock().unwrap().get(&tid).is_none_or(|a| is_fair(a.policy));
        Ok(fair.then_some(slice))
    }
    fn set_slice_ns(&self, tid: i32, ns: u64) -> io::Result<()> {
        self.act(format!("slice {tid} {ns}"), || {
            if self.get_slice_ns(tid)?.is_none() {
                return Err(io::Error::from_raw_os_error(libc::EINVAL));
            }
            let ns = if ns == 0 { FAKE_DEFAULT_SLICE_NS } else { ns.clamp(100_000, 100_000_000) };
            self.slice.lock().unwrap().insert(tid, ns);
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
    fn set_deadline(&self, tid: i32, dl: Deadline) -> io::Result<()> {
        self.act(format!("deadline {tid} {} {} {}", dl.runtime_ns, dl.deadline_ns, dl.period_ns), || {
            if dl.runtime_ns == 0 || dl.runtime_ns > dl.deadline_ns || dl.deadline_ns > dl.period_ns {
                return Err(io::Error::from_raw_os_error(libc::EINVAL));
            }
            *self.sched.lock().unwrap().get_mut(&tid).ok_or_else(no_thread)? = SchedAttr { policy: SCHED_DEADLINE, priority: 0 };
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
    fn fake_slice_is_for_fair_threads_only_and_zero_means_the_default() {
        let fx = FakeEffects::default();
        fx.slice.lock().unwrap().extend([(7, FAKE_DEFAULT_SLICE_NS), (8, FAKE_DEFAULT_SLICE_NS)]);
        fx.sched.lock().unwrap().insert(8, SchedAttr { policy: libc::SCHED_FIFO, priority: 5 });
        fx.set_slice_ns(7, 300_000).unwrap();
        assert_eq!(fx.get_slice_ns(7).unwrap(), Some(300_000));
        fx.set_slice_ns(7, 0).unwrap();
        assert_eq!(fx.get_slice_ns(7).unwrap(), Some(FAKE_DEFAULT_SLICE_NS));
        assert_eq!(fx.get_slice_ns(8).unwrap(), None);
        assert_eq!(fx.set_slice_ns(8, 300_000).unwrap_err().raw_os_error(), Some(libc::EINVAL));
        assert_eq!(fx.get_slice_ns(9).unwrap_err().raw_os_error(), Some(libc::ESRCH));
        assert_eq!(fx.calls(), vec!["slice 7 300000", "slice 7 0"]);
    }

    #[test]
    fn real_slice_of_this_thread_reads_back_what_was_set_and_the_default_comes_back() {
        // A fair thread may give itself a custom slice without privilege (Linux 6.12+).
        // SAFETY: gettid has no preconditions.
        let tid = unsafe { libc::gettid() };
        let fx = RealEffects;
        let default = fx.get_slice_ns(tid).unwrap().expect("a test thread runs under SCHED_OTHER");
        if default == 0 {
            eprintln!(
                "SKIP: this kernel ({}) has no custom slices (Linux 6.12+)",
                std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default().trim()
            );
            return;
        }
        fx.set_slice_ns(tid, 300_000).unwrap();
        assert_eq!(fx.get_slice_ns(tid).unwrap(), Some(300_000));
        fx.set_slice_ns(tid, 0).unwrap();
        assert_eq!(fx.get_slice_ns(tid).unwrap(), Some(default));
    }

    #[test]
    fn fake_deadline_checks_its_parameters_and_ranks_above_every_rt_priority() {
        let fx = FakeEffects::default();
        fx.sched.lock().unwrap().insert(7, SchedAttr::OTHER);
        let dl = Deadline { runtime_ns: 3_000_000, deadline_ns: 10_000_000, period_ns: 10_000_000 };
        fx.set_deadline(7, dl).unwrap();
        assert_eq!(fx.get_sched(7).unwrap(), SchedAttr { policy: SCHED_DEADLINE, priority: 0 });
        let over = Deadline { runtime_ns: 11_000_000, ..dl };
        assert_eq!(fx.set_deadline(7, over).unwrap_err().raw_os_error(), Some(libc::EINVAL));
        assert_eq!(fx.set_deadline(8, dl).unwrap_err().raw_os_error(), Some(libc::ESRCH));
        let fifo99 = SchedAttr { policy: libc::SCHED_FIFO, priority: 99 };
        assert!(SchedAttr { policy: SCHED_DEADLINE, priority: 0 }.rank() > fifo99.rank());
        assert!(fifo99.rank() > SchedAttr::OTHER.rank());
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
