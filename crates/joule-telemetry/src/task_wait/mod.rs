//! CPU wait per thread from `<procfs>/<pid>/task/<tid>/schedstat` (second field: time spent
//! runnable on a run queue, ns), reported as the top N threads by wait over the interval,
//! labelled `kernel`. This field is kept by CONFIG_SCHED_INFO, so it is live even on kernels
//! without CONFIG_SCHEDSTATS. Built to be cheap at 10 Hz over thousands of threads: getdents
//! into reused buffers, paths built in a reused byte buffer, no allocation per thread beyond
//! reused hash-map slots, and the fds of each `<pid>/task` directory and each thread's
//! schedstat kept open between samples, so a thread costs one `pread` at offset 0 (seq_file
//! regenerates the text) instead of open + read + close.

mod dents;
mod scan;

use crate::{Source, SourceError};
use dents::{for_each_name, open_at, read_at0};
use joule_core::snapshot::TaskWait;
use joule_core::Snapshot;
use scan::{build_path, Scan, Task, TopN};
use std::collections::HashMap;
use std::ffi::CString;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::PathBuf;

/// Scans every thread's run delay and keeps the `top_n` largest increases.
///
/// A thread that cannot be read because it exited (ENOENT/ESRCH) is skipped; any other error
/// (EMFILE, EACCES, ...) is counted and the sample carries one note
/// `task_wait: N threads unreadable: <first error>` (a process whose thread list cannot be
/// opened counts as one).
///
/// The first sample only records counters and reports nothing. Afterwards a thread not seen
/// before was born during the interval, so all of its run delay counts; a thread whose counter
/// went backwards, or whose kept fd went dead, is a reused tid and counts from zero.
/// `TaskWait::pid` holds the thread id. At most half the soft RLIMIT_NOFILE (≤ 16384) fds are
/// kept open; threads past that are opened and closed on every sample (slower, still correct).
/// Each kept fd also holds one page of seq_file buffer in the kernel (about 4 MiB per 1000
/// threads).
pub struct TaskWaitSource {
    procfs_root: PathBuf,
    top_n: usize,
    root_fd: Option<OwnedFd>,
    first: bool,
    fd_cap: usize,
    /// Per tid / per pid at the previous and current sample; swapped, never reallocated.
    prev: HashMap<u32, Task>,
    cur: HashMap<u32, Task>,
    prev_dirs: HashMap<u32, OwnedFd>,
    cur_dirs: HashMap<u32, OwnedFd>,
    procs_buf: Vec<u8>,
    tasks_buf: Vec<u8>,
    path: Vec<u8>,
    file: [u8; 128],
}

/// Half of the soft RLIMIT_NOFILE (the rest is the agent's), at most 16384.
fn default_fd_cap() -> usize {
    let mut rl = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit writes into the struct we own.
    let soft = if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut rl) } == 0 { rl.rlim_cur } else { 1024 };
    (soft / 2).min(16384) as usize
}

impl TaskWaitSource {
    pub fn new(procfs_root: impl Into<PathBuf>, top_n: usize) -> Self {
        Self {
            procfs_root: procfs_root.into(),
            top_n,
            root_fd: None,
            first: true,
            fd_cap: default_fd_cap(),
            prev: HashMap::new(),
            cur: HashMap::new(),
            prev_dirs: HashMap::new(),
            cur_dirs: HashMap::new(),
            procs_buf: vec![0; 32 * 1024],
            tasks_buf: vec![0; 32 * 1024],
            path: Vec::with_capacity(64),
            file: [0; 128],
        }
    }

    fn open_root(&mut self) -> Result<(), SourceError> {
        if self.root_fd.is_none() {
            let c = CString::new(self.procfs_root.as_os_str().as_encoded_bytes()).map_err(|_| SourceError::parse(&self.procfs_root, "NUL in path"))?;
            self.root_fd = Some(open_at(libc::AT_FDCWD, &c, true).map_err(|e| SourceError::read(&self.procfs_root, e))?);
        }
        Ok(())
    }
}

impl Source for TaskWaitSource {
    fn name(&self) -> &'static str {
        "task_wait"
    }

    fn sample(&mut self, snap: &mut Snapshot) -> Result<(), SourceError> {
        self.open_root()?;
        let root_fd = self.root_fd.as_ref().expect("opened above");
        let root = root_fd.as_raw_fd();
        self.cur.clear();
        self.cur_dirs.clear();
        let mut scan = Scan {
            prev: &mut self.prev,
            cur: &mut self.cur,
            prev_dirs: &mut self.prev_dirs,
            cur_dirs: &mut self.cur_dirs,
            tasks_buf: &mut self.tasks_buf,
            path: &mut self.path,
            file: &mut self.file,
            first: self.first,
            fd_cap: self.fd_cap,
            top: TopN { n: self.top_n, items: Vec::with_capacity(self.top_n + 1) },
            unreadable: 0,
            first_error: None,
        };
        let listed = for_each_name(root_fd, &mut self.procs_buf, |pid_name| scan.process(root, pid_name));
        let top = std::mem::take(&mut scan.top.items);
        if let Some(e) = scan.first_error.take() {
            // Not "it exited": these threads' waits are missing from this sample. Say so.
            snap.notes.push(format!("task_wait: {} threads unreadable: {e}", scan.unreadable));
        }
        // Whatever is left in prev is gone since the last sample: dropping closes its fds.
        self.prev.clear();
        self.prev_dirs.clear();
        std::mem::swap(&mut self.prev, &mut self.cur);
        std::mem::swap(&mut self.prev_dirs, &mut self.cur_dirs);
        self.first = false;
        listed.map_err(|e| SourceError::read(&self.procfs_root, e))?;
        let (path, file) = (&mut self.path, &mut self.file);
        snap.task_wait = top
            .iter()
            .map(|&(wait_ns, tid, pid)| {
                let (t, p) = (tid.to_string(), pid.to_string());
                let comm = open_at(root, build_path(path, &[p.as_bytes(), b"/task/", t.as_bytes(), b"/comm"]), false)
                    .and_then(|fd| read_at0(&fd, file))
                    .map(|n| joule_core::Comm::new(file[..n].strip_suffix(b"\n").unwrap_or(&file[..n])))
                    .unwrap_or_default();
                TaskWait { pid: tid as i32, comm, wait_us: wait_ns / 1000, source: joule_core::Origin::Kernel }
            })
            .collect();
        Ok(())
    }
}
