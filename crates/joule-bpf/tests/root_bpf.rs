//! Tier 2 (root, this kernel): the BPF programs loaded for real — run-queue latency of a real
//! workload in a temporary v1 cpu cgroup, and the in-kernel thermal stage with its pins.

use joule_bpf::thermal::{MODEL_ZONE, PIN_CONFIG, PIN_STAGE, PIN_ZONES};
use joule_bpf::{Hierarchy, RunqLat, RunqLatOpts, StageReading, TempSource, ThermalStage, ThermalStageOpts};
use joule_core::journal::{self, Journal, Undo};
use joule_core::testing::{is_root, require};
use joule_testkit::TempBpffs;
use libbpf_rs::{MapCore, MapFlags, MapHandle};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

macro_rules! require_root {
    () => {
        if !require(is_root(), "root (CAP_BPF, CAP_SYS_ADMIN)") {
            return;
        }
    };
}

const V1_CPU: &str = "/sys/fs/cgroup/cpu";

/// A hierarchy to move processes in: the v1 cpu hierarchy where there is one (this host), else
/// the v2 root (a pure v2 guest, such as the arm64 one).
fn move_target_root() -> PathBuf {
    if Path::new(V1_CPU).exists() {
        PathBuf::from(V1_CPU)
    } else {
        PathBuf::from("/sys/fs/cgroup")
    }
}

/// Where cgroup2 is mounted, if anywhere.
fn cgroup2_mount() -> Option<PathBuf> {
    std::fs::read_to_string("/proc/self/mounts").ok().and_then(|m| {
        m.lines().find_map(|l| match l.split_whitespace().collect::<Vec<_>>()[..] {
            [_, mnt, "cgroup2", ..] => Some(PathBuf::from(mnt)),
            _ => None,
        })
    })
}

/// Ids of loaded BPF programs whose name starts with `prefix` (names are cut at 15 bytes).
fn prog_ids(prefix: &str) -> std::collections::BTreeSet<u32> {
    libbpf_rs::query::ProgInfoIter::default().filter(|p| p.name.to_string_lossy().starts_with(prefix)).map(|p| p.id).collect()
}

/// Waits up to a second for programs to be released (the kernel frees them after the last
/// reference drops) and says whether all of `ids` are gone.
fn all_unloaded(ids: &std::collections::BTreeSet<u32>, prefix: &str) -> bool {
    let deadline = Instant::now() + Duration::from_secs(1);
    loop {
        if prog_ids(prefix).is_disjoint(ids) {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A v1 cpu cgroup that exists for one test; removed on drop, even when the test panics.
struct TempCgroup {
    dir: PathBuf,
}

impl TempCgroup {
    fn new(root: &Path) -> TempCgroup {
        let dir = root.join(format!("joule-test-{}", std::process::id()));
        std::fs::create_dir(&dir).unwrap_or_else(|e| panic!("mkdir {}: {e}", dir.display()));
        TempCgroup { dir }
    }
    fn enter_current_thread(&self) {
        // SAFETY: gettid has no preconditions.
        let tid = unsafe { libc::gettid() };
        std::fs::write(self.dir.join("tasks"), tid.to_string()).expect("moving a thread into the test cgroup");
    }
}

impl Drop for TempCgroup {
    fn drop(&mut self) {
        let parent_tasks = self.dir.parent().unwrap().join("tasks");
        for _ in 0..50 {
            if let Ok(tasks) = std::fs::read_to_string(self.dir.join("tasks")) {
                for tid in tasks.split_whitespace() {
                    let _ = std::fs::write(&parent_tasks, tid);
                }
            }
            if std::fs::remove_dir(&self.dir).is_ok() || !self.dir.exists() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        eprintln!("could not remove {}", self.dir.display());
    }
}

/// 4 spinning threads + 1 thread that sleeps 1 ms in a loop, for `dur`, all inside `cg`
/// (or where they are when `cg` is None). Returns the sleeper's wake-up count.
fn workload(cg: Option<&TempCgroup>, dur: Duration) -> u64 {
    let stop = Arc::new(AtomicBool::new(false));
    std::thread::scope(|s| {
        for _ in 0..4 {
            let stop = stop.clone();
            s.spawn(move || {
                if let Some(cg) = cg {
                    cg.enter_current_thread();
                }
                let mut x = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(7));
                }
            });
        }
        let sleeper = {
            let stop = stop.clone();
            s.spawn(move || {
                if let Some(cg) = cg {
                    cg.enter_current_thread();
                }
                let mut wakes = 0;
                while !stop.load(Ordering::Relaxed) {
                    std::thread::sleep(Duration::from_millis(1));
                    wakes += 1;
                }
                wakes
            })
        };
        std::thread::sleep(dur);
        stop.store(true, Ordering::Relaxed);
        sleeper.join().unwrap()
    })
}

#[test]
#[ignore = "tier 2: root"]
fn root_runqlat_fills_the_histogram_of_a_busy_v1_cgroup() {
    require_root!();
    if !require(Path::new(V1_CPU).join("tasks").exists(), "cgroup v1 cpu hierarchy at /sys/fs/cgroup/cpu") {
        return;
    }
    let cg = TempCgroup::new(Path::new(V1_CPU));
    let before = prog_ids("joule_sched");
    let t0 = Instant::now();
    let mut rq =
        RunqLat::load(RunqLatOpts { hierarchy: Hierarchy::V1Cpu, cgroup_root: V1_CPU.into(), max_cgroups: 4096, max_tasks: 16384 }).expect("loading runqlat");
    eprintln!("runqlat loaded and attached in {:?}", t0.elapsed());
    let _ = rq.sample(); // baseline: the next interval is the workload's
    let wakes = workload(Some(&cg), Duration::from_secs(1));
    let stats = rq.sample();
    let name = format!("/{}", cg.dir.file_name().unwrap().to_string_lossy());
    let mine = stats.iter().find(|s| s.cgroup == name).unwrap_or_else(|| panic!("no entry for {name} in {stats:#?}"));
    eprintln!("sleeper woke {wakes} times; {mine:?}");
    for s in &stats {
        eprintln!("  {:<40} count {:>7} p50 {:>9.1} us p99 {:>9.1} us max {:>9.1} us", s.cgroup, s.count, s.p50_us, s.p99_us, s.max_us);
    }
    assert!(mine.count > 0);
    assert!(mine.p50_us > 0.0, "{mine:?}");
    assert!(mine.p99_us >= mine.p50_us, "{mine:?}");
    assert!(mine.max_us >= mine.p99_us * 0.93, "max is within a slot of p99 or above: {mine:?}");
    assert_eq!(mine.source, joule_core::Origin::Ebpf);
    let total = &mine.since_load;
    assert!(total.count >= mine.count && total.counts.windows(2).all(|w| w[0] <= w[1]), "{mine:?}");
    assert!(total.count >= *total.counts.last().unwrap() && total.estimated_sum_ns > 0.0, "{mine:?}");
    // An idle interval: the (now empty) cgroup is still listed, with (almost) no wake-ups in
    // the interval and its cumulative buckets kept, so a Prometheus series does not break.
    let again = rq.sample();
    let idle = again.iter().find(|s| s.cgroup == name).unwrap_or_else(|| panic!("{name} not listed while idle: {again:#?}"));
    assert!(idle.count < mine.count, "{idle:?}");
    assert!(idle.since_load.count >= total.count && idle.since_load.counts.iter().zip(&total.counts).all(|(a, b)| a >= b), "{idle:?}");

    let ours: std::collections::BTreeSet<u32> = prog_ids("joule_sched").difference(&before).copied().collect();
    assert_eq!(ours.len(), 5, "sched_wakeup, sched_wakeup_new, sched_switch, sched_process_exit, task_rename");
    drop(rq);
    assert!(all_unloaded(&ours, "joule_sched"), "dropping RunqLat must detach and unload its programs");
}

/// The `hists` map of the runqlat instance whose sched_switch program is `prog`, opened by id
/// as another process would.
fn hists_map_of(prog: u32) -> MapHandle {
    let info = libbpf_rs::query::ProgInfoIter::with_query_opts(libbpf_rs::query::ProgInfoQueryOptions::default().include_map_ids(true))
        .find(|p| p.id == prog)
        .expect("our sched_switch program is loaded");
    info.map_ids.iter().filter_map(|&id| MapHandle::from_map_id(id).ok()).find(|m| m.name() == "hists").expect("sched_switch uses the hists map")
}

/// Cgroups come and go: a removed cgroup's `hists` entry must be freed, or a machine with
/// churning cgroups fills the map and new cgroups go unmeasured. Waits out one rescan period
/// (10 s).
#[test]
#[ignore = "tier 2: root"]
fn root_runqlat_evicts_a_removed_cgroup_after_the_rescan_period() {
    require_root!();
    if !require(Path::new(V1_CPU).join("tasks").exists(), "cgroup v1 cpu hierarchy at /sys/fs/cgroup/cpu") {
        return;
    }
    let cg = TempCgroup::new(Path::new(V1_CPU));
    let id = std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(&cg.dir).unwrap());
    let name = format!("/{}", cg.dir.file_name().unwrap().to_string_lossy());
    let before = prog_ids("joule_sched_swi");
    let mut rq =
        RunqLat::load(RunqLatOpts { hierarchy: Hierarchy::V1Cpu, cgroup_root: V1_CPU.into(), max_cgroups: 4096, max_tasks: 16384 }).expect("loading runqlat");
    let switch: Vec<u32> = prog_ids("joule_sched_swi").difference(&before).copied().collect();
    assert_eq!(switch.len(), 1, "{switch:?}");
    let hists = hists_map_of(switch[0]);
    let in_map = || hists.lookup_percpu(&id.to_ne_bytes(), MapFlags::ANY).unwrap().is_some();
    let t0 = Instant::now();
    let _ = rq.sample(); // baseline, and the first walk of the hierarchy

    // 1 ms sleeps in the cgroup; after `n` of them the thread moves itself back to the root.
    let sleep_in_cgroup = |n: u32| {
        std::thread::scope(|s| {
            s.spawn(|| {
                cg.enter_current_thread();
                for _ in 0..n {
                    std::thread::sleep(Duration::from_millis(1));
                }
                // SAFETY: gettid has no preconditions.
                let tid = unsafe { libc::gettid() };
                std::fs::write(Path::new(V1_CPU).join("tasks"), tid.to_string()).expect("leaving the test cgroup");
            });
        })
    };
    sleep_in_cgroup(100);
    let stats = rq.sample();
    assert!(stats.iter().any(|s| s.cgroup == name && s.count > 0), "no entry for {name} in {stats:#?}");
    assert!(in_map(), "cgroup id {id} is in hists while the cgroup exists");

    // More wake-ups, then the cgroup goes away before the next sample.
    sleep_in_cgroup(100);
    std::fs::remove_dir(&cg.dir).expect("rmdir of the (now empty) test cgroup");
    assert!(in_map(), "nothing has evicted it yet");
    let period = Duration::from_secs(10);
    std::thread::sleep((t0 + period + Duration::from_millis(200)).saturating_duration_since(Instant::now()));

    let last = rq.sample();
    let gone = format!("id:{id}");
    let mine: Vec<_> = last.iter().filter(|s| s.cgroup == gone || s.cgroup == name).collect();
    eprintln!("after the rescan: {mine:?}");
    assert!(matches!(mine[..], [m] if m.cgroup == gone && m.count > 0), "the last interval is reported once, as {gone}: {last:#?}");
    assert!(!in_map(), "the removed cgroup's hists entry is deleted");
    let after = rq.sample();
    assert!(after.iter().all(|s| s.cgroup != gone && s.cgroup != name), "reported once only: {after:#?}");
    assert!(!in_map());
}

#[test]
#[ignore = "tier 2: root"]
fn root_runqlat_on_cgroup_v2_reports_the_root() {
    require_root!();
    let Some(root) = cgroup2_mount() else {
        require(false, "a cgroup2 mount");
        return;
    };
    let mut rq =
        RunqLat::load(RunqLatOpts { hierarchy: Hierarchy::V2, cgroup_root: root.clone(), max_cgroups: 64, max_tasks: 1024 }).expect("loading runqlat (v2)");
    workload(None, Duration::from_millis(300));
    let stats = rq.sample();
    eprintln!("v2 at {}: {stats:?}", root.display());
    assert!(stats.iter().any(|s| s.count > 0 && !s.cgroup.starts_with("id:")), "{stats:?}");
}

/// CPU time of the calling thread (user + system), ns.
fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: a valid timespec to fill.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

fn runqlat_for_this_machine() -> RunqLat {
    RunqLat::load(RunqLatOpts::for_root(Path::new("/sys/fs/cgroup"))).expect("loading runqlat")
}

#[test]
#[ignore = "tier 2: root"]
fn root_task_waits_reports_the_threads_that_waited_with_their_tid_and_comm() {
    require_root!();
    let mut rq = runqlat_for_this_machine();
    let _ = rq.task_waits(50); // baseline
    let stop = Arc::new(AtomicBool::new(false));
    let tids = Arc::new(std::sync::Mutex::new(Vec::new()));
    let spawn = |name: &str, sleep: bool| {
        let (stop, tids) = (stop.clone(), tids.clone());
        std::thread::Builder::new()
            .name(name.into())
            .spawn(move || {
                // SAFETY: gettid has no preconditions.
                tids.lock().unwrap().push(unsafe { libc::gettid() });
                let mut x = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    if sleep {
                        std::thread::sleep(Duration::from_millis(1));
                    } else {
                        x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(7));
                    }
                }
            })
            .unwrap()
    };
    let mut threads: Vec<_> = (0..3).map(|_| spawn("jwait-busy", false)).collect();
    threads.push(spawn("jwait-sleeper", true));
    std::thread::sleep(Duration::from_secs(1));
    let first = rq.task_waits(50);
    stop.store(true, Ordering::Relaxed);
    threads.into_iter().for_each(|t| t.join().unwrap());
    let second = rq.task_waits(50);

    for w in &first {
        eprintln!("  {:>7} {:<16} {:>9} us", w.pid, w.comm, w.wait_us);
    }
    let ours: Vec<_> = first.iter().filter(|w| w.comm.as_bytes().starts_with(b"jwait-")).collect();
    let tids = tids.lock().unwrap().clone();
    assert_eq!(ours.iter().filter(|w| w.comm == "jwait-busy").count(), 3, "{first:#?}");
    assert_eq!(ours.iter().filter(|w| w.comm == "jwait-sleeper").count(), 1, "{first:#?}");
    let mut got: Vec<i32> = ours.iter().map(|w| w.pid).collect();
    let mut want = tids.clone();
    got.sort();
    want.sort();
    assert_eq!(got, want, "pid is the thread id");
    assert!(first.windows(2).all(|w| w[0].wait_us >= w[1].wait_us), "longest first");
    for w in &ours {
        assert!(w.wait_us > 0, "{w:?}");
        let again = second.iter().find(|s| s.pid == w.pid).map_or(0, |s| s.wait_us);
        assert!(again < w.wait_us, "the second call covers only the time since the first: {w:?} then {again} us");
    }
}

/// Not a pass/fail benchmark: prints the CPU cost of one `task_waits` call with ~2,000 more
/// threads in the map than the machine has (each waited once, when it started), and fails
/// only if it is absurd (the /proc walk it replaces costs ~2 ms per call at 1,000 threads).
#[test]
#[ignore = "tier 2: root"]
fn root_task_waits_cost_with_2000_threads() {
    require_root!();
    let mut rq = runqlat_for_this_machine();
    let gate = Arc::new((std::sync::Mutex::new(false), std::sync::Condvar::new()));
    let sleepers: Vec<_> = (0..2000)
        .map(|_| {
            let gate = gate.clone();
            std::thread::Builder::new()
                .stack_size(64 << 10)
                .spawn(move || {
                    let (m, cv) = &*gate;
                    let _g = cv.wait_while(m.lock().unwrap(), |stop| !*stop).unwrap();
                })
                .unwrap()
        })
        .collect();
    std::thread::sleep(Duration::from_millis(200));
    let threads = std::fs::read_dir("/proc").unwrap().flatten().filter_map(|p| std::fs::read_dir(p.path().join("task")).ok()).map(|t| t.count()).sum::<usize>();

    let (c0, t0) = (thread_cpu_ns(), Instant::now());
    let first = rq.task_waits(50);
    let first_ns = thread_cpu_ns() - c0;
    const CALLS: u64 = 50;
    let c1 = thread_cpu_ns();
    for _ in 0..CALLS {
        std::hint::black_box(rq.task_waits(50));
        std::thread::sleep(Duration::from_millis(2)); // let the map see some switches in between
    }
    let per_call_ns = (thread_cpu_ns() - c1) / CALLS;
    eprintln!(
        "threads on the machine: {threads}; first call {:.3} ms CPU ({:?} wall, {} reported); then {:.3} ms CPU per call",
        first_ns as f64 / 1e6,
        t0.elapsed(),
        first.len(),
        per_call_ns as f64 / 1e6
    );
    *gate.0.lock().unwrap() = true;
    gate.1.notify_all();
    sleepers.into_iter().for_each(|t| t.join().unwrap());
    assert_eq!(first.len(), 50, "the map holds more than 50 threads that waited");
    assert!(per_call_ns < 20_000_000, "{per_call_ns} ns per call");
}

/// The real journal, checking at each record that what the undo removes does not exist yet.
struct CheckedJournal {
    journal: Journal,
    /// Paths that already existed when their undo was recorded.
    existed: Vec<PathBuf>,
}

impl joule_bpf::UndoRecorder for CheckedJournal {
    fn record(&mut self, owner: &str, undo: Undo) -> Result<(), journal::JournalError> {
        match &undo {
            Undo::RemoveDir { path, .. } | Undo::RemoveFile { path } if path.exists() => self.existed.push(path.clone()),
            _ => {}
        }
        self.journal.record(owner, undo)
    }
}

fn feed_and_read(ts: &ThermalStage, temp_mc: i64) -> StageReading {
    ts.feed(MODEL_ZONE, temp_mc, TempSource::Model).unwrap_or_else(|e| panic!("feed {temp_mc}: {e}"));
    ts.read()
}

#[test]
#[ignore = "tier 2: root"]
fn root_thermal_stage_follows_fed_temperatures_with_hysteresis_and_is_pinned() {
    require_root!();
    let bpffs = TempBpffs::new().expect("mounting a bpffs of the test's own");
    let pin_dir = bpffs.path().join("joule-test");
    let jdir = tempfile::tempdir().unwrap();
    let mut journal = CheckedJournal { journal: Journal::open(jdir.path()).unwrap(), existed: vec![] };
    let opts = ThermalStageOpts { pin_dir: Some(pin_dir.clone()), thresholds_mc: vec![70_000, 80_000, 90_000], hysteresis_mc: 3_000, tracepoint_zones: None };
    let ts = ThermalStage::load_with(opts, Some(&mut journal)).expect("loading the thermal stage");

    let undos: Vec<Undo> = journal::entries(jdir.path()).unwrap().into_iter().map(|e| e.undo).collect();
    let mut expect = vec![Undo::RemoveDir { path: pin_dir.clone(), evacuate_to: None }];
    expect.extend([PIN_STAGE, PIN_ZONES, PIN_CONFIG].map(|n| Undo::RemoveFile { path: pin_dir.join(n) }));
    assert_eq!(undos, expect, "the directory and every pin are journaled");
    assert_eq!(journal.existed, Vec::<PathBuf>::new(), "each was journaled before it existed");
    assert!(expect.iter().all(|u| matches!(u, Undo::RemoveDir { path, .. } | Undo::RemoveFile { path } if path.exists())));

    let steps = [(60_000, 0), (71_000, 1), (69_000, 1), (66_900, 0), (95_000, 3), (50_000, 0)];
    for (temp, want) in steps {
        let r = feed_and_read(&ts, temp);
        eprintln!("fed {temp} mC -> stage {} ({r:?})", r.stage);
        assert_eq!(r.stage, want, "after {temp} mC");
        assert_eq!((r.temp_mc, r.zone, r.source), (temp, MODEL_ZONE, TempSource::Model));
        assert!(r.updated_ns > 0);
    }
    assert_eq!(ts.read().transitions, 4, "0→1, 1→0, 0→3, 3→0");

    // The machine stage is the max over zones.
    ts.feed(3, 85_000, TempSource::Sensor).unwrap();
    let r = ts.read();
    assert_eq!((r.stage, r.zone, r.source), (2, 3, TempSource::Sensor));
    let zones = ts.zones();
    assert_eq!(zones.iter().map(|z| (z.zone, z.stage)).collect::<Vec<_>>(), vec![(3, 2), (MODEL_ZONE, 0)]);

    // Another process's view: the pinned map, opened on its own.
    let handle = MapHandle::from_pinned_path(pin_dir.join(PIN_STAGE)).expect("opening the pinned stage map");
    let raw = handle.lookup(&0u32.to_ne_bytes(), MapFlags::ANY).unwrap().unwrap();
    let pinned = StageReading::from_map_value(&raw).unwrap();
    assert_eq!(pinned, ts.read());
    assert_eq!(ThermalStage::read_pinned(&pin_dir).unwrap(), pinned);
    drop(handle);

    ts.unpin().unwrap();
    assert!(!pin_dir.exists(), "{} left behind", pin_dir.display());
}

/// A zone that stops reporting stops counting: zone A at 95 °C sets stage 3; once only zone B
/// (50 °C) reports and A's last reading is older than stale_ms, the stage is B's. With no
/// reading at all, nothing recomputes the stage, so it keeps its last value.
/// Each change of the stage, and only a change, reaches a thread sleeping on the ring buffer
/// (what ends a napped agent's sleep), and a stop ends that thread's wait.
#[test]
#[ignore = "tier 2: root"]
fn root_thermal_stage_changes_wake_a_sleeping_reader_and_nothing_else_does() {
    require_root!();
    let opts = ThermalStageOpts { pin_dir: None, thresholds_mc: vec![70_000, 80_000, 90_000], hysteresis_mc: 3_000, tracepoint_zones: None };
    let ts = ThermalStage::load(opts, None).expect("loading the thermal stage");
    let waker = ts.stage_waker().unwrap();
    let stop = joule_bpf::RingStop::new().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let st = stop.clone();
    let reader = std::thread::spawn(move || waker.run(&st, |e| tx.send(e).unwrap()));
    let next = || rx.recv_timeout(Duration::from_secs(2));
    // 50 °C: stage 0 as before, no event. 85 °C: 0 -> 2. 84 °C: no change. 60 °C: 2 -> 0.
    for t in [50_000, 85_000, 84_000, 60_000] {
        ts.feed(1, t, TempSource::Sensor).unwrap();
    }
    let e = next().expect("the rise reached the reader");
    assert_eq!((e.old_stage, e.stage, e.temp_mc, e.zone), (0, 2, 85_000, 1));
    let e = next().expect("the fall reached the reader");
    assert_eq!((e.old_stage, e.stage, e.temp_mc), (2, 0, 60_000));
    assert!(rx.recv_timeout(Duration::from_millis(200)).is_err(), "a reading that changes no stage sends nothing");
    stop.stop();
    reader.join().unwrap().expect("the reader ended without error");
}

#[test]
#[ignore = "tier 2: root"]
fn root_thermal_a_stale_zone_no_longer_holds_the_stage_up() {
    require_root!();
    const STALE: Duration = Duration::from_millis(300);
    let (a, b) = (1, 2);
    let opts = ThermalStageOpts { pin_dir: None, thresholds_mc: vec![70_000, 80_000, 90_000], hysteresis_mc: 3_000, tracepoint_zones: None };
    let mut ts = ThermalStage::load(opts, None).expect("loading the thermal stage");
    ts.set_stale_ms(STALE.as_millis() as u64).unwrap();
    let feed = |zone: u32, temp_mc: i64| {
        ts.feed(zone, temp_mc, TempSource::Sensor).unwrap();
        let r = ts.read();
        (r.stage, r.zone)
    };

    assert_eq!(feed(a, 95_000), (3, a));
    // No reading at all for longer than stale_ms: the stage stays the last value.
    std::thread::sleep(STALE + Duration::from_millis(100));
    assert_eq!((ts.read().stage, ts.read().zone), (3, a), "with no zone fresh the stage keeps its last value");
    // B's first reading: A is stale, so B alone sets the stage.
    assert_eq!(feed(b, 50_000), (0, b));

    // A again, then only B, every 50 ms: A holds stage 3 while fresh, then B's stage wins.
    assert_eq!(feed(a, 95_000), (3, a));
    let a_fed = Instant::now();
    let mut dropped_after = None;
    while a_fed.elapsed() < STALE * 3 {
        std::thread::sleep(Duration::from_millis(50));
        let (fed_at, got) = (a_fed.elapsed(), feed(b, 50_000));
        eprintln!("{fed_at:?} after A: {got:?}");
        if fed_at < STALE - Duration::from_millis(50) {
            assert_eq!(got, (3, a), "A is fresh {fed_at:?} after its reading");
        } else if got == (0, b) {
            dropped_after.get_or_insert(fed_at);
        }
    }
    let dropped_after = dropped_after.expect("the stage dropped to B's once A went stale");
    assert!(dropped_after >= STALE, "{dropped_after:?}");
    assert_eq!(feed(b, 50_000), (0, b));
    let zones = ts.zones();
    assert_eq!(
        zones.iter().map(|z| (z.zone, z.temp_mc, z.stage)).collect::<Vec<_>>(),
        vec![(a, 95_000, 3), (b, 50_000, 0)],
        "a stale zone keeps its own state"
    );
    assert_eq!(ts.read().transitions, 4, "0→3, 3→0, 0→3, 3→0");
}

/// The zone map holds JOULE_MAX_ZONES (64) zones: a 65th is refused, and known zones still feed.
#[test]
#[ignore = "tier 2: root"]
fn root_thermal_a_zone_beyond_the_map_is_refused() {
    require_root!();
    let opts = ThermalStageOpts { pin_dir: None, thresholds_mc: vec![70_000], hysteresis_mc: 0, tracepoint_zones: None };
    let ts = ThermalStage::load(opts, None).expect("loading the thermal stage");
    for zone in 0..64 {
        ts.feed(zone, 40_000, TempSource::Sensor).unwrap_or_else(|e| panic!("zone {zone}: {e}"));
    }
    let err = ts.feed(64, 40_000, TempSource::Sensor).expect_err("a 65th zone");
    assert!(err.to_string().contains("too many thermal zones"), "{err}");
    ts.feed(5, 75_000, TempSource::Sensor).expect("a known zone still feeds");
    assert_eq!((ts.read().stage, ts.read().zone), (1, 5));
}

#[test]
#[ignore = "tier 2: root"]
fn root_thermal_tracepoint_attaches_and_drop_leaves_no_pins() {
    require_root!();
    let bpffs = TempBpffs::new().expect("mounting a bpffs of the test's own");
    let pin_dir = bpffs.path().join("joule-test-tp");
    let opts = ThermalStageOpts { pin_dir: Some(pin_dir.clone()), thresholds_mc: vec![80_000], hysteresis_mc: 0, tracepoint_zones: None };
    let before = prog_ids("joule_thermal");
    let ts = ThermalStage::load(opts.clone(), None).expect("loading the thermal stage");
    let ours: std::collections::BTreeSet<u32> = prog_ids("joule_thermal").difference(&before).copied().collect();
    eprintln!("tp_btf/thermal_temperature attached: {} ({:?})", ts.attached_to_tracepoint(), ts.tracepoint_error());
    assert!(ts.attached_to_tracepoint(), "{:?}", ts.tracepoint_error());
    // A second instance must not steal the pins of the first.
    match ThermalStage::load(opts, None) {
        Err(joule_bpf::BpfError::AlreadyPinned { path }) => assert_eq!(path, pin_dir.join(PIN_STAGE)),
        other => panic!("expected AlreadyPinned, got {:?}", other.map(|_| ())),
    }
    assert!(pin_dir.join(PIN_STAGE).exists(), "the failed second load must leave the first one's pins");
    drop(ts);
    assert!(!pin_dir.exists(), "{} left behind", pin_dir.display());
    assert!(all_unloaded(&ours, "joule_thermal"), "dropping ThermalStage must unload its programs");
}

#[test]
#[ignore = "tier 2: root"]
fn root_probe_passes_on_this_machine() {
    require_root!();
    joule_bpf::probe().expect("BPF usable");
}

#[test]
#[ignore = "tier 2: root"]
fn root_thermal_private_stage_works_without_pins() {
    require_root!();
    let before: Vec<_> = std::fs::read_dir("/sys/fs/bpf").unwrap().flatten().map(|e| e.path()).collect();
    let opts = ThermalStageOpts { pin_dir: None, thresholds_mc: vec![70_000, 80_000], hysteresis_mc: 2_000, tracepoint_zones: None };
    let ts = ThermalStage::load(opts, None).expect("loading a private thermal stage");
    assert_eq!(ts.pin_dir(), None);
    assert_eq!(feed_and_read(&ts, 81_000).stage, 2);
    assert_eq!(feed_and_read(&ts, 78_500).stage, 2, "inside the hysteresis band of stage 2");
    assert_eq!(feed_and_read(&ts, 77_900).stage, 1);
    let after: Vec<_> = std::fs::read_dir("/sys/fs/bpf").unwrap().flatten().map(|e| e.path()).collect();
    assert_eq!(before, after, "a private stage pins nothing");
}

/// A loader that dies without running Drop (SIGKILL, simulated by forgetting it) leaves its
/// pins; replaying the journal, as `joule restore` does, removes them and the directory.
#[test]
#[ignore = "tier 2: root"]
fn root_journal_replay_removes_the_pins_of_a_loader_that_never_dropped() {
    require_root!();
    let bpffs = TempBpffs::new().expect("mounting a bpffs of the test's own");
    let pin_dir = bpffs.path().join("joule-test-crash");
    let jdir = tempfile::tempdir().unwrap();
    let journal = Journal::open(jdir.path()).unwrap();
    let opts = ThermalStageOpts { pin_dir: Some(pin_dir.clone()), thresholds_mc: vec![70_000], hysteresis_mc: 0, tracepoint_zones: None };
    let ts = ThermalStage::load(opts, Some(&journal)).expect("loading the thermal stage");
    ts.feed(MODEL_ZONE, 75_000, TempSource::Model).unwrap();
    std::mem::forget(ts);
    assert_eq!(ThermalStage::read_pinned(&pin_dir).unwrap().stage, 1, "the pinned stage outlives its loader");

    let report = journal::Journal::open(jdir.path()).and_then(|j| j.restore_all(&joule_core::effects::RealEffects)).unwrap();
    eprintln!("restore: {report:?}");
    assert_eq!((report.undone, report.failed.len()), (4, 0), "{report:?}");
    assert!(!pin_dir.exists(), "{} left behind", pin_dir.display());
}

/// The process monitor sees a process start (fork), exec, rename, move to another cgroup,
/// setuid and exit, each once, with the process's identity (pid and start time).
#[test]
#[ignore = "tier 2: root"]
fn root_procmon_reports_fork_exec_rename_cgroup_creds_and_exit_of_a_process() {
    use joule_bpf::{ProcEvent, ProcMonitor, ProcMonitorOpts};
    require_root!();
    let mut mon = ProcMonitor::load(&ProcMonitorOpts { creds: true, ..Default::default() }).expect("loading procmon");
    let cg = TempCgroup::new(&move_target_root());
    // The child renames itself, drops to uid 65534 and sleeps; the test moves it meanwhile.
    let mut child = std::process::Command::new("sh")
        .args(["-c", "printf jproc-renamed > /proc/self/comm; exec setpriv --reuid=65534 --regid=65534 --clear-groups sleep 0.5"])
        .spawn()
        .unwrap();
    let pid = child.id() as i32;
    std::thread::sleep(Duration::from_millis(150));
    std::fs::write(cg.dir.join("cgroup.procs"), pid.to_string()).unwrap();
    child.wait().unwrap();
    std::thread::sleep(Duration::from_millis(50));
    let events: Vec<ProcEvent> = mon.drain().unwrap().into_iter().filter(|e| e.pid() == pid).collect();
    let kinds: Vec<&str> = events
        .iter()
        .map(|e| match e {
            ProcEvent::Fork { .. } => "fork",
            ProcEvent::Exec { .. } => "exec",
            ProcEvent::Exit { .. } => "exit",
            ProcEvent::Rename { .. } => "rename",
            ProcEvent::Cgroup { .. } => "cgroup",
            ProcEvent::Creds { .. } => "creds",
        })
        .collect();
    // sh forks, execs sh... then exec setpriv, which setresuid()s and execs sleep.
    for want in ["fork", "exec", "rename", "creds", "cgroup", "exit"] {
        assert!(kinds.contains(&want), "no {want} event for {pid}: {events:?}");
    }
    assert_eq!(kinds.first(), Some(&"fork"), "{events:?}");
    assert_eq!(kinds.last(), Some(&"exit"), "{events:?}");
    assert!(events.iter().any(|e| matches!(e, ProcEvent::Rename { comm, .. } if comm == "jproc-renamed")), "{events:?}");
    assert!(events.iter().any(|e| matches!(e, ProcEvent::Exec { comm, .. } if comm == "sleep")), "{events:?}");
    let stat = events.iter().map(|e| match e {
        ProcEvent::Fork { started, .. } | ProcEvent::Exec { started, .. } | ProcEvent::Exit { started, .. } => *started,
        ProcEvent::Rename { started, .. } | ProcEvent::Cgroup { started, .. } | ProcEvent::Creds { started, .. } => *started,
    });
    let starts: std::collections::BTreeSet<u64> = stat.collect();
    assert_eq!(starts.len(), 1, "one identity for every event: {events:?}");
    assert_eq!(mon.lost(), 0);
}

/// The nap program's count of live TCP sockets on a watched port follows real connections up
/// and back down to zero when they close (the close is seen by its port although the kernel
/// has released it by then), and a connection older than the program counts down too.
#[test]
#[ignore = "tier 2: root"]
fn root_nap_counts_live_tcp_sockets_on_a_watched_port_up_and_down() {
    require_root!();
    use std::net::{TcpListener, TcpStream};
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let old = (TcpStream::connect(("127.0.0.1", port)).unwrap(), l.accept().unwrap().0);
    let probe = joule_bpf::NapProbe::load(&[(joule_bpf::NapProto::Tcp, port)]).expect("loading nap.bpf.c");
    probe.set_conns(1).unwrap(); // what a walk of /proc/net/tcp finds: the accepted end of `old`
    let conns: Vec<_> = (0..3).map(|_| (TcpStream::connect(("127.0.0.1", port)).unwrap(), l.accept().unwrap().0)).collect();
    assert_eq!(probe.conns(), 4, "three accepted sockets more (the clients' ends are on other ports)");
    let wait_for = |want: i64| {
        let deadline = Instant::now() + Duration::from_secs(3);
        while probe.conns() != want {
            assert!(Instant::now() < deadline, "conns {} after 3 s, want {want}", probe.conns());
            std::thread::sleep(Duration::from_millis(10));
        }
    };
    drop(conns);
    wait_for(1);
    drop(old);
    wait_for(0);
}

/// Every eBPF program joule ships passes this kernel's verifier and attaches, each through its
/// own loader with real options: run on this host by the root tier and on arm64 by the arm64
/// guest (docs/arm64.md), so an architecture's differences (a register, a syscall number, a
/// trampoline) fail here rather than in an operator's agent. The sched_ext scheduler loads
/// where the kernel has sched_ext (the guests; this host's 6.18 has none, which is said).
#[test]
#[ignore = "tier 2: root"]
fn root_every_bpf_program_loads_and_attaches_on_this_kernel() {
    use joule_bpf::{FlowMonitor, NapProbe, NapProto, NetlimitClassifier, NetlimitRule, ProcMonitor, Scx, ScxOpts};
    require_root!();
    let Some(cg2) = cgroup2_mount() else {
        require(false, "a cgroup2 mount (the flow monitor attaches there)");
        return;
    };
    let programs = || -> std::collections::BTreeMap<u32, String> {
        libbpf_rs::query::ProgInfoIter::default().map(|p| (p.id, p.name.to_string_lossy().into_owned())).collect()
    };
    let before = programs();
    let thermal = ThermalStageOpts { pin_dir: None, thresholds_mc: vec![70_000, 80_000, 90_000], hysteresis_mc: 3_000, tracepoint_zones: None };
    let rule = NetlimitRule { classid: 0x10001, proto: Some(6), sport: None, dport: Some(5201), daddr: None };
    // Each object with one of its programs, as the kernel names it (15 characters at most).
    let mut loaded: Vec<(&str, &str, Box<dyn std::any::Any>)> = vec![
        ("runqlat", "joule_sched_swi", Box::new(runqlat_for_this_machine())),
        ("thermal", "joule_thermal_t", Box::new(ThermalStage::load(thermal, None).expect("loading thermal.bpf.c"))),
        // With a filter of every rule kind: the verifier prunes the filter's code when it is off.
        ("procmon", "joule_proc_cred", Box::new(ProcMonitor::load(&filtered_procmon()).expect("loading procmon.bpf.c"))),
        ("nap", "nap_sock_state", Box::new(NapProbe::load(&[(NapProto::Tcp, 8080), (NapProto::Udp, 5353)]).expect("loading nap.bpf.c"))),
        ("flow", "joule_flow_egre", Box::new(FlowMonitor::load(&cg2).expect("loading flow.bpf.c"))),
        ("netlimit", "joule_netlimit_", Box::new(NetlimitClassifier::load(&[rule], &[(1, 0x10002)]).expect("loading netlimit.bpf.c"))),
    ];
    if Path::new("/sys/kernel/sched_ext").exists() {
        loaded.push(("scx", "joule_enqueue", Box::new(Scx::load(ScxOpts::default()).expect("loading scx.bpf.c (sched_ext is in this kernel)"))));
    } else {
        eprintln!("scx: not loaded, this kernel has no sched_ext (the VM tier's guests load it)");
    }
    let ours: std::collections::BTreeMap<u32, String> = programs().into_iter().filter(|(id, _)| !before.contains_key(id)).collect();
    let objects: Vec<&str> = loaded.iter().map(|(o, _, _)| *o).collect();
    eprintln!("{} on {}: {} programs of {objects:?} in the kernel: {:?}", std::env::consts::ARCH, kernel_release(), ours.len(), ours.values());
    for (object, program, _) in &loaded {
        assert!(ours.values().any(|n| n.starts_with(program)), "{object}: no program {program} in the kernel: {ours:?}");
    }
    drop(loaded);
    let ids: std::collections::BTreeSet<u32> = ours.keys().copied().collect();
    let deadline = Instant::now() + Duration::from_secs(2);
    while programs().keys().any(|id| ids.contains(id)) {
        assert!(Instant::now() < deadline, "programs left in the kernel after every loader was dropped: {:?}", programs());
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The process monitor's options with a filter that has rules of every kind.
fn filtered_procmon() -> joule_bpf::ProcMonitorOpts {
    let cfg = joule_core::config::Config::parse(
        "[[class]]\nname = \"a\"\nmatch = { comm = [\"jx-a\"], uid = [0], pid = [4242], exe = [\"/bin/true\"] }\n\
         [[class]]\nname = \"b\"\nmatch = { cgroup = [\"/joule-test-none\"], unit = [\"joule-test-none.service\"] }\n",
    )
    .unwrap();
    let rules = joule_core::membership::prefilter::Prefilter::compile(&cfg.classes).unwrap();
    let filter = joule_bpf::ProcFilter { rules, cgroup_mounts: vec![move_target_root()], own_pid: std::process::id() };
    joule_bpf::ProcMonitorOpts { creds: true, filter: Some(filter), ..Default::default() }
}

fn kernel_release() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default().trim().to_string()
}
