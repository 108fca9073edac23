//! Tier 2 (root, this kernel): the process monitor's filter on real processes. Events that
//! cannot change any class stay in the kernel and are counted (a start, rename and exit of a
//! process no rule names), a rename into a class's name is sent with what the kernel knew,
//! a followed process's fork is sent, a settlement against another sequence number changes
//! nothing, a member's renames and a pruned process's forks stay in the kernel, and a cgroup a
//! rule names, made after load, lets the processes moved into it through the filter.

use joule_bpf::{Delivered, Follow, ProcEvent, ProcFilter, ProcMonitor, ProcMonitorOpts, Settlement};
use joule_core::membership::prefilter::Prefilter;
use joule_core::testing::{is_root, require};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// Where the test makes its cgroups: the v1 cpu hierarchy, else the v2 root.
fn cgroup_root() -> PathBuf {
    ["/sys/fs/cgroup/cpu", "/sys/fs/cgroup/unified", "/sys/fs/cgroup"].iter().map(PathBuf::from).find(|p| p.join("cgroup.procs").exists()).unwrap()
}

/// A cgroup of the test's, removed (its processes moved back to the root) on drop.
struct Cg(PathBuf);

impl Cg {
    fn new(dir: PathBuf) -> Cg {
        std::fs::create_dir(&dir).unwrap_or_else(|e| panic!("mkdir {}: {e}", dir.display()));
        Cg(dir)
    }
    fn take(&self, pid: u32) {
        std::fs::write(self.0.join("cgroup.procs"), pid.to_string()).unwrap();
    }
}

impl Drop for Cg {
    fn drop(&mut self) {
        let root = self.0.parent().unwrap().join("cgroup.procs");
        for _ in 0..50 {
            for p in std::fs::read_to_string(self.0.join("cgroup.procs")).unwrap_or_default().split_whitespace() {
                let _ = std::fs::write(&root, p);
            }
            if std::fs::remove_dir(&self.0).is_ok() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// Kills and reaps the child on drop.
struct Child(std::process::Child);

impl Drop for Child {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Events about `pid` until `done` holds of them (or 3 s).
fn events_of(mon: &mut ProcMonitor, seen: &mut Vec<Delivered>, pid: i32, done: impl Fn(&[Delivered]) -> bool) {
    let t0 = Instant::now();
    loop {
        seen.extend(mon.drain_delivered().unwrap().into_iter().filter(|d| d.event.pid() == pid));
        if done(seen) || t0.elapsed() > Duration::from_secs(3) {
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
#[ignore = "tier 2: root"]
fn root_procmon_filter_keeps_what_cannot_change_a_class_in_the_kernel() {
    if !require(is_root(), "root") || !require(Path::new("/usr/bin/python3").exists(), "python3") {
        return;
    }
    let root = cgroup_root();
    let rule_cg = format!("jpf-cg-{}", std::process::id());
    let cfg = joule_core::config::Config::parse(&format!(
        "[[class]]\nname = \"m\"\nmatch = {{ comm = [\"jpf-member\"] }}\n[[class]]\nname = \"g\"\nmatch = {{ cgroup = [\"/{rule_cg}\"] }}\n"
    ))
    .unwrap();
    let filter = ProcFilter { rules: Prefilter::compile(&cfg.classes).unwrap(), cgroup_mounts: vec![root.clone()], own_pid: 0 };
    let mut mon = ProcMonitor::load(&ProcMonitorOpts { filter: Some(filter), ..Default::default() }).expect("loading procmon with a filter");
    mon.set_filter_on(true);
    let dropped0 = mon.dropped();

    // A process no rule names: started, renamed, exited, all in the kernel.
    let mut quiet = Command::new("/bin/sh").args(["-c", "printf jpf-other > /proc/self/comm; exec sleep 0.2"]).spawn().unwrap();
    let qpid = quiet.id() as i32;
    quiet.wait().unwrap();
    std::thread::sleep(Duration::from_millis(50));
    let sent: Vec<ProcEvent> = mon.drain().unwrap().into_iter().filter(|e| e.pid() == qpid).collect();
    assert!(sent.is_empty(), "a process no class can take was sent: {sent:?}");
    let kept = mon.dropped() - dropped0;
    assert!(kept >= 4, "fork, exec, rename, exec, exit kept in the kernel, but only {kept} counted");

    // A process that renames itself into a class, then renames itself twice as a member.
    let dir = tempfile::tempdir().unwrap();
    let script = format!(
        "import os, time\n\
         def wait(n):\n    while not os.path.exists({d:?} + '/' + n): time.sleep(0.005)\n\
         open('/proc/self/comm', 'w').write('jpf-member')\n\
         wait('2'); open('/proc/self/comm', 'w').write('jpf-x'); open('/proc/self/comm', 'w').write('jpf-member')\n\
         open({d:?} + '/done', 'w').write('')\n\
         time.sleep(30)\n",
        d = dir.path().display().to_string()
    );
    let p = Child(Command::new("/usr/bin/python3").args(["-c", &script]).spawn().unwrap());
    let pid = p.0.id() as i32;
    let go = |n: &str| std::fs::write(dir.path().join(n), "").unwrap();
    let mut seen = Vec::new();
    events_of(&mut mon, &mut seen, pid, |s| !s.is_empty());
    let first = seen.first().cloned().unwrap_or_else(|| panic!("the rename into the class was not sent"));
    assert!(matches!(&first.event, ProcEvent::Rename { comm, .. } if comm == "jpf-member"), "{seen:?}");
    assert!(first.adopted && first.seq >= 1, "a process nobody followed: {first:?}");
    let started = first.event.started();
    assert!(mon.followed().iter().any(|(p, s, _)| *p == pid && *s == started), "followed from its rename on");

    // Settled a member: its renames stay in the kernel.
    mon.settle(&[Settlement { pid, started, seq: first.seq, follow: Some(Follow::Member) }]).unwrap();
    go("2");
    let t0 = Instant::now();
    while !dir.path().join("done").exists() {
        assert!(t0.elapsed() < Duration::from_secs(3), "the script did not finish");
        std::thread::sleep(Duration::from_millis(10));
    }
    std::thread::sleep(Duration::from_millis(50));
    seen.extend(mon.drain_delivered().unwrap().into_iter().filter(|d| d.event.pid() == pid));
    let renames = seen.iter().filter(|d| matches!(d.event, ProcEvent::Rename { .. })).count();
    println!("events of the member: {:?}", seen.iter().map(|d| &d.event).collect::<Vec<_>>());
    assert_eq!(renames, 1, "a member's renames were sent: {seen:?}");

    // A cgroup a rule names, made after load: a process moved into it is sent, one moved into
    // another cgroup is not.
    let other = Cg::new(root.join(format!("jpf-other-{}", std::process::id())));
    let ruled = Cg::new(root.join(&rule_cg));
    let sleeper = Child(Command::new("/bin/sleep").arg("30").spawn().unwrap());
    let spid = sleeper.0.id() as i32;
    other.take(spid as u32);
    std::thread::sleep(Duration::from_millis(50));
    let moves = |mon: &mut ProcMonitor| mon.drain().unwrap().into_iter().filter(|e| matches!(e, ProcEvent::Cgroup { pid, .. } if *pid == spid)).count();
    assert_eq!(moves(&mut mon), 0, "a move into a cgroup no rule names was sent");
    ruled.take(spid as u32);
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(moves(&mut mon), 1, "the move into {} was not sent", ruled.0.display());
    drop(sleeper);
    drop(p);
    assert_eq!(mon.lost(), 0);
}

/// The children a followed process forks are sent; a pruned one's are not.
#[test]
#[ignore = "tier 2: root"]
fn root_procmon_filter_sends_a_followed_parents_forks_only() {
    if !require(is_root(), "root") || !require(Path::new("/usr/bin/python3").exists(), "python3") {
        return;
    }
    let cfg = joule_core::config::Config::parse("[[class]]\nname = \"m\"\nmatch = { comm = [\"jpf-parent\"] }\n").unwrap();
    let filter = ProcFilter { rules: Prefilter::compile(&cfg.classes).unwrap(), cgroup_mounts: vec![], own_pid: 0 };
    let mut mon = ProcMonitor::load(&ProcMonitorOpts { filter: Some(filter), ..Default::default() }).unwrap();
    mon.set_filter_on(true);
    let dir = tempfile::tempdir().unwrap();
    let script = format!(
        "import os, time\n\
         def wait(n):\n    while not os.path.exists({d:?} + '/' + n): time.sleep(0.005)\n\
         def fork(n):\n    p = os.fork()\n    if p == 0: os._exit(0)\n    os.waitpid(p, 0)\n    open({d:?} + '/' + n, 'w').write(str(p))\n\
         open('/proc/self/comm', 'w').write('jpf-parent')\n\
         wait('go1'); fork('kid1')\n\
         wait('go2'); fork('kid2')\n\
         time.sleep(30)\n",
        d = dir.path().display().to_string()
    );
    let p = Child(Command::new("/usr/bin/python3").args(["-c", &script]).spawn().unwrap());
    let pid = p.0.id() as i32;
    let mut seen = Vec::new();
    events_of(&mut mon, &mut seen, pid, |s| !s.is_empty());
    let first = seen.first().cloned().expect("the rename into the class was sent");
    let started = first.event.started();
    let kid = |n: &str| -> i32 {
        let f = dir.path().join(n);
        let t0 = Instant::now();
        while std::fs::read_to_string(&f).unwrap_or_default().is_empty() {
            assert!(t0.elapsed() < Duration::from_secs(3), "no {n}");
            std::thread::sleep(Duration::from_millis(5));
        }
        std::fs::read_to_string(&f).unwrap().parse().unwrap()
    };
    let sent_fork = |mon: &mut ProcMonitor, child: i32| {
        std::thread::sleep(Duration::from_millis(50));
        mon.drain().unwrap().iter().any(|e| matches!(e, ProcEvent::Fork { pid: c, ppid, .. } if *c == child && *ppid == pid))
    };
    // A settlement made before an event it has not seen (another seq) does nothing: the
    // parent is still followed and its fork is sent.
    mon.settle(&[Settlement { pid, started, seq: first.seq + 1, follow: Some(Follow::Pruned) }]).unwrap();
    std::fs::write(dir.path().join("go1"), "").unwrap();
    let k1 = kid("kid1");
    assert!(sent_fork(&mut mon, k1), "the fork of a followed (undecided) parent was not sent");
    mon.settle(&[Settlement { pid, started, seq: first.seq, follow: Some(Follow::Pruned) }]).unwrap();
    let dropped = mon.dropped();
    std::fs::write(dir.path().join("go2"), "").unwrap();
    let k2 = kid("kid2");
    assert!(!sent_fork(&mut mon, k2), "the fork of a pruned parent was sent");
    assert!(mon.dropped() >= dropped + 2, "its fork and its child's exit were not counted");
}
