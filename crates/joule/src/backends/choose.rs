//! Which way each of joule's mechanisms acts on a machine with these [`Facts`], and why: what
//! `joule doctor` tells an operator before anything is enabled and what the agent says at
//! start. The rows that the agent decides at start come from the agent's own decisions
//! ([`super::ebpf`], [`super::systemd_host`]'s [`Facts::systemd_owns_tree`], the sensors'
//! choice), so the report cannot drift from what the agent does.

use super::facts::Facts;
use joule_core::config::{Config, ThermalScheduler};
use joule_core::thermal_sensors;
use serde::Serialize;

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Choice {
    pub mechanism: &'static str,
    /// Short name of the way it acts (`cgroupfs v1`, `scx`, `model`, `none`, ...).
    pub backend: String,
    pub why: String,
    /// Something the operator should know before enabling it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub warning: Option<String>,
}

fn choice(mechanism: &'static str, backend: impl Into<String>, why: impl Into<String>) -> Choice {
    Choice { mechanism, backend: backend.into(), why: why.into(), warning: None }
}

/// One [`Choice`] per mechanism, in the order the docs list them.
pub fn choose(f: &Facts, cfg: &Config) -> Vec<Choice> {
    let cg = &f.cgroup;
    let systemd = f.systemd_owns_tree;
    let mut out = Vec::new();

    let tc = thermal_sensors::choose_on(&f.temperature_sensors, &cfg.thermal, f.board_limit.as_ref());
    let ignored: Vec<String> = tc.sensors.iter().filter(|s| !s.used).map(|s| format!("{} ({})", s.name, s.why)).collect();
    let ignored = if ignored.is_empty() { String::new() } else { format!("; ignored: {}", ignored.join(", ")) };
    let used: Vec<String> = tc.sensors.iter().filter(|s| s.used).map(|s| format!("{} ({})", s.name, s.kind)).collect();
    let sensor = if !used.is_empty() {
        choice("thermal sensor", "sensor", format!("the stage follows {}{ignored}", used.join(", ")))
    } else if cfg.thermal.act_on_model {
        Choice {
            warning: Some("act_on_model = true: the stage follows joule's RC model of utilisation, an estimate, not a measurement".into()),
            ..choice("thermal sensor", "model", format!("no CPU temperature sensor; the labelled model acts (act_on_model = true){ignored}"))
        }
    } else {
        choice(
            "thermal sensor",
            "none",
            format!("no CPU temperature sensor{ignored}: no thermal action here (the model is reported, not acted on; name a sensor in [thermal] zones, or set act_on_model = true)"),
        )
    };
    out.push(sensor);
    out.push(choice(
        "thermal thresholds",
        tc.thresholds_kind,
        format!(
            "stages at {:?} °C: {}; the limit they keep under is {} °C ({})",
            tc.thresholds_celsius,
            tc.thresholds_from,
            tc.limit_celsius,
            tc.limit_from.as_str().replace('_', " ")
        ),
    ));
    // What a root agent run without --no-bpf does here.
    out.push(match super::ebpf(cfg, false, true, f) {
        super::Ebpf::On => choice(
            "thermal stage",
            "ebpf",
            "BTF present: the stage is computed in the kernel (thermal tracepoint, or the agent's readings through the same map)",
        ),
        super::Ebpf::Off(off) => choice(
            "thermal stage",
            "user space",
            format!("eBPF is off ({}): the agent computes the stage itself; without eBPF: {}", off.explain(), crate::sense::WITHOUT_EBPF),
        ),
        super::Ebpf::Refused(why) => Choice {
            warning: Some(format!("the agent refuses to start here: {why}")),
            ..choice("thermal stage", "user space", format!("no kernel BTF at {}: joule's BPF programs cannot load", super::BTF_VMLINUX))
        },
    });
    let want_scx = cfg.thermal.scheduler == ThermalScheduler::Scx;
    out.push(match (&f.sched_ext, want_scx) {
        (Some(_), true) => choice("thermal scheduler", "scx", "the config asks for scheduler = \"scx\" and this kernel has sched_ext"),
        (None, true) => Choice {
            warning: Some("the config asks for scheduler = \"scx\" but this kernel has no sched_ext".into()),
            ..choice("thermal scheduler", "cgroup", "no sched_ext: best-effort classes get a CFS quota per stage")
        },
        (Some(_), false) => choice("thermal scheduler", "cgroup", "the config's scheduler = \"cgroup\" (sched_ext is available: scheduler = \"scx\")"),
        (None, false) => choice("thermal scheduler", "cgroup", "no sched_ext in this kernel: best-effort classes get a CFS quota per stage"),
    });
    out.push(match (f.sensors.rapl_zones, f.sensors.hwmon_power_inputs) {
        (0, 0) => choice("power", "model", "no RAPL zone and no hwmon power input: watts are a model, labelled `model`"),
        (r, h) => choice("power", "sensor", format!("{r} RAPL zone(s), {h} hwmon power input(s)")),
    });
    out.push(match (&f.sensors.cpufreq_driver, cfg.thermal.cpufreq_caps) {
        (Some(d), true) => choice("cpufreq caps", d.clone(), "cpu0's scaling_driver; stages cap scaling_max_freq (thermal.cpufreq_caps = true)"),
        (Some(d), false) => choice("cpufreq caps", "off", format!("thermal.cpufreq_caps = false (the default): stages cap no frequency (driver {d})")),
        (None, _) => choice("cpufreq caps", "none", "no cpufreq: stages skip frequency caps"),
    });

    let mut cpu = match cg.cpu_controller {
        Some("v1") => {
            choice("class CPU (quota, weight, cpuset)", "cgroupfs v1", "the cpu controller is bound to a v1 hierarchy; joule creates joule/<class> there")
        }
        Some(_) => choice("class CPU (quota, weight, cpuset)", "cgroupfs v2", "the unified hierarchy offers cpu; joule creates joule/<class> in it"),
        None => choice("class CPU (quota, weight, cpuset)", "none", "no hierarchy offers the cpu controller: classes with CPU knobs are refused"),
    };
    if systemd {
        cpu.backend = "systemd D-Bus".into();
        cpu.why = "classes set their units' CPUQuota/CPUWeight/AllowedCPUs through systemd (named units, or those a class's processes have to themselves); joule creates no cgroup".into();
        cpu.warning = Some(
            "systemd is PID 1 on a unified hierarchy and owns the tree (one writer per subtree): every class acts through units over systemd's D-Bus API, and joule moves no process: a class matched by comm, uid, exe, pid or cgroup gets only the units its processes have to themselves (docs/systemd.md)".into(),
        );
    }
    if cg.managers.contains(&"kubelet") {
        let w = "a kubelet owns kubepods: joule must not move or cap pods' processes";
        cpu.warning = Some(cpu.warning.map(|x| format!("{x}; {w}")).unwrap_or_else(|| w.into()));
    }
    out.push(cpu);
    out.push(if cg.rt_group_sched {
        choice("RT classes", "RT group scheduling", "the v1 cpu hierarchy has cpu.rt_runtime_us: per-class RT runtime/period")
    } else {
        choice(
            "RT classes",
            "SCHED_DEADLINE",
            "no RT group scheduling (cgroup v2, or a kernel without CONFIG_RT_GROUP_SCHED): each thread of an RT class gets a SCHED_DEADLINE reservation of its runtime/period; `joule qos plan` shows the arithmetic (docs/qos.md)",
        )
    });
    out.push(match cg.freezer {
        Some("v1") => choice("nap (freezer)", "cgroup v1 freezer", "a v1 freezer hierarchy is mounted"),
        Some(_) if systemd => choice(
            "nap (freezer)",
            "systemd FreezeUnit",
            "a nap class of units is frozen by systemd (FreezerState agrees; a job queued on it thaws it, since systemd refuses jobs on a frozen unit)",
        ),
        Some(_) => choice("nap (freezer)", "cgroup v2 cgroup.freeze", "the unified hierarchy's cgroups have cgroup.freeze"),
        None => choice("nap (freezer)", "none", "no v1 freezer and no v2 cgroup.freeze: a nap class cannot be frozen"),
    });
    out.push(match f.sched_rt_runtime_us {
        Some(-1) => choice("elevate", "SCHED_FIFO", "kernel.sched_rt_runtime_us = -1: no RT throttling"),
        Some(us) => choice("elevate", "SCHED_FIFO", format!("kernel.sched_rt_runtime_us = {us}: RT tasks get at most that per second")),
        None => choice("elevate", "SCHED_FIFO", "kernel.sched_rt_runtime_us unreadable"),
    });
    out.push(if f.bpffs_mounted {
        choice("bpffs", "mounted", "/sys/fs/bpf is a bpf filesystem: the agent pins its maps there")
    } else {
        choice("bpffs", "mounted by joule when needed", "/sys/fs/bpf is not mounted; the agent mounts it, journals the mount and unmounts it on exit")
    });
    out
}
