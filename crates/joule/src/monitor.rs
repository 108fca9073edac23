//! `joule monitor`: what joule measures, live in the terminal or as JSON. It samples the
//! machine itself (no agent needed); with root it loads the eBPF programs privately (nothing
//! pinned) so run-queue latency and the in-kernel stage are real.

use crate::sense::{Bpf, BpfOff, Snapshotter};
use crate::ConfigArg;
use anyhow::Context;
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
}

pub fn run(a: MonitorArgs) -> anyhow::Result<()> {
    if a.list_metrics {
        return list_metrics(a.json);
    }
    let cfg = a.config.load()?;
    anyhow::ensure!((10..=600_000).contains(&a.interval_ms), crate::UsageError(format!("--interval-ms {} is outside 10..=600000", a.interval_ms)));
    // A user who is not root still gets a monitor (without eBPF, and it says so at the top);
    // as root, eBPF that was not turned off must load, or the command fails with the reason.
    let bpf = BpfOff::reason(a.no_bpf, &cfg, joule_core::testing::is_root()).map_or(Bpf::Private, Bpf::Off);
    let mut snapper = Snapshotter::new(&cfg, bpf).context("eBPF is on (pass --no-bpf to run without it)")?;
    let interval = Duration::from_millis(a.interval_ms);
    snapper.sample(); // primes counters and histograms
    if a.once {
        std::thread::sleep(interval);
        let s = snapper.sample();
        let text = if a.json { serde_json::to_string_pretty(&s)? } else { render_text(&s).join("\n") };
        return print_out(&text);
    }
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, stop.clone())?;
    }
    if a.json || !std::io::IsTerminal::is_terminal(&std::io::stdout()) {
        while !stop.load(Ordering::Relaxed) {
            std::thread::sleep(interval);
            let s = snapper.sample();
            let text = if a.json { serde_json::to_string(&s)? } else { render_text(&s).join("\n") + "\n" };
            print_out(&text)?;
        }
        return Ok(());
    }
    tui(&mut snapper, interval, &stop)
}

/// Writes a line to stdout; a reader that went away (`| head`) ends the command quietly.
fn print_out(text: &str) -> anyhow::Result<()> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    match writeln!(out, "{text}").and_then(|_| out.flush()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => std::process::exit(0),
        r => Ok(r?),
    }
}

fn tui(snapper: &mut Snapshotter, interval: Duration, stop: &AtomicBool) -> anyhow::Result<()> {
    use ratatui::crossterm::event::{self, Event, KeyCode};
    use ratatui::widgets::{Block, Paragraph};
    let mut term = ratatui::init();
    let result = (|| -> anyhow::Result<()> {
        let mut lines = vec!["sampling…".to_string()];
        let mut next = std::time::Instant::now();
        while !stop.load(Ordering::Relaxed) {
            if std::time::Instant::now() >= next {
                lines = render_text(&snapper.sample());
                next = std::time::Instant::now() + interval;
            }
            term.draw(|f| {
                let text = lines.join("\n");
                let block = Block::bordered().title(" joule monitor — q to quit ");
                f.render_widget(Paragraph::new(text).block(block), f.area());
            })?;
            if event::poll(Duration::from_millis(100))? {
                if let Event::Key(k) = event::read()? {
                    if matches!(k.code, KeyCode::Char('q') | KeyCode::Esc) {
                        break;
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
