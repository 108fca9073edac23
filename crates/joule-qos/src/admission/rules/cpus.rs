//! Where a class may run: its CPU list must parse and stay within its parent's CPUs (or the
//! machine's, for a top-level class).

use super::refusal;
use crate::admission::{ClassPlan, Refusal, Rule};
use crate::cpulist;
use joule_core::config::ClassConfig;

/// The CPUs class `c` runs on: its `cpus` list, or all its parent's (the machine's, `machine`,
/// for a top-level class) when it gives none.
///
/// Refused (`BadCpus`) when the list is not the kernel's CPU list syntax, or names a CPU its
/// parent (or the machine) does not have: a cgroup v1 cpuset must be a subset of its parent's
/// ("On legacy hierarchy, we must be a subset of our parent cpuset", kernel/cgroup/cpuset-v1.c,
/// EACCES), and on v2 a CPU the class cannot have would make its expected share a promise
/// nobody keeps.
pub(crate) fn class_cpus(c: &ClassConfig, parent: Option<&ClassPlan>, machine: &[usize]) -> Result<Vec<usize>, Refusal> {
    let allowed = parent.map(|p| p.cpus.as_slice()).unwrap_or(machine);
    let cpus = match &c.cpus {
        None => return Ok(allowed.to_vec()),
        Some(list) => match cpulist::parse(list) {
            Some(v) if !v.is_empty() => v,
            _ => return Err(refusal(Rule::BadCpus, vec![c.name.clone()], format!("class {}: cpus = {list:?} is not a CPU list", c.name))),
        },
    };
    match cpus.iter().find(|x| !allowed.contains(x)) {
        None => Ok(cpus),
        Some(bad) => {
            let whose = parent.map(|p| format!("its parent {}", p.name)).unwrap_or_else(|| "the machine".into());
            Err(refusal(
                Rule::BadCpus,
                vec![c.name.clone()],
                format!("class {}: CPU {bad} is not among the CPUs of {whose} ({})", c.name, cpulist::format(allowed)),
            ))
        }
    }
}
