//! One class through admission: where it runs, its bandwidth (each knob through its rules),
//! what it should get, and whether its parent can give it that.

use super::share::{self, Share};
use super::{rules, AdmissionEnv, CfsBw, ClassPlan, DlBw, Plan, RtBackend, RtBw, DEFAULT_CFS_PERIOD_US, DEFAULT_RT_PERIOD_US};
use joule_core::config::ClassConfig;
use rules::PeriodOf;

/// Admits class `c` (its parent, if admitted, is already in `plan`). Refusals, notes and the
/// arithmetic go to `plan`; the class's plan is returned unless a refusal leaves nothing to
/// plan (CPUs it cannot have, an RT runtime longer than its period).
pub(super) fn admit_class(c: &ClassConfig, env: &AdmissionEnv, plan: &mut Plan) -> Option<ClassPlan> {
    let parent = c.parent.as_deref().and_then(|p| plan.class(p)).cloned();
    let cpus = match rules::class_cpus(c, parent.as_ref(), &env.cpus) {
        Ok(cpus) => cpus,
        Err(refusal) => {
            plan.refusals.push(refusal);
            return None;
        }
    };
    let got = match c.rt_runtime_us {
        Some(runtime_us) => rt_bandwidth(c, runtime_us, &cpus, env, plan)?,
        None => RtGot::default(),
    };
    let rt = got.rt;
    let cfs = match c.quota_us {
        Some(quota_us) => Some(cfs_bandwidth(c, quota_us, env, plan)),
        None => got.cfs,
    };
    plan.refusals.extend(rules::weight_outside_range(&c.name, c.weight));

    let Share { kind, per_cpu, arithmetic } = share::expected(&c.name, rt, cfs, got.dl, &cpus, env);
    plan.arithmetic.extend(arithmetic);
    if let Some(p) = &parent {
        plan.refusals.extend(rules::child_rt_exceeds_parent(&c.name, rt, p));
        plan.refusals.extend(rules::child_cfs_exceeds_parent(&c.name, cfs, p));
    }
    Some(ClassPlan {
        name: c.name.clone(),
        parent: c.parent.clone(),
        cpus,
        rt,
        cfs,
        dl: got.dl,
        rt_backend: got.backend,
        rt_why: got.why,
        weight: c.weight,
        kind,
        thermal_capped: c.thermal == joule_core::config::ThermalRole::BestEffort,
        idle: c.idle(),
        expected_pct: per_cpu.values().sum(),
        expected_pct_per_cpu: per_cpu,
    })
}

/// What a class's RT bandwidth becomes on this kernel: RT group bandwidth, per-thread
/// deadline reservations, or the CFS equivalent (none of them when refused), and why.
#[derive(Default)]
struct RtGot {
    rt: Option<RtBw>,
    cfs: Option<CfsBw>,
    dl: Option<DlBw>,
    backend: Option<RtBackend>,
    why: Option<String>,
}

/// The class's RT bandwidth on `cpus`, through the mechanism `env.rt_choice` picks.
/// `None` when the runtime does not fit its period: the class is skipped.
fn rt_bandwidth(c: &ClassConfig, runtime_us: u64, cpus: &[usize], env: &AdmissionEnv, plan: &mut Plan) -> Option<RtGot> {
    let period_us = c.rt_period_us.unwrap_or(DEFAULT_RT_PERIOD_US);
    if let Some(refusal) = rules::runtime_over_period(&c.name, runtime_us, period_us) {
        plan.refusals.push(refusal);
        return None;
    }
    plan.refusals.extend(rules::period_below_minimum(&c.name, PeriodOf::Rt { runtime_us }, period_us, env.min_period_us));
    let rt = RtBw { runtime_us, period_us };
    let k = cpus.len();
    let (backend, why) = match env.rt_choice() {
        Ok(choice) => choice,
        Err(why) => {
            plan.refusals.push(rules::rt_fallback_to_cfs(c, rt, k, false, &why).expect_err("refused when not allowed"));
            return Some(RtGot { why: Some(why), ..RtGot::default() });
        }
    };
    let mut got = RtGot { backend: Some(backend), why: Some(why.clone()), ..RtGot::default() };
    match backend {
        RtBackend::Group => got.rt = Some(rt),
        RtBackend::Cfs => match rules::rt_fallback_to_cfs(c, rt, k, true, &why) {
            Ok((cfs, note)) => {
                plan.notes.push(note);
                got.cfs = Some(cfs);
            }
            Err(refusal) => plan.refusals.push(refusal),
        },
        RtBackend::Deadline => {
            let dl = DlBw { runtime_us, period_us, threads: c.rt_threads.unwrap_or(k as u32) };
            plan.refusals.extend(rules::deadline_bad_params(&c.name, dl, &env.deadline));
            plan.refusals.extend(rules::deadline_needs_root_domain(&c.name, cpus, &env.cpus));
            got.dl = Some(dl);
        }
    }
    Some(got)
}

/// The class's CFS quota, with every rule on its numbers applied (none skips the class).
fn cfs_bandwidth(c: &ClassConfig, quota_us: u64, env: &AdmissionEnv, plan: &mut Plan) -> CfsBw {
    let period_us = c.period_us.unwrap_or(DEFAULT_CFS_PERIOD_US);
    plan.refusals.extend(rules::period_below_minimum(&c.name, PeriodOf::Cfs, period_us, env.min_period_us));
    plan.refusals.extend(rules::cfs_period_outside_kernel_range(&c.name, period_us));
    plan.refusals.extend(rules::cfs_quota_below_kernel_minimum(&c.name, quota_us));
    CfsBw { quota_us, period_us, burst_us: c.burst_us }
}
