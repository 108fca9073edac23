//! The deadline backend's rules: what SCHED_DEADLINE itself refuses (its period bounds; a
//! thread whose affinity does not span its root domain) and its bandwidth, which the kernel
//! admits per root domain (`__dl_overflow()`: every reservation together within
//! `sched_rt_runtime_us/sched_rt_period_us` of each CPU, the fair server's included).

use super::refusal;
use crate::admission::{AdmissionEnv, DeadlineOffer, DlBw, Plan, Refusal, Rule};

/// Refused (`DeadlineBadParams`) when the period is outside the kernel's
/// `sched_deadline_period_{min,max}_us` or the runtime is under the 1024 ns the kernel
/// requires (`__checkparam_dl()`), or no thread is to be reserved.
pub(crate) fn deadline_bad_params(class: &str, dl: DlBw, offer: &DeadlineOffer) -> Option<Refusal> {
    let why = if !(offer.period_min_us..=offer.period_max_us).contains(&dl.period_us) {
        format!("rt_period_us = {} is outside the kernel's SCHED_DEADLINE periods {}..={} µs", dl.period_us, offer.period_min_us, offer.period_max_us)
    } else if dl.runtime_us < 2 {
        format!("rt_runtime_us = {} is under the kernel's SCHED_DEADLINE minimum (1024 ns)", dl.runtime_us)
    } else if dl.threads == 0 {
        "rt_threads = 0 reserves nothing".into()
    } else {
        return None;
    };
    Some(refusal(Rule::DeadlineBadParams, vec![class.into()], format!("class {class}: {why}")))
}

/// Refused (`DeadlineNeedsRootDomain`) when a deadline class may use only some of the
/// machine's CPUs: the kernel refuses SCHED_DEADLINE (EPERM) for a thread whose affinity does
/// not span its root domain, and confining it later fails (EBUSY). An exclusive cpuset
/// partition would make those CPUs a root domain of their own; joule does not make one, so
/// such a class is refused rather than applied half-way.
pub(crate) fn deadline_needs_root_domain(class: &str, cpus: &[usize], machine: &[usize]) -> Option<Refusal> {
    (cpus != machine).then(|| {
        refusal(
            Rule::DeadlineNeedsRootDomain,
            vec![class.into()],
            format!(
                "class {class}: cpus {} on the deadline backend: a SCHED_DEADLINE thread must be free to run on every CPU of its root domain ({}); drop `cpus` (the reservation already guarantees its runtime wherever it runs), or use a kernel with RT group scheduling",
                crate::cpulist::format(cpus),
                crate::cpulist::format(machine)
            ),
        )
    })
}

/// Refused (`DeadlineOverBudget`) when the deadline classes' reservations together (runtime /
/// period × threads) exceed what the kernel admits on the machine's root domain: each CPU's
/// `sched_rt_runtime_us/sched_rt_period_us`, minus the fair server's share of each CPU.
/// Reservations other programs hold are not visible here; the kernel refuses a thread that no
/// longer fits (EBUSY), which the controller reports.
pub(crate) fn check_deadline_budget(plan: &mut Plan, env: &AdmissionEnv) {
    let dl: Vec<(String, DlBw)> = plan.classes.iter().filter_map(|c| Some((c.name.clone(), c.dl?))).collect();
    if dl.is_empty() {
        return;
    }
    let n = env.cpus.len();
    let budget = env.deadline_budget(n);
    let sum: f64 = dl.iter().map(|(_, d)| d.total()).sum();
    let terms = dl.iter().map(|(c, d)| format!("{c} {}/{} × {}", d.runtime_us, d.period_us, d.threads)).collect::<Vec<_>>().join(" + ");
    let how = format!(
        "({} global RT limit − {} fair server [{}]) × {n} CPU(s)",
        super::super::pct(env.global_rt_ratio()),
        super::super::pct(env.deadline.fair_server_ratio()),
        env.deadline.fair_server_source
    );
    plan.arithmetic.push(format!("SCHED_DEADLINE: {terms} = {sum:.4} CPU(s) of {budget:.4} = {how}"));
    if sum > budget + 1e-9 {
        plan.refusals.push(refusal(
            Rule::DeadlineOverBudget,
            dl.into_iter().map(|(c, _)| c).collect(),
            format!("SCHED_DEADLINE reservations {terms} = {sum:.4} CPU(s) exceed the kernel's deadline bandwidth {budget:.4} = {how}: lower a runtime or rt_threads"),
        ));
    }
}
