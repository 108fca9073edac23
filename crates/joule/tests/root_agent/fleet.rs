//! Tier 2 (root, this kernel): the fleet dashboard and rules against the real tools (issue 38).
//! An agent with a class that wakes, a best-effort class capped at a hot stage (the labelled
//! model over low thresholds: this machine has no CPU sensor) and the nap actuator; Debian's
//! Prometheus server (unpacked by scripts/install-deps.sh, never installed as a service) on
//! loopback with its own storage, scraping the agent every second with
//! deploy/prometheus/joule-rules.yml loaded. Then, through its HTTP API: every rule is loaded
//! and healthy, the one alert that must fire does (the model's temperature is over the limit
//! the agent exports for these thresholds: JouleOverThermalLimit) and no other, the limit and
//! the thresholds are the config's, and every dashboard panel's query, every variable's
//! `label_values` and every recording rule's expression and series return data — alerts
//! through the series they compare (`ALERT_INNER`), and the event-only expressions
//! (`EVENT_ONLY`, each with its reason) only have to be accepted.

// Shared with fleet_rules.rs; each test binary uses its own part of it.
#[allow(dead_code)]
#[path = "../fleet/files.rs"]
mod files;

use super::{is_root, require, Agent, KillOnDrop};
use std::io::{Read, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// A GET on loopback: (status, body).
fn get(addr: &str, path: &str) -> (u16, String) {
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(s, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").unwrap();
    let mut resp = String::new();
    s.read_to_string(&mut resp).unwrap();
    let (head, body) = resp.split_once("\r\n\r\n").unwrap_or((resp.as_str(), ""));
    let status = head.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    (status, body.to_string())
}

fn urlencode(s: &str) -> String {
    s.bytes().map(|b| if b.is_ascii_alphanumeric() || b"-._~".contains(&b) { (b as char).to_string() } else { format!("%{b:02X}") }).collect()
}

/// What Prometheus answered to one query: Err(its error), or the values of the samples.
fn query(prom: &str, expr: &str) -> Result<Vec<f64>, String> {
    let (status, body) = get(prom, &format!("/api/v1/query?query={}", urlencode(expr)));
    let v: serde_json::Value = serde_json::from_str(&body).map_err(|e| format!("HTTP {status}, not JSON ({e}): {body}"))?;
    if v["status"] != "success" {
        return Err(format!("HTTP {status}: {} {}", v["errorType"], v["error"]));
    }
    let result = v["data"]["result"].as_array().cloned().unwrap_or_default();
    Ok(result.iter().filter_map(|r| r["value"][1].as_str().map(|x| x.parse().unwrap_or(f64::NAN))).collect())
}

/// The values of a label over the series `selector` matches (Grafana's `label_values`).
fn label_values(prom: &str, selector: &str, label: &str) -> Result<Vec<String>, String> {
    let (status, body) = get(prom, &format!("/api/v1/label/{label}/values?match[]={}", urlencode(selector)));
    let v: serde_json::Value = serde_json::from_str(&body).map_err(|e| format!("HTTP {status}, not JSON ({e}): {body}"))?;
    let values = v["data"].as_array().ok_or_else(|| format!("HTTP {status}: {body}"))?;
    Ok(values.iter().filter_map(|x| x.as_str().map(String::from)).collect())
}

/// A free loopback port for Prometheus (it binds it itself a moment later).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// One thing the test asks Prometheus, and whether it must return data.
struct Check {
    what: String,
    expr: String,
    /// Some(reason) when it may return nothing: its series exist only after an event.
    event_only: Option<&'static str>,
}

#[test]
#[ignore = "tier 2: root"]
fn root_fleet_dashboard_and_rules_return_data_from_a_real_prometheus_scraping_the_agent() {
    if !require(is_root(), "root (the agent loads eBPF and makes class cgroups)") {
        return;
    }
    let Some(prometheus) = files::tool("prometheus") else {
        require(false, "the Prometheus server (scripts/install-deps.sh unpacks it into /var/cache/joule-tools/bin)");
        return;
    };
    let started = Instant::now();
    // A class whose process wakes 20 times a second (its run-queue latency has data), and a
    // best-effort one the hot stage caps and the nap would freeze. The nap's monitor sees the
    // agent itself (comm `joule`, root's), so the nap actuator runs and reports but never naps.
    let waker = KillOnDrop(Command::new("sh").args(["-c", "while :; do sleep 0.05; done"]).spawn().unwrap());
    let sleeper = KillOnDrop(Command::new("sleep").arg("300").spawn().unwrap());
    let cfg = format!(
        "[thermal]\nact_on_model = true\nstage_thresholds_celsius = [10.0, 15.0, 20.0]\n\n\
         [[class]]\nname = \"jlat\"\nmatch = {{ pid = [{w}] }}\n\n\
         [[class]]\nname = \"jbe\"\nthermal = \"best_effort\"\nmatch = {{ pid = [{s}] }}\n\n\
         [nap]\nenabled = true\nclass = \"jbe\"\n\n[nap.monitors]\nprocesses = [\"joule\"]\n",
        w = waker.0.id(),
        s = sleeper.0.id()
    );
    let mut agent = Agent::start(&cfg);
    let agent_addr = agent.metrics_addr();

    let dir = tempfile::tempdir().unwrap();
    let prom = format!("127.0.0.1:{}", free_port());
    let config = format!(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nrule_files:\n  - {rules}\nscrape_configs:\n  - job_name: joule\n    static_configs:\n      - targets: [\"{agent_addr}\"]\n",
        rules = files::rules_path().canonicalize().unwrap().display()
    );
    std::fs::write(dir.path().join("prometheus.yml"), config).unwrap();
    let log = std::fs::File::create(dir.path().join("prometheus.log")).unwrap();
    let server = KillOnDrop(
        Command::new(&prometheus)
            .arg(format!("--config.file={}", dir.path().join("prometheus.yml").display()))
            .arg(format!("--storage.tsdb.path={}", dir.path().join("data").display()))
            .arg(format!("--web.listen-address={prom}"))
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap(),
    );
    let prom_log = || std::fs::read_to_string(dir.path().join("prometheus.log")).unwrap_or_default();
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::net::TcpStream::connect(&prom).is_err() || get(&prom, "/-/ready").0 != 200 {
        assert!(Instant::now() < deadline, "Prometheus never became ready:\n{}", prom_log());
        std::thread::sleep(Duration::from_millis(100));
    }

    // Everything the dashboard and the rules ask, with the Grafana variables filled in for this
    // agent (`instance` is its address, as Prometheus labels it).
    let instance = agent_addr.replace('.', "\\\\.");
    let dash = files::dashboard();
    let rules = files::rules();
    let mut checks: Vec<Check> = Vec::new();
    for (_, queries) in files::panels(&dash) {
        for q in queries {
            let expr = files::substitute(&q.expr, &instance);
            checks.push(Check { what: format!("panel {:?} {}", q.panel, q.ref_id), event_only: files::event_only(&expr), expr });
        }
    }
    for r in &rules {
        if let Some(rec) = &r.record {
            checks.push(Check { what: format!("rule {rec}"), expr: r.expr.clone(), event_only: files::event_only(&r.expr) });
            checks.push(Check { what: format!("series {rec} as Prometheus recorded it"), expr: rec.clone(), event_only: files::event_only(&r.expr) });
        }
    }
    for (alert, inner) in files::ALERT_INNER {
        let rule = rules.iter().find(|r| r.alert.as_deref() == Some(alert)).unwrap_or_else(|| panic!("no alert {alert}"));
        // The alert itself must be a query Prometheus accepts; what it compares must have data.
        checks.push(Check {
            what: format!("alert {alert} (healthy: nothing to fire)"),
            expr: rule.expr.clone(),
            event_only: Some("an alert of a healthy agent"),
        });
        for piece in inner {
            checks.push(Check { what: format!("alert {alert}: what it compares"), expr: piece.to_string(), event_only: files::event_only(piece) });
        }
    }

    // Poll until every check has data (or a bounded time is up): rates need two scrapes, rules
    // on recorded series one more evaluation.
    let deadline = Instant::now() + Duration::from_secs(45);
    let failures = loop {
        let mut failures = Vec::new();
        for c in &checks {
            match query(&prom, &c.expr) {
                Err(e) => failures.push(format!("{}: Prometheus refused {:?}: {e}", c.what, c.expr)),
                Ok(v) if c.event_only.is_none() && !v.iter().any(|x| x.is_finite()) => {
                    failures.push(format!("{}: no data ({} sample(s), none finite) from {:?}", c.what, v.len(), c.expr))
                }
                Ok(_) => {}
            }
        }
        for (name, q, var_regex) in files::query_variables(&dash) {
            let (selector, label) = files::label_values(&q).unwrap();
            let selector = files::substitute(selector, &instance);
            match label_values(&prom, &selector, label) {
                Err(e) => failures.push(format!("variable {name}: {e}")),
                Ok(values) => {
                    // The variable's own regex (Grafana's /.../ form) keeps some of them.
                    let keep = regex::Regex::new(var_regex.trim_matches('/')).unwrap();
                    let kept: Vec<&String> = values.iter().filter(|v| keep.is_match(v)).collect();
                    if kept.is_empty() {
                        failures.push(format!("variable {name}: {q} kept nothing of {values:?}"));
                    }
                }
            }
        }
        if failures.is_empty() || Instant::now() > deadline {
            break failures;
        }
        std::thread::sleep(Duration::from_millis(1000));
    };
    assert!(failures.is_empty(), "after {:?}:\n{}\n--- Prometheus log:\n{}", started.elapsed(), failures.join("\n"), prom_log());

    // Prometheus loaded every rule and evaluates each without an error, and on a healthy
    // agent no alert fires.
    let (_, body) = get(&prom, "/api/v1/rules");
    let loaded: serde_json::Value = serde_json::from_str(&body).unwrap();
    let loaded: Vec<&serde_json::Value> = loaded["data"]["groups"].as_array().unwrap().iter().flat_map(|g| g["rules"].as_array().unwrap()).collect();
    assert_eq!(loaded.len(), rules.len(), "rules Prometheus loaded: {loaded:#?}");
    for r in &loaded {
        assert_eq!(r["health"], "ok", "{r:#}");
    }
    let firing: Vec<&str> = loaded.iter().filter(|r| r["type"] == "alerting" && r["state"] == "firing").filter_map(|r| r["name"].as_str()).collect();
    assert_eq!(firing, ["JouleOverThermalLimit"], "the model runs over the 25 °C limit of these thresholds, and nothing else is wrong: {loaded:#?}");
    // That limit is the agent's own, as the rules read it: 5 °C past its hottest threshold (no
    // trip point here), with the thresholds per stage.
    let limit = query(&prom, r#"instance:joule_thermal_limit_celsius"#).unwrap();
    assert_eq!(limit, [25.0], "the recorded limit");
    assert_eq!(query(&prom, r#"joule_thermal_limit_celsius{from="thresholds"}"#).unwrap(), [25.0]);
    assert_eq!(query(&prom, r#"joule_thermal_stage_threshold_celsius{stage="3", from="config"}"#).unwrap(), [20.0]);
    assert_eq!(query(&prom, r#"sum(joule_agent_recovered_changes)"#).unwrap(), [0.0], "a clean start found nothing left behind");
    let targets = get(&prom, "/api/v1/targets").1;
    assert!(targets.contains(r#""health":"up""#), "the agent's target is not up: {targets}");
    for (piece, why) in files::EVENT_ONLY {
        eprintln!("event-only (accepted, not required to have data): {piece}: {why}");
    }
    eprintln!("{} queries and {} variables returned data after {:?}", checks.len(), files::query_variables(&dash).len(), started.elapsed());

    // Stop both: the agent by SIGTERM, which restores everything itself (Drop replays the
    // journal once more, and removes the pins, whatever happened).
    drop(server);
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(agent.child.id() as i32), nix::sys::signal::SIGTERM).unwrap();
    assert!(agent.child.wait().unwrap().success(), "the agent's shutdown failed");
    for h in ["cpu", "cpuset", "cpuacct"] {
        assert!(!Path::new(&format!("/sys/fs/cgroup/{h}/joule")).exists(), "SIGTERM left /sys/fs/cgroup/{h}/joule");
    }
    drop((waker, sleeper));
}
