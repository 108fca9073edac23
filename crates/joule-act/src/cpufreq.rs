//! The cpufreq actuator: the only writer of every CPU's `cpufreq/scaling_max_freq`. Each period
//! it takes the Plan's merged `CpufreqMax` knobs (the lowest cap thermal, placement or any
//! policy asked for, per CPU); between periods other mechanisms hold requests through a
//! [`FreqRequests`] handle (the nap's "lowest frequency while napping", set on entry and dropped
//! by the waiter thread at the first packet). What a CPU holds is the lowest of all of them, as
//! the kernel's freq QoS does with `FREQ_QOS_MAX` requests: dropping one request never lifts a
//! cap another still asks for. A knob's original value is journalled before its first write
//! and put back when nothing caps it, on shutdown and by `joule restore`.
//!
//! Where cpufreq is missing (VMs, this project's CI host) it says so once, in its status, and
//! does nothing: that is the machine, not an error.
//!
//! Another tool writing the same knob is not fought: `cpufreq_drift.rs` reads a knob back
//! before each write and every [`DRIFT_CHECK`], and yields a CPU whose limit someone else set.

use joule_core::control::{owner, ActCx, ActError, Actuator, ActuatorState, Knob, Plan, Setting};
use joule_core::effects::Effects;
use joule_core::fsread::read_trimmed;
use joule_core::journal::{Journal, Undo};
use joule_core::metric::{l, Family, MetricDef};
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

#[path = "cpufreq_drift.rs"]
mod drift;
pub use drift::Drift;

/// How often the knobs joule holds are read back for another tool's changes (a write is
/// always preceded by a read, so no other tool's value is overwritten in between).
pub const DRIFT_CHECK: Duration = crate::cgroup_cpu::DRIFT_CHECK;

/// The metric families this actuator reports.
pub const METRICS: &[MetricDef] = &[
    MetricDef::gauge(
        "joule_cpufreq_max_hertz",
        "The scaling_max_freq joule holds per CPU: the lowest cap any mechanism asks for (its original value when none does).",
    ),
    MetricDef::counter(
        "joule_cpufreq_drift",
        "Times a CPU's scaling_max_freq joule set was found changed by another tool (thermald, tuned, cpupower, an administrator); joule then leaves that CPU's limit to it for the rest of the run.",
    ),
    MetricDef::gauge("joule_cpufreq_yielded_cpus", "CPUs whose frequency limit joule left to another tool after it changed one joule set."),
];

/// One CPU's frequency limits, kHz, as read at start.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CpuLimits {
    pub cpu: u32,
    /// Its `scaling_max_freq`.
    pub knob: PathBuf,
    pub min_khz: u64,
    pub max_khz: u64,
    /// `scaling_max_freq` before joule touched it: what holds when nothing caps the CPU.
    pub original_khz: u64,
}

/// Every `cpuN/cpufreq` with readable limits under `cpu_root`, by CPU number.
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

/// A request held between periods through [`FreqRequests`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum HeldLimit {
    /// The CPU's lowest frequency (`cpuinfo_min_freq`).
    Min,
}

/// What one CPU holds and who asked.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CpuHeld {
    pub cpu: u32,
    pub max_khz: u64,
    pub original_khz: u64,
    /// `policy (asked)` for each request on this CPU; empty when nothing caps it.
    pub asked_by: Vec<String>,
}

/// The actuator's state.
#[derive(Debug, Clone, Default, Serialize)]
pub struct CpufreqState {
    /// The CPUs joule holds (not those yielded).
    pub cpus: Vec<CpuHeld>,
    /// The CPUs another tool took over, with what joule had set and what it found.
    pub yielded: Vec<Drift>,
    pub notes: Vec<String>,
}

impl ActuatorState for CpufreqState {
    fn to_json(&self) -> serde_json::Value {
        serde_json::to_value(self).unwrap_or_default()
    }
    fn families(&self) -> Vec<Family> {
        let samples = self.cpus.iter().map(|c| (l(&[("cpu", &c.cpu.to_string())]), c.max_khz as f64 * 1e3)).collect();
        let drift = self.yielded.iter().map(|d| (l(&[("cpu", &d.cpu.to_string())]), 1.0)).collect();
        vec![METRICS[0].with(samples), METRICS[1].with(drift), METRICS[2].with(vec![(vec![], self.yielded.len() as f64)])]
    }
}

struct Core {
    fx: Arc<dyn Effects + Send + Sync>,
    journal: Option<Journal>,
    cpus: Vec<CpuLimits>,
    note: Option<String>,
    /// Per CPU: the Plan's merged cap (None: no cap) and its requests (`policy (asked)`).
    plan: BTreeMap<u32, (Option<u64>, Vec<String>)>,
    /// Requests held between periods: requester → (limit, reason).
    held: BTreeMap<String, (HeldLimit, String)>,
    /// What each knob holds now (absent: its original, untouched).
    written: BTreeMap<u32, u64>,
    /// What each knob read right after joule's last write to it.
    read_back: BTreeMap<u32, u64>,
    journalled: BTreeSet<PathBuf>,
    /// CPUs another tool took over: never written again this run.
    yielded: BTreeMap<u32, Drift>,
    /// Drift found since the last reconcile, for it to report as events.
    unreported: Vec<Drift>,
    /// `<sysfs>/class/thermal`: whether the kernel's own cooling lowers a limit.
    cooling_dir: PathBuf,
    drift_checked: Option<Instant>,
    drift_every: Duration,
}

impl Core {
    /// The lowest cap on `c`, and who asked.
    fn wanted(&self, c: &CpuLimits) -> (u64, Vec<String>) {
        let (plan_khz, mut asked) = self.plan.get(&c.cpu).cloned().unwrap_or_default();
        let mut khz = plan_khz.unwrap_or(c.original_khz).min(c.original_khz);
        for (who, (limit, _)) in &self.held {
            let k = match limit {
                HeldLimit::Min => c.min_khz,
            };
            khz = khz.min(k);
            asked.push(format!("{who} ({})", Setting::Khz(k)));
        }
        (khz, asked)
    }

    /// What `c`'s knob holds as far as joule knows.
    fn holds(&self, c: &CpuLimits) -> u64 {
        self.written.get(&c.cpu).copied().unwrap_or(c.original_khz)
    }

    /// Writes every CPU whose wanted value differs from what it holds, journalling its
    /// original before its first write; a CPU another tool took over is left to it (the knob
    /// is read before each write). Returns how many it wrote.
    fn apply(&mut self) -> io::Result<usize> {
        let mut writes = 0;
        for i in 0..self.cpus.len() {
            if self.yielded.contains_key(&self.cpus[i].cpu) || self.wanted(&self.cpus[i]).0 == self.holds(&self.cpus[i]) || !self.still_ours(i)? {
                continue;
            }
            let c = self.cpus[i].clone();
            let (want, _) = self.wanted(&c);
            if want == self.holds(&c) {
                continue; // its new original is what it wants
            }
            if !self.journalled.contains(&c.knob) {
                let j = self.journal.as_ref().ok_or_else(|| io::Error::other("the cpufreq actuator has not started (no journal)"))?;
                j.record(owner::CPUFREQ, Undo::Write { path: c.knob.clone(), old: c.original_khz.to_string() }).map_err(io::Error::other)?;
                self.journalled.insert(c.knob.clone());
            }
            self.fx.write(&c.knob, &want.to_string()).map_err(|e| io::Error::new(e.kind(), format!("writing {want} kHz to {}: {e}", c.knob.display())))?;
            self.written.insert(c.cpu, want);
            self.read_back.insert(c.cpu, drift::read_khz(self.fx.as_ref(), &c.knob).unwrap_or(want));
            writes += 1;
        }
        Ok(writes)
    }

    fn state(&self) -> CpufreqState {
        let cpus = self
            .cpus
            .iter()
            .filter(|c| !self.yielded.contains_key(&c.cpu))
            .map(|c| {
                let (max_khz, asked_by) = self.wanted(c);
                CpuHeld { cpu: c.cpu, max_khz, original_khz: c.original_khz, asked_by }
            })
            .collect();
        CpufreqState { cpus, yielded: self.yielded.values().cloned().collect(), notes: self.note.iter().cloned().collect() }
    }
}

/// A handle for holding a frequency request between control periods (the nap's waiter thread
/// drops its request at the first packet): the same owner, the same lowest-cap rule.
#[derive(Clone)]
pub struct FreqRequests(Arc<Mutex<Core>>);

impl FreqRequests {
    fn lock(&self) -> MutexGuard<'_, Core> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Holds `limit` for `requester` on every CPU until dropped; returns the CPUs written.
    pub fn hold(&self, requester: &str, limit: HeldLimit, reason: &str) -> io::Result<usize> {
        let mut core = self.lock();
        core.held.insert(requester.to_string(), (limit, reason.to_string()));
        core.apply()
    }

    /// Drops `requester`'s request: each CPU goes to the lowest cap still asked for (the
    /// original value when none is). Returns the CPUs written.
    pub fn drop_request(&self, requester: &str) -> io::Result<usize> {
        let mut core = self.lock();
        if core.held.remove(requester).is_none() {
            return Ok(0);
        }
        core.apply()
    }

    /// Whether this machine has any CPU with cpufreq.
    pub fn available(&self) -> bool {
        !self.lock().cpus.is_empty()
    }
}

pub struct CpufreqActuator {
    /// `/sys/devices/system/cpu` (a fixture tree in tests).
    cpu_root: PathBuf,
    core: FreqRequests,
}

impl CpufreqActuator {
    /// Writes through `fx` (its own handle of the effects: requests held between periods come
    /// from other threads). `cpu_root` is `<sysfs>/devices/system/cpu`; the kernel's cooling
    /// devices are read from `<sysfs>/class/thermal`.
    pub fn new(cpu_root: impl Into<PathBuf>, fx: Arc<dyn Effects + Send + Sync>) -> CpufreqActuator {
        let cpu_root: PathBuf = cpu_root.into();
        let sysfs = cpu_root.ancestors().nth(3).unwrap_or(Path::new("/sys"));
        let core = Core {
            fx,
            journal: None,
            cpus: Vec::new(),
            note: None,
            plan: BTreeMap::new(),
            held: BTreeMap::new(),
            written: BTreeMap::new(),
            read_back: BTreeMap::new(),
            journalled: BTreeSet::new(),
            yielded: BTreeMap::new(),
            unreported: Vec::new(),
            cooling_dir: sysfs.join("class/thermal"),
            drift_checked: None,
            drift_every: DRIFT_CHECK,
        };
        CpufreqActuator { cpu_root, core: FreqRequests(Arc::new(Mutex::new(core))) }
    }

    /// Reads the knobs back every `every` instead of every [`DRIFT_CHECK`] (tests: each period).
    pub fn with_drift_check(self, every: Duration) -> CpufreqActuator {
        self.core.lock().drift_every = every;
        self
    }

    /// The handle other actuators hold requests through.
    pub fn requests(&self) -> FreqRequests {
        self.core.clone()
    }
}

impl Actuator for CpufreqActuator {
    fn name(&self) -> &'static str {
        owner::CPUFREQ
    }

    fn init(&mut self, cx: &mut ActCx<'_>) -> Result<(), ActError> {
        let mut core = self.core.lock();
        core.cpus = scan(&self.cpu_root, core.fx.as_ref());
        if core.cpus.is_empty() {
            let note = format!("no cpufreq under {} (cpuN/cpufreq/scaling_max_freq): CPU frequency caps are skipped on this machine", self.cpu_root.display());
            tracing::info!("{note}");
            core.note = Some(note);
        }
        core.journal = Some(cx.journal.clone());
        Ok(())
    }

    fn reconcile(&mut self, plan: &Plan, cx: &mut ActCx<'_>) -> Result<(), ActError> {
        let mut core = self.core.lock();
        core.plan = plan
            .knobs_of(owner::CPUFREQ)
            .filter_map(|h| {
                let Knob::CpufreqMax { cpu } = h.knob else { return None };
                let khz = match h.setting {
                    Setting::Khz(k) => Some(k),
                    _ => None,
                };
                Some((cpu as u32, (khz, h.requests.iter().map(|r| format!("{} ({})", r.policy, r.asked)).collect())))
            })
            .collect();
        let checked = if core.drift_checked.is_none_or(|t| t.elapsed() >= core.drift_every) {
            core.drift_checked = Some(Instant::now());
            core.check_drift()
        } else {
            Ok(())
        };
        let applied = core.apply();
        core.report_drift(cx);
        checked?;
        let writes = applied?;
        if writes > 0 {
            let held: Vec<_> = core.state().cpus.iter().map(|c| serde_json::json!({ "cpu": c.cpu, "max_khz": c.max_khz })).collect();
            (cx.events)("cpufreq_max", serde_json::json!({ "cpus": held, "written": writes }));
        }
        Ok(())
    }

    fn state(&self) -> Arc<dyn ActuatorState> {
        Arc::new(self.core.lock().state())
    }

    fn shutdown(&mut self, cx: &mut ActCx<'_>) -> Result<(), ActError> {
        let mut core = self.core.lock();
        core.plan.clear();
        core.held.clear();
        // A limit another tool set since the last check is theirs: its record is forgotten
        // before the replay.
        let checked = core.check_drift();
        core.report_drift(cx);
        checked?;
        let r = match &core.journal {
            Some(j) => j.restore_owner(owner::CPUFREQ, core.fx.as_ref())?,
            None => return Ok(()),
        };
        core.written.clear();
        core.read_back.clear();
        core.journalled.clear();
        if !r.failed.is_empty() {
            return Err(format!("could not put back {} CPU frequency limit(s): {:?}", r.failed.len(), r.failed).into());
        }
        Ok(())
    }
}

#[cfg(test)]
#[path = "cpufreq_tests.rs"]
mod tests;
