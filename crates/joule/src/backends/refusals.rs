//! What the agent refuses on this machine once its config parsed, and the class placement
//! those refusals follow (which classes act through systemd units, which get joule's
//! cgroups): the agent stops on these before it changes anything, `joule check-config`
//! prints them with their lines and `joule qos` refuses with them, so all give one verdict.

use joule_core::cgroupfs::Hier;
use joule_core::config::Config;
use joule_core::effects::RealEffects;
use joule_qos::{QosController, QosOpts, UnitClasses};

/// Whether systemd owns this machine's cgroup tree (PID 1 systemd, pure cgroup v2, under the
/// config's roots): then every class acts through units and joule makes no cgroup.
pub fn systemd_host(cfg: &Config) -> bool {
    super::facts::systemd_owns_tree(&super::Roots::of(&cfg.telemetry))
}

/// What `joule qos plan/apply/status` refuse on a host whose cgroup tree systemd owns: a class
/// they would make cgroups for and move processes into, which takes them out of their units
/// (`Tasks: 0`, systemd's stop and freeze miss them). The agent acts on such a class through
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
pub(crate) fn cgroupfs_classes(cfg: &Config) -> Vec<joule_core::config::ClassConfig> {
    if systemd_host(cfg) {
        return Vec::new();
    }
    cfg.classes.iter().filter(|c| !c.matches.only_units() && c.matches.pod.is_empty()).cloned().collect()
}

/// The classes that act through units: all of them where systemd owns the tree, else those
/// that name units.
pub fn unit_classes_of(cfg: &Config, env: &joule_qos::AdmissionEnv) -> Result<UnitClasses, joule_qos::QosError> {
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
/// before it touches anything, so both give one verdict.
pub fn refusals(cfg: &Config) -> Vec<(String, String)> {
    let mut out = admission_refusals(cfg);
    if cfg.energy.enabled {
        if let Err(e) = cfg.energy.load_model(&cfg.telemetry, &RealEffects) {
            out.push(("energy".to_string(), format!("the [energy] model cannot be loaded: {e}")));
        }
    }
    let btf = &cfg.telemetry.btf_path;
    if !btf.as_os_str().is_empty() && cfg.telemetry.bpf != joule_core::config::BpfMode::Off && !btf.is_file() {
        out.push(("telemetry.btf_path".to_string(), format!("btf_path = {:?} is not a file here", btf.display().to_string())));
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

#[cfg(test)]
mod tests {
    use super::*;
    use joule_core::config::Config;
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
