//! Classes that are systemd units (`match = { unit = [...], slice = [...] }` and nothing else),
//! on a host where systemd owns the cgroup tree: their CPU knobs go to the units through
//! systemd's D-Bus API ([`Units`]), never into the cgroup files systemd writes. A quota is
//! `CPUQuotaPerSecUSec` (+ `CPUQuotaPeriodUSec`), a weight `CPUWeight`, a cpuset
//! `AllowedCPUs`, each set for this boot only (runtime = true) after its old value and the new
//! one are journalled (`Undo::UnitProperty`, owner `qos`), so `joule restore` sets it back —
//! unless someone else changed it since, whose value then stays. The units'
//! processes stay in their units: systemd's `Tasks:`, kill, freeze and reload keep working.
//!
//! **Drift**: what joule set is remembered; a later value joule did not write (an
//! administrator's `systemctl set-property`, a `daemon-reload` of a unit file that sets it) is
//! reported, and the administrator's value wins: joule stops holding that property until the
//! config changes (a new controller).

use crate::{ApplyReport, ClassCap, QosError, OWNER};
use joule_core::config::ClassConfig;
use joule_core::effects::{Effects, UnitValue};
use joule_core::journal::{Journal, RestoreReport, Undo};
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

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
    /// The unit classes of `classes` (the others are left to the cgroupfs controller). A unit
    /// class that asks what a unit cannot have (RT runtime: cgroup v2 has no RT bandwidth) or
    /// names a cpu list that does not parse is refused with the reason.
    pub fn new(classes: &[ClassConfig], ncpus: usize) -> Result<UnitClasses, QosError> {
        let mut out = Vec::new();
        let mut refused = Vec::new();
        for c in classes.iter().filter(|c| c.matches.only_units()) {
            if c.rt_runtime_us.is_some_and(|r| r > 0) {
                refused.push(format!("class {}: systemd units have no RT bandwidth (cgroup v2); give it a quota or weight", c.name));
                continue;
            }
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
            out.push(UnitClass { name: c.name.clone(), units: c.matches.units().map(String::from).collect(), props, quota_us: c.quota_us, period_us });
        }
        if !refused.is_empty() {
            return Err(QosError::Refused(refused.join("\n")));
        }
        Ok(UnitClasses { classes: out, ncpus: ncpus.max(1), held: BTreeMap::new(), yielded: BTreeSet::new(), caps: BTreeMap::new() })
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

    /// Undoes every unit property of owner `qos` (this process's and a crashed one's).
    pub fn release(&mut self, journal: &Journal, fx: &dyn Effects) -> Result<RestoreReport, QosError> {
        self.held.clear();
        self.caps.clear();
        Ok(journal.restore_where(fx, |e| e.owner == OWNER && matches!(e.undo, Undo::UnitProperty { .. }))?)
    }
}

#[cfg(test)]
#[path = "units_tests.rs"]
mod tests;
