//! Tier 3: joule on the kernels operators run, Debian bookworm's 6.1 and trixie's 6.12 (cloud
//! flavour, x86_64, under qemu/TCG with this host's root; docs/vm.md, docs/platforms.md). One
//! boot per kernel runs every check: what `joule doctor` predicts, every eBPF program through
//! that kernel's verifier and the in-kernel checks of joule-bpf's root tier, and the agent with
//! the shipped config plus a capping class over a busy loop, SIGKILLed and restored. Neither
//! kernel has sched_ext, so the thermal scheduler is the cgroup path on both.
//! Run with `make test-vm`, or `cargo test -p joule --test vm_lts -- --ignored vm_lts --test-threads=1`.

use joule_testkit::vm::{repo_root, shown, Vm, VmOutput};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::OnceLock;

/// Boot + all checks: the eBPF checks take ~15 s under TCG, the agent's ~20 s.
const BOOT_TIMEOUT_S: u64 = 420;

/// joule-bpf's root test binary, as `make test` built it (the newest, should several builds
/// have left one).
fn bpf_tests() -> Option<PathBuf> {
    let deps = repo_root().join("target/release/deps");
    std::fs::read_dir(&deps)
        .ok()?
        .filter_map(|e| e.ok())
        .filter(|e| {
            let n = e.file_name().to_string_lossy().into_owned();
            n.starts_with("root_bpf-") && !n.contains('.')
        })
        .max_by_key(|e| e.metadata().and_then(|m| m.modified()).ok())
        .map(|e| e.path())
}

fn checks() -> Vec<(&'static str, String)> {
    let joule = repo_root().join("target/release/joule");
    let bpf = bpf_tests().map(|p| p.display().to_string()).unwrap_or_else(|| "false 'no root_bpf test binary in target/release/deps'".into());
    vec![
        ("kernel", "uname -r".to_string()),
        ("doctor", format!("{} doctor --json", joule.display())),
        ("bpf", format!("{bpf} --ignored --test-threads=1 2>&1")),
        ("agent", format!("bash {} {} {}", repo_root().join("scripts/vm/lts-agent.sh").display(), joule.display(), repo_root().display())),
    ]
}

/// This kernel's boot, or None after reporting what is missing.
fn results(suite: &'static str) -> Option<&'static BTreeMap<String, VmOutput>> {
    static BOOKWORM: OnceLock<BTreeMap<String, VmOutput>> = OnceLock::new();
    static TRIXIE: OnceLock<BTreeMap<String, VmOutput>> = OnceLock::new();
    let vm = Vm::new().lts_kernel(suite).ready()?;
    let cell = if suite == "bookworm" { &BOOKWORM } else { &TRIXIE };
    Some(cell.get_or_init(|| {
        let owned = checks();
        let checks: Vec<(&str, &str)> = owned.iter().map(|(n, c)| (*n, c.as_str())).collect();
        vm.batch(&checks, BOOT_TIMEOUT_S)
    }))
}

fn check(suite: &'static str, name: &str) -> Option<&'static VmOutput> {
    Some(shown(results(suite)?, name))
}

fn doctor_predicts_ebpf_the_cgroup_path_and_v2_backends(suite: &'static str, release_prefix: &str) {
    let Some(kernel) = check(suite, "kernel") else { return };
    assert!(kernel.stdout.trim().starts_with(release_prefix), "booted {} for {suite}", kernel.stdout.trim());
    let out = check(suite, "doctor").unwrap();
    assert_eq!(out.status, 0, "{}", out.describe());
    let v: serde_json::Value = serde_json::from_str(&out.stdout).unwrap_or_else(|e| panic!("not JSON ({e}):\n{}", out.describe()));
    assert_eq!(v["facts"]["kernel_release"].as_str(), Some(kernel.stdout.trim()), "{}", v["facts"]);
    assert_eq!(v["facts"]["btf"], true, "Debian's cloud kernels have BTF: {}", v["facts"]);
    assert!(v["facts"]["sched_ext"].is_null(), "Debian builds neither kernel with sched_ext: {}", v["facts"]);
    let backends = v["backends"].as_array().expect("backends");
    let backend = |m: &str| {
        let c = backends.iter().find(|c| c["mechanism"].as_str().is_some_and(|x| x.starts_with(m)));
        c.unwrap_or_else(|| panic!("no {m}: {backends:?}"))["backend"].as_str().unwrap_or_default().to_string()
    };
    for (m, want) in [
        ("thermal stage", "ebpf"),
        ("thermal scheduler", "cgroup"),
        ("class CPU", "cgroupfs v2"),
        ("RT classes", "SCHED_DEADLINE"),
        ("nap", "cgroup v2 cgroup.freeze"),
        ("elevate", "SCHED_FIFO"),
    ] {
        assert_eq!(backend(m), want, "{suite}: {m}");
    }
}

fn every_bpf_check_passes(suite: &'static str) {
    let Some(out) = check(suite, "bpf") else { return };
    assert_eq!(out.status, 0, "{suite}: joule-bpf's root checks failed:\n{}", out.describe());
    let summary = out.stdout.lines().find(|l| l.starts_with("test result:")).unwrap_or_else(|| panic!("no summary:\n{}", out.describe()));
    let passed: u32 = summary.split_whitespace().nth(3).and_then(|n| n.parse().ok()).unwrap_or(0);
    assert!(summary.contains(" 0 failed") && passed >= 16, "{suite}: {summary}");
    assert!(out.stdout.contains("root_every_bpf_program_loads_and_attaches_on_this_kernel ... ok"), "{}", out.describe());
}

fn agent_caps_the_class_with_ebpf_on_and_restore_leaves_nothing(suite: &'static str) {
    let Some(out) = check(suite, "agent") else { return };
    assert_eq!(out.status, 0, "{}", out.describe());
    let field =
        |k: &str| out.stdout.lines().find_map(|l| l.strip_prefix(&format!("{k}="))).unwrap_or_else(|| panic!("no {k}= in:\n{}", out.describe())).to_string();
    assert_eq!(field("cpu.max"), "30000 100000", "the class's quota landed:\n{}", out.describe());
    assert_eq!(field("member"), "yes", "the loop joined the class:\n{}", out.describe());
    // 30 % of one CPU: an uncapped loop gets most of one.
    let share: u32 = field("share_pct").parse().unwrap();
    assert!((15..=45).contains(&share), "{suite}: the capped loop got {share} % of a CPU");
    let status: serde_json::Value = serde_json::from_str(&field("status")).unwrap();
    assert!(status.get("ebpf_off").is_some_and(|v| v.is_null()), "{suite}: eBPF is on under the shipped `auto`: {status}");
    assert!(!out.stdout.contains("eBPF is off"), "{}", out.describe());
    assert_eq!(field("left"), "no", "after SIGKILL and restore:\n{}", out.describe());
}

#[test]
#[ignore = "tier 3: vm"]
fn vm_lts_bookworm_6_1_doctor_predicts_ebpf_and_the_cgroup_path() {
    doctor_predicts_ebpf_the_cgroup_path_and_v2_backends("bookworm", "6.1.");
}

#[test]
#[ignore = "tier 3: vm"]
fn vm_lts_bookworm_6_1_every_bpf_program_loads_and_the_in_kernel_checks_pass() {
    every_bpf_check_passes("bookworm");
}

#[test]
#[ignore = "tier 3: vm"]
fn vm_lts_bookworm_6_1_agent_with_the_shipped_config_caps_a_class_and_restore_leaves_nothing() {
    agent_caps_the_class_with_ebpf_on_and_restore_leaves_nothing("bookworm");
}

#[test]
#[ignore = "tier 3: vm"]
fn vm_lts_trixie_6_12_doctor_predicts_ebpf_and_the_cgroup_path() {
    doctor_predicts_ebpf_the_cgroup_path_and_v2_backends("trixie", "6.12.");
}

#[test]
#[ignore = "tier 3: vm"]
fn vm_lts_trixie_6_12_every_bpf_program_loads_and_the_in_kernel_checks_pass() {
    every_bpf_check_passes("trixie");
}

#[test]
#[ignore = "tier 3: vm"]
fn vm_lts_trixie_6_12_agent_with_the_shipped_config_caps_a_class_and_restore_leaves_nothing() {
    agent_caps_the_class_with_ebpf_on_and_restore_leaves_nothing("trixie");
}
