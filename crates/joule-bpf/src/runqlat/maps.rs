//! Reading runqlat.bpf.c's maps whole: `hists` (cgroup id → per-CPU histogram, summed over
//! CPUs) and `task_waits` (tid → cumulative wait). What is reported from two reads is in
//! `stats.rs`.

use super::hist::Histogram;
use crate::intf::{joule_runq_hist, joule_task_wait};
use crate::pod::from_bytes;
use libbpf_rs::{MapCore, MapFlags};
use std::collections::HashMap;

/// Cumulative histograms of every cgroup in `hists`, summed over CPUs: in a few batch syscalls
/// (batch.rs), else key by key. An entry that cannot be read is skipped with a warning: this is
/// a telemetry source.
pub(crate) fn read_hists<M: MapCore>(map: &M) -> HashMap<u64, Histogram> {
    let sum = |per_cpu: &[joule_runq_hist]| {
        let mut h = Histogram::default();
        for v in per_cpu {
            h.merge_cpu(v);
        }
        h
    };
    let ncpus = libbpf_rs::num_possible_cpus().unwrap_or(1);
    match crate::batch::lookup_all_percpu::<u64, joule_runq_hist, M>(map, ncpus) {
        Ok(all) => return all.into_iter().map(|(id, per_cpu)| (id, sum(&per_cpu))).collect(),
        Err(e) => tracing::debug!("batch lookup of the run-queue histograms: {e}; reading them key by key"),
    }
    let mut all = HashMap::new();
    for key in map.keys() {
        let Ok(id_bytes) = <[u8; 8]>::try_from(key.as_slice()) else { continue };
        let per_cpu = match map.lookup_percpu(&key, MapFlags::ANY) {
            Ok(Some(v)) => v,
            Ok(None) => continue, // deleted between keys() and lookup
            Err(e) => {
                tracing::warn!("reading run-queue latency of cgroup id {}: {e}", u64::from_ne_bytes(id_bytes));
                continue;
            }
        };
        let per_cpu: Vec<joule_runq_hist> = per_cpu.iter().filter_map(|b| from_bytes::<joule_runq_hist>(b)).collect();
        all.insert(u64::from_ne_bytes(id_bytes), sum(&per_cpu));
    }
    all
}

/// Every `(tid, cumulative wait)` entry of the map, in a few BPF_MAP_LOOKUP_BATCH syscalls
/// (batch.rs; measured, 2,000 entries: ~300 µs of CPU; key by key: ~1.6 ms). On an error (a
/// kernel without batch ops on LRU maps, < 5.6) it falls back to one key at a time: 2 syscalls
/// per entry.
pub(crate) fn read_task_waits<M: MapCore>(map: &M) -> Vec<(u32, joule_task_wait)> {
    crate::batch::read_all::<u32, joule_task_wait, M>(map, "task_waits")
}
