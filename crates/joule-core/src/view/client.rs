//! The client side of the agent's status socket (the `joule` crate's `agent::socket`), for
//! `joule status`, `joule monitor`, `joule nap status` and joule-bench's nap setup: root believes what it reads there, so it checks what it talks to as the
//! agent checks what it writes. The journal directory must be root's (or ours) and writable
//! by nobody else (`private_fs::trusted_existing_dir`), the socket in it a socket of root's,
//! reached through that directory's fd and never by the path again; the process that answers
//! must run as root (or as us), by its `SO_PEERCRED`; and the answer is read under a size cap
//! and one deadline for the whole read, so a server that drips bytes cannot hold the client.
//! A file the agent leaves there is read under the same rules ([`read_file`]). The answer is a
//! [`View`], or the client says why not.

use super::{View, SOCKET};
use crate::private_fs::{self, PrivateError};
use std::io::Read;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The largest view read: a node's whole snapshot and plan are a few MiB at most.
pub const MAX_VIEW_BYTES: usize = 16 << 20;
/// How long the whole exchange may take, connect to the last byte (the agent writes its view at
/// once; it serves one client at a time, each within its own 2 s).
pub const DEADLINE: Duration = Duration::from_secs(5);

/// Why there is no view.
#[derive(Debug)]
pub enum ClientError {
    /// Nothing answers: no directory, no socket, one a killed agent left, or one we may not reach.
    NoAgent(String),
    /// Something is there that is not root's agent (another user's directory or process): not read.
    Refused(String),
    /// The agent's answer was too large, too slow or not a view.
    Failed(String),
}

impl std::fmt::Display for ClientError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ClientError::NoAgent(why) | ClientError::Refused(why) | ClientError::Failed(why) => f.write_str(why),
        }
    }
}

impl std::error::Error for ClientError {}

/// The view of the agent whose journal directory is `dir`.
pub fn read(dir: &Path) -> Result<View, ClientError> {
    read_within(dir, MAX_VIEW_BYTES, DEADLINE)
}

/// [`read`] with its bounds given (tests make them small).
pub fn read_within(dir: &Path, max_bytes: usize, deadline: Duration) -> Result<View, ClientError> {
    let until = Instant::now() + deadline;
    let path = dir.join(SOCKET);
    let dir_fd = trusted(dir)?;
    judge_socket_file(&dir_fd, &path)?;
    let stream = connect(&dir_fd, &path, until)?;
    let peer = nix::sys::socket::getsockopt(&stream, nix::sys::socket::sockopt::PeerCredentials)
        .map_err(|e| ClientError::Failed(format!("{}: its peer's credentials: {e}", path.display())))?;
    judge_peer(&path, peer.uid(), peer.pid(), nix::unistd::geteuid().as_raw())?;
    let body = read_bounded(UnixStream::from(stream), &path, max_bytes, until)?;
    serde_json::from_slice(&body).map_err(|e| ClientError::Failed(format!("{}: the answer is not a view ({e})", path.display())))
}

/// The agent's directory, judged (`private_fs::trusted_existing_dir`): missing or out of our
/// reach is no agent; another user's, or one others may write, is refused.
fn trusted(dir: &Path) -> Result<OwnedFd, ClientError> {
    private_fs::trusted_existing_dir(dir).map_err(|e| match e {
        PrivateError::Io { source, .. } if matches!(source.kind(), std::io::ErrorKind::NotFound | std::io::ErrorKind::PermissionDenied) => {
            ClientError::NoAgent(format!("{}: {source}", dir.display()))
        }
        e => ClientError::Refused(e.to_string()),
    })
}

/// A file the agent keeps in its journal directory, read as the socket is:
/// the directory judged, the file opened by the directory's fd without following a link, a
/// regular file of root's (or ours) that nobody else may write, at most `max_bytes`.
pub fn read_file(dir: &Path, name: &str, max_bytes: u64) -> Result<String, ClientError> {
    use nix::fcntl::{openat, OFlag};
    use nix::sys::stat::{fstat, Mode, SFlag};
    use std::os::fd::FromRawFd;
    let path = dir.join(name);
    let dir_fd = trusted(dir)?;
    let flags = OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK | OFlag::O_NOCTTY | OFlag::O_CLOEXEC;
    let fd = match openat(Some(dir_fd.as_raw_fd()), name, flags, Mode::empty()) {
        Ok(fd) => fd,
        Err(nix::Error::ELOOP) => return Err(ClientError::Refused(format!("refusing {}: it is a symlink", path.display()))),
        Err(e) => return Err(ClientError::NoAgent(format!("{}: {e}", path.display()))),
    };
    // SAFETY: openat returned a new fd that nothing else owns.
    let file = unsafe { std::fs::File::from_raw_fd(fd) };
    let st = fstat(file.as_raw_fd()).map_err(|e| ClientError::Failed(format!("{}: {e}", path.display())))?;
    let me = nix::unistd::geteuid().as_raw();
    if SFlag::from_bits_truncate(st.st_mode & SFlag::S_IFMT.bits()) != SFlag::S_IFREG {
        return Err(ClientError::Refused(format!("refusing {}: it is not a regular file", path.display())));
    }
    if st.st_uid != 0 && st.st_uid != me {
        return Err(ClientError::Refused(format!("refusing {}: it is owned by uid {}, not by root", path.display(), st.st_uid)));
    }
    if st.st_mode & 0o022 != 0 {
        return Err(ClientError::Refused(format!("refusing {}: others may write it (mode {:o})", path.display(), st.st_mode & 0o7777)));
    }
    let mut text = String::new();
    file.take(max_bytes + 1).read_to_string(&mut text).map_err(|e| ClientError::Failed(format!("{}: {e}", path.display())))?;
    if text.len() as u64 > max_bytes {
        return Err(ClientError::Failed(format!("{}: larger than {max_bytes} bytes; not read further", path.display())));
    }
    Ok(text)
}

/// The socket's own entry: a socket (not a symlink, not a file) of root's or ours.
fn judge_socket_file(dir_fd: &OwnedFd, path: &Path) -> Result<(), ClientError> {
    use nix::sys::stat::{fstatat, SFlag};
    let st = match fstatat(Some(dir_fd.as_raw_fd()), SOCKET, nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW) {
        Ok(st) => st,
        Err(nix::Error::ENOENT) => return Err(ClientError::NoAgent(format!("{}: no socket", path.display()))),
        Err(e) => return Err(ClientError::NoAgent(format!("{}: {e}", path.display()))),
    };
    if SFlag::from_bits_truncate(st.st_mode & SFlag::S_IFMT.bits()) != SFlag::S_IFSOCK {
        return Err(ClientError::Refused(format!("refusing {}: it is not a socket", path.display())));
    }
    let me = nix::unistd::geteuid().as_raw();
    if st.st_uid != 0 && st.st_uid != me {
        return Err(ClientError::Refused(format!("refusing {}: the socket is owned by uid {}, not by root", path.display(), st.st_uid)));
    }
    Ok(())
}

/// The process answering must be root's agent (or, for a user's own agent, that user's).
fn judge_peer(path: &Path, uid: u32, pid: i32, me: u32) -> Result<(), ClientError> {
    if uid == 0 || uid == me {
        return Ok(());
    }
    Err(ClientError::Refused(format!(
        "refusing {}: the process answering there (pid {pid}) runs as uid {uid}, not as root: it is not joule's agent, and nothing it says was read",
        path.display()
    )))
}

/// Connects through the directory's fd (`/proc/self/fd/N/agent.sock`: the path is not resolved
/// again, and its length is no longer the socket address's 108 bytes). Non-blocking, so a
/// server whose queue is full is retried until `until` instead of hanging the client.
fn connect(dir_fd: &OwnedFd, path: &Path, until: Instant) -> Result<OwnedFd, ClientError> {
    use nix::sys::socket::{connect, socket, AddressFamily, SockFlag, SockType, UnixAddr};
    let via = PathBuf::from(format!("/proc/self/fd/{}/{SOCKET}", dir_fd.as_raw_fd()));
    let addr = UnixAddr::new(&via).map_err(|e| ClientError::Failed(format!("{}: {e}", via.display())))?;
    let fd = socket(AddressFamily::Unix, SockType::Stream, SockFlag::SOCK_CLOEXEC | SockFlag::SOCK_NONBLOCK, None)
        .map_err(|e| ClientError::Failed(format!("a socket: {e}")))?;
    loop {
        match connect(fd.as_raw_fd(), &addr) {
            Ok(()) => break,
            Err(nix::Error::EAGAIN) if Instant::now() < until => std::thread::sleep(Duration::from_millis(20)),
            Err(nix::Error::EAGAIN) => return Err(ClientError::Failed(format!("{}: the agent accepted no connection before the deadline", path.display()))),
            Err(nix::Error::EINTR) => continue,
            Err(e) => return Err(ClientError::NoAgent(format!("{}: {e}", path.display()))),
        }
    }
    let flags = nix::fcntl::fcntl(fd.as_fd().as_raw_fd(), nix::fcntl::FcntlArg::F_GETFL).map_err(|e| ClientError::Failed(e.to_string()))?;
    let blocking = nix::fcntl::OFlag::from_bits_truncate(flags) & !nix::fcntl::OFlag::O_NONBLOCK;
    nix::fcntl::fcntl(fd.as_raw_fd(), nix::fcntl::FcntlArg::F_SETFL(blocking)).map_err(|e| ClientError::Failed(e.to_string()))?;
    Ok(fd)
}

/// Everything `s` sends until it closes: at most `max_bytes`, all of it before `until`.
fn read_bounded(mut s: UnixStream, path: &Path, max_bytes: usize, until: Instant) -> Result<Vec<u8>, ClientError> {
    let mut body = Vec::new();
    let mut chunk = vec![0u8; 64 << 10];
    loop {
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(ClientError::Failed(format!("{}: no whole answer within the deadline ({} bytes read)", path.display(), body.len())));
        }
        s.set_read_timeout(Some(left)).map_err(|e| ClientError::Failed(e.to_string()))?;
        match s.read(&mut chunk) {
            Ok(0) => return Ok(body),
            Ok(n) if body.len() + n > max_bytes => {
                return Err(ClientError::Failed(format!("{}: the answer is larger than {max_bytes} bytes; not read further", path.display())))
            }
            Ok(n) => body.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {
                return Err(ClientError::Failed(format!("{}: no whole answer within the deadline ({} bytes read)", path.display(), body.len())))
            }
            Err(e) => return Err(ClientError::Failed(format!("{}: {e}", path.display()))),
        }
    }
}

#[cfg(test)]
#[path = "client_tests.rs"]
mod tests;
