//! `joule-bench elevate`: the seed's section 3 on this machine, each against its baseline in
//! the same run — `floor` (what one cross-CPU priority change and a timer wake-up cost here),
//! `switch` (run length and gap before re-run at µs slices, shared/dedicated, processes/
//! threads, against the ideal slice), `cycles` (work of a target sharing a core, against the
//! same target alone), `table` (a server A with busy B and C, A-A-B-C vs A-B-A-C, against A
//! alone) and `hol` (the demo server with and without preemption).
//!
//! RT throttling stays on (950 ms of every 1 s here). Every measured run lasts at most 0.8 s
//! and is followed by a 0.25 s rest, so no 1 s window holds more than 0.8 s of RT time and
//! throttling never cuts a run: the numbers are the mechanism's, not the throttle's. On this
//! 2-CPU machine the targets use CPU 0 and the dedicated scheduler (and the load client) CPU 1.

mod sections;
pub mod targets;

use super::report::{bar_plot, print_table, write_json};
use anyhow::Context;
use joule_core::effects::RealEffects;
use joule_elevate::rt_throttle::Throttle;
use serde_json::json;
use std::path::PathBuf;

#[derive(clap::Args, Debug, Clone)]
pub struct ElevateBenchArgs {
    /// Write every section as JSON here.
    #[arg(long, value_name = "PATH")]
    pub json: Option<PathBuf>,
    /// Write an SVG plot of switching accuracy (run length / slice) here, and the latency
    /// plot (p99 of table and hol) next to it as `<stem>-latency.svg`.
    #[arg(long, value_name = "PATH")]
    pub plot: Option<PathBuf>,
    /// Seconds of each measured run (≤ 0.8 keeps RT throttling out of every run).
    #[arg(long, default_value_t = 0.8)]
    pub run_s: f64,
    /// Runs per table/hol configuration (table: latencies pooled; hol: modes interleaved,
    /// medians of the runs) and per switch configuration.
    #[arg(long, default_value_t = 5)]
    pub repeats: usize,
    /// Slices of the switch and cycles sections, µs.
    #[arg(long, value_delimiter = ',', default_value = "5,10,20,50,100,150")]
    pub slices_us: Vec<u64>,
    /// Request rate of the load client, requests/s.
    #[arg(long, default_value_t = 10_000.0)]
    pub rate_rps: f64,
    /// A request running this long is switched out (hol with preemption), µs.
    #[arg(long, default_value_t = 25)]
    pub threshold_us: u64,
    /// Dedicated pattern: start each slice when the switch has landed (the default, and what
    /// `joule elevate` does); `--confirm-landing false` times slices from the call, as before
    /// issue 19, for comparison.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub confirm_landing: bool,
    /// Only these sections (floor, switch, cycles, table, hol); all by default.
    #[arg(long, value_delimiter = ',')]
    pub only: Vec<String>,
    /// Undo journal directory; `joule restore` cleans up after a SIGKILLed bench.
    #[arg(long, default_value = "/run/joule")]
    pub journal_dir: PathBuf,
}

pub fn run(a: &ElevateBenchArgs) -> anyhow::Result<()> {
    super::check_bounds([
        (a.run_s > 0.05 && a.run_s <= 0.9, format!("--run-s {}: must be in (0.05, 0.9] (longer runs meet RT throttling)", a.run_s)),
        (a.repeats >= 1, format!("--repeats {}: must be at least 1", a.repeats)),
        (a.slices_us.iter().all(|&s| (1..=100_000).contains(&s)), format!("--slices-us {:?}: each must be 1..=100000", a.slices_us)),
        (a.rate_rps >= 100.0 && a.rate_rps <= 200_000.0, format!("--rate-rps {}: must be 100..=200000", a.rate_rps)),
        (a.threshold_us >= 1, format!("--threshold-us {}: must be at least 1", a.threshold_us)),
        (
            a.only.iter().all(|s| ["floor", "switch", "cycles", "table", "hol"].contains(&s.as_str())),
            format!("--only {:?}: sections are floor, switch, cycles, table, hol", a.only),
        ),
    ])?;
    let online = joule_elevate::online_cpus();
    anyhow::ensure!(online.contains(&0) && online.contains(&1), "joule-bench elevate needs CPUs 0 and 1 online (online: {online:?})");
    // Held for the whole bench: every run's `opts` gets this same journal back.
    let opened = joule_core::journal::Journal::open(&a.journal_dir);
    let _journal = opened.with_context(|| format!("while opening the undo journal in {}", a.journal_dir.display()))?;
    let want = |s: &str| a.only.is_empty() || a.only.iter().any(|o| o == s);
    let throttle = Throttle::read(&RealEffects);
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    eprintln!("bench elevate: load average {}", load.split_whitespace().take(3).collect::<Vec<_>>().join(" "));
    if let Some(t) = throttle {
        eprintln!("bench elevate: {}", t.describe());
    }
    let mut out = json!({
        "machine": { "cpus": online, "loadavg": load.trim(), "targets_cpu": 0, "scheduler_cpu_dedicated": 1, "client_cpu": 1 },
        "rt_throttle": throttle,
        "run_s": a.run_s,
    });
    if want("floor") {
        let f = sections::floor(a)?;
        println!("\nfloor (this machine's physical limits)");
        sections::print_floor(&f);
        out["floor"] = f;
    }
    if want("switch") {
        let rows = sections::switch(a)?;
        println!(
            "\nswitch: run length and gap before re-run (µs), median of {} runs each (range of the runs' medians), ratio = run median / slice (ideal 1.0); landing = call to the raised target switched in (dedicated)",
            a.repeats
        );
        print_table(
            &[
                "pattern",
                "target",
                "slice_us",
                "run_med",
                "run_range",
                "run_sd",
                "gap_med",
                "gap_sd",
                "ratio",
                "landing_us",
                "unlanded",
                "seed_run",
                "seed_gap",
            ],
            &rows.iter().map(sections::switch_row).collect::<Vec<_>>(),
        );
        out["switch"] = json!(rows);
    }
    if want("cycles") {
        let rows = sections::cycles(a)?;
        println!("\ncycles: work of a target sharing CPU 0 with a busy loop / the same target alone (ideal 0.5)");
        print_table(
            &["pattern", "slice_us", "work_ratio"],
            &rows
                .iter()
                .map(|r| vec![r["pattern"].to_string(), r["slice_us"].to_string(), format!("{:.3}", r["work_ratio"].as_f64().unwrap_or(f64::NAN))])
                .collect::<Vec<_>>(),
        );
        out["cycles"] = json!(rows);
    }
    if want("table") {
        let rows = sections::table(a)?;
        println!("\ntable: server A with busy B and C on CPU 0, 50 µs slices, shared pattern; ratio = p99 / p99 of A alone under the same scheduler");
        print_table(&["order", "p50_us", "p99_us", "rps", "p99_ratio"], &rows.iter().map(sections::lat_row("order")).collect::<Vec<_>>());
        let st = sections::stalls(&rows);
        println!(
            "  stalls (a request over {} ms): {} of {} runs, {} of them with host steal on CPU 0 or 1 during the run ({} runs without a stall had steal)",
            st["stall_us"].as_f64().unwrap_or(0.0) / 1000.0,
            st["with_stall"],
            st["runs"],
            st["with_stall_and_steal"],
            st["without_stall_with_steal"]
        );
        out["table"] = json!(rows);
        out["table_stalls"] = st;
    }
    if want("hol") {
        let rows = sections::hol(a)?;
        println!(
            "\nhol: demo server on CPU 0 (8 workers), {} µs threshold, {} interleaved runs per mode (medians; range of p99); ratio = with / without preemption",
            a.threshold_us, a.repeats
        );
        print_table(
            &["workload", "preemption", "p50_us", "p99_us", "p99_range", "rps", "p99_ratio", "rps_ratio", "preemptions", "timer_arms"],
            &rows.iter().map(sections::hol_row).collect::<Vec<_>>(),
        );
        let goals = sections::hol_goals(&rows);
        let met = |k: &str| if goals[k].as_bool() == Some(true) { "met" } else { "MISSED" };
        println!(
            "  goals: bimodal p99 {}× better (≥ 5: {}), fixed rps {}× (≥ 0.95: {}), fixed p99 {}× (≤ 1.2: {})",
            goals["bimodal_p99_gain"],
            met("bimodal_p99_gain_met"),
            goals["fixed_rps_ratio"],
            met("fixed_rps_ratio_met"),
            goals["fixed_p99_ratio"],
            met("fixed_p99_ratio_met")
        );
        out["hol"] = json!(rows);
        out["hol_goals"] = goals;
    }
    if let Some(p) = &a.json {
        write_json(p, &out)?;
    }
    if let Some(p) = &a.plot {
        let sw: Vec<(String, Vec<f64>)> = out["switch"]
            .as_array()
            .map(|v| {
                v.iter()
                    .map(|r| {
                        let name = format!("{} {} {}", &r["pattern"].as_str().unwrap_or("?")[..3], &r["target"].as_str().unwrap_or("?")[..4], r["slice_us"]);
                        (name, vec![r["run_us_median"].as_f64().unwrap_or(0.0) / r["slice_us"].as_f64().unwrap_or(1.0)])
                    })
                    .collect()
            })
            .unwrap_or_default();
        bar_plot(p, "joule elevate: run length / slice (1.0 = exact)", "run median / slice", &sw)?;
        let mut lat: Vec<(String, Vec<f64>)> = Vec::new();
        for r in out["table"].as_array().into_iter().flatten() {
            lat.push((format!("table {}", r["order"].as_str().unwrap_or("?")), vec![r["p99_us"].as_f64().unwrap_or(0.0)]));
        }
        for r in out["hol"].as_array().into_iter().flatten() {
            let p = if r["preemption"].as_bool() == Some(true) { "+pre" } else { "no pre" };
            let each: Vec<f64> = r["runs"].as_array().into_iter().flatten().filter_map(|x| x["p99_us"].as_f64()).collect();
            lat.push((format!("{} {p}", r["workload"].as_str().unwrap_or("?")), each));
        }
        let lp = p.with_file_name(format!("{}-latency.svg", p.file_stem().and_then(|s| s.to_str()).unwrap_or("elevate")));
        bar_plot(&lp, "joule elevate: p99 latency (µs)", "p99 µs", &lat)?;
    }
    Ok(())
}
