//! Who else manages joule's knobs, on fixture trees: tuned, power-profiles-daemon and thermald
//! named per knob; a loaded sched_ext scheduler; TLP, cpupower and sysctl.d from their configs;
//! a kubelet's static CPU manager; and a machine with none of them.

use super::*;
use crate::backends::{choose, Facts, Roots as FactRoots};
use joule_core::config::{ClassConfig, Config, StageActions, ThermalScheduler};
use std::path::Path;

fn put(root: &Path, rel: &str, text: &str) {
    let p = root.join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, text).unwrap();
}

fn roots(t: &Path) -> Roots {
    Roots { sys: t.join("sys"), proc: t.join("proc"), etc: t.join("etc"), var_lib: t.join("var/lib") }
}

fn process(t: &Path, pid: u32, comm: &str, argv: &[&str]) {
    put(t, &format!("proc/{pid}/comm"), &format!("{comm}\n"));
    put(t, &format!("proc/{pid}/cmdline"), &argv.iter().map(|a| format!("{a}\0")).collect::<String>());
}

/// The section for the machine at `t`, with `cfg`, and the backends it warns on.
fn doctor(t: &Path, cfg: &Config) -> (Coexistence, Vec<Choice>) {
    let f = Facts::read(&FactRoots::under(t));
    let mut b = choose(&f, cfg);
    let c = read(&roots(t), &f, cfg, &b);
    c.warn(&mut b);
    (c, b)
}

fn tools<'a>(c: &'a Coexistence, knob: &str) -> Vec<&'a str> {
    c.rows.iter().find(|r| r.knob == knob).unwrap().others.iter().map(|o| o.tool.as_str()).collect()
}

fn other<'a>(c: &'a Coexistence, knob: &str, tool: &str) -> &'a Other {
    c.rows.iter().find(|r| r.knob == knob).unwrap().others.iter().find(|o| o.tool == tool).unwrap_or_else(|| panic!("no {tool} in {knob}: {c:?}"))
}

fn warning<'a>(b: &'a [Choice], prefix: &str) -> Option<&'a str> {
    b.iter().find(|c| c.mechanism.starts_with(prefix)).unwrap().warning.as_deref()
}

/// A laptop-like host: tuned (a Python script: its comm is the script's name), power-profiles-daemon
/// (comm cut at 15 bytes) and thermald, two of them enabled as units.
fn three_daemons(t: &Path) {
    process(t, 812, "tuned", &["/usr/bin/python3", "-Es", "/usr/sbin/tuned", "-l", "-P"]);
    process(t, 901, "power-profiles-", &["/usr/libexec/power-profiles-daemon"]);
    process(t, 950, "thermald", &["/usr/sbin/thermald", "--systemd", "--dbus-enable", "--adaptive"]);
    process(t, 1000, "bash", &["-bash"]);
    put(t, "etc/systemd/system/multi-user.target.wants/thermald.service", "");
    put(t, "etc/systemd/system/graphical.target.wants/power-profiles-daemon.service", "");
    put(t, "etc/systemd/system/multi-user.target.wants/ssh.service", "");
    put(t, "etc/tuned/active_profile", "balanced\n");
    put(t, "sys/devices/system/cpu/cpu0/cpufreq/scaling_driver", "intel_pstate\n");
}

#[test]
fn tuned_power_profiles_daemon_and_thermald_are_named_per_knob() {
    let t = tempfile::tempdir().unwrap();
    three_daemons(t.path());
    // No stage caps frequency.
    let mut cfg = Config::default();
    cfg.thermal.stages = cfg.thermal.table().into_iter().map(|a| StageActions { cpufreq_max_pct: 100.0, ..a }).collect();
    let (c, b) = doctor(t.path(), &cfg);
    assert_eq!(tools(&c, CPUFREQ), ["thermald", "tuned"]);
    assert_eq!(tools(&c, GOVERNOR), ["power-profiles-daemon", "tuned"]);
    assert_eq!(tools(&c, RAPL), ["thermald"]);
    assert_eq!(tools(&c, IRQ), ["tuned"]);
    assert_eq!(tools(&c, RT_RUNTIME), ["tuned"]);
    assert!(tools(&c, SCHED_EXT).is_empty() && tools(&c, CGROUP).is_empty());
    let thermald = other(&c, CPUFREQ, "thermald");
    assert_eq!(thermald.found_by, ["process thermald (pid 950)", "unit multi-user.target.wants/thermald.service"]);
    assert!(thermald.writes.contains("scaling_max_freq"), "{thermald:?}");
    let ppd = other(&c, GOVERNOR, "power-profiles-daemon");
    assert_eq!(ppd.found_by, ["process power-profiles- (pid 901)", "unit graphical.target.wants/power-profiles-daemon.service"]);
    assert!(other(&c, GOVERNOR, "tuned").found_by.iter().any(|h| h.ends_with("tuned/active_profile: profile balanced")), "{c:?}");
    let text = c.render();
    assert!(text.contains("thermald (process, unit), tuned (process, config) | joule: caps nothing in this config"), "{text}");
    assert!(text.contains("power-profiles-daemon (process, unit), tuned (process, config) | joule: never writes them"), "{text}");
    assert!(text.contains("RAPL power limits          thermald (process, unit) | joule: only reads energy_uj"), "{text}");
    assert!(text.contains("sched_ext slot             nobody else"), "{text}");
    // While joule caps no frequency there is nothing to warn about; once it does, a warning names both.
    assert_eq!(warning(&b, "cpufreq"), None);
    cfg.energy.enabled = true;
    let (c, b) = doctor(t.path(), &cfg);
    assert!(warning(&b, "cpufreq").is_some_and(|w| w.contains("also capped here by thermald, tuned") && w.contains("drift")), "{b:?}");
    assert!(c.rows[0].joule.starts_with("caps it ([energy] placement)"), "{:?}", c.rows[0]);
    // The JSON rows: every knob, each writer with how it was found.
    let json = serde_json::to_value(&c.rows).unwrap();
    assert_eq!(json.as_array().unwrap().len(), 7);
    assert_eq!(json[0]["others"][0]["tool"], "thermald");
    assert_eq!(json[0]["others"][0]["found_by"][0], "process thermald (pid 950)");
    assert!(json[0]["others"][0].get("kinds").is_none());
    // Where the machine has no cpufreq there is nothing to cap, and nothing to warn about.
    std::fs::remove_file(t.path().join("sys/devices/system/cpu/cpu0/cpufreq/scaling_driver")).unwrap();
    assert_eq!(warning(&doctor(t.path(), &cfg).1, "cpufreq"), None);
}

#[test]
fn the_thermal_stages_cap_frequency_only_where_doctors_cpufreq_choice_acts() {
    let choice = |backend: &str| vec![Choice { mechanism: "cpufreq caps", backend: backend.into(), why: String::new(), warning: None }];
    let cfg = Config::default();
    assert!(cfg.thermal.table().iter().any(|a| a.cpufreq_max_pct < 100.0), "the default stages ask for a cap");
    assert_eq!(freq_writers(&cfg, &choice("intel_pstate")), ["thermal stages"]);
    assert!(freq_writers(&cfg, &choice("off")).is_empty() && freq_writers(&cfg, &choice("none")).is_empty());
    let mut cfg = Config::default();
    cfg.thermal.stages = cfg.thermal.table().into_iter().map(|a| StageActions { cpufreq_max_pct: 100.0, ..a }).collect();
    assert!(freq_writers(&cfg, &choice("intel_pstate")).is_empty(), "no stage asks for less than 100 %");
    cfg.nap.enabled = true;
    cfg.nap.machine.cpufreq_min = true;
    assert_eq!(freq_writers(&cfg, &choice("off")), ["[nap] machine.cpufreq_min"]);
}

#[test]
fn a_loaded_sched_ext_scheduler_is_named_in_the_sched_ext_row() {
    let t = tempfile::tempdir().unwrap();
    put(t.path(), "sys/kernel/sched_ext/state", "enabled\n");
    put(t.path(), "sys/kernel/sched_ext/root/ops", "rusty\n");
    process(t.path(), 77, "scx_rusty", &["/usr/bin/scx_rusty", "--fifo-sched"]);
    let mut cfg = Config::default();
    cfg.thermal.scheduler = ThermalScheduler::Scx;
    let (c, b) = doctor(t.path(), &cfg);
    assert_eq!(tools(&c, SCHED_EXT), ["scx_rusty"], "the process and the kernel's ops are one scheduler");
    let rusty = other(&c, SCHED_EXT, "scx_rusty");
    assert_eq!(rusty.writes, "holds the slot now");
    assert_eq!(rusty.kinds, ["process", "kernel"]);
    assert!(rusty.found_by[1].ends_with("sched_ext/root/ops: rusty (state enabled)"), "{rusty:?}");
    assert!(warning(&b, "thermal scheduler").is_some_and(|w| w.contains("held by scx_rusty") && w.contains("cgroup path")), "{b:?}");
    assert!(c.render().contains("sched_ext slot             scx_rusty (process, kernel) | joule: loads its scheduler only while the slot is free"));
    // A scheduler the kernel has loaded with no process in sight is named by its ops.
    let t = tempfile::tempdir().unwrap();
    put(t.path(), "sys/kernel/sched_ext/state", "enabled\n");
    put(t.path(), "sys/kernel/sched_ext/root/ops", "lavd\n");
    assert_eq!(tools(&doctor(t.path(), &cfg).0, SCHED_EXT), ["lavd"]);
    // joule's own scheduler is nobody else; scx_loader is a loader, not a scheduler.
    put(t.path(), "sys/kernel/sched_ext/root/ops", "joule\n");
    process(t.path(), 60, "scx_loader", &["/usr/bin/scx_loader"]);
    put(t.path(), "etc/scx_loader.toml", "default_sched = \"scx_bpfland\"\ndefault_mode = \"Auto\"\n");
    let (c, b) = doctor(t.path(), &cfg);
    assert_eq!(tools(&c, SCHED_EXT), ["scx_loader"]);
    assert!(other(&c, SCHED_EXT, "scx_loader").found_by.iter().any(|h| h.ends_with("scx_loader.toml: scheduler scx_bpfland")), "{c:?}");
    assert!(warning(&b, "thermal scheduler").is_some_and(|w| w.contains("scx_loader can load")), "{b:?}");
}

#[test]
fn a_machine_with_none_of_them_says_so_in_one_line() {
    let t = tempfile::tempdir().unwrap();
    process(t.path(), 1, "systemd", &["/sbin/init"]);
    process(t.path(), 400, "sshd", &["sshd: /usr/sbin/sshd -D"]);
    put(t.path(), "sys/kernel/sched_ext/state", "enabled\n");
    put(t.path(), "sys/kernel/sched_ext/root/ops", "joule\n");
    put(t.path(), "etc/systemd/system/multi-user.target.wants/ssh.service", "");
    put(t.path(), "etc/sysctl.d/99-local.conf", "# kernel.sched_rt_runtime_us = -1\nvm.swappiness = 10\n");
    put(t.path(), "var/lib/kubelet/cpu_manager_state", r#"{"policyName":"none","defaultCpuSet":"","checksum":1}"#);
    let (c, b) = doctor(t.path(), &Config::default());
    assert!(c.rows.iter().all(|r| r.others.is_empty()), "{c:?}");
    assert_eq!(c.rows.len(), 7);
    let text = c.render();
    assert_eq!(text.lines().filter(|l| !l.is_empty()).count(), 2, "{text}");
    assert!(text.lines().last().unwrap().trim_start().starts_with("none found"), "{text}");
    assert!(b.iter().all(|c| c.warning.as_deref().is_none_or(|w| !w.contains("docs/deploy.md"))), "{b:?}");
}

#[test]
fn tlp_cpupower_irqbalance_and_sysctl_d_are_read_from_their_units_and_configs() {
    let t = tempfile::tempdir().unwrap();
    // TLP runs as a oneshot: its config is what shows it; only uncommented settings count.
    put(
        t.path(),
        "etc/tlp.conf",
        "#CPU_SCALING_MAX_FREQ_ON_AC=9999999\nCPU_SCALING_MAX_FREQ_ON_BAT=1600000\nCPU_ENERGY_PERF_POLICY_ON_AC=balance_performance\n",
    );
    put(t.path(), "etc/systemd/system/multi-user.target.wants/cpupower.service", "");
    put(t.path(), "etc/default/cpupower", "governor='powersave'\nmax_freq=\"3GHz\"\n");
    put(t.path(), "etc/systemd/system/multi-user.target.wants/irqbalance.service", "");
    put(t.path(), "etc/sysctl.d/99-rt.conf", "kernel.sched_rt_runtime_us = -1\n");
    let (c, _) = doctor(t.path(), &Config::default());
    assert_eq!(tools(&c, CPUFREQ), ["TLP", "cpupower"]);
    let tlp = other(&c, CPUFREQ, "TLP");
    assert!(tlp.writes.starts_with("CPU_SCALING_MAX_FREQ_ON_BAT=1600000:") && !tlp.writes.contains("9999999"), "{tlp:?}");
    assert!(other(&c, CPUFREQ, "cpupower").writes.contains("max_freq=3GHz"), "{c:?}");
    assert_eq!(tools(&c, GOVERNOR), ["TLP", "cpupower"]);
    assert_eq!(tools(&c, IRQ), ["irqbalance"]);
    assert!(other(&c, RT_RUNTIME, "sysctl.d").found_by[0].ends_with("sysctl.d/99-rt.conf: kernel.sched_rt_runtime_us = -1"), "{c:?}");
    // Without frequency settings, TLP and cpupower are writers of the governor only.
    put(t.path(), "etc/tlp.conf", "CPU_ENERGY_PERF_POLICY_ON_AC=balance_performance\n");
    put(t.path(), "etc/default/cpupower", "governor='powersave'\n#max_freq=\"3GHz\"\n");
    let (c, _) = doctor(t.path(), &Config::default());
    assert!(tools(&c, CPUFREQ).is_empty(), "{c:?}");
    assert_eq!(tools(&c, GOVERNOR), ["TLP", "cpupower"]);
}

#[test]
fn a_kubelets_static_cpu_manager_and_a_class_on_pods_exclusive_cpus_are_reported() {
    let t = tempfile::tempdir().unwrap();
    process(t.path(), 2000, "kubelet", &["/usr/bin/kubelet", "--config=/var/lib/kubelet/config.yaml", "--cpu-manager-policy", "static"]);
    put(t.path(), "var/lib/kubelet/config.yaml", "kind: KubeletConfiguration\ncpuManagerPolicy: static\n");
    let state = r#"{"policyName":"static","defaultCpuSet":"0-1,4-7","entries":{"8c1f":{"db":"2-3"},"9a2e":{"cache":"3"}},"checksum":42}"#;
    put(t.path(), "var/lib/kubelet/cpu_manager_state", state);
    put(t.path(), "sys/fs/cgroup/cgroup.controllers", "cpuset cpu\n");
    put(t.path(), "sys/fs/cgroup/kubepods.slice/cgroup.procs", "");
    let cfg = Config {
        classes: vec![
            ClassConfig { name: "batch".into(), cpus: Some("3-4".into()), ..Default::default() },
            ClassConfig { name: "web".into(), cpus: Some("0-1".into()), ..Default::default() },
        ],
        ..Default::default()
    };
    let (c, b) = doctor(t.path(), &cfg);
    let kubelet = other(&c, CGROUP, "kubelet");
    assert!(kubelet.writes.ends_with("exclusive CPUs 2-3"), "{kubelet:?}");
    assert_eq!(kubelet.kinds, ["process", "config", "cgroup tree"]);
    assert!(kubelet.found_by.iter().any(|h| h == "kubelet --cpu-manager-policy=static"), "{kubelet:?}");
    assert!(kubelet.found_by.iter().any(|h| h.ends_with("config.yaml: cpuManagerPolicy: static")), "{kubelet:?}");
    let row = c.rows.iter().find(|r| r.knob == CGROUP).unwrap();
    assert!(row.joule.contains("class batch shares pods' exclusive CPUs 3") && !row.joule.contains("web"), "{row:?}");
    assert!(warning(&b, "class CPU").is_some_and(|w| w.contains("class batch's cpus include CPUs 3")), "{b:?}");
    // The none policy hands out no CPUs: a kubelet that owns kubepods, without the cpuset part.
    put(t.path(), "var/lib/kubelet/cpu_manager_state", r#"{"policyName":"none","defaultCpuSet":"","checksum":1}"#);
    put(t.path(), "var/lib/kubelet/config.yaml", "kind: KubeletConfiguration\n");
    process(t.path(), 2000, "kubelet", &["/usr/bin/kubelet", "--config=/var/lib/kubelet/config.yaml"]);
    let (c, b) = doctor(t.path(), &cfg);
    assert_eq!(other(&c, CGROUP, "kubelet").writes, "pods' cpu knobs under kubepods");
    assert!(warning(&b, "class CPU").is_none_or(|w| !w.contains("exclusively")), "{b:?}");
}
