//! The process cache: class membership kept from the kernel's process events instead of a walk
//! of /proc every period, the way Tetragon keeps its process cache. One walk at start (and
//! again when events were lost); then each event costs what it changes: a new process inherits
//! its parent's exe, uid and cgroups (nothing read), an exec reads the new exe link, a cgroup
//! move re-reads /proc/PID/cgroup, a setuid re-reads /proc/PID/status, an exit drops the process
//! and re-reads its children's parent. A process is known by pid and start time, so an event
//! for a pid that was reused by a new process is never taken for the old one. Classes follow
//! the walk's rules exactly (first class in config order, else the parent's class when it has the same uid),
//! and a process whose class changed takes the descendants that follow it along. Membership is
//! sticky (`super::sticky`): a rename, exec or cgroup move keeps a process in its class.

use super::matching::{assign, direct_match, fits, in_pod, may_follow, read_proc, ProcInfo};
use super::pods::{PodStats, PodTracker};
use super::{next_generation, sticky, with_ids, ClassPlace, Member, Membership};
use crate::comm::Comm;
use crate::config::ClassConfig;
use crate::effects::{Files, RealEffects};
use crate::procfs::{task_dir, Stat, Status, TaskCgroups};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// One change the kernel reported about process `pid` (`started`: its start time, clock ticks
/// after boot). The agent turns joule-bpf's process monitor's events into these.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProcChange {
    Fork { pid: i32, ppid: i32, started: u64, comm: Comm },
    Exec { pid: i32, started: u64, comm: Comm },
    Exit { pid: i32, started: u64 },
    Rename { pid: i32, started: u64, comm: Comm },
    Cgroup { pid: i32, started: u64 },
    Creds { pid: i32, started: u64 },
}

pub struct ProcessCache {
    procfs: PathBuf,
    /// What /proc is read through (the machine's, or a test's fake).
    fx: Arc<dyn Files + Send + Sync>,
    classes: Vec<ClassConfig>,
    places: Vec<ClassPlace>,
    /// Every process, by pid.
    procs: HashMap<i32, ProcInfo>,
    /// ppid → children.
    children: HashMap<i32, BTreeSet<i32>>,
    members: imbl::OrdMap<i32, Member>,
    /// Members per class.
    sizes: BTreeMap<String, usize>,
    /// Members new or changed, and pids that left a class, since the last reading.
    changed: BTreeSet<i32>,
    /// The next reading follows a walk.
    full: bool,
    /// joule's own process, never a member.
    me: i32,
    /// Pods' names and labels, for `match.pod` rules; asked only when a class needs them.
    pods: PodTracker,
    needs_pods: bool,
}

impl ProcessCache {
    /// An empty cache; [`walk`](Self::walk) fills it.
    pub fn new(procfs: impl Into<PathBuf>, classes: &[ClassConfig], places: Vec<ClassPlace>) -> ProcessCache {
        ProcessCache {
            procfs: procfs.into(),
            fx: Arc::new(RealEffects),
            classes: classes.to_vec(),
            places,
            procs: HashMap::new(),
            children: HashMap::new(),
            members: imbl::OrdMap::new(),
            sizes: BTreeMap::new(),
            changed: BTreeSet::new(),
            full: true,
            me: std::process::id() as i32,
            pods: PodTracker::default(),
            needs_pods: classes.iter().any(|c| c.matches.pod.needs_runtime()),
        }
    }

    /// Reads /proc through `fx` instead of the machine's (set before the first walk).
    pub fn with_effects(mut self, fx: Arc<dyn Files + Send + Sync>) -> ProcessCache {
        self.fx = fx;
        self
    }

    /// Where pods' names, labels and annotations come from (set before the first walk).
    pub fn with_pods(mut self, pods: PodTracker) -> ProcessCache {
        self.pods = pods;
        self
    }

    pub fn pod_stats(&self) -> &PodStats {
        self.pods.stats()
    }

    /// After an event about `pid`: asks the runtime when the process sits in a pod the index
    /// does not know (at most once per gap; `reading` retries), and decides every pod process
    /// again when the index changed.
    fn follow_pods(&mut self, pid: i32) {
        if !self.needs_pods {
            return;
        }
        if let Some(p) = self.procs.get(&pid) {
            self.pods.saw(p.cgroups.paths());
        }
        self.refresh_pods();
    }

    fn refresh_pods(&mut self) {
        if self.needs_pods && self.pods.refresh_if_wanted() {
            let in_pods: Vec<i32> = self.procs.values().filter(|p| in_pod(p)).map(|p| p.pid).collect();
            for pid in in_pods {
                self.reclassify(pid);
            }
        }
    }

    /// Walks /proc and rebuilds everything (at start, and when events were lost).
    pub fn walk(&mut self) {
        let procs = super::matching::scan(self.fx.as_ref(), &self.procfs);
        if self.needs_pods {
            for p in &procs {
                self.pods.saw(p.cgroups.paths());
            }
            self.pods.refresh_if_wanted();
        }
        let mut assigned = assign(&procs, &self.classes, Some(&self.members), self.pods.index());
        for p in procs.iter().filter(|p| super::is_joule(p, self.me)) {
            assigned.remove(&p.pid);
        }
        self.procs = procs.into_iter().map(|p| (p.pid, p)).collect();
        self.children.clear();
        for p in self.procs.values() {
            self.children.entry(p.ppid).or_default().insert(p.pid);
        }
        self.members = assigned
            .into_iter()
            .map(|(pid, class)| {
                let p = &self.procs[&pid];
                (pid, Member { pid, class, started: p.started, cgroups: p.cgroups.clone(), uid: p.uid })
            })
            .collect();
        self.sizes.clear();
        for m in self.members.values() {
            *self.sizes.entry(m.class.clone()).or_default() += 1;
        }
        self.changed.clear();
        self.full = true;
    }

    /// How many processes it knows.
    pub fn processes(&self) -> usize {
        self.procs.len()
    }

    /// The class of `pid` as the walk's rules give it: its own match, else its parent's class
    /// when the parent has the same uid.
    fn class_of(&self, pid: i32) -> Option<String> {
        let p = self.procs.get(&pid)?;
        if p.kthread || super::is_joule(p, self.me) {
            return None;
        }
        if let Some(c) = direct_match(p, &self.classes, self.pods.index()) {
            return Some(c.to_string());
        }
        let parent = self.procs.get(&p.ppid).filter(|q| p.ppid > 1 && may_follow(p, q))?;
        self.members.get(&parent.pid).map(|m| m.class.clone())
    }

    fn member_of(&self, pid: i32) -> Option<Member> {
        let class = self.class_of(pid)?;
        let p = &self.procs[&pid];
        Some(Member { pid, class, started: p.started, cgroups: p.cgroups.clone(), uid: p.uid })
    }

    /// `now` (what the rules give), or `before` with the process's current state where its
    /// class is [`sticky`].
    fn kept(&self, before: Option<&Member>, now: Option<Member>, pid: i32) -> Option<Member> {
        let p = self.procs.get(&pid)?;
        match before {
            Some(b) if self.classes.iter().any(|c| c.name == b.class && fits(p, c)) && sticky(b, now.as_ref().map(|m| m.class.as_str()), p.started, p.uid) => {
                Some(Member { class: b.class.clone(), pid, started: p.started, cgroups: p.cgroups.clone(), uid: p.uid })
            }
            _ => now,
        }
    }

    /// Recomputes `pid`'s membership and, when its class changed, its descendants'.
    fn reclassify(&mut self, pid: i32) {
        let mut todo = vec![pid];
        while let Some(p) = todo.pop() {
            let before = self.members.get(&p).cloned();
            let now = self.kept(before.as_ref(), self.member_of(p), p);
            if now == before {
                continue;
            }
            let class_moved = now.as_ref().map(|m| &m.class) != before.as_ref().map(|m| &m.class);
            if let Some(old) = &before {
                self.shrink(&old.class);
            }
            match now {
                Some(m) => {
                    *self.sizes.entry(m.class.clone()).or_default() += 1;
                    self.members.insert(p, m)
                }
                None => self.members.remove(&p),
            };
            self.changed.insert(p);
            if class_moved {
                todo.extend(self.children.get(&p).into_iter().flatten().copied());
            }
        }
    }

    /// The cached process `pid` if it is the one started at `started`; else reads it from /proc
    /// (a pid reused by a process the cache missed).
    fn known(&mut self, pid: i32, started: u64) -> bool {
        if self.procs.get(&pid).is_some_and(|p| p.started == Some(started)) {
            return true;
        }
        self.forget(pid);
        match read_proc(self.fx.as_ref(), &self.procfs, pid).filter(|p| p.started == Some(started)) {
            Some(p) => {
                self.children.entry(p.ppid).or_default().insert(pid);
                self.procs.insert(pid, p);
                true
            }
            None => false, // gone already
        }
    }

    /// Drops `pid` (it exited, or the pid is another process now).
    fn forget(&mut self, pid: i32) {
        if let Some(p) = self.procs.remove(&pid) {
            if let Some(siblings) = self.children.get_mut(&p.ppid) {
                siblings.remove(&pid);
            }
        }
        if let Some(old) = self.members.remove(&pid) {
            self.shrink(&old.class);
            self.changed.insert(pid);
        }
    }

    fn shrink(&mut self, class: &str) {
        if let Some(n) = self.sizes.get_mut(class) {
            *n = n.saturating_sub(1);
        }
    }

    /// Applies one event.
    pub fn apply(&mut self, change: &ProcChange) {
        let fx = Arc::clone(&self.fx);
        let fx = fx.as_ref();
        match change {
            ProcChange::Fork { pid, ppid, started, comm } => {
                self.forget(*pid);
                // A child starts with its parent's exe, uids and cgroups: nothing to read.
                // A parent whose cgroups could not be read (it moved and exited before the
                // move was read) gives none: the child's own are read.
                let p = match self.procs.get(ppid).filter(|parent| parent.cgroups.paths().next().is_some()) {
                    Some(parent) => ProcInfo { pid: *pid, ppid: *ppid, comm: comm.clone(), started: Some(*started), ..parent.clone() },
                    None => match read_proc(fx, &self.procfs, *pid) {
                        Some(p) => p,
                        None => return,
                    },
                };
                self.children.entry(p.ppid).or_default().insert(*pid);
                self.procs.insert(*pid, p);
                self.follow_pods(*pid);
                self.reclassify(*pid);
            }
            ProcChange::Exec { pid, started, comm } => {
                if !self.known(*pid, *started) {
                    return;
                }
                let exe = fx.read_link(&task_dir(&self.procfs, *pid).join("exe")).ok();
                // The cgroups too: a process moved by a parent that exited before its move was
                // read (a container runtime's short-lived init stages) inherited stale ones,
                // and a container's first exec is when its class matters.
                let cgroups = TaskCgroups::read(fx, &self.procfs, *pid);
                if let Some(p) = self.procs.get_mut(pid) {
                    p.comm.clone_from(comm);
                    p.exe = exe;
                    if let Some(c) = cgroups {
                        p.cgroups = c;
                    }
                }
                self.follow_pods(*pid);
                self.reclassify(*pid);
            }
            ProcChange::Rename { pid, started, comm } => {
                if !self.known(*pid, *started) {
                    return;
                }
                if let Some(p) = self.procs.get_mut(pid) {
                    p.comm.clone_from(comm);
                }
                self.reclassify(*pid);
            }
            ProcChange::Cgroup { pid, started } => {
                if !self.known(*pid, *started) {
                    return;
                }
                let cgroups = TaskCgroups::read(fx, &self.procfs, *pid).unwrap_or_default();
                if let Some(p) = self.procs.get_mut(pid) {
                    p.cgroups = cgroups;
                }
                self.follow_pods(*pid);
                self.reclassify(*pid);
            }
            ProcChange::Creds { pid, started } => {
                if !self.known(*pid, *started) {
                    return;
                }
                let uid = Status::read(fx, &self.procfs, *pid).and_then(|s| s.uids()).map(|u| u.real);
                if let Some(p) = self.procs.get_mut(pid) {
                    p.uid = uid;
                }
                self.reclassify(*pid);
            }
            ProcChange::Exit { pid, started } => {
                if self.procs.get(pid).is_none_or(|p| p.started != Some(*started)) {
                    return; // a process the cache never knew, or an older one
                }
                let orphans: Vec<i32> = self.children.remove(pid).into_iter().flatten().collect();
                self.forget(*pid);
                // The kernel gives orphans a new parent (init or a subreaper): read it.
                for c in orphans {
                    let ppid = Stat::read(fx, &self.procfs, c).map(|s| s.ppid);
                    match (ppid, self.procs.get_mut(&c)) {
                        (Some(ppid), Some(p)) => {
                            p.ppid = ppid;
                            self.children.entry(ppid).or_default().insert(c);
                            self.reclassify(c);
                        }
                        _ => self.forget(c),
                    }
                }
            }
        }
    }

    /// The reading for this period: the members (an O(1) copy), what changed since the last
    /// reading, the places with their cgroup ids read through `fx`.
    pub fn reading(&mut self, fx: &dyn Files) -> Membership {
        self.refresh_pods();
        if self.needs_pods {
            self.pods.prune(self.procs.values().flat_map(|p| p.cgroups.paths()));
        }
        Membership {
            members: self.members.clone(),
            changed: std::mem::take(&mut self.changed).into_iter().collect(),
            full: std::mem::take(&mut self.full),
            sizes: self.sizes.clone(),
            places: with_ids(&self.places, fx),
            procfs: self.procfs.clone(),
            generation: next_generation(),
            pods: self.pods.shared(),
            unnamed_pods: self.pods.shared_unnamed(),
        }
    }

    pub fn procfs(&self) -> &Path {
        &self.procfs
    }
}

#[path = "cache_tracking.rs"]
mod tracking;
pub use tracking::Track;

#[cfg(test)]
#[path = "cache_tests.rs"]
mod tests;
