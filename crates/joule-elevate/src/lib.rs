//! joule's user-space scheduler, built on the priority elevation trick (seed 004, mechanism 5):
//! a scheduler thread at SCHED_FIFO [`Prio::HIGH`] picks which target runs on a core by raising
//! it LOW→MID and lowering the previous one MID→LOW; `sched_setaffinity` binds the targets to
//! the core. No kernel change; works on processes, pthreads and a QEMU guest's vCPU threads.
//!
//! - [`target`]: which threads (pids, all threads of a process, vCPU threads), refusing kernel
//!   threads.
//! - [`engine`]: the switch, the two patterns (shared: sleep on the targets' core; dedicated:
//!   spin on another), round-robin with µs slices and table-driven schedules.
//! - [`guardian`]: a forked process that puts every managed thread back when the scheduler
//!   dies, SIGKILL included (the undo journal covers `joule restore` too).
//! - [`landing`]: when a switch has taken effect on the targets' core (the dedicated
//!   pattern waits for it before starting a slice).
//! - [`timing`]: clocks, sleeps and spins, and the measurements that chose among them.
//! - [`preempt`]: workers and a dispatcher that switches a request out past its threshold
//!   when another waits (seed 3.4);
//!   [`demo`] is a loopback TCP server and load client built on it.
//! - [`probe`]: busy-loop targets that record their own run segments (tests and the bench).

pub mod demo;
pub mod engine;
pub mod guardian;
pub mod landing;
pub mod preempt;
pub mod probe;
pub mod rt_throttle;
pub mod target;
pub mod timing;

pub use engine::{ElevateOpts, Elevator, Pattern, RunReport, Schedule};
pub use target::{Target, TargetSpec};

use std::io;

/// SCHED_FIFO priorities of the trick. Only their order matters; they sit at the bottom of the
/// RT range so every kernel RT thread (migration, watchdogs at 99) still preempts them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Prio;

impl Prio {
    /// Targets the scheduler does not let run.
    pub const LOW: i32 = 1;
    /// The target the scheduler lets run.
    pub const MID: i32 = 2;
    /// The scheduler thread (and the guardian, so it wakes at once when the scheduler dies).
    pub const HIGH: i32 = 3;
}

#[derive(Debug, thiserror::Error)]
pub enum ElevateError {
    #[error("pid {pid} is a kernel thread ({comm}); joule elevate never touches kernel threads")]
    KernelThread { pid: i32, comm: joule_core::Comm },
    #[error("pid {0} does not exist (or exited before it could be taken)")]
    NoSuchTask(i32),
    #[error("process {pid} has no vCPU thread (no thread named `CPU n/KVM` in /proc/{pid}/task/*/comm)")]
    NoVcpus { pid: i32 },
    #[error("CPU {cpu} is not online here (online: {online:?})")]
    CpuOffline { cpu: usize, online: Vec<usize> },
    #[error("{0}")]
    Invalid(String),
    #[error("cannot record the undo of thread {tid} in the journal: {source}")]
    Journal { tid: i32, source: joule_core::journal::JournalError },
    #[error("while {what} thread {tid}: {source}")]
    Sched { what: &'static str, tid: i32, source: io::Error },
    #[error("cannot start the guardian: {0}")]
    Guardian(io::Error),
    #[error("{what}: {source}")]
    Io { what: String, source: io::Error },
}

/// The calling thread's id.
pub fn gettid() -> i32 {
    // SAFETY: gettid has no preconditions.
    unsafe { libc::gettid() }
}

/// The CPUs that are online (`/sys/devices/system/cpu/online`, e.g. `0-1`).
pub fn online_cpus() -> Vec<usize> {
    let text = std::fs::read_to_string("/sys/devices/system/cpu/online").unwrap_or_default();
    parse_cpu_list(text.trim()).unwrap_or_default()
}

/// `0-2,5` → [0, 1, 2, 5].
pub fn parse_cpu_list(s: &str) -> Option<Vec<usize>> {
    let mut out = Vec::new();
    for part in s.split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => out.extend(a.trim().parse::<usize>().ok()?..=b.trim().parse::<usize>().ok()?),
            None => out.push(part.trim().parse().ok()?),
        }
    }
    Some(out)
}
