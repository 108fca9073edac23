//! Pod classes (`match.pod`, issue 37) acted on in place: a pod's processes stay in the
//! kubelet's cgroups, and a best-effort pod class's thermal cap is written into each of its
//! pods' own cgroup (v2 `cpu.max`, v1 `cpu.cfs_quota_us`), never anywhere else the kubelet
//! owns. The rules, enforced here whatever the config says (check-config refuses the rest):
//! - never a Guaranteed pod (its quota is its limit; the CPU manager may own its cpuset): such
//!   a pod matched by a class is skipped and counted;
//! - never a QoS level (`kubepods`, `burstable`, `besteffort`) or `kubepods` itself;
//! - never a cpuset, a weight or anything but the CFS quota; only ever lower than what the
//!   kubelet wrote (the cap is min(the pod's own quota, the class's share));
//! - each knob's content is journalled (owner `pods`) before the first write, and written back
//!   when the cap ends, the pod leaves the class, or the agent stops — unless the kubelet
//!   changed it since (a resize), whose value then stays.
//!
//! A class's cap is a share of the whole machine split evenly across its pods (joule cannot put
//! a parent cgroup above pods the kubelet placed). On v1 a child's quota may not exceed its
//! parent's, so a container quota above the pod's new cap is lowered first (and restored
//! after the pod's).

use crate::cgroup_cpu::CpuBackend;
use joule_core::cgroupfs::Controller;
use joule_core::effects::Effects;
use joule_core::fsread::read_trimmed;
use joule_core::journal::{Journal, RestoreReport, Undo};
use joule_core::kubepods::{self, KubeCgroup, Qos};
use joule_core::membership::{ClassPlace, Membership};
use joule_qos::{ApplyReport, ClassCap, QosError, ReconcileReport};
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The journal's owner of pod knobs.
pub const OWNER: &str = "pods";
const DEFAULT_CFS_PERIOD_US: u64 = 100_000;
const MIN_QUOTA_US: u64 = 1_000;
/// Pods named per class in the metrics; the rest are one `pod="other"` row.
pub const TOP_PODS: usize = 20;

/// Which CFS knob a pod's cap goes to.
#[derive(Debug, Clone, PartialEq)]
pub enum CpuHier {
    /// The v1 `cpu` hierarchy mounted here.
    V1(PathBuf),
    /// The v2 hierarchy mounted here.
    V2(PathBuf),
}

/// One pod a class holds.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PodTarget {
    pub uid: String,
    pub namespace: String,
    pub name: String,
    pub qos: &'static str,
    /// Its cgroup directory in the cpu hierarchy.
    pub dir: PathBuf,
    /// joule holds its quota below the kubelet's now.
    pub capped: bool,
}

/// What joule wrote into one knob and what was there before.
#[derive(Debug, Clone)]
struct Written {
    old: String,
    ours: String,
}

pub struct PodCaps {
    classes: BTreeSet<String>,
    hier: CpuHier,
    ncpus: usize,
    /// class → pod cgroup path → the pod.
    pods: BTreeMap<String, BTreeMap<String, PodTarget>>,
    /// Guaranteed pods a class matched and joule left alone (pod path → class).
    skipped: BTreeMap<String, String>,
    /// class → % of the machine the plan holds it to (absent: uncapped).
    pct: BTreeMap<String, f64>,
    written: BTreeMap<PathBuf, Written>,
    caps: BTreeMap<String, ClassCap>,
}

/// Per-pod state for the status and the metrics.
#[derive(Debug, Clone, Default, Serialize)]
pub struct PodsStatus {
    /// class → the pods it holds.
    pub pods: BTreeMap<String, Vec<PodTarget>>,
    /// Guaranteed pods matched by a class and left alone.
    pub skipped_guaranteed: usize,
    /// Pod knob → the quota written there now (µs per period).
    pub capped: BTreeMap<String, String>,
}

impl PodCaps {
    /// `classes`: the pod classes (check-config allows only best-effort caps on them).
    pub fn new(classes: impl IntoIterator<Item = String>, hier: CpuHier, ncpus: usize) -> PodCaps {
        PodCaps {
            classes: classes.into_iter().collect(),
            hier,
            ncpus: ncpus.max(1),
            pods: BTreeMap::new(),
            skipped: BTreeMap::new(),
            pct: BTreeMap::new(),
            written: BTreeMap::new(),
            caps: BTreeMap::new(),
        }
    }

    /// The cpu hierarchy under `cgroup_root`: a v1 `cpu` one when mounted, else v2 with `cpu`.
    pub fn detect(cgroup_root: &Path, fx: &dyn Effects) -> Option<CpuHier> {
        let l = joule_core::cgroupfs::Layout::detect(cgroup_root, fx);
        if let Some(d) = l.v1(Controller::Cpu) {
            return Some(CpuHier::V1(d.to_path_buf()));
        }
        l.unified.filter(|u| u.offers("cpu")).map(|u| CpuHier::V2(u.dir))
    }

    pub fn has(&self, class: &str) -> bool {
        self.classes.contains(class)
    }

    pub fn len(&self) -> usize {
        self.classes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.classes.is_empty()
    }

    pub fn status(&self) -> PodsStatus {
        PodsStatus {
            pods: self
                .pods
                .iter()
                .map(|(c, p)| (c.clone(), p.values().map(|t| PodTarget { capped: self.written.contains_key(&self.knob(&t.dir)), ..t.clone() }).collect()))
                .collect(),
            skipped_guaranteed: self.skipped.len(),
            capped: self.written.iter().map(|(k, w)| (k.display().to_string(), w.ours.clone())).collect(),
        }
    }

    fn knob(&self, dir: &Path) -> PathBuf {
        dir.join(match self.hier {
            CpuHier::V1(_) => "cpu.cfs_quota_us",
            CpuHier::V2(_) => "cpu.max",
        })
    }

    /// The pods each class's members live in, from this reading.
    fn pods_of(&mut self, members: &Membership) -> BTreeMap<String, BTreeMap<String, PodTarget>> {
        let (ctl, mount) = match &self.hier {
            CpuHier::V1(m) => (Some(Controller::Cpu), m.clone()),
            CpuHier::V2(m) => (None, m.clone()),
        };
        let mut out: BTreeMap<String, BTreeMap<String, PodTarget>> = self.classes.iter().map(|c| (c.clone(), BTreeMap::new())).collect();
        for m in members.members.values().filter(|m| self.classes.contains(&m.class)) {
            let Some(path) = m.cgroups.path(ctl) else { continue };
            let Some(KubeCgroup::Pod(pc)) = kubepods::parse(path) else { continue };
            if pc.qos == Qos::Guaranteed {
                if self.skipped.insert(pc.pod_path.clone(), m.class.clone()).is_none() {
                    tracing::info!("class {}: pod {} is Guaranteed: its quota is the kubelet's, joule leaves it alone", m.class, pc.pod_uid);
                }
                continue;
            }
            let pods = out.entry(m.class.clone()).or_default();
            if pods.contains_key(&pc.pod_path) {
                continue;
            }
            let meta = members.pods.get(&pc.pod_uid);
            let dir = mount.join(pc.pod_path.trim_start_matches('/'));
            let target = PodTarget {
                uid: pc.pod_uid.clone(),
                namespace: meta.map(|x| x.namespace.clone()).unwrap_or_default(),
                name: meta.map(|x| x.name.clone()).unwrap_or_default(),
                qos: pc.qos.as_str(),
                dir,
                capped: false,
            };
            pods.insert(pc.pod_path, target);
        }
        out
    }

    /// The metric rows of the pods held: one per pod (`namespace`, `pod`, `capped`), the
    /// first [`TOP_PODS`] of each class by name, the rest summed in one `pod="other"` row.
    pub fn rows(status: &PodsStatus) -> Vec<(Vec<(String, String)>, f64)> {
        let mut out = Vec::new();
        for (class, pods) in &status.pods {
            let mut rest: BTreeMap<bool, f64> = BTreeMap::new();
            for (i, p) in pods.iter().enumerate() {
                let capped = if p.capped { "true" } else { "false" };
                if i < TOP_PODS {
                    let l = [("class", class.as_str()), ("namespace", p.namespace.as_str()), ("pod", p.name.as_str()), ("capped", capped)];
                    out.push((l.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(), 1.0));
                } else {
                    *rest.entry(p.capped).or_default() += 1.0;
                }
            }
            for (capped, n) in rest {
                let l = [("class", class.as_str()), ("namespace", ""), ("pod", "other"), ("capped", if capped { "true" } else { "false" })];
                out.push((l.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(), n));
            }
        }
        out
    }

    /// The quota (µs per period) and period each pod of `class` gets at `pct` % of the machine.
    fn share(&self, class: &str, pct: f64, period_us: u64) -> u64 {
        let n = self.pods.get(class).map_or(1, |p| p.len().max(1)) as f64;
        ((pct.max(0.0) / 100.0 * self.ncpus as f64 * period_us as f64 / n).round() as u64).max(MIN_QUOTA_US)
    }

    /// (quota or None for unlimited, period) a knob holds now.
    fn read_quota(&self, fx: &dyn Effects, dir: &Path) -> Option<(Option<u64>, u64)> {
        match self.hier {
            CpuHier::V2(_) => {
                let s = read_trimmed(fx, &dir.join("cpu.max")).ok()?;
                let mut it = s.split_whitespace();
                let q = it.next()?;
                let period = it.next().and_then(|p| p.parse().ok()).unwrap_or(DEFAULT_CFS_PERIOD_US);
                Some((q.parse().ok(), period))
            }
            CpuHier::V1(_) => {
                let q: i64 = read_trimmed(fx, &dir.join("cpu.cfs_quota_us")).ok()?.parse().ok()?;
                let period = read_trimmed(fx, &dir.join("cpu.cfs_period_us")).ok().and_then(|p| p.parse().ok()).unwrap_or(DEFAULT_CFS_PERIOD_US);
                Some(((q >= 0).then_some(q as u64), period))
            }
        }
    }

    fn value(&self, quota_us: u64, period_us: u64) -> String {
        match self.hier {
            CpuHier::V1(_) => quota_us.to_string(),
            CpuHier::V2(_) => format!("{quota_us} {period_us}"),
        }
    }

    /// Writes `value` into `knob`, journalling its old content before the first write.
    fn write(&mut self, journal: &Journal, fx: &dyn Effects, knob: &Path, value: String) -> Result<(), QosError> {
        if !self.written.contains_key(knob) {
            let old =
                read_trimmed(fx, knob).map_err(|source| QosError::Io { what: "read a pod's CPU quota before capping it".into(), path: knob.into(), source })?;
            journal.record(OWNER, Undo::Write { path: knob.to_path_buf(), old: old.clone() })?;
            self.written.insert(knob.to_path_buf(), Written { old, ours: String::new() });
        }
        fx.write(knob, &value).map_err(|source| QosError::KernelRefused {
            what: "a pod's thermal cap".into(),
            path: knob.to_path_buf(),
            value: value.clone(),
            source,
            hint: String::new(),
        })?;
        if let Some(w) = self.written.get_mut(knob) {
            w.ours = value;
        }
        Ok(())
    }

    /// Writes back what was in `knob` before joule, unless someone else wrote it since (then
    /// theirs stays), and drops its journal record.
    fn unwrite(&mut self, journal: &Journal, fx: &dyn Effects, knob: &Path) -> Result<(), QosError> {
        let Some(w) = self.written.remove(knob) else { return Ok(()) };
        let now = read_trimmed(fx, knob).ok();
        if now.as_deref() == Some(w.ours.as_str()) {
            if let Err(e) = fx.write(knob, &w.old) {
                if e.kind() != std::io::ErrorKind::NotFound {
                    tracing::warn!("could not give {} back its {}: {e}", knob.display(), w.old);
                }
            }
        } else if now.is_some() {
            tracing::info!("{} was changed to {:?} by someone else (the kubelet resizing the pod?): it stays", knob.display(), now.unwrap_or_default());
        }
        journal.forget(OWNER, &Undo::Write { path: knob.to_path_buf(), old: w.old })?;
        Ok(())
    }

    /// Holds `dir` (a pod's cgroup) at `quota_us` or below what it had: lowers the containers'
    /// quotas above it first on v1.
    fn cap_pod(&mut self, journal: &Journal, fx: &dyn Effects, dir: &Path, pct: f64, class: &str) -> Result<(), QosError> {
        let knob = self.knob(dir);
        let own = match self.written.get(&knob).cloned() {
            // The kubelet wrote the pod's quota since joule capped it (an in-place resize): its
            // value is the pod's own from now on, and what a release gives back.
            Some(w) => match read_trimmed(fx, &knob) {
                Ok(now) if now != w.ours => {
                    tracing::info!("{} was changed to {now:?} by someone else (the kubelet resizing the pod?): the cap follows it", knob.display());
                    journal.forget(OWNER, &Undo::Write { path: knob.clone(), old: w.old })?;
                    journal.record(OWNER, Undo::Write { path: knob.clone(), old: now.clone() })?;
                    self.written.insert(knob.clone(), Written { old: now.clone(), ours: now.clone() });
                    parse_quota(&now, &self.hier)
                }
                _ => parse_quota(&w.old, &self.hier),
            },
            None => match self.read_quota(fx, dir) {
                Some(q) => q,
                None => return Ok(()), // the pod is gone
            },
        };
        let quota = self.share(class, pct, own.1);
        let quota = own.0.map_or(quota, |q| q.min(quota));
        let value = self.value(quota, own.1);
        if self.written.get(&knob).is_some_and(|w| w.ours == value) {
            return Ok(());
        }
        if matches!(self.hier, CpuHier::V1(_)) {
            let children = fx.list_dir(dir).unwrap_or_default().into_iter().map(|n| dir.join(n)).filter(|c| fx.exists(&c.join("cpu.cfs_quota_us")));
            let mut journalled_child = false;
            for child in children.collect::<Vec<_>>() {
                if let Some((Some(q), p)) = self.read_quota(fx, &child) {
                    if q > quota {
                        let child_knob = self.knob(&child);
                        journalled_child |= !self.written.contains_key(&child_knob);
                        self.write(journal, fx, &child_knob, self.value(quota, p))?;
                    }
                }
            }
            // A replay goes newest first and v1 refuses a child above its parent: the pod's
            // record must stay newer than its containers' so the pod is given back first.
            if let (true, Some(w)) = (journalled_child, self.written.get(&knob)) {
                let undo = Undo::Write { path: knob.clone(), old: w.old.clone() };
                journal.forget(OWNER, &undo)?;
                journal.record(OWNER, undo)?;
            }
        }
        self.write(journal, fx, &knob, value)
    }

    /// Gives `dir` (and on v1 its containers) back what it had.
    fn uncap_pod(&mut self, journal: &Journal, fx: &dyn Effects, dir: &Path) -> Result<(), QosError> {
        self.unwrite(journal, fx, &self.knob(dir))?;
        let children: Vec<PathBuf> = self.written.keys().filter(|k| k.parent().and_then(Path::parent) == Some(dir)).cloned().collect();
        for k in children {
            self.unwrite(journal, fx, &k)?;
        }
        Ok(())
    }

    /// Follows the reading: pods that joined a capped class are capped, those gone or left are
    /// given back their quota, and every capped pod's share is recomputed.
    pub fn hold(&mut self, journal: &Journal, fx: &dyn Effects, members: &Membership) -> Result<ReconcileReport, QosError> {
        let now = self.pods_of(members);
        let mut notes = Vec::new();
        for (class, before) in &self.pods.clone() {
            for (path, pod) in before {
                if !now.get(class).is_some_and(|n| n.contains_key(path)) {
                    self.uncap_pod(journal, fx, &pod.dir)?;
                    notes.push(format!("class {class}: pod {}/{} left", pod.namespace, pod.name));
                }
            }
        }
        for (class, pods) in &now {
            for (path, pod) in pods {
                if !self.pods.get(class).is_some_and(|b| b.contains_key(path)) {
                    notes.push(format!("class {class}: pod {}/{} ({}) joined, held in its own cgroup", pod.namespace, pod.name, pod.qos));
                }
            }
        }
        let changed = now.iter().map(|(c, p)| (c, p.keys().collect::<Vec<_>>())).ne(self.pods.iter().map(|(c, p)| (c, p.keys().collect::<Vec<_>>())));
        self.pods = now;
        if changed {
            for (class, pct) in self.pct.clone() {
                self.apply_cap(journal, fx, &class, pct)?;
            }
        }
        Ok(ReconcileReport { notes, ..Default::default() })
    }

    fn apply_cap(&mut self, journal: &Journal, fx: &dyn Effects, class: &str, pct: f64) -> Result<(), QosError> {
        let dirs: Vec<PathBuf> = self.pods.get(class).map(|p| p.values().map(|t| t.dir.clone()).collect()).unwrap_or_default();
        for d in &dirs {
            if pct < 100.0 {
                self.cap_pod(journal, fx, d, pct, class)?;
            } else {
                self.uncap_pod(journal, fx, d)?;
            }
        }
        let period_us = DEFAULT_CFS_PERIOD_US;
        let quota_us = (pct < 100.0).then(|| self.share(class, pct, period_us) * dirs.len().max(1) as u64);
        let ratio = quota_us.map_or(1.0, |q| (q as f64 / (self.ncpus as f64 * period_us as f64)).min(1.0));
        let knob = dirs.first().map(|d| self.knob(d)).unwrap_or_default();
        self.caps.insert(class.to_string(), ClassCap { cpu_pct: pct, quota_us, period_us, ratio, knob });
        Ok(())
    }

    /// Holds `class`'s pods at `cpu_pct` % of the machine between them.
    pub fn set_cap(&mut self, journal: &Journal, fx: &dyn Effects, class: &str, cpu_pct: f64) -> Result<bool, QosError> {
        let before = self.pct.get(class).copied();
        if before == Some(cpu_pct) || (before.is_none() && cpu_pct >= 100.0) {
            self.caps.entry(class.to_string()).or_insert(ClassCap {
                cpu_pct,
                quota_us: None,
                period_us: DEFAULT_CFS_PERIOD_US,
                ratio: 1.0,
                knob: PathBuf::new(),
            });
            return Ok(false);
        }
        if cpu_pct >= 100.0 {
            self.pct.remove(class);
        } else {
            self.pct.insert(class.to_string(), cpu_pct);
        }
        self.apply_cap(journal, fx, class, cpu_pct)?;
        Ok(true)
    }

    pub fn caps(&self) -> &BTreeMap<String, ClassCap> {
        &self.caps
    }

    /// Gives every pod back its quota.
    pub fn release(&mut self, journal: &Journal, fx: &dyn Effects) -> Result<RestoreReport, QosError> {
        let pods: Vec<PathBuf> = self.pods.values().flat_map(|p| p.values().map(|t| t.dir.clone())).collect();
        let n = self.written.len();
        for d in pods {
            self.uncap_pod(journal, fx, &d)?;
        }
        let rest: Vec<PathBuf> = self.written.keys().cloned().collect();
        for k in rest {
            self.unwrite(journal, fx, &k)?;
        }
        self.pct.clear();
        Ok(RestoreReport { undone: n, ..Default::default() })
    }
}

fn parse_quota(old: &str, hier: &CpuHier) -> (Option<u64>, u64) {
    match hier {
        CpuHier::V2(_) => {
            let mut it = old.split_whitespace();
            let q = it.next().and_then(|q| q.parse().ok());
            (q, it.next().and_then(|p| p.parse().ok()).unwrap_or(DEFAULT_CFS_PERIOD_US))
        }
        CpuHier::V1(_) => (old.parse::<i64>().ok().filter(|q| *q >= 0).map(|q| q as u64), DEFAULT_CFS_PERIOD_US),
    }
}

/// Pod classes beside the other classes' backend (`inner`): each call reaches the one holding
/// the class.
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

#[cfg(test)]
#[path = "pod_cpu_tests.rs"]
mod tests;
