//! Tier 3, the systemd guest (issue 20, docs/systemd.md): a Debian root booted with systemd as
//! PID 1 on pure cgroup v2 and the stock nginx.service — the kind of host users run. All checks
//! share one boot (~80 s under TCG), made by the first test that runs. Run with
//! `cargo test -p joule --test vm_systemd -- --ignored vm_ --test-threads=1`.

use joule_testkit::vm::{Vm, VmOutput};
use std::collections::BTreeMap;
use std::sync::OnceLock;

const BOOT_TIMEOUT_S: u64 = 600;

/// The checks, in order; the joule binary is /usr/local/bin/joule in the guest.
const CHECKS: &[(&str, &str)] = &[
    ("doctor", "joule doctor --json"),
    ("nginx", "systemctl is-active nginx.service; systemctl show -p ControlGroup,FreezerState,CPUQuotaPerSecUSec,AllowedCPUs nginx.service"),
];

fn vm() -> Option<Vm> {
    Vm::new().systemd_guest().ready()
}

fn results() -> &'static BTreeMap<String, VmOutput> {
    static RESULTS: OnceLock<BTreeMap<String, VmOutput>> = OnceLock::new();
    RESULTS.get_or_init(|| vm().expect("checked by the caller").batch(CHECKS, BOOT_TIMEOUT_S))
}

fn check(name: &str) -> Option<&'static VmOutput> {
    vm()?;
    let out = &results()[name];
    eprintln!("[{name}] {}", out.describe());
    Some(out)
}

#[test]
#[ignore = "tier 3: vm"]
fn vm_systemd_guest_runs_nginx_in_its_unit_on_pure_v2() {
    let Some(out) = check("nginx") else { return };
    assert_eq!(out.status, 0, "{}", out.describe());
    assert!(out.stdout.starts_with("active"), "{}", out.describe());
    assert!(out.stdout.contains("ControlGroup=/system.slice/nginx.service"), "{}", out.describe());
    assert!(out.stdout.contains("FreezerState=running"), "{}", out.describe());
}

#[test]
#[ignore = "tier 3: vm"]
fn vm_systemd_guest_doctor_names_systemd_as_the_trees_owner_and_the_v2_backends() {
    let Some(out) = check("doctor") else { return };
    assert_eq!(out.status, 0, "{}", out.describe());
    let v: serde_json::Value = serde_json::from_str(&out.stdout).unwrap_or_else(|e| panic!("not JSON ({e}):\n{}", out.describe()));
    let f = &v["facts"];
    assert_eq!(f["init"], "systemd", "{f}");
    assert_eq!(f["cgroup"]["managers"], serde_json::json!(["systemd"]), "{f}");
    assert_eq!((f["cgroup"]["layout"].as_str(), f["cgroup"]["rt_group_sched"].as_bool()), (Some("unified"), Some(false)), "{f}");
    let backend = |m: &str| v["backends"].as_array().unwrap().iter().find(|c| c["mechanism"].as_str().is_some_and(|x| x.starts_with(m))).cloned().unwrap();
    let cpu = backend("class CPU");
    assert!(cpu["warning"].as_str().is_some_and(|w| w.contains("systemd is PID 1")), "{cpu}");
    assert_eq!(backend("RT classes")["backend"], "none");
    assert_eq!(backend("nap")["backend"], "cgroup v2 cgroup.freeze");
    println!(
        "systemd guest: {}",
        v["backends"].as_array().unwrap().iter().map(|c| format!("{} = {}", c["mechanism"], c["backend"])).collect::<Vec<_>>().join("; ")
    );
}
