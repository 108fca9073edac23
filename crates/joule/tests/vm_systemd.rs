//! Tier 3, the systemd guest (issue 20, docs/systemd.md): a Debian root booted with systemd as
//! PID 1 on pure cgroup v2 and the stock nginx.service — the kind of host users run. All checks
//! share one boot (~80 s under TCG), made by the first test that runs. Run with
//! `cargo test -p joule --test vm_systemd -- --ignored vm_ --test-threads=1`.

use joule_testkit::vm::{shown, Vm, VmOutput};
use std::collections::BTreeMap;
use std::sync::OnceLock;

const BOOT_TIMEOUT_S: u64 = 600;

/// The checks, in order; the joule binary is /usr/local/bin/joule in the guest.
const CHECKS: &[(&str, &str)] = &[
    ("doctor", "joule doctor --json"),
    ("nginx", "systemctl is-active nginx.service; systemctl show -p ControlGroup,FreezerState,CPUQuotaPerSecUSec,AllowedCPUs nginx.service"),
    // The shipped unit, as a user installs it (docs/deploy.md).
    (
        "install",
        concat!(
            "cat >/etc/systemd/system/joule.service <<'JOULE_UNIT'\n",
            include_str!("../../../deploy/joule.service"),
            "JOULE_UNIT\nsystemctl daemon-reload"
        ),
    ),
    // Last: it runs the agent twice against nginx.service.
    ("units", include_str!("../../../scripts/vm/systemd-units.sh")),
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
    Some(shown(results(), name))
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
    assert_eq!(cpu["backend"], "systemd D-Bus + cgroupfs v2", "{cpu}");
    assert_eq!(backend("RT classes")["backend"], "none");
    assert_eq!(backend("nap")["backend"], "cgroup v2 cgroup.freeze");
    println!(
        "systemd guest: {}",
        v["backends"].as_array().unwrap().iter().map(|c| format!("{} = {}", c["mechanism"], c["backend"])).collect::<Vec<_>>().join("; ")
    );
}

/// `key=value` lines of a check.
fn kv(out: &VmOutput) -> BTreeMap<&str, &str> {
    out.stdout.lines().filter_map(|l| l.split_once('=')).collect()
}

#[test]
#[ignore = "tier 3: vm"]
fn vm_systemd_unit_class_reaches_the_unit_through_systemd_and_restore_after_sigkill_leaves_it_as_found() {
    let Some(out) = check("units") else { return };
    let kv = kv(out);
    let get = |k: &str| kv.get(k).copied().unwrap_or_else(|| panic!("no {k}= in\n{}", out.describe()));
    println!("found: {}\napplied: {}\nafter SIGKILL of joule.service + its ExecStopPost: {}", get("found"), get("applied_props"), get("restored"));
    assert_eq!(get("applied"), "yes", "the quota never reached nginx.service:\n{}", out.describe());
    assert!(get("applied_props").contains("AllowedCPUs=1"), "{}", get("applied_props"));
    // The unit keeps its processes: systemd counts them, they live in its cgroup, and joule
    // made no cgroup of its own at the root.
    assert_eq!(get("tasks_applied"), get("tasks_found"), "{}", out.describe());
    assert!(get("procs_in_unit").parse::<u32>().unwrap() >= 2, "{}", out.describe());
    assert_eq!(get("nginx_cgroups").trim(), "/system.slice/nginx.service", "{}", out.describe());
    assert_eq!(get("joule_cgroups_at_root"), "0", "{}", out.describe());
    assert_eq!(get("restored"), get("found"), "joule.service's ExecStopPost restore did not leave the unit as found:\n{}", out.describe());
    assert_eq!(get("stop_post_result"), "status=0", "the shipped unit's ExecStopPost failed:\n{}", out.describe());
}

#[test]
#[ignore = "tier 3: vm"]
fn vm_systemd_a_set_property_by_hand_is_reported_as_drift_and_the_administrator_wins() {
    let Some(out) = check("units") else { return };
    let kv = kv(out);
    let get = |k: &str| kv.get(k).copied().unwrap_or_else(|| panic!("no {k}= in\n{}", out.describe()));
    assert_eq!(get("applied2"), "yes", "{}", out.describe());
    assert!(get("drift_events").parse::<u32>().unwrap() >= 1, "no unit_drift event:\n{}", out.describe());
    assert!(
        get("drift_metric").contains(r#"property="CPUQuotaPerSecUSec""#) && get("drift_metric").contains(r#"unit="nginx.service""#),
        "{}",
        get("drift_metric")
    );
    assert_eq!(get("agent_rc"), "0", "{}", out.describe());
    // The agent's own stop undid what it set, but not the administrator's 50 %.
    assert!(get("after_stop").contains("CPUQuotaPerSecUSec=500ms") && get("after_stop").contains("AllowedCPUs= "), "{}", get("after_stop"));
}
