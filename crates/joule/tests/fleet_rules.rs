//! Tier 1 (no root): the fleet files operators load (issue 38). deploy/prometheus/joule-rules.yml
//! passes `promtool check rules`, its unit tests (joule-rules.test.yml) pass `promtool test
//! rules`, and they fail when an alert can no longer fire or fires on a healthy node; every
//! alert has a severity, a summary, a description and tests both ways. deploy/grafana/joule.json
//! parses, every panel has a query on the chosen datasource, and every series the dashboard and
//! the rules name is one joule exports (its own catalogue, `joule monitor --list-metrics
//! --json`) or a recording rule defined before its use. promtool is Debian's, unpacked by
//! scripts/install-deps.sh; without it the promtool tests skip, naming it. The root tier runs
//! all of these queries against a real Prometheus scraping a real agent (root_agent/fleet.rs).

// Shared with root_agent/fleet.rs; each test binary uses its own part of it.
#[allow(dead_code)]
#[path = "fleet/files.rs"]
mod files;

use joule_core::testing::require;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

fn promtool() -> Option<PathBuf> {
    let found = files::tool("promtool");
    require(found.is_some(), "promtool (scripts/install-deps.sh unpacks it into /var/cache/joule-tools/bin)");
    found
}

/// (passed, what promtool said).
fn run(promtool: &Path, args: &[&str], file: &Path) -> (bool, String) {
    let out = Command::new(promtool).args(args).arg(file).output().unwrap();
    (out.status.success(), format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)))
}

#[test]
fn fleet_rules_pass_promtool_check_and_their_unit_tests() {
    let Some(promtool) = promtool() else { return };
    let (ok, said) = run(&promtool, &["check", "rules"], &files::rules_path());
    assert!(ok, "promtool check rules:\n{said}");
    assert!(said.contains(&format!("SUCCESS: {} rules found", files::rules().len())), "{said}");
    let (ok, said) = run(&promtool, &["test", "rules"], &files::rules_test_path());
    assert!(ok && said.contains("SUCCESS"), "promtool test rules:\n{said}");
}

/// The unit tests would pass on rules that never alert, or always do, if they did not test
/// each alert both ways: each alert in turn is made unable to fire (its tests of a sick node
/// must fail), then made to fire always (the healthy node's test must fail).
#[test]
fn fleet_rule_unit_tests_fail_when_an_alert_cannot_fire_or_always_fires() {
    let Some(promtool) = promtool() else { return };
    let text = std::fs::read_to_string(files::rules_path()).unwrap();
    let original: serde_norway::Value = serde_norway::from_str(&text).unwrap();
    let alerts: Vec<String> = files::rules().iter().filter_map(|r| r.alert.clone()).collect();
    let cases: Vec<(String, &str, &str)> = alerts
        .iter()
        .flat_map(|a| [(a.clone(), "vector(1) == 0", "name: "), (a.clone(), r#"label_replace(vector(1), "instance", "x", "", "")"#, "name: healthy node")])
        .collect();
    std::thread::scope(|s| {
        let runs: Vec<_> = cases
            .iter()
            .map(|(alert, expr, must_name)| {
                let (promtool, original) = (&promtool, &original);
                s.spawn(move || {
                    let dir = tempfile::tempdir().unwrap();
                    let mut broken = original.clone();
                    let groups = broken["groups"].as_sequence_mut().unwrap();
                    let rule =
                        groups.iter_mut().flat_map(|g| g["rules"].as_sequence_mut().unwrap().iter_mut()).find(|r| r["alert"].as_str() == Some(alert.as_str()));
                    rule.unwrap()["expr"] = serde_norway::Value::String(expr.to_string());
                    std::fs::write(dir.path().join("joule-rules.yml"), serde_norway::to_string(&broken).unwrap()).unwrap();
                    std::fs::copy(files::rules_test_path(), dir.path().join("joule-rules.test.yml")).unwrap();
                    let (ok, said) = run(promtool, &["test", "rules"], &dir.path().join("joule-rules.test.yml"));
                    assert!(!ok, "{alert} with expr {expr:?}: the unit tests still pass:\n{said}");
                    assert!(
                        said.contains(&format!("alertname: {alert},")) && said.contains(must_name),
                        "{alert} with expr {expr:?}: not the expected failure:\n{said}"
                    );
                })
            })
            .collect();
        for r in runs {
            r.join().unwrap();
        }
    });
}

/// Every alert: a severity, a summary and a description for the operator, and unit tests that
/// expect it to fire on some series and not to fire on the healthy node.
#[test]
fn fleet_alerts_say_how_bad_and_what_to_do_and_are_tested_both_ways() {
    let tests: serde_norway::Value = serde_norway::from_str(&std::fs::read_to_string(files::rules_test_path()).unwrap()).unwrap();
    // alert → (fires somewhere, stays silent on the healthy node)
    let mut seen: BTreeMap<String, (bool, bool)> = BTreeMap::new();
    for t in tests["tests"].as_sequence().unwrap() {
        let healthy = t["name"].as_str() == Some("healthy node");
        for a in t["alert_rule_test"].as_sequence().into_iter().flatten() {
            let e = seen.entry(a["alertname"].as_str().unwrap().to_string()).or_default();
            let fires = a["exp_alerts"].as_sequence().is_some_and(|x| !x.is_empty());
            e.0 |= fires;
            e.1 |= healthy && !fires;
        }
    }
    let rules = files::rules();
    let alerts: Vec<&files::Rule> = rules.iter().filter(|r| r.alert.is_some()).collect();
    assert!(alerts.len() >= 6, "the issue's alerts: {alerts:?}");
    for a in &alerts {
        let name = a.name();
        assert!(name.starts_with("Joule"), "{name}");
        assert!(["critical", "warning"].contains(&a.labels.get("severity").map(String::as_str).unwrap_or("")), "{name}: severity {:?}", a.labels);
        for key in ["summary", "description"] {
            assert!(a.annotations.get(key).is_some_and(|s| s.len() > 20), "{name}: no {key}");
        }
        assert!(
            a.for_.is_some() || a.expr.contains("_over_time(") || a.expr.contains("increase("),
            "{name}: neither a `for` nor a window: one bad scrape would page"
        );
        assert_eq!(seen.get(name), Some(&(true, true)), "{name}: (fires in a test, silent on the healthy node)");
    }
    assert_eq!(seen.len(), alerts.len(), "tests of alerts that do not exist: {seen:?}");
    // The root tier's list of inner series names each alert once, each piece in its alert.
    assert_eq!(files::ALERT_INNER.len(), alerts.len());
    for (alert, inner) in files::ALERT_INNER {
        let rule = alerts.iter().find(|a| a.name() == alert).unwrap_or_else(|| panic!("ALERT_INNER names {alert}, which is no alert"));
        for piece in inner {
            assert!(rule.expr.contains(piece), "{alert}: {piece} is not part of {}", rule.expr);
        }
    }
}

/// The names in a PromQL expression that are series: joule's metrics (with their wire
/// suffixes) and recording rules (with a colon); quoted label values are skipped.
fn series_names(expr: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut quoted = false;
    let mut word = String::new();
    for c in expr.chars().chain([' ']) {
        if c == '"' {
            quoted = !quoted;
        }
        if !quoted && (c.is_ascii_alphanumeric() || c == '_' || c == ':') {
            word.push(c);
            continue;
        }
        let starts = word.chars().next().is_some_and(|f| !f.is_ascii_digit());
        if starts && (word.starts_with("joule_") || word.contains(':')) {
            out.insert(std::mem::take(&mut word));
        }
        word.clear();
    }
    out
}

/// joule's catalogue: family name → type, from the binary's own table.
fn catalogue() -> BTreeMap<String, String> {
    let out = Command::new(env!("CARGO_BIN_EXE_joule")).args(["monitor", "--list-metrics", "--json"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let table: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap();
    table.iter().map(|m| (m["name"].as_str().unwrap().to_string(), m["type"].as_str().unwrap().to_string())).collect()
}

/// Whether `name` is on joule's /metrics: a gauge as it is, a counter with `_total`, a
/// histogram's `_bucket`, `_count` or `_sum`.
fn exported(name: &str, cat: &BTreeMap<String, String>) -> bool {
    let is = |base: &str, ty: &str| cat.get(base).is_some_and(|t| t == ty);
    cat.get(name).is_some_and(|t| t == "gauge")
        || name.strip_suffix("_total").is_some_and(|b| is(b, "counter"))
        || ["_bucket", "_count", "_sum"].iter().any(|s| name.strip_suffix(s).is_some_and(|b| is(b, "histogram")))
}

#[test]
fn fleet_rules_and_dashboard_name_only_series_joule_exports_or_records_first() {
    let cat = catalogue();
    let rules = files::rules();
    let mut recorded: BTreeSet<String> = BTreeSet::new();
    for r in &rules {
        for s in series_names(&r.expr) {
            if s.contains(':') {
                assert!(recorded.contains(&s), "{}: uses {s} before (or without) a rule recording it", r.name());
            } else {
                assert!(exported(&s, &cat), "{}: {s} is not a series joule exports", r.name());
            }
        }
        if let Some(rec) = &r.record {
            // level:metric:operations, as the node_exporter mixin names them (no operations
            // for a series that is no aggregation or rate: the limit, the headroom).
            assert!((1..=2).contains(&rec.matches(':').count()), "{rec} is not level:metric[:operations]");
            assert!(rec.split(':').nth(1).unwrap().starts_with("joule_"), "{rec}");
            recorded.insert(rec.clone());
        }
    }
    let dash = files::dashboard();
    let mut used: BTreeSet<String> = BTreeSet::new();
    let queries: Vec<files::PanelQuery> = files::panels(&dash).into_iter().flat_map(|(_, q)| q).collect();
    let variables = files::query_variables(&dash);
    let exprs = queries.iter().map(|q| (q.panel.clone(), q.expr.clone())).chain(variables.iter().map(|(n, q, _)| (format!("variable {n}"), q.clone())));
    for (what, expr) in exprs {
        for s in series_names(&expr) {
            assert!(
                if s.contains(':') { recorded.contains(&s) } else { exported(&s, &cat) },
                "{what}: {s} is neither exported by joule nor recorded by the rules"
            );
            used.insert(s);
        }
    }
    // What issue 38 asks the dashboard to show, each through at least one query.
    for want in [
        "joule_thermal_stage",
        "instance:joule_thermal_headroom_celsius",
        "instance:joule_thermal_over_limit:bool",
        "joule_thermal_class_cap_ratio",
        "instance:joule_nap_residency:ratio_rate5m",
        "joule_runq_latency_seconds_bucket",
        "instance:joule_agent_cpu:rate5m",
        "joule_agent_conflicts_total",
    ] {
        assert!(used.contains(want), "no panel shows {want}");
    }
    for (piece, why) in files::EVENT_ONLY {
        let mut everywhere = queries.iter().map(|q| q.expr.as_str()).chain(rules.iter().map(|r| r.expr.as_str()));
        assert!(everywhere.any(|e| files::event_only(e) == Some(why)), "EVENT_ONLY lists {piece} ({why}), which no query uses");
    }
}

#[test]
fn fleet_dashboard_parses_and_every_panel_queries_the_chosen_prometheus() {
    let dash = files::dashboard();
    assert!(dash["title"].as_str().is_some_and(|t| t.contains("joule")) && dash["uid"].as_str().is_some());
    let vars: Vec<&serde_json::Value> = dash["templating"]["list"].as_array().unwrap().iter().collect();
    let names: BTreeSet<&str> = vars.iter().filter_map(|v| v["name"].as_str()).collect();
    let ds = vars.iter().find(|v| v["type"] == "datasource").expect("a datasource variable");
    assert_eq!((ds["name"].as_str(), ds["query"].as_str()), (Some("datasource"), Some("prometheus")));
    for want in ["job", "instance", "cgroup"] {
        assert!(names.contains(want), "no {want} variable: {names:?}");
    }
    for (name, q, _) in files::query_variables(&dash) {
        assert!(files::label_values(&q).is_some(), "variable {name}: {q} is not label_values(selector, label)");
    }
    let panels = files::panels(&dash);
    assert!(panels.len() >= 10, "{} panels", panels.len());
    let mut ids = BTreeSet::new();
    let mut cells: Vec<(u64, u64, u64, u64, &str)> = Vec::new();
    for top in dash["panels"].as_array().unwrap() {
        assert!(ids.insert(top["id"].as_u64().expect("a panel id")), "panel id {} twice", top["id"]);
        let g = &top["gridPos"];
        let [x, y, w, h] = ["x", "y", "w", "h"].map(|k| g[k].as_u64().unwrap_or_else(|| panic!("{}: no gridPos {k}", top["title"])));
        let title = top["title"].as_str().unwrap_or_default();
        assert!(x + w <= 24, "{title} is wider than the grid");
        // Grafana would push an overlapping panel down, out of the order it was laid out in.
        for (x2, y2, w2, h2, other) in &cells {
            assert!(x + w <= *x2 || x2 + w2 <= x || y + h <= *y2 || y2 + h2 <= y, "{title} overlaps {other}");
        }
        cells.push((x, y, w, h, title));
    }
    for (p, queries) in panels {
        let title = p["title"].as_str().unwrap_or_default();
        assert!(!title.is_empty() && p["description"].as_str().is_some_and(|d| !d.is_empty()), "panel {p} has no title or description");
        assert_eq!(p["datasource"]["uid"], "${datasource}", "{title}");
        assert!(!queries.is_empty(), "{title} has no query");
        let mut refs = BTreeSet::new();
        for q in &queries {
            assert!(!q.expr.trim().is_empty(), "{title} {}: empty query", q.ref_id);
            assert!(refs.insert(q.ref_id.clone()), "{title}: refId {} twice", q.ref_id);
            // Every variable it uses is one the dashboard defines or Grafana's own.
            let mut rest = q.expr.as_str();
            while let Some(i) = rest.find('$') {
                rest = &rest[i + 1..];
                let var: String = rest.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
                assert!(names.contains(var.as_str()) || ["__rate_interval", "__range"].contains(&var.as_str()), "{title}: unknown variable ${var}");
            }
            // What the root tier substitutes parses as the same query with every variable filled.
            let _ = files::substitute(&q.expr, ".+");
        }
    }
}
