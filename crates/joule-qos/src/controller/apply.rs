//! Applying the plan (cgroups created, knobs written, matching tasks moved in), each change
//! journalled first, and undoing it: a failed apply's rollback and `release`.

use super::env::hint_for;
use super::{ApplyReport, QosController};
use crate::backend::{PlannedWrite, Step};
use crate::QosError;
use joule_core::effects::Effects;
use joule_core::journal::{Journal, RestoreReport, Undo};
use std::io;
use std::path::Path;
use std::time::{Duration, Instant};

impl QosController {
    /// Creates the class cgroups, writes their knobs and moves matching tasks in. On any
    /// failure everything this call did is undone and the error names the offending value.
    pub fn apply(&mut self, journal: &Journal, fx: &dyn Effects) -> Result<ApplyReport, QosError> {
        let mut report = ApplyReport::default();
        let mark = self.applied.len();
        let result = self.run_steps(journal, fx, &mut report).and_then(|_| {
            let members = self.scan_members(fx);
            // Reservations before moves: a deadline thread may join any group, a real-time one
            // not a v1 group without RT runtime (the deadline backend's groups have none).
            report.notes.extend(self.hold_deadline(journal, fx, &members)?);
            let (moved, vanished) = self.move_members(journal, fx, &members)?;
            report.moved = moved;
            report.vanished = vanished;
            Ok(())
        });
        if let Err(e) = result {
            let mine = self.applied.split_off(mark);
            self.dl.forget();
            let failed = self.undo(&mine, Some(journal), fx).failed;
            if !failed.is_empty() {
                tracing::warn!("rollback left {} record(s) for `joule restore`: {:?}", failed.len(), failed);
            }
            return Err(e);
        }
        for v in &report.vanished {
            report.notes.push(format!("pid {v} exited before it could be moved; skipped"));
        }
        Ok(report)
    }

    /// Takes the flock on joule's group directory when `dir` is the first one made or found
    /// (before anything is written into it): a second agent on the same tree stops here.
    fn lock_group(&mut self, fx: &dyn Effects, dir: &std::path::Path) -> Result<(), QosError> {
        if self.group_lock.is_some() || dir.file_name().is_none_or(|n| n != self.opts.group_name.as_str()) {
            return Ok(());
        }
        match fx.lock_dir(dir) {
            Ok(fd) => {
                self.group_lock = fd;
                Ok(())
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => Err(QosError::AnotherAgent { path: dir.to_path_buf() }),
            Err(e) => Err(QosError::io("lock joule's group", dir, e)),
        }
    }

    pub(super) fn run_steps(&mut self, journal: &Journal, fx: &dyn Effects, report: &mut ApplyReport) -> Result<(), QosError> {
        let mut made = std::collections::BTreeSet::new();
        for PlannedWrite(step) in self.writes.clone() {
            match step {
                Step::Mkdir { path, evacuate_to } => {
                    if fx.exists(&path) {
                        self.lock_group(fx, &path)?;
                        report.adopted.push(path);
                        continue;
                    }
                    self.record(journal, Undo::RemoveDir { path: path.clone(), evacuate_to: Some(evacuate_to) })?;
                    fx.create_dir(&path).map_err(|e| QosError::io("create a cgroup", &path, e))?;
                    self.lock_group(fx, &path)?;
                    made.insert(path.clone());
                    report.created.push(path);
                }
                Step::Barrier { path, evacuate_to } => {
                    if made.contains(&path) {
                        self.record(journal, Undo::RemoveDir { path, evacuate_to: Some(evacuate_to) })?;
                    }
                }
                Step::Write { path, value, what, undo } => {
                    let old = match fx.read(&path) {
                        Ok(s) => s.trim().to_string(),
                        Err(e) => return Err(QosError::io(format!("read {what} (was the cgroup deleted under joule?)"), &path, e)),
                    };
                    if old == value && undo.is_none() {
                        continue;
                    }
                    self.record(journal, Undo::Write { path: path.clone(), old: undo.unwrap_or(old) })?;
                    write_retrying(fx, &path, &value).map_err(|e| match e.raw_os_error() {
                        Some(libc::EROFS) | Some(libc::EACCES) | Some(libc::EPERM) => QosError::io(what.clone(), &path, e),
                        _ => QosError::KernelRefused { hint: hint_for(&path, &e), what, path: path.clone(), value: value.clone(), source: e },
                    })?;
                    report.writes += 1;
                }
            }
        }
        Ok(())
    }

    /// Undoes what this controller did in this process, newest first, taking its records out
    /// of `journal` as they are undone (a later `joule restore` must not replay them: a
    /// MoveTask could hit a reused pid). Other records stay.
    pub fn rollback(&mut self, journal: &Journal, fx: &dyn Effects) -> (usize, usize, Vec<String>) {
        let mine = std::mem::take(&mut self.applied);
        self.dl.forget();
        let r = self.undo(&mine, Some(journal), fx);
        (r.undone, r.already_gone, r.failed)
    }

    /// Undoes `records` (this controller's, newest last) through `journal`,
    /// which drops each record it undid and keeps the failed ones for a retry. Only without a
    /// journal (or when it cannot be read) are they replayed from memory, leaving the journal
    /// as it is.
    pub(super) fn undo(&self, records: &[Undo], journal: Option<&Journal>, fx: &dyn Effects) -> RestoreReport {
        if records.is_empty() {
            return RestoreReport::default();
        }
        if let Some(j) = journal {
            let owner = self.opts.owner.as_str();
            match j.restore_where(fx, |e| e.owner == owner && records.contains(&e.undo)) {
                Ok(r) => return r,
                Err(e) => tracing::warn!("rolling back from memory, the journal's records stay: {e}"),
            }
        }
        joule_core::journal::replay(records, fx)
    }

    /// Undoes every record of this owner in `journal` — this process's and any left by a
    /// crashed one — and leaves other mechanisms' records alone.
    pub fn release(&mut self, journal: &Journal, fx: &dyn Effects) -> Result<RestoreReport, QosError> {
        self.applied.clear();
        self.dl.forget();
        self.caps.clear();
        self.cap_journalled.clear();
        let r = journal.restore_owner(&self.opts.owner, fx)?;
        self.group_lock = None;
        Ok(r)
    }
}

/// Writes a knob; RT runtime refused with EINVAL is retried for up to 2 s, because the kernel
/// returns a removed group's RT budget to its parent asynchronously (after an RCU grace
/// period), so a re-apply right after a release would otherwise fail.
fn write_retrying(fx: &dyn Effects, path: &Path, value: &str) -> io::Result<()> {
    let rt = path.file_name().is_some_and(|f| f == "cpu.rt_runtime_us");
    let deadline = Instant::now() + Duration::from_secs(2);
    loop {
        match fx.write(path, value) {
            Err(e) if rt && e.raw_os_error() == Some(libc::EINVAL) && Instant::now() < deadline => std::thread::sleep(Duration::from_millis(50)),
            r => return r,
        }
    }
}
