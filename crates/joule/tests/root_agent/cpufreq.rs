//! Tier 2 (root: the cpufreq actuator runs only as root): the agent never fights another tool
//! over a CPU's frequency limit (issue 34). On a fixture sysfs (this machine has no cpufreq)
//! with a hot zone, the agent caps both CPUs; "another tool" rewrites cpu0's limit mid-run;
//! the agent reports drift once, never writes cpu0 again as the stage falls and rises, and its
//! journal no longer holds cpu0's record, so `joule restore` leaves the other tool's value.

use super::{http_get, is_root, require, Agent, JOULE};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Writes `value` to `path` whole (rename), as neither a half-written number nor a torn read.
fn put(path: &Path, value: &str) {
    let tmp = path.with_extension("new");
    std::fs::write(&tmp, format!("{value}\n")).unwrap();
    std::fs::rename(tmp, path).unwrap();
}

/// `<root>/devices/system/cpu/cpuN/cpufreq` of two CPUs (800 MHz–3 GHz, uncapped) and one
/// `x86_pkg_temp` zone at `celsius`. Every limit the agent writes has 7 digits: it writes a knob in
/// place, as sysfs wants, and a regular file is not truncated by that.
fn fixture(root: &Path, celsius: u32) {
    for cpu in 0..2 {
        let d = root.join(format!("devices/system/cpu/cpu{cpu}/cpufreq"));
        std::fs::create_dir_all(&d).unwrap();
        for (f, v) in [
            ("cpuinfo_min_freq", "800000"),
            ("cpuinfo_max_freq", "3000000"),
            ("scaling_min_freq", "800000"),
            ("scaling_max_freq", "3000000"),
            ("scaling_cur_freq", "3000000"),
        ] {
            put(&d.join(f), v);
        }
    }
    let z = root.join("class/thermal/thermal_zone0");
    std::fs::create_dir_all(&z).unwrap();
    put(&z.join("type"), "x86_pkg_temp");
    set_temp(root, celsius);
}

fn set_temp(root: &Path, celsius: u32) {
    put(&root.join("class/thermal/thermal_zone0/temp"), &(celsius * 1000).to_string());
}

fn knob(root: &Path, cpu: u32) -> String {
    std::fs::read_to_string(root.join(format!("devices/system/cpu/cpu{cpu}/cpufreq/scaling_max_freq"))).unwrap().trim().to_string()
}

fn wait_knob(root: &Path, cpu: u32, want: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while knob(root, cpu) != want {
        assert!(Instant::now() < deadline, "cpu{cpu} holds {}, never {want}", knob(root, cpu));
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// An agent without eBPF (the stage from the fixture zone alone, computed in user space; the
/// host's own zones would reach an in-kernel stage through the tracepoint) on `sysfs` with
/// cpufreq caps on, explicit stage rows (the 70 % cap at stage 3) and low thresholds.
fn start(sysfs: &Path) -> Agent {
    let dir = tempfile::tempdir().unwrap();
    let cfg = format!(
        "[agent]\nperiod_ms = 100\nmetrics_addr = \"127.0.0.1:0\"\njournal_dir = \"{j}\"\nevent_log = \"{e}\"\nstatus_interval_ms = 0\n\n\
         [telemetry]\nsysfs_root = \"{s}\"\n\n\
         [thermal]\nstage_thresholds_celsius = [40.0, 50.0, 60.0]\ncpufreq_caps = true\n{rows}",
        j = dir.path().join("journal").display(),
        e = dir.path().join("events.jsonl").display(),
        s = sysfs.display(),
        rows = [(4, 5000, 100.0, 100.0), (3, 4000, 60.0, 100.0), (2, 3000, 35.0, 85.0), (1, 2000, 15.0, 70.0)]
            .map(|(q, s, be, f)| format!("[[thermal.stage]]\nqueues = {q}\nslice_us = {s}\nbest_effort_cpu_pct = {be:.1}\ncpufreq_max_pct = {f:.1}\n"))
            .concat()
    );
    std::fs::write(dir.path().join("joule.toml"), cfg).unwrap();
    let child = Command::new(JOULE).args(["agent", "--no-bpf", "--config"]).arg(dir.path().join("joule.toml")).stdin(Stdio::null()).spawn().unwrap();
    let pin_dir = dir.path().join("no-pins");
    Agent { child, dir, pin_dir }
}

#[test]
#[ignore = "tier 2: root"]
fn root_cpufreq_limit_another_tool_rewrote_is_drift_reported_once_never_overwritten_and_not_restored() {
    if !require(is_root(), "root (the agent's cpufreq actuator runs only as root)") {
        return;
    }
    let sysfs = tempfile::tempdir().unwrap();
    fixture(sysfs.path(), 95);
    let mut agent = start(sysfs.path());
    let addr = agent.metrics_addr();
    wait_knob(sysfs.path(), 0, "2100000"); // stage 3: 70 % of 3 GHz
    wait_knob(sysfs.path(), 1, "2100000");

    put(&sysfs.path().join("devices/system/cpu/cpu0/cpufreq/scaling_max_freq"), "2500000"); // thermald, tuned, cpupower...
    let drift = agent.wait_event(0, "cpufreq_drift");
    assert_eq!(drift["cpu"], 0, "{drift}");
    assert_eq!((drift["joule_khz"].as_u64(), drift["found_khz"].as_u64()), (Some(2_100_000), Some(2_500_000)), "{drift}");

    // Cool (stage 0 lifts the caps), then hot again: cpu1 follows, cpu0 stays the other tool's.
    set_temp(sysfs.path(), 20);
    wait_knob(sysfs.path(), 1, "3000000");
    set_temp(sysfs.path(), 95);
    wait_knob(sysfs.path(), 1, "2100000");
    std::thread::sleep(Duration::from_millis(1_500)); // more than a drift check
    assert_eq!(knob(sysfs.path(), 0), "2500000", "the agent overwrote the other tool's limit");
    let drifts = agent.events().into_iter().filter(|e| e["event"] == "cpufreq_drift").count();
    assert_eq!(drifts, 1, "reported once");
    let (_, metrics) = http_get(&addr, "/metrics", None);
    assert!(metrics.lines().any(|l| l == "joule_cpufreq_drift_total{cpu=\"0\"} 1"), "{metrics}");
    assert!(metrics.lines().any(|l| l == "joule_cpufreq_yielded_cpus 1"), "{metrics}");

    // The journal holds cpu1's record only; restore after a SIGKILL never reaches cpu0. (On a
    // fixture tree, which is no sysfs, restore skips cpu1's record as one joule cannot have
    // written, and names it: that it names cpu1's alone shows what the journal held.)
    let records = joule_core::journal::entries(&agent.journal_dir()).unwrap();
    let knobs: Vec<String> = records.iter().filter(|e| e.owner == "cpufreq").map(|e| format!("{:?}", e.undo)).collect();
    assert!(knobs.len() == 1 && knobs[0].contains("cpu1/cpufreq/scaling_max_freq"), "{knobs:?}");
    joule_testkit::sigkill_agent_and_guardian(&mut agent.child);
    let out = Command::new(JOULE).args(["restore", "--journal-dir"]).arg(agent.journal_dir()).output().unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{said}{}", String::from_utf8_lossy(&out.stderr));
    assert!(said.contains("cpu1/cpufreq/scaling_max_freq") && !said.contains("cpu0/"), "{said}");
    assert_eq!(knob(sysfs.path(), 0), "2500000", "restore overwrote the other tool's limit");
}
