//! The seam in front of privileged side effects, one narrow trait per concern: [`Files`]
//! (cgroupfs, procfs, sysfs), [`Sched`] (policy, priority, affinity), [`Mounts`], [`Freezer`]
//! (built on `Files`), [`Net`] (tc qdiscs over netlink) and [`Units`] (systemd units over
//! D-Bus). Actuators and the undo journal go
//! through it, so their logic runs in unit tests against [`FakeEffects`] without root;
//! [`RealEffects`] is the only implementation that touches the system.
//!
//! Code that needs several concerns takes `&dyn Effects`; code that needs one can take that
//! one trait. Each concern's file holds its trait, its real and its fake implementation.

mod files;
mod freezer;
mod mounts;
mod net;
mod netlink;
mod sched;
mod units;

pub use files::Files;
pub use freezer::{FreezeState, Freezer, FREEZE_SETTLE};
pub use mounts::{Mounts, PseudoFs, BPF_FS_MAGIC, CGROUP2_SUPER_MAGIC, CGROUP_SUPER_MAGIC, PROC_SUPER_MAGIC, SYSFS_MAGIC, TRACEFS_MAGIC};
pub use net::{tc_handle, FakeLink, Net, Qdisc, QdiscOption, TC_H_ROOT};
pub use sched::{Deadline, Sched, SchedAttr, FAKE_DEFAULT_SLICE_NS, SCHED_DEADLINE};
pub use units::{valid_unit_name, watch_jobs, Gate, GateKind, JobEvent, UnitValue, Units, GATE_PREFIX, UNIT_PROPERTIES};

use std::collections::{BTreeMap, VecDeque};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// Everything privileged joule does. Implemented by every type that implements all the parts,
/// so `&dyn Effects` reaches `fx.read(..)`, `fx.set_affinity(..)`, `fx.replace_qdisc(..)` alike.
pub trait Effects: Files + Sched + Mounts + Net + Units {}

impl<T: Files + Sched + Mounts + Net + Units + ?Sized> Effects for T {}

/// The real system.
#[derive(Debug, Default, Clone, Copy)]
pub struct RealEffects;

/// An in-memory system for unit tests: files and directories, thread policies and affinities,
/// mounts, interfaces and their qdiscs. Every mutating call that succeeds is appended to `log`
/// in order; `fail_calls` makes chosen calls fail instead.
#[derive(Debug, Default)]
pub struct FakeEffects {
    pub files: Mutex<BTreeMap<PathBuf, String>>,
    /// Files whose content need not be text (`with_bytes`): a name that is not UTF-8.
    pub raw: Mutex<BTreeMap<PathBuf, Vec<u8>>>,
    /// Symlinks and their targets (`with_symlink`: /proc/PID/exe).
    pub symlinks: Mutex<BTreeMap<PathBuf, PathBuf>>,
    /// Directories whose files are read from disk (`with_tree`): a fixture /proc a test wrote.
    pub trees: Mutex<Vec<PathBuf>>,
    pub dirs: Mutex<BTreeMap<PathBuf, ()>>,
    pub sched: Mutex<BTreeMap<i32, SchedAttr>>,
    /// CPUs each known thread may run on, ascending.
    pub affinity: Mutex<BTreeMap<i32, Vec<usize>>>,
    /// EEVDF slice of each known thread, ns (0 is never stored: the kernel reports its default,
    /// [`FAKE_DEFAULT_SLICE_NS`], for a thread without a custom slice); tid 0 is the caller.
    pub slice: Mutex<BTreeMap<i32, u64>>,
    /// Every mutating call, in order, for assertions (`write PATH VALUE`, `mkdir PATH`, …).
    pub log: Mutex<Vec<String>>,
    /// Writes to these paths fail with EACCES (a read-only cgroupfs, a locked knob).
    pub read_only: Mutex<Vec<PathBuf>>,
    /// Calls whose log line starts with the string fail with the errno (and are not logged),
    /// as many times as the count says (`usize::MAX`: always).
    pub fail: Mutex<Vec<(String, i32, usize)>>,
    /// Values successive reads of a path return before its file content does: a kernel file
    /// that changes by itself (`FREEZING` before `FROZEN`).
    pub reads: Mutex<BTreeMap<PathBuf, VecDeque<String>>>,
    /// Mount points and their filesystem magic; a path is on the longest mount it starts with,
    /// else on a plain filesystem (magic 0).
    pub mounts: Mutex<BTreeMap<PathBuf, i64>>,
    /// Network interfaces (in any namespace) and their qdiscs.
    pub links: Mutex<Vec<FakeLink>>,
    /// (prefix, file, content): a directory created under `prefix` gets `file` with that
    /// content, as a new cgroup gets its knobs from the kernel (see `on_mkdir`).
    pub mkdir_files: Mutex<Vec<(PathBuf, String, String)>>,
    /// systemd units' resource properties, (unit, property) -> value (`with_unit`).
    pub units: Mutex<BTreeMap<(String, String), UnitValue>>,
}

impl FakeEffects {
    pub fn with_file(self, path: impl Into<PathBuf>, value: &str) -> Self {
        self.files.lock().unwrap().insert(path.into(), value.to_string());
        self
    }
    pub fn with_bytes(self, path: impl Into<PathBuf>, value: &[u8]) -> Self {
        self.raw.lock().unwrap().insert(path.into(), value.to_vec());
        self
    }
    pub fn with_symlink(self, path: impl Into<PathBuf>, target: impl Into<PathBuf>) -> Self {
        self.symlinks.lock().unwrap().insert(path.into(), target.into());
        self
    }
    /// Reads, listings, links and existence under `dir` come from the disk: a fixture tree the
    /// test wrote there (its own /proc), read through the seam like the machine's would be.
    /// Writes stay in memory.
    pub fn with_tree(self, dir: impl Into<PathBuf>) -> Self {
        self.trees.lock().unwrap().push(dir.into());
        self
    }
    pub fn with_dir(self, path: impl Into<PathBuf>) -> Self {
        self.dirs.lock().unwrap().insert(path.into(), ());
        self
    }
    pub fn file(&self, path: impl AsRef<Path>) -> Option<String> {
        self.files.lock().unwrap().get(path.as_ref()).cloned()
    }
    /// Every later call whose log line starts with `prefix` (`"write /cg/x/cpu.max"`,
    /// `"affinity 7"`, `"qdisc replace"`) fails with `errno`. Reads fail the same way under
    /// `"read PATH"` (a /proc file that cannot be read: EACCES), and are never logged.
    pub fn fail_calls(&self, prefix: &str, errno: i32) {
        self.fail_calls_times(prefix, errno, usize::MAX);
    }
    /// As `fail_calls`, for the next `times` such calls only (a cgroup the kernel calls busy
    /// until an exiting task is through).
    pub fn fail_calls_times(&self, prefix: &str, errno: i32, times: usize) {
        self.fail.lock().unwrap().push((prefix.to_string(), errno, times));
    }
    /// The next reads of `path` return `values`, in order, before its file content.
    pub fn then_reads(&self, path: impl Into<PathBuf>, values: &[&str]) {
        self.reads.lock().unwrap().entry(path.into()).or_default().extend(values.iter().map(|v| v.to_string()));
    }
    /// Every directory created later under `prefix` gets `file` holding `content`: a fake
    /// cgroupfs, where a new cgroup comes with its knobs (`cpu.max`, `cgroup.procs`, ...).
    pub fn on_mkdir(self, prefix: impl Into<PathBuf>, file: &str, content: &str) -> Self {
        self.mkdir_files.lock().unwrap().push((prefix.into(), file.into(), content.into()));
        self
    }
    /// A copy of the log.
    pub fn calls(&self) -> Vec<String> {
        self.log.lock().unwrap().clone()
    }
    /// Runs mutating call `line`: fails it when a `fail_calls` rule says so, else applies
    /// `apply` and logs the line when that succeeds.
    fn act<T>(&self, line: String, apply: impl FnOnce() -> io::Result<T>) -> io::Result<T> {
        if let Some(e) = self.failing(&line) {
            return Err(e);
        }
        let out = apply()?;
        self.log.lock().unwrap().push(line);
        Ok(out)
    }
}

impl FakeEffects {
    /// The error a `fail_calls` rule gives call `line` (counting it), if one does.
    fn failing(&self, line: &str) -> Option<io::Error> {
        let mut rules = self.fail.lock().unwrap();
        let (_, errno, left) = rules.iter_mut().find(|(p, _, left)| *left > 0 && line.starts_with(p.as_str()))?;
        if *left != usize::MAX {
            *left -= 1;
        }
        Some(io::Error::from_raw_os_error(*errno))
    }
}

fn not_found(what: impl std::fmt::Display) -> io::Error {
    io::Error::new(io::ErrorKind::NotFound, format!("{what} not found"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Code that takes `&dyn Effects` reaches every concern through the one trait object.
    fn touch_everything(fx: &dyn Effects) -> io::Result<()> {
        fx.write(Path::new("/k"), "1")?;
        fx.set_sched(7, SchedAttr::OTHER)?;
        fx.set_affinity(7, &[1])?;
        fx.mount("bpf", Path::new("/b"))?;
        fx.replace_qdisc(None, 2, &Qdisc::new("fq", tc_handle(0x4a, 0), TC_H_ROOT))?;
        fx.freeze(Path::new("/fz"), std::time::Duration::from_millis(10))
    }

    #[test]
    fn the_fake_logs_every_mutating_call_in_order_across_concerns() {
        let fx = FakeEffects::default().with_file("/k", "0").with_dir("/b").with_dir("/fz").with_file("/fz/freezer.state", "THAWED\n");
        fx.sched.lock().unwrap().insert(7, SchedAttr::OTHER);
        fx.affinity.lock().unwrap().insert(7, vec![0, 1]);
        fx.add_link(None, 2, "eth0", "pfifo_fast");
        touch_everything(&fx).unwrap();
        assert_eq!(
            fx.calls(),
            vec![
                "write /k 1",
                "sched 7 0 0",
                "affinity 7 1",
                "mount bpf /b",
                "qdisc replace - 2 parent ffffffff handle 4a0000 fq",
                "write /fz/freezer.state FROZEN",
            ]
        );
    }

    #[test]
    fn a_failing_call_fails_with_its_errno_changes_nothing_and_is_not_logged() {
        let fx = FakeEffects::default().with_file("/cg/a/cpu.max", "max 100000");
        fx.fail_calls("write /cg/a/cpu.max 5", libc::EINVAL);
        let e = fx.write(Path::new("/cg/a/cpu.max"), "5000 100000").unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EINVAL));
        assert_eq!(fx.file("/cg/a/cpu.max").as_deref(), Some("max 100000"));
        fx.write(Path::new("/cg/a/cpu.max"), "max 100000").unwrap();
        assert_eq!(fx.calls(), vec!["write /cg/a/cpu.max max 100000"]);
    }
}
