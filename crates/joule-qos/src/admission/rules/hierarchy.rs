//! Nested classes: what a child may ask of its parent, and what siblings together may ask
//! (cgroup v1 RT bandwidth, where the kernel adds siblings up machine-wide).

use super::refusal;
use crate::admission::{pct, AdmissionEnv, CfsBw, ClassPlan, Plan, Refusal, RtBw, Rule};
use std::collections::BTreeMap;

/// Refused (`ChildExceedsParent`) when a child's RT runtime/period exceeds its parent's, or it
/// asks RT runtime under a parent that has none (0 %): the kernel's "The sum of our children's
/// runtime should not exceed our own" (`tg_rt_schedulable()` in kernel/sched/rt.c, EINVAL),
/// which one child alone already breaks.
pub(crate) fn child_rt_exceeds_parent(child: &str, rt: Option<RtBw>, parent: &ClassPlan) -> Option<Refusal> {
    let mine = rt?.ratio();
    let message = match parent.rt.map(|r| r.ratio()) {
        Some(theirs) if mine > theirs + 1e-12 => format!("class {child} asks RT {} but its parent {} has only {}", pct(mine), parent.name, pct(theirs)),
        Some(_) => return None,
        None => format!("class {child} asks RT {} but its parent {} has no RT runtime (0 %)", pct(mine), parent.name),
    };
    Some(refusal(Rule::ChildExceedsParent, vec![child.into(), parent.name.clone()], message))
}

/// Refused (`ChildExceedsParent`) when a child's CFS quota/period exceeds its capped parent's:
/// cgroup v1 refuses it (`tg_cfs_schedulable_down()` in kernel/sched/core.c, EINVAL), and v2
/// silently holds the child to its parent's quota, so its expected share would be wrong.
pub(crate) fn child_cfs_exceeds_parent(child: &str, cfs: Option<CfsBw>, parent: &ClassPlan) -> Option<Refusal> {
    let (mine, theirs) = (cfs?.ratio(), parent.cfs?.ratio());
    (mine > theirs + 1e-12).then(|| {
        refusal(
            Rule::ChildExceedsParent,
            vec![child.into(), parent.name.clone()],
            format!("class {child} asks a CFS quota of {} of a CPU but its parent {} is capped at {}", pct(mine), parent.name, pct(theirs)),
        )
    })
}

/// RT classes with the same parent (`None`: the top-level classes), each with its
/// runtime/period.
pub(crate) struct Siblings {
    pub parent: Option<String>,
    pub kids: Vec<(String, f64)>,
}

impl Siblings {
    fn sum(&self) -> f64 {
        self.kids.iter().map(|k| k.1).sum()
    }

    /// "a 0.3000 + b 0.2000": the ratios as they are added.
    fn terms(&self) -> String {
        self.kids.iter().map(|(n, r)| format!("{n} {r:.4}")).collect::<Vec<_>>().join(" + ")
    }
}

/// The RT classes of `classes` grouped by parent, top-level ones first, then by parent name.
fn rt_siblings(classes: &[ClassPlan]) -> Vec<Siblings> {
    let mut groups: BTreeMap<Option<String>, Vec<(String, f64)>> = BTreeMap::new();
    for c in classes {
        if let Some(r) = c.rt {
            groups.entry(c.parent.clone()).or_default().push((c.name.clone(), r.ratio()));
        }
    }
    groups.into_iter().map(|(parent, kids)| Siblings { parent, kids }).collect()
}

/// The RT runtime/period children of `parent` may share, and how to say where it comes from.
/// Top-level classes live in the joule group, whose budget is the kernel's global limit minus
/// what other groups at its level already hold.
fn rt_budget(parent: Option<&str>, plan: &Plan, env: &AdmissionEnv) -> (f64, String) {
    match parent {
        None => {
            let (global, budget) = (env.global_rt_ratio(), env.global_rt_ratio() - env.others_rt_ratio);
            let what = format!(
                "the joule group's budget {budget:.4} (kernel.sched_rt_runtime_us/sched_rt_period_us = {}/{} = {global:.4}, minus {:.4} held by other groups)",
                env.global_rt_runtime_us, env.global_rt_period_us, env.others_rt_ratio
            );
            (budget, what)
        }
        Some(p) => {
            let r = plan.class(p).and_then(|x| x.rt).map(|r| r.ratio()).unwrap_or(0.0);
            (r, format!("parent {p}'s {r:.4}"))
        }
    }
}

/// Refused (`V1SiblingsExceedParent`) when the siblings' RT runtime/period sum to more than
/// their parent's `budget` (described by `what`). The kernel's same check
/// (`tg_rt_schedulable()`, kernel/sched/rt.c) adds the ratios machine-wide on cgroup v1,
/// whatever the cpusets: classes on different CPUs still share one budget. Only where RT
/// group bandwidth exists (`rt_group_sched`).
pub(crate) fn v1_siblings_exceed_parent(s: &Siblings, budget: f64, what: &str, rt_group_sched: bool) -> Option<Refusal> {
    let sum = s.sum();
    (sum > budget + 1e-9 && rt_group_sched).then(|| {
        refusal(
            Rule::V1SiblingsExceedParent,
            s.kids.iter().map(|k| k.0.clone()).chain(s.parent.clone()).collect(),
            format!("RT runtime/period {} = {sum:.4} exceeds {what}; cgroup v1 checks this sum machine-wide, whatever the cpusets", s.terms()),
        )
    })
}

/// Every group of RT siblings against its parent's budget: one arithmetic line each, and
/// the refusal where they exceed it.
pub(crate) fn check_rt_siblings(plan: &mut Plan, env: &AdmissionEnv) {
    for s in rt_siblings(&plan.classes) {
        let (budget, what) = rt_budget(s.parent.as_deref(), plan, env);
        let whose = s.parent.as_deref().map(|p| format!("children of {p}")).unwrap_or("top-level classes".into());
        plan.arithmetic.push(format!("RT runtime/period of {whose}: {} = {:.4} ≤ {budget:.4}?", s.terms(), s.sum()));
        plan.refusals.extend(v1_siblings_exceed_parent(&s, budget, &what, env.rt_group_sched));
    }
}
