//! Reading a whole hash map in a few BPF_MAP_LOOKUP_BATCH syscalls, written straight into typed
//! buffers: the cost of a read follows the number of entries / [`BATCH`], not two syscalls per
//! entry (keys(), then a lookup each: 5,000 flows cost the flow monitor 70 % of a CPU at 10 Hz
//! that way). libbpf-rs's `lookup_batch` iterator does the same syscalls but allocates two
//! `Vec`s per entry and ends silently on an error. A kernel without batch ops on this map type
//! (< 5.6) gets an error; the callers fall back to one key at a time.

use crate::pod::Pod;
use libbpf_rs::MapCore;
use std::io;
use std::mem::{size_of, MaybeUninit};
use std::os::fd::AsRawFd;

/// Entries fetched per syscall. It must exceed the longest hash bucket (else ENOSPC), which it
/// does by orders of magnitude.
pub(crate) const BATCH: u32 = 1024;

/// Every `(key, value)` of `map`, whose key and value must be `K` and `V` exactly (checked).
pub(crate) fn lookup_all<K: Pod, V: Pod, M: MapCore>(map: &M) -> io::Result<Vec<(K, V)>> {
    check::<K, M>(map, size_of::<V>())?;
    // Not zeroed: the kernel writes the first `n` entries of each batch, the only ones read.
    let mut keys: Vec<MaybeUninit<K>> = Vec::with_capacity(BATCH as usize);
    let mut values: Vec<MaybeUninit<V>> = Vec::with_capacity(BATCH as usize);
    let mut all = Vec::new();
    batches(map, keys.as_mut_ptr().cast(), values.as_mut_ptr().cast(), |n| {
        // SAFETY: the kernel wrote `n` (≤ BATCH) entries of exactly K's and V's sizes (checked),
        // and every byte pattern is a valid Pod.
        all.extend((0..n).map(|i| unsafe { (keys.as_ptr().add(i).read().assume_init(), values.as_ptr().add(i).read().assume_init()) }));
    })?;
    Ok(all)
}

/// Every `(key, value)` of `map`: [`lookup_all`], or on a kernel without batch ops on this map
/// type (< 5.6) one key at a time (two syscalls per entry; an entry evicted between listing
/// and reading is skipped). `what` names the map in the debug message of the fallback.
pub(crate) fn read_all<K: Pod, V: Pod, M: MapCore>(map: &M, what: &str) -> Vec<(K, V)> {
    match lookup_all::<K, V, M>(map) {
        Ok(all) => all,
        Err(e) => {
            tracing::debug!("batch lookup of {what}: {e}; reading it key by key");
            map.keys()
                .filter_map(|k| {
                    let v = map.lookup(&k, libbpf_rs::MapFlags::ANY).ok()??;
                    Some((crate::pod::from_bytes::<K>(&k)?, crate::pod::from_bytes::<V>(&v)?))
                })
                .collect()
        }
    }
}

/// Every `(key, value of each possible CPU)` of a per-CPU `map` of `V`s (whose size must be a
/// multiple of 8, as the kernel lays per-CPU values out).
pub(crate) fn lookup_all_percpu<K: Pod, V: Pod, M: MapCore>(map: &M, ncpus: usize) -> io::Result<Vec<(K, Vec<V>)>> {
    if !size_of::<V>().is_multiple_of(8) {
        return Err(io::Error::other("a per-CPU value must be a multiple of 8 bytes"));
    }
    check::<K, M>(map, size_of::<V>())?;
    let mut keys: Vec<MaybeUninit<K>> = Vec::with_capacity(BATCH as usize);
    let mut values: Vec<MaybeUninit<V>> = Vec::with_capacity(BATCH as usize * ncpus);
    let mut all = Vec::new();
    batches(map, keys.as_mut_ptr().cast(), values.as_mut_ptr().cast(), |n| {
        for i in 0..n {
            // SAFETY: as in `lookup_all`; entry i's values are the ncpus Vs from i * ncpus.
            let key = unsafe { keys.as_ptr().add(i).read().assume_init() };
            let at = |c: usize| {
                // SAFETY: c < ncpus, and the kernel wrote all ncpus values of entry i < n.
                unsafe { values.as_ptr().add(i * ncpus + c).read().assume_init() }
            };
            all.push((key, (0..ncpus).map(at).collect()));
        }
    })?;
    Ok(all)
}

fn check<K, M: MapCore>(map: &M, value_size: usize) -> io::Result<()> {
    if map.key_size() as usize != size_of::<K>() || map.value_size() as usize != value_size {
        return Err(io::Error::other(format!("map {} has another layout than intf.h", map.name().to_string_lossy())));
    }
    Ok(())
}

/// Runs the batch syscalls into `keys`/`values` (each holding BATCH entries of the map's
/// layout, checked by the caller), handing the count of each batch to `took`.
fn batches<M: MapCore>(map: &M, keys: *mut std::ffi::c_void, values: *mut std::ffi::c_void, mut took: impl FnMut(usize)) -> io::Result<()> {
    let opts = libbpf_sys::bpf_map_batch_opts { sz: size_of::<libbpf_sys::bpf_map_batch_opts>() as _, ..Default::default() };
    let (mut token, mut first) = (0u32, true);
    loop {
        let mut count = BATCH;
        let in_batch: *mut u32 = if first { std::ptr::null_mut() } else { &mut token };
        // SAFETY: keys and values hold BATCH entries of exactly the map's key and value sizes
        // (checked by the callers); for a hash map the batch token is a u32 bucket index, and
        // the kernel reads it before writing the next one into the same variable.
        let ret = unsafe {
            libbpf_sys::bpf_map_lookup_batch(map.as_fd().as_raw_fd(), in_batch.cast(), (&mut token as *mut u32).cast(), keys, values, &mut count, &opts)
        };
        took((count as usize).min(BATCH as usize));
        match -ret {
            0 => first = false,
            libc::ENOENT => return Ok(()), // past the last bucket; `count` entries are valid
            libc::EINTR => {}
            errno => return Err(io::Error::from_raw_os_error(errno)),
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::intf::{joule_flow_key, joule_flow_stats, joule_runq_hist};
    use libbpf_rs::MapCore;
    use std::path::Path;

    /// The batch path itself, not its key-by-key fallback, on this kernel's maps: the flow
    /// monitor's LRU hash and run-queue latency's per-CPU hash.
    #[test]
    #[ignore = "tier 2: root"]
    fn root_batch_lookup_reads_an_lru_hash_and_a_percpu_hash_on_this_kernel() {
        if !joule_core::testing::require(joule_core::testing::is_root(), "root (CAP_BPF)") {
            return;
        }
        let cg2 = joule_core::cgroupfs::Layout::detect(Path::new("/sys/fs/cgroup"), &joule_core::effects::RealEffects).unified.map(|u| u.dir);
        let Some(cg2) = cg2 else { return assert!(!joule_core::testing::require(false, "a cgroup2 hierarchy")) };
        let mon = crate::FlowMonitor::load(&cg2).unwrap();
        let runq = crate::RunqLat::load(crate::RunqLatOpts::for_root(Path::new("/sys/fs/cgroup"))).unwrap();
        let rx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let to = rx.local_addr().unwrap();
        for port in 0..50 {
            let tx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
            tx.send_to(&[port as u8; 64], to).unwrap();
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
        let flows = super::lookup_all::<joule_flow_key, joule_flow_stats, _>(&mon.skel.maps.flows).expect("batch lookup of an LRU hash");
        assert!(flows.len() >= 50, "{} flows", flows.len());
        let ncpus = libbpf_rs::num_possible_cpus().unwrap();
        let hists = super::lookup_all_percpu::<u64, joule_runq_hist, _>(&runq.skel.maps.hists, ncpus).expect("batch lookup of a per-CPU hash");
        assert!(!hists.is_empty() && hists.iter().all(|(_, v)| v.len() == ncpus));
        assert_eq!(hists.len(), runq.skel.maps.hists.keys().count(), "every entry, no more");
    }
}
