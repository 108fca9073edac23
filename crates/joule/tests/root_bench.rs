//! Tier 2 (root, this kernel, bpffs): `joule bench overhead` exercises the eBPF sched_switch
//! path — the waking scenario's measured wake-ups show up as sched_switch runs of the agent's
//! programs, with their in-kernel cost — and names each program in full.

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
