//! Checks a parsed config for values the types allow but joule cannot use. Each problem names
//! the key it is about (dotted path, `class[2].name`) so the caller can find its line.
//! Admission control of class guarantees (shares per core) lives in joule-qos, not here.

use super::class::{ClassConfig, SLICE_US};
use super::{Config, MAX_STAGES};

/// Most tasks a top-N list reports.
const MAX_TOP: usize = 100;
/// Most `[[class]]` entries (each is a cgroup in every hierarchy, matched against every process).
pub const MAX_CLASSES: usize = 256;

/// (key path, message, hint)
pub(super) type Found = (String, String, String);

pub(super) fn validate(cfg: &Config) -> Vec<Found> {
    let mut out = Vec::new();
    let mut bad = |key: &str, msg: String, hint: &str| out.push((key.to_string(), msg, hint.to_string()));

    let a = &cfg.agent;
    if !(10..=60_000).contains(&a.period_ms) {
        bad("agent.period_ms", format!("period_ms = {} is outside 10..=60000", a.period_ms), "100 (10 Hz) is the default");
    }
    if let Some(ms) = a.rest_period_ms.filter(|ms| !(a.period_ms..=60_000).contains(ms)) {
        bad(
            "agent.rest_period_ms",
            format!("rest_period_ms = {ms} is outside period_ms..=60000 ({}..=60000): the loop never runs faster at rest than in motion", a.period_ms),
            "unset means 2000 (half a wake-up a second at rest); equal to period_ms never rests",
        );
    }
    if a.metrics_addr.parse::<std::net::SocketAddr>().is_err() {
        bad("agent.metrics_addr", format!("metrics_addr = {:?} is not an IP:port", a.metrics_addr), "e.g. \"127.0.0.1:9977\"");
    }

    let thermal_root = Some(&cfg.telemetry.thermal_root).filter(|p| !p.as_os_str().is_empty());
    let btf_path = Some(&cfg.telemetry.btf_path).filter(|p| !p.as_os_str().is_empty());
    for (k, p) in
        [("agent.journal_dir", &a.journal_dir), ("telemetry.bpf_pin_dir", &cfg.telemetry.bpf_pin_dir), ("telemetry.boot_root", &cfg.telemetry.boot_root)]
            .into_iter()
            .chain(thermal_root.map(|p| ("telemetry.thermal_root", p)))
            .chain(btf_path.map(|p| ("telemetry.btf_path", p)))
    {
        if !p.is_absolute() {
            bad(
                k,
                format!("{} = {:?} is not an absolute path", k.rsplit('.').next().unwrap_or(k), p.display().to_string()),
                "a relative path would follow the agent's working directory",
            );
        }
    }
    if !a.metrics_web_config.as_os_str().is_empty() && !a.metrics_web_config.is_absolute() {
        bad(
            "agent.metrics_web_config",
            format!("metrics_web_config = {:?} is not an absolute path", a.metrics_web_config.display().to_string()),
            "e.g. \"/etc/joule/web.yml\", or \"\" for plain HTTP",
        );
    }
    if a.event_log.as_os_str() != "-" && !a.event_log.is_absolute() {
        bad(
            "agent.event_log",
            format!("event_log = {:?} is not an absolute path (or \"-\")", a.event_log.display().to_string()),
            "e.g. \"/run/joule/events.jsonl\"",
        );
    }
    if let Some(ms) = a.status_interval_ms.filter(|ms| *ms > 3_600_000) {
        bad("agent.status_interval_ms", format!("status_interval_ms = {ms} is over an hour"), "2000, or 0 for none");
    }
    if !(4096..=1 << 30).contains(&a.event_log_max_bytes) {
        bad(
            "agent.event_log_max_bytes",
            format!("event_log_max_bytes = {} is outside 4096..=1073741824", a.event_log_max_bytes),
            "8388608 (8 MiB) is the default",
        );
    }
    if cfg.telemetry.task_wait_top > MAX_TOP {
        bad("telemetry.task_wait_top", format!("task_wait_top = {} is outside 0..={MAX_TOP}", cfg.telemetry.task_wait_top), "5: the tasks that waited longest");
    }
    if cfg.classes.len() > MAX_CLASSES {
        bad("class", format!("{} classes; joule takes at most {MAX_CLASSES}", cfg.classes.len()), "group tasks into fewer classes");
    }

    let pm = &cfg.telemetry.power_model;
    for (k, v) in [("idle_watts", pm.idle_watts), ("cpu_dynamic_watts", pm.cpu_dynamic_watts)] {
        if !(v.is_finite() && v >= 0.0) {
            bad(&format!("telemetry.power_model.{k}"), format!("{k} = {v} must be a finite number ≥ 0"), "watts");
        }
    }
    let tm = &cfg.telemetry.thermal_model;
    for (k, v) in [("resistance_celsius_per_watt", tm.resistance_celsius_per_watt), ("capacitance_joules_per_celsius", tm.capacitance_joules_per_celsius)] {
        if !(v.is_finite() && v > 0.0) {
            bad(&format!("telemetry.thermal_model.{k}"), format!("{k} = {v} must be a finite number > 0"), "see docs/config.md");
        }
    }
    if !(-50.0..=100.0).contains(&tm.ambient_celsius) {
        bad("telemetry.thermal_model.ambient_celsius", format!("ambient_celsius = {} is not a plausible room", tm.ambient_celsius), "25.0");
    }

    let th = &cfg.thermal;
    let t = &th.stage_thresholds_celsius;
    let stages = th.stage_count();
    // Configured thresholds rise; trip offsets fall (stage 1 is furthest below the trip).
    let (key, steps, hint) = if t.is_empty() {
        ("thermal.trip_offsets_celsius", th.trip_offsets_celsius.iter().map(|o| -o).collect::<Vec<_>>(), "degrees below the trip point, e.g. [15.0, 10.0, 5.0]")
    } else {
        ("thermal.stage_thresholds_celsius", t.clone(), "e.g. [70.0, 80.0, 90.0]")
    };
    if steps.is_empty() || steps.len() > MAX_STAGES {
        bad(key, format!("{} values given; 1 to {MAX_STAGES} are supported", steps.len()), hint);
    } else if steps.windows(2).any(|w| w[1] <= w[0]) || steps.iter().any(|v| !v.is_finite()) {
        let v: Vec<f64> = if t.is_empty() { th.trip_offsets_celsius.clone() } else { t.clone() };
        bad(key, format!("{v:?} must be finite and strictly {}", if t.is_empty() { "decreasing" } else { "increasing" }), hint);
    } else if t.is_empty() && th.trip_offsets_celsius.iter().any(|o| *o < 0.0) {
        bad(key, format!("{:?} must be ≥ 0: a stage never starts above the trip point", th.trip_offsets_celsius), hint);
    } else {
        let min_gap = steps.windows(2).map(|w| w[1] - w[0]).fold(f64::INFINITY, f64::min);
        if !(th.hysteresis_celsius >= 0.0 && th.hysteresis_celsius < min_gap) {
            bad(
                "thermal.hysteresis_celsius",
                format!("hysteresis_celsius = {} must be ≥ 0 and below the smallest gap between thresholds ({min_gap})", th.hysteresis_celsius),
                "otherwise a stage could be left above the threshold below it",
            );
        }
    }
    if !(th.critical_margin_celsius.is_finite() && (0.0..=100.0).contains(&th.critical_margin_celsius)) {
        bad("thermal.critical_margin_celsius", format!("critical_margin_celsius = {} is not in [0, 100]", th.critical_margin_celsius), "20.0");
    }
    for z in &th.zones {
        if z.trim().is_empty() || z.contains(char::is_control) {
            bad(
                "thermal.zones",
                format!("{z:?} is not a sensor type or name"),
                "e.g. \"x86_pkg_temp\", \"cpu-thermal\", \"thermal_zone0\" (joule doctor lists them)",
            );
        }
    }
    if !th.cpufreq_caps {
        if let Some((i, r)) = th.stages.iter().enumerate().find(|(_, r)| r.cpufreq_max_pct < 100.0) {
            bad(
                &format!("thermal.stage[{i}]"),
                format!("cpufreq_max_pct = {} caps CPU frequency, but thermal.cpufreq_caps is off", r.cpufreq_max_pct),
                "set [thermal] cpufreq_caps = true to let the stages cap scaling_max_freq",
            );
        }
    }

    let p = &th.power_thresholds_watts;
    if !p.is_empty() {
        if p.len() != stages {
            bad("thermal.power_thresholds_watts", format!("{} power thresholds for {stages} stages", p.len()), "one per stage, or none");
        } else if p.windows(2).any(|w| w[1] <= w[0]) || p.iter().any(|v| !v.is_finite() || *v <= 0.0) {
            bad(
                "thermal.power_thresholds_watts",
                format!("power thresholds {p:?} must be finite, > 0 and strictly increasing"),
                "stage n starts at the n-th value",
            );
        } else {
            let min_gap = p.windows(2).map(|w| w[1] - w[0]).fold(p[0], f64::min);
            if !(th.power_hysteresis_watts >= 0.0 && th.power_hysteresis_watts < min_gap) {
                bad(
                    "thermal.power_hysteresis_watts",
                    format!(
                        "power_hysteresis_watts = {} must be ≥ 0 and below the smallest gap between power thresholds ({min_gap})",
                        th.power_hysteresis_watts
                    ),
                    "otherwise a stage could be left above the threshold below it",
                );
            }
        }
    }
    if !th.stages.is_empty() && th.stages.len() != stages + 1 {
        bad(
            "thermal.stage",
            format!("{} [[thermal.stage]] rows for {stages} stages", th.stages.len()),
            "one row per stage, stage 0 (cool) first: thresholds (or trip offsets) + 1 rows",
        );
    }
    for (i, r) in th.stages.iter().enumerate() {
        let key = format!("thermal.stage[{i}]");
        if !(1..=4).contains(&r.queues) {
            bad(&key, format!("queues = {} is not in 1..=4", r.queues), "the scheduler has four score queues");
        }
        if !(100..=100_000).contains(&r.slice_us) {
            bad(&key, format!("slice_us = {} is not in 100..=100000", r.slice_us), "5000 is a good stage-0 slice");
        }
        if !(r.best_effort_cpu_pct > 0.0 && r.best_effort_cpu_pct <= 100.0) {
            bad(&key, format!("best_effort_cpu_pct = {} is not in (0, 100]", r.best_effort_cpu_pct), "% of the whole machine");
        }
        if !(r.cpufreq_max_pct >= 10.0 && r.cpufreq_max_pct <= 100.0) {
            bad(&key, format!("cpufreq_max_pct = {} is not in [10, 100]", r.cpufreq_max_pct), "% of cpuinfo_max_freq");
        }
    }
    for (i, w) in th.stages.windows(2).enumerate() {
        let (a, b) = (&w[0], &w[1]);
        if b.queues > a.queues || b.slice_us > a.slice_us || b.best_effort_cpu_pct > a.best_effort_cpu_pct || b.cpufreq_max_pct > a.cpufreq_max_pct {
            bad(
                &format!("thermal.stage[{}]", i + 1),
                format!("stage {} is more generous than stage {i} ({b:?} after {a:?})", i + 1),
                "a hotter stage never gives more",
            );
        }
    }

    super::net::validate(&cfg.net, &cfg.classes, &mut out);
    let mut bad = |key: &str, msg: String, hint: &str| out.push((key.to_string(), msg, hint.to_string()));

    let mut seen = std::collections::HashSet::new();
    let mut pod_problems = Vec::new();
    for (i, c) in cfg.classes.iter().enumerate() {
        let key = format!("class[{i}].name");
        if c.name.is_empty() || !c.name.chars().all(|ch| ch.is_ascii_alphanumeric() || ch == '-' || ch == '_') {
            bad(&key, format!("class name {:?} must be non-empty ASCII letters, digits, '-' or '_'", c.name), "it becomes a cgroup directory name");
        } else if !seen.insert(c.name.as_str()) {
            bad(&key, format!("class name {:?} is used twice", c.name), "class names are unique");
        }
        for (kind, names, suffixes) in [("unit", &c.matches.unit, &["service", "scope"][..]), ("slice", &c.matches.slice, &["slice"][..])] {
            for n in names {
                if !crate::effects::valid_unit_name(n) || !suffixes.iter().any(|x| n.ends_with(&format!(".{x}"))) {
                    bad(
                        &format!("class[{i}].match.{kind}"),
                        format!("{n:?} is not a systemd {} name", suffixes.join(" or ")),
                        "a name as systemctl prints it, e.g. \"nginx.service\" or \"batch.slice\"",
                    );
                }
            }
        }
        for comm in &c.matches.comm {
            if comm.len() > 15 {
                bad(
                    &format!("class[{i}].match.comm"),
                    format!("comm {comm:?} is longer than 15 bytes and can never match"),
                    "the kernel truncates comm to 15 bytes",
                );
            }
        }
        super::pod::validate(i, c, cfg, &mut pod_problems);
        let grants = cfg.grants(c);
        if !grants.is_empty() && !c.matches.is_empty() && !c.matches.unforgeable() {
            bad(
                &format!("class[{i}].match"),
                format!(
                    "class {:?} grants {} but is matched only by rules any user can meet (comm, exe, pid, or a cgroup under user@UID.service)",
                    c.name,
                    grants.join(", ")
                ),
                "add uid = [...] to the match (every kind given must match), or match a cgroup no user can create; docs/security.md",
            );
        }
        if let (false, Some(why)) = (c.whole_machine, c.matches.whole_machine()) {
            bad(&format!("class[{i}].match"), format!("class {:?}: {why}", c.name), "match what you mean, or set whole_machine = true in the class");
        }
        for (key, msg, hint) in bandwidth_problems(c) {
            bad(&format!("class[{i}].{key}"), format!("class {:?}: {msg}", c.name), hint);
        }
        if let Some(p) = &c.parent {
            if !cfg.classes.iter().any(|o| &o.name == p) {
                bad(&format!("class[{i}].parent"), format!("parent {p:?} is not a class in this file"), "name an existing [[class]]");
            } else if let Some(cycle) = parent_cycle(&cfg.classes, i) {
                bad(
                    &format!("class[{i}].parent"),
                    format!("class {:?} is its own ancestor: {}", c.name, cycle.join(" → ")),
                    "a class's parents end at a class without one",
                );
            }
        }
    }
    out.extend(pod_problems);
    let names: Vec<String> = cfg.classes.iter().map(|c| c.name.clone()).collect();
    out.extend(super::energy::problems(&cfg.energy, &names));
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    out.extend(cfg.elevate.validate(&names));
    out.extend(super::nap::problems(&cfg.nap, &names));
    if cfg.nap.enabled && cfg.nap.class.is_some() && !cfg.agent.apply_classes {
        out.push((
            "nap.class".into(),
            "nap.class freezes the class's own cgroup, which joule makes only with agent.apply_classes = true (it is false)".into(),
            "set agent.apply_classes = true, or nap without a class (machine nap)".into(),
        ));
    }
    out
}

/// The kernel's bounds on a cgroup's CPU period (CFS: 1 ms to 1 s).
const CFS_PERIOD_US: std::ops::RangeInclusive<u64> = 1_000..=1_000_000;
/// RT periods joule accepts (the kernel takes more; nothing sensible does).
const RT_PERIOD_US: std::ops::RangeInclusive<u64> = 1_000..=10_000_000;

/// A class's bandwidth numbers that no machine accepts, as (key, message, hint).
fn bandwidth_problems(c: &ClassConfig) -> Vec<(&'static str, String, &'static str)> {
    let mut out = Vec::new();
    let rt_period = c.rt_period_us.unwrap_or(1_000_000);
    if c.rt_period_us.is_some() && !RT_PERIOD_US.contains(&rt_period) {
        out.push((
            "rt_period_us",
            format!("rt_period_us = {rt_period} is outside {}..={}", RT_PERIOD_US.start(), RT_PERIOD_US.end()),
            "1000000 (1 s) is the kernel's",
        ));
    }
    if let Some(rt) = c.rt_runtime_us {
        if rt == 0 {
            out.push(("rt_runtime_us", "rt_runtime_us = 0 grants nothing".to_string(), "leave it out, or give the runtime the class needs per period"));
        } else if rt > rt_period {
            out.push(("rt_runtime_us", format!("rt_runtime_us = {rt} exceeds its period ({rt_period} µs)"), "a runtime is a part of its period"));
        }
    }
    if c.quota_us == Some(0) {
        out.push(("quota_us", "quota_us = 0 would stop the class".to_string(), "a share of period_us, e.g. 50000 of 100000"));
    }
    if let Some(p) = c.period_us {
        if !CFS_PERIOD_US.contains(&p) {
            out.push((
                "period_us",
                format!("period_us = {p} is outside {}..={}", CFS_PERIOD_US.start(), CFS_PERIOD_US.end()),
                "100000 (100 ms) is the kernel's",
            ));
        }
    }
    if let Some(b) = c.burst_us {
        match c.quota_us {
            None => out.push(("burst_us", format!("burst_us = {b} without a quota_us"), "a burst lets a capped class save unused quota")),
            Some(q) if b > q => out.push(("burst_us", format!("burst_us = {b} exceeds quota_us = {q}"), "the kernel bounds a burst by the quota")),
            _ => {}
        }
    }
    match (c.rt_threads, c.rt_runtime_us) {
        (Some(n), _) if !(1..=4096).contains(&n) => {
            out.push(("rt_threads", format!("rt_threads = {n} is outside 1..=4096"), "each reserved thread takes runtime/period of a CPU"))
        }
        (Some(_), None) => out.push(("rt_threads", "rt_threads without rt_runtime_us".into(), "it counts the threads that get the class's RT runtime")),
        _ => {}
    }
    if let Some(us) = c.latency_slice_us.filter(|us| *us != 0 && !SLICE_US.contains(us)) {
        out.push((
            "latency_slice_us",
            format!("latency_slice_us = {us} is outside {}..={} (or 0 for the kernel's default)", SLICE_US.start(), SLICE_US.end()),
            "300 wakes a labelled class promptly beside capped work",
        ));
    }
    if c.cpu_idle == Some(true) {
        let against = [
            (c.weight.is_some(), "a weight (the kernel refuses a weight on an idle group)"),
            (c.rt_runtime_us.is_some(), "RT runtime (an idle group is for work that takes what is left)"),
            (c.thermal == super::ThermalRole::Labelled, "thermal = \"labelled\" (a protected class cannot yield to everything)"),
        ];
        for (_, what) in against.iter().filter(|(set, _)| *set) {
            out.push(("cpu_idle", format!("cpu_idle = true with {what}"), "leave cpu_idle out, or drop the other key"));
        }
    }
    if let Some(w) = c.weight {
        if !(1..=10_000).contains(&w) {
            out.push(("weight", format!("weight = {w} is outside 1..=10000"), "100 is the default"));
        }
    }
    if let Some(cpus) = &c.cpus {
        if crate::cpulist::parse(cpus).is_none_or(|v| v.is_empty()) {
            out.push(("cpus", format!("cpus = {cpus:?} is not a CPU list"), "e.g. \"1\" or \"2-3,6\""));
        }
    }
    out
}

/// The chain of parents from class `i` back to itself, if it loops.
fn parent_cycle(classes: &[ClassConfig], i: usize) -> Option<Vec<String>> {
    let mut chain = vec![classes[i].name.clone()];
    let mut cur = &classes[i];
    for _ in 0..=classes.len() {
        let parent = cur.parent.as_ref()?;
        chain.push(parent.clone());
        if parent == &classes[i].name {
            return Some(chain);
        }
        cur = classes.iter().find(|c| &c.name == parent)?;
    }
    None
}
