//! The five measurements of `joule-bench elevate`; each returns JSON rows with the field names
//! issue 9 lists (and a few more).

use super::targets::{as_fifo_on, elevate, in_s, rest, steal_ms, steal_since, Kind, Running};
use super::ElevateBenchArgs;
use crate::report::median;
use crate::thermal::probe::percentile;
use joule_core::effects::{RealEffects, Sched, SchedAttr};
use joule_elevate::demo::{run_client, Server, Workload};
use joule_elevate::probe::{run_and_gap_us, runs, work_per_s};
use joule_elevate::timing::{now_ns, wakeup_errors_ns, WaitMethod};
use joule_elevate::{ElevateOpts, Elevator, Pattern, Prio, Schedule, Target};
use serde_json::{json, Value};
use std::time::Duration;

const TARGET_CPU: usize = 0;
const OTHER_CPU: usize = 1;

fn opts(a: &ElevateBenchArgs, pattern: Pattern, slice_us: u64, schedule: Schedule) -> ElevateOpts {
    ElevateOpts {
        cpu: TARGET_CPU,
        sched_cpu: Some(if pattern == Pattern::Dedicated { OTHER_CPU } else { TARGET_CPU }),
        slice_us,
        pattern,
        wait: None,
        schedule,
        // The journal `run` holds open (the same handle; opening it there already succeeded).
        journal: joule_core::journal::Journal::open(&a.journal_dir).ok(),
        guardian: true,
        confirm_landing: a.confirm_landing,
    }
}

fn stdev(v: &[f64]) -> f64 {
    if v.len() < 2 {
        return f64::NAN;
    }
    let m = v.iter().sum::<f64>() / v.len() as f64;
    (v.iter().map(|x| (x - m).powi(2)).sum::<f64>() / (v.len() - 1) as f64).sqrt()
}

fn r2(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

/// The cost of one cross-CPU priority change (the syscall through the seam and direct, and
/// the time until the raised target runs), the clock read, and each wait's wake-up error.
pub fn floor(a: &ElevateBenchArgs) -> anyhow::Result<Value> {
    let run = Running::start(Kind::Thread, &[false, false], in_s(0.7))?;
    let tids = run.tids();
    let fx = RealEffects;
    let slots = tids.iter().map(|&t| vec![Target { tid: t, label: t.to_string() }]).collect();
    let el = Elevator::setup(&fx, slots, opts(a, Pattern::Dedicated, 100, Schedule::RoundRobin))?;
    let (seam_ns, direct_ns, calls) = as_fifo_on(OTHER_CPU, Prio::HIGH, || {
        let (mut seam, mut direct, mut calls) = (Vec::new(), Vec::new(), Vec::new());
        let t_end = now_ns() + 400_000_000;
        let mut k = 0usize;
        while now_ns() < t_end && k < 2000 {
            let (up, down) = (tids[k % 2], tids[(k + 1) % 2]);
            let t0 = now_ns();
            if k.is_multiple_of(2) {
                let _ = fx.set_sched(up, SchedAttr { policy: libc::SCHED_FIFO, priority: Prio::MID });
                seam.push((now_ns() - t0) as f64);
                let _ = fx.set_sched(down, SchedAttr { policy: libc::SCHED_FIFO, priority: Prio::LOW });
            } else {
                let p = libc::sched_param { sched_priority: Prio::MID };
                // SAFETY: plain syscall on a thread we manage.
                unsafe { libc::sched_setscheduler(up, libc::SCHED_FIFO, &p) };
                direct.push((now_ns() - t0) as f64);
                let p = libc::sched_param { sched_priority: Prio::LOW };
                // SAFETY: as above.
                unsafe { libc::sched_setscheduler(down, libc::SCHED_FIFO, &p) };
            }
            calls.push((t0, k % 2));
            k += 1;
            joule_elevate::timing::spin_until(t0 + 100_000);
        }
        (seam, direct, calls)
    })?;
    drop(el);
    let recs = run.finish()?;
    // From each raise call to the raised target's first timestamp after it.
    let mut lat = Vec::new();
    for &(t0, who) in &calls {
        if let Some(&(s, _)) = recs[who].runs.iter().find(|(s, _)| *s >= t0) {
            if s - t0 < 100_000 {
                lat.push((s - t0) as f64 / 1000.0);
            }
        }
    }
    let clock_ns = {
        let t0 = now_ns();
        for _ in 0..100_000 {
            std::hint::black_box(now_ns());
        }
        (now_ns() - t0) as f64 / 100_000.0
    };
    rest();
    let mut timers = Vec::new();
    for m in WaitMethod::ALL {
        for interval_us in [5u64, 50] {
            let e = as_fifo_on(TARGET_CPU, Prio::HIGH, || wakeup_errors_ns(m, interval_us * 1000, 2000))??;
            let us: Vec<f64> = e.iter().map(|&n| n as f64 / 1000.0).collect();
            timers
                .push(json!({ "method": m.name(), "interval_us": interval_us, "error_us_median": r2(median(&us)), "error_us_p99": r2(percentile(&us, 99.0)) }));
        }
    }
    rest();
    Ok(json!({
        "set_prio_seam_ns": median(&seam_ns).round(),
        "set_prio_direct_ns": median(&direct_ns).round(),
        "cross_cpu_switch_us_median": r2(median(&lat)),
        "cross_cpu_switch_us_p99": r2(percentile(&lat, 99.0)),
        "cross_cpu_switch_samples": lat.len(),
        "clock_read_ns": r2(clock_ns),
        "timer_wakeup": timers,
    }))
}

pub fn print_floor(f: &Value) {
    println!(
        "  priority change from CPU 1: {} ns through the Sched seam, {} ns direct; raised target runs {} µs after the call (p99 {} µs); clock read {} ns",
        f["set_prio_seam_ns"], f["set_prio_direct_ns"], f["cross_cpu_switch_us_median"], f["cross_cpu_switch_us_p99"], f["clock_read_ns"]
    );
    for t in f["timer_wakeup"].as_array().into_iter().flatten() {
        println!(
            "  wake-up error {:>16} every {:>3} µs: median {} µs, p99 {} µs",
            t["method"].as_str().unwrap_or("?"),
            t["interval_us"],
            t["error_us_median"],
            t["error_us_p99"]
        );
    }
}

/// The seed's run/gap for a slice (Table of 3.1 at 5 µs; +0.5/+4.6 µs (processes) and
/// +0.5/+4.2 µs (threads) shared at the other slices; exact dedicated).
fn seed_run_gap(pattern: Pattern, kind: Kind, slice_us: u64) -> (f64, f64) {
    let s = slice_us as f64;
    match (pattern, kind) {
        (Pattern::Dedicated, _) => (s, s),
        (Pattern::Shared, Kind::Process) => (s + 0.5, s + 4.6),
        (Pattern::Shared, Kind::Thread) => (s + 0.5, s + 4.2),
    }
}

/// Run length and gap per pattern, target kind and slice: `repeats` runs each, a row with the
/// median of the runs' medians, their range, and every run.
pub fn switch(a: &ElevateBenchArgs) -> anyhow::Result<Vec<Value>> {
    let mut rows = Vec::new();
    for pattern in [Pattern::Shared, Pattern::Dedicated] {
        for kind in [Kind::Process, Kind::Thread] {
            for &slice_us in &a.slices_us {
                let mut each = Vec::new();
                for _ in 0..a.repeats {
                    let run = Running::start(kind, &[false, false], in_s(a.run_s + 0.3))?;
                    let r = elevate(&run.tids(), opts(a, pattern, slice_us, Schedule::RoundRobin), a.run_s)?;
                    let recs = run.finish()?;
                    let rs = runs(&recs, r.start_ns + 20_000_000, r.end_ns.saturating_sub(5_000_000));
                    let (lens, gaps) = run_and_gap_us(&rs);
                    each.push(json!({
                        "run_us_median": r2(median(&lens)), "run_us_stdev": r2(stdev(&lens)), "run_us_p99": r2(percentile(&lens, 99.0)),
                        "gap_us_median": r2(median(&gaps)), "gap_us_stdev": r2(stdev(&gaps)),
                        "runs": lens.len(), "late_slices": r.late_slices, "slices": r.slices,
                        "landing_us_median": r2(median(&r.landing_us)), "landing_us_p99": r2(percentile(&r.landing_us, 99.0)), "unlanded": r.unlanded,
                    }));
                    rest();
                }
                let col = |k: &str| each.iter().map(|x| x[k].as_f64().unwrap_or(f64::NAN)).collect::<Vec<f64>>();
                let run_meds = col("run_us_median");
                let (seed_run, seed_gap) = seed_run_gap(pattern, kind, slice_us);
                rows.push(json!({
                    "pattern": pattern.name(), "target": kind.name(), "slice_us": slice_us,
                    "run_us_median": r2(median(&run_meds)),
                    "run_us_range": [run_meds.iter().copied().fold(f64::INFINITY, f64::min), run_meds.iter().copied().fold(f64::NEG_INFINITY, f64::max)],
                    "run_us_stdev": r2(median(&col("run_us_stdev"))),
                    "gap_us_median": r2(median(&col("gap_us_median"))), "gap_us_stdev": r2(median(&col("gap_us_stdev"))),
                    "runs": col("runs").iter().sum::<f64>(), "run_ratio": r2(median(&run_meds) / slice_us as f64),
                    "seed_run_us": seed_run, "seed_gap_us": seed_gap, "late_slices": col("late_slices").iter().sum::<f64>(),
                    "landing_us_median": r2(median(&col("landing_us_median"))), "unlanded": col("unlanded").iter().sum::<f64>(),
                    "each": each,
                }));
            }
        }
    }
    Ok(rows)
}

pub fn switch_row(r: &Value) -> Vec<String> {
    let cell = |k: &str| match &r[k] {
        Value::String(s) => s.clone(),
        v => v.to_string(),
    };
    let mut row: Vec<String> = ["pattern", "target", "slice_us", "run_us_median"].iter().map(|k| cell(k)).collect();
    row.push(format!("{}–{}", r["run_us_range"][0], r["run_us_range"][1]));
    row.extend(
        ["run_us_stdev", "gap_us_median", "gap_us_stdev", "run_ratio", "landing_us_median", "unlanded", "seed_run_us", "seed_gap_us"].iter().map(|k| cell(k)),
    );
    row
}

pub fn cycles(a: &ElevateBenchArgs) -> anyhow::Result<Vec<Value>> {
    // Baseline: the work target alone on CPU 0 at SCHED_FIFO (no scheduler, no rival).
    let solo = as_fifo_on(TARGET_CPU, Prio::MID, || {
        let r = joule_elevate::probe::count_work(in_s(a.run_s));
        work_per_s(&r, r.runs.first().map_or(0, |x| x.0), u64::MAX)
    })?;
    rest();
    let mut rows = Vec::new();
    for pattern in [Pattern::Shared, Pattern::Dedicated] {
        for &slice_us in &a.slices_us {
            let run = Running::start(Kind::Thread, &[true, false], in_s(a.run_s + 0.3))?;
            let r = elevate(&run.tids(), opts(a, pattern, slice_us, Schedule::RoundRobin), a.run_s)?;
            let recs = run.finish()?;
            let w = work_per_s(&recs[0], r.start_ns + 20_000_000, r.end_ns.saturating_sub(5_000_000));
            rows.push(json!({ "pattern": pattern.name(), "slice_us": slice_us, "work_ratio": (w / solo * 1000.0).round() / 1000.0, "solo_units_per_s": solo.round() }));
            rest();
        }
    }
    Ok(rows)
}

/// Runs the load client on CPU 1 at SCHED_FIFO for `secs` after `delay`, in its own thread.
fn client(
    addr: std::net::SocketAddr,
    rate: f64,
    delay: Duration,
    secs: f64,
    w: Workload,
) -> std::thread::JoinHandle<anyhow::Result<joule_elevate::demo::ClientReport>> {
    std::thread::spawn(move || {
        std::thread::sleep(delay);
        Ok(as_fifo_on(OTHER_CPU, 1, || run_client(addr, 4, rate, Duration::from_secs_f64(secs), w))??)
    })
}

fn lat_json(key: &str, name: Value, lat: &[f64], rps: f64) -> Value {
    json!({ key: name, "p50_us": r2(percentile(lat, 50.0)), "p99_us": r2(percentile(lat, 99.0)), "rps": rps.round(), "requests": lat.len() })
}

pub fn table(a: &ElevateBenchArgs) -> anyhow::Result<Vec<Value>> {
    let mut rows = Vec::new();
    let client_s = a.run_s - 0.1;
    let rate = a.rate_rps / 2.0; // A gets half the core
    for order in ["alone", "AABC", "ABAC"] {
        let (mut lat, mut rps, mut each) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..a.repeats {
            let steal0 = steal_ms();
            let (srv, tid_a) = Server::inline()?;
            let c = client(srv.addr, rate, Duration::from_millis(30), client_s, Workload::FIXED);
            if order == "alone" {
                // A alone under the same scheduler (one slot: raised once, no rival).
                elevate(&[tid_a], opts(a, Pattern::Shared, 50, Schedule::RoundRobin), a.run_s)?;
            } else {
                let busy = Running::start(Kind::Thread, &[false, false], in_s(a.run_s + 0.3))?;
                let mut tids = vec![tid_a];
                tids.extend(busy.tids());
                let t = if order == "AABC" { vec![0, 0, 1, 2] } else { vec![0, 1, 0, 2] };
                elevate(&tids, opts(a, Pattern::Shared, 50, Schedule::Table(t)), a.run_s)?;
                busy.finish()?;
            }
            let r = c.join().map_err(|_| anyhow::anyhow!("client panicked"))??;
            srv.stop()?;
            each.push(json!({ "p99_us": r2(percentile(&r.latency_us, 99.0)), "max_us": r2(percentile(&r.latency_us, 100.0)), "rps": r.rps.round(), "steal_ms": steal_since(steal0), "worst_at_ms": r2(r.worst_at_ms), "worst_due_ns": r.worst_due_ns }));
            lat.extend(r.latency_us);
            rps.push(r.rps);
            rest();
        }
        let mut row = lat_json("order", json!(order), &lat, median(&rps));
        row["runs"] = json!(each);
        rows.push(row);
    }
    let base = rows[0]["p99_us"].as_f64().unwrap_or(f64::NAN);
    for r in rows.iter_mut() {
        r["p99_ratio"] = json!(r2(r["p99_us"].as_f64().unwrap_or(f64::NAN) / base));
    }
    Ok(rows)
}

/// A request slower than this is a stall (the table's requests take ~0.1 ms).
pub const STALL_US: f64 = 5_000.0;

/// Runs of `rows` (each with `runs[]`, `max_us` and `steal_ms`) that had a stall, and how many
/// of those lost time to the hypervisor (steal on CPU 0 or 1 during the run).
pub fn stalls(rows: &[Value]) -> Value {
    let all: Vec<&Value> = rows.iter().flat_map(|r| r["runs"].as_array().into_iter().flatten()).collect();
    let stalled: Vec<&&Value> = all.iter().filter(|r| r["max_us"].as_f64().unwrap_or(0.0) > STALL_US).collect();
    let stolen = |r: &Value| r["steal_ms"].as_array().into_iter().flatten().any(|x| x.as_f64().unwrap_or(0.0) > 0.0);
    json!({
        "runs": all.len(), "stall_us": STALL_US,
        "with_stall": stalled.len(), "with_stall_and_steal": stalled.iter().filter(|r| stolen(r)).count(),
        "without_stall_with_steal": all.iter().filter(|r| r["max_us"].as_f64().unwrap_or(0.0) <= STALL_US && stolen(r)).count(),
    })
}

pub fn lat_row(key: &'static str) -> impl Fn(&Value) -> Vec<String> {
    move |r| {
        vec![r[key].as_str().unwrap_or("?").to_string(), r["p50_us"].to_string(), r["p99_us"].to_string(), r["rps"].to_string(), r["p99_ratio"].to_string()]
    }
}

/// The demo server with and without preemption, per workload: each repeat runs both modes
/// back to back (interleaved), and a row reports the median of the runs' own p50/p99/rps with
/// the range, every run kept.
pub fn hol(a: &ElevateBenchArgs) -> anyhow::Result<Vec<Value>> {
    let modes =
        [("fixed", Workload::FIXED, false), ("fixed", Workload::FIXED, true), ("bimodal", Workload::BIMODAL, false), ("bimodal", Workload::BIMODAL, true)];
    let mut runs: Vec<Vec<Value>> = vec![Vec::new(); modes.len()];
    for _ in 0..a.repeats {
        for (k, &(_, w, preemption)) in modes.iter().enumerate() {
            let steal0 = steal_ms();
            let srv = Server::preemptive(TARGET_CPU, 8, preemption.then(|| Duration::from_micros(a.threshold_us)))?;
            let r = client(srv.addr, a.rate_rps, Duration::ZERO, a.run_s, w).join().map_err(|_| anyhow::anyhow!("client panicked"))??;
            let stats = srv.stop()?;
            runs[k].push(json!({
                "p50_us": r2(percentile(&r.latency_us, 50.0)), "p99_us": r2(percentile(&r.latency_us, 99.0)), "rps": r.rps.round(),
                "sent": r.sent, "answered": r.answered, "long_p50_us": r2(percentile(&r.long_latency_us, 50.0)),
                "preemptions": stats.preemptions, "timer_arms": stats.timer_arms, "steal_ms": steal_since(steal0),
            }));
            rest();
        }
    }
    let col = |v: &[Value], key: &str| v.iter().map(|r| r[key].as_f64().unwrap_or(f64::NAN)).collect::<Vec<f64>>();
    let mut rows = Vec::new();
    for (k, &(wname, _, preemption)) in modes.iter().enumerate() {
        let v = &runs[k];
        let range = |key: &str| {
            let c = col(v, key);
            json!([c.iter().copied().fold(f64::INFINITY, f64::min), c.iter().copied().fold(f64::NEG_INFINITY, f64::max)])
        };
        rows.push(json!({
            "workload": wname, "preemption": preemption,
            "p50_us": r2(median(&col(v, "p50_us"))), "p99_us": r2(median(&col(v, "p99_us"))), "p99_us_range": range("p99_us"),
            "rps": median(&col(v, "rps")).round(), "rps_range": range("rps"),
            "long_p50_us": r2(median(&col(v, "long_p50_us"))),
            "preemptions": median(&col(v, "preemptions")), "timer_arms": median(&col(v, "timer_arms")),
            "runs": v,
        }));
    }
    // Ratios against the same workload without preemption, from the medians.
    for k in [1, 3] {
        let (base_p99, base_rps) = (rows[k - 1]["p99_us"].as_f64().unwrap_or(f64::NAN), rows[k - 1]["rps"].as_f64().unwrap_or(f64::NAN));
        rows[k - 1]["p99_ratio"] = json!(1.0);
        rows[k - 1]["rps_ratio"] = json!(1.0);
        rows[k]["p99_ratio"] = json!(r2(rows[k]["p99_us"].as_f64().unwrap_or(f64::NAN) / base_p99));
        rows[k]["rps_ratio"] = json!((rows[k]["rps"].as_f64().unwrap_or(f64::NAN) / base_rps * 1000.0).round() / 1000.0);
    }
    Ok(rows)
}

/// Issue 19's goals for `hol`, from its rows: bimodal p99 ≥ 5× better with preemption, the
/// fixed workload's throughput with it ≥ 0.95× and its p99 ≤ 1.2× without.
pub fn hol_goals(rows: &[Value]) -> Value {
    let f = |i: usize, k: &str| rows.get(i).and_then(|r| r[k].as_f64()).unwrap_or(f64::NAN);
    let gain = 1.0 / f(3, "p99_ratio");
    json!({
        "bimodal_p99_gain": r2(gain), "bimodal_p99_gain_met": gain >= 5.0,
        "fixed_rps_ratio": f(1, "rps_ratio"), "fixed_rps_ratio_met": f(1, "rps_ratio") >= 0.95,
        "fixed_p99_ratio": f(1, "p99_ratio"), "fixed_p99_ratio_met": f(1, "p99_ratio") <= 1.2,
    })
}

pub fn hol_row(r: &Value) -> Vec<String> {
    let range = |k: &str| format!("{}–{}", r[k][0], r[k][1]);
    vec![
        r["workload"].as_str().unwrap_or("?").to_string(),
        r["preemption"].to_string(),
        r["p50_us"].to_string(),
        r["p99_us"].to_string(),
        range("p99_us_range"),
        r["rps"].to_string(),
        r["p99_ratio"].to_string(),
        r["rps_ratio"].to_string(),
        r["preemptions"].to_string(),
        r["timer_arms"].to_string(),
    ]
}
