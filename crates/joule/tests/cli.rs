//! Tier 1 (no root): the CLI's contract — help, exit codes, check-config messages with lines;
//! and one tier-2 check of `joule doctor` against the kernel's own files.

use std::process::Command;

fn joule(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_joule")).args(args).output().expect("joule runs")
}

#[test]
fn help_lists_every_subcommand() {
    let out = joule(&["--help"]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    for sub in ["agent", "monitor", "check-config", "restore", "qos", "scx", "elevate", "nap", "doctor"] {
        assert!(text.contains(sub), "--help lacks {sub}:\n{text}");
    }
    // The benchmarks are `joule-bench`'s, not the operator's binary's.
    assert!(!text.lines().any(|l| l.trim_start().starts_with("bench")), "--help lists bench:\n{text}");
    assert_eq!(joule(&["bench", "overhead"]).status.code(), Some(2));
}

/// The binary's help does not depend on the terminal: never wider than 100 columns (the
/// unit test `help_tests` checks every subcommand's text at that width).
#[test]
fn help_is_at_most_100_columns_on_any_terminal() {
    for columns in ["100", "300"] {
        let out = Command::new(env!("CARGO_BIN_EXE_joule")).arg("--help").env("COLUMNS", columns).output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.lines().all(|l| l.chars().count() <= 100), "COLUMNS={columns}:\n{text}");
    }
}

#[test]
fn check_config_accepts_the_shipped_config() {
    let cfg = concat!(env!("CARGO_MANIFEST_DIR"), "/../../deploy/joule.toml");
    let out = joule(&["check-config", cfg]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn check_config_reports_each_problem_with_its_line_and_exits_2() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("bad.toml");
    std::fs::write(&p, "[agent]\nperiod_ms = 1\n\n[thermal]\nhysteresis_celsius = 50.0\n").unwrap();
    let out = joule(&["check-config", p.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains(&format!("{}:2:", p.display())), "{text}");
    assert!(text.contains(&format!("{}:5:", p.display())), "{text}");

    let out = joule(&["check-config", "--json", p.to_str().unwrap()]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["valid"], false);
    assert_eq!(v["problems"].as_array().unwrap().len(), 2);
}

/// Issue 36: the rest period is checked against the full one, and a valid one is accepted.
#[test]
fn check_config_refuses_a_rest_period_shorter_than_the_period() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("rest.toml");
    std::fs::write(&p, "[agent]\nperiod_ms = 200\nrest_period_ms = 100\n").unwrap();
    let out = joule(&["check-config", p.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains(":3:") && text.contains("rest_period_ms = 100") && text.contains("period_ms..=60000"), "{text}");
    std::fs::write(&p, "[agent]\nperiod_ms = 100\nrest_period_ms = 2000\n").unwrap();
    let out = joule(&["check-config", p.to_str().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stdout));
}

#[test]
fn check_config_names_an_unknown_key() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("typo.toml");
    std::fs::write(&p, "[telemetry]\nbfp = true\n").unwrap();
    let out = joule(&["check-config", p.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("bfp") && text.contains(":2:"), "{text}");
}

#[test]
fn missing_config_file_is_a_usage_error() {
    let out = joule(&["check-config", "/nonexistent/joule.toml"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent/joule.toml"));
}

#[test]
fn nap_status_without_an_agent_is_a_usage_error_saying_so() {
    let dir = tempfile::tempdir().unwrap();
    let out = joule(&["nap", "status", "--journal-dir", dir.path().to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no joule agent runs"), "{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn status_without_an_agent_exits_3_and_points_at_monitor() {
    let dir = tempfile::tempdir().unwrap();
    // A socket a killed agent left behind answers nothing either.
    let _stale = std::os::unix::net::UnixListener::bind(dir.path().join("agent.sock")).map(drop);
    let out = joule(&["status", "--journal-dir", dir.path().to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(3), "{}", String::from_utf8_lossy(&out.stderr));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("no joule agent answers") && err.contains("joule monitor"), "{err}");
}

#[test]
fn a_nap_config_that_would_nap_at_once_or_do_nothing_is_refused_with_lines() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("j.toml");
    std::fs::write(&p, "[nap]\nenabled = true\nclass = \"web\"\n").unwrap();
    let out = joule(&["check-config", p.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    let text = String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(text.contains("no monitor") && text.contains("not a [[class]]"), "{text}");
}

#[test]
fn restore_of_an_empty_journal_is_a_no_op() {
    let dir = tempfile::tempdir().unwrap();
    let out = joule(&["restore", "--journal-dir", dir.path().to_str().unwrap(), "--json"]);
    assert!(out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["undone"], 0);
}

#[test]
fn monitor_once_json_without_bpf_has_the_documented_shape() {
    let out = joule(&["monitor", "--once", "--json", "--no-bpf", "--interval-ms", "200"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let ncpu = std::thread::available_parallelism().unwrap().get();
    assert_eq!(v["cpu"]["utilization"].as_array().unwrap().len(), ncpu);
    for u in v["cpu"]["utilization"].as_array().unwrap() {
        let u = u.as_f64().unwrap();
        assert!((0.0..=1.0).contains(&u), "utilisation {u}");
    }
    assert!(v["power"]["watts"].as_f64().unwrap() > 0.0);
    assert!(["sensor", "model"].contains(&v["power"]["source"].as_str().unwrap()));
    // Without eBPF the rule runs in user space; with no CPU sensor (and no act_on_model) nothing
    // computes a stage at all, and the snapshot says so.
    let by = v["stage"]["computed_by"].as_str().unwrap();
    if v["thermal"]["zones"].as_array().unwrap().is_empty() {
        assert_eq!(by, "none", "{}", v["stage"]);
    } else {
        assert!(["userspace", "none"].contains(&by), "{}", v["stage"]);
    }
    assert!(v["runq_latency"].is_array());
}

#[test]
fn regression_monitor_into_a_closed_pipe_exits_quietly() {
    use std::io::BufRead;
    let mut child = Command::new(env!("CARGO_BIN_EXE_joule"))
        .args(["monitor", "--json", "--no-bpf", "--interval-ms", "20"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap()).read_line(&mut first).unwrap(); // then dropped: reader gone
    let out = child.wait_with_output().unwrap();
    assert!(first.starts_with('{'), "{first}");
    assert!(out.status.success(), "status {:?}: {}", out.status, String::from_utf8_lossy(&out.stderr));
    assert!(!String::from_utf8_lossy(&out.stderr).contains("panicked"));
}

#[test]
fn qos_without_classes_is_a_usage_error_and_plans_nothing() {
    let out = joule(&["qos", "plan"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no [[class]]"));
    assert!(!String::from_utf8_lossy(&out.stdout).contains("mkdir"));
}

#[test]
fn qos_plan_refuses_runtime_above_period_naming_the_values_and_exits_2() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("c.toml");
    std::fs::write(&p, "[[class]]\nname = \"a\"\nrt_runtime_us = 2000\nrt_period_us = 1000\n").unwrap();
    // --config after the subcommand works as well as before it.
    let out = joule(&["qos", "plan", "--config", p.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    // The config's own check refuses it before admission does, with both numbers and the line.
    let text = String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(text.contains("exceeds its period") && text.contains("2000") && text.contains("1000") && text.contains("c.toml:3"), "{text}");
}

#[test]
fn scx_refuses_bad_arguments_with_exit_2() {
    let tmp = tempfile::tempdir().unwrap();
    let not_cgroup = tmp.path().to_str().unwrap();
    for (args, names) in [
        (&["scx", "--age-ms", "0"][..], "age 0 ms"),
        (&["scx", "--duration-s", "0"][..], "--duration-s"),
        (&["scx", "--label-cgroup", not_cgroup][..], "not a cgroup v2 directory"),
    ] {
        let out = joule(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(names), "{args:?}: {err}");
    }
}

/// On a kernel without sched_ext (a sysfs without kernel/sched_ext, like this development
/// host's) `joule scx` says what is missing and exits 1, before it needs root.
#[test]
fn scx_without_sched_ext_names_what_is_missing_and_exits_1() {
    let sys = tempfile::tempdir().unwrap();
    let out = joule(&["scx", "--duration-s", "1", "--sysfs-root", sys.path().to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("no sched_ext") && err.contains("CONFIG_SCHED_CLASS_EXT") && err.contains("kernel/sched_ext is absent"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}

/// The broken configs of `testdata/configs/broken` (issue 17), each with the words its first
/// line expects (`# expect: ...`).
pub fn broken_configs() -> Vec<(std::path::PathBuf, String)> {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../testdata/configs/broken");
    let mut v: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "toml"))
        .map(|p| {
            let text = std::fs::read_to_string(&p).unwrap();
            let expect =
                text.lines().next().and_then(|l| l.strip_prefix("# expect: ")).unwrap_or_else(|| panic!("{} lacks # expect:", p.display())).to_string();
            (p, expect)
        })
        .collect();
    v.sort();
    v
}

#[test]
fn check_config_refuses_every_broken_config_of_the_corpus_with_its_reason() {
    let corpus = broken_configs();
    assert!(corpus.len() >= 30, "the corpus has {} configs", corpus.len());
    for (p, expect) in corpus {
        let out = joule(&["check-config", p.to_str().unwrap()]);
        let text = String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{}: {text}", p.display());
        assert!(text.contains(&expect), "{}: expected {expect:?} in:\n{text}", p.display());
    }
}

#[test]
fn check_config_prints_three_independent_mistakes_with_their_lines() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("three.toml");
    std::fs::write(
        &p,
        "[agent]\nperiod_ms = \"fast\"\n\n[telemetry]\ntask_wait_top = 100000\n\n[[class]]\nname = \"rt\"\nrt_runtime_us = 5\nmatch = { comm = [\"x\"] }\n",
    )
    .unwrap();
    let out = joule(&["check-config", p.to_str().unwrap()]);
    let text = String::from_utf8_lossy(&out.stdout);
    for line in [2, 5, 10] {
        assert!(text.contains(&format!("{}:{line}:", p.display())), "line {line} missing:\n{text}");
    }
}

#[test]
fn check_config_refuses_a_device_or_an_oversized_file() {
    let out = joule(&["check-config", "/dev/zero"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not a regular file"), "{}", String::from_utf8_lossy(&out.stderr));
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("big.toml");
    let class = "[[class]]\nname = \"c\"\nmatch = { comm = [\"x\"] }\n";
    std::fs::write(&p, class.repeat(40_000)).unwrap();
    let out = joule(&["check-config", p.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("joule reads at most"), "{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn doctor_on_an_empty_tree_reports_nothing_found_as_json_and_exits_0() {
    let t = tempfile::tempdir().unwrap();
    let p = |d: &str| t.path().join(d).display().to_string();
    let roots: [&str; 10] =
        ["--sysfs-root", &p("sys"), "--procfs-root", &p("proc"), "--cgroup-root", &p("cg"), "--etc-root", &p("etc"), "--var-lib-root", &p("var")];
    let out = joule(&[&["doctor", "--json"][..], &roots].concat());
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["facts"]["cgroup"]["layout"], "none");
    let rows = v["coexistence"].as_array().unwrap();
    assert!(rows.len() == 7 && rows.iter().all(|r| r["others"].as_array().unwrap().is_empty()), "{rows:?}");
    let out = joule(&[&["doctor"][..], &roots].concat());
    assert!(String::from_utf8_lossy(&out.stdout).contains("who else manages these knobs\n  none found"), "{}", String::from_utf8_lossy(&out.stdout));
    let cpu = v["backends"].as_array().unwrap().iter().find(|c| c["mechanism"].as_str().unwrap().starts_with("class CPU")).unwrap();
    assert_eq!(cpu["backend"], "none", "{cpu}");
}

/// Tier 2: `joule doctor` on this host agrees with what the kernel shows directly.
#[test]
#[ignore = "tier 2: root"]
fn root_doctor_names_this_hosts_backends_as_the_kernel_shows_them() {
    let out = joule(&["doctor", "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let backend = |m: &str| v["backends"].as_array().unwrap().iter().find(|c| c["mechanism"].as_str().unwrap().starts_with(m)).unwrap()["backend"].clone();
    let rt_group = ["cpu", "cpu,cpuacct"].iter().any(|d| std::path::Path::new("/sys/fs/cgroup").join(d).join("cpu.rt_runtime_us").exists());
    assert_eq!(backend("RT classes"), if rt_group { "RT group scheduling" } else { "SCHED_DEADLINE" });
    let pure_v2 = std::path::Path::new("/sys/fs/cgroup/cgroup.controllers").exists();
    assert_eq!(v["facts"]["cgroup"]["layout"] == "unified", pure_v2, "{}", v["facts"]);
    let scx = std::path::Path::new("/sys/kernel/sched_ext/state").exists();
    assert_eq!(v["facts"]["sched_ext"].is_string(), scx);
    let init = std::fs::read_to_string("/proc/1/comm").unwrap();
    assert_eq!(v["facts"]["cgroup"]["managers"].as_array().unwrap().iter().any(|m| m == "systemd"), init.trim() == "systemd");
    let rt: String = std::fs::read_to_string("/proc/sys/kernel/sched_rt_runtime_us").unwrap().trim().into();
    assert!(v["backends"].as_array().unwrap().iter().any(|c| c["why"].as_str().unwrap().contains(&format!("= {rt}"))), "{}", v["backends"]);
    println!("{}", v["backends"].as_array().unwrap().iter().map(|c| format!("{} = {}", c["mechanism"], c["backend"])).collect::<Vec<_>>().join("; "));
}

#[test]
fn qos_leaves_classes_of_systemd_units_to_the_agent_and_says_so() {
    let t = tempfile::tempdir().unwrap();
    let cfg = t.path().join("j.toml");
    std::fs::write(&cfg, "[[class]]\nname = \"web\"\nmatch = { unit = [\"nginx.service\"] }\nquota_us = 30000\n").unwrap();
    let out = joule(&["qos", "--config", cfg.to_str().unwrap(), "plan"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("web") && err.contains("systemd units") && err.contains("run the agent"), "{err}");
    // A unit name systemd would not accept is refused with its line.
    std::fs::write(&cfg, "[[class]]\nname = \"web\"\nmatch = { unit = [\"../etc.service\"] }\n").unwrap();
    let out = joule(&["check-config", cfg.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stdout).contains("not a systemd service or scope name"), "{}", String::from_utf8_lossy(&out.stdout));
}
