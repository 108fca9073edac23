//! Tier 3 on arm64 (docs/arm64.md): the cross-built joule (`make build-arm64`) in Debian's arm64
//! cloud kernel under qemu-system-aarch64 (TCG, a Cortex-A76 like the Raspberry Pi 5's), on a
//! pure cgroup v2 root. One boot for every check; the assertions are the x86 guest's where the
//! check is the same. qemu's arm `virt` machine has no thermal zone, so the agent's zone is a
//! sysfs tree of one `cpu-thermal` zone it reads through `telemetry.thermal_root` and feeds to
//! the in-kernel stage, as `joule-bench thermal` presents its plant.

use super::{
    assert_agent_stage_follows_the_zone, assert_best_effort_cut_at_stage_3, assert_load_without_ejection, assert_monitor_json, assert_qos_v2,
    assert_sigkill_then_restore_leaves_nothing,
};
use joule_testkit::vm::{arm64, shown, Vm, VmOutput};
use std::collections::BTreeMap;
use std::process::Command;
use std::sync::OnceLock;

/// Boot + every check: the BPF tests, qos, the agent's stage steps and its 60 s of load.
const BOOT_TIMEOUT_S: u64 = 900;

/// The binary and the guest's paths: checks run in /joule, joule is /joule/bin/joule.
const J: &str = "/joule/bin/joule";

fn checks() -> Vec<(&'static str, String)> {
    let tree = "JOULE_ZONE_TREE=/run/joule-zone";
    vec![
        ("arch", "uname -m; cat /proc/sys/kernel/osrelease; cat /sys/kernel/sched_ext/state; test -e /sys/kernel/btf/vmlinux && echo btf".to_string()),
        ("doctor", format!("{J} doctor --json")),
        ("monitor", format!("{J} monitor --once --json")),
        // joule-bpf's own root tests, cross-built: every program through this kernel's verifier
        // and attached, the setuid hook's syscall numbers, the stage rule, runqlat on v2.
        (
            "bpf",
            "/joule/bin/joule-bpf-root-tests --ignored --test-threads=1 --nocapture root_every_bpf_program root_procmon root_thermal_stage_follows \
             root_thermal_a_stale_zone root_runqlat_on_cgroup_v2 root_nap_counts 2>&1"
                .to_string(),
        ),
        ("qos_v2", format!("bash scripts/vm/qos-v2.sh {J}")),
        ("scx_agent_stage", format!("{tree} bash scripts/vm/scx-agent.sh {J} stage")),
        ("scx_agent_load", format!("{tree} bash scripts/vm/scx-agent.sh {J} load")),
    ]
}

fn vm() -> Option<Vm> {
    Vm::new().arm64_guest().ready()
}

fn results() -> &'static BTreeMap<String, VmOutput> {
    static RESULTS: OnceLock<BTreeMap<String, VmOutput>> = OnceLock::new();
    RESULTS.get_or_init(|| {
        let vm = vm().expect("checked by the caller");
        let owned = checks();
        let checks: Vec<(&str, &str)> = owned.iter().map(|(n, c)| (*n, c.as_str())).collect();
        vm.batch(&checks, BOOT_TIMEOUT_S)
    })
}

fn check(name: &str) -> Option<&'static VmOutput> {
    vm()?;
    Some(shown(results(), name))
}

/// `llvm-readelf-16 ARGS binary`'s output (llvm-16 comes with install-deps; it reads every
/// architecture's ELF).
fn readelf(args: &[&str]) -> String {
    let out = Command::new("llvm-readelf-16").args(args).arg(arm64::binary()).output().expect("run llvm-readelf-16");
    assert!(out.status.success(), "llvm-readelf-16 {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The artefact of the cross build: an aarch64 ELF whose libraries a stock arm64 Debian has, and
/// whose glibc symbol versions the oldest supported release (bookworm, glibc 2.36) provides.
#[test]
#[ignore = "tier 3: vm"]
fn vm_arm64_build_is_an_aarch64_elf_that_links_only_stock_debian_libraries() {
    let bin = arm64::binary();
    if !joule_core::testing::require(bin.exists(), &format!("{}; run make build-arm64", bin.display())) {
        return;
    }
    let header = std::fs::read(&bin).expect("read the binary");
    const EM_AARCH64: u16 = 183;
    assert_eq!(&header[..4], b"\x7fELF", "not an ELF file");
    assert_eq!((header[4], header[5]), (2, 1), "not a 64-bit little-endian ELF");
    assert_eq!(u16::from_le_bytes([header[18], header[19]]), EM_AARCH64, "e_machine is not aarch64");
    let needed: Vec<String> = readelf(&["--needed-libs"])
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && *l != "]" && !l.starts_with("NeededLibraries"))
        .map(String::from)
        .collect();
    // libc6, libgcc-s1, zlib1g (required priority) and libelf1 (iproute2's, important priority).
    let stock = ["libc.so.6", "libm.so.6", "libgcc_s.so.1", "libz.so.1", "libelf.so.1"];
    println!("{}: aarch64 ELF, needs {needed:?}", bin.display());
    assert!(!needed.is_empty() && needed.iter().all(|l| stock.contains(&l.as_str())), "a library outside {stock:?}: {needed:?}");
    let versions = readelf(&["--version-info"]);
    let newest = versions
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '.'))
        .filter_map(|w| w.strip_prefix("GLIBC_"))
        .filter_map(|v| {
            let mut p = v.split('.').map(|n| n.parse::<u32>().ok());
            Some((p.next()??, p.next().flatten().unwrap_or(0)))
        })
        .max()
        .expect("no GLIBC_ symbol versions");
    println!("newest glibc symbol version: {}.{}", newest.0, newest.1);
    assert!(newest <= (2, 36), "needs glibc {}.{}, newer than bookworm's 2.36", newest.0, newest.1);
}

#[test]
#[ignore = "tier 3: vm"]
fn vm_arm64_guest_is_an_arm64_kernel_with_sched_ext_and_btf() {
    let Some(out) = check("arch") else { return };
    assert_eq!(out.status, 0, "{}", out.describe());
    let lines: Vec<&str> = out.stdout.lines().collect();
    println!("arm64 guest: {lines:?}");
    assert_eq!(lines.first(), Some(&"aarch64"), "{}", out.describe());
    assert!(["disabled", "enabled"].contains(&lines.get(2).copied().unwrap_or("")), "no sched_ext: {}", out.describe());
    assert_eq!(lines.get(3), Some(&"btf"), "{}", out.describe());
}

#[test]
#[ignore = "tier 3: vm"]
fn vm_arm64_doctor_names_the_architecture_and_each_mechanisms_backend() {
    let Some(out) = check("doctor") else { return };
    assert_eq!(out.status, 0, "{}", out.describe());
    let v: serde_json::Value = serde_json::from_str(&out.stdout).unwrap_or_else(|e| panic!("not JSON ({e}):\n{}", out.describe()));
    assert_eq!(v["facts"]["architecture"], "aarch64", "{}", v["facts"]);
    let backends = v["backends"].as_array().expect("backends");
    let backend = |m: &str| {
        let c = backends.iter().find(|c| c["mechanism"].as_str().is_some_and(|x| x.starts_with(m)));
        c.unwrap_or_else(|| panic!("no {m}: {backends:?}"))["backend"].as_str().unwrap_or_default().to_string()
    };
    for (m, want) in [
        ("thermal stage", "ebpf"),
        ("class CPU", "cgroupfs v2"),
        ("RT classes", "SCHED_DEADLINE"),
        ("nap", "cgroup v2 cgroup.freeze"),
        ("elevate", "SCHED_FIFO"),
    ] {
        assert_eq!(backend(m), want, "{m}");
    }
    println!("arm64: {}", backends.iter().map(|c| format!("{} = {}", c["mechanism"], c["backend"])).collect::<Vec<_>>().join("; "));
}

#[test]
#[ignore = "tier 3: vm"]
fn vm_arm64_monitor_has_run_queue_latency_from_ebpf() {
    let Some(out) = check("monitor") else { return };
    assert_monitor_json(out);
}

/// joule-bpf's root tests, cross-built, in the guest: each one named must have run and passed.
#[test]
#[ignore = "tier 3: vm"]
fn vm_arm64_every_bpf_program_passes_the_verifier_and_the_setuid_hook_fires() {
    let Some(out) = check("bpf") else { return };
    println!("{}", out.stdout.lines().filter(|l| l.starts_with("test ") || l.contains("programs of")).collect::<Vec<_>>().join("\n"));
    assert_eq!(out.status, 0, "{}", out.describe());
    // libtest exits non-zero on any failure; each name must have run (a filter that matches
    // nothing runs nothing), and six of them passed.
    for t in [
        "root_every_bpf_program_loads_and_attaches_on_this_kernel",
        "root_procmon_reports_fork_exec_rename_cgroup_creds_and_exit_of_a_process",
        "root_thermal_stage_follows_fed_temperatures_with_hysteresis_and_is_pinned",
        "root_thermal_a_stale_zone_no_longer_holds_the_stage_up",
        "root_runqlat_on_cgroup_v2_reports_the_root",
        "root_nap_counts_live_tcp_sockets_on_a_watched_port_up_and_down",
    ] {
        assert!(out.stdout.contains(&format!("test {t} ...")), "{t} did not run in the arm64 guest:\n{}", out.describe());
    }
    assert!(out.stdout.contains("test result: ok. 6 passed; 0 failed"), "{}", out.describe());
    // The guest has sched_ext, so the test loaded joule's scheduler too (its enqueue program).
    assert!(out.stdout.contains("\"joule_enqueue\""), "the sched_ext scheduler was not among the programs loaded:\n{}", out.describe());
}

#[test]
#[ignore = "tier 3: vm"]
fn vm_arm64_qos_class_on_cgroup_v2_lands_and_releases() {
    let Some(out) = check("qos_v2") else { return };
    assert_qos_v2(out);
}

#[test]
#[ignore = "tier 3: vm"]
fn vm_arm64_agent_stage_follows_the_zone_into_joules_scheduler() {
    let Some(out) = check("scx_agent_stage") else { return };
    assert_agent_stage_follows_the_zone(out);
}

#[test]
#[ignore = "tier 3: vm"]
fn vm_arm64_agent_scheduler_runs_60_s_of_stress_ng_without_ejection_and_cuts_best_effort_at_stage_3() {
    let Some(out) = check("scx_agent_load") else { return };
    assert_load_without_ejection(out);
    assert_best_effort_cut_at_stage_3(out);
}

#[test]
#[ignore = "tier 3: vm"]
fn vm_arm64_agent_sigkill_then_restore_leaves_nothing() {
    let Some(out) = check("scx_agent_load") else { return };
    assert_sigkill_then_restore_leaves_nothing(out);
}
