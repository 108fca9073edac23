//! Classes that are systemd units (`match = { unit = [...], slice = [...] }` and nothing else),
//! on a host where systemd owns the cgroup tree: their CPU knobs go to the units through
//! systemd's D-Bus API ([`Units`]), never into the cgroup files systemd writes. A quota is
//! `CPUQuotaPerSecUSec` (+ `CPUQuotaPeriodUSec`), a weight `CPUWeight`, a cpuset
//! `AllowedCPUs`, each set for this boot only (runtime = true) after its old value and the new
//! one are journalled (`Undo::UnitProperty`, owner `qos`), so `joule restore` sets it back —
//! unless someone else changed it since, whose value then stays. The units'
//! processes stay in their units: systemd's `Tasks:`, kill, freeze and reload keep working.
//!
//! **Classes matched by processes** (comm, uid, ...) on such a host are acted on through the
//! units their processes live in ([`UnitClasses::for_systemd`], [`UnitClasses::resolve`]): a
//! unit whose every process belongs to the class gets the class's properties; a unit that also
//! holds other work (a login session, a container, a service with other processes) is shared,
//! and unit-wide properties are refused for it, with the reason. No process is moved.
//!
//! **RT classes** get per-thread SCHED_DEADLINE reservations ([`crate::deadline`]): a unit has
//! no RT bandwidth on cgroup v2, and a reservation needs no cgroup. They are admitted together,
//! against the kernel's deadline bandwidth, when the classes are built.
//!
//! **Drift**: what joule set is remembered; a later value joule did not write (an
//! administrator's `systemctl set-property`, a `daemon-reload` of a unit file that sets it) is
//! reported, and the administrator's value wins: joule stops holding that property until the
//! config changes (a new controller).

use crate::admission::{admit, AdmissionEnv, DlBw, RtBackend};
use crate::deadline::Reservations;
use crate::{ApplyReport, ClassCap, QosError, ReconcileReport, Reserved, OWNER};
use joule_core::config::ClassConfig;
use joule_core::effects::{Effects, UnitValue};
use joule_core::journal::{Journal, RestoreReport, Undo};
use joule_core::membership::Membership;
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// systemd's "not set" for a `t` property (USEC_INFINITY / CGROUP_WEIGHT_INVALID).
const UNSET: u64 = u64::MAX;

#[derive(Debug, Clone, PartialEq)]
struct UnitClass {
    name: String,
    units: Vec<String>,
    /// What the config asks, property by property.
    props: Vec<(&'static str, UnitValue)>,
    /// The configured quota (µs per period over all CPUs) and period, for thermal caps.
    quota_us: Option<u64>,
    period_us: u64,
    /// Its units are those its processes live in (`resolve`), not named in the config.
    resolved: bool,
}

/// A property joule set and later found changed by someone else.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Drift {
    pub unit: String,
    pub property: String,
    pub set: String,
    pub found: String,
}

pub struct UnitClasses {
    classes: Vec<UnitClass>,
    ncpus: usize,
    /// (unit, property) -> what joule last set.
    held: BTreeMap<(String, String), UnitValue>,
    /// (unit, property) pairs an administrator took over: left alone until a new config.
    yielded: BTreeSet<(String, String)>,
    caps: BTreeMap<String, ClassCap>,
    /// The unified hierarchy's root, where a resolved unit's processes are listed.
    cgroup_root: PathBuf,
    /// Shared units refused per resolved class, as last reported (a note is logged once).
    shared: BTreeMap<String, BTreeSet<String>>,
    /// unit -> its cgroup (relative to `cgroup_root`), for the units resolved classes have.
    unit_dirs: BTreeMap<String, String>,
    /// The RT classes' reservations: per class, what each thread gets.
    dl_classes: Vec<(String, DlBw)>,
    dl: Reservations,
}

/// `AllowedCPUs`' bitmask for a cpu list: CPU n is bit n % 8 of byte n / 8.
pub fn cpu_mask(cpus: &[usize]) -> Vec<u8> {
    let mut mask = vec![0u8; cpus.iter().max().map_or(0, |m| m / 8 + 1)];
    for c in cpus {
        mask[c / 8] |= 1 << (c % 8);
    }
    mask
}

impl UnitClasses {
    /// The unit classes of `classes` (the others are left to the cgroupfs controller), on a
    /// machine `env` describes (its CPUs, the kernel's RT limit and deadline offer). A unit
    /// class that names a cpu list that does not parse, or RT runtime the deadline backend
    /// cannot admit, is refused with the reason.
    pub fn new(classes: &[ClassConfig], env: &AdmissionEnv) -> Result<UnitClasses, QosError> {
        let units: Vec<ClassConfig> = classes.iter().filter(|c| c.matches.only_units()).cloned().collect();
        Self::build(&units, env, PathBuf::new())
    }

    /// Every class of `classes`, on a host whose cgroup tree (unified, at `cgroup_root`)
    /// systemd owns: those that name units are those units; the others get the units their
    /// processes live in ([`UnitClasses::resolve`]).
    pub fn for_systemd(classes: &[ClassConfig], env: &AdmissionEnv, cgroup_root: &Path) -> Result<UnitClasses, QosError> {
        Self::build(classes, env, cgroup_root.to_path_buf())
    }

    fn build(classes: &[ClassConfig], env: &AdmissionEnv, cgroup_root: PathBuf) -> Result<UnitClasses, QosError> {
        let mut out = Vec::new();
        let (dl_classes, mut refused) = admit_rt(classes, env);
        for c in classes {
            if c.parent.is_some() {
                refused.push(format!("class {}: a class of systemd units cannot be nested (parent); use a slice", c.name));
                continue;
            }
            let period_us = c.period_us.unwrap_or(100_000);
            let mut props = Vec::new();
            if let Some(q) = c.quota_us {
                props.push(("CPUQuotaPerSecUSec", UnitValue::U64(q.saturating_mul(1_000_000) / period_us.max(1))));
                props.push(("CPUQuotaPeriodUSec", UnitValue::U64(period_us)));
            }
            if let Some(w) = c.weight {
                props.push(("CPUWeight", UnitValue::U64(w)));
            }
            if let Some(list) = &c.cpus {
                match joule_core::cpulist::parse(list) {
                    Some(cpus) if !cpus.is_empty() => props.push(("AllowedCPUs", UnitValue::Bytes(cpu_mask(&cpus)))),
                    _ => refused.push(format!("class {}: cpus = {list:?} is not a CPU list", c.name)),
                }
            }
            let resolved = !c.matches.only_units();
            let units = if resolved { Vec::new() } else { c.matches.units().map(String::from).collect() };
            out.push(UnitClass { name: c.name.clone(), units, props, quota_us: c.quota_us, period_us, resolved });
        }
        if !refused.is_empty() {
            return Err(QosError::Refused(refused.join("\n")));
        }
        Ok(UnitClasses {
            classes: out,
            ncpus: env.cpus.len().max(1),
            held: BTreeMap::new(),
            yielded: BTreeSet::new(),
            caps: BTreeMap::new(),
            cgroup_root,
            shared: BTreeMap::new(),
            unit_dirs: BTreeMap::new(),
            dl_classes,
            dl: Reservations::default(),
        })
    }

    /// A deadline class's threads as the last hold left them.
    pub fn reserved(&self, class: &str) -> Option<Reserved> {
        self.dl.reserved(class)
    }

    /// Whether `class` holds SCHED_DEADLINE reservations (it has RT runtime).
    pub fn has_deadline(&self, class: &str) -> bool {
        self.dl_classes.iter().any(|(c, _)| c == class)
    }

    /// Holds the RT classes' reservations on the threads `members` lists (each thread's old
    /// policy journalled first).
    fn hold_deadline(&mut self, journal: &Journal, fx: &dyn Effects, members: &Membership) -> Result<Vec<String>, QosError> {
        if self.dl_classes.is_empty() {
            return Ok(Vec::new());
        }
        self.dl.hold(fx, members, &self.dl_classes, |u| Ok(journal.record(OWNER, u)?))
    }

    /// The units `class` acts on now (named, or resolved from its processes).
    pub fn units_of(&self, class: &str) -> Vec<String> {
        self.classes.iter().find(|c| c.name == class).map(|c| c.units.clone()).unwrap_or_default()
    }

    /// Gives each class matched by processes the units its processes live in: a unit all of
    /// whose processes are the class's gets the class's properties (journalled as `apply`
    /// does); a unit that also holds other processes, or that another class already has, is
    /// shared: refused, with a note. A unit the class no longer covers gets its properties
    /// back. Reads each unit's `cgroup.procs` (its whole subtree); the caller runs it when
    /// the membership changed.
    pub fn resolve(&mut self, journal: &Journal, fx: &dyn Effects, members: &Membership) -> Result<ReconcileReport, QosError> {
        let mut report = ReconcileReport::default();
        let named: BTreeMap<String, String> =
            self.classes.iter().filter(|c| !c.resolved).flat_map(|c| c.units.iter().map(|u| (u.clone(), c.name.clone()))).collect();
        let mut taken = named;
        for i in 0..self.classes.len() {
            if !self.classes[i].resolved {
                continue;
            }
            let name = self.classes[i].name.clone();
            let mut found: BTreeMap<String, String> = BTreeMap::new();
            for m in members.of(&name) {
                if let Some((unit, dir)) = m.cgroups.path(None).and_then(unit_of) {
                    found.insert(unit, dir);
                }
            }
            let mut whole = Vec::new();
            let mut shared = BTreeSet::new();
            for (unit, dir) in found {
                let why = match taken.get(&unit) {
                    Some(other) => Some(format!("it is class {other}'s")),
                    None => outsider(fx, &self.cgroup_root.join(dir.trim_start_matches('/')), members, &name)
                        .map(|pid| format!("it also holds pid {pid}, which is not in the class")),
                };
                match why {
                    None => {
                        taken.insert(unit.clone(), name.clone());
                        self.unit_dirs.insert(unit.clone(), dir);
                        whole.push(unit);
                    }
                    Some(why) => {
                        if !self.shared.get(&name).is_some_and(|s| s.contains(&unit)) {
                            report.notes.push(format!(
                                "class {name}: {unit} is shared ({why}): unit-wide quota, weight and cpus are refused for it; per-thread knobs (latency slice) still apply"
                            ));
                        }
                        shared.insert(unit);
                    }
                }
            }
            self.shared.insert(name.clone(), shared);
            let before = self.classes[i].units.clone();
            let props = self.classes[i].props.clone();
            let mut kept = Vec::new();
            for unit in whole {
                if before.contains(&unit) {
                    kept.push(unit);
                    continue;
                }
                match self.set_all(journal, fx, &unit, &props) {
                    Ok(()) => {
                        report
                            .notes
                            .push(format!("class {name}: {unit} holds only the class's processes: the class's properties set on it (systemd, runtime)"));
                        kept.push(unit);
                    }
                    // A scope that ended meanwhile, a unit systemd refuses: not this class's.
                    Err(e) => {
                        self.release_unit(journal, fx, &unit)?;
                        report.notes.push(format!("class {name}: {unit} left alone: {e}"));
                    }
                }
            }
            for gone in before.iter().filter(|u| !kept.contains(u)) {
                self.release_unit(journal, fx, gone)?;
                report.notes.push(format!("class {name}: {gone} no longer holds only the class's processes: its properties are back"));
            }
            self.classes[i].units = kept;
            if let Some(cap) = self.caps.get(&name).map(|c| c.cpu_pct) {
                self.set_cap(journal, fx, &name, cap)?;
            }
        }
        report.notes.extend(self.hold_deadline(journal, fx, members)?);
        Ok(report)
    }

    fn set_all(&mut self, journal: &Journal, fx: &dyn Effects, unit: &str, props: &[(&'static str, UnitValue)]) -> Result<(), QosError> {
        for (property, want) in props {
            self.set(journal, fx, unit, property, want)?;
        }
        Ok(())
    }

    /// Puts back what joule set on `unit` (journal records of owner `qos`), and forgets it.
    fn release_unit(&mut self, journal: &Journal, fx: &dyn Effects, unit: &str) -> Result<(), QosError> {
        self.held.retain(|(u, _), _| u != unit);
        self.yielded.retain(|(u, _)| u != unit);
        journal.restore_where(fx, |e| e.owner == OWNER && matches!(&e.undo, Undo::UnitProperty { unit: u, .. } if u == unit))?;
        Ok(())
    }

    /// Looks again at the units the classes matched by processes have to themselves, with no
    /// membership change: a process of no class that joined one makes it shared, and its
    /// properties go back. Reads only those units' `cgroup.procs` (the classes' own
    /// processes), not the whole membership: the actuator runs it once a second.
    pub fn recheck(&mut self, journal: &Journal, fx: &dyn Effects, members: &Membership) -> Result<ReconcileReport, QosError> {
        let mut report = ReconcileReport::default();
        for i in 0..self.classes.len() {
            if !self.classes[i].resolved {
                continue;
            }
            let name = self.classes[i].name.clone();
            for unit in self.classes[i].units.clone() {
                let Some(dir) = self.unit_dirs.get(&unit) else { continue };
                let Some(pid) = outsider(fx, &self.cgroup_root.join(dir.trim_start_matches('/')), members, &name) else { continue };
                self.release_unit(journal, fx, &unit)?;
                self.classes[i].units.retain(|u| u != &unit);
                self.shared.entry(name.clone()).or_default().insert(unit.clone());
                report.notes.push(format!("class {name}: {unit} is shared now (it also holds pid {pid}, which is not in the class): its properties are back"));
            }
        }
        Ok(report)
    }

    pub fn is_empty(&self) -> bool {
        self.classes.is_empty()
    }

    pub fn class_names(&self) -> Vec<String> {
        self.classes.iter().map(|c| c.name.clone()).collect()
    }

    pub fn len(&self) -> usize {
        self.classes.len()
    }

    /// Whether `class` is one of these (asked every period: no allocation).
    pub fn has(&self, class: &str) -> bool {
        self.classes.iter().any(|c| c.name == class)
    }

    /// Sets one property, journalling its old value first. Nothing, and no D-Bus call, when
    /// joule already holds it at `want` (`drift` reads it back once a second); nothing either
    /// when someone else changed it since joule set it: `drift` reports that, and they win.
    fn set(&mut self, journal: &Journal, fx: &dyn Effects, unit: &str, property: &'static str, want: &UnitValue) -> Result<bool, QosError> {
        let key = (unit.to_string(), property.to_string());
        if self.yielded.contains(&key) || self.held.get(&key).is_some_and(|h| h.same(want)) {
            return Ok(false);
        }
        let path = PathBuf::from(format!("systemd:{unit}"));
        let now = fx.unit_property(unit, property).map_err(|e| QosError::io(format!("read {property} of {unit}"), &path, e))?;
        if self.held.get(&key).is_some_and(|h| !now.same(h)) {
            return Ok(false);
        }
        if now.same(want) {
            self.held.insert(key, want.clone());
            return Ok(false);
        }
        journal.record(OWNER, Undo::UnitProperty { unit: unit.into(), property: property.into(), old: now, set: want.clone() })?;
        fx.set_unit_property(unit, property, want).map_err(|e| QosError::KernelRefused {
            what: format!("{property} of {unit}"),
            path,
            value: want.to_string(),
            source: e,
            hint: " — systemd's SetUnitProperties (runtime)".into(),
        })?;
        self.held.insert(key, want.clone());
        Ok(true)
    }

    /// Sets every unit class's properties; on a failure undoes what this call set (through
    /// the journal) and returns the error: nothing half-applied.
    pub fn apply(&mut self, journal: &Journal, fx: &dyn Effects) -> Result<ApplyReport, QosError> {
        let mut report = ApplyReport::default();
        let work: Vec<(String, &'static str, UnitValue)> =
            self.classes.iter().flat_map(|c| c.units.iter().flat_map(move |u| c.props.iter().map(move |(p, v)| (u.clone(), *p, v.clone())))).collect();
        for (unit, property, want) in work {
            match self.set(journal, fx, &unit, property, &want) {
                Ok(true) => {
                    report.writes += 1;
                    report.notes.push(format!("{unit}: {property} = {want} (systemd, runtime)"));
                }
                Ok(false) => {}
                Err(e) => {
                    let _ = self.release(journal, fx);
                    return Err(e);
                }
            }
        }
        Ok(report)
    }

    /// Holds `class` at `cpu_pct` % of the whole machine (a thermal cap): its units'
    /// `CPUQuotaPerSecUSec` becomes the lower of the configured quota and the cap. Ok(true)
    /// when it set something.
    pub fn set_cap(&mut self, journal: &Journal, fx: &dyn Effects, class: &str, cpu_pct: f64) -> Result<bool, QosError> {
        let c = self.classes.iter().find(|c| c.name == class).cloned().ok_or_else(|| QosError::UnknownClass(class.into()))?;
        let configured_per_s = c.quota_us.map(|q| q.saturating_mul(1_000_000) / c.period_us.max(1));
        let cap_per_s = (cpu_pct < 100.0).then(|| ((cpu_pct.max(0.1) / 100.0) * self.ncpus as f64 * 1_000_000.0) as u64);
        let per_s = match (configured_per_s, cap_per_s) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let want = UnitValue::U64(per_s.unwrap_or(UNSET));
        let mut wrote = false;
        for u in &c.units {
            wrote |= self.set(journal, fx, u, "CPUQuotaPerSecUSec", &want)?;
        }
        let ratio = per_s.map_or(1.0, |q| q as f64 / (self.ncpus as f64 * 1_000_000.0));
        let knob = PathBuf::from(format!("systemd:{}:CPUQuotaPerSecUSec", c.units.join(",")));
        self.caps.insert(class.into(), ClassCap { cpu_pct, quota_us: per_s.map(|q| q * c.period_us / 1_000_000), period_us: c.period_us, ratio, knob });
        Ok(wrote)
    }

    pub fn caps(&self) -> &BTreeMap<String, ClassCap> {
        &self.caps
    }

    /// Properties joule set that now read otherwise: each is reported once and left to
    /// whoever changed it (the administrator wins until the config changes).
    pub fn drift(&mut self, fx: &dyn Effects) -> Vec<Drift> {
        let mut out = Vec::new();
        for ((unit, property), set) in &self.held {
            let key = (unit.clone(), property.clone());
            if self.yielded.contains(&key) {
                continue;
            }
            match fx.unit_property(unit, property) {
                Ok(found) if !found.same(set) => {
                    out.push(Drift { unit: unit.clone(), property: property.clone(), set: set.to_string(), found: found.to_string() });
                    self.yielded.insert(key);
                }
                _ => {}
            }
        }
        out
    }

    /// Undoes every unit property and reservation of owner `qos` (this process's and a crashed
    /// one's).
    pub fn release(&mut self, journal: &Journal, fx: &dyn Effects) -> Result<RestoreReport, QosError> {
        self.held.clear();
        self.caps.clear();
        self.dl.forget();
        Ok(journal.restore_where(fx, |e| e.owner == OWNER && matches!(e.undo, Undo::UnitProperty { .. } | Undo::Sched { .. }))?)
    }
}

/// The RT classes of `classes` through deadline admission (units have no RT bandwidth): each
/// one's reservations, and the refusals as text. Admitted together, as the kernel admits their
/// threads against one budget; `parent` plays no part (a unit class has none: refused apart).
fn admit_rt(classes: &[ClassConfig], env: &AdmissionEnv) -> (Vec<(String, DlBw)>, Vec<String>) {
    let rt: Vec<ClassConfig> = classes.iter().filter(|c| c.rt_runtime_us.is_some_and(|r| r > 0)).map(|c| ClassConfig { parent: None, ..c.clone() }).collect();
    if rt.is_empty() {
        return (Vec::new(), Vec::new());
    }
    let env = AdmissionEnv { rt_group_sched: false, rt_backend: Some(RtBackend::Deadline), ..env.clone() };
    let plan = admit(&rt, &env);
    let dl = plan.classes.iter().filter_map(|c| Some((c.name.clone(), c.dl?))).collect();
    (dl, plan.refusals.into_iter().map(|r| r.message).collect())
}

/// The system unit a process lives in, from its v2 cgroup path, and that unit's cgroup: the
/// first `.service` or `.scope` component (`/system.slice/nginx.service` -> nginx.service;
/// below `user@1000.service` everything is the user's manager's, so that unit is the one),
/// provided it is where systemd puts units (right below a chain of slices,
/// `joule_core::config::systemd_unit_at`): a `nginx.service` directory made below a directory
/// someone was handed is nobody's unit, and acting on the real nginx.service for it would let
/// them change a unit they do not own (issue 33).
pub fn unit_of(path: &str) -> Option<(String, String)> {
    let mut dir = String::new();
    for seg in path.split('/').filter(|s| !s.is_empty()) {
        dir.push('/');
        dir.push_str(seg);
        if (seg.ends_with(".service") || seg.ends_with(".scope")) && joule_core::effects::valid_unit_name(seg) {
            return joule_core::config::systemd_unit_at(&dir, seg).then(|| (seg.to_string(), dir));
        }
    }
    None
}

/// A process in the cgroup subtree at `dir` that is not a member of `class` (the first found),
/// or None when every one is (or the subtree cannot be read: then nothing is known to be
/// outside, and the unit's own processes are the class's).
fn outsider(fx: &dyn Effects, dir: &Path, members: &Membership, class: &str) -> Option<i32> {
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let procs = fx.read(&d.join("cgroup.procs")).unwrap_or_default();
        if let Some(pid) = procs.split_whitespace().filter_map(|p| p.parse::<i32>().ok()).find(|pid| members.members.get(pid).is_none_or(|m| m.class != class))
        {
            return Some(pid);
        }
        // Exact paths: the unit's delegate names its cgroups, in any bytes, and a lossy name
        // would hide the processes below it.
        for child in fx.children(&d).unwrap_or_default() {
            if fx.exists(&child.join("cgroup.procs")) {
                stack.push(child);
            }
        }
    }
    None
}

#[cfg(test)]
#[path = "units_tests.rs"]
mod tests;
