//! Busy-loop targets that measure themselves: each records its own run segments (clock reads
//! with no gap longer than `GAP_NS` between them) or counts units of integer work. Tests and
//! `joule-bench elevate` use them to see what the scheduler did from the targets' side.

use crate::timing::now_ns;
use serde::{Deserialize, Serialize};

/// A longer gap between two clock reads means the target was not running.
pub const GAP_NS: u64 = 1_000;

/// What one target saw.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Record {
    /// (start_ns, end_ns) of each run, CLOCK_MONOTONIC.
    pub runs: Vec<(u64, u64)>,
    /// Units of work done (work-counting targets).
    pub work: u64,
}

/// Spins until `until_ns`, recording run segments (at most `max_runs`, the rest merged into
/// the last).
pub fn record_runs(until_ns: u64, max_runs: usize) -> Record {
    let mut runs = Vec::with_capacity(max_runs.min(1 << 20));
    let mut start = now_ns();
    let mut last = start;
    loop {
        let t = now_ns();
        if t - last > GAP_NS && runs.len() < max_runs {
            runs.push((start, last));
            start = t;
        }
        last = t;
        if t >= until_ns {
            break;
        }
    }
    runs.push((start, last));
    Record { runs, work: 0 }
}

/// Does integer work until `until_ns`; `runs` holds checkpoints (time_ns, units so far) every
/// 1024 units, so the work of any window can be read off ([`work_per_s`]).
pub fn count_work(until_ns: u64) -> Record {
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut work = 0u64;
    let mut marks = Vec::with_capacity(1 << 16);
    loop {
        for _ in 0..256 {
            x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
            x ^= x >> 29;
        }
        work += 1;
        if work.is_multiple_of(1024) {
            let t = now_ns();
            marks.push((t, work));
            if t >= until_ns {
                break;
            }
        }
    }
    std::hint::black_box(x);
    Record { runs: marks, work }
}

/// Units of work per second inside [from_ns, to_ns], from a work record's checkpoints.
pub fn work_per_s(r: &Record, from_ns: u64, to_ns: u64) -> f64 {
    let inside: Vec<&(u64, u64)> = r.runs.iter().filter(|(t, _)| *t >= from_ns && *t <= to_ns).collect();
    match (inside.first(), inside.last()) {
        (Some(a), Some(b)) if b.0 > a.0 => (b.1 - a.1) as f64 / ((b.0 - a.0) as f64 / 1e9),
        _ => 0.0,
    }
}

/// One run of one target, for analysis.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Run {
    pub who: usize,
    pub start_ns: u64,
    pub end_ns: u64,
}

/// Merges the targets' segments inside [from_ns, to_ns] into runs: a target's consecutive
/// segments with no other target's segment between them are one run (the gap was an interrupt
/// or the host, not a switch).
pub fn runs(records: &[Record], from_ns: u64, to_ns: u64) -> Vec<Run> {
    let mut all: Vec<Run> = records
        .iter()
        .enumerate()
        .flat_map(|(who, r)| r.runs.iter().filter(|(s, e)| *s >= from_ns && *e <= to_ns).map(move |&(s, e)| Run { who, start_ns: s, end_ns: e }))
        .collect();
    all.sort_by_key(|r| r.start_ns);
    let mut out: Vec<Run> = Vec::new();
    for r in all {
        match out.last_mut() {
            Some(l) if l.who == r.who => l.end_ns = r.end_ns,
            _ => out.push(r),
        }
    }
    out
}

/// Run lengths and the gaps before each target's next run, in µs (first and last runs left
/// out: the window cuts them).
pub fn run_and_gap_us(runs: &[Run]) -> (Vec<f64>, Vec<f64>) {
    let inner = if runs.len() > 2 { &runs[1..runs.len() - 1] } else { &[] };
    let lens = inner.iter().map(|r| (r.end_ns - r.start_ns) as f64 / 1000.0).collect();
    let mut gaps = Vec::new();
    for (i, r) in inner.iter().enumerate() {
        if let Some(next) = inner[i + 1..].iter().find(|n| n.who == r.who) {
            gaps.push((next.start_ns - r.end_ns) as f64 / 1000.0);
        }
    }
    (lens, gaps)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segments_merge_into_runs_and_gaps_are_per_target() {
        let a = Record { runs: vec![(0, 10), (12, 20), (40, 60), (80, 100)], work: 0 };
        let b = Record { runs: vec![(20, 40), (60, 80)], work: 0 };
        let r = runs(&[a, b], 0, 1000);
        let who: Vec<usize> = r.iter().map(|r| r.who).collect();
        assert_eq!(who, vec![0, 1, 0, 1, 0]);
        assert_eq!((r[0].start_ns, r[0].end_ns), (0, 20));
        let (lens, gaps) = run_and_gap_us(&r);
        assert_eq!(lens, vec![0.02, 0.02, 0.02]);
        assert_eq!(gaps, vec![0.02]);
    }

    #[test]
    fn a_lone_busy_loop_records_runs_that_cover_its_window_in_order() {
        let (t0, until) = (now_ns(), now_ns() + 2_000_000);
        let r = record_runs(until, 100);
        assert!(r.runs[0].0 >= t0 && r.runs.last().unwrap().1 >= until, "{:?} not within [{t0}, ≥{until}]", r.runs);
        for w in r.runs.windows(2) {
            assert!(w[0].0 <= w[0].1 && w[1].0 - w[0].1 > GAP_NS, "runs out of order or split without a gap: {w:?}");
        }
        let w = count_work(now_ns() + 3_000_000);
        assert!(w.work > 0 && w.runs.len() >= 2);
        assert!(work_per_s(&w, w.runs[0].0, w.runs.last().unwrap().0) > 0.0);
    }
}
