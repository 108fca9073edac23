//! `joule monitor`: what joule measures, live in the terminal or as JSON. It samples the
//! machine itself (no agent needed); with root it loads the eBPF programs privately (nothing
//! pinned) so run-queue latency and the in-kernel stage are real.

use crate::snapshotter::{Bpf, BpfOff, Snapshotter};
use anyhow::Context;
use crate::ConfigArg;
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
    let cfg = a.config.load()?;
    anyhow::ensure!((10..=600_000).contains(&a.interval_ms), crate::UsageError(format!("--interval-ms {} is outside 10..=600000", a.interval_ms)));
    // A user who is not root still gets a monitor (without eBPF, and it says so at the top);
    // as root, eBPF that was not turned off must load, or the command fails with the reason.
    let bpf = if a.no_bpf {
        Bpf::Off(BpfOff::Flag)
    } else if !cfg.telemetry.bpf {
        Bpf::Off(BpfOff::Config)
    } else if !joule_core::testing::is_root() {
        Bpf::Off(BpfOff::NotRoot)
    } else {
        Bpf::Private
    };
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

fn bar(frac: f64, width: usize) -> String {
    let n = ((frac.clamp(0.0, 1.0) * width as f64).round()) as usize;
    format!("[{}{}]", "#".repeat(n), " ".repeat(width - n))
}

/// The human view of a snapshot, shared by `--once` and the live view.
pub fn render_text(s: &Snapshot) -> Vec<String> {
    let mut out = Vec::new();
    if !s.bpf.enabled {
        out.push(format!("eBPF  OFF ({}): no run-queue latency, stage computed in user space", s.bpf.off_reason));
    }
    out.push(format!("CPU   total {:5.1}%  (source: {})", s.cpu.total_utilization * 100.0, s.cpu.source));
    for (i, u) in s.cpu.utilization.iter().enumerate() {
        out.push(format!("  cpu{i:<3} {} {:5.1}%", bar(*u, 30), u * 100.0));
    }
    if let Some(p) = &s.psi {
        let f = |l: &Option<joule_core::snapshot::PsiLine>| l.as_ref().map(|l| format!("{:.2}%", l.some_avg10)).unwrap_or("-".into());
        out.push(format!("PSI   some avg10: cpu {}  io {}  memory {}", f(&p.cpu), f(&p.io), f(&p.memory)));
    }
    out.push(format!("POWER {:.2} W  (source: {})", s.power.watts, s.power.source));
    for d in &s.power.domains {
        out.push(format!("  {:<24} {:8.2} W  {:10.1} J  ({})", d.name, d.watts, d.energy_joules_total, d.source));
    }
    out.push(format!(
        "STAGE {}  from {:.1} °C ({}), computed by {}",
        s.stage.value, s.stage.temp_celsius, s.stage.temp_source, s.stage.computed_by.as_str()
    ));
    for z in &s.thermal.zones {
        out.push(format!("  {:<24} {:6.1} °C  {} ({})", z.name, z.temp_celsius, z.kind, z.source));
    }
    if let Some(m) = &s.thermal.model {
        out.push(format!("  {:<24} {:6.1} °C  ({})", "rc-model", m.temp_celsius, m.source));
    }
    if !s.frequency.is_empty() {
        let f: Vec<String> = s.frequency.iter().map(|f| format!("cpu{} {} MHz", f.cpu, f.cur_khz / 1000)).collect();
        out.push(format!("FREQ  {}", f.join("  ")));
    }
    if s.bpf.enabled {
        out.push("RUNQ  wake-up to run latency per cgroup (ebpf):".into());
    }
    // Cgroups without wake-ups in the interval are listed too (for their cumulative buckets).
    let mut rq: Vec<_> = s.runq_latency.iter().filter(|r| r.count > 0).collect();
    rq.sort_by(|a, b| b.p99_us.total_cmp(&a.p99_us));
    for r in rq.iter().take(8) {
        out.push(format!("  {:<40} n={:<7} p50 {:8.1} µs  p99 {:8.1} µs  max {:8.1} µs", r.cgroup, r.count, r.p50_us, r.p99_us, r.max_us));
    }
    if !s.task_wait.is_empty() {
        out.push(format!("WAIT  threads waiting longest for a CPU ({}):", s.task_wait[0].source));
        for t in &s.task_wait {
            out.push(format!("  tid {:>7} {:<16} {:8} µs", t.pid, t.comm, t.wait_us));
        }
    }
    for n in &s.notes {
        out.push(format!("note: {n}"));
    }
    out
}
