//! The files of /proc that more than one crate reads, parsed in one place: per task `stat`
//! (whose comm may hold spaces and parentheses), `status` (uids, counters) and `cgroup` (the
//! task's cgroup in each hierarchy); the kernel's release (what a feature's first version is
//! compared with). The undo journal pins a task by its start time, qos
//! matching reads all three, the overhead benchmark counts context switches. Reads go through
//! `Effects` under a procfs root given as a parameter (`/proc`, or `/proc/PID/task` for a
//! process's threads), so tests run on fixture trees.

use crate::cgroupfs::Controller;
use crate::effects::Effects;
use std::path::{Path, PathBuf};

/// (major, minor) of a kernel release string (`6.18.0-1-amd64` → (6, 18)), as
/// `<procfs>/sys/kernel/osrelease` gives it.
pub fn kernel_version(release: &str) -> Option<(u32, u32)> {
    let mut v = release.split(|c: char| !c.is_ascii_digit()).map(|n| n.parse::<u32>().ok());
    Some((v.next().flatten()?, v.next().flatten()?))
}

/// `task->flags` bit of kernel threads.
pub const PF_KTHREAD: u64 = 0x0020_0000;

/// `<procfs>/<pid>`.
pub fn task_dir(procfs: &Path, pid: i32) -> PathBuf {
    procfs.join(pid.to_string())
}

fn read(fx: &dyn Effects, procfs: &Path, pid: i32, file: &str) -> Option<String> {
    fx.read(&task_dir(procfs, pid).join(file)).ok()
}

/// The fields of /proc/PID/stat joule uses (`man 5 proc` numbers them from 1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stat {
    /// Field 1.
    pub pid: i32,
    /// Field 2 without its parentheses: the same 15 bytes as /proc/PID/comm.
    pub comm: String,
    /// Field 3: `R`, `S`, `D`, `Z`, ...
    pub state: char,
    /// Field 4.
    pub ppid: i32,
    /// Field 9, `PF_*` bits; 0 when the line ends before it.
    pub flags: u64,
    /// Field 22: when the task started, in clock ticks after boot. A pid that is reused gets a
    /// new one, so (pid, start time) names one task. `None` when the line ends before it.
    pub start_time_ticks: Option<u64>,
}

impl Stat {
    /// Parses one stat line. The comm is everything between the first `(` and the *last* `)`:
    /// it may itself contain both, and no later field contains either.
    pub fn parse(text: &str) -> Option<Stat> {
        let (pid, rest) = text.split_once(" (")?;
        let rparen = rest.rfind(')')?;
        let comm = rest[..rparen].to_string();
        // Fields 3, 4, ... : field n is at index n - 3.
        let fields: Vec<&str> = rest[rparen + 1..].split_ascii_whitespace().collect();
        Some(Stat {
            pid: pid.trim().parse().ok()?,
            comm,
            state: fields.first()?.chars().next()?,
            ppid: field(&fields, 4)?,
            flags: field(&fields, 9).unwrap_or(0),
            start_time_ticks: field(&fields, 22),
        })
    }

    /// `<procfs>/<pid>/stat`; `None` when the task is gone (or the line is not a stat line).
    pub fn read(fx: &dyn Effects, procfs: &Path, pid: i32) -> Option<Stat> {
        Stat::parse(&read(fx, procfs, pid, "stat")?)
    }

    /// A kernel thread: `PF_KTHREAD`, or kthreadd (pid 2) and its children, which are kernel
    /// threads on every kernel even where the flags are not shown.
    pub fn is_kernel_thread(&self) -> bool {
        self.flags & PF_KTHREAD != 0 || self.pid == 2 || self.ppid == 2
    }
}

/// Field `n` of a stat line, given the fields after the comm (which start at field 3).
fn field<T: std::str::FromStr>(after_comm: &[&str], n: usize) -> Option<T> {
    after_comm.get(n - 3)?.parse().ok()
}

/// /proc/PID/status: one `Key:<tab>value` per line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Status {
    text: String,
}

/// The four user ids of a task, as `Uid:` lists them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Uids {
    pub real: u32,
    pub effective: u32,
    pub saved: u32,
    pub fs: u32,
}

impl Status {
    pub fn parse(text: impl Into<String>) -> Status {
        Status { text: text.into() }
    }

    /// `<procfs>/<pid>/status`; `None` when the task is gone.
    pub fn read(fx: &dyn Effects, procfs: &Path, pid: i32) -> Option<Status> {
        read(fx, procfs, pid, "status").map(Status::parse)
    }

    /// The value of `key` (without its colon), trimmed.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.text.lines().find_map(|l| l.strip_prefix(key)?.strip_prefix(':')).map(str::trim)
    }

    /// A counter such as `voluntary_ctxt_switches`.
    pub fn u64(&self, key: &str) -> Option<u64> {
        self.get(key)?.parse().ok()
    }

    /// The thread group (process) a task belongs to.
    pub fn tgid(&self) -> Option<i32> {
        self.get("Tgid")?.parse().ok()
    }

    pub fn uids(&self) -> Option<Uids> {
        let mut it = self.get("Uid")?.split_ascii_whitespace().map(|u| u.parse().ok());
        let mut next = || it.next().flatten();
        Some(Uids { real: next()?, effective: next()?, saved: next()?, fs: next()? })
    }
}

/// /proc/PID/cgroup: the task's cgroup in each hierarchy, paths relative to that hierarchy's
/// root (as `cgroupfs::Layout` finds it).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TaskCgroups {
    /// (controllers, path) per line; the v2 line's controllers are "", a named v1 hierarchy's
    /// are `name=<name>`.
    lines: Vec<(String, String)>,
}

impl TaskCgroups {
    /// Parses `hierarchy-id:controller,list:path` lines; the path is everything after the
    /// second colon (a cgroup name may contain colons).
    pub fn parse(text: &str) -> TaskCgroups {
        let lines = text
            .lines()
            .filter_map(|l| {
                let mut it = l.splitn(3, ':');
                let (_, controllers, path) = (it.next()?, it.next()?, it.next()?);
                Some((controllers.to_string(), path.to_string()))
            })
            .collect();
        TaskCgroups { lines }
    }

    /// `<procfs>/<pid>/cgroup`; `None` when the task is gone.
    pub fn read(fx: &dyn Effects, procfs: &Path, pid: i32) -> Option<TaskCgroups> {
        Some(TaskCgroups::parse(&read(fx, procfs, pid, "cgroup")?))
    }

    /// The task's cgroup in the v1 hierarchy holding `controller`, or with `None` in the v2
    /// hierarchy.
    pub fn path(&self, controller: Option<Controller>) -> Option<&str> {
        let wanted = |cs: &str| match controller {
            Some(c) => cs.split(',').any(|x| x == c.name()),
            None => cs.is_empty(),
        };
        self.lines.iter().find(|(cs, _)| wanted(cs)).map(|(_, p)| p.as_str())
    }

    /// Its cgroup path in every hierarchy.
    pub fn paths(&self) -> impl Iterator<Item = &str> {
        self.lines.iter().map(|(_, p)| p.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::effects::{FakeEffects, RealEffects};

    /// `testdata/proc-tasks`: a procfs root with an init, kthreadd and a kernel worker (copied
    /// from this machine), a user process whose comm is `a) b (c` on a pure v2 machine, and one
    /// of its threads under `4242/task`.
    fn procfs() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/proc-tasks")
    }

    #[test]
    fn stat_fields_after_a_comm_with_spaces_and_parentheses() {
        let s = Stat::read(&RealEffects, &procfs(), 4242).unwrap();
        assert_eq!((s.pid, s.comm.as_str(), s.state, s.ppid), (4242, "a) b (c", 'R', 1));
        assert_eq!((s.flags, s.start_time_ticks), (4194304, Some(159172)));
        assert!(!s.is_kernel_thread());
        let init = Stat::read(&RealEffects, &procfs(), 1).unwrap();
        assert_eq!((init.comm.as_str(), init.ppid, init.start_time_ticks), ("systemd", 0, Some(14)));
        assert_eq!(Stat::read(&RealEffects, &procfs(), 9), None, "no such task");
    }

    #[test]
    fn a_thread_has_its_own_start_time_under_task() {
        let s = Stat::read(&RealEffects, &procfs().join("4242/task"), 4250).unwrap();
        assert_eq!((s.pid, s.comm.as_str(), s.start_time_ticks), (4250, "worker:1", Some(160000)));
    }

    #[test]
    fn kernel_threads_by_flag_and_by_kthreadd() {
        let kthreadd = Stat::read(&RealEffects, &procfs(), 2).unwrap();
        assert!(kthreadd.flags & PF_KTHREAD != 0 && kthreadd.is_kernel_thread());
        let worker = Stat::read(&RealEffects, &procfs(), 57).unwrap();
        assert_eq!(worker.comm, "kworker/0:1-events");
        assert!(worker.is_kernel_thread());
        // Cut short before field 9 (old fixtures, hand-written lines): a child of kthreadd
        // still counts as one; the start time is unknown rather than wrong.
        let short = Stat::parse("60 (kworker/u4:0) I 2 0 0").unwrap();
        assert!(short.is_kernel_thread() && short.flags == 0 && short.start_time_ticks.is_none());
        assert_eq!(Stat::parse("60 kworker I 2"), None, "no comm");
    }

    #[test]
    fn status_uids_and_counters() {
        let s = Status::read(&RealEffects, &procfs(), 4242).unwrap();
        assert_eq!(s.uids(), Some(Uids { real: 1000, effective: 1001, saved: 1002, fs: 1003 }));
        assert_eq!(s.get("Name"), Some("a) b (c"));
        assert_eq!((s.u64("voluntary_ctxt_switches"), s.u64("nonvoluntary_ctxt_switches")), (Some(1234), Some(5)));
        assert_eq!(s.u64("ctxt_switches"), None, "a suffix of a key is not the key");
        assert_eq!(Status::parse("Name:\tx\n").uids(), None);
    }

    #[test]
    fn cgroup_lines_v1_by_controller_v2_by_the_empty_list() {
        let hybrid = TaskCgroups::read(&RealEffects, &procfs(), 1).unwrap();
        assert_eq!(hybrid.path(Some(Controller::Cpu)), Some("/init.scope"));
        assert_eq!(hybrid.path(Some(Controller::Cpuacct)), Some("/init.scope"), "co-mounted cpu,cpuacct");
        assert_eq!(hybrid.path(Some(Controller::Freezer)), Some("/"));
        assert_eq!(hybrid.path(None), Some("/init.scope"));
        assert_eq!(hybrid.paths().count(), 5);
        let v2 = TaskCgroups::read(&RealEffects, &procfs(), 4242).unwrap();
        assert_eq!(v2.path(None), Some("/user.slice/app:weird.scope"), "colons in a path are kept");
        assert_eq!(v2.path(Some(Controller::Cpu)), None, "no v1 hierarchy");
    }

    #[test]
    fn reads_go_through_effects() {
        let fx = FakeEffects::default().with_file("/p/7/stat", "7 (x) S 1 7 7 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 99 0");
        assert_eq!(Stat::read(&fx, Path::new("/p"), 7).unwrap().start_time_ticks, Some(99));
        assert_eq!(TaskCgroups::read(&fx, Path::new("/p"), 7), None);
    }
}
