//! The agent's acting half, wired: one actuator per kernel resource (joule-act), each the only
//! writer of its knobs, in the order they start (the reverse of the order they stop), and the
//! class places the membership reading needs. Building them checks the config (admission
//! control for the classes), so a refused config stops the agent before anything changes.

use joule_act::cgroup_cpu::{CgroupCpuActuator, CpuBackend, WithUnits};
use joule_act::cpufreq::CpufreqActuator;
use joule_act::freezer::{CgroupfsFreezer, FreezerActuator};
use joule_act::nap::NapActuator;
use joule_act::scx::ScxActuator;
use joule_act::task_sched::TaskSchedActuator;
use joule_act::tc::TcActuator;
use joule_core::cgroupfs::Hier;
use joule_core::config::{Config, ThermalScheduler};
use joule_core::control::Actuator;
use joule_core::effects::{Effects, RealEffects};
use joule_core::membership::ClassPlace;
use joule_core::nap::NapCounters;
use joule_qos::{QosController, QosOpts, UnitClasses};
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

/// The classes joule makes cgroups for: all but those that are systemd units.
fn cgroupfs_classes(cfg: &Config) -> Vec<joule_core::config::ClassConfig> {
    cfg.classes.iter().filter(|c| !c.matches.only_units()).cloned().collect()
}

/// The classes that are systemd units (`match = { unit = [...] }` and nothing else), acted on
/// through systemd's D-Bus API (docs/systemd.md); None when there are none.
pub fn unit_classes(cfg: &Config, root: bool) -> anyhow::Result<Option<UnitClasses>> {
    if !cfg.agent.apply_classes || !root {
        return Ok(None);
    }
    let ncpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let u = UnitClasses::new(&cfg.classes, ncpus).map_err(crate::UsageError::from_display)?;
    Ok((!u.is_empty()).then_some(u))
}

/// The class controller's options from the config: the agent's, and `joule check-config`'s,
/// which runs the same admission on this machine so both give one verdict.
pub fn qos_opts(cfg: &Config) -> QosOpts {
    let mut also_in = Vec::new();
    if cfg.nap.enabled && cfg.nap.class.is_some() {
        also_in.push(Hier::Freezer);
    }
    let class_traffic = cfg.net.limits.iter().any(|l| l.class.is_some()) || cfg.energy.enabled && cfg.energy.targets.iter().any(|t| t.bandwidth_mbit.is_some());
    if class_traffic {
        also_in.push(Hier::Unified);
    }
    let t = &cfg.telemetry;
    QosOpts { cgroup_root: t.cgroup_root.clone(), procfs_root: t.procfs_root.clone(), also_in, ..QosOpts::default() }
}

/// Everything the agent would refuse on this machine after the config parsed, as (config
/// key, message): the class admission, the `[energy]` model it would load, the endpoint's
/// web config. `joule check-config` prints these with their lines and the agent stops on them
/// before it touches anything, so both give one verdict (issue 17).
pub fn refusals(cfg: &Config) -> Vec<(String, String)> {
    let mut out = admission_refusals(cfg);
    if cfg.energy.enabled {
        if let Err(e) = cfg.energy.load_model(&cfg.telemetry, &RealEffects) {
            out.push(("energy".to_string(), format!("the [energy] model cannot be loaded: {e}")));
        }
    }
    let web = &cfg.agent.metrics_web_config;
    if !web.as_os_str().is_empty() {
        if let Err(e) = crate::webconfig::WebConfig::load(web) {
            out.push(("agent.metrics_web_config".to_string(), format!("{e:#}")));
        }
    }
    out
}

/// What the class admission refuses on this machine: the class controller with the agent's
/// options plans without writing anything. Empty when the config applies no classes.
fn admission_refusals(cfg: &Config) -> Vec<(String, String)> {
    if cfg.classes.is_empty() || !cfg.agent.apply_classes {
        return Vec::new();
    }
    let opts = QosOpts { enforce_admission: false, ..qos_opts(cfg) };
    let key_of = |class: &str| cfg.classes.iter().position(|c| c.name == class).map_or("class".to_string(), |i| format!("class[{i}]"));
    let mut out: Vec<(String, String)> = match UnitClasses::new(&cfg.classes, 1) {
        Ok(_) => Vec::new(),
        Err(e) => vec![("class".to_string(), e.to_string())],
    };
    let fs_classes = cgroupfs_classes(cfg);
    if fs_classes.is_empty() {
        return out;
    }
    out.extend(match QosController::new_with(&fs_classes, opts, &RealEffects) {
        Ok(ctl) => ctl
            .plan()
            .refusals
            .iter()
            .map(|r| (r.classes.first().map_or("class".to_string(), |c| key_of(c)), format!("admission on this machine: {}", r.message)))
            .collect(),
        Err(e) => vec![("class".to_string(), format!("the class cgroups cannot be made on this machine: {e}"))],
    });
    out
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
    match (i.units, i.ctl) {
        (Some(units), ctl) => a.push(Box::new(CgroupCpuActuator::new(Box::new(WithUnits { units, fs: ctl.map(|c| Box::new(c) as Box<dyn CpuBackend>) })))),
        (None, Some(ctl)) => a.push(Box::new(CgroupCpuActuator::new(Box::new(ctl)))),
        (None, None) => {}
    }
    let mut freezing = None;
    if let (true, true, Some(class)) = (cfg.nap.enabled, root, &cfg.nap.class) {
        let f = FreezerActuator::new(Box::new(CgroupfsFreezer::new(fx.clone(), i.places.clone())), fx.clone(), vec![class.clone()]);
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
        a.push(Box::new(NapActuator::new(cfg, i.bpf, i.nap_counters.clone(), freezing, freq_requests)));
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
