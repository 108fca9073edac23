//! Tier 1 (no root): `joule-bench`'s contract — its experiments, bounds refused with exit 2
//! before anything starts, and a short overhead run without eBPF (it runs the agent from the
//! `joule` binary beside `joule-bench`, which `cargo test --workspace` builds).

use std::process::Command;

fn bench(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_joule-bench")).args(args).output().expect("joule-bench runs")
}

#[test]
fn help_lists_every_experiment_and_hides_the_internal_ones() {
    let out = bench(&["--help"]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    for sub in ["overhead", "rt-share", "thermal", "elevate", "nap", "net-qos"] {
        assert!(text.contains(sub), "--help lacks {sub}:\n{text}");
    }
    for internal in ["elevate-target", "thermal-probe"] {
        assert!(!text.contains(internal), "--help lists {internal}:\n{text}");
    }
    // One line per experiment, within 100 columns whatever the terminal.
    let commands: Vec<&str> = text.lines().skip_while(|l| *l != "Commands:").skip(1).take_while(|l| !l.is_empty()).collect();
    assert!(commands.iter().all(|l| l.starts_with("  ") && !l.starts_with("   ")), "a summary wraps:\n{text}");
    let wide = Command::new(env!("CARGO_BIN_EXE_joule-bench")).arg("--help").env("COLUMNS", "300").output().unwrap();
    assert!(String::from_utf8_lossy(&wide.stdout).lines().all(|l| l.chars().count() <= 100), "{text}");
}

#[test]
fn bench_overhead_refuses_out_of_range_arguments_with_exit_2() {
    let out = bench(&["overhead", "--runs", "0", "--wakers", "0"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--runs") && err.contains("--wakers"), "{err}");
}

#[test]
fn bench_thermal_refuses_out_of_range_arguments_with_exit_2_before_starting_anything() {
    let out = bench(&["thermal", "--duration-s", "1", "--limit-celsius", "30"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--duration-s") && err.contains("--limit-celsius"), "{err}");
}

/// A short real run without eBPF (no root needed): the thread counts appear as given, the
/// eBPF cost is absent rather than zero, and the waking load's rate is measured.
#[test]
fn bench_overhead_without_bpf_reports_counts_as_given_and_no_ebpf_cost() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("o.json");
    let out = bench(&[
        "overhead",
        "--no-bpf",
        "--runs",
        "1",
        "--seconds",
        "0.5",
        "--warmup-s",
        "0.3",
        "--threads",
        "7",
        "--wakers",
        "2",
        // A loop that never rests: in half a second an agent at rest may not run at all.
        "--rest-period-ms",
        "100",
        "--json",
        json.to_str().unwrap(),
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("eBPF off (--no-bpf)") && stdout.contains("+7 sleeping threads"), "{stdout}");
    assert!(!stdout.contains("1000 sleeping"), "{stdout}");
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert_eq!((v["bpf"].clone(), v["threads"].clone(), v["wakers"].clone()), (false.into(), 7.into(), 2.into()));
    let sc = v["scenarios"].as_array().unwrap();
    assert_eq!(sc.len(), 3);
    for s in sc {
        assert!(s["bpf_cpu_pct_median"].is_null() && s["bpf_programs"].is_null(), "{s}");
        assert!(s["agent_cpu_pct_median"].as_f64().unwrap() > 0.0, "{s}");
        assert!(s["agent_wakeups_per_s_median"].as_f64().unwrap() > 0.0, "{s}");
    }
    assert_eq!(sc[1]["load_wakeups_per_s_median"], 0.0, "sleeping threads woke: {}", sc[1]);
    // 2 threads sleeping 1 ms each: ~1,800/s on an idle machine; far fewer only if starved.
    assert!(sc[2]["load_wakeups_per_s_median"].as_f64().unwrap() > 200.0, "{}", sc[2]);
}
