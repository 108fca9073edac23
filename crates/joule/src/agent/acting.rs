//! The agent's acting half, wired: one actuator per kernel resource (joule-act), each the only
//! writer of its knobs, in the order they start (the reverse of the order they stop), and the
//! class places the membership reading needs. Building them checks the config (admission
//! control for the classes), so a refused config stops the agent before anything changes.

use crate::backends::{cgroupfs_classes, nap_refusal, qos_opts, systemd_host, unit_classes_of};
use anyhow::Context;
use joule_act::cgroup_cpu::{CgroupCpuActuator, CpuBackend, WithUnits};
use joule_act::cpufreq::CpufreqActuator;
use joule_act::freezer::{CgroupfsFreezer, FreezerActuator, FreezerBackend, SystemdFreezer};
use joule_act::nap::NapActuator;
use joule_act::pod_cpu::{PodCaps, WithPods};
use joule_act::scx::ScxActuator;
use joule_act::task_sched::TaskSchedActuator;
use joule_act::tc::TcActuator;
use joule_core::config::{Config, ThermalScheduler};
use joule_core::control::Actuator;
use joule_core::effects::{Effects, RealEffects};
use joule_core::membership::ClassPlace;
use joule_core::nap::NapCounters;
use joule_qos::{QosController, UnitClasses};
use std::path::PathBuf;
use std::sync::Arc;

/// The class cgroups' controller, when joule applies the classes (root, `apply_classes`):
/// admission runs here. The hierarchies every class also lives in follow what acts on classes:
/// the v1 freezer when a nap freezes one, the v2 hierarchy beside v1 ones when a class's
/// traffic is limited or placed (its sockets carry its v2 cgroup id).
pub fn class_controller(cfg: &Config, root: bool) -> anyhow::Result<Option<QosController>> {
    if cfg.classes.is_empty() || !cfg.agent.apply_classes {
        return Ok(None);
    }
    if !root {
        tracing::warn!("not root: {} class(es) in the config are not applied", cfg.classes.len());
        return Ok(None);
    }
    let fs_classes = cgroupfs_classes(cfg);
    if fs_classes.is_empty() {
        return Ok(None);
    }
    Ok(Some(QosController::new(&fs_classes, qos_opts(cfg)).map_err(crate::UsageError::from_display)?))
}

/// The pod classes (`match.pod`): acted on in their pods' own cgroups (joule-act's
/// `pod_cpu`), never given a cgroup of joule's or a unit.
pub fn pod_classes(cfg: &Config) -> Vec<String> {
    cfg.classes.iter().filter(|c| !c.matches.pod.is_empty()).map(|c| c.name.clone()).collect()
}

/// The capping pod classes (thermal best-effort, rules on what the runtime says), in config
/// order: a pod the runtime has not named is held by the first whose rules could be its.
pub fn unnamed_holders(cfg: &Config) -> Vec<(String, joule_core::config::PodRules)> {
    cfg.classes
        .iter()
        .filter(|c| c.thermal == joule_core::config::ThermalRole::BestEffort && c.matches.pod.needs_runtime())
        .map(|c| (c.name.clone(), c.matches.pod.clone()))
        .collect()
}

/// The classes that are systemd units (`match = { unit = [...] }` and nothing else), acted on
/// through systemd's D-Bus API (docs/systemd.md); None when there are none.
pub fn unit_classes(cfg: &Config, root: bool) -> anyhow::Result<Option<UnitClasses>> {
    if !cfg.agent.apply_classes || !root {
        return Ok(None);
    }
    let ncpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let env = joule_qos::controller::units_env(&qos_opts(cfg), ncpus, &joule_core::effects::RealEffects);
    let u = unit_classes_of(cfg, &env).map_err(crate::UsageError::from_display)?;
    Ok((!u.is_empty()).then_some(u))
}

/// What the actuators are built from besides the config.
pub struct Inputs {
    pub root: bool,
    pub ctl: Option<QosController>,
    /// The classes that are systemd units.
    pub units: Option<UnitClasses>,
    pub places: Vec<ClassPlace>,
    pub stage_map: Option<PathBuf>,
    /// Whether eBPF may be loaded (the nap's fast wake).
    pub bpf: bool,
    pub nap_counters: Arc<NapCounters>,
}

/// The actuators, in the order they start. The class cgroups come first (everything else acts
/// on classes that live there); the freezer and cpufreq owners before the nap, which acts
/// through them (and stops before them).
pub fn actuators(cfg: &Config, i: Inputs) -> anyhow::Result<Vec<Box<dyn Actuator>>> {
    let fx: Arc<dyn Effects + Send + Sync> = Arc::new(RealEffects);
    let root = i.root;
    let mut a: Vec<Box<dyn Actuator>> = Vec::new();
    let cpu: Option<Box<dyn CpuBackend>> = match (i.units, i.ctl) {
        (Some(units), ctl) => Some(Box::new(WithUnits { units, fs: ctl.map(|c| Box::new(c) as Box<dyn CpuBackend>) })),
        (None, Some(ctl)) => Some(Box::new(ctl)),
        (None, None) => None,
    };
    let pods = pod_classes(cfg);
    let cpu = match (root && cfg.agent.apply_classes && !pods.is_empty(), cpu) {
        (true, inner) => {
            let hier = PodCaps::detect(&cfg.telemetry.cgroup_root, fx.as_ref()).ok_or_else(|| {
                anyhow::anyhow!("pod classes {} need a cgroup cpu controller (v1 or v2) under {}", pods.join(", "), cfg.telemetry.cgroup_root.display())
            })?;
            let ncpus = std::thread::available_parallelism().map_or(1, |n| n.get());
            let cpuacct = PodCaps::detect_cpuacct(&cfg.telemetry.cgroup_root, fx.as_ref());
            let caps = PodCaps::new(pods, hier, ncpus).with_cpuacct(cpuacct).holding_unnamed(unnamed_holders(cfg));
            Some(Box::new(WithPods { pods: caps, inner }) as Box<dyn CpuBackend>)
        }
        (false, cpu) => cpu,
    };
    if let Some(cpu) = cpu {
        a.push(Box::new(CgroupCpuActuator::new(cpu)));
    }
    let mut freezing = None;
    // A napped class of systemd units is frozen by systemd (FreezeUnit), and a job queued on
    // one of its units wakes the nap (docs/systemd.md).
    // A napped slice's services get gate units, so a job on one runs during the nap.
    let mut unit_jobs = None;
    if let (true, true, Some(class)) = (cfg.nap.enabled, root, &cfg.nap.class) {
        if let Some(why) = nap_refusal(cfg) {
            return Err(crate::UsageError(why).into());
        }
        let backend: Box<dyn FreezerBackend> = match cfg.classes.iter().find(|c| &c.name == class && c.matches.only_units()) {
            Some(c) => {
                let units: Vec<String> = c.matches.units().map(String::from).collect();
                if let Some(s) = units.iter().find(|u| u.ends_with(".service")) {
                    tracing::warn!(
                        "nap class {class} names {s}: systemd 257 refuses an operator's first reload, restart or stop of a frozen service (joule thaws it, the retry works); put the service in a slice of its own and nap the slice, whose services get gates (docs/systemd.md)"
                    );
                }
                let mut f = SystemdFreezer::new(fx.clone(), [(class.clone(), units)].into());
                if systemd_host(cfg) {
                    let exe = std::env::current_exe().context("the agent's own path (the gates of a napped slice run it)")?;
                    // A binary replaced since the agent started reads "PATH (deleted)": the
                    // gates run what is at PATH now.
                    let exe = exe.to_str().and_then(|p| p.strip_suffix(" (deleted)")).map_or(exe.clone(), std::path::PathBuf::from);
                    f = f.with_gates(cfg.telemetry.cgroup_root.clone(), exe);
                }
                unit_jobs = Some(f.jobs());
                Box::new(f)
            }
            None => Box::new(CgroupfsFreezer::new(fx.clone(), i.places.clone())),
        };
        let f = FreezerActuator::new(backend, fx.clone(), vec![class.clone()]);
        freezing = Some(f.handle());
        a.push(Box::new(f));
    }
    // The thermal stage's and placement's frequency caps, and the nap's (a note, and nothing
    // else, where cpufreq is missing). Knobs of an actuator that is not here reach no one.
    let cpufreq = CpufreqActuator::new(cfg.telemetry.sysfs_root.join("devices/system/cpu"), fx.clone());
    let freq_requests = cpufreq.requests();
    if root {
        a.push(Box::new(cpufreq));
    }
    let placing = cfg.energy.enabled && !cfg.energy.targets.is_empty();
    let slicing = cfg.agent.apply_classes && cfg.classes.iter().any(|c| c.slice_us().is_some());
    if placing || slicing || cfg.elevate.enabled() {
        if root {
            a.push(Box::new(TaskSchedActuator::new()));
        } else {
            tracing::warn!("not root: [energy] placement, classes' latency slices and [elevate] decisions are published but not applied");
        }
    }
    if cfg.thermal.scheduler == ThermalScheduler::Scx {
        if root {
            a.push(Box::new(ScxActuator::new(cfg, i.stage_map)));
        } else {
            tracing::warn!("not root: thermal.scheduler = \"scx\" needs root to load the scheduler; the cgroup path acts");
        }
    }
    if cfg.nap.enabled {
        anyhow::ensure!(root, "[nap] freezes cgroups and loads eBPF, which needs root");
        a.push(Box::new({
            let nap = NapActuator::new(cfg, i.bpf, i.nap_counters.clone(), freezing, freq_requests);
            match unit_jobs {
                Some(jobs) => nap.with_unit_jobs(jobs),
                None => nap,
            }
        }));
    }
    let placed_traffic = placing && cfg.energy.targets.iter().any(|t| t.interface.is_some());
    if !cfg.net.limits.is_empty() || placed_traffic {
        if root {
            a.push(Box::new(TcActuator::new(cfg.net.netns().map(Into::into))));
        } else {
            tracing::warn!("not root: traffic limits ([[net.limit]], placement's bandwidth) are not applied");
        }
    }
    Ok(a)
}
