//! `joule status`: what the running agent is doing and why, in one screen (issue 38). It asks
//! the agent over its root-only socket in the journal directory (`agent::socket`) and prints:
//! the budget (temperature and power against their limits, with source and sensor), the stage
//! and how long it has held, each mechanism's decisions with the plan's reasons, each class's
//! promise beside what it got (CPU, cap, run-queue latency), recent conflicts, drift and
//! overruns, the threads that waited longest for a CPU, and the agent's own cost. No agent:
//! exit 3, and says what `joule monitor` shows. A socket that is not root's agent's is refused
//! (`joule_core::view::client`). Names and reasons in the view came from the machine (a thread's name is
//! its user's choice), so the text shows their control characters escaped.

use joule_core::config::{ClassConfig, ThermalRole};
use joule_core::snapshot::StageEngine;
use joule_core::text::{escape, escape_lines, Escaped};
use joule_core::view::client::ClientError;
use joule_core::view::{CapsView, DriftView, View};
use joule_core::Snapshot;
use serde::Serialize;
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
    let view = match joule_core::view::client::read(&dir) {
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
    /// What the operator should know about the view itself (an agent older or newer than
    /// this joule), first.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
    pub agent: AgentLine,
    pub budget: BudgetLine,
    pub stage: StageLine,
    /// Why the agent runs without eBPF, when it does (None: eBPF is on).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ebpf_off: Option<EbpfOffLine>,
    pub mechanisms: Vec<Mechanism>,
    pub classes: Vec<ClassLine>,
    /// The threads that waited longest for a CPU over the last interval, longest first.
    pub waiting: Vec<Waiting>,
    /// What the container runtime has named, when a class matches pods by name.
    pub pods: Option<PodsLine>,
    pub recent: Recent,
}

#[derive(Debug, Default, Serialize)]
pub struct EbpfOffLine {
    /// The snapshot's `off_reason` (`no_btf`, `load_failed`, `config`, …).
    pub reason: String,
    /// The reason in words, then the kernel's own when it refused a program.
    pub why: String,
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
    /// How old the agent's last reading is (None: it has published none yet).
    pub published_ms_ago: Option<u64>,
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

/// Why eBPF is off, in words, with the kernel's refusal when there was one.
fn ebpf_off(snap: &joule_core::Snapshot) -> Option<EbpfOffLine> {
    let reason = &snap.bpf.off_reason;
    if snap.bpf.enabled || reason.is_empty() {
        return None;
    }
    let mut why = crate::sense::BpfOff::parse(reason).map_or(reason.clone(), |o| o.explain().to_string());
    if let Some(words) = snap.notes.iter().find_map(|n| n.strip_prefix(crate::sense::LOAD_FAILED_NOTE)) {
        why = format!("{why}: {words}");
    }
    Some(EbpfOffLine { reason: reason.clone(), why })
}

/// What the text and `--json` show, from the agent's view at `now_ms`.
pub fn summarize(v: &View, now_ms: u64) -> Summary {
    let (b, snap, agent) = (&v.budget, &v.snapshot, &v.agent);
    let up_s = now_ms.saturating_sub(b.started_unix_ms) as f64 / 1e3;
    let thresholds = &b.thresholds_celsius;
    let stage = &snap.stage;
    let acting = stage.computed_by != StageEngine::None;
    let temp = acting.then_some(stage.temp_celsius);
    let first = thresholds.first().copied();
    let since_ms = Some(agent.stage_since_unix_ms).filter(|t| *t > 0);
    let limits = agent.limits.as_ref();
    let mut s = Summary {
        notes: v.version_note().into_iter().collect(),
        agent: AgentLine {
            pid: u64::from(b.pid),
            up_s,
            period_ms: agent.pace.period_ms,
            pace: agent.pace.why.as_str().to_string(),
            cpu_pct: if up_s > 0.0 { agent.cpu_seconds_total / up_s * 100.0 } else { 0.0 },
            longest_loop_ms: agent.max_loop_seconds * 1e3,
            published_ms_ago: v.published_ms_ago,
            metrics_url: b.metrics_url.clone(),
        },
        budget: BudgetLine {
            temp_celsius: temp,
            temp_source: stage.temp_source.as_str().to_string(),
            sensors: b.sensors.clone(),
            first_threshold_celsius: first,
            last_threshold_celsius: thresholds.last().copied(),
            thresholds_from: b.thresholds_from.clone(),
            headroom_celsius: temp.zip(first).map(|(t, f)| f - t),
            limit_celsius: limits.and_then(|l| l.limit_celsius),
            limit_from: limits.map(|l| limit_words(l.limit_from.as_str())).unwrap_or_default(),
            power_watts: snap.power.watts,
            power_source: snap.power.source.as_str().to_string(),
            power_budget_watts: b.power_thresholds_watts.first().copied(),
        },
        stage: StageLine {
            value: u64::from(stage.value),
            computed_by: stage.computed_by.as_str().to_string(),
            driven_by: stage.driven_by.as_str().to_string(),
            since_s: since_ms.map(|t| now_ms.saturating_sub(t) as f64 / 1e3),
        },
        ebpf_off: ebpf_off(snap),
        ..Default::default()
    };
    s.mechanisms = mechanisms(v);
    s.classes = classes(v);
    s.waiting = waiting(snap);
    s.pods = snap.pods.as_ref().map(|p| PodsLine {
        source: p.source.clone(),
        named: p.pods as u64,
        unnamed: p.unnamed as u64,
        stale_s: p.stale_since_unix_ms.map(|t| now_ms.saturating_sub(t) as f64 / 1e3),
        errors_total: p.errors_total,
        last_error: p.last_error.clone(),
    });
    let recovered = agent.recovered.clone().unwrap_or_default();
    s.recent = Recent {
        conflicts: v.plan.conflicts.iter().map(|c| format!("{}: {} won over {}: {}", c.knob.kind(), c.won, c.lost, c.why)).collect(),
        conflicts_total: agent.conflicts_total,
        loop_overruns_total: agent.loop_overruns_total,
        drift: drift(v),
        stage_transitions_total: agent.stage_transitions_total,
        left_by_previous_run: (recovered.undone + recovered.already_gone + recovered.failed) as u64,
        left_failed: recovered.failed as u64,
    };
    s
}

/// The plan's decisions grouped by policy, with their actuators' errors.
fn mechanisms(v: &View) -> Vec<Mechanism> {
    let mut out: Vec<Mechanism> = Vec::new();
    for d in &v.plan.decisions {
        let line = format!("{}: {}", d.want, d.reason);
        match out.iter_mut().find(|m| m.name == d.policy) {
            Some(m) if !m.doing.contains(&line) => m.doing.push(line),
            Some(_) => {}
            None => out.push(Mechanism { name: d.policy.to_string(), doing: vec![line], errors: Vec::new() }),
        }
    }
    let errors: Vec<String> = v.actuators.iter().filter(|a| !a.ok).filter_map(|a| Some(format!("actuator {}: {}", a.name, a.last_error.as_ref()?))).collect();
    if !errors.is_empty() {
        out.push(Mechanism { name: "actuators".into(), doing: Vec::new(), errors });
    }
    out
}

fn classes(v: &View) -> Vec<ClassLine> {
    let snap = &v.snapshot;
    let caps = v.actuator("cgroup_cpu").and_then(|a| a.state_as::<CapsView>()).unwrap_or_default().caps;
    let count = |class: &str| snap.classes.iter().find(|c| c.class == class).map_or(0, |c| c.processes as u64);
    // joule's class cgroups: `<joule group>/<class>` or, for an idle best-effort class, `joule.<class>`.
    let own =
        |path: &str, class: &str| path.ends_with(&format!("/joule/{class}")) || path.ends_with(&format!("/joule.{class}")) || path == format!("/joule.{class}");
    v.budget
        .classes
        .iter()
        .map(|c| {
            let class = c.name.clone();
            let cg = snap.cgroups.iter().find(|g| own(&g.path, &class));
            let runq = snap.runq_latency.iter().find(|r| own(&r.cgroup, &class) && r.count > 0);
            ClassLine {
                processes: count(&class),
                promised: promised(c),
                used_cpus: cg.and_then(|g| g.usage_cpus),
                cap_ratio: caps.get(&class).map(|c| c.ratio),
                runq_p99_us: runq.map(|r| r.p99_us),
                class,
            }
        })
        .collect()
}

/// What a class is promised or limited to, in words.
fn promised(c: &ClassConfig) -> String {
    let mut p = Vec::new();
    if let (Some(r), per) = (c.rt_runtime_us, c.rt_period_us.unwrap_or(1_000_000)) {
        p.push(format!("RT {:.0}% of a CPU", r as f64 / per as f64 * 100.0));
    }
    if let (Some(q), per) = (c.quota_us, c.period_us.unwrap_or(100_000)) {
        p.push(format!("at most {:.2} CPUs", q as f64 / per as f64));
    }
    if let Some(w) = c.weight {
        p.push(format!("weight {w}"));
    }
    if let Some(cpus) = &c.cpus {
        p.push(format!("CPUs {cpus}"));
    }
    match c.thermal {
        ThermalRole::Labelled => p.push("protected (labelled)".into()),
        ThermalRole::BestEffort => p.push("best effort (capped when hot)".into()),
        _ => {}
    }
    if p.is_empty() {
        "nothing (grouped only)".into()
    } else {
        p.join(", ")
    }
}

fn waiting(snap: &Snapshot) -> Vec<Waiting> {
    let interval_ms = Some(snap.interval_ms).filter(|i| *i > 0).unwrap_or(1000) as f64;
    let mut out: Vec<Waiting> = snap
        .task_wait
        .iter()
        .map(|t| Waiting { tid: i64::from(t.pid), comm: t.comm.text().into_owned(), wait_ms_per_s: t.wait_us as f64 / interval_ms })
        .collect();
    out.sort_by(|a, b| b.wait_ms_per_s.total_cmp(&a.wait_ms_per_s));
    out
}

fn drift(v: &View) -> Vec<String> {
    let mut out = Vec::new();
    for a in &v.actuators {
        for (k, n) in a.state_as::<DriftView>().unwrap_or_default().drift_total {
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
    for n in &s.notes {
        o += &format!("note: {}\n", Escaped(n));
    }
    o += &format!(
        "joule agent pid {} up {:.0} s: {:.2}% of a CPU, longest loop {:.1} ms, sleeping {} ms ({}); {}\n",
        a.pid,
        a.up_s,
        a.cpu_pct,
        a.longest_loop_ms,
        a.period_ms,
        Escaped(&a.pace),
        a.published_ms_ago.map_or("reading: missing (none published yet)".into(), |ms| format!("reading {ms} ms old"))
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
    if let Some(off) = &s.ebpf_off {
        o += &format!("  eBPF off ({}): {}\n", Escaped(&off.reason), Escaped(&off.why));
    }
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
