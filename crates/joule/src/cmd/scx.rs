//! `joule scx`: loads and attaches joule's thermal-aware sched_ext scheduler on its own (the
//! agent runs the same scheduler with `[thermal] scheduler = "scx"`), prints its counters, and on exit says how it ended — detached
//! by us, or ejected by the kernel, with the kernel's own kind, reason and message.

use anyhow::{bail, Context};
use joule_bpf::scx::{probe_sched_ext, ExitInfo, KernelState, Scx, ScxOpts, ScxStats, SYSFS_SCHED_EXT};
use joule_bpf::thermal::PIN_STAGE;
use joule_core::effects::{Files, RealEffects};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(clap::Args, Debug)]
pub struct ScxArgs {
    /// Where the agent pins the thermal stage (`telemetry.bpf_pin_dir`). The scheduler reads
    /// `<DIR>/thermal_stage` in the kernel; when nothing is pinned there (no agent running) it
    /// uses a private stage map instead, and the stage stays 0.
    #[arg(long, value_name = "DIR", default_value = "/sys/fs/bpf/joule")]
    pin_dir: PathBuf,
    /// Print the counters once a second (dispatches per queue, aged dispatches, the stage).
    #[arg(long)]
    stats: bool,
    /// One JSON object per line on stdout (stats and the exit report) instead of text.
    #[arg(long)]
    json: bool,
    /// Detach after this many seconds; without it, run until SIGINT/SIGTERM.
    #[arg(long, value_name = "S")]
    duration_s: Option<f64>,
    /// A cgroup v2 directory whose tasks go to the always-served queue (repeatable). Its
    /// tasks are never throttled by the stage: label only what must stay responsive.
    #[arg(long, value_name = "PATH")]
    label_cgroup: Vec<PathBuf>,
    /// A cgroup v2 directory of best-effort work (repeatable): its tasks rank one queue lower,
    /// and its CPU hogs get only the stage's best-effort share of the machine (100 % at stage
    /// 0, then 60, 35, 15 %); past it the CPUs go idle rather than run them.
    #[arg(long, value_name = "PATH")]
    best_effort_cgroup: Vec<PathBuf>,
    /// A queue that waited this long is served whatever the stage (1..=5000). Lower bounds
    /// every task's wait more tightly, higher lets a hot stage throttle harder.
    #[arg(long, value_name = "MS", default_value_t = joule_bpf::scx::DEFAULT_AGE_MS)]
    age_ms: u64,
    /// Where sysfs is mounted; `<DIR>/kernel/sched_ext` says whether the kernel has sched_ext
    /// and what it is doing (tests point it at a fixture tree).
    #[arg(long, value_name = "DIR", default_value = "/sys")]
    sysfs_root: PathBuf,
}

/// Why the run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
enum EndedBy {
    Duration,
    Signal,
    /// The kernel ended it (an ejection, or sysrq): see the exit info.
    Kernel,
}

pub fn run(a: ScxArgs) -> anyhow::Result<()> {
    if let Some(d) = a.duration_s {
        if !(d.is_finite() && d > 0.0) {
            bail!(crate::UsageError(format!("--duration-s {d}: must be a positive number of seconds")));
        }
    }
    let labelled = a.label_cgroup.iter().map(|p| cgroup_id(p)).collect::<anyhow::Result<Vec<u64>>>()?;
    let best_effort = a.best_effort_cgroup.iter().map(|p| cgroup_id(p)).collect::<anyhow::Result<Vec<u64>>>()?;
    let sched_ext = a.sysfs_root.join(SYSFS_SCHED_EXT);
    let mut opts =
        ScxOpts { age_ms: a.age_ms, labelled_cgroups: labelled, best_effort_cgroups: best_effort, sysfs_root: a.sysfs_root.clone(), ..ScxOpts::default() };
    joule_bpf::scx::opts_check(&opts).map_err(crate::UsageError::from_display)?;
    probe_sched_ext(&sched_ext).context("while checking for sched_ext")?;
    joule_bpf::probe().context("while checking that BPF can load")?;
    let stage_pin = a.pin_dir.join(PIN_STAGE);
    opts.stage_map = stage_pin.exists().then_some(stage_pin.clone());
    if opts.stage_map.is_none() {
        eprintln!("joule scx: no stage map pinned at {} (no agent running): using a private stage map, the stage stays 0", stage_pin.display());
    }

    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, stop.clone()).context("while installing signal handlers")?;
    }
    let mut scx = Scx::load(opts).context("while loading the sched_ext scheduler")?;
    let k = KernelState::read(&sched_ext);
    eprintln!(
        "joule scx: attached; stage from {}; sched_ext state = {}, root/ops = {}",
        if scx.stage_shared() { stage_pin.display().to_string() } else { "a private map".into() },
        k.state.as_deref().unwrap_or("?"),
        k.ops.as_deref().unwrap_or("?")
    );

    let started = Instant::now();
    let deadline = a.duration_s.map(|s| started + Duration::from_secs_f64(s));
    let mut prev = ScxStats::default();
    let mut next_print = started + Duration::from_secs(1);
    let ended_by = loop {
        std::thread::sleep(Duration::from_millis(50));
        if scx.exit_info().is_some() {
            break EndedBy::Kernel;
        }
        if stop.load(Ordering::Relaxed) {
            break EndedBy::Signal;
        }
        if deadline.is_some_and(|d| Instant::now() >= d) {
            break EndedBy::Duration;
        }
        if a.stats && Instant::now() >= next_print {
            next_print += Duration::from_secs(1);
            let total = scx.stats()?;
            print_stats(a.json, &sched_ext, started.elapsed().as_secs_f64(), &total, &total.since(&prev));
            prev = total;
        }
    };
    let total = scx.stats()?;
    scx.detach();
    let after = wait_disabled(&sched_ext, Duration::from_secs(1));
    let exit = scx.exit_info();
    report(a.json, ended_by, exit.as_ref(), &after, &total);
    drop(scx);
    match exit {
        Some(e) if e.ejected => bail!("the kernel ejected the scheduler: {} ({}): {}{}", e.kind_name, e.kind, e.reason, msg_suffix(&e)),
        _ => Ok(()),
    }
}

/// The cgroup id the BPF side compares with: a cgroup2 directory's inode number (the BPF
/// side reads the task's cgroup in the v2 default hierarchy, so a v1 directory would never
/// match).
pub fn cgroup_id(p: &Path) -> anyhow::Result<u64> {
    match RealEffects.cgroup_id(p) {
        Ok(id) => Ok(id),
        Err(e) if e.kind() == std::io::ErrorKind::InvalidInput => bail!(crate::UsageError(e.to_string())),
        Err(e) => Err(anyhow::Error::new(e).context(format!("while reading the cgroup {}", p.display()))),
    }
}

/// The kernel's state once it has let go of the scheduler (or after `limit`).
fn wait_disabled(sched_ext: &Path, limit: Duration) -> KernelState {
    let t = Instant::now();
    loop {
        let k = KernelState::read(sched_ext);
        if k.state.as_deref() == Some("disabled") || t.elapsed() >= limit {
            return k;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn print_stats(json: bool, sched_ext: &Path, elapsed_s: f64, total: &ScxStats, interval: &ScxStats) {
    let k = KernelState::read(sched_ext);
    if json {
        let v = serde_json::json!({"event": "stats", "elapsed_s": elapsed_s, "kernel": k, "total": total, "interval": interval});
        println!("{v}");
    } else {
        let stage = interval.stage.map(|s| s.to_string()).unwrap_or_else(|| "-".into());
        println!(
            "{elapsed_s:6.1}s stage {stage} | per queue (0 best … 3, labelled, best-effort) {:?} | direct {} aged {} enqueued {} | best-effort ran {:.0} ms, held {} | kernel {}",
            interval.dispatched,
            interval.direct,
            interval.aged,
            interval.enqueued,
            interval.best_effort_run_ns as f64 / 1e6,
            interval.best_effort_held,
            k.state.as_deref().unwrap_or("?")
        );
    }
}

fn report(json: bool, ended_by: EndedBy, exit: Option<&ExitInfo>, after: &KernelState, total: &ScxStats) {
    if json {
        let v = serde_json::json!({"event": "exit", "ended_by": ended_by, "exit": exit, "kernel_after": after, "total": total});
        println!("{v}");
        return;
    }
    let how = match exit {
        Some(e) => format!("kernel exit kind {} ({}), reason: {}{}", e.kind_name, e.kind, e.reason, msg_suffix(e)),
        None => "the kernel reported no exit info".into(),
    };
    println!("joule scx: ended by {ended_by:?}; {how}; sched_ext state now {}", after.state.as_deref().unwrap_or("?"));
    println!("joule scx: dispatched per queue {:?}, direct {}, aged {}", total.dispatched, total.direct, total.aged);
}

fn msg_suffix(e: &ExitInfo) -> String {
    if e.msg.is_empty() {
        String::new()
    } else {
        format!(" ({})", e.msg)
    }
}
