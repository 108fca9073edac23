//! `joule monitor`: what joule measures, live in the terminal or as JSON. In a terminal it is
//! a dashboard (dashboard.rs) of the running agent, read over its socket, when one answers;
//! otherwise, and for `--once`/`--json`, it samples the machine itself (no agent needed); with
//! root it loads the eBPF programs privately (nothing pinned) so run-queue latency and the
//! in-kernel stage are real. A socket that is not root's agent's is refused, not shown
//! (`joule_core::view::client`). Every text it prints escapes control characters: thread and cgroup names
//! are their users' choice.

use crate::backends::Ebpf;
use crate::sense::{Bpf, BpfOff, Snapshotter};
use crate::ConfigArg;
use joule_core::view::{AgentStats, Budget, Limits, View, VERSION};
use joule_core::Snapshot;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

#[derive(clap::Args)]
pub struct MonitorArgs {
    #[command(flatten)]
    pub config: ConfigArg,
    /// Take one snapshot (two samples `--interval-ms` apart, so rates are real), print, exit.
    #[arg(long)]
    pub once: bool,
    /// JSON output: one object (with --once) or one object per line.
    #[arg(long)]
    pub json: bool,
    /// Print every value joule publishes — metric name (with its unit), type, where it is in
    /// the JSON, what it means — and exit.
    #[arg(long)]
    pub list_metrics: bool,
    /// Time between samples. Shorter refreshes faster; rates over short windows are noisier.
    #[arg(long, default_value_t = 1000, value_name = "MS")]
    pub interval_ms: u64,
    /// Do not load eBPF programs (no run-queue latency; stage computed in user space). Without
    /// it, a root user whose eBPF cannot load gets an error with the reason; a non-root user
    /// gets the view without eBPF, marked "eBPF OFF (not_root)".
    #[arg(long)]
    pub no_bpf: bool,
    /// The running agent's journal directory, whose socket the live view reads (default: the
    /// config's `agent.journal_dir`). With no agent answering there, the view samples the
    /// machine itself and says so.
    #[arg(long, value_name = "DIR")]
    pub journal_dir: Option<std::path::PathBuf>,
}

pub fn run(a: MonitorArgs) -> anyhow::Result<()> {
    if a.list_metrics {
        return list_metrics(a.json);
    }
    let cfg = a.config.load()?;
    anyhow::ensure!((10..=600_000).contains(&a.interval_ms), crate::UsageError(format!("--interval-ms {} is outside 10..=600000", a.interval_ms)));
    let interactive = !a.once && !a.json && std::io::IsTerminal::is_terminal(&std::io::stdout());
    let dir = a.journal_dir.clone().unwrap_or_else(|| cfg.agent.journal_dir.clone());
    if interactive && agent_answers(&dir)? {
        // The running agent's view: no sampling (and no eBPF) of our own.
        let source = format!("the running agent ({})", dir.join(crate::agent::socket::SOCKET).display());
        return tui(source, Duration::from_millis(a.interval_ms), &*stop_on_signals()?, || {
            let view = joule_core::view::client::read(&dir).ok()?;
            let lines = render_text(&view.snapshot);
            Some((view, lines))
        });
    }
    // A user who is not root still gets a monitor (without eBPF, and it says so at the top);
    // as root, eBPF loads as the agent's would: where the kernel allows it under "auto", or the
    // command fails with the reason under `telemetry.bpf = true`.
    let root = joule_core::testing::is_root();
    let facts = crate::backends::Facts::read(&crate::backends::Roots::of(&cfg.telemetry));
    let bpf = match crate::backends::ebpf(&cfg, a.no_bpf, root, &facts) {
        Ebpf::On => Bpf::Private,
        Ebpf::Off(off) => Bpf::Off(off),
        Ebpf::Refused(_) if !root => Bpf::Off(BpfOff::NotRoot),
        Ebpf::Refused(why) => anyhow::bail!(crate::UsageError(why)),
    };
    let mut snapper = Snapshotter::load(&cfg, bpf)?;
    let interval = Duration::from_millis(a.interval_ms);
    snapper.sample(); // primes counters and histograms
    if a.once {
        std::thread::sleep(interval);
        let s = snapper.sample();
        let text = if a.json { joule_core::text::to_json(&s, true)? } else { render_text(&s).join("\n") };
        return print_out(&text);
    }
    let stop = stop_on_signals()?;
    if !interactive {
        while !stop.load(Ordering::Relaxed) {
            std::thread::sleep(interval);
            let s = snapper.sample();
            let text = if a.json { joule_core::text::to_json(&s, false)? } else { render_text(&s).join("\n") + "\n" };
            print_out(&text)?;
        }
        return Ok(());
    }
    let choice = snapper.sensor_choice().clone();
    let budget = Budget {
        thresholds_celsius: choice.thresholds_celsius.clone(),
        thresholds_from: choice.thresholds_from.clone(),
        sensors: choice.used().map(String::from).collect(),
        power_thresholds_watts: cfg.thermal.power_thresholds_watts.clone(),
        classes: cfg.classes.clone(),
        started_unix_ms: joule_core::clock::now_ms(),
        pid: std::process::id(),
        ..Budget::default()
    };
    let source = format!("this monitor's own sampling: no agent answers in {} (decisions need one)", dir.display());
    tui(source, interval, &stop, move || {
        let snap = snapper.sample();
        let lines = render_text(&snap);
        let limits = Limits { limit_celsius: Some(choice.limit_celsius), limit_from: choice.limit_from, ..Limits::default() };
        // This monitor's own view: no plan, no actuators, and the version of this build.
        let agent = AgentStats { limits: Some(limits), ..AgentStats::default() };
        let view = View { version: Some(VERSION), budget: budget.clone(), snapshot: snap, agent, ..View::default() };
        Some((view, lines))
    })
}

/// Whether an agent answers in `dir`: none is the monitor's own sampling; one that is not
/// root's agent (another user's directory or process) is an error, never a view.
fn agent_answers(dir: &std::path::Path) -> anyhow::Result<bool> {
    match joule_core::view::client::read(dir) {
        Ok(_) => Ok(true),
        Err(joule_core::view::client::ClientError::NoAgent(_)) => Ok(false),
        Err(e) => Err(e.into()),
    }
}

fn stop_on_signals() -> anyhow::Result<Arc<AtomicBool>> {
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, stop.clone())?;
    }
    Ok(stop)
}

/// Writes a line to stdout, every control character in it but the newlines escaped (a name
/// the text views missed must not reach the terminal either); a reader that went away (`|
/// head`) ends the command quietly.
fn print_out(text: &str) -> anyhow::Result<()> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    match writeln!(out, "{}", joule_core::text::escape_lines(text)).and_then(|_| out.flush()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => std::process::exit(0),
        r => Ok(r?),
    }
}

/// The live dashboard (dashboard.rs), refreshed every `interval` from `next` (None: the
/// agent went away; the last screen stays and says so).
fn tui(source: String, interval: Duration, stop: &AtomicBool, mut next: impl FnMut() -> Option<(View, Vec<String>)>) -> anyhow::Result<()> {
    use ratatui::crossterm::event::{self, Event, KeyCode};
    let mut term = ratatui::init();
    let mut dash = crate::dashboard::Dashboard::new(source.clone());
    let result = (|| -> anyhow::Result<()> {
        let mut due = std::time::Instant::now();
        while !stop.load(Ordering::Relaxed) {
            if std::time::Instant::now() >= due {
                match next() {
                    Some((view, lines)) => {
                        dash.source.clone_from(&source);
                        dash.update(&view, lines, joule_core::clock::now_ms());
                    }
                    None => dash.source = format!("{source}: no answer now (the agent stopped?)"),
                }
                due = std::time::Instant::now() + interval;
            }
            term.draw(|f| dash.draw(f))?;
            if event::poll(Duration::from_millis(100))? {
                if let Event::Key(k) = event::read()? {
                    match k.code {
                        KeyCode::Char('q') | KeyCode::Esc => break,
                        KeyCode::Char(c) => dash.screen = crate::dashboard::Screen::for_key(c).unwrap_or(dash.screen),
                        _ => {}
                    }
                }
            }
        }
        Ok(())
    })();
    ratatui::restore();
    result
}

/// The human view of a snapshot, shared by `--once` and the live view: the metric table's
/// values, rendered by textview.rs.
pub fn render_text(s: &Snapshot) -> Vec<String> {
    crate::textview::render(&crate::metrics::families(s, &crate::metrics::AgentStats::default()), s)
}

fn list_metrics(json: bool) -> anyhow::Result<()> {
    let defs = crate::metrics::catalogue();
    if json {
        let rows: Vec<_> = defs
            .iter()
            .map(|d| serde_json::json!({ "name": d.name, "type": format!("{:?}", d.kind).to_lowercase(), "unit": format!("{:?}", d.unit()).to_lowercase(), "json": d.json, "monitor": d.title, "help": d.help }))
            .collect();
        return print_out(&serde_json::to_string_pretty(&rows)?);
    }
    let mut text = format!("{:<42} {:<9} {:<8} {:<20} help\n", "metric", "type", "unit", "json");
    for d in defs {
        let json = if d.json.is_empty() { "-" } else { d.json };
        text +=
            &format!("{:<42} {:<9} {:<8} {:<20} {}\n", d.name, format!("{:?}", d.kind).to_lowercase(), format!("{:?}", d.unit()).to_lowercase(), json, d.help);
    }
    print_out(text.trim_end())
}
