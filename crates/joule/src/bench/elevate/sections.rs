//! The five measurements of `joule bench elevate`; each returns JSON rows with the field names
//! issue 9 lists (and a few more).

use super::targets::{as_fifo_on, elevate, in_s, rest, Kind, Running};
use super::ElevateBenchArgs;
use crate::bench::report::median;
use crate::bench::thermal::probe::percentile;
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

pub fn switch(a: &ElevateBenchArgs) -> anyhow::Result<Vec<Value>> {
    let mut rows = Vec::new();
    for pattern in [Pattern::Shared, Pattern::Dedicated] {
        for kind in [Kind::Process, Kind::Thread] {
            for &slice_us in &a.slices_us {
                let run = Running::start(kind, &[false, false], in_s(a.run_s + 0.3))?;
                let r = elevate(&run.tids(), opts(a, pattern, slice_us, Schedule::RoundRobin), a.run_s)?;
                let recs = run.finish()?;
                let rs = runs(&recs, r.start_ns + 20_000_000, r.end_ns.saturating_sub(5_000_000));
                let (lens, gaps) = run_and_gap_us(&rs);
                let (seed_run, seed_gap) = seed_run_gap(pattern, kind, slice_us);
                rows.push(json!({
                    "pattern": pattern.name(), "target": kind.name(), "slice_us": slice_us,
                    "run_us_median": r2(median(&lens)), "run_us_stdev": r2(stdev(&lens)),
                    "gap_us_median": r2(median(&gaps)), "gap_us_stdev": r2(stdev(&gaps)),
                    "runs": lens.len(), "run_ratio": r2(median(&lens) / slice_us as f64),
                    "seed_run_us": seed_run, "seed_gap_us": seed_gap, "late_slices": r.late_slices,
                }));
                rest();
            }
        }
    }
    Ok(rows)
}

pub fn switch_row(r: &Value) -> Vec<String> {
    ["pattern", "target", "slice_us", "run_us_median", "run_us_stdev", "gap_us_median", "gap_us_stdev", "run_ratio", "seed_run_us", "seed_gap_us"]
        .iter()
        .map(|k| match &r[*k] {
            Value::String(s) => s.clone(),
            v => v.to_string(),
        })
        .collect()
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
        let (mut lat, mut rps) = (Vec::new(), Vec::new());
        for _ in 0..a.repeats {
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
            lat.extend(r.latency_us);
            rps.push(r.rps);
            rest();
        }
        rows.push(lat_json("order", json!(order), &lat, median(&rps)));
    }
    let base = rows[0]["p99_us"].as_f64().unwrap_or(f64::NAN);
    for r in rows.iter_mut() {
        r["p99_ratio"] = json!(r2(r["p99_us"].as_f64().unwrap_or(f64::NAN) / base));
    }
    Ok(rows)
}

pub fn lat_row(key: &'static str) -> impl Fn(&Value) -> Vec<String> {
    move |r| {
        vec![r[key].as_str().unwrap_or("?").to_string(), r["p50_us"].to_string(), r["p99_us"].to_string(), r["rps"].to_string(), r["p99_ratio"].to_string()]
    }
}

pub fn hol(a: &ElevateBenchArgs) -> anyhow::Result<Vec<Value>> {
    let mut rows = Vec::new();
    for (wname, w) in [("fixed", Workload::FIXED), ("bimodal", Workload::BIMODAL)] {
        let mut base = f64::NAN;
        for preemption in [false, true] {
            let (mut lat, mut long, mut rps, mut pre) = (Vec::new(), Vec::new(), Vec::new(), 0u64);
            for _ in 0..a.repeats {
                let srv = Server::preemptive(TARGET_CPU, 8, preemption.then(|| Duration::from_micros(a.threshold_us)))?;
                let r = client(srv.addr, a.rate_rps, Duration::ZERO, a.run_s, w).join().map_err(|_| anyhow::anyhow!("client panicked"))??;
                pre += srv.stop()?.preemptions;
                lat.extend(r.latency_us);
                long.extend(r.long_latency_us);
                rps.push(r.rps);
                rest();
            }
            let mut row = lat_json("workload", json!(wname), &lat, median(&rps));
            row["preemption"] = json!(preemption);
            row["long_p50_us"] = json!(r2(percentile(&long, 50.0)));
            row["preemptions"] = json!(pre);
            if !preemption {
                base = row["p99_us"].as_f64().unwrap_or(f64::NAN);
            }
            row["p99_ratio"] = json!(r2(row["p99_us"].as_f64().unwrap_or(f64::NAN) / base));
            rows.push(row);
        }
    }
    Ok(rows)
}

pub fn hol_row(r: &Value) -> Vec<String> {
    vec![
        r["workload"].as_str().unwrap_or("?").to_string(),
        r["preemption"].to_string(),
        r["p50_us"].to_string(),
        r["p99_us"].to_string(),
        r["rps"].to_string(),
        r["p99_ratio"].to_string(),
    ]
}
