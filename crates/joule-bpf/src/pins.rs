//! Pinning BPF objects on bpffs through one narrow seam, [`PinEffects`], so the order that
//! matters — the undo is journalled before the directory or pin exists, pins come off in
//! reverse — is unit-tested on [`FakePinEffects`] without root. [`RealPinEffects`] is the only
//! implementation that touches bpffs. Named like `joule_core::effects` (`Effects`,
//! `RealEffects`, `FakeEffects`) so it can join the per-concern split of that trait.

use crate::error::BpfError;
use joule_core::journal::{Journal, JournalError, Undo};
#[cfg(test)]
use std::collections::BTreeSet;
use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
#[cfg(test)]
use std::sync::Mutex;

/// The privileged side effects of pinning.
pub trait PinEffects {
    fn exists(&self, path: &Path) -> bool;
    /// Who owns `path` and its mode bits with the file type (`lstat`: a symlink is itself).
    fn owner_mode(&self, path: &Path) -> io::Result<(u32, u32)>;
    /// Creates a directory only its owner can enter (0700).
    fn create_dir(&self, path: &Path) -> io::Result<()>;
    /// Pins the BPF object behind `fd` at `path` (BPF_OBJ_PIN): it then outlives this process
    /// until the pin is removed. EEXIST when something is there already.
    fn pin(&self, fd: BorrowedFd<'_>, path: &Path) -> io::Result<()>;
    /// Removes a pin (unlink on bpffs); the object lives on while others hold it.
    fn unpin(&self, path: &Path) -> io::Result<()>;
    /// Removes an empty directory.
    fn remove_dir(&self, path: &Path) -> io::Result<()>;
}

/// bpffs itself.
#[derive(Debug, Default, Clone, Copy)]
pub struct RealPinEffects;

impl PinEffects for RealPinEffects {
    fn exists(&self, path: &Path) -> bool {
        path.exists()
    }
    fn owner_mode(&self, path: &Path) -> io::Result<(u32, u32)> {
        use std::os::unix::fs::MetadataExt;
        let md = path.symlink_metadata()?;
        Ok((md.uid(), md.mode()))
    }
    fn create_dir(&self, path: &Path) -> io::Result<()> {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new().mode(0o700).create(path)
    }
    fn pin(&self, fd: BorrowedFd<'_>, path: &Path) -> io::Result<()> {
        let c_path = CString::new(path.as_os_str().as_bytes()).map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        // SAFETY: `fd` is open for the duration of the call and `c_path` is NUL-terminated;
        // libbpf (1.x) returns 0 or a negative errno.
        let ret = unsafe { libbpf_sys::bpf_obj_pin(fd.as_raw_fd(), c_path.as_ptr()) };
        if ret < 0 {
            return Err(io::Error::from_raw_os_error(-ret));
        }
        Ok(())
    }
    fn unpin(&self, path: &Path) -> io::Result<()> {
        std::fs::remove_file(path)
    }
    fn remove_dir(&self, path: &Path) -> io::Result<()> {
        std::fs::remove_dir(path)
    }
}

/// An in-memory bpffs for unit tests: the paths that exist, and every mutating call in order.
#[cfg(test)]
#[derive(Debug, Default)]
pub struct FakePinEffects {
    /// Directories and pins that exist.
    pub paths: Mutex<BTreeSet<PathBuf>>,
    /// `mkdir P`, `pin P`, `unpin P`, `rmdir P`, in the order asked (failed calls too, with
    /// ` failed` appended); a test's undo recorder may add its own lines.
    pub log: Mutex<Vec<String>>,
    /// Pinning at this path fails with EPERM (a bpffs that refuses, an LSM that says no).
    pub refuse_pin: Mutex<Option<PathBuf>>,
    /// (uid, mode) of paths another user made; every other path is a 0700 directory of ours.
    pub owners: Mutex<std::collections::BTreeMap<PathBuf, (u32, u32)>>,
}

#[cfg(test)]
impl FakePinEffects {
    pub fn with_path(self, path: impl Into<PathBuf>) -> Self {
        self.paths.lock().unwrap().insert(path.into());
        self
    }
    pub fn log(&self, line: String) {
        self.log.lock().unwrap().push(line);
    }
    fn apply(&self, what: &str, path: &Path, r: io::Result<()>) -> io::Result<()> {
        self.log(format!("{what} {}{}", path.display(), if r.is_err() { " failed" } else { "" }));
        r
    }
    fn add(&self, path: &Path) -> io::Result<()> {
        let parent_known = path.parent().is_some_and(|p| p.parent().is_none() || self.exists(p));
        if !parent_known {
            return Err(io::Error::from_raw_os_error(libc::ENOENT));
        }
        if !self.paths.lock().unwrap().insert(path.to_path_buf()) {
            return Err(io::Error::from_raw_os_error(libc::EEXIST));
        }
        Ok(())
    }
    fn remove(&self, path: &Path) -> io::Result<()> {
        if self.paths.lock().unwrap().remove(path) {
            Ok(())
        } else {
            Err(io::Error::from_raw_os_error(libc::ENOENT))
        }
    }
}

#[cfg(test)]
impl PinEffects for FakePinEffects {
    fn exists(&self, path: &Path) -> bool {
        self.paths.lock().unwrap().contains(path)
    }
    fn owner_mode(&self, path: &Path) -> io::Result<(u32, u32)> {
        if !self.exists(path) {
            return Err(io::Error::from_raw_os_error(libc::ENOENT));
        }
        // SAFETY: geteuid has no preconditions and cannot fail.
        let me = unsafe { libc::geteuid() };
        Ok(self.owners.lock().unwrap().get(path).copied().unwrap_or((me, libc::S_IFDIR | 0o700)))
    }
    fn create_dir(&self, path: &Path) -> io::Result<()> {
        self.apply("mkdir", path, self.add(path))
    }
    fn pin(&self, _fd: BorrowedFd<'_>, path: &Path) -> io::Result<()> {
        let refused = self.refuse_pin.lock().unwrap().as_deref() == Some(path);
        let r = if refused { Err(io::Error::from_raw_os_error(libc::EPERM)) } else { self.add(path) };
        self.apply("pin", path, r)
    }
    fn unpin(&self, path: &Path) -> io::Result<()> {
        self.apply("unpin", path, self.remove(path))
    }
    fn remove_dir(&self, path: &Path) -> io::Result<()> {
        let busy = self.paths.lock().unwrap().iter().any(|p| p != path && p.starts_with(path));
        let r = if busy { Err(io::Error::from_raw_os_error(libc::ENOTEMPTY)) } else { self.remove(path) };
        self.apply("rmdir", path, r)
    }
}

/// Where a loader records the undo of each change it makes, before making it: the agent's
/// undo [`Journal`], or a test's recorder.
pub trait UndoRecorder {
    fn record(&mut self, owner: &str, undo: Undo) -> Result<(), JournalError>;
}

impl UndoRecorder for Journal {
    fn record(&mut self, owner: &str, undo: Undo) -> Result<(), JournalError> {
        Journal::record(self, owner, undo)
    }
}

/// The journal owner of every pin joule makes (and of the pin directory it creates).
pub const JOURNAL_OWNER: &str = "bpf";

/// The pins one loader made under one directory, in the order made.
#[derive(Debug)]
pub(crate) struct PinSet {
    dir: PathBuf,
    pinned: Vec<PathBuf>,
    created_dir: bool,
}

impl PinSet {
    pub(crate) fn new(dir: PathBuf) -> Self {
        Self { dir, pinned: Vec::new(), created_dir: false }
    }

    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }

    /// Pins each `(name, fd)` at `dir/name`, creating `dir` when it is missing. The undo of
    /// each step goes into `journal` before the step, so a crash at any point leaves nothing
    /// that `joule restore` does not know about. Refuses to take over an existing pin
    /// ([`BpfError::AlreadyPinned`]): another agent may be serving it. On error, what was
    /// made so far stays recorded here; [`Self::remove`] takes it away.
    pub(crate) fn pin_all(
        &mut self,
        fx: &dyn PinEffects,
        objects: &[(&str, BorrowedFd<'_>)],
        mut journal: Option<&mut dyn UndoRecorder>,
    ) -> Result<(), BpfError> {
        let io = |path: &Path| {
            let path = path.to_path_buf();
            move |source| BpfError::Io { path, source }
        };
        if !fx.exists(&self.dir) {
            if let Some(j) = journal.as_deref_mut() {
                j.record(JOURNAL_OWNER, Undo::RemoveDir { path: self.dir.clone(), evacuate_to: None })?;
            }
            fx.create_dir(&self.dir).map_err(io(&self.dir))?;
            self.created_dir = true;
        }
        // The directory is joule's only if nobody else could have put it there or can change
        // what is in it (issue 33): a pin dir another user made on a bpffs everyone may write
        // would let them move root's pins away or plant their own.
        let (uid, mode) = fx.owner_mode(&self.dir).map_err(io(&self.dir))?;
        // SAFETY: geteuid has no preconditions and cannot fail.
        let euid = unsafe { libc::geteuid() };
        let why = if mode & libc::S_IFMT != libc::S_IFDIR {
            Some("it is not a directory (a symlink?)".to_string())
        } else if uid != euid {
            Some(format!("it is owned by uid {uid}, not by uid {euid} that runs joule"))
        } else if mode & 0o022 != 0 {
            Some(format!("others may write it (mode {:o})", mode & 0o7777))
        } else {
            None
        };
        if let Some(why) = why {
            return Err(BpfError::Untrusted { path: self.dir.clone(), why });
        }
        for (name, fd) in objects {
            let path = self.dir.join(name);
            if fx.exists(&path) {
                return Err(BpfError::AlreadyPinned { path });
            }
            if let Some(j) = journal.as_deref_mut() {
                j.record(JOURNAL_OWNER, Undo::RemoveFile { path: path.clone() })?;
            }
            fx.pin(*fd, &path).map_err(io(&path))?;
            self.pinned.push(path);
        }
        Ok(())
    }

    /// Removes the pins, newest first (as the journal replays), then the directory if this
    /// set created it and it is empty: someone else's pin made there meanwhile keeps it, and
    /// that is not an error. A pin already gone is not an error either. Every pin is tried;
    /// the first failure is returned.
    pub(crate) fn remove(&mut self, fx: &dyn PinEffects) -> Result<(), BpfError> {
        let mut first_err = None;
        while let Some(path) = self.pinned.pop() {
            if let Err(source) = fx.unpin(&path) {
                if source.kind() != io::ErrorKind::NotFound {
                    first_err.get_or_insert(BpfError::Io { path, source });
                }
            }
        }
        if std::mem::take(&mut self.created_dir) {
            if let Err(e) = fx.remove_dir(&self.dir) {
                tracing::debug!("leaving {}: {e}", self.dir.display());
            }
        }
        first_err.map_or(Ok(()), Err)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    /// Records into the fake's own log, so journal lines and bpffs calls share one timeline,
    /// and notes every path that already existed when its undo was recorded.
    struct Recorder<'a> {
        fx: &'a FakePinEffects,
        existed: Vec<PathBuf>,
    }

    impl UndoRecorder for Recorder<'_> {
        fn record(&mut self, _owner: &str, undo: Undo) -> Result<(), JournalError> {
            let (kind, path) = match &undo {
                Undo::RemoveDir { path, .. } => ("rmdir", path),
                Undo::RemoveFile { path } => ("rm", path),
                other => panic!("pins journal only removals, got {other:?}"),
            };
            if self.fx.exists(path) {
                self.existed.push(path.clone());
            }
            self.fx.log(format!("journal {kind} {}", path.display()));
            Ok(())
        }
    }

    fn log(fx: &FakePinEffects) -> Vec<String> {
        std::mem::take(&mut *fx.log.lock().unwrap())
    }

    fn dev_null() -> std::fs::File {
        std::fs::File::open("/dev/null").unwrap()
    }

    #[test]
    fn each_undo_is_journalled_before_its_step_and_pins_come_off_newest_first() {
        let fx = FakePinEffects::default().with_path("/bpf");
        let (a, b) = (dev_null(), dev_null());
        let mut rec = Recorder { fx: &fx, existed: vec![] };
        let mut set = PinSet::new("/bpf/joule".into());
        set.pin_all(&fx, &[("stage", a.as_fd()), ("zones", b.as_fd())], Some(&mut rec)).unwrap();
        assert_eq!(rec.existed, Vec::<PathBuf>::new(), "journalled before it existed");
        assert_eq!(
            log(&fx),
            [
                "journal rmdir /bpf/joule",
                "mkdir /bpf/joule",
                "journal rm /bpf/joule/stage",
                "pin /bpf/joule/stage",
                "journal rm /bpf/joule/zones",
                "pin /bpf/joule/zones",
            ]
        );
        set.remove(&fx).unwrap();
        assert_eq!(log(&fx), ["unpin /bpf/joule/zones", "unpin /bpf/joule/stage", "rmdir /bpf/joule"]);
        assert_eq!(*fx.paths.lock().unwrap(), BTreeSet::from(["/bpf".into()]), "back as found");
        set.remove(&fx).unwrap();
        assert!(log(&fx).is_empty(), "a second removal does nothing");
    }

    #[test]
    fn a_directory_that_existed_is_neither_journalled_nor_removed() {
        let fx = FakePinEffects::default().with_path("/bpf").with_path("/bpf/joule");
        let f = dev_null();
        let mut rec = Recorder { fx: &fx, existed: vec![] };
        let mut set = PinSet::new("/bpf/joule".into());
        set.pin_all(&fx, &[("stage", f.as_fd())], Some(&mut rec)).unwrap();
        assert_eq!(log(&fx), ["journal rm /bpf/joule/stage", "pin /bpf/joule/stage"]);
        set.remove(&fx).unwrap();
        assert_eq!(log(&fx), ["unpin /bpf/joule/stage"]);
        assert!(fx.exists(Path::new("/bpf/joule")));
    }

    /// Issue 33, item 6: a pin dir another user made (on a bpffs anyone may write), one others
    /// may write, or a symlink is not joule's: nothing is pinned there.
    #[test]
    fn a_pin_dir_another_user_made_or_may_change_is_refused_before_any_pin() {
        for (owner_mode, why) in [
            ((64001, libc::S_IFDIR | 0o755), "owned by uid 64001"),
            ((unsafe_euid(), libc::S_IFDIR | 0o777), "others may write it (mode 777)"),
            ((unsafe_euid(), libc::S_IFLNK | 0o777), "not a directory"),
        ] {
            let fx = FakePinEffects::default().with_path("/bpf").with_path("/bpf/joule");
            fx.owners.lock().unwrap().insert("/bpf/joule".into(), owner_mode);
            let f = dev_null();
            let mut rec = Recorder { fx: &fx, existed: vec![] };
            let err = PinSet::new("/bpf/joule".into()).pin_all(&fx, &[("stage", f.as_fd())], Some(&mut rec)).unwrap_err();
            assert!(matches!(&err, BpfError::Untrusted { .. }) && err.to_string().contains(why), "{err}");
            assert!(log(&fx).is_empty(), "nothing journalled or pinned: {:?}", log(&fx));
        }
    }

    fn unsafe_euid() -> u32 {
        // SAFETY: geteuid has no preconditions and cannot fail.
        unsafe { libc::geteuid() }
    }

    #[test]
    fn an_existing_pin_is_refused_untouched_and_ours_come_off() {
        let fx = FakePinEffects::default().with_path("/bpf").with_path("/bpf/joule").with_path("/bpf/joule/zones");
        let (a, b) = (dev_null(), dev_null());
        let mut rec = Recorder { fx: &fx, existed: vec![] };
        let mut set = PinSet::new("/bpf/joule".into());
        let err = set.pin_all(&fx, &[("stage", a.as_fd()), ("zones", b.as_fd())], Some(&mut rec)).unwrap_err();
        assert!(matches!(&err, BpfError::AlreadyPinned { path } if path == Path::new("/bpf/joule/zones")), "{err}");
        assert_eq!(log(&fx), ["journal rm /bpf/joule/stage", "pin /bpf/joule/stage"], "the taken path is not journalled");
        set.remove(&fx).unwrap();
        assert_eq!(log(&fx), ["unpin /bpf/joule/stage"]);
        assert!(fx.exists(Path::new("/bpf/joule/zones")), "someone else's pin stays");
    }

    #[test]
    fn a_refused_pin_fails_the_load_and_a_busy_directory_stays() {
        let fx = FakePinEffects::default().with_path("/bpf");
        *fx.refuse_pin.lock().unwrap() = Some("/bpf/joule/zones".into());
        let (a, b) = (dev_null(), dev_null());
        let mut set = PinSet::new("/bpf/joule".into());
        let err = set.pin_all(&fx, &[("stage", a.as_fd()), ("zones", b.as_fd())], None).unwrap_err();
        assert!(matches!(&err, BpfError::Io { path, source } if path == Path::new("/bpf/joule/zones") && source.raw_os_error() == Some(libc::EPERM)), "{err}");
        // Someone pins into our directory meanwhile: we take only ours and leave the directory.
        fx.paths.lock().unwrap().insert("/bpf/joule/theirs".into());
        log(&fx);
        set.remove(&fx).unwrap();
        assert_eq!(log(&fx), ["unpin /bpf/joule/stage", "rmdir /bpf/joule failed"]);
        assert!(fx.exists(Path::new("/bpf/joule/theirs")));
    }

    #[test]
    fn a_journal_that_cannot_record_stops_before_the_step() {
        struct Full;
        impl UndoRecorder for Full {
            fn record(&mut self, _: &str, _: Undo) -> Result<(), JournalError> {
                Err(JournalError::Write { path: "/run/joule/undo.jsonl".into(), source: io::Error::from_raw_os_error(libc::ENOSPC) })
            }
        }
        let fx = FakePinEffects::default().with_path("/bpf");
        let f = dev_null();
        let mut set = PinSet::new("/bpf/joule".into());
        assert!(matches!(set.pin_all(&fx, &[("stage", f.as_fd())], Some(&mut Full)), Err(BpfError::Journal(_))));
        assert!(log(&fx).is_empty(), "nothing made without its undo on record");
    }
}
