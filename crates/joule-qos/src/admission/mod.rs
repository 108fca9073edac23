//! Admission control: pure arithmetic over the classes, before anything is written.
//!
//! The seed (Teshigawara et al., Mitsubishi Electric) measured on a 2-core PandaBoard that a
//! group's CPU use ≈ rt_runtime/rt_period × 100 × ncores %, and that groups sharing a core must
//! sum to ≤ 100 % or the shares come out wrong. The × ncores came from RT runtime *borrowing*
//! (`RT_RUNTIME_SHARE`, on by default then): a group pinned to one core borrowed the unused
//! runtime of its other per-CPU run queues. Kernels since 5.10 disable borrowing, so joule's
//! model is the seed's formula adapted: a group pinned to k CPUs gets runtime/period of each of
//! them, i.e. runtime/period × 100 × k % (top-style, 100 % = one CPU). With `rt_borrowing` set
//! the seed's own formula is used instead (per CPU: min(1, runtime/period × ncpus)).
//!
//! Where the kernel has no RT group scheduling, an RT class gets per-thread SCHED_DEADLINE
//! reservations instead (`env::AdmissionEnv::rt_choice` says which and why), admitted against
//! the kernel's deadline bandwidth minus the fair server's.
//!
//! Refused: a per-core sum over 100 % or over the kernel's global RT limit
//! (`sched_rt_runtime_us / sched_rt_period_us`), a child asking more than its parent, a period
//! below the minimum, and (cgroup v1) RT runtime of siblings exceeding their parent's — the
//! kernel checks that machine-wide, not per CPU.
//!
//! Laid out as: `env` (what admission knows of the machine), `plan` (what it produces),
//! `class` (one class's walk), `share` (the expected shares, with or without borrowing),
//! `rules` (one function per refusal, each saying where the rule comes from) and `render`
//! (the plan as text).

mod class;
mod env;
mod plan;
mod render;
mod rules;
mod share;

pub use env::{AdmissionEnv, DeadlineOffer, RtBackend, DEFAULT_CFS_PERIOD_US, DEFAULT_RT_PERIOD_US};
pub use plan::{CfsBw, ClassPlan, CoreSum, DlBw, Plan, Refusal, RtBw, Rule, ShareKind};

use joule_core::config::ClassConfig;
use render::pct;

/// Runs admission over `classes` on a machine described by `env`: each class in turn,
/// parents before children, then what only the whole set can break (siblings' RT sums, the
/// per-core sums).
pub fn admit(classes: &[ClassConfig], env: &AdmissionEnv) -> Plan {
    let mut plan = Plan::empty(env);
    // Parents before children, so a child can inherit its parent's CPUs.
    let order = match parents_first(classes) {
        Ok(o) => o,
        Err(msg) => {
            plan.refusals.push(rules::refusal(Rule::BadConfig, vec![], msg));
            return plan;
        }
    };
    for i in order {
        if let Some(c) = class::admit_class(&classes[i], env, &mut plan) {
            plan.classes.push(c);
        }
    }
    rules::check_rt_siblings(&mut plan, env);
    rules::check_cores(&mut plan, env);
    rules::check_deadline_budget(&mut plan, env);
    plan
}

/// Indices of `classes` with every parent before its children; an error on cycles and on a
/// parent that is not a class.
fn parents_first(classes: &[ClassConfig]) -> Result<Vec<usize>, String> {
    let mut out = Vec::new();
    let mut state = vec![0u8; classes.len()];
    fn visit(i: usize, cs: &[ClassConfig], st: &mut [u8], out: &mut Vec<usize>) -> Result<(), String> {
        match st[i] {
            2 => return Ok(()),
            1 => return Err(format!("class {} is its own ancestor (parent cycle)", cs[i].name)),
            _ => {}
        }
        st[i] = 1;
        if let Some(p) = &cs[i].parent {
            let j = cs.iter().position(|c| &c.name == p).ok_or_else(|| format!("class {}: parent {p:?} is not a class", cs[i].name))?;
            visit(j, cs, st, out)?;
        }
        st[i] = 2;
        out.push(i);
        Ok(())
    }
    for i in 0..classes.len() {
        visit(i, classes, &mut state, &mut out)?;
    }
    Ok(out)
}

#[cfg(test)]
#[path = "../admission_tests.rs"]
mod tests;
