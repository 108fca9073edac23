//! `joule agent`: the node agent, one control loop. Each period:
//!
//! ```text
//! sense   (Snapshotter: one list of sources)       -> Snapshot (readings only, immutable)
//! decide  (policies(), pure)                       -> Plan (what to hold, and why)
//! act     (actuators(), journal first)             -> the machine holds the plan
//! publish (exporter)                               <- Snapshot + Plan + actuator state
//! ```
//!
//! A mechanism is a module that implements `Actuator` (and `Policy`, and a telemetry `Source`
//! if it senses) plus one line in `policies()` / `actuators()` below. Start-up first replays
//! any journal a crashed agent left; the actuators start in order (the first failure stops
//! them all and restores); shutdown (SIGINT, SIGTERM, or --duration-s) undoes everything.

pub(crate) mod acting;
mod events;
pub mod socket;
mod status;
mod wake;

use crate::backends::{self, Ebpf};
use crate::exporter::{self, Published, Shared};
use crate::guardian;
use crate::metrics::AgentStats;
use crate::sense::{Bpf, Snapshotter};
use crate::webconfig::WebConfig;
use crate::ConfigArg;
use anyhow::Context;
use events::Events;
use joule_core::config::Config;
use joule_core::control::pace::{self, Motion, Pace};
use joule_core::control::{self, ActCx, Actuators, Conflict, Facts, Plan, Policy, Want};
use joule_core::effects::RealEffects;
use joule_core::journal::Journal;
use joule_core::nap::NapCounters;
use joule_core::policy::{ClassPolicy, ElevatePolicy, NapPolicy, PlacementPolicy, ThermalActions, ThermalPolicy};
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
    /// Run without eBPF: no run-queue latency, per-task wait read from /proc (about 3% of a CPU
    /// with 1,000 threads instead of 0.4%), thermal stage computed in user space and not pinned
    /// for a scheduler. Same as `telemetry.bpf = false`. Without it, eBPF loads where the
    /// kernel allows it (`telemetry.bpf = "auto"`, the default) and the agent says why where it
    /// does not; `telemetry.bpf = true` stops with the reason instead.
    #[arg(long)]
    pub no_bpf: bool,
}

/// When this agent started (unix ms), for its CPU share since then (`joule status`).
static STARTED_UNIX_MS: std::sync::OnceLock<u64> = std::sync::OnceLock::new();

pub fn run(a: AgentArgs) -> anyhow::Result<()> {
    STARTED_UNIX_MS.get_or_init(joule_core::clock::now_ms);
    let root = joule_core::testing::is_root();
    let mut cfg = a.config.load_trusted()?;
    if let Some(addr) = a.metrics_addr {
        cfg.agent.metrics_addr = addr;
    }
    // The web config, like the config, only from a file root controls: say so before its
    // contents are judged.
    let web_path = &cfg.agent.metrics_web_config;
    if root && !web_path.as_os_str().is_empty() {
        trusted_config(web_path).map_err(|e| crate::UsageError(format!("{e:#}")))?;
    }
    // The verdict `joule check-config` gives, before anything is opened or changed.
    let refusals = backends::refusals(&cfg);
    if !refusals.is_empty() {
        let list: Vec<String> = refusals.iter().map(|(_, m)| format!("  - {m}")).collect();
        anyhow::bail!(crate::UsageError(format!("the config cannot be used on this machine:\n{}", list.join("\n"))));
    }
    let Start { ebpf, chosen } = start(&cfg, a.no_bpf, root, &backends::Roots::of(&cfg.telemetry));
    if let Ebpf::Refused(why) = &ebpf {
        anyhow::bail!(crate::UsageError(why.clone()));
    }
    let web = web_config(&cfg, root)?;
    let jdir = cfg.agent.journal_dir.clone();
    // A guardian replaying a killed agent's journal holds the lock for a few milliseconds:
    // wait that out, not a running agent.
    let lock_deadline = Instant::now() + Duration::from_secs(2);
    let _lock = match loop {
        match joule_core::agent_lock::lock_agent(&jdir)? {
            Err(_) if Instant::now() < lock_deadline => std::thread::sleep(Duration::from_millis(50)),
            held => break held,
        }
    } {
        Ok(lock) => lock,
        Err(pid) => anyhow::bail!(
            "another joule agent (pid {}) is running with journal {}; stop it first",
            pid.map(|p| p.to_string()).unwrap_or_else(|| "?".into()),
            jdir.display()
        ),
    };
    let mut events = Events::open(&cfg.agent.event_log, cfg.agent.event_log_max_bytes)?;

    // The one journal of this process: every actuator, the elevate engine's thread and the nap
    // waiter get a handle to it. A previous agent that was killed may have left changes
    // behind in it: undo them first.
    let journal = Journal::open(&jdir).with_context(|| format!("while opening the undo journal in {}", jdir.display()))?;
    let recovered = journal.restore_all(&RealEffects).with_context(|| format!("while replaying the journal in {}", jdir.display()))?;
    if recovered.undone + recovered.already_gone > 0 {
        tracing::info!("undid {} change(s) a previous run left behind", recovered.undone);
    }
    if !recovered.failed.is_empty() {
        tracing::warn!("{} change(s) a previous run left behind could not be undone; they stay in the journal: {:?}", recovered.failed.len(), recovered.failed);
    }
    let (r, gone, failed) = (recovered.undone, recovered.already_gone, &recovered.failed);
    let found = crate::metrics::Recovered { undone: r, already_gone: gone, failed: failed.len() };
    // From here on the agent changes things: a guardian replays the journal if it dies.
    let guardian = guardian::Guardian::spawn(&jdir)?;
    events.emit(
        "start",
        serde_json::json!({ "pid": std::process::id(), "recovered": r, "already_gone": gone, "failed": failed, "root": root, "guardian": guardian.pid() }),
    );
    say_backends(&chosen, &mut events);

    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, stop.clone()).context("while installing signal handlers")?;
    }

    // A panic in the loop unwinds to here and the machine is put back like on any other exit
    // (not from a panic hook: this runs after the loop's locks and guards are dropped). A
    // SIGKILL or an abort cannot run this: the guardian replays the journal then (and the
    // next start, or the unit's ExecStopPost, if the guardian was killed too).
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run_loop(&cfg, web, &a.duration_s, ebpf, root, &journal, &mut events, &stop, found)))
        .unwrap_or_else(|p| {
            let what = p.downcast_ref::<&str>().map(|s| s.to_string()).or_else(|| p.downcast_ref::<String>().cloned()).unwrap_or_default();
            Err(anyhow::anyhow!("the control loop panicked ({what}); its changes are undone"))
        });

    // Shutdown: whatever happened above, put the machine back.
    let undone = journal.restore_all(&RealEffects);
    match &undone {
        Ok(r) => events.emit("stop", serde_json::json!({ "undone": r.undone, "failed": r.failed })),
        Err(e) => events.emit("stop", serde_json::json!({ "restore_error": e.to_string() })),
    }
    if undone.as_ref().is_ok_and(|r| r.failed.is_empty()) {
        guardian.disarm();
    } // else: dropped armed, the guardian tries once more after the agent's exit
    result?;
    let r = undone?;
    anyhow::ensure!(r.failed.is_empty(), "could not undo {} change(s): {:?}", r.failed.len(), r.failed);
    Ok(())
}

/// The policies, in the order they decide. One line per mechanism.
fn policies(cfg: &Config) -> anyhow::Result<Vec<Box<dyn Policy>>> {
    let mut p: Vec<Box<dyn Policy>> = vec![Box::new(ThermalPolicy::from_config(cfg))];
    p.extend(ClassPolicy::from_config(cfg).map(|c| Box::new(c) as Box<dyn Policy>));
    p.extend(energy_model(cfg)?.and_then(|m| PlacementPolicy::from_config(cfg, m)).map(|c| Box::new(c) as Box<dyn Policy>));
    p.extend(ElevatePolicy::from_config(cfg).map(|e| Box::new(e) as Box<dyn Policy>));
    p.extend(NapPolicy::from_config(cfg).map(|c| Box::new(c) as Box<dyn Policy>));
    p.extend(joule_core::policy::NetPolicy::from_config(cfg).map(|n| Box::new(n) as Box<dyn Policy>));
    Ok(p)
}

/// The energy model placement decides with, when `[energy]` is on.
fn energy_model(cfg: &Config) -> anyhow::Result<Option<joule_core::energy::EnergyModel>> {
    if !cfg.energy.enabled {
        return Ok(None);
    }
    let m = cfg.energy.load_model(&cfg.telemetry, &RealEffects).context("while loading the [energy] model")?;
    for n in &m.notes {
        tracing::info!("energy model: {n}");
    }
    Ok(Some(m))
}

/// What the agent decides at start from the machine: whether it loads eBPF, and the backends
/// it reports (the doctor's rows).
#[derive(Debug)]
struct Start {
    ebpf: Ebpf,
    chosen: Vec<backends::Choice>,
}

/// The machine read once from `roots` (the config's, as `joule doctor` reads them) and the
/// oracle's choices for it.
fn start(cfg: &Config, no_bpf: bool, root: bool, roots: &backends::Roots) -> Start {
    let facts = backends::Facts::read(roots);
    Start { ebpf: backends::ebpf(cfg, no_bpf, root, &facts), chosen: backends::choose(&facts, cfg) }
}

/// What eBPF the agent loads, from the oracle's decision (a refusal stopped the start before).
fn bpf_choice(ebpf: Ebpf, journal: &Journal) -> anyhow::Result<Bpf<'_>> {
    match ebpf {
        Ebpf::On => Ok(Bpf::Pinned(journal)),
        Ebpf::Off(off) => Ok(Bpf::Off(off)),
        Ebpf::Refused(why) => Err(crate::UsageError(why).into()),
    }
}

/// The agent's sources with eBPF as decided ([`Snapshotter::load`]); why eBPF is off, when it
/// is, said once.
fn sensing(cfg: &Config, ebpf: Ebpf, journal: &Journal, events: &mut Events) -> anyhow::Result<Snapshotter> {
    let sense = Snapshotter::load(cfg, bpf_choice(ebpf, journal)?)?;
    if let Some(off) = sense.bpf_off() {
        let (why, without) = (off.explain(), crate::sense::WITHOUT_EBPF);
        tracing::warn!("eBPF is off ({}: {why}); without it: {without}", off.as_str());
        if let Some(words) = sense.load_error() {
            tracing::warn!("{}{words}", crate::sense::LOAD_FAILED_NOTE);
        }
        events.emit("ebpf_off", serde_json::json!({ "reason": off.as_str(), "why": why, "without": without, "load_error": sense.load_error() }));
    }
    Ok(sense)
}

/// Says once, at start, which way each mechanism acts here: the rows `joule doctor` prints.
fn say_backends(chosen: &[backends::Choice], events: &mut Events) {
    let rows: Vec<String> = chosen.iter().map(|c| format!("{} = {}", c.mechanism, c.backend)).collect();
    tracing::info!("backends: {}", rows.join("; "));
    events.emit("backends", serde_json::json!({ "backends": chosen }));
}

/// The endpoint's TLS and auth (`agent.metrics_web_config`), read before anything changes
/// (its owner and path were checked before the config's verdict). A root agent takes the
/// certificate, key and client CA it names, like the file itself, only from paths root
/// controls: whoever can replace the key can pose as the endpoint.
fn web_config(cfg: &Config, root: bool) -> anyhow::Result<Option<Arc<WebConfig>>> {
    let path = &cfg.agent.metrics_web_config;
    if path.as_os_str().is_empty() {
        return Ok(None);
    }
    let web = WebConfig::load(path).map_err(|e| crate::UsageError(format!("{e:#}")))?;
    for f in web.files.iter().filter(|_| root) {
        trusted_config(f).map_err(|e| crate::UsageError(format!("{e:#}")))?;
    }
    Ok(Some(Arc::new(web)))
}

/// A config the root agent acts on must be root's: owned by root (or the user it runs as)
/// and writable by nobody else, or any user who could edit it would choose what root does.
pub(crate) fn trusted_config(path: &std::path::Path) -> anyhow::Result<()> {
    use std::os::unix::fs::MetadataExt;
    // Nobody else may swap it either: every directory on the way to the name and to the file
    // it resolves to is root's (`private_fs::trusted_dir`).
    let real = std::fs::canonicalize(path).with_context(|| format!("while reading {}", path.display()))?;
    for dir in [path.parent(), real.parent()].into_iter().flatten().filter(|d| !d.as_os_str().is_empty()) {
        joule_core::private_fs::trusted_dir(dir).map_err(|e| crate::UsageError(format!("refusing the config {}: {e}; {}", path.display(), copy_hint(path))))?;
    }
    let md = std::fs::metadata(&real).with_context(|| format!("while reading {}", path.display()))?;
    let me = nix::unistd::geteuid().as_raw();
    if md.uid() != 0 && md.uid() != me {
        anyhow::bail!(crate::UsageError(format!(
            "refusing {}: it is owned by uid {}, who would choose what this root agent does; {}",
            path.display(),
            md.uid(),
            copy_hint(path)
        )));
    }
    if md.mode() & 0o022 != 0 {
        anyhow::bail!(crate::UsageError(format!(
            "refusing {}: it is writable by group or others (mode {:o}); chmod go-w it",
            path.display(),
            md.mode() & 0o7777
        )));
    }
    Ok(())
}

/// The fix for a file refused for where it lies or whom it belongs to (a user's checkout run
/// with sudo): a copy root owns, in the place read without --config.
fn copy_hint(path: &std::path::Path) -> String {
    format!("copy it where only root writes, e.g. `sudo install -D -m 0644 {} {}`, and run without --config", path.display(), crate::DEFAULT_CONFIG)
}

#[cfg(test)]
mod oracle_tests;

/// Tests: the control loop panics after this many samples (the panic path's undo is tested by
/// really panicking).
pub const PANIC_ENV: &str = "JOULE_TEST_PANIC_AFTER_SAMPLES";

/// The journal size below which the running agent never compacts it (a few thousand records).
const JOURNAL_COMPACT_MIN_BYTES: u64 = 1 << 20;

#[allow(clippy::too_many_arguments)]
fn run_loop(
    cfg: &Config,
    web: Option<Arc<WebConfig>>,
    duration_s: &Option<f64>,
    ebpf: Ebpf,
    root: bool,
    journal: &Journal,
    events: &mut Events,
    stop: &AtomicBool,
    recovered: crate::metrics::Recovered,
) -> anyhow::Result<()> {
    let mut sense = sensing(cfg, ebpf, journal, events)?;
    tracing::info!("sources, in order: {}", sense.source_names().join(", "));
    say_sensor_choice(cfg, sense.sensor_choice(), events);
    let mut policies = policies(cfg)?;
    let facts = Facts::from_classes(&cfg.classes);
    let stage_map = sense.bpf_status().pin_dir.as_ref().map(|d| std::path::Path::new(d).join(joule_bpf::thermal::PIN_STAGE));
    let nap_counters = Arc::new(NapCounters::default());
    let t = &cfg.telemetry;
    if cfg.nap.enabled {
        let monitors = joule_telemetry::nap::monitors(&cfg.nap.monitors, &t.procfs_root, &t.sysfs_root, &nap_counters);
        sense.push_source(Box::new(joule_telemetry::nap::NapSource::new(monitors, nap_counters.clone())));
    }
    // The loop rests when nothing is in motion (and sleeps a whole napping period while
    // napped); a change of the in-kernel stage (a thermal tracepoint, or a fed reading), a
    // process event and SIGINT/SIGTERM end that sleep at once, so nothing waits for a rest to
    // run out.
    let mut wake = wake::LoopWake::new().context("while creating the loop's wake socket")?;
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        wake.on_signal(sig).context("while installing signal handlers")?;
    }
    let stage_wake = match sense.take_stage_waker() {
        Some(w) => Some(StageWake::start(w, nap_counters.clone(), wake.poker()?)?),
        None => None,
    };
    let ctl = acting::class_controller(cfg, root)?;
    let places = ctl.as_ref().map(|c| c.places()).unwrap_or_default();
    let units = acting::unit_classes(cfg, root)?;
    let inputs = acting::Inputs { root, ctl, units, places: places.clone(), stage_map, bpf: sense.bpf_status().enabled, nap_counters: nap_counters.clone() };
    let mut actuators = Actuators::new(acting::actuators(cfg, inputs)?);
    let fx = RealEffects;
    let mut emit = |event: &str, fields: serde_json::Value| events.emit(event, fields);
    let mut cx = ActCx { journal, fx: &fx, events: &mut emit };
    actuators.init_all(&mut cx).map_err(|(name, e)| anyhow::anyhow!("starting the {name} actuator: {e}"))?;
    // Class membership, the one reading of which process is in which class and where each
    // class lives, from after the classes were applied: the moves of their start are not
    // events to read.
    if let Some(m) = crate::sense::membership::source(cfg, places, sense.bpf_status().enabled)? {
        sense.push_source(m.source);
        wake.watch_ring(m.ready);
    }

    let shared: Shared = Arc::new(RwLock::new(Published::default()));
    let loopback = cfg.agent.metrics_addr.parse::<std::net::SocketAddr>().is_ok_and(|a| a.ip().is_loopback());
    let procs = exporter::Processes::policy(exporter::proc_hides_pids(&cfg.telemetry.procfs_root), loopback, cfg.agent.metrics_show_processes);
    let (tls, auth) = web.as_ref().map(|w| (w.tls.is_some(), w.needs_auth())).unwrap_or_default();
    let scrape_poker = wake.poker()?;
    let freshen = crate::freshen::Freshen::for_loop(Duration::from_millis(cfg.agent.period_ms), Duration::from_millis(cfg.agent.rest_period_ms()), move || {
        scrape_poker.poke()
    });
    let addr = exporter::serve(&cfg.agent.metrics_addr, shared.clone(), procs, exporter::Limits::default(), web, Some(freshen))?;
    let url = format!("{}://{addr}/metrics", if tls { "https" } else { "http" });
    tracing::info!("metrics on {url} (per-process data {procs:?}, basic auth {})", if auth { "on" } else { "off" });
    if !(loopback || (tls && auth)) {
        tracing::warn!(
            "the metrics endpoint listens on {addr}, beyond loopback, without {}: anyone who reaches it {} (agent.metrics_web_config)",
            if tls {
                "authentication"
            } else if auth {
                "TLS"
            } else {
                "TLS or authentication"
            },
            if auth { "reads the password off the wire" } else { "reads the node's state" }
        );
    }
    (cx.events)("listening", serde_json::json!({ "metrics": url, "tls": tls, "basic_auth": auth }));
    let choice = sense.sensor_choice();
    let budget = socket::Budget {
        thresholds_celsius: choice.thresholds_celsius.clone(),
        thresholds_from: choice.thresholds_from.clone(),
        sensors: choice.used().map(String::from).collect(),
        power_thresholds_watts: cfg.thermal.power_thresholds_watts.clone(),
        period_ms: cfg.agent.period_ms,
        rest_period_ms: cfg.agent.rest_period_ms(),
        pid: std::process::id(),
        started_unix_ms: *STARTED_UNIX_MS.get_or_init(joule_core::clock::now_ms),
        metrics_url: url.clone(),
        classes: cfg.classes.clone(),
    };
    let _status_socket = socket::StatusSocket::open(journal.dir(), shared.clone(), budget)
        .map_err(|e| tracing::warn!("no status socket in {} (joule status will not find this agent): {e}", journal.dir().display()))
        .ok();

    let period = Duration::from_millis(cfg.agent.period_ms);
    let rest = Duration::from_millis(cfg.agent.rest_period_ms());
    let first_threshold = sense.sensor_choice().thresholds_celsius.iter().copied().reduce(f64::min);
    let mut last_plan = Plan::default();
    let status_every = Duration::from_millis(cfg.agent.status_interval_ms(std::env::var_os("INVOCATION_ID").is_some()));
    let deadline = duration_s.map(|s| Instant::now() + Duration::from_secs_f64(s));
    let mut stats = AgentStats {
        limits: Some(crate::metrics::Limits {
            stage_thresholds_celsius: choice.thresholds_celsius.clone(),
            thresholds_kind: choice.thresholds_kind.to_string(),
            limit_celsius: Some(choice.limit_celsius),
            limit_from: choice.limit_from,
            power_thresholds_watts: cfg.thermal.power_thresholds_watts.clone(),
        }),
        recovered: Some(recovered),
        ..AgentStats::default()
    };
    let mut last_status = Instant::now() - status_every;
    let mut last_stage = None;
    let mut last_actions: Option<ThermalActions> = None;
    let mut last_conflicts: Vec<Conflict> = Vec::new();
    let mut compacted_bytes = journal.size_bytes();
    let panic_after: Option<u64> = std::env::var(PANIC_ENV).ok().and_then(|v| v.parse().ok());
    while !stop.load(Ordering::Relaxed) && deadline.is_none_or(|d| Instant::now() < d) {
        let t0 = Instant::now();
        let snap = sense.sample();
        let plan = control::decide(&mut policies, &facts, &snap);
        actuators.reconcile_all(&plan, &mut cx);
        let motion = motion(cfg, &snap, &plan, &last_plan, first_threshold);
        let (sleep, why) = pace::next_sleep(&motion, period, rest);
        stats.pace = Pace { period_ms: sleep.as_millis() as u64, why };

        for c in plan.conflicts.iter().filter(|c| !last_conflicts.contains(c)) {
            tracing::warn!("{}: {} won over {}: {}", c.knob, c.won, c.lost, c.why);
            (cx.events)("conflict", serde_json::to_value(c).unwrap_or_default());
            stats.conflicts_total += 1;
        }
        last_conflicts.clone_from(&plan.conflicts);

        if last_stage != Some(snap.stage.value) {
            let st = &snap.stage;
            (cx.events)(
                "stage",
                serde_json::json!({ "stage": st.value, "temp_celsius": st.temp_celsius, "temp_source": st.temp_source, "computed_by": st.computed_by, "driven_by": st.driven_by, "power": st.power }),
            );
            stats.stage_transitions_total += u64::from(last_stage.is_some());
            stats.stage_since_unix_ms = snap.taken_at_ms;
            last_stage = Some(st.value);
        }
        let actions = ThermalActions::from_plan(&plan);
        if actions != last_actions {
            if let Some(a) = &actions {
                let st = &snap.stage;
                let mut fields = serde_json::to_value(a).unwrap_or_default();
                fields["driven_by"] = st.driven_by.as_str().into();
                fields["power"] = serde_json::to_value(st.power).unwrap_or_default();
                (cx.events)("thermal_actions", fields);
            }
            last_actions = actions;
        }
        stats.samples_total += 1;
        if panic_after.is_some_and(|n| stats.samples_total >= n) {
            panic!("{PANIC_ENV} reached: a test's panic in the control loop");
        }
        stats.cpu_seconds_total = status::cpu_seconds_self();
        let took = t0.elapsed();
        stats.last_loop_seconds = took.as_secs_f64();
        stats.max_loop_seconds = stats.max_loop_seconds.max(stats.last_loop_seconds);
        if took > period {
            stats.loop_overruns_total += 1;
            // One event per overrun would itself cost under a long stall: the first, then
            // every hundredth.
            if stats.loop_overruns_total % 100 == 1 {
                tracing::warn!("control loop iteration took {} ms, over its {} ms period", took.as_millis(), period.as_millis());
                (cx.events)(
                    "overrun",
                    serde_json::json!({ "loop_ms": took.as_secs_f64() * 1e3, "period_ms": cfg.agent.period_ms, "overruns_total": stats.loop_overruns_total }),
                );
            }
        }
        if !status_every.is_zero() && last_status.elapsed() >= status_every {
            eprintln!("{}", status::status_line(&snap, last_actions.as_ref(), &addr));
            last_status = Instant::now();
        }
        last_plan = plan.clone();
        {
            let mut p = shared.write().unwrap_or_else(|e| e.into_inner());
            let generation = p.generation + 1;
            *p = Published {
                snapshot: snap,
                plan,
                actuators: actuators.status().to_vec(),
                agent: AgentStats { published_at: Some(Instant::now()), ..stats.clone() },
                published_at: Some(Instant::now()),
                generation,
            };
        }

        // Compaction follows the churn: only once the journal has doubled since the last one
        // (a machine of steady processes never pays for a pass over its members' records).
        let size = journal.size_bytes();
        if size >= JOURNAL_COMPACT_MIN_BYTES && size >= 2 * compacted_bytes {
            match journal.compact(&RealEffects) {
                Ok(n) => {
                    compacted_bytes = journal.size_bytes();
                    tracing::debug!("journal compacted: {n} record(s) of exited tasks or repeats dropped, {size} → {compacted_bytes} bytes");
                    (cx.events)("journal_compacted", serde_json::json!({ "dropped": n, "bytes_before": size, "bytes_after": compacted_bytes }));
                }
                Err(e) => {
                    tracing::warn!("could not compact the journal: {e}");
                    compacted_bytes = journal.size_bytes();
                }
            }
        }

        let now = Instant::now();
        if nap_counters.napping() {
            // Napping: the loop's own wake-ups count too, so it wakes once per napping period
            // and not more. A packet on a watched port wakes the nap through eBPF and ends this
            // sleep with it; then the thawed service gets one period to answer before the loop
            // samples (and competes for a CPU) again.
            if nap_counters.sleep_napping(Duration::from_millis(cfg.nap.napping_period_ms)) {
                std::thread::sleep(period);
            }
        } else if let Some(left) = (t0 + sleep).min(deadline.unwrap_or(t0 + sleep)).checked_duration_since(now) {
            // An event ends the sleep, but the next period never starts sooner than one full
            // period after this one: acted on within a period, at most one period's rate.
            if let Some(e) = wake.sleep(left) {
                let at = pace::wake_after(sleep, Some(now.duration_since(t0) + e), period);
                stats.rests_ended_total += u64::from(why == pace::Why::Rest);
                if let Some(more) = (t0 + at).checked_duration_since(Instant::now()) {
                    std::thread::sleep(more);
                }
            }
        } // else overran: the next period starts now, no burst to catch up
    }
    for (name, e) in actuators.shutdown_all(&mut cx) {
        tracing::warn!("stopping the {name} actuator: {e} (the journal replay that follows retries)");
    }
    drop(stage_wake);
    drop(sense); // detaches BPF programs and removes the pins
    Ok(())
}

/// What is in motion after this period's plan: the inputs of the loop's pace.
fn motion(cfg: &Config, snap: &joule_core::Snapshot, plan: &Plan, last: &Plan, first_threshold: Option<f64>) -> Motion {
    let st = &snap.stage;
    let m = &snap.membership;
    let temp_known = st.computed_by != joule_core::snapshot::StageEngine::None;
    let thermal = temp_known && first_threshold.is_some();
    Motion {
        stage: st.value,
        busy: thermal && snap.cpu.total_utilization >= pace::BUSY_UTILIZATION,
        temp_celsius: temp_known.then_some(st.temp_celsius),
        first_threshold_celsius: first_threshold,
        power_budget: !cfg.thermal.power_thresholds_watts.is_empty(),
        // A new reading (a source without eBPF repeats one between its walks) in which a
        // process joined, left or moved, or a class's size changed.
        class_change: m.generation != last.members.generation && (!m.changed.is_empty() || m.sizes != last.members.sizes),
        resync_pending: snap.process_events.as_ref().is_some_and(|p| p.resync_pending),
        plan_change: pace::plan_moved(last, plan),
        nap_due_in: plan.decisions.iter().find_map(|d| match d.want {
            Want::Nap { nap: false, idle_for_ms } => Some(Duration::from_millis(cfg.nap.idle_ms.saturating_sub(idle_for_ms))),
            _ => None,
        }),
        following_threads: plan.decisions.iter().any(|d| matches!(d.want, Want::Affinity { .. } | Want::Elevate { .. })),
    }
}

/// Says once, at start, which sensors the stage follows and where its thresholds come from, or
/// that nothing will act for heat on this machine (no CPU sensor, no `act_on_model`).
fn say_sensor_choice(cfg: &Config, choice: &joule_core::thermal_sensors::SensorChoice, events: &mut Events) {
    let used: Vec<&str> = choice.used().collect();
    let ignored: Vec<String> = choice.sensors.iter().filter(|s| !s.used).map(|s| format!("{} ({})", s.name, s.kind)).collect();
    let ignored = if ignored.is_empty() { String::new() } else { format!("; ignored: {}", ignored.join(", ")) };
    if !used.is_empty() {
        tracing::info!("thermal stage follows {} (thresholds {:?} °C from {}){ignored}", used.join(", "), choice.thresholds_celsius, choice.thresholds_from);
    } else if cfg.thermal.act_on_model {
        tracing::warn!(
            "no CPU temperature sensor: the thermal stage follows the labelled model (act_on_model = true), thresholds {:?} °C{ignored}",
            choice.thresholds_celsius
        );
    } else {
        tracing::info!(
            "no CPU temperature sensor{ignored}: no thermal action on this machine (name a sensor in [thermal] zones, or set act_on_model = true to act on the labelled model)"
        );
    }
    events.emit("thermal_sensors", serde_json::json!({ "sensors": choice.sensors, "thresholds_celsius": choice.thresholds_celsius, "thresholds_from": choice.thresholds_from, "act_on_model": cfg.thermal.act_on_model }));
}

/// The thread that ends the loop's sleep (a rest, or a whole napping period) when the
/// in-kernel stage changes; stopped and joined on drop (before the stage's programs are).
struct StageWake {
    stop: joule_bpf::RingStop,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl StageWake {
    fn start(waker: joule_bpf::StageWaker, counters: Arc<NapCounters>, poker: wake::Poker) -> anyhow::Result<StageWake> {
        let stop = joule_bpf::RingStop::new()?;
        let st = stop.clone();
        let thread = std::thread::Builder::new().name("joule-stage-wake".into()).spawn(move || {
            let r = waker.run(&st, |e| {
                tracing::debug!("in-kernel stage {} -> {} ({} m°C, zone {})", e.old_stage, e.stage, e.temp_mc, e.zone);
                counters.poke();
                poker.poke();
            });
            if let Err(e) = r {
                tracing::error!("the thermal stage's change events stopped: {e}");
            }
        })?;
        Ok(StageWake { stop, thread: Some(thread) })
    }
}

impl Drop for StageWake {
    fn drop(&mut self) {
        self.stop.stop();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
