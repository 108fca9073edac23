//! The pod index the membership matches `match.pod` rules against (issue 37), kept from the
//! node's container runtime ([`PodSource`]: joule-kube's read-only CRI client in the agent).
//! It is not polled: a process that appears in a pod or container cgroup the index does not
//! know (a fork, an exec, a cgroup move the process monitor reports, or a walk of /proc) asks
//! for one refresh, at most one per [`MIN_REFRESH_GAP`], so the cost follows pod churn. A
//! container's first exec comes after the runtime answered its CreateContainer, so the refresh
//! it causes finds it; a pod sandbox's pause process may start before its sandbox is listed,
//! and joins its class at its pod's next refresh (the first container's start).

use crate::config::PodIndex;
use crate::kubepods::{self, KubeCgroup};
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The least time between two refreshes: a flood of new pods costs at most one CRI round trip
/// (ListPodSandbox + ListContainers) per gap.
pub const MIN_REFRESH_GAP: Duration = Duration::from_millis(200);

/// Where pods' names, labels and annotations come from.
pub trait PodSource: Send {
    /// Every pod the runtime knows now, by UID.
    fn pods(&mut self) -> Result<PodIndex, String>;
    /// For the status: the socket or runtime asked.
    fn describe(&self) -> String;
}

/// What the refreshes cost, for the snapshot and `/plan.json`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PodStats {
    /// The runtime asked (`cri:<socket>`), or "none".
    pub source: String,
    pub pods: usize,
    pub refreshes_total: u64,
    pub refresh_seconds_total: f64,
    pub errors_total: u64,
    pub last_error: Option<String>,
}

/// The pod index and when to refresh it.
pub struct PodTracker {
    source: Option<Box<dyn PodSource>>,
    index: Arc<PodIndex>,
    refreshed_at: Option<Instant>,
    /// A task in a pod the index does not know waits for the next refresh.
    wanted: bool,
    stats: PodStats,
}

impl Default for PodTracker {
    fn default() -> Self {
        PodTracker::new(None)
    }
}

impl PodTracker {
    /// `None`: no runtime (only `qos` rules can match).
    pub fn new(source: Option<Box<dyn PodSource>>) -> PodTracker {
        let stats = PodStats { source: source.as_ref().map_or("none".into(), |s| s.describe()), ..Default::default() };
        PodTracker { source, index: Arc::default(), refreshed_at: None, wanted: false, stats }
    }

    pub fn index(&self) -> &PodIndex {
        &self.index
    }

    /// The index, shared with a membership reading.
    pub fn shared(&self) -> Arc<PodIndex> {
        self.index.clone()
    }

    pub fn stats(&self) -> &PodStats {
        &self.stats
    }

    /// Whether the index has what a task in these cgroups needs: true for a task in no pod, or
    /// in a pod (and container) the index lists, or when there is no runtime to ask.
    pub fn knows<'a>(&self, cgroups: impl IntoIterator<Item = &'a str>) -> bool {
        if self.source.is_none() {
            return true;
        }
        cgroups.into_iter().all(|p| match kubepods::parse(p) {
            Some(KubeCgroup::Pod(pc)) => self
                .index
                .get(&pc.pod_uid)
                .is_some_and(|m| pc.container.is_none_or(|c| c.conmon || m.containers.contains_key(&c.id) || m.sandbox_ids.contains(&c.id))),
            _ => true,
        })
    }

    /// Notes that a task in these cgroups was seen; true when the index lacks its pod.
    pub fn saw<'a>(&mut self, cgroups: impl IntoIterator<Item = &'a str>) -> bool {
        let unknown = !self.knows(cgroups);
        self.wanted |= unknown;
        unknown
    }

    /// Asks the runtime again when a task waits for it and the last refresh is at least
    /// [`MIN_REFRESH_GAP`] old. True when the index changed.
    pub fn refresh_if_wanted(&mut self) -> bool {
        if !self.wanted || self.refreshed_at.is_some_and(|t| t.elapsed() < MIN_REFRESH_GAP) {
            return false;
        }
        self.refresh()
    }

    /// Asks the runtime now. True when the index changed. A failed refresh keeps the old index
    /// (a runtime restart must not empty every pod class) and is counted.
    pub fn refresh(&mut self) -> bool {
        let Some(src) = &mut self.source else { return false };
        let t0 = Instant::now();
        let r = src.pods();
        self.refreshed_at = Some(Instant::now());
        self.wanted = false;
        self.stats.refreshes_total += 1;
        self.stats.refresh_seconds_total += t0.elapsed().as_secs_f64();
        match r {
            Ok(index) => {
                self.stats.last_error = None;
                self.stats.pods = index.len();
                let changed = index != *self.index;
                self.index = Arc::new(index);
                changed
            }
            Err(e) => {
                if self.stats.last_error.as_deref() != Some(e.as_str()) {
                    tracing::warn!("the container runtime ({}) did not list its pods: {e}; pod classes keep the last list", self.stats.source);
                }
                self.stats.errors_total += 1;
                self.stats.last_error = Some(e);
                false
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::PodMeta;

    const UID: &str = "0b1e5c2a-4f3d-4e8a-9c1b-2d3e4f5a6b7c";
    const ID: &str = "4a5f0e3b2c1d0e9f8a7b6c5d4e3f2a1b0c9d8e7f6a5b4c3d2e1f0a9b8c7d6e5f";

    struct Listed(std::sync::Arc<std::sync::Mutex<(PodIndex, u32)>>);
    impl PodSource for Listed {
        fn pods(&mut self) -> Result<PodIndex, String> {
            let mut g = self.0.lock().unwrap();
            g.1 += 1;
            Ok(g.0.clone())
        }
        fn describe(&self) -> String {
            "test".into()
        }
    }

    #[test]
    fn an_unknown_container_asks_for_one_refresh_within_the_gap() {
        let shared = std::sync::Arc::new(std::sync::Mutex::new((PodIndex::new(), 0)));
        let mut t = PodTracker::new(Some(Box::new(Listed(shared.clone()))));
        let path = format!("/kubepods/besteffort/pod{UID}/{ID}");
        assert!(t.knows(["/system.slice/x.service"]), "not in a pod: nothing to ask");
        assert!(t.saw([path.as_str()]));
        assert!(!t.refresh_if_wanted(), "the runtime lists nothing yet: no change");
        assert_eq!(shared.lock().unwrap().1, 1);
        let meta = PodMeta { namespace: "batch".into(), containers: [(ID.to_string(), "job".to_string())].into(), ..Default::default() };
        shared.lock().unwrap().0.insert(UID.into(), meta);
        assert!(t.saw([path.as_str()]));
        assert!(!t.refresh_if_wanted(), "within the gap: no second round trip");
        assert_eq!(shared.lock().unwrap().1, 1);
        std::thread::sleep(MIN_REFRESH_GAP);
        assert!(t.refresh_if_wanted(), "after the gap the new pod is listed");
        assert!(t.knows([path.as_str()]) && !t.saw([path.as_str()]));
        assert!(!t.refresh_if_wanted(), "nothing wanted: no refresh");
        assert_eq!((t.stats().refreshes_total, t.stats().pods), (2, 1));
        assert!(PodTracker::default().knows([path.as_str()]), "no runtime: nothing to wait for");
    }
}
