//! Pod classes beside the other classes' CPU backend (`inner`): each call reaches the one
//! holding the class, so pods act in their own cgroups while joule's classes keep theirs.

use super::{PodCaps, PodsStatus};
use crate::cgroup_cpu::CpuBackend;
use joule_core::effects::Effects;
use joule_core::journal::{Journal, RestoreReport};
use joule_core::membership::{ClassPlace, Membership};
use joule_qos::{ApplyReport, ClassCap, QosError, ReconcileReport};
use std::collections::BTreeMap;

/// Pod classes beside the other classes' backend: each call reaches the one holding the class.
pub struct WithPods {
    pub pods: PodCaps,
    pub inner: Option<Box<dyn CpuBackend>>,
}

impl CpuBackend for WithPods {
    fn kind(&self) -> String {
        let pods = format!("pods in place for {} pod class(es)", self.pods.len());
        self.inner.as_ref().map_or(pods.clone(), |i| format!("{} + {pods}", i.kind()))
    }
    fn classes(&self) -> usize {
        self.pods.len() + self.inner.as_ref().map_or(0, |i| i.classes())
    }
    fn places(&self) -> Vec<ClassPlace> {
        self.inner.as_ref().map(|i| i.places()).unwrap_or_default()
    }
    fn apply(&mut self, journal: &Journal, fx: &dyn Effects) -> Result<ApplyReport, QosError> {
        let mut r = match &mut self.inner {
            Some(i) => i.apply(journal, fx)?,
            None => ApplyReport::default(),
        };
        r.notes.push(format!("{} pod class(es) act in their pods' own cgroups: no process is moved", self.pods.len()));
        Ok(r)
    }
    fn hold(&mut self, journal: &Journal, fx: &dyn Effects, members: &Membership) -> Result<ReconcileReport, QosError> {
        let p = self.pods.hold(journal, fx, members)?;
        let mut r = match &mut self.inner {
            Some(i) => i.hold(journal, fx, members)?,
            None => ReconcileReport::default(),
        };
        r.notes.extend(p.notes);
        Ok(r)
    }
    fn set_cap(&mut self, journal: &Journal, fx: &dyn Effects, class: &str, cpu_pct: f64) -> Result<bool, QosError> {
        match &mut self.inner {
            Some(i) if !self.pods.has(class) => i.set_cap(journal, fx, class, cpu_pct),
            _ => self.pods.set_cap(journal, fx, class, cpu_pct),
        }
    }
    fn caps(&self) -> BTreeMap<String, ClassCap> {
        let mut caps = self.inner.as_ref().map(|i| i.caps()).unwrap_or_default();
        caps.extend(self.pods.caps().clone());
        caps
    }
    fn release(&mut self, journal: &Journal, fx: &dyn Effects) -> Result<RestoreReport, QosError> {
        let mut r = self.pods.release(journal, fx)?;
        if let Some(i) = &mut self.inner {
            let more = i.release(journal, fx)?;
            r.undone += more.undone;
            r.already_gone += more.already_gone;
            r.failed.extend(more.failed);
        }
        Ok(r)
    }
    fn drift(&mut self, fx: &dyn Effects) -> Vec<joule_qos::Drift> {
        self.inner.as_mut().map(|i| i.drift(fx)).unwrap_or_default()
    }
    fn recheck(&mut self, journal: &Journal, fx: &dyn Effects, members: &Membership) -> Result<ReconcileReport, QosError> {
        match &mut self.inner {
            Some(i) => i.recheck(journal, fx, members),
            None => Ok(ReconcileReport::default()),
        }
    }
    fn pods(&self) -> Option<PodsStatus> {
        Some(self.pods.status())
    }
}
