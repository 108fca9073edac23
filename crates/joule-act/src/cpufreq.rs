//! The cpufreq actuator of the thermal stage's cgroup path (`Want::CpufreqMax`): every CPU's
//! `cpufreq/scaling_max_freq` held at `pct` % of `cpuinfo_max_freq` (never below
//! `cpuinfo_min_freq`), the original value journalled before each CPU's first write and put
//! back at 100 %, on shutdown and by `joule restore`. It lives in joule-core, beside the
//! effects seam and the journal it needs and the policy that addresses it, because it is a
//! handful of sysfs writes with no cgroup or BPF machinery: a crate of its own would be
//! heavier than the code. Where cpufreq is missing (VMs, this project's CI host) it says so
//! once, in its status, and does nothing — that is the machine, not an error.

use joule_core::control::{ActCx, ActError, Actuator, Plan, Want};
use joule_core::effects::Effects;
use joule_core::fsread::read_trimmed;
use joule_core::journal::Undo;
use joule_core::control::owner;
use serde::Serialize;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// Owner tag of this actuator's undo records.
pub const OWNER: &str = "cpufreq";

/// One CPU's frequency limits, kHz, as read at start.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CpuLimits {
    pub cpu: u32,
    /// Its `scaling_max_freq`.
    pub knob: PathBuf,
    pub min_khz: u64,
    pub max_khz: u64,
    /// `scaling_max_freq` before joule touched it: what 100 % puts back.
    pub original_khz: u64,
}

impl CpuLimits {
    /// The limit at `pct` % of the maximum (the original at 100 %).
    pub fn target_khz(&self, pct: f64) -> u64 {
        if pct >= 100.0 {
            return self.original_khz;
        }
        ((self.max_khz as f64 * pct.max(0.0) / 100.0).round() as u64).max(self.min_khz)
    }
}

/// Writes `khz` to `l`'s `scaling_max_freq`, journalling its original under `owner` before the
/// first write (`journalled`: the knobs already in the journal). The placement actuator caps
/// per domain with it too.
pub fn write_limit(l: &CpuLimits, khz: u64, owner: &str, journalled: &mut BTreeSet<PathBuf>, cx: &mut ActCx<'_>) -> Result<(), ActError> {
    if journalled.insert(l.knob.clone()) {
        cx.journal.record(owner, Undo::Write { path: l.knob.clone(), old: l.original_khz.to_string() })?;
    }
    cx.fx.write(&l.knob, &khz.to_string()).map_err(|e| format!("writing {khz} kHz to {}: {e}", l.knob.display()).into())
}

pub struct CpufreqActuator {
    /// `/sys/devices/system/cpu` (a fixture tree in tests).
    cpu_root: PathBuf,
    cpus: Vec<CpuLimits>,
    /// Why nothing is done here (no cpufreq), said once.
    note: Option<String>,
    /// The pct held now.
    pct: f64,
    /// Knobs whose original value is already in the journal.
    journalled: BTreeSet<PathBuf>,
}

impl CpufreqActuator {
    pub fn new(cpu_root: impl Into<PathBuf>) -> CpufreqActuator {
        CpufreqActuator { cpu_root: cpu_root.into(), cpus: Vec::new(), note: None, pct: 100.0, journalled: BTreeSet::new() }
    }

    /// Every `cpuN/cpufreq` with readable limits, by CPU number.
    pub fn scan(cpu_root: &Path, fx: &dyn Effects) -> Vec<CpuLimits> {
        let mut names = fx.list_dir(cpu_root).unwrap_or_default();
        names.sort_by_key(|n| n.strip_prefix("cpu").and_then(|x| x.parse::<u32>().ok()).unwrap_or(u32::MAX));
        let khz = |p: &Path| read_trimmed(fx, p).ok().and_then(|s| s.parse::<u64>().ok());
        names
            .iter()
            .filter_map(|n| {
                let cpu = n.strip_prefix("cpu")?.parse().ok()?;
                let d = cpu_root.join(n).join("cpufreq");
                let knob = d.join("scaling_max_freq");
                Some(CpuLimits { cpu, min_khz: khz(&d.join("cpuinfo_min_freq"))?, max_khz: khz(&d.join("cpuinfo_max_freq"))?, original_khz: khz(&knob)?, knob })
            })
            .collect()
    }

    /// [`scan`](Self::scan), and where it finds nothing, the note saying so (logged once);
    /// `skipped` says what the caller then does without.
    pub fn scan_noting(cpu_root: &Path, fx: &dyn Effects, skipped: &str) -> (Vec<CpuLimits>, Option<String>) {
        let cpus = Self::scan(cpu_root, fx);
        if !cpus.is_empty() {
            return (cpus, None);
        }
        let note = format!("no cpufreq under {} (cpuN/cpufreq/scaling_max_freq): {skipped}", cpu_root.display());
        tracing::info!("{note}");
        (cpus, Some(note))
    }

    fn hold(&mut self, pct: f64, cx: &mut ActCx<'_>) -> Result<usize, ActError> {
        let mut writes = 0;
        for c in &self.cpus {
            let (now, want) = (c.target_khz(self.pct), c.target_khz(pct));
            if now == want {
                continue;
            }
            write_limit(c, want, OWNER, &mut self.journalled, cx)?;
            writes += 1;
        }
        self.pct = pct;
        Ok(writes)
    }
}

impl Actuator for CpufreqActuator {
    fn name(&self) -> &'static str {
        owner::CPUFREQ
    }

    fn init(&mut self, cx: &mut ActCx<'_>) -> Result<(), ActError> {
        (self.cpus, self.note) = Self::scan_noting(&self.cpu_root, cx.fx, "CPU frequency caps are skipped on this machine");
        Ok(())
    }

    fn reconcile(&mut self, plan: &Plan, cx: &mut ActCx<'_>) -> Result<serde_json::Value, ActError> {
        let pct = plan.for_actuator(owner::CPUFREQ).filter_map(|d| if let Want::CpufreqMax { pct } = d.want { Some(pct) } else { None }).last();
        if let Some(pct) = pct.filter(|p| *p != self.pct) {
            let writes = self.hold(pct, cx)?;
            if writes > 0 {
                (cx.events)("cpufreq_max", serde_json::json!({ "pct": pct, "cpus": writes }));
            }
        }
        Ok(serde_json::json!({
            "pct": self.pct,
            "cpus": self.cpus.iter().map(|c| serde_json::json!({ "cpu": c.cpu, "max_khz": c.target_khz(self.pct), "original_khz": c.original_khz })).collect::<Vec<_>>(),
            "notes": self.note.iter().collect::<Vec<_>>(),
        }))
    }

    fn shutdown(&mut self, cx: &mut ActCx<'_>) -> Result<(), ActError> {
        let r = cx.journal.restore_owner(OWNER, cx.fx)?;
        self.journalled.clear();
        self.pct = 100.0;
        if !r.failed.is_empty() {
            return Err(format!("could not put back {} CPU frequency limit(s): {:?}", r.failed.len(), r.failed).into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use joule_core::control::Actuators;
    use joule_core::effects::FakeEffects;
    use joule_core::journal::{self, Journal};

    /// Two CPUs with cpufreq (3 GHz max, 800 MHz min; cpu1 already limited by someone to 2.8
    /// GHz) and a `cpufreq`-less entry that is not a CPU.
    fn tree() -> FakeEffects {
        let mut fx = FakeEffects::default().with_dir("/sys/cpu").with_dir("/sys/cpu/cpuidle");
        for (n, cur) in [(0, "3000000"), (1, "2800000")] {
            let d = format!("/sys/cpu/cpu{n}/cpufreq");
            fx = fx
                .with_dir(format!("/sys/cpu/cpu{n}"))
                .with_dir(d.as_str())
                .with_file(format!("{d}/cpuinfo_max_freq"), "3000000\n")
                .with_file(format!("{d}/cpuinfo_min_freq"), "800000\n")
                .with_file(format!("{d}/scaling_max_freq"), &format!("{cur}\n"));
        }
        fx
    }

    fn plan(pct: f64) -> Plan {
        let mut p = Plan::default();
        p.push("thermal", Some(owner::CPUFREQ), Want::CpufreqMax { pct }, "test");
        p
    }

    /// Runs `body` on a started cpufreq actuator over `fx`, journalling in a fresh directory.
    fn with_actuator(fx: &FakeEffects, body: impl FnOnce(&mut Actuators, &mut ActCx<'_>, &Path)) {
        let jd = tempfile::tempdir().unwrap();
        let journal = Journal::open(jd.path()).unwrap();
        let mut sink = |_: &str, _: serde_json::Value| {};
        let mut cx = ActCx { journal: &journal, fx, events: &mut sink };
        let mut acts = Actuators::new(vec![Box::new(CpufreqActuator::new("/sys/cpu"))]);
        acts.init_all(&mut cx).unwrap();
        body(&mut acts, &mut cx, jd.path());
    }

    #[test]
    fn caps_every_cpu_journalled_first_never_below_min_and_restores_the_original() {
        let fx = tree();
        with_actuator(&fx, |acts, cx, jd| caps_and_restores(&fx, acts, cx, jd));
    }

    fn caps_and_restores(fx: &FakeEffects, acts: &mut Actuators, cx: &mut ActCx<'_>, jd: &Path) {
        acts.reconcile_all(&plan(100.0), cx);
        assert!(fx.log.lock().unwrap().is_empty(), "100 % at start writes nothing");
        acts.reconcile_all(&plan(85.0), cx);
        assert_eq!(fx.file("/sys/cpu/cpu0/cpufreq/scaling_max_freq").as_deref(), Some("2550000"));
        assert_eq!(fx.file("/sys/cpu/cpu1/cpufreq/scaling_max_freq").as_deref(), Some("2550000"));
        let recs = journal::entries(jd).unwrap();
        assert_eq!(recs.len(), 2);
        assert_eq!(recs[1].undo, Undo::Write { path: "/sys/cpu/cpu1/cpufreq/scaling_max_freq".into(), old: "2800000".into() });
        acts.reconcile_all(&plan(85.0), cx);
        acts.reconcile_all(&plan(10.0), cx);
        assert_eq!(fx.file("/sys/cpu/cpu0/cpufreq/scaling_max_freq").as_deref(), Some("800000"), "never below cpuinfo_min_freq");
        assert_eq!(fx.log.lock().unwrap().len(), 4, "written only when the value changes");
        assert_eq!(journal::entries(jd).unwrap().len(), 2, "one undo record per CPU, holding the original");
        acts.reconcile_all(&plan(100.0), cx);
        assert_eq!(fx.file("/sys/cpu/cpu1/cpufreq/scaling_max_freq").as_deref(), Some("2800000"), "100 % puts back the original");
        assert!(acts.status()[0].ok);
        // Killed at a capped stage: the journal alone restores.
        acts.reconcile_all(&plan(70.0), cx);
        journal::Journal::open(jd).and_then(|j| j.restore_all(fx)).unwrap();
        assert_eq!(fx.file("/sys/cpu/cpu0/cpufreq/scaling_max_freq").as_deref(), Some("3000000"));
        assert_eq!(fx.file("/sys/cpu/cpu1/cpufreq/scaling_max_freq").as_deref(), Some("2800000"));
    }

    #[test]
    fn without_cpufreq_it_says_so_once_and_does_nothing() {
        let fx = FakeEffects::default().with_dir("/sys/cpu").with_dir("/sys/cpu/cpu0");
        with_actuator(&fx, |acts, cx, jd| {
            acts.reconcile_all(&plan(70.0), cx);
            let st = &acts.status()[0];
            assert!(st.ok, "{:?}", st.last_error);
            assert!(st.state["notes"][0].as_str().unwrap().contains("no cpufreq"), "{}", st.state);
            assert!(fx.log.lock().unwrap().is_empty());
            assert!(journal::entries(jd).unwrap().is_empty());
            assert!(acts.shutdown_all(cx).is_empty());
        });
    }
}
