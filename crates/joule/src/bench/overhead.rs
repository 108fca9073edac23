//! `joule bench overhead`: how much CPU the agent costs. For each run it starts a real agent
//! (10 Hz, eBPF on when root) twice — on the machine as it is (the baseline) and with 1,000
//! extra sleeping threads, which every per-task source must walk — and measures the agent's CPU
//! time per second of wall time from the kernel's per-thread accounting
//! (/proc/PID/task/*/schedstat, ns). The in-kernel cost of the eBPF programs is charged to
//! whatever task was running when they fired, not to the agent, so it is measured separately
//! with the kernel's BPF run-time statistics (BPF_ENABLE_STATS: on only while the fd is open).

use super::report;
use anyhow::Context;
use std::os::fd::{FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

#[derive(clap::Args)]
pub struct OverheadArgs {
    /// Measured seconds per scenario and run (after a warm-up).
    #[arg(long, default_value_t = 10.0)]
    pub seconds: f64,
    /// Warm-up seconds before measuring (BPF load, first samples).
    #[arg(long, default_value_t = 2.0)]
    pub warmup_s: f64,
    /// Repetitions of the whole pair; medians are reported.
    #[arg(long, default_value_t = 3)]
    pub runs: usize,
    /// Extra sleeping threads in the loaded scenario.
    #[arg(long, default_value_t = 1000)]
    pub threads: usize,
    /// Agent period (100 ms = 10 Hz).
    #[arg(long, default_value_t = 100)]
    pub period_ms: u64,
    /// Run the agent without eBPF.
    #[arg(long)]
    pub no_bpf: bool,
    /// Write the results as JSON here.
    #[arg(long, value_name = "PATH")]
    pub json: Option<PathBuf>,
    /// Write an SVG plot here.
    #[arg(long, value_name = "PATH")]
    pub plot: Option<PathBuf>,
}

struct Sample {
    agent_cpu_pct: f64,
    bpf_cpu_pct: Option<f64>,
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

/// Sum of run_time_ns over the BPF programs `pid` holds open (needs BPF stats enabled).
fn bpf_run_ns(pid: u32) -> Option<u64> {
    let mut total = None;
    for fd in std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?.flatten() {
        let link = std::fs::read_link(fd.path()).ok()?;
        if link.to_string_lossy() != "anon_inode:bpf-prog" {
            continue;
        }
        let info = std::fs::read_to_string(format!("/proc/{pid}/fdinfo/{}", fd.file_name().to_string_lossy())).ok()?;
        let ns = info.lines().find_map(|l| l.strip_prefix("run_time_ns:")).and_then(|v| v.trim().parse::<u64>().ok());
        if let Some(ns) = ns {
            total = Some(total.unwrap_or(0) + ns);
        }
    }
    total
}

/// Turns on the kernel's BPF run-time statistics for as long as the returned fd lives.
fn enable_bpf_stats() -> Option<OwnedFd> {
    const BPF_ENABLE_STATS: libc::c_long = 32;
    let mut attr = [0u8; 8]; // union bpf_attr { struct { __u32 type; } enable_stats; }, type 0 = RUN_TIME
    // SAFETY: bpf(2) with a zeroed attr of the size we pass; returns an fd or -1.
    let fd = unsafe { libc::syscall(libc::SYS_bpf, BPF_ENABLE_STATS, attr.as_mut_ptr(), attr.len() as u32) };
    (fd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

fn write_config(dir: &Path, a: &OverheadArgs) -> anyhow::Result<PathBuf> {
    let pin = format!("/sys/fs/bpf/joule-bench-{}", std::process::id());
    let cfg = format!(
        "[agent]\nperiod_ms = {}\nmetrics_addr = \"127.0.0.1:0\"\njournal_dir = \"{}\"\nevent_log = \"{}\"\nstatus_interval_ms = 0\n\n[telemetry]\nbpf = {}\nbpf_pin_dir = \"{pin}\"\n",
        a.period_ms,
        dir.join("journal").display(),
        dir.join("events.jsonl").display(),
        !a.no_bpf
    );
    let p = dir.join("joule.toml");
    std::fs::write(&p, cfg)?;
    Ok(p)
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

fn measure(cfg: &Path, a: &OverheadArgs) -> anyhow::Result<Sample> {
    let exe = std::env::current_exe()?;
    let child = Command::new(exe)
        .args(["agent", "--config"])
        .arg(cfg)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .context("while starting the agent")?;
    let agent = AgentProc(child);
    let pid = agent.0.id();
    std::thread::sleep(Duration::from_secs_f64(a.warmup_s));
    let (c0, b0, t0) = (cpu_ns(pid)?, bpf_run_ns(pid), Instant::now());
    std::thread::sleep(Duration::from_secs_f64(a.seconds));
    let (c1, b1, wall) = (cpu_ns(pid)?, bpf_run_ns(pid), t0.elapsed().as_secs_f64());
    drop(agent);
    Ok(Sample {
        agent_cpu_pct: (c1 - c0) as f64 / 1e9 / wall * 100.0,
        bpf_cpu_pct: b0.zip(b1).map(|(x, y)| y.saturating_sub(x) as f64 / 1e9 / wall * 100.0),
    })
}

/// 1,000 threads that sleep until told to stop.
struct Sleepers {
    stop: std::sync::Arc<(std::sync::Mutex<bool>, std::sync::Condvar)>,
    handles: Vec<std::thread::JoinHandle<()>>,
}

impl Sleepers {
    fn start(n: usize) -> anyhow::Result<Self> {
        let stop = std::sync::Arc::new((std::sync::Mutex::new(false), std::sync::Condvar::new()));
        let mut handles = Vec::with_capacity(n);
        for _ in 0..n {
            let s = stop.clone();
            handles.push(std::thread::Builder::new().stack_size(64 * 1024).spawn(move || {
                let (m, cv) = &*s;
                let mut g = m.lock().unwrap();
                while !*g {
                    g = cv.wait(g).unwrap();
                }
            })?);
        }
        Ok(Self { stop, handles })
    }
}

impl Drop for Sleepers {
    fn drop(&mut self) {
        *self.stop.0.lock().unwrap() = true;
        self.stop.1.notify_all();
        for h in self.handles.drain(..) {
            let _ = h.join();
        }
    }
}

pub fn run(a: OverheadArgs) -> anyhow::Result<()> {
    anyhow::ensure!(a.seconds > 0.0 && a.runs > 0, crate::UsageError("--seconds and --runs must be positive".into()));
    let root = joule_core::testing::is_root();
    let _stats = if root && !a.no_bpf { enable_bpf_stats() } else { None };
    let tmp = tempfile_dir()?;
    let cfg = write_config(tmp.path(), &a)?;
    let scenarios = ["idle machine (baseline)", "+1000 sleeping threads"];
    let total = (a.runs * 2) as u64;
    let bar = indicatif::ProgressBar::new(total).with_style(
        indicatif::ProgressStyle::with_template("{msg:32} [{bar:30}] {pos}/{len} ({elapsed})").expect("valid template"),
    );
    let mut results: Vec<Vec<Sample>> = vec![vec![], vec![]];
    for _ in 0..a.runs {
        for (i, name) in scenarios.iter().enumerate() {
            bar.set_message(name.to_string());
            let sleepers = if i == 1 { Some(Sleepers::start(a.threads)?) } else { None };
            results[i].push(measure(&cfg, &a)?);
            drop(sleepers);
            bar.inc(1);
        }
    }
    bar.finish_and_clear();

    let med = |i: usize, f: &dyn Fn(&Sample) -> Option<f64>| report::median(&results[i].iter().filter_map(f).collect::<Vec<_>>());
    let agent = [med(0, &|s| Some(s.agent_cpu_pct)), med(1, &|s| Some(s.agent_cpu_pct))];
    let bpf = [med(0, &|s| s.bpf_cpu_pct), med(1, &|s| s.bpf_cpu_pct)];
    let fmt = |v: f64| if v.is_nan() { "n/a".to_string() } else { format!("{v:.3}") };
    let mut rows = Vec::new();
    for i in 0..2 {
        let runs: Vec<String> = results[i].iter().map(|s| format!("{:.3}", s.agent_cpu_pct)).collect();
        rows.push(vec![scenarios[i].to_string(), fmt(agent[i]), fmt(bpf[i]), runs.join(" "), format!("{:.2}", agent[i] / agent[0])]);
    }
    println!(
        "joule bench overhead: agent at {} ms period, {} run(s) × {:.0} s, bpf {}",
        a.period_ms,
        a.runs,
        a.seconds,
        if a.no_bpf { "off" } else { "on" }
    );
    report::print_table(&["scenario", "agent CPU % of one CPU (median)", "eBPF in-kernel %", "runs", "ratio vs baseline"], &rows);
    let target_met = agent[1] < 1.0;
    println!("target (< 1% of one CPU with {} sleeping threads): {}", a.threads, if target_met { "met" } else { "NOT met" });

    let json = serde_json::json!({
        "bench": "overhead",
        "period_ms": a.period_ms, "seconds": a.seconds, "runs": a.runs, "threads": a.threads, "bpf": !a.no_bpf,
        "source": "kernel accounting (/proc/PID/task/*/schedstat) and BPF run-time stats",
        "scenarios": (0..2).map(|i| serde_json::json!({
            "name": scenarios[i],
            "agent_cpu_pct_median": agent[i],
            "bpf_cpu_pct_median": if bpf[i].is_nan() { serde_json::Value::Null } else { bpf[i].into() },
            "agent_cpu_pct_runs": results[i].iter().map(|s| s.agent_cpu_pct).collect::<Vec<_>>(),
        })).collect::<Vec<_>>(),
        "ratio_loaded_vs_baseline": agent[1] / agent[0],
        "target_pct": 1.0,
        "target_met": target_met,
    });
    if let Some(p) = &a.json {
        report::write_json(p, &json)?;
    }
    if let Some(p) = &a.plot {
        let groups: Vec<(String, Vec<f64>)> =
            (0..2).map(|i| (["baseline", "+1000 threads"][i].to_string(), results[i].iter().map(|s| s.agent_cpu_pct).collect())).collect();
        report::bar_plot(p, "joule agent CPU cost at 10 Hz", "% of one CPU", &groups)?;
    }
    Ok(())
}

fn tempfile_dir() -> anyhow::Result<tempfile::TempDir> {
    tempfile::Builder::new().prefix("joule-bench-").tempdir().context("while creating a temp dir")
}
