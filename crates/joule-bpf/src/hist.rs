//! Run-queue latency histograms in user space: the log-linear slot layout of intf.h (`enum
//! joule_hist`), merging per-CPU copies, interval deltas and percentiles. Pure, so it is tested
//! without root.
//!
//! Error bound: a slot at or above 8 ns spans 1/8 of its lower bound and a percentile is
//! reported as the slot's midpoint, so it is within 6.25% of the true order statistic (slots
//! below 8 ns are exact). Values from ~69 s up share the last slot.

use crate::intf::{joule_runq_hist, JOULE_HIST_SLOTS, JOULE_HIST_SUB, JOULE_HIST_SUB_BITS};

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
