//! The cgroup CPU actuator: the only writer of the classes' cgroups — where a class's processes
//! live (in every hierarchy the class uses, the freezer's and the v2 one's included), CPU quota,
//! weight, RT runtime and cpuset. `init` applies every class (admission control already ran when
//! its backend was built, so a refused config never starts), `reconcile` keeps them in place
//! while the plan holds them (the processes the membership reading lists moved in, deleted
//! cgroups recreated) and holds the merged `ClassCpuCap` knobs (the lowest cap asked for),
//! `shutdown` releases them through the journal.
//!
//! Behind [`CpuBackend`] the writes go to cgroupfs (joule-qos's controller); a cgroup tree
//! another manager owns (the kubelet's `kubepods.slice`) gets [`Unmanaged`], which leaves every
//! knob alone and says so; classes that are systemd units get [`WithUnits`], which sets their
//! units' `CPUQuota=`, `CPUWeight=`, `AllowedCPUs=` through systemd's D-Bus API and reports
//! drift (docs/systemd.md).

use joule_core::control::{owner, ActCx, ActError, Actuator, ActuatorState, Knob, Plan, Setting, Want};
use joule_core::effects::Effects;
use joule_core::journal::{Journal, RestoreReport};
use joule_core::membership::{ClassPlace, Membership};
use joule_core::metric::{l, Family, MetricDef};
use joule_qos::{ApplyReport, ClassCap, Drift, QosController, QosError, ReconcileReport, UnitClasses};
use serde::Serialize;
use std::collections::BTreeMap;
use std::sync::Arc;

/// The metric families this actuator reports.
pub const METRICS: &[MetricDef] = &[
    MetricDef::gauge(
        "joule_thermal_class_cap_ratio",
        "Share of the whole machine (all CPUs) a best-effort class may use now, its configured quota and the thermal stage's cap together (1 = unlimited); the cgroup_cpu actuator's status has the quota written.",
    ),
    MetricDef::counter("joule_class_moves", "Processes the class mover put into their class's cgroups since the agent started."),
    MetricDef::counter(
        "joule_unit_drift",
        "Times a systemd unit property joule set was found changed by someone else (an administrator's systemctl set-property); joule then leaves it to them until the config changes.",
    ),
    MetricDef::gauge(
        "joule_class_pods",
        "Kubernetes pods a pod class holds in their own cgroups, by namespace and pod name (the first 20 per class; the rest counted in pod=\"other\"); capped=\"true\" while joule holds the pod's CPU quota below the kubelet's.",
    ),
];

/// Who writes the classes' cgroups.
pub trait CpuBackend: Send {
    /// `cgroupfs`, `unmanaged`, ... as the status names it.
    fn kind(&self) -> String;
    fn classes(&self) -> usize;
    /// Where each class lives (for the membership reading).
    fn places(&self) -> Vec<ClassPlace>;
    fn apply(&mut self, journal: &Journal, fx: &dyn Effects) -> Result<ApplyReport, QosError>;
    fn hold(&mut self, journal: &Journal, fx: &dyn Effects, members: &Membership) -> Result<ReconcileReport, QosError>;
    /// Holds `class` at `cpu_pct` % of the machine; Ok(true) when it wrote.
    fn set_cap(&mut self, journal: &Journal, fx: &dyn Effects, class: &str, cpu_pct: f64) -> Result<bool, QosError>;
    fn caps(&self) -> BTreeMap<String, ClassCap>;
    fn release(&mut self, journal: &Journal, fx: &dyn Effects) -> Result<RestoreReport, QosError>;
    /// Properties set through another manager (systemd) that someone else changed since.
    fn drift(&mut self, _fx: &dyn Effects) -> Vec<Drift> {
        Vec::new()
    }
    /// Looks again, with an unchanged membership, at what the membership alone cannot see:
    /// a process of no class that joined a unit a class had to itself.
    fn recheck(&mut self, _journal: &Journal, _fx: &dyn Effects, _members: &Membership) -> Result<ReconcileReport, QosError> {
        Ok(ReconcileReport::default())
    }
    /// The pods pod classes hold, where there are pod classes.
    fn pods(&self) -> Option<crate::pod_cpu::PodsStatus> {
        None
    }
}

/// How often the actuator asks systemd whether the properties it set still hold (one D-Bus
/// read per unit property), and looks again at whether each unit a class has to itself still
/// holds only the class's processes (its `cgroup.procs`).
pub const DRIFT_CHECK: std::time::Duration = std::time::Duration::from_secs(1);

impl CpuBackend for QosController {
    fn kind(&self) -> String {
        "cgroupfs".into()
    }
    fn classes(&self) -> usize {
        self.plan().classes.len()
    }
    fn places(&self) -> Vec<ClassPlace> {
        QosController::places(self)
    }
    fn apply(&mut self, journal: &Journal, fx: &dyn Effects) -> Result<ApplyReport, QosError> {
        QosController::apply(self, journal, fx)
    }
    fn hold(&mut self, journal: &Journal, fx: &dyn Effects, members: &Membership) -> Result<ReconcileReport, QosError> {
        QosController::hold(self, journal, fx, members)
    }
    fn set_cap(&mut self, journal: &Journal, fx: &dyn Effects, class: &str, cpu_pct: f64) -> Result<bool, QosError> {
        QosController::set_cap(self, journal, fx, class, cpu_pct)
    }
    fn caps(&self) -> BTreeMap<String, ClassCap> {
        QosController::caps(self).clone()
    }
    fn release(&mut self, journal: &Journal, fx: &dyn Effects) -> Result<RestoreReport, QosError> {
        QosController::release(self, journal, fx)
    }
}

/// Classes that are systemd units ([`UnitClasses`]: their knobs through systemd's D-Bus API),
/// beside the cgroupfs classes of `fs` if any: each call reaches the backend holding the class.
pub struct WithUnits {
    pub units: UnitClasses,
    pub fs: Option<Box<dyn CpuBackend>>,
}

impl CpuBackend for WithUnits {
    fn kind(&self) -> String {
        let units = format!("systemd (D-Bus) for {} unit class(es)", self.units.len());
        self.fs.as_ref().map_or(units.clone(), |f| format!("{units} + {}", f.kind()))
    }
    fn classes(&self) -> usize {
        self.units.len() + self.fs.as_ref().map_or(0, |f| f.classes())
    }
    fn places(&self) -> Vec<ClassPlace> {
        // A unit class's processes stay in their units; only cgroupfs classes have places.
        self.fs.as_ref().map(|f| f.places()).unwrap_or_default()
    }
    fn apply(&mut self, journal: &Journal, fx: &dyn Effects) -> Result<ApplyReport, QosError> {
        let mut report = self.units.apply(journal, fx)?;
        if let Some(f) = &mut self.fs {
            match f.apply(journal, fx) {
                Ok(r) => {
                    report.writes += r.writes;
                    report.created.extend(r.created);
                    report.adopted.extend(r.adopted);
                    report.moved.extend(r.moved);
                    report.vanished.extend(r.vanished);
                    report.notes.extend(r.notes);
                }
                Err(e) => {
                    let _ = self.units.release(journal, fx);
                    return Err(e);
                }
            }
        }
        Ok(report)
    }
    fn hold(&mut self, journal: &Journal, fx: &dyn Effects, members: &Membership) -> Result<ReconcileReport, QosError> {
        let mut r = self.units.resolve(journal, fx, members)?;
        if let Some(f) = &mut self.fs {
            let fr = f.hold(journal, fx, members)?;
            r = ReconcileReport { notes: r.notes, ..fr };
        }
        Ok(r)
    }
    fn drift(&mut self, fx: &dyn Effects) -> Vec<Drift> {
        self.units.drift(fx)
    }
    fn recheck(&mut self, journal: &Journal, fx: &dyn Effects, members: &Membership) -> Result<ReconcileReport, QosError> {
        self.units.recheck(journal, fx, members)
    }
    fn set_cap(&mut self, journal: &Journal, fx: &dyn Effects, class: &str, cpu_pct: f64) -> Result<bool, QosError> {
        match &mut self.fs {
            Some(f) if !self.units.has(class) => f.set_cap(journal, fx, class, cpu_pct),
            _ => self.units.set_cap(journal, fx, class, cpu_pct),
        }
    }
    fn caps(&self) -> BTreeMap<String, ClassCap> {
        let mut caps = self.fs.as_ref().map(|f| f.caps()).unwrap_or_default();
        caps.extend(self.units.caps().clone());
        caps
    }
    fn release(&mut self, journal: &Journal, fx: &dyn Effects) -> Result<RestoreReport, QosError> {
        let mut r = self.units.release(journal, fx)?;
        if let Some(f) = &mut self.fs {
            let more = f.release(journal, fx)?;
            r.undone += more.undone;
            r.already_gone += more.already_gone;
            r.failed.extend(more.failed);
        }
        Ok(r)
    }
}

/// A cgroup tree another manager owns: joule writes nothing there and says who owns it.
pub struct Unmanaged {
    pub manager: String,
}

impl CpuBackend for Unmanaged {
    fn kind(&self) -> String {
        format!("unmanaged (owned by {})", self.manager)
    }
    fn classes(&self) -> usize {
        0
    }
    fn places(&self) -> Vec<ClassPlace> {
        Vec::new()
    }
    fn apply(&mut self, _: &Journal, _: &dyn Effects) -> Result<ApplyReport, QosError> {
        let note = format!("the class cgroups belong to {}: joule leaves their knobs alone", self.manager);
        Ok(ApplyReport { notes: vec![note], ..Default::default() })
    }
    fn hold(&mut self, _: &Journal, _: &dyn Effects, _: &Membership) -> Result<ReconcileReport, QosError> {
        Ok(ReconcileReport::default())
    }
    fn set_cap(&mut self, _: &Journal, _: &dyn Effects, _: &str, _: f64) -> Result<bool, QosError> {
        Ok(false)
    }
    fn caps(&self) -> BTreeMap<String, ClassCap> {
        BTreeMap::new()
    }
    fn release(&mut self, _: &Journal, _: &dyn Effects) -> Result<RestoreReport, QosError> {
        Ok(RestoreReport::default())
    }
}

/// The actuator's state.
#[derive(Debug, Clone, Default, Serialize)]
pub struct CgroupCpuState {
    pub backend: String,
    pub classes: usize,
    /// The thermal caps held now, per class.
    pub caps: BTreeMap<String, ClassCap>,
    pub holding: bool,
    pub moved_total: u64,
    pub recreated_total: u64,
    /// "unit property" -> times joule found a property it set changed by someone else.
    pub drift_total: BTreeMap<String, u64>,
    /// Pod classes' pods, held in their own cgroups (issue 37).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pods: Option<crate::pod_cpu::PodsStatus>,
}

impl ActuatorState for CgroupCpuState {
    fn to_json(&self) -> serde_json::Value {
        serde_json::to_value(self).unwrap_or_default()
    }
    fn families(&self) -> Vec<Family> {
        vec![
            METRICS[0].with(self.caps.iter().map(|(c, cap)| (l(&[("class", c)]), cap.ratio)).collect()),
            METRICS[1].with(vec![(vec![], self.moved_total as f64)]),
            METRICS[2].with(
                self.drift_total
                    .iter()
                    .map(|(k, n)| {
                        let (unit, property) = k.split_once(' ').unwrap_or((k, ""));
                        (l(&[("unit", unit), ("property", property)]), *n as f64)
                    })
                    .collect(),
            ),
            METRICS[3].with(self.pods.as_ref().map(crate::pod_cpu::PodCaps::rows).unwrap_or_default()),
        ]
    }
}

pub struct CgroupCpuActuator {
    backend: Box<dyn CpuBackend>,
    state: CgroupCpuState,
    /// The membership reading it last held the classes to (a reading is acted on once: its
    /// cgroups are what they were when /proc was read).
    held_generation: Option<u64>,
    /// The last hold failed part-way: the next one looks at every member, not only those the
    /// reading says changed.
    retry_all: bool,
    /// When it last asked the backend for drift.
    drift_checked: Option<std::time::Instant>,
}

impl CgroupCpuActuator {
    pub fn new(backend: Box<dyn CpuBackend>) -> CgroupCpuActuator {
        let state = CgroupCpuState { backend: backend.kind(), classes: backend.classes(), ..Default::default() };
        CgroupCpuActuator { backend, state, held_generation: None, retry_all: false, drift_checked: None }
    }
}

impl Actuator for CgroupCpuActuator {
    fn name(&self) -> &'static str {
        owner::CGROUP_CPU
    }

    fn init(&mut self, cx: &mut ActCx<'_>) -> Result<(), ActError> {
        let report = self.backend.apply(cx.journal, cx.fx)?;
        tracing::info!("classes applied: {} cgroup(s) created, {} task(s) moved", report.created.len(), report.moved.len());
        self.state.moved_total += report.moved.len() as u64;
        (cx.events)("qos_applied", serde_json::to_value(&report).unwrap_or_default());
        Ok(())
    }

    fn reconcile(&mut self, plan: &Plan, cx: &mut ActCx<'_>) -> Result<(), ActError> {
        self.state.holding = plan.for_actuator(owner::CGROUP_CPU).any(|d| matches!(d.want, Want::HoldClasses { .. }));
        if self.state.holding && self.held_generation != Some(plan.members.generation) {
            self.held_generation = Some(plan.members.generation);
            let all;
            let members = if self.retry_all {
                all = joule_core::membership::Membership { full: true, ..(*plan.members).clone() };
                &all
            } else {
                &*plan.members
            };
            self.retry_all = true;
            let r = self.backend.hold(cx.journal, cx.fx, members)?;
            self.retry_all = false;
            for n in &r.notes {
                tracing::info!("{n}");
            }
            if !r.moved.is_empty() || !r.recreated.is_empty() || !r.notes.is_empty() {
                self.state.moved_total += r.moved.len() as u64;
                self.state.recreated_total += r.recreated.len() as u64;
                (cx.events)("qos_reconciled", serde_json::to_value(&r).unwrap_or_default());
            }
        }
        if self.drift_checked.is_none_or(|t| t.elapsed() >= DRIFT_CHECK) {
            self.drift_checked = Some(std::time::Instant::now());
            if self.state.holding {
                let r = self.backend.recheck(cx.journal, cx.fx, &plan.members)?;
                for n in &r.notes {
                    tracing::info!("{n}");
                }
                if !r.notes.is_empty() {
                    (cx.events)("qos_reconciled", serde_json::to_value(&r).unwrap_or_default());
                }
            }
            for d in self.backend.drift(cx.fx) {
                tracing::warn!(
                    "{} {} was set to {} by joule and is now {}: someone else changed it; joule leaves it to them until the config changes",
                    d.unit,
                    d.property,
                    d.set,
                    d.found
                );
                *self.state.drift_total.entry(format!("{} {}", d.unit, d.property)).or_default() += 1;
                (cx.events)("unit_drift", serde_json::to_value(&d).unwrap_or_default());
            }
        }
        let mut changed = Vec::new();
        for h in plan.knobs_of(owner::CGROUP_CPU) {
            let Knob::ClassCpuCap { class } = &h.knob else { continue };
            let pct = match h.setting {
                Setting::CpuPct(p) => p,
                _ => 100.0,
            };
            if self.backend.set_cap(cx.journal, cx.fx, class, pct)? {
                changed.push(class.clone());
            }
        }
        self.state.caps = self.backend.caps();
        self.state.pods = self.backend.pods();
        if !changed.is_empty() {
            let caps: serde_json::Map<_, _> = changed.iter().filter_map(|c| Some((c.clone(), serde_json::to_value(self.state.caps.get(c)?).ok()?))).collect();
            tracing::info!("thermal caps changed: {}", serde_json::Value::Object(caps.clone()));
            (cx.events)("class_caps", serde_json::Value::Object(caps));
        }
        Ok(())
    }

    fn state(&self) -> Arc<dyn ActuatorState> {
        Arc::new(self.state.clone())
    }

    fn shutdown(&mut self, cx: &mut ActCx<'_>) -> Result<(), ActError> {
        let r = self.backend.release(cx.journal, cx.fx)?;
        if !r.failed.is_empty() {
            return Err(format!("could not undo {} class change(s): {:?}", r.failed.len(), r.failed).into());
        }
        Ok(())
    }
}

#[cfg(test)]
#[path = "cgroup_cpu_tests.rs"]
mod tests;
