//! The cpufreq actuator never fights another writer of `scaling_max_freq` (thermald, tuned,
//! cpupower, an administrator): a knob that reads a value joule did not leave there is reported
//! once (log, `cpufreq_drift` event, `joule_cpufreq_drift_total{cpu}`), never written again this
//! run, and its undo record is forgotten, so neither shutdown nor `joule restore` puts joule's
//! original over the other tool's value.
//!
//! What counts as joule's value: what it wrote, what the knob read right after that write (the
//! kernel resolves a limit to a frequency the CPU has), and, while one of the kernel's own
//! cpufreq cooling devices limits (`cur_state` > 0), anything lower: the kernel's thermal
//! framework lowers `policy->max` below the user's request without touching the request, so a
//! lower reading then is the kernel's, not another tool's. Any other reading is drift.

use super::Core;
use joule_core::control::{owner, ActCx};
use joule_core::effects::Effects;
use joule_core::fsread::read_trimmed;
use joule_core::journal::Undo;
use serde::Serialize;
use std::io;
use std::path::Path;

/// One CPU whose limit another tool changed, as reported.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Drift {
    pub cpu: u32,
    /// What joule had set.
    pub joule_khz: u64,
    /// What the knob read instead.
    pub found_khz: u64,
}

/// A knob's value in kHz (None: unreadable or not a number).
pub(super) fn read_khz(fx: &dyn Effects, knob: &Path) -> Option<u64> {
    read_trimmed(fx, knob).ok()?.parse().ok()
}

/// Whether one of the kernel's CPU cooling devices under `cooling_dir` (`<sysfs>/class/thermal`)
/// limits now: cpufreq cooling (`cpufreq-cpuN`, `thermal-cpufreq-N`) or ACPI processor cooling
/// (`Processor`) with `cur_state` above 0. Both lower `policy->max` through their own freq QoS
/// request, which `scaling_max_freq` shows.
fn kernel_cooling_active(fx: &dyn Effects, cooling_dir: &Path) -> bool {
    let names = fx.list_dir(cooling_dir).unwrap_or_default();
    names.iter().filter(|n| n.starts_with("cooling_device")).any(|n| {
        let d = cooling_dir.join(n);
        let cpu_cooling = read_trimmed(fx, &d.join("type")).is_ok_and(|t| t.starts_with("cpufreq-") || t.starts_with("thermal-cpufreq") || t == "Processor");
        cpu_cooling && read_trimmed(fx, &d.join("cur_state")).ok().and_then(|s| s.parse::<u64>().ok()).is_some_and(|s| s > 0)
    })
}

impl Core {
    /// Whether CPU `i`'s knob still holds what joule left there; read before every write and
    /// at each drift check. A knob joule never wrote that reads another value now has a new
    /// original (someone set it while joule held nothing there): adopted, so the undo record
    /// joule is about to write holds what the machine had. A knob joule wrote that reads a
    /// value joule did not write: yielded (see the module's rule). Err only when the undo
    /// record could not be forgotten; the CPU is yielded anyway.
    pub(super) fn still_ours(&mut self, i: usize) -> io::Result<bool> {
        let c = &self.cpus[i];
        let Some(found) = read_khz(self.fx.as_ref(), &c.knob) else { return Ok(true) }; // the write says why
        let Some(&set) = self.written.get(&c.cpu) else {
            // (A knob journalled but never written, a write that failed, keeps its record's.)
            if found != c.original_khz && !self.journalled.contains(&c.knob) {
                tracing::info!(
                    "cpu{}'s scaling_max_freq is {found} kHz, no longer the {} kHz read at start: joule puts {found} kHz back when it lets go",
                    c.cpu,
                    c.original_khz
                );
                self.cpus[i].original_khz = found;
            }
            return Ok(true);
        };
        let kernels = found == set || self.read_back.get(&c.cpu) == Some(&found) || (found < set && kernel_cooling_active(self.fx.as_ref(), &self.cooling_dir));
        if kernels {
            return Ok(true);
        }
        self.give_up(i, set, found)?;
        Ok(false)
    }

    /// CPU `i`'s limit is another tool's from now on: reported (log now, the event at the next
    /// reconcile), never written again, its undo record forgotten.
    fn give_up(&mut self, i: usize, set: u64, found: u64) -> io::Result<()> {
        let c = self.cpus[i].clone();
        tracing::warn!(
            "cpu{}'s scaling_max_freq is {found} kHz, not the {set} kHz joule set: another tool (thermald, tuned, cpupower, an administrator) manages it; joule leaves that CPU's limit to it for the rest of the run and will not put its own original ({} kHz) back",
            c.cpu,
            c.original_khz
        );
        let d = Drift { cpu: c.cpu, joule_khz: set, found_khz: found };
        self.written.remove(&c.cpu);
        self.read_back.remove(&c.cpu);
        self.yielded.insert(c.cpu, d.clone());
        self.unreported.push(d);
        if !self.journalled.remove(&c.knob) {
            return Ok(());
        }
        let j = self.journal.as_ref().ok_or_else(|| io::Error::other("the cpufreq actuator has not started (no journal)"))?;
        j.forget(owner::CPUFREQ, &Undo::Write { path: c.knob.clone(), old: c.original_khz.to_string() })
            .map(drop)
            .map_err(|e| io::Error::other(format!("forgetting the undo record of {} (a replay would overwrite the other tool's value): {e}", c.knob.display())))
    }

    /// Reads back every knob joule holds; the CPUs another tool took over are yielded.
    pub(super) fn check_drift(&mut self) -> io::Result<()> {
        for i in 0..self.cpus.len() {
            if self.written.contains_key(&self.cpus[i].cpu) {
                self.still_ours(i)?;
            }
        }
        Ok(())
    }

    /// Reports the drift found since the last call as `cpufreq_drift` events.
    pub(super) fn report_drift(&mut self, cx: &mut ActCx<'_>) {
        for d in std::mem::take(&mut self.unreported) {
            (cx.events)("cpufreq_drift", serde_json::to_value(&d).unwrap_or_default());
        }
    }
}
