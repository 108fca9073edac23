//! Keeping the classes in place: moving their tasks in (from the membership reading or one
//! pid), and `hold`/`reconcile`, which also recreate cgroups deleted under joule. The class
//! mover is the one owner of where a class's process lives, in every hierarchy the class uses
//! (its CPU hierarchies and, when asked, the freezer and the unified one).

use super::env::hint_for;
use super::{ApplyReport, Moved, QosController, ReconcileReport};
use crate::backend::{BackendKind, Hier, PlannedWrite, Step};
use crate::QosError;
use joule_core::effects::Effects;
use joule_core::journal::{Journal, Undo};
use joule_core::membership::matching::read_proc;
use joule_core::membership::Membership;
use joule_core::procfs::TaskCgroups;
use std::path::PathBuf;
use std::time::Instant;

impl QosController {
    /// Moves every process of a class (and not yet in place) into its class, as `members`
    /// saw them: every move's undo record first, in one journal write and one sync, then the
    /// moves.
    pub(super) fn move_members(&mut self, journal: &Journal, fx: &dyn Effects, members: &Membership) -> Result<(Moved, Vec<i32>), QosError> {
        let (mut moved, mut vanished) = (Vec::new(), Vec::new());
        let mut unpinned = None;
        // The scan already read each process's cgroups and start time: place from that, not
        // from /proc again.
        let plans: Vec<(&str, i32, Vec<Move>)> = members
            .to_place()
            .map(|m| (m.class.as_str(), m.pid, self.plan_moves(&m.class, m.pid, m.started, &m.cgroups, false)))
            .filter(|p| !p.2.is_empty())
            .collect();
        self.record_all(journal, plans.iter().flat_map(|p| p.2.iter().map(|(u, _)| u.clone())).collect())?;
        for (class, pid, moves) in &plans {
            match write_moves(fx, &members.procfs, class, *pid, moves) {
                Ok(()) => {
                    moved.push((*pid, class.to_string()));
                    if let Some(m) = members.members.get(pid) {
                        let origin = self.origin_of(&m.cgroups);
                        self.origins.insert(*pid, origin);
                    }
                }
                Err(MoveError::Failed(e)) => return Err(e),
                // Neither gone nor pinned: the other members still move; the error makes the
                // next reading try every member again.
                Err(MoveError::Unpinned(e)) => {
                    unpinned.get_or_insert(e);
                }
                Err(MoveError::Vanished) => vanished.push(*pid),
            }
        }
        self.take_out_leavers(fx, members);
        if let Some(e) = unpinned {
            return Err(e);
        }
        // A reading without leavers (a walk of /proc each time, without eBPF) never says who
        // exited: past a bound, forget the origins of processes that are gone. The next sweep
        // waits until the map has doubled again, so a machine with that many live members pays
        // for a sweep per doubling (churn), not one per period.
        if self.origins.len() > self.origins_sweep_at {
            let procfs = &members.procfs;
            self.origins.retain(|pid, _| joule_core::procfs::task_dir(procfs, *pid).exists());
            self.origins_sweep_at = MAX_ORIGINS.max(2 * self.origins.len());
        }
        Ok((moved, vanished))
    }

    /// Per hierarchy, the `cgroup.procs` of the cgroup a process with `cgroups` is in, when that
    /// is not one of joule's.
    fn origin_of(&self, cgroups: &TaskCgroups) -> Vec<(PathBuf, PathBuf)> {
        let ours = |d: &std::path::Path, m: &std::path::Path| self.layout.is_ours(m, &self.plan, d);
        self.layout
            .hiers
            .iter()
            .filter_map(|(h, m)| {
                let dir = cgroups.dir_in(m, h.controller());
                (!ours(&dir, m)).then(|| (m.clone(), dir.join("cgroup.procs")))
            })
            .collect()
    }

    /// Takes the processes that left every class (a uid change; a child that switched to
    /// another user under a member) out of joule's cgroups, back to where their nearest moved
    /// ancestor came from (the hierarchy's root when none is known). A process that exited is
    /// forgotten. Best effort: a process that vanishes meanwhile is simply gone.
    fn take_out_leavers(&mut self, fx: &dyn Effects, members: &Membership) {
        const MAX_HOPS: usize = 64;
        for pid in members.left().collect::<Vec<_>>() {
            let Some(info) = read_proc(fx, &members.procfs, pid) else {
                self.origins.remove(&pid);
                continue;
            };
            let mut origin = None;
            let mut cur = Some(info.clone());
            for _ in 0..MAX_HOPS {
                let Some(p) = cur.filter(|p| p.pid > 1) else { break };
                if let Some(o) = self.origins.get(&p.pid) {
                    origin = Some(o.clone());
                    break;
                }
                cur = read_proc(fx, &members.procfs, p.ppid);
            }
            self.origins.remove(&pid);
            for (h, m) in &self.layout.hiers {
                let dir = info.cgroups.dir_in(m, h.controller());
                if !self.layout.is_ours(m, &self.plan, &dir) {
                    continue;
                }
                let dest = origin.as_ref().and_then(|o| o.iter().find(|(mm, _)| mm == m).map(|(_, f)| f.clone())).unwrap_or_else(|| m.join("cgroup.procs"));
                let mv = [(Undo::MoveTask { pid, procs_file: dir.join("cgroup.procs"), started: info.started }, dest.clone())];
                match write_moves(fx, &members.procfs, "(none)", pid, &mv) {
                    Ok(()) => tracing::info!("pid {pid} left its class: moved from {} back to {}", dir.display(), dest.display()),
                    Err(MoveError::Vanished) => break,
                    Err(MoveError::Failed(e) | MoveError::Unpinned(e)) => tracing::warn!("pid {pid} left its class but stays in {}: {e}", dir.display()),
                }
            }
        }
    }

    /// The membership of this controller's classes, from one scan of /proc.
    pub(super) fn scan_members(&self, fx: &dyn Effects) -> Membership {
        Membership::scan(&self.opts.procfs_root, &self.classes, &[], fx)
    }

    /// Moves one process (or, with `thread`, one thread) into `class` in every hierarchy,
    /// recording where it came from first. Ok(false): already there. Err(None): it vanished.
    pub fn place(&mut self, journal: &Journal, fx: &dyn Effects, class: &str, pid: i32, thread: bool) -> Result<bool, Option<QosError>> {
        let Some(info) = read_proc(fx, &self.opts.procfs_root, pid) else { return Err(None) };
        let started = joule_core::journal::start_time(fx, pid);
        let moves = self.plan_moves(class, pid, started, &info.cgroups, thread);
        if moves.is_empty() {
            return Ok(false);
        }
        self.record_all(journal, moves.iter().map(|(u, _)| u.clone()).collect()).map_err(Some)?;
        write_moves(fx, &self.opts.procfs_root, class, pid, &moves).map(|()| true).map_err(|e| match e {
            MoveError::Vanished => None,
            MoveError::Failed(e) | MoveError::Unpinned(e) => Some(e),
        })
    }

    /// The moves that put `pid` (started at `started`), whose cgroups are `cgroups`, into
    /// `class`: per hierarchy where it is not there yet, the undo record and the file to write
    /// its pid to.
    fn plan_moves(&self, class: &str, pid: i32, started: Option<u64>, cgroups: &TaskCgroups, thread: bool) -> Vec<Move> {
        let mut out = Vec::new();
        for (h, m) in &self.layout.hiers {
            // v1 moves one thread through `tasks`; v2 (and a v2 hierarchy beside v1 ones) has
            // no `tasks` and moves whole processes.
            let file = if thread && *h != Hier::Unified && self.layout.kind == BackendKind::V1 { "tasks" } else { "cgroup.procs" };
            // The directory it is in, exactly: its owner may have named it in any bytes.
            let (target, old_dir) = (self.task_dir(m, class), cgroups.dir_in(m, h.controller()));
            if old_dir == target && !thread {
                continue;
            }
            out.push((Undo::MoveTask { pid, procs_file: old_dir.join(file), started }, target.join(file)));
        }
        out
    }

    /// Keeps the classes in place (`joule qos apply --follow`): as [`hold`](Self::hold) with
    /// a scan of its own, rate-limited to `reconcile_interval` (a /proc scan costs a few ms
    /// per thousand processes).
    pub fn reconcile(&mut self, journal: &Journal, fx: &dyn Effects) -> Result<ReconcileReport, QosError> {
        if self.last_reconcile.is_some_and(|t| t.elapsed() < self.opts.reconcile_interval) {
            return Ok(ReconcileReport { skipped_rate_limit: true, ..Default::default() });
        }
        self.last_reconcile = Some(Instant::now());
        let members = self.scan_members(fx);
        self.hold(journal, fx, &members)
    }

    /// Keeps the classes in place: recreates cgroups deleted under joule and moves the
    /// processes `members` lists that are not in their class yet (the agent's membership
    /// reading, once per period).
    pub fn hold(&mut self, journal: &Journal, fx: &dyn Effects, members: &Membership) -> Result<ReconcileReport, QosError> {
        let mut r = ReconcileReport::default();
        let gone = self.writes.iter().any(|PlannedWrite(s)| matches!(s, Step::Mkdir { path, .. } if !fx.exists(path)));
        if gone {
            let mut rep = ApplyReport::default();
            self.run_steps(journal, fx, &mut rep)?;
            if !rep.created.is_empty() {
                self.forget_written_caps();
            }
            r.recreated = rep.created;
        }
        r.notes.extend(self.hold_deadline(journal, fx, members)?);
        let (moved, vanished) = self.move_members(journal, fx, members)?;
        r.moved = moved;
        r.vanished = vanished;
        Ok(r)
    }
}

/// How many moved processes' origins the mover keeps before it drops those that exited.
pub(super) const MAX_ORIGINS: usize = 65_536;

/// One planned move: the record that undoes it, and the file to write the pid to.
type Move = (Undo, PathBuf);

/// Why a task was not moved.
enum MoveError {
    /// It exited, or its pid is another task's now.
    Vanished,
    /// /proc could not say whether it is the task the reading matched: not gone, not moved.
    Unpinned(QosError),
    Failed(QosError),
}

/// Writes `pid` into each move's file (its undo already journalled).
fn write_moves(fx: &dyn Effects, procfs: &std::path::Path, class: &str, pid: i32, moves: &[Move]) -> Result<(), MoveError> {
    let started = moves.iter().find_map(|(u, _)| match u {
        Undo::MoveTask { started, .. } => *started,
        _ => None,
    });
    for (_, dest) in moves {
        // The process the reading matched, checked at the moment of the write (through `fx`,
        // as the reading was made): a pid that has exited since and been reused by another
        // process is not moved (issue 17), and one whose stat cannot be read is not "gone".
        if let Some(started) = started {
            match joule_core::procfs::same_task(fx, procfs, pid, started) {
                Ok(true) => {}
                Ok(false) => return Err(MoveError::Vanished),
                Err(e) => {
                    let stat = joule_core::procfs::task_dir(procfs, pid).join("stat");
                    return Err(MoveError::Unpinned(QosError::io(format!("pin pid {pid} by its start time"), &stat, e)));
                }
            }
        }
        match fx.write(dest, &pid.to_string()) {
            Ok(()) => {}
            Err(e) if e.raw_os_error() == Some(libc::ESRCH) => return Err(MoveError::Vanished),
            Err(e) => {
                return Err(MoveError::Failed(match e.raw_os_error() {
                    Some(libc::EROFS) | Some(libc::EACCES) | Some(libc::EPERM) => QosError::io("move a task", dest, e),
                    _ => QosError::KernelRefused {
                        hint: hint_for(dest, &e),
                        what: format!("moving pid {pid} into class {class}"),
                        path: dest.clone(),
                        value: pid.to_string(),
                        source: e,
                    },
                }))
            }
        }
    }
    Ok(())
}
