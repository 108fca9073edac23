//! `[nap]`: PowerNap on one machine (issue 10, seed 003). What counts as activity (one monitor
//! per key under `[nap.monitors]`), how long without any before napping, and what napping does
//! (freeze a `[[class]]`, machine nap, system sleep). Off unless `enabled = true`.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct NapConfig {
    /// Nap at all. Off by default: nothing is watched, frozen or changed.
    pub enabled: bool,
    /// How long every monitor must report no activity before napping. Short saves more and
    /// naps (and wakes) more often; each wake costs the thaw (packet to thawed 0.23–0.35 ms at the median in
    /// docs/results/nap.md).
    pub idle_ms: u64,
    /// The control loop's period while napping (the watched ports wake a nap at once through
    /// eBPF, whatever this is; the other monitors are read this often while napping). Longer
    /// means fewer wake-ups of the agent itself.
    pub napping_period_ms: u64,
    /// The `[[class]]` whose tasks are frozen while napping (service nap); none: no freeze.
    pub class: Option<String>,
    /// On a systemd host, how long the nap stays off after a job (restart, reload, stop) was
    /// queued on a unit of the napped class: the job and what follows it (a stop, then a
    /// start) find the units awake (docs/systemd.md).
    pub job_hold_ms: u64,
    pub monitors: NapMonitors,
    pub machine: MachineNap,
    /// Suspend-to-idle while napping (`freeze` in /sys/power/state). Not implemented: the agent
    /// refuses to start with it, saying why — the kernel lacks it (no CONFIG_SUSPEND), or, where
    /// it has it, that joule does not enter it yet.
    pub system_sleep: bool,
}

impl Default for NapConfig {
    fn default() -> Self {
        Self {
            enabled: false,
            idle_ms: 5000,
            napping_period_ms: 2000,
            class: None,
            job_hold_ms: 60_000,
            monitors: NapMonitors::default(),
            machine: MachineNap::default(),
            system_sleep: false,
        }
    }
}

fn root_only() -> Vec<u32> {
    vec![0]
}

/// Activity monitors; each key given turns one on. Any one reporting activity keeps the
/// machine awake.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct NapMonitors {
    /// TCP: a connection (any state but LISTEN/TIME_WAIT/CLOSE) or a queued SYN/accept on
    /// these local ports. They are also the ports whose first SYN wakes a nap (eBPF).
    pub tcp_ports: Vec<u16>,
    /// UDP: datagrams queued on sockets bound to these ports; their first datagram wakes a nap.
    pub udp_ports: Vec<u16>,
    /// Processes by name (/proc/PID/comm): any one running keeps the machine awake — when
    /// its real uid is one of `process_uids`. A name is anyone's to choose; without the uid,
    /// any user could keep the machine out of its nap by naming a process so.
    pub processes: Vec<String>,
    /// Whose processes `processes` counts (real uid). Default: root's only.
    #[serde(default = "root_only")]
    pub process_uids: Vec<u32>,
    /// Whole-machine CPU busy percentage above which the machine is active.
    pub cpu_load_pct: Option<f64>,
    /// Any sectors read or written on a block device (/proc/diskstats, loop/ram excluded).
    pub block_io: bool,
    /// Terminal/console input: interrupts on /proc/interrupts lines whose name contains one
    /// of these (e.g. "i8042", "ttyS").
    pub console_irqs: Vec<String>,
    /// Packets received on this interface (/sys/class/net/IF/statistics/rx_packets).
    pub interface: Option<String>,
}

impl Default for NapMonitors {
    fn default() -> Self {
        NapMonitors {
            tcp_ports: Vec::new(),
            udp_ports: Vec::new(),
            processes: Vec::new(),
            process_uids: root_only(),
            cpu_load_pct: None,
            block_io: false,
            console_irqs: Vec::new(),
            interface: None,
        }
    }
}

impl NapMonitors {
    pub fn is_empty(&self) -> bool {
        self.tcp_ports.is_empty()
            && self.udp_ports.is_empty()
            && self.processes.is_empty()
            && self.cpu_load_pct.is_none()
            && !self.block_io
            && self.console_irqs.is_empty()
            && self.interface.is_none()
    }
}

/// Machine nap: fewer wake-ups while idle, all restored on wake.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MachineNap {
    /// CPUs taken offline while napping (never CPU 0). Onlining takes milliseconds: this is
    /// on the wake path after the thaw, so the first request is served on the CPUs left.
    pub cpus_offline: Vec<u32>,
    /// Cap every CPU's `scaling_max_freq` to its `cpuinfo_min_freq` where cpufreq exists.
    pub cpufreq_min: bool,
    /// sysfs device directories (`/sys/devices/...`) set to runtime-suspend (`power/control`
    /// = `auto`). The watched interface's device is refused.
    pub devices: Vec<String>,
}

impl MachineNap {
    pub fn is_empty(&self) -> bool {
        self.cpus_offline.is_empty() && !self.cpufreq_min && self.devices.is_empty()
    }
}

/// What `[nap]` holds that joule cannot use, as (key, message, hint); `classes` are the
/// `[[class]]` names of the file.
pub(super) fn problems(n: &NapConfig, classes: &[&str]) -> Vec<(String, String, String)> {
    let mut out = Vec::new();
    let mut bad = |key: &str, msg: String, hint: &str| out.push((key.to_string(), msg, hint.to_string()));
    if n.enabled {
        if n.monitors.is_empty() {
            bad("nap.monitors", "nap is enabled but no monitor is configured, so the machine would nap at once".into(), "e.g. tcp_ports = [80]");
        }
        if !(100..=86_400_000).contains(&n.idle_ms) {
            bad("nap.idle_ms", format!("idle_ms = {} is outside 100..=86400000", n.idle_ms), "a few periods at least; 5000 is the default");
        }
        if !(1_000..=3_600_000).contains(&n.job_hold_ms) {
            bad("nap.job_hold_ms", format!("job_hold_ms = {} is outside 1000..=3600000", n.job_hold_ms), "60000 is the default");
        }
        if !(10..=60_000).contains(&n.napping_period_ms) {
            bad("nap.napping_period_ms", format!("napping_period_ms = {} is outside 10..=60000", n.napping_period_ms), "2000 is the default");
        }
        if n.class.is_none() && n.machine.is_empty() && !n.system_sleep {
            bad("nap", "nap is enabled but does nothing (no class, no machine nap, no system sleep)".into(), "class = \"web\" freezes that [[class]]");
        }
    }
    if let Some(c) = &n.class {
        if !classes.contains(&c.as_str()) {
            bad("nap.class", format!("class {c:?} is not a [[class]] in this file"), "name an existing [[class]]");
        }
    }
    if let Some(p) = n.monitors.cpu_load_pct.filter(|p| !(p.is_finite() && *p > 0.0 && *p <= 100.0)) {
        bad("nap.monitors.cpu_load_pct", format!("cpu_load_pct = {p} is outside (0, 100]"), "e.g. 20.0");
    }
    if n.machine.cpus_offline.contains(&0) {
        bad("nap.machine.cpus_offline", "CPU 0 cannot be taken offline".into(), "list other CPUs");
    }
    for d in n.machine.devices.iter().filter(|d| !d.starts_with("/sys/devices/")) {
        bad("nap.machine.devices", format!("{d:?} is not a /sys/devices/... directory"), "the device's sysfs directory");
    }
    out
}

#[cfg(test)]
mod tests {
    use crate::config::Config;

    /// The nap freezes the class's own cgroup (the class mover's), so a class nap needs the
    /// classes applied.
    #[test]
    fn a_class_nap_needs_the_classes_applied() {
        let base = "[[class]]\nname = \"web\"\nmatch = { comm = [\"nginx\"] }\n[nap]\nenabled = true\nclass = \"web\"\nmonitors = { tcp_ports = [80] }\n";
        assert!(Config::parse(base).is_ok());
        let e = Config::parse(&format!("[agent]\napply_classes = false\n{base}")).unwrap_err()[0].message.clone();
        assert!(e.contains("nap.class") && e.contains("apply_classes = true"), "{e}");
    }
}
