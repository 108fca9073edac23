//! The RT guarantees sharing one core: their sum against 100 % of it (the seed) and against
//! the kernel's global RT limit (each CPU's share of it).

use super::refusal;
use crate::admission::{AdmissionEnv, ClassPlan, CoreSum, Plan, Refusal, Rule, ShareKind};

/// Per core, the top-level RT guarantees on it and their sum (cores with none are left out).
/// Children are inside their parent's share, so only top-level classes add up.
fn core_sums(classes: &[ClassPlan], cpus: &[usize]) -> Vec<CoreSum> {
    cpus.iter()
        .filter_map(|&cpu| {
            let members: Vec<(String, f64)> = classes
                .iter()
                .filter(|c| c.parent.is_none() && c.kind == ShareKind::RtGuarantee)
                .filter_map(|c| c.expected_pct_per_cpu.get(&cpu).map(|p| (c.name.clone(), *p)))
                .collect();
            let rt_sum_pct = members.iter().map(|m| m.1).sum();
            (!members.is_empty()).then_some(CoreSum { cpu, rt_members: members, rt_sum_pct })
        })
        .collect()
}

/// "a 50.0% + b 47.0%": a core's members as they are added.
fn terms(core: &CoreSum) -> String {
    core.rt_members.iter().map(|(n, p)| format!("{n} {p:.1}%")).collect::<Vec<_>>().join(" + ")
}

fn members(core: &CoreSum) -> Vec<String> {
    core.rt_members.iter().map(|m| m.0.clone()).collect()
}

/// Refused (`CoreOver100`) when the RT guarantees sharing a core sum to more than 100 % of it:
/// the seed's Table 2 — groups sharing a core must sum to ≤ 100 % or the shares come out wrong.
pub(crate) fn core_over_100(core: &CoreSum) -> Option<Refusal> {
    let (cpu, sum) = (core.cpu, core.rt_sum_pct);
    (sum > 100.0 + 1e-9).then(|| {
        refusal(
            Rule::CoreOver100,
            members(core),
            format!(
                "core {cpu}: {} = {sum:.1}% > 100%: groups sharing a core must sum to ≤ 100% or the shares come out wrong (the seed's Table 2)",
                terms(core)
            ),
        )
    })
}

/// Refused (`CoreOverGlobalRt`) when a core's RT guarantees sum to more than the kernel's
/// global RT limit, `kernel.sched_rt_runtime_us / sched_rt_period_us` (95 % by default): no
/// CPU runs RT tasks longer than that per period (Documentation/scheduler/sched-rt-group.rst,
/// "System wide settings"), so the rest of a larger sum is never delivered.
pub(crate) fn core_over_global_rt(core: &CoreSum, env: &AdmissionEnv) -> Option<Refusal> {
    let (cpu, sum, global) = (core.cpu, core.rt_sum_pct, env.global_rt_ratio());
    (sum > global * 100.0 + 1e-9).then(|| {
        refusal(
            Rule::CoreOverGlobalRt,
            members(core),
            format!(
                "core {cpu}: {} = {sum:.1}% > {:.1}%, the kernel's global RT limit (sched_rt_runtime_us/sched_rt_period_us = {}/{})",
                terms(core),
                global * 100.0,
                env.global_rt_runtime_us,
                env.global_rt_period_us
            ),
        )
    })
}

/// Every core with RT guarantees: its arithmetic line, at most one refusal (over 100 % says
/// more than over the global limit), and its sum in `plan.cores`.
pub(crate) fn check_cores(plan: &mut Plan, env: &AdmissionEnv) {
    for core in core_sums(&plan.classes, &env.cpus) {
        plan.arithmetic.push(format!("core {}: {} = {:.1}%", core.cpu, terms(&core), core.rt_sum_pct));
        plan.refusals.extend(core_over_100(&core).or_else(|| core_over_global_rt(&core, env)));
        plan.cores.push(core);
    }
}
