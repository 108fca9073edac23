//! The fleet files as the tests read them (issue 38): the rules of
//! deploy/prometheus/joule-rules.yml, the queries of deploy/grafana/joule.json, the Grafana
//! variables those queries use, and the two lists that say which expressions may return no
//! data from a healthy agent and why. Shared by the unit tier (fleet_rules.rs) and the root
//! tier (root_agent/fleet.rs), so both judge the same files the same way.

use serde::Deserialize;
use std::path::{Path, PathBuf};

pub fn repo() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
}

pub fn rules_path() -> PathBuf {
    repo().join("deploy/prometheus/joule-rules.yml")
}

pub fn rules_test_path() -> PathBuf {
    repo().join("deploy/prometheus/joule-rules.test.yml")
}

pub fn dashboard_path() -> PathBuf {
    repo().join("deploy/grafana/joule.json")
}

/// A tool of Debian's prometheus package (`promtool`, `prometheus`): `$JOULE_PROMTOOL` or
/// `$JOULE_PROMETHEUS` when set, else what scripts/install-deps.sh unpacked into
/// `$JOULE_TOOLS/bin` (default /var/cache/joule-tools); None when it is not there.
pub fn tool(name: &str) -> Option<PathBuf> {
    if let Some(p) = std::env::var_os(format!("JOULE_{}", name.to_uppercase())) {
        return Some(PathBuf::from(p));
    }
    let dir = std::env::var("JOULE_TOOLS").unwrap_or_else(|_| "/var/cache/joule-tools".into());
    let p = Path::new(&dir).join("bin").join(name);
    p.exists().then_some(p)
}

#[derive(Debug, Deserialize)]
pub struct RuleFile {
    pub groups: Vec<Group>,
}

#[derive(Debug, Deserialize)]
pub struct Group {
    pub rules: Vec<Rule>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct Rule {
    pub record: Option<String>,
    pub alert: Option<String>,
    pub expr: String,
    #[serde(rename = "for")]
    pub for_: Option<String>,
    #[serde(default)]
    pub labels: std::collections::BTreeMap<String, String>,
    #[serde(default)]
    pub annotations: std::collections::BTreeMap<String, String>,
}

impl Rule {
    /// The recording rule's series or the alert's name.
    pub fn name(&self) -> &str {
        self.record.as_deref().or(self.alert.as_deref()).expect("a rule records or alerts")
    }
}

pub fn rules() -> Vec<Rule> {
    let text = std::fs::read_to_string(rules_path()).unwrap();
    let file: RuleFile = serde_norway::from_str(&text).expect("joule-rules.yml is a Prometheus rule file");
    file.groups.into_iter().flat_map(|g| g.rules).collect()
}

pub fn dashboard() -> serde_json::Value {
    let text = std::fs::read_to_string(dashboard_path()).unwrap();
    serde_json::from_str(&text).expect("deploy/grafana/joule.json is JSON")
}

/// One query of one dashboard panel, as written (Grafana variables not yet substituted).
#[derive(Debug, Clone)]
pub struct PanelQuery {
    pub panel: String,
    pub ref_id: String,
    pub expr: String,
}

/// Every panel that draws something (rows only group), with its queries.
pub fn panels(dash: &serde_json::Value) -> Vec<(&serde_json::Value, Vec<PanelQuery>)> {
    let top = dash["panels"].as_array().expect("the dashboard has panels");
    // A collapsed row keeps its panels inside it.
    let all = top.iter().flat_map(|p| std::iter::once(p).chain(p["panels"].as_array().into_iter().flatten()));
    all.filter(|p| p["type"] != "row")
        .map(|p| {
            let title = p["title"].as_str().unwrap_or_default().to_string();
            let queries = p["targets"].as_array().into_iter().flatten();
            let queries = queries
                .map(|t| PanelQuery {
                    panel: title.clone(),
                    ref_id: t["refId"].as_str().unwrap_or_default().to_string(),
                    expr: t["expr"].as_str().unwrap_or_default().to_string(),
                })
                .collect();
            (p, queries)
        })
        .collect()
}

/// The dashboard's query variables: (name, `label_values(selector, label)` query, regex).
pub fn query_variables(dash: &serde_json::Value) -> Vec<(String, String, String)> {
    let list = dash["templating"]["list"].as_array().expect("the dashboard has variables");
    list.iter()
        .filter(|v| v["type"] == "query")
        .map(|v| {
            let q = v["query"]["query"].as_str().or(v["query"].as_str()).or(v["definition"].as_str()).unwrap_or_default();
            (v["name"].as_str().unwrap_or_default().to_string(), q.to_string(), v["regex"].as_str().unwrap_or_default().to_string())
        })
        .collect()
}

/// Splits `label_values(selector, label)` into (selector, label).
pub fn label_values(q: &str) -> Option<(&str, &str)> {
    let inner = q.trim().strip_prefix("label_values(")?.strip_suffix(')')?;
    let (sel, label) = inner.rsplit_once(',')?;
    Some((sel.trim(), label.trim()))
}

/// The Grafana variables the dashboard's queries may use, and what the tests put in their
/// place: the fleet's job, the node under test (a regex), joule's class cgroups (what the
/// `cgroup` variable's regex keeps), and short ranges for a test that scraped for seconds.
pub fn substitute(expr: &str, instance_regex: &str) -> String {
    let vars = [
        ("$__rate_interval", "1m".to_string()),
        ("$__range", "5m".to_string()),
        ("$job", "joule".to_string()),
        ("$instance", instance_regex.to_string()),
        ("$cgroup", "/joule[./].+".to_string()),
    ];
    let mut out = expr.to_string();
    for (k, v) in &vars {
        out = out.replace(k, v);
    }
    assert!(!out.contains('$'), "a Grafana variable the tests do not know in: {expr}");
    out
}

/// Expressions that return nothing from a healthy agent because their series exist only after
/// an event, by a piece of their text, with the reason. The root tier only checks that
/// Prometheus accepts them.
pub const EVENT_ONLY: [(&str, &str); 2] = [
    ("joule_plan_conflicts{", "a series exists only while the last plan holds a conflict between two wants"),
    (
        "joule_scx_ejections_total",
        "a series per exit kind appears with the kernel's first ejection of joule's sched_ext scheduler (and only with thermal.scheduler = \"scx\")",
    ),
];

pub fn event_only(expr: &str) -> Option<&'static str> {
    EVENT_ONLY.iter().find(|(k, _)| expr.contains(k)).map(|(_, why)| *why)
}

/// Alerts must not fire on a healthy agent, so the root tier evaluates the series each one
/// compares instead: every piece here is a part of the alert's expression (the unit tier
/// checks it is), and must return data.
pub const ALERT_INNER: [(&str, &[&str]); 8] = [
    ("JouleAgentDown", &[r#"up{job="joule"}"#]),
    ("JouleAgentStalled", &["changes(joule_agent_samples_total[5m])", r#"up{job="joule"}"#]),
    ("JouleOverThermalLimit", &["avg_over_time(instance:joule_thermal_over_limit:bool[10m])"]),
    ("JouleProtectedClassWaiting", &["instance_cgroup:joule_protected_runq_latency_seconds:p99_rate5m"]),
    ("JouleActuatorFailing", &["increase(joule_actuator_errors_total[10m])"]),
    ("JouleLoopOverruns", &["instance:joule_agent_loop_overruns:ratio_rate5m"]),
    ("JouleScxEjected", &["increase(joule_scx_ejections_total[30m])"]),
    ("JouleRestoreFailed", &[r#"joule_agent_recovered_changes{outcome="failed"}"#]),
];
