//! Keeping the classes in place: moving matching tasks in (from the /proc scan or one pid),
//! and `reconcile`, which also recreates cgroups deleted under joule.

use super::env::hint_for;
use super::{ApplyReport, Moved, QosController, ReconcileReport};
use crate::backend::{BackendKind, PlannedWrite, Step};
use crate::matching::{assign, read_proc, scan, ProcInfo};
use crate::QosError;
use joule_core::effects::Effects;
use joule_core::journal::{Journal, Undo};
use std::time::Instant;

impl QosController {
    /// Moves every process matching a class (and not yet in place) into its class.
    pub(super) fn move_matching(&mut self, journal: &Journal, fx: &dyn Effects) -> Result<(Moved, Vec<i32>), QosError> {
        let procs = scan(&self.opts.procfs_root);
        let me = std::process::id() as i32;
        let want = assign(&procs, &self.classes);
        let (mut moved, mut vanished) = (Vec::new(), Vec::new());
        // The scan already read each process's cgroups: place from that, not from /proc again.
        for info in procs.iter().filter(|p| p.pid != me) {
            let Some(class) = want.get(&info.pid) else { continue };
            match self.place_info(journal, fx, class, info, false) {
                Ok(true) => moved.push((info.pid, class.clone())),
                Ok(false) => {}
                Err(Some(e)) => return Err(e),
                Err(None) => vanished.push(info.pid),
            }
        }
        Ok((moved, vanished))
    }

    /// Moves one process (or, with `thread`, one thread) into `class` in every hierarchy,
    /// recording where it came from first. Ok(false): already there. Err(None): it vanished.
    pub fn place(&mut self, journal: &Journal, fx: &dyn Effects, class: &str, pid: i32, thread: bool) -> Result<bool, Option<QosError>> {
        let Some(info) = read_proc(&self.opts.procfs_root, pid) else { return Err(None) };
        self.place_info(journal, fx, class, &info, thread)
    }

    /// `place` for a process whose /proc entry was just read (by `scan`).
    fn place_info(&mut self, journal: &Journal, fx: &dyn Effects, class: &str, info: &ProcInfo, thread: bool) -> Result<bool, Option<QosError>> {
        let pid = info.pid;
        let mut any = false;
        let file = if thread && self.layout.kind == BackendKind::V1 { "tasks" } else { "cgroup.procs" };
        for i in 0..self.layout.hiers.len() {
            let (target, old_dir) = {
                let (h, m) = &self.layout.hiers[i];
                let old_rel = info.cgroups.path(h.controller()).unwrap_or("/");
                (self.task_dir(m, class), m.join(old_rel.trim_start_matches('/')))
            };
            if old_dir == target && !thread {
                continue;
            }
            self.record(journal, Undo::move_task(fx, pid, old_dir.join(file))).map_err(Some)?;
            let dest = target.join(file);
            match fx.write(&dest, &pid.to_string()) {
                Ok(()) => any = true,
                Err(e) if e.raw_os_error() == Some(libc::ESRCH) => return Err(None),
                Err(e) => {
                    return Err(Some(match e.raw_os_error() {
                        Some(libc::EROFS) | Some(libc::EACCES) | Some(libc::EPERM) => QosError::io("move a task", &dest, e),
                        _ => QosError::KernelRefused {
                            hint: hint_for(&dest, &e),
                            what: format!("moving pid {pid} into class {class}"),
                            path: dest,
                            value: pid.to_string(),
                            source: e,
                        },
                    }))
                }
            }
        }
        Ok(any)
    }

    /// Keeps the classes in place: recreates cgroups deleted under joule and moves newly
    /// matching tasks in. Rate-limited to `reconcile_interval`, so it can be called from a
    /// 100 ms control loop (a /proc scan costs a few ms per thousand processes).
    pub fn reconcile(&mut self, journal: &Journal, fx: &dyn Effects) -> Result<ReconcileReport, QosError> {
        let mut r = ReconcileReport::default();
        if self.last_reconcile.is_some_and(|t| t.elapsed() < self.opts.reconcile_interval) {
            r.skipped_rate_limit = true;
            return Ok(r);
        }
        self.last_reconcile = Some(Instant::now());
        let gone = self.plan.writes.iter().any(|PlannedWrite(s)| matches!(s, Step::Mkdir { path, .. } if !fx.exists(path)));
        if gone {
            let mut rep = ApplyReport::default();
            self.run_steps(journal, fx, &mut rep)?;
            if !rep.created.is_empty() {
                self.forget_written_caps();
            }
            r.recreated = rep.created;
        }
        let (moved, vanished) = self.move_matching(journal, fx)?;
        r.moved = moved;
        r.vanished = vanished;
        Ok(r)
    }
}
