//! A pod's use, read from its own accounting (v2 `cpu.stat` usage_usec, v1 `cpuacct.usage`)
//! through the effects seam, and what it wants of its class's cap from it (`pod_share`).

use super::{CpuHier, PodCaps, PodTarget, DEFAULT_CFS_PERIOD_US, MIN_SAMPLE};
use crate::pod_share::demand_us;
use joule_core::effects::Effects;
use joule_core::fsread::{keyed_u64, read_trimmed};
use std::path::{Path, PathBuf};
use std::time::Instant;

/// A pod's use as last read, and the quota it had since (µs per 100 ms; None: its own).
#[derive(Debug, Clone)]
pub(super) struct Sample {
    usage_us: u64,
    at: Instant,
    pub(super) quota_us: Option<u64>,
    /// What it wanted at the last measure long enough to count.
    demand_us: Option<u64>,
}

impl PodCaps {
    /// Where a pod's use is read: `cpu.stat` in its v2 directory, `cpuacct.usage` in its v1
    /// cpuacct one.
    pub(super) fn usage_file(&self, mount: &Path, pod_path: &str) -> Option<PathBuf> {
        let rel = pod_path.trim_start_matches('/');
        match &self.hier {
            CpuHier::V2(_) => Some(mount.join(rel).join("cpu.stat")),
            CpuHier::V1(_) => self.cpuacct.as_ref().map(|a| a.join(rel).join("cpuacct.usage")),
        }
    }

    /// A pod's use so far (µs), from its accounting file.
    fn read_usage_us(fx: &dyn Effects, file: &Path) -> Option<u64> {
        let text = read_trimmed(fx, file).ok()?;
        if file.ends_with("cpuacct.usage") {
            return text.parse::<u64>().ok().map(|ns| ns / 1000);
        }
        keyed_u64(&text, "usage_usec")
    }

    /// What a pod wants now, from its use since the last read; the read is kept for the next.
    /// None: nothing to measure yet (a pod just joined, or no accounting): it counts as
    /// wanting only the floor, and a pod that wants more shows it within a split.
    pub(super) fn demand(&mut self, fx: &dyn Effects, pod: &PodTarget, now: Instant) -> Option<u64> {
        let used = Self::read_usage_us(fx, pod.usage.as_deref()?)?;
        let prev = self.samples.get(&pod.dir);
        let demand = match prev {
            Some(p) if now.saturating_duration_since(p.at) >= MIN_SAMPLE => {
                let dt_us = now.saturating_duration_since(p.at).as_micros().max(1) as u64;
                let per_period = used.saturating_sub(p.usage_us).saturating_mul(DEFAULT_CFS_PERIOD_US) / dt_us;
                Some(demand_us(per_period, p.quota_us))
            }
            // Too soon to measure: the last read stays, so the next interval is long enough.
            Some(p) => return p.demand_us,
            None => None,
        };
        self.samples.insert(pod.dir.clone(), Sample { usage_us: used, at: now, quota_us: None, demand_us: demand });
        demand
    }
}
