//! `joule bench <experiment>`: each experiment runs its baseline in the same run, prints a
//! table, writes JSON (`--json PATH`) and an SVG plot (`--plot PATH`), and reports ratios as
//! well as absolute numbers.

pub mod netqos;
pub mod overhead;
pub mod report;
pub mod rt_share;
pub mod thermal;

#[derive(clap::Subcommand)]
pub enum BenchCmd {
    /// Agent CPU cost at 10 Hz on an idle machine (the baseline), with many extra sleeping
    /// threads (target <1% of one CPU) and with threads that wake thousands of times a second,
    /// plus the in-kernel cost of its eBPF programs per program.
    Overhead(overhead::OverheadArgs),
    /// The seed's cgroup RT-bandwidth study (Tables 1 and 2) on this machine: expected vs
    /// achieved CPU share per group for each configuration, joule's admission verdict, and the
    /// cost of small periods.
    RtShare(rt_share::RtShareArgs),
    /// Default scheduling vs joule acting on the thermal stage, back to back with the same
    /// loads (fio random read/write, stress-ng CPU workers in a best-effort class, a labelled
    /// task measuring its wake-up latency): peak and mean temperature (sensor, else joule's RC
    /// model on measured utilisation, labelled so), throughput, latency, seconds per stage and
    /// the throughput cost of each stage. Needs root, fio and stress-ng.
    Thermal(thermal::ThermalArgs),
    /// Network QoS (issue 11) in two network namespaces joined by veth: the limiter's accuracy
    /// with iperf3 (TCP, UDP; achieved vs target, its CPU cost), a 1 ms SCHED_FIFO task's
    /// wake-up latency and deadline misses under a small-packet flood on its CPU (idle, flood,
    /// flood with joule's limiter), and the energy placement. Needs root and iperf3.
    NetQos(netqos::NetQosArgs),
    /// The latency probe `bench thermal` runs as its labelled task (internal).
    #[command(hide = true)]
    ThermalProbe(thermal::probe::ProbeArgs),
}

pub fn run(cmd: BenchCmd) -> anyhow::Result<()> {
    match cmd {
        BenchCmd::Overhead(a) => overhead::run(a),
        BenchCmd::RtShare(a) => rt_share::run(&a),
        BenchCmd::Thermal(a) => thermal::run(&a),
        BenchCmd::NetQos(a) => netqos::run(&a),
        BenchCmd::ThermalProbe(a) => thermal::probe::run(&a),
    }
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

/// A bench's arguments as clap parses `joule bench <name> <extra>`, for the unit tests.
#[cfg(test)]
pub fn parse_args<A: clap::Args>(name: &str, extra: &[&str]) -> A {
    #[derive(clap::Parser)]
    struct Cli<A: clap::Args> {
        #[command(flatten)]
        a: A,
    }
    <Cli<A> as clap::Parser>::parse_from(std::iter::once(name).chain(extra.iter().copied())).a
}
