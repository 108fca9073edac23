//! What joule reads off a machine to choose its backends: the kernel's offer (BTF, sched_ext,
//! RT group scheduling, the RT limit), the cgroup layout and who owns it, the sensors, the
//! pseudo filesystems and /proc's policy. One reader for the agent and `joule doctor`, from the
//! roots the agent reads; read-only, and every root is a parameter so a fixture tree stands in
//! for the machine.

use joule_core::cgroupfs::{Controller, Layout};
use joule_core::effects::RealEffects;
use serde::Serialize;
use std::path::{Path, PathBuf};

/// Where the machine's pseudo filesystems are (`/sys`, `/proc`, `/sys/fs/cgroup`), where its
/// temperature sensors are read, and the kernel BTF joule's eBPF programs are loaded against.
#[derive(Debug, Clone)]
pub struct Roots {
    pub sys: PathBuf,
    pub proc: PathBuf,
    pub cgroup: PathBuf,
    /// The sensors' tree (`telemetry.thermal_root`, else `sys`).
    pub thermal: PathBuf,
    /// The kernel's BTF. Not under `sys`: libbpf relocates the programs against the running
    /// kernel's own file whatever tree the sensors are read from, so a fixture sysfs (tests,
    /// `thermal_root` plants) has no say in whether eBPF loads.
    pub btf: PathBuf,
    /// Where the board's boot files are (`telemetry.boot_root`: a Pi's config.txt).
    pub boot: PathBuf,
}

impl Default for Roots {
    fn default() -> Self {
        Roots::of(&joule_core::config::TelemetryConfig::default())
    }
}

impl Roots {
    /// The roots the agent reads with this `[telemetry]` section.
    pub fn of(t: &joule_core::config::TelemetryConfig) -> Roots {
        Roots {
            sys: t.sysfs_root.clone(),
            proc: t.procfs_root.clone(),
            cgroup: t.cgroup_root.clone(),
            thermal: t.thermal_root().to_path_buf(),
            btf: super::BTF_VMLINUX.into(),
            boot: t.boot_root.clone(),
        }
    }

    /// Fixture roots under one tree: `sys`, `proc`, `sys/fs/cgroup`, BTF at
    /// `sys/kernel/btf/vmlinux`.
    #[cfg(test)]
    pub fn under(t: &Path) -> Roots {
        let sys = t.join("sys");
        Roots { proc: t.join("proc"), cgroup: sys.join("fs/cgroup"), thermal: sys.clone(), btf: sys.join("kernel/btf/vmlinux"), boot: t.join("boot"), sys }
    }
}

/// Whether systemd owns the cgroup tree under these roots (PID 1 systemd, pure v2): then every
/// class acts through units. The agent's placement and the doctor's report both ask this.
pub fn systemd_owns_tree(r: &Roots) -> bool {
    joule_core::cgroupfs::systemd_owns_tree(&r.proc, &r.cgroup, &RealEffects)
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Facts {
    /// The machine's architecture as the kernel names it (`<proc>/sys/kernel/arch`, `uname -m`:
    /// `x86_64`, `aarch64`); the one this binary was built for when that file is missing.
    pub architecture: String,
    pub kernel_release: Option<String>,
    /// The kernel's BTF ([`Roots::btf`]) is there: what joule's BPF programs are relocated
    /// against.
    pub btf: bool,
    /// sched_ext's `state` (None: this kernel has no sched_ext).
    pub sched_ext: Option<String>,
    /// `cpu.idle` groups (Linux 5.15+) and per-thread EEVDF slices (6.12+), judged by the
    /// release as joule's actuators judge them (None: the release is unreadable).
    pub cpu_idle: Option<bool>,
    pub eevdf_slice: Option<bool>,
    pub cgroup: CgroupFacts,
    /// PID 1 is systemd on a pure v2 tree ([`systemd_owns_tree`]): classes act through units.
    pub systemd_owns_tree: bool,
    /// `kernel.sched_rt_runtime_us` (-1: no limit).
    pub sched_rt_runtime_us: Option<i64>,
    pub sensors: Sensors,
    /// Every temperature sensor with its type and trip points, which the thermal stage's choice
    /// of sensors and thresholds is made from (`joule_core::thermal_sensors`).
    pub temperature_sensors: Vec<joule_core::snapshot::ThermalZone>,
    /// The board firmware's own throttle (a Raspberry Pi's), which the stages finish under.
    /// config.txt is looked for under `boot` beside `<sys>` (`/boot` for `/sys`).
    pub board_limit: Option<joule_core::board_limits::BoardLimit>,
    /// The cpufreq policies (CPUs sharing a clock), as energy-aware placement's domains.
    pub cpufreq_policies: Vec<super::energy::CpufreqPolicy>,
    /// The kernel's Energy Model in debugfs, as placement's powers.
    pub energy_model: super::energy::EnergyModelFacts,
    /// Mounted where joule looks for them (joule mounts them itself when missing).
    pub bpffs_mounted: bool,
    pub tracefs_mounted: bool,
    /// /proc is mounted with `hidepid`: other users' processes are hidden from it.
    pub proc_hidepid: bool,
    /// `comm` of PID 1.
    pub init: Option<String>,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct CgroupFacts {
    /// `v1` (no v2 hierarchy), `hybrid` (v1 controllers and a v2 tree at `unified/`),
    /// `unified` (pure v2) or `none`.
    pub layout: &'static str,
    /// Where the cpu controller is: `v1` or `v2` (None: nowhere joule can use it).
    pub cpu_controller: Option<&'static str>,
    pub cpuset_controller: Option<&'static str>,
    /// `v1` freezer hierarchy, or `v2` (`cgroup.freeze`, Linux 5.2+).
    pub freezer: Option<&'static str>,
    /// RT group scheduling: the v1 cpu hierarchy has `cpu.rt_runtime_us` (v2 has no RT knobs).
    pub rt_group_sched: bool,
    /// Who else writes this tree: `systemd` (PID 1, single writer per subtree) and/or
    /// `kubelet` (`kubepods.slice` / `kubepods`); empty: nobody joule knows of.
    pub managers: Vec<&'static str>,
    /// What the v2 root's `cgroup.controllers` offers.
    pub v2_controllers: Vec<String>,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Sensors {
    pub thermal_zones: Vec<String>,
    pub hwmon_temp_inputs: usize,
    pub hwmon_power_inputs: usize,
    pub rapl_zones: usize,
    /// cpu0's `scaling_driver` (None: no cpufreq).
    pub cpufreq_driver: Option<String>,
}

fn read_trim(p: &Path) -> Option<String> {
    std::fs::read_to_string(p).ok().map(|s| s.trim().to_string())
}

fn dir_names(p: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(p).into_iter().flatten().flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect();
    v.sort();
    v
}

impl Facts {
    pub fn read(r: &Roots) -> Facts {
        let mounts = joule_core::mountinfo::read(&r.proc.join("self/mountinfo"));
        let init = read_trim(&r.proc.join("1/comm"));
        let kernel_release = read_trim(&r.proc.join("sys/kernel/osrelease"));
        let since = |v: (u32, u32)| kernel_release.as_deref().and_then(joule_core::procfs::kernel_version).map(|k| k >= v);
        Facts {
            architecture: read_trim(&r.proc.join("sys/kernel/arch")).unwrap_or_else(|| std::env::consts::ARCH.to_string()),
            cpu_idle: since((5, 15)),
            eevdf_slice: since((6, 12)),
            kernel_release,
            btf: r.btf.exists(),
            sched_ext: read_trim(&r.sys.join(joule_core::sched_ext::SYSFS_SCHED_EXT).join("state")),
            cgroup: CgroupFacts::read(&r.cgroup, init.as_deref()),
            systemd_owns_tree: systemd_owns_tree(r),
            sched_rt_runtime_us: read_trim(&r.proc.join("sys/kernel/sched_rt_runtime_us")).and_then(|s| s.parse().ok()),
            sensors: Sensors::read(&r.sys),
            temperature_sensors: joule_telemetry::thermal::read_once(&r.thermal),
            board_limit: joule_core::board_limits::read(&r.thermal, &r.boot),
            cpufreq_policies: super::energy::cpufreq_policies(&r.sys),
            energy_model: super::energy::EnergyModelFacts::read(&r.sys),
            bpffs_mounted: mounts.iter().any(|m| m.fstype == "bpf" && m.mount_point == r.sys.join("fs/bpf")),
            tracefs_mounted: mounts.iter().any(|m| m.fstype == "tracefs"),
            proc_hidepid: mounts.iter().any(|m| m.fstype == "proc" && m.mount_point == r.proc && m.hides_pids()),
            init,
        }
    }
}

impl CgroupFacts {
    fn read(root: &Path, init: Option<&str>) -> CgroupFacts {
        let layout = Layout::detect(root, &RealEffects);
        let v1 = |c| layout.v1(c).is_some();
        let v2 = |name| layout.unified.as_ref().is_some_and(|u| u.offers(name));
        let place = |c, name| {
            if v1(c) {
                Some("v1")
            } else if v2(name) {
                Some("v2")
            } else {
                None
            }
        };
        let kind = match (Controller::ALL.into_iter().any(v1), &layout.unified) {
            (false, Some(u)) if u.dir == root => "unified",
            (true, Some(_)) => "hybrid",
            (true, None) => "v1",
            _ => "none",
        };
        let freezer = if v1(Controller::Freezer) {
            Some("v1")
        } else {
            // As the nap actuator chooses: a class's v2 cgroup has cgroup.freeze (Linux 5.2+).
            layout.unified.as_ref().map(|_| "v2")
        };
        let tree_roots: Vec<PathBuf> =
            [layout.v1(Controller::Cpu).map(Path::to_path_buf), layout.unified.as_ref().map(|u| u.dir.clone())].into_iter().flatten().collect();
        let mut managers = Vec::new();
        if init == Some("systemd") {
            managers.push("systemd");
        }
        if tree_roots.iter().any(|d| d.join("kubepods.slice").is_dir() || d.join("kubepods").is_dir()) {
            managers.push("kubelet");
        }
        CgroupFacts {
            layout: kind,
            cpu_controller: place(Controller::Cpu, "cpu"),
            cpuset_controller: place(Controller::Cpuset, "cpuset"),
            freezer,
            rt_group_sched: layout.v1(Controller::Cpu).is_some_and(|d| d.join("cpu.rt_runtime_us").exists()),
            managers,
            v2_controllers: layout.unified.map(|u| u.controllers).unwrap_or_default(),
        }
    }
}

impl Sensors {
    fn read(sys: &Path) -> Sensors {
        let thermal = sys.join("class/thermal");
        let thermal_zones = dir_names(&thermal)
            .into_iter()
            .filter(|n| n.starts_with("thermal_zone"))
            .map(|n| read_trim(&thermal.join(&n).join("type")).map(|t| format!("{n} ({t})")).unwrap_or(n))
            .collect();
        let hwmon = sys.join("class/hwmon");
        let inputs = |kind: &str| {
            dir_names(&hwmon).iter().map(|h| dir_names(&hwmon.join(h)).iter().filter(|f| f.starts_with(kind) && f.ends_with("_input")).count()).sum()
        };
        Sensors {
            thermal_zones,
            hwmon_temp_inputs: inputs("temp"),
            hwmon_power_inputs: inputs("power"),
            rapl_zones: dir_names(&sys.join("class/powercap")).iter().filter(|n| n.starts_with("intel-rapl:")).count(),
            cpufreq_driver: read_trim(&sys.join("devices/system/cpu/cpu0/cpufreq/scaling_driver")),
        }
    }
}
