//! The deadline backend in place: each thread of a deadline class, up to the class's
//! `rt_threads`, holds a SCHED_DEADLINE reservation of the class's runtime/period, with
//! reset-on-fork (so the class's processes can fork; a child starts under SCHED_OTHER and gets
//! its own reservation at the next hold). A thread's old policy is journalled before its first
//! change, pinned to its start time, so `joule restore` after a SIGKILL puts it back.
//! Threads are read every hold (`Membership::threads`): reservations follow them as they
//! appear, and a thread that exits takes its reservation with it.

use super::QosController;
use crate::QosError;
use joule_core::effects::{Deadline, Effects, SCHED_DEADLINE};
use joule_core::journal::{Journal, Undo};
use joule_core::membership::Membership;

/// A deadline class's threads after a hold.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Reserved {
    /// Threads under SCHED_DEADLINE now.
    pub threads: usize,
    /// Threads left at their own policy: over `rt_threads`, or refused by the kernel.
    pub unreserved: usize,
}

impl QosController {
    /// Gives every thread of the deadline classes that `members` lists its reservation, up to
    /// each class's `rt_threads`. What the kernel refuses (EBUSY: its deadline bandwidth is
    /// full, other programs' reservations included; EPERM: the thread's affinity was narrowed
    /// by its app) is said once per thread in the returned notes, not an error: the class's
    /// other threads keep theirs.
    pub(super) fn hold_deadline(&mut self, journal: &Journal, fx: &dyn Effects, members: &Membership) -> Result<Vec<String>, QosError> {
        let mut notes = Vec::new();
        let classes: Vec<_> = self.plan.classes.iter().filter_map(|c| Some((c.name.clone(), c.dl?))).collect();
        for (class, dl) in classes {
            let want = Deadline { runtime_ns: dl.runtime_us * 1000, deadline_ns: dl.period_us * 1000, period_ns: dl.period_us * 1000 };
            let mut r = Reserved::default();
            for tid in members.threads(&class) {
                let Ok(now) = fx.get_sched(tid) else { continue }; // exited since it was listed
                if now.policy == SCHED_DEADLINE {
                    r.threads += 1;
                    continue;
                }
                if r.threads >= dl.threads as usize {
                    r.unreserved += 1;
                    continue;
                }
                if self.dl_journalled.insert(tid) {
                    self.record(journal, Undo::sched(fx, tid, now))?;
                }
                match fx.set_deadline(tid, want) {
                    Ok(()) => {
                        r.threads += 1;
                        self.dl_refused.remove(&tid);
                    }
                    Err(e) if e.raw_os_error() == Some(libc::ESRCH) => {}
                    Err(e) => {
                        r.unreserved += 1;
                        if self.dl_refused.insert(tid) {
                            let why = match e.raw_os_error() {
                                Some(libc::EBUSY) => " — the kernel's deadline bandwidth is full (other programs' reservations count too)",
                                Some(libc::EPERM) => " — its affinity does not span its root domain (the app narrowed it)",
                                _ => "",
                            };
                            notes.push(format!(
                                "class {class}: thread {tid} keeps its policy: SCHED_DEADLINE {}/{} µs refused: {e}{why}",
                                dl.runtime_us, dl.period_us
                            ));
                        }
                    }
                }
            }
            self.reserved.insert(class, r);
        }
        // Forget threads that are gone, so the sets follow churn rather than grow with it.
        if self.dl_journalled.len() > 4 * self.reserved.values().map(|r| r.threads + r.unreserved).sum::<usize>() + 64 {
            let procfs = &members.procfs;
            let alive = |t: &i32| joule_core::procfs::task_dir(procfs, *t).exists();
            self.dl_journalled.retain(alive);
            self.dl_refused.retain(alive);
        }
        Ok(notes)
    }

    /// After the records are undone: every thread's old policy must be journalled again
    /// before its next reservation.
    pub(super) fn forget_reservations(&mut self) {
        self.dl_journalled.clear();
        self.dl_refused.clear();
        self.reserved.clear();
    }

    /// A deadline class's threads as the last hold left them.
    pub fn reserved(&self, class: &str) -> Option<Reserved> {
        self.reserved.get(class).copied()
    }
}
