//! Task matching on /proc: which process belongs to which class. A process matching any rule
//! of a class belongs to it (the first class in config order wins); a process matching none
//! follows its nearest matching ancestor ("children follow their parent"). Kernel threads are
//! never matched. The /proc files are read through `Effects` as bytes and parsed by
//! `crate::procfs`; the procfs root is a parameter so tests run on fixture trees.

use super::Member;
use crate::comm::Comm;
use crate::config::{ClassConfig, PodIndex};
use crate::effects::Files;
use crate::procfs::{task_dir, Stat, Status, TaskCgroups};
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

/// What matching needs to know about one process.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ProcInfo {
    pub pid: i32,
    pub ppid: i32,
    /// Byte for byte (its owner chose it).
    pub comm: Comm,
    pub exe: Option<PathBuf>,
    /// Real uid.
    pub uid: Option<u32>,
    /// Its cgroup in each hierarchy.
    pub cgroups: TaskCgroups,
    pub kthread: bool,
    /// Start time, clock ticks after boot (/proc/PID/stat field 22).
    pub started: Option<u64>,
}

/// Reads one process through `fx`; `None` when it vanished (or is not a process directory).
pub fn read_proc(fx: &dyn Files, procfs: &Path, pid: i32) -> Option<ProcInfo> {
    let stat = Stat::read(fx, procfs, pid)?;
    Some(ProcInfo {
        pid,
        ppid: stat.ppid,
        kthread: stat.is_kernel_thread(),
        started: stat.start_time_ticks,
        // stat's comm is /proc/PID/comm (the kernel prints both with proc_task_name).
        comm: stat.comm,
        exe: fx.read_link(&task_dir(procfs, pid).join("exe")).ok(),
        uid: Status::read(fx, procfs, pid).and_then(|s| s.uids()).map(|u| u.real),
        cgroups: TaskCgroups::read(fx, procfs, pid).unwrap_or_default(),
    })
}

/// Every process under `procfs` (those that vanish while being read are skipped).
pub fn scan(fx: &dyn Files, procfs: &Path) -> Vec<ProcInfo> {
    let Ok(names) = fx.list_dir(procfs) else { return Vec::new() };
    let mut v: Vec<ProcInfo> = names.iter().filter_map(|n| n.parse::<i32>().ok()).filter_map(|pid| read_proc(fx, procfs, pid)).collect();
    v.sort_by_key(|p| p.pid);
    v
}

/// The first class (by config order) whose rules the process matches directly (every kind of
/// rule given, see `MatchRules::matches`). A process in a Kubernetes pod's cgroup belongs only
/// to a class with `match.pod` rules (acted on in the pod's own cgroup), never to one whose
/// members joule moves into its class cgroup: a `comm = ["nginx"]` class must not take a pod's
/// nginx out of the kubelet's tree. `pods`: what the node's runtime said (empty without one).
pub fn direct_match<'a>(p: &ProcInfo, classes: &'a [ClassConfig], pods: &PodIndex) -> Option<&'a str> {
    if p.kthread {
        return None;
    }
    let in_pod = in_pod(p);
    classes
        .iter()
        .filter(|c| c.matches.pod.is_empty() != in_pod)
        .find(|c| c.matches.matches(p.pid, p.comm.as_bytes(), p.exe.as_deref(), p.uid, p.cgroups.raw_paths(), pods))
        .map(|c| c.name.as_str())
}

/// Whether `class` may hold `p` at all: pod classes hold the processes in pods, every other
/// class those outside (a sticky membership ends where this no longer holds).
pub fn fits(p: &ProcInfo, class: &ClassConfig) -> bool {
    class.matches.pod.is_empty() != in_pod(p)
}

/// Whether the process lives in a pod's cgroup (in any hierarchy).
pub fn in_pod(p: &ProcInfo) -> bool {
    p.cgroups.paths().any(|c| c.contains("kubepods") && matches!(crate::kubepods::parse(c), Some(crate::kubepods::KubeCgroup::Pod(_))))
}

/// Whether `child` may follow `parent` into its class: only a child of the same real uid. A
/// root daemon's child that switched to a user (a login, a worker that dropped privileges)
/// runs that user's code and earns nothing from its parent's class.
/// A child in a pod whose parent is not (a container's first process, forked by the runtime's
/// shim) follows nobody either: a pod's processes belong only to pod classes.
pub fn may_follow(child: &ProcInfo, parent: &ProcInfo) -> bool {
    child.uid == parent.uid && in_pod(child) == in_pod(parent)
}

/// pid → class for every process that belongs to a class: its own match, else its parent's
/// class when the parent has the same uid (so a whole tree of one user follows its root). A
/// member of `previous` keeps its class where it is sticky (`super::sticky`). Processes are
/// decided in start order, so a parent's class is known before its children's.
pub fn assign(procs: &[ProcInfo], classes: &[ClassConfig], previous: Option<&imbl::OrdMap<i32, Member>>, pods: &PodIndex) -> BTreeMap<i32, String> {
    let by_pid: HashMap<i32, &ProcInfo> = procs.iter().map(|p| (p.pid, p)).collect();
    let mut order: Vec<&ProcInfo> = procs.iter().filter(|p| !p.kthread).collect();
    order.sort_unstable_by_key(|p| (p.started, p.pid));
    let may_keep = |c: &str, p: &ProcInfo| classes.iter().any(|k| k.name == c && fits(p, k));
    let mut out: BTreeMap<i32, String> = BTreeMap::new();
    for p in order {
        let own = direct_match(p, classes, pods).map(str::to_string);
        let followed = || {
            let parent = by_pid.get(&p.ppid).filter(|q| p.ppid > 1 && may_follow(p, q))?;
            out.get(&parent.pid).cloned()
        };
        let now = own.or_else(followed);
        let kept = previous.and_then(|m| m.get(&p.pid)).filter(|b| may_keep(&b.class, p) && super::sticky(b, now.as_deref(), p.started, p.uid));
        if let Some(class) = kept.map(|b| b.class.clone()).or(now) {
            out.insert(p.pid, class);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::MatchRules;
    use crate::effects::FakeEffects;
    use crate::procfs::PF_KTHREAD;

    /// The fixture tree under `dir`, read through the fake as the machine's /proc would be.
    fn scan_dir(dir: &Path) -> Vec<ProcInfo> {
        scan(&FakeEffects::default().with_tree(dir), dir)
    }

    fn fixture(dir: &Path, pid: i32, ppid: i32, comm: &str, uid: u32, cg: &str, flags: u64) {
        let d = dir.join(pid.to_string());
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("stat"), format!("{pid} ({comm}) S {ppid} {pid} {pid} 0 -1 {flags} 0 0 0 0 1 2\n")).unwrap();
        std::fs::write(d.join("comm"), format!("{comm}\n")).unwrap();
        std::fs::write(d.join("status"), format!("Name:\t{comm}\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\n")).unwrap();
        std::fs::write(d.join("cgroup"), format!("3:cpuset:/\n1:cpu:{cg}\n0::{cg}\n")).unwrap();
        std::os::unix::fs::symlink(format!("/usr/bin/{comm}"), d.join("exe")).unwrap();
    }

    fn class(name: &str, m: MatchRules) -> ClassConfig {
        ClassConfig { name: name.into(), matches: m, ..Default::default() }
    }

    #[test]
    fn rules_and_children_following_their_parent() {
        let t = tempfile::tempdir().unwrap();
        let p = t.path();
        fixture(p, 1, 0, "init", 0, "/", 0);
        fixture(p, 2, 0, "kthreadd", 0, "/", PF_KTHREAD);
        fixture(p, 100, 1, "player", 1000, "/user.slice", 0);
        fixture(p, 101, 100, "decoder", 1000, "/user.slice", 0); // child of player
        fixture(p, 102, 101, "helper (x)", 1000, "/user.slice", 0); // grandchild, odd comm
        fixture(p, 200, 1, "thirdparty", 2000, "/apps/store/a", 0);
        fixture(p, 300, 1, "other", 0, "/apps/storefront", 0); // not under /apps/store
        fixture(p, 400, 1, "byexe", 0, "/", 0);
        let cs = vec![
            class("main", MatchRules { comm: vec!["player".into()], ..Default::default() }),
            class("apps", MatchRules { cgroup: vec!["/apps/store".into()], uid: vec![2000], ..Default::default() }),
            class("tools", MatchRules { exe: vec!["/usr/bin/byexe".into()], ..Default::default() }),
            class("kernel", MatchRules { pid: vec![2], ..Default::default() }),
        ];
        // First in order, and every kind given must match: comm player with uid 2000 is nobody.
        let mut cs = cs;
        cs.insert(0, class("both", MatchRules { comm: vec!["player".into()], uid: vec![2000], ..Default::default() }));
        let procs = scan_dir(p);
        assert_eq!(procs.len(), 8);
        assert_eq!(procs.iter().find(|x| x.pid == 102).unwrap().comm, "helper (x)");
        let a = assign(&procs, &cs, None, &PodIndex::new());
        let want: BTreeMap<i32, String> =
            [(100, "main"), (101, "main"), (102, "main"), (200, "apps"), (400, "tools")].into_iter().map(|(k, v)| (k, v.to_string())).collect();
        assert_eq!(a, want, "kthread 2 never matches even by pid; /apps/storefront is not under /apps/store");
    }

    #[test]
    fn own_match_beats_the_parent_and_vanished_pids_are_skipped() {
        let t = tempfile::tempdir().unwrap();
        fixture(t.path(), 10, 1, "shell", 0, "/", 0);
        fixture(t.path(), 11, 10, "game", 0, "/", 0);
        std::fs::create_dir_all(t.path().join("12")).unwrap(); // vanished: no stat
        let cs = vec![
            class("a", MatchRules { comm: vec!["shell".into()], ..Default::default() }),
            class("b", MatchRules { comm: vec!["game".into()], ..Default::default() }),
        ];
        let a = assign(&scan_dir(t.path()), &cs, None, &PodIndex::new());
        assert_eq!(a.get(&11).map(String::as_str), Some("b"));
        assert_eq!(a.len(), 2);
    }

    /// One `prctl(PR_SET_NAME, "\xff\xfe…")` by a user who wants out of a cap: the process is still seen,
    /// with its uid and cgroups, and still matched by them; a comm rule spelling its name's
    /// lossy text takes nothing, and neither does a name that merely looks alike.
    #[test]
    fn a_name_that_is_not_utf8_is_seen_and_matched_by_everything_but_comm() {
        let t = tempfile::tempdir().unwrap();
        fixture(t.path(), 1, 0, "init", 0, "/", 0);
        fixture(t.path(), 50, 1, "ctl", 64001, "/jobs/a", 0);
        let d = t.path().join("50");
        std::fs::write(d.join("stat"), b"50 (\xff\xfeaudjx) S 1 50 50 0 -1 0 0 0 0 0 1 2\n").unwrap();
        std::fs::write(d.join("status"), b"Name:\t\xff\xfeaudjx\nUid:\t64001\t64001\t64001\t64001\n").unwrap();
        std::fs::write(d.join("cgroup"), b"3:cpuset:/\n1:cpu:/jobs/\xff\n0::/jobs/\xff\n").unwrap();
        let procs = scan_dir(t.path());
        let p = procs.iter().find(|p| p.pid == 50).expect("seen by the walk");
        assert_eq!((p.comm.as_bytes(), p.uid), (&b"\xff\xfeaudjx"[..], Some(64001)));
        assert_eq!(p.cgroups.raw_path(None), Some(&b"/jobs/\xff"[..]));
        let lossy = || class("lossy", MatchRules { comm: vec!["\u{fffd}\u{fffd}audjx".into(), "audjx".into()], ..Default::default() });
        for (second, want) in [
            (class("capped", MatchRules { uid: vec![64001], ..Default::default() }), "capped"),
            (class("jobs", MatchRules { cgroup: vec!["/jobs".into()], ..Default::default() }), "jobs"),
            (class("bin", MatchRules { exe: vec!["/usr/bin/ctl".into()], ..Default::default() }), "bin"),
        ] {
            let a = assign(&procs, &[lossy(), second], None, &PodIndex::new());
            assert_eq!(a.get(&50).map(String::as_str), Some(want), "the comm class is first in order and must not take it");
        }
    }

    /// A node with the systemd cgroup driver on cgroup v2, CRI-O and containerd naming: a pod
    /// class takes the pod's processes by namespace, CRI-O's conmon is not the container, a
    /// `comm` class listed first never takes a pod's process, and a child forked into a pod
    /// by a process outside it does not follow its parent's class.
    #[test]
    fn pods_on_a_systemd_driver_v2_tree_with_crio_and_containerd_names_belong_only_to_pod_classes() {
        use crate::config::{PodMeta, PodRules};
        let (shop, batch) = ("0b1e5c2a-4f3d-4e8a-9c1b-2d3e4f5a6b7c", "2d3a7e4c-6b5f-4a0c-9e3d-4f5a6b7c8d9e");
        let (id, id2) =
            ("4a5f0e3b2c1d0e9f8a7b6c5d4e3f2a1b0c9d8e7f6a5b4c3d2e1f0a9b8c7d6e5f", "5b6f0e3b2c1d0e9f8a7b6c5d4e3f2a1b0c9d8e7f6a5b4c3d2e1f0a9b8c7d6e5f");
        let pod = |uid: &str, qos: &str| format!("/kubepods.slice/kubepods-{qos}.slice/kubepods-{qos}-pod{}.slice", uid.replace('-', "_"));
        let t = tempfile::tempdir().unwrap();
        fixture(t.path(), 100, 1, "nginx", 0, &format!("{}/crio-{id}.scope", pod(shop, "burstable")), 0);
        fixture(t.path(), 101, 1, "nginx", 0, "/system.slice/nginx.service", 0);
        fixture(t.path(), 102, 1, "conmon", 0, &format!("{}/crio-conmon-{id}.scope", pod(shop, "burstable")), 0);
        fixture(t.path(), 103, 1, "nginx", 0, &format!("{}/cri-containerd-{id2}.scope", pod(batch, "besteffort")), 0);
        fixture(t.path(), 104, 101, "nginx", 0, &format!("{}/cri-containerd-{id2}.scope", pod(batch, "besteffort")), 0);
        let meta = |ns: &str, cid: &str| PodMeta { namespace: ns.into(), containers: [(cid.to_string(), "app".to_string())].into(), ..Default::default() };
        let pods: PodIndex = [(shop.to_string(), meta("shop", id)), (batch.to_string(), meta("batch", id2))].into();
        let cs = vec![
            class("byname", MatchRules { comm: vec!["nginx".into()], ..Default::default() }),
            class("web", MatchRules { pod: PodRules { namespace: vec!["shop".into()], ..Default::default() }, ..Default::default() }),
            class(
                "besteffort",
                MatchRules { pod: PodRules { qos: vec!["BestEffort".into()], container: vec!["none".into()], ..Default::default() }, ..Default::default() },
            ),
        ];
        let a = assign(&scan_dir(t.path()), &cs, None, &pods);
        let want: BTreeMap<i32, String> = [(100, "web"), (101, "byname")].into_iter().map(|(k, v)| (k, v.to_string())).collect();
        assert_eq!(a, want, "102 is conmon; 103/104 are in batch with container app, not none; 104 does not follow 101 into a pod");
        let without_runtime = assign(&scan_dir(t.path()), &cs, None, &PodIndex::new());
        assert_eq!(without_runtime.get(&100), None, "no runtime's word: a namespace rule matches nothing");
    }
}
