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
    // Mounts. Test doubles of one concern (a cgroup fake) keep these defaults, which refuse.

    /// The type of the filesystem `path` is on (statfs `f_type`, e.g. [`BPF_FS_MAGIC`]).
    fn fs_magic(&self, path: &Path) -> io::Result<i64> {
        Err(unsupported("statfs", path))
    }
    /// Names of the entries of directory `path`.
    fn list_dir(&self, path: &Path) -> io::Result<Vec<String>> {
        Err(unsupported("readdir", path))
    }
    /// Mounts a fresh, source-less filesystem of `fstype` (`bpf`, `tracefs`) at `target`.
    fn mount(&self, _fstype: &str, target: &Path) -> io::Result<()> {
        Err(unsupported("mount", target))
    }
    /// Unmounts whatever is mounted at `target` (not lazily: a busy mount stays and says so).
    fn unmount(&self, target: &Path) -> io::Result<()> {
        Err(unsupported("umount", target))
    }
}

fn unsupported(what: &str, path: &Path) -> io::Error {
    io::Error::new(io::ErrorKind::Unsupported, format!("{what} {}: not supported by these effects", path.display()))
}

/// statfs `f_type` of bpffs.
pub const BPF_FS_MAGIC: i64 = 0xcafe_4a11;
/// statfs `f_type` of tracefs.
pub const TRACEFS_MAGIC: i64 = 0x7472_6163;

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
    fn fs_magic(&self, path: &Path) -> io::Result<i64> {
        let st = nix::sys::statfs::statfs(path)?;
        Ok(st.filesystem_type().0 as i64)
    }
    fn list_dir(&self, path: &Path) -> io::Result<Vec<String>> {
        std::fs::read_dir(path)?.map(|e| Ok(e?.file_name().to_string_lossy().into_owned())).collect()
    }
    fn mount(&self, fstype: &str, target: &Path) -> io::Result<()> {
        use nix::mount::MsFlags;
        let flags = MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC;
        nix::mount::mount(Some(fstype), target, Some(fstype), flags, None::<&str>)?;
        Ok(())
    }
    fn unmount(&self, target: &Path) -> io::Result<()> {
        nix::mount::umount(target)?;
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
    /// Mount points and their filesystem magic; a path is on the longest mount it starts with,
    /// else on a plain filesystem (magic 0).
    pub mounts: Mutex<BTreeMap<PathBuf, i64>>,
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
    fn fs_magic(&self, path: &Path) -> io::Result<i64> {
        if !self.exists(path) {
            return Err(not_found(path));
        }
        let mounts = self.mounts.lock().unwrap();
        Ok(mounts.iter().filter(|(m, _)| path.starts_with(m)).max_by_key(|(m, _)| m.as_os_str().len()).map_or(0, |(_, t)| *t))
    }
    fn list_dir(&self, path: &Path) -> io::Result<Vec<String>> {
        if !self.dirs.lock().unwrap().contains_key(path) {
            return Err(not_found(path));
        }
        let name = |p: &PathBuf| (p.parent() == Some(path)).then(|| p.file_name().unwrap_or_default().to_string_lossy().into_owned());
        let mut names: Vec<String> = self.files.lock().unwrap().keys().filter_map(name).collect();
        names.extend(self.dirs.lock().unwrap().keys().filter_map(name));
        Ok(names)
    }
    fn mount(&self, fstype: &str, target: &Path) -> io::Result<()> {
        if !self.dirs.lock().unwrap().contains_key(target) {
            return Err(not_found(target));
        }
        let magic = match fstype {
            "bpf" => BPF_FS_MAGIC,
            "tracefs" => TRACEFS_MAGIC,
            _ => return Err(io::Error::from_raw_os_error(libc::ENODEV)),
        };
        self.mounts.lock().unwrap().insert(target.to_path_buf(), magic);
        self.log(format!("mount {fstype} {}", target.display()));
        Ok(())
    }
    fn unmount(&self, target: &Path) -> io::Result<()> {
        self.mounts.lock().unwrap().remove(target).ok_or_else(|| io::Error::from_raw_os_error(libc::EINVAL))?;
        self.log(format!("umount {}", target.display()));
        Ok(())
    }
}
