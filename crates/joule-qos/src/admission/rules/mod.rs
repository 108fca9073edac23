//! The admission rules, one function each. Every rule takes the numbers it judges and
//! returns the refusal, if any; its doc comment says what it refuses and where the rule comes
//! from (the seed paper, or the kernel check it anticipates, so that the kernel never gets to
//! say EINVAL half-way through an apply). `admit` decides which rules apply to what.
//!
//! - `cpus`: where a class may run (its list parses, within its parent's CPUs);
//! - `bandwidth`: one class's knobs (runtime ≤ period, the minimum period, the kernel's CFS
//!   bounds, the weight's range, RT bandwidth where the kernel has none);
//! - `hierarchy`: a child against its parent, siblings' RT sum against their parent (v1);
//! - `cores`: the RT guarantees sharing a core, against 100 % and the global RT limit;
//! - `deadline`: SCHED_DEADLINE's own bounds, and the reservations against its bandwidth.

mod bandwidth;
mod cores;
mod cpus;
mod deadline;
mod hierarchy;
#[cfg(test)]
mod tests;

pub(super) use bandwidth::{
    cfs_period_outside_kernel_range, cfs_quota_below_kernel_minimum, period_below_minimum, rt_fallback_to_cfs, runtime_over_period, weight_outside_range,
    PeriodOf,
};
pub(super) use cores::check_cores;
pub(super) use cpus::class_cpus;
pub(super) use deadline::{check_deadline_budget, deadline_bad_params, deadline_needs_root_domain};
pub(super) use hierarchy::{check_rt_siblings, child_cfs_exceeds_parent, child_rt_exceeds_parent};

use super::{Refusal, Rule};

/// A refusal by `rule` of `classes`, explained by `message`.
pub(super) fn refusal(rule: Rule, classes: Vec<String>, message: String) -> Refusal {
    Refusal { rule, classes, message }
}
