//! `joule-bench overhead --procs … --flows … --churn-per-s …`: the agent's cost as the
//! machine fills up (issue 16). Each level (N idle processes, M loopback flows, a churn of R
//! process starts a second) is measured with the agent off and on, in an order that alternates
//! from level to level and run to run, under the same load: the agent's CPU share from its
//! threads' schedstat, its longest loop iteration (the agent's own
//! `joule_agent_loop_duration_max_seconds`, since its start), its RSS, its eBPF programs' run
//! time (`kernel.bpf_stats_enabled`, charged to whichever task was running, so not in the
//! agent's share) and the whole machine's busy time from /proc/stat, with and without it.
//!
//! The agent runs a config a user would: two classes (`idle` matches every bench process,
//! `svc` one process with nap armed on a TCP port), the thermal stages, the flow monitor,
//! elevate off, at `--period-ms`.

use super::workload::{Binaries, Churn, Flows, IdleProcs, CHURN_COMM, IDLE_COMM, SVC_COMM};
use super::{bpf_prog_ids, cpu_ns, AgentProc, OverheadArgs};
use crate::overhead::scale_summary::{Level, LevelRuns, Mode, ScaleSummary, Window};
use crate::report;
use crate::UsageError;
use anyhow::Context;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The levels the arguments ask for, in the order they are measured within a run.
pub fn levels(a: &OverheadArgs) -> Vec<Level> {
    let mut v: Vec<Level> = a.procs.iter().map(|&n| Level::Procs(n)).collect();
    v.extend(a.flows.iter().map(|&m| Level::Flows(m)));
    v.extend(a.churn_per_s.map(Level::Churn));
    v
}

/// A TCP port nobody listens on now, for nap's monitor (it only watches it).
pub(super) fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

pub(super) fn write_config(dir: &Path, a: &OverheadArgs, bpf: bool, nap_port: u16) -> anyhow::Result<PathBuf> {
    let pin = format!("/sys/fs/bpf/joule-bench-{}", std::process::id());
    let cfg = format!(
        r#"[agent]
period_ms = {period}
{rest}metrics_addr = "127.0.0.1:0"
journal_dir = "{journal}"
event_log = "{events}"
status_interval_ms = 0

[telemetry]
bpf = {bpf}
bpf_pin_dir = "{pin}"

[thermal]
stage_thresholds_celsius = [70.0, 80.0, 90.0]
hysteresis_celsius = 3.0

[net]
flow_monitor = {bpf}

[[class]]
name = "idle"
weight = 100
match = {{ comm = ["{IDLE_COMM}", "{CHURN_COMM}"] }}

[[class]]
name = "svc"
match = {{ comm = ["{SVC_COMM}"] }}

[nap]
enabled = true
class = "svc"
idle_ms = 3600000
monitors = {{ tcp_ports = [{nap_port}] }}
"#,
        period = a.period_ms,
        rest = a.rest_period_ms.map(|ms| format!("rest_period_ms = {ms}\n")).unwrap_or_default(),
        journal = dir.join("journal").display(),
        events = dir.join("events.jsonl").display(),
    );
    let p = dir.join("joule.toml");
    std::fs::write(&p, cfg)?;
    joule_core::config::Config::load(&p).map_err(UsageError::from_display)?;
    Ok(p)
}

/// Busy time of the whole machine (all CPUs), in USER_HZ ticks: /proc/stat's first line
/// without idle and iowait.
fn machine_busy_ticks() -> anyhow::Result<u64> {
    let stat = std::fs::read_to_string("/proc/stat")?;
    let cpu = stat.lines().next().context("/proc/stat is empty")?;
    let f: Vec<u64> = cpu.split_whitespace().skip(1).filter_map(|v| v.parse().ok()).collect();
    anyhow::ensure!(f.len() >= 8, "/proc/stat: unexpected first line {cpu:?}");
    Ok(f[0] + f[1] + f[2] + f[5] + f[6] + f[7])
}

fn vm_rss_kb(pid: u32) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    s.lines().find_map(|l| l.strip_prefix("VmRSS:"))?.split_whitespace().next()?.parse().ok()
}

/// The agent's metrics address, from its "listening" event (logged once it has started).
fn wait_listening(events: &Path, agent: &mut AgentProc, within: Duration) -> anyhow::Result<String> {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        let log = std::fs::read_to_string(events).unwrap_or_default();
        for l in log.lines() {
            let v: serde_json::Value = serde_json::from_str(l).unwrap_or_default();
            if v["event"] == "listening" {
                let url = v["metrics"].as_str().unwrap_or_default();
                return Ok(url.trim_start_matches("http://").trim_end_matches("/metrics").to_string());
            }
        }
        if let Ok(Some(st)) = agent.0.try_wait() {
            anyhow::bail!("the agent exited ({st}) before it listened");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    anyhow::bail!("the agent did not start within {} s", within.as_secs())
}

/// One value of the agent's /metrics (plain HTTP on loopback).
fn scrape(addr: &str, metric: &str) -> anyhow::Result<f64> {
    let mut s = std::net::TcpStream::connect(addr)?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    s.write_all(b"GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n")?;
    let mut body = String::new();
    s.read_to_string(&mut body)?;
    body.lines()
        .find_map(|l| l.strip_prefix(metric).and_then(|r| r.strip_prefix(' ')).and_then(|v| v.trim().parse().ok()))
        .with_context(|| format!("{metric} is not in the agent's metrics"))
}

/// What one level's load counts while a window runs.
enum Counter<'a> {
    None,
    Starts(&'a Churn),
    Datagrams(&'a Flows),
}

impl Counter<'_> {
    fn now(&self) -> u64 {
        match self {
            Counter::None => 0,
            Counter::Starts(c) => c.started(),
            Counter::Datagrams(f) => f.sent(),
        }
    }
}

/// One window: the machine (and, with `agent`, the agent started for it) over `--seconds`.
fn window(cfg: &Path, a: &OverheadArgs, bpf: bool, agent: bool, count: &Counter) -> anyhow::Result<Window> {
    let events = cfg.with_file_name("events.jsonl");
    let _ = std::fs::remove_file(&events);
    let mut proc = None;
    let mut startup_s = None;
    if agent {
        let t0 = Instant::now();
        let log = std::fs::File::create(cfg.with_file_name("agent.log"))?;
        let child = Command::new(crate::joule_exe()?).args(["agent", "--config"]).arg(cfg).stdin(Stdio::null()).stdout(Stdio::null()).stderr(log).spawn()?;
        let mut p = AgentProc(child);
        let addr = wait_listening(&events, &mut p, Duration::from_secs(120)).with_context(|| {
            let log = std::fs::read_to_string(cfg.with_file_name("agent.log")).unwrap_or_default();
            format!("agent log:\n{}", log.trim_end())
        })?;
        startup_s = Some(t0.elapsed().as_secs_f64());
        proc = Some((p, addr));
    }
    std::thread::sleep(Duration::from_secs_f64(a.warmup_s));
    let pid = proc.as_ref().map(|(p, _)| p.0.id());
    let ids = match pid {
        Some(pid) if bpf => bpf_prog_ids(pid),
        _ => Vec::new(),
    };
    let read = |pid: Option<u32>| -> anyhow::Result<(Instant, Option<u64>, u64, u64, u64)> {
        let bpf_ns = joule_bpf::run_stats::prog_run_stats(&ids).iter().map(|p| p.run_time_ns).sum();
        Ok((Instant::now(), pid.map(cpu_ns).transpose()?, bpf_ns, machine_busy_ticks()?, count.now()))
    };
    let r0 = read(pid)?;
    std::thread::sleep(Duration::from_secs_f64(a.seconds));
    let r1 = read(pid)?;
    let wall = r1.0.duration_since(r0.0).as_secs_f64();
    let (loop_max_ms, rss_mb) = match &proc {
        Some((p, addr)) => (Some(scrape(addr, "joule_agent_loop_duration_max_seconds")? * 1e3), vm_rss_kb(p.0.id()).map(|kb| kb as f64 / 1024.0)),
        None => (None, None),
    };
    drop(proc);
    Ok(Window {
        mode: if agent { Mode::On } else { Mode::Off },
        agent_cpu_pct: r0.1.zip(r1.1).map(|(x, y)| y.saturating_sub(x) as f64 / 1e9 / wall * 100.0),
        bpf_cpu_pct: (agent && bpf).then(|| r1.2.saturating_sub(r0.2) as f64 / 1e9 / wall * 100.0),
        loop_max_ms,
        rss_mb,
        startup_s,
        machine_busy_pct: r1.3.saturating_sub(r0.3) as f64 / crate::ticks_per_s() / wall * 100.0,
        starts_per_s: matches!(count, Counter::Starts(_)).then(|| r1.4.saturating_sub(r0.4) as f64 / wall),
        datagrams_per_s: matches!(count, Counter::Datagrams(_)).then(|| r1.4.saturating_sub(r0.4) as f64 / wall),
    })
}

/// Runs both windows of one level under its load, in `order`.
fn level(cfg: &Path, bins: &Binaries, a: &OverheadArgs, bpf: bool, lv: Level, agent_first: bool) -> anyhow::Result<(Window, Window)> {
    // Long enough for both windows and their agents' start; the loads end by themselves then.
    let life = Duration::from_secs_f64(2.0 * (a.warmup_s + a.seconds) + 180.0);
    let _svc = IdleProcs::start(bins, SVC_COMM, 1, life)?;
    let (_procs, flows, churn) = match lv {
        Level::Procs(n) => (Some(IdleProcs::start(bins, IDLE_COMM, n, life)?), None, None),
        Level::Flows(m) => (None, Some(Flows::start(m, Instant::now() + life)?), None),
        Level::Churn(r) => (None, None, Some(Churn::start(bins.clone(), r, Instant::now() + life)?)),
    };
    std::thread::sleep(Duration::from_secs(2)); // the load settles (first datagrams, first churn)
    let count = match (&churn, &flows) {
        (Some(c), _) => Counter::Starts(c),
        (_, Some(f)) => Counter::Datagrams(f),
        _ => Counter::None,
    };
    let mut w = Vec::new();
    for agent in [agent_first, !agent_first] {
        w.push(window(cfg, a, bpf, agent, &count)?);
    }
    let (on, off) = if agent_first { (w.remove(0), w.remove(0)) } else { (w.remove(1), w.remove(0)) };
    Ok((off, on))
}

pub fn run(a: &OverheadArgs, bpf: bool, bpf_off_reason: Option<String>) -> anyhow::Result<()> {
    let levels = levels(a);
    let tmp = tempfile::Builder::new().prefix("joule-bench-").tempdir().context("while creating a temp dir")?;
    let cfg = write_config(tmp.path(), a, bpf, free_port()?)?;
    let bins = Binaries::new(tmp.path())?;
    let bar = indicatif::ProgressBar::new((a.runs * levels.len()) as u64)
        .with_style(indicatif::ProgressStyle::with_template("{msg:40} [{bar:30}] {pos}/{len} ({elapsed})").expect("valid template"));
    let mut results: Vec<LevelRuns> = levels.iter().map(|&level| LevelRuns { level, runs: Vec::new() }).collect();
    for run in 0..a.runs {
        for (i, lv) in levels.iter().enumerate() {
            bar.set_message(lv.to_string());
            // Alternate which mode goes first, so neither always meets a fresher machine.
            let agent_first = (run + i) % 2 == 1;
            results[i].runs.push(level(&cfg, &bins, a, bpf, *lv, agent_first).with_context(|| format!("at {lv}, run {}", run + 1))?);
            bar.inc(1);
        }
    }
    bar.finish_and_clear();
    let s = ScaleSummary { period_ms: a.period_ms, seconds: a.seconds, bpf_off_reason, results, command: std::env::args().collect::<Vec<_>>().join(" ") };
    println!("{}", s.header());
    report::print_table(&ScaleSummary::COLUMNS, &s.rows());
    for line in s.verdicts() {
        println!("{line}");
    }
    if let Some(p) = &a.json {
        report::write_json(p, &s.json())?;
    }
    if let Some(p) = &a.plot {
        report::bar_plot(p, &s.plot_title(), "agent, % of one CPU", &s.plot_groups())?;
    }
    Ok(())
}
