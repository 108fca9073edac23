//! Run-queue latency histograms in user space: the log-linear slot layout of intf.h (`enum
//! joule_hist`), merging per-CPU copies, interval deltas and percentiles, and the fixed
//! Prometheus buckets built from the slots. Pure, so it is tested without root.
//!
//! Error bound: a slot at or above 8 ns spans 1/8 of its lower bound and a percentile is
//! reported as the slot's midpoint, so it is within 6.25% of the true order statistic (slots
//! below 8 ns are exact). Values from ~69 s up share the last slot.

use crate::intf::{joule_runq_hist, JOULE_HIST_SLOTS, JOULE_HIST_SUB, JOULE_HIST_SUB_BITS};
use joule_core::snapshot::LatencyBuckets;

pub(crate) const SLOTS: usize = JOULE_HIST_SLOTS as usize;
const SUB: u64 = JOULE_HIST_SUB as u64;
const SUB_BITS: u32 = JOULE_HIST_SUB_BITS;

/// The slot a value (ns) falls into, as the BPF side computes it. Used to check the bounds
/// below and to build test histograms.
#[cfg(test)]
pub(crate) fn slot_of(v_ns: u64) -> usize {
    if v_ns < SUB {
        return v_ns as usize;
    }
    let m = 63 - v_ns.leading_zeros();
    if m >= crate::intf::JOULE_HIST_MAX_LOG2 {
        return SLOTS - 1;
    }
    let slot = (((m - SUB_BITS + 1) << SUB_BITS) as u64 | ((v_ns >> (m - SUB_BITS)) & (SUB - 1))) as usize;
    slot.min(SLOTS - 1)
}

/// `[lo, hi)` in ns of a slot.
pub(crate) fn slot_range_ns(slot: usize) -> (u64, u64) {
    let slot = slot as u64;
    let group = slot >> SUB_BITS;
    if group == 0 {
        return (slot, slot + 1);
    }
    let width = 1u64 << (group - 1);
    let lo = (SUB + (slot & (SUB - 1))) << (group - 1);
    (lo, lo + width)
}

/// First and last power of two (of ns) used as a Prometheus bucket bound.
const BUCKET_MIN_LOG2: u32 = 10;
const BUCKET_MAX_LOG2: u32 = 30;

/// Bounds of the exported histogram's buckets, ns: every power of two from 2^10 ns (1.024 µs)
/// to 2^30 ns (1.074 s), 21 buckets plus `+Inf`. Why these: every power of two from 8 ns up
/// starts a slot, so each bucket is an exact sum of whole slots (no interpolation inside a
/// slot); a factor of two between bounds bounds `histogram_quantile`'s error by the bucket
/// width, like Prometheus's own default buckets (factor 2–2.5); and a fixed set, the same on
/// every machine, is what lets buckets be summed across a fleet. Below 1 µs is faster than any
/// run-queue wait worth acting on; above 1 s lands in `+Inf` (the JSON's `max_us` still says
/// how far).
pub const BUCKET_BOUNDS_NS: [u64; (BUCKET_MAX_LOG2 - BUCKET_MIN_LOG2 + 1) as usize] = {
    let mut b = [0; (BUCKET_MAX_LOG2 - BUCKET_MIN_LOG2 + 1) as usize];
    let mut i = 0;
    while i < b.len() {
        b[i] = 1 << (BUCKET_MIN_LOG2 + i as u32);
        i += 1;
    }
    b
};

/// The value reported for a slot: the midpoint of the integers it holds.
fn slot_mid_ns(slot: usize) -> f64 {
    let (lo, hi) = slot_range_ns(slot);
    lo as f64 + (hi - lo - 1) as f64 / 2.0
}

/// A histogram summed over CPUs: cumulative since load, or an interval (a delta of two).
#[derive(Debug, Clone, PartialEq)]
pub struct Histogram {
    /// Values recorded: the sum of `slots`.
    pub count: u64,
    pub max_ns: u64,
    pub slots: Vec<u64>,
}

impl Default for Histogram {
    fn default() -> Self {
        Self { count: 0, max_ns: 0, slots: vec![0; SLOTS] }
    }
}

impl Histogram {
    /// Adds one CPU's copy of a cgroup's kernel histogram.
    pub fn merge_cpu(&mut self, h: &joule_runq_hist) {
        self.max_ns = self.max_ns.max(h.max_ns);
        for (a, b) in self.slots.iter_mut().zip(h.slots.iter()) {
            *a += b;
            self.count += b;
        }
    }

    /// Records one value, as the kernel would (tests).
    #[cfg(test)]
    pub(crate) fn record(&mut self, v_ns: u64) {
        self.count += 1;
        self.max_ns = self.max_ns.max(v_ns);
        self.slots[slot_of(v_ns)] += 1;
    }

    /// What happened between `prev` and `self` (both cumulative). Counts never go backwards;
    /// saturating keeps a half-updated per-CPU read from producing huge numbers. The max of the
    /// interval is exact when the all-time max grew in it; otherwise it is the top of the
    /// highest slot that got values, capped by the all-time max.
    pub fn since(&self, prev: &Histogram) -> Histogram {
        let slots: Vec<u64> = self.slots.iter().zip(&prev.slots).map(|(c, p)| c.saturating_sub(*p)).collect();
        let max_ns = if self.max_ns > prev.max_ns {
            self.max_ns
        } else {
            match slots.iter().rposition(|&n| n > 0) {
                Some(top) => (slot_range_ns(top).1 - 1).min(self.max_ns),
                None => 0,
            }
        };
        Histogram { count: slots.iter().sum(), max_ns, slots }
    }

    /// Prometheus buckets with the bounds of [`BUCKET_BOUNDS_NS`]: `counts[i]` is the number of
    /// values below bound i (a bound is a slot boundary, so a value of exactly 2^k ns counts in
    /// the next bucket: one nanosecond, against Prometheus's `le`), and the sum is estimated
    /// from slot midpoints (the kernel keeps no sum; see `LatencyBuckets`).
    pub fn buckets(&self) -> LatencyBuckets {
        let mut counts = Vec::with_capacity(BUCKET_BOUNDS_NS.len());
        let (mut below, mut slot) = (0u64, 0usize);
        for &bound in &BUCKET_BOUNDS_NS {
            while slot < SLOTS && slot_range_ns(slot).1 <= bound {
                below += self.slots[slot];
                slot += 1;
            }
            counts.push(below);
        }
        LatencyBuckets {
            le_ns: BUCKET_BOUNDS_NS.to_vec(),
            counts,
            count: self.count,
            estimated_sum_ns: self.slots.iter().enumerate().map(|(i, &n)| n as f64 * slot_mid_ns(i)).sum(),
        }
    }

    /// The `q`-quantile (0 < q ≤ 1) in ns: the midpoint of the slot holding the value of rank
    /// ⌈q·count⌉. `None` for an empty histogram.
    pub fn quantile_ns(&self, q: f64) -> Option<f64> {
        let total: u64 = self.slots.iter().sum();
        if total == 0 {
            return None;
        }
        let rank = ((q.clamp(0.0, 1.0) * total as f64).ceil() as u64).clamp(1, total);
        let mut seen = 0;
        for (i, &n) in self.slots.iter().enumerate() {
            seen += n;
            if seen >= rank {
                return Some(slot_mid_ns(i));
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::intf::JOULE_HIST_MAX_LOG2;

    #[test]
    fn slots_tile_the_line_without_gaps() {
        let mut expect_lo = 0;
        for s in 0..SLOTS {
            let (lo, hi) = slot_range_ns(s);
            assert_eq!(lo, expect_lo, "slot {s}");
            assert!(hi > lo);
            assert_eq!(slot_of(lo), s);
            assert_eq!(slot_of(hi - 1), s);
            expect_lo = hi;
        }
        assert_eq!(expect_lo, 1u64 << JOULE_HIST_MAX_LOG2);
        assert_eq!(slot_of(u64::MAX), SLOTS - 1);
    }

    #[test]
    fn slot_width_is_at_most_an_eighth_of_its_start() {
        for s in SUB as usize..SLOTS {
            let (lo, hi) = slot_range_ns(s);
            assert!((hi - lo) * 8 <= lo, "slot {s}: [{lo}, {hi})");
        }
    }

    #[test]
    fn quantiles_stay_within_the_documented_error() {
        for v in [1u64, 7, 8, 9, 100, 1_234, 56_789, 1_000_000, 123_456_789, 60_000_000_000] {
            let mut h = Histogram::default();
            h.record(v);
            let got = h.quantile_ns(0.5).unwrap();
            let err = (got - v as f64).abs() / v as f64;
            assert!(err <= 0.0625, "{v}: got {got}, error {err}");
        }
    }

    #[test]
    fn p50_and_p99_of_a_known_distribution() {
        let mut h = Histogram::default();
        for v in 1..=1000u64 {
            h.record(v * 1000); // 1 µs .. 1 ms, uniform
        }
        let p50 = h.quantile_ns(0.5).unwrap();
        let p99 = h.quantile_ns(0.99).unwrap();
        assert!((p50 - 500_000.0).abs() / 500_000.0 <= 0.0625, "p50 {p50}");
        assert!((p99 - 990_000.0).abs() / 990_000.0 <= 0.0625, "p99 {p99}");
        assert!(h.quantile_ns(1.0).unwrap() >= p99);
        assert_eq!(Histogram::default().quantile_ns(0.5), None);
    }

    #[test]
    fn interval_is_the_difference_of_cumulative_reads() {
        let mut before = Histogram::default();
        before.record(5_000_000); // an old 5 ms outlier
        let mut after = before.clone();
        for _ in 0..10 {
            after.record(20_000);
        }
        let d = after.since(&before);
        assert_eq!(d.count, 10);
        // The all-time max did not move: the interval max comes from its own top slot.
        let (lo, hi) = slot_range_ns(slot_of(20_000));
        assert!(d.max_ns >= lo && d.max_ns < hi, "{}", d.max_ns);
        assert!(d.quantile_ns(0.99).unwrap() < 25_000.0);

        let mut later = after.clone();
        later.record(9_000_000);
        assert_eq!(later.since(&after).max_ns, 9_000_000);
        assert_eq!(after.since(&after).count, 0);
    }

    #[test]
    fn bucket_bounds_are_sorted_slot_boundaries() {
        assert!(BUCKET_BOUNDS_NS.windows(2).all(|w| w[0] < w[1]));
        assert_eq!((BUCKET_BOUNDS_NS[0], BUCKET_BOUNDS_NS[20]), (1024, 1 << 30));
        for b in BUCKET_BOUNDS_NS {
            assert_ne!(slot_of(b - 1), slot_of(b), "{b} ns is inside a slot");
            assert_eq!(slot_range_ns(slot_of(b)).0, b);
        }
    }

    #[test]
    fn buckets_are_cumulative_exact_and_end_at_the_count() {
        let mut h = Histogram::default();
        let values = [500u64, 1023, 1024, 1500, 3000, 70_000, 999_999_999, 1 << 30, 5_000_000_000, 60_000_000_000];
        for v in values {
            h.record(v);
        }
        let b = h.buckets();
        assert_eq!(b.le_ns, BUCKET_BOUNDS_NS.to_vec());
        assert_eq!(b.counts.len(), b.le_ns.len());
        assert!(b.counts.windows(2).all(|w| w[0] <= w[1]), "not monotone: {:?}", b.counts);
        // Each bucket holds exactly the values below its bound.
        for (bound, n) in b.le_ns.iter().zip(&b.counts) {
            assert_eq!(*n, values.iter().filter(|v| *v < bound).count() as u64, "bucket < {bound} ns");
        }
        assert_eq!(b.count, values.len() as u64, "+Inf is the count");
        assert!(b.count >= *b.counts.last().unwrap());
        let true_sum: u64 = values.iter().sum();
        assert!((b.estimated_sum_ns - true_sum as f64).abs() <= 0.0625 * true_sum as f64, "{} vs {true_sum}", b.estimated_sum_ns);
        let empty = Histogram::default().buckets();
        assert!(empty.counts.iter().all(|&n| n == 0) && empty.count == 0 && empty.estimated_sum_ns == 0.0);
    }

    #[test]
    fn merging_cpus_adds_counts_and_keeps_the_max() {
        let mut a = joule_runq_hist { max_ns: 10, ..Default::default() };
        a.slots[3] = 2;
        let mut b = a;
        b.max_ns = 40;
        let mut h = Histogram::default();
        h.merge_cpu(&a);
        h.merge_cpu(&b);
        assert_eq!((h.count, h.max_ns, h.slots[3]), (4, 40, 4));
    }
}
