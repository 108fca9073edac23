//! `joule-bench nap`: nginx always awake (the baseline) vs nginx under joule nap, alternating
//! in one run. nginx runs in its own cgroup (the agent's `[[class]]`, matched by pid), reached
//! through a veth pair from a client in a network namespace the bench creates. Requests are
//! spaced so each finds the server napping (the bench waits for the nap, then a random moment up
//! to idle_ms, before sending), then bursts fire at random moments around the transition. Reported: sent/answered/failed,
//! latency awake vs napped, time to enter and leave a nap, residency, wake-ups per second from
//! the kernel (/proc/interrupts, the service's and the agent's threads' context switches) over
//! quiet windows — awake (the agent running, nap armed but not reached), napped, and the
//! machine's floor (neither nginx nor the agent running, before and after) — and the power
//! model's estimate, labelled `model`.

mod setup;

use super::report;
use crate::UsageError;
use anyhow::Context;
use joule_core::view::NapView;
use setup::{Agent, Netns, Nginx};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

#[derive(clap::Args, Debug)]
pub struct NapArgs {
    /// The nap's idle threshold. Shorter naps sooner; each spaced request waits for the nap.
    #[arg(long, default_value_t = 200)]
    pub idle_ms: u64,
    /// Rounds; each runs the baseline then the nap mode.
    #[arg(long, default_value_t = 2)]
    pub rounds: usize,
    /// Spaced requests per mode and round.
    #[arg(long, default_value_t = 70)]
    pub spaced: usize,
    /// Bursts per mode and round, each at a random moment 0..2×idle_ms after the previous
    /// request (before, during or after the nap transition).
    #[arg(long, default_value_t = 8)]
    pub bursts: usize,
    #[arg(long, default_value_t = 16)]
    pub burst_size: usize,
    /// Seconds of quiet per mode and round over which wake-ups per second are counted.
    #[arg(long, default_value_t = 3.0)]
    pub window_s: f64,
    /// nginx's `timer_resolution` (its workers' periodic timer while awake), standing in for
    /// the housekeeping timers a service keeps while idle; 0 leaves nginx's default (none).
    #[arg(long, default_value_t = 100)]
    pub timer_resolution_ms: u64,
    /// Machine nap: CPUs to take offline while napping (off by default: this machine's CPUs
    /// are shared with other work).
    #[arg(long, value_delimiter = ',')]
    pub offline_cpus: Vec<u32>,
    #[arg(long, value_name = "PATH")]
    pub json: Option<PathBuf>,
    /// SVG: latency of every request, awake vs napped, spaced and bursts.
    #[arg(long, value_name = "PATH")]
    pub plot: Option<PathBuf>,
}

const PORT: u16 = 18080;
/// The awake window's agent: nap armed with a threshold its 3 s window never reaches.
const AWAKE_IDLE_MS: u64 = 3_600_000;

#[derive(Default)]
struct Mode {
    spaced_us: Vec<f64>,
    burst_us: Vec<f64>,
    failed: Vec<String>,
    sent: usize,
    windows: Vec<Window>,
}

fn pct(v: &[f64], p: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    s[((p / 100.0) * (s.len() - 1) as f64).round() as usize]
}

fn lat_json(v: &[f64]) -> serde_json::Value {
    let ms = |x: f64| (x / 1e3 * 1000.0).round() / 1000.0;
    serde_json::json!({ "n": v.len(), "p50_ms": ms(pct(v, 50.0)), "p99_ms": ms(pct(v, 99.0)), "max_ms": ms(pct(v, 100.0)) })
}

/// Runs `f` on a thread inside the namespace (its sockets are the client's).
fn in_ns<T: Send>(ns: &Netns, f: impl FnOnce() -> T + Send) -> anyhow::Result<T> {
    std::thread::scope(|s| {
        s.spawn(|| {
            ns.enter_this_thread().context("while entering the client's network namespace")?;
            Ok(f())
        })
        .join()
        .map_err(|_| anyhow::anyhow!("the client thread panicked"))?
    })
}

/// A fixed pseudo-random sequence (the same schedule every run).
struct Lcg(u64);
impl Lcg {
    fn below(&mut self, n: u64) -> u64 {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (self.0 >> 33) % n.max(1)
    }
}

fn record(m: &mut Mode, r: Result<Duration, String>, spaced: bool) {
    m.sent += 1;
    match r {
        Ok(d) if spaced => m.spaced_us.push(d.as_secs_f64() * 1e6),
        Ok(d) => m.burst_us.push(d.as_secs_f64() * 1e6),
        Err(e) => m.failed.push(e),
    }
}

fn burst(ns: &Netns, addr: SocketAddr, n: usize) -> anyhow::Result<Vec<Result<Duration, String>>> {
    std::thread::scope(|s| {
        let hs: Vec<_> = (0..n)
            .map(|_| {
                s.spawn(|| {
                    ns.enter_this_thread().map_err(|e| e.to_string())?;
                    setup::get(addr, Duration::from_secs(5))
                })
            })
            .collect();
        Ok(hs.into_iter().map(|h| h.join().unwrap_or_else(|_| Err("client thread panicked".into()))).collect())
    })
}

/// One quiet window's counts, per second (the kernel's: /proc/interrupts, /proc/PID/status).
#[derive(Debug, Clone, Copy, serde::Serialize)]
struct Window {
    /// Local timer interrupts, all CPUs.
    timer_loc: f64,
    /// Every interrupt, all CPUs.
    interrupts: f64,
    /// Context switches of nginx's master and worker.
    service: f64,
    /// Context switches of every thread of the agent (0 when none runs).
    joule: f64,
    /// Busy share of the whole machine.
    busy: f64,
    seconds: f64,
}

/// Counts wake-ups over `secs` of quiet: the machine's, the service's (`service` pids) and
/// joule's (every thread of `agent`).
fn window(service: &[u32], agent: Option<u32>, secs: f64) -> Window {
    let (l0, a0) = setup::interrupts();
    let c0 = setup::ctx_switches(service);
    let j0 = agent.map_or(0, setup::thread_ctx_switches);
    let (t0, i0) = setup::cpu_times();
    let start = Instant::now();
    std::thread::sleep(Duration::from_secs_f64(secs));
    let dt = start.elapsed().as_secs_f64();
    let (l1, a1) = setup::interrupts();
    let c1 = setup::ctx_switches(service);
    let j1 = agent.map_or(0, setup::thread_ctx_switches);
    let (t1, i1) = setup::cpu_times();
    Window {
        timer_loc: (l1 - l0) as f64 / dt,
        interrupts: (a1 - a0) as f64 / dt,
        service: c1.saturating_sub(c0) as f64 / dt,
        joule: j1.saturating_sub(j0) as f64 / dt,
        busy: 1.0 - (i1.saturating_sub(i0)) as f64 / (t1.saturating_sub(t0)).max(1) as f64,
        seconds: dt,
    }
}

/// Scrapes per [`scrape_cost`] round, and the pause between two.
const SCRAPES: usize = 10;
const SCRAPE_EVERY: Duration = Duration::from_millis(200);

/// Scrapes the napped agent's /metrics [`SCRAPES`] times and counts what that woke: joule's
/// context switches per scrape beyond `napped_joule_per_s`, the service's, and whether the nap
/// (`nap_before`: napping, with this nap number) held through it.
fn scrape_cost(agent: &Agent, addr: SocketAddr, service: &[u32], napped_joule_per_s: f64, nap_before: Option<u64>) -> serde_json::Value {
    let (j0, c0, t0) = (setup::thread_ctx_switches(agent.pid()), setup::ctx_switches(service), Instant::now());
    let mut bytes = 0;
    let mut failed = 0;
    for _ in 0..SCRAPES {
        match setup::scrape(addr) {
            Ok(n) => bytes = n,
            Err(_) => failed += 1,
        }
        std::thread::sleep(SCRAPE_EVERY);
    }
    let dt = t0.elapsed().as_secs_f64();
    let joule = setup::thread_ctx_switches(agent.pid()).saturating_sub(j0) as f64;
    let held = nap_before.is_some() && agent.status().filter(|s| s.status.napping).map(|s| s.status.naps_total) == nap_before;
    serde_json::json!({
        "scrapes": SCRAPES, "failed": failed, "bytes": bytes,
        "joule_wakeups_per_scrape": ((joule - napped_joule_per_s * dt) / SCRAPES as f64 * 10.0).round() / 10.0,
        "service_wakeups": setup::ctx_switches(service).saturating_sub(c0),
        "nap_held": held,
    })
}

/// Median and range of one count over windows.
fn spread(ws: &[Window], f: fn(&Window) -> f64) -> serde_json::Value {
    let v: Vec<f64> = ws.iter().map(f).collect();
    let r = |x: f64| (x * 10.0).round() / 10.0;
    serde_json::json!({ "median": r(report::median(&v)), "min": r(v.iter().copied().fold(f64::INFINITY, f64::min)), "max": r(v.iter().copied().fold(f64::NEG_INFINITY, f64::max)) })
}

pub fn run(a: &NapArgs) -> anyhow::Result<()> {
    super::check_bounds([
        (joule_core::testing::is_root(), "joule-bench nap needs root (network namespace, freezer cgroup, eBPF)".to_string()),
        ((100..=5000).contains(&a.idle_ms), "--idle-ms must be in 100..=5000".into()),
        (a.rounds >= 1 && a.spaced >= 1, "--rounds and --spaced must be at least 1".into()),
        (a.window_s > 0.0, "--window-s must be > 0".into()),
    ])?;
    let nginx_bin = setup::find_nginx()
        .ok_or_else(|| UsageError("no nginx: run scripts/install-deps.sh (it unpacks nginx into /var/cache/joule-tools/bin) or set JOULE_NGINX".into()))?;
    let load_before = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let dir = tempfile::tempdir()?;
    let ns = Netns::create().context("while creating the client's network namespace")?;
    let addr: SocketAddr = format!("{}:{PORT}", ns.host_ip).parse()?;
    // The machine's own floor: neither the service nor joule running.
    eprintln!("floor: {} s with neither nginx nor joule running", a.window_s);
    let mut floor = vec![window(&[], None, a.window_s)];
    let nginx = Nginx::start(&nginx_bin, dir.path(), addr, a.timer_resolution_ms)?;
    let gap = Duration::from_millis(a.idle_ms + 150);
    let mut rng = Lcg(0x2545_F491_4F6C_DD1D);
    let (mut awake, mut napped) = (Mode::default(), Mode::default());
    let (mut enter_us, mut leave_us, mut found_napping) = (Vec::new(), Vec::new(), 0usize);
    let mut residency = (0.0, 0.0);
    let mut window_napped = Vec::new();
    let mut scrapes: Vec<serde_json::Value> = Vec::new();
    let started = Instant::now();
    for round in 0..a.rounds {
        eprintln!("round {}/{}: awake", round + 1, a.rounds);
        for _ in 0..a.spaced {
            std::thread::sleep(gap);
            record(&mut awake, in_ns(&ns, || setup::get(addr, Duration::from_secs(5)))?, true);
        }
        for _ in 0..a.bursts {
            std::thread::sleep(Duration::from_millis(rng.below(2 * a.idle_ms)));
            burst(&ns, addr, a.burst_size)?.into_iter().for_each(|r| record(&mut awake, r, false));
        }
        // Awake with joule running: the same agent, nap armed with a threshold the window
        // never reaches, so the agent's own wake-ups awake are counted like napped ones.
        let awake_agent = Agent::start(&dir.path().join(format!("agent-awake-{round}")), &nginx.pids(), PORT, AWAKE_IDLE_MS, &[])?;
        awake.windows.push(window(&nginx.pids(), Some(awake_agent.pid()), a.window_s));
        awake_agent.stop()?;

        eprintln!("round {}/{}: nap (idle {} ms)", round + 1, a.rounds, a.idle_ms);
        let agent_dir = dir.path().join(format!("agent-{round}"));
        std::fs::create_dir_all(&agent_dir)?;
        let agent = Agent::start(&agent_dir, &nginx.pids(), PORT, a.idle_ms, &a.offline_cpus)?;
        let t_mode = Instant::now();
        let mut naps_seen = 0;
        for _ in 0..a.spaced {
            // Each request finds the server napping: wait for the nap (bounded), then send.
            found_napping += usize::from(agent.wait_napping(gap * 4));
            // Then a random moment within the nap (0..idle_ms in): requests do not arrive the
            // instant a nap begins, and the nap's residency is measured over real napping.
            std::thread::sleep(Duration::from_millis(rng.below(a.idle_ms)));
            if let Some(st) = agent.status() {
                if st.status.naps_total > naps_seen {
                    naps_seen = st.status.naps_total;
                    enter_us.push(st.status.last_enter_us as f64);
                }
            }
            let reason = format!("tcp:{PORT}");
            let wakes = |s: &NapView| s.status.wakes_total.get(&reason).copied().unwrap_or(0);
            let before = agent.status().map(|s| wakes(&s)).unwrap_or(0);
            let r = in_ns(&ns, || setup::get(addr, Duration::from_secs(5)))?;
            record(&mut napped, r, true);
            // Wait (bounded) for this request's wake in the status before reading its leave
            // time and before waiting for the next nap (a status from before the wake would
            // still say napping).
            let deadline = Instant::now() + Duration::from_secs(1);
            while Instant::now() < deadline {
                match agent.status() {
                    Some(s) if wakes(&s) > before => {
                        leave_us.extend(s.status.last_wake.as_ref().map(|w| w.leave_us as f64));
                        break;
                    }
                    _ => std::thread::sleep(Duration::from_millis(1)),
                }
            }
        }
        for _ in 0..a.bursts {
            std::thread::sleep(Duration::from_millis(rng.below(2 * a.idle_ms)));
            burst(&ns, addr, a.burst_size)?.into_iter().for_each(|r| record(&mut napped, r, false));
        }
        agent.wait_napping(gap * 4);
        // Whether one nap covered the whole quiet window (napping at both ends, no nap begun
        // in between): a window the nap did not cover measures an awake server.
        let nap_no = |st: Option<NapView>| st.filter(|s| s.status.napping).map(|s| s.status.naps_total);
        let n0 = nap_no(agent.status());
        let w = window(&nginx.pids(), Some(agent.pid()), a.window_s);
        window_napped.push(n0.is_some() && n0 == nap_no(agent.status()));
        napped.windows.push(w);
        // What a Prometheus scrape costs while napped: joule's wake-ups per scrape above its
        // napped rate, the service's (none, when the nap holds) and whether the nap held.
        if let Some(addr) = agent.metrics_addr() {
            scrapes.push(scrape_cost(&agent, addr, &nginx.pids(), w.joule, nap_no(agent.status())));
        }
        let st = agent.status().unwrap_or_default();
        residency.0 += st.status.residency_seconds;
        residency.1 += t_mode.elapsed().as_secs_f64();
        agent.stop()?;
    }
    let load_after = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    drop(nginx);
    std::thread::sleep(Duration::from_millis(300));
    floor.push(window(&[], None, a.window_s));
    drop(ns);

    let ncpu = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1) as f64;
    let pm = joule_core::config::PowerModelConfig::default();
    // Rates over all of a mode's windows (time-weighted), and the power model on their busy share.
    let rates = |ws: &[Window]| {
        let secs: f64 = ws.iter().map(|w| w.seconds).sum::<f64>().max(1e-9);
        let avg = |f: fn(&Window) -> f64| ws.iter().map(|w| f(w) * w.seconds).sum::<f64>() / secs;
        let busy = avg(|w| w.busy);
        (avg(|w| w.timer_loc), avg(|w| w.interrupts), avg(|w| w.service), busy, pm.idle_watts + busy * ncpu * pm.cpu_dynamic_watts, avg(|w| w.joule))
    };
    let (ra, rn, rf) = (rates(&awake.windows), rates(&napped.windows), rates(&floor));
    let sent = awake.sent + napped.sent;
    let failed = awake.failed.len() + napped.failed.len();
    let d = |p: f64| (pct(&napped.spaced_us, p) - pct(&awake.spaced_us, p)) / 1e3;
    // JSON has no infinity: a ratio over zero napped wake-ups is null (the counts say why).
    let ratio = |x: f64, y: f64| if y > 0.0 { Some(x / y) } else { None };
    let show = |r: Option<f64>| r.map_or("∞ (none napped)".to_string(), |r| format!("ratio {r:.2}"));
    let out = serde_json::json!({
        "sent": sent,
        "answered": sent - failed,
        "failed": failed,
        "failures": awake.failed.iter().chain(&napped.failed).take(20).collect::<Vec<_>>(),
        "awake": lat_json(&awake.spaced_us),
        "napped": lat_json(&napped.spaced_us),
        "added_ms": { "p50": d(50.0), "p99": d(99.0), "max": d(100.0) },
        "bursts": { "awake": lat_json(&awake.burst_us), "napped": lat_json(&napped.burst_us), "size": a.burst_size },
        "spaced_found_napping": found_napping,
        "spaced_samples_ms": {
            "awake": awake.spaced_us.iter().map(|x| (x / 1e3 * 1000.0).round() / 1000.0).collect::<Vec<f64>>(),
            "napped": napped.spaced_us.iter().map(|x| (x / 1e3 * 1000.0).round() / 1000.0).collect::<Vec<f64>>(),
        },
        "spaced_per_mode": a.spaced * a.rounds,
        "enter_ms": { "p50": pct(&enter_us, 50.0) / 1e3, "max": pct(&enter_us, 100.0) / 1e3, "n": enter_us.len(), "what": "arm to frozen (the actuator's last_enter_us)" },
        "leave_ms": { "p50": pct(&leave_us, 50.0) / 1e3, "max": pct(&leave_us, 100.0) / 1e3, "n": leave_us.len(), "what": "SYN seen in the kernel (eBPF timestamp) to thawed" },
        "residency_ratio": residency.0 / residency.1.max(1e-9),
        "napped_window_covered": window_napped,
        "scrape_while_napped": { "rounds": scrapes, "source": "kernel: the agent's threads' and the service's context switches across 10 scrapes of /metrics 200 ms apart, napped; joule's beyond its napped rate" },
        "wakeups_per_s": {
            "awake": { "timer_loc": ra.0, "interrupts": ra.1, "service_context_switches": ra.2, "joule": ra.5 },
            "napped": { "timer_loc": rn.0, "interrupts": rn.1, "service_context_switches": rn.2, "joule": rn.5 },
            "floor": { "timer_loc": rf.0, "interrupts": rf.1, "service_context_switches": 0.0, "joule": 0.0 },
            "ratio_awake_to_napped": { "timer_loc": ratio(ra.0, rn.0), "service_context_switches": ratio(ra.2, rn.2), "joule": ratio(ra.5, rn.5) },
            "napped_over_floor": { "timer_loc": rn.0 - rf.0, "interrupts": rn.1 - rf.1 },
            "spread": {
                "awake": { "timer_loc": spread(&awake.windows, |w| w.timer_loc), "joule": spread(&awake.windows, |w| w.joule) },
                "napped": { "timer_loc": spread(&napped.windows, |w| w.timer_loc), "joule": spread(&napped.windows, |w| w.joule) },
                "floor": { "timer_loc": spread(&floor, |w| w.timer_loc), "interrupts": spread(&floor, |w| w.interrupts) },
            },
            "windows": { "awake": awake.windows, "napped": napped.windows, "floor": floor },
            "source": "kernel: /proc/interrupts LOC (local timer interrupts, all CPUs) and all interrupts, deltas over quiet windows; the service's context switches from /proc/PID/status (nginx master + worker); joule's: every thread of the agent (/proc/PID/task/*/status). awake = nginx awake with the agent running (nap armed, threshold never reached); napped = the agent with nginx napped; floor = neither running",
        },
        "power_watts": { "awake": ra.4, "napped": rn.4, "source": "model", "what": "joule's utilisation power model (telemetry.power_model defaults) on the windows' measured CPU busy share of the whole machine" },
        "config": { "idle_ms": a.idle_ms, "rounds": a.rounds, "spaced": a.spaced, "bursts": a.bursts, "burst_size": a.burst_size, "window_s": a.window_s, "timer_resolution_ms": a.timer_resolution_ms, "offline_cpus": a.offline_cpus, "nginx": nginx_bin },
        "loadavg": { "before": load_before.trim(), "after": load_after.trim() },
        "duration_s": started.elapsed().as_secs_f64(),
    });
    let f = |x: f64| format!("{x:.3}");
    // The awake server is the physical floor of a request's latency (an unfrozen server's wake
    // on its blocked accept): the difference and the ratio to it.
    let vs_floor = |p: f64| format!("{:+.3} ({:.2}× awake)", d(p), pct(&napped.spaced_us, p) / pct(&awake.spaced_us, p));
    report::print_table(
        &["", "awake", "napped", "napped − awake"],
        &[
            vec!["p50 latency (ms)".into(), f(pct(&awake.spaced_us, 50.0) / 1e3), f(pct(&napped.spaced_us, 50.0) / 1e3), vs_floor(50.0)],
            vec!["p99 latency (ms)".into(), f(pct(&awake.spaced_us, 99.0) / 1e3), f(pct(&napped.spaced_us, 99.0) / 1e3), vs_floor(99.0)],
            vec!["max latency (ms)".into(), f(pct(&awake.spaced_us, 100.0) / 1e3), f(pct(&napped.spaced_us, 100.0) / 1e3), vs_floor(100.0)],
            vec!["burst p99 (ms)".into(), f(pct(&awake.burst_us, 99.0) / 1e3), f(pct(&napped.burst_us, 99.0) / 1e3), String::new()],
            vec!["LOC timer irqs/s (kernel)".into(), format!("{:.1}", ra.0), format!("{:.1}", rn.0), format!("{}; floor {:.1}", show(ratio(ra.0, rn.0)), rf.0)],
            vec!["all irqs/s (kernel)".into(), format!("{:.1}", ra.1), format!("{:.1}", rn.1), format!("floor {:.1}", rf.1)],
            vec!["service wake-ups/s (kernel)".into(), format!("{:.1}", ra.2), format!("{:.1}", rn.2), show(ratio(ra.2, rn.2))],
            vec!["joule's wake-ups/s (kernel)".into(), format!("{:.1}", ra.5), format!("{:.1}", rn.5), show(ratio(ra.5, rn.5))],
            vec!["power (model, W)".into(), format!("{:.2}", ra.4), format!("{:.2}", rn.4), String::new()],
        ],
    );
    println!("nap-mode quiet windows covered by one nap from end to end: {} of {}", window_napped.iter().filter(|&&c| c).count(), window_napped.len());
    let per_scrape: Vec<f64> = scrapes.iter().filter_map(|r| r["joule_wakeups_per_scrape"].as_f64()).collect();
    if !per_scrape.is_empty() {
        println!(
            "a /metrics scrape while napped: {:.1} of joule's wake-ups (median of {} rounds), {} of the service's, the nap held in {} of {} rounds",
            report::median(&per_scrape),
            per_scrape.len(),
            scrapes.iter().filter_map(|r| r["service_wakeups"].as_u64()).sum::<u64>(),
            scrapes.iter().filter(|r| r["nap_held"] == true).count(),
            scrapes.len()
        );
    }
    println!(
        "sent {sent}, answered {}, failed {failed}; {found_napping}/{} spaced requests found the server napping; enter p50 {:.2} ms, leave p50 {:.3} ms (max {:.3}); residency {:.0}%",
        sent - failed,
        a.spaced * a.rounds,
        pct(&enter_us, 50.0) / 1e3,
        pct(&leave_us, 50.0) / 1e3,
        pct(&leave_us, 100.0) / 1e3,
        100.0 * residency.0 / residency.1.max(1e-9)
    );
    if let Some(p) = &a.json {
        report::write_json(p, &out)?;
    }
    if let Some(p) = &a.plot {
        let ms = |v: &[f64]| v.iter().map(|x| x / 1e3).collect::<Vec<f64>>();
        let groups = vec![
            ("awake".to_string(), ms(&awake.spaced_us)),
            ("napped".to_string(), ms(&napped.spaced_us)),
            ("awake burst".to_string(), ms(&awake.burst_us)),
            ("napped burst".to_string(), ms(&napped.burst_us)),
        ];
        report::bar_plot(p, "nginx request latency: awake vs under joule nap (bar = median, dots = requests)", "ms", &groups)?;
    }
    anyhow::ensure!(failed == 0, "{failed} of {sent} requests failed: {:?}", awake.failed.iter().chain(&napped.failed).take(5).collect::<Vec<_>>());
    Ok(())
}
