//! Class membership as a reading: which process belongs to which `[[class]]` (pid, start time,
//! its cgroups) and where each class lives (its cgroup directory in every hierarchy it uses,
//! and its cgroup v2 id). Every policy and actuator reads it; none scans /proc for classes or
//! computes a class's cgroup id itself.
//!
//! Two ways make it: [`ProcessCache`] (cache.rs), kept from the kernel's process events with
//! one walk of /proc at start (the agent with eBPF: cost follows the churn), and
//! [`Membership::scan`], a walk each time (without eBPF, and `joule qos apply --follow`). A
//! reading says what changed since the previous one (`changed`, or `full` after a walk), so the
//! class mover looks only at those.

mod cache;
pub mod matching;
pub mod pods;
pub mod prefilter;

pub use cache::{ProcChange, ProcessCache, Track};
pub use pods::{PodQuery, PodSource, PodStats, PodTracker, UnnamedPod, UnnamedPods};

use crate::cgroupfs::Hier;
use crate::config::ClassConfig;
use crate::effects::Files;
use crate::procfs::TaskCgroups;
use std::path::{Path, PathBuf};

/// One process of a class.
#[derive(Debug, Clone, PartialEq)]
pub struct Member {
    pub pid: i32,
    pub class: String,
    /// Start time (clock ticks after boot): with the pid, the process's identity, so a reused
    /// pid is another process.
    pub started: Option<u64>,
    /// Its cgroup in each hierarchy when it was read.
    pub cgroups: TaskCgroups,
    /// Its real uid when it was read.
    pub uid: Option<u32>,
}

/// Whether a process that was `before` keeps its class rather than taking the one its rules
/// give it now (`now`, none: no class): membership is sticky for a process's life while its
/// uid stays the same. A rename, an exec or a cgroup move never moves a process out of its
/// class — a best-effort job renamed to escape its cap stays capped — and nothing it does
/// itself moves it into another. A uid change (setuid) decides again, as a new process would
/// be decided; so does a class that no longer exists after a reload.
pub fn sticky(before: &Member, now_class: Option<&str>, started: Option<u64>, uid: Option<u32>) -> bool {
    before.started == started && before.uid == uid && now_class != Some(before.class.as_str())
}

/// Where a class lives: its directory in each hierarchy, where its tasks go (a v2 class with
/// child classes keeps them in `self/`), and its cgroup v2 id when it has a v2 directory.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ClassPlace {
    pub class: String,
    pub dirs: Vec<(Hier, PathBuf)>,
    pub task_dirs: Vec<(Hier, PathBuf)>,
    /// Filled by [`Membership::scan`] from the unified directory (None where there is none yet).
    pub cgroup2_id: Option<u64>,
}

impl ClassPlace {
    pub fn dir(&self, h: Hier) -> Option<&Path> {
        self.dirs.iter().find(|(x, _)| *x == h).map(|(_, d)| d.as_path())
    }
    pub fn task_dir(&self, h: Hier) -> Option<&Path> {
        self.task_dirs.iter().find(|(x, _)| *x == h).map(|(_, d)| d.as_path())
    }
}

/// Every class's processes and places, as one reading saw them.
#[derive(Debug, Clone, Default)]
pub struct Membership {
    /// By pid. A persistent map: a reading is an O(1) copy of the cache's, not of every entry.
    pub members: imbl::OrdMap<i32, Member>,
    /// Members new or changed (class, cgroups, identity) since the previous reading.
    pub changed: Vec<i32>,
    /// This reading follows a walk of /proc: every member counts as changed.
    pub full: bool,
    /// Members per class (kept as members come and go, not counted each reading).
    pub sizes: std::collections::BTreeMap<String, usize>,
    /// One per class that has cgroups (none when joule does not apply the classes).
    pub places: Vec<ClassPlace>,
    /// The procfs root the scan read (threads are listed under it).
    pub procfs: PathBuf,
    /// Which reading this is (process-wide, increasing; 0: none): an actuator that acts once
    /// per reading (the class mover) skips one it has already acted on.
    pub generation: u64,
    /// What the node's container runtime said about its pods when this reading was made
    /// (empty without one): the pod classes' actuator names the pods it acts on from it.
    pub pods: std::sync::Arc<crate::config::PodIndex>,
    /// The pods seen in the kubelet's cgroups that the runtime has not named: the capping pod
    /// classes hold them until it does.
    pub unnamed_pods: std::sync::Arc<UnnamedPods>,
}

/// The generation of the last reading in this process.
static READINGS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

fn next_generation() -> u64 {
    READINGS.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1
}

/// `places` with their cgroup v2 ids read now through `fx`.
fn with_ids(places: &[ClassPlace], fx: &dyn Files) -> Vec<ClassPlace> {
    places.iter().map(|p| ClassPlace { cgroup2_id: p.dir(Hier::Unified).and_then(|d| fx.cgroup_id(d).ok()), ..p.clone() }).collect()
}

/// Whether `p` is the agent itself (pid `me`) or a joule process it started (its guardian, or
/// the user-space scheduler's: a child running this very executable), which must never be
/// frozen, capped or moved by a class: a `uid = [0]` class would otherwise catch them (issue
/// 33). Only the agent makes its children, so no other process can pass for one.
pub(crate) fn is_joule(p: &matching::ProcInfo, me: i32) -> bool {
    static OWN_EXE: std::sync::OnceLock<Option<std::path::PathBuf>> = std::sync::OnceLock::new();
    let own = OWN_EXE.get_or_init(|| std::fs::read_link("/proc/self/exe").ok());
    p.pid == me || (p.ppid == me && own.is_some() && p.exe == *own)
}

impl Membership {
    /// The one scan of /proc: every process, matched to the classes (first class in config
    /// order, children following their parent), read through `fx` like the places' cgroup ids.
    /// joule's own process (`me`) is never a member.
    pub fn scan(procfs: &Path, classes: &[ClassConfig], places: &[ClassPlace], fx: &dyn Files) -> Membership {
        Self::scan_after(procfs, classes, places, fx, None)
    }

    /// Like [`scan`](Self::scan), keeping the classes of `previous`'s members where they are
    /// [`sticky`] (a walk each period must not let a rename escape a class either).
    pub fn scan_after(procfs: &Path, classes: &[ClassConfig], places: &[ClassPlace], fx: &dyn Files, previous: Option<&Membership>) -> Membership {
        Self::scan_with(procfs, classes, places, fx, previous, &mut PodTracker::default())
    }

    /// Like [`scan_after`](Self::scan_after), with pods' names and labels from `pods`, which
    /// is asked once more first when a process sits in a pod it does not know.
    pub fn scan_with(
        procfs: &Path,
        classes: &[ClassConfig],
        places: &[ClassPlace],
        fx: &dyn Files,
        previous: Option<&Membership>,
        pods: &mut PodTracker,
    ) -> Membership {
        let procs = matching::scan(fx, procfs);
        if classes.iter().any(|c| c.matches.pod.needs_runtime()) {
            for p in &procs {
                pods.saw(p.cgroups.paths());
            }
            pods.refresh_if_wanted();
            pods.prune(procs.iter().flat_map(|p| p.cgroups.paths()));
        }
        let assigned = matching::assign(&procs, classes, previous.map(|m| &m.members), pods.index());
        let pod_index = pods.shared();
        let me = std::process::id() as i32;
        let members: imbl::OrdMap<i32, Member> = procs
            .into_iter()
            .filter(|p| !is_joule(p, me))
            .filter_map(|p| Some((p.pid, Member { class: assigned.get(&p.pid)?.clone(), pid: p.pid, started: p.started, cgroups: p.cgroups, uid: p.uid })))
            .collect();
        let mut sizes = std::collections::BTreeMap::new();
        for m in members.values() {
            *sizes.entry(m.class.clone()).or_default() += 1;
        }
        Membership {
            members,
            changed: Vec::new(),
            full: true,
            sizes,
            places: with_ids(places, fx),
            procfs: procfs.to_path_buf(),
            generation: next_generation(),
            pods: pod_index,
            unnamed_pods: pods.shared_unnamed(),
        }
    }

    /// The processes of `class`.
    pub fn of<'a>(&'a self, class: &'a str) -> impl Iterator<Item = &'a Member> + 'a {
        self.members.values().filter(move |m| m.class == class)
    }

    /// The members a mover acts on in this reading: every one after a walk, else those new or
    /// changed since the previous reading.
    pub fn to_place(&self) -> Box<dyn Iterator<Item = &Member> + '_> {
        if self.full {
            Box::new(self.members.values())
        } else {
            Box::new(self.changed.iter().filter_map(|pid| self.members.get(pid)))
        }
    }

    /// The pids that left every class since the previous reading (a uid change, an exit): the
    /// class mover takes a live one out of the class's cgroup, where it would otherwise stay
    /// (a child forked inside a class cgroup is in it from its first instant).
    pub fn left(&self) -> impl Iterator<Item = i32> + '_ {
        self.changed.iter().copied().filter(|pid| !self.members.contains_key(pid))
    }

    pub fn place(&self, class: &str) -> Option<&ClassPlace> {
        self.places.iter().find(|p| p.class == class)
    }

    /// The class's cgroup v2 id, where it has a v2 directory.
    pub fn cgroup2_id(&self, class: &str) -> Option<u64> {
        self.place(class)?.cgroup2_id
    }

    /// Every thread of every process of `class`, ascending (read from `<procfs>/PID/task` now:
    /// threads come and go faster than processes).
    pub fn threads(&self, class: &str) -> Vec<i32> {
        let mut tids: Vec<i32> = self
            .of(class)
            .flat_map(|m| {
                let dir = crate::procfs::task_dir(&self.procfs, m.pid).join("task");
                std::fs::read_dir(dir).into_iter().flatten().flatten().filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
            })
            .collect();
        tids.sort_unstable();
        tids
    }

    /// (class, processes) for every class, in config order.
    pub fn counts(&self, classes: &[ClassConfig]) -> Vec<(String, usize)> {
        classes.iter().map(|c| (c.name.clone(), self.sizes.get(&c.name).copied().unwrap_or(0))).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::effects::FakeEffects;

    #[test]
    fn one_scan_gives_members_with_their_identity_and_places_with_their_ids() {
        let t = tempfile::tempdir().unwrap();
        let p = t.path();
        for (pid, ppid, comm, tids) in [(100, 1, "web", vec![100, 101]), (102, 100, "worker", vec![102]), (200, 1, "other", vec![200])] {
            let d = p.join(pid.to_string());
            std::fs::create_dir_all(&d).unwrap();
            std::fs::write(d.join("stat"), format!("{pid} ({comm}) S {ppid} 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 {} 0 0", 5000 + pid)).unwrap();
            std::fs::write(d.join("cgroup"), "0::/\n").unwrap();
            for tid in tids {
                std::fs::create_dir_all(d.join(format!("task/{tid}"))).unwrap();
            }
        }
        let cfg = crate::config::Config::parse("[[class]]\nname = \"web\"\nweight = 100\n[class.match]\ncomm = [\"web\"]\n").unwrap();
        let fx = FakeEffects::default().with_dir("/cg/joule/web").with_tree(p);
        let place = ClassPlace {
            class: "web".into(),
            dirs: vec![(Hier::Unified, "/cg/joule/web".into())],
            task_dirs: vec![(Hier::Unified, "/cg/joule/web".into())],
            cgroup2_id: None,
        };
        let m = Membership::scan(p, &cfg.classes, &[place], &fx);
        let pids: Vec<(i32, Option<u64>)> = m.of("web").map(|x| (x.pid, x.started)).collect();
        assert_eq!(pids, [(100, Some(5100)), (102, Some(5102))], "the worker follows its parent");
        assert_eq!(m.threads("web"), [100, 101, 102]);
        assert_eq!(m.cgroup2_id("web"), fx.cgroup_id(Path::new("/cg/joule/web")).ok());
        assert!(m.cgroup2_id("web").is_some());
        assert_eq!(m.counts(&cfg.classes), [("web".to_string(), 2)]);
    }
}
