//! Who else writes the knobs joule writes or reads: tuned, power-profiles-daemon, thermald, TLP,
//! cpupower's service, scx_loader or any loaded sched_ext scheduler, irqbalance, a kubelet's CPU
//! manager and sysctl.d files, per knob, with how each was found and what joule does beside it.
//! Everything comes from files (processes' `comm`/`cmdline`, enabled units' `*.wants` links, the
//! tools' configs, the kernel's sched_ext state), so a fixture tree stands in for the machine;
//! D-Bus names are left to `busctl` (no bus connection here).

mod seen;

use crate::backends::Choice;
use crate::backends::Facts;
use joule_core::config::{Config, ThermalScheduler};
use seen::Seen;
use serde::Serialize;
use std::path::PathBuf;

/// Where the files doctor reads are (`/sys`, `/proc`, `/etc`, `/var/lib`).
#[derive(Debug, Clone)]
pub struct Roots {
    pub sys: PathBuf,
    pub proc: PathBuf,
    pub etc: PathBuf,
    pub var_lib: PathBuf,
}

/// One knob joule writes (or reads), who else writes it here, and what joule does beside them.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct KnobRow {
    pub knob: &'static str,
    pub others: Vec<Other>,
    pub joule: String,
}

/// Another writer of a knob.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Other {
    pub tool: String,
    /// What it writes of this knob.
    pub writes: String,
    /// How doctor found it: each process, unit link, config line or kernel file.
    pub found_by: Vec<String>,
    /// The kinds of those (`process`, `unit`, `config`, `kernel`, `cgroup tree`), for the table.
    #[serde(skip)]
    pub kinds: Vec<&'static str>,
}

/// The section of `joule doctor`: one row per knob, and the warnings it adds to the backends.
#[derive(Debug, Clone)]
pub struct Coexistence {
    pub rows: Vec<KnobRow>,
    /// (mechanism prefix, warning) for [`Coexistence::warn`].
    warnings: Vec<(&'static str, String)>,
}

pub const CPUFREQ: &str = "cpufreq scaling_max_freq";
pub const GOVERNOR: &str = "governor / EPP";
pub const SCHED_EXT: &str = "sched_ext slot";
pub const RAPL: &str = "RAPL power limits";
pub const CGROUP: &str = "cgroup cpu / cpuset";
pub const IRQ: &str = "IRQ affinity";
pub const RT_RUNTIME: &str = "sched_rt_runtime_us";

/// What each fixed tool writes of each knob; the others (TLP's and cpupower's caps, sched_ext
/// schedulers, the kubelet, sysctl.d) depend on what was found and come from [`Seen`].
const WRITES: &[(&str, &str, &str)] = &[
    (CPUFREQ, "thermald", "as a cooling device: every CPU's scaling_max_freq, or intel_pstate's max_perf_pct, as it heats"),
    (CPUFREQ, "tuned", "per profile: [cpu] max_perf_pct (intel_pstate, a second ceiling) or [sysfs] lines"),
    (GOVERNOR, "tuned", "[cpu] governor, energy_performance_preference, energy_perf_bias, per profile"),
    (GOVERNOR, "power-profiles-daemon", "EPP (and the governor intel_pstate needs for it) and the ACPI platform profile, per profile"),
    (GOVERNOR, "TLP", "CPU_SCALING_GOVERNOR_*, CPU_ENERGY_PERF_POLICY_*, PLATFORM_PROFILE_* at boot and on each power-source change"),
    (GOVERNOR, "cpupower", "the governor (and limits) of its config, at boot"),
    (SCHED_EXT, "scx_loader", "loads the scheduler its config or a D-Bus call names"),
    (SCHED_EXT, "scx", "loads SCX_SCHEDULER at boot"),
    (RAPL, "thermald", "as a cooling device: the package's powercap power limits"),
    (IRQ, "irqbalance", "every IRQ's smp_affinity, moved as the load changes"),
    (IRQ, "tuned", "per profile: [scheduler] isolated_cores and [irqbalance] banned_cpus move IRQs off isolated CPUs"),
    (RT_RUNTIME, "tuned", "realtime profiles: [sysctl] kernel.sched_rt_runtime_us = -1"),
];

/// Reads who else is on this machine and builds the rows for `cfg` and the `backends` doctor
/// chose for it.
pub fn read(r: &Roots, f: &Facts, cfg: &Config, backends: &[Choice]) -> Coexistence {
    let seen = Seen::read(r, f.cgroup.managers.contains(&"kubelet"));
    build(&seen, cfg, &freq_writers(cfg, backends), f.sensors.cpufreq_driver.is_some())
}

/// The rows, and the warnings: `caps` are joule's own frequency caps, warned about only where
/// cpufreq exists (`cpufreq`).
fn build(s: &Seen, cfg: &Config, caps: &[&str], cpufreq: bool) -> Coexistence {
    let mut rows: Vec<KnobRow> = [CPUFREQ, GOVERNOR, SCHED_EXT, RAPL, CGROUP, IRQ, RT_RUNTIME]
        .into_iter()
        .map(|knob| {
            let fixed = WRITES.iter().filter(|(k, _, _)| *k == knob).filter_map(|(_, tool, w)| s.other(tool, w.to_string()));
            KnobRow { knob, others: fixed.chain(s.dynamic(knob)).collect(), joule: joule_beside(knob, cfg, s, caps) }
        })
        .collect();
    rows.iter_mut().for_each(|r| r.others.sort_by(|a, b| a.tool.cmp(&b.tool)));
    let mut warnings = Vec::new();
    let names = |knob| rows.iter().find(|r: &&KnobRow| r.knob == knob).map(|r| r.others.iter().map(|o| o.tool.as_str()).collect::<Vec<_>>().join(", "));
    if let Some(n) = names(CPUFREQ).filter(|n| cpufreq && !n.is_empty() && !caps.is_empty()) {
        warnings.push(("cpufreq", format!("frequency is also capped here by {n}: the lowest ceiling holds, and a CPU whose cap another tool changes is left to it (drift, reported once; docs/deploy.md, \"Coexistence\")")));
    }
    if cfg.thermal.scheduler == ThermalScheduler::Scx {
        if let Some(held) = &s.loaded_scheduler {
            warnings.push(("thermal scheduler", format!("the sched_ext slot is held by {held}: joule's scheduler loads only once it is free; meanwhile the thermal stage acts through the cgroup path (a conflict, reported once)")));
        } else if let Some(n) = names(SCHED_EXT).filter(|n| !n.is_empty()) {
            warnings.push(("thermal scheduler", format!("{n} can load a sched_ext scheduler: whichever loads first holds the slot, and joule does not fight for it (docs/deploy.md, \"Coexistence\")")));
        }
    }
    for (class, cpus) in overlaps(cfg, &s.kube_exclusive) {
        warnings.push(("class CPU", format!("class {class}'s cpus include CPUs {cpus} the kubelet gave pods exclusively")));
    }
    Coexistence { rows, warnings }
}

/// Which of joule's mechanisms cap scaling_max_freq with `cfg` (empty: joule caps nothing).
/// The thermal stages do where doctor's own `cpufreq caps` choice acts (neither `off` nor
/// `none`) and a stage asks for less than 100 %.
fn freq_writers(cfg: &Config, backends: &[Choice]) -> Vec<&'static str> {
    let mut v = Vec::new();
    let stages_cap = backends.iter().any(|c| c.mechanism.starts_with("cpufreq") && !matches!(c.backend.as_str(), "off" | "none"));
    if stages_cap && cfg.thermal.table().iter().any(|s| s.cpufreq_max_pct < 100.0) {
        v.push("thermal stages");
    }
    if cfg.energy.enabled {
        v.push("[energy] placement");
    }
    if cfg.nap.enabled && cfg.nap.machine.cpufreq_min {
        v.push("[nap] machine.cpufreq_min");
    }
    v
}

/// Classes whose `cpus` meet the pods' exclusive CPUs, with the CPUs they share.
fn overlaps(cfg: &Config, exclusive: &[usize]) -> Vec<(String, String)> {
    let shared = |c: &str| joule_core::cpulist::parse(c).unwrap_or_default().into_iter().filter(|x| exclusive.contains(x)).collect::<Vec<_>>();
    cfg.classes
        .iter()
        .filter_map(|c| Some((c.name.clone(), shared(c.cpus.as_deref()?))))
        .filter(|(_, s)| !s.is_empty())
        .map(|(n, s)| (n, joule_core::cpulist::format(&s)))
        .collect()
}

/// What joule does with `knob` beside other writers, for this config.
fn joule_beside(knob: &str, cfg: &Config, s: &Seen, caps: &[&str]) -> String {
    match knob {
        CPUFREQ => {
            let what = if caps.is_empty() { "caps nothing in this config (its caps are opt-in)".to_string() } else { format!("caps it ({})", caps.join(", ")) };
            format!("{what}; the lowest ceiling holds, and a CPU whose cap another tool changes is left to it (drift, reported once)")
        }
        GOVERNOR => "never writes them; they choose the speed below any cap".into(),
        SCHED_EXT if cfg.thermal.scheduler == ThermalScheduler::Scx => {
            "loads its scheduler only while the slot is free; while another holds it, the thermal stage acts through cgroups (conflict, reported once)".into()
        }
        SCHED_EXT => "scheduler = \"cgroup\": loads no scheduler".into(),
        RAPL => "only reads energy_uj; never writes a power limit".into(),
        CGROUP => {
            let n = if cfg.agent.apply_classes { cfg.classes.len() } else { 0 };
            let clash: Vec<String> = overlaps(cfg, &s.kube_exclusive).into_iter().map(|(c, x)| format!("class {c} shares pods' exclusive CPUs {x}")).collect();
            let tail = if clash.is_empty() { String::new() } else { format!("; {}", clash.join(", ")) };
            format!("writes only the groups or units of its own classes ({n} in this config); a class must not match pods' processes{tail}")
        }
        IRQ => "writes no IRQ affinity; its limiter bounds softirq work on whichever CPU the IRQ lands".into(),
        _ => "admits RT classes against it at start; only `joule elevate --no-rt-throttle` writes it (-1 for its run, restored)".into(),
    }
}

impl Coexistence {
    /// Adds this section's warnings to the backends they concern (cpufreq caps, the thermal
    /// scheduler, class CPU).
    pub fn warn(&self, backends: &mut [Choice]) {
        for (prefix, w) in &self.warnings {
            if let Some(c) = backends.iter_mut().find(|c| c.mechanism.starts_with(prefix)) {
                c.warning = Some(c.warning.take().map(|x| format!("{x}; {w}")).unwrap_or_else(|| w.clone()));
            }
        }
    }

    /// The table's section: one line per knob, or one line when nobody else was found.
    pub fn render(&self) -> String {
        let mut s = String::from("\nwho else manages these knobs\n");
        if self.rows.iter().all(|r| r.others.is_empty()) {
            s += "  none found (no tuned, power-profiles-daemon, thermald, TLP, cpupower, sched_ext scheduler or loader, irqbalance, kubelet CPU manager or sysctl.d RT setting)\n";
            return s;
        }
        for r in &self.rows {
            let others = if r.others.is_empty() {
                "nobody else".to_string()
            } else {
                r.others.iter().map(|o| format!("{} ({})", o.tool, o.kinds.join(", "))).collect::<Vec<_>>().join(", ")
            };
            s += &format!("  {:<26} {others} | joule: {}\n", r.knob, r.joule);
        }
        s
    }
}

#[cfg(test)]
mod tests;
