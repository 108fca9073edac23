//! The agent's guardian: a small `joule restore --guardian` process started before the agent
//! changes anything, that replays the journal as soon as the agent dies, however it died
//! (SIGKILL, abort, OOM kill) — outside systemd too, where no `ExecStopPost` runs.
//!
//! The agent holds the write end of a pipe that is the guardian's stdin. The kernel closes a
//! dead process's files, so end-of-file is the agent's death. A clean stop restores by itself
//! and then sends `disarm`. On end-of-file without `disarm`, the guardian takes the agent lock
//! (the dead agent's flock is gone with it) and restores everything under it. If a new agent
//! holds the lock first, the guardian leaves: a starting agent replays the journal itself.
//!
//! It is an exec of the running binary (`/proc/self/exe`), not a bare fork: a fresh process
//! inherits none of the agent's threads, locks or close-on-exec fds (the agent lock
//! included). It gets its own process group, so a terminal's Ctrl-C does not kill both. Under
//! systemd it is in the unit's cgroup and stops with it; `ExecStopPost` covers that case.

use anyhow::Context;
use std::io::{BufRead, Write};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const DISARM: &str = "disarm";

/// The guardian's `comm`: tests and operators find it by this name.
const GUARDIAN_COMM: &std::ffi::CStr = c"joule-guardian";

/// The agent's end: the pipe's write end and the child.
pub struct Guardian {
    child: Child,
    tx: Option<std::io::PipeWriter>,
}

impl Guardian {
    /// Starts the guardian of the journal in `journal_dir`, guarding this process.
    pub fn spawn(journal_dir: &Path) -> anyhow::Result<Guardian> {
        let (rx, tx) = std::io::pipe().context("while creating the guardian's pipe")?;
        let mut cmd = Command::new("/proc/self/exe");
        cmd.args(["restore", "--guardian", "--journal-dir"]).arg(journal_dir);
        cmd.arg("--guardian-of").arg(std::process::id().to_string());
        std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
        std::os::unix::process::CommandExt::arg0(&mut cmd, "joule");
        let child = cmd.stdin(rx).stdout(Stdio::null()).spawn().context("while starting the guardian (joule restore --guardian)")?;
        Ok(Guardian { child, tx: Some(tx) })
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The agent restored everything itself: the guardian exits without acting.
    pub fn disarm(mut self) {
        if let Some(mut tx) = self.tx.take() {
            let _ = writeln!(tx, "{DISARM}");
        }
        let _ = self.child.wait();
    }
}

/// The guardian's side (`joule restore --guardian`): waits on stdin for the agent `agent_pid`
/// to die, then restores under the agent lock. Returns what it did, for the log.
pub fn watch(journal_dir: &Path, agent_pid: u32) -> anyhow::Result<String> {
    // SAFETY: naming our own thread.
    unsafe { libc::prctl(libc::PR_SET_NAME, GUARDIAN_COMM.as_ptr()) };
    for sig in [libc::SIGINT, libc::SIGHUP, libc::SIGPIPE] {
        // SAFETY: ignoring signals in our own process before any thread exists.
        unsafe { libc::signal(sig, libc::SIG_IGN) };
    }
    let stdin = std::io::stdin();
    for line in stdin.lock().lines() {
        match line {
            Ok(l) if l == DISARM => return Ok("the agent stopped cleanly; nothing to do".into()),
            Ok(_) => {}
            Err(_) => break,
        }
    }
    // The agent is gone. Its flock is released with its files; wait for that, or for a new
    // agent to have taken over (then it replays the journal itself).
    let deadline = Instant::now() + Duration::from_secs(10);
    let _lock = loop {
        match joule_core::agent_lock::lock_as_guardian(journal_dir)? {
            Ok(lock) => break lock,
            Err(Some(pid)) if pid != agent_pid => return Ok(format!("a new agent (pid {pid}) took over the journal; it replays it itself")),
            Err(_) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
            Err(pid) => anyhow::bail!("the agent lock in {} is still held (pid {pid:?}) 10 s after the agent died", journal_dir.display()),
        }
    };
    let journal = joule_core::journal::Journal::open(journal_dir)?;
    let r = journal.restore_all(&joule_core::effects::RealEffects)?;
    let what = if r.failed.is_empty() {
        format!("the agent (pid {agent_pid}) died; its guardian undid {} change(s), {} already gone, {} skipped", r.undone, r.already_gone, r.skipped.len())
    } else {
        format!("the agent (pid {agent_pid}) died; its guardian undid {} change(s), {} could not be: {:?}", r.undone, r.failed.len(), r.failed)
    };
    // For `joule restore`, which waits for this replay and then says what it did.
    if let Ok(mut f) = joule_core::private_fs::open_private(&journal_dir.join(LAST_REPLAY_FILE), joule_core::private_fs::Access::ReadWrite) {
        use std::io::Write;
        let _ = f.set_len(0).and_then(|()| writeln!(f, "{what}"));
    }
    anyhow::ensure!(r.failed.is_empty(), "{what}");
    Ok(what)
}

/// What the last guardian's replay did, in the journal directory (one line).
pub const LAST_REPLAY_FILE: &str = "guardian.last";

/// The line the last guardian wrote, if any.
pub fn last_replay(journal_dir: &Path) -> Option<String> {
    let mut f = joule_core::private_fs::open_private(&journal_dir.join(LAST_REPLAY_FILE), joule_core::private_fs::Access::Read).ok()?;
    let mut s = String::new();
    std::io::Read::read_to_string(&mut f, &mut s).ok()?;
    Some(s.trim().to_string()).filter(|s| !s.is_empty())
}
