//! `joule status` from a view as the agent's socket sends it: the budget against its limits
//! with the source, the stage and its age, the plan's reasons per mechanism, each class's
//! promise beside its use, cap and latency, conflicts and drift.

use super::*;
use serde_json::{json, Value};

/// The view the fixture's JSON makes (laid over a default view, as the socket's type reads it).
fn summarize(v: &Value, now_ms: u64) -> Summary {
    super::summarize(&joule_core::view::over_default(v).expect("the fixture is a view"), now_ms)
}

fn view() -> Value {
    json!({
        "version": 1,
        "budget": {
            "thresholds_celsius": [70.0, 80.0, 90.0], "thresholds_from": "config", "sensors": ["thermal_zone0"],
            "power_thresholds_watts": [], "period_ms": 100, "rest_period_ms": 2000, "pid": 4242,
            "started_unix_ms": 1_000_000, "metrics_url": "http://127.0.0.1:9977/metrics",
            "classes": [
                { "name": "main", "rt_runtime_us": 300000, "rt_period_us": 1000000, "thermal": "labelled" },
                { "name": "batch", "thermal": "best_effort" }
            ]
        },
        "snapshot": {
            "stage": { "value": 2, "temp_celsius": 83.5, "computed_by": "ebpf", "temp_source": "sensor", "driven_by": "temperature" },
            "power": { "watts": 6.5, "source": "model" },
            "classes": [ { "class": "main", "processes": 3, "source": "ebpf" }, { "class": "batch", "processes": 12, "source": "ebpf" } ],
            "cgroups": [ { "path": "/joule/main", "usage_cpus": 0.31, "hierarchy": "v2", "usage_us": 0, "throttled_us": 0, "nr_throttled": 0, "source": "kernel" },
                         { "path": "/joule.batch", "usage_cpus": 0.4, "hierarchy": "v2", "usage_us": 0, "throttled_us": 0, "nr_throttled": 0, "source": "kernel" } ],
            "runq_latency": [ { "cgroup": "/joule/main", "count": 50, "p99_us": 140.0, "p50_us": 20.0, "max_us": 300.0, "source": "ebpf" } ]
        },
        "plan": {
            "decisions": [
                { "policy": "thermal", "actuator": "cgroup_cpu", "want": { "kind": "cap_class", "class": "batch", "cpu_pct": 35.0 }, "reason": "stage 2: best-effort classes get 35% of the machine" },
                { "policy": "classes", "actuator": "cgroup_cpu", "want": { "kind": "hold_classes", "classes": ["main", "batch"] }, "reason": "2 [[class]] in the config" }
            ],
            "conflicts": [ { "knob": "cpufreq_max", "cpu": 0, "won": "thermal", "lost": "placement", "why": "the lower cap holds" } ]
        },
        "actuators": [
            { "name": "cgroup_cpu", "ok": true, "errors_total": 0, "state": { "caps": { "batch": { "ratio": 0.35 } }, "drift_total": { "nginx.service CPUWeight": 1 } } },
            { "name": "tc", "ok": false, "last_error": "no such device eth9", "errors_total": 1, "state": {} }
        ],
        "agent": { "cpu_seconds_total": 0.5, "max_loop_seconds": 0.004, "stage_since_unix_ms": 1_050_000, "conflicts_total": 1, "loop_overruns_total": 0, "stage_transitions_total": 2, "pace": { "period_ms": 100, "why": "stage" },
                   "limits": { "limit_celsius": 95.0, "limit_from": "thresholds", "stage_thresholds_celsius": [70.0, 80.0, 90.0], "thresholds_kind": "config", "power_thresholds_watts": [] }, "recovered": { "undone": 0, "already_gone": 0, "failed": 0 } },
        "published_ms_ago": 40
    })
}

#[test]
fn the_summary_puts_budget_stage_reasons_and_classes_side_by_side() {
    let s = summarize(&view(), 1_100_000);
    assert_eq!((s.agent.pid, s.agent.up_s), (4242, 100.0));
    assert!((s.agent.cpu_pct - 0.5).abs() < 1e-9, "0.5 s of CPU in 100 s");
    assert_eq!((s.budget.temp_celsius, s.budget.headroom_celsius), (Some(83.5), Some(70.0 - 83.5)));
    assert_eq!((s.stage.value, s.stage.since_s), (2, Some(50.0)));
    let thermal = s.mechanisms.iter().find(|m| m.name == "thermal").unwrap();
    assert_eq!(thermal.doing, ["cap class batch to 35% of the machine: stage 2: best-effort classes get 35% of the machine"]);
    assert_eq!(s.mechanisms.last().unwrap().errors, ["actuator tc: no such device eth9"]);
    let main = &s.classes[0];
    assert_eq!((main.processes, main.used_cpus, main.runq_p99_us, main.cap_ratio), (3, Some(0.31), Some(140.0), None));
    assert_eq!(main.promised, "RT 30% of a CPU, protected (labelled)");
    assert_eq!((s.classes[1].used_cpus, s.classes[1].cap_ratio), (Some(0.4), Some(0.35)), "an idle best-effort class's cgroup is joule.<class>");
    let text = render(&s);
    for want in [
        "temperature 83.5 °C (sensor, thermal_zone0) · stages from 70.0 °C to 90.0 °C (set by config)",
        "headroom -13.5 °C · limit 95.0 °C (past hottest stage)",
        "stage 2 (computed by ebpf, driven by temperature) for 50 s",
        "35%",
        "140 µs",
        "cpufreq_max: thermal won over placement",
        "nginx.service CPUWeight changed by someone else 1×",
        "ERROR actuator tc",
    ] {
        assert!(text.contains(want), "{want:?} not in:\n{text}");
    }
}

#[test]
fn without_a_temperature_acted_on_it_says_so_rather_than_a_zero() {
    let mut v = view();
    v["snapshot"]["stage"] = json!({ "value": 0, "temp_celsius": 0.0, "computed_by": "none", "temp_source": "unknown" });
    let s = summarize(&v, 1_100_000);
    assert_eq!((s.budget.temp_celsius, s.budget.headroom_celsius), (None, None));
    assert!(render(&s).contains("temperature: none acted on"), "{}", render(&s));
}

#[test]
fn changes_a_previous_run_left_are_reported_and_a_failed_undo_as_an_error() {
    let mut v = view();
    v["agent"]["recovered"] = json!({ "undone": 2, "already_gone": 1, "failed": 0 });
    let text = render(&summarize(&v, 1_100_000));
    assert!(text.contains("at start, cleared 3 change(s) a previous run left") && !text.contains("ERROR at start"), "{text}");
    v["agent"]["recovered"]["failed"] = json!(1);
    let s = summarize(&v, 1_100_000);
    assert_eq!((s.recent.left_by_previous_run, s.recent.left_failed), (4, 1));
    assert!(render(&s).contains("ERROR at start, 1 change(s) a previous run left could not be undone"), "{}", render(&s));
    // An agent from before these fields: nothing said, nothing invented.
    v["agent"].as_object_mut().unwrap().remove("recovered");
    v["agent"].as_object_mut().unwrap().remove("limits");
    let s = summarize(&v, 1_100_000);
    assert_eq!((s.recent.left_by_previous_run, s.budget.limit_celsius), (0, None));
    assert!(!render(&s).contains("limit "), "{}", render(&s));
}

/// Names and reasons a user chose — a thread's name setting the terminal's title (OSC 2) or
/// clipboard (OSC 52), a C1 CSI, a newline forging a line — are shown escaped; the JSON
/// carries the same value with DEL and C1 escaped too.
#[test]
fn names_and_reasons_from_the_machine_reach_the_terminal_escaped() {
    let mut v = view();
    v["snapshot"]["interval_ms"] = json!(1000);
    v["snapshot"]["task_wait"] = json!([
        { "pid": 71, "comm": "\u{1b}]2;owned\u{7}", "wait_us": 300_000, "source": "ebpf" },
        { "pid": 72, "comm": "\u{1b}]52;c;SGk=\u{7}", "wait_us": 600_000, "source": "ebpf" },
        { "pid": 73, "comm": "\u{9b}2J\u{9d}0;x\u{9c}", "wait_us": 1_000, "source": "ebpf" }
    ]);
    v["plan"]["decisions"][0]["reason"] = json!("pods web-\u{1b}[31m\nERROR forged");
    v["actuators"][1]["last_error"] = json!("moving \u{1b}]2;x\u{7}: gone");
    let s = summarize(&v, 1_100_000);
    assert_eq!(s.waiting.iter().map(|w| (w.tid, w.wait_ms_per_s)).collect::<Vec<_>>(), [(72, 600.0), (71, 300.0), (73, 1.0)], "longest first, in ms/s");
    let text = escape_lines(&render(&s)).into_owned();
    assert!(!text.chars().any(|c| c.is_control() && c != '\n'), "a control character reached the text:\n{text:?}");
    for want in [
        "\\x1b]2;owned\\x07",
        "\\x1b]52;c;SGk=\\x07",
        "\\u{9b}2J\\u{9d}0;x\\u{9c}",
        "pods web-\\x1b[31m\\nERROR forged",
        "moving \\x1b]2;x\\x07: gone",
        "Waiting longest for a CPU",
    ] {
        assert!(text.contains(want), "{want:?} not in:\n{text}");
    }
    assert!(!text.lines().any(|l| l.starts_with("ERROR forged")), "a newline in a reason forged a line:\n{text}");
    let json = joule_core::text::to_json(&s, true).unwrap();
    assert!(!json.chars().any(|c| c.is_control() && c != '\n'), "{json:?}");
    let back: Value = serde_json::from_str(&json).unwrap();
    assert_eq!(back["waiting"][2]["comm"], "\u{9b}2J\u{9d}0;x\u{9c}", "the JSON keeps the name as it is");
}

#[test]
fn pods_the_runtime_has_not_named_are_said_with_their_age_and_why() {
    let mut v = view();
    v["snapshot"]["pods"] = json!({ "source": "cri:/run/containerd/containerd.sock", "pods": 18, "unnamed": 2, "stale_since_unix_ms": 1_060_000, "errors_total": 4, "last_error": "connection refused", "refreshes_total": 9, "refresh_seconds_total": 0.1 });
    let text = render(&summarize(&v, 1_100_000));
    assert!(
        text.contains("Pods: 18 named by cri:/run/containerd/containerd.sock; 2 not named, the oldest for 40 s: held at the cap")
            && text.contains("(the runtime: connection refused)"),
        "{text}"
    );
    v["snapshot"]["pods"]["stale_since_unix_ms"] = Value::Null;
    assert!(render(&summarize(&v, 1_100_000)).contains("every pod seen is named"));
    v["snapshot"].as_object_mut().unwrap().remove("pods");
    assert!(!render(&summarize(&v, 1_100_000)).contains("Pods:"), "no pod class: no line");
}

fn fixture(name: &str) -> String {
    std::fs::read_to_string(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/view").join(name)).unwrap()
}

/// A current agent's whole view (testdata/view/status-v1.json) prints what `joule status`
/// printed before the view had a type: the text and the JSON were captured from that build,
/// serving this fixture on a socket (the times moved to the moment of the capture).
#[test]
fn a_current_agents_view_prints_what_joule_status_printed_before_the_view_had_a_type() {
    let v: Value = serde_json::from_str(&fixture("status-v1.json")).unwrap();
    let s = summarize(&v, 1_100_000);
    assert_eq!(escape_lines(&render(&s)), fixture("status-v1.txt"));
    let json: Value = serde_json::from_str(&joule_core::text::to_json(&s, true).unwrap()).unwrap();
    assert_eq!(json, serde_json::from_str::<Value>(&fixture("status-v1.summary.json")).unwrap());
}

/// A part the agent did not send is said as missing, never as 0: a view from before the
/// view had a version gets a note, and an agent that has published nothing yet is not a
/// reading 0 ms old (what `joule status` printed for both before).
#[test]
fn a_view_missing_a_part_says_missing_not_0() {
    let mut v: Value = serde_json::from_str(&fixture("status-v1.json")).unwrap();
    v.as_object_mut().unwrap().remove("version");
    v["published_ms_ago"] = Value::Null;
    let s = summarize(&v, 1_100_000);
    let text = render(&s);
    assert!(text.starts_with("note: the agent's view has no version: missing (agent too old"), "{text}");
    assert!(text.contains("reading: missing (none published yet)") && !text.contains("reading 0 ms old"), "{text}");
    assert_eq!(s.agent.published_ms_ago, None);
}

#[test]
fn an_agent_without_ebpf_says_why_in_words_and_the_kernels_refusal() {
    let mut v = view();
    v["snapshot"]["bpf"] = json!({ "enabled": false, "off_reason": "load_failed" });
    v["snapshot"]["notes"] = json!(["eBPF load failed: while loading runqlat.bpf.o: Invalid argument (os error 22)"]);
    let s = summarize(&v, 1_100_000);
    let off = s.ebpf_off.as_ref().expect("eBPF is off");
    assert_eq!(off.reason, "load_failed");
    assert!(off.why.contains("refused a program") && off.why.contains("Invalid argument"), "{off:?}");
    assert!(render(&s).contains("  eBPF off (load_failed): the kernel refused"), "{}", render(&s));
    v["snapshot"]["bpf"] = json!({ "enabled": false, "off_reason": "no_btf" });
    let s = summarize(&v, 1_100_000);
    assert!(render(&s).contains("eBPF off (no_btf): this kernel has no BTF"), "{}", render(&s));
    v["snapshot"]["bpf"] = json!({ "enabled": true, "off_reason": "" });
    let s = summarize(&v, 1_100_000);
    assert!(s.ebpf_off.is_none() && !render(&s).contains("eBPF off"), "{}", render(&s));
}
