//! `joule-bench thermal`: joule against what a user would pick instead, scored by a thermal
//! plant that is not joule's. Every mode runs the same loads for the same time — fio random
//! 4 KiB reads and writes, stress-ng CPU workers (the best-effort work) and a latency probe
//! (the labelled task: sleeps 2 ms to absolute deadlines and records how late it woke) —
//! against the same plant (plant.rs: the machine's real CPU busy time through a named board's
//! two-node thermal model, reset to its idle state when the loads start):
//!
//! - `none`: default scheduling;
//! - `uniform`: every load throttled alike by a step_wise governor (baseline.rs);
//! - `batch-cap`: only stress-ng capped, Thunderbolt-like (baseline.rs);
//! - `joule`: the agent, reading the plant's zone as its sensor (`telemetry.thermal_root`),
//!   with stress-ng in a best-effort class and the probe in a labelled one.
//!
//! Modes are interleaved (each run rotates their order) and repeated `--runs` times; every
//! run is kept and each score is reported as the median and range over runs (score.rs).
//!
//! With `--firmware` the board's own firmware throttle acts too (firmware.rs): past its soft
//! limit every task slows, whatever the mode; with `--joule-stages built-in` the agent places
//! its own stages for the board, as it would on one (the plant's tree carries the board's
//! device tree), instead of the bench's.

mod agent;
mod baseline;
mod firmware;
mod plant;
pub mod probe;
mod score;
mod workload;

use crate::UsageError;
use agent::{Agent, Pids};
use anyhow::Context;
use joule_core::control::ThermalPath;
use plant::Board;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
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

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    /// Default scheduling, nothing capped.
    None,
    /// Every load capped alike by a step_wise governor on the plant's temperature.
    Uniform,
    /// Only the best-effort load capped (Thunderbolt-like).
    BatchCap,
    /// joule's agent.
    Joule,
}

impl Mode {
    pub fn name(self) -> &'static str {
        match self {
            Mode::None => "none",
            Mode::Uniform => "uniform",
            Mode::BatchCap => "batch-cap",
            Mode::Joule => "joule",
        }
    }
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum StagesArg {
    /// The bench's stages: 3, 1 and 0.4 °C under --limit-celsius (agent.rs says why).
    Bench,
    /// joule's own, as the agent places them on the board: the plant's tree carries the
    /// board's device tree (rpi5: the firmware's 80 °C), no thresholds in the config.
    BuiltIn,
}

impl StagesArg {
    pub fn name(self) -> &'static str {
        match self {
            StagesArg::Bench => "bench",
            StagesArg::BuiltIn => "built-in",
        }
    }
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum BoardArg {
    /// Raspberry Pi 5, bare board (the seed's machine).
    Rpi5,
    /// One 65 W, 4-core x86 socket under a tower cooler.
    X86Small,
}

#[derive(clap::Args, Debug)]
pub struct ThermalArgs {
    /// Seconds per mode and run. The plant's heatsink time constant is ~15 s: 45 s shows it
    /// settle; 10 s only shows the reaction.
    #[arg(long, default_value_t = 45.0)]
    pub duration_s: f64,
    /// Runs; each runs every mode once, in a rotated order. Scores are medians over runs.
    #[arg(long, default_value_t = 5)]
    pub runs: usize,
    /// Modes to run (comma-separated).
    #[arg(long, value_enum, value_delimiter = ',', default_value = "none,uniform,batch-cap,joule")]
    pub modes: Vec<Mode>,
    /// The board the plant models.
    #[arg(long, value_enum, default_value = "rpi5")]
    pub board: BoardArg,
    /// The temperature to stay under. Default: the board's (rpi5 80 °C, where its firmware
    /// starts throttling; x86-small 65 °C).
    #[arg(long)]
    pub limit_celsius: Option<f64>,
    /// Write every run, the medians and ranges, and the goals as JSON here.
    #[arg(long, value_name = "PATH")]
    pub json: Option<PathBuf>,
    /// Write an SVG plot of the plant's temperature per mode (the last run).
    #[arg(long, value_name = "PATH")]
    pub plot: Option<PathBuf>,
    /// Which mechanism the agent acts through in the joule mode.
    #[arg(long, value_enum, default_value = "auto")]
    pub path: PathArg,
    /// Seconds between starting a mode's loads (stopped) and letting them run, while the
    /// agent matches its classes. The plant is reset when they start.
    #[arg(long, default_value_t = 5.0)]
    pub warmup_s: f64,
    /// stress-ng CPU workers; 0 = one per CPU.
    #[arg(long, default_value_t = 0)]
    pub workers: usize,
    /// Where joule reads the plant's temperature: `plant`, a thermal zone in a tree of the
    /// bench's own; `acpi`, the VM tier's ACPI zone (scripts/vm/thermal.asl; whole °C, polled
    /// by the kernel each second, so its thermal tracepoint fires and the in-kernel stage
    /// follows). Scores are the plant's own value either way.
    #[arg(long, value_enum, default_value = "plant")]
    pub zone: ZoneArg,
    /// Model the board's own firmware throttle on the machine (rpi5: every task slowed
    /// progressively from 80 °C, to 1.5 of 2.4 GHz at 85 °C), in every mode: the firmware is
    /// the last line, and what it costs the labelled task and fio is scored. Needs root: one
    /// SCHED_FIFO thread per CPU takes the lost share of each millisecond, a model that delays a
    /// wake-up more than a real clock cut would.
    #[arg(long)]
    pub firmware: bool,
    /// Whose stage thresholds the joule mode runs with: the bench's, or joule's own built-in
    /// ones for the board (what a user who configures nothing gets).
    #[arg(long, value_enum, default_value = "bench")]
    pub joule_stages: StagesArg,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum ZoneArg {
    Plant,
    Acpi,
}

fn board(b: BoardArg) -> Board {
    match b {
        BoardArg::Rpi5 => plant::PI5,
        BoardArg::X86Small => plant::X86_SMALL,
    }
}

const SAMPLE: Duration = Duration::from_millis(200);
const PROBE_PERIOD_US: u64 = 2000;
const FIO_SIZE_MIB: u64 = 128;

fn limit(a: &ThermalArgs) -> f64 {
    a.limit_celsius.unwrap_or(board(a.board).limit_celsius)
}

fn validate(a: &ThermalArgs) -> Result<(), UsageError> {
    let b = board(a.board);
    let idle = b.steady(0.0).map_or(b.ambient_celsius, |s| s.0);
    let l = limit(a);
    super::check_bounds([
        (a.duration_s.is_finite() && (5.0..=900.0).contains(&a.duration_s), "--duration-s must be 5 to 900".to_string()),
        (
            l.is_finite() && l >= idle + 7.0 && l <= 150.0,
            format!(
                "--limit-celsius must be {:.1} to 150 (joule's first stage starts 6 °C under it, above the idle {} plant's {idle:.1} °C)",
                idle + 7.0,
                b.name
            ),
        ),
        (a.warmup_s.is_finite() && (0.0..=120.0).contains(&a.warmup_s), "--warmup-s must be 0 to 120".to_string()),
        (a.workers <= 256, "--workers must be 0 to 256".to_string()),
        ((1..=50).contains(&a.runs), "--runs must be 1 to 50".to_string()),
        (!a.modes.is_empty(), "--modes must name at least one mode".to_string()),
        (!a.firmware || b.firmware.is_some(), format!("--firmware: the {} board has no firmware throttle (rpi5 has)", b.name)),
        (
            a.joule_stages == StagesArg::Bench || a.zone == ZoneArg::Plant,
            "--joule-stages built-in needs --zone plant (the board's device tree goes in the plant's tree)".to_string(),
        ),
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

/// One sample of a mode, besides the plant's own trace.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Sample {
    pub t_s: f64,
    /// The CFS cap on stress-ng's cgroup as the kernel has it, share of the machine (None: no
    /// cap in force).
    pub cap_share: Option<f64>,
    /// The agent's thermal stage (joule mode).
    pub stage: Option<u32>,
}

/// What one mode measured in one run.
pub struct ModeRun {
    pub mode: Mode,
    pub run: usize,
    pub plant: Vec<plant::Reading>,
    pub samples: Vec<Sample>,
    pub fio: workload::FioResult,
    pub stress: workload::StressResult,
    pub wakeups: Vec<(f64, f64)>,
    pub stress_cgroup: Option<String>,
    pub agent_errors: Vec<String>,
    /// The joule mode on the scx path: what the agent's events say of its scheduler.
    pub scx: Option<ScxSeen>,
}

/// How often the agent loaded its sched_ext scheduler, and how often the kernel ejected it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ScxSeen {
    pub loaded: u64,
    pub ejected: u64,
}

impl ScxSeen {
    /// From the agent's JSON-lines event log.
    pub fn from_events(text: &str) -> ScxSeen {
        let count = |event: &str| text.lines().filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok()).filter(|v| v["event"] == event).count() as u64;
        ScxSeen { loaded: count("scx_loaded"), ejected: count("scx_ejected") }
    }
}

struct Ctx<'a> {
    dir: &'a Path,
    limit_celsius: f64,
    path: ThermalPath,
    duration_s: f64,
    warmup_s: f64,
    workers: usize,
    ncpu: usize,
    fio: FioJob,
    plant: &'a plant::Running,
    /// Where the agent reads the plant's zone (None: the machine's own /sys, the ACPI zone).
    thermal_root: Option<&'a Path>,
    stages: agent::Thresholds<'a>,
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

/// The CFS cap in force on `pid`'s cgroup, as a share of the machine: what the kernel holds,
/// whoever wrote it (the bench's controllers or the agent).
fn cap_in_force(pid: i32, ncpu: usize) -> Option<f64> {
    let cg = cpu_cgroup(pid)?;
    let v1 = Path::new("/sys/fs/cgroup/cpu").join(cg.trim_start_matches('/'));
    let (quota, period) = if v1.join("cpu.cfs_quota_us").exists() {
        let q: i64 = std::fs::read_to_string(v1.join("cpu.cfs_quota_us")).ok()?.trim().parse().ok()?;
        let p: f64 = std::fs::read_to_string(v1.join("cpu.cfs_period_us")).ok()?.trim().parse().ok()?;
        (q, p)
    } else {
        let text = std::fs::read_to_string(Path::new("/sys/fs/cgroup").join(cg.trim_start_matches('/')).join("cpu.max")).ok()?;
        let mut f = text.split_whitespace();
        (f.next()?.parse().unwrap_or(-1), f.next()?.parse().ok()?)
    };
    (quota > 0).then(|| quota as f64 / period / ncpu as f64)
}

fn run_mode(mode: Mode, run: usize, cx: &Ctx) -> anyhow::Result<ModeRun> {
    let dir = cx.dir.join(format!("run{run}-{}", mode.name()));
    std::fs::create_dir_all(&dir)?;
    let secs = cx.duration_s.ceil() as u64;
    let mut probe_cmd = Command::new(std::env::current_exe()?);
    probe_cmd.args(["thermal-probe", "--period-us", &PROBE_PERIOD_US.to_string(), "--duration-s", &cx.duration_s.to_string()]);
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

    let cgroup_root = Path::new("/sys/fs/cgroup");
    let mut governor = None;
    let mut batch = None;
    let group = match mode {
        Mode::Uniform => {
            let g = baseline::Group::create(cgroup_root, "uniform", cx.ncpu)?;
            for pid in [probe.pid(), stress.pid(), fio.pid()] {
                g.add(pid)?;
            }
            governor = Some(baseline::StepWise::new(cx.limit_celsius - 1.5, 1.0, 10));
            Some(g)
        }
        Mode::BatchCap => {
            let g = baseline::Group::create(cgroup_root, "batch", cx.ncpu)?;
            g.add(stress.pid())?;
            batch = Some(baseline::BatchCap::for_limit(cx.limit_celsius));
            Some(g)
        }
        Mode::None | Mode::Joule => None,
    };
    let mut agent = if mode == Mode::Joule {
        let pids = Pids { stress: stress.pid(), probe: probe.pid() };
        let (cfg_path, cfg) = agent::write_config(&dir, cx.limit_celsius, cx.thermal_root, cx.path, true, Some(&pids), cx.stages)?;
        Some(Agent::start(&cfg_path, &cfg, &dir.join("agent.log"))?)
    } else {
        None
    };
    nap(Duration::from_secs_f64(cx.warmup_s), cx.interrupted)?;

    cx.plant.reset();
    for l in [&probe, &stress, &fio] {
        l.go()?;
    }
    let start = Instant::now();
    let mut samples = Vec::new();
    let mut stress_cgroup = None;
    let mut next = start;
    while start.elapsed().as_secs_f64() < cx.duration_s {
        next += SAMPLE;
        nap(next.saturating_duration_since(Instant::now()), cx.interrupted)?;
        let celsius = cx.plant.die_celsius();
        if let (Some(g), Some(gov)) = (&group, governor.as_mut()) {
            let state = gov.poll(celsius);
            g.cap((state > 0).then(|| gov.share()))?;
        }
        if let (Some(g), Some(b)) = (&group, batch.as_mut()) {
            g.cap(b.poll(celsius))?;
        }
        let stage = match agent.as_mut() {
            Some(a) => {
                anyhow::ensure!(
                    a.alive(),
                    "the agent exited during the run:\n{}",
                    std::fs::read_to_string(dir.join("agent.log")).unwrap_or_default().trim_end()
                );
                a.get("/snapshot.json").ok().and_then(|s| s["stage"]["value"].as_u64()).map(|v| v as u32)
            }
            None => None,
        };
        samples.push(Sample { t_s: start.elapsed().as_secs_f64(), cap_share: cap_in_force(stress.pid(), cx.ncpu), stage });
        if stress_cgroup.is_none() && start.elapsed() > Duration::from_secs_f64(cx.duration_s / 2.0) {
            stress_cgroup = cpu_cgroup(stress.pid());
        }
    }
    let plant_trace = cx.plant.trace();
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
    let scx = (mode == Mode::Joule && cx.path == ThermalPath::Scx)
        .then(|| ScxSeen::from_events(&std::fs::read_to_string(dir.join("events.jsonl")).unwrap_or_default()));
    drop(group);
    let probe_text = probe_reader.join().map_err(|_| anyhow::anyhow!("the probe reader panicked"))??;
    let read = |p: &Path| std::fs::read_to_string(p).with_context(|| format!("while reading {}", p.display()));
    Ok(ModeRun {
        mode,
        run,
        plant: plant_trace,
        samples,
        fio: workload::parse_fio_json(&read(&fio_json)?)?,
        stress: workload::parse_stress_yaml(&read(&yaml)?)?,
        wakeups: probe::parse(&probe_text),
        stress_cgroup,
        agent_errors,
        scx,
    })
}

/// The order of the modes in run `i`: rotated by `i`, so no mode always runs first or after
/// the same one.
fn order(modes: &[Mode], i: usize) -> Vec<Mode> {
    let mut m = modes.to_vec();
    if !m.is_empty() {
        let n = m.len();
        m.rotate_left(i % n);
    }
    m
}

pub fn run(a: &ThermalArgs) -> anyhow::Result<()> {
    validate(a)?;
    anyhow::ensure!(joule_core::testing::is_root(), "bench thermal needs root (cgroups for the caps, the agent's cgroups and eBPF)");
    let interrupted = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, interrupted.clone()).context("while installing signal handlers")?;
    }
    baseline::sweep_stale(Path::new("/sys/fs/cgroup"));
    let path = resolve_path(a.path, Path::new("/sys"));
    let tmp = tempfile::Builder::new().prefix("joule-bench-thermal-").tempdir().context("while creating a temp dir")?;
    let direct = workload::direct_io_works(tmp.path());
    let fio = FioJob { file: tmp.path().join("fio.dat"), size_mib: FIO_SIZE_MIB, direct };
    fio.lay_out()?;
    let ncpu = std::thread::available_parallelism().map_or(1, |n| n.get());
    let b = board(a.board);
    let zone = match a.zone {
        ZoneArg::Plant => plant::Zone::create(&tmp.path().join("plant-sysfs"), &b)?,
        ZoneArg::Acpi => plant::Zone::acpi(Path::new("/sys"))?,
    };
    let (thermal_root, zone_kind) = (zone.thermal_root().map(Path::to_path_buf), zone.kind());
    // The agent's config.txt is looked for in an empty dir of the bench's, never the host's.
    let boot_root = tmp.path().join("plant-boot");
    std::fs::create_dir_all(&boot_root)?;
    let stages = match a.joule_stages {
        StagesArg::Bench => agent::Thresholds::Bench,
        StagesArg::BuiltIn => {
            zone.write_device_tree(&b)?;
            agent::Thresholds::BuiltIn { boot_root: &boot_root, count: joule_core::config::ThermalConfig::default().stage_count() }
        }
    };
    let thresholds_celsius = match (stages, &thermal_root) {
        (agent::Thresholds::BuiltIn { boot_root, .. }, Some(root)) => {
            // What the agent will choose from the same tree.
            let th = joule_core::config::ThermalConfig { zones: vec!["thermal_zone0".into()], ..Default::default() };
            let fw = joule_core::board_limits::read(root, boot_root);
            joule_core::thermal_sensors::choose_on(&joule_telemetry::thermal::read_once(root), &th, fw.as_ref()).thresholds_celsius
        }
        _ => agent::stages(limit(a), thermal_root.as_deref()).0,
    };
    let running = plant::Running::start(b, zone, PathBuf::from("/proc/stat"), a.firmware)?;
    let cx = Ctx {
        dir: tmp.path(),
        limit_celsius: limit(a),
        path,
        duration_s: a.duration_s,
        warmup_s: a.warmup_s,
        workers: if a.workers == 0 { ncpu } else { a.workers },
        ncpu,
        fio,
        plant: &running,
        thermal_root: thermal_root.as_deref(),
        stages,
        interrupted: &interrupted,
    };
    let loadavg_before = std::fs::read_to_string("/proc/loadavg").unwrap_or_default().trim().to_string();
    let mut runs = Vec::new();
    for i in 0..a.runs {
        for mode in order(&a.modes, i) {
            eprintln!("thermal: run {}/{}, {} mode, {:.0} s ...", i + 1, a.runs, mode.name(), a.duration_s);
            runs.push(run_mode(mode, i, &cx)?);
            nap(Duration::from_secs(2), &interrupted)?;
        }
    }
    let s = score::Summary {
        path,
        board: b,
        limit_celsius: cx.limit_celsius,
        thresholds_celsius,
        firmware: a.firmware,
        joule_stages: a.joule_stages.name(),
        duration_s: a.duration_s,
        warmup_s: a.warmup_s,
        workers: cx.workers,
        direct_io: direct,
        ncpu,
        modes: a.modes.clone(),
        runs,
        command: std::env::args().collect::<Vec<_>>().join(" "),
        loadavg_before,
        loadavg_after: std::fs::read_to_string("/proc/loadavg").unwrap_or_default().trim().to_string(),
        zone: zone_kind,
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

    #[test]
    fn the_agents_events_count_scheduler_loads_and_ejections() {
        let log = "{\"event\":\"scx_loaded\",\"ts\":1}\n{\"event\":\"stage\"}\nnot json\n{\"event\":\"scx_ejected\"}\n{\"event\":\"scx_loaded\"}\n";
        assert_eq!(ScxSeen::from_events(log), ScxSeen { loaded: 2, ejected: 1 });
        assert_eq!(ScxSeen::from_events(""), ScxSeen { loaded: 0, ejected: 0 });
    }

    fn args(extra: &[&str]) -> ThermalArgs {
        crate::test_args::parse_args("thermal", extra)
    }

    #[test]
    fn defaults_are_valid_and_bounds_name_each_flag() {
        assert!(validate(&args(&[])).is_ok());
        let e = validate(&args(&["--duration-s", "1", "--limit-celsius", "40", "--workers", "999", "--warmup-s=-1", "--runs", "0"])).unwrap_err();
        for flag in ["--duration-s", "--limit-celsius", "--workers", "--warmup-s", "--runs"] {
            assert!(e.0.contains(flag), "{flag} missing in: {e}");
        }
        assert!(validate(&args(&["--duration-s", "NaN"])).is_err());
    }

    #[test]
    fn each_run_rotates_the_order_of_the_modes() {
        let m = [Mode::None, Mode::Uniform, Mode::BatchCap, Mode::Joule];
        assert_eq!(order(&m, 0), m.to_vec());
        assert_eq!(order(&m, 1), vec![Mode::Uniform, Mode::BatchCap, Mode::Joule, Mode::None]);
        assert_eq!(order(&m, 4), m.to_vec());
        let firsts: std::collections::BTreeSet<&str> = (0..4).map(|i| order(&m, i)[0].name()).collect();
        assert_eq!(firsts.len(), 4, "every mode runs first once in four runs");
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
