//! Tier 2 (root, this kernel): the shipped default config (`deploy/joule.toml`, with only its
//! paths moved into a temporary directory) changes nothing (issue 34): 60 s of the agent beside
//! two busy loops, and every cpufreq, cgroup and scheduler knob is as it was — while it runs
//! (bpffs excepted: the agent mounts it when missing, and says so) and after it stopped.

use super::Agent;
use joule_core::testing::{is_root, require};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Every knob joule could turn, by path (or a name for per-task state), with its value.
type Knobs = BTreeMap<String, String>;

fn read(p: &Path) -> Option<String> {
    std::fs::read_to_string(p).ok().map(|s| s.trim().to_string())
}

/// The cgroup files of one directory that a class, a cap or a nap would write.
const CGROUP_FILES: [&str; 14] = [
    "cpu.shares",
    "cpu.cfs_quota_us",
    "cpu.cfs_period_us",
    "cpu.rt_runtime_us",
    "cpu.rt_period_us",
    "cpu.max",
    "cpu.weight",
    "cpu.idle",
    "cpuset.cpus",
    "cpuset.mems",
    "freezer.state",
    "cgroup.freeze",
    "cgroup.subtree_control",
    "cgroup.procs",
];

fn cgroup_tree(dir: &Path, depth: usize, out: &mut Knobs) {
    out.insert(format!("cgroup dir {}", dir.display()), String::new());
    for f in CGROUP_FILES {
        // A cgroup's member list changes with every process that comes and goes; what matters
        // is that no process of the machine's was moved, which the per-task part checks.
        if f == "cgroup.procs" {
            continue;
        }
        if let Some(v) = read(&dir.join(f)) {
            out.insert(dir.join(f).display().to_string(), v);
        }
    }
    if depth == 0 {
        return;
    }
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        if e.file_type().is_ok_and(|t| t.is_dir()) {
            cgroup_tree(&e.path(), depth - 1, out);
        }
    }
}

/// The pid's start time (field 22 of stat), policy and RT priority (fields 41 and 40).
fn task_sched(pid: &str) -> Option<(String, String)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // `rest` starts at field 3 (state).
    let (start, rt_prio, policy) = (f.get(19)?, f.get(37)?, f.get(38)?);
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let cpus = status.lines().find_map(|l| l.strip_prefix("Cpus_allowed_list:")).unwrap_or("").trim().to_string();
    let cgroup = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?.replace('\n', " ");
    Some((format!("task {pid}@{start}"), format!("policy {policy} rt_priority {rt_prio} cpus {cpus} cgroup {cgroup}")))
}

/// The machine's knobs now: the scheduler sysctls, every CPU's cpufreq files, every cgroup
/// (three levels deep) with its CPU/cpuset/freezer files, and every task's policy, priority,
/// affinity and cgroups (keyed by pid and start time), minus the processes of `skip`.
fn snapshot(skip: &[u32]) -> Knobs {
    let mut k = Knobs::new();
    for e in std::fs::read_dir("/proc/sys/kernel").into_iter().flatten().flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if name.starts_with("sched_") {
            if let Some(v) = read(&e.path()) {
                k.insert(format!("sysctl {name}"), v);
            }
        }
    }
    for e in std::fs::read_dir("/sys/devices/system/cpu").into_iter().flatten().flatten() {
        for f in ["scaling_max_freq", "scaling_min_freq", "scaling_governor", "energy_performance_preference"] {
            let p = e.path().join("cpufreq").join(f);
            if let Some(v) = read(&p) {
                k.insert(p.display().to_string(), v);
            }
        }
    }
    cgroup_tree(Path::new("/sys/fs/cgroup"), 3, &mut k);
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let pid = e.file_name().to_string_lossy().into_owned();
        if pid.parse::<u32>().is_ok_and(|p| !skip.contains(&p)) {
            if let Some((key, v)) = task_sched(&pid) {
                k.insert(key, v);
            }
        }
    }
    let tc = Command::new("tc").args(["qdisc", "show"]).output().map(|o| String::from_utf8_lossy(&o.stdout).into_owned()).unwrap_or_default();
    k.insert("qdiscs".into(), tc.lines().map(|l| l.split(" refcnt ").next().unwrap_or(l).to_string()).collect::<Vec<_>>().join("\n"));
    k
}

/// What changed between two snapshots, ignoring tasks that exist in only one of them (they
/// started or exited meanwhile: neither is a knob the agent turned).
fn changes(before: &Knobs, after: &Knobs) -> Vec<String> {
    let mut out = Vec::new();
    for (key, b) in before {
        match after.get(key) {
            Some(a) if a != b => out.push(format!("{key}: {b:?} -> {a:?}")),
            None if !key.starts_with("task ") => out.push(format!("{key}: {b:?} -> gone")),
            _ => {}
        }
    }
    for (key, a) in after {
        if !before.contains_key(key) && !key.starts_with("task ") {
            out.push(format!("{key}: new, {a:?}"));
        }
    }
    out
}

/// deploy/joule.toml with its journal, event log, metrics port and pin dir moved to the test's.
pub(super) fn shipped_config(dir: &Path, pin_dir: &Path) -> String {
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../deploy/joule.toml")).unwrap();
    let moved = [
        ("metrics_addr = \"127.0.0.1:9977\"", "metrics_addr = \"127.0.0.1:0\"".to_string()),
        ("journal_dir = \"/run/joule\"", format!("journal_dir = \"{}\"", dir.join("journal").display())),
        ("event_log = \"/run/joule/events.jsonl\"", format!("event_log = \"{}\"", dir.join("events.jsonl").display())),
        ("bpf_pin_dir = \"/sys/fs/bpf/joule\"", format!("bpf_pin_dir = \"{}\"", pin_dir.display())),
    ];
    moved.iter().fold(text, |t, (from, to)| {
        assert!(t.contains(from), "deploy/joule.toml no longer has {from}");
        t.replace(from, to)
    })
}

struct Busy(Vec<Child>);

impl Drop for Busy {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

#[test]
#[ignore = "tier 2: root"]
fn root_defaults_the_shipped_config_leaves_every_knob_as_it_found_it_under_load() {
    if !require(is_root(), "root") {
        return;
    }
    let busy = Busy((0..2).map(|_| Command::new("sh").args(["-c", "while :; do :; done"]).stdin(Stdio::null()).spawn().unwrap()).collect());
    let busy_pids: Vec<u32> = busy.0.iter().map(|c| c.id()).collect();
    std::thread::sleep(Duration::from_millis(300));
    let before = snapshot(&busy_pids);
    let bpffs_before = bpffs_mounted();

    let dir = tempfile::tempdir().unwrap();
    let pin_dir = PathBuf::from(format!("/sys/fs/bpf/joule-defaults-{}", std::process::id()));
    std::fs::write(dir.path().join("joule.toml"), shipped_config(dir.path(), &pin_dir)).unwrap();
    let mut agent = Agent { child: Agent::spawn(dir.path()), dir, pin_dir };
    let addr = agent.metrics_addr();
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(58) {
        assert!(agent.child.try_wait().unwrap().is_none(), "the agent exited under its default config");
        std::thread::sleep(Duration::from_millis(500));
    }
    let mut skip = busy_pids.clone();
    skip.push(agent.child.id());
    let during = snapshot(&skip);
    let (_, plan) = super::http_get(&addr, "/plan.json", None);
    let plan: serde_json::Value = serde_json::from_str(&plan).unwrap();
    let changed = changes(&before, &during);
    assert!(changed.is_empty(), "while the agent ran with the shipped config:\n{}", changed.join("\n"));
    // What the plan asked of actuators: nothing that turns a knob (the thermal stage itself is a
    // reading; with no class and no cpufreq_caps nothing acts on it).
    let wants: Vec<String> =
        plan["plan"]["decisions"].as_array().unwrap().iter().filter(|d| d["want"]["kind"] != "thermal_stage").map(|d| d.to_string()).collect();
    assert!(wants.is_empty(), "the default plan wants something of the machine:\n{}", wants.join("\n"));
    let events = agent.events();
    assert!(events.iter().any(|e| e["event"] == "thermal_sensors"), "the agent did not say which sensors it follows");

    // Stopped as a service manager stops it.
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(agent.child.id() as i32), nix::sys::signal::Signal::SIGTERM).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while agent.child.try_wait().unwrap().is_none() {
        assert!(Instant::now() < deadline, "the agent did not stop on SIGTERM");
        std::thread::sleep(Duration::from_millis(50));
    }
    let after = snapshot(&busy_pids);
    let changed = changes(&before, &after);
    assert!(changed.is_empty(), "after the agent stopped:\n{}", changed.join("\n"));
    assert_eq!(bpffs_mounted(), bpffs_before, "bpffs was left mounted (or unmounted)");
    assert!(!agent.pin_dir.exists(), "the pin dir stayed");
    println!(
        "shipped config, 60 s beside 2 busy loops: {} knobs compared, none changed ({} cgroup dirs, {} tasks)",
        before.len(),
        count(&before, "cgroup dir"),
        count(&before, "task ")
    );
}

fn count(k: &Knobs, prefix: &str) -> usize {
    k.keys().filter(|x| x.starts_with(prefix)).count()
}

fn bpffs_mounted() -> bool {
    std::fs::read_to_string("/proc/self/mounts").unwrap_or_default().lines().any(|l| l.split_whitespace().nth(2) == Some("bpf"))
}
