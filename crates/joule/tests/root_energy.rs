//! Tier 2 (root, this kernel): the placement actuator of `[energy]` pins a real class's threads
//! to the CPUs the policy decided, and `joule restore` after a SIGKILLed agent puts their
//! affinity back. The model is inline (two one-clock "domains" over this machine's CPUs, a
//! LITTLE one too small for the class's target), so the decision is known: the big domain.

use joule_core::testing::{is_root, require};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const JOULE: &str = env!("CARGO_BIN_EXE_joule");

/// Kills and reaps a child on every exit path.
struct Reap(Child);

impl Drop for Reap {
    fn drop(&mut self) {
        joule_testkit::kill_agent(&mut self.0);
    }
}

fn allowed(pid: u32) -> Vec<usize> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let l = s.lines().find_map(|l| l.strip_prefix("Cpus_allowed_list:")).unwrap();
    joule_qos::cpulist::parse(l.trim()).unwrap()
}

fn wait_for(what: &str, mut ok: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        if ok() {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("timed out waiting for {what}");
}

#[test]
#[ignore = "root: pins a real process and kills the agent"]
fn root_energy_placement_pins_a_class_and_restore_after_sigkill_puts_affinity_back() {
    require(is_root(), "root (sched_setaffinity on another process)");
    let online = joule_qos::cpulist::parse(std::fs::read_to_string("/sys/devices/system/cpu/online").unwrap().trim()).unwrap();
    require(online.len() >= 2, "at least 2 online CPUs");
    let app = Reap(Command::new("sleep").arg("60").stdin(Stdio::null()).spawn().unwrap());
    let pid = app.0.id();
    let before = allowed(pid);
    let (little, big) = (online[0], joule_qos::cpulist::format(&online[1..]));
    let dir = tempfile::tempdir().unwrap();
    let journal = dir.path().join("journal");
    let cfg = format!(
        r#"[agent]
period_ms = 100
metrics_addr = "127.0.0.1:0"
journal_dir = "{j}"
event_log = "{e}"
status_interval_ms = 0
apply_classes = false
[telemetry]
bpf = false
[[class]]
name = "app"
match = {{ pid = [{pid}], uid = [0] }}
[energy]
enabled = true
model = "inline"
[[energy.domain]]
name = "little"
cpus = "{little}"
capacity = 256.0
opps = [{{ frequency_khz = 1000000, power_mw = 100.0 }}]
[[energy.domain]]
name = "big"
cpus = "{big}"
capacity = 1024.0
opps = [{{ frequency_khz = 2000000, power_mw = 1000.0 }}]
[[energy.target]]
class = "app"
perf_fraction = 0.5
"#,
        j = journal.display(),
        e = dir.path().join("events.jsonl").display(),
    );
    std::fs::write(dir.path().join("joule.toml"), cfg).unwrap();
    let mut agent = Reap(Command::new(JOULE).args(["agent", "--config"]).arg(dir.path().join("joule.toml")).stdin(Stdio::null()).spawn().unwrap());
    let want = online[1..].to_vec();
    wait_for("the class's thread pinned to the big domain", || allowed(pid) == want);
    assert_ne!(before, want, "the test needs a decision that changes the affinity");

    // SIGKILL: the agent cannot undo anything itself; the pin stays until restore.
    joule_testkit::sigkill_agent_and_guardian(&mut agent.0);
    assert_eq!(allowed(pid), want, "a killed agent leaves the pin (until restore)");
    let out = Command::new(JOULE).args(["restore", "--journal-dir"]).arg(&journal).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(allowed(pid), before, "restore puts the affinity back");
    let rest = std::fs::read_to_string(journal.join("undo.jsonl")).unwrap_or_default();
    assert!(rest.trim().is_empty(), "journal emptied: {rest}");
}
