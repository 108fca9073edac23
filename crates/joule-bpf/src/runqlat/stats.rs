//! What runqlat reports, computed from two cumulative reads of its maps: a cgroup's latency in
//! the interval between them, and the threads that waited longest in it. Pure, so it is
//! tested without root; reading the maps is in `maps.rs`.

use super::hist::Histogram;
use crate::intf::joule_task_wait;
use joule_core::snapshot::{RunqLatency, TaskWait};
use joule_core::Origin;
use std::collections::HashMap;

/// A cgroup's wake-ups between the cumulative histograms `prev` (none: since load) and `cur`,
/// with `cur`'s buckets since load.
pub(crate) fn cgroup_interval(cgroup: String, cur: &Histogram, prev: Option<&Histogram>) -> RunqLatency {
    let delta = cur.since(prev.unwrap_or(&Histogram::default()));
    let us = |ns: f64| ns / 1000.0;
    RunqLatency {
        cgroup,
        count: delta.count,
        p50_us: us(delta.quantile_ns(0.50).unwrap_or(0.0)),
        p99_us: us(delta.quantile_ns(0.99).unwrap_or(0.0)),
        max_us: us(delta.max_ns as f64),
        since_load: cur.buckets(),
        source: Origin::Ebpf,
    }
}

/// The `top_n` threads of `entries` (tid, map value) that waited longest since `prev` (tid →
/// cumulative wait_ns of the previous read), longest first; `prev` becomes this read.
pub(crate) fn top_task_waits(prev: &mut HashMap<u32, u64>, entries: &[(u32, joule_task_wait)], top_n: usize) -> Vec<TaskWait> {
    let cumulative: Vec<(u32, u64)> = entries.iter().map(|(tid, w)| (*tid, w.wait_ns)).collect();
    let top = top_deltas(prev, &cumulative, top_n);
    prev.clear();
    prev.extend(cumulative.iter().copied());
    top.into_iter()
        .map(|(i, wait_ns)| {
            let (tid, w) = &entries[i];
            TaskWait { pid: *tid as i32, comm: comm(w), wait_us: wait_ns / 1_000, source: Origin::Ebpf }
        })
        .collect()
}

/// The thread name in an entry: bytes up to the first NUL (the kernel pads comm with NULs),
/// kept as they are (the thread's owner chose them).
fn comm(w: &joule_task_wait) -> joule_core::Comm {
    joule_core::Comm::from_nul_padded(&w.comm.map(|c| c as u8))
}

/// The `top_n` largest waits since the previous read, largest first (ties: lower tid first),
/// as `(position in current, wait_ns)`. `current` holds `(tid, cumulative wait_ns)`, `prev`
/// the cumulative values of the previous read. A tid missing from `prev` counts from zero (first
/// read, or a thread that first waited since). A cumulative value below the previous one means
/// the entry was recreated (the tid exited and was reused, or the LRU evicted it and it waited
/// again), so it counts from zero too. Waits under 1 µs are left out: they would show as `wait_us: 0`.
fn top_deltas(prev: &HashMap<u32, u64>, current: &[(u32, u64)], top_n: usize) -> Vec<(usize, u64)> {
    let mut deltas: Vec<(usize, u64)> = current
        .iter()
        .enumerate()
        .map(|(i, &(tid, cum))| {
            let since = prev.get(&tid).copied().filter(|&p| p <= cum).unwrap_or(0);
            (i, cum - since)
        })
        .filter(|&(_, d)| d >= 1_000)
        .collect();
    let order = |a: &(usize, u64), b: &(usize, u64)| b.1.cmp(&a.1).then(current[a.0].0.cmp(&current[b.0].0));
    if deltas.len() > top_n && top_n > 0 {
        deltas.select_nth_unstable_by(top_n - 1, order);
    }
    deltas.truncate(top_n);
    deltas.sort_unstable_by(order);
    deltas
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tids(current: &[(u32, u64)], top: &[(usize, u64)]) -> Vec<(u32, u64)> {
        top.iter().map(|&(i, d)| (current[i].0, d)).collect()
    }

    #[test]
    fn top_deltas_is_the_interval_since_the_previous_read_largest_first() {
        let prev = HashMap::from([(1, 10_000), (2, 50_000), (3, 7_000), (4, 900_000)]);
        let current = [
            (1, 30_000), // +20 µs
            (2, 50_000), // idle: left out
            (3, 7_500),  // +0.5 µs: under 1 µs, left out
            (4, 5_000),  // below its previous value: recreated, counts 5 µs
            (5, 40_000), // new: all 40 µs
            (6, 20_000), // new, ties with tid 1
        ];
        assert_eq!(tids(&current, &top_deltas(&prev, &current, 10)), vec![(5, 40_000), (1, 20_000), (6, 20_000), (4, 5_000)]);
        assert_eq!(tids(&current, &top_deltas(&prev, &current, 2)), vec![(5, 40_000), (1, 20_000)]);
        assert!(top_deltas(&prev, &current, 0).is_empty());
    }

    #[test]
    fn top_deltas_of_the_first_read_count_from_zero_and_a_repeat_read_is_empty() {
        let current: Vec<(u32, u64)> = (1..=2000).map(|tid| (tid, u64::from(tid) * 1_000)).collect();
        let top = top_deltas(&HashMap::new(), &current, 3);
        assert_eq!(tids(&current, &top), vec![(2000, 2_000_000), (1999, 1_999_000), (1998, 1_998_000)]);
        let prev: HashMap<u32, u64> = current.iter().copied().collect();
        assert!(top_deltas(&prev, &current, 50).is_empty());
    }

    fn entry(name: &[u8], wait_ns: u64) -> joule_task_wait {
        let mut w = joule_task_wait { wait_ns, ..Default::default() };
        for (d, s) in w.comm.iter_mut().zip(name) {
            *d = *s as _;
        }
        w
    }

    #[test]
    fn comm_stops_at_the_first_nul() {
        assert_eq!(comm(&entry(b"jwait-busy\0\0x", 0)), "jwait-busy");
        assert_eq!(comm(&entry(&[b'a'; 16], 0)), *"a".repeat(16));
        assert_eq!(comm(&entry(b"\xff\xfe\x1b\0", 0)).as_bytes(), b"\xff\xfe\x1b", "any bytes, kept");
    }

    #[test]
    fn top_task_waits_reports_tid_comm_and_microseconds_and_remembers_the_read() {
        let mut prev = HashMap::from([(7, 1_000_000)]);
        let entries = [(7, entry(b"busy", 3_500_999)), (9, entry(b"new", 1_500))];
        let top = top_task_waits(&mut prev, &entries, 5);
        let got: Vec<_> = top.iter().map(|w| (w.pid, w.comm.as_str(), w.wait_us, w.source)).collect();
        assert_eq!(got, vec![(7, Some("busy"), 2_500, Origin::Ebpf), (9, Some("new"), 1, Origin::Ebpf)]);
        assert_eq!(prev, HashMap::from([(7, 3_500_999), (9, 1_500)]));
        assert!(top_task_waits(&mut prev, &entries, 5).is_empty(), "nothing waited since");
    }

    #[test]
    fn a_cgroup_interval_is_the_difference_of_two_reads_with_buckets_since_load() {
        let mut before = Histogram::default();
        before.record(5_000_000);
        let mut after = before.clone();
        for _ in 0..4 {
            after.record(20_000);
        }
        let r = cgroup_interval("/a".into(), &after, Some(&before));
        assert_eq!((r.cgroup.as_str(), r.count, r.since_load.count, r.source), ("/a", 4, 5, Origin::Ebpf));
        assert!((r.p50_us - 20.0).abs() <= 20.0 * 0.0625, "{r:?}");
        assert!(r.max_us < 5_000.0, "the old outlier is not in the interval: {r:?}");
        let first = cgroup_interval("/a".into(), &after, None);
        assert_eq!((first.count, first.max_us), (5, 5_000.0), "the first read covers the time since load");
    }
}
