//! One agent per journal: an flock held for the agent's whole life. The kernel drops it when
//! its holder dies, SIGKILL included, so a crashed agent never leaves a stale lock.

use crate::journal::JournalError;
use crate::private_fs::{self, Access};
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::path::Path;

pub const AGENT_LOCK_FILE: &str = "agent.lock";

/// Held by a running agent for its whole life. The kernel drops an flock when its holder dies,
/// SIGKILL included, so a crashed agent never leaves a stale lock.
pub struct AgentLock {
    _file: File,
}

/// The lock file, in the journal directory and as private as the journal (`private_fs`): a
/// planted symlink or a file of another user's is refused, never truncated.
fn lock_file(dir: &Path) -> Result<File, JournalError> {
    Ok(private_fs::open_private(&dir.join(AGENT_LOCK_FILE), Access::ReadWrite)?)
}

fn try_flock(f: &File) -> bool {
    // SAFETY: flock on an fd we own.
    unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) == 0 }
}

/// Takes the agent lock in `dir`, or says which pid holds it.
pub fn lock_agent(dir: &Path) -> Result<Result<AgentLock, Option<u32>>, JournalError> {
    let mut f = lock_file(dir)?;
    if !try_flock(&f) {
        let mut s = String::new();
        let pid = (&f).take(32).read_to_string(&mut s).ok().and_then(|_| s.trim().parse().ok());
        return Ok(Err(pid));
    }
    let _ = f.set_len(0);
    let _ = writeln!(f, "{}", std::process::id());
    Ok(Ok(AgentLock { _file: f }))
}

/// The pid of the agent that holds the lock in `dir`, if one is running.
pub fn running_agent(dir: &Path) -> Option<Option<u32>> {
    if !dir.join(AGENT_LOCK_FILE).exists() {
        return None;
    }
    match lock_agent(dir) {
        Ok(Err(pid)) => Some(pid),
        _ => None, // we got the lock (released on drop): nobody runs
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn agent_lock_is_exclusive_and_released_on_drop() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(running_agent(dir.path()), None);
        let held = lock_agent(dir.path()).unwrap().expect("first lock");
        // flock is per open file description: a second open in this process conflicts too.
        assert_eq!(running_agent(dir.path()), Some(Some(std::process::id())));
        assert!(lock_agent(dir.path()).unwrap().is_err());
        drop(held);
        assert_eq!(running_agent(dir.path()), None);
    }
}
