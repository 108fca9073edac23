//! The undo journal. Every actuator records how to undo a change *before* making it; the
//! journal is an append-only JSON-lines file under the journal directory (default `/run/joule`,
//! which is tmpfs, so a reboot — which undoes everything anyway — also forgets it).
//! `joule restore`, agent start-up and agent shutdown replay it newest first, so a SIGKILLed
//! agent leaves nothing behind once any of them runs.

use crate::clock::now_ms;
use crate::effects::{Effects, SchedAttr, UnitValue};
use crate::private_fs::{self, Access, PrivateError};
use serde::{Deserialize, Serialize};
use std::fs::File;
use std::io::{self, BufRead, BufReader, Write};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, Weak};

mod path_bytes;
mod undo;

use undo::{replay_checked, tally, undo_one, Origins};

pub const JOURNAL_FILE: &str = "undo.jsonl";

#[derive(Debug, thiserror::Error)]
pub enum JournalError {
    #[error("cannot open the undo journal {path}: {source}")]
    Open { path: PathBuf, source: io::Error },
    #[error("cannot write the undo journal {path}: {source}")]
    Write { path: PathBuf, source: io::Error },
    #[error("undo journal: {0}")]
    NotPrivate(#[from] PrivateError),
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
        /// Byte for byte (`path_bytes`): the task's cgroup was named by whoever owns it.
        #[serde(with = "path_bytes")]
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
    /// Give a fair thread back its old EEVDF slice (`old_ns`, 0: the kernel's default);
    /// `started` as for MoveTask. Build it with `Undo::slice`.
    Slice {
        tid: i32,
        old_ns: u64,
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
    /// Put a systemd unit's resource property back (`property` one of
    /// `effects::UNIT_PROPERTIES`) through systemd's D-Bus API, as `systemctl set-property
    /// --runtime` would: `old` is what systemd reported before joule set `set` (`u64::MAX` or an
    /// empty mask: not set). Only while the property still reads `set`: a value someone else
    /// put there since (an administrator's) is theirs, and stays. One record per change, so a
    /// replay newest first walks back through joule's own values to the first `old`.
    UnitProperty { unit: String, property: String, old: UnitValue, set: UnitValue },
    /// Thaw a systemd unit joule froze for a nap (`ThawUnit` over D-Bus), if it is still
    /// frozen.
    ThawUnit { unit: String },
    /// Stop the gate units joule started for a napped slice's services (`joule-gate-*`,
    /// transient: they go once stopped). A stop gate's `ExecStop=` thaws its slice.
    StopGates,
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

impl Undo {
    /// The undo of changing fair thread `tid`'s slice away from `old_ns`, pinned to this
    /// incarnation. The kernel reports a thread without a custom slice as having the default
    /// one, which is what the calling thread (joule's own, never given one) reports: that
    /// value is recorded as 0, so the undo gives back "the default", not a custom slice of
    /// the same length.
    pub fn slice(fx: &dyn Effects, tid: i32, old_ns: u64) -> Undo {
        let default = fx.get_slice_ns(0).ok().flatten();
        let old_ns = if default == Some(old_ns) { 0 } else { old_ns };
        Undo::Slice { tid, old_ns, started: start_time(fx, tid) }
    }
}

/// Start time of a task (field 22 of /proc/PID/stat, clock ticks after boot), None when it
/// is gone or /proc could not say. Works for thread ids too.
pub fn start_time(fx: &dyn Effects, pid: i32) -> Option<u64> {
    crate::procfs::start_time(fx, Path::new("/proc"), pid).ok().flatten()
}

/// Whether `pid` is still the task a record was made for. A record read from the journal
/// without a start time is refused before this (`undo::refusal`); an in-memory rollback of
/// a task whose start time could not be read goes ahead. `Err`: /proc could not tell, which
/// is not "gone": the record stays.
pub(crate) fn same_task(fx: &dyn Effects, pid: i32, started: Option<u64>) -> io::Result<bool> {
    match started {
        None => Ok(true),
        Some(s) => crate::procfs::same_task(fx, Path::new("/proc"), pid, s),
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Entry {
    /// Which component recorded it (`agent`, `qos`, `bench`, `bpf`).
    pub owner: String,
    pub at_ms: u64,
    #[serde(flatten)]
    pub undo: Undo,
}

/// The undo journal of one directory, as a handle: clones share one open file, so the agent's
/// actuators, the elevate engine's thread and the nap waiter all record into (and replay from)
/// the same journal. [`Journal::open`] is its only constructor, and a process never holds the
/// same directory open twice: opening a directory this process already has open returns that
/// journal.
#[derive(Clone)]
pub struct Journal {
    inner: Arc<Inner>,
}

struct Inner {
    path: PathBuf,
    /// The journal directory, checked private when opened (`private_fs`).
    dir_fd: std::os::fd::OwnedFd,
    file: File,
    /// One record at a time from this process: flock is per open file description, so threads
    /// sharing the description would not exclude each other by it.
    writing: Mutex<()>,
}

/// The journals this process holds open, by canonical directory.
static OPEN: Mutex<Vec<(PathBuf, Weak<Inner>)>> = Mutex::new(Vec::new());

impl std::fmt::Debug for Journal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Journal({})", self.inner.path.display())
    }
}

impl Journal {
    /// The journal in `dir` (created 0700 with the directory when missing). Every entry point
    /// that changes the system gets its journal here; a directory this process already has
    /// open gives back the same journal, never a second open of the file. The directory and
    /// the file must be private (`private_fs`): a journal another user could write or point
    /// elsewhere is refused, with the reason.
    pub fn open(dir: &Path) -> Result<Self, JournalError> {
        let path = dir.join(JOURNAL_FILE);
        let dir_fd = private_fs::private_dir(dir)?;
        let key = std::fs::canonicalize(dir).map_err(|source| JournalError::Open { path: path.clone(), source })?;
        let mut open = OPEN.lock().unwrap_or_else(|e| e.into_inner());
        open.retain(|(_, w)| w.strong_count() > 0);
        if let Some(inner) = open.iter().find(|(k, _)| *k == key).and_then(|(_, w)| w.upgrade()) {
            return Ok(Self { inner });
        }
        let file = private_fs::open_in(&dir_fd, dir, JOURNAL_FILE, Access::Append)?;
        let inner = Arc::new(Inner { path: key.join(JOURNAL_FILE), dir_fd, file, writing: Mutex::new(()) });
        open.push((key, Arc::downgrade(&inner)));
        Ok(Self { inner })
    }

    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// The journal file's size in bytes now (one fstat).
    pub fn size_bytes(&self) -> u64 {
        self.inner.file.metadata().map_or(0, |m| m.len())
    }

    /// The journal directory.
    pub fn dir(&self) -> &Path {
        self.inner.path.parent().unwrap_or(Path::new("."))
    }

    /// Whether `self` and `other` are the same open journal.
    pub fn same(&self, other: &Journal) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    /// Appends one record and syncs it to the file before returning, so the change the caller
    /// makes next is always undoable.
    pub fn record(&self, owner: &str, undo: Undo) -> Result<(), JournalError> {
        self.record_all(owner, [undo])
    }

    /// Appends several records in one write and one sync: the changes the caller makes next,
    /// all undoable, for the cost of one `fdatasync` (a period's worth of class moves under a
    /// churn of 500 process starts a second was 1,500 syncs a second, two thirds of the
    /// agent's CPU). Nothing to record: no write.
    pub fn record_all(&self, owner: &str, undos: impl IntoIterator<Item = Undo>) -> Result<(), JournalError> {
        let at_ms = now_ms();
        let mut lines = String::new();
        for undo in undos {
            let entry = Entry { owner: owner.to_string(), at_ms, undo };
            lines.push_str(&serde_json::to_string(&entry).expect("journal entries always serialise"));
            lines.push('\n');
        }
        if lines.is_empty() {
            return Ok(());
        }
        let werr = |source| JournalError::Write { path: self.inner.path.clone(), source };
        // The same exclusive lock `restore_where` holds while it reads and rewrites the file
        // (in this process or in `joule restore`): without it, a record appended between its
        // read and its rewrite would be lost — a change with no undo. One write on an O_APPEND
        // file never interleaves.
        let _one = self.inner.writing.lock().unwrap_or_else(|e| e.into_inner());
        let _lock = FileLock::exclusive(&self.inner.file);
        (&self.inner.file).write_all(lines.as_bytes()).map_err(werr)?;
        self.inner.file.sync_data().map_err(werr)
    }

    /// Every record, oldest first.
    pub fn entries(&self) -> Result<Vec<Entry>, JournalError> {
        entries(self.dir())
    }

    /// Replays the whole journal newest first, then keeps only the records that failed.
    pub fn restore_all(&self, fx: &dyn Effects) -> Result<RestoreReport, JournalError> {
        self.restore_where(fx, |_| true)
    }

    /// Like `restore_all`, for the records of one owner only (an actuator letting go, `joule
    /// qos release`); every other record stays in the journal.
    pub fn restore_owner(&self, owner: &str, fx: &dyn Effects) -> Result<RestoreReport, JournalError> {
        self.restore_where(fx, |e| e.owner == owner)
    }

    /// Replays, newest first, the records that `select` picks, then rewrites the journal with
    /// the records it did not pick and those that failed (kept for a retry), in their original
    /// order. Holds the file's exclusive lock throughout, so no record is lost and two replays
    /// never race.
    pub fn restore_where(&self, fx: &dyn Effects, select: impl Fn(&Entry) -> bool) -> Result<RestoreReport, JournalError> {
        let path = &self.inner.path;
        // A second description of the file: flock is per open file description, so this lock
        // excludes `record` on the shared one as well as other processes.
        let lock = private_fs::open_in(&self.inner.dir_fd, self.dir(), JOURNAL_FILE, Access::ReadWrite)?;
        let _held = FileLock::exclusive(&lock);
        let (all, skipped) = read_entries(&lock, path)?;
        let mut report = RestoreReport { skipped, ..Default::default() };
        let mut keep = vec![true; all.len()];
        let origins = Origins::of(all.iter().filter(|e| select(e)).map(|e| &e.undo));
        for (i, entry) in all.iter().enumerate().rev().filter(|(_, e)| select(e)) {
            keep[i] = !replay_checked(&mut report, &entry.undo, fx, &origins);
        }
        if keep.iter().all(|k| *k) && report.skipped.is_empty() {
            return Ok(report);
        }
        rewrite(&lock, path, all.iter().zip(&keep).filter(|(_, k)| **k).map(|(e, _)| e))?;
        Ok(report)
    }
}

impl Journal {
    /// Drops what a replay would do nothing with, while the agent runs (a class mover under
    /// churn journals a move per process start, and most of those processes are gone long
    /// before a replay): records of tasks that have exited (their start time no longer
    /// matches), and repeats of a record already there (the first stays: replayed last, it
    /// alone decides). Holds the lock a record and a replay take; returns how many went.
    pub fn compact(&self, fx: &dyn Effects) -> Result<usize, JournalError> {
        let path = &self.inner.path;
        let lock = private_fs::open_in(&self.inner.dir_fd, self.dir(), JOURNAL_FILE, Access::ReadWrite)?;
        let _held = FileLock::exclusive(&lock);
        let (all, _) = read_entries(&lock, path)?;
        let mut alive: std::collections::HashMap<(i32, Option<u64>), bool> = std::collections::HashMap::new();
        let mut seen = std::collections::HashSet::new();
        let keep: Vec<&Entry> = all
            .iter()
            .filter(|e| match &e.undo {
                Undo::MoveTask { pid, started, .. }
                | Undo::Sched { tid: pid, started, .. }
                | Undo::Affinity { tid: pid, started, .. }
                | Undo::Slice { tid: pid, started, .. } => *alive.entry((*pid, *started)).or_insert_with(|| same_task(fx, *pid, *started).unwrap_or(true)),
                _ => true,
            })
            .filter(|e| seen.insert(serde_json::to_string(&(&e.owner, &e.undo)).unwrap_or_default()))
            .collect();
        let dropped = all.len() - keep.len();
        if dropped > 0 {
            rewrite(&lock, path, keep)?;
        }
        Ok(dropped)
    }

    /// Drops, without replaying them, `owner`'s records equal to `undo`: a change that
    /// someone else has since replaced with their own (another tool rewrote a cpufreq limit
    /// joule set), so that no replay — shutdown, the guardian, `joule restore` — puts joule's
    /// old value over theirs. Holds the lock a record and a replay take; returns how many went.
    pub fn forget(&self, owner: &str, undo: &Undo) -> Result<usize, JournalError> {
        let path = &self.inner.path;
        let lock = private_fs::open_in(&self.inner.dir_fd, self.dir(), JOURNAL_FILE, Access::ReadWrite)?;
        let _held = FileLock::exclusive(&lock);
        let (all, _) = read_entries(&lock, path)?;
        let keep: Vec<&Entry> = all.iter().filter(|e| !(e.owner == owner && e.undo == *undo)).collect();
        let dropped = all.len() - keep.len();
        if dropped > 0 {
            rewrite(&lock, path, keep)?;
        }
        Ok(dropped)
    }
}

/// Replaces the journal held by `lock` with `keep`, in order, synced.
fn rewrite<'a>(lock: &File, path: &Path, keep: impl IntoIterator<Item = &'a Entry>) -> Result<(), JournalError> {
    let mut body = String::new();
    for e in keep {
        body.push_str(&serde_json::to_string(e).expect("journal entries always serialise"));
        body.push('\n');
    }
    let werr = |source| JournalError::Write { path: path.to_path_buf(), source };
    use std::io::{Seek, SeekFrom};
    lock.set_len(0).map_err(werr)?;
    let mut f = lock;
    f.seek(SeekFrom::Start(0)).map_err(werr)?;
    f.write_all(body.as_bytes()).map_err(werr)?;
    lock.sync_data().map_err(werr)
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
    /// Lines that are not a record joule understands, and records joule cannot have written
    /// (a target outside what it changes: see `undo::check`): reported, never acted on, and
    /// dropped from the journal by the replay.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub skipped: Vec<String>,
}

/// Reads every record of the journal in `dir` (empty when there is none), without opening it
/// for writing (`joule restore --dry-run`, tests); lines that are no record are left out (see
/// [`read_entries`]).
pub fn entries(dir: &Path) -> Result<Vec<Entry>, JournalError> {
    let path = dir.join(JOURNAL_FILE);
    if !dir.exists() {
        return Ok(Vec::new()); // a read never creates the directory (`private_dir` would)
    }
    let file = match private_fs::open_private(&path, Access::Read) {
        Ok(f) => f,
        Err(PrivateError::Io { source, .. }) if source.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e.into()),
    };
    Ok(read_entries(&file, &path)?.0)
}

/// Every record of an open journal, oldest first, and what could not be read as one: a line
/// that is not JSON or not a record is reported with its number and skipped, the records
/// around it kept (one bad line must not block every restore). A torn last line (a crash in
/// the middle of a write) was never acted on: skipped silently. Lines longer than
/// `MAX_LINE_BYTES` are skipped unread.
pub fn read_entries(file: &File, path: &Path) -> Result<(Vec<Entry>, Vec<String>), JournalError> {
    use std::io::{Read, Seek, SeekFrom};
    let mut f = file;
    f.seek(SeekFrom::Start(0)).map_err(|source| JournalError::Open { path: path.to_path_buf(), source })?;
    parse_entries(BufReader::new(f.take(MAX_JOURNAL_BYTES)), path)
}

/// The records in a journal's bytes, as [`read_entries`] (the fuzz target's entry point).
pub fn parse_entries(mut reader: impl BufRead, path: &Path) -> Result<(Vec<Entry>, Vec<String>), JournalError> {
    use std::io::Read;
    let rerr = |source| JournalError::Open { path: path.to_path_buf(), source };
    let (mut out, mut skipped) = (Vec::new(), Vec::new());
    let mut buf = Vec::new();
    let mut n = 0;
    loop {
        buf.clear();
        let read = (&mut reader).take(MAX_LINE_BYTES + 1).read_until(b'\n', &mut buf).map_err(rerr)?;
        if read == 0 {
            break;
        }
        n += 1;
        if buf.len() as u64 > MAX_LINE_BYTES && !buf.ends_with(b"\n") {
            skipped.push(format!("{} line {n}: longer than {MAX_LINE_BYTES} bytes", path.display()));
            // Skip the rest of the line, a bounded piece at a time.
            loop {
                buf.clear();
                let r = (&mut reader).take(MAX_LINE_BYTES).read_until(b'\n', &mut buf).map_err(rerr)?;
                if r == 0 || buf.ends_with(b"\n") {
                    break;
                }
            }
            continue;
        }
        let line = String::from_utf8_lossy(&buf);
        if line.trim().is_empty() {
            continue;
        }
        match serde_json::from_str(line.trim_end()) {
            Ok(e) => out.push(e),
            Err(e) if e.is_eof() && !buf.ends_with(b"\n") => continue,
            Err(e) => {
                tracing::warn!("undo journal {} line {n} is not a record joule understands ({e}); skipped", path.display());
                skipped.push(format!("{} line {n}: not a record joule understands: {e}", path.display()));
            }
        }
    }
    Ok((out, skipped))
}

/// A journal line longer than this is no record of joule's (the longest, a qdisc, is ~300 B).
const MAX_LINE_BYTES: u64 = 64 * 1024;
/// What a replay reads of a journal at most (a running agent compacts its journal).
const MAX_JOURNAL_BYTES: u64 = 256 * 1024 * 1024;

/// Replays records as if read from a journal file (each checked by `undo::refusal` first),
/// newest first, without a file: what `joule restore` would do with them (fuzzing, tests).
pub fn replay_checked_all(records: &[Undo], fx: &dyn Effects) -> RestoreReport {
    let mut report = RestoreReport::default();
    let origins = Origins::of(records);
    for undo in records.iter().rev() {
        replay_checked(&mut report, undo, fx, &origins);
    }
    report
}

/// Undoes in-memory records newest first (a failed apply rolling back what it did). Same
/// semantics as a journal replay: a vanished target counts as already gone.
pub fn replay(records: &[Undo], fx: &dyn Effects) -> RestoreReport {
    let mut report = RestoreReport::default();
    let origins = Origins::of(records);
    for undo in records.iter().rev() {
        tally(&mut report, undo, undo_one(undo, fx, &origins));
    }
    report
}

#[cfg(test)]
#[path = "tests.rs"]
mod tests;
