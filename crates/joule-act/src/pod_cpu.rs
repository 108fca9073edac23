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
//! A class's cap is a share of the whole machine split among its pods by what they use
//! (`pod_share`; joule cannot put a parent cgroup above pods the kubelet placed), read from
//! each pod's own accounting (v2 `cpu.stat` usage_usec, v1 `cpuacct.usage`) and split again
//! each [`RESPLIT_GAP`] while capped: a tenant's idle pods joining the class take only their
//! floor from another's busy pod. A pod seen in the kubelet's cgroups that the runtime has not
//! named is held by the first capping class whose rules could be its ([`PodCaps::holding_unnamed`]).
//! On v1 a child's quota may not exceed its parent's, so a container quota above the pod's new
//! cap is lowered first (and restored after the pod's).

use crate::pod_share::split_by_demand;
use joule_core::cgroupfs::Controller;
use joule_core::config::PodRules;
use joule_core::effects::Effects;
use joule_core::fsread::read_trimmed;
use joule_core::journal::{Journal, RestoreReport, Undo};
use joule_core::kubepods::{self, KubeCgroup, Qos};
use joule_core::membership::Membership;
use joule_qos::{ClassCap, QosError, ReconcileReport};
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The journal's owner of pod knobs.
pub const OWNER: &str = "pods";
/// The period the split is computed in; a pod's own period scales what it is written.
const DEFAULT_CFS_PERIOD_US: u64 = 100_000;
/// The least quota the kernel takes (µs per period).
const MIN_QUOTA_US: u64 = 1_000;
/// The least a pod counts as wanting in the split (µs per 100 ms, 0.1 % of a CPU): so small
/// that nine idle pods take under 3 % of a 0.3-CPU class from its busy pod. The kernel's own
/// minimum ([`MIN_QUOTA_US`]) is written where the split gives less: an idle pod does not use
/// it, and one that does is held back by it and shares as a busy pod at the next split.
pub const FLOOR_US: u64 = 100;
/// How often a capped class's split follows its pods' use.
pub const RESPLIT_GAP: Duration = Duration::from_secs(1);
/// The least interval a pod's use is measured over; a split sooner keeps the last demand.
const MIN_SAMPLE: Duration = Duration::from_millis(250);
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
    /// Held only because the runtime has not named it and it could be this class's pod.
    pub unnamed: bool,
    /// Its CPU accounting: v2 `cpu.stat`, v1 `cpuacct.usage` (None: not read, an even split).
    #[serde(skip)]
    pub usage: Option<PathBuf>,
}

impl PodTarget {
    /// `namespace/name`, else its UID (and why a pod the runtime has not named is held).
    pub fn label(&self) -> String {
        match (self.name.is_empty(), self.unnamed) {
            (false, _) => format!("{}/{}", self.namespace, self.name),
            (true, false) => self.uid.clone(),
            (true, true) => format!("{} (not named by the runtime yet: held as this class's until it is)", self.uid),
        }
    }
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
    /// The capping classes that hold a pod the runtime has not named, in config order.
    holders: Vec<(String, PodRules)>,
    /// The v1 cpuacct hierarchy (the pods' use on v1; the same as the cpu one when co-mounted).
    cpuacct: Option<PathBuf>,
    /// Pod cgroup directory → its use as last read.
    samples: BTreeMap<PathBuf, Sample>,
    /// class → when its split last followed its pods' use.
    split_at: BTreeMap<String, Instant>,
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
            holders: Vec::new(),
            cpuacct: None,
            samples: BTreeMap::new(),
            split_at: BTreeMap::new(),
        }
    }

    /// The capping pod classes, in config order, with their rules: a pod the runtime has not
    /// named is held by the first whose rules could be its (`PodRules::holds_unnamed`), so a
    /// runtime that does not answer leaves no pod of a capping class uncapped.
    pub fn holding_unnamed(mut self, holders: Vec<(String, PodRules)>) -> PodCaps {
        self.holders = holders.into_iter().filter(|(c, _)| self.classes.contains(c)).collect();
        self
    }

    /// Where the pods' use is read on v1 (the cpuacct hierarchy; v2 reads `cpu.stat`).
    pub fn with_cpuacct(mut self, cpuacct: Option<PathBuf>) -> PodCaps {
        self.cpuacct = cpuacct;
        self
    }

    /// The cpu hierarchy under `cgroup_root`: a v1 `cpu` one when mounted, else v2 with `cpu`.
    pub fn detect(cgroup_root: &Path, fx: &dyn Effects) -> Option<CpuHier> {
        let l = joule_core::cgroupfs::Layout::detect(cgroup_root, fx);
        if let Some(d) = l.v1(Controller::Cpu) {
            return Some(CpuHier::V1(d.to_path_buf()));
        }
        l.unified.filter(|u| u.offers("cpu")).map(|u| CpuHier::V2(u.dir))
    }

    /// The v1 cpuacct hierarchy under `cgroup_root`, where the pods' use is read on v1.
    pub fn detect_cpuacct(cgroup_root: &Path, fx: &dyn Effects) -> Option<PathBuf> {
        joule_core::cgroupfs::Layout::detect(cgroup_root, fx).v1(Controller::Cpuacct).map(Path::to_path_buf)
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
            let target = PodTarget {
                uid: pc.pod_uid.clone(),
                namespace: meta.map(|x| x.namespace.clone()).unwrap_or_default(),
                name: meta.map(|x| x.name.clone()).unwrap_or_default(),
                qos: pc.qos.as_str(),
                dir: mount.join(pc.pod_path.trim_start_matches('/')),
                capped: false,
                unnamed: false,
                usage: self.usage_file(&mount, &pc.pod_path),
            };
            pods.insert(pc.pod_path, target);
        }
        // Pods the runtime has not named, that no class holds by a process: the first capping
        // class whose rules could be theirs holds them (a Guaranteed pod never).
        for (uid, u) in members.unnamed_pods.iter() {
            if u.qos == Qos::Guaranteed || out.values().any(|p| p.contains_key(&u.pod_path)) {
                continue;
            }
            let Some((class, _)) = self.holders.iter().find(|(_, r)| r.holds_unnamed(u.qos)) else { continue };
            let target = PodTarget {
                uid: uid.clone(),
                namespace: String::new(),
                name: String::new(),
                qos: u.qos.as_str(),
                dir: mount.join(u.pod_path.trim_start_matches('/')),
                capped: false,
                unnamed: true,
                usage: self.usage_file(&mount, &u.pod_path),
            };
            out.entry(class.clone()).or_default().insert(u.pod_path.clone(), target);
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
                    // A pod the runtime has not named is shown by its UID, as its cgroup names it.
                    let pod = if p.name.is_empty() { p.uid.as_str() } else { p.name.as_str() };
                    let l = [("class", class.as_str()), ("namespace", p.namespace.as_str()), ("pod", pod), ("capped", capped)];
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

    /// What `pct` % of the whole machine is, in µs per 100 ms.
    fn total_us(&self, pct: f64) -> u64 {
        (pct.max(0.0) / 100.0 * self.ncpus as f64 * DEFAULT_CFS_PERIOD_US as f64).round() as u64
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

    /// The pod's own (the kubelet's) quota and period: what was there before joule, or what the
    /// kubelet wrote since (an in-place resize, which is the pod's own from then on). None: the
    /// pod is gone.
    fn own_quota(&mut self, journal: &Journal, fx: &dyn Effects, dir: &Path) -> Result<Option<(Option<u64>, u64)>, QosError> {
        let knob = self.knob(dir);
        Ok(match self.written.get(&knob).cloned() {
            // The kubelet wrote the pod's quota since joule capped it (an in-place resize): its
            // value is the pod's own from now on, and what a release gives back.
            Some(w) => match read_trimmed(fx, &knob) {
                Ok(now) if now != w.ours => {
                    tracing::info!("{} was changed to {now:?} by someone else (the kubelet resizing the pod?): the cap follows it", knob.display());
                    journal.forget(OWNER, &Undo::Write { path: knob.clone(), old: w.old })?;
                    journal.record(OWNER, Undo::Write { path: knob.clone(), old: now.clone() })?;
                    self.written.insert(knob.clone(), Written { old: now.clone(), ours: now.clone() });
                    Some(parse_quota(&now, &self.hier))
                }
                _ => Some(parse_quota(&w.old, &self.hier)),
            },
            None => self.read_quota(fx, dir),
        })
    }

    /// Holds `dir` (a pod's cgroup) at `share_us` per 100 ms (scaled to its own period, at
    /// least the kernel's minimum) or below what it had: lowers the containers' quotas above it
    /// first on v1. The quota written, per 100 ms.
    fn cap_pod(&mut self, journal: &Journal, fx: &dyn Effects, dir: &Path, share_us: u64, own: (Option<u64>, u64)) -> Result<u64, QosError> {
        let knob = self.knob(dir);
        let quota = (share_us.saturating_mul(own.1) / DEFAULT_CFS_PERIOD_US).max(MIN_QUOTA_US);
        let quota = own.0.map_or(quota, |q| q.min(quota));
        let in_force = quota.saturating_mul(DEFAULT_CFS_PERIOD_US) / own.1.max(1);
        let value = self.value(quota, own.1);
        if self.written.get(&knob).is_some_and(|w| w.ours == value) {
            return Ok(in_force);
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
        self.write(journal, fx, &knob, value)?;
        Ok(in_force)
    }

    /// Gives `dir` (and on v1 its containers) back what it had.
    fn uncap_pod(&mut self, journal: &Journal, fx: &dyn Effects, dir: &Path) -> Result<(), QosError> {
        self.samples.remove(dir);
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
                    notes.push(format!("class {class}: pod {} left", pod.label()));
                }
            }
        }
        for (class, pods) in &now {
            for (path, pod) in pods {
                if !self.pods.get(class).is_some_and(|b| b.contains_key(path)) {
                    notes.push(format!("class {class}: pod {} ({}) joined, held in its own cgroup", pod.label(), pod.qos));
                }
            }
        }
        let changed = now.iter().map(|(c, p)| (c, p.keys().collect::<Vec<_>>())).ne(self.pods.iter().map(|(c, p)| (c, p.keys().collect::<Vec<_>>())));
        self.pods = now;
        if changed {
            for (class, pct) in self.pct.clone() {
                self.apply_cap(journal, fx, &class, pct, Instant::now())?;
            }
        }
        Ok(ReconcileReport { notes, ..Default::default() })
    }

    /// Holds `class`'s pods at `pct` % of the machine between them, split by their use as
    /// measured at `now`.
    fn apply_cap(&mut self, journal: &Journal, fx: &dyn Effects, class: &str, pct: f64, now: Instant) -> Result<(), QosError> {
        let pods: Vec<PodTarget> = self.pods.get(class).map(|p| p.values().cloned().collect()).unwrap_or_default();
        let period_us = DEFAULT_CFS_PERIOD_US;
        let knob = pods.first().map(|p| self.knob(&p.dir)).unwrap_or_default();
        if pct >= 100.0 {
            for p in &pods {
                self.uncap_pod(journal, fx, &p.dir)?;
            }
            self.split_at.remove(class);
            self.caps.insert(class.to_string(), ClassCap { cpu_pct: pct, quota_us: None, period_us, ratio: 1.0, knob });
            return Ok(());
        }
        let mut held = Vec::new();
        for p in &pods {
            let Some(own) = self.own_quota(journal, fx, &p.dir)? else { continue }; // the pod is gone
                                                                                    // A pod cannot use more than its own limit: the rest is the others'.
            let limit = own.0.map(|q| q.saturating_mul(DEFAULT_CFS_PERIOD_US) / own.1.max(1));
            let demand = self.demand(fx, p, now).unwrap_or(0);
            held.push((p.dir.clone(), own, limit.map_or(demand, |l| demand.min(l))));
        }
        let total = self.total_us(pct);
        let shares = split_by_demand(total, &held.iter().map(|h| h.2).collect::<Vec<_>>(), FLOOR_US);
        for ((dir, own, _), share) in held.iter().zip(shares) {
            let in_force = self.cap_pod(journal, fx, dir, share, *own)?;
            if let Some(s) = self.samples.get_mut(dir) {
                s.quota_us = Some(in_force);
            }
        }
        self.split_at.insert(class.to_string(), now);
        let ratio = (total as f64 / (self.ncpus as f64 * period_us as f64)).min(1.0);
        self.caps.insert(class.to_string(), ClassCap { cpu_pct: pct, quota_us: Some(total), period_us, ratio, knob });
        Ok(())
    }

    /// Splits a capped class's cap again by its pods' use when [`RESPLIT_GAP`] has passed
    /// since the last split at `now`.
    pub(crate) fn resplit_at(&mut self, journal: &Journal, fx: &dyn Effects, class: &str, now: Instant) -> Result<(), QosError> {
        let Some(&pct) = self.pct.get(class) else { return Ok(()) };
        if self.split_at.get(class).is_some_and(|t| now.saturating_duration_since(*t) < RESPLIT_GAP) {
            return Ok(());
        }
        self.apply_cap(journal, fx, class, pct, now)
    }

    /// Holds `class`'s pods at `cpu_pct` % of the machine between them; true when the cap
    /// changed (a split that follows the pods' use under the same cap is not a change).
    pub fn set_cap(&mut self, journal: &Journal, fx: &dyn Effects, class: &str, cpu_pct: f64) -> Result<bool, QosError> {
        let before = self.pct.get(class).copied();
        if before == Some(cpu_pct) {
            self.resplit_at(journal, fx, class, Instant::now())?;
            return Ok(false);
        }
        if before.is_none() && cpu_pct >= 100.0 {
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
        self.apply_cap(journal, fx, class, cpu_pct, Instant::now())?;
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
        self.samples.clear();
        self.split_at.clear();
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

// A pod's use, read from its own accounting.
#[path = "pod_cpu_use.rs"]
mod usage;
use usage::Sample;

// Pod classes beside the other classes' backend.
#[path = "pod_cpu_backend.rs"]
mod backend;
pub use backend::WithPods;

#[cfg(test)]
#[path = "pod_cpu_tests.rs"]
mod tests;
