//! The task-scheduling actuator: the only writer of class threads' scheduling policy, priority,
//! EEVDF slice and CPU affinity. It holds the Plan's merged `ClassSlice` knobs (each fair
//! thread of the class gets the slice, its old one journalled before its first change; a
//! thread under a real-time policy is left alone) and `ClassAffinity` knobs: a class whose affinity
//! placement won gets every thread pinned there (sched_setaffinity, each thread's old affinity
//! journalled before its first change, pinned to the thread's start time); a class whose
//! affinity the user-space scheduler won runs under joule-elevate's engine (elevate.rs), which
//! binds and elevates the same threads itself. The merge decides which: one writer per thread.
//! Threads come from the membership reading every period, so a thread the app starts later is
//! placed too.

mod elevate;

pub use elevate::{class_slots, ElevateState};

use elevate::ElevateRunner;
use joule_core::control::{owner, ActCx, ActError, Actuator, ActuatorState, Knob, Plan, Setting, Want};
use joule_core::journal::Undo;
use joule_core::metric::{l, Family, MetricDef};
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

/// The metric families this actuator reports.
pub const METRICS: &[MetricDef] = &[
    MetricDef::gauge("joule_task_sched_pinned_threads", "Threads of the class the task-scheduling actuator holds on the CPUs placement decided."),
    MetricDef::gauge("joule_elevate_running", "1 while the user-space scheduler runs the [elevate] class's threads."),
    MetricDef::gauge("joule_task_sched_sliced_threads", "Fair threads of the class that run with the class's latency slice."),
];

/// One class's latency slice as held.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ClassSlice {
    pub class: String,
    pub slice_us: u32,
    /// Threads of the class under a fair policy (the ones with the slice).
    pub threads: usize,
    pub why: String,
}

/// One class's affinity as held.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ClassPin {
    pub class: String,
    pub cpus: Vec<usize>,
    pub threads: usize,
    /// The merged knob's line (`class ftp affinity CPUs 0-1: placement (CPUs 0-1)`).
    pub why: String,
}

/// The actuator's state.
#[derive(Debug, Clone, Default, Serialize)]
pub struct TaskSchedState {
    pub pinned: Vec<ClassPin>,
    pub slices: Vec<ClassSlice>,
    /// Why no slice is held although the plan asks for one (a kernel before 6.12).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub slices_unsupported: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub elevate: Option<ElevateState>,
}

impl ActuatorState for TaskSchedState {
    fn to_json(&self) -> serde_json::Value {
        serde_json::to_value(self).unwrap_or_default()
    }
    fn families(&self) -> Vec<Family> {
        let mut out = vec![
            METRICS[0].with(self.pinned.iter().map(|p| (l(&[("class", &p.class)]), p.threads as f64)).collect()),
            METRICS[2].with(self.slices.iter().map(|s| (l(&[("class", &s.class)]), s.threads as f64)).collect()),
        ];
        if let Some(e) = &self.elevate {
            out.push(METRICS[1].with(vec![(l(&[("class", &e.class)]), f64::from(u8::from(e.running)))]));
        }
        out
    }
}

#[derive(Default)]
pub struct TaskSchedActuator {
    /// Threads joule pinned, by tid: their start time (a reused tid is another thread, whose own
    /// affinity is journalled again) and the affinity they had, which they get back when they
    /// leave their class (issue 33).
    pinned: BTreeMap<i32, (Option<u64>, Vec<usize>)>,
    /// Threads joule gave a slice, the same way: start time and their old slice.
    sliced: BTreeMap<i32, (Option<u64>, u64)>,
    elevate: ElevateRunner,
    state: TaskSchedState,
}

impl TaskSchedActuator {
    pub fn new() -> TaskSchedActuator {
        TaskSchedActuator::default()
    }

    /// Pins `tid` to `cpus`, journalling its old affinity before its first change. Ok(false)
    /// when it was there already or is gone.
    fn pin(&mut self, tid: i32, cpus: &[usize], cx: &mut ActCx<'_>) -> Result<bool, ActError> {
        let Ok(old) = cx.fx.get_affinity(tid) else { return Ok(false) }; // gone since it was listed
        if old == cpus {
            return Ok(false);
        }
        let started = joule_core::journal::start_time(cx.fx, tid);
        if self.pinned.get(&tid).is_none_or(|(s, _)| *s != started) {
            cx.journal.record(owner::TASK_SCHED, Undo::Affinity { tid, old_cpus: old.clone(), started })?;
            self.pinned.insert(tid, (started, old));
        }
        match cx.fx.set_affinity(tid, cpus) {
            Ok(()) => Ok(true),
            Err(e) if e.raw_os_error() == Some(libc::ESRCH) => Ok(false),
            Err(e) => Err(format!("pinning thread {tid} to CPUs {cpus:?}: {e}").into()),
        }
    }

    /// Gives fair thread `tid` a slice of `ns`, journalling its old slice before its first
    /// change: `Held` when it had it already, `Skipped` when it is gone or not fair (real-time:
    /// elevate's, or its app's own), `Unsupported` on a kernel without custom slices.
    fn slice(&mut self, tid: i32, ns: u64, cx: &mut ActCx<'_>) -> Result<SliceOutcome, ActError> {
        let Ok(Some(old)) = cx.fx.get_slice_ns(tid) else { return Ok(SliceOutcome::Skipped) };
        if old == 0 {
            return Ok(SliceOutcome::Unsupported); // a 6.12+ kernel reports every fair thread's slice
        }
        if old == ns {
            return Ok(SliceOutcome::Held);
        }
        // The record says 0 for the kernel's default slice (`Undo::slice`).
        if let rec @ Undo::Slice { old_ns, started, .. } = Undo::slice(cx.fx, tid, old) {
            if self.sliced.get(&tid).is_none_or(|(s, _)| *s != started) {
                cx.journal.record(owner::TASK_SCHED, rec)?;
                self.sliced.insert(tid, (started, old_ns));
            }
        }
        match cx.fx.set_slice_ns(tid, ns) {
            Ok(()) => Ok(SliceOutcome::Changed),
            // Gone, or made real-time since the read: not a fair thread to slice.
            Err(e) if matches!(e.raw_os_error(), Some(libc::ESRCH) | Some(libc::EINVAL)) => Ok(SliceOutcome::Skipped),
            Err(e) => Err(format!("giving thread {tid} a {} µs slice: {e}", ns / 1000).into()),
        }
    }

    /// Holds the plan's `ClassSlice` knobs on every fair thread of their classes.
    fn hold_slices(&mut self, plan: &Plan, cx: &mut ActCx<'_>) -> Result<(), ActError> {
        let mut held = Vec::new();
        let mut unsupported = None;
        for h in plan.knobs_of(owner::TASK_SCHED) {
            let (Knob::ClassSlice { class }, Setting::SliceUs(us)) = (&h.knob, &h.setting) else { continue };
            let (mut threads, mut changed) = (0, 0);
            for tid in plan.members.threads(class) {
                match self.slice(tid, u64::from(*us) * 1000, cx)? {
                    SliceOutcome::Changed => (threads, changed) = (threads + 1, changed + 1),
                    SliceOutcome::Held => threads += 1,
                    SliceOutcome::Skipped => {}
                    SliceOutcome::Unsupported => {
                        let release = cx.fx.read(std::path::Path::new("/proc/sys/kernel/osrelease")).unwrap_or_default();
                        unsupported = Some(format!(
                            "kernel {} reports no EEVDF slice (custom slices came in Linux 6.12): latency_slice_us does nothing here",
                            release.trim()
                        ));
                        break;
                    }
                }
            }
            if unsupported.is_some() {
                break;
            }
            if changed > 0 {
                (cx.events)("slice", serde_json::json!({ "class": class, "slice_us": us, "threads_changed": changed, "why": h.why }));
            }
            held.push(ClassSlice { class: class.clone(), slice_us: *us, threads, why: h.why.clone() });
        }
        self.state.slices = if unsupported.is_some() { Vec::new() } else { held };
        self.state.slices_unsupported = unsupported;
        Ok(())
    }

    /// Runs (or stops) the user-space scheduler for the plan's `Want::Elevate`, when the merge
    /// gave it the class's affinity.
    fn hold_elevate(&mut self, plan: &Plan, cx: &mut ActCx<'_>) -> Result<(), ActError> {
        let want = plan.for_actuator(owner::TASK_SCHED).map(|d| &d.want).find(|w| matches!(w, Want::Elevate { .. }));
        let Some(want @ Want::Elevate { class, .. }) = want else {
            if let Some(r) = self.elevate.stop() {
                (cx.events)("elevate_stopped", serde_json::json!({ "result": format!("{r:?}") }));
            }
            self.state.elevate = None;
            return Ok(());
        };
        let knob = Knob::ClassAffinity { class: class.clone() };
        let won = plan.held(&knob).is_some_and(|h| h.won_by() == "elevate");
        let mut not_running_because = None;
        if won {
            if let Some(tids) = self.elevate.hold(want, cx.fx, &plan.members, cx.journal)? {
                (cx.events)("elevate_started", serde_json::json!({ "class": class, "threads": tids }));
            }
        } else {
            self.elevate.stop();
            let why = plan
                .conflicts
                .iter()
                .find(|c| c.knob == knob && c.lost == "elevate")
                .map_or("the merge gave the class's affinity to another request".into(), |c| c.why.clone());
            not_running_because = Some(why);
        }
        let (running, threads) = self.elevate.state();
        self.state.elevate = Some(ElevateState { running, class: class.clone(), threads, not_running_because });
        Ok(())
    }
}

impl TaskSchedActuator {
    /// Threads joule pinned or sliced that are no longer in a class the plan pins or slices
    /// get what they had back (their affinity, their slice), if they are still the thread joule
    /// changed; gone ones are forgotten. The sets follow the classes' threads, not every thread
    /// that ever passed through them.
    fn take_back(&mut self, plan: &Plan, cx: &mut ActCx<'_>) {
        let classes_of = |want: fn(&Knob) -> Option<&String>| -> BTreeSet<i32> {
            plan.knobs_of(owner::TASK_SCHED).filter_map(|h| want(&h.knob)).flat_map(|c| plan.members.threads(c)).collect()
        };
        let pinned_now = classes_of(|k| if let Knob::ClassAffinity { class } = k { Some(class) } else { None });
        let sliced_now = classes_of(|k| if let Knob::ClassSlice { class } = k { Some(class) } else { None });
        let fx = cx.fx;
        let same = |tid: i32, started: Option<u64>| joule_core::journal::start_time(fx, tid) == started;
        self.pinned.retain(|&tid, (started, old)| {
            if pinned_now.contains(&tid) {
                return true;
            }
            if same(tid, *started) {
                let _ = fx.set_affinity(tid, old); // gone meanwhile (ESRCH): nothing to give back
            }
            false
        });
        self.sliced.retain(|&tid, (started, old)| {
            if sliced_now.contains(&tid) {
                return true;
            }
            if same(tid, *started) {
                let _ = fx.set_slice_ns(tid, *old);
            }
            false
        });
    }
}

impl Actuator for TaskSchedActuator {
    fn name(&self) -> &'static str {
        owner::TASK_SCHED
    }

    fn reconcile(&mut self, plan: &Plan, cx: &mut ActCx<'_>) -> Result<(), ActError> {
        let mut pinned = Vec::new();
        for h in plan.knobs_of(owner::TASK_SCHED) {
            let (Knob::ClassAffinity { class }, Setting::Cpus(cpus)) = (&h.knob, &h.setting) else { continue };
            if h.won_by() == "elevate" {
                continue; // the user-space scheduler binds these threads itself
            }
            let tids = plan.members.threads(class);
            let mut moved = 0;
            for &tid in &tids {
                moved += usize::from(self.pin(tid, cpus, cx)?);
            }
            if moved > 0 {
                (cx.events)("placement", serde_json::json!({ "class": class, "cpus": cpus, "threads_moved": moved, "why": h.why }));
            }
            pinned.push(ClassPin { class: class.clone(), cpus: cpus.clone(), threads: tids.len(), why: h.why.clone() });
        }
        self.state.pinned = pinned;
        self.hold_slices(plan, cx)?;
        self.take_back(plan, cx);
        self.hold_elevate(plan, cx)
    }

    fn state(&self) -> Arc<dyn ActuatorState> {
        Arc::new(self.state.clone())
    }

    fn shutdown(&mut self, cx: &mut ActCx<'_>) -> Result<(), ActError> {
        let stopped = self.elevate.stop();
        let r = cx.journal.restore_owner(owner::TASK_SCHED, cx.fx)?;
        self.pinned.clear();
        self.sliced.clear();
        if !r.failed.is_empty() {
            return Err(format!("could not put back {} thread affinity(ies) or slice(s): {:?}", r.failed.len(), r.failed).into());
        }
        match stopped {
            Some(Err(e)) => Err(e.into()),
            _ => Ok(()),
        }
    }
}

/// What giving one thread its slice came to.
enum SliceOutcome {
    Changed,
    Held,
    Skipped,
    Unsupported,
}

#[cfg(test)]
#[path = "tests.rs"]
mod tests;
