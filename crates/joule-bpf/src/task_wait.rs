//! Per-thread run-queue wait from runqlat.bpf.c's `task_waits` map: reading the map, and the
//! pure interval arithmetic (cumulative → since the previous read, top N) that tests run
//! without root.

use crate::intf::joule_task_wait;
use crate::pod::from_bytes;
use libbpf_rs::{MapCore, MapFlags};
use std::collections::HashMap;
use std::mem::size_of;
use std::os::fd::AsRawFd;

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
pub(crate) fn read_map<M: MapCore>(map: &M) -> Vec<(u32, joule_task_wait)> {
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

/// The thread name in an entry: bytes up to the first NUL (the kernel pads comm with NULs).
pub(crate) fn comm(w: &joule_task_wait) -> String {
    let bytes: Vec<u8> = w.comm.iter().map(|&c| c as u8).take_while(|&b| b != 0).collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

/// The `top_n` largest waits since the previous read, largest first (ties: lower tid first),
/// as `(position in current, wait_ns)`. `current` holds `(tid, cumulative wait_ns)`, `prev`
/// the cumulative values of the previous read. A tid missing from `prev` counts from zero (first
/// read, or a thread that first waited since). A cumulative value below the previous one means
/// the entry was recreated (the tid exited and was reused, or the LRU evicted it and it waited
/// again), so it counts from zero too. Waits under 1 µs are left out: they would show as `wait_us: 0`.
pub(crate) fn top_deltas(prev: &HashMap<u32, u64>, current: &[(u32, u64)], top_n: usize) -> Vec<(usize, u64)> {
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
            (1, 30_000),   // +20 µs
            (2, 50_000),   // idle: left out
            (3, 7_500),    // +0.5 µs: under 1 µs, left out
            (4, 5_000),    // below its previous value: recreated, counts 5 µs
            (5, 40_000),   // new: all 40 µs
            (6, 20_000),   // new, ties with tid 1
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

    #[test]
    fn comm_stops_at_the_first_nul() {
        let mut w = joule_task_wait::default();
        for (d, s) in w.comm.iter_mut().zip(b"jwait-busy\0\0x") {
            *d = *s as _;
        }
        assert_eq!(comm(&w), "jwait-busy");
        w.comm = [b'a' as _; 16];
        assert_eq!(comm(&w), "a".repeat(16));
    }
}
