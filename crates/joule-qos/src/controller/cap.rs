//! Thermal caps on best-effort classes (the cgroup path of mechanism 1): a class's CFS
//! bandwidth becomes min(its configured quota, `cpu_pct` % of the whole machine) and goes back
//! to the configured value (or unlimited) at 100 %. The knob's content before the first cap is
//! journalled before anything is written, and a knob is written only when its value changes.

use super::QosController;
use crate::backend::{BackendKind, Hier};
use crate::QosError;
use joule_core::effects::Effects;
use joule_core::fsread::read_trimmed;
use joule_core::journal::{Journal, Undo};
use serde::Serialize;
use std::path::PathBuf;

/// The CFS period a cap is written with when the class has none configured and the knob
/// cannot be read (the kernel's default).
const DEFAULT_CFS_PERIOD_US: u64 = 100_000;
/// The kernel refuses a quota below 1 ms.
const MIN_QUOTA_US: u64 = 1_000;

/// What one class is held to by the thermal stage.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ClassCap {
    /// What the plan asked for: % of the whole machine (all CPUs), 100 = no thermal cap.
    pub cpu_pct: f64,
    /// The quota written, µs per period over all CPUs; None = unlimited ("max" / -1).
    pub quota_us: Option<u64>,
    pub period_us: u64,
    /// The share of the whole machine the class may now use: quota / (CPUs × period), 1 when
    /// unlimited. Includes the configured quota, so it is what the class really gets at most.
    pub ratio: f64,
    /// The knob that holds it (v2 `cpu.max`, v1 `cpu.cfs_quota_us`).
    pub knob: PathBuf,
}

impl QosController {
    /// The knob a cap goes to, and the period it is expressed in.
    fn cap_knob(&self, fx: &dyn Effects, class: &str) -> Result<(PathBuf, u64), QosError> {
        let configured = self.plan.class(class).ok_or_else(|| QosError::UnknownClass(class.into()))?.cfs.map(|q| q.period_us);
        let (knob, read_period) = match self.layout.kind {
            BackendKind::V2 => {
                let d = self.class_dir(Hier::Unified, class).ok_or_else(|| QosError::UnknownClass(class.into()))?;
                let period = read_trimmed(fx, &d.join("cpu.max")).ok().and_then(|s| s.split_whitespace().nth(1).and_then(|p| p.parse().ok()));
                (d.join("cpu.max"), period)
            }
            BackendKind::V1 => {
                let d = self.class_dir(Hier::Cpu, class).ok_or_else(|| QosError::UnknownClass(class.into()))?;
                let period = read_trimmed(fx, &d.join("cpu.cfs_period_us")).ok().and_then(|s| s.parse().ok());
                (d.join("cpu.cfs_quota_us"), period)
            }
        };
        Ok((knob, configured.or(read_period).unwrap_or(DEFAULT_CFS_PERIOD_US)))
    }

    /// The cap of `class` at `cpu_pct` % of the machine, without writing anything.
    pub fn cap_for(&self, fx: &dyn Effects, class: &str, cpu_pct: f64) -> Result<ClassCap, QosError> {
        let (knob, period_us) = self.cap_knob(fx, class)?;
        let ncpus = self.plan.env.cpus.len().max(1) as f64;
        let configured = self.plan.class(class).and_then(|c| c.cfs).map(|q| q.quota_us);
        let thermal = (cpu_pct < 100.0).then(|| ((cpu_pct.max(0.0) / 100.0 * ncpus * period_us as f64).round() as u64).max(MIN_QUOTA_US));
        let quota_us = match (configured, thermal) {
            (Some(c), Some(t)) => Some(c.min(t)),
            (c, t) => c.or(t),
        };
        let ratio = quota_us.map_or(1.0, |q| (q as f64 / (ncpus * period_us as f64)).min(1.0));
        Ok(ClassCap { cpu_pct, quota_us, period_us, ratio, knob })
    }

    /// Holds `class` at `cpu_pct` % of the machine. Writes only when the quota differs from
    /// what this controller last wrote (or, before the first cap, from the configured value
    /// `apply` wrote); journals the knob's old content before its first change. Ok(true) when
    /// it wrote.
    pub fn set_cap(&mut self, journal: &Journal, fx: &dyn Effects, class: &str, cpu_pct: f64) -> Result<bool, QosError> {
        let cap = self.cap_for(fx, class, cpu_pct)?;
        let configured = self.plan.class(class).and_then(|c| c.cfs).map(|q| q.quota_us);
        let held = self.caps.get(class).map_or(configured, |c| c.quota_us);
        if held == cap.quota_us {
            self.caps.insert(class.to_string(), cap);
            return Ok(false);
        }
        let value = match (self.layout.kind, cap.quota_us) {
            (BackendKind::V2, Some(q)) => format!("{q} {}", cap.period_us),
            (BackendKind::V2, None) => format!("max {}", cap.period_us),
            (BackendKind::V1, Some(q)) => q.to_string(),
            (BackendKind::V1, None) => "-1".to_string(),
        };
        if !self.cap_journalled.contains(&cap.knob) {
            let old = read_trimmed(fx, &cap.knob).map_err(|e| QosError::io("read a class's CFS bandwidth before capping it", &cap.knob, e))?;
            self.record(journal, Undo::Write { path: cap.knob.clone(), old })?;
            self.cap_journalled.insert(cap.knob.clone());
        }
        fx.write(&cap.knob, &value).map_err(|e| QosError::KernelRefused {
            hint: " — a child class's quota may exceed the cap (v1 checks the hierarchy)".into(),
            what: format!("thermal cap of class {class} to {cpu_pct}% of the machine"),
            path: cap.knob.clone(),
            value: value.clone(),
            source: e,
        })?;
        self.caps.insert(class.to_string(), cap);
        Ok(true)
    }

    /// The caps held now, per class.
    pub fn caps(&self) -> &std::collections::BTreeMap<String, ClassCap> {
        &self.caps
    }

    /// After cgroups were recreated (with their configured values), every cap must be
    /// written again.
    pub(super) fn forget_written_caps(&mut self) {
        self.caps.clear();
    }
}
