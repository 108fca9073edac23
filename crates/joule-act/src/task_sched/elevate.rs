//! The user-space scheduler (joule-elevate's engine) as the task-scheduling actuator runs it:
//! on every thread of the class a `Want::Elevate` names, in a thread of its own outside the
//! agent's period (the hot loop switches every few µs). It follows the class's threads as the
//! membership reading lists them, restarting the engine when they change. The engine journals
//! every undo in the agent's journal (a handle, owner `elevate-<pid>`) before it changes a
//! thread and forks its guardian, so a crash of the agent leaves nothing.

use joule_core::control::Want;
use joule_core::effects::{Effects, RealEffects};
use joule_core::journal::Journal;
use joule_core::membership::Membership;
use joule_elevate::target::{resolve, TargetSpec};
use joule_elevate::{ElevateOpts, Elevator, Pattern, Schedule, Target};
use serde::Serialize;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

static FX: RealEffects = RealEffects;

/// What the scheduler does now.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct ElevateState {
    pub running: bool,
    pub class: String,
    pub threads: Vec<i32>,
    /// Why it is not running although asked to (a conflict the merge settled against it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub not_running_because: Option<String>,
}

struct Running {
    want: Want,
    tids: Vec<i32>,
    stop: Arc<AtomicBool>,
    thread: JoinHandle<Result<u64, String>>,
}

#[derive(Default)]
pub struct ElevateRunner {
    running: Option<Running>,
}

/// One slot per thread of every process of class `class` (ordered by tid).
pub fn class_slots(fx: &dyn Effects, members: &Membership, class: &str) -> Vec<Vec<Target>> {
    let mut slots: Vec<Vec<Target>> = Vec::new();
    for m in members.of(class) {
        if let Ok(ts) = resolve(fx, &members.procfs, &TargetSpec::Threads(m.pid)) {
            slots.extend(ts.into_iter().map(|t| vec![t]));
        }
    }
    slots.sort_by_key(|s| s[0].tid);
    slots
}

impl ElevateRunner {
    /// Stops the scheduler (its teardown puts every thread back); its result.
    pub fn stop(&mut self) -> Option<Result<u64, String>> {
        let r = self.running.take()?;
        r.stop.store(true, Ordering::SeqCst);
        Some(r.thread.join().unwrap_or_else(|_| Err("the scheduler thread panicked".into())))
    }

    /// Keeps the scheduler running for `want` on the class's threads (restarted when they
    /// change); Ok(Some(tids)) when it (re)started.
    pub fn hold(&mut self, want: &Want, fx: &dyn Effects, members: &Membership, journal: &Journal) -> Result<Option<Vec<i32>>, String> {
        let Want::Elevate { class, .. } = want else { return Ok(None) };
        let slots = class_slots(fx, members, class);
        let tids: Vec<i32> = slots.iter().map(|s| s[0].tid).collect();
        if self.running.as_ref().is_some_and(|r| r.want == *want && r.tids == tids && !r.thread.is_finished()) {
            return Ok(None);
        }
        self.stop();
        if slots.is_empty() {
            return Ok(None);
        }
        self.start(want, slots, journal)?;
        Ok(Some(tids))
    }

    pub fn state(&self) -> (bool, Vec<i32>) {
        match &self.running {
            Some(r) => (true, r.tids.clone()),
            None => (false, Vec::new()),
        }
    }

    fn start(&mut self, want: &Want, slots: Vec<Vec<Target>>, journal: &Journal) -> Result<(), String> {
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
            confirm_landing: true,
        };
        let tids = slots.iter().map(|s| s[0].tid).collect();
        let stop = Arc::new(AtomicBool::new(false));
        let st = stop.clone();
        let (tx, rx) = std::sync::mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("joule-elevate".into())
            .spawn(move || {
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
            })
            .map_err(|e| format!("starting the scheduler thread: {e}"))?;
        rx.recv().map_err(|_| "the scheduler thread ended before it started".to_string())??;
        self.running = Some(Running { want: want.clone(), tids, stop, thread });
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use joule_core::membership::Membership;

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
        let members = Membership::scan(p, &cfg.classes, &[], &RealEffects);
        let slots = class_slots(&RealEffects, &members, "lat");
        let tids: Vec<i32> = slots.iter().map(|s| s[0].tid).collect();
        assert_eq!(tids, vec![100, 101]);
        assert!(class_slots(&RealEffects, &members, "none").is_empty());
    }
}
