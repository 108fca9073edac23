//! Tier 2 (root, this kernel, bpffs): `joule bench overhead` exercises the eBPF sched_switch
//! path — the waking scenario's measured wake-ups show up as sched_switch runs of the agent's
//! programs, with their in-kernel cost — and names each program in full; `joule bench thermal`
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
    let out = Command::new(env!("CARGO_BIN_EXE_joule"))
        .args(["bench", "overhead", "--runs", "1", "--seconds", "1.5", "--warmup-s", "1", "--threads", "50", "--wakers", "4"])
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
/// (in any hierarchy), and processes of its loads or its agent.
fn bench_thermal_leftovers() -> Vec<String> {
    let mut left = Vec::new();
    let root = std::path::Path::new("/sys/fs/cgroup");
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                if e.file_name().to_string_lossy().starts_with("bench-thermal-") {
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
fn root_bench_thermal_runs_both_modes_reports_every_field_and_leaves_nothing() {
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
    let out = Command::new(env!("CARGO_BIN_EXE_joule"))
        .args(["bench", "thermal", "--duration-s", "10", "--warmup-s", "2", "--path", "cgroup"])
        .arg("--json")
        .arg(&json)
        .arg("--plot")
        .arg(&svg)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert_eq!(v["path"], "cgroup");
    // No sensor on this machine: the model, and the table says so.
    let src = v["temp_source"].as_str().unwrap();
    assert!(src == "model" || src == "sensor", "{src}");
    assert!(stdout.contains(&format!("temp peak °C ({src})")), "{stdout}");
    assert_eq!(v["limit_celsius"], 50.0);
    let runs = v["runs"].as_array().unwrap();
    assert_eq!(runs.iter().map(|r| r["mode"].as_str().unwrap()).collect::<Vec<_>>(), ["default", "joule"]);
    for r in runs {
        for k in [
            "temp_peak_celsius",
            "temp_mean_celsius",
            "fio_read_mib_s",
            "fio_write_mib_s",
            "stress_bogo_ops",
            "labelled_wakeup_p50_us",
            "labelled_wakeup_p99_us",
        ] {
            assert!(r[k].as_f64().is_some_and(|x| x.is_finite() && x > 0.0), "{k} of {}: {}", r["mode"], r[k]);
        }
        let stages: Vec<f64> = r["stage_seconds"].as_array().unwrap().iter().map(|s| s.as_f64().unwrap()).collect();
        assert_eq!(stages.len(), 4);
        let total: f64 = stages.iter().sum();
        assert!((8.0..=11.0).contains(&total), "{} s in stages of a 10 s mode", total);
        // 2 ms sleeps for 10 s: thousands of wake-ups, each measured.
        assert!(r["labelled_wakeups"].as_u64().unwrap() > 1000, "{}", r["labelled_wakeups"]);
        assert!(r["temp_peak_celsius"].as_f64().unwrap() >= r["temp_mean_celsius"].as_f64().unwrap());
    }
    // The default run uses the stage rule on its own trace, the joule run the agent's stage; the
    // agent put stress-ng in the best-effort class's group.
    assert_eq!(runs[0]["stage_from"], "rule");
    assert_eq!(runs[1]["stage_from"], "agent");
    assert!(runs[1]["stress_cgroup"].as_str().unwrap_or_default().ends_with("/bench-thermal-batch"), "{}", runs[1]["stress_cgroup"]);
    // The default run's 2 busy workers take it past the 50 °C limit within 10 s.
    assert!(runs[0]["temp_peak_celsius"].as_f64().unwrap() > 50.0, "{}", runs[0]["temp_peak_celsius"]);
    for k in ["fio_read", "fio_write", "stress_bogo_ops", "labelled_wakeup_p99"] {
        assert!(v["ratios_joule_over_default"][k].as_f64().is_some_and(f64::is_finite), "{k}");
    }
    assert!(!v["trade_off"].as_array().unwrap().is_empty());
    assert!(std::fs::read_to_string(&svg).unwrap().contains("temperature from model") || src == "sensor");
    assert_eq!(bench_thermal_leftovers(), Vec::<String>::new(), "left behind");
}
