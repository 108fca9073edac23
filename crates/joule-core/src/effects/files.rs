//! Files: reads and writes of the kernel's file interfaces (cgroupfs, procfs, sysfs) and the
//! directories joule creates there (cgroups). The fake is an in-memory tree, and can serve a
//! fixture tree a test wrote to disk (a /proc of its own) through the same calls.

use super::{not_found, FakeEffects, RealEffects};
use std::io;
use std::path::{Path, PathBuf};

pub trait Files {
    /// A text file; `InvalidData` when it is not UTF-8. A file that can hold a name someone
    /// else chose (/proc/PID/stat, status, cgroup, comm; mountinfo) is read with
    /// [`read_bytes`](Files::read_bytes) instead, or one byte of theirs hides the whole file.
    fn read(&self, path: &Path) -> io::Result<String>;
    /// A file's bytes, whatever they are.
    fn read_bytes(&self, path: &Path) -> io::Result<Vec<u8>>;
    /// Where symlink `path` points (/proc/PID/exe), byte for byte.
    fn read_link(&self, path: &Path) -> io::Result<PathBuf>;
    /// One write(2) of the whole value to an existing file.
    fn write(&self, path: &Path, value: &str) -> io::Result<()>;
    fn create_dir(&self, path: &Path) -> io::Result<()>;
    fn remove_dir(&self, path: &Path) -> io::Result<()>;
    fn remove_file(&self, path: &Path) -> io::Result<()>;
    fn exists(&self, path: &Path) -> bool;
    /// Names of the entries of directory `path`, as text (a name that is not UTF-8 shows
    /// U+FFFD and cannot be joined back: walks of trees others name use `children`).
    fn list_dir(&self, path: &Path) -> io::Result<Vec<String>>;
    /// The entries of directory `path`, each its exact path: for walking a tree whose names
    /// others chose (a delegated cgroup subtree), where a lossy name would skip a directory.
    fn children(&self, path: &Path) -> io::Result<Vec<PathBuf>> {
        Ok(self.list_dir(path)?.into_iter().map(|n| path.join(n)).collect())
    }
    /// The id of the cgroup v2 directory `dir` (its inode on cgroup2, what `bpf_skb_cgroup_id`
    /// and `bpf_get_current_cgroup_id` return). An error when `dir` is not a cgroup2 directory.
    fn cgroup_id(&self, dir: &Path) -> io::Result<u64>;
    /// An exclusive flock on directory `dir`, held while the fd lives; `WouldBlock` when
    /// another process holds it. The fake locks nothing (`Ok(None)`).
    fn lock_dir(&self, _dir: &Path) -> io::Result<Option<std::os::fd::OwnedFd>> {
        Ok(None)
    }
}

impl Files for RealEffects {
    fn lock_dir(&self, dir: &Path) -> io::Result<Option<std::os::fd::OwnedFd>> {
        use std::os::fd::AsRawFd;
        use std::os::unix::fs::OpenOptionsExt;
        let f = std::fs::OpenOptions::new().read(true).custom_flags(libc::O_DIRECTORY | libc::O_CLOEXEC).open(dir)?;
        // SAFETY: flock on an fd we own.
        if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Some(f.into()))
    }
    fn read(&self, path: &Path) -> io::Result<String> {
        std::fs::read_to_string(path)
    }
    fn read_bytes(&self, path: &Path) -> io::Result<Vec<u8>> {
        std::fs::read(path)
    }
    fn read_link(&self, path: &Path) -> io::Result<PathBuf> {
        std::fs::read_link(path)
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
    fn list_dir(&self, path: &Path) -> io::Result<Vec<String>> {
        std::fs::read_dir(path)?.map(|e| Ok(e?.file_name().to_string_lossy().into_owned())).collect()
    }
    fn children(&self, path: &Path) -> io::Result<Vec<PathBuf>> {
        std::fs::read_dir(path)?.map(|e| Ok(e?.path())).collect()
    }
    fn cgroup_id(&self, dir: &Path) -> io::Result<u64> {
        use std::os::unix::fs::MetadataExt;
        let m = std::fs::metadata(dir)?;
        let fs = nix::sys::statfs::statfs(dir).map_err(io::Error::from)?;
        if !m.is_dir() || fs.filesystem_type() != nix::sys::statfs::CGROUP2_SUPER_MAGIC {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("{}: not a cgroup v2 directory", dir.display())));
        }
        Ok(m.ino())
    }
}

impl FakeEffects {
    /// Whether `path` lies in a fixture tree on disk (`with_tree`).
    fn on_disk(&self, path: &Path) -> bool {
        self.trees.lock().unwrap().iter().any(|t| path.starts_with(t))
    }
}

impl Files for FakeEffects {
    fn read(&self, path: &Path) -> io::Result<String> {
        let bytes = self.read_bytes(path)?;
        String::from_utf8(bytes).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
    }
    fn read_bytes(&self, path: &Path) -> io::Result<Vec<u8>> {
        if let Some(e) = self.failing(&format!("read {}", path.display())) {
            return Err(e);
        }
        if let Some(v) = self.reads.lock().unwrap().get_mut(path).and_then(|q| q.pop_front()) {
            return Ok(v.into_bytes());
        }
        if self.on_disk(path) {
            return std::fs::read(path);
        }
        if let Some(b) = self.raw.lock().unwrap().get(path) {
            return Ok(b.clone());
        }
        self.file(path).map(String::into_bytes).ok_or_else(|| not_found(path.display()))
    }
    fn read_link(&self, path: &Path) -> io::Result<PathBuf> {
        if self.on_disk(path) {
            return std::fs::read_link(path);
        }
        self.symlinks.lock().unwrap().get(path).cloned().ok_or_else(|| not_found(path.display()))
    }
    fn write(&self, path: &Path, value: &str) -> io::Result<()> {
        self.act(format!("write {} {}", path.display(), value.trim_end()), || {
            if self.read_only.lock().unwrap().iter().any(|p| path.starts_with(p)) {
                return Err(io::Error::from_raw_os_error(libc::EACCES));
            }
            let mut files = self.files.lock().unwrap();
            let dir_known = path.parent().is_some_and(|p| self.dirs.lock().unwrap().contains_key(p));
            if !files.contains_key(path) && !dir_known {
                return Err(not_found(path.display()));
            }
            files.insert(path.to_path_buf(), value.to_string());
            Ok(())
        })
    }
    fn create_dir(&self, path: &Path) -> io::Result<()> {
        self.act(format!("mkdir {}", path.display()), || {
            if self.dirs.lock().unwrap().insert(path.to_path_buf(), ()).is_some() {
                return Err(io::Error::new(io::ErrorKind::AlreadyExists, path.display().to_string()));
            }
            let mut files = self.files.lock().unwrap();
            for (_, file, content) in self.mkdir_files.lock().unwrap().iter().filter(|(p, _, _)| path.starts_with(p) && path != p) {
                files.insert(path.join(file), content.clone());
            }
            Ok(())
        })
    }
    fn remove_dir(&self, path: &Path) -> io::Result<()> {
        self.act(format!("rmdir {}", path.display()), || {
            self.dirs.lock().unwrap().remove(path).ok_or_else(|| not_found(path.display()))?;
            self.files.lock().unwrap().retain(|p, _| !p.starts_with(path));
            Ok(())
        })
    }
    fn remove_file(&self, path: &Path) -> io::Result<()> {
        self.act(format!("rm {}", path.display()), || self.files.lock().unwrap().remove(path).map(drop).ok_or_else(|| not_found(path.display())))
    }
    fn exists(&self, path: &Path) -> bool {
        (self.on_disk(path) && path.exists())
            || self.files.lock().unwrap().contains_key(path)
            || self.dirs.lock().unwrap().contains_key(path)
            || self.raw.lock().unwrap().contains_key(path)
            || self.symlinks.lock().unwrap().contains_key(path)
    }
    fn list_dir(&self, path: &Path) -> io::Result<Vec<String>> {
        if self.on_disk(path) {
            return RealEffects.list_dir(path);
        }
        if !self.dirs.lock().unwrap().contains_key(path) {
            return Err(not_found(path.display()));
        }
        let name = |p: &PathBuf| (p.parent() == Some(path)).then(|| p.file_name().unwrap_or_default().to_string_lossy().into_owned());
        let mut names: Vec<String> = self.files.lock().unwrap().keys().filter_map(name).collect();
        names.extend(self.dirs.lock().unwrap().keys().filter_map(name));
        names.extend(self.raw.lock().unwrap().keys().filter_map(name));
        names.extend(self.symlinks.lock().unwrap().keys().filter_map(name));
        Ok(names)
    }
    fn children(&self, path: &Path) -> io::Result<Vec<PathBuf>> {
        if self.on_disk(path) {
            return RealEffects.children(path);
        }
        if !self.dirs.lock().unwrap().contains_key(path) {
            return Err(not_found(path.display()));
        }
        let mine = |p: &&PathBuf| p.parent() == Some(path);
        let mut out: Vec<PathBuf> = self.files.lock().unwrap().keys().filter(mine).cloned().collect();
        out.extend(self.dirs.lock().unwrap().keys().filter(mine).cloned());
        out.extend(self.raw.lock().unwrap().keys().filter(mine).cloned());
        out.extend(self.symlinks.lock().unwrap().keys().filter(mine).cloned());
        Ok(out)
    }
    /// A known directory's id is a hash of its path: stable, and distinct for distinct paths.
    fn cgroup_id(&self, dir: &Path) -> io::Result<u64> {
        use std::hash::{Hash, Hasher};
        if !self.dirs.lock().unwrap().contains_key(dir) {
            return Err(not_found(dir.display()));
        }
        let mut h = std::collections::hash_map::DefaultHasher::new();
        dir.hash(&mut h);
        Ok(h.finish())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_need_an_existing_file_or_a_known_directory_and_read_only_paths_refuse() {
        let fx = FakeEffects::default().with_dir("/cg").with_file("/sys/knob", "1");
        fx.read_only.lock().unwrap().push("/sys".into());
        assert_eq!(fx.write(Path::new("/nowhere/x"), "1").unwrap_err().kind(), io::ErrorKind::NotFound);
        assert_eq!(fx.write(Path::new("/sys/knob"), "2").unwrap_err().raw_os_error(), Some(libc::EACCES));
        fx.write(Path::new("/cg/cgroup.procs"), "7\n").unwrap();
        assert_eq!(fx.read(Path::new("/cg/cgroup.procs")).unwrap(), "7\n");
        assert_eq!(fx.calls(), vec!["write /cg/cgroup.procs 7"], "refused writes are not logged");
    }

    #[test]
    fn directories_list_their_entries_and_take_their_files_with_them() {
        let fx = FakeEffects::default().with_dir("/cg");
        fx.create_dir(Path::new("/cg/joule")).unwrap();
        assert_eq!(fx.create_dir(Path::new("/cg/joule")).unwrap_err().kind(), io::ErrorKind::AlreadyExists);
        fx.write(Path::new("/cg/joule/cpu.max"), "max").unwrap();
        fx.write(Path::new("/cg/cgroup.procs"), "").unwrap();
        let mut names = fx.list_dir(Path::new("/cg")).unwrap();
        names.sort();
        assert_eq!(names, vec!["cgroup.procs", "joule"]);
        fx.remove_dir(Path::new("/cg/joule")).unwrap();
        assert!(!fx.exists(Path::new("/cg/joule/cpu.max")));
        fx.remove_file(Path::new("/cg/cgroup.procs")).unwrap();
        assert_eq!(fx.remove_file(Path::new("/cg/cgroup.procs")).unwrap_err().kind(), io::ErrorKind::NotFound);
        assert_eq!(fx.calls(), vec!["mkdir /cg/joule", "write /cg/joule/cpu.max max", "write /cg/cgroup.procs ", "rmdir /cg/joule", "rm /cg/cgroup.procs"]);
    }

    #[test]
    fn bytes_that_are_not_utf8_are_read_whole_and_refused_as_text() {
        let fx = FakeEffects::default().with_dir("/p/7").with_bytes("/p/7/comm", b"\xff\xfe\n").with_symlink("/p/7/exe", "/usr/bin/x");
        assert_eq!(fx.read_bytes(Path::new("/p/7/comm")).unwrap(), b"\xff\xfe\n");
        assert_eq!(fx.read(Path::new("/p/7/comm")).unwrap_err().kind(), io::ErrorKind::InvalidData, "as read_to_string does");
        assert_eq!(fx.read_link(Path::new("/p/7/exe")).unwrap(), Path::new("/usr/bin/x"));
        let mut names = fx.list_dir(Path::new("/p/7")).unwrap();
        names.sort();
        assert_eq!(names, ["comm", "exe"]);
        use std::os::unix::ffi::OsStringExt;
        let weird = PathBuf::from(std::ffi::OsString::from_vec(b"/p/7/\xff".to_vec()));
        let fx = fx.with_dir(&weird);
        assert_eq!(fx.list_dir(Path::new("/p/7")).unwrap().len(), 3);
        assert!(fx.children(Path::new("/p/7")).unwrap().contains(&weird), "children are exact where names are not");
    }

    #[test]
    fn a_fixture_tree_on_disk_is_read_through_the_fake() {
        let t = tempfile::tempdir().unwrap();
        std::fs::create_dir(t.path().join("7")).unwrap();
        std::fs::write(t.path().join("7/stat"), b"7 (\xff) S").unwrap();
        std::os::unix::fs::symlink("/bin/true", t.path().join("7/exe")).unwrap();
        let fx = FakeEffects::default().with_tree(t.path());
        assert_eq!(fx.read_bytes(&t.path().join("7/stat")).unwrap(), b"7 (\xff) S");
        assert_eq!(fx.read_link(&t.path().join("7/exe")).unwrap(), Path::new("/bin/true"));
        assert_eq!(fx.list_dir(t.path()).unwrap(), ["7"]);
        assert!(fx.exists(&t.path().join("7")) && !fx.exists(&t.path().join("8")));
        assert!(fx.read_bytes(Path::new("/etc/hostname")).is_err(), "nothing outside the tree");
    }

    #[test]
    fn scripted_reads_come_first_then_the_file() {
        let fx = FakeEffects::default().with_file("/f", "last");
        fx.then_reads("/f", &["one", "two"]);
        let got: Vec<String> = (0..3).map(|_| fx.read(Path::new("/f")).unwrap()).collect();
        assert_eq!(got, vec!["one", "two", "last"]);
    }
}
