//! What `joule doctor` finds of the other managers on a machine, and how: running processes
//! (`<proc>/<pid>/comm`, `cmdline`), enabled units (`<etc>/systemd/system/*.wants/`), the tools'
//! configs under `<etc>` (TLP, cpupower, tuned's active profile, scx, sysctl.d), the kubelet's
//! CPU manager (its flags, `<var_lib>/kubelet/cpu_manager_state`, its config file) and the
//! kernel's loaded sched_ext scheduler (`<sys>/kernel/sched_ext/root/ops`).

use super::{Other, Roots, CGROUP, CPUFREQ, RT_RUNTIME, SCHED_EXT};
use joule_core::sched_ext::{KernelState, SYSFS_SCHED_EXT};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Daemons found by their process (`comm` is cut at 15 bytes: `power-profiles-`).
const DAEMONS: &[&str] = &["tuned", "power-profiles-daemon", "thermald", "irqbalance", "scx_loader", "kubelet"];

/// Enabled units (without `.service`) and the tool each one is.
const UNITS: &[(&str, &str)] = &[
    ("tuned", "tuned"),
    ("power-profiles-daemon", "power-profiles-daemon"),
    ("thermald", "thermald"),
    ("tlp", "TLP"),
    ("cpupower", "cpupower"),
    ("irqbalance", "irqbalance"),
    ("scx_loader", "scx_loader"),
    ("scx", "scx"),
    ("kubelet", "kubelet"),
];

#[derive(Debug, Default)]
pub struct Seen {
    /// Tool → (kind, how it was found), in the order found.
    found: BTreeMap<String, Vec<(&'static str, String)>>,
    /// TLP settings that cap frequency (`CPU_SCALING_MAX_FREQ_ON_AC=…`, `CPU_MAX_PERF_ON_…`).
    tlp_caps: Vec<String>,
    /// cpupower service settings that cap frequency (`max_freq=…`, `frequency-set -u`).
    cpupower_caps: Vec<String>,
    /// sched_ext schedulers other than joule's: `scx_*` processes and the kernel's loaded one.
    schedulers: Vec<String>,
    /// The scheduler the kernel has loaded, when it is not joule's.
    pub loaded_scheduler: Option<String>,
    kube_static: bool,
    /// CPUs the kubelet's static CPU manager gave pods exclusively.
    pub kube_exclusive: Vec<usize>,
}

fn read(p: &Path) -> Option<String> {
    std::fs::read_to_string(p).ok()
}

fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir).into_iter().flatten().flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect();
    v.sort();
    v
}

/// `KEY=VALUE` and `key = value` lines that are not comments, quotes stripped (shell-style
/// configs, sysctl.d, a TOML file's top-level keys).
fn assignments(text: &str) -> Vec<(String, String)> {
    let lines = text.lines().map(str::trim).filter(|l| !l.starts_with('#') && !l.starts_with(';'));
    lines
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.trim().trim_start_matches('-').to_string(), v.trim().trim_matches(['"', '\'']).to_string()))
        .collect()
}

/// A flag's value in `argv`: `--name=value` or `--name value`.
fn flag(argv: &[String], name: &str) -> Option<String> {
    argv.iter().enumerate().find_map(|(i, a)| if a == name { argv.get(i + 1).cloned() } else { a.strip_prefix(name)?.strip_prefix('=').map(str::to_string) })
}

impl Seen {
    pub fn read(r: &Roots, kubepods: bool) -> Seen {
        let mut s = Seen::default();
        s.processes(r);
        s.units(&r.etc);
        if kubepods {
            s.add("kubelet", "cgroup tree", "kubepods in the cgroup tree".into());
        }
        s.kubelet_files(r);
        s.configs(&r.etc);
        s.kernel(&r.sys);
        s
    }

    fn add(&mut self, tool: &str, kind: &'static str, how: String) {
        let v = self.found.entry(tool.to_string()).or_default();
        if !v.iter().any(|(_, h)| *h == how) {
            v.push((kind, how));
        }
    }

    fn has(&self, tool: &str) -> bool {
        self.found.contains_key(tool)
    }

    /// `tool` as a writer of a knob, when it was found.
    pub fn other(&self, tool: &str, writes: String) -> Option<Other> {
        let found = self.found.get(tool)?;
        let mut kinds: Vec<&'static str> = Vec::new();
        found.iter().for_each(|(k, _)| {
            if !kinds.contains(k) {
                kinds.push(*k)
            }
        });
        Some(Other { tool: tool.to_string(), writes, found_by: found.iter().map(|(_, h)| h.clone()).collect(), kinds })
    }

    /// The writers whose part depends on what was found: TLP's and cpupower's frequency caps,
    /// sched_ext schedulers, the kubelet, sysctl.d.
    pub fn dynamic(&self, knob: &str) -> Vec<Other> {
        let mut v = Vec::new();
        match knob {
            CPUFREQ => {
                let caps = |c: &[String]| format!("{}: scaling_max_freq, or intel_pstate's max_perf_pct", c.join(", "));
                v.extend(Some(&self.tlp_caps).filter(|c| !c.is_empty()).and_then(|c| self.other("TLP", caps(c))));
                v.extend(Some(&self.cpupower_caps).filter(|c| !c.is_empty()).and_then(|c| self.other("cpupower", caps(c))));
            }
            SCHED_EXT => {
                for s in &self.schedulers {
                    let held = self.loaded_scheduler.as_deref() == Some(s.as_str());
                    v.extend(self.other(s, if held { "holds the slot now".into() } else { "a sched_ext scheduler's process".into() }));
                }
            }
            CGROUP => {
                let pinned = match (self.kube_static, self.kube_exclusive.is_empty()) {
                    (false, _) => String::new(),
                    (true, true) => "; its static CPU manager sets pods' cpusets (no exclusive CPUs handed out now)".into(),
                    (true, false) => format!("; its static CPU manager gives pods exclusive CPUs {}", joule_core::cpulist::format(&self.kube_exclusive)),
                };
                v.extend(self.other("kubelet", format!("pods' cpu knobs under kubepods{pinned}")));
            }
            RT_RUNTIME => v.extend(self.other("sysctl.d", "sets it at boot (systemd-sysctl)".into())),
            _ => {}
        }
        v
    }

    fn processes(&mut self, r: &Roots) {
        for pid in names(&r.proc).into_iter().filter(|n| n.bytes().all(|b| b.is_ascii_digit())) {
            let dir = r.proc.join(&pid);
            let Some(comm) = read(&dir.join("comm")).map(|c| c.trim().to_string()) else { continue };
            let raw = std::fs::read(dir.join("cmdline")).unwrap_or_default();
            let argv: Vec<String> = raw.split(|b| *b == 0).filter(|a| !a.is_empty()).map(|a| String::from_utf8_lossy(a).into_owned()).collect();
            let exe = argv.first().map(|a| a.rsplit('/').next().unwrap_or(a).to_string()).unwrap_or_default();
            let how = format!("process {comm} (pid {pid})");
            if let Some(d) = DAEMONS.iter().find(|d| comm == d[..d.len().min(15)] || exe == **d) {
                self.add(d, "process", how);
                if *d == "kubelet" {
                    self.kubelet_flags(&argv, r);
                }
            } else if comm.starts_with("scx_") {
                let name = if exe.starts_with(&comm) { exe } else { comm };
                self.add(&name, "process", how);
                if !self.schedulers.contains(&name) {
                    self.schedulers.push(name);
                }
            }
        }
    }

    fn units(&mut self, etc: &Path) {
        let dir = etc.join("systemd/system");
        for wants in names(&dir).into_iter().filter(|n| n.ends_with(".wants")) {
            for unit in names(&dir.join(&wants)) {
                if let Some((_, tool)) = UNITS.iter().find(|(u, _)| unit.strip_suffix(".service") == Some(u)) {
                    self.add(tool, "unit", format!("unit {wants}/{unit}"));
                }
            }
        }
    }

    fn kubelet_flags(&mut self, argv: &[String], r: &Roots) {
        if flag(argv, "--cpu-manager-policy").as_deref() == Some("static") {
            self.kube_static = true;
            self.add("kubelet", "process", "kubelet --cpu-manager-policy=static".into());
        }
        // Its --config, where doctor can map it onto its roots.
        let rebase = |p: &str| p.strip_prefix("/etc/").map(|x| r.etc.join(x)).or_else(|| p.strip_prefix("/var/lib/").map(|x| r.var_lib.join(x)));
        if let Some(p) = flag(argv, "--config").as_deref().and_then(rebase) {
            self.kubelet_config(&p);
        }
    }

    /// A kubelet config file that asks for the static policy.
    fn kubelet_config(&mut self, p: &Path) {
        let stat = |l: &str| l.trim().strip_prefix("cpuManagerPolicy:").is_some_and(|v| v.trim().trim_matches(['"', '\'']) == "static");
        if read(p).is_some_and(|t| t.lines().any(stat)) {
            self.kube_static = true;
            self.add("kubelet", "config", format!("{}: cpuManagerPolicy: static", p.display()));
        }
    }

    /// The kubelet's own record of its CPU manager (written whatever configured it) and the
    /// kubeadm config file.
    fn kubelet_files(&mut self, r: &Roots) {
        self.kubelet_config(&r.var_lib.join("kubelet/config.yaml"));
        let p = r.var_lib.join("kubelet/cpu_manager_state");
        let Some(v) = read(&p).and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok()) else { return };
        if v["policyName"] != "static" {
            return;
        }
        let containers = v["entries"].as_object().into_iter().flat_map(|pods| pods.values()).filter_map(|c| c.as_object()).flat_map(|c| c.values());
        let mut cpus: Vec<usize> = containers.filter_map(|s| joule_core::cpulist::parse(s.as_str()?)).flatten().collect();
        cpus.sort_unstable();
        cpus.dedup();
        let shown = if cpus.is_empty() { "none".to_string() } else { joule_core::cpulist::format(&cpus) };
        self.kube_static = true;
        self.kube_exclusive = cpus;
        self.add("kubelet", "config", format!("{}: policyName static, pods' exclusive CPUs {shown}", p.display()));
    }

    fn configs(&mut self, etc: &Path) {
        let files = |dir: &str| names(&etc.join(dir)).into_iter().filter(|n| n.ends_with(".conf")).map(|n| etc.join(dir).join(n)).collect::<Vec<PathBuf>>();
        // TLP runs as a oneshot at boot and from udev on each power-source change: no process to see.
        let tlp: Vec<PathBuf> = [etc.join("tlp.conf")].into_iter().filter(|p| p.exists()).chain(files("tlp.d")).collect();
        for p in &tlp {
            self.add("TLP", "config", format!("{} (TLP runs at boot and on each power-source change)", p.display()));
            let caps = assignments(&read(p).unwrap_or_default())
                .into_iter()
                .filter(|(k, _)| k.starts_with("CPU_SCALING_MAX_FREQ_ON_") || k.starts_with("CPU_MAX_PERF_ON_"));
            self.tlp_caps.extend(caps.map(|(k, v)| format!("{k}={v}")));
        }
        if self.has("cpupower") {
            for p in [etc.join("default/cpupower"), etc.join("sysconfig/cpupower"), etc.join("cpupower-service.conf")] {
                for (k, v) in assignments(&read(&p).unwrap_or_default()) {
                    if k.eq_ignore_ascii_case("max_freq") || (k == "CPUPOWER_START_OPTS" && (v.contains(" -u") || v.contains("--max"))) {
                        self.cpupower_caps.push(format!("{}: {k}={v}", p.display()));
                    }
                }
            }
        }
        // The scheduler a loader found above would load.
        let mut named = |tool: &str, path: PathBuf, key: &str, what: &str| {
            if !self.has(tool) {
                return;
            }
            if let Some((_, v)) = assignments(&read(&path).unwrap_or_default()).into_iter().find(|(k, _)| k == key) {
                self.add(tool, "config", format!("{}: {what} {v}", path.display()));
            }
        };
        named("scx", etc.join("default/scx"), "SCX_SCHEDULER", "scheduler");
        named("scx_loader", etc.join("scx_loader.toml"), "default_sched", "scheduler");
        named("scx_loader", etc.join("scx_loader/config.toml"), "default_sched", "scheduler");
        if self.has("tuned") {
            if let Some(p) = read(&etc.join("tuned/active_profile")).map(|p| p.trim().to_string()).filter(|p| !p.is_empty()) {
                self.add("tuned", "config", format!("{}: profile {p}", etc.join("tuned/active_profile").display()));
            }
        }
        for p in [etc.join("sysctl.conf")].into_iter().chain(files("sysctl.d")) {
            for (k, v) in assignments(&read(&p).unwrap_or_default()) {
                if k.replace('/', ".") == "kernel.sched_rt_runtime_us" {
                    self.add("sysctl.d", "config", format!("{}: kernel.sched_rt_runtime_us = {v}", p.display()));
                }
            }
        }
    }

    /// The scheduler in the kernel's sched_ext slot, unless it is joule's (`root/ops` = joule).
    fn kernel(&mut self, sys: &Path) {
        let dir = sys.join(SYSFS_SCHED_EXT);
        let k = KernelState::read(&dir);
        let Some(ops) = k.ops.filter(|o| !o.is_empty() && o != "joule") else { return };
        let tool = self.schedulers.iter().find(|s| **s == ops || s.strip_prefix("scx_") == Some(ops.as_str())).cloned().unwrap_or_else(|| ops.clone());
        let state = k.state.unwrap_or_else(|| "?".into());
        self.add(&tool, "kernel", format!("{}: {ops} (state {state})", dir.join("root/ops").display()));
        if !self.schedulers.contains(&tool) {
            self.schedulers.push(tool.clone());
        }
        self.loaded_scheduler = Some(tool);
    }
}
