//! The undo journal. Every actuator records how to undo a change *before* making it; the
//! journal is an append-only JSON-lines file under the journal directory (default `/run/joule`,
//! which is tmpfs, so a reboot — which undoes everything anyway — also forgets it).
//! `joule restore`, agent start-up and agent shutdown replay it newest first, so a SIGKILLed
//! agent leaves nothing behind once any of them runs.

use crate::effects::{Effects, Freezer, SchedAttr, FREEZE_SETTLE};
use serde::{Deserialize, Serialize};
use std::fs::{File, OpenOptions};
use std::io::{self, BufRead, BufReader, Write};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::collections::BTreeSet;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

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
fn same_task(fx: &dyn Effects, pid: i32, started: Option<u64>) -> bool {
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
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(|source| JournalError::Open { path: path.clone(), source })?;
        Ok(Self { path, file })
    }

    pub fn path(&self) -> &Path {
        &self.path
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
    let lock = OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .map_err(|source| JournalError::Open { path: path.clone(), source })?;
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

/// Counts one outcome; true when it is settled (done or gone), false when it failed.
fn tally(report: &mut RestoreReport, undo: &Undo, outcome: io::Result<Outcome>) -> bool {
    match outcome {
        Ok(Outcome::Done) => report.undone += 1,
        Ok(Outcome::Gone) => report.already_gone += 1,
        Err(e) => {
            report.failed.push(format!("{undo:?}: {e}"));
            return false;
        }
    }
    true
}

enum Outcome {
    Done,
    Gone,
}

fn is_gone(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::NotFound || e.raw_os_error() == Some(libc::ESRCH)
}

fn gone_ok(r: io::Result<()>) -> io::Result<Outcome> {
    match r {
        Ok(()) => Ok(Outcome::Done),
        Err(e) if is_gone(&e) => Ok(Outcome::Gone),
        Err(e) => Err(e),
    }
}

fn undo_one(undo: &Undo, fx: &dyn Effects) -> io::Result<Outcome> {
    match undo {
        Undo::Write { path, old } => gone_ok(fx.write(path, old)),
        Undo::RemoveFile { path } => gone_ok(fx.remove_file(path)),
        Undo::Unmount { path, magic } => Ok(if crate::mounts::undo_mount(path, *magic, fx)? { Outcome::Done } else { Outcome::Gone }),
        Undo::MoveTask { pid, started, .. } | Undo::Sched { tid: pid, started, .. } | Undo::Affinity { tid: pid, started, .. }
            if !same_task(fx, *pid, *started) =>
        {
            Ok(Outcome::Gone)
        }
        Undo::MoveTask { pid, procs_file, .. } => gone_ok(fx.write(procs_file, &pid.to_string())),
        Undo::Sched { tid, old, .. } => gone_ok(fx.set_sched(*tid, *old)),
        Undo::Affinity { tid, old_cpus, .. } => gone_ok(fx.set_affinity(*tid, old_cpus)),
        Undo::Thaw { cgroup } => gone_ok(fx.thaw(cgroup, FREEZE_SETTLE)),
        Undo::QdiscDelete { netns, ifname, ifindex, parent, handle, kind } => {
            let deleted = crate::qdisc::undo_replace(fx, netns.as_deref(), ifname, *ifindex, *parent, *handle, kind)?;
            Ok(if deleted { Outcome::Done } else { Outcome::Gone })
        }
        Undo::RemoveDir { path, .. } if !fx.exists(path) => Ok(Outcome::Gone),
        Undo::RemoveDir { path, evacuate_to: None } => gone_ok(fx.remove_dir(path)),
        Undo::RemoveDir { path, evacuate_to: Some(dest) } => gone_ok(remove_cgroup(path, dest, fx)),
    }
}

/// How long `remove_cgroup` keeps retrying a cgroup the kernel still calls busy: a task that
/// was exiting when it was moved stays counted until it is through `cgroup_exit`, which
/// comes after its memory is torn down (long for a large process).
const CGROUP_BUSY_PATIENCE: Duration = Duration::from_secs(2);
/// Bound on read-and-move passes per removal attempt (a fork bomb inside never ends them).
const EVACUATE_PASSES: usize = 64;

/// Empties the cgroup at `dir` into `dest_procs` and removes it. A single pass over
/// `cgroup.procs` is not enough (issue 6): a task inside may fork between the read and its
/// own move, and the kernel silently skips a task that is already exiting (the write
/// succeeds, the group stays populated a moment longer). So, as systemd does, passes repeat
/// until one finds no task it has not moved yet, and rmdir is retried on EBUSY, both bounded.
fn remove_cgroup(dir: &Path, dest_procs: &Path, fx: &dyn Effects) -> io::Result<()> {
    let deadline = Instant::now() + CGROUP_BUSY_PATIENCE;
    let mut pause = Duration::from_millis(1);
    loop {
        evacuate(dir, dest_procs, fx)?;
        match fx.remove_dir(dir) {
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) => {
                if Instant::now() >= deadline {
                    let (list, _) = task_lists(dir, dest_procs, fx);
                    let left = fx.read(&list).unwrap_or_default().split_whitespace().collect::<Vec<_>>().join(" ");
                    let msg = format!("{e}, still after {CGROUP_BUSY_PATIENCE:?}; {} lists [{left}] (none: a child cgroup, or a task slow to exit)", list.display());
                    return Err(io::Error::new(e.kind(), msg));
                }
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_millis(50));
            }
            r => return r,
        }
    }
}

/// Moves every task of the cgroup at `dir` into `dest_procs`, pass after pass until a pass
/// finds no task it has not already moved. On v1 it goes thread by thread through `tasks`
/// (into the `tasks` file next to `dest_procs`): v1's `cgroup.procs` lists the process of any
/// thread inside, and moving that process would also take its threads that live in other
/// cgroups. v2 has no `tasks`: whole processes go through `cgroup.procs`. A task moved once is
/// not moved again, because v2 keeps listing a zombie leader whose threads live on.
fn evacuate(dir: &Path, dest_procs: &Path, fx: &dyn Effects) -> io::Result<()> {
    let (list, dest) = task_lists(dir, dest_procs, fx);
    let mut moved = BTreeSet::new();
    for _ in 0..EVACUATE_PASSES {
        let Ok(ids) = fx.read(&list) else { return Ok(()) };
        let mut found = false;
        for id in ids.split_whitespace().filter(|id| moved.insert(id.to_string())) {
            found = true;
            match fx.write(&dest, id) {
                Ok(()) => {}
                Err(e) if is_gone(&e) => {}
                Err(e) => return Err(e),
            }
        }
        if !found {
            break;
        }
    }
    Ok(())
}

/// (the list of tasks in `dir`, the file to write them to): `tasks` on v1, else `cgroup.procs`.
fn task_lists(dir: &Path, dest_procs: &Path, fx: &dyn Effects) -> (PathBuf, PathBuf) {
    if fx.exists(&dir.join("tasks")) {
        (dir.join("tasks"), dest_procs.with_file_name("tasks"))
    } else {
        (dir.join("cgroup.procs"), dest_procs.to_path_buf())
    }
}

pub const AGENT_LOCK_FILE: &str = "agent.lock";

/// Held by a running agent for its whole life. The kernel drops an flock when its holder dies,
/// SIGKILL included, so a crashed agent never leaves a stale lock.
pub struct AgentLock {
    _file: File,
}

fn lock_file(dir: &Path) -> Result<File, JournalError> {
    let path = dir.join(AGENT_LOCK_FILE);
    std::fs::create_dir_all(dir).map_err(|source| JournalError::Open { path: path.clone(), source })?;
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .map_err(|source| JournalError::Open { path, source })
}

fn try_flock(f: &File) -> bool {
    // SAFETY: flock on an fd we own.
    unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) == 0 }
}

/// Takes the agent lock in `dir`, or says which pid holds it.
pub fn lock_agent(dir: &Path) -> Result<Result<AgentLock, Option<u32>>, JournalError> {
    let mut f = lock_file(dir)?;
    if !try_flock(&f) {
        let pid = std::fs::read_to_string(dir.join(AGENT_LOCK_FILE)).ok().and_then(|s| s.trim().parse().ok());
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

pub fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::effects::FakeEffects;

    #[test]
    fn replays_newest_first_and_empties_the_journal() {
        let dir = tempfile::tempdir().unwrap();
        let fx = FakeEffects::default().with_file("/k/knob", "changed-twice");
        let mut j = Journal::open(dir.path()).unwrap();
        j.record("t", Undo::Write { path: "/k/knob".into(), old: "original".into() }).unwrap();
        j.record("t", Undo::Write { path: "/k/knob".into(), old: "changed-once".into() }).unwrap();
        let r = restore(dir.path(), &fx).unwrap();
        assert_eq!(r.undone, 2);
        assert_eq!(fx.file("/k/knob").as_deref(), Some("original"));
        assert!(entries(dir.path()).unwrap().is_empty());
    }

    #[test]
    fn vanished_targets_count_as_gone_not_failed() {
        let dir = tempfile::tempdir().unwrap();
        let fx = FakeEffects::default();
        let mut j = Journal::open(dir.path()).unwrap();
        j.record("t", Undo::Sched { tid: 4242, old: SchedAttr::OTHER, started: None }).unwrap();
        j.record("t", Undo::RemoveDir { path: "/cg/joule".into(), evacuate_to: None }).unwrap();
        let r = restore(dir.path(), &fx).unwrap();
        assert_eq!((r.undone, r.already_gone, r.failed.len()), (0, 2, 0));
    }

    #[test]
    fn evacuates_tasks_before_removing_a_cgroup() {
        let dir = tempfile::tempdir().unwrap();
        let fx = FakeEffects::default()
            .with_file("/cg/cgroup.procs", "1\n")
            .with_file("/cg/joule/cgroup.procs", "7\n8\n");
        fx.dirs.lock().unwrap().insert("/cg/joule".into(), ());
        let mut j = Journal::open(dir.path()).unwrap();
        j.record("t", Undo::RemoveDir { path: "/cg/joule".into(), evacuate_to: Some("/cg/cgroup.procs".into()) })
            .unwrap();
        restore(dir.path(), &fx).unwrap();
        let log = fx.log.lock().unwrap().clone();
        assert_eq!(log, vec!["write /cg/cgroup.procs 7", "write /cg/cgroup.procs 8", "rmdir /cg/joule"]);
    }

    /// A fake cgroup /cg/joule (v2-like: no `tasks`) recorded for removal into /cg.
    fn cgroup_to_remove(procs: &str) -> (tempfile::TempDir, FakeEffects) {
        let dir = tempfile::tempdir().unwrap();
        let fx = FakeEffects::default().with_file("/cg/cgroup.procs", "1\n").with_file("/cg/joule/cgroup.procs", procs);
        fx.dirs.lock().unwrap().insert("/cg/joule".into(), ());
        let mut j = Journal::open(dir.path()).unwrap();
        j.record("t", Undo::RemoveDir { path: "/cg/joule".into(), evacuate_to: Some("/cg/cgroup.procs".into()) }).unwrap();
        (dir, fx)
    }

    #[test]
    fn restore_moves_a_task_forked_into_the_cgroup_during_its_evacuation() {
        // Issue 6: 7 forks 9 between the first read of cgroup.procs and its own move; one pass
        // then rmdir left 9 inside (EBUSY in the kernel).
        let (dir, fx) = cgroup_to_remove("");
        fx.then_reads("/cg/joule/cgroup.procs", &["7\n", "9\n"]);
        let r = restore(dir.path(), &fx).unwrap();
        assert_eq!((r.undone, r.failed.len()), (1, 0), "{r:?}");
        let log = fx.log.lock().unwrap().clone();
        assert_eq!(log, vec!["write /cg/cgroup.procs 7", "write /cg/cgroup.procs 9", "rmdir /cg/joule"]);
    }

    #[test]
    fn a_task_that_stays_listed_after_its_move_is_moved_once() {
        // v2 lists a zombie leader whose threads live on; moving it again would never end.
        let (dir, fx) = cgroup_to_remove("7\n");
        restore(dir.path(), &fx).unwrap();
        let log = fx.log.lock().unwrap().clone();
        assert_eq!(log, vec!["write /cg/cgroup.procs 7", "rmdir /cg/joule"]);
    }

    #[test]
    fn rmdir_is_retried_while_the_kernel_says_busy_and_each_try_evacuates_again() {
        // A task that was exiting when it was moved stays counted until it is through exit.
        let (dir, fx) = cgroup_to_remove("7\n");
        fx.fail_calls_times("rmdir /cg/joule", libc::EBUSY, 2);
        let r = restore(dir.path(), &fx).unwrap();
        assert_eq!((r.undone, r.failed.len()), (1, 0), "{r:?}");
        let log = fx.log.lock().unwrap().clone();
        assert_eq!(log.iter().filter(|l| *l == "write /cg/cgroup.procs 7").count(), 3, "{log:?}");
        assert_eq!(log.last().map(String::as_str), Some("rmdir /cg/joule"));
    }

    #[test]
    fn a_cgroup_that_stays_busy_fails_after_a_bounded_wait_and_stays_in_the_journal() {
        let (dir, fx) = cgroup_to_remove("7\n");
        fx.fail_calls("rmdir /cg/joule", libc::EBUSY);
        let t0 = Instant::now();
        let r = restore(dir.path(), &fx).unwrap();
        let took = t0.elapsed();
        assert!(took >= CGROUP_BUSY_PATIENCE && took < CGROUP_BUSY_PATIENCE + Duration::from_secs(1), "{took:?}");
        assert_eq!(r.failed.len(), 1, "{r:?}");
        assert!(r.failed[0].contains("busy") && r.failed[0].contains("lists [7]"), "{}", r.failed[0]);
        assert_eq!(entries(dir.path()).unwrap().len(), 1, "the failed record stays for a retry");
    }

    #[test]
    fn v1_moves_threads_one_by_one_through_tasks() {
        // Thread 8 of process 7 is in the cgroup on its own: moving process 7 through
        // cgroup.procs would also drag its other threads out of wherever they are.
        let (dir, fx) = cgroup_to_remove("7\n");
        let fx = fx.with_file("/cg/joule/tasks", "8\n").with_file("/cg/tasks", "");
        restore(dir.path(), &fx).unwrap();
        let log = fx.log.lock().unwrap().clone();
        assert_eq!(log, vec!["write /cg/tasks 8", "rmdir /cg/joule"]);
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

    #[test]
    fn restore_owner_leaves_other_owners_records_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let fx = FakeEffects::default().with_file("/a", "new").with_file("/b", "new").with_file("/c", "new");
        let mut j = Journal::open(dir.path()).unwrap();
        j.record("thermal", Undo::Write { path: "/a".into(), old: "a0".into() }).unwrap();
        j.record("qos", Undo::Write { path: "/b".into(), old: "b0".into() }).unwrap();
        j.record("thermal", Undo::Write { path: "/c".into(), old: "c0".into() }).unwrap();
        let r = restore_owner(dir.path(), "qos", &fx).unwrap();
        assert_eq!(r.undone, 1);
        assert_eq!(fx.file("/b").as_deref(), Some("b0"));
        assert_eq!(fx.file("/a").as_deref(), Some("new"));
        let left: Vec<_> = entries(dir.path()).unwrap().into_iter().map(|e| e.undo).collect();
        assert_eq!(
            left,
            vec![Undo::Write { path: "/a".into(), old: "a0".into() }, Undo::Write { path: "/c".into(), old: "c0".into() }]
        );
    }

    #[test]
    fn record_waits_while_a_restore_holds_the_journal() {
        let dir = tempfile::tempdir().unwrap();
        let mut j = Journal::open(dir.path()).unwrap();
        j.record("t", Undo::RemoveFile { path: "/x".into() }).unwrap();
        let other = File::open(j.path()).unwrap(); // what restore_where locks: another open file
        let held = FileLock::exclusive(&other);
        let (tx, rx) = std::sync::mpsc::channel();
        let t = std::thread::spawn(move || {
            j.record("t", Undo::RemoveFile { path: "/y".into() }).unwrap();
            tx.send(()).unwrap();
        });
        assert!(rx.recv_timeout(std::time::Duration::from_millis(200)).is_err(), "record did not wait for the lock");
        drop(held);
        rx.recv_timeout(std::time::Duration::from_secs(5)).unwrap();
        t.join().unwrap();
        assert_eq!(entries(dir.path()).unwrap().len(), 2);
    }

    fn stat(comm: &str, start: u64) -> String {
        // pid (comm) state ppid ... with field 22 = start.
        let mut f: Vec<String> = (3..=21).map(|i| i.to_string()).collect();
        f[0] = "S".into();
        f.push(start.to_string());
        f.push("23".into());
        format!("7 ({comm}) {}", f.join(" "))
    }

    #[test]
    fn start_time_reads_field_22_even_with_a_tricky_comm() {
        let fx = FakeEffects::default().with_file("/proc/7/stat", &stat("a) b (c", 123456));
        assert_eq!(start_time(&fx, 7), Some(123456));
        assert_eq!(start_time(&fx, 8), None);
    }

    #[test]
    fn a_reused_pid_is_not_moved_back() {
        let dir = tempfile::tempdir().unwrap();
        let fx = FakeEffects::default().with_file("/proc/7/stat", &stat("worker", 100)).with_file("/cg/cgroup.procs", "");
        let mut j = Journal::open(dir.path()).unwrap();
        j.record("t", Undo::move_task(&fx, 7, "/cg/cgroup.procs".into())).unwrap();
        // pid 7 exits and a new task gets the same pid, started later.
        fx.files.lock().unwrap().insert("/proc/7/stat".into(), stat("intruder", 999));
        let r = restore(dir.path(), &fx).unwrap();
        assert_eq!((r.undone, r.already_gone), (0, 1));
        assert_eq!(fx.file("/cg/cgroup.procs").as_deref(), Some(""), "the reused pid was moved");
        // The same incarnation is moved back.
        let mut j = Journal::open(dir.path()).unwrap();
        j.record("t", Undo::move_task(&fx, 7, "/cg/cgroup.procs".into())).unwrap();
        assert_eq!(restore(dir.path(), &fx).unwrap().undone, 1);
        assert_eq!(fx.file("/cg/cgroup.procs").as_deref(), Some("7"));
    }

    #[test]
    fn torn_last_line_is_ignored() {
        let dir = tempfile::tempdir().unwrap();
        let mut j = Journal::open(dir.path()).unwrap();
        j.record("t", Undo::RemoveFile { path: "/sys/fs/bpf/joule/x".into() }).unwrap();
        let mut f = OpenOptions::new().append(true).open(j.path()).unwrap();
        f.write_all(b"{\"owner\":\"t\",\"at_ms\":1,\"op\":\"wri").unwrap();
        assert_eq!(entries(dir.path()).unwrap().len(), 1);
    }

    #[test]
    fn failed_records_stay_for_a_retry() {
        let dir = tempfile::tempdir().unwrap();
        let fx = FakeEffects::default().with_file("/ro/knob", "new").with_file("/rw/knob", "new");
        fx.read_only.lock().unwrap().push("/ro".into());
        let mut j = Journal::open(dir.path()).unwrap();
        j.record("t", Undo::Write { path: "/ro/knob".into(), old: "old".into() }).unwrap();
        j.record("t", Undo::Write { path: "/rw/knob".into(), old: "old".into() }).unwrap();
        let r = restore(dir.path(), &fx).unwrap();
        assert_eq!((r.undone, r.failed.len()), (1, 1));
        let left = entries(dir.path()).unwrap();
        assert_eq!(left.len(), 1);
        assert_eq!(left[0].undo, Undo::Write { path: "/ro/knob".into(), old: "old".into() });
    }
}
