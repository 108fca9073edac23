//! The undo journal. Every actuator records how to undo a change *before* making it; the
//! journal is an append-only JSON-lines file under the journal directory (default `/run/joule`,
//! which is tmpfs, so a reboot — which undoes everything anyway — also forgets it).
//! `joule restore`, agent start-up and agent shutdown replay it newest first, so a SIGKILLed
//! agent leaves nothing behind once any of them runs.

use crate::clock::now_ms;
use crate::effects::{Effects, SchedAttr};
use serde::{Deserialize, Serialize};
use std::fs::{File, OpenOptions};
use std::io::{self, BufRead, BufReader, Write};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

mod undo;

use undo::{tally, undo_one};

pub const JOURNAL_FILE: &str = "undo.jsonl";

#[derive(Debug, thiserror::Error)]
pub enum JournalError {
    #[error("cannot open the undo journal {path}: {source}")]
    Open { path: PathBuf, source: io::Error },
    #[error("cannot write the undo journal {path}: {source}")]
    Write { path: PathBuf, source: io::Error },
    #[error("undo journal {path} line {line} is not a record joule understands: {reason}")]
    Corrupt { path: PathBuf, line: usize, reason: String },
}

/// How to undo one change.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Undo {
    /// Put back the old content of a file (a sysctl, a cgroup knob).
    Write { path: PathBuf, old: String },
    /// Remove a directory joule created (a cgroup). Tasks still inside are first moved to
    /// `evacuate_to` (a `cgroup.procs` file), because a cgroup with tasks cannot be removed;
    /// see `remove_cgroup` for why that takes more than one pass.
    RemoveDir { path: PathBuf, evacuate_to: Option<PathBuf> },
    /// Remove a file joule created (a pinned BPF object).
    RemoveFile { path: PathBuf },
    /// Move a task back to the cgroup it came from (`procs_file` is its old `cgroup.procs`).
    /// `started` is the task's start time (clock ticks after boot, /proc/PID/stat field 22)
    /// when it was recorded: a pid that has since exited and been reused by another task is
    /// left alone. Build it with `Undo::move_task`.
    MoveTask {
        pid: i32,
        procs_file: PathBuf,
        #[serde(default)]
        started: Option<u64>,
    },
    /// Unmount a pseudo-filesystem joule mounted (bpffs on a fresh machine), if the filesystem
    /// of type `magic` is still there and empty: see `mounts::ensure`.
    Unmount { path: PathBuf, magic: i64 },
    /// Put a thread back to its old scheduling policy; `started` as for MoveTask. Build it
    /// with `Undo::sched`.
    Sched {
        tid: i32,
        old: SchedAttr,
        #[serde(default)]
        started: Option<u64>,
    },
    /// Let a thread run on the CPUs it was allowed before (sched_setaffinity); `started` as for
    /// MoveTask. Build it with `Undo::affinity`.
    Affinity {
        tid: i32,
        old_cpus: Vec<usize>,
        #[serde(default)]
        started: Option<u64>,
    },
    /// Thaw a cgroup joule froze (v1 `freezer.state` or v2 `cgroup.freeze`).
    Thaw { cgroup: PathBuf },
    /// Delete the qdisc joule put at `parent` of interface `ifname` (index `ifindex`) in
    /// network namespace `netns` (none: the agent's own), if it is still the `kind` with
    /// `handle` joule put; for a root qdisc the kernel attaches the default again. See
    /// `qdisc::replace_root`.
    QdiscDelete {
        #[serde(default)]
        netns: Option<PathBuf>,
        ifname: String,
        ifindex: u32,
        parent: u32,
        handle: u32,
        kind: String,
    },
    /// Delete interface `ifname` that joule created (an ifb for ingress limits) in `netns`,
    /// if it is still of `kind` (a same-named interface of another kind is not ours).
    LinkDelete {
        #[serde(default)]
        netns: Option<PathBuf>,
        ifname: String,
        kind: String,
    },
}

impl Undo {
    /// The undo of moving `pid` out of the cgroup whose `cgroup.procs` (or `tasks`) is
    /// `procs_file`, pinned to this incarnation of the pid.
    pub fn move_task(fx: &dyn Effects, pid: i32, procs_file: PathBuf) -> Undo {
        Undo::MoveTask { pid, procs_file, started: start_time(fx, pid) }
    }

    /// The undo of changing thread `tid`'s policy away from `old`, pinned to this incarnation.
    pub fn sched(fx: &dyn Effects, tid: i32, old: SchedAttr) -> Undo {
        Undo::Sched { tid, old, started: start_time(fx, tid) }
    }

    /// The undo of changing thread `tid`'s affinity away from `old_cpus`, pinned to this
    /// incarnation.
    pub fn affinity(fx: &dyn Effects, tid: i32, old_cpus: Vec<usize>) -> Undo {
        Undo::Affinity { tid, old_cpus, started: start_time(fx, tid) }
    }
}

/// Start time of a task (field 22 of /proc/PID/stat, clock ticks after boot). Works for
/// thread ids too.
pub fn start_time(fx: &dyn Effects, pid: i32) -> Option<u64> {
    crate::procfs::Stat::read(fx, Path::new("/proc"), pid)?.start_time_ticks
}

/// Whether `pid` is still the task a record was made for (unknown start time: assume so).
pub(crate) fn same_task(fx: &dyn Effects, pid: i32, started: Option<u64>) -> bool {
    started.is_none() || start_time(fx, pid) == started
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Entry {
    /// Which component recorded it (`agent`, `qos`, `bench`, `bpf`).
    pub owner: String,
    pub at_ms: u64,
    #[serde(flatten)]
    pub undo: Undo,
}

/// An open journal that actuators append to.
pub struct Journal {
    path: PathBuf,
    file: File,
}

impl Journal {
    /// Opens (creating if needed) the journal in `dir`.
    pub fn open(dir: &Path) -> Result<Self, JournalError> {
        let path = dir.join(JOURNAL_FILE);
        std::fs::create_dir_all(dir).map_err(|source| JournalError::Open { path: path.clone(), source })?;
        let file = OpenOptions::new().create(true).append(true).open(&path).map_err(|source| JournalError::Open { path: path.clone(), source })?;
        Ok(Self { path, file })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The journal directory (what `restore` and friends take).
    pub fn dir(&self) -> &Path {
        self.path.parent().unwrap_or(Path::new("."))
    }

    /// Appends one record and syncs it to the file before returning, so the change the caller
    /// makes next is always undoable.
    pub fn record(&mut self, owner: &str, undo: Undo) -> Result<(), JournalError> {
        let entry = Entry { owner: owner.to_string(), at_ms: now_ms(), undo };
        let mut line = serde_json::to_string(&entry).expect("journal entries always serialise");
        line.push('\n');
        let werr = |source| JournalError::Write { path: self.path.clone(), source };
        // The same exclusive lock `restore_where` holds while it reads and rewrites the file:
        // without it, a record appended between its read and its rewrite would be lost — a
        // change with no undo. One write of one line on an O_APPEND file never interleaves.
        let _lock = FileLock::exclusive(&self.file);
        (&self.file).write_all(line.as_bytes()).map_err(werr)?;
        self.file.sync_data().map_err(werr)
    }
}

/// An flock held until dropped.
struct FileLock<'a>(&'a File);

impl<'a> FileLock<'a> {
    fn exclusive(f: &'a File) -> Self {
        // SAFETY: flock on an fd we own for the guard's lifetime.
        unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX) };
        FileLock(f)
    }
}

impl Drop for FileLock<'_> {
    fn drop(&mut self) {
        // SAFETY: as above.
        unsafe { libc::flock(self.0.as_raw_fd(), libc::LOCK_UN) };
    }
}

/// What a replay did.
#[derive(Debug, Default, Clone, Serialize)]
pub struct RestoreReport {
    pub undone: usize,
    /// Records whose target was already gone (a task that exited, a cgroup removed by hand).
    pub already_gone: usize,
    /// Records that failed for another reason; kept in the journal for a later retry.
    pub failed: Vec<String>,
}

/// Reads every entry of the journal in `dir` (empty when there is none).
pub fn entries(dir: &Path) -> Result<Vec<Entry>, JournalError> {
    let path = dir.join(JOURNAL_FILE);
    let file = match File::open(&path) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(source) => return Err(JournalError::Open { path, source }),
    };
    let mut out = Vec::new();
    for (i, line) in BufReader::new(file).lines().enumerate() {
        let line = line.map_err(|source| JournalError::Open { path: path.clone(), source })?;
        if line.trim().is_empty() {
            continue;
        }
        // A torn last line (crash in the middle of a write) was never acted on: skip it.
        match serde_json::from_str(&line) {
            Ok(e) => out.push(e),
            Err(e) if e.is_eof() => continue,
            Err(e) => return Err(JournalError::Corrupt { path, line: i + 1, reason: e.to_string() }),
        }
    }
    Ok(out)
}

/// Replays the journal in `dir` newest first, then rewrites it with only the records that
/// failed. Holds an exclusive lock on the file so two restores never race.
pub fn restore(dir: &Path, fx: &dyn Effects) -> Result<RestoreReport, JournalError> {
    restore_where(dir, fx, |_| true)
}

/// Like `restore`, for the records of one owner only (`joule qos release` must not undo other
/// mechanisms' changes); every other record stays in the journal.
pub fn restore_owner(dir: &Path, owner: &str, fx: &dyn Effects) -> Result<RestoreReport, JournalError> {
    restore_where(dir, fx, |e| e.owner == owner)
}

/// Replays, newest first, the records that `select` picks, then rewrites the journal with the
/// records it did not pick and those that failed (kept for a retry), in their original order.
pub fn restore_where(dir: &Path, fx: &dyn Effects, select: impl Fn(&Entry) -> bool) -> Result<RestoreReport, JournalError> {
    let path = dir.join(JOURNAL_FILE);
    if !path.exists() {
        return Ok(RestoreReport::default());
    }
    let lock = OpenOptions::new().read(true).write(true).open(&path).map_err(|source| JournalError::Open { path: path.clone(), source })?;
    let _held = FileLock::exclusive(&lock);
    let all = entries(dir)?;
    let mut report = RestoreReport::default();
    let mut keep = vec![true; all.len()];
    for (i, entry) in all.iter().enumerate().rev().filter(|(_, e)| select(e)) {
        keep[i] = !tally(&mut report, &entry.undo, undo_one(&entry.undo, fx));
    }
    let mut body = String::new();
    for (e, _) in all.iter().zip(&keep).filter(|(_, k)| **k) {
        body.push_str(&serde_json::to_string(e).expect("serialisable"));
        body.push('\n');
    }
    let werr = |source| JournalError::Write { path: path.clone(), source };
    lock.set_len(0).map_err(werr)?;
    (&lock).write_all(body.as_bytes()).map_err(werr)?;
    lock.sync_data().map_err(werr)?;
    Ok(report)
}

/// Undoes in-memory records newest first (a failed apply rolling back what it did). Same
/// semantics as a journal replay: a vanished target counts as already gone.
pub fn replay(records: &[Undo], fx: &dyn Effects) -> RestoreReport {
    let mut report = RestoreReport::default();
    for undo in records.iter().rev() {
        tally(&mut report, undo, undo_one(undo, fx));
    }
    report
}

#[cfg(test)]
#[path = "tests.rs"]
mod tests;
