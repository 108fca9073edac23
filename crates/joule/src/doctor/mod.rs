//! `joule doctor`: what this machine offers joule (the kernel, the cgroup tree and who owns it,
//! sensors, pseudo filesystems, /proc's policy) and which way each mechanism will act here,
//! so an operator knows before enabling anything. Reads only; changes nothing. What it reads
//! names things others chose (processes, units, sensors, cgroups), so its report is printed
//! with their control characters escaped.

mod coexist;

pub use crate::backends::{choose, energy, Choice, Facts, Roots};

use std::path::PathBuf;

/// Show what this machine offers joule and which backend each mechanism will use.
///
/// Reads the architecture and the kernel's offer (BTF, sched_ext, RT group scheduling,
/// kernel.sched_rt_runtime_us, cpu.idle and EEVDF slices by release), the cgroup layout and who
/// else manages it (systemd as PID 1, a kubelet), the sensors (thermal zones, hwmon, RAPL), the
/// cpufreq policies and the kernel's energy model, bpffs and /proc's hidepid, and who else
/// writes joule's knobs (tuned, power-profiles-daemon, thermald, TLP, cpupower, sched_ext
/// schedulers, irqbalance, a kubelet's CPU manager), from processes, enabled units and configs.
/// Changes nothing; needs no root (some files are root-only: run it as root to see everything).
///
/// Examples:
///   joule doctor
///   joule doctor --json | jq '.backends[] | select(.warning)'
///   joule doctor --config ./joule.toml
///
/// Without --config it reads /etc/joule/joule.toml when it exists, else joule's built-in
/// defaults; the report's first line says which.
#[derive(clap::Args, Debug)]
#[command(verbatim_doc_comment)]
pub struct DoctorArgs {
    #[command(flatten)]
    pub config: crate::ConfigArg,
    /// Print one JSON document (`config`, `facts`, `backends` and `coexistence`) instead of the
    /// table.
    #[arg(long)]
    pub json: bool,
    /// Where sysfs is (a fixture tree in tests). Default: the config's `telemetry.sysfs_root`,
    /// as the agent reads it (and `procfs_root`, `cgroup_root`, `thermal_root` likewise).
    #[arg(long, hide = true)]
    pub sysfs_root: Option<PathBuf>,
    #[arg(long, hide = true)]
    pub procfs_root: Option<PathBuf>,
    #[arg(long, hide = true)]
    pub cgroup_root: Option<PathBuf>,
    #[arg(long, default_value = "/etc", hide = true)]
    pub etc_root: PathBuf,
    #[arg(long, default_value = "/var/lib", hide = true)]
    pub var_lib_root: PathBuf,
}

pub fn run(a: &DoctorArgs) -> anyhow::Result<()> {
    let mut cfg = a.config.load()?;
    // A root given here stands for the config's: the agent would read the same tree.
    let t = &mut cfg.telemetry;
    for (flag, root) in [(&a.sysfs_root, &mut t.sysfs_root), (&a.procfs_root, &mut t.procfs_root), (&a.cgroup_root, &mut t.cgroup_root)] {
        if let Some(p) = flag {
            p.clone_into(root);
        }
    }
    let roots = Roots::of(&cfg.telemetry);
    let (facts, mut backends) = predict(&cfg, &roots);
    let others = coexist::Roots { sys: roots.sys.clone(), proc: roots.proc.clone(), etc: a.etc_root.clone(), var_lib: a.var_lib_root.clone() };
    let coexistence = coexist::read(&others, &facts, &cfg, &backends);
    coexistence.warn(&mut backends);
    let config = a.config.describe();
    if a.json {
        let doc = serde_json::json!({ "config": config, "facts": facts, "backends": backends, "coexistence": coexistence.rows });
        println!("{}", joule_core::text::to_json(&doc, true)?);
    } else {
        let text = format!("config: {config}\n\n{}{}", render(&facts, &backends), coexistence.render());
        print!("{}", joule_core::text::escape_lines(&text));
    }
    Ok(())
}

/// The machine under `roots` and the backends the agent would take there with `cfg`: the
/// agent's own choice ([`crate::backends`]), run as root without --no-bpf.
pub fn predict(cfg: &joule_core::config::Config, roots: &Roots) -> (Facts, Vec<Choice>) {
    let facts = Facts::read(roots);
    let chosen = choose(&facts, cfg);
    (facts, chosen)
}

fn yes(b: bool) -> &'static str {
    if b {
        "yes"
    } else {
        "no"
    }
}

fn maybe(b: Option<bool>) -> &'static str {
    b.map(yes).unwrap_or("?")
}

/// The human-readable report.
pub fn render(f: &Facts, backends: &[Choice]) -> String {
    let cg = &f.cgroup;
    let or_none = |o: Option<&str>| o.unwrap_or("none").to_string();
    let mut s = String::from("this machine\n");
    let rows = [
        ("architecture", f.architecture.clone()),
        ("kernel", f.kernel_release.clone().unwrap_or_else(|| "?".into())),
        ("init (PID 1)", f.init.clone().unwrap_or_else(|| "?".into())),
        ("BTF", yes(f.btf).into()),
        ("sched_ext", f.sched_ext.clone().unwrap_or_else(|| "absent".into())),
        ("cpu.idle / EEVDF slices", format!("{} / {}", maybe(f.cpu_idle), maybe(f.eevdf_slice))),
        ("cgroup layout", cg.layout.into()),
        ("cgroup managers", if cg.managers.is_empty() { "none known".into() } else { cg.managers.join(", ") }),
        ("cpu / cpuset controller", format!("{} / {}", or_none(cg.cpu_controller), or_none(cg.cpuset_controller))),
        ("v2 controllers", if cg.v2_controllers.is_empty() { "none".into() } else { cg.v2_controllers.join(" ") }),
        ("RT group scheduling", yes(cg.rt_group_sched).into()),
        ("sched_rt_runtime_us", f.sched_rt_runtime_us.map(|v| v.to_string()).unwrap_or_else(|| "?".into())),
        ("thermal zones", if f.sensors.thermal_zones.is_empty() { "none".into() } else { f.sensors.thermal_zones.join(", ") }),
        ("hwmon temp / power inputs", format!("{} / {}", f.sensors.hwmon_temp_inputs, f.sensors.hwmon_power_inputs)),
        ("RAPL zones", f.sensors.rapl_zones.to_string()),
        ("cpufreq driver", f.sensors.cpufreq_driver.clone().unwrap_or_else(|| "none".into())),
        ("cpufreq policies", energy::policies_row(&f.cpufreq_policies)),
        ("energy model", energy::model_row(&f.energy_model)),
        ("bpffs / tracefs mounted", format!("{} / {}", yes(f.bpffs_mounted), yes(f.tracefs_mounted))),
        ("/proc hidepid", yes(f.proc_hidepid).into()),
    ];
    for (k, v) in rows {
        s += &format!("  {k:<26} {v}\n");
    }
    s += "\nwhat joule will use\n";
    for b in backends {
        s += &format!("  {:<34} {:<26} {}\n", b.mechanism, b.backend, b.why);
        if let Some(w) = &b.warning {
            s += &format!("  {:<34} warning: {w}\n", "");
        }
    }
    s
}

#[cfg(test)]
mod tests;
