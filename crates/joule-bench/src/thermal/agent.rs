//! The joule side of `joule-bench thermal`: the generated agent config (the plant's zone as
//! its sensor, stage thresholds below the limit, a best-effort class holding stress-ng and
//! a labelled class holding the probe, both matched by pid; the labelled class gets joule's
//! default latency slice, as it would in a user's config), the agent as a child process, and
//! the two documents read from its exporter each sample (`/snapshot.json`, `/plan.json`).

use crate::UsageError;
use anyhow::Context;
use joule_core::config::{Config, StageActions};
use joule_core::control::ThermalPath;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Class names the bench's config uses (and the root test looks for afterwards).
pub const BEST_EFFORT_CLASS: &str = "bench-thermal-batch";
pub const LABELLED_CLASS: &str = "bench-thermal-probe";

/// The stages the agent is given: 3, 1 and 0.4 °C under the limit (the last with
/// [`BACKSTOP_BEST_EFFORT_PCT`]), hysteresis 0.5 °C. The plant overshoots a threshold by about
/// 0.5 °C before a stage's cap takes hold (the recorded runs at 6, 3.5 and 1.5 °C peaked 0.5 °C
/// over the second stage and stayed 3 °C under the limit, costing best-effort work), so the
/// stage that holds the temperature sits 1 °C under the limit and the last one is the backstop.
///
/// A zone that reports whole degrees (no `thermal_root`: the machine's own zone, the VM's ACPI
/// `_TMP`, polled each second) gets 4, 3 and 2 °C, one step of the sensor apart, and a
/// hysteresis of 0.9 °C. Such a sensor passes a threshold less than a step under the limit only
/// by reading the limit itself, and between two polls a rising plant gains about a degree: with
/// 3, 1.5 and 0.5 °C a slower host's round spent 4.8 % of its time over the limit (peak
/// 82.25 °C), with 3, 2 and 1 °C one round of three 3.7 % (82.2 °C); with 4, 3 and 2 two rounds
/// peaked at 81.2 and 81.1 °C, none over (docs/results/thermal.md, "The scx path"). Under one
/// step of hysteresis every poll flipped the stage between the last two; 0.9 is more than half
/// a step, so a one-step dip no longer leaves a stage, and less than the smallest gap, as the
/// config check asks.
pub fn stages(limit_celsius: f64, thermal_root: Option<&Path>) -> (Vec<f64>, f64) {
    let (below, hysteresis) = if thermal_root.is_some() { ([3.0, 1.0, 0.4], 0.5) } else { ([4.0, 3.0, 2.0], 0.9) };
    (below.iter().map(|d| limit_celsius - d).collect(), hysteresis)
}

/// Where the pid rules point: None for the default mode (no agent reads that config).
pub struct Pids {
    pub stress: i32,
    pub probe: i32,
}

/// The best-effort share of the last stage, the backstop, in % of the machine: joule's default
/// 15 % let the scx path pass a limit in the VM (busy 0.76 at stage 3, 1.4 s over at 82 °C,
/// docs/results/thermal.md) where batch-cap's 10 % held it; a user who must hold a hard limit
/// gives the last stage less, as here. The other stages are joule's defaults.
pub const BACKSTOP_BEST_EFFORT_PCT: f64 = 5.0;

fn stage_rows(n: usize) -> String {
    (0..=n as u32)
        .map(|s| {
            let mut a = StageActions::default_for(s);
            if s == n as u32 {
                a.best_effort_cpu_pct = BACKSTOP_BEST_EFFORT_PCT;
            }
            let StageActions { queues, slice_us, best_effort_cpu_pct, cpufreq_max_pct } = a;
            format!("[[thermal.stage]]\nqueues = {queues}\nslice_us = {slice_us}\nbest_effort_cpu_pct = {best_effort_cpu_pct:?}\ncpufreq_max_pct = {cpufreq_max_pct:?}\n\n")
        })
        .collect()
}

/// The thresholds the agent is given: the bench's ([`stages`]), or none, so the agent places
/// its own built-in ones, as on the board (`--joule-stages built-in`: the plant's tree carries
/// the board's device tree, and `boot_root` is where the agent looks for config.txt).
#[derive(Debug, Clone, Copy)]
pub enum Thresholds<'a> {
    Bench,
    BuiltIn { boot_root: &'a Path, count: usize },
}

/// Writes `<dir>/joule.toml` and returns it parsed (a config the agent would refuse is a
/// usage error here, before anything ran). The agent reads its temperature from the plant's
/// zone under `thermal_root` (None: the machine's own /sys), as it would a sensor's.
pub fn write_config(
    dir: &Path,
    limit_celsius: f64,
    thermal_root: Option<&Path>,
    path: ThermalPath,
    bpf: bool,
    pids: Option<&Pids>,
    thresholds: Thresholds,
) -> anyhow::Result<(PathBuf, Config)> {
    let (th, hyst) = stages(limit_celsius, thermal_root);
    let (thresholds_lines, boot, n) = match thresholds {
        Thresholds::Bench => (format!("stage_thresholds_celsius = {th:?}\nhysteresis_celsius = {hyst:?}\n"), String::new(), th.len()),
        Thresholds::BuiltIn { boot_root, count } => (String::new(), format!("boot_root = \"{}\"\n", boot_root.display()), count),
    };
    let scheduler = match path {
        ThermalPath::Scx => "scx",
        ThermalPath::Cgroup => "cgroup",
    };
    let classes = pids
        .map(|p| {
            format!(
                "[[class]]\nname = \"{BEST_EFFORT_CLASS}\"\nthermal = \"best_effort\"\nmatch = {{ pid = [{}] }}\n\n[[class]]\nname = \"{LABELLED_CLASS}\"\nthermal = \"labelled\"\nmatch = {{ pid = [{}], uid = [0] }}\n",
                p.stress, p.probe
            )
        })
        .unwrap_or_default();
    let cfg = format!(
        "# Generated by `joule-bench thermal`.\n[agent]\nperiod_ms = 100\nmetrics_addr = \"127.0.0.1:0\"\njournal_dir = \"{journal}\"\nevent_log = \"{events}\"\nstatus_interval_ms = 0\n\n\
         [telemetry]\nbpf = {bpf}\nbpf_pin_dir = \"/sys/fs/bpf/joule-bench-thermal-{pid}\"\n{root}{boot}\n\
         [thermal]\nscheduler = \"{scheduler}\"\n{thresholds_lines}cpufreq_caps = true\n{zones}\n{stages}{classes}",
        journal = dir.join("journal").display(),
        events = dir.join("events.jsonl").display(),
        pid = std::process::id(),
        root = thermal_root.map(|r| format!("thermal_root = \"{}\"\n", r.display())).unwrap_or_default(),
        // The plant's tree holds one zone, of the plant's own type: the stage follows it.
        zones = if thermal_root.is_some() { "zones = [\"thermal_zone0\"]\n" } else { "" },
        stages = stage_rows(n),
    );
    let p = dir.join("joule.toml");
    std::fs::write(&p, cfg).with_context(|| format!("while writing {}", p.display()))?;
    let parsed = Config::load(&p).map_err(UsageError::from_display)?;
    Ok((p, parsed))
}

/// The agent as a child: its own process group, SIGTERM when the bench dies, and on drop a
/// SIGTERM so it undoes its changes itself (its journal; `joule restore --journal-dir` if it
/// had to be killed).
pub struct Agent {
    child: Child,
    pub addr: String,
    journal_dir: PathBuf,
}

impl Agent {
    pub fn start(cfg: &Path, cfg_parsed: &Config, log: &Path) -> anyhow::Result<Agent> {
        let mut cmd = Command::new(crate::joule_exe()?);
        cmd.args(["agent", "--config"]).arg(cfg).stdin(Stdio::null()).stdout(Stdio::null()).stderr(std::fs::File::create(log)?);
        use std::os::unix::process::CommandExt;
        cmd.process_group(0);
        // SAFETY: prctl is async-signal-safe.
        unsafe {
            cmd.pre_exec(|| if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM) != 0 { Err(std::io::Error::last_os_error()) } else { Ok(()) });
        }
        let child = cmd.spawn().context("while starting the agent")?;
        let mut agent = Agent { child, addr: String::new(), journal_dir: cfg_parsed.agent.journal_dir.clone() };
        // Its event log names the address it bound (port 0 = any free port).
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            let events = std::fs::read_to_string(&cfg_parsed.agent.event_log).unwrap_or_default();
            if let Some(url) =
                events.lines().filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok()).find_map(|v| v["metrics"].as_str().map(String::from))
            {
                agent.addr = url.trim_start_matches("http://").trim_end_matches("/metrics").to_string();
                return Ok(agent);
            }
            if let Ok(Some(st)) = agent.child.try_wait() {
                anyhow::bail!("the agent exited ({st}) before it listened:\n{}", std::fs::read_to_string(log).unwrap_or_default().trim_end());
            }
            anyhow::ensure!(
                Instant::now() < deadline,
                "the agent did not listen within 15 s:\n{}",
                std::fs::read_to_string(log).unwrap_or_default().trim_end()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn get(&self, path: &str) -> anyhow::Result<serde_json::Value> {
        http_get_json(&self.addr, path)
    }

    /// Whether it is still running.
    pub fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        if super::super::stop_child(&mut self.child, nix::sys::signal::Signal::SIGTERM, Duration::from_secs(15)) {
            return;
        }
        // Killed: its journal still holds what it changed.
        match joule_core::journal::Journal::open(&self.journal_dir).and_then(|j| j.restore_all(&joule_core::effects::RealEffects)) {
            Ok(r) if r.failed.is_empty() => {}
            r => eprintln!(
                "thermal: the agent had to be killed and its journal {} was not fully replayed ({r:?}): run `joule restore --journal-dir {}`",
                self.journal_dir.display(),
                self.journal_dir.display()
            ),
        }
    }
}

/// GET on loopback, HTTP/1.0 (the exporter closes after each response), JSON body.
fn http_get_json(addr: &str, path: &str) -> anyhow::Result<serde_json::Value> {
    let mut s = std::net::TcpStream::connect(addr).with_context(|| format!("while connecting to the agent at {addr}"))?;
    s.set_read_timeout(Some(Duration::from_secs(2)))?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n")?;
    let mut resp = String::new();
    s.read_to_string(&mut resp)?;
    let (head, body) = resp.split_once("\r\n\r\n").context("the agent's response has no body")?;
    anyhow::ensure!(head.contains(" 200 "), "GET {path}: {}", head.lines().next().unwrap_or_default());
    serde_json::from_str(body).with_context(|| format!("GET {path} is not JSON"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_config_is_valid_and_carries_the_bench_model_and_classes() {
        let dir = tempfile::tempdir().unwrap();
        let (_, cfg) =
            write_config(dir.path(), 50.0, Some(Path::new("/tmp/plant")), ThermalPath::Cgroup, true, Some(&Pids { stress: 11, probe: 22 }), Thresholds::Bench)
                .unwrap();
        assert_eq!(cfg.telemetry.thermal_root(), Path::new("/tmp/plant"));
        assert_eq!(cfg.thermal.stage_thresholds_celsius, vec![47.0, 49.0, 49.6]);
        assert!(cfg.thermal.stage_thresholds_celsius.iter().all(|t| *t < 50.0), "every stage starts below the limit");
        assert_eq!(cfg.thermal.table().len(), 4);
        let t = cfg.thermal.table();
        assert_eq!((t[2].best_effort_cpu_pct, t[3].best_effort_cpu_pct), (35.0, BACKSTOP_BEST_EFFORT_PCT), "joule's defaults, then the backstop");
        let be = cfg.classes.iter().find(|c| c.name == BEST_EFFORT_CLASS).unwrap();
        assert_eq!((be.thermal, be.matches.pid.clone()), (joule_core::config::ThermalRole::BestEffort, vec![11]));
        let lab = cfg.classes.iter().find(|c| c.name == LABELLED_CLASS).unwrap();
        assert_eq!((lab.thermal, lab.matches.pid.clone()), (joule_core::config::ThermalRole::Labelled, vec![22]));
        let (_, scx) = write_config(dir.path(), 50.0, None, ThermalPath::Scx, true, None, Thresholds::Bench).unwrap();
        assert_eq!(scx.thermal.scheduler, joule_core::config::ThermalScheduler::Scx);
        assert_eq!(scx.telemetry.thermal_root(), Path::new("/sys"), "no tree of the bench's: the machine's own zone");
        assert_eq!((cfg.thermal.hysteresis_celsius, scx.thermal.hysteresis_celsius), (0.5, 0.9), "a whole-degree zone: most of a step");
        assert_eq!(scx.thermal.stage_thresholds_celsius, vec![46.0, 47.0, 48.0]);
        assert!(scx.classes.is_empty());
        // Built-in: no thresholds of the bench's, the agent places its own; config.txt looked
        // for where the bench says, never the host's /boot.
        let boot = dir.path().join("boot");
        let (_, b) =
            write_config(dir.path(), 80.0, Some(Path::new("/tmp/plant")), ThermalPath::Cgroup, true, None, Thresholds::BuiltIn { boot_root: &boot, count: 3 })
                .unwrap();
        assert!(b.thermal.stage_thresholds_celsius.is_empty());
        assert_eq!((b.thermal.hysteresis_celsius, b.telemetry.boot_root.as_path(), b.thermal.table().len()), (3.0, boot.as_path(), 4));
    }

    #[test]
    fn a_limit_that_is_not_a_number_is_refused_by_the_config_check() {
        let dir = tempfile::tempdir().unwrap();
        let e = write_config(dir.path(), f64::NAN, Some(Path::new("/tmp/plant")), ThermalPath::Cgroup, true, None, Thresholds::Bench).unwrap_err();
        assert!(e.downcast_ref::<UsageError>().is_some(), "{e:#}");
    }
}
