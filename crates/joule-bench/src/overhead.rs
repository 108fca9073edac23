//! `joule-bench overhead`: how much CPU the agent costs. For each run it starts a real agent
//! (eBPF on when root, unless `--no-bpf`) three times — on the machine as it is (the baseline),
//! with `--threads` extra threads that sleep throughout (every per-task source must walk them)
//! and with `--wakers` threads that wake every `--wake-period-us` (thousands of context
//! switches a second, which the eBPF sched_switch path must handle) — and measures the agent's
//! CPU time per second of wall time from the kernel's per-thread accounting
//! (/proc/PID/task/*/schedstat, ns). The in-kernel cost of the eBPF programs is charged to
//! whatever task was running when they fired, not to the agent, so it is measured separately
//! per program with the kernel's BPF run-time statistics (BPF_ENABLE_STATS: on only while the
//! bench holds the fd). The wake-up rate the load achieved is measured, not assumed.
//!
//! With `--procs`, `--flows` or `--churn-per-s` it measures the cost as the machine fills up
//! instead (scale.rs): idle processes, loopback flows and process churn, agent off and on.

mod load;
mod scale;
mod scale_summary;
mod summary;
mod workload;

use super::report;
use crate::UsageError;
use anyhow::Context;
use load::{Behaviour, LoadThreads};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use summary::{BpfMode, ProgRate, Sample, Summary};

#[derive(clap::Args)]
pub struct OverheadArgs {
    /// Measured seconds per scenario and run (after a warm-up). Each run has three scenarios.
    #[arg(long, default_value_t = 10.0)]
    pub seconds: f64,
    /// Warm-up seconds before measuring (BPF load, first samples).
    #[arg(long, default_value_t = 2.0)]
    pub warmup_s: f64,
    /// Repetitions of the three scenarios; medians are reported.
    #[arg(long, default_value_t = 3)]
    pub runs: usize,
    /// Extra threads in the sleeping scenario: they exist throughout and never wake, which
    /// costs a source that walks every task, not one that follows scheduling events.
    #[arg(long, default_value_t = 1000)]
    pub threads: usize,
    /// Threads in the waking scenario. Each sleeps --wake-period-us in a loop, so the machine
    /// sees about wakers × 1 s / period wake-ups (and twice as many context switches) a second
    /// while using little CPU itself; the rate achieved is measured and reported.
    #[arg(long, default_value_t = 8)]
    pub wakers: usize,
    /// Sleep of each waking thread per loop, µs (the kernel adds its timer slack, ~50 µs).
    #[arg(long, default_value_t = 1000)]
    pub wake_period_us: u64,
    /// Agent period (100 ms = 10 Hz).
    #[arg(long, default_value_t = 100)]
    pub period_ms: u64,
    /// The agent's `rest_period_ms` (its period while nothing is in motion). Default: the
    /// agent's own (2000 ms). Equal to --period-ms: a loop that never rests, as before issue 36.
    #[arg(long, value_name = "MS")]
    pub rest_period_ms: Option<u64>,
    /// Measure the idle machine alone (nothing changing: issue 36's goal of ≤ 1 agent wake-up
    /// a second and ≤ 0.1 % of one CPU at rest), without the sleeping and waking loads.
    #[arg(long)]
    pub idle: bool,
    /// Scale mode: idle processes to measure at, e.g. 100,2000,10000 (copies of `sleep`, all
    /// in one class of the bench's config). With --flows and --churn-per-s, one level each.
    #[arg(long, value_delimiter = ',', value_name = "N,...")]
    pub procs: Vec<usize>,
    /// Scale mode: loopback UDP flows to measure at, e.g. 100,2000,10000 (100 B/s each).
    #[arg(long, value_delimiter = ',', value_name = "M,...")]
    pub flows: Vec<usize>,
    /// Scale mode: a level of process churn, starts a second (each a short process matching
    /// a class), reported as agent CPU per 1,000 starts and the longest iteration.
    #[arg(long, value_name = "R")]
    pub churn_per_s: Option<u32>,
    /// Run the agent without eBPF (what a machine without root or bpffs gets); the in-kernel
    /// cost is then reported as absent.
    #[arg(long)]
    pub no_bpf: bool,
    /// Write the results as JSON here.
    #[arg(long, value_name = "PATH")]
    pub json: Option<PathBuf>,
    /// Write an SVG plot here.
    #[arg(long, value_name = "PATH")]
    pub plot: Option<PathBuf>,
}

/// Bounds that keep a run finite and its load meaningful; the user's to fix (exit 2).
fn validate(a: &OverheadArgs) -> Result<(), UsageError> {
    super::check_bounds([
        (a.seconds.is_finite() && a.seconds > 0.0 && a.seconds <= 3600.0, "--seconds must be in (0, 3600]"),
        (a.warmup_s.is_finite() && (0.0..=600.0).contains(&a.warmup_s), "--warmup-s must be in [0, 600]"),
        ((1..=100).contains(&a.runs), "--runs must be 1 to 100"),
        ((1..=20_000).contains(&a.threads), "--threads must be 1 to 20000"),
        ((1..=256).contains(&a.wakers), "--wakers must be 1 to 256"),
        ((100..=1_000_000).contains(&a.wake_period_us), "--wake-period-us must be 100 to 1000000"),
        (a.procs.iter().all(|n| (1..=50_000).contains(n)), "--procs: each count must be 1 to 50000"),
        (a.flows.iter().all(|m| (1..=50_000).contains(m)), "--flows: each count must be 1 to 50000"),
        (a.churn_per_s.is_none_or(|r| (1..=5_000).contains(&r)), "--churn-per-s must be 1 to 5000"),
    ])
}

/// The scale mode (issue 16) when any of its loads is asked for.
fn scale_mode(a: &OverheadArgs) -> bool {
    !a.procs.is_empty() || !a.flows.is_empty() || a.churn_per_s.is_some()
}

fn bpf_mode(a: &OverheadArgs, root: bool) -> BpfMode {
    if a.no_bpf {
        BpfMode::Off("--no-bpf".into())
    } else if !root {
        BpfMode::Off("not root: the agent cannot load eBPF programs".into())
    } else {
        BpfMode::On
    }
}

/// Context switches of every thread of `pid`, voluntary and not (/proc/PID/task/*/status): a
/// voluntary one ends in a wake-up, an involuntary one gives the CPU back to the agent later.
fn ctxt_switches(pid: u32) -> anyhow::Result<u64> {
    let mut total = 0;
    for t in std::fs::read_dir(format!("/proc/{pid}/task")).with_context(|| format!("agent {pid} is gone"))? {
        if let Ok(s) = std::fs::read_to_string(t?.path().join("status")) {
            total += s
                .lines()
                .filter(|l| l.starts_with("voluntary_ctxt_switches:") || l.starts_with("nonvoluntary_ctxt_switches:"))
                .filter_map(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
                .sum::<u64>();
        }
    }
    Ok(total)
}

/// CPU time of every thread of `pid`, in ns (sum of the first schedstat field).
fn cpu_ns(pid: u32) -> anyhow::Result<u64> {
    let mut total = 0;
    for t in std::fs::read_dir(format!("/proc/{pid}/task")).with_context(|| format!("agent {pid} is gone"))? {
        let p = t?.path().join("schedstat");
        if let Ok(s) = std::fs::read_to_string(&p) {
            total += s.split_whitespace().next().and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
        }
    }
    Ok(total)
}

/// Ids of the BPF programs `pid` holds open (from /proc/PID/fdinfo).
fn bpf_prog_ids(pid: u32) -> Vec<u32> {
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else { return Vec::new() };
    let mut ids = Vec::new();
    for fd in fds.flatten() {
        if std::fs::read_link(fd.path()).is_ok_and(|l| l.to_string_lossy() == "anon_inode:bpf-prog") {
            let info = std::fs::read_to_string(format!("/proc/{pid}/fdinfo/{}", fd.file_name().to_string_lossy())).unwrap_or_default();
            ids.extend(info.lines().find_map(|l| l.strip_prefix("prog_id:")).and_then(|v| v.trim().parse::<u32>().ok()));
        }
    }
    ids.sort_unstable();
    ids.dedup();
    ids
}

struct AgentProc(Child);

impl Drop for AgentProc {
    fn drop(&mut self) {
        // SIGTERM lets the agent undo what it did; wait so its pins are gone before we go on.
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(self.0.id() as i32), nix::sys::signal::Signal::SIGTERM);
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.0.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Everything read at one instant of a measurement.
struct Reading {
    at: Instant,
    agent_ns: u64,
    agent_switches: u64,
    progs: Vec<joule_bpf::run_stats::ProgRunStats>,
    load: Option<load::Switches>,
    machine_ctxt: Option<u64>,
}

fn read(pid: u32, prog_ids: &[u32], load: Option<&LoadThreads>) -> anyhow::Result<Reading> {
    Ok(Reading {
        agent_ns: cpu_ns(pid)?,
        agent_switches: ctxt_switches(pid)?,
        progs: if prog_ids.is_empty() { Vec::new() } else { joule_bpf::run_stats::prog_run_stats(prog_ids) },
        load: load.map(LoadThreads::switches),
        machine_ctxt: load::machine_ctxt(),
        at: Instant::now(),
    })
}

fn sample(r0: &Reading, r1: &Reading, bpf: bool) -> Sample {
    let wall = r1.at.duration_since(r0.at).as_secs_f64();
    let per_s = |x: u64, y: u64| y.saturating_sub(x) as f64 / wall;
    let progs = r1.progs.iter().filter_map(|p1| {
        let p0 = r0.progs.iter().find(|p| p.id == p1.id)?;
        let (ns, cnt) = (p1.run_time_ns.saturating_sub(p0.run_time_ns), p1.run_cnt.saturating_sub(p0.run_cnt));
        Some(ProgRate {
            name: p1.name.clone(),
            cpu_pct: ns as f64 / 1e9 / wall * 100.0,
            runs_per_s: cnt as f64 / wall,
            ns_per_run: (cnt > 0).then(|| ns as f64 / cnt as f64),
        })
    });
    Sample {
        agent_cpu_pct: per_s(r0.agent_ns, r1.agent_ns) / 1e9 * 100.0,
        agent_wakeups_per_s: per_s(r0.agent_switches, r1.agent_switches),
        bpf: bpf.then(|| progs.collect()),
        load_wakeups_per_s: r0.load.zip(r1.load).map(|(a, b)| per_s(a.voluntary, b.voluntary)),
        load_preemptions_per_s: r0.load.zip(r1.load).map(|(a, b)| per_s(a.nonvoluntary, b.nonvoluntary)),
        machine_ctxt_per_s: r0.machine_ctxt.zip(r1.machine_ctxt).map(|(a, b)| per_s(a, b)),
    }
}

fn measure(cfg: &Path, a: &OverheadArgs, bpf: bool, load: Option<&LoadThreads>) -> anyhow::Result<Sample> {
    let log_path = cfg.with_file_name("agent.log");
    let child = Command::new(crate::joule_exe()?)
        .args(["agent", "--config"])
        .arg(cfg)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log_path)?)
        .spawn()
        .context("while starting the agent")?;
    let agent = AgentProc(child);
    let pid = agent.0.id();
    std::thread::sleep(Duration::from_secs_f64(a.warmup_s));
    let prog_ids = if bpf { bpf_prog_ids(pid) } else { Vec::new() };
    if bpf && prog_ids.is_empty() {
        drop(agent);
        let log = std::fs::read_to_string(&log_path).unwrap_or_default();
        anyhow::bail!(
            "the agent holds no eBPF program after {} s of warm-up (bpffs at /sys/fs/bpf? kernel BTF?); measure without eBPF with --no-bpf. Agent log:\n{}",
            a.warmup_s,
            log.trim_end()
        );
    }
    let r0 = read(pid, &prog_ids, load)?;
    std::thread::sleep(Duration::from_secs_f64(a.seconds));
    let r1 = read(pid, &prog_ids, load)?;
    drop(agent);
    Ok(sample(&r0, &r1, bpf))
}

/// Starts the load of scenario `key`, bounded: the waking threads stop by themselves after
/// the scenario's time even if the bench were stuck.
fn start_load(key: &str, a: &OverheadArgs) -> anyhow::Result<Option<LoadThreads>> {
    Ok(match key {
        "sleeping" => Some(LoadThreads::start(a.threads, Behaviour::Sleep)?),
        "waking" => {
            let deadline = Instant::now() + Duration::from_secs_f64(a.warmup_s + a.seconds + 30.0);
            Some(LoadThreads::start(a.wakers, Behaviour::Wake { period: Duration::from_micros(a.wake_period_us), deadline })?)
        }
        _ => None,
    })
}

fn loadavg() -> Option<String> {
    std::fs::read_to_string("/proc/loadavg").ok().map(|s| s.trim().to_string())
}

pub fn run(a: OverheadArgs) -> anyhow::Result<()> {
    validate(&a)?;
    let bpf = bpf_mode(&a, joule_core::testing::is_root());
    let on = bpf == BpfMode::On;
    let _stats = if on {
        Some(joule_bpf::run_stats::enable_run_stats().context("while enabling BPF run-time statistics (measure without eBPF with --no-bpf)")?)
    } else {
        None
    };
    if scale_mode(&a) {
        let off_reason = match &bpf {
            BpfMode::On => None,
            BpfMode::Off(why) => Some(why.clone()),
        };
        return scale::run(&a, on, off_reason);
    }
    let tmp = tempfile::Builder::new().prefix("joule-bench-").tempdir().context("while creating a temp dir")?;
    // Every mechanism on (two classes, thermal stages, the flow monitor, a nap armed on a port
    // nobody uses; elevate off): what a configured agent costs, not an empty one.
    let cfg = scale::write_config(tmp.path(), &a, on, scale::free_port()?)?;
    let scenarios = summary::scenarios(&a);
    let bar = indicatif::ProgressBar::new((a.runs * scenarios.len()) as u64)
        .with_style(indicatif::ProgressStyle::with_template("{msg:40} [{bar:30}] {pos}/{len} ({elapsed})").expect("valid template"));
    let loadavg_before = loadavg();
    let mut results: Vec<Vec<Sample>> = scenarios.iter().map(|_| Vec::new()).collect();
    for _ in 0..a.runs {
        for (i, sc) in scenarios.iter().enumerate() {
            bar.set_message(sc.name.clone());
            let load = start_load(sc.key, &a)?;
            results[i].push(measure(&cfg, &a, on, load.as_ref())?);
            drop(load);
            bar.inc(1);
        }
    }
    bar.finish_and_clear();

    let s = Summary { args: &a, bpf, scenarios, results, command: std::env::args().collect::<Vec<_>>().join(" "), loadavg_before, loadavg_after: loadavg() };
    println!("{}", s.header());
    report::print_table(&Summary::COLUMNS, &s.rows());
    if on {
        println!();
        report::print_table(&Summary::PROG_COLUMNS, &s.prog_rows());
    }
    if let Some(met) = s.target_met() {
        println!("target (< {}% of one CPU with {} sleeping threads): {}", summary::TARGET_PCT, a.threads, if met { "met" } else { "NOT met" });
    }
    for (line, _) in s.rest_goals() {
        println!("{line}");
    }
    println!("load average before / after: {} / {}", s.loadavg_before.as_deref().unwrap_or("?"), s.loadavg_after.as_deref().unwrap_or("?"));
    if let Some(p) = &a.json {
        report::write_json(p, &s.json())?;
    }
    if let Some(p) = &a.plot {
        report::bar_plot(p, &s.plot_title(), "% of one CPU", &s.plot_groups())?;
    }
    Ok(())
}

/// `OverheadArgs` as clap parses `joule-bench overhead <extra>`, for the unit tests.
#[cfg(test)]
fn parse_args(extra: &[&str]) -> OverheadArgs {
    crate::test_args::parse_args("overhead", extra)
}

#[cfg(test)]
mod tests {
    use super::*;
    use parse_args as args;

    #[test]
    fn defaults_are_valid() {
        assert!(validate(&args(&[])).is_ok());
    }

    #[test]
    fn out_of_bounds_arguments_are_usage_errors_naming_each_flag() {
        let e = validate(&args(&["--runs", "0", "--seconds", "0", "--threads", "0", "--wakers", "0", "--wake-period-us", "10"])).unwrap_err();
        for flag in ["--runs", "--seconds", "--threads", "--wakers", "--wake-period-us"] {
            assert!(e.0.contains(flag), "{flag} missing in: {e}");
        }
        assert!(validate(&args(&["--seconds", "NaN"])).is_err());
        assert!(validate(&args(&["--warmup-s=-1"])).is_err());
    }

    #[test]
    fn ebpf_is_off_when_asked_or_without_root() {
        assert_eq!(bpf_mode(&args(&["--no-bpf"]), true), BpfMode::Off("--no-bpf".into()));
        assert!(matches!(bpf_mode(&args(&[]), false), BpfMode::Off(why) if why.contains("root")));
        assert_eq!(bpf_mode(&args(&[]), true), BpfMode::On);
    }

    #[test]
    fn scale_levels_come_from_the_lists_and_are_bounded() {
        let a = args(&["--procs", "100,2000,10000", "--flows", "100", "--churn-per-s", "500"]);
        assert!(validate(&a).is_ok() && scale_mode(&a));
        let l: Vec<String> = scale::levels(&a).iter().map(ToString::to_string).collect();
        assert_eq!(l, ["100 idle processes", "2000 idle processes", "10000 idle processes", "100 loopback flows", "churn 500 starts/s"]);
        assert!(!scale_mode(&args(&[])));
        let e = validate(&args(&["--procs", "0", "--flows", "60000", "--churn-per-s", "0"])).unwrap_err();
        for flag in ["--procs", "--flows", "--churn-per-s"] {
            assert!(e.0.contains(flag), "{flag} missing in: {e}");
        }
    }

    #[test]
    fn the_scale_config_is_one_the_agent_accepts_with_two_classes_nap_and_the_flow_monitor() {
        let dir = tempfile::tempdir().unwrap();
        let p = scale::write_config(dir.path(), &args(&["--procs", "10"]), true, 18080).unwrap();
        let cfg = joule_core::config::Config::load(&p).unwrap();
        assert_eq!(cfg.classes.len(), 2);
        assert!(cfg.net.flow_monitor && cfg.nap.enabled && cfg.nap.monitors.tcp_ports == [18080]);
    }

    #[test]
    fn a_period_the_agent_would_refuse_is_refused_before_any_run() {
        let dir = tempfile::tempdir().unwrap();
        assert!(scale::write_config(dir.path(), &args(&[]), true, 18080).is_ok());
        let e = scale::write_config(dir.path(), &args(&["--period-ms", "1"]), true, 18080).unwrap_err();
        assert!(e.downcast_ref::<UsageError>().is_some(), "{e:#}");
    }
}
