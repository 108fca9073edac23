//! Tier 2 (root, this kernel): the agent end to end — eBPF loaded, metrics parse as Prometheus
//! text and pass `promtool check metrics` (OpenMetrics on request), the monitor's JSON carries
//! real eBPF run-queue latency, a SIGKILLed agent leaves nothing behind once `joule restore`
//! runs, the next agent undoes what a killed one left before it makes its own changes, and
//! `scheduler = "scx"` on this kernel without sched_ext runs on the cgroup path and says so.

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
    /// An agent that pins under /sys/fs/bpf (mounting bpffs there when it is missing).
    fn start(extra_cfg: &str) -> Agent {
        Agent::start_pinning_at(PathBuf::from(format!("/sys/fs/bpf/joule-test-{}", std::process::id())), extra_cfg)
    }

    /// An agent whose fd limit is `nofile` (a unit's `LimitNOFILE`).
    fn start_limited(extra_cfg: &str, nofile: u64) -> Agent {
        let mut a = Agent::start(extra_cfg);
        joule_testkit::kill_agent(&mut a.child);
        // The next agent replays what this one did; its events are not the next one's.
        let _ = std::fs::remove_file(a.dir.path().join("events.jsonl"));
        a.child = Self::spawn_limited(a.dir.path(), Some(nofile));
        a
    }

    fn start_pinning_at(pin_dir: PathBuf, extra_cfg: &str) -> Agent {
        Agent::start_with(pin_dir, "", extra_cfg)
    }

    /// An agent with `agent_keys` added to its `[agent]` table.
    fn start_with(pin_dir: PathBuf, agent_keys: &str, extra_cfg: &str) -> Agent {
        let dir = tempfile::tempdir().unwrap();
        let cfg = format!(
            "[agent]\nperiod_ms = 100\nmetrics_addr = \"127.0.0.1:0\"\njournal_dir = \"{j}\"\nevent_log = \"{e}\"\nstatus_interval_ms = 0\n{agent_keys}\n[telemetry]\nbpf_pin_dir = \"{p}\"\n{extra_cfg}",
            j = dir.path().join("journal").display(),
            e = dir.path().join("events.jsonl").display(),
            p = pin_dir.display()
        );
        std::fs::write(dir.path().join("joule.toml"), cfg).unwrap();
        let child = Self::spawn(dir.path());
        Agent { child, dir, pin_dir }
    }

    fn spawn(dir: &Path) -> Child {
        Self::spawn_limited(dir, None)
    }

    fn spawn_limited(dir: &Path, nofile: Option<u64>) -> Child {
        use std::os::unix::process::CommandExt;
        let mut cmd = Command::new(JOULE);
        cmd.args(["agent", "--config"]).arg(dir.join("joule.toml")).stdin(Stdio::null());
        if let Some(n) = nofile {
            // SAFETY: setrlimit only, between fork and exec.
            unsafe {
                cmd.pre_exec(move || nix::sys::resource::setrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE, n, n).map_err(std::io::Error::from));
            }
        }
        cmd.spawn().unwrap()
    }

    /// Starts a new agent with the same config, journal, event log and pin dir; the previous
    /// one must be gone.
    fn restart(&mut self) {
        self.child = Self::spawn(self.dir.path());
    }

    /// The event log so far, one JSON value a line.
    fn events(&self) -> Vec<serde_json::Value> {
        let log = std::fs::read_to_string(self.dir.path().join("events.jsonl")).unwrap_or_default();
        // The agent may be writing the last line right now: a line that does not parse yet is
        // one still being written (every finished line must parse).
        let lines: Vec<&str> = log.lines().collect();
        let n = lines.len();
        lines
            .iter()
            .enumerate()
            .filter_map(|(i, l)| serde_json::from_str(l).map_err(|e| assert!(i + 1 == n && !log.ends_with('\n'), "event line {i} is not JSON ({e}): {l}")).ok())
            .collect()
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
        joule_testkit::kill_agent(&mut self.child);
        // Whatever the test did, leave nothing behind.
        let _ = Command::new(JOULE).args(["restore", "--journal-dir"]).arg(self.journal_dir()).output();
        let _ = std::fs::remove_dir_all(&self.pin_dir);
    }
}

/// A GET with an optional `Accept` header: (Content-Type, body).
fn http_get(addr: &str, path: &str, accept: Option<&str>) -> (String, String) {
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    let accept = accept.map(|a| format!("Accept: {a}\r\n")).unwrap_or_default();
    write!(s, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n{accept}\r\n").unwrap();
    let mut body = String::new();
    s.read_to_string(&mut body).unwrap();
    let (head, body) = body.split_once("\r\n\r\n").unwrap();
    assert!(head.starts_with("HTTP/1.") && head.contains(" 200 "), "{head}");
    let ctype = head.lines().find_map(|l| l.split_once(':').filter(|(k, _)| k.eq_ignore_ascii_case("content-type")).map(|(_, v)| v.trim()));
    (ctype.unwrap_or_default().to_string(), body.to_string())
}

const TEXT_004: &str = "text/plain; version=0.0.4; charset=utf-8";
const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
const RUNQ: &str = "joule_runq_latency_seconds";

/// Whether a sample may lack a `source` label: it carries no measured value. Those are the
/// families the metrics table gives no snapshot value (`json` empty in `joule monitor
/// --list-metrics --json`: the agent's bookkeeping, the plan, the actuators' state), so the list
/// is the table's own; and the stage (a decision, labelled computed_by and temp_source) and
/// whether eBPF runs.
fn exempt_from_source(metric: &str, stateless: &[String]) -> bool {
    stateless.iter().any(|f| metric.starts_with(f.as_str())) || metric == "joule_thermal_stage" || metric == "joule_bpf_enabled"
}

/// The metric families with no snapshot value behind them, from the binary's own table.
fn families_without_snapshot() -> Vec<String> {
    let out = Command::new(JOULE).args(["monitor", "--list-metrics", "--json"]).output().expect("run joule monitor --list-metrics");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let table: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).expect("--list-metrics --json is a JSON list");
    let names: Vec<String> =
        table.iter().filter(|m| m["json"].as_str().is_none_or(str::is_empty)).filter_map(|m| m["name"].as_str().map(String::from)).collect();
    assert!(names.iter().any(|n| n == "joule_actuator_up"), "the table lost its actuator families: {names:?}");
    names
}

/// `_count` of every run-queue latency series, by its labels.
fn runq_counts(scrape: &prometheus_parse::Scrape) -> std::collections::BTreeMap<String, f64> {
    let counts = scrape.samples.iter().filter(|s| s.metric == format!("{RUNQ}_count"));
    counts.map(|s| (format!("{:?}", s.labels.iter().collect::<std::collections::BTreeMap<_, _>>()), value_of(s))).collect()
}

fn value_of(s: &prometheus_parse::Sample) -> f64 {
    match s.value {
        prometheus_parse::Value::Counter(v) | prometheus_parse::Value::Gauge(v) | prometheus_parse::Value::Untyped(v) => v,
        _ => panic!("{} is not a number", s.metric),
    }
}

fn parse(text: &str) -> prometheus_parse::Scrape {
    prometheus_parse::Scrape::parse(text.lines().map(|l| Ok(l.to_string()))).expect("valid Prometheus text")
}

#[test]
#[ignore = "tier 2: root"]
fn root_agent_metrics_parse_as_prometheus_text_with_units_and_help() {
    if !require(is_root(), "root (the agent loads eBPF)") {
        return;
    }
    // This host has no CPU sensor: the labelled model moves the in-kernel stage only when told.
    let agent = Agent::start("[thermal]\nact_on_model = true\n");
    let addr = agent.metrics_addr();
    std::thread::sleep(Duration::from_millis(1500));
    let (ctype, text) = http_get(&addr, "/metrics", None);
    assert_eq!(ctype, TEXT_004, "no Accept header: the classic text format");
    let lines: Vec<&str> = text.lines().collect();
    let scrape = parse(&text);
    assert!(!scrape.samples.is_empty());
    let stateless = families_without_snapshot();
    for s in &scrape.samples {
        assert!(s.metric.starts_with("joule_"), "{}", s.metric);
        let origin = s.labels.get("source");
        assert!(
            exempt_from_source(&s.metric, &stateless) || origin.is_some_and(|o| ["sensor", "kernel", "ebpf", "model"].contains(&o)),
            "{} {:?} does not say where it came from",
            s.metric,
            s.labels
        );
    }
    for name in ["joule_cpu_utilization_ratio", "joule_power_watts", "joule_thermal_stage", RUNQ] {
        assert!(lines.iter().any(|l| l.starts_with(&format!("# HELP {name} "))), "no HELP for {name}");
        assert!(lines.iter().any(|l| l.starts_with(&format!("# TYPE {name} "))), "no TYPE for {name}");
        assert!(scrape.samples.iter().any(|s| s.metric == name), "no sample of {name}");
    }
    assert!(lines.contains(&"# TYPE joule_runq_latency_seconds histogram"));
    assert!(!text.contains("quantile="), "no summary-style quantile label on a histogram");
    let stage = scrape.samples.iter().find(|s| s.metric == "joule_thermal_stage").unwrap();
    assert_eq!(stage.labels.get("computed_by"), Some("ebpf"), "stage not computed in the kernel");

    let counts = runq_counts(&scrape);
    let mut histograms = 0;
    for s in scrape.samples.iter().filter(|s| s.metric == RUNQ) {
        let prometheus_parse::Value::Histogram(buckets) = &s.value else { panic!("{RUNQ} is not a histogram: {s:?}") };
        histograms += 1;
        assert_eq!(s.labels.get("source"), Some("ebpf"));
        let bounds: Vec<f64> = buckets.iter().map(|b| b.less_than).collect();
        let expected: Vec<f64> = (10..=30).map(|k| (1u64 << k) as f64 / 1e9).chain([f64::INFINITY]).collect();
        assert_eq!(bounds, expected, "le bounds: powers of two of ns, 2^10..2^30, then +Inf");
        assert!(buckets.windows(2).all(|w| w[0].count <= w[1].count), "buckets not cumulative: {buckets:?}");
        let key = format!("{:?}", s.labels.iter().collect::<std::collections::BTreeMap<_, _>>());
        assert_eq!(Some(buckets.last().unwrap().count), counts.get(&key).copied(), "+Inf bucket is not _count for {key}");
    }
    assert!(histograms > 0, "no run-queue latency histogram");

    // A histogram is a counter: a later scrape never counts fewer wake-ups, and the machine
    // woke something up in between. A resting agent serves a scrape from its last reading and
    // refreshes it at most once per rest, so the newer count may take a rest to show.
    let deadline = std::time::Instant::now() + Duration::from_secs(6);
    let mut later;
    loop {
        std::thread::sleep(Duration::from_millis(500));
        later = runq_counts(&parse(&http_get(&addr, "/metrics", None).1));
        for (key, before) in &counts {
            if let Some(after) = later.get(key) {
                assert!(after >= before, "{key}: _count went from {before} to {after}");
            }
        }
        if later.values().sum::<f64>() > counts.values().sum::<f64>() || std::time::Instant::now() > deadline {
            break;
        }
    }
    assert!(later.values().sum::<f64>() > counts.values().sum::<f64>(), "no wake-up counted in 6 s");
}

/// `# TYPE` lines: family name → type.
fn types(text: &str) -> std::collections::BTreeMap<String, String> {
    let ty = text.lines().filter_map(|l| l.strip_prefix("# TYPE ")).filter_map(|l| l.split_once(' '));
    ty.map(|(n, t)| (n.to_string(), t.to_string())).collect()
}

#[test]
#[ignore = "tier 2: root"]
fn root_agent_metrics_pass_promtool_check_in_both_formats() {
    if !require(is_root(), "root (the agent loads eBPF)") {
        return;
    }
    // scripts/install-deps.sh unpacks it there (installing Debian's package would start a server).
    let promtool = std::env::var("JOULE_PROMTOOL").unwrap_or_else(|_| {
        let cached = format!("{}/bin/promtool", std::env::var("JOULE_TOOLS").unwrap_or_else(|_| "/var/cache/joule-tools".into()));
        if Path::new(&cached).exists() {
            cached
        } else {
            "promtool".into()
        }
    });
    let found = Command::new(&promtool).arg("--version").output().is_ok_and(|o| o.status.success());
    if !require(found, "promtool (scripts/install-deps.sh unpacks it into /var/cache/joule-tools/bin)") {
        return;
    }
    let agent = Agent::start("");
    let addr = agent.metrics_addr();
    std::thread::sleep(Duration::from_millis(1500));

    let (ctype, text) = http_get(&addr, "/metrics", None);
    assert_eq!(ctype, TEXT_004);
    assert!(text.contains(&format!("{RUNQ}_bucket{{")), "no histogram for promtool to check:\n{text}");
    let mut child = Command::new(&promtool).args(["check", "metrics"]).stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    child.stdin.take().unwrap().write_all(text.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    let said = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success() && said.trim().is_empty(), "promtool check metrics: {:?}\n{said}\n--- scraped:\n{text}", out.status);

    let (ctype, om) = http_get(&addr, "/metrics", Some("application/openmetrics-text;version=1.0.0"));
    assert_eq!(ctype, OPENMETRICS);
    assert!(om.ends_with("# EOF\n"), "OpenMetrics ends with # EOF");
    assert!(!text.contains("# EOF"), "the classic text has no # EOF");
    // The same families in both, counters named the way each format wants: OpenMetrics names
    // the family without `_total` (its samples have it), the classic text names both with it.
    let (om_types, text_types) = (types(&om), types(&text));
    let om_as_text: std::collections::BTreeMap<String, String> =
        om_types.iter().map(|(n, t)| (if t == "counter" { format!("{n}_total") } else { n.clone() }, t.clone())).collect();
    assert_eq!(om_as_text, text_types);
    assert_eq!(om_types.get(RUNQ).map(String::as_str), Some("histogram"));
    assert!(om.contains(&format!("{RUNQ}_bucket{{")) && om.contains("\njoule_agent_samples_total"), "{om}");
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
        // The cumulative buckets include this interval's wake-ups.
        let total = &r["since_load"];
        assert_eq!(total["le_ns"].as_array().unwrap().len(), 21, "{r}");
        assert!(total["count"].as_u64().unwrap() >= r["count"].as_u64().unwrap(), "{r}");
    }
    assert!(rq.iter().any(|r| r["count"].as_u64().unwrap() > 0), "no cgroup had a wake-up in 500 ms: {v}");
    if !v["psi"].is_null() {
        assert_eq!(v["psi"]["source"], "kernel");
    }
    for c in v["cgroups"].as_array().unwrap() {
        assert_eq!(c["source"], "kernel", "{c}");
    }
    for t in v["task_wait"].as_array().unwrap() {
        assert_eq!(t["source"], "ebpf", "task wait should come from the kernel's accounting when BPF is loaded: {t}");
    }
    let no_sensor = v["thermal"]["zones"].as_array().unwrap().is_empty();
    if no_sensor {
        // A model is reported, labelled, and moves no stage unless act_on_model is set.
        assert_eq!(v["thermal"]["model"]["source"], "model");
        assert_eq!((v["stage"]["computed_by"].as_str(), v["stage"]["temp_source"].as_str()), (Some("none"), Some("unknown")), "{}", v["stage"]);
    } else {
        assert_eq!(v["stage"]["computed_by"], "ebpf");
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
    joule_testkit::sigkill_agent_and_guardian(&mut agent.child); // SIGKILL: no chance to clean up
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
    target.wait_for_slice(ClassTarget::SLICE_NS);
    joule_testkit::sigkill_agent_and_guardian(&mut agent.child);
    assert!(cpu_v1.join("joule/jtest").exists(), "cgroup vanished without restore: the test would prove nothing");
    let out = Command::new(JOULE).args(["restore", "--journal-dir"]).arg(agent.journal_dir()).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(!cpu_v1.join("joule").exists(), "restore left /sys/fs/cgroup/cpu/joule");
    assert_eq!(target.cgroups(), target.cgroups_before, "task not back in its original cgroups");
    assert_eq!(target.slice_ns(), target.slice_before, "restore did not give the task back the kernel's default slice");
}

/// Outside systemd, nothing runs `joule restore` for a SIGKILLed agent: its guardian does.
/// Within 5 s of the kill the class's task is back in its cgroups, the class cgroups and pins
/// are gone and the journal is empty, with no restore run by anyone else.
#[test]
#[ignore = "tier 2: root"]
fn root_sigkilled_agent_is_restored_by_its_guardian() {
    let Some(target) = ClassTarget::new("root (the agent creates cgroups)") else { return };
    let cpu_v1 = Path::new(CPU_V1);
    let mut agent = Agent::start(&target.config);
    let deadline = Instant::now() + Duration::from_secs(30);
    while !target.in_class() || !agent.pin_dir.exists() {
        assert!(Instant::now() < deadline, "agent never moved {} into its class", target.pid);
        std::thread::sleep(Duration::from_millis(100));
    }
    target.wait_for_slice(ClassTarget::SLICE_NS);
    let guardians = joule_testkit::guardians_of(agent.child.id());
    assert_eq!(guardians.len(), 1, "one guardian per agent: {guardians:?}");
    let pgid = |p: i32| nix::unistd::getpgid(Some(nix::unistd::Pid::from_raw(p))).unwrap();
    assert_ne!(pgid(guardians[0]), pgid(agent.child.id() as i32), "the guardian is in the agent's process group: one Ctrl-C kills both");
    agent.child.kill().unwrap(); // SIGKILL the agent alone
    agent.child.wait().unwrap();
    let killed = Instant::now();
    while target.in_class() || cpu_v1.join("joule").exists() || agent.pin_dir.exists() {
        assert!(killed.elapsed() < Duration::from_secs(5), "5 s after the SIGKILL the guardian has not restored (task in class: {})", target.in_class());
        std::thread::sleep(Duration::from_millis(20));
    }
    eprintln!("guardian restored {:?} after the SIGKILL", killed.elapsed());
    assert_eq!(target.cgroups(), target.cgroups_before, "task not back in its original cgroups");
    target.wait_for_slice(target.slice_before);
    let deadline = Instant::now() + Duration::from_secs(5);
    while !joule_core::journal::entries(&agent.journal_dir()).unwrap().is_empty() || std::path::Path::new(&format!("/proc/{}", guardians[0])).exists() {
        assert!(Instant::now() < deadline, "the guardian did not empty the journal and exit");
        std::thread::sleep(Duration::from_millis(20));
    }
}

const CPU_V1: &str = "/sys/fs/cgroup/cpu";

/// A process the test started, killed however the test ends (an agent with its guardian
/// first, so no replay outlives the test).
struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        joule_testkit::kill_agent(&mut self.0);
    }
}

/// A `sleep` for an agent's class to hold, and the config of that class: `jtest`, matched by
/// pid, CFS quota 20 ms per 100 ms, a 250 µs latency slice.
struct ClassTarget {
    _sleep: KillOnDrop,
    pid: u32,
    cgroups_before: String,
    /// The task's EEVDF slice before the agent started (the kernel's default), ns.
    slice_before: u64,
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
        let config = format!("[[class]]\nname = \"jtest\"\nmatch = {{ pid = [{pid}] }}\nquota_us = 20000\nperiod_us = 100000\nlatency_slice_us = 250\n");
        let mut t = ClassTarget { _sleep: sleep, pid, cgroups_before: String::new(), slice_before: 0, config };
        t.cgroups_before = t.cgroups();
        t.slice_before = t.slice_ns();
        assert!(
            t.slice_before > 0,
            "kernel {} reports no EEVDF slice: the slice checks need Linux 6.12+",
            std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap()
        );
        assert_ne!(t.slice_before, Self::SLICE_NS, "the kernel's default equals the test's slice: the check would prove nothing");
        Some(t)
    }
    const SLICE_NS: u64 = 250_000;
    fn slice_ns(&self) -> u64 {
        use joule_core::effects::Sched;
        joule_core::effects::RealEffects.get_slice_ns(self.pid as i32).unwrap().expect("sleep runs under SCHED_OTHER")
    }
    /// Waits (≤ 10 s) until the task's slice is `ns`.
    fn wait_for_slice(&self, ns: u64) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.slice_ns() != ns {
            assert!(Instant::now() < deadline, "task {} has a {} ns slice, not {ns}", self.pid, self.slice_ns());
            std::thread::sleep(Duration::from_millis(20));
        }
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
    joule_testkit::sigkill_agent_and_guardian(&mut agent.child); // SIGKILL: it undoes nothing
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
    // ... and says so to the fleet (JouleRestoreFailed reads `failed`; docs/fleet.md).
    let url = events[at("listening")]["metrics"].as_str().unwrap().trim_start_matches("http://").trim_end_matches("/metrics").to_string();
    let (_, body) = http_get(&url, "/metrics", None);
    let count = |outcome: &str| {
        let line = format!("joule_agent_recovered_changes{{outcome=\"{outcome}\"}} ");
        body.lines().find_map(|l| l.strip_prefix(line.as_str())).and_then(|v| v.parse::<f64>().ok()).unwrap_or_else(|| panic!("no {line}in:\n{body}"))
    };
    assert_eq!((count("undone") + count("already_gone"), count("failed")), (settled as f64, 0.0), "{start}");
    assert!(count("undone") > 0.0, "the replay undid nothing: {start}");
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

pub(crate) fn is_bpffs(p: &Path) -> bool {
    use joule_core::effects::{Mounts, RealEffects, BPF_FS_MAGIC};
    RealEffects.fs_magic(p).is_ok_and(|m| m == BPF_FS_MAGIC)
}

/// Issue 6: on a fresh machine bpffs is not mounted and the agent ran on without eBPF. Here the
/// pin directory lies under a fresh temporary directory, which is no bpffs: the agent must mount
/// one there (journalled), run with eBPF on, and unmount it again when it stops — by SIGTERM, and
/// by `joule restore` after a SIGKILL. Nothing the machine needs is unmounted.
#[test]
#[ignore = "tier 2: root"]
fn root_agent_mounts_bpffs_when_missing_and_unmounts_it_when_done() {
    if !require(is_root(), "root (the agent mounts bpffs)") {
        return;
    }
    for kill in [false, true] {
        let base = tempfile::tempdir().unwrap();
        let pin_dir = base.path().join("joule");
        assert!(!is_bpffs(base.path()));
        let mut agent = Agent::start_pinning_at(pin_dir.clone(), "");
        assert!(wait_for(&pin_dir.join("thermal_stage"), true), "agent never pinned its stage map at {}", pin_dir.display());
        assert!(is_bpffs(base.path()), "the agent did not mount bpffs at {}", base.path().display());
        let addr = agent.metrics_addr();
        let bpf_on = |m: &str| m.lines().any(|l| l.starts_with("joule_bpf_enabled{") && l.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok()) == Some(1.0));
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut metrics = http_get(&addr, "/metrics", None).1;
        while !bpf_on(&metrics) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(100)); // the first sample is not published yet
            metrics = http_get(&addr, "/metrics", None).1;
        }
        assert!(bpf_on(&metrics), "eBPF not on: {metrics}");
        let journal = joule_core::journal::entries(&agent.journal_dir()).unwrap();
        assert!(
            journal.iter().any(|e| e.undo == joule_core::journal::Undo::Unmount { path: base.path().to_path_buf(), magic: joule_core::effects::BPF_FS_MAGIC }),
            "mount not journalled: {journal:?}"
        );
        if kill {
            joule_testkit::sigkill_agent_and_guardian(&mut agent.child);
            assert!(is_bpffs(base.path()), "the mount vanished without restore: the test would prove nothing");
            let out = Command::new(JOULE).args(["restore", "--journal-dir"]).arg(agent.journal_dir()).output().unwrap();
            assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        } else {
            nix::sys::signal::kill(nix::unistd::Pid::from_raw(agent.child.id() as i32), nix::sys::signal::SIGTERM).unwrap();
            assert!(agent.child.wait().unwrap().success());
        }
        assert!(!is_bpffs(base.path()), "bpffs left mounted at {} (kill = {kill})", base.path().display());
        assert!(!pin_dir.exists());
    }
}

/// A non-root agent under the shipped default (`bpf = "auto"`) runs without eBPF and says
/// why; with `bpf = true` it refuses with the reason and what to do; `--no-bpf` says so too.
#[test]
#[ignore = "tier 2: root"]
fn root_agent_without_root_runs_without_bpf_under_auto_and_refuses_only_when_it_is_required() {
    if !require(is_root(), "root (to drop to another user)") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    // The journal and event log in directories of the user the agent runs as, private to it
    // (a journal directory others can write is refused: docs/security.md).
    for d in ["journal", "log"] {
        std::fs::create_dir(dir.path().join(d)).unwrap();
        std::os::unix::fs::chown(dir.path().join(d), Some(65534), Some(65534)).unwrap();
        std::fs::set_permissions(dir.path().join(d), std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
    }
    let cfg = dir.path().join("joule.toml");
    std::fs::write(
        &cfg,
        format!(
            "[agent]\nmetrics_addr = \"127.0.0.1:0\"\njournal_dir = \"{j}\"\nevent_log = \"{e}\"\nstatus_interval_ms = 0\n",
            j = dir.path().join("journal").display(),
            e = dir.path().join("log/events.jsonl").display()
        ),
    )
    .unwrap();
    // A copy nobody can run: the build's own path may sit under a directory only root may
    // enter (a clone in a `mktemp -d` directory, mode 0700).
    let exe = dir.path().join("joule");
    std::fs::copy(JOULE, &exe).unwrap();
    std::fs::set_permissions(&exe, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let as_nobody = |extra: &[&str]| {
        let mut c = Command::new(&exe);
        c.args(["agent", "--config"]).arg(&cfg).args(["--duration-s", "1"]).args(extra);
        std::os::unix::process::CommandExt::uid(&mut c, 65534);
        std::os::unix::process::CommandExt::gid(&mut c, 65534);
        c.output().unwrap()
    };
    let out = as_nobody(&[]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("eBPF is off (not_root"), "{err}");
    let out = as_nobody(&["--no-bpf"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("eBPF is off (flag"), "{err}");
    let text = std::fs::read_to_string(&cfg).unwrap();
    std::fs::write(&cfg, format!("{text}[telemetry]\nbpf = true\n")).unwrap();
    let out = as_nobody(&[]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("needs root") && err.contains("\"auto\""), "{err}");
}

#[test]
#[ignore = "tier 2: root"]
fn root_agent_with_the_scx_scheduler_on_a_kernel_without_sched_ext_says_so_once_and_takes_the_cgroup_path() {
    if !require(is_root(), "root (the agent pins BPF maps)") {
        return;
    }
    let has_sched_ext = Path::new("/sys/kernel/sched_ext").exists();
    if !require(!has_sched_ext, "a kernel without sched_ext (this one has it: the VM tier covers the scx path)") {
        return;
    }
    let agent = Agent::start("[thermal]\nscheduler = \"scx\"\n");
    let addr = agent.metrics_addr();
    std::thread::sleep(Duration::from_millis(1_000)); // ten periods
    let (_, plan) = http_get(&addr, "/plan.json", None);
    let plan: serde_json::Value = serde_json::from_str(&plan).unwrap();
    let scx = plan["actuators"].as_array().unwrap().iter().find(|a| a["name"] == "scx").unwrap_or_else(|| panic!("no scx actuator: {plan}"));
    assert_eq!((scx["ok"].as_bool(), scx["state"]["running"].as_bool(), scx["state"]["available"].as_bool()), (Some(true), Some(false), Some(false)), "{scx}");
    let stage = plan["plan"]["decisions"].as_array().unwrap().iter().find(|d| d["want"]["kind"] == "thermal_stage").unwrap();
    assert_eq!(stage["want"]["path"], "cgroup", "{stage}");
    assert_eq!(stage["actuator"], "scx", "the scheduler's actuator still sees the stage: {stage}");
    let (_, snap) = http_get(&addr, "/snapshot.json", None);
    let snap: serde_json::Value = serde_json::from_str(&snap).unwrap();
    assert_eq!((snap["sched_ext"]["state"].as_str(), snap["sched_ext"]["source"].as_str()), (Some("absent"), Some("kernel")), "{}", snap["sched_ext"]);
    let unavailable: Vec<_> = agent.events().into_iter().filter(|e| e["event"] == "scx_unavailable").collect();
    assert_eq!(unavailable.len(), 1, "reported once, not every period: {unavailable:?}");
    assert!(unavailable[0]["reason"].as_str().unwrap().contains("CONFIG_SCHED_CLASS_EXT"), "{unavailable:?}");
    let (_, metrics) = http_get(&addr, "/metrics", None);
    assert!(metrics.lines().any(|l| l == "joule_scx_running 0"), "{metrics}");
}

#[path = "root_agent/cpufreq.rs"]
mod cpufreq;
#[path = "root_agent/defaults.rs"]
mod defaults;
#[path = "root_agent/fleet.rs"]
mod fleet;
#[path = "root_agent/kube.rs"]
mod kube;
#[path = "root_agent/login.rs"]
mod login;
#[path = "root_agent/membership.rs"]
mod membership;
#[path = "root_agent/names.rs"]
mod names;
#[path = "root_agent/no_btf.rs"]
mod no_btf;
#[path = "root_agent/rest.rs"]
mod rest;
#[path = "root_agent/status.rs"]
mod status;
#[path = "root_agent/terminal.rs"]
mod terminal;
#[path = "root_agent/thermal.rs"]
mod thermal;
#[path = "root_agent/untrusted.rs"]
mod untrusted;
#[path = "root_agent/untrusted2.rs"]
mod untrusted2;
