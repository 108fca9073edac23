//! /proc sources on fixtures: /proc/stat utilisation, PSI, schedstat top-N.

use crate::common::{assert_close, fixture, sample, Staged};
use joule_core::Origin;
use joule_telemetry::{CpuSource, PsiSource, TaskWaitSource};

#[test]
fn cpu_utilisation_is_exact_over_two_stat_snapshots() {
    let staged = Staged::new("proc-two-cpus");
    let mut cpu = CpuSource::new(staged.root());
    let first = sample(&mut cpu, 0);
    // First sample: the average since boot (counters against zero).
    assert_close(first.cpu.utilization[0], 1300.0 / 5400.0);
    staged.advance();
    let snap = sample(&mut cpu, 100);
    assert_eq!(snap.cpu.utilization.len(), 2);
    assert_close(snap.cpu.utilization[0], 75.0 / 100.0);
    assert_close(snap.cpu.utilization[1], 30.0 / 190.0);
    assert_close(snap.cpu.total_utilization, (0.75 + 30.0 / 190.0) / 2.0);
    assert_eq!(snap.cpu.source, Origin::Kernel);
}

#[test]
fn cpu_counter_reset_reads_zero_then_recovers() {
    let staged = Staged::new("proc-two-cpus");
    let mut cpu = CpuSource::new(staged.root());
    staged.advance();
    sample(&mut cpu, 0);
    // Back to t0: every counter went backwards (a restored VM, a replugged CPU).
    crate::common::overlay(&fixture("proc-two-cpus/t0"), staged.root());
    let snap = sample(&mut cpu, 100);
    assert_eq!(snap.cpu.utilization, vec![0.0, 0.0]);
    staged.advance();
    let snap = sample(&mut cpu, 100);
    assert_close(snap.cpu.utilization[0], 0.75);
}

#[test]
fn psi_reads_some_and_full_of_each_resource() {
    let snap = sample(&mut PsiSource::new(fixture("proc-psi")), 0);
    let psi = snap.psi.expect("psi present");
    assert_eq!(psi.source, Origin::Kernel);
    let cpu = psi.cpu.unwrap();
    assert_eq!((cpu.some_avg10, cpu.some_total_us), (1.47, 4309132));
    assert_eq!((cpu.full_avg10, cpu.full_total_us), (Some(0.0), Some(0)));
    let io = psi.io.unwrap();
    assert_eq!((io.full_avg10, io.full_total_us), (Some(0.01), Some(3060968)));
    assert_eq!(psi.memory.unwrap().full_avg10, None);
}

#[test]
fn psi_absent_is_a_note_not_an_error() {
    let empty = tempfile::tempdir().unwrap();
    let snap = sample(&mut PsiSource::new(empty.path()), 0);
    assert!(snap.psi.is_none());
    assert!(snap.notes.iter().any(|n| n.starts_with("no PSI")), "{:?}", snap.notes);
}

#[test]
fn schedstat_top_n_by_wait_over_the_interval() {
    let staged = Staged::new("proc-schedstat");
    let mut src = TaskWaitSource::new(staged.root(), 3);
    assert!(sample(&mut src, 0).task_wait.is_empty(), "first sample only records counters");
    staged.advance();
    let snap = sample(&mut src, 100);
    let got: Vec<(i32, &str, u64)> = snap.task_wait.iter().map(|t| (t.pid, t.comm.as_str().unwrap_or("?"), t.wait_us)).collect();
    // 101: +7000 µs; 102 was born in the interval: all of its 2500 µs; 200: +1000; 100: +500 (cut).
    assert_eq!(got, vec![(101, "web-worker", 7000), (102, "web-new", 2500), (200, "batch", 1000)]);
}

#[test]
fn unreadable_threads_are_a_note_and_exited_ones_are_not() {
    let staged = Staged::new("proc-schedstat");
    let mut src = TaskWaitSource::new(staged.root(), 3);
    let first = sample(&mut src, 0);
    assert!(!first.notes.iter().any(|n| n.starts_with("task_wait")), "{:?}", first.notes);
    staged.advance();
    // Thread 102 (born in the interval) is unreadable with an error other than "exited" (a
    // read of a directory gives EISDIR, standing in for EMFILE and friends); thread 100 exits
    // (ENOENT).
    let t102 = staged.root().join("100/task/102/schedstat");
    std::fs::remove_file(&t102).unwrap();
    std::fs::create_dir(&t102).unwrap();
    std::fs::remove_dir_all(staged.root().join("100/task/100")).unwrap();
    let snap = sample(&mut src, 100);
    let notes: Vec<&String> = snap.notes.iter().filter(|n| n.starts_with("task_wait")).collect();
    assert_eq!(notes.len(), 1, "{:?}", snap.notes);
    assert!(notes[0].starts_with("task_wait: 1 threads unreadable: "), "{}", notes[0]);
    assert!(notes[0].contains(&format!("os error {}", libc::EISDIR)), "{}", notes[0]);
    let got: Vec<(i32, u64)> = snap.task_wait.iter().map(|t| (t.pid, t.wait_us)).collect();
    assert_eq!(got, vec![(101, 7000), (200, 1000)]);
}

#[test]
fn a_cpu_coming_online_reads_zero_for_its_first_interval() {
    let t = tempfile::tempdir().unwrap();
    let stat = t.path().join("stat");
    std::fs::write(&stat, "cpu  10 0 0 90 0 0 0 0\ncpu0 10 0 0 90 0 0 0 0\n").unwrap();
    let mut cpu = CpuSource::new(t.path());
    assert_close(sample(&mut cpu, 0).cpu.utilization[0], 0.1);
    // cpu1 comes online with 5000 ticks since boot, 4000 of them busy: not this interval's.
    std::fs::write(&stat, "cpu  70 0 0 130 0 0 0 0\ncpu0 60 0 0 140 0 0 0 0\ncpu1 4000 0 0 1000 0 0 0 0\n").unwrap();
    let snap = sample(&mut cpu, 100);
    assert_eq!(snap.cpu.utilization, vec![0.5, 0.0]);
    std::fs::write(&stat, "cpu  70 0 0 130 0 0 0 0\ncpu0 60 0 0 240 0 0 0 0\ncpu1 4075 0 0 1025 0 0 0 0\n").unwrap();
    let snap = sample(&mut cpu, 100);
    assert_eq!(snap.cpu.utilization, vec![0.0, 0.75]);
}
