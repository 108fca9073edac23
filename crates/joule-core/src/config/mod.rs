//! The agent's one TOML config. Parsing is strict (unknown keys are errors) and every problem
//! found, by the parser or by validation, is reported with the line it came from and a hint,
//! which is what `joule check-config` prints.

mod bpf;
mod class;
mod elevate;
mod energy;
mod locate;
mod nap;
mod net;
mod pod;
mod thermal;
mod validate;

pub use bpf::BpfMode;
pub use class::{systemd_unit_at, ClassConfig, MatchRules, ThermalRole, LABELLED_SLICE_US, SLICE_US};
pub use elevate::ElevateConfig;
pub use energy::{EnergyConfig, EnergyTarget, ModelSource, PlacementPolicyKind};
pub use locate::Problem;
pub use nap::{MachineNap, NapConfig, NapMonitors};
pub use net::{Direction, FlowMatch, NetConfig, NetLimit, MAX_LIMITS_PER_INTERFACE};
pub use pod::{KubernetesConfig, PodIndex, PodMeta, PodRules};
pub use thermal::{StageActions, ThermalConfig, ThermalScheduler};

use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    pub agent: AgentConfig,
    pub telemetry: TelemetryConfig,
    pub thermal: ThermalConfig,
    /// Nap with fast wake (off by default).
    pub nap: NapConfig,
    /// The flow monitor and the bandwidth limiter (off unless configured).
    pub net: NetConfig,
    /// Task classes: the vocabulary every mechanism shares.
    #[serde(rename = "class")]
    pub classes: Vec<ClassConfig>,
    /// Energy-aware placement (off unless `[energy] enabled = true`).
    pub energy: EnergyConfig,
    /// The user-space scheduler on one class's threads (off by default).
    pub elevate: ElevateConfig,
    /// Kubernetes nodes: the container runtime's CRI socket, for `match.pod` rules.
    pub kubernetes: KubernetesConfig,
}

/// The event log's default cap: 8 MiB, weeks of a busy agent's events.
pub const DEFAULT_EVENT_LOG_MAX_BYTES: u64 = 8 << 20;

/// The control loop's period at rest (issue 36): half a wake-up a second, so the events that
/// end a rest (an unrelated exec, a scrape) still leave the agent under one wake-up a second.
pub const DEFAULT_REST_PERIOD_MS: u64 = 2000;

/// The status line's period where the config leaves it unset and no service manager runs us.
pub const DEFAULT_STATUS_INTERVAL_MS: u64 = 2000;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AgentConfig {
    /// Control-loop period. Shorter reacts faster and costs more CPU.
    pub period_ms: u64,
    /// The loop's period while nothing is in motion (stage 0, temperatures well below the first
    /// threshold, no class or plan change, no power budget): events — the in-kernel stage
    /// changing, a process event, a nap's wake — end it at once, so reactions still come
    /// within `period_ms`; a scrape of a reading older than two periods gets a new one. Longer
    /// lets an idle machine's CPUs stay in deep idle states longer. Equal to `period_ms`: never
    /// rest. Unset: [`DEFAULT_REST_PERIOD_MS`], or `period_ms` when that is longer.
    pub rest_period_ms: Option<u64>,
    /// Where the Prometheus text endpoint listens; loopback by default.
    pub metrics_addr: String,
    /// Show other users' pids and process names (`joule_task_cpu_wait_ratio`, `/snapshot.json`)
    /// on an endpoint beyond loopback. On loopback they follow /proc's own policy: hidden when
    /// /proc is mounted `hidepid`.
    pub metrics_show_processes: bool,
    /// TLS and basic auth for the endpoint: a web config file in the Prometheus
    /// exporter-toolkit format (`tls_server_config`, `basic_auth_users`). Empty: plain HTTP,
    /// no auth (fine on loopback; the agent warns beyond it).
    pub metrics_web_config: PathBuf,
    /// Undo journal directory (tmpfs, so a reboot forgets it along with the changes).
    pub journal_dir: PathBuf,
    /// JSON-lines event log; "-" writes events to standard output.
    pub event_log: PathBuf,
    /// The event log file's cap: past it the file becomes `<name>.1` (replacing the previous
    /// one) and a new one starts, so the log holds at most twice this.
    pub event_log_max_bytes: u64,
    /// How often the agent prints a one-line status to stderr; 0 turns it off. Unset: every
    /// 2 s on a terminal, off under systemd (`joule status` and the metrics say the same).
    pub status_interval_ms: Option<u64>,
    /// Apply `[[class]]` guarantees at start and keep matching tasks in place.
    pub apply_classes: bool,
}

impl AgentConfig {
    /// The loop's period at rest: the configured one, else [`DEFAULT_REST_PERIOD_MS`] or the
    /// full period when that is longer.
    pub fn rest_period_ms(&self) -> u64 {
        self.rest_period_ms.unwrap_or(DEFAULT_REST_PERIOD_MS.max(self.period_ms))
    }
    /// The status line's period (0: none): the configured one, else off under systemd (which
    /// sets `INVOCATION_ID` for every unit it starts) and every 2 s otherwise.
    pub fn status_interval_ms(&self, under_systemd: bool) -> u64 {
        self.status_interval_ms.unwrap_or(if under_systemd { 0 } else { DEFAULT_STATUS_INTERVAL_MS })
    }
}

impl Default for AgentConfig {
    fn default() -> Self {
        Self {
            period_ms: 100,
            rest_period_ms: None,
            metrics_addr: "127.0.0.1:9977".into(),
            metrics_show_processes: false,
            metrics_web_config: PathBuf::new(),
            journal_dir: "/run/joule".into(),
            event_log: "/run/joule/events.jsonl".into(),
            event_log_max_bytes: DEFAULT_EVENT_LOG_MAX_BYTES,
            status_interval_ms: None,
            apply_classes: true,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TelemetryConfig {
    pub sysfs_root: PathBuf,
    pub procfs_root: PathBuf,
    pub cgroup_root: PathBuf,
    /// Where thermal zones and hwmon sensors are read (`class/thermal`, `class/hwmon` under
    /// it). Empty: `sysfs_root`. A tree of its own lets a sensor that is not in sysfs (an
    /// external probe, a benchmark's plant) stand in for one.
    pub thermal_root: PathBuf,
    /// Where the boot partition is mounted: a Raspberry Pi's config.txt (`firmware/config.txt`
    /// under it, else `config.txt`), whose `temp_limit` lowers the firmware's throttle and so
    /// joule's thermal limit. The board itself is known from the device tree under
    /// `thermal_root` (`firmware/devicetree/base/compatible`).
    pub boot_root: PathBuf,
    /// Load the eBPF programs (run-queue latency, in-kernel thermal stage, process monitor):
    /// `"auto"` where the kernel allows it, `true` or refuse to start, `false` never.
    pub bpf: BpfMode,
    /// A BTF file for libbpf's CO-RE relocations instead of the kernel's own (empty: the
    /// kernel's `/sys/kernel/btf/vmlinux`). Programs that attach to BTF tracepoints still need
    /// the kernel's own BTF, which a kernel built without CONFIG_DEBUG_INFO_BTF lacks.
    pub btf_path: PathBuf,
    /// Where the thermal stage map is pinned for other BPF programs (a sched_ext scheduler).
    pub bpf_pin_dir: PathBuf,
    /// How many tasks with the longest CPU wait to report per sample.
    pub task_wait_top: usize,
    pub power_model: PowerModelConfig,
    pub thermal_model: ThermalModelConfig,
}

impl TelemetryConfig {
    /// Where the thermal sensors are read: `thermal_root`, or `sysfs_root` when it is empty.
    pub fn thermal_root(&self) -> &std::path::Path {
        if self.thermal_root.as_os_str().is_empty() {
            &self.sysfs_root
        } else {
            &self.thermal_root
        }
    }
}

impl Default for TelemetryConfig {
    fn default() -> Self {
        Self {
            sysfs_root: "/sys".into(),
            procfs_root: "/proc".into(),
            cgroup_root: "/sys/fs/cgroup".into(),
            thermal_root: PathBuf::new(),
            boot_root: "/boot".into(),
            bpf: BpfMode::Auto,
            btf_path: PathBuf::new(),
            bpf_pin_dir: "/sys/fs/bpf/joule".into(),
            task_wait_top: 5,
            power_model: PowerModelConfig::default(),
            thermal_model: ThermalModelConfig::default(),
        }
    }
}

/// Linear utilisation power model, P = idle + Σ_cpu util_cpu × dynamic-per-CPU (the form of
/// Fan, Weber & Barroso, "Power provisioning for a warehouse-sized computer", ISCA 2007).
/// The defaults are order-of-magnitude placeholders for one server core, not a calibration:
/// measure your machine with a meter and set them. Values from it are labelled `model`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PowerModelConfig {
    pub idle_watts: f64,
    pub cpu_dynamic_watts: f64,
}

impl Default for PowerModelConfig {
    fn default() -> Self {
        Self { idle_watts: 10.0, cpu_dynamic_watts: 8.0 }
    }
}

/// First-order RC thermal model driven by the power estimate:
/// C·dT/dt = P − (T − T_ambient)/R. Time constant R·C (default 48 s).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ThermalModelConfig {
    pub ambient_celsius: f64,
    pub resistance_celsius_per_watt: f64,
    pub capacitance_joules_per_celsius: f64,
}

impl Default for ThermalModelConfig {
    fn default() -> Self {
        Self { ambient_celsius: 25.0, resistance_celsius_per_watt: 1.2, capacitance_joules_per_celsius: 40.0 }
    }
}

/// The largest config joule reads (the shipped one is ~6 KiB).
pub const MAX_CONFIG_BYTES: u64 = 1 << 20;
/// The most problems one check reports.
const MAX_PROBLEMS: usize = 100;

/// The most stages the in-kernel program handles (size of its threshold array).
pub const MAX_STAGES: usize = 8;

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config {path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("{}", render(.path, .problems))]
    Invalid { path: PathBuf, problems: Vec<Problem> },
}

fn render(path: &Path, problems: &[Problem]) -> String {
    let mut s = format!("{} has {} problem(s):", path.display(), problems.len());
    for p in problems {
        s.push_str(&format!("\n  {}", p.display_with(path)));
    }
    s
}

impl Config {
    /// What `class` grants its members under this config (`ClassConfig::grants`, with whether
    /// `[elevate]` schedules it and whether an enabled `[energy]` target places it).
    pub fn grants(&self, class: &ClassConfig) -> Vec<&'static str> {
        let elevated = self.elevate.enabled() && self.elevate.class == class.name;
        let placed = self.energy.enabled && self.energy.targets.iter().any(|t| t.class == class.name);
        class.grants(elevated, placed)
    }

    /// Reads (a regular file of at most [`MAX_CONFIG_BYTES`]), parses and validates a config
    /// file.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = crate::fsread::read_file_capped(path, MAX_CONFIG_BYTES).map_err(|source| ConfigError::Read { path: path.into(), source })?;
        Config::parse(&text).map_err(|problems| ConfigError::Invalid { path: path.into(), problems })
    }

    /// A problem about `key` (`class[2].rt_runtime_us`) located in config `text`, for checks
    /// made outside this module (admission on this machine, in `joule check-config`).
    pub fn problem_at(text: &str, key: &str, message: String, hint: String) -> Problem {
        locate::at_key(text, key, message, hint)
    }

    /// Parses and validates config text; on failure every problem found, each with its line.
    /// A section the parser refuses (a wrong type, an unknown key, bad syntax) is reported and
    /// set aside — its lines blanked, so every line number stays — and the rest parsed again,
    /// so three independent mistakes give three problems, not the first one; the sections that
    /// parse are then validated.
    pub fn parse(text: &str) -> Result<Config, Vec<Problem>> {
        let mut problems = Vec::new();
        let mut work = text.to_string();
        let mut set_aside = Vec::new();
        let cfg = loop {
            match toml::from_str::<Config>(&work) {
                Ok(c) => break Some(c),
                Err(e) => {
                    problems.push(locate::from_toml_error(&work, &e));
                    match e.span().map(|s| locate::section_around(&work, s.start)) {
                        Some((name, range)) if problems.len() < MAX_PROBLEMS && !range.is_empty() => {
                            set_aside.push(name);
                            locate::blank(&mut work, range);
                        }
                        _ => break None,
                    }
                }
            }
        };
        let Some(cfg) = cfg else { return Err(problems) };
        // A check that refers to a section set aside would blame the user for our default.
        // (A top-level line set aside, name "", is about no section.)
        let refers_to_aside = |key: &str, msg: &str| {
            set_aside.iter().filter(|s| !s.is_empty()).any(|s| (s == "class" && msg.contains("[[class]]")) || key.starts_with(s.as_str()))
        };
        problems.extend(
            validate::validate(&cfg)
                .into_iter()
                .filter(|(key, msg, _)| set_aside.is_empty() || !refers_to_aside(key, msg))
                .map(|(key, msg, hint)| locate::at_key(&work, &key, msg, hint)),
        );
        if problems.is_empty() {
            return Ok(cfg);
        }
        problems.sort_by_key(|p| p.line.unwrap_or(usize::MAX));
        Err(problems)
    }
}
