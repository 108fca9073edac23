//! The files of /proc that more than one crate reads, parsed in one place: per task `stat`
//! (whose comm may hold spaces and parentheses), `status` (uids, counters) and `cgroup` (the
//! task's cgroup in each hierarchy); the kernel's release (what a feature's first version is
//! compared with). The undo journal pins a task by its start time, qos
//! matching reads all three, the overhead benchmark counts context switches. Reads go through
//! `Effects` under a procfs root given as a parameter (`/proc`, or `/proc/PID/task` for a
//! process's threads), so tests run on fixture trees. All three files can hold bytes a user
//! chose (a comm, a cgroup's name), so they are read and parsed as bytes.

use crate::cgroupfs::Controller;
use crate::comm::Comm;
use crate::effects::Files;
use std::borrow::Cow;
use std::io;
use std::os::unix::ffi::OsStrExt;
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

/// Every file here is read as bytes: each can hold the task's name, which its owner chose and
/// which need not be UTF-8; one such byte must not hide the task's uid or start time.
fn read(fx: &dyn Files, procfs: &Path, pid: i32, file: &str) -> io::Result<Vec<u8>> {
    fx.read_bytes(&task_dir(procfs, pid).join(file))
}

/// Whether a read error says the task is gone (its directory or the task itself), not that
/// /proc could not be read.
pub fn is_gone(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::NotFound || e.raw_os_error() == Some(libc::ESRCH)
}

/// The fields of /proc/PID/stat joule uses (`man 5 proc` numbers them from 1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stat {
    /// Field 1.
    pub pid: i32,
    /// Field 2 without its parentheses: the same bytes as /proc/PID/comm.
    pub comm: Comm,
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
    /// Parses one stat line. The comm is everything between the first ` (` and the *last* `)`:
    /// it may itself contain both, and any other byte, and no later field contains either.
    pub fn parse(line: &[u8]) -> Option<Stat> {
        let open = line.windows(2).position(|w| w == b" (")?;
        let rest = &line[open + 2..];
        let rparen = rest.iter().rposition(|b| *b == b')')?;
        // Fields 3, 4, ... are the kernel's numbers and letters: text.
        let after = std::str::from_utf8(&rest[rparen + 1..]).ok()?;
        let fields: Vec<&str> = after.split_ascii_whitespace().collect();
        Some(Stat {
            pid: std::str::from_utf8(&line[..open]).ok()?.trim().parse().ok()?,
            comm: Comm::new(&rest[..rparen]),
            state: fields.first()?.chars().next()?,
            ppid: field(&fields, 4)?,
            flags: field(&fields, 9).unwrap_or(0),
            start_time_ticks: field(&fields, 22),
        })
    }

    /// `<procfs>/<pid>/stat`; `None` when the task is gone (or the line is not a stat line).
    pub fn read(fx: &dyn Files, procfs: &Path, pid: i32) -> Option<Stat> {
        Stat::parse(&read(fx, procfs, pid, "stat").ok()?)
    }

    /// A kernel thread: `PF_KTHREAD`, or kthreadd (pid 2) and its children, which are kernel
    /// threads on every kernel even where the flags are not shown.
    pub fn is_kernel_thread(&self) -> bool {
        self.flags & PF_KTHREAD != 0 || self.pid == 2 || self.ppid == 2
    }
}

/// Task `pid`'s start time (clock ticks after boot): `Ok(None)` only when there is no such task
/// any more; `Err` when /proc could not tell (another error, or a line without a start time),
/// which says nothing about whether the task is there.
pub fn start_time(fx: &dyn Files, procfs: &Path, pid: i32) -> io::Result<Option<u64>> {
    let line = match read(fx, procfs, pid, "stat") {
        Ok(l) => l,
        Err(e) if is_gone(&e) => return Ok(None),
        Err(e) => return Err(e),
    };
    let bad = || io::Error::new(io::ErrorKind::InvalidData, format!("/proc/{pid}/stat has no start time"));
    Stat::parse(&line).and_then(|s| s.start_time_ticks).map(Some).ok_or_else(bad)
}

/// Whether `pid` is still the task that started at `started`: `Ok(false)` when it is gone or
/// the pid is another task's now; `Err` when /proc could not tell (the caller must neither
/// treat the task as gone nor act on a pid it could not pin).
pub fn same_task(fx: &dyn Files, procfs: &Path, pid: i32, started: u64) -> io::Result<bool> {
    Ok(start_time(fx, procfs, pid)? == Some(started))
}

/// Field `n` of a stat line, given the fields after the comm (which start at field 3).
fn field<T: std::str::FromStr>(after_comm: &[&str], n: usize) -> Option<T> {
    after_comm.get(n - 3)?.parse().ok()
}

/// /proc/PID/status: one `Key:<tab>value` per line. Kept as bytes: the `Name:` line is the
/// task's comm, which need not be UTF-8, and must not hide the `Uid:` line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Status {
    bytes: Vec<u8>,
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
    pub fn parse(bytes: impl Into<Vec<u8>>) -> Status {
        Status { bytes: bytes.into() }
    }

    /// `<procfs>/<pid>/status`; `None` when the task is gone.
    pub fn read(fx: &dyn Files, procfs: &Path, pid: i32) -> Option<Status> {
        read(fx, procfs, pid, "status").ok().map(Status::parse)
    }

    /// The value of `key` (without its colon), trimmed, byte for byte.
    pub fn get_bytes(&self, key: &str) -> Option<&[u8]> {
        self.bytes.split(|b| *b == b'\n').find_map(|l| l.strip_prefix(key.as_bytes())?.strip_prefix(b":")).map(<[u8]>::trim_ascii)
    }

    /// The value of `key` as text; None when it is missing or not UTF-8 (only `Name:` can be).
    pub fn get(&self, key: &str) -> Option<&str> {
        std::str::from_utf8(self.get_bytes(key)?).ok()
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
/// root (as `cgroupfs::Layout` finds it). A path is kept byte for byte: whoever was handed a
/// subtree (a user's `user@UID.service`, a container) names the cgroups in it, in any bytes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TaskCgroups {
    /// (controllers, path) per line; the v2 line's controllers are "", a named v1 hierarchy's
    /// are `name=<name>`.
    lines: Vec<(String, CgroupPath)>,
}

/// A cgroup path as the kernel spells it, and as text for what parses it as names.
#[derive(Debug, Clone, PartialEq, Eq)]
enum CgroupPath {
    Utf8(String),
    /// Not UTF-8: the bytes, and the text with each bad sequence as U+FFFD.
    Bytes(Vec<u8>, String),
}

impl CgroupPath {
    fn new(bytes: &[u8]) -> CgroupPath {
        match String::from_utf8_lossy(bytes) {
            Cow::Borrowed(s) => CgroupPath::Utf8(s.to_string()),
            Cow::Owned(lossy) => CgroupPath::Bytes(bytes.to_vec(), lossy),
        }
    }
    fn bytes(&self) -> &[u8] {
        match self {
            CgroupPath::Utf8(s) => s.as_bytes(),
            CgroupPath::Bytes(b, _) => b,
        }
    }
    fn text(&self) -> &str {
        match self {
            CgroupPath::Utf8(s) | CgroupPath::Bytes(_, s) => s,
        }
    }
}

impl TaskCgroups {
    /// Parses `hierarchy-id:controller,list:path` lines; the path is everything after the
    /// second colon (a cgroup name may contain colons, and any byte but `/` and NUL).
    pub fn parse<B: AsRef<[u8]> + ?Sized>(bytes: &B) -> TaskCgroups {
        let lines = bytes
            .as_ref()
            .split(|b| *b == b'\n')
            .filter_map(|l| {
                let mut it = l.splitn(3, |b| *b == b':');
                let (_, controllers, path) = (it.next()?, it.next()?, it.next()?);
                Some((String::from_utf8_lossy(controllers).into_owned(), CgroupPath::new(path)))
            })
            .collect();
        TaskCgroups { lines }
    }

    /// `<procfs>/<pid>/cgroup`; `None` when the task is gone.
    pub fn read(fx: &dyn Files, procfs: &Path, pid: i32) -> Option<TaskCgroups> {
        Some(TaskCgroups::parse(&read(fx, procfs, pid, "cgroup").ok()?))
    }

    fn line(&self, controller: Option<Controller>) -> Option<&CgroupPath> {
        let wanted = |cs: &str| match controller {
            Some(c) => cs.split(',').any(|x| x == c.name()),
            None => cs.is_empty(),
        };
        self.lines.iter().find(|(cs, _)| wanted(cs)).map(|(_, p)| p)
    }

    /// The task's cgroup in the v1 hierarchy holding `controller`, or with `None` in the v2
    /// hierarchy, as text: for what reads names that the kubelet, a runtime or systemd made
    /// (a pod's or a unit's level), where a level someone else named below them may show
    /// U+FFFD. Matching a rule and finding the directory use [`raw_path`](Self::raw_path) and
    /// [`dir_in`](Self::dir_in), which are exact.
    pub fn path(&self, controller: Option<Controller>) -> Option<&str> {
        self.line(controller).map(CgroupPath::text)
    }

    /// As [`path`](Self::path), byte for byte.
    pub fn raw_path(&self, controller: Option<Controller>) -> Option<&[u8]> {
        self.line(controller).map(CgroupPath::bytes)
    }

    /// The task's cgroup directory under `mount` (its hierarchy's mount point), exact; the
    /// root when the task has none there.
    pub fn dir_in(&self, mount: &Path, controller: Option<Controller>) -> PathBuf {
        let rel = self.raw_path(controller).unwrap_or(b"/");
        let rel = &rel[rel.iter().take_while(|b| **b == b'/').count()..];
        mount.join(std::ffi::OsStr::from_bytes(rel))
    }

    /// Its cgroup path in every hierarchy, as text (see [`path`](Self::path)).
    pub fn paths(&self) -> impl Iterator<Item = &str> {
        self.lines.iter().map(|(_, p)| p.text())
    }

    /// Its cgroup path in every hierarchy, byte for byte.
    pub fn raw_paths(&self) -> impl Iterator<Item = &[u8]> {
        self.lines.iter().map(|(_, p)| p.bytes())
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
        assert_eq!((s.pid, s.comm.as_str(), s.state, s.ppid), (4242, Some("a) b (c"), 'R', 1));
        assert_eq!((s.flags, s.start_time_ticks), (4194304, Some(159172)));
        assert!(!s.is_kernel_thread());
        let init = Stat::read(&RealEffects, &procfs(), 1).unwrap();
        assert_eq!((init.comm.as_str(), init.ppid, init.start_time_ticks), (Some("systemd"), 0, Some(14)));
        assert_eq!(Stat::read(&RealEffects, &procfs(), 9), None, "no such task");
    }

    #[test]
    fn a_thread_has_its_own_start_time_under_task() {
        let s = Stat::read(&RealEffects, &procfs().join("4242/task"), 4250).unwrap();
        assert_eq!((s.pid, s.comm.as_str(), s.start_time_ticks), (4250, Some("worker:1"), Some(160000)));
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
        let short = Stat::parse(b"60 (kworker/u4:0) I 2 0 0").unwrap();
        assert!(short.is_kernel_thread() && short.flags == 0 && short.start_time_ticks.is_none());
        assert_eq!(Stat::parse(b"60 kworker I 2"), None, "no comm");
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

    /// `prctl(PR_SET_NAME)` takes any 15 bytes but NUL: the same bytes show in stat's comm and
    /// status's Name, and nothing else on either line may be lost with them.
    #[test]
    fn a_name_that_is_not_utf8_hides_neither_the_start_time_nor_the_uid() {
        let name: &[u8] = b"\xff\xfe) (x\x1b]2;\x07\n";
        let mut line = b"4242 (".to_vec();
        line.extend_from_slice(name);
        line.extend_from_slice(b") S 1 4242 4242 0 -1 4194304 0 0 0 0 1 2 0 0 20 0 1 0 159172 0\n");
        let s = Stat::parse(&line).unwrap();
        assert_eq!((s.comm.as_bytes(), s.ppid, s.start_time_ticks), (name, 1, Some(159172)));
        assert_eq!(s.comm.as_str(), None);
        let mut status = b"Name:\t\xff\xfeaudjx\nUmask:\t0022\nState:\tR (running)\nTgid:\t4242\n".to_vec();
        status.extend_from_slice(b"Uid:\t64001\t64001\t64001\t64001\n");
        let st = Status::parse(status);
        assert_eq!(st.uids().map(|u| u.real), Some(64001));
        assert_eq!((st.tgid(), st.get("Name"), st.get_bytes("Name")), (Some(4242), None, Some(&b"\xff\xfeaudjx"[..])));
        let fx = FakeEffects::default().with_bytes("/p/4242/stat", &line);
        assert_eq!(start_time(&fx, Path::new("/p"), 4242).unwrap(), Some(159172));
        assert!(same_task(&fx, Path::new("/p"), 4242, 159172).unwrap());
    }

    #[test]
    fn a_start_time_is_gone_only_when_the_task_is() {
        let fx = FakeEffects::default().with_file("/p/7/stat", "7 (x) S 1 7 7 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 99 0").with_file("/p/8/stat", "8 (x) S 1");
        let p = Path::new("/p");
        assert_eq!(start_time(&fx, p, 7).unwrap(), Some(99));
        assert_eq!(start_time(&fx, p, 9).unwrap(), None, "no such task");
        assert!(!same_task(&fx, p, 9, 99).unwrap() && !same_task(&fx, p, 7, 98).unwrap());
        assert_eq!(start_time(&fx, p, 8).unwrap_err().kind(), io::ErrorKind::InvalidData, "a line cut short says nothing");
        let t = tempfile::tempdir().unwrap();
        std::fs::create_dir(t.path().join("7")).unwrap();
        std::fs::create_dir(t.path().join("7/stat")).unwrap(); // EISDIR: unreadable, not gone
        let disk = FakeEffects::default().with_tree(t.path());
        let e = same_task(&disk, t.path(), 7, 99).unwrap_err();
        assert!(!is_gone(&e), "{e}");
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

    /// A user names the cgroups of a subtree handed to them: every byte is kept, so a rule
    /// matches the path and the task's directory is the one it is in.
    #[test]
    fn a_cgroup_path_that_is_not_utf8_is_kept_byte_for_byte() {
        let cg = TaskCgroups::parse(b"4:cpu,cpuacct:/user.slice/\xff:x\n0::/user.slice/user-1001.slice/user@1001.service/\xfe\n");
        assert_eq!(cg.raw_path(Some(Controller::Cpu)), Some(&b"/user.slice/\xff:x"[..]));
        assert_eq!(cg.path(Some(Controller::Cpu)), Some("/user.slice/\u{fffd}:x"), "as text, for names others made");
        assert_eq!(cg.dir_in(Path::new("/sys/fs/cgroup/cpu"), Some(Controller::Cpu)).as_os_str().as_bytes(), b"/sys/fs/cgroup/cpu/user.slice/\xff:x");
        assert_eq!(cg.dir_in(Path::new("/m"), Some(Controller::Freezer)), Path::new("/m"), "none there: the root");
        assert_eq!(cg.raw_paths().count(), 2);
        assert!(cg.paths().all(|p| p.starts_with("/user.slice/")));
    }

    #[test]
    fn reads_go_through_effects() {
        let fx = FakeEffects::default().with_file("/p/7/stat", "7 (x) S 1 7 7 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 99 0");
        assert_eq!(Stat::read(&fx, Path::new("/p"), 7).unwrap().start_time_ticks, Some(99));
        assert_eq!(TaskCgroups::read(&fx, Path::new("/p"), 7), None);
    }
}
