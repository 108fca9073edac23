//! Tier 2 (root, this kernel): the agent end to end — eBPF loaded, metrics parse as Prometheus
//! text, the monitor's JSON carries real eBPF run-queue latency, a SIGKILLed agent leaves
//! nothing behind once `joule restore` runs, and the next agent undoes what a killed one left
//! before it makes its own changes.

use joule_core::testing::{is_root, require};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const JOULE: &str = env!("CARGO_BIN_EXE_joule");

struct Agent {
    child: Child,
    dir: tempfile::TempDir,
    pin_dir: PathBuf,
}

impl Agent {
    fn start(extra_cfg: &str) -> Agent {
        let dir = tempfile::tempdir().unwrap();
        let pin_dir = PathBuf::from(format!("/sys/fs/bpf/joule-test-{}", std::process::id()));
        let cfg = format!(
            "[agent]\nperiod_ms = 100\nmetrics_addr = \"127.0.0.1:0\"\njournal_dir = \"{j}\"\nevent_log = \"{e}\"\nstatus_interval_ms = 0\n\n[telemetry]\nbpf_pin_dir = \"{p}\"\n{extra_cfg}",
            j = dir.path().join("journal").display(),
            e = dir.path().join("events.jsonl").display(),
            p = pin_dir.display()
        );
        std::fs::write(dir.path().join("joule.toml"), cfg).unwrap();
        let child = Self::spawn(dir.path());
        Agent { child, dir, pin_dir }
    }

    fn spawn(dir: &Path) -> Child {
        Command::new(JOULE).args(["agent", "--config"]).arg(dir.join("joule.toml")).stdin(Stdio::null()).spawn().unwrap()
    }

    /// Starts a new agent with the same config, journal, event log and pin dir; the previous
    /// one must be gone.
    fn restart(&mut self) {
        self.child = Self::spawn(self.dir.path());
    }

    /// The event log so far, one JSON value a line.
    fn events(&self) -> Vec<serde_json::Value> {
        let log = std::fs::read_to_string(self.dir.path().join("events.jsonl")).unwrap_or_default();
        log.lines().map(|l| serde_json::from_str(l).unwrap()).collect()
    }

    fn journal_dir(&self) -> PathBuf {
        self.dir.path().join("journal")
    }

    /// Waits for the agent's "listening" event and returns the metrics URL's host:port.
    fn metrics_addr(&self) -> String {
        let v = self.wait_event(0, "listening");
        let url = v["metrics"].as_str().unwrap();
        url.trim_start_matches("http://").trim_end_matches("/metrics").to_string()
    }

    /// Waits for an event called `name` among the events from number `from` on.
    fn wait_event(&self, from: usize, name: &str) -> serde_json::Value {
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if let Some(v) = self.events().into_iter().skip(from).find(|v| v["event"] == name) {
                return v;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("agent never logged a {name} event");
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        // Whatever the test did, leave nothing behind.
        let _ = Command::new(JOULE).args(["restore", "--journal-dir"]).arg(self.journal_dir()).output();
        let _ = std::fs::remove_dir_all(&self.pin_dir);
    }
}

fn http_get(addr: &str, path: &str) -> String {
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    write!(s, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").unwrap();
    let mut body = String::new();
    s.read_to_string(&mut body).unwrap();
    let (head, body) = body.split_once("\r\n\r\n").unwrap();
    assert!(head.starts_with("HTTP/1.") && head.contains(" 200 "), "{head}");
    body.to_string()
}

#[test]
#[ignore = "tier 2: root"]
fn root_agent_metrics_parse_as_prometheus_text_with_units_and_help() {
    if !require(is_root(), "root (the agent loads eBPF)") {
        return;
    }
    let agent = Agent::start("");
    let addr = agent.metrics_addr();
    std::thread::sleep(Duration::from_millis(1500));
    let text = http_get(&addr, "/metrics");
    let lines: Vec<String> = text.lines().map(str::to_string).collect();
    let scrape = prometheus_parse::Scrape::parse(lines.clone().into_iter().map(Ok)).expect("valid Prometheus text");
    assert!(!scrape.samples.is_empty());
    for s in &scrape.samples {
        assert!(s.metric.starts_with("joule_"), "{}", s.metric);
    }
    for name in ["joule_cpu_utilization_ratio", "joule_power_watts", "joule_thermal_stage", "joule_runq_latency_seconds"] {
        assert!(lines.iter().any(|l| l.starts_with(&format!("# HELP {name} "))), "no HELP for {name}");
        assert!(lines.iter().any(|l| l.starts_with(&format!("# TYPE {name} "))), "no TYPE for {name}");
        assert!(scrape.samples.iter().any(|s| s.metric == name), "no sample of {name}");
    }
    let stage = scrape.samples.iter().find(|s| s.metric == "joule_thermal_stage").unwrap();
    assert_eq!(stage.labels.get("computed_by"), Some("ebpf"), "stage not computed in the kernel");
    let rq = scrape.samples.iter().filter(|s| s.metric == "joule_runq_latency_seconds").count();
    assert!(rq > 0, "no run-queue latency samples");
}

#[test]
#[ignore = "tier 2: root"]
fn root_monitor_once_json_has_ebpf_runq_latency_and_labelled_values() {
    if !require(is_root(), "root (the monitor loads eBPF)") {
        return;
    }
    // Some wake-ups to measure: a thread that sleeps 1 ms in a loop while the monitor samples.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let s2 = stop.clone();
    let waker = std::thread::spawn(move || {
        while !s2.load(std::sync::atomic::Ordering::Relaxed) {
            std::thread::sleep(Duration::from_millis(1));
        }
    });
    let out = Command::new(JOULE).args(["monitor", "--once", "--json", "--interval-ms", "500"]).output().unwrap();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    waker.join().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let rq = v["runq_latency"].as_array().unwrap();
    assert!(!rq.is_empty(), "no run-queue latency: {v}");
    for r in rq {
        assert_eq!(r["source"], "ebpf");
        let (p50, p99) = (r["p50_us"].as_f64().unwrap(), r["p99_us"].as_f64().unwrap());
        assert!(p50 >= 0.0 && p99 >= p50, "{r}");
    }
    assert_eq!(v["stage"]["computed_by"], "ebpf");
    for t in v["task_wait"].as_array().unwrap() {
        assert_eq!(t["source"], "ebpf", "task wait should come from the kernel's accounting when BPF is loaded: {t}");
    }
    let no_sensor = v["thermal"]["zones"].as_array().unwrap().is_empty();
    if no_sensor {
        assert_eq!(v["thermal"]["model"]["source"], "model");
        assert_eq!(v["stage"]["temp_source"], "model");
    }
}

fn wait_for(p: &Path, present: bool) -> bool {
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        if p.exists() == present {
            return true;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    false
}

#[test]
#[ignore = "tier 2: root"]
fn root_sigkilled_agent_then_restore_leaves_nothing_behind() {
    if !require(is_root(), "root (the agent pins BPF maps)") {
        return;
    }
    let mut agent = Agent::start("");
    assert!(wait_for(&agent.pin_dir, true), "agent never pinned its stage map at {}", agent.pin_dir.display());
    agent.child.kill().unwrap(); // SIGKILL: no chance to clean up
    agent.child.wait().unwrap();
    assert!(agent.pin_dir.exists(), "pins vanished without restore: the test would prove nothing");
    let out = Command::new(JOULE).args(["restore", "--json", "--journal-dir"]).arg(agent.journal_dir()).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(r["undone"].as_u64().unwrap() >= 1, "{r}");
    assert!(!agent.pin_dir.exists(), "restore left {}", agent.pin_dir.display());
    assert_eq!(std::fs::read_to_string("/proc/sys/kernel/sched_rt_runtime_us").unwrap().trim(), "950000");
}

#[test]
#[ignore = "tier 2: root"]
fn root_agent_shutdown_on_sigterm_undoes_its_changes() {
    if !require(is_root(), "root (the agent pins BPF maps)") {
        return;
    }
    let agent = Agent::start("");
    assert!(wait_for(&agent.pin_dir, true));
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(agent.child.id() as i32), nix::sys::signal::SIGTERM).unwrap();
    assert!(wait_for(&agent.pin_dir, false), "SIGTERM left {}", agent.pin_dir.display());
    let journal = joule_core::journal::entries(&agent.journal_dir()).unwrap();
    assert!(journal.is_empty(), "journal not emptied: {journal:?}");
}

#[test]
#[ignore = "tier 2: root"]
fn root_sigkilled_agent_with_a_class_then_restore_removes_its_cgroups() {
    let Some(target) = ClassTarget::new("root (the agent creates cgroups)") else { return };
    let (cpu_v1, pid) = (Path::new(CPU_V1), target.pid);
    let mut agent = Agent::start(&target.config);
    let procs = cpu_v1.join("joule/jtest/cgroup.procs");
    let deadline = Instant::now() + Duration::from_secs(30);
    while !target.in_class() {
        assert!(Instant::now() < deadline, "agent never moved {pid} into {}", procs.display());
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(std::fs::read_to_string(cpu_v1.join("joule/jtest/cpu.cfs_quota_us")).unwrap().trim(), "20000");
    agent.child.kill().unwrap();
    agent.child.wait().unwrap();
    assert!(cpu_v1.join("joule/jtest").exists(), "cgroup vanished without restore: the test would prove nothing");
    let out = Command::new(JOULE).args(["restore", "--journal-dir"]).arg(agent.journal_dir()).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(!cpu_v1.join("joule").exists(), "restore left /sys/fs/cgroup/cpu/joule");
    assert_eq!(target.cgroups(), target.cgroups_before, "task not back in its original cgroups");
}

const CPU_V1: &str = "/sys/fs/cgroup/cpu";

/// A process the test started, killed however the test ends.
struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A `sleep` for an agent's class to hold, and the config of that class: `jtest`, matched by
/// pid, CFS quota 20 ms per 100 ms.
struct ClassTarget {
    _sleep: KillOnDrop,
    pid: u32,
    cgroups_before: String,
    config: String,
}

impl ClassTarget {
    /// None (the test skips) without root or a v1 cpu hierarchy with CFS bandwidth.
    fn new(root_for: &str) -> Option<Self> {
        if !require(is_root(), root_for) || !require(Path::new(CPU_V1).join("cpu.cfs_quota_us").exists(), "cgroup v1 cpu hierarchy with CFS bandwidth") {
            return None;
        }
        let sleep = KillOnDrop(Command::new("sleep").arg("120").spawn().unwrap());
        let pid = sleep.0.id();
        let config = format!("[[class]]\nname = \"jtest\"\nmatch = {{ pid = [{pid}] }}\nquota_us = 20000\nperiod_us = 100000\n");
        let mut t = ClassTarget { _sleep: sleep, pid, cgroups_before: String::new(), config };
        t.cgroups_before = t.cgroups();
        Some(t)
    }
    fn cgroups(&self) -> String {
        std::fs::read_to_string(format!("/proc/{}/cgroup", self.pid)).unwrap()
    }
    fn in_class(&self) -> bool {
        let procs = Path::new(CPU_V1).join("joule/jtest/cgroup.procs");
        std::fs::read_to_string(procs).unwrap_or_default().lines().any(|l| l == self.pid.to_string())
    }
}

/// The pins of the agent's stage map and friends, with their inodes (a new pin is a new inode).
fn pins(dir: &Path) -> Vec<(String, u64)> {
    use std::os::unix::fs::MetadataExt;
    let Ok(rd) = std::fs::read_dir(dir) else { return Vec::new() };
    let mut v: Vec<_> = rd.flatten().map(|e| (e.file_name().to_string_lossy().into_owned(), e.metadata().unwrap().ino())).collect();
    v.sort();
    v
}

/// Journal replay at agent start: an agent holding a class (a `sleep` in a v1 cpu cgroup with a
/// CFS quota) and pinned BPF maps is SIGKILLed; a new agent on the same journal, class and pin
/// dir must undo the old one's changes *before* it makes its own. Were the order wrong, the new
/// agent would adopt the old cgroups instead of creating them, find the old pins (and refuse
/// to pin, or keep the old inodes), and its journal would still hold the old records.
#[test]
#[ignore = "tier 2: root"]
fn root_new_agent_undoes_a_killed_agents_changes_before_making_its_own() {
    let Some(target) = ClassTarget::new("root (the agent creates cgroups and pins BPF maps)") else { return };
    let (pid, class_dir) = (target.pid, Path::new(CPU_V1).join("joule/jtest"));
    let mut agent = Agent::start(&target.config);
    let deadline = Instant::now() + Duration::from_secs(30);
    while !target.in_class() || pins(&agent.pin_dir).is_empty() {
        assert!(Instant::now() < deadline, "the first agent never moved {pid} into {} and pinned its maps", class_dir.display());
        std::thread::sleep(Duration::from_millis(100));
    }
    agent.metrics_addr(); // up and running: its start-up is over
    let old_pins = pins(&agent.pin_dir);
    agent.child.kill().unwrap(); // SIGKILL: it undoes nothing
    agent.child.wait().unwrap();
    let old_records = joule_core::journal::entries(&agent.journal_dir()).unwrap();
    let owners: std::collections::BTreeSet<_> = old_records.iter().map(|e| e.owner.as_str()).collect();
    assert!(owners.contains("qos") && owners.contains("bpf"), "the killed agent's journal lacks its class or its pins: {old_records:#?}");
    assert!(target.in_class() && pins(&agent.pin_dir) == old_pins, "its changes vanished without a replay: the test would prove nothing");
    let old_events = agent.events().len();

    agent.restart();
    let new_pid = agent.child.id();
    agent.wait_event(old_events, "listening");
    let events: Vec<_> = agent.events().split_off(old_events);
    let at = |name: &str| events.iter().position(|v| v["event"] == name).unwrap_or_else(|| panic!("no {name} event from the new agent: {events:#?}"));
    let (start, applied) = (&events[at("start")], &events[at("qos_applied")]);
    assert_eq!(start["pid"], new_pid, "{start}");
    assert!(at("start") < at("qos_applied"), "the replay was not first: {events:#?}");
    // Every old record settled by the replay (a group recorded twice is removed once, the
    // second record finds it gone), none failed.
    let settled = start["recovered"].as_u64().unwrap() + start["already_gone"].as_u64().unwrap();
    assert_eq!(settled, old_records.len() as u64, "not every old record was replayed: {start}");
    assert_eq!(start["failed"], serde_json::json!([]), "{start}");
    // Its own changes were made on a clean machine: it created the class's groups anew (it
    // did not adopt the old ones), pinned new maps (not found the old pins), and its journal
    // holds only its own records.
    let created: Vec<_> = applied["created"].as_array().unwrap().iter().map(|p| p.as_str().unwrap()).collect();
    assert!(created.contains(&class_dir.to_str().unwrap()), "the class's group was adopted, not created anew: {applied}");
    assert!(applied["adopted"].as_array().unwrap().is_empty(), "{applied}");
    let new_records = joule_core::journal::entries(&agent.journal_dir()).unwrap();
    let start_ms = start["ts_ms"].as_u64().unwrap();
    assert!(new_records.iter().all(|e| e.at_ms >= start_ms && !old_records.contains(e)), "old records left in the journal: {new_records:#?}");
    // ... and they are in place.
    assert!(target.in_class(), "the new agent did not move {pid} into its class");
    assert_eq!(std::fs::read_to_string(class_dir.join("cpu.cfs_quota_us")).unwrap().trim(), "20000");
    let new_pins = pins(&agent.pin_dir);
    assert_eq!(new_pins.iter().map(|p| &p.0).collect::<Vec<_>>(), old_pins.iter().map(|p| &p.0).collect::<Vec<_>>());
    assert!(new_pins.iter().all(|p| !old_pins.contains(p)), "a pin kept its old inode: old {old_pins:?}, new {new_pins:?}");

    // SIGTERM: the new agent undoes everything, and the machine is as it was.
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(new_pid as i32), nix::sys::signal::SIGTERM).unwrap();
    let status = agent.child.wait().unwrap();
    assert!(status.success(), "the agent's shutdown failed: {status}");
    for h in ["cpu", "cpuset", "cpuacct"] {
        assert!(!Path::new(&format!("/sys/fs/cgroup/{h}/joule")).exists(), "SIGTERM left /sys/fs/cgroup/{h}/joule");
    }
    assert!(!agent.pin_dir.exists(), "SIGTERM left {}", agent.pin_dir.display());
    let left = joule_core::journal::entries(&agent.journal_dir()).unwrap();
    assert!(left.is_empty(), "SIGTERM left records: {left:#?}");
    assert_eq!(target.cgroups(), target.cgroups_before, "task not back in its original cgroups");
}
