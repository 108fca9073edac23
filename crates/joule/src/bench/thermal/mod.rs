//! `joule bench thermal`: default scheduling vs joule acting on the thermal stage, in one run.
//! Both modes run the same loads for the same time — fio random 4 KiB reads and writes on a
//! file in a temp dir, stress-ng CPU workers, and a latency probe (a process that sleeps 2 ms
//! to absolute deadlines and records how late it woke). "default" runs them alone; "joule"
//! runs them under `joule agent` with a generated config whose best-effort class holds
//! stress-ng and whose labelled class holds the probe (both matched by pid: every load starts
//! stopped, so its pid is in the config before it runs, and stress-ng's workers follow their
//! parent). The temperature is the hottest thermal sensor, or, without one (this machine),
//! joule's RC model on measured utilisation, labelled `model` everywhere.

mod agent;
pub mod probe;
mod summary;
mod trace;
mod workload;

use crate::UsageError;
use agent::{Agent, ModelKnobs, Pids};
use anyhow::Context;
use joule_core::control::ThermalPath;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use trace::{AgentReading, Point, Tracer};
use workload::{FioJob, Stopped};

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum PathArg {
    /// CFS bandwidth of the best-effort class (works on every kernel).
    Cgroup,
    /// joule's sched_ext scheduler (kernels with sched_ext; the agent falls back to the cgroup
    /// path if the kernel ejects it).
    Scx,
    /// scx where the kernel has sched_ext (<sysfs>/kernel/sched_ext exists), else cgroup.
    Auto,
}

#[derive(clap::Args, Debug)]
pub struct ThermalArgs {
    /// Seconds per mode (the whole run takes a little over twice this). The model's time
    /// constant is 4.8 s, so 60–90 s shows the settled behaviour; 10 s only shows it react.
    #[arg(long, default_value_t = 75.0)]
    pub duration_s: f64,
    /// Write the results, ratios, time series and trade-off curve as JSON here.
    #[arg(long, value_name = "PATH")]
    pub json: Option<PathBuf>,
    /// Write an SVG plot (temperature, fio and stress-ng throughput over time, both modes).
    #[arg(long, value_name = "PATH")]
    pub plot: Option<PathBuf>,
    /// Which mechanism the agent acts through in the joule mode.
    #[arg(long, value_enum, default_value = "auto")]
    pub path: PathArg,
    /// The temperature to stay under. Stages start 6, 3.5 and 1.5 °C below it. With the
    /// bench's model (25 °C ambient, 1.2 °C/W, 10 W idle + 8 W per busy CPU) the idle machine
    /// sits at 37 °C and a fully busy 2-CPU one at 56.2 °C: a limit between them is one the
    /// default run exceeds.
    #[arg(long, default_value_t = 50.0)]
    pub limit_celsius: f64,
    /// Idle seconds before each mode's loads start, while the agent matches its classes. Both
    /// models (the agent's and the bench's) start at the steady state of the machine's
    /// utilisation since boot and relax toward the idle machine's; 10 s is two time constants.
    #[arg(long, default_value_t = 10.0)]
    pub warmup_s: f64,
    /// stress-ng CPU workers; 0 = one per CPU (more add run-queue wait, not heat).
    #[arg(long, default_value_t = 0)]
    pub workers: usize,
}

/// The bench's model: a small capacitance so the time constant (R·C = 4.8 s) lets a mode of a
/// minute settle; the power model's placeholder coefficients (see docs/config.md).
fn knobs(limit_celsius: f64) -> ModelKnobs {
    ModelKnobs {
        limit_celsius,
        ambient_celsius: 25.0,
        resistance_celsius_per_watt: 1.2,
        capacitance_joules_per_celsius: 4.0,
        idle_watts: 10.0,
        cpu_dynamic_watts: 8.0,
    }
}

const SAMPLE: Duration = Duration::from_millis(200);
const PROBE_PERIOD_US: u64 = 2000;
const FIO_SIZE_MIB: u64 = 128;

fn validate(a: &ThermalArgs) -> Result<(), UsageError> {
    let k = knobs(a.limit_celsius);
    let idle_c = k.ambient_celsius + k.idle_watts * k.resistance_celsius_per_watt;
    super::check_bounds([
        (a.duration_s.is_finite() && (5.0..=900.0).contains(&a.duration_s), "--duration-s must be 5 to 900".to_string()),
        (
            a.limit_celsius.is_finite() && a.limit_celsius >= idle_c + 7.0 && a.limit_celsius <= 150.0,
            format!("--limit-celsius must be {:.1} to 150 (its first stage starts 6 °C under it, above the idle machine's {idle_c:.1} °C)", idle_c + 7.0),
        ),
        (a.warmup_s.is_finite() && (0.0..=120.0).contains(&a.warmup_s), "--warmup-s must be 0 to 120".to_string()),
        (a.workers <= 256, "--workers must be 0 to 256".to_string()),
    ])
}

fn resolve_path(p: PathArg, sysfs: &Path) -> ThermalPath {
    match p {
        PathArg::Cgroup => ThermalPath::Cgroup,
        PathArg::Scx => ThermalPath::Scx,
        PathArg::Auto if sysfs.join("kernel/sched_ext").exists() => ThermalPath::Scx,
        PathArg::Auto => ThermalPath::Cgroup,
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Default,
    Joule,
}

impl Mode {
    pub fn name(self) -> &'static str {
        match self {
            Mode::Default => "default",
            Mode::Joule => "joule",
        }
    }
}

/// What one mode measured.
pub struct ModeResult {
    pub mode: Mode,
    pub points: Vec<Point>,
    pub fio: workload::FioResult,
    pub fio_series: Vec<(f64, f64)>,
    pub stress_bogo_ops: u64,
    pub wakeups: Vec<(f64, f64)>,
    /// stress-ng's cpu cgroup as seen mid-run (where the agent put it).
    pub stress_cgroup: Option<String>,
    /// The scheduler the agent saw mid-run (its snapshot's `sched_ext`: "state (ops)"), so a
    /// scx-path run shows whether joule's scheduler really ran; None in the default mode.
    pub sched_ext: Option<String>,
    pub agent_errors: Vec<String>,
}

struct Ctx<'a> {
    dir: &'a Path,
    knobs: ModelKnobs,
    path: ThermalPath,
    duration_s: f64,
    warmup_s: f64,
    workers: usize,
    fio: FioJob,
    interrupted: &'a AtomicBool,
}

/// Sleeps `d` unless interrupted first.
fn nap(d: Duration, interrupted: &AtomicBool) -> anyhow::Result<()> {
    let end = Instant::now() + d;
    while Instant::now() < end {
        anyhow::ensure!(!interrupted.load(Ordering::Relaxed), "interrupted");
        std::thread::sleep(Duration::from_millis(20).min(end.saturating_duration_since(Instant::now())));
    }
    Ok(())
}

fn cpu_cgroup(pid: i32) -> Option<String> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
    let cg = joule_core::procfs::TaskCgroups::parse(&text);
    cg.path(Some(joule_core::cgroupfs::Controller::Cpu)).or_else(|| cg.path(None)).map(String::from)
}

/// The agent's stage and planned cap for the trace, and the scheduler its snapshot saw
/// ("state (ops)"), from one read of each endpoint.
fn agent_reading(agent: &Agent) -> (AgentReading, Option<String>) {
    let snap = agent.get("/snapshot.json").ok();
    let stage = snap.as_ref().filter(|s| s["stage"]["computed_by"] != "none");
    let reading = AgentReading {
        stage: stage.and_then(|s| s["stage"]["value"].as_u64()).map(|v| v as u32),
        temp_celsius: stage.and_then(|s| s["stage"]["temp_celsius"].as_f64()),
        cap_pct: agent.get("/plan.json").ok().as_ref().and_then(agent::planned_cap_pct),
    };
    let sx = snap.map(|s| format!("{} ({})", s["sched_ext"]["state"].as_str().unwrap_or("?"), s["sched_ext"]["ops"].as_str().unwrap_or("")));
    (reading, sx)
}

fn run_mode(mode: Mode, cx: &Ctx) -> anyhow::Result<ModeResult> {
    let dir = cx.dir.join(mode.name());
    std::fs::create_dir_all(&dir)?;
    let secs = cx.duration_s.ceil() as u64;
    let mut probe_cmd = Command::new(std::env::current_exe()?);
    probe_cmd.args(["bench", "thermal-probe", "--period-us", &PROBE_PERIOD_US.to_string(), "--duration-s", &cx.duration_s.to_string()]);
    let mut probe = Stopped::spawn("latency probe", &probe_cmd, true, &dir.join("probe.err"))?;
    let mut probe_out = probe.take_stdout().context("the probe has no stdout")?;
    // Read as it comes: the probe writes everything at the end, more than a pipe holds.
    let probe_reader = std::thread::spawn(move || {
        let mut s = String::new();
        std::io::Read::read_to_string(&mut probe_out, &mut s).map(|_| s)
    });
    let (yaml, fio_json, fio_log) = (dir.join("stress-ng.yaml"), dir.join("fio.json"), dir.join("fio"));
    let mut stress = Stopped::spawn("stress-ng", &workload::stress_command(cx.workers, secs, &yaml), false, &dir.join("stress-ng.err"))?;
    let mut fio = Stopped::spawn("fio", &cx.fio.command(secs, &fio_json, &fio_log), false, &dir.join("fio.err"))?;

    let pids = Pids { stress: stress.pid(), probe: probe.pid() };
    let joule = mode == Mode::Joule;
    let (cfg_path, cfg) = agent::write_config(&dir, &cx.knobs, cx.path, true, joule.then_some(&pids))?;
    let mut agent = if joule { Some(Agent::start(&cfg_path, &cfg, &dir.join("agent.log"))?) } else { None };
    let mut tracer = Tracer::new(&cfg);
    nap(Duration::from_secs_f64(cx.warmup_s), cx.interrupted)?;

    tracer.zero_clock();
    for l in [&probe, &stress, &fio] {
        l.go()?;
    }
    let start = Instant::now();
    let mut points = Vec::new();
    let mut stress_cgroup = None;
    let mut sched_ext = None;
    let mut next = start;
    while start.elapsed().as_secs_f64() < cx.duration_s {
        next += SAMPLE;
        nap(next.saturating_duration_since(Instant::now()), cx.interrupted)?;
        let (reading, sx) = match agent.as_mut() {
            Some(a) => {
                anyhow::ensure!(
                    a.alive(),
                    "the agent exited during the run:\n{}",
                    std::fs::read_to_string(dir.join("agent.log")).unwrap_or_default().trim_end()
                );
                agent_reading(a)
            }
            None => (AgentReading::default(), None),
        };
        points.extend(tracer.sample(workload::children_cpu_s(stress.pid()), reading));
        if stress_cgroup.is_none() && start.elapsed() > Duration::from_secs_f64(cx.duration_s / 2.0) {
            stress_cgroup = cpu_cgroup(stress.pid());
            sched_ext = sx;
        }
    }
    // Every load ends on its own time bound; give them a little slack, then read them.
    for l in [&mut probe, &mut stress, &mut fio] {
        match l.wait(Duration::from_secs(20)) {
            None => anyhow::bail!("{} did not end 20 s after its time", l.name),
            Some(st) if !st.success() => anyhow::bail!("{} failed ({st}):\n{}", l.name, l.stderr_tail()),
            Some(_) => {}
        }
    }
    let agent_errors = match agent.as_ref() {
        Some(a) => a
            .get("/plan.json")
            .ok()
            .and_then(|p| p["actuators"].as_array().cloned())
            .unwrap_or_default()
            .iter()
            .filter_map(|s| s["last_error"].as_str().map(String::from))
            .collect(),
        None => Vec::new(),
    };
    drop(agent.take()); // the agent undoes its changes before the next mode
    let probe_text = probe_reader.join().map_err(|_| anyhow::anyhow!("the probe reader panicked"))??;
    let read = |p: &Path| std::fs::read_to_string(p).with_context(|| format!("while reading {}", p.display()));
    Ok(ModeResult {
        mode,
        points,
        fio: workload::parse_fio_json(&read(&fio_json)?)?,
        fio_series: workload::parse_fio_bw_log(&read(&dir.join("fio_bw.1.log"))?),
        stress_bogo_ops: workload::parse_stress_yaml(&read(&yaml)?)?,
        wakeups: probe::parse(&probe_text),
        stress_cgroup,
        sched_ext,
        agent_errors,
    })
}

pub fn run(a: &ThermalArgs) -> anyhow::Result<()> {
    validate(a)?;
    anyhow::ensure!(joule_core::testing::is_root(), "bench thermal needs root (the agent's cgroups and eBPF)");
    let interrupted = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, interrupted.clone()).context("while installing signal handlers")?;
    }
    let path = resolve_path(a.path, Path::new("/sys"));
    let tmp = tempfile::Builder::new().prefix("joule-bench-thermal-").tempdir().context("while creating a temp dir")?;
    let direct = workload::direct_io_works(tmp.path());
    let fio = FioJob { file: tmp.path().join("fio.dat"), size_mib: FIO_SIZE_MIB, direct };
    fio.lay_out()?;
    let ncpu = std::thread::available_parallelism().map_or(1, |n| n.get());
    let cx = Ctx {
        dir: tmp.path(),
        knobs: knobs(a.limit_celsius),
        path,
        duration_s: a.duration_s,
        warmup_s: a.warmup_s,
        workers: if a.workers == 0 { ncpu } else { a.workers },
        fio,
        interrupted: &interrupted,
    };
    let loadavg_before = std::fs::read_to_string("/proc/loadavg").unwrap_or_default().trim().to_string();
    let mut runs = Vec::new();
    for mode in [Mode::Default, Mode::Joule] {
        eprintln!("thermal: {} mode, {:.0} s ...", mode.name(), a.duration_s);
        runs.push(run_mode(mode, &cx)?);
        nap(Duration::from_secs(2), &interrupted)?;
    }
    let s = summary::Summary {
        path,
        knobs: cx.knobs,
        thresholds_celsius: cx.knobs.thresholds_celsius(),
        duration_s: a.duration_s,
        warmup_s: a.warmup_s,
        workers: cx.workers,
        direct_io: direct,
        ncpu,
        runs,
        command: std::env::args().collect::<Vec<_>>().join(" "),
        loadavg_before,
        loadavg_after: std::fs::read_to_string("/proc/loadavg").unwrap_or_default().trim().to_string(),
    };
    s.print();
    if let Some(p) = &a.json {
        super::report::write_json(p, &s.json())?;
    }
    if let Some(p) = &a.plot {
        s.plot(p)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(extra: &[&str]) -> ThermalArgs {
        crate::test_args::parse_args("thermal", extra)
    }

    #[test]
    fn defaults_are_valid_and_bounds_name_each_flag() {
        assert!(validate(&args(&[])).is_ok());
        let e = validate(&args(&["--duration-s", "1", "--limit-celsius", "40", "--workers", "999", "--warmup-s=-1"])).unwrap_err();
        for flag in ["--duration-s", "--limit-celsius", "--workers", "--warmup-s"] {
            assert!(e.0.contains(flag), "{flag} missing in: {e}");
        }
        assert!(validate(&args(&["--duration-s", "NaN"])).is_err());
    }

    #[test]
    fn auto_picks_scx_only_where_the_kernel_has_sched_ext() {
        let sys = tempfile::tempdir().unwrap();
        assert_eq!(resolve_path(PathArg::Auto, sys.path()), ThermalPath::Cgroup);
        assert_eq!(resolve_path(PathArg::Scx, sys.path()), ThermalPath::Scx);
        std::fs::create_dir_all(sys.path().join("kernel/sched_ext")).unwrap();
        assert_eq!(resolve_path(PathArg::Auto, sys.path()), ThermalPath::Scx);
        assert_eq!(resolve_path(PathArg::Cgroup, sys.path()), ThermalPath::Cgroup);
    }
}
