//! Tier 2 (root, this kernel): the thermal stage's cgroup path end to end. A busy loop in a
//! `thermal = "best_effort"` class is capped when the stage goes hot (the RC model over a low
//! threshold, or the modelled power over a low power budget, both through the in-kernel stage),
//! and a SIGKILLed agent at that hot stage leaves no cap, cgroup or pin once `joule restore` ran.

use super::{http_get, is_root, require, Agent, KillOnDrop, CPU_V1, JOULE};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// Stage 3's default best-effort share of the whole machine (`StageActions::default_for(3)`).
const STAGE3_PCT: f64 = 15.0;

/// A single-threaded busy loop and the hierarchy the agent caps it in.
struct BusyClass {
    busy: KillOnDrop,
    pid: u32,
    cgroups_before: String,
    /// The class's CFS knob: v1 `cpu.cfs_quota_us`, v2 `cpu.max`.
    knob: PathBuf,
    /// joule's group, and the class's own beside it.
    top: PathBuf,
    class_dir: PathBuf,
    cpus: usize,
    v2: bool,
}

impl BusyClass {
    /// None (the test skips) without root or a cpu controller with CFS bandwidth. The agent
    /// picks a v1 `cpu` hierarchy when there is one (as here), else the v2 tree.
    fn new() -> Option<BusyClass> {
        if !require(is_root(), "root (the agent creates cgroups and pins BPF maps)") {
            return None;
        }
        let v1 = Path::new(CPU_V1).join("cpu.cfs_quota_us").exists();
        let unified = ["/sys/fs/cgroup/unified", "/sys/fs/cgroup"]
            .map(PathBuf::from)
            .into_iter()
            .find(|d| std::fs::read_to_string(d.join("cgroup.controllers")).is_ok_and(|c| c.split_whitespace().any(|x| x == "cpu")));
        if !require(v1 || unified.is_some(), "a cgroup cpu controller (v1 hierarchy or v2 with cpu)") {
            return None;
        }
        let (top, cpus_file, v2) = match (v1, unified) {
            (true, _) => (Path::new(CPU_V1).join("joule"), PathBuf::from("/sys/fs/cgroup/cpuset/cpuset.effective_cpus"), false),
            (false, Some(u)) => (u.join("joule"), u.join("cpuset.cpus.effective"), true),
            (false, None) => unreachable!("required above"),
        };
        let cpus = std::fs::read_to_string(&cpus_file).ok().and_then(|s| joule_qos::cpulist::parse(s.trim())).map_or(1, |v| v.len());
        let busy = KillOnDrop(Command::new("sh").args(["-c", "while :; do :; done"]).spawn().unwrap());
        let pid = busy.0.id();
        // A best-effort class is an idle group beside joule's (docs/qos.md, "Best-effort classes").
        let class_dir = top.with_file_name("joule.jbe");
        let knob = class_dir.join(if v2 { "cpu.max" } else { "cpu.cfs_quota_us" });
        let cgroups_before = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap();
        Some(BusyClass { busy, pid, cgroups_before, knob, top, class_dir, cpus, v2 })
    }

    fn class_config(&self) -> String {
        format!("[[class]]\nname = \"jbe\"\nthermal = \"best_effort\"\nmatch = {{ pid = [{}] }}\n", self.pid)
    }

    /// What the knob holds at `pct` % of the machine with a 100 ms period.
    fn capped_value(&self, pct: f64) -> String {
        let q = (pct / 100.0 * self.cpus as f64 * 100_000.0).round() as u64;
        if self.v2 {
            format!("{q} 100000")
        } else {
            q.to_string()
        }
    }

    fn wait_knob(&self, want: &str) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let got = std::fs::read_to_string(&self.knob).unwrap_or_default();
            if got.trim() == want {
                return;
            }
            assert!(Instant::now() < deadline, "{} holds {got:?}, never {want:?}", self.knob.display());
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The loop's CPU use over 3 s, in CPUs (1.0 = one CPU all the time).
    fn cpu_share(&self) -> f64 {
        let ticks = || {
            let s = std::fs::read_to_string(format!("/proc/{}/stat", self.pid)).unwrap();
            let f: Vec<&str> = s.rsplit_once(')').unwrap().1.split_whitespace().collect();
            f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap() // utime, stime
        };
        let hz = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK).unwrap().unwrap() as f64;
        let (t0, c0) = (Instant::now(), ticks());
        std::thread::sleep(Duration::from_secs(3));
        (ticks() - c0) as f64 / hz / t0.elapsed().as_secs_f64()
    }
}

impl Drop for BusyClass {
    fn drop(&mut self) {
        let _ = self.busy.0.kill();
    }
}

/// The hot stage caps the class (the knob, the thermal_actions event, the metric, the loop's
/// measured CPU); SIGKILL at that stage then `joule restore` leaves no cap, group or pin, and
/// the loop runs free again.
#[test]
#[ignore = "tier 2: root"]
fn root_hot_stage_caps_a_best_effort_class_and_restore_after_sigkill_frees_it() {
    let Some(b) = BusyClass::new() else { return };
    // The RC model starts at its 25 °C ambient and rises: over 20 °C is stage 3 at once.
    let cfg = format!("[thermal]\nstage_thresholds_celsius = [10.0, 15.0, 20.0]\nact_on_model = true\n\n{}", b.class_config());
    let mut agent = Agent::start(&cfg);
    let want = b.capped_value(STAGE3_PCT);
    b.wait_knob(&want);
    assert_eq!(std::fs::read_to_string(b.class_dir.join("cpu.idle")).unwrap().trim(), "1", "a best-effort class's group is idle");
    let actions = agent.wait_event(0, "thermal_actions");
    assert_eq!((actions["stage"].as_u64(), actions["path"].as_str()), (Some(3), Some("cgroup")), "{actions}");
    assert_eq!(actions["class_cpu_pct"]["jbe"], STAGE3_PCT, "{actions}");
    let stage = agent.wait_event(0, "stage");
    assert_eq!((stage["computed_by"].as_str(), stage["driven_by"].as_str()), (Some("ebpf"), Some("temperature")), "{stage}");
    let (_, metrics) = http_get(&agent.metrics_addr(), "/metrics", None);
    let line =
        metrics.lines().find(|l| l.starts_with("joule_thermal_class_cap_ratio{class=\"jbe\"}")).unwrap_or_else(|| panic!("no cap metric in:\n{metrics}"));
    assert_eq!(line.rsplit(' ').next().unwrap().parse::<f64>().unwrap(), STAGE3_PCT / 100.0, "{line}");

    // Capped: 15 % of the machine is 0.15 × CPUs of one CPU's time for the loop.
    let cap_cpus = STAGE3_PCT / 100.0 * b.cpus as f64;
    let capped = b.cpu_share();
    eprintln!("busy loop capped at {cap_cpus:.2} CPU: used {capped:.3} CPU");
    assert!(capped < cap_cpus + 0.08, "the capped loop used {capped:.3} CPU, cap {cap_cpus:.2}");

    joule_testkit::sigkill_agent_and_guardian(&mut agent.child); // SIGKILL at the hot stage: nothing is undone
    assert_eq!(std::fs::read_to_string(&b.knob).unwrap().trim(), want, "the cap vanished without a restore: the test would prove nothing");
    let records = joule_core::journal::entries(&agent.journal_dir()).unwrap();
    assert!(
        records.iter().any(|e| e.owner == "qos" && matches!(&e.undo, joule_core::journal::Undo::Write { path, .. } if *path == b.knob)),
        "the cap is not journalled: {records:#?}"
    );
    let out = Command::new(JOULE).args(["restore", "--journal-dir"]).arg(agent.journal_dir()).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(!b.top.exists() && !b.class_dir.exists(), "restore left {} or {}", b.top.display(), b.class_dir.display());
    assert!(!agent.pin_dir.exists(), "restore left {}", agent.pin_dir.display());
    assert!(joule_core::journal::entries(&agent.journal_dir()).unwrap().is_empty());
    assert_eq!(std::fs::read_to_string(format!("/proc/{}/cgroup", b.pid)).unwrap(), b.cgroups_before, "the loop is not back in its cgroups");
    let free = b.cpu_share();
    eprintln!("busy loop after restore: used {free:.3} CPU");
    assert!(free > capped * 1.3 && free > cap_cpus + 0.08, "the loop still looks capped after restore: {free:.3} CPU (capped {capped:.3})");
}

/// A power budget under the modelled idle power (10 W) raises the in-kernel stage to 3 while
/// the temperature (the model, far below 150 °C) alone would leave it at 0; the stage says
/// power drove it, with the watts' origin, and the class is capped by it.
#[test]
#[ignore = "tier 2: root"]
fn root_low_power_budget_raises_the_in_kernel_stage() {
    let Some(b) = BusyClass::new() else { return };
    let cfg = format!(
        "[thermal]\nstage_thresholds_celsius = [150.0, 160.0, 170.0]\nact_on_model = true\npower_thresholds_watts = [1.0, 2.0, 3.0]\npower_hysteresis_watts = 0.5\n\n{}",
        b.class_config()
    );
    let agent = Agent::start(&cfg);
    let deadline = Instant::now() + Duration::from_secs(30);
    let stage = loop {
        if let Some(s) = agent.events().into_iter().find(|v| v["event"] == "stage" && v["stage"] == 3) {
            break s;
        }
        assert!(Instant::now() < deadline, "the stage never reached 3: {:#?}", agent.events());
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!((stage["computed_by"].as_str(), stage["driven_by"].as_str()), (Some("ebpf"), Some("power")), "{stage}");
    let power = &stage["power"];
    assert_eq!(power["stage"], 3, "{stage}");
    assert!(power["watts"].as_f64().unwrap() >= 3.0, "{stage}");
    assert!(matches!(power["source"].as_str(), Some("sensor" | "model")), "{stage}");
    assert!(stage["temp_celsius"].as_f64().unwrap() < 150.0, "the real temperature is reported, not the power stage's stand-in: {stage}");
    b.wait_knob(&b.capped_value(STAGE3_PCT));
}
