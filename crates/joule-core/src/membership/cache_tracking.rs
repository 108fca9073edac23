//! What the process cache asks of the kernel's filter (joule-bpf's procmon, docs/bpf.md): for
//! each process it holds, how its events must be followed from now on. The cache holds only
//! the processes the kernel follows — members, the other children of members, and pods' processes
//! while pod classes wait for the runtime's word — and lets the rest go ([`ProcessCache::prune`]):
//! their events pass the rules in the kernel, which sends those that could make them members.

use super::{in_pod, ProcessCache};

/// How the kernel should follow a process the cache holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Track {
    /// In a class. Its renames change nothing (membership is sticky); everything else counts.
    Member,
    /// Not decided for good: a pod's process while pod classes need the runtime (a new answer
    /// may match it), so all it does is sent and its children are followed.
    Pending,
    /// In no class, but a child of a member: a uid change or a new parent (its parent's exit)
    /// may make it follow one. Its own children cannot follow it, so its forks stay in the kernel.
    NoFollow,
    /// In no class and nobody's concern: no longer followed (and let go from the cache).
    Prune,
}

impl ProcessCache {
    /// How the kernel should follow `pid`; None when the cache does not hold it.
    pub fn track(&self, pid: i32) -> Option<Track> {
        let p = self.procs.get(&pid)?;
        Some(if self.members.contains_key(&pid) {
            Track::Member
        } else if self.needs_pods && in_pod(p) {
            Track::Pending
        } else if self.members.contains_key(&p.ppid) {
            Track::NoFollow
        } else {
            Track::Prune
        })
    }

    /// Lets go of `pid`, a process in no class the kernel no longer follows (its exit will not
    /// be sent). Returns its children the cache holds: their parent is now unknown here, so the
    /// caller decides them again. A member is never let go.
    pub fn prune(&mut self, pid: i32) -> Vec<i32> {
        if self.members.contains_key(&pid) {
            return Vec::new();
        }
        self.forget(pid);
        self.children.remove(&pid).map(|c| c.into_iter().collect()).unwrap_or_default()
    }

    /// Every process the cache holds.
    pub fn pids(&self) -> Vec<i32> {
        self.procs.keys().copied().collect()
    }

    /// The start time (clock ticks after boot) of the process `pid` as the cache knows it.
    pub fn started_of(&self, pid: i32) -> Option<u64> {
        self.procs.get(&pid)?.started
    }

    /// The name the cache has for `pid`.
    pub fn comm_of(&self, pid: i32) -> Option<&crate::Comm> {
        self.procs.get(&pid).map(|p| &p.comm)
    }

    /// The children of `pid` the cache holds.
    pub fn children_of(&self, pid: i32) -> Vec<i32> {
        self.children.get(&pid).map(|c| c.iter().copied().collect()).unwrap_or_default()
    }

    /// Whether `pid` is in a class.
    pub fn is_member(&self, pid: i32) -> bool {
        self.members.contains_key(&pid)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use crate::effects::FakeEffects;
    use std::path::Path;

    fn proc(dir: &Path, pid: i32, ppid: i32, comm: &str, uid: u32, cg: &str) {
        let d = dir.join(pid.to_string());
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("stat"), format!("{pid} ({comm}) S {ppid} {pid} {pid} 0 -1 0 0 0 0 0 1 2 0 0 20 0 1 0 {}\n", 1000 + pid)).unwrap();
        std::fs::write(d.join("status"), format!("Name:\t{comm}\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\n")).unwrap();
        std::fs::write(d.join("cgroup"), format!("0::{cg}\n")).unwrap();
    }

    #[test]
    fn members_their_children_and_waiting_pods_are_followed_the_rest_let_go() {
        let t = tempfile::tempdir().unwrap();
        let d = t.path();
        let pod = "/kubepods/besteffort/pod0b1e5c2a-4f3d-4e8a-9c1b-2d3e4f5a6b7c";
        proc(d, 1, 0, "init", 0, "/");
        proc(d, 100, 1, "nginx", 0, "/");
        proc(d, 101, 100, "nginx", 0, "/"); // follows its parent
        proc(d, 102, 100, "helper", 33, "/"); // another uid: no member, its parent's concern
        proc(d, 103, 102, "sh", 33, "/");
        proc(d, 200, 1, "bash", 1000, "/");
        proc(d, 300, 1, "app", 0, pod);
        let classes = Config::parse(
            "[[class]]\nname = \"web\"\nmatch = { comm = [\"nginx\"] }\n[[class]]\nname = \"shop\"\nmatch = { pod = { namespace = [\"shop\"] } }\n",
        )
        .unwrap()
        .classes;
        let mut c = ProcessCache::new(d, &classes, vec![]);
        c.walk();
        let _ = c.reading(&FakeEffects::default());
        let got: Vec<(i32, Option<Track>)> = [1, 100, 101, 102, 103, 200, 300, 999].iter().map(|p| (*p, c.track(*p))).collect();
        use Track::*;
        assert_eq!(
            got,
            [
                (1, Some(Prune)),
                (100, Some(Member)),
                (101, Some(Member)),
                (102, Some(NoFollow)),
                (103, Some(Prune)),
                (200, Some(Prune)),
                (300, Some(Pending)),
                (999, None)
            ]
        );
        assert_eq!(c.prune(100), Vec::<i32>::new(), "a member is never let go");
        assert!(c.is_member(100));
        assert_eq!(c.prune(102), [103], "its child is decided again");
        assert_eq!((c.track(102), c.children_of(100)), (None, vec![101]));
        assert_eq!((c.started_of(101), c.comm_of(101).and_then(|c| c.as_str())), (Some(1101), Some("nginx")));
    }
}
