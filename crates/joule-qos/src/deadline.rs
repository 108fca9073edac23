//! The deadline backend in place: each thread of a deadline class, up to the class's
//! `rt_threads`, holds a SCHED_DEADLINE reservation of the class's runtime/period, with
//! reset-on-fork (so the class's processes can fork; a child starts under SCHED_OTHER and gets
//! its own reservation at the next hold). A thread's old policy is journalled before its first
//! change, pinned to its start time, so `joule restore` after a SIGKILL puts it back.
//! Threads are read every hold (`Membership::threads`): reservations follow them as they
//! appear, a thread that exits takes its reservation with it, and a thread that is no longer a
//! member of its class (it changed its uid, exec'd another program, moved out of the class's
//! cgroup) gets its old policy back at the next hold: a privilege ends with its reason. No
//! cgroup is needed, so the cgroupfs controller and the classes of systemd units share this.

use crate::admission::DlBw;
use crate::QosError;
use joule_core::effects::{Deadline, Effects, SchedAttr, SCHED_DEADLINE};
use joule_core::journal::Undo;
use joule_core::membership::Membership;
use std::collections::{BTreeMap, BTreeSet};

/// A deadline class's threads after a hold.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Reserved {
    /// Threads under SCHED_DEADLINE now.
    pub threads: usize,
    /// Threads left at their own policy: over `rt_threads`, or refused by the kernel.
    pub unreserved: usize,
}

/// The reservations held, and what is already journalled or said about each thread.
#[derive(Debug, Default)]
pub struct Reservations {
    /// Threads (tid, start time) whose policy before their reservation is in the journal: a
    /// reused tid is another thread, whose own policy is journalled again.
    journalled: BTreeSet<(i32, Option<u64>)>,
    /// Threads whose reservation the kernel refused, already said.
    refused: BTreeSet<i32>,
    /// Per deadline class, its threads after the last hold.
    reserved: BTreeMap<String, Reserved>,
    /// The reservations joule gave, per thread (tid, start time): its class and the policy it
    /// had before, which it gets back when it leaves the class.
    granted: BTreeMap<(i32, Option<u64>), (String, SchedAttr)>,
}

impl Reservations {
    /// Gives every thread of `classes` that `members` lists its reservation, up to each
    /// class's `rt_threads`, calling `record` with the thread's old policy before its first
    /// change. What the kernel refuses (EBUSY: its deadline bandwidth is full, other programs'
    /// reservations included; EPERM: the thread's affinity was narrowed by its app) is said
    /// once per thread in the returned notes, not an error: the class's other threads keep
    /// theirs.
    pub fn hold(
        &mut self,
        fx: &dyn Effects,
        members: &Membership,
        classes: &[(String, DlBw)],
        mut record: impl FnMut(Undo) -> Result<(), QosError>,
    ) -> Result<Vec<String>, QosError> {
        let mut notes = Vec::new();
        let mut now_members: BTreeMap<&str, BTreeSet<i32>> = BTreeMap::new();
        for (class, dl) in classes {
            let want = Deadline { runtime_ns: dl.runtime_us * 1000, deadline_ns: dl.period_us * 1000, period_ns: dl.period_us * 1000 };
            let mut r = Reserved::default();
            let threads = members.threads(class);
            now_members.insert(class.as_str(), threads.iter().copied().collect());
            for tid in threads {
                let Ok(now) = fx.get_sched(tid) else { continue }; // exited since it was listed
                if now.policy == SCHED_DEADLINE {
                    r.threads += 1;
                    continue;
                }
                if r.threads >= dl.threads as usize {
                    r.unreserved += 1;
                    continue;
                }
                let started = joule_core::journal::start_time(fx, tid);
                if !self.journalled.contains(&(tid, started)) {
                    record(Undo::Sched { tid, old: now, started })?;
                    self.journalled.insert((tid, started));
                }
                match fx.set_deadline(tid, want) {
                    Ok(()) => {
                        r.threads += 1;
                        self.refused.remove(&tid);
                        self.granted.insert((tid, started), (class.clone(), now));
                    }
                    Err(e) if e.raw_os_error() == Some(libc::ESRCH) => {}
                    Err(e) => {
                        r.unreserved += 1;
                        if self.refused.insert(tid) {
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
            self.reserved.insert(class.clone(), r);
        }
        notes.extend(self.take_back(fx, &now_members));
        // Forget threads that are gone, so the sets follow churn rather than grow with it.
        if self.journalled.len() > 4 * self.reserved.values().map(|r| r.threads + r.unreserved).sum::<usize>() + 64 {
            let procfs = &members.procfs;
            let alive = |t: i32| joule_core::procfs::task_dir(procfs, t).exists();
            self.journalled.retain(|(t, _)| alive(*t));
            self.refused.retain(|t| alive(*t));
        }
        Ok(notes)
    }

    /// Gives every thread joule reserved that is no longer a member of its class its old
    /// policy back, and forgets the threads that are gone. A thread is the one joule reserved
    /// only while its start time is the same (a reused tid is another thread), and its policy is
    /// put back only while it is still SCHED_DEADLINE (what joule set).
    fn take_back(&mut self, fx: &dyn Effects, now_members: &BTreeMap<&str, BTreeSet<i32>>) -> Vec<String> {
        let mut notes = Vec::new();
        let left: Vec<_> = self
            .granted
            .iter()
            .filter(|((tid, _), (class, _))| !now_members.get(class.as_str()).is_some_and(|m| m.contains(tid)))
            .map(|(k, v)| (*k, v.clone()))
            .collect();
        for ((tid, started), (class, old)) in left {
            self.granted.remove(&(tid, started));
            let same = joule_core::journal::start_time(fx, tid) == started;
            if !same || fx.get_sched(tid).ok().map(|a| a.policy) != Some(SCHED_DEADLINE) {
                continue; // gone, reused, or its policy changed since: nothing of joule's left on it
            }
            match fx.set_sched(tid, old) {
                Ok(()) => notes.push(format!("class {class}: thread {tid} left the class; its SCHED_DEADLINE reservation is taken back")),
                Err(e) if e.raw_os_error() == Some(libc::ESRCH) => {}
                Err(e) => notes.push(format!("class {class}: thread {tid} left the class, but its old policy could not be put back: {e}")),
            }
        }
        notes
    }

    /// After the records are undone: every thread's old policy must be journalled again
    /// before its next reservation.
    pub fn forget(&mut self) {
        *self = Reservations::default();
    }

    /// A deadline class's threads as the last hold left them.
    pub fn reserved(&self, class: &str) -> Option<Reserved> {
        self.reserved.get(class).copied()
    }
}
