//! The membership source: one scan of /proc turns into the Snapshot's class membership
//! (`joule_core::membership`), the one reading of which process belongs to which `[[class]]`
//! and where each class lives. Labelled `kernel`: it is what /proc says. It scans at most once
//! per `every` (the agent's period when placement or the user-space scheduler follow a class's
//! threads, else once a second, as the class mover always did) and gives the last scan's
//! reading in between.

use crate::{Source, SourceError};
use joule_core::config::ClassConfig;
use joule_core::effects::RealEffects;
use joule_core::membership::{ClassPlace, Membership, PodTracker};
use joule_core::snapshot::ClassMembers;
use joule_core::{Origin, Snapshot};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

pub struct MembershipSource {
    procfs: PathBuf,
    classes: Vec<ClassConfig>,
    places: Vec<ClassPlace>,
    every: Duration,
    last: Option<(Instant, Arc<Membership>)>,
    /// Pods' names and labels for `match.pod` rules (asked when a walk finds a pod it lacks).
    pods: PodTracker,
}

impl MembershipSource {
    /// `places`: where each class lives (from the class cgroups' layout; empty when joule does
    /// not make class cgroups).
    pub fn new(procfs: impl Into<PathBuf>, classes: &[ClassConfig], places: Vec<ClassPlace>, every: Duration) -> Self {
        Self { procfs: procfs.into(), classes: classes.to_vec(), places, every, last: None, pods: PodTracker::default() }
    }

    /// Where pods' names, labels and annotations come from.
    pub fn with_pods(mut self, pods: PodTracker) -> Self {
        self.pods = pods;
        self
    }
}

impl Source for MembershipSource {
    fn name(&self) -> &'static str {
        "membership"
    }

    fn sample(&mut self, snap: &mut Snapshot) -> Result<(), SourceError> {
        let m = match &self.last {
            Some((at, m)) if at.elapsed() < self.every => m.clone(),
            _ => {
                let previous = self.last.as_ref().map(|(_, m)| m.as_ref());
                let m = Arc::new(Membership::scan_with(&self.procfs, &self.classes, &self.places, &RealEffects, previous, &mut self.pods));
                self.last = Some((Instant::now(), m.clone()));
                m
            }
        };
        snap.classes = m
            .counts(&self.classes)
            .into_iter()
            .map(|(class, processes)| ClassMembers { cgroup2_id: m.cgroup2_id(&class), class, processes, source: Origin::Kernel })
            .collect();
        if self.pods.has_source() {
            snap.pods = Some(self.pods.stats().clone());
        }
        snap.membership = m;
        Ok(())
    }
}
