//! The process cache on a fixture /proc that the test changes the way the kernel would, event by
//! event: after every event the cache's members equal what a walk finds that knows the previous
//! reading (membership is sticky: a walk without history would forget a class a process keeps
//! through a rename or exec), and each event reads only what it changes.

use super::*;
use crate::config::Config;
use crate::effects::FakeEffects;

/// `<dir>/<pid>`: a process with these fields (start time `1000 + pid` unless `started`).
fn proc(dir: &Path, pid: i32, ppid: i32, comm: &str, uid: u32, cg: &str, started: u64) {
    let d = dir.join(pid.to_string());
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(d.join(format!("task/{pid}"))).unwrap();
    std::fs::write(d.join("stat"), format!("{pid} ({comm}) S {ppid} {pid} {pid} 0 -1 0 0 0 0 0 1 2 0 0 20 0 1 0 {started}\n")).unwrap();
    std::fs::write(d.join("status"), format!("Name:\t{comm}\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\n")).unwrap();
    std::fs::write(d.join("cgroup"), format!("0::{cg}\n")).unwrap();
    std::os::unix::fs::symlink(format!("/usr/bin/{comm}"), d.join("exe")).unwrap();
}

fn set_cgroup(dir: &Path, pid: i32, cg: &str) {
    std::fs::write(dir.join(pid.to_string()).join("cgroup"), format!("0::{cg}\n")).unwrap();
}

fn classes() -> Vec<ClassConfig> {
    Config::parse(
        "[[class]]\nname = \"web\"\nmatch = { comm = [\"nginx\"] }\n\
         [[class]]\nname = \"batch\"\nmatch = { cgroup = [\"/batch\"] }\n\
         [[class]]\nname = \"render\"\nmatch = { uid = [1001], exe = [\"/usr/bin/render\"] }\n",
    )
    .unwrap()
    .classes
}

/// (pid, class) of members.
type Classes = Vec<(i32, String)>;

/// (pid, class) of the cache's members, and of a fresh walk of the same tree.
fn both(c: &mut ProcessCache, dir: &Path) -> (Classes, Classes) {
    let fx = FakeEffects::default().with_tree(dir);
    let r = c.reading(&fx);
    let cached: Classes = r.members.values().map(|m| (m.pid, m.class.clone())).collect();
    let sizes = |class: &str| cached.iter().filter(|(_, c)| c == class).count();
    assert_eq!(
        r.counts(&classes()),
        [("web".to_string(), sizes("web")), ("batch".to_string(), sizes("batch")), ("render".to_string(), sizes("render"))],
        "the kept counts"
    );
    let walked = Membership::scan_after(dir, &classes(), &[], &fx, Some(&r)).members.values().map(|m| (m.pid, m.class.clone())).collect();
    (cached, walked)
}

fn web(pids: &[i32]) -> Classes {
    pids.iter().map(|p| (*p, "web".to_string())).collect()
}

#[test]
fn events_keep_the_members_a_walk_would_find() {
    let t = tempfile::tempdir().unwrap();
    let d = t.path();
    proc(d, 1, 0, "init", 0, "/", 1);
    proc(d, 100, 1, "nginx", 0, "/", 1100);
    proc(d, 200, 1, "bash", 1000, "/", 1200);
    let mut c = ProcessCache::new(d, &classes(), vec![]);
    c.walk();
    let first = c.reading(&FakeEffects::default());
    assert!(first.full && first.changed.is_empty());
    assert_eq!(first.members.values().map(|m| m.pid).collect::<Vec<_>>(), [100]);

    // nginx forks a worker: it inherits the class (and its parent's cgroups), nothing read.
    c.apply(&ProcChange::Fork { pid: 101, ppid: 100, started: 1101, comm: "nginx".into() });
    let r = c.reading(&FakeEffects::default());
    assert_eq!((r.full, r.changed.clone()), (false, vec![101]));
    assert_eq!(r.members[&101].class, "web");
    proc(d, 101, 100, "nginx", 0, "/", 1101); // the kernel's view, for the walk below
    let (cached, walked) = both(&mut c, d);
    assert_eq!(cached, walked);

    // bash runs a helper that renames itself nginx: it joins web, and so does its child (same
    // uid).
    c.apply(&ProcChange::Fork { pid: 201, ppid: 200, started: 1201, comm: "bash".into() });
    proc(d, 201, 200, "bash", 1000, "/", 1201);
    c.apply(&ProcChange::Fork { pid: 202, ppid: 201, started: 1202, comm: "bash".into() });
    proc(d, 202, 201, "bash", 1000, "/", 1202);
    c.apply(&ProcChange::Rename { pid: 201, started: 1201, comm: "nginx".into() });
    proc(d, 201, 200, "nginx", 1000, "/", 1201);
    let (cached, walked) = both(&mut c, d);
    assert_eq!(cached, walked);
    assert_eq!(cached, web(&[100, 101, 201, 202]));

    // 202 execs the renderer as uid 1000: `render` wants uid 1001 too (every kind given must
    // match), so 202 keeps the class it had (sticky).
    proc(d, 202, 201, "render", 1000, "/", 1202);
    c.apply(&ProcChange::Exec { pid: 202, started: 1202, comm: "render".into() });
    let (cached, walked) = both(&mut c, d);
    assert_eq!(cached, walked);
    assert!(cached.contains(&(202, "web".into())), "{cached:?}");

    // Someone moves bash (200) into /batch: it joins batch by cgroup.
    set_cgroup(d, 200, "/batch");
    c.apply(&ProcChange::Cgroup { pid: 200, started: 1200 });
    let r = c.reading(&FakeEffects::default());
    assert!(r.changed.contains(&200) && r.members[&200].class == "batch");
    assert_eq!(r.members[&200].cgroups.path(None), Some("/batch"));

    // A worker setuid()s to 1001: decided again, and its own comm matches web.
    proc(d, 101, 100, "nginx", 1001, "/", 1101);
    c.apply(&ProcChange::Creds { pid: 101, started: 1101 });
    let (cached, walked) = both(&mut c, d);
    assert_eq!(cached, walked);
    assert!(cached.contains(&(101, "web".into())), "{cached:?}");

    // 201 exits: 202 is reparented to init (the kernel's doing) and keeps its class.
    std::fs::remove_dir_all(d.join("201")).unwrap();
    proc(d, 202, 1, "render", 1000, "/", 1202);
    c.apply(&ProcChange::Exit { pid: 201, started: 1201 });
    let (cached, walked) = both(&mut c, d);
    assert_eq!(cached, walked);
    assert!(!cached.iter().any(|(p, _)| *p == 201));
    assert!(cached.contains(&(202, "web".into())), "{cached:?}");
}

/// A name that is not UTF-8, by walk and by event, read through the cache's own effects (an
/// in-memory /proc): the process is seen with its uid and takes its uid's class; a comm class
/// spelling the name's lossy text, first in order, never takes it.
#[test]
fn a_name_that_is_not_utf8_is_matched_as_bytes_by_walk_and_by_event() {
    let classes = Config::parse(
        "[[class]]\nname = \"lossy\"\nmatch = { comm = [\"\u{fffd}\u{fffd}x\"] }\n\
         [[class]]\nname = \"u\"\nquota_us = 10000\nmatch = { uid = [1001] }\n",
    )
    .unwrap()
    .classes;
    let stat = |pid: i32, comm: &[u8]| {
        [format!("{pid} (").as_bytes(), comm, format!(") S 1 {pid} {pid} 0 -1 0 0 0 0 0 1 2 0 0 20 0 1 0 {}\n", 1000 + pid).as_bytes()].concat()
    };
    let status = |comm: &[u8], uid: u32| [&b"Name:\t"[..], comm, format!("\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\n").as_bytes()].concat();
    let mut fx = FakeEffects::default().with_dir("/p");
    for (pid, comm, uid) in [(1, &b"init"[..], 0), (50, b"\xff\xfex", 1001), (60, b"sh", 2000)] {
        let d = format!("/p/{pid}");
        fx = fx
            .with_dir(&d)
            .with_bytes(format!("{d}/stat"), &stat(pid, comm))
            .with_bytes(format!("{d}/status"), &status(comm, uid))
            .with_file(format!("{d}/cgroup"), "0::/\n");
    }
    let fx = Arc::new(fx);
    let mut c = ProcessCache::new("/p", &classes, vec![]).with_effects(fx.clone());
    c.walk();
    assert_eq!(c.processes(), 3, "the walk saw every process");
    assert_eq!((class_of(&mut c, 50).as_deref(), class_of(&mut c, 60)), (Some("u"), None));
    // uid 2000's sh renames itself to the bytes whose lossy text the first class spells.
    fx.raw.lock().unwrap().insert("/p/60/stat".into(), stat(60, b"\xff\xfex"));
    c.apply(&ProcChange::Rename { pid: 60, started: 1060, comm: crate::comm::Comm::new(&b"\xff\xfex"[..]) });
    assert_eq!(class_of(&mut c, 60), None, "not its name: no class");
    c.walk();
    assert_eq!((class_of(&mut c, 50).as_deref(), class_of(&mut c, 60)), (Some("u"), None), "a walk agrees");
}

fn capped() -> Vec<ClassConfig> {
    Config::parse(
        "[[class]]\nname = \"be\"\nquota_us = 10000\nmatch = { comm = [\"miner\"] }\n\
         [[class]]\nname = \"free\"\nmatch = { comm = [\"free\"] }\n\
         [[class]]\nname = \"svc\"\nweight = 500\nmatch = { comm = [\"svc\"], uid = [0] }\n",
    )
    .unwrap()
    .classes
}

fn class_of(c: &mut ProcessCache, pid: i32) -> Option<String> {
    c.reading(&FakeEffects::default()).members.get(&pid).map(|m| m.class.clone())
}

/// Issue 17: a user's job renamed to escape its cap stays capped (and its later children with
/// it); only a uid change decides again.
#[test]
fn a_rename_or_exec_never_moves_a_process_out_of_its_class() {
    let t = tempfile::tempdir().unwrap();
    let d = t.path();
    proc(d, 1, 0, "init", 0, "/", 1);
    proc(d, 500, 1, "miner", 1001, "/", 1500);
    let mut c = ProcessCache::new(d, &capped(), vec![]);
    c.walk();
    assert_eq!(class_of(&mut c, 500).as_deref(), Some("be"));
    c.apply(&ProcChange::Rename { pid: 500, started: 1500, comm: "free".into() });
    assert_eq!(class_of(&mut c, 500).as_deref(), Some("be"), "renamed like an uncapped class");
    c.apply(&ProcChange::Exec { pid: 500, started: 1500, comm: "bash".into() });
    assert_eq!(class_of(&mut c, 500).as_deref(), Some("be"), "exec'd something else");
    c.apply(&ProcChange::Fork { pid: 501, ppid: 500, started: 1501, comm: "bash".into() });
    assert_eq!(class_of(&mut c, 501).as_deref(), Some("be"), "its child follows it");
    // A walk after lost events keeps them too.
    proc(d, 500, 1, "bash", 1001, "/", 1500);
    proc(d, 501, 500, "bash", 1001, "/", 1501);
    c.walk();
    assert_eq!((class_of(&mut c, 500).as_deref(), class_of(&mut c, 501).as_deref()), (Some("be"), Some("be")));
    // A process that belonged to no class may still join one by a rename.
    proc(d, 600, 1, "sh", 1001, "/", 1600);
    c.apply(&ProcChange::Fork { pid: 600, ppid: 1, started: 1600, comm: "sh".into() });
    c.apply(&ProcChange::Rename { pid: 600, started: 1600, comm: "free".into() });
    assert_eq!(class_of(&mut c, 600).as_deref(), Some("free"));
}

/// Issue 17: a name is a claim; a class that grants takes only processes of its uid, and a
/// child follows its parent only when it has the parent's uid.
#[test]
fn a_granting_class_takes_only_its_uid_and_children_follow_within_their_uid() {
    let t = tempfile::tempdir().unwrap();
    let d = t.path();
    proc(d, 1, 0, "init", 0, "/", 1);
    proc(d, 700, 1, "svc", 0, "/", 1700);
    proc(d, 800, 1, "svc", 1001, "/", 1800);
    let mut c = ProcessCache::new(d, &capped(), vec![]);
    c.walk();
    assert_eq!((class_of(&mut c, 700).as_deref(), class_of(&mut c, 800)), (Some("svc"), None), "uid 1001's svc is not root's");
    // root's svc forks a worker that drops to uid 1001: it leaves with its uid.
    c.apply(&ProcChange::Fork { pid: 701, ppid: 700, started: 1701, comm: "svc".into() });
    assert_eq!(class_of(&mut c, 701).as_deref(), Some("svc"));
    proc(d, 701, 700, "svc", 1001, "/", 1701);
    c.apply(&ProcChange::Creds { pid: 701, started: 1701 });
    assert_eq!(class_of(&mut c, 701), None, "a child that switched to uid 1001 stays in a class of uid 0");
    // Its own child (uid 1001) follows nothing either; a walk agrees.
    c.apply(&ProcChange::Fork { pid: 702, ppid: 701, started: 1702, comm: "sh".into() });
    proc(d, 702, 701, "sh", 1001, "/", 1702);
    assert_eq!(class_of(&mut c, 702), None);
    c.walk();
    assert_eq!((class_of(&mut c, 701), class_of(&mut c, 702)), (None, None));
}

/// A reused pid is a new process: an exit the cache missed (lost events) and a new process
/// with the same pid never inherit the old one's class.
#[test]
fn a_reused_pid_never_inherits_the_old_processes_class() {
    let t = tempfile::tempdir().unwrap();
    let d = t.path();
    proc(d, 1, 0, "init", 0, "/", 1);
    proc(d, 300, 1, "nginx", 0, "/", 1300);
    proc(d, 400, 1, "sshd", 0, "/", 1400);
    let mut c = ProcessCache::new(d, &classes(), vec![]);
    c.walk();
    c.reading(&FakeEffects::default());
    // nginx 300 exits without an event reaching us; sshd forks a child that gets pid 300.
    proc(d, 300, 400, "sshd", 0, "/", 1999);
    c.apply(&ProcChange::Fork { pid: 300, ppid: 400, started: 1999, comm: "sshd".into() });
    let r = c.reading(&FakeEffects::default());
    assert!(r.members.get(&300).is_none(), "the new 300 is not nginx: {:?}", r.members.get(&300));
    assert!(r.changed.contains(&300), "leaving the class is a change");
    // An event about the old process (its exit, late) does not touch the new one.
    c.apply(&ProcChange::Exit { pid: 300, started: 1300 });
    c.apply(&ProcChange::Rename { pid: 300, started: 1300, comm: "nginx".into() });
    let (cached, walked) = both(&mut c, d);
    assert_eq!(cached, walked);
    assert!(cached.is_empty(), "{cached:?}");
}

#[test]
fn a_walk_again_rebuilds_and_the_next_reading_is_full() {
    let t = tempfile::tempdir().unwrap();
    let d = t.path();
    proc(d, 1, 0, "init", 0, "/", 1);
    proc(d, 100, 1, "nginx", 0, "/", 1100);
    let mut c = ProcessCache::new(d, &classes(), vec![]);
    c.walk();
    c.reading(&FakeEffects::default());
    proc(d, 101, 100, "nginx", 0, "/", 1101); // started while events were lost
    c.walk();
    let r = c.reading(&FakeEffects::default());
    assert!(r.full);
    assert_eq!(r.to_place().map(|m| m.pid).collect::<Vec<_>>(), [100, 101]);
    assert_eq!(c.processes(), 3);
    let r = c.reading(&FakeEffects::default());
    assert!(!r.full && r.to_place().count() == 0, "nothing changed since");
}

/// Issue 33: a class matched by `uid = [0]` catches root's processes, but never the agent's own
/// children that run joule itself (its guardian, which must stay free to restore everything
/// when the agent dies); another child of the agent's, running something else, is a process
/// like any other.
#[test]
fn a_uid_0_class_never_catches_joules_own_guardian() {
    let d = tempfile::tempdir().unwrap();
    let me = std::process::id() as i32;
    let own_exe = std::fs::read_link("/proc/self/exe").unwrap();
    proc(d.path(), 50, me, "joule-guardian", 0, "/", 1050);
    std::fs::remove_file(d.path().join("50/exe")).unwrap();
    std::os::unix::fs::symlink(&own_exe, d.path().join("50/exe")).unwrap();
    proc(d.path(), 51, me, "sh", 0, "/", 1051);
    proc(d.path(), 52, 1, "cron", 0, "/", 1052);
    let cs = Config::parse("[[class]]\nname = \"root\"\nquota_us = 50000\nmatch = { uid = [0] }\n").unwrap().classes;
    let mut c = ProcessCache::new(d.path(), &cs, Vec::new());
    c.walk();
    let members: Vec<i32> = c.reading(&FakeEffects::default()).members.keys().copied().collect();
    assert_eq!(members, vec![51, 52], "the guardian (pid 50) must not be a member");
    let scanned: Vec<i32> = Membership::scan(d.path(), &cs, &[], &FakeEffects::default().with_tree(d.path())).members.keys().copied().collect();
    assert_eq!(scanned, vec![51, 52], "nor in a scan");
}

/// A container runtime's init stages: a process is moved into a cgroup and exits before the
/// move is read; its child (forked after the move) inherits the new cgroup, and execs the
/// container's program. The cache must not take the child for one outside the cgroup: its
/// exec reads the cgroups again. Here the cgroup is a pod's and the class a pod class.
#[test]
fn a_child_of_a_moved_and_exited_parent_gets_its_own_cgroups_at_exec() {
    let t = tempfile::tempdir().unwrap();
    let d = t.path();
    proc(d, 10, 1, "runtime", 0, "/system.slice/containerd.service", 1010);
    let classes = Config::parse("[[class]]\nname = \"besteffort\"\nthermal = \"best_effort\"\nmatch.pod = { qos = [\"BestEffort\"] }\n").unwrap().classes;
    let mut c = ProcessCache::new(d, &classes, Vec::new());
    c.walk();
    let pod = "/kubepods/besteffort/pod0b1e5c2a-4f3d-4e8a-9c1b-2d3e4f5a6b7c/4a5f0e3b2c1d0e9f8a7b6c5d4e3f2a1b0c9d8e7f6a5b4c3d2e1f0a9b8c7d6e5f";
    // 20 forks, is moved into the pod and exits before the cache reads /proc/20/cgroup.
    c.apply(&ProcChange::Fork { pid: 20, ppid: 10, started: 1020, comm: "runc:[0:PARENT]".into() });
    c.apply(&ProcChange::Cgroup { pid: 20, started: 1020 });
    proc(d, 21, 20, "runc:[1:CHILD]", 0, pod, 1021);
    c.apply(&ProcChange::Fork { pid: 21, ppid: 20, started: 1021, comm: "runc:[1:CHILD]".into() });
    c.apply(&ProcChange::Exit { pid: 20, started: 1020 });
    proc(d, 21, 1, "pause", 0, pod, 1021);
    c.apply(&ProcChange::Exec { pid: 21, started: 1021, comm: "pause".into() });
    let r = c.reading(&FakeEffects::default());
    assert_eq!(r.members.get(&21).map(|m| m.class.as_str()), Some("besteffort"), "{:?}", r.members);
    assert!(!r.members.contains_key(&10), "the runtime is in no pod: a pod class never takes it");
}
