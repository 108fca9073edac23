//! Mounts the pseudo-filesystems joule needs when a fresh machine lacks them — bpffs under the
//! pin directory, tracefs for a program that attaches through it — as cilium-agent and systemd
//! do, logging it once. The unmount is journalled *before* the mount, so `joule restore`, the
//! agent's shutdown and the next start leave the machine as it was found (an unmount happens
//! only while the filesystem is still empty: someone else's pins are never dropped).

use crate::effects::Effects;
pub use crate::effects::PseudoFs;
use crate::journal::{Journal, JournalError, Undo};
use std::io;
use std::path::{Path, PathBuf};

const JOURNAL_OWNER: &str = "mount";

#[derive(Debug, thiserror::Error)]
pub enum MountError {
    #[error("{dir} is not an absolute path")]
    Relative { dir: PathBuf },
    #[error(
        "{dir} is not on a {fs} filesystem and joule will not mount one over {at}, which is not empty: \
         mount it yourself (`mount -t {fs} {fs} DIR` on an empty DIR) and put the directory under it"
    )]
    NotEmpty { dir: PathBuf, at: PathBuf, fs: &'static str },
    #[error(
        "{dir} is not on a {fs} filesystem and mounting one at {at} failed: {source}{hint}; \
         mount it yourself with `mount -t {fs} {fs} {at}`"
    )]
    Mount { dir: PathBuf, at: PathBuf, fs: &'static str, source: io::Error, hint: &'static str },
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: io::Error },
    #[error("will not mount over {at}: {why}")]
    Untrusted { at: PathBuf, why: String },
    #[error("recording the unmount before mounting: {0}")]
    Journal(#[from] JournalError),
}

/// Makes sure `dir` (which need not exist yet) will be on a filesystem of type `fs`. When it is
/// not, mounts one at `dir`'s nearest existing ancestor, provided that directory is empty and not
/// `/` (for `/sys/fs/bpf/joule` on a fresh machine: at `/sys/fs/bpf`), recording the unmount in
/// `journal` first. Returns the mount point when it mounted something, `None` when `fs` was
/// already there.
pub fn ensure(fs: PseudoFs, dir: &Path, fx: &dyn Effects, journal: Option<&Journal>) -> Result<Option<PathBuf>, MountError> {
    if !dir.is_absolute() {
        return Err(MountError::Relative { dir: dir.to_path_buf() });
    }
    let at = dir.ancestors().find(|p| fx.exists(p)).unwrap_or(Path::new("/")).to_path_buf();
    let io = |source| MountError::Io { path: at.clone(), source };
    if fx.fs_magic(&at).map_err(io)? == fs.magic() {
        return Ok(None);
    }
    let fstype = fs.fstype();
    if at == Path::new("/") || !fs.is_empty(&at, fx).map_err(io)? {
        return Err(MountError::NotEmpty { dir: dir.to_path_buf(), at, fs: fstype });
    }
    // Where another user could have put a symlink or a directory of theirs, the mount would
    // land where they chose (issue 17): only a path of root's.
    let real = fx.resolve(&at).map_err(io)?;
    if real != at {
        return Err(MountError::Untrusted { why: format!("it is a symlink to {}", real.display()), at });
    }
    crate::private_fs::trusted_dir(&at).map_err(|e| MountError::Untrusted { at: at.clone(), why: e.to_string() })?;
    if let Some(j) = journal {
        j.record(JOURNAL_OWNER, Undo::Unmount { path: at.clone(), magic: fs.magic() })?;
    }
    if let Err(source) = fx.mount(fstype, &at) {
        let hint = match source.raw_os_error() {
            Some(libc::EPERM) => " (needs root: CAP_SYS_ADMIN in the initial user namespace)",
            Some(libc::ENODEV) => " (this kernel has no such filesystem)",
            _ => "",
        };
        return Err(MountError::Mount { dir: dir.to_path_buf(), at, fs: fstype, source, hint });
    }
    tracing::info!(
        "mounted {fstype} at {} (it was not mounted); it is unmounted again when joule undoes its changes, if nothing else was put there",
        at.display()
    );
    Ok(Some(at))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::effects::{FakeEffects, Mounts, BPF_FS_MAGIC, TRACEFS_MAGIC};
    use crate::journal;

    fn fake_with_dirs(dirs: &[&str]) -> FakeEffects {
        let fx = FakeEffects::default();
        for d in dirs {
            fx.dirs.lock().unwrap().insert(d.into(), ());
        }
        fx
    }

    #[test]
    fn mounts_at_the_nearest_existing_empty_ancestor_journalled_first() {
        let jdir = tempfile::tempdir().unwrap();
        let fx = fake_with_dirs(&["/", "/sys", "/sys/fs", "/sys/fs/bpf"]);
        let j = Journal::open(jdir.path()).unwrap();
        let at = ensure(PseudoFs::Bpf, Path::new("/sys/fs/bpf/joule"), &fx, Some(&j)).unwrap();
        assert_eq!(at.as_deref(), Some(Path::new("/sys/fs/bpf")));
        assert_eq!(fx.fs_magic(Path::new("/sys/fs/bpf")).unwrap(), BPF_FS_MAGIC);
        let recorded = journal::entries(jdir.path()).unwrap();
        assert_eq!(recorded[0].undo, Undo::Unmount { path: "/sys/fs/bpf".into(), magic: BPF_FS_MAGIC });
        // Already there: nothing more.
        assert_eq!(ensure(PseudoFs::Bpf, Path::new("/sys/fs/bpf/joule"), &fx, Some(&j)).unwrap(), None);
        assert_eq!(journal::entries(jdir.path()).unwrap().len(), 1);
        // Restore unmounts the filesystem that holds only bpffs's own preload iterators.
        fx.files.lock().unwrap().insert("/sys/fs/bpf/progs.debug".into(), String::new());
        fx.files.lock().unwrap().insert("/sys/fs/bpf/maps.debug".into(), String::new());
        let r = journal::Journal::open(jdir.path()).and_then(|j| j.restore_all(&fx)).unwrap();
        assert_eq!(r.undone, 1);
        assert_ne!(fx.fs_magic(Path::new("/sys/fs/bpf")).unwrap(), BPF_FS_MAGIC);
    }

    #[test]
    fn never_mounts_over_a_directory_with_something_in_it_or_over_root() {
        let fx = fake_with_dirs(&["/", "/tmp", "/tmp/other"]);
        let e = ensure(PseudoFs::Bpf, Path::new("/tmp/pins/joule"), &fx, None).unwrap_err();
        assert!(matches!(&e, MountError::NotEmpty { at, .. } if at == Path::new("/tmp")), "{e}");
        assert!(e.to_string().contains("mount -t bpf bpf"), "{e}");
        let fx = fake_with_dirs(&["/"]);
        assert!(matches!(ensure(PseudoFs::Bpf, Path::new("/joule"), &fx, None), Err(MountError::NotEmpty { .. })));
        assert!(matches!(ensure(PseudoFs::Bpf, Path::new("joule"), &fx, None), Err(MountError::Relative { .. })));
        assert!(fx.log.lock().unwrap().is_empty(), "nothing may be mounted");
    }

    #[test]
    fn tracefs_mounts_too_and_a_refused_mount_names_the_command_to_run() {
        let fx = fake_with_dirs(&["/", "/t"]);
        assert_eq!(ensure(PseudoFs::Tracefs, Path::new("/t/x"), &fx, None).unwrap().as_deref(), Some(Path::new("/t")));
        assert_eq!(fx.fs_magic(Path::new("/t/x")).unwrap_or(-1), -1, "/t/x does not exist");
        assert_eq!(fx.fs_magic(Path::new("/t")).unwrap(), TRACEFS_MAGIC);
        // A mount the kernel refuses (not root) names the reason and the command to run.
        let fx = fake_with_dirs(&["/", "/b"]);
        fx.fail_calls("mount bpf /b", libc::EPERM);
        let err = ensure(PseudoFs::Bpf, Path::new("/b/joule"), &fx, None).unwrap_err();
        let text = err.to_string();
        assert!(matches!(err, MountError::Mount { .. }) && text.contains("needs root") && text.contains("`mount -t bpf bpf /b`"), "{text}");
    }

    #[test]
    fn restore_leaves_a_mount_that_holds_someone_elses_pins() {
        let jdir = tempfile::tempdir().unwrap();
        let fx = fake_with_dirs(&["/", "/b"]);
        let j = Journal::open(jdir.path()).unwrap();
        ensure(PseudoFs::Bpf, Path::new("/b/joule"), &fx, Some(&j)).unwrap();
        fx.files.lock().unwrap().insert("/b/their_map".into(), String::new());
        let r = journal::Journal::open(jdir.path()).and_then(|j| j.restore_all(&fx)).unwrap();
        assert_eq!((r.undone, r.already_gone, r.failed.len()), (0, 1, 0));
        assert_eq!(fx.fs_magic(Path::new("/b")).unwrap(), BPF_FS_MAGIC, "their pins were dropped");
    }

    /// Issue 17: a symlink another user put on the pin directory's way must not choose where
    /// root mounts bpffs.
    #[test]
    fn never_mounts_through_a_symlink_or_below_a_directory_others_can_write() {
        use crate::effects::RealEffects;
        let t = tempfile::tempdir().unwrap();
        let target = t.path().join("root-only");
        std::fs::create_dir(&target).unwrap();
        std::os::unix::fs::symlink(&target, t.path().join("link")).unwrap();
        let e = ensure(PseudoFs::Bpf, &t.path().join("link/pins"), &RealEffects, None).unwrap_err();
        assert!(matches!(e, MountError::Untrusted { .. }) && e.to_string().contains("symlink"), "{e}");
        let open = t.path().join("open");
        std::fs::create_dir(&open).unwrap();
        std::fs::set_permissions(&open, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
        let e = ensure(PseudoFs::Bpf, &open.join("pins"), &RealEffects, None).unwrap_err();
        assert!(e.to_string().contains("writable by others"), "{e}");
    }
}
