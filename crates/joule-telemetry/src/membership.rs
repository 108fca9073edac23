//! The membership source: one scan of /proc per period turns into the Snapshot's class
//! membership (`joule_core::membership`), the one reading of which process belongs to which
//! `[[class]]` and where each class lives. Labelled `kernel`: it is what /proc says.

use crate::{Source, SourceError};
use joule_core::config::ClassConfig;
use joule_core::effects::RealEffects;
use joule_core::membership::{ClassPlace, Membership};
use joule_core::snapshot::ClassMembers;
use joule_core::{Origin, Snapshot};
use std::path::PathBuf;
use std::sync::Arc;

pub struct MembershipSource {
    procfs: PathBuf,
    classes: Vec<ClassConfig>,
    places: Vec<ClassPlace>,
}

impl MembershipSource {
    /// `places`: where each class lives (from the class cgroups' layout; empty when joule does
    /// not make class cgroups).
    pub fn new(procfs: impl Into<PathBuf>, classes: &[ClassConfig], places: Vec<ClassPlace>) -> Self {
        Self { procfs: procfs.into(), classes: classes.to_vec(), places }
    }
}

impl Source for MembershipSource {
    fn name(&self) -> &'static str {
        "membership"
    }

    fn sample(&mut self, snap: &mut Snapshot) -> Result<(), SourceError> {
        let m = Membership::scan(&self.procfs, &self.classes, &self.places, &RealEffects);
        snap.classes = m
            .counts(&self.classes)
            .into_iter()
            .map(|(class, processes)| ClassMembers { cgroup2_id: m.cgroup2_id(&class), class, processes, source: Origin::Kernel })
            .collect();
        snap.membership = Arc::new(m);
        Ok(())
    }
}
