//! Fixture machines for the backend oracle's tests: trees shaped like the hosts joule runs on,
//! read by the one facts reader as the agent's and the doctor's roots. `joule doctor`'s tests
//! and the agent's doctor-equals-agent test use the same ones.

use super::Roots;
use std::path::Path;

pub fn put(root: &Path, rel: &str, text: &str) {
    let p = root.join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, text).unwrap();
}

pub fn roots(t: &Path) -> Roots {
    Roots::under(t)
}

/// A Debian 13 guest: systemd, pure v2 with cpu/cpuset, no RT group sched, sched_ext, an ACPI zone.
pub fn systemd_v2(t: &Path) {
    put(t, "proc/1/comm", "systemd\n");
    put(t, "proc/sys/kernel/osrelease", "7.3.0-1-cloud-amd64\n");
    put(t, "proc/sys/kernel/sched_rt_runtime_us", "950000\n");
    let bpf = t.join("sys/fs/bpf");
    put(t, "proc/self/mountinfo", &format!("22 1 0:21 / {} rw - proc proc rw\n30 25 0:26 / {} rw - bpf bpf rw\n", t.join("proc").display(), bpf.display()));
    put(t, "sys/kernel/btf/vmlinux", "");
    put(t, "sys/kernel/sched_ext/state", "disabled\n");
    put(t, "sys/class/thermal/thermal_zone0/type", "acpitz\n");
    put(t, "sys/class/thermal/thermal_zone0/temp", "45000\n");
    put(t, "sys/fs/cgroup/cgroup.controllers", "cpuset cpu io memory pids\n");
    put(t, "sys/fs/cgroup/system.slice/nginx.service/cgroup.procs", "");
}

/// This host's shape: v1 cpu (with RT group sched), cpuset, freezer; v2 at unified/ with no
/// controllers; no sensors; PID 1 not systemd; /proc with hidepid.
pub fn hybrid(t: &Path) {
    put(t, "proc/1/comm", "process_api\n");
    put(t, "proc/sys/kernel/sched_rt_runtime_us", "-1\n");
    put(t, "proc/self/mountinfo", &format!("22 1 0:21 / {} rw - proc proc rw,hidepid=2\n", t.join("proc").display()));
    put(t, "sys/fs/cgroup/cpu/cpu.rt_runtime_us", "950000\n");
    put(t, "sys/fs/cgroup/cpu/cpu.shares", "1024\n");
    put(t, "sys/fs/cgroup/cpuset/cpuset.cpus", "0-1\n");
    put(t, "sys/fs/cgroup/freezer/tasks", "1\n");
    put(t, "sys/fs/cgroup/unified/cgroup.controllers", "\n");
    put(t, "sys/class/hwmon/hwmon0/power1_input", "1000\n");
    put(t, "sys/devices/system/cpu/cpu0/cpufreq/scaling_driver", "intel_pstate\n");
}

/// The systemd host of [`systemd_v2`] on a kernel built without CONFIG_DEBUG_INFO_BTF (a
/// Raspberry Pi OS kernel): no `kernel/btf/vmlinux`.
pub fn no_btf(t: &Path) {
    systemd_v2(t);
    std::fs::remove_file(t.join("sys/kernel/btf/vmlinux")).unwrap();
}

/// Lays a fixture machine out under a directory.
pub type Machine = fn(&Path);

/// Every fixture machine, by name.
pub const MACHINES: [(&str, Machine); 4] = [("systemd v2", systemd_v2), ("hybrid", hybrid), ("no BTF", no_btf), ("empty", empty)];

/// Nothing at all: no procfs, no cgroups, no sensors.
pub fn empty(_: &Path) {}
