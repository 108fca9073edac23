//! The agent's acting half, wired: one actuator per kernel resource (joule-act), each the only
//! writer of its knobs, in the order they start (the reverse of the order they stop), and the
//! class places the membership reading needs. Building them checks the config (admission
//! control for the classes), so a refused config stops the agent before anything changes.

use anyhow::Context;
use joule_act::cgroup_cpu::{CgroupCpuActuator, CpuBackend, WithUnits};
use joule_act::cpufreq::CpufreqActuator;
use joule_act::freezer::{CgroupfsFreezer, FreezerActuator, FreezerBackend, SystemdFreezer};
use joule_act::nap::NapActuator;
use joule_act::pod_cpu::{PodCaps, WithPods};
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

/// Whether systemd owns this machine's cgroup tree (PID 1 systemd, pure cgroup v2, under the
/// config's roots): then every class acts through units and joule makes no cgroup.
pub fn systemd_host(cfg: &Config) -> bool {
    let t = &cfg.telemetry;
    joule_core::cgroupfs::systemd_owns_tree(&t.procfs_root, &t.cgroup_root, &RealEffects)
}

/// What `joule qos plan/apply/status` refuse on a host whose cgroup tree systemd owns: a class
/// they would make cgroups for and move processes into, which takes them out of their units (issue 20:
/// `Tasks: 0`, systemd's stop and freeze miss them). The agent acts on such a class through
/// its processes' units instead. None elsewhere.
pub fn systemd_refusal(cfg: &Config) -> Option<String> {
    let moved: Vec<&str> = cfg.classes.iter().filter(|c| !c.matches.only_units()).map(|c| c.name.as_str()).collect();
    if moved.is_empty() || !systemd_host(cfg) {
        return None;
    }
    Some(format!(
        "systemd owns the cgroup tree here (PID 1, pure cgroup v2): `joule qos` plans joule/<class> cgroups for class(es) {} and would move their processes out of their units; the agent acts on them through their units instead (docs/systemd.md)",
        moved.join(", ")
    ))
}

/// The classes joule makes cgroups for: all but those that are systemd units; none on a host
/// whose tree systemd owns (every class acts through units there).
fn cgroupfs_classes(cfg: &Config) -> Vec<joule_core::config::ClassConfig> {
    if systemd_host(cfg) {
        return Vec::new();
    }
    cfg.classes.iter().filter(|c| !c.matches.only_units() && c.matches.pod.is_empty()).cloned().collect()
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

/// The classes that act through units: all of them where systemd owns the tree, else those
/// that name units.
fn unit_classes_of(cfg: &Config, env: &joule_qos::AdmissionEnv) -> Result<UnitClasses, joule_qos::QosError> {
    if systemd_host(cfg) {
        let not_pods: Vec<_> = cfg.classes.iter().filter(|c| c.matches.pod.is_empty()).cloned().collect();
        UnitClasses::for_systemd(&not_pods, env, &cfg.telemetry.cgroup_root)
    } else {
        UnitClasses::new(&cfg.classes, env)
    }
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
    let ncpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let env = joule_qos::controller::units_env(&opts, ncpus, &RealEffects);
    let mut out: Vec<(String, String)> = match unit_classes_of(cfg, &env) {
        Ok(u) if cfg.elevate.enabled() && u.has_deadline(&cfg.elevate.class) => vec![elevate_refusal(cfg)],
        Ok(_) => Vec::new(),
        Err(e) => vec![("class".to_string(), e.to_string())],
    };
    if let Some(why) = nap_refusal(cfg) {
        out.push(("nap.class".to_string(), why));
    }
    let fs_classes = cgroupfs_classes(cfg);
    if fs_classes.is_empty() {
        return out;
    }
    out.extend(match QosController::new_with(&fs_classes, opts, &RealEffects) {
        Ok(ctl) => {
            let mut r: Vec<(String, String)> = ctl
                .plan()
                .refusals
                .iter()
                .map(|r| (r.classes.first().map_or("class".to_string(), |c| key_of(c)), format!("admission on this machine: {}", r.message)))
                .collect();
            if cfg.elevate.enabled() && ctl.plan().class(&cfg.elevate.class).is_some_and(|c| c.dl.is_some()) {
                r.push(elevate_refusal(cfg));
            }
            r
        }
        Err(e) => vec![("class".to_string(), format!("the class cgroups cannot be made on this machine: {e}"))],
    });
    out
}

/// One writer per thread: the user-space scheduler runs its class's threads under SCHED_FIFO
/// on one core, so that class cannot also hold SCHED_DEADLINE reservations (which must span
/// the root domain).
fn elevate_refusal(cfg: &Config) -> (String, String) {
    (
        "elevate.class".to_string(),
        format!(
            "class {}: its RT runtime becomes SCHED_DEADLINE reservations on this kernel, and [elevate] runs the same threads under SCHED_FIFO on CPU {}: one writer per thread — drop rt_runtime_us from the class, or elevate another class",
            cfg.elevate.class, cfg.elevate.cpu
        ),
    )
}

/// On a host whose tree systemd owns, a nap class must name its units: systemd freezes units
/// (`FreezeUnit`), and a class matched by processes may span shared units.
pub fn nap_refusal(cfg: &Config) -> Option<String> {
    let class = cfg.nap.class.as_ref().filter(|_| cfg.nap.enabled)?;
    let c = cfg.classes.iter().find(|c| &c.name == class)?;
    (!c.matches.only_units() && systemd_host(cfg)).then(|| {
        format!("systemd owns the cgroup tree here: nap freezes units through systemd, so nap.class {class:?} must be a class that names its units (match = {{ unit = [...] }})")
    })
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

#[cfg(test)]
mod tests {
    use super::*;
    use joule_core::config::{ClassConfig, MatchRules};

    #[test]
    fn on_a_systemd_owned_tree_every_class_acts_through_units_and_qos_apply_and_a_process_nap_class_are_refused() {
        let t = tempfile::tempdir().unwrap();
        let (proc, cg) = (t.path().join("proc"), t.path().join("cg"));
        std::fs::create_dir_all(proc.join("1")).unwrap();
        std::fs::create_dir_all(&cg).unwrap();
        std::fs::write(proc.join("1/comm"), "systemd\n").unwrap();
        std::fs::write(cg.join("cgroup.controllers"), "cpuset cpu io memory pids\n").unwrap();
        let mut cfg = Config::default();
        cfg.telemetry.procfs_root = proc.clone();
        cfg.telemetry.cgroup_root = cg;
        let unit = MatchRules { unit: vec!["nginx.service".into()], ..Default::default() };
        cfg.classes.push(ClassConfig { name: "web".into(), matches: unit, quota_us: Some(30_000), ..Default::default() });
        assert_eq!(systemd_refusal(&cfg), None, "a class of units moves nothing");
        let by_name = MatchRules { comm: vec!["nginx".into()], uid: vec![0, 33], ..Default::default() };
        cfg.classes.push(ClassConfig { name: "by-name".into(), matches: by_name, quota_us: Some(30_000), ..Default::default() });
        assert!(cgroupfs_classes(&cfg).is_empty(), "joule makes no cgroup here");
        assert_eq!(unit_classes_of(&cfg, &joule_qos::AdmissionEnv::new(2)).unwrap().class_names(), ["web", "by-name"]);
        assert!(refusals(&cfg).is_empty(), "{:?}", refusals(&cfg));
        let why = systemd_refusal(&cfg).expect("joule qos is refused");
        assert!(why.contains("by-name") && !why.contains("web,"), "{why}");
        cfg.nap.enabled = true;
        cfg.nap.class = Some("by-name".into());
        assert!(nap_refusal(&cfg).is_some_and(|w| w.contains("by-name")));
        assert!(refusals(&cfg).iter().any(|(k, _)| k == "nap.class"));
        cfg.nap.class = Some("web".into());
        assert_eq!(nap_refusal(&cfg), None);
        // An RT class of units holds SCHED_DEADLINE reservations: not also elevate's.
        let rt = MatchRules { unit: vec!["rt.service".into()], ..Default::default() };
        cfg.classes.push(ClassConfig { name: "rt".into(), matches: rt, rt_runtime_us: Some(30_000), ..Default::default() });
        assert!(refusals(&cfg).is_empty(), "{:?}", refusals(&cfg));
        cfg.elevate.class = "rt".into();
        let r = refusals(&cfg);
        assert!(r.iter().any(|(k, m)| k == "elevate.class" && m.contains("one writer per thread")), "{r:?}");
        cfg.elevate.class.clear();
        cfg.classes.pop();
        // PID 1 is not systemd: joule owns its joule/ trees as before.
        std::fs::write(proc.join("1/comm"), "init\n").unwrap();
        assert_eq!(systemd_refusal(&cfg), None);
        assert_eq!(cgroupfs_classes(&cfg).len(), 1);
    }
}
