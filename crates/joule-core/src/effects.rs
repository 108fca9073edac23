//! The one narrow interface in front of privileged side effects. Actuators and the undo journal
//! go through `Effects`, so their logic runs in unit tests against `FakeEffects` without root;
//! `RealEffects` is the only implementation that touches the system.

use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, VecDeque};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

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

pub trait Effects {
    fn read(&self, path: &Path) -> io::Result<String>;
    fn write(&self, path: &Path, value: &str) -> io::Result<()>;
    fn create_dir(&self, path: &Path) -> io::Result<()>;
    fn remove_dir(&self, path: &Path) -> io::Result<()>;
    fn remove_file(&self, path: &Path) -> io::Result<()>;
    fn exists(&self, path: &Path) -> bool;
    fn get_sched(&self, tid: i32) -> io::Result<SchedAttr>;
    fn set_sched(&self, tid: i32, attr: SchedAttr) -> io::Result<()>;
}

/// The real system.
#[derive(Debug, Default, Clone, Copy)]
pub struct RealEffects;

impl Effects for RealEffects {
    fn read(&self, path: &Path) -> io::Result<String> {
        std::fs::read_to_string(path)
    }
    fn write(&self, path: &Path, value: &str) -> io::Result<()> {
        // cgroupfs and procfs want one write() of the whole value, without truncation games.
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new().write(true).open(path)?;
        f.write_all(value.as_bytes())
    }
    fn create_dir(&self, path: &Path) -> io::Result<()> {
        std::fs::create_dir(path)
    }
    fn remove_dir(&self, path: &Path) -> io::Result<()> {
        std::fs::remove_dir(path)
    }
    fn remove_file(&self, path: &Path) -> io::Result<()> {
        std::fs::remove_file(path)
    }
    fn exists(&self, path: &Path) -> bool {
        path.exists()
    }
    fn get_sched(&self, tid: i32) -> io::Result<SchedAttr> {
        // SAFETY: plain syscalls on a caller-chosen tid; errors come back through errno.
        let policy = unsafe { libc::sched_getscheduler(tid) };
        if policy < 0 {
            return Err(io::Error::last_os_error());
        }
        let mut param = libc::sched_param { sched_priority: 0 };
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
}

/// An in-memory system for unit tests: files, directories and thread policies.
#[derive(Debug, Default)]
pub struct FakeEffects {
    pub files: Mutex<BTreeMap<PathBuf, String>>,
    pub dirs: Mutex<BTreeMap<PathBuf, ()>>,
    pub sched: Mutex<BTreeMap<i32, SchedAttr>>,
    /// Every mutating call, in order, for assertions.
    pub log: Mutex<Vec<String>>,
    /// Writes to these paths fail with EACCES (a read-only cgroupfs, a locked knob).
    pub read_only: Mutex<Vec<PathBuf>>,
    /// Reads of a path return these first, one per read, before the file's own content: a
    /// list the kernel changes under the reader (a task forking into a cgroup being emptied).
    pub read_script: Mutex<BTreeMap<PathBuf, VecDeque<String>>>,
    /// rmdir of a path fails with EBUSY this many times first (a task still on its way out).
    pub busy: Mutex<BTreeMap<PathBuf, usize>>,
}

impl FakeEffects {
    pub fn with_file(self, path: impl Into<PathBuf>, value: &str) -> Self {
        self.files.lock().unwrap().insert(path.into(), value.to_string());
        self
    }
    pub fn file(&self, path: impl AsRef<Path>) -> Option<String> {
        self.files.lock().unwrap().get(path.as_ref()).cloned()
    }
    fn log(&self, s: String) {
        self.log.lock().unwrap().push(s);
    }
}

fn not_found(path: &Path) -> io::Error {
    io::Error::new(io::ErrorKind::NotFound, format!("{} not found", path.display()))
}

impl Effects for FakeEffects {
    fn read(&self, path: &Path) -> io::Result<String> {
        if let Some(next) = self.read_script.lock().unwrap().get_mut(path).and_then(VecDeque::pop_front) {
            return Ok(next);
        }
        self.file(path).ok_or_else(|| not_found(path))
    }
    fn write(&self, path: &Path, value: &str) -> io::Result<()> {
        if self.read_only.lock().unwrap().iter().any(|p| path.starts_with(p)) {
            return Err(io::Error::from_raw_os_error(libc::EACCES));
        }
        let mut files = self.files.lock().unwrap();
        let dir_known = path.parent().map(|p| self.dirs.lock().unwrap().contains_key(p)).unwrap_or(false);
        if !files.contains_key(path) && !dir_known {
            return Err(not_found(path));
        }
        files.insert(path.to_path_buf(), value.to_string());
        drop(files);
        self.log(format!("write {} {}", path.display(), value.trim_end()));
        Ok(())
    }
    fn create_dir(&self, path: &Path) -> io::Result<()> {
        let mut dirs = self.dirs.lock().unwrap();
        if dirs.insert(path.to_path_buf(), ()).is_some() {
            return Err(io::Error::new(io::ErrorKind::AlreadyExists, path.display().to_string()));
        }
        drop(dirs);
        self.log(format!("mkdir {}", path.display()));
        Ok(())
    }
    fn remove_dir(&self, path: &Path) -> io::Result<()> {
        if let Some(n) = self.busy.lock().unwrap().get_mut(path).filter(|n| **n > 0) {
            *n -= 1;
            return Err(io::Error::from_raw_os_error(libc::EBUSY));
        }
        self.dirs.lock().unwrap().remove(path).ok_or_else(|| not_found(path))?;
        self.files.lock().unwrap().retain(|p, _| !p.starts_with(path));
        self.log(format!("rmdir {}", path.display()));
        Ok(())
    }
    fn remove_file(&self, path: &Path) -> io::Result<()> {
        self.files.lock().unwrap().remove(path).ok_or_else(|| not_found(path))?;
        self.log(format!("rm {}", path.display()));
        Ok(())
    }
    fn exists(&self, path: &Path) -> bool {
        self.files.lock().unwrap().contains_key(path) || self.dirs.lock().unwrap().contains_key(path)
    }
    fn get_sched(&self, tid: i32) -> io::Result<SchedAttr> {
        self.sched
            .lock()
            .unwrap()
            .get(&tid)
            .copied()
            .ok_or_else(|| io::Error::from_raw_os_error(libc::ESRCH))
    }
    fn set_sched(&self, tid: i32, attr: SchedAttr) -> io::Result<()> {
        let mut s = self.sched.lock().unwrap();
        if !s.contains_key(&tid) {
            return Err(io::Error::from_raw_os_error(libc::ESRCH));
        }
        s.insert(tid, attr);
        drop(s);
        self.log(format!("sched {tid} {} {}", attr.policy, attr.priority));
        Ok(())
    }
}
