//! Loader and reader of runqlat.bpf.c: per-cgroup run-queue latency (wake-up → on CPU) as
//! interval p50/p99/max and cumulative histogram buckets, keyed by the cgroup of the task that
//! waited, and the threads that waited longest for a CPU.

use crate::cgroups::CgroupNames;
use crate::error::{bpf, BpfError};
use crate::hist::Histogram;
use crate::intf::{joule_runq_hist, JOULE_HIER_V1_CPU, JOULE_HIER_V2, JOULE_RUNQ_MAX_CGROUPS, JOULE_RUNQ_MAX_TASKS};
use crate::pod::from_bytes;
use crate::runqlat_skel::{RunqlatSkel, RunqlatSkelBuilder};
use crate::storage::ObjectStorage;
use crate::task_wait;
use joule_core::cgroupfs::{Controller, Layout};
use joule_core::effects::RealEffects;
use joule_core::snapshot::{RunqLatency, TaskWait};
use joule_core::Origin;
use libbpf_rs::skel::{OpenSkel, Skel, SkelBuilder};
use libbpf_rs::{MapCore, MapFlags};
use std::collections::HashMap;
use std::mem::ManuallyDrop;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Which cgroup hierarchy names the cgroups.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hierarchy {
    /// The cgroup v1 `cpu` controller's hierarchy (where tasks live on a v1 machine).
    V1Cpu,
    /// The cgroup v2 default hierarchy.
    V2,
}

#[derive(Debug, Clone)]
pub struct RunqLatOpts {
    pub hierarchy: Hierarchy,
    /// Mount point of that hierarchy (`/sys/fs/cgroup/cpu`, `/sys/fs/cgroup`): reported paths
    /// are relative to it.
    pub cgroup_root: PathBuf,
    /// Most cgroups tracked at once; a cgroup beyond it is not measured. Entries are allocated
    /// on first use (~2.2 KiB per CPU each), so a high limit costs nothing until used.
    pub max_cgroups: u32,
    /// Live threads whose cumulative wait is kept at once (an exited thread's entry is freed
    /// at exit); beyond it the least recently waiting are evicted, and an evicted thread's
    /// wait restarts from zero. The map is preallocated: ~100 bytes of kernel memory per entry,
    /// 1.6 MiB at the default 16,384. Reading costs O(entries), not O(max_tasks).
    pub max_tasks: u32,
}

impl RunqLatOpts {
    /// Chooses from the cgroup filesystem root (`--cgroup-root`, normally `/sys/fs/cgroup`), as
    /// `joule_core::cgroupfs` lays it out: the v1 `cpu` hierarchy when there is one (a `cpu`
    /// symlink resolved to the `cpu,cpuacct` co-mount), since a v1 machine's tasks are named by
    /// it; else the cgroup2 hierarchy at the root itself or at `unified/` (hybrid layout); else
    /// v2 at the root.
    pub fn for_root(cgroup_fs_root: &Path) -> Self {
        let layout = Layout::detect(cgroup_fs_root, &RealEffects);
        let (hierarchy, cgroup_root) = match (layout.v1(Controller::Cpu), &layout.unified) {
            (Some(cpu), _) => (Hierarchy::V1Cpu, cpu.to_path_buf()),
            (None, Some(v2)) => (Hierarchy::V2, v2.dir.clone()),
            (None, None) => (Hierarchy::V2, cgroup_fs_root.to_path_buf()),
        };
        Self { hierarchy, cgroup_root, max_cgroups: JOULE_RUNQ_MAX_CGROUPS, max_tasks: JOULE_RUNQ_MAX_TASKS }
    }
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
        rodata.hierarchy = match opts.hierarchy {
            Hierarchy::V1Cpu => JOULE_HIER_V1_CPU,
            Hierarchy::V2 => JOULE_HIER_V2,
        };
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
        let mut current = self.read_all();
        let ids: Vec<u64> = current.keys().copied().collect();
        let rescanned = self.names.refresh(&ids, Instant::now());
        let mut out = Vec::new();
        let mut evicted = Vec::new();
        for (&id, cur) in &current {
            let delta = match self.prev.get(&id) {
                Some(prev) => cur.since(prev),
                None => cur.since(&Histogram::default()),
            };
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
            let us = |ns: f64| ns / 1000.0;
            out.push(RunqLatency {
                cgroup,
                count: delta.count,
                p50_us: us(delta.quantile_ns(0.50).unwrap_or(0.0)),
                p99_us: us(delta.quantile_ns(0.99).unwrap_or(0.0)),
                max_us: us(delta.max_ns as f64),
                since_load: cur.buckets(),
                source: Origin::Ebpf,
            });
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
        let entries = task_wait::read_map(&self.skel.maps.task_waits);
        let cumulative: Vec<(u32, u64)> = entries.iter().map(|(tid, w)| (*tid, w.wait_ns)).collect();
        let top = task_wait::top_deltas(&self.prev_waits, &cumulative, top_n);
        self.prev_waits.clear();
        self.prev_waits.extend(cumulative.iter().copied());
        top.into_iter()
            .map(|(i, wait_ns)| {
                let (tid, w) = &entries[i];
                TaskWait { pid: *tid as i32, comm: task_wait::comm(w), wait_us: wait_ns / 1_000, source: joule_core::Origin::Ebpf }
            })
            .collect()
    }

    /// Cumulative histograms of every cgroup, summed over CPUs.
    fn read_all(&self) -> HashMap<u64, Histogram> {
        let map = &self.skel.maps.hists;
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
}

impl Drop for RunqLat {
    fn drop(&mut self) {
        // SAFETY: dropped exactly once, before `_storage` (which fields drop after this).
        unsafe { ManuallyDrop::drop(&mut self.skel) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree(files: &[&str]) -> tempfile::TempDir {
        let root = tempfile::tempdir().unwrap();
        for f in files {
            let p = root.path().join(f);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, "").unwrap();
        }
        root
    }

    #[test]
    fn for_root_prefers_the_v1_cpu_hierarchy_then_v2() {
        let hybrid = tree(&["cpu/cpu.shares", "cpuset/cpuset.cpus", "unified/cgroup.controllers"]);
        let o = RunqLatOpts::for_root(hybrid.path());
        assert_eq!((o.hierarchy, o.cgroup_root), (Hierarchy::V1Cpu, hybrid.path().join("cpu")));

        let comounted = tree(&["cpu,cpuacct/cpu.shares"]);
        assert_eq!(RunqLatOpts::for_root(comounted.path()).cgroup_root, comounted.path().join("cpu,cpuacct"));
        // systemd's layout: `cpu` is a symlink to the co-mount, which names the hierarchy.
        std::os::unix::fs::symlink("cpu,cpuacct", comounted.path().join("cpu")).unwrap();
        assert_eq!(RunqLatOpts::for_root(comounted.path()).cgroup_root, comounted.path().join("cpu,cpuacct"));

        let v2 = tree(&["cgroup.controllers", "system.slice/cgroup.procs"]);
        let o = RunqLatOpts::for_root(v2.path());
        assert_eq!((o.hierarchy, o.cgroup_root), (Hierarchy::V2, v2.path().to_path_buf()));

        let hybrid_v2_only = tree(&["unified/cgroup.controllers", "systemd/tasks"]);
        let o = RunqLatOpts::for_root(hybrid_v2_only.path());
        assert_eq!((o.hierarchy, o.cgroup_root), (Hierarchy::V2, hybrid_v2_only.path().join("unified")));

        let nothing = tree(&[]);
        let o = RunqLatOpts::for_root(nothing.path());
        assert_eq!((o.hierarchy, o.cgroup_root), (Hierarchy::V2, nothing.path().to_path_buf()));
    }
}
