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

fn try_flock(f: &File, how: libc::c_int) -> bool {
    // SAFETY: flock on an fd we own.
    unsafe { libc::flock(f.as_raw_fd(), how | libc::LOCK_NB) == 0 }
}

/// Who holds the lock, as the holder wrote it: `PID` (an agent) or `PID guardian` (the guardian
/// of an agent that died, replaying its journal).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Holder {
    Agent(Option<u32>),
    Guardian(Option<u32>),
}

impl Holder {
    pub fn pid(&self) -> Option<u32> {
        match self {
            Holder::Agent(p) | Holder::Guardian(p) => *p,
        }
    }
}

fn read_holder(f: &File) -> Holder {
    let mut s = String::new();
    let _ = f.take(64).read_to_string(&mut s);
    let mut words = s.split_whitespace();
    let pid = words.next().and_then(|p| p.parse().ok());
    if words.next() == Some("guardian") {
        Holder::Guardian(pid)
    } else {
        Holder::Agent(pid)
    }
}

/// Takes the lock exclusively and writes who holds it; else says which pid holds it.
fn take(dir: &Path, role: &str) -> Result<Result<AgentLock, Option<u32>>, JournalError> {
    let mut f = lock_file(dir)?;
    if !try_flock(&f, libc::LOCK_EX) {
        return Ok(Err(read_holder(&f).pid()));
    }
    // Written over the old holder's line, then cut to length: a probe never reads an empty file
    // (it would not know who holds the lock).
    let line = format!("{}{role}\n", std::process::id());
    let _ = f.write_all(line.as_bytes()).and_then(|()| f.set_len(line.len() as u64));
    Ok(Ok(AgentLock { _file: f }))
}

/// Takes the agent lock in `dir`, or says which pid holds it.
pub fn lock_agent(dir: &Path) -> Result<Result<AgentLock, Option<u32>>, JournalError> {
    take(dir, "")
}

/// The guardian of an agent that died takes the lock to replay the journal, saying so, so that
/// `joule restore` waits for it instead of taking it for a running agent.
pub fn lock_as_guardian(dir: &Path) -> Result<Result<AgentLock, Option<u32>>, JournalError> {
    take(dir, " guardian")
}

/// Who holds the lock in `dir`, if anyone. A probe only: it takes the lock shared for an
/// instant and writes nothing, so it never looks like an agent to the guardian waiting for the
/// lock of the agent that died (issue 33: a `joule nap status` at the wrong moment made the
/// guardian believe a new agent had taken over, and it restored nothing).
pub fn holder(dir: &Path) -> Option<Holder> {
    if !dir.join(AGENT_LOCK_FILE).exists() {
        return None;
    }
    let f = lock_file(dir).ok()?;
    if try_flock(&f, libc::LOCK_SH) {
        return None; // shared lock taken (released on drop): nobody holds it exclusively
    }
    Some(read_holder(&f))
}

/// The pid of the agent that holds the lock in `dir`, if one is running (not a guardian).
pub fn running_agent(dir: &Path) -> Option<Option<u32>> {
    match holder(dir)? {
        Holder::Agent(pid) => Some(pid),
        Holder::Guardian(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 33: a probe writes nothing (the guardian reads the dead agent's pid until a real
    /// agent or guardian writes its own), and a guardian says it is one.
    #[test]
    fn a_probe_writes_nothing_and_a_guardian_says_what_it_is() {
        let dir = tempfile::tempdir().unwrap();
        let agent = lock_agent(dir.path()).unwrap().expect("first lock");
        drop(agent); // the agent died; its pid stays in the file
        let me = std::process::id();
        assert_eq!(holder(dir.path()), None, "nobody holds it now");
        let before = std::fs::read_to_string(dir.path().join(AGENT_LOCK_FILE)).unwrap();
        assert_eq!(before.trim(), me.to_string());
        let guardian = lock_as_guardian(dir.path()).unwrap().expect("the guardian's lock");
        assert_eq!(holder(dir.path()), Some(Holder::Guardian(Some(me))));
        assert_eq!(running_agent(dir.path()), None, "a guardian is no running agent");
        drop(guardian);
    }

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
