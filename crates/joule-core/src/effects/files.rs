//! Files: reads and writes of the kernel's file interfaces (cgroupfs, procfs, sysfs) and the
//! directories joule creates there (cgroups). The fake is an in-memory tree.

use super::{not_found, FakeEffects, RealEffects};
use std::io;
use std::path::{Path, PathBuf};

pub trait Files {
    fn read(&self, path: &Path) -> io::Result<String>;
    /// One write(2) of the whole value to an existing file.
    fn write(&self, path: &Path, value: &str) -> io::Result<()>;
    fn create_dir(&self, path: &Path) -> io::Result<()>;
    fn remove_dir(&self, path: &Path) -> io::Result<()>;
    fn remove_file(&self, path: &Path) -> io::Result<()>;
    fn exists(&self, path: &Path) -> bool;
    /// Names of the entries of directory `path`.
    fn list_dir(&self, path: &Path) -> io::Result<Vec<String>>;
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

impl Files for FakeEffects {
    fn read(&self, path: &Path) -> io::Result<String> {
        if let Some(v) = self.reads.lock().unwrap().get_mut(path).and_then(|q| q.pop_front()) {
            return Ok(v);
        }
        self.file(path).ok_or_else(|| not_found(path.display()))
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
        self.files.lock().unwrap().contains_key(path) || self.dirs.lock().unwrap().contains_key(path)
    }
    fn list_dir(&self, path: &Path) -> io::Result<Vec<String>> {
        if !self.dirs.lock().unwrap().contains_key(path) {
            return Err(not_found(path.display()));
        }
        let name = |p: &PathBuf| (p.parent() == Some(path)).then(|| p.file_name().unwrap_or_default().to_string_lossy().into_owned());
        let mut names: Vec<String> = self.files.lock().unwrap().keys().filter_map(name).collect();
        names.extend(self.dirs.lock().unwrap().keys().filter_map(name));
        Ok(names)
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
    fn scripted_reads_come_first_then_the_file() {
        let fx = FakeEffects::default().with_file("/f", "last");
        fx.then_reads("/f", &["one", "two"]);
        let got: Vec<String> = (0..3).map(|_| fx.read(Path::new("/f")).unwrap()).collect();
        assert_eq!(got, vec!["one", "two", "last"]);
    }
}
