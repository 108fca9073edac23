//! `joule agent`: the node agent. Each period it samples the machine into a Snapshot (the
//! thermal stage computed in the kernel), keeps class guarantees in place, publishes metrics and
//! logs events. Start-up first replays any journal a crashed agent left; shutdown (SIGINT,
//! SIGTERM, or --duration-s) undoes everything it changed.

use crate::exporter::{self, Published, Shared};
use crate::metrics::AgentStats;
use crate::snapshotter::{Bpf, Snapshotter};
use crate::ConfigArg;
use anyhow::Context;
use joule_core::effects::RealEffects;
use joule_core::journal::{self, Journal};
use joule_core::Snapshot;
use joule_qos::{QosController, QosOpts};
use std::io::Write;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

#[derive(clap::Args)]
pub struct AgentArgs {
    #[command(flatten)]
    pub config: ConfigArg,
    /// Listen for metrics here instead of the config's `agent.metrics_addr` (port 0 = any free
    /// port; the bound address is logged).
    #[arg(long, value_name = "IP:PORT")]
    pub metrics_addr: Option<String>,
    /// Stop by itself after this many seconds (benchmarks, tests). Default: until SIGINT/SIGTERM.
    #[arg(long, value_name = "SECONDS")]
    pub duration_s: Option<f64>,
}

/// The JSON-lines event log.
struct Events(Box<dyn Write + Send>);

impl Events {
    fn open(path: &Path) -> anyhow::Result<Self> {
        if path.as_os_str() == "-" {
            return Ok(Events(Box::new(std::io::stdout())));
        }
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).with_context(|| format!("while creating {}", dir.display()))?;
        }
        let f = std::fs::OpenOptions::new().create(true).append(true).open(path).with_context(|| format!("while opening event log {}", path.display()))?;
        Ok(Events(Box::new(f)))
    }
    fn emit(&mut self, event: &str, fields: serde_json::Value) {
        let mut obj = serde_json::json!({ "ts_ms": journal::now_ms(), "event": event });
        if let (Some(o), serde_json::Value::Object(f)) = (obj.as_object_mut(), fields) {
            o.extend(f);
        }
        let _ = writeln!(self.0, "{obj}");
        let _ = self.0.flush();
    }
}

fn cpu_seconds_self() -> f64 {
    let r = nix::sys::resource::getrusage(nix::sys::resource::UsageWho::RUSAGE_SELF);
    r.map(|r| {
        let tv = |t: nix::sys::time::TimeVal| t.tv_sec() as f64 + t.tv_usec() as f64 / 1e6;
        tv(r.user_time()) + tv(r.system_time())
    })
    .unwrap_or(0.0)
}

/// One line for humans on stderr.
fn status_line(s: &Snapshot, addr: &std::net::SocketAddr) -> String {
    let cpus: Vec<String> = s.cpu.utilization.iter().map(|u| format!("{:.0}%", u * 100.0)).collect();
    let temp_src = s.stage.temp_source;
    let worst = s.runq_latency.iter().max_by(|a, b| a.p99_us.total_cmp(&b.p99_us));
    let runq = worst.map(|r| format!("runq p99 {:.0} µs ({})", r.p99_us, r.cgroup)).unwrap_or_else(|| "runq n/a".into());
    format!(
        "joule: stage {} ({:.1} °C {}, by {}) | power {:.1} W ({}) | cpu {} | {} | http://{}/metrics",
        s.stage.value,
        s.stage.temp_celsius,
        temp_src,
        s.stage.computed_by.as_str(),
        s.power.watts,
        s.power.source,
        cpus.join(" "),
        runq,
        addr
    )
}

pub fn run(a: AgentArgs) -> anyhow::Result<()> {
    let mut cfg = a.config.load()?;
    if let Some(addr) = a.metrics_addr {
        cfg.agent.metrics_addr = addr;
    }
    let root = joule_core::testing::is_root();
    let jdir = cfg.agent.journal_dir.clone();
    let _lock = match journal::lock_agent(&jdir)? {
        Ok(lock) => lock,
        Err(pid) => anyhow::bail!(
            "another joule agent (pid {}) is running with journal {}; stop it first",
            pid.map(|p| p.to_string()).unwrap_or_else(|| "?".into()),
            jdir.display()
        ),
    };
    let mut events = Events::open(&cfg.agent.event_log)?;

    // A previous agent that was killed may have left changes behind: undo them first.
    let recovered = journal::restore(&jdir, &RealEffects).with_context(|| format!("while replaying the journal in {}", jdir.display()))?;
    if recovered.undone + recovered.already_gone > 0 {
        tracing::info!("undid {} change(s) a previous run left behind", recovered.undone);
    }
    if !recovered.failed.is_empty() {
        tracing::warn!("{} change(s) a previous run left behind could not be undone; they stay in the journal: {:?}", recovered.failed.len(), recovered.failed);
    }
    let (r, gone, failed) = (recovered.undone, recovered.already_gone, &recovered.failed);
    events.emit("start", serde_json::json!({ "pid": std::process::id(), "recovered": r, "already_gone": gone, "failed": failed, "root": root }));
    let mut journal = Journal::open(&jdir)?;

    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, stop.clone()).context("while installing signal handlers")?;
    }

    let result = run_loop(&cfg, &a.duration_s, root, &mut journal, &mut events, &stop);

    // Shutdown: whatever happened above, put the machine back.
    let undone = journal::restore(&jdir, &RealEffects);
    match &undone {
        Ok(r) => events.emit("stop", serde_json::json!({ "undone": r.undone, "failed": r.failed })),
        Err(e) => events.emit("stop", serde_json::json!({ "restore_error": e.to_string() })),
    }
    result?;
    let r = undone?;
    anyhow::ensure!(r.failed.is_empty(), "could not undo {} change(s): {:?}", r.failed.len(), r.failed);
    Ok(())
}

fn run_loop(
    cfg: &joule_core::config::Config,
    duration_s: &Option<f64>,
    root: bool,
    journal: &mut Journal,
    events: &mut Events,
    stop: &AtomicBool,
) -> anyhow::Result<()> {
    let bpf = if !cfg.telemetry.bpf {
        Bpf::Off
    } else if !root {
        tracing::warn!("not root: eBPF programs and class guarantees are off");
        Bpf::Off
    } else {
        Bpf::Pinned(journal)
    };
    let mut snapper = Snapshotter::new(cfg, bpf)?;
    tracing::info!(
        "thermal stage is computed and published; no actuator acts on it yet (thermal.scheduler = {:?} is reserved for that)",
        cfg.thermal.scheduler
    );
    let mut qos = qos_start(cfg, root, journal, events)?;

    let shared: Shared = Arc::new(RwLock::new(Published::default()));
    let addr = exporter::serve(&cfg.agent.metrics_addr, shared.clone())?;
    tracing::info!("metrics on http://{addr}/metrics");
    events.emit("listening", serde_json::json!({ "metrics": format!("http://{addr}/metrics") }));

    let period = Duration::from_millis(cfg.agent.period_ms);
    let status_every = Duration::from_millis(cfg.agent.status_interval_ms);
    let started = Instant::now();
    let deadline = duration_s.map(|s| started + Duration::from_secs_f64(s));
    let mut stats = AgentStats { bpf_loaded: snapper.bpf_loaded(), ..Default::default() };
    let mut last_status = Instant::now() - status_every;
    let mut last_stage = None;
    let mut next = Instant::now();
    while !stop.load(Ordering::Relaxed) && deadline.is_none_or(|d| Instant::now() < d) {
        let t0 = Instant::now();
        let snap = snapper.sample();
        if let Some(q) = qos.as_mut() {
            qos_tick(q, journal, events);
        }
        if last_stage != Some(snap.stage.value) {
            events.emit(
                "stage",
                serde_json::json!({ "stage": snap.stage.value, "temp_celsius": snap.stage.temp_celsius, "temp_source": snap.stage.temp_source, "computed_by": snap.stage.computed_by }),
            );
            if last_stage.is_some() {
                stats.stage_transitions_total += 1;
            }
            last_stage = Some(snap.stage.value);
        }
        stats.samples_total += 1;
        stats.cpu_seconds_total = cpu_seconds_self();
        stats.last_loop_seconds = t0.elapsed().as_secs_f64();
        if !status_every.is_zero() && last_status.elapsed() >= status_every {
            eprintln!("{}", status_line(&snap, &addr));
            last_status = Instant::now();
        }
        {
            let mut p = shared.write().unwrap_or_else(|e| e.into_inner());
            p.snapshot = snap;
            p.agent = stats.clone();
        }
        next += period;
        let now = Instant::now();
        if next > now {
            std::thread::sleep(next - now);
        } else {
            next = now; // overran: do not try to catch up with a burst
        }
    }
    drop(qos); // its changes are undone with the rest of the journal by the caller
    drop(snapper); // detaches BPF programs and removes the pins
    Ok(())
}

/// Applies the config's classes (admission control first; nothing half-applied).
fn qos_start(cfg: &joule_core::config::Config, root: bool, journal: &mut Journal, events: &mut Events) -> anyhow::Result<Option<QosController>> {
    if cfg.classes.is_empty() || !cfg.agent.apply_classes {
        return Ok(None);
    }
    if !root {
        tracing::warn!("not root: {} class(es) in the config are not applied", cfg.classes.len());
        return Ok(None);
    }
    let opts = QosOpts { cgroup_root: cfg.telemetry.cgroup_root.clone(), procfs_root: cfg.telemetry.procfs_root.clone(), ..QosOpts::default() };
    let mut q = QosController::new(&cfg.classes, opts).map_err(crate::UsageError::from_display)?;
    let report = q.apply(journal, &RealEffects).context("while applying [[class]] guarantees")?;
    tracing::info!("classes applied: {} cgroup(s) created, {} task(s) moved", report.created.len(), report.moved.len());
    events.emit("qos_applied", serde_json::to_value(&report).unwrap_or_default());
    Ok(Some(q))
}

/// Keeps classes in place: newly matching tasks moved in, deleted cgroups recreated.
fn qos_tick(q: &mut QosController, journal: &mut Journal, events: &mut Events) {
    match q.reconcile(journal, &RealEffects) {
        Ok(r) if !r.moved.is_empty() || !r.recreated.is_empty() => events.emit("qos_reconciled", serde_json::to_value(&r).unwrap_or_default()),
        Ok(_) => {}
        Err(e) => {
            tracing::warn!("keeping classes in place failed: {e}");
            events.emit("qos_error", serde_json::json!({ "error": e.to_string() }));
        }
    }
}
