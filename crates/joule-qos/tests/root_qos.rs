//! Tier-2 (root) tests of joule-qos on this machine's real cgroups: classes applied on the v1
//! hierarchy move real busy loops and hold them to their share; on the v2 hierarchy (no
//! controllers here: cpu and cpuset are bound to v1) grouping, accounting and clean refusal;
//! a SIGKILLed applier is cleaned up by the journal, even when its class keeps forking (an
//! applier abandoned at every moment of its apply). Each test uses its own top group and
//! journal and undoes everything on Drop; they run one at a time (they share CPU 1 and the
//! machine's RT budget).

use joule_core::config::{ClassConfig, MatchRules};
use joule_core::effects::{Files, Mounts, Net, Qdisc, RealEffects, Sched, SchedAttr, UnitValue, Units};
use joule_core::journal::{self, Journal};
use joule_core::testing::{is_root, require};
use joule_qos::{BackendKind, QosController, QosOpts};
use std::cell::Cell;
use std::io;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::Mutex;
use std::time::{Duration, Instant};

static SERIAL: Mutex<()> = Mutex::new(());
const GROUP: &str = "joule-test";
const OWNER: &str = "qos-test";

/// Kills the spawned loops and releases this test's journal records on Drop.
struct Guard {
    dir: tempfile::TempDir,
    children: Vec<Child>,
}

impl Guard {
    fn new() -> Self {
        Guard { dir: tempfile::tempdir().unwrap(), children: Vec::new() }
    }
    fn spin(&mut self) -> i32 {
        self.sh("while :; do :; done")
    }
    /// A shell that forks a short-lived child all the time.
    fn fork_loop(&mut self) -> i32 {
        self.sh("while :; do sleep 0.01; done")
    }
    fn sh(&mut self, script: &str) -> i32 {
        let c = Command::new("sh").arg("-c").arg(script).spawn().unwrap();
        let pid = c.id() as i32;
        self.children.push(c);
        pid
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        for c in &mut self.children {
            c.kill().ok();
            c.wait().ok();
        }
        let r = journal::Journal::open(self.dir.path()).and_then(|j| j.restore_owner(OWNER, &RealEffects)).unwrap();
        if std::thread::panicking() {
            return; // cleaned up; the test's own failure is the one to report
        }
        assert!(r.failed.is_empty(), "cleanup failed: {:?}", r.failed);
        // What the code could get wrong: a group (and its RT budget) or a record left behind.
        no_leftovers();
        let left = journal::entries(self.dir.path()).unwrap();
        assert!(left.is_empty(), "records left in the journal: {left:#?}");
        // Nothing writes the global limit; checked anyway, the machine's RT budget is shared.
        assert_eq!(std::fs::read_to_string("/proc/sys/kernel/sched_rt_runtime_us").unwrap().trim(), "950000");
    }
}

fn opts() -> QosOpts {
    QosOpts { group_name: GROUP.into(), owner: OWNER.into(), ..Default::default() }
}

fn class(name: &str, pid: i32) -> ClassConfig {
    ClassConfig { name: name.into(), matches: MatchRules { pid: vec![pid], ..Default::default() }, cpus: Some("1".into()), ..Default::default() }
}

/// Achieved % of one CPU over `secs`, from the controller's own status.
fn measure(c: &QosController, name: &str, secs: f64) -> f64 {
    c.status(&RealEffects);
    std::thread::sleep(Duration::from_secs_f64(secs));
    c.status(&RealEffects).into_iter().find(|s| s.name == name).unwrap().achieved_pct.unwrap()
}

fn no_leftovers() {
    for h in ["cpu", "cpuset", "cpuacct", "unified"] {
        assert!(!Path::new(&format!("/sys/fs/cgroup/{h}/{GROUP}")).exists(), "{h}/{GROUP} left behind");
    }
}

#[test]
#[ignore = "tier 2: root"]
fn root_v1_cfs_quota_30pct_on_one_cpu() {
    if !require(is_root(), "root") {
        return;
    }
    let _s = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    {
        let mut g = Guard::new();
        let pid = g.spin();
        let cs = vec![ClassConfig { quota_us: Some(30_000), period_us: Some(100_000), ..class("apps", pid) }];
        let mut c = QosController::new(&cs, opts()).unwrap();
        assert_eq!(c.layout().kind, BackendKind::V1);
        let j = Journal::open(g.dir.path()).unwrap();
        let r = c.apply(&j, &RealEffects).unwrap();
        assert_eq!(r.moved, vec![(pid, "apps".to_string())]);
        let got = measure(&c, "apps", 3.0);
        assert!((got - 30.0).abs() <= 3.0, "CFS quota 30% on CPU 1 achieved {got:.1}%");
        let st = c.status(&RealEffects).remove(0);
        assert!(st.nr_throttled.unwrap_or(0) > 0 && st.tasks == 1, "{st:?}");
    }
    no_leftovers();
}

#[test]
#[ignore = "tier 2: root"]
fn root_v1_rt_runtime_share_of_fifo_loop() {
    if !require(is_root(), "root") {
        return;
    }
    let _s = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    {
        let mut g = Guard::new();
        let pid = g.spin();
        let cs = vec![ClassConfig { rt_runtime_us: Some(300_000), rt_period_us: Some(1_000_000), ..class("main", pid) }];
        let mut c = QosController::new(&cs, opts()).unwrap();
        let j = Journal::open(g.dir.path()).unwrap();
        c.apply(&j, &RealEffects).unwrap();
        // Real-time only once inside a group with RT runtime (v1 refuses it elsewhere).
        j.record(OWNER, journal::Undo::sched(&RealEffects, pid, SchedAttr::OTHER)).unwrap();
        RealEffects.set_sched(pid, SchedAttr { policy: libc::SCHED_FIFO, priority: 10 }).unwrap();
        std::thread::sleep(Duration::from_millis(500));
        let got = measure(&c, "main", 4.0);
        assert!((got - 30.0).abs() <= 2.0, "RT 300000/1000000 on CPU 1 achieved {got:.1}%");
    }
    no_leftovers();
}

#[test]
#[ignore = "tier 2: root"]
fn root_v1_refusal_by_the_kernel_rolls_back_everything() {
    if !require(is_root(), "root") {
        return;
    }
    let _s = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    {
        let g = Guard::new();
        // Admission would refuse this (v1 sum 1.2 > 0.95): force it to reach the kernel.
        let cs = vec![
            ClassConfig { rt_runtime_us: Some(600_000), ..class("a", -1) },
            ClassConfig { rt_runtime_us: Some(600_000), cpus: Some("0".into()), ..class("b", -1) },
        ];
        assert!(QosController::new(&cs, opts()).is_err());
        let mut c = QosController::new(&cs, QosOpts { enforce_admission: false, ..opts() }).unwrap();
        let j = Journal::open(g.dir.path()).unwrap();
        let e = c.apply(&j, &RealEffects).unwrap_err().to_string();
        assert!(e.contains("cpu.rt_runtime_us") && e.contains("Invalid argument"), "{e}");
        no_leftovers();
        let left = journal::entries(g.dir.path()).unwrap();
        assert!(left.is_empty(), "the rollback left records for a later restore: {left:#?}");
    }
    no_leftovers();
}

#[test]
#[ignore = "tier 2: root"]
fn root_v2_grouping_accounting_and_clean_refusal_of_missing_controllers() {
    if !require(is_root(), "root") || !require(Path::new("/sys/fs/cgroup/unified/cgroup.controllers").exists(), "cgroup2 at /sys/fs/cgroup/unified") {
        return;
    }
    let _s = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let o = || QosOpts { backend: Some(BackendKind::V2), ..opts() };
    {
        let mut g = Guard::new();
        let pid = g.spin();
        // No knobs: grouping and accounting only, which v2 does without controllers.
        let cs = vec![ClassConfig { cpus: None, ..class("plain", pid) }];
        let mut c = QosController::new(&cs, o()).unwrap();
        assert!(c.plan().notes.iter().any(|n| n.contains("offers no cpu controller")), "{:?}", c.plan().notes);
        let j = Journal::open(g.dir.path()).unwrap();
        let r = c.apply(&j, &RealEffects).unwrap();
        assert_eq!(r.moved.len(), 1);
        let cg = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap();
        assert!(cg.contains(&format!("0::/{GROUP}/plain")), "{cg}");
        let got = measure(&c, "plain", 2.0);
        assert!(got > 80.0, "a busy loop in a v2 group accounts {got:.1}% (cpu.stat usage_usec)");
    }
    no_leftovers();
    {
        let mut g = Guard::new();
        let pid = g.spin();
        // A CFS quota needs the cpu controller, bound to v1 here: refused by the kernel when
        // enabling it, and nothing is left behind.
        let cs = vec![ClassConfig { quota_us: Some(30_000), cpus: None, ..class("capped", pid) }];
        let mut c = QosController::new(&cs, o()).unwrap();
        let j = Journal::open(g.dir.path()).unwrap();
        let e = c.apply(&j, &RealEffects).unwrap_err().to_string();
        assert!(e.contains("cgroup.subtree_control") && e.contains("+cpu"), "{e}");
        let cg = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap();
        assert!(!cg.contains(GROUP), "{cg}");
    }
    no_leftovers();
}

#[test]
#[ignore = "tier 2: root"]
fn root_sigkill_after_apply_then_restore_leaves_nothing() {
    if !require(is_root(), "root") {
        return;
    }
    let _s = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let mut g = Guard::new();
    let mut sleeper = Command::new("sleep").arg("600").spawn().unwrap();
    let before = std::fs::read_to_string(format!("/proc/{}/cgroup", sleeper.id())).unwrap();
    // A helper binary applies the classes and is SIGKILLed with them in place.
    let mut helper = applied_by_helper(&g, sleeper.id() as i32, &[]);
    assert!(Path::new(&format!("/sys/fs/cgroup/cpu/{GROUP}/main")).exists());
    assert_eq!(std::fs::read_to_string(format!("/sys/fs/cgroup/cpu/{GROUP}/main/cpu.rt_runtime_us")).unwrap().trim(), "200000");
    helper.kill().unwrap(); // SIGKILL
    helper.wait().unwrap();
    // What `joule restore` does: replay the whole journal.
    let r = journal::Journal::open(g.dir.path()).and_then(|j| j.restore_all(&RealEffects)).unwrap();
    assert!(r.failed.is_empty(), "{:?}", r.failed);
    assert!(r.undone > 0, "{r:?}");
    no_leftovers();
    assert!(!Path::new(&format!("/sys/fs/cgroup/cpu/{GROUP}/main/cpu.rt_runtime_us")).exists(), "the class's RT budget is still there");
    assert!(journal::entries(g.dir.path()).unwrap().is_empty(), "restore left records in the journal");
    let after = std::fs::read_to_string(format!("/proc/{}/cgroup", sleeper.id())).unwrap();
    assert_eq!(before, after, "the sleeper is back where it was");
    // Nothing writes the root's RT budget; checked anyway, as an extra.
    assert_eq!(std::fs::read_to_string("/sys/fs/cgroup/cpu/cpu.rt_runtime_us").unwrap().trim(), "950000");
    sleeper.kill().ok();
    sleeper.wait().ok();
    g.children.clear();
}

/// Real-time hogs: one thread per CPU, each pinned to its CPU at SCHED_FIFO 50, spinning for
/// `secs` (bounded: they end on their own, and with the test process).
fn fifo_hogs(secs: f64) -> Vec<std::thread::JoinHandle<()>> {
    let cpus = RealEffects.get_affinity(0).unwrap();
    cpus.into_iter()
        .map(|cpu| {
            std::thread::spawn(move || {
                // SAFETY: gettid has no preconditions.
                let tid = unsafe { libc::gettid() };
                RealEffects.set_affinity(tid, &[cpu]).unwrap();
                RealEffects.set_sched(tid, SchedAttr { policy: libc::SCHED_FIFO, priority: 50 }).unwrap();
                let end = Instant::now() + Duration::from_secs_f64(secs);
                while Instant::now() < end {
                    std::hint::spin_loop();
                }
            })
        })
        .collect()
}

#[test]
#[ignore = "tier 2: root"]
fn root_deadline_backend_holds_the_share_under_fifo_hogs_and_its_process_forks() {
    if !require(is_root(), "root") {
        return;
    }
    let _s = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    {
        let mut g = Guard::new();
        let spin = g.spin();
        // A busy shell that forks all the time and counts the forks that worked.
        let forks = g.dir.path().join("forks");
        let forker = g.sh(&format!("n=0; while :; do /bin/true && n=$((n+1)); echo $n > {}; done", forks.display()));
        let on_all = |c: ClassConfig| ClassConfig { cpus: None, ..c };
        let cs = vec![
            on_all(ClassConfig { rt_runtime_us: Some(30_000), rt_period_us: Some(100_000), ..class("main", spin) }),
            on_all(ClassConfig { rt_runtime_us: Some(10_000), rt_period_us: Some(100_000), ..class("forks", forker) }),
        ];
        // This kernel has RT group scheduling: the deadline backend is forced.
        let mut c = QosController::new(&cs, QosOpts { rt_backend: Some(joule_qos::RtBackend::Deadline), ..opts() }).unwrap();
        assert_eq!(c.plan().class("main").unwrap().rt_backend, Some(joule_qos::RtBackend::Deadline));
        let j = Journal::open(g.dir.path()).unwrap();
        let r = c.apply(&j, &RealEffects).unwrap();
        // The forker's short-lived children may exit before they are moved (a note each); no
        // thread may have been refused its reservation.
        assert!(!r.notes.iter().any(|n| n.contains("keeps its policy")), "{:?}", r.notes);
        let dl = SchedAttr { policy: joule_core::effects::SCHED_DEADLINE, priority: 0 };
        assert_eq!((RealEffects.get_sched(spin).unwrap(), RealEffects.get_sched(forker).unwrap()), (dl, dl));
        // Real-time hogs on every CPU for the whole measurement: the reservation still holds.
        // The baseline in the same window: a busy loop of no class.
        let plain = g.spin();
        let hogs = fifo_hogs(5.0);
        std::thread::sleep(Duration::from_millis(500));
        let plain_before = cpu_ticks(plain);
        let got = measure(&c, "main", 3.0);
        let plain_pct = (cpu_ticks(plain) - plain_before) as f64 / 3.0;
        for h in hogs {
            h.join().unwrap();
        }
        println!("under SCHED_FIFO hogs on every CPU: deadline 30000/100000 achieved {got:.1}%; a busy loop of no class {plain_pct:.1}% (USER_HZ ticks)");
        assert!((got - 30.0).abs() <= 2.0, "SCHED_DEADLINE 30000/100000 under FIFO hogs achieved {got:.1}%");
        // The hogs leave non-RT work only the kernel's reserves: the RT throttle's 5 % and,
        // from 6.12, the fair server's 5 %, each per CPU, which a plain loop collects on every
        // CPU in turn (15.7 % measured on 2 CPUs). Without the hogs it gets most of a CPU.
        let ncpu = RealEffects.get_affinity(0).unwrap().len() as f64;
        let reserve_pct = (10.0 * ncpu + 5.0).min(50.0);
        assert!(plain_pct < reserve_pct, "the hogs did not compete: a plain loop got {plain_pct:.1}% (the kernel's reserves allow {reserve_pct:.0}%)");
        // Reset-on-fork: the reserved shell forks (without it, fork() fails with EAGAIN).
        // The shell rewrites the file (`>` truncates it first): a read may find it empty.
        let count = || {
            (0..100)
                .find_map(|_| {
                    let n = std::fs::read_to_string(&forks).ok().and_then(|s| s.trim().parse::<u64>().ok());
                    n.or_else(|| {
                        std::thread::sleep(Duration::from_millis(10));
                        None
                    })
                })
                .unwrap_or(0)
        };
        let before = count();
        std::thread::sleep(Duration::from_secs(1));
        assert!(count() > before, "the reserved shell did not fork ({before} forks before, {} after)", count());
        assert_eq!(RealEffects.get_sched(forker).unwrap(), dl, "still reserved while it forks");
        c.release(&j, &RealEffects).unwrap();
        assert_eq!((RealEffects.get_sched(spin).unwrap(), RealEffects.get_sched(forker).unwrap()), (SchedAttr::OTHER, SchedAttr::OTHER));
    }
    no_leftovers();
}

/// Issue 33, item 2, as the attempt was made: a root member of an RT class gets its
/// SCHED_DEADLINE reservation, then switches to uid 1001 and exec's `sleep`. It is no longer a
/// member (the class is `uid = [0]`), so the next hold must give it its old policy back; before
/// the fix it kept the reservation for as long as it lived.
#[test]
#[ignore = "tier 2: root"]
fn root_a_deadline_reservation_ends_when_its_thread_switches_to_another_uid() {
    if !require(is_root(), "root") {
        return;
    }
    let _s = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    {
        let mut g = Guard::new();
        let go = g.dir.path().join("go");
        let member = g.sh(&format!(
            "printf jdlmember > /proc/self/comm; while [ ! -e {go} ]; do sleep 0.05; done; exec setpriv --reuid=1001 --regid=1001 --clear-groups sleep 30",
            go = go.display()
        ));
        let uid = |pid: i32| {
            let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
            status.lines().find_map(|l| l.strip_prefix("Uid:")).and_then(|u| u.split_whitespace().next().map(String::from))
        };
        let comm = |pid: i32| std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default().trim().to_string();
        let deadline = Instant::now() + Duration::from_secs(5);
        while comm(member) != "jdlmember" {
            assert!(Instant::now() < deadline, "the member never renamed itself");
            std::thread::sleep(Duration::from_millis(10));
        }
        let cs = vec![ClassConfig {
            name: "main".into(),
            matches: MatchRules { comm: vec!["jdlmember".into()], uid: vec![0], ..Default::default() },
            rt_runtime_us: Some(10_000),
            rt_period_us: Some(100_000),
            ..Default::default()
        }];
        let mut c = QosController::new(&cs, QosOpts { rt_backend: Some(joule_qos::RtBackend::Deadline), ..opts() }).unwrap();
        let j = Journal::open(g.dir.path()).unwrap();
        c.apply(&j, &RealEffects).unwrap();
        let dl = SchedAttr { policy: joule_core::effects::SCHED_DEADLINE, priority: 0 };
        assert_eq!(RealEffects.get_sched(member).unwrap(), dl, "the root member got its reservation");
        // The user's move: another uid, another program.
        std::fs::write(&go, "").unwrap();
        let deadline = Instant::now() + Duration::from_secs(5);
        while uid(member).as_deref() != Some("1001") || comm(member) != "sleep" {
            assert!(Instant::now() < deadline, "the member never became uid 1001's sleep: uid {:?}, comm {}", uid(member), comm(member));
            std::thread::sleep(Duration::from_millis(10));
        }
        // The next period's look at the class (a /proc scan and a hold, as the agent's).
        let r = c.reconcile(&j, &RealEffects).unwrap();
        assert_eq!(
            RealEffects.get_sched(member).unwrap(),
            SchedAttr::OTHER,
            "uid 1001's sleep kept the SCHED_DEADLINE reservation of a class it is not in; notes: {:?}",
            r.notes
        );
        assert!(r.notes.iter().any(|n| n.contains(&format!("thread {member} left the class"))), "{:?}", r.notes);
        c.release(&j, &RealEffects).unwrap();
    }
    no_leftovers();
}

#[test]
#[ignore = "tier 2: root"]
fn root_sigkill_with_deadline_reservations_then_restore_leaves_no_deadline_thread() {
    if !require(is_root(), "root") {
        return;
    }
    let _s = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let mut g = Guard::new();
    // `sleep` itself, not a shell around it: killing a shell would leave the sleep behind,
    // holding the test's stdout (and the tier's pipe) open for 10 min.
    g.children.push(Command::new("sleep").arg("600").spawn().unwrap());
    let sleeper = g.children[0].id() as i32;
    let mut helper = applied_by_helper(&g, sleeper, &["deadline"]);
    assert_eq!(RealEffects.get_sched(sleeper).unwrap().policy, joule_core::effects::SCHED_DEADLINE);
    helper.kill().unwrap(); // SIGKILL
    helper.wait().unwrap();
    // What `joule restore` does: replay the whole journal.
    let r = journal::Journal::open(g.dir.path()).and_then(|j| j.restore_all(&RealEffects)).unwrap();
    assert!(r.failed.is_empty(), "{:?}", r.failed);
    assert_eq!(RealEffects.get_sched(sleeper).unwrap(), SchedAttr::OTHER, "the reserved thread is back at SCHED_OTHER");
    // No thread on the machine is left at SCHED_DEADLINE (field 41 of /proc/PID/task/TID/stat).
    let dl = deadline_threads();
    assert!(dl.is_empty(), "threads at SCHED_DEADLINE after restore: {dl:?}");
    no_leftovers();
    // The deadline backend makes no cpuset partition: joule's group, where one would be, is gone.
    assert!(!Path::new(&format!("/sys/fs/cgroup/cpuset/{GROUP}")).exists());
}

/// The test helper binary, started to apply its classes around `pid` into `g`'s journal
/// (`extra`: its mode), once it says it has applied them (at most 10 s).
fn applied_by_helper(g: &Guard, pid: i32, extra: &[&str]) -> Child {
    let helper = Command::new(env!("CARGO_BIN_EXE_joule-qos-test-helper")).arg(g.dir.path()).arg(pid.to_string()).arg(GROUP).args(extra).spawn().unwrap();
    let ready = g.dir.path().join("ready");
    for _ in 0..200 {
        if ready.exists() {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(ready.exists(), "helper never applied");
    helper
}

/// utime + stime of `pid`, in USER_HZ ticks (100 per second).
fn cpu_ticks(pid: i32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let f: Vec<&str> = stat.rsplit_once(')').unwrap().1.split_whitespace().collect();
    // Fields 14 and 15 (utime, stime); f[0] is field 3.
    f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap()
}

/// Every thread on the machine under SCHED_DEADLINE.
fn deadline_threads() -> Vec<i32> {
    let mut out = Vec::new();
    for p in std::fs::read_dir("/proc").unwrap().flatten() {
        for t in std::fs::read_dir(p.path().join("task")).into_iter().flatten().flatten() {
            let Ok(stat) = std::fs::read_to_string(t.path().join("stat")) else { continue };
            let after_comm = stat.rsplit_once(')').map_or("", |x| x.1);
            // Fields from 3 on; the policy is field 41.
            if after_comm.split_whitespace().nth(41 - 3) == Some("6") {
                out.extend(t.file_name().to_str().and_then(|n| n.parse::<i32>().ok()));
            }
        }
    }
    out
}

/// The panic payload of an applier "killed" by `DiesAt`.
struct Killed;

/// The real system, with an applier that dies just before its `at`-th change, as a SIGKILL at
/// that moment would leave things: every record made so far is in the journal, the change is
/// not made. It dies by panicking with `Killed` (nothing in `apply` undoes on unwind), or, with
/// `fail`, by returning an error, which makes the apply roll itself back.
struct DiesAt {
    at: usize,
    fail: bool,
    changes: Cell<usize>,
}

impl DiesAt {
    fn change(&self) -> io::Result<()> {
        let n = self.changes.replace(self.changes.get() + 1);
        match (n == self.at, self.fail) {
            (false, _) => Ok(()),
            (true, true) => Err(io::Error::from_raw_os_error(libc::EIO)),
            (true, false) => std::panic::panic_any(Killed),
        }
    }
}

impl Files for DiesAt {
    fn read(&self, p: &Path) -> io::Result<String> {
        RealEffects.read(p)
    }
    fn read_bytes(&self, p: &Path) -> io::Result<Vec<u8>> {
        RealEffects.read_bytes(p)
    }
    fn read_link(&self, p: &Path) -> io::Result<PathBuf> {
        RealEffects.read_link(p)
    }
    fn write(&self, p: &Path, v: &str) -> io::Result<()> {
        self.change()?;
        RealEffects.write(p, v)
    }
    fn create_dir(&self, p: &Path) -> io::Result<()> {
        self.change()?;
        RealEffects.create_dir(p)
    }
    fn remove_dir(&self, p: &Path) -> io::Result<()> {
        self.change()?;
        RealEffects.remove_dir(p)
    }
    fn remove_file(&self, p: &Path) -> io::Result<()> {
        self.change()?;
        RealEffects.remove_file(p)
    }
    fn exists(&self, p: &Path) -> bool {
        RealEffects.exists(p)
    }
    fn list_dir(&self, p: &Path) -> io::Result<Vec<String>> {
        RealEffects.list_dir(p)
    }
    fn cgroup_id(&self, p: &Path) -> io::Result<u64> {
        RealEffects.cgroup_id(p)
    }
}

impl Sched for DiesAt {
    fn get_sched(&self, t: i32) -> io::Result<SchedAttr> {
        RealEffects.get_sched(t)
    }
    fn set_sched(&self, t: i32, a: SchedAttr) -> io::Result<()> {
        self.change()?;
        RealEffects.set_sched(t, a)
    }
    fn get_slice_ns(&self, t: i32) -> io::Result<Option<u64>> {
        RealEffects.get_slice_ns(t)
    }
    fn set_slice_ns(&self, t: i32, ns: u64) -> io::Result<()> {
        self.change()?;
        RealEffects.set_slice_ns(t, ns)
    }
    fn get_affinity(&self, t: i32) -> io::Result<Vec<usize>> {
        RealEffects.get_affinity(t)
    }
    fn set_affinity(&self, t: i32, cpus: &[usize]) -> io::Result<()> {
        self.change()?;
        RealEffects.set_affinity(t, cpus)
    }
    fn set_deadline(&self, t: i32, dl: joule_core::effects::Deadline) -> io::Result<()> {
        self.change()?;
        RealEffects.set_deadline(t, dl)
    }
}

// The class applier never mounts or shapes traffic: refuse, so a test that starts to is seen.
impl Mounts for DiesAt {
    fn fs_magic(&self, p: &Path) -> io::Result<i64> {
        RealEffects.fs_magic(p)
    }
    fn mount(&self, _: &str, _: &Path) -> io::Result<()> {
        Err(io::Error::from_raw_os_error(libc::EPERM))
    }
    fn unmount(&self, _: &Path) -> io::Result<()> {
        Err(io::Error::from_raw_os_error(libc::EPERM))
    }
}

/// This host has no systemd: the applier never reaches a unit.
impl Units for DiesAt {
    fn unit_property(&self, _: &str, _: &str) -> io::Result<UnitValue> {
        Err(io::Error::from_raw_os_error(libc::ENOENT))
    }
    fn set_unit_property(&self, _: &str, _: &str, _: &UnitValue) -> io::Result<()> {
        Err(io::Error::from_raw_os_error(libc::EPERM))
    }
    fn unit_freezer_state(&self, _: &str) -> io::Result<String> {
        Err(io::Error::from_raw_os_error(libc::ENOENT))
    }
    fn freeze_unit(&self, _: &str) -> io::Result<()> {
        Err(io::Error::from_raw_os_error(libc::EPERM))
    }
    fn thaw_unit(&self, _: &str) -> io::Result<()> {
        Err(io::Error::from_raw_os_error(libc::EPERM))
    }
    fn start_gate(&self, _: &joule_core::effects::Gate) -> io::Result<()> {
        Err(io::Error::from_raw_os_error(libc::EPERM))
    }
    fn stop_gates(&self) -> io::Result<usize> {
        Err(io::Error::from_raw_os_error(libc::EPERM))
    }
}

impl Net for DiesAt {
    fn link_index(&self, netns: Option<&Path>, ifname: &str) -> io::Result<u32> {
        RealEffects.link_index(netns, ifname)
    }
    fn qdiscs(&self, netns: Option<&Path>, ifindex: u32) -> io::Result<Vec<Qdisc>> {
        RealEffects.qdiscs(netns, ifindex)
    }
    fn replace_qdisc(&self, _: Option<&Path>, _: u32, _: &Qdisc) -> io::Result<()> {
        Err(io::Error::from_raw_os_error(libc::EPERM))
    }
    fn delete_qdisc(&self, _: Option<&Path>, _: u32, _: u32, _: u32) -> io::Result<()> {
        Err(io::Error::from_raw_os_error(libc::EPERM))
    }
    fn replace_class(&self, _: Option<&Path>, _: u32, _: &Qdisc) -> io::Result<()> {
        Err(io::Error::from_raw_os_error(libc::EPERM))
    }
    fn link_kind(&self, netns: Option<&Path>, ifname: &str) -> io::Result<String> {
        RealEffects.link_kind(netns, ifname)
    }
    fn add_link(&self, _: Option<&Path>, _: &str, _: &str) -> io::Result<u32> {
        Err(io::Error::from_raw_os_error(libc::EPERM))
    }
    fn delete_link(&self, _: Option<&Path>, _: &str) -> io::Result<()> {
        Err(io::Error::from_raw_os_error(libc::EPERM))
    }
}

/// Issue 6: `joule restore` after a SIGKILL failed 2 times in 60 with `RemoveDir … EBUSY` when
/// the class held a shell that keeps forking: one pass over the group's tasks, then rmdir, lost
/// the race with a sleep child that was exiting when it was moved (the kernel skips it, the
/// write succeeds, the group stays populated a moment longer). The applier is abandoned before
/// each of its changes in turn (and once after a whole apply), then cleaned up by the three
/// paths that share the replay: `joule restore`, `joule qos release` (restore_owner) and a
/// failed apply's own rollback. Nothing may be left: no group in any hierarchy, no record.
#[test]
#[ignore = "tier 2: root"]
fn root_restore_empties_a_class_whose_task_keeps_forking() {
    if !require(is_root(), "root") || !require(Path::new("/sys/fs/cgroup/cpu/cpu.cfs_quota_us").exists(), "cgroup v1 cpu hierarchy with CFS bandwidth") {
        return;
    }
    let _s = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if !info.payload().is::<Killed>() {
            default_hook(info)
        }
    }));
    // Time-bounded (the tier must stay short), and long enough that the old single pass
    // failed: 9 of 10 runs of this test failed on it, 3 to 19 s in.
    const BUDGET: Duration = Duration::from_secs(20);
    const FORKING_SHELLS: usize = 8;
    let mut g = Guard::new();
    let shells: Vec<i32> = (0..FORKING_SHELLS).map(|_| g.fork_loop()).collect();
    std::thread::sleep(Duration::from_millis(50)); // each has a child by now
    let cs = vec![ClassConfig {
        matches: MatchRules { pid: shells.clone(), ..Default::default() },
        quota_us: Some(50_000),
        period_us: Some(100_000),
        ..class("forks", -1)
    }];
    let dir = g.dir.path();
    let t0 = Instant::now();
    let (mut cycles, mut total_changes, mut with_tasks_inside) = (0usize, None::<usize>, 0usize);
    while t0.elapsed() < BUDGET {
        // Each moment 0..=n with each of the three paths, n the changes of a whole apply (the
        // first cycle counts them; moves vary with the children alive, so a late moment may
        // fall after the apply).
        let path = cycles % 3;
        let at = total_changes.map_or(usize::MAX, |n| (cycles / 3) % (n + 1));
        let fx = DiesAt { at, fail: path == 2, changes: Cell::new(0) };
        let mut c = QosController::new(&cs, opts()).unwrap();
        let j = Journal::open(dir).unwrap();
        let applied = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| c.apply(&j, &fx)));
        match &applied {
            Err(p) => assert!(p.is::<Killed>(), "apply panicked on its own at moment {at}"),
            Ok(Ok(_)) => assert!(at >= fx.changes.get(), "moment {at}: the applier did not die"),
            Ok(Err(_)) => assert!(path == 2, "apply failed on its own at moment {at}"),
        }
        total_changes.get_or_insert(fx.changes.get());
        let moves = journal::entries(dir).unwrap().iter().filter(|e| matches!(e.undo, journal::Undo::MoveTask { .. })).count();
        with_tasks_inside += usize::from(moves > 0);
        let what = match path {
            0 => "joule restore",
            1 => "joule qos release",
            _ => "the failed apply's rollback",
        };
        let failed = match path {
            0 => j.restore_all(&RealEffects).unwrap().failed,
            1 => c.release(&j, &RealEffects).unwrap().failed,
            _ => {
                if matches!(applied, Ok(Ok(_))) {
                    c.release(&j, &RealEffects).unwrap().failed // died after the whole apply
                } else {
                    Vec::new() // the rollback ran inside apply; what it could not undo stays in the journal
                }
            }
        };
        let ctx = format!("cycle {cycles}, applier dead before change {at} of {total_changes:?}, cleaned up by {what}");
        assert!(failed.is_empty(), "{ctx}: {failed:#?}");
        let left = journal::entries(dir).unwrap();
        assert!(left.is_empty(), "{ctx}: records left: {left:#?}");
        for h in ["cpu", "cpuset", "cpuacct", "unified"] {
            assert!(!Path::new(&format!("/sys/fs/cgroup/{h}/{GROUP}")).exists(), "{ctx}: {h}/{GROUP} left behind");
        }
        cycles += 1;
    }
    let _ = std::panic::take_hook(); // back to the default hook
    eprintln!("{cycles} cycles in {:.1} s; {with_tasks_inside} restores or releases found tasks moved into the class", t0.elapsed().as_secs_f64());
    assert!(with_tasks_inside >= 50, "only {with_tasks_inside} cleanups had the forking shells in the class: the test proved little");
}

/// Issue 17, row 5: the mover acts on the process the reading matched, not on its pid. A
/// reading whose member has the pid of a live process but another start time (the member
/// exited and its pid went to someone else between the reading and the move) moves nothing
/// and says the member vanished; the same reading with the right start time moves it.
#[test]
#[ignore = "tier 2: root"]
fn root_the_mover_checks_the_start_time_at_the_write() {
    if !require(is_root(), "root") {
        return;
    }
    let _s = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    {
        let mut g = Guard::new();
        let mut sleep = || {
            let c = Command::new("sleep").arg("60").spawn().unwrap();
            let pid = c.id() as i32;
            g.children.push(c);
            pid
        };
        let (first, other) = (sleep(), sleep());
        let cs = vec![class("apps", first)];
        let mut c = QosController::new(&cs, opts()).unwrap();
        let j = Journal::open(g.dir.path()).unwrap();
        assert_eq!(c.apply(&j, &RealEffects).unwrap().moved, vec![(first, "apps".to_string())]);
        let procs = Path::new("/sys/fs/cgroup/cpu").join(GROUP).join("apps/cgroup.procs");
        let in_class = |pid: i32| std::fs::read_to_string(&procs).unwrap().lines().any(|l| l == pid.to_string());

        let places = c.places();
        let reading = || joule_core::membership::Membership::scan(Path::new("/proc"), &[class("apps", other)], &places, &RealEffects);
        let mut stale = reading();
        let member = stale.members.get(&other).cloned().expect("the reading lists the second process");
        let started = member.started.expect("a start time");
        stale.members.insert(other, joule_core::membership::Member { started: Some(started + 1), ..member });
        let r = c.hold(&j, &RealEffects, &stale).unwrap();
        assert!(r.moved.is_empty() && r.vanished == vec![other], "{r:?}");
        assert!(!in_class(other), "pid {other} moved though it is not the process the reading matched");

        let r = c.hold(&j, &RealEffects, &reading()).unwrap();
        assert_eq!(r.moved, vec![(other, "apps".to_string())], "the same reading with the right start time must move it: {r:?}");
        assert!(in_class(other));
    }
    no_leftovers();
}
