//! The class guarantees as the control loop's first actuator: `init` applies every class
//! (admission control already ran when it was built, so a refused config never starts),
//! `reconcile` keeps the classes in place while the plan asks to hold them (new matching tasks
//! moved in, deleted cgroups recreated) and holds best-effort classes to the thermal stage's
//! caps (`Want::CapClass`, the cgroup path), `shutdown` releases them through the journal.

use joule_qos::{QosController, QosError, QosOpts};
use joule_core::config::ClassConfig;
use joule_core::control::{ActCx, ActError, Actuator, Plan, Want};
use joule_core::control::owner;

pub struct ClassActuator {
    ctl: QosController,
    moved_total: u64,
    recreated_total: u64,
}

impl ClassActuator {
    /// Runs admission control on `classes` (nothing is written yet): a refusal is the user's
    /// to fix, with the arithmetic in the error.
    pub fn new(classes: &[ClassConfig], opts: QosOpts) -> Result<ClassActuator, QosError> {
        Ok(Self::with_controller(QosController::new(classes, opts)?))
    }

    pub fn with_controller(ctl: QosController) -> ClassActuator {
        ClassActuator { ctl, moved_total: 0, recreated_total: 0 }
    }
}

impl Actuator for ClassActuator {
    fn name(&self) -> &'static str {
        owner::CGROUP_CPU
    }

    fn init(&mut self, cx: &mut ActCx<'_>) -> Result<(), ActError> {
        let report = self.ctl.apply(cx.journal, cx.fx)?;
        tracing::info!("classes applied: {} cgroup(s) created, {} task(s) moved", report.created.len(), report.moved.len());
        (cx.events)("qos_applied", serde_json::to_value(&report).unwrap_or_default());
        Ok(())
    }

    fn reconcile(&mut self, plan: &Plan, cx: &mut ActCx<'_>) -> Result<serde_json::Value, ActError> {
        let hold = plan.for_actuator(owner::CGROUP_CPU).any(|d| matches!(d.want, Want::HoldClasses { .. }));
        if hold {
            let r = self.ctl.reconcile(cx.journal, cx.fx)?;
            if !r.moved.is_empty() || !r.recreated.is_empty() {
                self.moved_total += r.moved.len() as u64;
                self.recreated_total += r.recreated.len() as u64;
                (cx.events)("qos_reconciled", serde_json::to_value(&r).unwrap_or_default());
            }
        }
        let mut changed = Vec::new();
        for d in plan.for_actuator(owner::CGROUP_CPU) {
            if let Want::CapClass { class, cpu_pct } = &d.want {
                if self.ctl.set_cap(cx.journal, cx.fx, class, *cpu_pct)? {
                    changed.push(class.clone());
                }
            }
        }
        if !changed.is_empty() {
            let caps: serde_json::Map<_, _> = changed.iter().filter_map(|c| Some((c.clone(), serde_json::to_value(self.ctl.caps().get(c)?).ok()?))).collect();
            tracing::info!("thermal caps changed: {}", serde_json::Value::Object(caps.clone()));
            (cx.events)("class_caps", serde_json::Value::Object(caps));
        }
        Ok(serde_json::json!({
            "classes": self.ctl.plan().classes.len(),
            "caps": self.ctl.caps(),
            "holding": hold,
            "moved_total": self.moved_total,
            "recreated_total": self.recreated_total,
        }))
    }

    fn shutdown(&mut self, cx: &mut ActCx<'_>) -> Result<(), ActError> {
        let r = self.ctl.release(cx.journal, cx.fx)?;
        if !r.failed.is_empty() {
            return Err(format!("could not undo {} class change(s): {:?}", r.failed.len(), r.failed).into());
        }
        Ok(())
    }
}
