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
        // The scan already read each process's cgroups and start time: place from that, not
        // from /proc again.
        let plans: Vec<(&str, i32, Vec<Move>)> = members
            .to_place()
            .map(|m| (m.class.as_str(), m.pid, self.plan_moves(&m.class, m.pid, m.started, &m.cgroups, false)))
            .filter(|p| !p.2.is_empty())
            .collect();
        self.record_all(journal, plans.iter().flat_map(|p| p.2.iter().map(|(u, _)| u.clone())).collect())?;
        for (class, pid, moves) in &plans {
            match write_moves(fx, class, *pid, moves) {
                Ok(()) => moved.push((*pid, class.to_string())),
                Err(Some(e)) => return Err(e),
                Err(None) => vanished.push(*pid),
            }
        }
        Ok((moved, vanished))
    }

    /// The membership of this controller's classes, from one scan of /proc.
    pub(super) fn scan_members(&self, fx: &dyn Effects) -> Membership {
        Membership::scan(&self.opts.procfs_root, &self.classes, &[], fx)
    }

    /// Moves one process (or, with `thread`, one thread) into `class` in every hierarchy,
    /// recording where it came from first. Ok(false): already there. Err(None): it vanished.
    pub fn place(&mut self, journal: &Journal, fx: &dyn Effects, class: &str, pid: i32, thread: bool) -> Result<bool, Option<QosError>> {
        let Some(info) = read_proc(&self.opts.procfs_root, pid) else { return Err(None) };
        let started = joule_core::journal::start_time(fx, pid);
        let moves = self.plan_moves(class, pid, started, &info.cgroups, thread);
        if moves.is_empty() {
            return Ok(false);
        }
        self.record_all(journal, moves.iter().map(|(u, _)| u.clone()).collect()).map_err(Some)?;
        write_moves(fx, class, pid, &moves).map(|()| true)
    }

    /// The moves that put `pid` (started at `started`), whose cgroups are `cgroups`, into
    /// `class`: per hierarchy where it is not there yet, the undo record and the file to write
    /// its pid to.
    fn plan_moves(&self, class: &str, pid: i32, started: Option<u64>, cgroups: &TaskCgroups, thread: bool) -> Vec<Move> {
        let mut out = Vec::new();
        for (h, m) in &self.layout.hiers {
            let old_rel = cgroups.path(h.controller()).unwrap_or("/");
            // v1 moves one thread through `tasks`; v2 (and a v2 hierarchy beside v1 ones) has
            // no `tasks` and moves whole processes.
            let file = if thread && *h != Hier::Unified && self.layout.kind == BackendKind::V1 { "tasks" } else { "cgroup.procs" };
            let (target, old_dir) = (self.task_dir(m, class), m.join(old_rel.trim_start_matches('/')));
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
        let (moved, vanished) = self.move_members(journal, fx, members)?;
        r.moved = moved;
        r.vanished = vanished;
        Ok(r)
    }
}

/// One planned move: the record that undoes it, and the file to write the pid to.
type Move = (Undo, PathBuf);

/// Writes `pid` into each move's file (its undo already journalled). Err(None): it vanished.
fn write_moves(fx: &dyn Effects, class: &str, pid: i32, moves: &[Move]) -> Result<(), Option<QosError>> {
    for (_, dest) in moves {
        match fx.write(dest, &pid.to_string()) {
            Ok(()) => {}
            Err(e) if e.raw_os_error() == Some(libc::ESRCH) => return Err(None),
            Err(e) => {
                return Err(Some(match e.raw_os_error() {
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
