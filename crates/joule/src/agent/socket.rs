//! The running agent's view for the machine's own root tools (`joule status`, issue 38): a Unix
//! socket `agent.sock` in the journal directory (0700, root's: only root reaches it), mode 0600.
//! Each connection gets one JSON document, [`View`] (`joule_core::view`, the type every client
//! reads): what the loop published last (the snapshot,
//! the plan, the actuators' state, the agent's counters) and the budget it acts against; then
//! the socket closes. Nothing is read from the client, so there is no request to parse; a
//! client gets [`WRITE_TIMEOUT`] for the whole view, however little it reads at a time, so one
//! slow reader holds the serving thread no longer than that. The agent removes the socket
//! when it stops; one a killed agent left refuses connections, and the next agent replaces it.
//! The client side, which checks what answers before it believes it, is `joule_core::view::client`.

use crate::exporter::Shared;
use joule_core::view::{ActuatorView, View, VERSION};
pub use joule_core::view::{Budget, SOCKET};
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// How long one client may take to read the whole view.
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(2);

/// The socket, removed when dropped.
pub struct StatusSocket {
    path: PathBuf,
}

impl StatusSocket {
    /// Binds `dir/agent.sock` (replacing one a killed agent left: the caller holds the agent
    /// lock) and serves `shared` from a thread of its own.
    pub fn open(dir: &Path, shared: Shared, budget: Budget) -> std::io::Result<StatusSocket> {
        let path = dir.join(SOCKET);
        if std::fs::symlink_metadata(&path).is_ok_and(|m| std::os::unix::fs::FileTypeExt::is_socket(&m.file_type())) {
            std::fs::remove_file(&path)?;
        }
        let listener = UnixListener::bind(&path)?;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))?;
        std::thread::Builder::new().name("joule-status".into()).spawn(move || {
            for conn in listener.incoming() {
                let Ok(mut conn) = conn else {
                    // Out of fds for a moment (EMFILE): wait rather than spin on the error.
                    std::thread::sleep(Duration::from_millis(50));
                    continue;
                };
                let body = {
                    let p = shared.read().unwrap_or_else(|e| e.into_inner());
                    // Owned copies, taken under the read lock: the view is the one type every
                    // client reads, so a field renamed here fails to build there.
                    let view = View {
                        version: Some(VERSION),
                        budget: budget.clone(),
                        snapshot: p.snapshot.clone(),
                        plan: p.plan.clone(),
                        actuators: p.actuators.iter().map(ActuatorView::from).collect(),
                        agent: p.agent.clone(),
                        published_ms_ago: p.published_at.map(|t| t.elapsed().as_millis() as u64),
                    };
                    serde_json::to_vec(&view).unwrap_or_default()
                };
                let _ = write_within(&mut conn, &body, WRITE_TIMEOUT);
            }
        })?;
        Ok(StatusSocket { path })
    }
}

/// Writes `body` unless the client takes longer than `limit` for all of it. A timeout on the
/// socket is no bound: the kernel restarts it whenever a blocked write makes progress, so a
/// client reading a little at a time held the one serving thread, and every other `joule
/// status`, for as long as it liked. Here the socket does not block, and each wait for room is
/// what is left of `limit`.
fn write_within(conn: &mut UnixStream, body: &[u8], limit: Duration) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    let deadline = Instant::now() + limit;
    conn.set_nonblocking(true)?;
    let mut rest = body;
    while !rest.is_empty() {
        match conn.write(rest) {
            Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
            Ok(n) => rest = &rest[n..],
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return Err(std::io::ErrorKind::TimedOut.into());
                }
                let mut fd = libc::pollfd { fd: conn.as_raw_fd(), events: libc::POLLOUT, revents: 0 };
                // SAFETY: the kernel reads and writes the one entry it is given.
                unsafe { libc::poll(&mut fd, 1, left.as_millis().clamp(1, i32::MAX as u128) as i32) };
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

impl Drop for StatusSocket {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

#[cfg(test)]
#[path = "socket_slow_reader_tests.rs"]
mod slow_reader_tests;
