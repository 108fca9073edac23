//! Tier 3 on armv7 (docs/arm64.md): the cross-built joule (`make build-armhf`) in Debian's armhf
//! kernel (trixie's armmp-lpae) under qemu-system-arm (TCG, eight Cortex-A15s: the Odroid-XU4's
//! CPU count and big core), on a pure cgroup v2 root. One boot for every check. Debian builds
//! its armhf kernels without BTF, so the agent runs without eBPF there and says why; what is
//! checked is what works without it: the doctor's view, a class capped through cgroup v2 and
//! restored after SIGKILL, and energy-aware placement on the shipped XU4 model.

use super::kv;
use joule_testkit::vm::arm64::Arm;
use joule_testkit::vm::{shown, Vm, VmOutput};
use std::collections::BTreeMap;
use std::process::Command;
use std::sync::OnceLock;
use std::time::Instant;

/// Boot (~35 s with eight vCPUs under TCG) + every check.
const BOOT_TIMEOUT_S: u64 = 600;

const J: &str = "/joule/bin/joule";

fn checks() -> Vec<(&'static str, String)> {
    vec![
        ("arch", "uname -m; uname -r; nproc; test -e /sys/kernel/btf/vmlinux && echo btf || echo no-btf".to_string()),
        ("doctor", format!("{J} doctor --json")),
        ("cap", format!("bash scripts/vm/armhf-agent.sh {J} cap")),
        ("energy", format!("bash scripts/vm/armhf-agent.sh {J} energy")),
    ]
}

fn vm() -> Option<Vm> {
    Vm::new().armhf_guest().ready()
}

fn results() -> &'static BTreeMap<String, VmOutput> {
    static RESULTS: OnceLock<BTreeMap<String, VmOutput>> = OnceLock::new();
    RESULTS.get_or_init(|| {
        let vm = vm().expect("checked by the caller");
        let owned = checks();
        let checks: Vec<(&str, &str)> = owned.iter().map(|(n, c)| (*n, c.as_str())).collect();
        let t0 = Instant::now();
        let r = vm.batch(&checks, BOOT_TIMEOUT_S);
        println!("armhf guest: one boot and every check in {:.0} s of wall time", t0.elapsed().as_secs_f64());
        r
    })
}

fn check(name: &str) -> Option<&'static VmOutput> {
    vm()?;
    Some(shown(results(), name))
}

fn readelf(args: &[&str]) -> String {
    let out = Command::new("llvm-readelf-16").args(args).arg(Arm::Armhf.binary()).output().expect("run llvm-readelf-16");
    assert!(out.status.success(), "llvm-readelf-16 {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The artefact of the cross build: a 32-bit ARM EABI5 hard-float ELF whose libraries a stock
/// armhf Debian has, and whose glibc symbol versions bookworm's glibc 2.36 provides.
#[test]
#[ignore = "tier 3: vm"]
fn vm_armhf_build_is_an_armv7_hard_float_elf_that_links_only_stock_debian_libraries() {
    let bin = Arm::Armhf.binary();
    if !joule_core::testing::require(bin.exists(), &format!("{}; run make build-armhf", bin.display())) {
        return;
    }
    let h = std::fs::read(&bin).expect("read the binary");
    const EM_ARM: u16 = 40;
    const EF_ARM_EABI_VER5: u32 = 0x0500_0000;
    const EF_ARM_ABI_FLOAT_HARD: u32 = 0x400;
    assert_eq!(&h[..4], b"\x7fELF", "not an ELF file");
    assert_eq!((h[4], h[5]), (1, 1), "not a 32-bit little-endian ELF");
    assert_eq!(u16::from_le_bytes([h[18], h[19]]), EM_ARM, "e_machine is not ARM");
    let flags = u32::from_le_bytes([h[36], h[37], h[38], h[39]]);
    assert_eq!(flags & 0xff00_0000, EF_ARM_EABI_VER5, "not EABI 5: e_flags {flags:#x}");
    assert_ne!(flags & EF_ARM_ABI_FLOAT_HARD, 0, "not the hard-float ABI: e_flags {flags:#x}");
    let needed: Vec<String> = readelf(&["--needed-libs"])
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && *l != "]" && !l.starts_with("NeededLibraries"))
        .map(String::from)
        .collect();
    let stock = ["libc.so.6", "libm.so.6", "libgcc_s.so.1", "libz.so.1", "libelf.so.1", "ld-linux-armhf.so.3"];
    println!("{}: ARM EABI5 hard-float ELF (e_flags {flags:#x}), needs {needed:?}", bin.display());
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
fn vm_armhf_guest_is_an_armv7_kernel_with_eight_cpus_and_no_btf() {
    let Some(out) = check("arch") else { return };
    assert_eq!(out.status, 0, "{}", out.describe());
    let lines: Vec<&str> = out.stdout.lines().collect();
    println!("armhf guest: {lines:?}");
    assert_eq!(lines.first(), Some(&"armv7l"), "{}", out.describe());
    assert_eq!(lines.get(2), Some(&"8"), "not the XU4's eight CPUs: {}", out.describe());
    // Debian's armhf kernels are built without CONFIG_DEBUG_INFO_BTF; the checks below rely on
    // it (eBPF off with no_btf). A kernel that has it would make them wrong, so say so.
    assert_eq!(lines.get(3), Some(&"no-btf"), "this armhf kernel has BTF: the eBPF-off checks no longer describe it");
}

/// The doctor on armv7: the architecture, no BTF, and the backends that need no eBPF.
#[test]
#[ignore = "tier 3: vm"]
fn vm_armhf_doctor_names_the_architecture_and_each_mechanisms_backend_without_ebpf() {
    let Some(out) = check("doctor") else { return };
    assert_eq!(out.status, 0, "{}", out.describe());
    let v: serde_json::Value = serde_json::from_str(&out.stdout).unwrap_or_else(|e| panic!("not JSON ({e}):\n{}", out.describe()));
    let f = &v["facts"];
    assert_eq!(f["architecture"], "armv7l", "{f}");
    assert_eq!(f["btf"], false, "{f}");
    assert_eq!((f["cgroup"]["layout"].as_str(), f["cgroup"]["cpu_controller"].as_str()), (Some("unified"), Some("v2")), "{f}");
    let backends = v["backends"].as_array().expect("backends");
    let row = |m: &str| {
        backends.iter().find(|c| c["mechanism"].as_str().is_some_and(|x| x.starts_with(m))).cloned().unwrap_or_else(|| panic!("no {m}: {backends:?}"))
    };
    for (m, want) in [
        ("thermal stage", "user space"),
        ("class CPU", "cgroupfs v2"),
        ("RT classes", "SCHED_DEADLINE"),
        ("nap", "cgroup v2 cgroup.freeze"),
        ("elevate", "SCHED_FIFO"),
    ] {
        assert_eq!(row(m)["backend"].as_str(), Some(want), "{m}: {}", row(m));
    }
    let stage = row("thermal stage");
    assert!(stage["why"].as_str().is_some_and(|w| w.contains("no BTF")), "{stage}");
    println!("armhf: {}", backends.iter().map(|c| format!("{} = {}", c["mechanism"], c["backend"])).collect::<Vec<_>>().join("; "));
}

/// The shipped config on armv7: eBPF off with the reason, a class capped to 30 % of a CPU
/// through cgroup v2 and held there, then SIGKILL of the agent and its guardian and `joule
/// restore`: the loop back in its own cgroup, no class cgroup left.
#[test]
#[ignore = "tier 3: vm"]
fn vm_armhf_agent_shipped_config_caps_a_class_without_ebpf_and_restore_after_sigkill_leaves_nothing() {
    let Some(out) = check("cap") else { return };
    assert_eq!(out.status, 0, "armhf-agent.sh cap failed:\n{}", out.describe());
    let kv = kv(out);
    let off: serde_json::Value = serde_json::from_str(kv.get("ebpf_off").copied().unwrap_or("null")).unwrap_or_default();
    println!("armhf agent: eBPF off ({}): {}", off["reason"], off["why"]);
    assert_eq!(off["reason"], "no_btf", "{}", out.describe());
    assert!(!kv.contains_key("never_capped"), "{}", out.describe());
    assert_eq!(kv.get("capped_cgroup"), Some(&"/joule/capped"), "{}", out.describe());
    assert_eq!(kv.get("capped_cpu_max"), Some(&"30000/100000"), "{}", out.describe());
    let share: f64 = kv.get("capped_share").and_then(|s| s.parse().ok()).unwrap_or(f64::NAN);
    println!("the capped loop used {share:.3} of a CPU (cap 0.300)");
    assert!((0.15..=0.36).contains(&share), "the cap did not hold the loop to 30 % of a CPU: {share}\n{}", out.describe());
    let metrics: Vec<&str> = out.stdout.lines().filter_map(|l| l.strip_prefix("metric:")).collect();
    assert!(metrics.contains(&"joule_bpf_enabled{off_reason=\"no_btf\"} 0"), "{metrics:?}");
    assert!(out.stdout.lines().any(|l| l.starts_with("status:eBPF off (no_btf): ")), "{}", out.describe());
    assert!(!kv.contains_key("guardian_missing"), "the agent had no joule-guardian child:\n{}", out.describe());
    // Killed with its guardian, the agent undid nothing: the cap is there until restore.
    assert_eq!(kv.get("cpu_max_after_kill"), Some(&"30000/100000"), "{}", out.describe());
    assert_eq!(kv.get("restore_rc"), Some(&"0"), "{}", out.describe());
    assert_eq!(kv.get("cgroup_after_restore"), kv.get("cgroup_before"), "restore did not move the loop back:\n{}", out.describe());
    assert_eq!(kv.get("cpu_max_after_restore"), Some(&"gone"), "the class's cgroup outlived restore:\n{}", out.describe());
    assert_eq!(kv.get("cgroups_after_restore"), Some(&"0"), "joule restore left cgroups:\n{}", out.describe());
}

/// Energy-aware placement on the shipped Odroid-XU4 model (deploy/energy/odroid-xu4.toml, the
/// mainline device tree's numbers): a CPU app needing 20 % of an A15 at its top OPP costs least
/// on the A7 cluster (CPUs 0-3); one needing 90 % fits only the A15s (4-7). Restore after
/// SIGKILL gives both their whole machine back.
#[test]
#[ignore = "tier 3: vm"]
fn vm_armhf_energy_placement_on_the_xu4_model_pins_light_work_to_the_a7s_and_heavy_to_the_a15s() {
    let Some(out) = check("energy") else { return };
    assert_eq!(out.status, 0, "armhf-agent.sh energy failed:\n{}", out.describe());
    let kv = kv(out);
    println!("XU4 model: light -> {:?}, heavy -> {:?}", kv.get("light_cpus"), kv.get("heavy_cpus"));
    assert_eq!(kv.get("cpus_before"), Some(&"0-7 0-7"), "{}", out.describe());
    assert_eq!(kv.get("light_cpus"), Some(&"0-3"), "{}", out.describe());
    assert_eq!(kv.get("heavy_cpus"), Some(&"4-7"), "{}", out.describe());
    assert_eq!(kv.get("heavy_cpus_after_kill"), Some(&"4-7"), "a killed agent leaves the pin until restore:\n{}", out.describe());
    assert_eq!(kv.get("restore_rc"), Some(&"0"), "{}", out.describe());
    assert_eq!(kv.get("cpus_after_restore"), Some(&"0-7 0-7"), "{}", out.describe());
}
