//! Tier-2 (root) tests of the effects seam on the real kernel: a thread's affinity set and
//! restored from the journal; a real process frozen and thawed in a v1 freezer cgroup and in
//! a v2 cgroup the test creates; a qdisc replaced, listed and restored over rtnetlink on a
//! veth pair in a network namespace of the test's own (the machine's interfaces are never
//! touched). Everything is undone on Drop, even when a test fails.

use joule_core::effects::{tc_handle, Files, FreezeState, Freezer, Net, Qdisc, QdiscOption, RealEffects, Sched, FREEZE_SETTLE, TC_H_ROOT};
use joule_core::journal::{self, Journal, Undo};
use joule_core::testing::{is_root, require};
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::mpsc;
use std::time::Duration;

fn gettid() -> i32 {
    // SAFETY: gettid has no preconditions.
    unsafe { libc::gettid() }
}

/// `Cpus_allowed_list` of /proc/self/task/TID/status: the kernel's own account, read without
/// the seam.
fn cpus_allowed(tid: i32) -> String {
    let status = std::fs::read_to_string(format!("/proc/self/task/{tid}/status")).unwrap();
    status.lines().find_map(|l| l.strip_prefix("Cpus_allowed_list:")).unwrap().trim().to_string()
}

#[test]
#[ignore = "tier 2: root"]
fn root_affinity_set_and_restored_on_a_real_thread() {
    if !require(is_root(), "root") {
        return;
    }
    let fx = RealEffects;
    // A thread that, when asked, spins ~50 ms and reports every CPU it ran on.
    let (ask, asked) = mpsc::channel::<()>();
    let (tell, told) = mpsc::channel::<Vec<i32>>();
    let worker = std::thread::spawn(move || {
        tell.send(vec![gettid()]).unwrap();
        while asked.recv().is_ok() {
            let until = std::time::Instant::now() + Duration::from_millis(50);
            let mut seen = Vec::new();
            while std::time::Instant::now() < until {
                // SAFETY: sched_getcpu has no preconditions.
                let cpu = unsafe { libc::sched_getcpu() };
                if !seen.contains(&cpu) {
                    seen.push(cpu);
                }
            }
            tell.send(seen).unwrap();
        }
    });
    let tid = told.recv().unwrap()[0];
    let old = fx.get_affinity(tid).unwrap();
    if !require(old.len() >= 2, "at least two CPUs this thread may run on") {
        drop(ask);
        worker.join().unwrap();
        return;
    }
    let before = cpus_allowed(tid);
    let jdir = tempfile::tempdir().unwrap();
    let j = Journal::open(jdir.path()).unwrap();
    j.record("test", Undo::affinity(&fx, tid, old.clone())).unwrap();
    let only = *old.last().unwrap();
    fx.set_affinity(tid, &[only]).unwrap();
    assert_eq!(fx.get_affinity(tid).unwrap(), vec![only]);
    assert_eq!(cpus_allowed(tid), only.to_string());
    ask.send(()).unwrap();
    assert_eq!(told.recv().unwrap(), vec![only as i32], "the thread ran on a CPU it was not allowed");
    let r = journal::Journal::open(jdir.path()).and_then(|j| j.restore_all(&fx)).unwrap();
    assert_eq!((r.undone, r.failed.len()), (1, 0), "{r:?}");
    assert_eq!(fx.get_affinity(tid).unwrap(), old);
    assert_eq!(cpus_allowed(tid), before);
    drop(ask);
    worker.join().unwrap();
}

/// Mount point of the first mount of `fstype` whose super options contain `option`.
fn mount_of(fstype: &str, option: &str) -> Option<PathBuf> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    info.lines().find_map(|l| {
        let (left, right) = l.split_once(" - ")?;
        let mut r = right.split_whitespace();
        let (fs, _src, opts) = (r.next()?, r.next()?, r.next().unwrap_or(""));
        let point = left.split_whitespace().nth(4)?;
        (fs == fstype && opts.split(',').any(|o| o == option || option.is_empty())).then(|| PathBuf::from(point))
    })
}

/// A busy loop in a cgroup of the test's own. Drop thaws the cgroup (a frozen task cannot
/// die), kills the loop and removes the cgroup.
struct FreezerFixture {
    cgroup: PathBuf,
    knob: (&'static str, &'static str),
    child: Child,
}

impl FreezerFixture {
    fn new(hierarchy: &Path, procs: &str, knob: (&'static str, &'static str)) -> FreezerFixture {
        use std::os::unix::process::CommandExt;
        let cgroup = hierarchy.join(format!("joule-test-freezer-{}", std::process::id()));
        std::fs::create_dir(&cgroup).unwrap();
        let mut cmd = Command::new("sh");
        cmd.args(["-c", "while :; do :; done"]);
        // SAFETY: prctl in the child before exec; the loop dies with this test even on SIGKILL.
        unsafe {
            cmd.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                Ok(())
            })
        };
        let child = cmd.spawn().unwrap();
        let f = FreezerFixture { cgroup, knob, child };
        RealEffects.write(&f.cgroup.join(procs), &f.child.id().to_string()).unwrap();
        f
    }
    fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for FreezerFixture {
    fn drop(&mut self) {
        let _ = std::fs::write(self.cgroup.join(self.knob.0), self.knob.1);
        let _ = self.child.kill();
        let _ = self.child.wait();
        // The cgroup empties once the kernel has reaped the loop.
        for _ in 0..100 {
            if std::fs::remove_dir(&self.cgroup).is_ok() || !self.cgroup.exists() {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        panic!("could not remove {}", self.cgroup.display());
    }
}

/// utime + stime of `pid` in clock ticks (fields 14 and 15 of /proc/PID/stat).
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let f: Vec<&str> = stat[stat.rfind(')').unwrap() + 2..].split_whitespace().collect();
    f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap()
}

fn state_line(pid: u32) -> String {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status.lines().find(|l| l.starts_with("State:")).unwrap_or("State: ?").to_string()
}

/// CPU ticks `pid` gains in `ms` milliseconds.
fn progress(pid: u32, ms: u64) -> u64 {
    let t0 = cpu_ticks(pid);
    std::thread::sleep(Duration::from_millis(ms));
    cpu_ticks(pid) - t0
}

/// Freezes the fixture's loop with its thaw journalled first, sees it make no progress,
/// restores the journal and sees it run again.
fn freeze_and_restore(f: &FreezerFixture) {
    let fx = RealEffects;
    assert!(progress(f.pid(), 300) > 0, "the loop does not run before the freeze");
    assert_eq!(fx.freezer_state(&f.cgroup).unwrap(), FreezeState::Thawed);
    let jdir = tempfile::tempdir().unwrap();
    Journal::open(jdir.path()).unwrap().record("test", Undo::Thaw { cgroup: f.cgroup.clone() }).unwrap();
    let started = std::time::Instant::now();
    fx.freeze(&f.cgroup, FREEZE_SETTLE).unwrap();
    eprintln!("froze in {:?}; frozen loop: {}", started.elapsed(), state_line(f.pid()));
    assert_eq!(fx.freezer_state(&f.cgroup).unwrap(), FreezeState::Frozen);
    assert_eq!(progress(f.pid(), 300), 0, "a frozen loop ran");
    let r = journal::Journal::open(jdir.path()).and_then(|j| j.restore_all(&fx)).unwrap();
    assert_eq!((r.undone, r.failed.len()), (1, 0), "{r:?}");
    assert_eq!(fx.freezer_state(&f.cgroup).unwrap(), FreezeState::Thawed);
    assert!(progress(f.pid(), 300) > 0, "the thawed loop does not run");
}

#[test]
#[ignore = "tier 2: root"]
fn root_freezer_v1_freezes_and_thaws_a_real_process() {
    let hierarchy = mount_of("cgroup", "freezer");
    if !require(is_root(), "root") || !require(hierarchy.is_some(), "a cgroup v1 freezer hierarchy") {
        return;
    }
    let f = FreezerFixture::new(&hierarchy.unwrap(), "cgroup.procs", ("freezer.state", "THAWED"));
    freeze_and_restore(&f);
}

#[test]
#[ignore = "tier 2: root"]
fn root_freezer_v2_freezes_and_thaws_a_real_process() {
    let hierarchy = mount_of("cgroup2", "");
    if !require(is_root(), "root") || !require(hierarchy.is_some(), "a cgroup2 mount") {
        return;
    }
    let f = FreezerFixture::new(&hierarchy.unwrap(), "cgroup.procs", ("cgroup.freeze", "0"));
    // cgroup.freeze is core cgroup v2 (Linux 5.2+), present without any controller.
    if !require(f.cgroup.join("cgroup.freeze").exists(), "cgroup.freeze (Linux 5.2+) in a non-root cgroup2 group") {
        return;
    }
    freeze_and_restore(&f);
}

/// A network namespace of the test's own, with a veth pair `jv0`/`jv1` in it, held by a
/// thread that entered it; when the thread ends (on Drop, or with the process) the namespace
/// and its interfaces are gone. Nothing is mounted under /run/netns.
struct TempNetns {
    path: PathBuf,
    stop: Option<mpsc::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl TempNetns {
    fn new() -> TempNetns {
        let (ready, is_ready) = mpsc::channel();
        let (stop, stopped) = mpsc::channel::<()>();
        let thread = std::thread::spawn(move || {
            let made = (|| -> Result<i32, String> {
                nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNET).map_err(|e| format!("unshare(CLONE_NEWNET): {e}"))?;
                // `ip` run from this thread runs in its namespace.
                for args in [&["link", "add", "jv0", "type", "veth", "peer", "name", "jv1"][..], &["link", "set", "jv0", "up"], &["link", "set", "jv1", "up"]] {
                    let st = Command::new("ip").args(args).status().map_err(|e| format!("ip: {e}"))?;
                    if !st.success() {
                        return Err(format!("ip {}: {st}", args.join(" ")));
                    }
                }
                Ok(gettid())
            })();
            ready.send(made).unwrap();
            let _ = stopped.recv();
        });
        let tid = is_ready.recv().unwrap().unwrap();
        TempNetns { path: PathBuf::from(format!("/proc/{}/task/{tid}/ns/net", std::process::id())), stop: Some(stop), thread: Some(thread) }
    }
}

impl Drop for TempNetns {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn ino(p: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(p).unwrap().ino()
}

/// `tc qdisc show dev jv0` inside the namespace: the kernel's view through another tool.
fn tc_show(ns: &Path) -> String {
    let out = Command::new("nsenter").arg(format!("--net={}", ns.display())).args(["tc", "qdisc", "show", "dev", "jv0"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `TCA_HTB_INIT` and `TCA_HTB_DIRECT_QLEN` of linux/pkt_sched.h.
const TCA_HTB_INIT: u16 = 2;
const TCA_HTB_DIRECT_QLEN: u16 = 5;

/// htb at `4a:` with default class `0x10` and `direct_qlen` packets for unclassified traffic.
fn htb(direct_qlen: u32) -> Qdisc {
    // struct tc_htb_glob { version = 3 (HTB_VER >> 16), rate2quantum = 10, defcls, debug, direct_pkts }
    let glob: Vec<u8> = [3u32, 10, 0x10, 0, 0].iter().flat_map(|v| v.to_ne_bytes()).collect();
    Qdisc::new("htb", tc_handle(0x4a, 0), TC_H_ROOT)
        .with_option(QdiscOption { kind: TCA_HTB_INIT, value: glob })
        .with_option(QdiscOption::u32(TCA_HTB_DIRECT_QLEN, direct_qlen))
}

#[test]
#[ignore = "tier 2: root"]
fn root_net_qdisc_replaced_listed_and_restored_on_a_veth_of_its_own() {
    let have = |tool: &str| Command::new(tool).arg("-V").output().is_ok();
    if !require(is_root(), "root") || !require(have("ip") && have("tc") && have("nsenter"), "ip, tc (iproute2) and nsenter (util-linux)") {
        return;
    }
    let fx = RealEffects;
    let netns = TempNetns::new();
    let ns = Some(netns.path.as_path());
    assert_ne!(ino(&netns.path), ino(Path::new("/proc/self/ns/net")), "the test's namespace is the machine's");
    assert_eq!(fx.link_index(None, "jv0").unwrap_err().kind(), std::io::ErrorKind::NotFound, "jv0 leaked into the machine's namespace");
    assert_eq!(fx.link_index(ns, "nosuch0").unwrap_err().kind(), std::io::ErrorKind::NotFound);
    let ifindex = fx.link_index(ns, "jv0").unwrap();
    assert_eq!(fx.qdiscs(ns, 999_999).unwrap_err().kind(), std::io::ErrorKind::NotFound);

    let before = fx.qdiscs(ns, ifindex).unwrap();
    let default_root = before.iter().find(|q| q.parent == TC_H_ROOT).expect("a root qdisc").clone();
    assert_eq!(default_root.handle, 0, "jv0 starts with the kernel's default root qdisc: {before:?}");

    // htb (fq and fq_codel are not built into every kernel; this one has htb and tbf), the
    // undo journalled first.
    let htb = htb(4321);
    let jdir = tempfile::tempdir().unwrap();
    let j = Journal::open(jdir.path()).unwrap();
    joule_core::qdisc::replace_root(&fx, &j, "test", ns, "jv0", &htb).unwrap();
    let now = fx.qdiscs(ns, ifindex).unwrap();
    let root = now.iter().find(|q| q.parent == TC_H_ROOT).unwrap();
    assert_eq!((root.kind.as_str(), root.handle), ("htb", htb.handle), "{now:?}");
    assert_eq!(root.option(TCA_HTB_DIRECT_QLEN).and_then(QdiscOption::as_u32), Some(4321), "{root:?}");
    let glob = &root.option(TCA_HTB_INIT).expect("TCA_HTB_INIT listed").value;
    assert_eq!(u32::from_ne_bytes(glob[8..12].try_into().unwrap()), 0x10, "default class: {glob:?}");
    let shown = tc_show(&netns.path);
    assert!(shown.contains("qdisc htb 4a: root") && shown.contains("default 0x10") && shown.contains("direct_qlen 4321"), "tc sees: {shown}");
    assert!(matches!(journal::entries(jdir.path()).unwrap()[0].undo, Undo::QdiscDelete { ifindex: i, .. } if i == ifindex));

    let r = journal::Journal::open(jdir.path()).and_then(|j| j.restore_all(&fx)).unwrap();
    assert_eq!((r.undone, r.failed.len()), (1, 0), "{r:?}");
    let after = fx.qdiscs(ns, ifindex).unwrap();
    let root = after.iter().find(|q| q.parent == TC_H_ROOT).unwrap();
    assert_eq!((root.kind.as_str(), root.handle), (default_root.kind.as_str(), 0), "{after:?}");
    assert!(!tc_show(&netns.path).contains("htb"), "htb is still there");
    // The same record replayed again (a crash between the delete and the journal rewrite)
    // finds nothing of joule's left.
    let again =
        Undo::QdiscDelete { netns: ns.map(Path::to_path_buf), ifname: "jv0".into(), ifindex, parent: TC_H_ROOT, handle: htb.handle, kind: "htb".into() };
    Journal::open(jdir.path()).unwrap().record("test", again).unwrap();
    assert_eq!(journal::Journal::open(jdir.path()).and_then(|j| j.restore_all(&fx)).unwrap().already_gone, 1);
}
