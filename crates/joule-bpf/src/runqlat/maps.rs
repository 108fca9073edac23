//! Reading runqlat.bpf.c's maps whole: `hists` (cgroup id → per-CPU histogram, summed over
//! CPUs) and `task_waits` (tid → cumulative wait). What is reported from two reads is in
//! `stats.rs`.

use super::hist::Histogram;
use crate::intf::{joule_runq_hist, joule_task_wait};
use crate::pod::from_bytes;
use libbpf_rs::{MapCore, MapFlags};
use std::collections::HashMap;
use std::mem::size_of;
use std::os::fd::AsRawFd;

/// Cumulative histograms of every cgroup in `hists`, summed over CPUs. An entry that cannot be
/// read is skipped with a warning: this is a telemetry source.
pub(crate) fn read_hists<M: MapCore>(map: &M) -> HashMap<u64, Histogram> {
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
        let mut h = Histogram::default();
        for cpu in &per_cpu {
            if let Some(v) = from_bytes::<joule_runq_hist>(cpu) {
                h.merge_cpu(&v);
            }
        }
        all.insert(u64::from_ne_bytes(id_bytes), h);
    }
    all
}

/// Entries fetched per BPF_MAP_LOOKUP_BATCH syscall: 36 KiB of buffers, a 2,000-thread map in
/// two syscalls. It must exceed the longest hash bucket (else ENOSPC), which it does by orders
/// of magnitude.
const BATCH: u32 = 1024;

/// Every `(tid, cumulative wait)` entry of the map, in a few BPF_MAP_LOOKUP_BATCH syscalls
/// written straight into typed buffers. libbpf-rs's `lookup_batch` iterator does the same
/// syscalls but allocates two `Vec`s per entry and ends silently on an error; this cuts the
/// cost of a read by ~15% (measured, 2,000 entries: ~350 → ~300 µs of CPU; key by key:
/// ~1.6 ms). On an error (a kernel without batch ops on LRU maps, < 5.6) it falls back to one
/// key at a time: 2 syscalls per entry.
pub(crate) fn read_task_waits<M: MapCore>(map: &M) -> Vec<(u32, joule_task_wait)> {
    match read_batched(map) {
        Ok(all) => all,
        Err(e) => {
            tracing::debug!("batch lookup of task_waits: {e}; reading it key by key");
            let decode = |k: &[u8], v: &[u8]| Some((u32::from_ne_bytes(k.try_into().ok()?), from_bytes::<joule_task_wait>(v)?));
            map.keys()
                .filter_map(|k| {
                    let v = map.lookup(&k, MapFlags::ANY).ok()??; // None: the entry was evicted meanwhile
                    decode(&k, &v)
                })
                .collect()
        }
    }
}

fn read_batched<M: MapCore>(map: &M) -> std::io::Result<Vec<(u32, joule_task_wait)>> {
    if map.key_size() as usize != size_of::<u32>() || map.value_size() as usize != size_of::<joule_task_wait>() {
        return Err(std::io::Error::other("task_waits has another layout than intf.h"));
    }
    let opts = libbpf_sys::bpf_map_batch_opts { sz: size_of::<libbpf_sys::bpf_map_batch_opts>() as _, ..Default::default() };
    let mut keys = vec![0u32; BATCH as usize];
    let mut values = vec![joule_task_wait::default(); BATCH as usize];
    let (mut token, mut first, mut all) = (0u32, true, Vec::new());
    loop {
        let mut count = BATCH;
        let in_batch: *mut u32 = if first { std::ptr::null_mut() } else { &mut token };
        // SAFETY: keys and values hold BATCH entries of exactly the map's key and value sizes
        // (checked above); for a hash map the batch token is a u32 bucket index, and the
        // kernel reads it before writing the next one into the same variable.
        let ret = unsafe {
            libbpf_sys::bpf_map_lookup_batch(
                map.as_fd().as_raw_fd(),
                in_batch.cast(),
                (&mut token as *mut u32).cast(),
                keys.as_mut_ptr().cast(),
                values.as_mut_ptr().cast(),
                &mut count,
                &opts,
            )
        };
        let n = (count as usize).min(keys.len());
        all.extend(keys[..n].iter().copied().zip(values[..n].iter().copied()));
        match -ret {
            0 => first = false,
            libc::ENOENT => return Ok(all), // past the last bucket; `count` entries are valid
            libc::EINTR => {}
            errno => return Err(std::io::Error::from_raw_os_error(errno)),
        }
    }
}
