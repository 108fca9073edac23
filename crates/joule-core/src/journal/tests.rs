//! The journal on FakeEffects: order, owners, torn lines, reused pids, cgroups that fill up or
//! stay busy while they are emptied.

use super::undo::CGROUP_BUSY_PATIENCE;
use super::*;
use crate::effects::{FakeEffects, Mounts, Sched, CGROUP2_SUPER_MAGIC};
use std::fs::OpenOptions;
use std::time::{Duration, Instant};

#[test]
fn replays_newest_first_and_empties_the_journal() {
    let dir = tempfile::tempdir().unwrap();
    let fx = FakeEffects::default().with_file("/k/cpu.max", "changed-twice");
    let j = Journal::open(dir.path()).unwrap();
    j.record("t", Undo::Write { path: "/k/cpu.max".into(), old: "original".into() }).unwrap();
    j.record("t", Undo::Write { path: "/k/cpu.max".into(), old: "changed-once".into() }).unwrap();
    let r = Journal::open(dir.path()).and_then(|j| j.restore_all(&fx)).unwrap();
    assert_eq!(r.undone, 2);
    assert_eq!(fx.file("/k/cpu.max").as_deref(), Some("original"));
    assert!(entries(dir.path()).unwrap().is_empty());
}

#[test]
fn vanished_targets_count_as_gone_not_failed() {
    let dir = tempfile::tempdir().unwrap();
    let fx = FakeEffects::default();
    let j = Journal::open(dir.path()).unwrap();
    j.record("t", Undo::Sched { tid: 4242, old: SchedAttr::OTHER, started: Some(1) }).unwrap();
    j.record("t", Undo::RemoveDir { path: "/cg/joule".into(), evacuate_to: None }).unwrap();
    let r = Journal::open(dir.path()).and_then(|j| j.restore_all(&fx)).unwrap();
    assert_eq!((r.undone, r.already_gone, r.failed.len()), (0, 2, 0));
}

#[test]
fn evacuates_tasks_before_removing_a_cgroup() {
    let dir = tempfile::tempdir().unwrap();
    let fx = FakeEffects::default().with_file("/cg/cgroup.procs", "1\n").with_file("/cg/joule/cgroup.procs", "7\n8\n");
    fx.dirs.lock().unwrap().insert("/cg/joule".into(), ());
    let j = Journal::open(dir.path()).unwrap();
    j.record("t", Undo::RemoveDir { path: "/cg/joule".into(), evacuate_to: Some("/cg/cgroup.procs".into()) }).unwrap();
    Journal::open(dir.path()).and_then(|j| j.restore_all(&fx)).unwrap();
    let log = fx.log.lock().unwrap().clone();
    assert_eq!(log, vec!["write /cg/cgroup.procs 7", "write /cg/cgroup.procs 8", "rmdir /cg/joule"]);
}

/// A fake cgroup /cg/joule (v2-like: no `tasks`) recorded for removal into /cg.
fn cgroup_to_remove(procs: &str) -> (tempfile::TempDir, FakeEffects) {
    let dir = tempfile::tempdir().unwrap();
    let fx = FakeEffects::default().with_file("/cg/cgroup.procs", "1\n").with_file("/cg/joule/cgroup.procs", procs);
    fx.dirs.lock().unwrap().insert("/cg/joule".into(), ());
    let j = Journal::open(dir.path()).unwrap();
    j.record("t", Undo::RemoveDir { path: "/cg/joule".into(), evacuate_to: Some("/cg/cgroup.procs".into()) }).unwrap();
    (dir, fx)
}

#[test]
fn restore_moves_a_task_forked_into_the_cgroup_during_its_evacuation() {
    // Issue 6: 7 forks 9 between the first read of cgroup.procs and its own move; one pass
    // then rmdir left 9 inside (EBUSY in the kernel).
    let (dir, fx) = cgroup_to_remove("");
    fx.then_reads("/cg/joule/cgroup.procs", &["7\n", "9\n"]);
    let r = Journal::open(dir.path()).and_then(|j| j.restore_all(&fx)).unwrap();
    assert_eq!((r.undone, r.failed.len()), (1, 0), "{r:?}");
    let log = fx.log.lock().unwrap().clone();
    assert_eq!(log, vec!["write /cg/cgroup.procs 7", "write /cg/cgroup.procs 9", "rmdir /cg/joule"]);
}

#[test]
fn a_task_that_stays_listed_after_its_move_is_moved_once() {
    // v2 lists a zombie leader whose threads live on; moving it again would never end.
    let (dir, fx) = cgroup_to_remove("7\n");
    Journal::open(dir.path()).and_then(|j| j.restore_all(&fx)).unwrap();
    let log = fx.log.lock().unwrap().clone();
    assert_eq!(log, vec!["write /cg/cgroup.procs 7", "rmdir /cg/joule"]);
}

#[test]
fn rmdir_is_retried_while_the_kernel_says_busy_and_each_try_evacuates_again() {
    // A task that was exiting when it was moved stays counted until it is through exit.
    let (dir, fx) = cgroup_to_remove("7\n");
    fx.fail_calls_times("rmdir /cg/joule", libc::EBUSY, 2);
    let r = Journal::open(dir.path()).and_then(|j| j.restore_all(&fx)).unwrap();
    assert_eq!((r.undone, r.failed.len()), (1, 0), "{r:?}");
    let log = fx.log.lock().unwrap().clone();
    assert_eq!(log.iter().filter(|l| *l == "write /cg/cgroup.procs 7").count(), 3, "{log:?}");
    assert_eq!(log.last().map(String::as_str), Some("rmdir /cg/joule"));
}

#[test]
fn a_cgroup_that_stays_busy_fails_after_a_bounded_wait_and_stays_in_the_journal() {
    let (dir, fx) = cgroup_to_remove("7\n");
    fx.fail_calls("rmdir /cg/joule", libc::EBUSY);
    let t0 = Instant::now();
    let r = Journal::open(dir.path()).and_then(|j| j.restore_all(&fx)).unwrap();
    let took = t0.elapsed();
    assert!(took >= CGROUP_BUSY_PATIENCE && took < CGROUP_BUSY_PATIENCE + Duration::from_secs(1), "{took:?}");
    assert_eq!(r.failed.len(), 1, "{r:?}");
    assert!(r.failed[0].contains("busy") && r.failed[0].contains("lists [7]"), "{}", r.failed[0]);
    assert_eq!(entries(dir.path()).unwrap().len(), 1, "the failed record stays for a retry");
}

#[test]
fn v1_moves_threads_one_by_one_through_tasks() {
    // Thread 8 of process 7 is in the cgroup on its own: moving process 7 through
    // cgroup.procs would also drag its other threads out of wherever they are.
    let (dir, fx) = cgroup_to_remove("7\n");
    let fx = fx.with_file("/cg/joule/tasks", "8\n").with_file("/cg/tasks", "");
    Journal::open(dir.path()).and_then(|j| j.restore_all(&fx)).unwrap();
    let log = fx.log.lock().unwrap().clone();
    assert_eq!(log, vec!["write /cg/tasks 8", "rmdir /cg/joule"]);
}

#[test]
fn restore_owner_leaves_other_owners_records_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let fx = FakeEffects::default().with_file("/a/cpu.max", "new").with_file("/b/cpu.max", "new").with_file("/c/cpu.max", "new");
    let j = Journal::open(dir.path()).unwrap();
    j.record("thermal", Undo::Write { path: "/a/cpu.max".into(), old: "a0".into() }).unwrap();
    j.record("qos", Undo::Write { path: "/b/cpu.max".into(), old: "b0".into() }).unwrap();
    j.record("thermal", Undo::Write { path: "/c/cpu.max".into(), old: "c0".into() }).unwrap();
    let r = Journal::open(dir.path()).and_then(|j| j.restore_owner("qos", &fx)).unwrap();
    assert_eq!(r.undone, 1);
    assert_eq!(fx.file("/b/cpu.max").as_deref(), Some("b0"));
    assert_eq!(fx.file("/a/cpu.max").as_deref(), Some("new"));
    let left: Vec<_> = entries(dir.path()).unwrap().into_iter().map(|e| e.undo).collect();
    assert_eq!(left, vec![Undo::Write { path: "/a/cpu.max".into(), old: "a0".into() }, Undo::Write { path: "/c/cpu.max".into(), old: "c0".into() }]);
}

#[test]
fn record_waits_while_a_restore_holds_the_journal() {
    let dir = tempfile::tempdir().unwrap();
    let j = Journal::open(dir.path()).unwrap();
    j.record("t", Undo::RemoveFile { path: "/x".into() }).unwrap();
    let other = File::open(j.path()).unwrap(); // what restore_where locks: another open file
    let held = FileLock::exclusive(&other);
    let (tx, rx) = std::sync::mpsc::channel();
    let t = std::thread::spawn(move || {
        j.record("t", Undo::RemoveFile { path: "/y".into() }).unwrap();
        tx.send(()).unwrap();
    });
    assert!(rx.recv_timeout(std::time::Duration::from_millis(200)).is_err(), "record did not wait for the lock");
    drop(held);
    rx.recv_timeout(std::time::Duration::from_secs(5)).unwrap();
    t.join().unwrap();
    assert_eq!(entries(dir.path()).unwrap().len(), 2);
}

fn stat(comm: &str, start: u64) -> String {
    // pid (comm) state ppid ... with field 22 = start.
    let mut f: Vec<String> = (3..=21).map(|i| i.to_string()).collect();
    f[0] = "S".into();
    f.push(start.to_string());
    f.push("23".into());
    format!("7 ({comm}) {}", f.join(" "))
}

#[test]
fn start_time_reads_field_22_even_with_a_tricky_comm() {
    let fx = FakeEffects::default().with_file("/proc/7/stat", &stat("a) b (c", 123456));
    assert_eq!(start_time(&fx, 7), Some(123456));
    assert_eq!(start_time(&fx, 8), None);
}

#[test]
fn a_reused_pid_is_not_moved_back() {
    let dir = tempfile::tempdir().unwrap();
    let fx = FakeEffects::default().with_file("/proc/7/stat", &stat("worker", 100)).with_file("/cg/cgroup.procs", "");
    let j = Journal::open(dir.path()).unwrap();
    j.record("t", Undo::move_task(&fx, 7, "/cg/cgroup.procs".into())).unwrap();
    // pid 7 exits and a new task gets the same pid, started later.
    fx.files.lock().unwrap().insert("/proc/7/stat".into(), stat("intruder", 999));
    let r = Journal::open(dir.path()).and_then(|j| j.restore_all(&fx)).unwrap();
    assert_eq!((r.undone, r.already_gone), (0, 1));
    assert_eq!(fx.file("/cg/cgroup.procs").as_deref(), Some(""), "the reused pid was moved");
    // The same incarnation is moved back.
    let j = Journal::open(dir.path()).unwrap();
    j.record("t", Undo::move_task(&fx, 7, "/cg/cgroup.procs".into())).unwrap();
    assert_eq!(Journal::open(dir.path()).and_then(|j| j.restore_all(&fx)).unwrap().undone, 1);
    assert_eq!(fx.file("/cg/cgroup.procs").as_deref(), Some("7"));
}

/// One `prctl(PR_SET_NAME)` must not unpin a task, nor a cgroup's name (its owner's) lose it
/// its way home: the record holds the origin byte for byte, the restore finds the task by its
/// start time, and a stat that cannot be read is not a task gone, so the record stays.
#[test]
fn a_task_named_in_any_bytes_goes_back_to_a_cgroup_named_in_any_bytes() {
    use std::os::unix::ffi::{OsStrExt, OsStringExt};
    let dir = tempfile::tempdir().unwrap();
    let line = [&b"7 (\xff\xfe)"[..], &stat("x", 100).as_bytes()[5..]].concat();
    let origin = PathBuf::from(std::ffi::OsString::from_vec(b"/cg/\xff\x1b/cgroup.procs".to_vec()));
    let fx = FakeEffects::default().with_bytes("/proc/7/stat", &line);
    fx.files.lock().unwrap().insert(origin.clone(), String::new());
    let j = Journal::open(dir.path()).unwrap();
    j.record("t", Undo::move_task(&fx, 7, origin.clone())).unwrap();
    let back = entries(dir.path()).unwrap();
    assert!(
        matches!(&back[0].undo, Undo::MoveTask { procs_file, started: Some(100), .. } if procs_file.as_os_str().as_bytes() == origin.as_os_str().as_bytes())
    );
    assert!(std::fs::read_to_string(j.path()).unwrap().contains("\"procs_file\":[47,99,103,47,255,27,"), "its bytes, not a lossy name");
    fx.fail_calls_times("read /proc/7/stat", libc::EACCES, 2);
    assert_eq!(j.compact(&fx).unwrap(), 0, "unreadable is not gone: kept");
    let r = j.restore_all(&fx).unwrap();
    assert_eq!((r.undone, r.already_gone, r.failed.len()), (0, 0, 1), "unreadable: failed, kept for the next restore");
    let r = j.restore_all(&fx).unwrap();
    assert_eq!((r.undone, r.already_gone), (1, 0));
    assert_eq!(fx.file(&origin).as_deref(), Some("7"));
    assert!(entries(dir.path()).unwrap().is_empty());
}

#[test]
fn torn_last_line_is_ignored() {
    let dir = tempfile::tempdir().unwrap();
    let j = Journal::open(dir.path()).unwrap();
    j.record("t", Undo::RemoveFile { path: "/sys/fs/bpf/joule/x".into() }).unwrap();
    let mut f = OpenOptions::new().append(true).open(j.path()).unwrap();
    f.write_all(b"{\"owner\":\"t\",\"at_ms\":1,\"op\":\"wri").unwrap();
    assert_eq!(entries(dir.path()).unwrap().len(), 1);
}

#[test]
fn failed_records_stay_for_a_retry() {
    let dir = tempfile::tempdir().unwrap();
    let fx = FakeEffects::default().with_file("/ro/cpu.max", "new").with_file("/rw/cpu.max", "new");
    fx.read_only.lock().unwrap().push("/ro".into());
    let j = Journal::open(dir.path()).unwrap();
    j.record("t", Undo::Write { path: "/ro/cpu.max".into(), old: "old".into() }).unwrap();
    j.record("t", Undo::Write { path: "/rw/cpu.max".into(), old: "old".into() }).unwrap();
    let r = Journal::open(dir.path()).and_then(|j| j.restore_all(&fx)).unwrap();
    assert_eq!((r.undone, r.failed.len()), (1, 1));
    let left = entries(dir.path()).unwrap();
    assert_eq!(left.len(), 1);
    assert_eq!(left[0].undo, Undo::Write { path: "/ro/cpu.max".into(), old: "old".into() });
}

#[test]
fn a_process_holds_one_journal_per_directory_and_its_clones_share_it() {
    let dir = tempfile::tempdir().unwrap();
    let a = Journal::open(dir.path()).unwrap();
    let b = Journal::open(&dir.path().join(".")).unwrap();
    assert!(a.same(&b), "a second open of the same directory is the journal already open");
    let other = tempfile::tempdir().unwrap();
    assert!(!a.same(&Journal::open(other.path()).unwrap()));
    // A record through one handle is replayed through the other.
    let fx = FakeEffects::default().with_file("/k/cpu.weight", "new");
    b.clone().record("t", Undo::Write { path: "/k/cpu.weight".into(), old: "old".into() }).unwrap();
    assert_eq!(a.restore_all(&fx).unwrap().undone, 1);
    assert_eq!(fx.file("/k/cpu.weight").as_deref(), Some("old"));
    drop((a, b));
    // Once every handle is gone, the next open is a fresh one (the records stay in the file).
    assert!(Journal::open(dir.path()).unwrap().entries().unwrap().is_empty());
}

#[test]
fn a_corrupt_line_is_reported_and_skipped_and_the_records_around_it_replayed() {
    let dir = tempfile::tempdir().unwrap();
    let fx = FakeEffects::default().with_file("/k/a/cpu.max", "new").with_file("/k/b/cpu.max", "new");
    let j = Journal::open(dir.path()).unwrap();
    j.record("t", Undo::Write { path: "/k/a/cpu.max".into(), old: "old".into() }).unwrap();
    let mut f = OpenOptions::new().append(true).open(j.path()).unwrap();
    f.write_all(b"{\"owner\":\"t\",\"op\":\"format_disk\"}\nnot json at all\n").unwrap();
    f.write_all(&vec![b'x'; 70 * 1024]).unwrap();
    f.write_all(b"\n").unwrap();
    j.record("t", Undo::Write { path: "/k/b/cpu.max".into(), old: "old".into() }).unwrap();
    assert_eq!(entries(dir.path()).unwrap().len(), 2, "the valid records are read");
    let r = j.restore_all(&fx).unwrap();
    assert_eq!((r.undone, r.failed.len(), r.skipped.len()), (2, 0, 3), "{:?}", r.skipped);
    assert!(r.skipped[0].contains("line 2") && r.skipped[1].contains("line 3") && r.skipped[2].contains("line 4: longer than"), "{:?}", r.skipped);
    assert_eq!((fx.file("/k/a/cpu.max").unwrap(), fx.file("/k/b/cpu.max").unwrap()), ("old".to_string(), "old".to_string()));
    assert_eq!(std::fs::read_to_string(j.path()).unwrap(), "", "the bad lines are gone with the replayed ones");
}

#[test]
fn records_joule_cannot_have_written_are_skipped_not_acted_on() {
    let dir = tempfile::tempdir().unwrap();
    let fx = FakeEffects::default()
        .with_dir("/etc")
        .with_file("/etc/shadow", "root:x")
        .with_file("/proc/7/stat", &stat("user", 100))
        .with_file("/cg/cgroup.procs", "");
    fx.mount("tracefs", Path::new("/etc")).unwrap(); // anything but a cgroup, sysfs or procfs
    fx.sched.lock().unwrap().insert(7, SchedAttr::OTHER);
    let j = Journal::open(dir.path()).unwrap();
    let fifo99 = SchedAttr { policy: libc::SCHED_FIFO, priority: 99 };
    for u in [
        Undo::Write { path: "/etc/shadow".into(), old: "root::".into() },
        Undo::MoveTask { pid: 7, procs_file: "/etc/shadow".into(), started: Some(100) },
        Undo::MoveTask { pid: 7, procs_file: "/cg/cgroup.procs".into(), started: None },
        Undo::Sched { tid: 7, old: fifo99, started: Some(100) },
        Undo::LinkDelete { netns: None, ifname: "eth0".into(), kind: "veth".into() },
        Undo::RemoveFile { path: "/etc/shadow".into() },
    ] {
        j.record("t", u).unwrap();
    }
    let r = j.restore_all(&fx).unwrap();
    assert_eq!((r.undone, r.failed.len(), r.skipped.len()), (0, 0, 6), "{:?}", r.skipped);
    assert_eq!(fx.file("/etc/shadow").as_deref(), Some("root:x"));
    assert_eq!(fx.file("/cg/cgroup.procs").as_deref(), Some(""));
    assert_eq!(fx.get_sched(7).unwrap(), SchedAttr::OTHER, "undoing never raises a task");
    assert!(r.skipped.iter().any(|s| s.contains("would raise task 7 from policy 0 priority 0 to policy 1 priority 99")), "{:?}", r.skipped);
    assert_eq!(fx.calls(), ["mount tracefs /etc"], "nothing acted on");
    // Lowering what joule raised goes ahead.
    fx.sched.lock().unwrap().insert(7, fifo99);
    j.record("t", Undo::Sched { tid: 7, old: SchedAttr::OTHER, started: Some(100) }).unwrap();
    assert_eq!(j.restore_all(&fx).unwrap().undone, 1);
    assert_eq!(fx.get_sched(7).unwrap(), SchedAttr::OTHER);
}

#[test]
fn compaction_drops_records_of_exited_tasks_and_repeats_and_keeps_the_rest_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let fx = FakeEffects::default().with_file("/proc/7/stat", &stat("alive", 100)).with_file("/k/cpu.max", "new");
    let j = Journal::open(dir.path()).unwrap();
    let knob = Undo::Write { path: "/k/cpu.max".into(), old: "first".into() };
    j.record("t", knob.clone()).unwrap();
    j.record("t", Undo::MoveTask { pid: 7, procs_file: "/cg/cgroup.procs".into(), started: Some(100) }).unwrap();
    j.record("t", Undo::MoveTask { pid: 8, procs_file: "/cg/cgroup.procs".into(), started: Some(5) }).unwrap(); // exited
    j.record("t", Undo::MoveTask { pid: 7, procs_file: "/cg/cgroup.procs".into(), started: Some(99) }).unwrap(); // an older 7
    j.record("t", knob.clone()).unwrap(); // a repeat
    j.record("t", Undo::Write { path: "/k/cpu.max".into(), old: "second".into() }).unwrap();
    assert_eq!(j.compact(&fx).unwrap(), 3);
    let left: Vec<Undo> = entries(dir.path()).unwrap().into_iter().map(|e| e.undo).collect();
    assert_eq!(
        left,
        [
            knob,
            Undo::MoveTask { pid: 7, procs_file: "/cg/cgroup.procs".into(), started: Some(100) },
            Undo::Write { path: "/k/cpu.max".into(), old: "second".into() }
        ]
    );
    assert_eq!(j.compact(&fx).unwrap(), 0, "nothing more to drop");
    j.restore_all(&fx).unwrap();
    assert_eq!(fx.file("/k/cpu.max").as_deref(), Some("first"), "the replay ends where it would have");
}

/// Issue 34: a knob another tool took over is forgotten, not replayed: only that owner's record
/// of it goes, and a replay leaves the other tool's value.
#[test]
fn forget_drops_only_that_owners_record_and_a_replay_leaves_the_knob_alone() {
    const CPU0: &str = "/sys/devices/system/cpu/cpu0/cpufreq/scaling_max_freq";
    const CPU1: &str = "/sys/devices/system/cpu/cpu1/cpufreq/scaling_max_freq";
    let dir = tempfile::tempdir().unwrap();
    let fx = FakeEffects::default().with_file(CPU0, "1200000").with_file(CPU1, "2000000");
    let j = Journal::open(dir.path()).unwrap();
    let knob = Undo::Write { path: CPU0.into(), old: "3000000".into() };
    j.record("cpufreq", knob.clone()).unwrap();
    j.record("cpufreq", Undo::Write { path: CPU1.into(), old: "3000000".into() }).unwrap();
    j.record("qos", knob.clone()).unwrap();
    assert_eq!(j.forget("cpufreq", &knob).unwrap(), 1);
    let left: Vec<(String, Undo)> = entries(dir.path()).unwrap().into_iter().map(|e| (e.owner, e.undo)).collect();
    assert_eq!(left, [("cpufreq".into(), Undo::Write { path: CPU1.into(), old: "3000000".into() }), ("qos".into(), knob.clone())]);
    assert_eq!(j.forget("cpufreq", &knob).unwrap(), 0, "nothing more to drop");
    j.restore_owner("cpufreq", &fx).unwrap();
    assert_eq!(fx.file(CPU0).as_deref(), Some("1200000"), "the other tool's value stays");
    assert_eq!(fx.file(CPU1).as_deref(), Some("3000000"), "the records it kept still replay");
}

#[test]
fn an_rt_runtime_the_kernel_still_refuses_is_retried_until_it_takes() {
    let dir = tempfile::tempdir().unwrap();
    let fx = FakeEffects::default().with_file("/cg/cpu/joule/cpu.rt_runtime_us", "300000");
    let j = Journal::open(dir.path()).unwrap();
    j.record("qos", Undo::Write { path: "/cg/cpu/joule/cpu.rt_runtime_us".into(), old: "0".into() }).unwrap();
    // A child group removed a moment ago still holds its budget: EINVAL, three times.
    fx.fail_calls_times("write /cg/cpu/joule/cpu.rt_runtime_us", libc::EINVAL, 3);
    let r = j.restore_all(&fx).unwrap();
    assert_eq!((r.undone, r.failed.len()), (1, 0), "{r:?}");
    assert_eq!(fx.file("/cg/cpu/joule/cpu.rt_runtime_us").as_deref(), Some("0"));
}

/// Issue 17: a worker forked inside a class cgroup after its parent was moved there has no
/// record of its own; emptying the class sends it where its parent came from, not to the root.
#[test]
fn a_task_forked_inside_a_class_goes_back_where_its_moved_ancestor_came_from() {
    let dir = tempfile::tempdir().unwrap();
    let stat_of = |pid: i32, ppid: i32, start: u64| format!("{pid} (w) S {ppid} 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 {start} 0 0");
    let fx = FakeEffects::default()
        .with_dir("/cg")
        .with_file("/cg/cgroup.procs", "")
        .with_dir("/cg/system.slice/web.service")
        .with_file("/cg/system.slice/web.service/cgroup.procs", "")
        .with_dir("/cg/joule/web")
        .with_file("/cg/joule/web/cgroup.procs", "")
        .with_file("/proc/50/stat", &stat_of(50, 1, 500))
        .with_file("/proc/51/stat", &stat_of(51, 50, 510))
        .with_file("/proc/51/status", "Name:\tw\nTgid:\t51\n")
        .with_file("/proc/60/stat", &stat_of(60, 1, 600))
        .with_file("/proc/60/status", "Name:\tx\nTgid:\t60\n");
    let j = Journal::open(dir.path()).unwrap();
    j.record("qos", Undo::RemoveDir { path: "/cg/joule/web".into(), evacuate_to: Some("/cg/cgroup.procs".into()) }).unwrap();
    j.record("qos", Undo::MoveTask { pid: 50, procs_file: "/cg/system.slice/web.service/cgroup.procs".into(), started: Some(500) }).unwrap();
    // 51 (50's child) and 60 (no moved ancestor) were put in the class cgroup without records.
    fx.then_reads("/cg/joule/web/cgroup.procs", &["51\n60\n"]);
    let r = j.restore_all(&fx).unwrap();
    assert_eq!(r.failed, Vec::<String>::new());
    let writes: Vec<String> = fx.calls().into_iter().filter(|c| c.starts_with("write")).collect();
    assert_eq!(
        writes,
        ["write /cg/system.slice/web.service/cgroup.procs 50", "write /cg/system.slice/web.service/cgroup.procs 51", "write /cg/cgroup.procs 60"],
        "the parent back by its record, its child after it, the stranger to the root"
    );
}

/// Issue 33, item 5: a root process moved out of a root-only cgroup exits, a user's process gets
/// its pid, is moved into a class itself (a record of its own, another start time) and forks
/// there. Emptying the class sends the user's child where *its* parent came from, never to the
/// root-only cgroup the earlier owner of the pid came from.
#[test]
fn regression_an_ancestor_counts_only_while_its_pid_is_the_process_of_the_record() {
    let dir = tempfile::tempdir().unwrap();
    let stat_of = |pid: i32, ppid: i32, start: u64| format!("{pid} (w) S {ppid} 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 {start} 0 0");
    let fx = FakeEffects::default()
        .with_dir("/cg")
        .with_file("/cg/cgroup.procs", "")
        .with_dir("/cg/root-only")
        .with_file("/cg/root-only/cgroup.procs", "")
        .with_dir("/cg/user")
        .with_file("/cg/user/cgroup.procs", "")
        .with_dir("/cg/joule/cap")
        .with_file("/cg/joule/cap/cgroup.procs", "")
        // pid 70 is now the user's process (started at 900); its child 71.
        .with_file("/proc/70/stat", &stat_of(70, 1, 900))
        .with_file("/proc/71/stat", &stat_of(71, 70, 910))
        .with_file("/proc/71/status", "Name:\tw\nTgid:\t71\n");
    let j = Journal::open(dir.path()).unwrap();
    j.record("qos", Undo::RemoveDir { path: "/cg/joule/cap".into(), evacuate_to: Some("/cg/cgroup.procs".into()) }).unwrap();
    // Root's process 70 (started at 700) came from the root-only cgroup, and exited.
    j.record("qos", Undo::MoveTask { pid: 70, procs_file: "/cg/root-only/cgroup.procs".into(), started: Some(700) }).unwrap();
    // The user's process that got pid 70 came from the user's cgroup.
    j.record("qos", Undo::MoveTask { pid: 70, procs_file: "/cg/user/cgroup.procs".into(), started: Some(900) }).unwrap();
    fx.then_reads("/cg/joule/cap/cgroup.procs", &["71\n"]);
    j.restore_all(&fx).unwrap();
    let writes: Vec<String> = fx.calls().into_iter().filter(|c| c.starts_with("write")).collect();
    assert!(!writes.iter().any(|w| w.starts_with("write /cg/root-only/")), "a user's process went into the root-only cgroup: {writes:?}");
    assert!(writes.contains(&"write /cg/user/cgroup.procs 71".to_string()), "{writes:?}");
}

/// Issue 33's lower items: a record joule could not have written is skipped, not acted on —
/// any cgroup file but the knobs joule sets (`release_agent` is a program the kernel runs as
/// root, `devices.allow` opens devices), a filesystem joule does not mount, a qdisc kind it
/// does not put, an affinity with no CPU.
#[test]
fn regression_records_of_cgroup_files_mounts_qdiscs_and_affinities_joule_never_makes_are_skipped() {
    let dir = tempfile::tempdir().unwrap();
    let fx = FakeEffects::default()
        .with_file("/cg/release_agent", "")
        .with_file("/cg/x/devices.allow", "")
        .with_file("/cg/x/cpu.max", "max 100000")
        .with_file("/proc/7/stat", &stat("user", 100));
    fx.affinity.lock().unwrap().insert(7, vec![0]);
    let j = Journal::open(dir.path()).unwrap();
    for u in [
        Undo::Write { path: "/cg/release_agent".into(), old: "/tmp/evil".into() },
        Undo::Write { path: "/cg/x/devices.allow".into(), old: "a *:* rwm".into() },
        Undo::Unmount { path: "/cg".into(), magic: CGROUP2_SUPER_MAGIC },
        Undo::QdiscDelete { netns: None, ifname: "eth0".into(), ifindex: 2, parent: 0xffff_ffff, handle: 0, kind: "fq_codel".into() },
        Undo::Affinity { tid: 7, old_cpus: vec![], started: Some(100) },
    ] {
        j.record("t", u).unwrap();
    }
    let r = j.restore_all(&fx).unwrap();
    assert_eq!((r.undone, r.skipped.len()), (0, 5), "{:?}", r.skipped);
    assert_eq!((fx.file("/cg/release_agent").as_deref(), fx.file("/cg/x/devices.allow").as_deref()), (Some(""), Some("")));
    assert!(fx.calls().is_empty(), "nothing acted on: {:?}", fx.calls());
    // A knob joule sets goes ahead.
    j.record("t", Undo::Write { path: "/cg/x/cpu.max".into(), old: "30000 100000".into() }).unwrap();
    assert_eq!(j.restore_all(&fx).unwrap().undone, 1);
    assert_eq!(fx.file("/cg/x/cpu.max").as_deref(), Some("30000 100000"));
}
