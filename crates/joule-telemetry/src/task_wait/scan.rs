//! One pass over every thread's schedstat: the per-process and per-thread steps of the
//! task-wait source, with the fds of the previous pass re-read instead of reopened.

use super::dents::{for_each_name, open_at, parse_digits, read_at0};
use std::collections::HashMap;
use std::ffi::CStr;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};

/// What the source remembers of one thread between samples.
pub(super) struct Task {
    pub delay_ns: u64,
    /// The thread's schedstat, kept open while under the fd cap. A dead thread's fd reads
    /// ESRCH, so a reused tid is never read through a stale fd.
    pub fd: Option<OwnedFd>,
}

/// The N largest (wait_ns, tid, pid), kept sorted descending; N is small (a handful).
pub(super) struct TopN {
    pub n: usize,
    pub items: Vec<(u64, u32, u32)>,
}

impl TopN {
    pub fn offer(&mut self, wait_ns: u64, tid: u32, pid: u32) {
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

/// Borrowed state of one pass.
pub(super) struct Scan<'a> {
    pub prev: &'a mut HashMap<u32, Task>,
    pub cur: &'a mut HashMap<u32, Task>,
    pub prev_dirs: &'a mut HashMap<u32, OwnedFd>,
    pub cur_dirs: &'a mut HashMap<u32, OwnedFd>,
    pub tasks_buf: &'a mut [u8],
    pub path: &'a mut Vec<u8>,
    pub file: &'a mut [u8],
    /// First pass: record counters only.
    pub first: bool,
    /// Most fds kept open between passes (task dirs + schedstat files).
    pub fd_cap: usize,
    pub top: TopN,
    /// Threads (or whole processes, whose threads could not be listed) that failed with
    /// anything but "it exited" (ENOENT/ESRCH), e.g. EMFILE; and the first such error.
    pub unreadable: usize,
    pub first_error: Option<io::Error>,
}

/// Sets `path` to `parts` joined and NUL-terminated, and returns it as a C string.
pub(super) fn build_path<'p>(path: &'p mut Vec<u8>, parts: &[&[u8]]) -> &'p CStr {
    path.clear();
    for p in parts {
        path.extend_from_slice(p);
    }
    path.push(0);
    CStr::from_bytes_with_nul(path).unwrap_or(c".")
}

/// Second field of a schedstat line: `<on-cpu ns> <run-delay ns> <timeslices>`.
pub(super) fn run_delay_ns(text: &[u8]) -> Option<u64> {
    let mut it = text.split(|b| b.is_ascii_whitespace()).filter(|f| !f.is_empty());
    it.next()?;
    parse_digits(it.next()?)
}

/// A thread or process that exited between the listing and the read: not worth a word.
fn exited(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::ENOENT) | Some(libc::ESRCH))
}

impl Scan<'_> {
    /// Counts `e` unless it only says the thread exited; returns false (not read).
    fn failed(&mut self, e: io::Error) -> bool {
        if !exited(&e) {
            self.unreadable += 1;
            self.first_error.get_or_insert(e);
        }
        false
    }

    fn kept_fds(&self) -> usize {
        self.cur.len() + self.cur_dirs.len()
    }

    /// Every thread of process `pid_name` (a /proc entry name).
    pub fn process(&mut self, root: RawFd, pid_name: &[u8]) {
        let Some(pid) = parse_digits(pid_name) else { return };
        let pid = pid as u32;
        let mut cached = self.prev_dirs.remove(&pid);
        loop {
            let from_cache = cached.is_some();
            let dir = match cached.take() {
                Some(fd) => fd,
                None => match open_at(root, build_path(self.path, &[pid_name, b"/task"]), true) {
                    Ok(fd) => fd,
                    Err(e) => {
                        self.failed(e); // exited, or (counted) could not be opened
                        return;
                    }
                },
            };
            let buf = std::mem::take(&mut self.tasks_buf);
            let mut threads = 0usize;
            let listed = for_each_name(&dir, buf, |tid_name| threads += self.thread(dir.as_raw_fd(), tid_name, pid) as usize);
            self.tasks_buf = buf;
            if let Err(e) = listed {
                self.failed(e);
            }
            // A live process always lists a thread; a kept fd listing none names a dead
            // process whose pid was reused: reopen once.
            if threads == 0 && from_cache {
                continue;
            }
            if threads > 0 && self.kept_fds() < self.fd_cap {
                self.cur_dirs.insert(pid, dir);
            }
            return;
        }
    }

    /// One thread; false when it could not be read (it exited mid-pass, or not a tid, or an
    /// error that is counted in `unreadable`).
    fn thread(&mut self, task_dir: RawFd, tid_name: &[u8], pid: u32) -> bool {
        let Some(tid) = parse_digits(tid_name) else { return false };
        let tid = tid as u32;
        let (mut old_delay, old_fd) = match self.prev.remove(&tid) {
            Some(t) => (Some(t.delay_ns), t.fd),
            None => (None, None),
        };
        let had_fd = old_fd.is_some();
        let kept = old_fd.and_then(|fd| read_at0(&fd, self.file).ok().map(|n| (fd, n)));
        if had_fd && kept.is_none() {
            old_delay = None; // the thread it named is dead: this tid is a new thread
        }
        let (fd, n) = match kept {
            Some(x) => x,
            None => {
                let fd = match open_at(task_dir, build_path(self.path, &[tid_name, b"/schedstat"]), false) {
                    Ok(fd) => fd,
                    Err(e) => return self.failed(e),
                };
                match read_at0(&fd, self.file) {
                    Ok(n) => (fd, n),
                    Err(e) => return self.failed(e),
                }
            }
        };
        let Some(delay_ns) = run_delay_ns(&self.file[..n]) else {
            return self.failed(io::Error::new(io::ErrorKind::InvalidData, "schedstat has no run-delay field"));
        };
        let keep = self.kept_fds() < self.fd_cap;
        self.cur.insert(tid, Task { delay_ns, fd: keep.then_some(fd) });
        if !self.first {
            let wait_ns = match old_delay {
                Some(p) if delay_ns >= p => delay_ns - p,
                _ => delay_ns, // born during the interval, or a reused tid
            };
            self.top.offer(wait_ns, tid, pid);
        }
        true
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
        let mut top = TopN { n: 2, items: Vec::new() };
        for (w, t) in [(5, 1), (9, 2), (0, 3), (7, 4), (1, 5)] {
            top.offer(w, t, t);
        }
        assert_eq!(top.items, vec![(9, 2, 2), (7, 4, 4)]);
    }
}
