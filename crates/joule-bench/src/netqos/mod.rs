//! `joule-bench net-qos` (issue 11): in two network namespaces joined by a veth pair that the
//! bench creates, (1) the limiter's accuracy with iperf3 (TCP and UDP at several targets) and
//! its own CPU cost, (2) softirq starvation of a 1 ms SCHED_FIFO task by a small-packet flood,
//! idle / flood / flood with joule's limiter, (3) the energy placement (`placement/`, the
//! energy half). JSON `{limiter, softirq, placement}`, a plot, a table with ratios. Needs root
//! and iperf3; the limiter refuses anything but the bench's veth (JOULE_NET_TEST_GUARD).

pub mod limiter;
pub mod placement;
pub mod softirq;
pub mod topo;

use crate::report;
use anyhow::Context;
use joule_bpf::FlowMonitor;
use joule_core::cgroupfs::Layout;
use joule_core::effects::RealEffects;
use joule_core::journal::Journal;
use joule_core::netlimit::{self, HtbClass};
use std::path::PathBuf;
use topo::Topo;

#[derive(clap::Args, Debug)]
pub struct NetQosArgs {
    /// Write the results as JSON here.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Write an SVG plot here.
    #[arg(long)]
    pub plot: Option<PathBuf>,
    /// Sections to run, comma-separated: limiter, softirq, placement.
    #[arg(long, value_delimiter = ',', default_value = "limiter,softirq,placement")]
    pub only: Vec<String>,
    /// Limiter targets, Mbit/s (each run with TCP and with UDP).
    #[arg(long, value_delimiter = ',', default_value = "10,50,200")]
    pub targets_mbit: Vec<f64>,
    /// Seconds of each iperf3 run. Longer runs average out HTB's bursts; 6 runs of this.
    #[arg(long, default_value_t = 5)]
    pub seconds: u64,
    /// Seconds the RT task runs in each softirq mode.
    #[arg(long, default_value_t = 8.0)]
    pub rt_seconds: f64,
    /// The RT task's job length per 1 ms period (µs of spinning).
    #[arg(long, default_value_t = 200)]
    pub work_us: u64,
    /// The CPU of the RT task and of the flood's NET_RX softirq.
    #[arg(long, default_value_t = 1)]
    pub rt_cpu: usize,
    /// The limit put on the flood's sender in mode flood+limiter, Mbit/s.
    #[arg(long, default_value_t = 5.0)]
    pub flood_limit_mbit: f64,
    /// The cgroup filesystem root (the flow monitor attaches to its cgroup2 hierarchy).
    #[arg(long, default_value = "/sys/fs/cgroup")]
    pub cgroup_root: PathBuf,
    /// Placement: also decide on this machine's own energy model (cpufreq, cpu_capacity,
    /// debugfs EM, or the config's power model where those are missing), to show the policy on
    /// a homogeneous machine.
    #[arg(long)]
    pub host_model: bool,
    /// Placement: also decide on a board's energy model read from DIR, a sysfs root with its
    /// debugfs beneath (`DIR/devices/system/cpu`, `DIR/kernel/debug/energy_model`), by the same
    /// reader the agent uses with `[energy] model = "kernel"`: e.g. a board's fixture
    /// (`testdata/boards/rk3588/sys`) or a copy of a real board's trees. Repeat for several. The
    /// model is named after DIR (its parent when DIR is `sys`); each class's decision is printed
    /// beside the baseline's for it. A tree without the kernel's Energy Model gets
    /// `telemetry.power_model` powers, said in the model's notes.
    #[arg(long, value_name = "DIR")]
    pub model_root: Vec<PathBuf>,
    /// Placement: static (leakage) power of each XU4 cluster whenever it is busy, mW, as
    /// "A7,A15" (sensitivity; the kernel's EM and the shipped model have none). The policy sees
    /// it too, so decisions may change.
    #[arg(long, value_name = "MW,MW", value_delimiter = ',')]
    pub static_mw: Option<Vec<f64>>,
    /// Placement: power of the rest of the board, mW, added for both policies (sensitivity:
    /// changes no decision, only the ratios).
    #[arg(long, value_name = "MW", default_value_t = 0.0)]
    pub board_mw: f64,
}

/// The flow monitor, read as one snapshot of cumulative counters.
pub struct Monitor(FlowMonitor);

pub struct Reading {
    flows: Vec<(joule_bpf::FlowKey, joule_bpf::FlowCounters)>,
    softirq: Vec<joule_bpf::SoftirqTime>,
}

impl Monitor {
    pub fn read(&self) -> Reading {
        Reading { flows: self.0.flows(), softirq: self.0.softirq() }
    }
}

impl Reading {
    /// IP bytes received by sockets bound to `local` over `proto`.
    pub fn ingress_bytes(&self, proto: &str, local: &str) -> u64 {
        self.flows.iter().filter(|(k, _)| !k.egress && k.proto == proto && k.local.to_string() == local).map(|(_, c)| c.bytes).sum()
    }
    pub fn net_tx_ns(&self) -> u64 {
        self.softirq.iter().map(|s| s.net_tx_ns).sum()
    }
    pub fn net_rx_ns_on(&self, cpu: usize) -> u64 {
        self.softirq.iter().filter(|s| s.cpu == cpu).map(|s| s.net_rx_ns).sum()
    }
    pub fn net_tx_ns_on(&self, cpu: usize) -> u64 {
        self.softirq.iter().filter(|s| s.cpu == cpu).map(|s| s.net_tx_ns).sum()
    }
}

/// joule's limiter on the sender's veth, the whole interface at `rate_mbit` (HTB default
/// class), journalled in a directory of its own; `Drop` replays the journal.
pub struct Limit {
    journal: Journal,
    _dir: tempfile::TempDir,
}

impl Limit {
    pub fn install(topo: &Topo, rate_mbit: f64) -> anyhow::Result<Limit> {
        let dir = tempfile::tempdir()?;
        let j = Journal::open(dir.path())?;
        let ns = Topo::netns_path(&topo.ns_a);
        netlimit::install_htb(&RealEffects, &j, "netlimit", Some(&ns), &topo.if_a, 1, &[HtbClass { minor: 1, rate_mbit }])
            .with_context(|| format!("while putting the limiter on {}", topo.if_a))?;
        Ok(Limit { journal: j, _dir: dir })
    }
}

impl Drop for Limit {
    fn drop(&mut self) {
        if let Err(e) = self.journal.restore_all(&RealEffects) {
            tracing::warn!("removing the bench's limiter: {e}");
        }
    }
}

fn want(args: &NetQosArgs, section: &str) -> bool {
    args.only.iter().any(|s| s == section)
}

pub fn run(args: &NetQosArgs) -> anyhow::Result<()> {
    crate::check_bounds([
        (args.seconds >= 1 && args.seconds <= 60, "--seconds must be in 1..=60"),
        (args.rt_seconds >= 1.0 && args.rt_seconds <= 30.0, "--rt-seconds must be in 1..=30"),
        (args.work_us >= 10 && args.work_us <= 500, "--work-us must be in 10..=500 (the period is 1000 µs)"),
        (args.targets_mbit.iter().all(|t| *t >= 1.0 && *t <= 5000.0), "--targets-mbit must be in 1..=5000"),
        (args.only.iter().all(|s| ["limiter", "softirq", "placement"].contains(&s.as_str())), "--only takes limiter, softirq, placement"),
        (args.board_mw.is_finite() && args.board_mw >= 0.0, "--board-mw must be ≥ 0"),
        (args.static_mw.as_ref().is_none_or(|v| v.len() == 2 && v.iter().all(|x| x.is_finite() && *x >= 0.0)), "--static-mw takes two values ≥ 0, A7,A15"),
    ])?;
    let mut out = serde_json::json!({ "limiter": [], "softirq": [], "placement": [] });
    // First, so that a section that cannot run fails before minutes of measuring.
    let placement_rows = if want(args, "placement") { Some(placement_section(args, &mut out)?) } else { None };
    if want(args, "limiter") || want(args, "softirq") {
        anyhow::ensure!(joule_core::testing::is_root(), "the limiter and softirq sections need root (netns, qdiscs, eBPF, SCHED_FIFO)");
        // SAFETY: set before any thread of ours reads the environment concurrently.
        unsafe { std::env::set_var(netlimit::TEST_GUARD_ENV, "1") };
        let layout = Layout::detect(&args.cgroup_root, &RealEffects);
        let cg2 = layout.unified.map(|u| u.dir).context("no cgroup2 hierarchy under the cgroup root: the flow monitor needs one")?;
        let mon = Monitor(FlowMonitor::load(&cg2).context("while loading the flow monitor")?);
        let mut topo = Topo::create()?;
        let mut server = Topo::exec(&topo.ns_b, "iperf3");
        server.args(["-s", "-A", "0"]);
        topo.spawn(server)?;
        std::thread::sleep(std::time::Duration::from_millis(500));
        if want(args, "limiter") {
            out["limiter"] = limiter::run(args, &topo, &mon)?.into();
        }
        if want(args, "softirq") {
            out["softirq"] = softirq::run(args, &topo, &mon)?.into();
        }
    }
    print(&out);
    if let Some(rows) = &placement_rows {
        placement::print(rows);
        for root in &args.model_root {
            println!();
            placement::decisions_table(rows, &model_name(root));
        }
    }
    if let Some(p) = &args.json {
        report::write_json(p, &out)?;
    }
    if let Some(p) = &args.plot {
        let network = want(args, "limiter") || want(args, "softirq");
        if network {
            plot(p, &out)?;
        }
        if let Some(rows) = &placement_rows {
            // Beside the network plot when there is one: `out.svg` and `out-placement.svg`.
            let path = if network { p.with_file_name(format!("{}-placement.svg", p.file_stem().unwrap_or_default().to_string_lossy())) } else { p.clone() };
            placement::plot(rows, &path)?;
        }
    }
    Ok(())
}

/// The placement section (the energy half, `placement/`): joule and the EAS baseline on the XU4
/// model (and this machine's with `--host-model`, boards' with `--model-root`); the rows go to
/// `placement`, the ratios beside the seed's, the assumptions and the models to `placement_*`.
fn placement_section(args: &NetQosArgs, out: &mut serde_json::Value) -> anyhow::Result<Vec<placement::PlacementRow>> {
    let mut opts = placement::PlacementOpts { board_mw: args.board_mw, ..placement::PlacementOpts::default() };
    if let Some(s) = &args.static_mw {
        for (d, mw) in opts.models[0].1.domains.iter_mut().zip(s) {
            d.static_mw = *mw;
        }
        opts.models[0].1.notes.push(format!("static power per busy cluster set by --static-mw: A7 {} mW, A15 {} mW (assumption)", s[0], s[1]));
    }
    if args.host_model {
        let roots = joule_core::energy::KernelRoots::under(&joule_core::config::Config::default().telemetry.sysfs_root);
        opts.models.push(("this-machine".into(), joule_core::energy::read_kernel(&RealEffects, &roots, cfg_power_mw())?));
    }
    for root in &args.model_root {
        let roots = joule_core::energy::KernelRoots::under(root);
        let m = joule_core::energy::read_kernel(&RealEffects, &roots, cfg_power_mw())
            .with_context(|| format!("while reading the energy model under --model-root {}", root.display()))?;
        opts.models.push((model_name(root), m));
    }
    let rows = placement::run(&opts)?;
    let vs: Vec<serde_json::Value> = placement::versus_seed(&rows, "odroid-xu4")
        .into_iter()
        .map(|(r, s)| serde_json::json!({ "group": r.group, "limits": r.limits, "joule_over_eas_uncapped": r.uncapped, "joule_over_eas": r.capped, "joule_qos_met": r.joule_qos_met, "seed": s, "source": "model" }))
        .collect();
    let models: Vec<&joule_core::energy::EnergyModel> = opts.models.iter().map(|m| &m.1).collect();
    out["placement"] = serde_json::to_value(&rows)?;
    out["placement_vs_seed"] = vs.into();
    out["placement_assumptions"] = serde_json::to_value(placement::assumptions(&opts))?;
    out["placement_models"] = serde_json::to_value(models)?;
    Ok(rows)
}

/// The default config's power per busy CPU, mW: what a kernel model without an EM is priced at.
fn cfg_power_mw() -> f64 {
    joule_core::config::Config::default().telemetry.power_model.cpu_dynamic_watts * 1000.0
}

/// A `--model-root` model's name: the directory's, or its parent's when it is called `sys`.
fn model_name(root: &std::path::Path) -> String {
    let name = |p: &std::path::Path| p.file_name().map(|n| n.to_string_lossy().into_owned());
    let own = name(root).unwrap_or_else(|| root.display().to_string());
    if own == "sys" {
        root.parent().and_then(name).unwrap_or(own)
    } else {
        own
    }
}

fn cell(v: &serde_json::Value) -> String {
    match v {
        serde_json::Value::String(s) => s.clone(),
        serde_json::Value::Null => "-".into(),
        other => other.to_string(),
    }
}

fn print(out: &serde_json::Value) {
    let table = |section: &str, cols: &[&str]| {
        let rows: Vec<Vec<String>> = out[section].as_array().into_iter().flatten().map(|r| cols.iter().map(|c| cell(&r[*c])).collect()).collect();
        if !rows.is_empty() {
            report::print_table(cols, &rows);
        }
    };
    table("limiter", &["proto", "target_mbit", "achieved_mbit", "ratio", "iperf3_goodput_mbit", "cpu_pct"]);
    table("softirq", &["mode", "p99_us", "max_us", "misses", "softirq_cpu_pct", "net_rx_pct", "net_tx_pct"]);
    if let Some(rows) = out["softirq"].as_array() {
        let idle = rows.iter().find(|r| r["mode"] == "idle").and_then(|r| r["p99_us"].as_f64()).unwrap_or(0.0);
        for r in rows {
            if idle > 0.0 {
                println!("{}: p99 {:.2}x idle", cell(&r["mode"]), r["p99_us"].as_f64().unwrap_or(0.0) / idle);
            }
        }
    }
}

/// Left: achieved/target per limiter run; right: p99 wake-up latency per softirq mode.
fn plot(path: &std::path::Path, out: &serde_json::Value) -> anyhow::Result<()> {
    let mut groups: Vec<(String, Vec<f64>)> = Vec::new();
    for r in out["limiter"].as_array().into_iter().flatten() {
        groups.push((format!("{} {} Mbit/s: achieved/target", cell(&r["proto"]), cell(&r["target_mbit"])), vec![r["ratio"].as_f64().unwrap_or(0.0)]));
    }
    let idle = out["softirq"].as_array().into_iter().flatten().find(|r| r["mode"] == "idle").and_then(|r| r["p99_us"].as_f64()).unwrap_or(0.0);
    for r in out["softirq"].as_array().into_iter().flatten() {
        if idle > 0.0 {
            groups.push((format!("{}: p99/idle p99", cell(&r["mode"])), vec![r["p99_us"].as_f64().unwrap_or(0.0) / idle]));
        }
    }
    report::bar_plot(path, "joule-bench net-qos: limiter accuracy and RT wake-up latency (ratios)", "ratio", &groups)
}
