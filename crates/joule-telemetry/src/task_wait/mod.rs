//! CPU wait per thread from `<procfs>/<pid>/task/<tid>/schedstat` (second field: time spent
//! runnable on a run queue, ns), reported as the top N threads by wait over the interval,
//! labelled `kernel`. This field is kept by CONFIG_SCHED_INFO, so it is live even on kernels
//! without CONFIG_SCHEDSTATS. Built to be cheap at 10 Hz over thousands of threads: getdents
//! into reused buffers, paths built in a reused byte buffer, no allocation per thread beyond
//! reused hash-map slots, and each thread's schedstat fd kept open and re-read with one
//! `pread` at offset 0 (seq_file regenerates the text) instead of open + read + close.

mod dents;

use crate::{Source, SourceError};
use dents::{for_each_name, open_at, parse_digits, read_at0};
use joule_core::snapshot::TaskWait;
use joule_core::Snapshot;
use std::collections::HashMap;
use std::ffi::{CStr, CString};
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::PathBuf;

/// Scans every thread's run delay and keeps the `top_n` largest increases.
///
/// The first sample only records counters and reports nothing. Afterwards a thread not seen
/// before was born during the interval, so all of its run delay counts; a thread whose counter
/// went backwards is a reused tid and counts from zero. `TaskWait::pid` holds the thread id.
pub struct TaskWaitSource {
    procfs_root: PathBuf,
    top_n: usize,
    root_fd: Option<OwnedFd>,
    first: bool,
    /// Per tid at the previous / current sample; swapped, never reallocated.
    prev: HashMap<u32, Task>,
    cur: HashMap<u32, Task>,
    /// Most schedstat fds kept open (each also pins a page of seq_file buffer in the kernel).
    fd_cap: usize,
    bufs: Bufs,
}

struct Task {
    delay_ns: u64,
    /// The thread's schedstat, kept open while under `fd_cap`. A dead thread's fd reads
    /// ESRCH, so a reused tid is never read through a stale fd.
    fd: Option<OwnedFd>,
}

/// Half of the soft RLIMIT_NOFILE (the rest is the agent's), at most 16384.
fn default_fd_cap() -> usize {
    let mut rl = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit writes into the struct we own.
    let soft = if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut rl) } == 0 { rl.rlim_cur } else { 1024 };
    (soft / 2).min(16384) as usize
}

/// Buffers reused by every sample.
struct Bufs {
    procs: Vec<u8>,
    tasks: Vec<u8>,
    path: Vec<u8>,
    file: [u8; 128],
}

/// The N largest (wait_ns, tid, pid), kept sorted descending; N is small (a handful).
struct TopN<'a> {
    n: usize,
    items: &'a mut Vec<(u64, u32, u32)>,
}

impl TopN<'_> {
    fn offer(&mut self, wait_ns: u64, tid: u32, pid: u32) {
        if wait_ns == 0 || self.n == 0 {
            return;
        }
        if self.items.len() == self.n && self.items.last().is_some_and(|l| l.0 >= wait_ns) {
            return;
        }
        let at = self.items.partition_point(|x| x.0 >= wait_ns);
        self.items.insert(at, (wait_ns, tid, pid));
        self.items.truncate(self.n);
    }
}

impl TaskWaitSource {
    pub fn new(procfs_root: impl Into<PathBuf>, top_n: usize) -> Self {
        Self {
            procfs_root: procfs_root.into(),
            top_n,
            root_fd: None,
            first: true,
            prev: HashMap::new(),
            cur: HashMap::new(),
            fd_cap: default_fd_cap(),
            bufs: Bufs { procs: vec![0; 32 * 1024], tasks: vec![0; 32 * 1024], path: Vec::with_capacity(64), file: [0; 128] },
        }
    }

    fn root_fd(&mut self) -> Result<&OwnedFd, SourceError> {
        if self.root_fd.is_none() {
            let c = CString::new(self.procfs_root.as_os_str().as_encoded_bytes())
                .map_err(|_| SourceError::parse(&self.procfs_root, "NUL in path"))?;
            let fd = open_at(libc::AT_FDCWD, &c, true).map_err(|e| SourceError::read(&self.procfs_root, e))?;
            self.root_fd = Some(fd);
        }
        Ok(self.root_fd.as_ref().expect("just opened"))
    }
}

/// Sets `path` to `parts` joined and NUL-terminated, and returns it as a C string.
fn build_path<'a>(path: &'a mut Vec<u8>, parts: &[&[u8]]) -> &'a CStr {
    path.clear();
    for p in parts {
        path.extend_from_slice(p);
    }
    path.push(0);
    CStr::from_bytes_with_nul(path).unwrap_or(c".")
}

/// Second field of a schedstat line: `<on-cpu ns> <run-delay ns> <timeslices>`.
pub(crate) fn run_delay_ns(text: &[u8]) -> Option<u64> {
    let mut it = text.split(|b| b.is_ascii_whitespace()).filter(|f| !f.is_empty());
    it.next()?;
    parse_digits(it.next()?)
}

impl Source for TaskWaitSource {
    fn name(&self) -> &'static str {
        "task_wait"
    }

    fn sample(&mut self, snap: &mut Snapshot) -> Result<(), SourceError> {
        let root = self.root_fd()?.as_raw_fd();
        let root_fd = self.root_fd.as_ref().expect("opened above");
        let Bufs { procs, tasks, path, file } = &mut self.bufs;
        let (prev, cur, first, fd_cap) = (&mut self.prev, &mut self.cur, self.first, self.fd_cap);
        cur.clear();
        let mut top_items = Vec::with_capacity(self.top_n + 1);
        let mut top = TopN { n: self.top_n, items: &mut top_items };
        let listed = for_each_name(root_fd, procs, |pid_name| {
            let Some(pid) = parse_digits(pid_name) else { return };
            let Ok(task_dir) = open_at(root, build_path(path, &[pid_name, b"/task"]), true) else { return }; // exited
            let _ = for_each_name(&task_dir, tasks, |tid_name| {
                let Some(tid) = parse_digits(tid_name) else { return };
                let tid = tid as u32;
                let (mut old_delay, old_fd) = match prev.remove(&tid) {
                    Some(t) => (Some(t.delay_ns), t.fd),
                    None => (None, None),
                };
                // Re-read the kept fd; if that fails the thread it named is dead and this tid
                // is a new thread: forget the old counter and reopen.
                let had_fd = old_fd.is_some();
                let cached = old_fd.and_then(|fd| read_at0(&fd, file).ok().map(|n| (fd, n)));
                if had_fd && cached.is_none() {
                    old_delay = None;
                }
                let (fd, n) = match cached {
                    Some(x) => x,
                    None => {
                        let Ok(fd) = open_at(task_dir.as_raw_fd(), build_path(path, &[tid_name, b"/schedstat"]), false) else { return };
                        let Ok(n) = read_at0(&fd, file) else { return };
                        (fd, n)
                    }
                };
                let Some(delay_ns) = run_delay_ns(&file[..n]) else { return };
                let keep = cur.len() < fd_cap; // cur.len() bounds the fds kept so far
                cur.insert(tid, Task { delay_ns, fd: keep.then_some(fd) });
                if !first {
                    let wait_ns = match old_delay {
                        Some(p) if delay_ns >= p => delay_ns - p,
                        _ => delay_ns, // born during the interval, or a reused tid
                    };
                    top.offer(wait_ns, tid, pid as u32);
                }
            });
        });
        prev.clear(); // threads gone since the last sample: close their fds
        listed.map_err(|e| SourceError::read(&self.procfs_root, e))?;
        snap.task_wait = top_items
            .iter()
            .map(|&(wait_ns, tid, pid)| {
                let (t, p) = (tid.to_string(), pid.to_string());
                let comm = open_at(root, build_path(path, &[p.as_bytes(), b"/task/", t.as_bytes(), b"/comm"]), false)
                    .and_then(|fd| read_at0(&fd, file))
                    .map(|n| String::from_utf8_lossy(&file[..n]).trim_end().to_string())
                    .unwrap_or_default();
                TaskWait { pid: tid as i32, comm, wait_us: wait_ns / 1000 }
            })
            .collect();
        std::mem::swap(&mut self.prev, &mut self.cur);
        self.first = false;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_delay_is_the_second_field() {
        assert_eq!(run_delay_ns(b"79583753 5383800 346\n"), Some(5383800));
        assert_eq!(run_delay_ns(b"0 0 1"), Some(0));
        assert_eq!(run_delay_ns(b"12"), None);
    }

    #[test]
    fn top_n_keeps_the_largest_in_order() {
        let mut items = Vec::new();
        let mut top = TopN { n: 2, items: &mut items };
        for (w, t) in [(5, 1), (9, 2), (0, 3), (7, 4), (1, 5)] {
            top.offer(w, t, t);
        }
        assert_eq!(items, vec![(9, 2, 2), (7, 4, 4)]);
    }
}
