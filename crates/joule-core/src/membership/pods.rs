//! The pod index the membership matches `match.pod` rules against (issue 37), kept from the
//! node's container runtime ([`PodSource`]: joule-kube's read-only CRI client in the agent).
//! It is not polled and it never lists the whole node: a process that appears in a pod or
//! container cgroup the index does not know (a fork, an exec, a cgroup move the process
//! monitor reports, or a walk of /proc) has the runtime asked about that pod alone, by the
//! container and sandbox ids its cgroups carry, one round of questions per [`MIN_REFRESH_GAP`]
//! at most. The cost follows pod churn, and no tenant's annotations can make the answer about
//! another tenant's pod too large to read, as they can a listing of every pod on the node.
//!
//! Until the runtime names a pod it is unnamed ([`UnnamedPod`]): known only by what its
//! cgroup path proves, its QoS class and UID. A rule on its name, namespace or labels cannot
//! match it, so the capping pod classes hold it at their cap until it is named (joule-act's
//! `pod_cpu`): a runtime that does not answer, or does not list a pod yet, fails closed. A pod
//! the runtime did not name is asked about again after a doubling wait; a pod with no process
//! left is forgotten ([`PodTracker::prune`]).

use crate::config::{PodIndex, PodMeta};
use crate::kubepods::{self, KubeCgroup, PodCgroup, Qos};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The least time between two rounds of questions: a flood of new pods costs at most one round
/// per gap.
pub const MIN_REFRESH_GAP: Duration = Duration::from_millis(200);
/// The longest wait before a pod the runtime did not name is asked about again (the wait
/// doubles from [`MIN_REFRESH_GAP`]): a cgroup the runtime never names costs a question a minute.
pub const MAX_RETRY_GAP: Duration = Duration::from_secs(60);
/// How often the pods whose processes are all gone are forgotten.
pub const PRUNE_GAP: Duration = Duration::from_secs(30);

/// One pod to ask the runtime about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodQuery {
    pub uid: String,
    /// The container (or sandbox) ids its processes' cgroups carry: the runtime finds the pod
    /// from them, and its answer is about that pod only when its UID is this one.
    pub ids: BTreeSet<String>,
}

/// Where pods' names, labels and annotations come from.
pub trait PodSource: Send {
    /// What the runtime says about these pods, by UID; a pod it does not know is left out.
    fn lookup(&mut self, pods: &[PodQuery]) -> Result<PodIndex, String>;
    /// For the status: the socket or runtime asked.
    fn describe(&self) -> String;
}

/// A pod seen in the kubelet's cgroups that the runtime has not named (yet).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct UnnamedPod {
    pub qos: Qos,
    /// The pod's own cgroup, as /proc/PID/cgroup spells it.
    pub pod_path: String,
    /// When it was first seen unnamed (unix ms).
    pub since_unix_ms: u64,
}

/// Pod UID → what its cgroup proves, for the pods the runtime has not named.
pub type UnnamedPods = BTreeMap<String, UnnamedPod>;

/// What the questions cost and what is missing, for the snapshot, `/plan.json`, the metrics
/// and `joule status`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PodStats {
    /// The runtime asked (`cri:<socket>`), or "none".
    pub source: String,
    /// Pods the runtime named.
    pub pods: usize,
    /// Rounds of questions (each about the pods waiting then).
    pub refreshes_total: u64,
    pub refresh_seconds_total: f64,
    pub errors_total: u64,
    pub last_error: Option<String>,
    /// Pods seen in the kubelet's cgroups that the runtime has not named: the capping pod
    /// classes hold them at their cap.
    #[serde(default)]
    pub unnamed: usize,
    /// Since when the oldest of them has waited to be named (unix ms); None: every pod seen
    /// is named.
    #[serde(default)]
    pub stale_since_unix_ms: Option<u64>,
}

/// A pod waiting for the runtime's word.
#[derive(Debug, Clone, Default)]
struct Asking {
    ids: BTreeSet<String>,
    /// Questions about it the runtime did not answer with its name.
    tries: u32,
    not_before: Option<Instant>,
}

/// The pod index and when to ask the runtime.
pub struct PodTracker {
    source: Option<Box<dyn PodSource>>,
    index: Arc<PodIndex>,
    unnamed: Arc<UnnamedPods>,
    asking: BTreeMap<String, Asking>,
    refreshed_at: Option<Instant>,
    pruned_at: Option<Instant>,
    stats: PodStats,
}

impl Default for PodTracker {
    fn default() -> Self {
        PodTracker::new(None)
    }
}

/// The wait before asking again after `tries` questions that did not name a pod.
fn backoff(tries: u32) -> Duration {
    MIN_REFRESH_GAP.saturating_mul(1u32 << tries.min(10)).min(MAX_RETRY_GAP)
}

fn covers(m: &PodMeta, id: &str) -> bool {
    m.sandbox_ids.contains(id) || m.containers.contains_key(id)
}

impl PodTracker {
    /// `None`: no runtime (only `qos` rules can match).
    pub fn new(source: Option<Box<dyn PodSource>>) -> PodTracker {
        let stats = PodStats { source: source.as_ref().map_or("none".into(), |s| s.describe()), ..Default::default() };
        PodTracker { source, index: Arc::default(), unnamed: Arc::default(), asking: BTreeMap::new(), refreshed_at: None, pruned_at: None, stats }
    }

    /// Whether a runtime is asked at all.
    pub fn has_source(&self) -> bool {
        self.source.is_some()
    }

    pub fn index(&self) -> &PodIndex {
        &self.index
    }

    /// The index, shared with a membership reading.
    pub fn shared(&self) -> Arc<PodIndex> {
        self.index.clone()
    }

    /// The pods waiting to be named, shared with a membership reading.
    pub fn shared_unnamed(&self) -> Arc<UnnamedPods> {
        self.unnamed.clone()
    }

    pub fn stats(&self) -> &PodStats {
        &self.stats
    }

    fn knows_pod(&self, pc: &PodCgroup) -> bool {
        self.index.get(&pc.pod_uid).is_some_and(|m| pc.container.as_ref().is_none_or(|c| c.conmon || covers(m, &c.id)))
    }

    /// Whether the index has what a task in these cgroups needs: true for a task in no pod, or
    /// in a pod (and container) the index lists, or when there is no runtime to ask.
    pub fn knows<'a>(&self, cgroups: impl IntoIterator<Item = &'a str>) -> bool {
        self.source.is_none()
            || cgroups.into_iter().all(|p| match kubepods::parse(p) {
                Some(KubeCgroup::Pod(pc)) => self.knows_pod(&pc),
                _ => true,
            })
    }

    /// Notes that a task in these cgroups was seen; true when the index lacks its pod or
    /// container, which is then asked about (at once when the id is new).
    pub fn saw<'a>(&mut self, cgroups: impl IntoIterator<Item = &'a str>) -> bool {
        if self.source.is_none() {
            return false;
        }
        let mut unknown = false;
        for p in cgroups {
            let Some(KubeCgroup::Pod(pc)) = kubepods::parse(p) else { continue };
            if self.knows_pod(&pc) {
                continue;
            }
            unknown = true;
            let a = self.asking.entry(pc.pod_uid.clone()).or_default();
            // New evidence is worth a question now, whatever the runtime said before.
            if let Some(c) = &pc.container {
                if a.ids.insert(c.id.clone()) {
                    a.not_before = None;
                }
            }
            if !self.index.contains_key(&pc.pod_uid) && !self.unnamed.contains_key(&pc.pod_uid) {
                let u = UnnamedPod { qos: pc.qos, pod_path: pc.pod_path.clone(), since_unix_ms: crate::clock::now_ms() };
                Arc::make_mut(&mut self.unnamed).insert(pc.pod_uid, u);
                self.count();
            }
        }
        unknown
    }

    /// Asks the runtime about the pods waiting whose wait is over, when the last round is at
    /// least [`MIN_REFRESH_GAP`] old. True when the index changed.
    pub fn refresh_if_wanted(&mut self) -> bool {
        let now = Instant::now();
        if self.source.is_none() || self.refreshed_at.is_some_and(|t| now.duration_since(t) < MIN_REFRESH_GAP) {
            return false;
        }
        let due: Vec<PodQuery> = self
            .asking
            .iter()
            .filter(|(_, a)| a.not_before.is_none_or(|t| t <= now))
            .map(|(uid, a)| PodQuery { uid: uid.clone(), ids: a.ids.clone() })
            .collect();
        if due.is_empty() {
            return false;
        }
        self.ask(&due, now)
    }

    /// One round of questions. A failed round keeps the index (a pod's UID proves which pod it
    /// is, and a runtime restart must not empty every pod class); the pods asked about stay
    /// unnamed, and are asked about again after a wait.
    fn ask(&mut self, due: &[PodQuery], now: Instant) -> bool {
        let Some(src) = &mut self.source else { return false };
        let r = src.lookup(due);
        self.refreshed_at = Some(Instant::now());
        self.stats.refreshes_total += 1;
        self.stats.refresh_seconds_total += Instant::now().duration_since(now).as_secs_f64();
        let mut changed = false;
        match r {
            Ok(mut found) => {
                self.stats.last_error = None;
                for q in due {
                    if let Some(new) = found.remove(&q.uid) {
                        changed |= self.merge(&q.uid, new);
                    }
                    let named = self.index.get(&q.uid).is_some_and(|m| q.ids.iter().all(|id| covers(m, id)));
                    if named {
                        self.asking.remove(&q.uid);
                    } else if let Some(a) = self.asking.get_mut(&q.uid) {
                        a.tries += 1;
                        a.not_before = Some(now + backoff(a.tries));
                    }
                }
            }
            Err(e) => {
                if self.stats.last_error.as_deref() != Some(e.as_str()) {
                    tracing::warn!(
                        "the container runtime ({}) did not answer about {} pod(s): {e}; until it names them, the capping pod classes hold them at their cap",
                        self.stats.source,
                        due.len()
                    );
                }
                self.stats.errors_total += 1;
                self.stats.last_error = Some(e);
                for q in due {
                    if let Some(a) = self.asking.get_mut(&q.uid) {
                        a.tries += 1;
                        a.not_before = Some(now + backoff(a.tries));
                    }
                }
            }
        }
        self.count();
        changed
    }

    /// Takes the runtime's answer about `uid` into the index, keeping the sandboxes and
    /// containers an earlier answer named (a re-created sandbox's old processes may linger);
    /// true when the index changed.
    fn merge(&mut self, uid: &str, mut new: PodMeta) -> bool {
        if let Some(old) = self.index.get(uid) {
            new.sandbox_ids.extend(old.sandbox_ids.iter().cloned());
            for (id, name) in &old.containers {
                new.containers.entry(id.clone()).or_insert_with(|| name.clone());
            }
        }
        if self.unnamed.contains_key(uid) {
            Arc::make_mut(&mut self.unnamed).remove(uid);
        }
        if self.index.get(uid) == Some(&new) {
            return false;
        }
        Arc::make_mut(&mut self.index).insert(uid.to_string(), new);
        true
    }

    /// Forgets the pods no task is in any more, at most once per [`PRUNE_GAP`]: `cgroups` are
    /// every known task's (only read when it is time).
    pub fn prune<'a>(&mut self, cgroups: impl IntoIterator<Item = &'a str>) {
        if self.source.is_none() || self.pruned_at.is_some_and(|t| t.elapsed() < PRUNE_GAP) {
            return;
        }
        self.pruned_at = Some(Instant::now());
        let live: HashSet<String> = cgroups
            .into_iter()
            .filter(|p| p.contains("kubepods"))
            .filter_map(|p| match kubepods::parse(p) {
                Some(KubeCgroup::Pod(pc)) => Some(pc.pod_uid),
                _ => None,
            })
            .collect();
        if self.index.keys().any(|u| !live.contains(u)) {
            Arc::make_mut(&mut self.index).retain(|u, _| live.contains(u));
        }
        if self.unnamed.keys().any(|u| !live.contains(u)) {
            Arc::make_mut(&mut self.unnamed).retain(|u, _| live.contains(u));
        }
        self.asking.retain(|u, _| live.contains(u));
        self.count();
    }

    fn count(&mut self) {
        self.stats.pods = self.index.len();
        self.stats.unnamed = self.unnamed.len();
        self.stats.stale_since_unix_ms = self.unnamed.values().map(|u| u.since_unix_ms).min();
    }
}

#[cfg(test)]
#[path = "pods_tests.rs"]
mod tests;
