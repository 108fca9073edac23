//! Tier 2 (root, this kernel, bpffs): `joule-bench overhead` exercises the eBPF sched_switch
//! path — the waking scenario's measured wake-ups show up as sched_switch runs of the agent's
//! programs, with their in-kernel cost — and names each program in full; `joule-bench thermal`
//! runs both modes, reports every field the issue asks for, and leaves no cgroup or process.

use joule_core::testing::{is_root, require};
use std::process::Command;

#[test]
#[ignore = "tier 2: root"]
fn root_bench_overhead_waking_load_drives_the_sched_switch_program() {
    if !require(is_root(), "root (the bench's agents load eBPF)") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("o.json");
    let out = Command::new(env!("CARGO_BIN_EXE_joule-bench"))
        .args(["overhead", "--runs", "1", "--seconds", "1.5", "--warmup-s", "1", "--threads", "50", "--wakers", "4"])
        .arg("--json")
        .arg(&json)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}\n{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert_eq!(v["bpf"], true);
    let sc = v["scenarios"].as_array().unwrap();
    let prog = |i: usize, name: &str| {
        let progs = sc[i]["bpf_programs"].as_array().unwrap_or_else(|| panic!("no programs: {}", sc[i]));
        progs.iter().find(|p| p["name"] == name).unwrap_or_else(|| panic!("no {name} in {progs:?}")).clone()
    };
    // Full names, not the kernel's 15 bytes (which would make these two one).
    prog(0, "joule_sched_wakeup");
    prog(0, "joule_sched_wakeup_new");
    let wakeups = sc[2]["load_wakeups_per_s_median"].as_f64().unwrap();
    assert!(wakeups > 1000.0, "4 threads sleeping 1 ms woke only {wakeups}/s");
    let switches = |i: usize| prog(i, "joule_sched_switch")["runs_per_s_median"].as_f64().unwrap();
    // Each wake-up ends in at least one switch into the woken thread (the switch away may go
    // straight to another woken one); half of that leaves room for the rest of the machine's
    // switches to vary between the two scenarios.
    assert!(switches(2) - switches(0) > wakeups / 2.0, "sched_switch {}/s idle vs {}/s waking, {wakeups} wake-ups/s", switches(0), switches(2));
    assert!(sc[2]["bpf_cpu_pct_median"].as_f64().unwrap() > 0.0, "{}", sc[2]);
}

/// Everything of the bench's that could outlive it: cgroup directories named after its classes
/// or its baselines' groups (in any hierarchy), and processes of its loads or its agent.
fn bench_thermal_leftovers() -> Vec<String> {
    let mut left = Vec::new();
    let root = std::path::Path::new("/sys/fs/cgroup");
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                let name = e.file_name().to_string_lossy().to_string();
                if name.starts_with("bench-thermal-") || name.starts_with("joule-bench-thermal-") || name.starts_with("joule.bench-thermal-") {
                    left.push(e.path().display().to_string());
                }
                stack.push(e.path());
            }
        }
    }
    let me = std::process::id().to_string();
    for p in std::fs::read_dir("/proc").unwrap().flatten() {
        let cmd = std::fs::read(p.path().join("cmdline")).unwrap_or_default();
        let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
        let ours = cmd.contains("joule-bench-thermal-") || cmd.contains("thermal-probe");
        if ours && p.file_name().to_string_lossy() != me {
            left.push(format!("pid {}: {cmd}", p.file_name().to_string_lossy()));
        }
    }
    left
}

#[test]
#[ignore = "tier 2: root"]
fn root_bench_thermal_runs_every_mode_against_the_plant_reports_every_field_and_leaves_nothing() {
    if !require(is_root(), "root (the agent's cgroups and eBPF)") {
        return;
    }
    let have = |p: &str| Command::new(p).arg("--version").output().is_ok_and(|o| o.status.success());
    if !require(have("fio") && have("stress-ng"), "fio and stress-ng (scripts/install-deps.sh)") {
        return;
    }
    assert_eq!(bench_thermal_leftovers(), Vec::<String>::new(), "leftovers before the test");
    let dir = tempfile::tempdir().unwrap();
    let (json, svg) = (dir.path().join("t.json"), dir.path().join("t.svg"));
    // 8 s from the idle plant: a full load takes the Pi's plant past 65 °C, not past 80.
    let out = Command::new(env!("CARGO_BIN_EXE_joule-bench"))
        .args(["thermal", "--duration-s", "8", "--warmup-s", "2", "--runs", "1", "--path", "cgroup", "--limit-celsius", "65"])
        .arg("--json")
        .arg(&json)
        .arg("--plot")
        .arg(&svg)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("temp_source: plant") && stdout.contains("no thermal sensor"), "{stdout}");
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert_eq!((v["temp_source"].as_str(), v["path"].as_str(), v["limit_celsius"].as_f64()), (Some("plant"), Some("cgroup"), Some(65.0)));
    for mode in ["none", "uniform", "batch-cap", "joule"] {
        let m = &v["modes"][mode];
        assert_eq!(m["temp_source"], "plant", "{mode}");
        for k in ["plant_peak_celsius", "labelled_p50_us", "labelled_p99_us", "fio_mib_s", "best_effort_work"] {
            assert!(m[k].as_f64().is_some_and(|x| x.is_finite() && x > 0.0), "{k} of {mode}: {}", m[k]);
        }
        assert!(m["seconds_over_limit"].as_f64().is_some_and(|x| x >= 0.0), "{mode}");
        let runs = m["runs"].as_array().unwrap();
        assert_eq!(runs.len(), 1, "{mode}");
        // 2 ms sleeps for 8 s: thousands of wake-ups, each measured.
        assert!(runs[0]["labelled_wakeups"].as_u64().unwrap() > 1000, "{mode}: {}", runs[0]["labelled_wakeups"]);
    }
    // The plant follows the load: the uncapped run heats past the limit, and it is the
    // hottest of the four.
    let peak = |m: &str| v["modes"][m]["plant_peak_celsius"].as_f64().unwrap();
    assert!(peak("none") > 65.0, "the uncapped run stayed at {} °C", peak("none"));
    for m in ["uniform", "batch-cap", "joule"] {
        assert!(peak(m) <= peak("none") + 0.5, "{m} ran hotter ({}) than none ({})", peak(m), peak("none"));
    }
    // Where each mode put stress-ng: the bench's own groups, the agent's best-effort class.
    let cg = |m: &str| v["modes"][m]["runs"][0]["stress_cgroup"].as_str().unwrap_or_default().to_string();
    assert!(cg("uniform").contains("joule-bench-thermal-") && cg("batch-cap").contains("joule-bench-thermal-"), "{} / {}", cg("uniform"), cg("batch-cap"));
    // The agent's best-effort class: an idle group beside joule's (docs/qos.md).
    assert_eq!(cg("joule"), "/joule.bench-thermal-batch", "{}", cg("joule"));
    // A cap was in force in every capping mode (the reaction is measured).
    for m in ["uniform", "batch-cap", "joule"] {
        assert!(v["modes"][m]["reaction_s"].as_f64().is_some(), "{m} never capped stress-ng: {}", v["modes"][m]);
    }
    assert!(v["goals"].as_array().unwrap().len() >= 10);
    assert!(std::fs::read_to_string(&svg).unwrap().contains("temp_source: plant"));
    assert_eq!(bench_thermal_leftovers(), Vec::<String>::new(), "left behind");
}
