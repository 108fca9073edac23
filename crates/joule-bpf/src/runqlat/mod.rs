//! runqlat.bpf.c's loader: per-cgroup run-queue latency (wake-up → on CPU) as interval
//! p50/p99/max and cumulative histogram buckets, keyed by the cgroup of the task that waited,
//! and the threads that waited longest for a CPU. `opts.rs` is what it is told before load,
//! `maps.rs` reads its maps, `stats.rs` turns two reads into what it reports.

mod cgroups;
pub mod hist;
mod maps;
mod opts;
mod stats;

pub use opts::{Hierarchy, RunqLatOpts};

use crate::error::{bpf, BpfError};
use crate::storage::ObjectStorage;
use cgroups::CgroupNames;
use hist::Histogram;
use joule_core::snapshot::{RunqLatency, TaskWait};
use libbpf_rs::skel::{OpenSkel, Skel, SkelBuilder};
use libbpf_rs::MapCore;
use skel::{RunqlatSkel, RunqlatSkelBuilder};
use std::collections::HashMap;
use std::mem::ManuallyDrop;
use std::time::Instant;

#[allow(clippy::all, dead_code, unused_imports)]
mod skel {
    include!(concat!(env!("OUT_DIR"), "/runqlat.skel.rs"));
}

/// The attached run-queue latency probe. Dropping it detaches every program.
pub struct RunqLat {
    skel: ManuallyDrop<RunqlatSkel<'static>>,
    names: CgroupNames,
    prev: HashMap<u64, Histogram>,
    /// tid → cumulative wait_ns at the previous `task_waits` call.
    prev_waits: HashMap<u32, u64>,
    _storage: ObjectStorage,
}

impl RunqLat {
    pub fn load(opts: RunqLatOpts) -> Result<RunqLat, BpfError> {
        let mut storage = ObjectStorage::new();
        // SAFETY: `skel` is dropped before `storage` (see Drop), and `get` is called once.
        let open_object = unsafe { storage.get() };
        let mut open = bpf("opening runqlat.bpf.o", RunqlatSkelBuilder::default().open(open_object))?;
        let rodata = open.maps.rodata_data.as_mut().expect("runqlat has a .rodata section");
        rodata.hierarchy = opts.hierarchy.to_raw();
        bpf("sizing the hists map", open.maps.hists.set_max_entries(opts.max_cgroups.max(1)))?;
        bpf("sizing the task_waits map", open.maps.task_waits.set_max_entries(opts.max_tasks.max(1)))?;
        let mut skel = bpf("loading runqlat into the kernel", open.load())?;
        bpf("attaching to sched_wakeup/sched_wakeup_new/sched_switch/sched_process_exit/task_rename", skel.attach())?;
        Ok(RunqLat {
            skel: ManuallyDrop::new(skel),
            names: CgroupNames::new(opts.cgroup_root),
            prev: HashMap::new(),
            prev_waits: HashMap::new(),
            _storage: storage,
        })
    }

    /// Per-cgroup statistics of the wake-ups that reached a CPU since the previous call (the
    /// first call covers the time since load), with the cumulative buckets since load
    /// (`since_load`). Every cgroup in the map is listed, also one without wake-ups in the
    /// interval (count 0), so its buckets form a continuous series; by path relative to the
    /// hierarchy root, or as `id:<n>` when the id is not (or no longer) found under it. A map
    /// that cannot be read yields fewer entries and a warning, never an error: this is a
    /// telemetry source.
    ///
    /// Removed cgroups are evicted: after each rescan of the hierarchy (every 10 s, or on an
    /// unknown id at most once a second; see `CgroupNames`), an id the rescan did not find has
    /// its last interval (and buckets) reported once, as `id:<n>`, and its `hists` entry
    /// deleted, so a machine whose cgroups come and go never fills the map. An id that stays
    /// unresolvable while still in use gets a fresh entry and is evicted again at every rescan;
    /// only wake-ups between this read and the delete are lost.
    pub fn sample(&mut self) -> Vec<RunqLatency> {
        let mut current = maps::read_hists(&self.skel.maps.hists);
        let ids: Vec<u64> = current.keys().copied().collect();
        let rescanned = self.names.refresh(&ids, Instant::now());
        let mut out = Vec::new();
        let mut evicted = Vec::new();
        for (&id, cur) in &current {
            let cgroup = match self.names.lookup(id) {
                Some(path) => path.to_string(),
                None => {
                    if rescanned {
                        // Gone: report this last interval, then free its slot.
                        match self.skel.maps.hists.delete(&id.to_ne_bytes()) {
                            Ok(()) => evicted.push(id),
                            Err(e) => tracing::debug!("evicting cgroup id {id} from the run-queue latency map: {e}"),
                        }
                    }
                    format!("id:{id}")
                }
            };
            out.push(stats::cgroup_interval(cgroup, cur, self.prev.get(&id)));
        }
        for id in evicted {
            current.remove(&id);
        }
        out.sort_by(|a, b| a.cgroup.cmp(&b.cgroup));
        self.prev = current;
        out
    }

    /// The `top_n` threads that waited longest for a CPU (wake-up or preemption → on CPU) since
    /// the previous call (the first call covers the time since load), longest first; only
    /// threads that waited at least 1 µs. `pid` is the thread id (the TID of
    /// /proc/PID/task/TID, equal to the PID only for a process's main thread), `comm` the
    /// thread's name, `wait_us` rounded down. A thread that exited since the previous call is
    /// not reported (its entry is freed at exit).
    ///
    /// Cost: O(live threads that waited since load), not O(all threads): the whole map in
    /// BPF_MAP_LOOKUP_BATCH syscalls of 1,024 entries, then a pass over it. Measured on 2 CPUs,
    /// kernel 6.18, release build, ~2,000 entries, busy machine: 0.3–0.4 ms of CPU per call
    /// (150–190 ns per entry, ~85% of it reading the map), so 0.3–0.4% of one CPU at 10 Hz;
    /// see `root_task_waits_cost_with_2000_threads`.
    pub fn task_waits(&mut self, top_n: usize) -> Vec<TaskWait> {
        let entries = maps::read_task_waits(&self.skel.maps.task_waits);
        stats::top_task_waits(&mut self.prev_waits, &entries, top_n)
    }
}

impl Drop for RunqLat {
    fn drop(&mut self) {
        // SAFETY: dropped exactly once, before `_storage` (which fields drop after this).
        unsafe { ManuallyDrop::drop(&mut self.skel) };
    }
}
