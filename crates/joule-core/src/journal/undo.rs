//! How each kind of record is undone, and what counts as done, already gone or failed. A cgroup
//! is emptied pass after pass and its removal retried while the kernel calls it busy.

use super::{same_task, RestoreReport, Undo};
use crate::effects::{Effects, Freezer, PseudoFs, FREEZE_SETTLE};
use std::collections::BTreeSet;
use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Counts one outcome; true when it is settled (done or gone), false when it failed.
pub(super) fn tally(report: &mut RestoreReport, undo: &Undo, outcome: io::Result<Outcome>) -> bool {
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

pub(super) enum Outcome {
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

pub(super) fn undo_one(undo: &Undo, fx: &dyn Effects) -> io::Result<Outcome> {
    match undo {
        Undo::Write { path, old } => gone_ok(fx.write(path, old)),
        Undo::RemoveFile { path } => gone_ok(fx.remove_file(path)),
        Undo::Unmount { path, magic } => Ok(if undo_mount(path, *magic, fx)? { Outcome::Done } else { Outcome::Gone }),
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
            let deleted = undo_replace(fx, netns.as_deref(), ifname, *ifindex, *parent, *handle, kind)?;
            Ok(if deleted { Outcome::Done } else { Outcome::Gone })
        }
        Undo::LinkDelete { netns, ifname, kind } => match fx.link_kind(netns.as_deref(), ifname) {
            Ok(k) if &k == kind => gone_ok(fx.delete_link(netns.as_deref(), ifname)),
            Ok(_) => Ok(Outcome::Gone),
            Err(e) if is_gone(&e) => Ok(Outcome::Gone),
            Err(e) => Err(e),
        },
        Undo::RemoveDir { path, .. } if !fx.exists(path) => Ok(Outcome::Gone),
        Undo::RemoveDir { path, evacuate_to: None } => gone_ok(fx.remove_dir(path)),
        Undo::RemoveDir { path, evacuate_to: Some(dest) } => gone_ok(remove_cgroup(path, dest, fx)),
    }
}

/// How long `remove_cgroup` keeps retrying a cgroup the kernel still calls busy: a task that
/// was exiting when it was moved stays counted until it is through `cgroup_exit`, which
/// comes after its memory is torn down (long for a large process).
pub(super) const CGROUP_BUSY_PATIENCE: Duration = Duration::from_secs(2);
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
                    let msg =
                        format!("{e}, still after {CGROUP_BUSY_PATIENCE:?}; {} lists [{left}] (none: a child cgroup, or a task slow to exit)", list.display());
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

/// How the journal undoes a mount: unmount `path` if `magic` is still mounted there and it is
/// empty. Ok(false) when there was nothing to do (already unmounted, or someone else's objects
/// live there now, which keeps it mounted).
fn undo_mount(path: &Path, magic: i64, fx: &dyn Effects) -> io::Result<bool> {
    if !fx.exists(path) || fx.fs_magic(path)? != magic {
        return Ok(false);
    }
    let Some(fs) = PseudoFs::from_magic(magic) else { return Ok(false) };
    if !fs.is_empty(path, fx)? {
        tracing::info!("leaving the {} joule mounted at {} in place: something else was put there since", fs.fstype(), path.display());
        return Ok(false);
    }
    fx.unmount(path)?;
    Ok(true)
}

/// How the journal undoes `replace_root`: deletes the qdisc if interface `ifindex` is still
/// `ifname` and still has that qdisc (`kind`, `handle`) at `parent`. Ok(false) when there was
/// nothing to do: the namespace, the interface or the qdisc has gone, or someone put another.
fn undo_replace(fx: &dyn Effects, netns: Option<&Path>, ifname: &str, ifindex: u32, parent: u32, handle: u32, kind: &str) -> io::Result<bool> {
    match fx.link_index(netns, ifname) {
        Ok(i) if i == ifindex => {}
        Ok(_) => return Ok(false), // re-created: our qdisc went with the old interface
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(e),
    }
    if !fx.qdiscs(netns, ifindex)?.iter().any(|o| o.parent == parent && o.handle == handle && o.kind == kind) {
        tracing::info!("leaving the qdisc at {parent:x} of {ifname} alone: it is no longer the {kind} {handle:x}: joule put there");
        return Ok(false);
    }
    fx.delete_qdisc(netns, ifindex, parent, handle)?;
    Ok(true)
}
