//! `joule doctor` on fixture trees: a systemd host on pure cgroup v2 without RT group
//! scheduling (the hosts users run), and a hybrid v1/v2 host like the one joule is developed on.

use super::*;
use crate::backends::fixtures::{hybrid, put, roots, systemd_v2};
use joule_core::config::Config;

fn backend<'a>(b: &'a [Choice], m: &str) -> &'a Choice {
    b.iter().find(|c| c.mechanism.starts_with(m)).unwrap_or_else(|| panic!("no {m} in {b:?}"))
}

#[test]
fn a_systemd_host_on_pure_v2_without_rt_group_sched_is_named_as_such() {
    let t = tempfile::tempdir().unwrap();
    systemd_v2(t.path());
    let f = Facts::read(&roots(t.path()));
    assert_eq!((f.cgroup.layout, f.cgroup.cpu_controller, f.cgroup.freezer), ("unified", Some("v2"), Some("v2")));
    assert_eq!(f.cgroup.managers, vec!["systemd"]);
    assert!(!f.cgroup.rt_group_sched && f.btf && f.bpffs_mounted && !f.proc_hidepid);
    assert_eq!(f.sched_ext.as_deref(), Some("disabled"));
    assert_eq!(f.sensors.thermal_zones, vec!["thermal_zone0 (acpitz)"]);
    let mut cfg = Config::default();
    cfg.thermal.scheduler = joule_core::config::ThermalScheduler::Scx;
    let b = choose(&f, &cfg);
    assert_eq!(backend(&b, "thermal sensor").backend, "sensor");
    assert_eq!(backend(&b, "thermal scheduler").backend, "scx");
    assert_eq!(backend(&b, "RT classes").backend, "SCHED_DEADLINE");
    assert_eq!(backend(&b, "nap").backend, "systemd FreezeUnit");
    let cpu = backend(&b, "class CPU");
    assert_eq!(cpu.backend, "systemd D-Bus");
    assert!(cpu.warning.as_deref().is_some_and(|w| w.contains("moves no process") && w.contains("docs/systemd.md")), "{cpu:?}");
    assert_eq!(backend(&b, "power").backend, "model");
    let text = render(&f, &b);
    assert!(text.contains("warning: systemd is PID 1"), "{text}");
}

#[test]
fn a_hybrid_host_gets_v1_backends_and_its_sensors_and_hidepid_are_seen() {
    let t = tempfile::tempdir().unwrap();
    hybrid(t.path());
    let f = Facts::read(&roots(t.path()));
    assert_eq!((f.cgroup.layout, f.cgroup.cpu_controller, f.cgroup.freezer), ("hybrid", Some("v1"), Some("v1")));
    assert!(f.cgroup.managers.is_empty() && f.cgroup.rt_group_sched && f.proc_hidepid && !f.btf && !f.bpffs_mounted);
    assert_eq!((f.sensors.hwmon_power_inputs, f.sensors.cpufreq_driver.as_deref()), (1, Some("intel_pstate")));
    let mut cfg = Config::default();
    cfg.thermal.scheduler = joule_core::config::ThermalScheduler::Scx;
    let b = choose(&f, &cfg);
    let sched = backend(&b, "thermal scheduler");
    assert_eq!(sched.backend, "cgroup");
    assert!(sched.warning.as_deref().is_some_and(|w| w.contains("no sched_ext")), "{sched:?}");
    assert_eq!(backend(&b, "thermal stage").backend, "user space");
    let sensor = backend(&b, "thermal sensor");
    assert_eq!(sensor.backend, "none", "no sensor, and a model acts only when told: {sensor:?}");
    assert!(sensor.why.contains("no thermal action"), "{sensor:?}");
    assert_eq!(backend(&b, "cpufreq caps").backend, "off", "out of the box no stage caps a frequency");
    cfg.thermal.act_on_model = true;
    cfg.thermal.cpufreq_caps = true;
    let b = choose(&f, &cfg);
    assert_eq!(backend(&b, "thermal sensor").backend, "model");
    assert!(backend(&b, "thermal sensor").warning.is_some());
    assert_eq!(backend(&b, "cpufreq caps").backend, "intel_pstate");
    assert_eq!(backend(&b, "power").backend, "sensor");
    assert_eq!(backend(&b, "class CPU").backend, "cgroupfs v1");
    assert!(backend(&b, "class CPU").warning.is_none());
    assert_eq!(backend(&b, "RT classes").backend, "RT group scheduling");
    assert!(backend(&b, "elevate").why.contains("-1"));
}

#[test]
fn a_kubelet_tree_and_an_empty_machine_are_reported_without_a_crash() {
    let t = tempfile::tempdir().unwrap();
    systemd_v2(t.path());
    put(t.path(), "sys/fs/cgroup/kubepods.slice/cgroup.procs", "");
    let f = Facts::read(&roots(t.path()));
    assert_eq!(f.cgroup.managers, vec!["systemd", "kubelet"]);
    assert!(backend(&choose(&f, &Config::default()), "class CPU").warning.as_deref().unwrap().contains("kubelet"));
    let empty = tempfile::tempdir().unwrap();
    let f = Facts::read(&roots(empty.path()));
    assert_eq!((f.cgroup.layout, f.cgroup.cpu_controller, f.kernel_release.as_deref()), ("none", None, None));
    let b = choose(&f, &Config::default());
    assert_eq!(backend(&b, "class CPU").backend, "none");
    assert_eq!(backend(&b, "nap").backend, "none");
    let _ = render(&f, &b);
}

#[test]
fn the_architecture_is_the_kernels_and_shows_in_the_report() {
    let t = tempfile::tempdir().unwrap();
    systemd_v2(t.path());
    put(t.path(), "proc/sys/kernel/arch", "aarch64\n");
    let f = Facts::read(&roots(t.path()));
    assert_eq!(f.architecture, "aarch64");
    // 7.3: cpu.idle (5.15+) and EEVDF slices (6.12+) both.
    assert_eq!((f.cpu_idle, f.eevdf_slice), (Some(true), Some(true)));
    assert!(render(&f, &choose(&f, &Config::default())).contains("architecture               aarch64"));
    // Without the file (an old kernel, a bare fixture): the architecture this binary was built for.
    let bare = tempfile::tempdir().unwrap();
    assert_eq!(Facts::read(&roots(bare.path())).architecture, std::env::consts::ARCH);
}

#[test]
fn cpu_idle_and_eevdf_slices_follow_the_release_and_an_unreadable_one_is_unknown() {
    let t = tempfile::tempdir().unwrap();
    put(t.path(), "proc/sys/kernel/osrelease", "6.1.0-28-arm64\n");
    let f = Facts::read(&roots(t.path()));
    assert_eq!((f.cpu_idle, f.eevdf_slice), (Some(true), Some(false)));
    assert!(render(&f, &choose(&f, &Config::default())).contains("cpu.idle / EEVDF slices    yes / no"));
    put(t.path(), "proc/sys/kernel/osrelease", "5.10.0\n");
    assert_eq!(Facts::read(&roots(t.path())).cpu_idle, Some(false));
    let bare = tempfile::tempdir().unwrap();
    assert_eq!(Facts::read(&roots(bare.path())).eevdf_slice, None);
}

/// A server: the package zone and coretemp count, an NVMe drive at 95 °C and the chipset do not;
/// the thresholds come from the coretemp critical trip (the package zone's trips are 0, disabled).
#[test]
fn doctor_lists_each_sensor_used_or_ignored_with_why_and_the_thresholds_in_effect() {
    let t = tempfile::tempdir().unwrap();
    systemd_v2(t.path());
    put(t.path(), "sys/class/thermal/thermal_zone1/type", "x86_pkg_temp\n");
    put(t.path(), "sys/class/thermal/thermal_zone1/temp", "52000\n");
    put(t.path(), "sys/class/thermal/thermal_zone1/trip_point_0_type", "passive\n");
    put(t.path(), "sys/class/thermal/thermal_zone1/trip_point_0_temp", "0\n");
    put(t.path(), "sys/class/thermal/thermal_zone2/type", "pch_cannonlake\n");
    put(t.path(), "sys/class/thermal/thermal_zone2/temp", "61000\n");
    put(t.path(), "sys/class/hwmon/hwmon1/name", "nvme\n");
    put(t.path(), "sys/class/hwmon/hwmon1/temp1_input", "95000\n");
    put(t.path(), "sys/class/hwmon/hwmon2/name", "coretemp\n");
    put(t.path(), "sys/class/hwmon/hwmon2/temp1_input", "53000\n");
    put(t.path(), "sys/class/hwmon/hwmon2/temp1_crit", "100000\n");
    let f = Facts::read(&roots(t.path()));
    let b = choose(&f, &Config::default());
    let sensor = backend(&b, "thermal sensor");
    assert_eq!(sensor.backend, "sensor");
    assert!(sensor.why.contains("thermal_zone1 (x86_pkg_temp)") && sensor.why.contains("hwmon2/temp1 (coretemp)"), "{sensor:?}");
    assert!(
        sensor.why.contains("hwmon1/temp1 (nvme: not a CPU sensor") && sensor.why.contains("thermal_zone0 (acpitz: a CPU or package sensor is better)"),
        "{sensor:?}"
    );
    let th = backend(&b, "thermal thresholds");
    assert_eq!(th.backend, "trip points");
    assert!(th.why.contains("[65.0, 70.0, 75.0]") && th.why.contains("hwmon2/temp1's critical trip point at 100"), "{th:?}");
    let text = render(&f, &b);
    assert!(text.contains("thermal thresholds"), "{text}");
    // Fixed thresholds in the config win and say so.
    let cfg = Config::parse("[thermal]\nstage_thresholds_celsius = [60.0, 70.0, 80.0]\n").unwrap();
    assert_eq!(backend(&choose(&f, &cfg), "thermal thresholds").backend, "config");
}
