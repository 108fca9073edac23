//! Files only joule's own user writes: the journal directory, the agent lock, the undo journal
//! and the event log. The agent runs as root and acts on what the journal says, so a journal
//! another user could plant, swap or point elsewhere would hand them root writes (issue 17).
//!
//! The rules, checked at every open (docs/security.md):
//! - every directory above a private directory is owned by root or by us, and nobody else can
//!   write it unless it is sticky (/tmp), so no other user can rename or replace anything on the
//!   way down; a symlink on the way is owned by root or us (another user's could be re-pointed
//!   later); the way is walked one component at a time, each opened relative to the fd of the
//!   one above it after that one was judged (issue 33);
//! - the private directory itself is owned by us and writable by nobody else; joule creates it
//!   0700;
//! - files in it are opened relative to the directory's fd with `O_NOFOLLOW` (a planted
//!   symlink is refused, not followed), must be regular files we own, writable by nobody else,
//!   with one link (a hard link to a victim file is refused); joule creates them 0600 and
//!   tightens one it owns to 0600.

use nix::fcntl::{openat, OFlag};
use nix::sys::stat::{fchmod, fstat, mkdirat, Mode, SFlag};
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// Why a path is not private.
#[derive(Debug, thiserror::Error)]
pub enum PrivateError {
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: io::Error },
    #[error("refusing {path}: {why}")]
    Unsafe { path: PathBuf, why: String },
}

fn io_err(path: &Path) -> impl FnOnce(nix::Error) -> PrivateError + '_ {
    move |e| PrivateError::Io { path: path.to_path_buf(), source: io::Error::from(e) }
}

fn unsafe_path(path: &Path, why: impl Into<String>) -> PrivateError {
    PrivateError::Unsafe { path: path.to_path_buf(), why: why.into() }
}

/// Our effective uid: the owner every private file must have.
fn me() -> u32 {
    nix::unistd::geteuid().as_raw()
}

/// Group or others may write.
const SHARED_WRITE: u32 = 0o022;
const STICKY: u32 = 0o1000;

/// Links followed on the way to a private directory before giving up (the kernel's own bound).
const MAX_LINKS: usize = 40;

/// Opens, component by component from `/` as the kernel resolves it, the directory `parent` a
/// private directory goes into, creating what is missing (0755) relative to the directory
/// above it, and returns its fd. Each directory on the way is judged when it is open (owned by
/// root or us, writable by nobody else unless sticky), and every later step is taken relative
/// to that fd, so nothing another user changes afterwards (a rename, a link re-pointed) can
/// send joule elsewhere. A symlink on the way is followed only when root or we own it: one that
/// another user planted could be re-pointed later, wherever it sits. `create`: make what is
/// missing; a client (which must not create the agent's directories) gets `NotFound` instead.
fn open_parent(dir: &Path, parent: &Path, create: bool) -> Result<OwnedFd, PrivateError> {
    let open_dir = |at: Option<&OwnedFd>, name: &Path| -> nix::Result<OwnedFd> {
        let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
        let fd = openat(at.map(|f| f.as_raw_fd()), name, flags, Mode::empty())?;
        // SAFETY: openat returned a new fd that nothing else owns.
        Ok(unsafe { OwnedFd::from_raw_fd(fd) })
    };
    let judge = |fd: &OwnedFd, at: &Path| -> Result<(), PrivateError> {
        let st = fstat(fd.as_raw_fd()).map_err(io_err(at))?;
        judge_on_the_way(dir, at, st.st_uid, st.st_mode)
    };
    let mut at = PathBuf::from("/");
    let mut cur = open_dir(None, &at).map_err(io_err(&at))?;
    judge(&cur, &at)?;
    let mut todo: std::collections::VecDeque<std::ffi::OsString> = components(parent);
    let mut links = 0;
    while let Some(name) = todo.pop_front() {
        let name_path = Path::new(&name);
        if name == ".." {
            at.pop();
        } else {
            at.push(&name);
        }
        let next = match open_dir(Some(&cur), name_path) {
            Ok(fd) => fd,
            Err(nix::Error::ENOENT) if create => match mkdirat(Some(cur.as_raw_fd()), name_path, Mode::from_bits_truncate(0o755)) {
                Ok(()) | Err(nix::Error::EEXIST) => open_dir(Some(&cur), name_path).map_err(io_err(&at))?,
                Err(e) => return Err(io_err(&at)(e)),
            },
            Err(nix::Error::ELOOP | nix::Error::ENOTDIR) => {
                // A symlink (or not a directory at all): judged by who owns the link itself.
                let st = nix::sys::stat::fstatat(Some(cur.as_raw_fd()), name_path, nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW).map_err(io_err(&at))?;
                if SFlag::from_bits_truncate(st.st_mode & SFlag::S_IFMT.bits()) != SFlag::S_IFLNK {
                    return Err(unsafe_path(dir, format!("{} on its way is not a directory", at.display())));
                }
                if st.st_uid != 0 && st.st_uid != me() {
                    return Err(unsafe_path(dir, format!("{} on its way is a symlink owned by uid {}, who could re-point it", at.display(), st.st_uid)));
                }
                links += 1;
                if links > MAX_LINKS {
                    return Err(unsafe_path(dir, format!("more than {MAX_LINKS} symlinks on its way")));
                }
                let target = nix::fcntl::readlinkat(Some(cur.as_raw_fd()), name_path).map_err(io_err(&at))?;
                at.pop();
                let target = PathBuf::from(target);
                for c in components(&target).into_iter().rev() {
                    todo.push_front(c);
                }
                if target.is_absolute() {
                    at = PathBuf::from("/");
                    cur = open_dir(None, &at).map_err(io_err(&at))?;
                }
                continue;
            }
            Err(e) => return Err(io_err(&at)(e)),
        };
        judge(&next, &at)?;
        cur = next;
    }
    Ok(cur)
}

/// The names of `p`'s components below `/` (`..` kept, `.` dropped).
fn components(p: &Path) -> std::collections::VecDeque<std::ffi::OsString> {
    use std::path::Component;
    p.components()
        .filter_map(|c| match c {
            Component::Normal(n) => Some(n.to_os_string()),
            Component::ParentDir => Some("..".into()),
            _ => None,
        })
        .collect()
}

/// `a`, a directory on the way to `dir`: owned by root or us, and writable by nobody else
/// unless sticky.
fn judge_on_the_way(dir: &Path, a: &Path, uid: u32, mode: u32) -> Result<(), PrivateError> {
    if uid != 0 && uid != me() {
        return Err(unsafe_path(dir, format!("{} on its way is owned by uid {uid}, who could replace what is below it", a.display())));
    }
    if mode & SHARED_WRITE != 0 && mode & STICKY == 0 {
        return Err(unsafe_path(dir, format!("{} on its way is writable by others (mode {:o}) and not sticky", a.display(), mode & 0o7777)));
    }
    Ok(())
}

/// Checks that no other user controls `dir` or anything above it (each existing one owned by
/// root or us, writable by nobody else unless sticky): a place root may mount or create
/// something at without another user choosing where it lands.
pub fn trusted_dir(dir: &Path) -> Result<(), PrivateError> {
    for a in dir.ancestors().filter(|a| a.symlink_metadata().is_ok()) {
        let md = a.symlink_metadata().map_err(|source| PrivateError::Io { path: a.to_path_buf(), source })?;
        if md.file_type().is_symlink() {
            return Err(unsafe_path(dir, format!("{} on its way is a symlink", a.display())));
        }
        judge_on_the_way(dir, a, md.uid(), md.mode())?;
    }
    Ok(())
}

/// A directory only we write, created 0700 (with its missing parents, 0755) when missing;
/// returns an fd to open files in it with [`open_in`]. Refuses a directory owned by another
/// user, writable by group or others, a symlink, or one below a directory or a symlink another
/// user controls. The way down is judged and walked one component at a time by fd
/// ([`open_parent`]), never resolved by path again.
pub fn private_dir(dir: &Path) -> Result<OwnedFd, PrivateError> {
    if !dir.is_absolute() {
        return Err(unsafe_path(dir, "a private directory must be an absolute path"));
    }
    let (Some(parent), Some(name)) = (dir.parent(), dir.file_name()) else {
        return Err(unsafe_path(dir, "a private directory needs a name below /"));
    };
    let parent_fd = open_parent(dir, parent, true)?;
    match mkdirat(Some(parent_fd.as_raw_fd()), name, Mode::from_bits_truncate(0o700)) {
        Ok(()) | Err(nix::Error::EEXIST) => {}
        Err(e) => return Err(io_err(dir)(e)),
    }
    let fd =
        openat(Some(parent_fd.as_raw_fd()), name, OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC, Mode::empty()).map_err(|e| {
            match e {
                nix::Error::ELOOP | nix::Error::ENOTDIR => unsafe_path(dir, "it is a symlink or not a directory"),
                e => io_err(dir)(e),
            }
        })?;
    // SAFETY: openat returned a new fd that nothing else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let st = fstat(fd.as_raw_fd()).map_err(io_err(dir))?;
    if st.st_uid != me() {
        return Err(unsafe_path(dir, format!("it is owned by uid {}, not by uid {} that runs joule", st.st_uid, me())));
    }
    if st.st_mode & SHARED_WRITE != 0 {
        return Err(unsafe_path(dir, format!("it is writable by group or others (mode {:o}); make it 0700", st.st_mode & 0o7777)));
    }
    Ok(fd)
}

/// The existing directory `dir` as a client of the agent must find it before it believes what
/// is in it (the agent's socket, the nap's status): owned by root or by us, writable by nobody
/// else (sticky or not), below directories judged as [`private_dir`] judges them and walked the
/// same way, by fd. Nothing is created (a missing one is `NotFound`); unlike a private
/// directory it may be root's while we are not, and others may read it (a DaemonSet's 0755).
/// Returns its fd: open what is in it relative to that, never by the path again.
pub fn trusted_existing_dir(dir: &Path) -> Result<OwnedFd, PrivateError> {
    if !dir.is_absolute() {
        return Err(unsafe_path(dir, "the agent's directory must be an absolute path"));
    }
    let (Some(parent), Some(name)) = (dir.parent(), dir.file_name()) else {
        return Err(unsafe_path(dir, "the agent's directory needs a name below /"));
    };
    let parent_fd = open_parent(dir, parent, false)?;
    let fd =
        openat(Some(parent_fd.as_raw_fd()), name, OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC, Mode::empty()).map_err(|e| {
            match e {
                nix::Error::ELOOP | nix::Error::ENOTDIR => unsafe_path(dir, "it is a symlink or not a directory"),
                e => io_err(dir)(e),
            }
        })?;
    // SAFETY: openat returned a new fd that nothing else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let st = fstat(fd.as_raw_fd()).map_err(io_err(dir))?;
    if st.st_uid != 0 && st.st_uid != me() {
        return Err(unsafe_path(dir, format!("it is owned by uid {}, not by root or uid {}: another user's directory", st.st_uid, me())));
    }
    if st.st_mode & SHARED_WRITE != 0 {
        return Err(unsafe_path(dir, format!("it is writable by group or others (mode {:o}): anyone could have put what is in it", st.st_mode & 0o7777)));
    }
    Ok(fd)
}

/// How to open a private file.
#[derive(Debug, Clone, Copy)]
pub enum Access {
    /// Append, creating it (the journal, the event log).
    Append,
    /// Read and write, creating it, not truncated (the agent lock).
    ReadWrite,
    /// Read only; `NotFound` when missing.
    Read,
}

/// Opens `name` in the private directory `dir_fd` (`dir` names it in errors) with `O_NOFOLLOW`,
/// created 0600 when missing, and checks it is a regular file we own, writable by nobody
/// else, with one link; a file of ours that others may read is tightened to 0600.
pub fn open_in(dir_fd: &OwnedFd, dir: &Path, name: &str, access: Access) -> Result<File, PrivateError> {
    let path = dir.join(name);
    let base = OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC | OFlag::O_NOCTTY | OFlag::O_NONBLOCK;
    let flags = match access {
        Access::Append => base | OFlag::O_WRONLY | OFlag::O_APPEND | OFlag::O_CREAT,
        Access::ReadWrite => base | OFlag::O_RDWR | OFlag::O_CREAT,
        Access::Read => base | OFlag::O_RDONLY,
    };
    let fd = openat(Some(dir_fd.as_raw_fd()), name, flags, Mode::from_bits_truncate(0o600)).map_err(|e| match e {
        nix::Error::ELOOP => unsafe_path(&path, "it is a symlink"),
        e => io_err(&path)(e),
    })?;
    // SAFETY: openat returned a new fd that nothing else owns.
    let file = unsafe { File::from_raw_fd(fd) };
    let st = fstat(file.as_raw_fd()).map_err(io_err(&path))?;
    if SFlag::from_bits_truncate(st.st_mode & SFlag::S_IFMT.bits()) != SFlag::S_IFREG {
        return Err(unsafe_path(&path, "it is not a regular file"));
    }
    if st.st_uid != me() {
        return Err(unsafe_path(&path, format!("it is owned by uid {}, not by uid {} that runs joule", st.st_uid, me())));
    }
    if st.st_nlink != 1 {
        return Err(unsafe_path(&path, format!("it has {} hard links", st.st_nlink)));
    }
    if st.st_mode & SHARED_WRITE != 0 {
        return Err(unsafe_path(&path, format!("it is writable by group or others (mode {:o})", st.st_mode & 0o7777)));
    }
    if st.st_mode & 0o077 != 0 {
        fchmod(file.as_raw_fd(), Mode::from_bits_truncate(0o600)).map_err(io_err(&path))?;
    }
    // Blocking from here on (O_NONBLOCK only kept a FIFO from hanging the open).
    nix::fcntl::fcntl(file.as_raw_fd(), nix::fcntl::FcntlArg::F_SETFL(flags & OFlag::O_APPEND)).map_err(io_err(&path))?;
    Ok(file)
}

/// `path`'s file in its directory, both checked: [`private_dir`] on the parent, then
/// [`open_in`].
pub fn open_private(path: &Path, access: Access) -> Result<File, PrivateError> {
    let (Some(dir), Some(name)) = (path.parent(), path.file_name().and_then(|n| n.to_str())) else {
        return Err(unsafe_path(path, "not a file path"));
    };
    let fd = private_dir(dir)?;
    open_in(&fd, dir, name, access)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn creates_a_0700_dir_and_0600_files_and_reopens_them() {
        let t = tempfile::tempdir().unwrap();
        let dir = t.path().join("a/journal");
        let fd = private_dir(&dir).unwrap();
        assert_eq!(std::fs::metadata(&dir).unwrap().mode() & 0o777, 0o700);
        use std::io::Write;
        writeln!(open_in(&fd, &dir, "undo.jsonl", Access::Append).unwrap(), "x").unwrap();
        writeln!(open_in(&fd, &dir, "undo.jsonl", Access::Append).unwrap(), "y").unwrap();
        assert_eq!(std::fs::metadata(dir.join("undo.jsonl")).unwrap().mode() & 0o777, 0o600);
        assert_eq!(std::fs::read_to_string(dir.join("undo.jsonl")).unwrap(), "x\ny\n");
        assert!(matches!(open_in(&fd, &dir, "none", Access::Read), Err(PrivateError::Io { source, .. }) if source.kind() == io::ErrorKind::NotFound));
    }

    #[test]
    fn refuses_symlinks_hard_links_shared_modes_and_relative_paths() {
        let t = tempfile::tempdir().unwrap();
        let dir = t.path().join("j");
        let fd = private_dir(&dir).unwrap();
        let victim = t.path().join("victim");
        std::fs::write(&victim, "secret").unwrap();
        std::os::unix::fs::symlink(&victim, dir.join("undo.jsonl")).unwrap();
        let e = open_in(&fd, &dir, "undo.jsonl", Access::Append).unwrap_err().to_string();
        assert!(e.contains("symlink"), "{e}");
        std::fs::hard_link(&victim, dir.join("agent.lock")).unwrap();
        let e = open_in(&fd, &dir, "agent.lock", Access::ReadWrite).unwrap_err().to_string();
        assert!(e.contains("2 hard links"), "{e}");
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "secret", "nothing written through either");
        std::fs::write(dir.join("events.jsonl"), "").unwrap();
        std::fs::set_permissions(dir.join("events.jsonl"), std::fs::Permissions::from_mode(0o666)).unwrap();
        let e = open_in(&fd, &dir, "events.jsonl", Access::Append).unwrap_err().to_string();
        assert!(e.contains("writable by group or others (mode 666)"), "{e}");
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
        let e = private_dir(&dir).unwrap_err().to_string();
        assert!(e.contains("writable by group or others"), "{e}");
        let link = t.path().join("link");
        std::os::unix::fs::symlink(t.path().join("j"), &link).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
        let e = private_dir(&link).unwrap_err().to_string();
        assert!(e.contains("symlink"), "{e}");
        let e = private_dir(Path::new("run/joule")).unwrap_err().to_string();
        assert!(e.contains("absolute"), "{e}");
        std::fs::set_permissions(t.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
        let e = private_dir(&t.path().join("k")).unwrap_err().to_string();
        assert!(e.contains("writable by others") && e.contains("not sticky"), "{e}");
        std::fs::set_permissions(t.path(), std::fs::Permissions::from_mode(0o1777)).unwrap();
        private_dir(&t.path().join("k")).expect("a sticky shared directory on the way is fine, as /tmp");
    }

    #[test]
    fn a_clients_directory_is_ours_or_roots_unshared_and_never_created() {
        let t = tempfile::tempdir().unwrap();
        let dir = t.path().join("journal");
        let e = trusted_existing_dir(&dir).unwrap_err();
        assert!(matches!(&e, PrivateError::Io { source, .. } if source.kind() == io::ErrorKind::NotFound), "{e}");
        let e = trusted_existing_dir(&t.path().join("none/journal")).unwrap_err();
        assert!(matches!(&e, PrivateError::Io { source, .. } if source.kind() == io::ErrorKind::NotFound), "{e}");
        assert!(!dir.exists() && !t.path().join("none").exists(), "a client created a directory");
        std::fs::create_dir(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        trusted_existing_dir(&dir).expect("ours, readable by others: fine");
        for mode in [0o775, 0o1777] {
            std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(mode)).unwrap();
            let e = trusted_existing_dir(&dir).unwrap_err().to_string();
            assert!(e.contains("writable by group or others") && e.contains("anyone could have put"), "{e}");
        }
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
        let link = t.path().join("link");
        std::os::unix::fs::symlink(&dir, &link).unwrap();
        let e = trusted_existing_dir(&link).unwrap_err().to_string();
        assert!(e.contains("symlink"), "{e}");
        std::fs::set_permissions(t.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
        let e = trusted_existing_dir(&dir).unwrap_err().to_string();
        assert!(e.contains("writable by others") && e.contains("not sticky"), "{e}");
        std::fs::set_permissions(t.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
        assert!(trusted_existing_dir(Path::new("run/joule")).unwrap_err().to_string().contains("absolute"));
    }
}
