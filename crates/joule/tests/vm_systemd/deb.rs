//! Tier 3, the Debian package in the systemd guest (docs/deploy.md): `make deb`'s
//! `target/deb/joule_<version>_amd64.deb` installed, used, started and purged as an operator
//! does, with systemd as PID 1 (`scripts/vm/deb-package.sh`). The first check of the systemd
//! guest's one boot: it runs before the repo binary is used, finds the package's /usr/bin/joule
//! first on its PATH, and its purge leaves nothing for the checks after it. Run `make deb`
//! first (`make test-vm` does).

use joule_testkit::vm::VmOutput;
use std::collections::BTreeMap;

/// The check's `key=value` lines, and its whole output for a failing assertion.
struct Deb {
    out: &'static VmOutput,
    kv: BTreeMap<&'static str, &'static str>,
}

impl Deb {
    fn get(&self, k: &str) -> &'static str {
        self.kv.get(k).copied().unwrap_or_else(|| panic!("no {k}= in\n{}", self.out.describe()))
    }
}

fn deb() -> Option<Deb> {
    let out = super::check("deb")?;
    Some(Deb { out, kv: out.stdout.lines().filter_map(|l| l.split_once('=')).collect() })
}

#[test]
#[ignore = "tier 3: vm"]
fn vm_deb_installs_enabling_nothing_and_reads_etc_joule() {
    let Some(d) = deb() else { return };
    let out = d.out;
    assert_eq!(d.get("install_status"), "0", "{}", out.describe());
    assert_eq!(d.get("joule_path"), "/usr/bin/joule");
    assert_eq!((d.get("enabled_after_install"), d.get("active_after_install")), ("disabled", "inactive"), "installing must start nothing");
    assert_eq!(d.get("procs_after_install"), "0");
    assert_eq!(d.get("run_joule_after_install"), "absent");
    assert_eq!(d.get("doctor_config"), "config: /etc/joule/joule.toml", "{}", out.describe());
    assert_eq!(d.get("doctor_json_config"), "/etc/joule/joule.toml");
    assert_eq!(d.get("check_config_status"), "0", "{}", out.describe());
    assert!(d.get("check_config").starts_with("/etc/joule/joule.toml: valid"), "{}", d.get("check_config"));
    assert!(d.get("conffiles").trim().starts_with("/etc/joule/joule.toml "), "{}", d.get("conffiles"));
}

#[test]
#[ignore = "tier 3: vm"]
fn vm_deb_ships_man_pages_and_completions() {
    let Some(d) = deb() else { return };
    for page in ["joule", "joule-agent"] {
        let v = d.get(&format!("man_{page}"));
        assert!(v.starts_with("gzip ok, .TH lines 1, name: "), "{page}: {v}");
        assert!(v.contains(&page.replace('-', "\\-")), "{page}: {v}");
        // The guest has man-db (scripts/vm/systemd-guest.sh setup): `man PAGE` renders it.
        let renderer = d.get(&format!("man_{page}_renderer"));
        println!("{page}(1): {v}; rendered by: {renderer}");
        assert_eq!(renderer, "man", "the guest has no man-db, so `man {page}` was not tried:\n{}", d.out.describe());
        assert!(d.get(&format!("man_{page}_rendered_lines")).parse::<u32>().unwrap() > 5, "{}", d.out.describe());
        let name = d.get(&format!("man_{page}_rendered_name"));
        assert!(name.starts_with(&format!("{page} ")), "`man {page}`'s NAME: {name}");
    }
    for f in ["joule", "_joule", "joule.fish"] {
        assert_eq!(d.get(&format!("completion_{f}")), "present", "{f}");
    }
    assert!(d.get("bash_complete").contains("joule"), "{}", d.get("bash_complete"));
}

#[test]
#[ignore = "tier 3: vm"]
fn vm_deb_enable_now_starts_the_agent_and_metrics_answer() {
    let Some(d) = deb() else { return };
    let out = d.out;
    assert_eq!((d.get("enable_status"), d.get("enabled"), d.get("active")), ("0", "enabled", "active"), "{}", out.describe());
    assert_eq!(d.get("main_pid_comm"), "joule");
    assert_eq!(d.get("cgroup"), "/system.slice/joule.service");
    assert!(d.get("metrics_lines").parse::<u32>().unwrap() > 10, "/metrics did not answer:\n{}", out.describe());
    assert_eq!(d.get("active_again"), "active", "{}", out.describe());
}

#[test]
#[ignore = "tier 3: vm"]
fn vm_deb_unit_does_not_restart_loop_on_a_config_error() {
    let Some(d) = deb() else { return };
    // The agent refuses a config others can write (exit 2): RestartPreventExitStatus=2.
    let refused = d.get("refused_state");
    println!("agent refused its config: {refused}\ncheck-config refused it: {}", d.get("invalid_state"));
    assert!(refused.contains("ActiveState=failed") && refused.contains("NRestarts=0") && refused.contains("ExecMainStatus=2"), "{}", d.out.describe());
    // check-config (ExecStartPre) refuses it: StartLimitBurst=3 starts in StartLimitIntervalSec,
    // then failed for good (the check waits for systemd to give up, at most 90 s: without the
    // limit, RestartSec=5 would have made many more starts).
    let invalid = d.get("invalid_state");
    println!("starts with an invalid config: {}", d.get("invalid_starts"));
    assert!(invalid.contains("ActiveState=failed"), "{}", d.out.describe());
    assert!(d.get("invalid_starts").parse::<u32>().unwrap() <= 3, "{}", d.out.describe());
}

#[test]
#[ignore = "tier 3: vm"]
fn vm_deb_purge_stops_the_agent_and_leaves_nothing() {
    let Some(d) = deb() else { return };
    let out = d.out;
    assert_eq!(d.get("purge_status"), "0", "{}", out.describe());
    println!("{} package files, left after purge: {}", d.get("package_files_total"), d.get("package_files_left"));
    assert_eq!(d.get("package_files_left"), "none", "{}", out.describe());
    assert_eq!(d.get("unit_left"), "0 ", "{}", out.describe());
    assert_eq!(d.get("unit_state"), "LoadState=not-found ActiveState=inactive", "{}", out.describe());
    assert_eq!(d.get("cgroups_left"), "", "{}", out.describe());
    assert_eq!((d.get("run_joule"), d.get("etc_joule")), ("absent", "absent"), "{}", out.describe());
    assert_eq!(d.get("procs_left"), "0");
    assert_eq!(d.get("dsh_state_left"), "", "{}", out.describe());
}
