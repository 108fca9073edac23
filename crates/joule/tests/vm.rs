//! Tier 3: joule on a sched_ext kernel (Debian's 7.x cloud kernel under qemu/TCG, see
//! docs/vm.md). All checks share one boot, made by the first test that runs; each test then
//! asserts on its own check's output. Run with `make test-vm`, or
//! `cargo test -p joule --test vm -- --ignored vm_ --test-threads=1`.

use joule_testkit::vm::{repo_root, Vm, VmOutput};
use std::collections::BTreeMap;
use std::sync::OnceLock;

/// Boot + all checks; TCG is slow, and `joule monitor` samples for a while.
const BOOT_TIMEOUT_S: u64 = 300;

/// The checks run in the shared boot, in order; `$JOULE_VM_OUT` is the results dir.
fn checks() -> Vec<(&'static str, String)> {
    let joule = repo_root().join("target/release/joule");
    vec![
        ("sched_ext", "uname -r && cat /sys/kernel/sched_ext/state".to_string()),
        ("monitor", format!("{} monitor --once --json", joule.display())),
        ("qos_v2", format!("bash {} {}", repo_root().join("scripts/vm/qos-v2.sh").display(), joule.display())),
        (
            "thermal",
            // The untouched zone (a triangle wave) sampled 1 s apart, then set by the test.
            format!(
                "z=/sys/class/thermal/thermal_zone0; cat $z/type; \
                 for i in 1 2 3; do cat $z/temp; sleep 1; done; \
                 for c in 70 85 off; do bash {set} $c && cat $z/temp; done",
                set = repo_root().join("scripts/vm/set-temp.sh").display()
            ),
        ),
    ]
}

/// The VM this machine can boot, or None after reporting what is missing (a skip, or a
/// failure under JOULE_TEST_STRICT=1).
fn vm() -> Option<Vm> {
    let vm = Vm::new().ready()?;
    let with_zone = Vm::new().with_thermal_zone();
    Some(if with_zone.missing().is_none() { with_zone } else { vm })
}

/// The shared boot's results, keyed by check name.
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
    let out = &results()[name];
    eprintln!("[{name}] {}", out.describe());
    Some(out)
}

#[test]
#[ignore = "tier 3: vm"]
fn vm_kernel_has_sched_ext() {
    let Some(out) = check("sched_ext") else { return };
    assert_eq!(out.status, 0, "no /sys/kernel/sched_ext/state in the guest:\n{}", out.describe());
    let mut lines = out.stdout.lines();
    let release = lines.next().unwrap_or_default();
    let state = lines.next().unwrap_or_default().trim();
    println!("guest kernel {release}: sched_ext state = {state}");
    assert!(["disabled", "enabling", "enabled", "disabling"].contains(&state), "unexpected sched_ext state {state:?}");
}

#[test]
#[ignore = "tier 3: vm"]
fn vm_monitor_once_json_has_every_section() {
    let bin = repo_root().join("target/release/joule");
    let built = bin.exists();
    if !joule_core::testing::require(built, "target/release/joule; run cargo build --release") {
        return;
    }
    let Some(out) = check("monitor") else { return };
    assert_eq!(out.status, 0, "joule monitor --once --json failed:\n{}", out.describe());
    let v: serde_json::Value = serde_json::from_str(out.stdout.trim()).unwrap_or_else(|e| panic!("not one JSON object ({e}):\n{}", out.stdout));
    let obj = v.as_object().unwrap_or_else(|| panic!("not a JSON object: {v}"));
    for key in ["cpu", "power", "thermal", "stage", "runq_latency"] {
        assert!(obj.contains_key(key), "monitor JSON lacks {key:?}: {v}");
    }
}

#[test]
#[ignore = "tier 3: vm"]
fn vm_acpi_thermal_zone_temperature_moves() {
    if Vm::new().with_thermal_zone().ready().is_none() {
        return;
    }
    let Some(out) = check("thermal") else { return };
    assert_eq!(out.status, 0, "no thermal_zone0 in the guest:\n{}", out.describe());
    let mut lines = out.stdout.lines();
    assert_eq!(lines.next(), Some("acpitz"), "zone type:\n{}", out.describe());
    let temps: Vec<i64> = lines.map(|l| l.trim().parse().expect("millidegrees")).collect();
    println!("thermal_zone0 temp (m°C): 3 samples 1 s apart, then set 70, 85, off: {temps:?}");
    assert_eq!(temps.len(), 6, "samples:\n{}", out.describe());
    let (free, set) = temps.split_at(3);
    assert!(free.windows(2).any(|w| w[0] != w[1]), "untouched zone never moved: {free:?}");
    assert!(free.iter().all(|t| (40_000..=60_000).contains(t)), "off the triangle: {free:?}");
    assert_eq!(&set[..2], &[70_000, 85_000], "the test's temperature did not arrive");
    assert!((40_000..=60_000).contains(&set[2]), "off did not restore the triangle: {set:?}");
}

#[test]
#[ignore = "tier 3: vm"]
fn vm_qos_class_on_cgroup_v2_lands_and_releases() {
    if !joule_core::testing::require(repo_root().join("target/release/joule").exists(), "target/release/joule; run cargo build --release") {
        return;
    }
    let Some(out) = check("qos_v2") else { return };
    assert_eq!(out.status, 0, "qos on cgroup v2 failed:\n{}", out.describe());
    let kv: BTreeMap<&str, &str> = out.stdout.lines().filter_map(|l| l.split_once('=')).collect();
    assert_eq!(kv.get("cpu.max"), Some(&"30000 100000"), "{}", out.describe());
    assert_eq!(kv.get("cpuset.cpus"), Some(&"1"));
    assert!(kv["procs"].split_whitespace().any(|p| p == kv["busy"]), "busy loop not moved: {}", out.describe());
    let status: serde_json::Value = serde_json::from_str(kv["status"]).unwrap();
    let achieved = status[0]["achieved_pct"].as_f64().unwrap();
    println!("cgroup v2 class capped at 30%: achieved {achieved:.1}% (guest clock under TCG)");
    // TCG makes absolute timing meaningless but quota and accounting share the guest's clock;
    // the band is wide on purpose: what is asserted is that the cap is enforced.
    assert!((20.0..=40.0).contains(&achieved), "achieved {achieved}%: {status}");
    assert_eq!(kv.get("left"), Some(&"no"), "release left /sys/fs/cgroup/joule");
}
