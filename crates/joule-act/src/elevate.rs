//! The "elevate" actuator: keeps joule's user-space scheduler (joule-elevate) running on every
//! thread of the `[[class]]` a [`Want::Elevate`] names, in a thread of its own outside the
//! agent's period (the hot loop switches every few µs). Each period it re-reads the class's
//! threads (the qos task matching) and restarts the scheduler when they changed; no decision
//! stops it. The engine journals every undo before it changes a thread (owner `elevate-<pid>`
//! in the agent's journal) and forks its guardian, so a crash of the agent leaves nothing.

use joule_core::config::ClassConfig;
use joule_core::control::{ActCx, ActError, Actuator, Plan, Want};
use joule_core::effects::{Effects, RealEffects};
use joule_core::journal::Journal;
use joule_core::control::owner;
use joule_elevate::target::{resolve, TargetSpec};
use joule_elevate::{ElevateOpts, Elevator, Pattern, Schedule, Target};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

static FX: RealEffects = RealEffects;

struct Running {
    want: Want,
    tids: Vec<i32>,
    stop: Arc<AtomicBool>,
    thread: JoinHandle<Result<u64, String>>,
}

pub struct ElevateActuator {
    classes: Vec<ClassConfig>,
    procfs: PathBuf,
    running: Option<Running>,
}

/// One slot per thread of every process of class `class` (ordered by tid).
pub fn class_slots(fx: &dyn Effects, procfs: &Path, classes: &[ClassConfig], class: &str) -> Vec<Vec<Target>> {
    let procs = joule_qos::matching::scan(procfs);
    let assigned = joule_qos::matching::assign(&procs, classes);
    let mut slots: Vec<Vec<Target>> = Vec::new();
    for (&pid, _) in assigned.iter().filter(|(_, c)| c.as_str() == class) {
        if let Ok(ts) = resolve(fx, procfs, &TargetSpec::Threads(pid)) {
            slots.extend(ts.into_iter().map(|t| vec![t]));
        }
    }
    slots.sort_by_key(|s| s[0].tid);
    slots
}

impl ElevateActuator {
    pub fn new(classes: &[ClassConfig], procfs: PathBuf) -> ElevateActuator {
        ElevateActuator { classes: classes.to_vec(), procfs, running: None }
    }

    fn stop(&mut self) -> Option<Result<u64, String>> {
        let r = self.running.take()?;
        r.stop.store(true, Ordering::SeqCst);
        Some(r.thread.join().unwrap_or_else(|_| Err("the scheduler thread panicked".into())))
    }

    fn start(&mut self, want: &Want, slots: Vec<Vec<Target>>, journal: &Journal) -> Result<(), ActError> {
        let Want::Elevate { cpu, slice_us, pattern, .. } = want else { return Ok(()) };
        let pattern = if pattern == "dedicated" { Pattern::Dedicated } else { Pattern::Shared };
        let opts = ElevateOpts {
            cpu: *cpu,
            sched_cpu: None,
            slice_us: *slice_us,
            pattern,
            wait: None,
            schedule: Schedule::RoundRobin,
            journal: Some(journal.clone()),
            guardian: true,
        };
        let tids = slots.iter().map(|s| s[0].tid).collect();
        let stop = Arc::new(AtomicBool::new(false));
        let st = stop.clone();
        let (tx, rx) = std::sync::mpsc::channel();
        let thread = std::thread::Builder::new().name("joule-elevate".into()).spawn(move || {
            let mut el = match Elevator::setup(&FX, slots, opts) {
                Ok(el) => el,
                Err(e) => {
                    let _ = tx.send(Err(e.to_string()));
                    return Err(e.to_string());
                }
            };
            let _ = tx.send(Ok(()));
            let r = el.run(&st, None).map_err(|e| e.to_string());
            let rest = el.teardown();
            if !rest.failed.is_empty() {
                return Err(format!("restore failed: {:?}", rest.failed));
            }
            r.map(|r| r.switches)
        })?;
        rx.recv().map_err(|_| "the scheduler thread ended before it started")??;
        self.running = Some(Running { want: want.clone(), tids, stop, thread });
        Ok(())
    }
}

impl Actuator for ElevateActuator {
    fn name(&self) -> &'static str {
        owner::TASK_SCHED
    }
    fn init(&mut self, _cx: &mut ActCx<'_>) -> Result<(), ActError> {
        Ok(())
    }
    fn reconcile(&mut self, plan: &Plan, cx: &mut ActCx<'_>) -> Result<serde_json::Value, ActError> {
        let want = plan.for_actuator(owner::TASK_SCHED).map(|d| d.want.clone()).find(|w| matches!(w, Want::Elevate { .. }));
        let Some(want) = want else {
            if let Some(r) = self.stop() {
                (cx.events)("elevate_stopped", serde_json::json!({ "result": format!("{r:?}") }));
            }
            return Ok(serde_json::json!({ "running": false }));
        };
        let Want::Elevate { class, .. } = &want else { unreachable!("filtered above") };
        let class = class.clone();
        let slots = class_slots(cx.fx, &self.procfs, &self.classes, &class);
        let tids: Vec<i32> = slots.iter().map(|s| s[0].tid).collect();
        let same = self.running.as_ref().is_some_and(|r| r.want == want && r.tids == tids && !r.thread.is_finished());
        if !same {
            self.stop();
            if !slots.is_empty() {
                self.start(&want, slots, cx.journal)?;
                (cx.events)("elevate_started", serde_json::json!({ "class": class, "threads": tids }));
            }
        }
        Ok(serde_json::json!({ "running": self.running.is_some(), "class": class, "threads": tids }))
    }
    fn shutdown(&mut self, _cx: &mut ActCx<'_>) -> Result<(), ActError> {
        match self.stop() {
            Some(Err(e)) => Err(e.into()),
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_class_gives_one_slot_per_thread_of_each_of_its_processes() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path();
        for (pid, comm, tids) in [(100, "lat-srv", vec![100, 101]), (200, "other", vec![200])] {
            std::fs::create_dir_all(p.join(format!("{pid}"))).unwrap();
            std::fs::write(p.join(format!("{pid}/stat")), format!("{pid} ({comm}) S 1 1 1 0 -1 4194304 0 0 0 0 0 0 0 0 20 0 1 0 100 0 0")).unwrap();
            for t in tids {
                std::fs::create_dir_all(p.join(format!("{pid}/task/{t}"))).unwrap();
            }
        }
        let cfg = joule_core::config::Config::parse("[[class]]\nname = \"lat\"\nweight = 100\n[class.match]\ncomm = [\"lat-srv\"]\n").unwrap();
        let slots = class_slots(&RealEffects, p, &cfg.classes, "lat");
        let tids: Vec<i32> = slots.iter().map(|s| s[0].tid).collect();
        assert_eq!(tids, vec![100, 101]);
        assert!(class_slots(&RealEffects, p, &cfg.classes, "none").is_empty());
    }
}
