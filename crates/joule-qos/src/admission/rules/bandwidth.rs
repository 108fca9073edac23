//! One class's bandwidth knobs on their own: the kernel's limits on each number, the seed's
//! smallest useful period, and what becomes of RT bandwidth where the kernel has none.

use super::refusal;
use crate::admission::{CfsBw, Refusal, RtBw, Rule, DEFAULT_CFS_PERIOD_US};
use joule_core::config::ClassConfig;

/// Whose period is below the minimum: the messages name the knob, and for RT offer the same
/// ratio at the minimum period.
#[derive(Debug, Clone, Copy)]
pub(crate) enum PeriodOf {
    Rt { runtime_us: u64 },
    Cfs,
}

/// Refused (`RuntimeOverPeriod`) when `rt_runtime_us` exceeds `rt_period_us`, or the period is
/// 0: the kernel gives no group more runtime than its period ("Cannot have more runtime than
/// the period", `tg_rt_schedulable()` in kernel/sched/rt.c, EINVAL). The class is then skipped:
/// nothing after this has a ratio to work with.
pub(crate) fn runtime_over_period(class: &str, runtime_us: u64, period_us: u64) -> Option<Refusal> {
    (period_us == 0 || runtime_us > period_us).then(|| {
        refusal(Rule::RuntimeOverPeriod, vec![class.into()], format!("class {class}: rt_runtime_us = {runtime_us} exceeds rt_period_us = {period_us}"))
    })
}

/// Refused (`PeriodBelowMinimum`) when an RT or CFS period is below `min_period_us` (default
/// 100 ms, `crate::DEFAULT_MIN_PERIOD_US`): the seed measured CPU lost to scheduling overhead
/// with shorter periods on its board. The kernel would accept them.
pub(crate) fn period_below_minimum(class: &str, of: PeriodOf, period_us: u64, min_period_us: u64) -> Option<Refusal> {
    if period_us >= min_period_us {
        return None;
    }
    let message = match of {
        PeriodOf::Rt { runtime_us } => format!(
            "class {class}: rt_period_us = {period_us} µs is below the minimum {min_period_us} µs (small periods cost CPU in scheduling overhead — the seed's finding; keep the ratio and use rt_runtime_us = {} / rt_period_us = {min_period_us}, or lower min_period_us)",
            (runtime_us as u128 * min_period_us as u128 / period_us as u128),
        ),
        PeriodOf::Cfs => format!("class {class}: period_us = {period_us} µs is below the minimum {min_period_us} µs"),
    };
    Some(refusal(Rule::PeriodBelowMinimum, vec![class.into()], message))
}

/// Refused (`BadConfig`) when a CFS period is outside 1000..=1000000 µs: the kernel's own
/// bounds (`min_cfs_quota_period` 1 ms, `max_cfs_quota_period` 1 s, checked by
/// `tg_set_cfs_bandwidth()` in kernel/sched/core.c, EINVAL).
pub(crate) fn cfs_period_outside_kernel_range(class: &str, period_us: u64) -> Option<Refusal> {
    (!(1000..=1_000_000).contains(&period_us))
        .then(|| refusal(Rule::BadConfig, vec![class.into()], format!("class {class}: period_us = {period_us} is outside the kernel's 1000..=1000000 µs")))
}

/// Refused (`BadConfig`) when a CFS quota is below 1000 µs: the kernel's
/// `min_cfs_quota_period` (1 ms) bounds the quota too (`tg_set_cfs_bandwidth()`, EINVAL).
pub(crate) fn cfs_quota_below_kernel_minimum(class: &str, quota_us: u64) -> Option<Refusal> {
    (quota_us < 1000)
        .then(|| refusal(Rule::BadConfig, vec![class.into()], format!("class {class}: quota_us = {quota_us} is below the kernel's 1000 µs minimum")))
}

/// Refused (`BadConfig`) when a weight is outside 1..=10000: cgroup v2's `cpu.weight` range
/// (`CGROUP_WEIGHT_MIN`/`MAX`); v1's `cpu.shares` is derived from the same number.
pub(crate) fn weight_outside_range(class: &str, weight: Option<u64>) -> Option<Refusal> {
    let w = weight.filter(|w| !(1..=10_000).contains(w))?;
    Some(refusal(Rule::BadConfig, vec![class.into()], format!("class {class}: weight = {w} is outside 1..=10000")))
}

/// RT bandwidth `rt` of class `c` on `k` CPUs as its CFS equivalent: the same CPU time per
/// CPU over the k CPUs as one group quota. It caps the class but guarantees it no floor, so it
/// is used only when `allowed` (the CFS backend was chosen, and the class sets no quota of its
/// own), with a note saying so (`Ok((quota, note))`). Otherwise refused (`NoRtGroupSched`):
/// `why` says why no RT mechanism is there, and the message offers the equivalent.
pub(crate) fn rt_fallback_to_cfs(c: &ClassConfig, rt: RtBw, k: usize, allowed: bool, why: &str) -> Result<(CfsBw, String), Refusal> {
    let RtBw { runtime_us: runtime, period_us: period } = rt;
    let cfs_period = c.period_us.unwrap_or(DEFAULT_CFS_PERIOD_US);
    let quota = (runtime as u128 * k as u128 * cfs_period as u128 / period as u128) as u64;
    let offer = format!(
        "quota_us = {quota} / period_us = {cfs_period} (= rt_runtime_us {runtime} / rt_period_us {period} × {k} CPU(s)); a CFS quota caps the class but does not guarantee it a floor"
    );
    if allowed && c.quota_us.is_none() {
        let note = format!("class {}: {why}; using the CFS equivalent {offer}", c.name);
        Ok((CfsBw { quota_us: quota.max(1000), period_us: cfs_period, burst_us: c.burst_us }, note))
    } else {
        Err(refusal(
            Rule::NoRtGroupSched,
            vec![c.name.clone()],
            format!("class {}: {why}; the CFS equivalent is {offer} (set it, or use --rt-backend cfs)", c.name),
        ))
    }
}
