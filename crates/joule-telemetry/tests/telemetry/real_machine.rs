//! This machine's real /proc and /sys, no root needed: sane invariants, and what one sample
//! costs with 1000 extra sleeping threads (the agent's budget: < 1% of one CPU at 10 Hz, i.e.
//! well under 1 ms of CPU per sample for everything).

use joule_core::config::TelemetryConfig;
use joule_core::Origin;
use joule_telemetry::{Sampler, Source, TaskWaitSource};
use std::path::Path;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

fn dir_has_entries(p: &str, prefix: &str) -> bool {
    std::fs::read_dir(p).map(|rd| rd.flatten().any(|e| e.file_name().to_string_lossy().starts_with(prefix))).unwrap_or(false)
}

#[test]
fn real_proc_and_sys_give_sane_values() {
    let mut sampler = Sampler::new(&TelemetryConfig::default());
    sampler.sample();
    std::thread::sleep(Duration::from_millis(120));
    let snap = sampler.sample();
    assert!(snap.interval_ms >= 100, "{}", snap.interval_ms);
    let ncpu = std::thread::available_parallelism().unwrap().get();
    assert_eq!(snap.cpu.utilization.len(), ncpu, "one utilisation per CPU (nproc)");
    assert!(snap.cpu.utilization.iter().all(|u| (0.0..=1.0).contains(u)), "{:?}", snap.cpu.utilization);
    assert!((0.0..=1.0).contains(&snap.cpu.total_utilization));
    assert!(snap.cgroups.iter().all(|c| c.path.starts_with('/')));
    if Path::new("/proc/pressure/cpu").exists() {
        assert!(snap.psi.as_ref().is_some_and(|p| p.cpu.is_some()));
    }
    let model = snap.thermal.model.as_ref().expect("the RC model always reports");
    assert_eq!(model.source, Origin::Model);
    assert!(model.temp_celsius.is_finite());
    let no_sensor = !dir_has_entries("/sys/class/thermal", "thermal_zone") && !dir_has_entries("/sys/class/hwmon", "hwmon");
    if no_sensor {
        assert!(snap.thermal.zones.is_empty());
        assert!(snap.notes.iter().any(|n| n.starts_with("no thermal sensor")), "{:?}", snap.notes);
    }
    if !dir_has_entries("/sys/class/powercap", "intel-rapl:") && !dir_has_entries("/sys/class/hwmon", "hwmon") {
        assert_eq!(snap.power.source, Origin::Model);
        assert!(snap.power.watts >= TelemetryConfig::default().power_model.idle_watts);
    }
    assert!(!snap.notes.iter().any(|n| n.contains(" failed: ")), "{:?}", snap.notes);
    serde_json::to_string(&snap).expect("serialisable");
}

/// Process CPU time (user + system) of this process.
fn cpu_time() -> Duration {
    // SAFETY: rusage is plain integers; all zeroes is a valid value.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage writes into the struct we own.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// The soft RLIMIT_NOFILE this test runs under (the task_wait source sizes its fd cache by it).
fn nofile_soft() -> u64 {
    let mut rl = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit writes into the struct we own.
    unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut rl) };
    rl.rlim_cur
}

/// Prints the cost of one task-wait sample, of one full Sampler sample and of one without
/// task_wait (the agent with eBPF) with 1000 sleeping threads present; `docs/telemetry.md`
/// quotes it. Every thread must have been read (no "threads unreadable" note); the time is
/// bounded only loosely so a busy CI machine does not fail it: the number to watch is printed.
#[test]
fn cost_of_one_sample_with_1000_sleeping_threads() {
    const THREADS: usize = 1000;
    let stop = Arc::new(Barrier::new(THREADS + 1));
    let handles: Vec<_> = (0..THREADS)
        .map(|_| {
            let stop = stop.clone();
            std::thread::Builder::new()
                .stack_size(64 * 1024)
                .spawn(move || {
                    stop.wait();
                })
                .unwrap()
        })
        .collect();
    let threads = std::fs::read_dir("/proc/self/task").unwrap().count();
    let total_threads: usize = std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().bytes().all(|b| b.is_ascii_digit()))
        .filter_map(|e| std::fs::read_dir(e.path().join("task")).ok())
        .map(|rd| rd.count())
        .sum();

    let mut src = TaskWaitSource::new("/proc", 5);
    let mut snap = joule_core::Snapshot::default();
    src.sample(&mut snap).unwrap();
    let rounds = 50;
    let (wall0, cpu0) = (Instant::now(), cpu_time());
    for _ in 0..rounds {
        src.sample(&mut snap).unwrap();
    }
    let task_wall = wall0.elapsed() / rounds;
    let task_cpu = (cpu_time() - cpu0) / rounds;
    let unreadable = |s: &joule_core::Snapshot| s.notes.iter().any(|n| n.contains("threads unreadable"));
    assert!(!unreadable(&snap), "{:?}", snap.notes);
    // Whatever `src` holds (fds, buffers) must not be charged to, or starve, the Sampler's own
    // task_wait source.
    drop(src);

    let mut sampler = Sampler::new(&TelemetryConfig::default());
    sampler.sample();
    let (wall0, cpu0) = (Instant::now(), cpu_time());
    for _ in 0..rounds {
        let snap = sampler.sample();
        assert!(!unreadable(&snap), "{:?}", snap.notes);
        std::hint::black_box(snap);
    }
    let full_wall = wall0.elapsed() / rounds;
    let full_cpu = (cpu_time() - cpu0) / rounds;

    // What the agent runs when the eBPF programs take over task waits.
    sampler.remove_source("task_wait");
    sampler.sample();
    let (wall0, cpu0) = (Instant::now(), cpu_time());
    for _ in 0..rounds {
        std::hint::black_box(sampler.sample());
    }
    let rest_wall = wall0.elapsed() / rounds;
    let rest_cpu = (cpu_time() - cpu0) / rounds;
    eprintln!(
        "COST: {threads} threads in this process, {total_threads} on the machine, RLIMIT_NOFILE soft {}; task_wait sample: {task_wall:?} wall, {task_cpu:?} CPU; full Sampler sample: {full_wall:?} wall, {full_cpu:?} CPU; Sampler without task_wait: {rest_wall:?} wall, {rest_cpu:?} CPU (debug={})",
        nofile_soft(),
        cfg!(debug_assertions)
    );
    stop.wait();
    for h in handles {
        h.join().unwrap();
    }
    assert!(full_wall < Duration::from_millis(500), "one sample took {full_wall:?}");
}
