//! The `placement` actuator (mechanism 2, `[energy]`): holds `Want::Place` — every thread of
//! the class on the decided domain's CPUs (sched_setaffinity through the effects seam, each
//! thread's old affinity journalled as `Undo::Affinity` before its first change) and the
//! domain's CPUs' `cpufreq/scaling_max_freq` at the decided cap (the original journalled as
//! `Undo::Write` first, the cpufreq actuator's scan reused). The bandwidth in the decision is
//! advisory here: the bandwidth limiter (`netlimit`) acts on traffic. Where cpufreq is missing
//! (VMs, this project's CI host) the caps are skipped with one note in the status.
//!
//! New threads are found every period (class matching of joule-qos, children follow their
//! parent), so a thread the app starts later is placed too.

use joule_core::config::ClassConfig;
use joule_core::control::{ActCx, ActError, Actuator, Plan, Want};
use crate::cpufreq::{write_limit, CpuLimits, CpufreqActuator};
use joule_core::journal::Undo;
use joule_core::control::owner;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Finds the thread ids of a class's tasks.
pub type ThreadFinder = Box<dyn Fn(&str) -> Vec<i32> + Send>;

pub struct PlacementActuator {
    cpu_root: PathBuf,
    find: ThreadFinder,
    limits: Vec<CpuLimits>,
    /// Threads whose original affinity is in the journal.
    pinned: BTreeSet<i32>,
    /// Knobs whose original value is in the journal, and what the knobs hold now.
    journalled: BTreeSet<PathBuf>,
    caps: BTreeMap<PathBuf, u64>,
    note: Option<String>,
}

/// Every thread of every process of `class` under `procfs`.
pub fn class_threads(procfs: &Path, classes: &[ClassConfig], class: &str) -> Vec<i32> {
    let procs = joule_qos::matching::scan(procfs);
    let assigned = joule_qos::matching::assign(&procs, classes);
    let mut tids = Vec::new();
    for (pid, _) in assigned.iter().filter(|(_, c)| c.as_str() == class) {
        let dir = joule_core::procfs::task_dir(procfs, *pid).join("task");
        tids.extend(std::fs::read_dir(dir).into_iter().flatten().flatten().filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok()));
    }
    tids.sort_unstable();
    tids
}

impl PlacementActuator {
    pub fn new(cpu_root: impl Into<PathBuf>, find: ThreadFinder) -> PlacementActuator {
        PlacementActuator {
            cpu_root: cpu_root.into(),
            find,
            limits: Vec::new(),
            pinned: BTreeSet::new(),
            journalled: BTreeSet::new(),
            caps: BTreeMap::new(),
            note: None,
        }
    }

    fn pin(&mut self, tid: i32, cpus: &[usize], cx: &mut ActCx<'_>) -> Result<bool, ActError> {
        let Ok(old) = cx.fx.get_affinity(tid) else { return Ok(false) }; // gone since it was listed
        if old == cpus {
            return Ok(false);
        }
        if self.pinned.insert(tid) {
            cx.journal.record(owner::TASK_SCHED, Undo::affinity(cx.fx, tid, old))?;
        }
        match cx.fx.set_affinity(tid, cpus) {
            Ok(()) => Ok(true),
            Err(e) if e.raw_os_error() == Some(libc::ESRCH) => Ok(false),
            Err(e) => Err(format!("pinning thread {tid} to CPUs {cpus:?}: {e}").into()),
        }
    }

    fn cap(&mut self, cpus: &[usize], khz: u64, cx: &mut ActCx<'_>) -> Result<usize, ActError> {
        let mut writes = 0;
        for l in self.limits.iter().filter(|l| cpus.contains(&(l.cpu as usize))) {
            let want = khz.clamp(l.min_khz, l.max_khz).min(l.original_khz);
            if self.caps.get(&l.knob) == Some(&want) {
                continue;
            }
            write_limit(l, want, owner::TASK_SCHED, &mut self.journalled, cx)?;
            self.caps.insert(l.knob.clone(), want);
            writes += 1;
        }
        Ok(writes)
    }

    /// Lifts the caps of CPUs no decision of this period caps any more (a class moved to
    /// another domain, or its decision has no cap now): their `scaling_max_freq` goes back to
    /// the value found at the first cap. Returns how many were lifted.
    fn lift_uncapped(&mut self, capped_cpus: &BTreeSet<usize>, cx: &mut ActCx<'_>) -> Result<usize, ActError> {
        let stale: Vec<&CpuLimits> = self.limits.iter().filter(|l| !capped_cpus.contains(&(l.cpu as usize)) && self.caps.contains_key(&l.knob)).collect();
        for l in &stale {
            write_limit(l, l.original_khz, owner::TASK_SCHED, &mut self.journalled, cx)?;
            self.caps.remove(&l.knob);
        }
        Ok(stale.len())
    }
}

impl Actuator for PlacementActuator {
    fn name(&self) -> &'static str {
        owner::TASK_SCHED
    }

    fn init(&mut self, cx: &mut ActCx<'_>) -> Result<(), ActError> {
        (self.limits, self.note) = CpufreqActuator::scan_noting(&self.cpu_root, cx.fx, "placement pins threads but cannot cap frequencies on this machine");
        Ok(())
    }

    fn reconcile(&mut self, plan: &Plan, cx: &mut ActCx<'_>) -> Result<serde_json::Value, ActError> {
        let mut state = Vec::new();
        let mut capped_cpus = BTreeSet::new();
        for d in plan.for_actuator(owner::TASK_SCHED) {
            let Want::Place { class, domain, cpus, max_khz, bandwidth_mbit } = &d.want else { continue };
            let tids = (self.find)(class);
            let mut moved = 0;
            for &tid in &tids {
                moved += usize::from(self.pin(tid, cpus, cx)?);
            }
            let capped = match max_khz {
                Some(k) => {
                    capped_cpus.extend(cpus.iter().copied());
                    self.cap(cpus, *k, cx)?
                }
                None => 0,
            };
            if moved + capped > 0 {
                (cx.events)(
                    "placement",
                    serde_json::json!({ "class": class, "domain": domain, "cpus": cpus, "threads_moved": moved, "max_khz": max_khz, "cpus_capped": capped }),
                );
            }
            state.push(serde_json::json!({ "class": class, "domain": domain, "cpus": cpus, "threads": tids.len(), "max_khz": max_khz, "bandwidth_mbit": bandwidth_mbit }));
        }
        let lifted = self.lift_uncapped(&capped_cpus, cx)?;
        if lifted > 0 {
            (cx.events)("placement_uncapped", serde_json::json!({ "cpus_lifted": lifted }));
        }
        Ok(serde_json::json!({ "classes": state, "notes": self.note.iter().collect::<Vec<_>>() }))
    }

    fn shutdown(&mut self, cx: &mut ActCx<'_>) -> Result<(), ActError> {
        let r = cx.journal.restore_owner(owner::TASK_SCHED, cx.fx)?;
        self.pinned.clear();
        self.journalled.clear();
        self.caps.clear();
        if !r.failed.is_empty() {
            return Err(format!("could not put back {} affinity/frequency setting(s): {:?}", r.failed.len(), r.failed).into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use joule_core::control::Actuators;
    use joule_core::effects::{FakeEffects, Sched};
    use joule_core::journal::{self, Journal};

    fn plan(max_khz: Option<u64>) -> Plan {
        let mut p = Plan::default();
        p.push(
            "placement",
            Some(owner::TASK_SCHED),
            Want::Place { class: "ftp".into(), domain: "a7".into(), cpus: vec![0, 1], max_khz, bandwidth_mbit: Some(100.0) },
            "test",
        );
        p
    }

    #[test]
    fn pins_the_class_threads_caps_the_domain_journalled_first_and_restores() {
        let mut fx = FakeEffects::default().with_dir("/sys/cpu");
        for n in 0..4 {
            let d = format!("/sys/cpu/cpu{n}/cpufreq");
            fx = fx
                .with_dir(format!("/sys/cpu/cpu{n}"))
                .with_dir(d.as_str())
                .with_file(format!("{d}/cpuinfo_max_freq"), "2000000")
                .with_file(format!("{d}/cpuinfo_min_freq"), "500000")
                .with_file(format!("{d}/scaling_max_freq"), "2000000");
        }
        for tid in [11, 12] {
            fx.affinity.lock().unwrap().insert(tid, vec![0, 1, 2, 3]);
        }
        let jd = tempfile::tempdir().unwrap();
        let journal = Journal::open(jd.path()).unwrap();
        let mut sink = |_: &str, _: serde_json::Value| {};
        let mut cx = ActCx { journal: &journal, fx: &fx, events: &mut sink };
        // Thread 13 is listed but gone: skipped, not an error.
        let mut acts =
            Actuators::new(vec![Box::new(PlacementActuator::new("/sys/cpu", Box::new(|c: &str| if c == "ftp" { vec![11, 12, 13] } else { vec![] })))]);
        acts.init_all(&mut cx).unwrap();
        acts.reconcile_all(&plan(Some(1_000_000)), &mut cx);
        assert!(acts.status()[0].ok, "{:?}", acts.status()[0].last_error);
        assert_eq!(fx.get_affinity(11).unwrap(), vec![0, 1]);
        assert_eq!(fx.file("/sys/cpu/cpu1/cpufreq/scaling_max_freq").as_deref(), Some("1000000"));
        assert_eq!(fx.file("/sys/cpu/cpu2/cpufreq/scaling_max_freq").as_deref(), Some("2000000"), "other domains untouched");
        let recs = journal::entries(jd.path()).unwrap();
        assert_eq!(recs.len(), 4, "two threads and two knobs, each journalled once: {recs:?}");
        assert!(matches!(&recs[0].undo, Undo::Affinity { tid: 11, old_cpus, .. } if old_cpus == &vec![0, 1, 2, 3]));
        let calls = fx.calls().len();
        acts.reconcile_all(&plan(Some(1_000_000)), &mut cx);
        assert_eq!(fx.calls().len(), calls, "held: nothing rewritten");
        // The class moves to CPUs 2-3 with no cap: the old domain's cap is lifted, not left.
        let mut moved = Plan::default();
        let want = Want::Place { class: "ftp".into(), domain: "a15".into(), cpus: vec![2, 3], max_khz: None, bandwidth_mbit: None };
        moved.push("placement", Some(owner::TASK_SCHED), want, "test");
        acts.reconcile_all(&moved, &mut cx);
        assert!(acts.status()[0].ok, "{:?}", acts.status()[0].last_error);
        assert_eq!(fx.file("/sys/cpu/cpu0/cpufreq/scaling_max_freq").as_deref(), Some("2000000"), "the cap went with the class");
        assert_eq!(fx.get_affinity(11).unwrap(), vec![2, 3]);
        acts.reconcile_all(&plan(Some(1_000_000)), &mut cx);
        assert_eq!(fx.file("/sys/cpu/cpu1/cpufreq/scaling_max_freq").as_deref(), Some("1000000"), "capped again when it comes back");
        // Killed here: the journal alone puts everything back.
        journal::Journal::open(jd.path()).and_then(|j| j.restore_all(&fx)).unwrap();
        assert_eq!(fx.get_affinity(12).unwrap(), vec![0, 1, 2, 3]);
        assert_eq!(fx.file("/sys/cpu/cpu0/cpufreq/scaling_max_freq").as_deref(), Some("2000000"));
    }

    #[test]
    fn without_cpufreq_it_pins_and_says_why_it_does_not_cap() {
        let fx = FakeEffects::default().with_dir("/sys/cpu").with_dir("/sys/cpu/cpu0");
        fx.affinity.lock().unwrap().insert(11, vec![0, 1]);
        let jd = tempfile::tempdir().unwrap();
        let journal = Journal::open(jd.path()).unwrap();
        let mut sink = |_: &str, _: serde_json::Value| {};
        let mut cx = ActCx { journal: &journal, fx: &fx, events: &mut sink };
        let mut acts = Actuators::new(vec![Box::new(PlacementActuator::new("/sys/cpu", Box::new(|_: &str| vec![11])))]);
        acts.init_all(&mut cx).unwrap();
        acts.reconcile_all(&plan(Some(1_000_000)), &mut cx);
        let st = &acts.status()[0];
        assert!(st.ok && st.state["notes"][0].as_str().unwrap().contains("no cpufreq"), "{}", st.state);
        assert_eq!(fx.get_affinity(11).unwrap(), vec![0, 1], "already there: unchanged");
        assert!(acts.shutdown_all(&mut cx).is_empty());
    }
}
