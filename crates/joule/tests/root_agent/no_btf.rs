//! Tier 2 (root, this kernel): the shipped config on a kernel without BTF, and on one that
//! refuses joule's programs. `/sys/kernel/btf` is hidden by a tmpfs in a private mount
//! namespace (a Raspberry Pi OS kernel as the agent sees it), or CAP_BPF, CAP_PERFMON and
//! CAP_SYS_ADMIN are dropped from the agent's bounding set (the kernel refuses every load).
//! Under `bpf = "auto"` the agent starts, caps a class, says why eBPF is off in its events,
//! metrics and `joule status`, and the doctor says what the agent does; under `bpf = true` it
//! refuses with the reason; at stop the class is gone.

use super::defaults::shipped_config;
use super::{http_get, JOULE};
use joule_core::testing::{is_root, require};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How the agent's process is started: in a mount namespace without the kernel's BTF, or
/// without the capabilities a BPF load needs.
#[derive(Clone, Copy)]
enum Without {
    Btf,
    CapBpf,
}

impl Without {
    fn command(self, args: &[&str]) -> Command {
        let mut c = match self {
            Without::Btf => {
                let mut c = Command::new("unshare");
                c.args(["--mount", "--propagation", "private", "--", "sh", "-c", "mount -t tmpfs joule-no-btf /sys/kernel/btf && exec \"$@\"", "sh", JOULE]);
                c
            }
            Without::CapBpf => {
                let mut c = Command::new("setpriv");
                c.args(["--bounding-set=-bpf,-perfmon,-sys_admin", "--inh-caps=-all", "--", JOULE]);
                c
            }
        };
        c.args(args).stdin(Stdio::null());
        c
    }
}

struct Busy(Child);

impl Drop for Busy {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

struct Run {
    child: Child,
    dir: tempfile::TempDir,
    pin_dir: PathBuf,
}

impl Drop for Run {
    fn drop(&mut self) {
        joule_testkit::kill_agent(&mut self.child);
        let _ = Command::new(JOULE).args(["restore", "--journal-dir"]).arg(self.dir.path().join("journal")).output();
        let _ = std::fs::remove_dir_all(&self.pin_dir);
    }
}

impl Run {
    fn events(&self) -> Vec<serde_json::Value> {
        let log = std::fs::read_to_string(self.dir.path().join("events.jsonl")).unwrap_or_default();
        log.lines().filter_map(|l| serde_json::from_str(l).ok()).collect()
    }

    fn wait_event(&mut self, name: &str) -> serde_json::Value {
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if let Some(v) = self.events().into_iter().find(|v| v["event"] == name) {
                return v;
            }
            if let Ok(Some(st)) = self.child.try_wait() {
                panic!("the agent exited ({st}) before a {name} event: {:?}", self.events());
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("the agent never logged a {name} event: {:?}", self.events());
    }
}

/// The cpu controller's directory of a process (v1 `cpu` or the unified tree) and its quota:
/// `cpu.cfs_quota_us` in µs, or `cpu.max`'s first field.
fn cpu_quota(pid: u32) -> Option<String> {
    let cg = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
    for line in cg.lines() {
        let mut f = line.splitn(3, ':');
        let (_, ctrls, path) = (f.next()?, f.next()?, f.next()?);
        if ctrls.split(',').any(|c| c == "cpu") {
            let dir = Path::new("/sys/fs/cgroup/cpu").join(path.trim_start_matches('/'));
            return std::fs::read_to_string(dir.join("cpu.cfs_quota_us")).ok().map(|s| s.trim().to_string());
        }
        if ctrls.is_empty() {
            let dir = Path::new("/sys/fs/cgroup/unified").join(path.trim_start_matches('/'));
            if let Ok(max) = std::fs::read_to_string(dir.join("cpu.max")) {
                return max.split_whitespace().next().map(str::to_string);
            }
        }
    }
    None
}

/// The shipped config, its paths moved to the test's, with a class that caps a busy loop.
fn config(dir: &Path, pin_dir: &Path, busy: u32, bpf: &str) -> PathBuf {
    let text = shipped_config(dir, pin_dir);
    assert!(text.contains("bpf = \"auto\""), "the shipped config no longer says bpf = \"auto\"");
    let text = text.replace("bpf = \"auto\"", &format!("bpf = {bpf}"));
    let cfg = dir.join("joule.toml");
    std::fs::write(&cfg, format!("{text}\n[[class]]\nname = \"nobtf_capped\"\nmatch = {{ pid = [{busy}] }}\nquota_us = 30000\nperiod_us = 100000\n")).unwrap();
    cfg
}

fn start(without: Without, bpf: &str) -> (Run, Busy) {
    let busy = Busy(Command::new("sh").args(["-c", "while :; do :; done"]).spawn().unwrap());
    let dir = tempfile::tempdir().unwrap();
    let pin_dir = PathBuf::from(format!("/sys/fs/bpf/joule-nobtf-{}", std::process::id()));
    let cfg = config(dir.path(), &pin_dir, busy.0.id(), bpf);
    let child = without.command(&["agent", "--config", cfg.to_str().unwrap()]).stderr(Stdio::null()).spawn().unwrap();
    (Run { child, dir, pin_dir }, busy)
}

/// An agent run for a second: its exit code and stderr.
fn once(without: Without, bpf: &str) -> (Option<i32>, String) {
    let busy = Busy(Command::new("sleep").arg("30").spawn().unwrap());
    let dir = tempfile::tempdir().unwrap();
    let pin_dir = PathBuf::from(format!("/sys/fs/bpf/joule-nobtf-once-{}", std::process::id()));
    let cfg = config(dir.path(), &pin_dir, busy.0.id(), bpf);
    let out = without.command(&["agent", "--config", cfg.to_str().unwrap(), "--duration-s", "1"]).output().unwrap();
    let _ = Command::new(JOULE).args(["restore", "--journal-dir"]).arg(dir.path().join("journal")).output();
    (out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned())
}

/// Under "auto": starts, names `reason`, caps the class, reports it everywhere, restores it.
fn runs_without_ebpf(without: Without, reason: &str) {
    let (mut run, busy) = start(without, "\"auto\"");
    let off = run.wait_event("ebpf_off");
    assert_eq!(off["reason"], reason, "{off}");
    let listening = run.wait_event("listening");
    let addr = listening["metrics"].as_str().unwrap().trim_start_matches("http://").trim_end_matches("/metrics").to_string();
    let deadline = Instant::now() + Duration::from_secs(20);
    while cpu_quota(busy.0.id()).as_deref() != Some("30000") {
        assert!(Instant::now() < deadline, "the class was not capped: quota {:?}, events {:?}", cpu_quota(busy.0.id()), run.events());
        std::thread::sleep(Duration::from_millis(100));
    }
    let (_, metrics) = http_get(&addr, "/metrics", None);
    let line = format!("joule_bpf_enabled{{off_reason=\"{reason}\"}} 0");
    assert!(metrics.lines().any(|l| l == line), "no {line} in the metrics");
    let status = Command::new(JOULE).args(["status", "--journal-dir"]).arg(run.dir.path().join("journal")).output().unwrap();
    let text = String::from_utf8_lossy(&status.stdout);
    assert!(text.contains(&format!("eBPF off ({reason}): ")), "{text}{}", String::from_utf8_lossy(&status.stderr));
    let json = Command::new(JOULE).args(["status", "--json", "--journal-dir"]).arg(run.dir.path().join("journal")).output().unwrap();
    let v: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(v["ebpf_off"]["reason"], reason, "{}", v["ebpf_off"]);

    nix::sys::signal::kill(nix::unistd::Pid::from_raw(run.child.id() as i32), nix::sys::signal::SIGTERM).unwrap();
    assert!(run.child.wait().unwrap().success(), "the agent's stop failed");
    assert_ne!(cpu_quota(busy.0.id()).as_deref(), Some("30000"), "the cap outlived the agent");
    let cg = std::fs::read_to_string(format!("/proc/{}/cgroup", busy.0.id())).unwrap();
    assert!(!cg.contains("nobtf_capped"), "the class's cgroup outlived the agent: {cg}");
}

#[test]
#[ignore = "tier 2: root"]
fn root_no_btf_the_shipped_config_runs_without_ebpf_caps_a_class_and_says_why_and_true_refuses() {
    if !require(is_root(), "root") || !require(Path::new(joule_bpf::BTF_VMLINUX).exists(), "kernel BTF (to hide it)") {
        return;
    }
    runs_without_ebpf(Without::Btf, "no_btf");

    // The doctor in the same namespace predicts it: the stage in user space, and why.
    let out = Without::Btf.command(&["doctor", "--json"]).output().unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    let rows = v["backends"].as_array().unwrap_or_else(|| panic!("no backends in {v}"));
    let stage = rows.iter().find(|r| r["mechanism"] == "thermal stage").unwrap();
    assert_eq!(stage["backend"], "user space", "{stage}");
    assert!(stage["why"].as_str().unwrap().contains("no BTF") && stage["warning"].is_null(), "{stage}");

    // Required: the agent refuses, naming the missing BTF.
    let (code, err) = once(Without::Btf, "true");
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("no BTF at /sys/kernel/btf/vmlinux") && err.contains("CONFIG_DEBUG_INFO_BTF"), "{err}");
}

#[test]
#[ignore = "tier 2: root"]
fn root_no_cap_bpf_the_kernels_refusal_turns_ebpf_off_under_auto_and_stops_the_agent_under_true() {
    if !require(is_root(), "root") || !require(Path::new(joule_bpf::BTF_VMLINUX).exists(), "kernel BTF (for a load to be tried)") {
        return;
    }
    runs_without_ebpf(Without::CapBpf, "load_failed");
    let (code, err) = once(Without::CapBpf, "true");
    assert!(code != Some(0), "{err}");
    assert!(err.contains("telemetry.bpf = true: eBPF must load"), "{err}");
}
