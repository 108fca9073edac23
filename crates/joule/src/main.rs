//! The `joule` command: parses the command line and hands each subcommand to its module.
//! Exit codes: 0 success, 1 runtime failure, 2 bad usage or invalid config.

mod agent;
mod auth_budget;
mod backends;
mod client_group;
mod cmd;
mod conn_slots;
mod dashboard;
mod doctor;
mod exporter;
mod exposition;
mod freshen;
mod guardian;
#[cfg(test)]
mod help_tests;
mod logging;
mod metrics;
mod monitor;
mod sense;
#[cfg(test)]
mod test_args;
mod textview;
mod webconfig;

use clap::{Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;

/// joule keeps a Linux machine inside its thermal and power budget while it protects the
/// latency of the work that matters.
///
/// Start with `joule doctor` (what this machine offers and what joule will use) and `joule
/// monitor` (what joule measures; values labelled `model` are estimates, `sensor`/`ebpf`/`kernel`
/// are measured), then run the agent: `systemctl enable --now joule` where its unit is
/// installed, or `joule agent`. Anything the agent changes is recorded in an undo journal;
/// `joule restore` puts it all back.
#[derive(Parser)]
#[command(name = "joule", version, propagate_version = true, max_term_width = 100)]
struct Cli {
    /// Log filter (tracing's RUST_LOG syntax), e.g. `info`, `joule=debug`.
    #[arg(long, global = true, default_value = "info", env = "JOULE_LOG")]
    log: String,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Run the node agent.
    ///
    /// Every period it samples the machine, computes the thermal stage in the kernel, applies
    /// the classes' guarantees and the enabled mechanisms, serves Prometheus metrics and logs
    /// events. It runs until SIGINT or SIGTERM and then undoes everything it changed.
    Agent(agent::AgentArgs),
    /// What the running agent is doing and why, in one screen.
    ///
    /// The budget (temperature and power against their limits, with their source), the stage
    /// and how long it has held, each mechanism's decisions with the plan's reasons, each
    /// class's promise beside what it got, recent conflicts, and the agent's own cost. Asks the
    /// agent over its socket in the journal directory (root only). Exit 3 when no agent runs.
    ///
    /// Examples:
    ///   joule status
    ///   joule status --json | jq .budget
    Status(cmd::status::StatusArgs),
    /// Live view of what joule measures on this machine.
    ///
    /// `--once --json` prints one JSON snapshot for scripts.
    Monitor(monitor::MonitorArgs),
    /// Validate a config file: every problem with its line and a hint.
    ///
    /// Exit 2 when the config is invalid.
    CheckConfig(cmd::check_config::CheckConfigArgs),
    /// Undo every change recorded in the undo journal (after a crash, or to be sure).
    Restore(cmd::restore::RestoreArgs),
    /// CPU guarantees for the config's classes, by hand: plan, apply, status, release.
    ///
    /// `plan` shows the admission arithmetic, `apply` puts the classes in place, `status`
    /// compares configured, expected and achieved shares, `release` takes them away. The agent
    /// does the same by itself while it runs.
    Qos(cmd::QosCmdArgs),
    /// Run joule's thermal-aware sched_ext scheduler by hand, without the agent.
    ///
    /// The agent runs this same scheduler itself when its config says `[thermal] scheduler =
    /// "scx"`: it loads it at start, feeds it the thermal stage, reports an ejection by the
    /// kernel and lets the cgroup path act until it can load it again. This command is for
    /// trying the scheduler alone: it reads the thermal stage a running agent pins (0 without
    /// one), serves fewer low-score queues with shorter slices as the stage rises, and reports
    /// how it ended. The kernel runs one sched_ext scheduler at a time, so it cannot load
    /// while the agent's runs. Needs root and a kernel with sched_ext (CONFIG_SCHED_CLASS_EXT).
    Scx(cmd::scx::ScxArgs),
    // Its help (with examples) is the doc comment of `ElevateArgs`.
    Elevate(cmd::elevate::ElevateArgs),
    /// What nap with fast wake (`[nap]`) is doing: awake or napping, residency, wakes.
    ///
    /// `joule nap status` shows whether the agent's nap class is awake or napping and since
    /// when, the time spent napping, wakes by reason and the last one.
    #[command(subcommand)]
    Nap(cmd::nap::NapCmd),
    // Its help (with examples) is the doc comment of `DoctorArgs`.
    Doctor(doctor::DoctorArgs),
    /// Write the man pages or the shell completions into a directory (packaging, `make
    /// install`).
    #[command(subcommand, hide = true)]
    Generate(cmd::generate::GenerateCmd),
}

/// The config file every command reads when `--config` is not given and it exists.
pub const DEFAULT_CONFIG: &str = "/etc/joule/joule.toml";

/// Where the config comes from, shared by subcommands that read it.
#[derive(clap::Args, Debug, Clone)]
pub struct ConfigArg {
    /// Agent config file (TOML). Default: /etc/joule/joule.toml when it exists, else joule's
    /// built-in defaults (the values of the shipped joule.toml); the file used is logged.
    #[arg(long, short = 'c', value_name = "FILE", global = true)]
    pub config: Option<PathBuf>,
}

impl ConfigArg {
    /// The file to read: `--config`, else [`DEFAULT_CONFIG`] when it exists (a dangling link
    /// too, so that it fails loudly); `None` means the built-in defaults.
    pub fn path(&self) -> Option<PathBuf> {
        self.config.clone().or_else(|| default_config_file(std::path::Path::new(DEFAULT_CONFIG)))
    }

    /// Where the config comes from, for a log line or doctor's report.
    pub fn describe(&self) -> String {
        describe_config(self.path().as_deref())
    }

    pub fn load(&self) -> anyhow::Result<joule_core::config::Config> {
        match self.path() {
            Some(p) => Ok(joule_core::config::Config::load(&p).map_err(UsageError::from_display)?),
            None => Ok(joule_core::config::Config::default()),
        }
    }

    /// [`load`](Self::load) for a command that acts on the config as root (the agent, `joule
    /// qos`): the file must be root's (`agent::trusted_config`), or any user who could edit it
    /// would choose what root does. Logs which config it is.
    pub fn load_trusted(&self) -> anyhow::Result<joule_core::config::Config> {
        let path = self.path();
        if let (true, Some(path)) = (joule_core::testing::is_root(), &path) {
            agent::trusted_config(path)?;
        }
        tracing::info!("config: {}", describe_config(path.as_deref()));
        self.load()
    }
}

/// `default` when something is there (a dangling link too: it then fails loudly).
fn default_config_file(default: &std::path::Path) -> Option<PathBuf> {
    default.symlink_metadata().is_ok().then(|| default.to_path_buf())
}

fn describe_config(path: Option<&std::path::Path>) -> String {
    match path {
        Some(p) => p.display().to_string(),
        None => format!("built-in defaults ({DEFAULT_CONFIG} does not exist)"),
    }
}

/// An error that is the user's to fix (exit code 2), as opposed to a runtime failure (1).
#[derive(Debug)]
pub struct UsageError(pub String);

impl UsageError {
    pub fn from_display(e: impl std::fmt::Display) -> Self {
        UsageError(e.to_string())
    }
}

impl std::fmt::Display for UsageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UsageError {}

/// The whole command line's definition (man pages, completions).
pub fn command() -> clap::Command {
    <Cli as clap::CommandFactory>::command()
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    logging::init(&cli.log);
    let result = match cli.cmd {
        Cmd::Agent(a) => agent::run(a),
        Cmd::Status(a) => cmd::status::run(a),
        Cmd::Monitor(a) => monitor::run(a),
        Cmd::CheckConfig(a) => cmd::check_config::run(a),
        Cmd::Restore(a) => cmd::restore::run(a),
        Cmd::Qos(a) => cmd::qos_entry(a),
        Cmd::Scx(a) => cmd::scx::run(a),
        Cmd::Elevate(a) => cmd::elevate::run(a),
        Cmd::Nap(c) => cmd::nap::run(c),
        Cmd::Doctor(a) => doctor::run(&a),
        Cmd::Generate(g) => cmd::generate::run(g),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // An error may quote a name another user chose (a path, a thread, a unit); a
            // config's problems keep their lines.
            eprintln!("joule: error: {}", joule_core::text::escape_lines(&format!("{e:#}")));
            if e.downcast_ref::<cmd::status::NoAgent>().is_some() {
                ExitCode::from(cmd::status::NO_AGENT_EXIT)
            } else if e.downcast_ref::<UsageError>().is_some() {
                ExitCode::from(2)
            } else {
                ExitCode::from(1)
            }
        }
    }
}
