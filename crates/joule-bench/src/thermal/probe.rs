//! The labelled interactive task of `joule-bench thermal`: its own process (so a class can
//! match it by pid without taking the bench along), it sleeps to absolute CLOCK_MONOTONIC
//! deadlines every period and records how late each wake-up was. It prints one line per
//! wake-up (`<µs since start> <lateness ns>`) when its time is up or on SIGTERM.

use anyhow::Context;
use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

#[derive(clap::Args, Debug)]
pub struct ProbeArgs {
    /// Sleep between wake-ups, µs.
    #[arg(long, default_value_t = 2000)]
    pub period_us: u64,
    /// Stop after this many seconds.
    #[arg(long)]
    pub duration_s: f64,
    /// Give the probe this EEVDF slice first, µs (100–100000; Linux 6.12+), as a class's
    /// `latency_slice_us` would (scripts/nested-cap-latency.sh compares slices).
    #[arg(long)]
    pub slice_us: Option<u32>,
}

fn monotonic_ns() -> i128 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: ts is a valid timespec; CLOCK_MONOTONIC always exists.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as i128 * 1_000_000_000 + ts.tv_nsec as i128
}

fn sleep_until_ns(t: i128) {
    let ts = libc::timespec { tv_sec: (t / 1_000_000_000) as libc::time_t, tv_nsec: (t % 1_000_000_000) as libc::c_long };
    // SAFETY: ts is valid; a signal interrupting the sleep only makes this wake-up early.
    unsafe { libc::clock_nanosleep(libc::CLOCK_MONOTONIC, libc::TIMER_ABSTIME, &ts, std::ptr::null_mut()) };
}

pub fn run(a: &ProbeArgs) -> anyhow::Result<()> {
    anyhow::ensure!((100..=1_000_000).contains(&a.period_us), "--period-us must be 100 to 1000000");
    anyhow::ensure!(a.duration_s.is_finite() && a.duration_s > 0.0 && a.duration_s <= 3600.0, "--duration-s must be in (0, 3600]");
    if let Some(us) = a.slice_us {
        anyhow::ensure!(joule_core::config::SLICE_US.contains(&us), "--slice-us must be 100 to 100000");
        use joule_core::effects::Sched;
        joule_core::effects::RealEffects.set_slice_ns(0, u64::from(us) * 1000).context("while setting the probe's slice")?;
    }
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, stop.clone()).context("while installing signal handlers")?;
    }
    let period = a.period_us as i128 * 1000;
    let start = monotonic_ns();
    let end = start + (a.duration_s * 1e9) as i128;
    let mut samples: Vec<(u64, u64)> = Vec::with_capacity((a.duration_s * 1e6 / a.period_us as f64) as usize + 1);
    let mut deadline = start + period;
    while deadline < end && !stop.load(Ordering::Relaxed) {
        sleep_until_ns(deadline);
        let now = monotonic_ns();
        if now >= deadline {
            samples.push((((deadline - start) / 1000) as u64, (now - deadline) as u64));
        }
        // A late wake-up does not shift the schedule, but a long stall skips the deadlines it
        // missed instead of counting each of them as late.
        deadline += period;
        if deadline < now {
            deadline = now + period;
        }
    }
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    for (t_us, late_ns) in samples {
        writeln!(out, "{t_us} {late_ns}")?;
    }
    out.flush()?;
    Ok(())
}

/// The probe's output: (seconds since its start, lateness in µs) per wake-up.
pub fn parse(text: &str) -> Vec<(f64, f64)> {
    text.lines()
        .filter_map(|l| {
            let (t, late) = l.split_once(' ')?;
            Some((t.parse::<u64>().ok()? as f64 / 1e6, late.trim().parse::<u64>().ok()? as f64 / 1e3))
        })
        .collect()
}

/// The `p`-th percentile (0–100) by nearest rank: the smallest value with at least p% of the
/// values at or below it. NaN for no values.
pub fn percentile(values: &[f64], p: f64) -> f64 {
    if values.is_empty() {
        return f64::NAN;
    }
    let mut s = values.to_vec();
    s.sort_by(f64::total_cmp);
    let rank = ((p / 100.0) * s.len() as f64).ceil().max(1.0) as usize;
    s[rank.min(s.len()) - 1]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let v: Vec<f64> = (1..=100).rev().map(f64::from).collect();
        assert_eq!(percentile(&v, 50.0), 50.0);
        assert_eq!(percentile(&v, 99.0), 99.0);
        assert_eq!(percentile(&v, 100.0), 100.0);
        assert_eq!(percentile(&v, 0.0), 1.0);
        assert_eq!(percentile(&[7.0], 99.0), 7.0);
        // Ten values: p99 is the largest, p50 the fifth.
        let v: Vec<f64> = (1..=10).map(f64::from).collect();
        assert_eq!(percentile(&v, 99.0), 10.0);
        assert_eq!(percentile(&v, 50.0), 5.0);
        assert!(percentile(&[], 50.0).is_nan());
    }

    #[test]
    fn probe_lines_parse_to_seconds_and_microseconds() {
        assert_eq!(parse("2000 55000\n4000 1500\nbad line\n"), vec![(0.002, 55.0), (0.004, 1.5)]);
    }
}
