//! The agent's half of the process monitor's filter: which processes the kernel follows and how
//! (joule-bpf's `Settlement`s, sent once a period), from what the process cache holds
//! (`ProcessCache::track`), and when a walk of /proc must find children the filter never sent
//! (a process that joins a class with children nobody followed, an exit whose children a
//! followed reaper takes in). docs/bpf.md has the reasoning per event.

use joule_bpf::{Delivered, Follow, ProcEvent, Settlement};
use joule_core::membership::{ProcessCache, Track};
use std::collections::{BTreeSet, HashMap, HashSet};

#[derive(Default)]
pub struct Following {
    /// pid → (start ticks, the kernel's sequence number of its entry as last seen).
    seq: HashMap<i32, (u64, u64)>,
    /// Processes whose children the cache may not hold: adopted with children, or kept for
    /// their parent's sake (their forks stay in the kernel).
    children_unknown: HashSet<i32>,
    /// Processes an event touched since the last settlement.
    touched: BTreeSet<i32>,
    /// Entries of processes gone, to drop (an entry added for a process that exited meanwhile).
    gone: Vec<Settlement>,
}

impl Following {
    /// Notes what the kernel said with `d`, before the cache applies it. Returns whether a
    /// walk must find the children of an exited process that a followed reaper took in.
    pub fn note(&mut self, d: &Delivered, cache: &ProcessCache) -> bool {
        let (pid, started) = (d.event.pid(), d.event.started());
        if let ProcEvent::Exit { .. } = d.event {
            let unknown = cache.track(pid).is_none() || self.children_unknown.contains(&pid);
            self.seq.remove(&pid);
            self.children_unknown.remove(&pid);
            self.gone.push(Settlement { pid, started, seq: 0, follow: None });
            return d.orphans_followed && unknown;
        }
        if d.seq > 0 {
            let e = self.seq.entry(pid).or_insert((started, 0));
            *e = if e.0 == started { (started, e.1.max(d.seq)) } else { (started, d.seq) };
        }
        if matches!(d.event, ProcEvent::Fork { .. }) || !d.children {
            self.children_unknown.remove(&pid);
        } else if d.adopted {
            self.children_unknown.insert(pid);
        }
        self.touched.insert(pid);
        false
    }

    /// After a walk: the entries the kernel had before it (`before`: pid, start ticks, seq) are
    /// what its settlements are made against, every child is known, every process is decided.
    pub fn walked(&mut self, before: Vec<(i32, u64, u64)>, cache: &ProcessCache) {
        self.seq = before.into_iter().map(|(pid, started, seq)| (pid, (started, seq))).collect();
        self.children_unknown.clear();
        self.touched = cache.pids().into_iter().collect();
    }

    /// What the kernel should do from now on with the processes touched since the last call and
    /// those this reading `changed`; prunes from the cache the ones nobody needs. Returns the
    /// settlements and whether a walk must find children of a process that just joined a class.
    pub fn settle(&mut self, cache: &mut ProcessCache, changed: &[i32]) -> (Vec<Settlement>, bool) {
        let discover = changed.iter().any(|p| cache.is_member(*p) && self.children_unknown.contains(p));
        let mut todo: Vec<i32> = std::mem::take(&mut self.touched).into_iter().collect();
        todo.extend(changed);
        todo.extend(changed.iter().flat_map(|p| cache.children_of(*p)));
        let mut out = std::mem::take(&mut self.gone);
        let mut seen = HashSet::new();
        while let Some(pid) = todo.pop() {
            if !seen.insert(pid) {
                continue;
            }
            let (Some(track), Some(started)) = (cache.track(pid), cache.started_of(pid)) else { continue };
            let seq = self.seq.get(&pid).filter(|(s, _)| *s == started).map(|(_, q)| *q).unwrap_or(0);
            let follow = match track {
                Track::Member => Follow::Member,
                Track::Pending => Follow::Pending,
                Track::NoFollow => {
                    self.children_unknown.insert(pid);
                    Follow::NoFollow
                }
                Track::Prune => {
                    todo.extend(cache.prune(pid));
                    self.seq.remove(&pid);
                    self.children_unknown.remove(&pid);
                    Follow::Pruned
                }
            };
            if seq == 0 && follow != Follow::Pruned {
                // Added by the settlement (no entry yet: found by a walk): its seq starts at 1.
                self.seq.insert(pid, (started, 1));
            }
            out.push(Settlement { pid, started, seq, follow: Some(follow) });
        }
        (out, discover)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use joule_core::config::Config;
    use joule_core::effects::FakeEffects;
    use joule_core::membership::ProcChange;
    use std::path::Path;

    fn proc(dir: &Path, pid: i32, ppid: i32, comm: &str, uid: u32) {
        let d = dir.join(pid.to_string());
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("stat"), format!("{pid} ({comm}) S {ppid} {pid} {pid} 0 -1 0 0 0 0 0 1 2 0 0 20 0 1 0 {}\n", 1000 + pid)).unwrap();
        std::fs::write(d.join("status"), format!("Name:\t{comm}\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\n")).unwrap();
        std::fs::write(d.join("cgroup"), "0::/\n").unwrap();
    }

    fn delivered(event: ProcEvent, seq: u64, adopted: bool, children: bool) -> Delivered {
        Delivered { event, comm: Default::default(), seq, adopted, children, orphans_followed: false }
    }

    #[test]
    fn a_walk_keeps_members_and_their_children_prunes_the_rest_and_a_join_with_unknown_children_asks_for_a_walk() {
        let t = tempfile::tempdir().unwrap();
        let d = t.path();
        proc(d, 1, 0, "init", 0);
        proc(d, 100, 1, "nginx", 0);
        proc(d, 102, 100, "helper", 33);
        proc(d, 200, 1, "bash", 1000);
        let classes = Config::parse("[[class]]\nname = \"web\"\nmatch = { comm = [\"nginx\"] }\n").unwrap().classes;
        let mut cache = ProcessCache::new(d, &classes, vec![]);
        cache.walk();
        let mut f = Following::default();
        f.walked(vec![(100, 1100, 7)], &cache);
        let r = cache.reading(&FakeEffects::default());
        let (mut out, discover) = f.settle(&mut cache, &r.changed);
        out.sort_by_key(|s| s.pid);
        let got: Vec<(i32, u64, Option<Follow>)> = out.iter().map(|s| (s.pid, s.seq, s.follow)).collect();
        assert_eq!(got, [(1, 0, Some(Follow::Pruned)), (100, 7, Some(Follow::Member)), (102, 0, Some(Follow::NoFollow)), (200, 0, Some(Follow::Pruned))]);
        assert!(!discover);
        assert_eq!(cache.pids().len(), 2, "init and bash let go: {:?}", cache.pids());

        // bash, let go, renames itself nginx: adopted with children the cache never saw.
        let rename = ProcEvent::Rename { pid: 200, started: 1200, comm: "nginx".into() };
        assert!(!f.note(&delivered(rename, 3, true, true), &cache));
        cache.apply(&ProcChange::Rename { pid: 200, started: 1200, comm: "nginx".into() });
        let r = cache.reading(&FakeEffects::default());
        assert_eq!(r.changed, [200]);
        let (out, discover) = f.settle(&mut cache, &r.changed);
        assert!(discover, "a member with children nobody followed: a walk must find them");
        assert_eq!(out.iter().map(|s| (s.pid, s.seq, s.follow)).collect::<Vec<_>>(), [(200, 3, Some(Follow::Member))]);

        // The helper (kept for nginx's sake) exits: its entry is forgotten.
        assert!(!f.note(&delivered(ProcEvent::Exit { pid: 102, started: 1102 }, 0, false, false), &cache));
        cache.apply(&ProcChange::Exit { pid: 102, started: 1102 });
        let r = cache.reading(&FakeEffects::default());
        let (out, _) = f.settle(&mut cache, &r.changed);
        assert_eq!(out.iter().map(|s| (s.pid, s.follow)).collect::<Vec<_>>(), [(102, None)]);
    }
}
