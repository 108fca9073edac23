//! `joule-bench <experiment>`: joule's benchmark harness, a development and test tool apart from
//! the operator's `joule` binary (and not in its package). Each experiment runs its baseline in
//! the same run, prints a table, writes JSON (`--json PATH`) and an SVG plot (`--plot PATH`), and
//! reports ratios as well as absolute numbers. The experiments that run the agent start the
//! `joule` binary beside this one ([`joule_exe`]).
//! Exit codes: 0 success, 1 runtime failure, 2 bad usage.

mod elevate;
mod nap;
mod netqos;
mod overhead;
mod report;
mod rt_share;
#[cfg(test)]
mod test_args;
mod thermal;

use clap::Parser;
use std::path::PathBuf;
use std::process::ExitCode;

/// joule's benchmarks: reproducible experiments; each runs its baseline in the same run and
/// writes JSON and a plot.
#[derive(Parser)]
#[command(name = "joule-bench", version, propagate_version = true, max_term_width = 100)]
struct Cli {
    /// Log filter (tracing's RUST_LOG syntax), e.g. `info`, `joule=debug`.
    #[arg(long, global = true, default_value = "info", env = "JOULE_LOG")]
    log: String,
    #[command(subcommand)]
    cmd: BenchCmd,
}

#[derive(clap::Subcommand)]
enum BenchCmd {
    /// The agent's CPU cost and wake-ups, idle and beside many sleeping or fast-waking threads.
    ///
    /// Agent CPU cost and wake-ups a second (all its threads' context switches) with every
    /// mechanism on (classes, thermal stages, flow monitor, nap armed; elevate off) on an idle
    /// machine (the baseline; at rest: goal ≤ 1 wake-up/s and ≤ 0.1 % of one CPU), with many
    /// extra sleeping threads (target <1% of one CPU) and with threads that wake thousands of
    /// times a second, plus the in-kernel cost of its eBPF programs per program.
    Overhead(overhead::OverheadArgs),
    /// Expected vs achieved CPU share of RT-bandwidth classes, and small periods' cost.
    ///
    /// The seed's cgroup RT-bandwidth study (Tables 1 and 2) on this machine: expected vs
    /// achieved CPU share per group for each configuration, joule's admission verdict, and the
    /// cost of small periods.
    RtShare(rt_share::RtShareArgs),
    /// joule's thermal stages against the alternatives, scored on a thermal plant.
    ///
    /// joule against what a user would pick instead (nothing, a step-wise governor throttling
    /// every task alike, a Thunderbolt-like cap on batch work), modes interleaved, with the same
    /// loads (fio random read/write, stress-ng CPU workers in a best-effort class, a labelled
    /// task measuring its wake-up latency) and the same independent thermal plant (two nodes
    /// and leakage, fed by this machine's CPU busy time; no thermal sensor here): plant peak and
    /// time over the limit, labelled wake-up p50/p99, fio MiB/s, best-effort work and reaction
    /// time, medians and ranges over runs. Needs root, fio and stress-ng.
    Thermal(thermal::ThermalArgs),
    /// The user-space scheduler (`joule elevate`): accuracy, cost, tables, blocking.
    ///
    /// The seed's user-space scheduler study (priority elevation trick) on this machine:
    /// the physical floor, switching accuracy at µs slices (shared/dedicated, processes/
    /// threads), CPU cost, table-driven schedules A-A-B-C vs A-B-A-C, and head-of-line blocking
    /// with and without preemption; each against its baseline in the same run. Needs root.
    Elevate(elevate::ElevateBenchArgs),
    /// A busy-loop target of `joule-bench elevate` that records its own runs (internal).
    #[command(hide = true)]
    ElevateTarget(elevate::targets::TargetArgs),
    /// nginx always awake vs under joule's nap: latency, wakes, residency, power.
    ///
    /// nginx always awake vs under joule nap, alternating: requests spaced so each finds the
    /// server napping and bursts around the transition; sent/answered/failed, latency awake vs
    /// napped, enter/leave times, residency, wake-ups per second (kernel) and the model's power.
    /// Needs root and nginx (`make test` installs it).
    Nap(nap::NapArgs),
    /// Network QoS: the limiter's accuracy, softirq starvation, energy placement.
    ///
    /// Network QoS in two network namespaces joined by veth: the limiter's accuracy
    /// with iperf3 (TCP, UDP; achieved vs target, its CPU cost), a 1 ms SCHED_FIFO task's
    /// wake-up latency and deadline misses under a small-packet flood on its CPU (idle, flood,
    /// flood with joule's limiter), and the energy placement: joule's policy and the kernel's
    /// EAS wake-up rule over the same traces on the Odroid-XU4 model, perf per watt (model,
    /// with no sender limited and with joule's limits for both) beside the seed's
    /// 4.79× / 3.11× / 2.35×. The network sections need root and iperf3.
    NetQos(netqos::NetQosArgs),
    /// The latency probe `joule-bench thermal` runs as its labelled task (internal).
    #[command(hide = true)]
    ThermalProbe(thermal::probe::ProbeArgs),
}

fn run(cmd: BenchCmd) -> anyhow::Result<()> {
    match cmd {
        BenchCmd::Overhead(a) => overhead::run(a),
        BenchCmd::RtShare(a) => rt_share::run(&a),
        BenchCmd::Thermal(a) => thermal::run(&a),
        BenchCmd::NetQos(a) => netqos::run(&a),
        BenchCmd::Nap(a) => nap::run(&a),
        BenchCmd::ThermalProbe(a) => thermal::probe::run(&a),
        BenchCmd::Elevate(a) => elevate::run(&a),
        BenchCmd::ElevateTarget(a) => elevate::targets::target_main(&a),
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let filter = tracing_subscriber::EnvFilter::try_new(&cli.log).unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).with_target(false).with_ansi(ansi).init();
    match run(cli.cmd) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("joule-bench: error: {e:#}");
            if e.downcast_ref::<UsageError>().is_some() {
                ExitCode::from(2)
            } else {
                ExitCode::from(1)
            }
        }
    }
}

/// An error that is the user's to fix (exit code 2), as opposed to a runtime failure (1). The
/// `joule` binary has its own: each binary owns its exit codes.
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

/// The `joule` binary the benches run the agent from: the one beside this `joule-bench` (both
/// are built by `cargo build --release --workspace`), so a bench measures the agent of the
/// same build. `JOULE_BIN` names another one.
pub fn joule_exe() -> anyhow::Result<PathBuf> {
    if let Some(p) = std::env::var_os("JOULE_BIN") {
        return Ok(PathBuf::from(p));
    }
    let exe = std::env::current_exe()?.with_file_name("joule");
    anyhow::ensure!(
        exe.is_file(),
        "no joule binary beside joule-bench ({}): build both with `cargo build --release --workspace`, or name one in JOULE_BIN",
        exe.display()
    );
    Ok(exe)
}

/// The kernel's USER_HZ: /proc/stat's ticks per second.
pub fn ticks_per_s() -> f64 {
    nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK).ok().flatten().map_or(100.0, |v| v as f64)
}

/// The bounds a bench's arguments must meet, each with the message naming its flag: every
/// failed one is reported at once, as a usage error (exit 2).
pub fn check_bounds<S: Into<String>>(checks: impl IntoIterator<Item = (bool, S)>) -> Result<(), crate::UsageError> {
    let problems: Vec<String> = checks.into_iter().filter_map(|(ok, msg)| (!ok).then(|| msg.into())).collect();
    if problems.is_empty() {
        Ok(())
    } else {
        Err(crate::UsageError(problems.join("; ")))
    }
}

/// Stops a child the bench started: `signal` (its graceful stop), then SIGKILL if it is still
/// running after `patience`; always reaped. True when it stopped by itself (not killed).
pub fn stop_child(child: &mut std::process::Child, signal: nix::sys::signal::Signal, patience: std::time::Duration) -> bool {
    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    let _ = nix::sys::signal::kill(pid, signal);
    let deadline = std::time::Instant::now() + patience;
    while std::time::Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            return true;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
    false
}

/// Polls `ready` every 20 ms until it holds; an error naming `what` when `child` exits first
/// (with `log`'s content) or `limit` passes.
pub fn wait_ready(
    child: &mut std::process::Child,
    limit: std::time::Duration,
    what: &str,
    log: &std::path::Path,
    mut ready: impl FnMut() -> bool,
) -> anyhow::Result<()> {
    let deadline = std::time::Instant::now() + limit;
    while !ready() {
        if let Ok(Some(st)) = child.try_wait() {
            anyhow::bail!("{what} exited ({st}): {}", std::fs::read_to_string(log).unwrap_or_default());
        }
        if std::time::Instant::now() > deadline {
            anyhow::bail!("{what} was not ready within {} s", limit.as_secs());
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    Ok(())
}
