//! Per-CPU utilisation from `<procfs>/stat`: busy = total − idle − iowait over the interval,
//! computed from the kernel's own tick counters (so it needs no clock), labelled `kernel`.

use crate::fsread::read_into;
use crate::{Source, SourceError};
use joule_core::{snapshot::Cpu, Origin, Snapshot};
use std::path::PathBuf;

/// Tick counters of one CPU line; `idle_ticks` includes iowait (a CPU waiting for I/O is free
/// to run anything else, so it is not busy).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct CpuTicks {
    pub total_ticks: u64,
    pub idle_ticks: u64,
}

/// Reads `/proc/stat` and keeps the previous counters of each CPU.
///
/// The first sample has no previous counters, so it reports the average since boot (counters
/// against zero); every later sample covers exactly the time since the one before. A CPU whose
/// counters went backwards (hot-unplug/replug, a restored VM) reports 0 for that interval and
/// starts again from its new counters. CPUs missing from the file (offline) read 0, and a CPU
/// that comes online after the first sample reads 0 for its first interval (its counters
/// against zero would be its average since boot, not this interval).
pub struct CpuSource {
    path: PathBuf,
    buf: String,
    prev: Vec<Option<CpuTicks>>,
    cur: Vec<Option<CpuTicks>>,
}

impl CpuSource {
    pub fn new(procfs_root: impl Into<PathBuf>) -> Self {
        Self { path: procfs_root.into().join("stat"), buf: String::new(), prev: Vec::new(), cur: Vec::new() }
    }
}

/// Parses the `cpuN` lines of /proc/stat into `out`, indexed by N (gaps stay `None`).
pub(crate) fn parse_stat(text: &str, out: &mut Vec<Option<CpuTicks>>) -> Result<(), String> {
    out.clear();
    for line in text.lines() {
        // `cpuN ...` only: the aggregate line is `cpu  ...` (no digit right after).
        let Some(rest) = line.strip_prefix("cpu").filter(|r| r.starts_with(|c: char| c.is_ascii_digit())) else { continue };
        let mut fields = rest.split_ascii_whitespace();
        let Some(id) = fields.next() else { continue };
        let Ok(cpu) = id.parse::<usize>() else { continue };
        // user nice system idle iowait irq softirq steal [guest guest_nice]: guest time is
        // already inside user/nice, so only the first eight count.
        let mut ticks = [0u64; 8];
        let mut n = 0;
        for (slot, f) in ticks.iter_mut().zip(fields) {
            *slot = f.parse().map_err(|_| format!("cpu{cpu}: bad counter {f:?}"))?;
            n += 1;
        }
        if n < 4 {
            return Err(format!("cpu{cpu}: only {n} counters"));
        }
        if out.len() <= cpu {
            out.resize(cpu + 1, None);
        }
        out[cpu] = Some(CpuTicks { total_ticks: ticks.iter().sum(), idle_ticks: ticks[3] + ticks[4] });
    }
    if out.is_empty() {
        return Err("no cpuN lines".into());
    }
    Ok(())
}

/// Busy fraction between two readings of one CPU; 0 when no tick elapsed or on a reset.
pub(crate) fn busy_fraction(prev: CpuTicks, cur: CpuTicks) -> f64 {
    if cur.total_ticks < prev.total_ticks {
        return 0.0; // counters reset
    }
    let total = cur.total_ticks - prev.total_ticks;
    if total == 0 {
        return 0.0;
    }
    // iowait may step backwards on NO_HZ kernels; saturate instead of wrapping.
    let idle = cur.idle_ticks.saturating_sub(prev.idle_ticks).min(total);
    ((total - idle) as f64 / total as f64).clamp(0.0, 1.0)
}

impl Source for CpuSource {
    fn name(&self) -> &'static str {
        "cpu"
    }

    fn sample(&mut self, snap: &mut Snapshot) -> Result<(), SourceError> {
        read_into(&self.path, &mut self.buf).map_err(|e| SourceError::read(&self.path, e))?;
        parse_stat(&self.buf, &mut self.cur).map_err(|d| SourceError::parse(&self.path, d))?;
        let first = self.prev.is_empty();
        let utilization: Vec<f64> = self
            .cur
            .iter()
            .enumerate()
            .map(|(i, cur)| match (cur, self.prev.get(i).copied().flatten()) {
                (Some(cur), Some(prev)) => busy_fraction(prev, *cur),
                (Some(cur), None) if first => busy_fraction(CpuTicks::default(), *cur),
                (Some(_), None) => 0.0, // came online since the last sample: no interval yet
                (None, _) => 0.0,
            })
            .collect();
        let online = self.cur.iter().filter(|c| c.is_some()).count().max(1);
        let total_utilization = utilization.iter().sum::<f64>() / online as f64;
        snap.cpu = Cpu { utilization, total_utilization, source: Origin::Kernel };
        std::mem::swap(&mut self.prev, &mut self.cur);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reset_counters_read_zero_not_garbage() {
        let prev = CpuTicks { total_ticks: 1000, idle_ticks: 500 };
        assert_eq!(busy_fraction(prev, CpuTicks { total_ticks: 10, idle_ticks: 5 }), 0.0);
        assert_eq!(busy_fraction(prev, prev), 0.0);
    }

    #[test]
    fn iowait_going_backwards_saturates() {
        let prev = CpuTicks { total_ticks: 1000, idle_ticks: 500 };
        let cur = CpuTicks { total_ticks: 1100, idle_ticks: 499 };
        assert_eq!(busy_fraction(prev, cur), 1.0);
    }

    #[test]
    fn parse_skips_aggregate_and_indexes_by_number() {
        let mut v = Vec::new();
        parse_stat("cpu 1 1 1 1\ncpu0 1 0 1 6 2 0 0 0 5 0\ncpu2 1 1 1 1 0 0 0 0\nintr 5\n", &mut v).unwrap();
        assert_eq!(v.len(), 3);
        assert_eq!(v[0], Some(CpuTicks { total_ticks: 10, idle_ticks: 8 }));
        assert_eq!(v[1], None);
    }
}
