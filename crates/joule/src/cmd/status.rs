//! `joule status`: what the running agent is doing and why, in one screen (issue 38). It asks
//! the agent over its root-only socket in the journal directory (`agent::socket`) and prints:
//! the budget (temperature and power against their limits, with source and sensor), the stage
//! and how long it has held, each mechanism's decisions with the plan's reasons, each class's
//! promise beside what it got (CPU, cap, run-queue latency), recent conflicts, drift and
//! overruns, the threads that waited longest for a CPU, and the agent's own cost. No agent:
//! exit 3, and says what `joule monitor` shows. A socket that is not root's agent's is refused
//! (`agent_client`). Names and reasons in the view came from the machine (a thread's name is
//! its user's choice), so the text shows their control characters escaped.

use crate::agent_client::ClientError;
use joule_core::text::{escape, escape_lines, Escaped};
use serde::Serialize;
use serde_json::Value;
use std::path::PathBuf;

/// The exit code when no agent answers.
pub const NO_AGENT_EXIT: u8 = 3;

#[derive(clap::Args)]
pub struct StatusArgs {
    #[command(flatten)]
    pub config: crate::ConfigArg,
    /// The agent's journal directory, where its socket is (default: the config's
    /// `agent.journal_dir`, /run/joule).
    #[arg(long, value_name = "DIR")]
    pub journal_dir: Option<PathBuf>,
    /// Print the summary as JSON (the same fields the text shows).
    #[arg(long)]
    pub json: bool,
}

/// No agent answered: exit [`NO_AGENT_EXIT`].
#[derive(Debug)]
pub struct NoAgent(pub String);

impl std::fmt::Display for NoAgent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for NoAgent {}

pub fn run(a: StatusArgs) -> anyhow::Result<()> {
    let dir = match &a.journal_dir {
        Some(d) => d.clone(),
        None => a.config.load()?.agent.journal_dir,
    };
    let view = match crate::agent_client::read(&dir) {
        Ok(view) => view,
        Err(ClientError::NoAgent(why)) => {
            let root = if joule_core::testing::is_root() { "" } else { " (its socket is root's: run joule status as root)" };
            return Err(NoAgent(format!(
                "no joule agent answers in {}{root} ({}); start one (systemctl start joule, or joule agent), or run `joule monitor`, which samples this machine itself but shows no decisions",
                dir.display(),
                Escaped(&why)
            ))
            .into());
        }
        Err(e) => return Err(e.into()),
    };
    let s = summarize(&view, joule_core::clock::now_ms());
    if a.json {
        println!("{}", joule_core::text::to_json(&s, true)?);
    } else {
        print!("{}", escape_lines(&render(&s)));
    }
    Ok(())
}

#[derive(Debug, Default, Serialize)]
pub struct Summary {
    pub agent: AgentLine,
    pub budget: BudgetLine,
    pub stage: StageLine,
    pub mechanisms: Vec<Mechanism>,
    pub classes: Vec<ClassLine>,
    /// The threads that waited longest for a CPU over the last interval, longest first.
    pub waiting: Vec<Waiting>,
    /// What the container runtime has named, when a class matches pods by name.
    pub pods: Option<PodsLine>,
    pub recent: Recent,
}

#[derive(Debug, Default, Serialize)]
pub struct Waiting {
    pub tid: i64,
    /// Its name as the kernel has it: its user's choice.
    pub comm: String,
    /// Time it was runnable but not running, ms per second of the interval.
    pub wait_ms_per_s: f64,
}

#[derive(Debug, Default, Serialize)]
pub struct PodsLine {
    pub source: String,
    pub named: u64,
    /// Pods seen in the kubelet's cgroups the runtime has not named, held by capping classes.
    pub unnamed: u64,
    /// How long the oldest of them has waited.
    pub stale_s: Option<f64>,
    pub errors_total: u64,
    pub last_error: Option<String>,
}

#[derive(Debug, Default, Serialize)]
pub struct AgentLine {
    pub pid: u64,
    pub up_s: f64,
    /// The loop's sleep now and why (`rest` when nothing is in motion).
    pub period_ms: u64,
    pub pace: String,
    /// Its own CPU use since it started, % of one CPU.
    pub cpu_pct: f64,
    pub longest_loop_ms: f64,
    pub published_ms_ago: u64,
    pub metrics_url: String,
}

#[derive(Debug, Default, Serialize)]
pub struct BudgetLine {
    /// The temperature the stage follows, its source (`sensor`, `model`) and the sensors.
    pub temp_celsius: Option<f64>,
    pub temp_source: String,
    pub sensors: Vec<String>,
    /// The first stage's threshold (where joule starts acting) and the last; where they came from.
    pub first_threshold_celsius: Option<f64>,
    pub last_threshold_celsius: Option<f64>,
    pub thresholds_from: String,
    /// First threshold minus the temperature (negative: acting).
    pub headroom_celsius: Option<f64>,
    /// The temperature the stages keep the CPU under (a trip point, else past the hottest
    /// stage) and where it came from, in words (`joule_thermal_limit_celsius`).
    pub limit_celsius: Option<f64>,
    pub limit_from: String,
    pub power_watts: f64,
    pub power_source: String,
    pub power_budget_watts: Option<f64>,
}

#[derive(Debug, Default, Serialize)]
pub struct StageLine {
    pub value: u64,
    pub computed_by: String,
    pub driven_by: String,
    pub since_s: Option<f64>,
}

#[derive(Debug, Default, Serialize)]
pub struct Mechanism {
    /// The policy (`thermal`, `classes`, `nap`, ...).
    pub name: String,
    /// What it asks now and why, one line each.
    pub doing: Vec<String>,
    /// Its actuators' errors, if any.
    pub errors: Vec<String>,
}

#[derive(Debug, Default, Serialize)]
pub struct ClassLine {
    pub class: String,
    pub processes: u64,
    /// What the config promises or limits it to, in words.
    pub promised: String,
    /// CPUs it used over the last interval, where joule reads its cgroup.
    pub used_cpus: Option<f64>,
    /// Share of the machine the thermal cap leaves it (1: uncapped).
    pub cap_ratio: Option<f64>,
    pub runq_p99_us: Option<f64>,
}

#[derive(Debug, Default, Serialize)]
pub struct Recent {
    pub conflicts: Vec<String>,
    pub conflicts_total: u64,
    pub loop_overruns_total: u64,
    pub drift: Vec<String>,
    pub stage_transitions_total: u64,
    /// Changes a previous run left in the journal, found at start: undone, and failed (still there).
    pub left_by_previous_run: u64,
    pub left_failed: u64,
}

/// Where the thermal limit came from, as `joule_thermal_limit_celsius{from}` says it, in words.
fn limit_words(from: &str) -> String {
    match from {
        "passive_trip" => "passive trip".into(),
        "critical_trip" => "critical trip less margin".into(),
        "firmware" => "board firmware's throttle".into(),
        "thresholds" => "past hottest stage".into(),
        other => other.replace('_', " "),
    }
}

fn f(v: &Value) -> Option<f64> {
    v.as_f64()
}

fn st(v: &Value) -> String {
    v.as_str().unwrap_or_default().to_string()
}

/// What the text and `--json` show, from the agent's view at `now_ms`.
pub fn summarize(v: &Value, now_ms: u64) -> Summary {
    let (b, snap, agent) = (&v["budget"], &v["snapshot"], &v["agent"]);
    let up_s = now_ms.saturating_sub(b["started_unix_ms"].as_u64().unwrap_or(now_ms)) as f64 / 1e3;
    let cpu_s = f(&agent["cpu_seconds_total"]).unwrap_or(0.0);
    let thresholds: Vec<f64> = b["thresholds_celsius"].as_array().into_iter().flatten().filter_map(f).collect();
    let stage = &snap["stage"];
    let acting = stage["computed_by"].as_str().is_some_and(|c| c != "none");
    let temp = acting.then(|| f(&stage["temp_celsius"])).flatten();
    let first = thresholds.first().copied();
    let since_ms = agent["stage_since_unix_ms"].as_u64().filter(|t| *t > 0);
    let mut s = Summary {
        agent: AgentLine {
            pid: b["pid"].as_u64().unwrap_or(0),
            up_s,
            period_ms: agent["pace"]["period_ms"].as_u64().unwrap_or(0),
            pace: st(&agent["pace"]["why"]),
            cpu_pct: if up_s > 0.0 { cpu_s / up_s * 100.0 } else { 0.0 },
            longest_loop_ms: f(&agent["max_loop_seconds"]).unwrap_or(0.0) * 1e3,
            published_ms_ago: v["published_ms_ago"].as_u64().unwrap_or(0),
            metrics_url: st(&b["metrics_url"]),
        },
        budget: BudgetLine {
            temp_celsius: temp,
            temp_source: st(&stage["temp_source"]),
            sensors: b["sensors"].as_array().into_iter().flatten().map(st).collect(),
            first_threshold_celsius: first,
            last_threshold_celsius: thresholds.last().copied(),
            thresholds_from: st(&b["thresholds_from"]),
            headroom_celsius: temp.zip(first).map(|(t, f)| f - t),
            limit_celsius: f(&agent["limits"]["limit_celsius"]),
            limit_from: limit_words(agent["limits"]["limit_from"].as_str().unwrap_or_default()),
            power_watts: f(&snap["power"]["watts"]).unwrap_or(0.0),
            power_source: st(&snap["power"]["source"]),
            power_budget_watts: b["power_thresholds_watts"].as_array().and_then(|a| a.first()).and_then(f),
        },
        stage: StageLine {
            value: stage["value"].as_u64().unwrap_or(0),
            computed_by: st(&stage["computed_by"]),
            driven_by: st(&stage["driven_by"]),
            since_s: since_ms.map(|t| now_ms.saturating_sub(t) as f64 / 1e3),
        },
        ..Default::default()
    };
    s.mechanisms = mechanisms(v);
    s.classes = classes(v);
    s.waiting = waiting(snap);
    let p = &snap["pods"];
    s.pods = p.is_object().then(|| PodsLine {
        source: st(&p["source"]),
        named: p["pods"].as_u64().unwrap_or(0),
        unnamed: p["unnamed"].as_u64().unwrap_or(0),
        stale_s: p["stale_since_unix_ms"].as_u64().map(|t| now_ms.saturating_sub(t) as f64 / 1e3),
        errors_total: p["errors_total"].as_u64().unwrap_or(0),
        last_error: p["last_error"].as_str().map(String::from),
    });
    s.recent = Recent {
        conflicts: v["plan"]["conflicts"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|c| format!("{}: {} won over {}: {}", st(&c["knob"]), st(&c["won"]), st(&c["lost"]), st(&c["why"])))
            .collect(),
        conflicts_total: agent["conflicts_total"].as_u64().unwrap_or(0),
        loop_overruns_total: agent["loop_overruns_total"].as_u64().unwrap_or(0),
        drift: drift(v),
        stage_transitions_total: agent["stage_transitions_total"].as_u64().unwrap_or(0),
        left_by_previous_run: ["undone", "already_gone", "failed"].iter().filter_map(|k| agent["recovered"][k].as_u64()).sum(),
        left_failed: agent["recovered"]["failed"].as_u64().unwrap_or(0),
    };
    s
}

/// The plan's decisions grouped by policy, with their actuators' errors.
fn mechanisms(v: &Value) -> Vec<Mechanism> {
    let mut out: Vec<Mechanism> = Vec::new();
    for d in v["plan"]["decisions"].as_array().into_iter().flatten() {
        let name = st(&d["policy"]);
        let line = format!("{}: {}", want_words(&d["want"]), st(&d["reason"]));
        match out.iter_mut().find(|m| m.name == name) {
            Some(m) if !m.doing.contains(&line) => m.doing.push(line),
            Some(_) => {}
            None => out.push(Mechanism { name, doing: vec![line], errors: Vec::new() }),
        }
    }
    let errors: Vec<String> = v["actuators"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|a| a["ok"] == false && !a["last_error"].is_null())
        .map(|a| format!("actuator {}: {}", st(&a["name"]), st(&a["last_error"])))
        .collect();
    if !errors.is_empty() {
        out.push(Mechanism { name: "actuators".into(), doing: Vec::new(), errors });
    }
    out
}

/// A want in an operator's words (`cap class batch to 35% of the machine`); a want this
/// build does not know (a newer agent's) by its kind.
fn want_words(w: &Value) -> String {
    serde_json::from_value::<joule_core::control::Want>(w.clone()).map(|w| w.to_string()).unwrap_or_else(|_| st(&w["kind"]).replace('_', " "))
}

fn classes(v: &Value) -> Vec<ClassLine> {
    let snap = &v["snapshot"];
    let caps = v["actuators"].as_array().into_iter().flatten().find(|a| a["name"] == "cgroup_cpu").map(|a| a["state"]["caps"].clone()).unwrap_or_default();
    let count = |class: &str| snap["classes"].as_array().into_iter().flatten().find(|c| c["class"] == class).and_then(|c| c["processes"].as_u64()).unwrap_or(0);
    // joule's class cgroups: `<joule group>/<class>` or, for an idle best-effort class, `joule.<class>`.
    let own =
        |path: &str, class: &str| path.ends_with(&format!("/joule/{class}")) || path.ends_with(&format!("/joule.{class}")) || path == format!("/joule.{class}");
    v["budget"]["classes"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| {
            let class = st(&c["name"]);
            let cg = snap["cgroups"].as_array().into_iter().flatten().find(|g| g["path"].as_str().is_some_and(|p| own(p, &class)));
            let runq = snap["runq_latency"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|r| r["cgroup"].as_str().is_some_and(|p| own(p, &class)) && r["count"].as_u64().unwrap_or(0) > 0);
            ClassLine {
                processes: count(&class),
                promised: promised(c),
                used_cpus: cg.and_then(|g| f(&g["usage_cpus"])),
                cap_ratio: f(&caps[&class]["ratio"]),
                runq_p99_us: runq.and_then(|r| f(&r["p99_us"])),
                class,
            }
        })
        .collect()
}

/// What a class is promised or limited to, in words.
fn promised(c: &Value) -> String {
    let mut p = Vec::new();
    if let (Some(r), per) = (c["rt_runtime_us"].as_u64(), c["rt_period_us"].as_u64().unwrap_or(1_000_000)) {
        p.push(format!("RT {:.0}% of a CPU", r as f64 / per as f64 * 100.0));
    }
    if let (Some(q), per) = (c["quota_us"].as_u64(), c["period_us"].as_u64().unwrap_or(100_000)) {
        p.push(format!("at most {:.2} CPUs", q as f64 / per as f64));
    }
    if let Some(w) = c["weight"].as_u64() {
        p.push(format!("weight {w}"));
    }
    if let Some(cpus) = c["cpus"].as_str() {
        p.push(format!("CPUs {cpus}"));
    }
    match c["thermal"].as_str() {
        Some("labelled") => p.push("protected (labelled)".into()),
        Some("best_effort") => p.push("best effort (capped when hot)".into()),
        _ => {}
    }
    if p.is_empty() {
        "nothing (grouped only)".into()
    } else {
        p.join(", ")
    }
}

fn waiting(snap: &Value) -> Vec<Waiting> {
    let interval_ms = snap["interval_ms"].as_u64().filter(|i| *i > 0).unwrap_or(1000) as f64;
    let mut out: Vec<Waiting> = snap["task_wait"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|t| Waiting { tid: t["pid"].as_i64().unwrap_or(0), comm: st(&t["comm"]), wait_ms_per_s: t["wait_us"].as_f64().unwrap_or(0.0) / interval_ms })
        .collect();
    out.sort_by(|a, b| b.wait_ms_per_s.total_cmp(&a.wait_ms_per_s));
    out
}

fn drift(v: &Value) -> Vec<String> {
    let mut out = Vec::new();
    for a in v["actuators"].as_array().into_iter().flatten() {
        for (k, n) in a["state"]["drift_total"].as_object().into_iter().flatten() {
            out.push(format!("{k} changed by someone else {n}×"));
        }
    }
    out
}

fn opt(v: Option<f64>, unit: &str, digits: usize) -> String {
    v.map_or("—".into(), |x| format!("{x:.digits$}{unit}"))
}

/// The text screen.
pub fn render(s: &Summary) -> String {
    let mut o = String::new();
    let a = &s.agent;
    let b = &s.budget;
    o += &format!(
        "joule agent pid {} up {:.0} s: {:.2}% of a CPU, longest loop {:.1} ms, sleeping {} ms ({}); reading {} ms old\n",
        a.pid,
        a.up_s,
        a.cpu_pct,
        a.longest_loop_ms,
        a.period_ms,
        Escaped(&a.pace),
        a.published_ms_ago
    );
    o += "\nBudget\n";
    match b.temp_celsius {
        Some(t) => {
            o += &format!(
                "  temperature {t:.1} °C ({}{}) · stages from {} to {} (set by {}) · headroom {}{}\n",
                Escaped(&b.temp_source),
                if b.sensors.is_empty() { "; no CPU temperature sensor".into() } else { format!(", {}", Escaped(&b.sensors.join(", "))) },
                opt(b.first_threshold_celsius, " °C", 1),
                opt(b.last_threshold_celsius, " °C", 1),
                Escaped(&b.thresholds_from),
                opt(b.headroom_celsius, " °C", 1),
                b.limit_celsius.map(|l| format!(" · limit {l:.1} °C ({})", Escaped(&b.limit_from))).unwrap_or_default()
            )
        }
        None => o += "  temperature: none acted on (no CPU temperature sensor; a model counts only with act_on_model)\n",
    }
    o += &format!(
        "  power {:.1} W ({}){}\n",
        b.power_watts,
        Escaped(&b.power_source),
        b.power_budget_watts.map(|w| format!(" · budget from {w:.1} W")).unwrap_or_else(|| " · no power budget".into())
    );
    let st = &s.stage;
    o += &format!(
        "  stage {} (computed by {}, driven by {}){}\n",
        st.value,
        Escaped(&st.computed_by),
        Escaped(&st.driven_by),
        st.since_s.map(|x| format!(" for {x:.0} s")).unwrap_or_default()
    );
    o += "\nDoing\n";
    if s.mechanisms.is_empty() {
        o += "  nothing: no policy asks for anything\n";
    }
    for m in &s.mechanisms {
        for d in &m.doing {
            o += &format!("  {:<9} {}\n", escape(&m.name), Escaped(d));
        }
        for e in &m.errors {
            o += &format!("  {:<9} ERROR {}\n", escape(&m.name), Escaped(e));
        }
    }
    if !s.classes.is_empty() {
        o += "\nClasses\n";
        o += &format!("  {:<16} {:>6}  {:<34} {:>9} {:>6} {:>9}\n", "class", "procs", "promised", "used CPU", "cap", "p99 runq");
        for c in &s.classes {
            o += &format!(
                "  {:<16} {:>6}  {:<34} {:>9} {:>6} {:>9}\n",
                escape(&c.class),
                c.processes,
                escape(&c.promised),
                opt(c.used_cpus, "", 2),
                c.cap_ratio.map_or("—".into(), |r| if r >= 1.0 { "none".into() } else { format!("{:.0}%", r * 100.0) }),
                opt(c.runq_p99_us, " µs", 0)
            );
        }
    }
    if !s.waiting.is_empty() {
        o += "\nWaiting longest for a CPU (last interval)\n";
        for w in &s.waiting {
            o += &format!("  tid {:<8} {:<20} {:6.1} ms/s\n", w.tid, escape(&w.comm), w.wait_ms_per_s);
        }
    }
    if let Some(p) = &s.pods {
        o += &format!("\nPods: {} named by {}", p.named, p.source);
        match p.stale_s {
            Some(age) => {
                o += &format!(
                    "; {} not named, the oldest for {age:.0} s: held at the cap of the capping pod classes that could be theirs{}\n",
                    p.unnamed,
                    p.last_error.as_ref().map(|e| format!(" (the runtime: {e})")).unwrap_or_default()
                )
            }
            None => o += "; every pod seen is named\n",
        }
    }
    let r = &s.recent;
    o += &format!(
        "\nRecent: {} stage change(s), {} conflict(s), {} loop overrun(s) since start\n",
        r.stage_transitions_total, r.conflicts_total, r.loop_overruns_total
    );
    for c in r.conflicts.iter().chain(&r.drift) {
        o += &format!("  {}\n", Escaped(c));
    }
    if r.left_failed > 0 {
        o += &format!(
            "  ERROR at start, {} change(s) a previous run left could not be undone; they stay in the journal: run `joule restore` to retry them and see why\n",
            r.left_failed
        );
    } else if r.left_by_previous_run > 0 {
        o += &format!("  at start, cleared {} change(s) a previous run left (it and its guardian ended without undoing them)\n", r.left_by_previous_run);
    }
    o += &format!("\nmetrics: {}\n", Escaped(&a.metrics_url));
    o
}

#[cfg(test)]
#[path = "status_tests.rs"]
mod tests;
