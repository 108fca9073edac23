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
//! Refused: a per-core sum over 100 % or over the kernel's global RT limit
//! (`sched_rt_runtime_us / sched_rt_period_us`), a child asking more than its parent, a period
//! below the minimum, and (cgroup v1) RT runtime of siblings exceeding their parent's — the
//! kernel checks that machine-wide, not per CPU.

use joule_core::config::ClassConfig;
use serde::Serialize;
use std::collections::BTreeMap;

/// Kernel default RT period, used when a class gives a runtime without a period.
pub const DEFAULT_RT_PERIOD_US: u64 = 1_000_000;
/// Kernel default CFS period.
pub const DEFAULT_CFS_PERIOD_US: u64 = 100_000;

/// What admission needs to know about the machine. Tests build it by hand; the controller
/// reads it from the cgroup and proc trees.
#[derive(Debug, Clone, Serialize)]
pub struct AdmissionEnv {
    /// CPUs classes may use (the root cpuset), ascending.
    pub cpus: Vec<usize>,
    /// `kernel.sched_rt_runtime_us`; negative = unlimited.
    pub global_rt_runtime_us: i64,
    pub global_rt_period_us: u64,
    /// RT ratio already granted to groups outside joule at joule's level (v1 siblings).
    pub others_rt_ratio: f64,
    pub min_period_us: u64,
    /// The chosen hierarchy has `cpu.rt_runtime_us` (v1 with RT_GROUP_SCHED).
    pub rt_group_sched: bool,
    /// RT runtime borrowing between CPUs (`RT_RUNTIME_SHARE`), as on the seed's kernel.
    pub rt_borrowing: bool,
    /// Translate RT bandwidth into a CFS quota where RT group bandwidth does not exist,
    /// instead of refusing.
    pub rt_fallback_to_cfs: bool,
}

impl AdmissionEnv {
    /// This machine's shape with the defaults joule assumes until it has read the kernel.
    pub fn new(ncpus: usize) -> Self {
        Self {
            cpus: (0..ncpus).collect(),
            global_rt_runtime_us: 950_000,
            global_rt_period_us: 1_000_000,
            others_rt_ratio: 0.0,
            min_period_us: crate::DEFAULT_MIN_PERIOD_US,
            rt_group_sched: true,
            rt_borrowing: false,
            rt_fallback_to_cfs: false,
        }
    }

    /// The global RT limit as a fraction of each CPU.
    pub fn global_rt_ratio(&self) -> f64 {
        if self.global_rt_runtime_us < 0 {
            1.0
        } else {
            self.global_rt_runtime_us as f64 / self.global_rt_period_us as f64
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ShareKind {
    /// RT bandwidth: the class's RT tasks are guaranteed (and limited to) the share.
    RtGuarantee,
    /// CFS quota: a ceiling, not a floor.
    CfsCap,
    /// Only a weight or a cpuset: relative, no number to expect.
    Relative,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct RtBw {
    pub runtime_us: u64,
    pub period_us: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct CfsBw {
    pub quota_us: u64,
    pub period_us: u64,
    pub burst_us: Option<u64>,
}

/// One class after admission: what will be configured and what it should get.
#[derive(Debug, Clone, Serialize)]
pub struct ClassPlan {
    pub name: String,
    pub parent: Option<String>,
    pub cpus: Vec<usize>,
    pub rt: Option<RtBw>,
    pub cfs: Option<CfsBw>,
    pub weight: Option<u64>,
    pub kind: ShareKind,
    /// Expected share of each of its CPUs, in % of that CPU.
    pub expected_pct_per_cpu: BTreeMap<usize, f64>,
    /// Sum over its CPUs, top-style (100 % = one CPU): the seed's "CPU 使用率".
    pub expected_pct: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct CoreSum {
    pub cpu: usize,
    /// (class, % of this CPU) for top-level RT classes on it.
    pub rt_members: Vec<(String, f64)>,
    pub rt_sum_pct: f64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Rule {
    CoreOver100,
    CoreOverGlobalRt,
    PeriodBelowMinimum,
    ChildExceedsParent,
    V1SiblingsExceedParent,
    RuntimeOverPeriod,
    NoRtGroupSched,
    BadCpus,
    BadConfig,
}

#[derive(Debug, Clone, Serialize)]
pub struct Refusal {
    pub rule: Rule,
    pub classes: Vec<String>,
    pub message: String,
}

/// The arithmetic and the verdict. `writes` is filled by the controller (backend-specific).
#[derive(Debug, Clone, Serialize)]
pub struct Plan {
    pub env: AdmissionEnv,
    pub classes: Vec<ClassPlan>,
    pub cores: Vec<CoreSum>,
    /// Human-readable arithmetic, one line per step.
    pub arithmetic: Vec<String>,
    pub refusals: Vec<Refusal>,
    pub notes: Vec<String>,
    pub writes: Vec<crate::backend::PlannedWrite>,
}

impl Plan {
    pub fn admitted(&self) -> bool {
        self.refusals.is_empty()
    }

    pub fn class(&self, name: &str) -> Option<&ClassPlan> {
        self.classes.iter().find(|c| c.name == name)
    }

    /// One message listing every refusal (empty when admitted).
    pub fn refusal_text(&self) -> String {
        self.refusals.iter().map(|r| format!("  - {}", r.message)).collect::<Vec<_>>().join("\n")
    }

    /// The plan as text: arithmetic, per-core sums, verdict, writes.
    pub fn render(&self) -> String {
        let mut s = String::new();
        s.push_str("expected shares (% of each CPU; top-style total, 100 % = one CPU):\n");
        for c in &self.classes {
            let per: Vec<String> = c.expected_pct_per_cpu.iter().map(|(k, v)| format!("cpu{k} {v:.1}%")).collect();
            s.push_str(&format!("  {:<16} {:?}  {}  total {:.1}%\n", c.name, c.kind, per.join(", "), c.expected_pct));
        }
        s.push_str("arithmetic:\n");
        for a in &self.arithmetic {
            s.push_str(&format!("  {a}\n"));
        }
        for n in &self.notes {
            s.push_str(&format!("note: {n}\n"));
        }
        if self.admitted() {
            s.push_str("verdict: ADMITTED\n");
        } else {
            s.push_str(&format!("verdict: REFUSED\n{}\n", self.refusal_text()));
        }
        if !self.writes.is_empty() {
            s.push_str(if self.admitted() { "writes, in order:\n" } else { "writes it would make if admitted (none made):\n" });
            for w in self.writes.iter().filter(|w| !matches!(w.0, crate::backend::Step::Barrier { .. })) {
                s.push_str(&format!("  {}\n", w));
            }
        }
        s
    }
}

fn pct(x: f64) -> String {
    format!("{:.1}%", x * 100.0)
}

/// Runs admission over `classes` on a machine described by `env`.
pub fn admit(classes: &[ClassConfig], env: &AdmissionEnv) -> Plan {
    let mut plan = Plan {
        env: env.clone(),
        classes: Vec::new(),
        cores: Vec::new(),
        arithmetic: Vec::new(),
        refusals: Vec::new(),
        notes: Vec::new(),
        writes: Vec::new(),
    };
    let refuse = |plan: &mut Plan, rule: Rule, classes: Vec<String>, message: String| {
        plan.refusals.push(Refusal { rule, classes, message });
    };
    let global = env.global_rt_ratio();
    let ncpus = env.cpus.len().max(1);

    // Parents before children, so a child can inherit its parent's CPUs.
    let order = match topo_order(classes) {
        Ok(o) => o,
        Err(msg) => {
            refuse(&mut plan, Rule::BadConfig, vec![], msg);
            return plan;
        }
    };

    for &i in &order {
        let c = &classes[i];
        let parent_plan = c.parent.as_deref().and_then(|p| plan.classes.iter().find(|x| x.name == p).cloned());
        let allowed = parent_plan.as_ref().map(|p| p.cpus.clone()).unwrap_or_else(|| env.cpus.clone());
        let cpus = match &c.cpus {
            None => allowed.clone(),
            Some(list) => match crate::cpulist::parse(list) {
                Some(v) if !v.is_empty() => v,
                _ => {
                    refuse(&mut plan, Rule::BadCpus, vec![c.name.clone()], format!("class {}: cpus = {list:?} is not a CPU list", c.name));
                    continue;
                }
            },
        };
        if let Some(bad) = cpus.iter().find(|x| !allowed.contains(x)) {
            let whose = parent_plan.as_ref().map(|p| format!("its parent {}", p.name)).unwrap_or_else(|| "the machine".into());
            refuse(
                &mut plan,
                Rule::BadCpus,
                vec![c.name.clone()],
                format!("class {}: CPU {bad} is not among the CPUs of {whose} ({})", c.name, crate::cpulist::format(&allowed)),
            );
            continue;
        }
        let k = cpus.len();

        // RT bandwidth.
        let mut rt = None;
        let mut cfs = None;
        if let Some(runtime) = c.rt_runtime_us {
            let period = c.rt_period_us.unwrap_or(DEFAULT_RT_PERIOD_US);
            if period == 0 || runtime > period {
                refuse(&mut plan, Rule::RuntimeOverPeriod, vec![c.name.clone()], format!("class {}: rt_runtime_us = {runtime} exceeds rt_period_us = {period}", c.name));
                continue;
            }
            if period < env.min_period_us {
                refuse(
                    &mut plan,
                    Rule::PeriodBelowMinimum,
                    vec![c.name.clone()],
                    format!(
                        "class {}: rt_period_us = {period} µs is below the minimum {} µs (small periods cost CPU in scheduling overhead — the seed's finding; keep the ratio and use rt_runtime_us = {} / rt_period_us = {}, or lower min_period_us)",
                        c.name,
                        env.min_period_us,
                        (runtime as u128 * env.min_period_us as u128 / period as u128),
                        env.min_period_us
                    ),
                );
            }
            if env.rt_group_sched {
                rt = Some(RtBw { runtime_us: runtime, period_us: period });
            } else {
                // CFS equivalent: the same CPU time per CPU over k CPUs, as one group quota.
                let cfs_period = c.period_us.unwrap_or(DEFAULT_CFS_PERIOD_US);
                let quota = (runtime as u128 * k as u128 * cfs_period as u128 / period as u128) as u64;
                let offer = format!(
                    "quota_us = {quota} / period_us = {cfs_period} (= rt_runtime_us {runtime} / rt_period_us {period} × {k} CPU(s)); a CFS quota caps the class but does not guarantee it a floor"
                );
                if env.rt_fallback_to_cfs && c.quota_us.is_none() {
                    plan.notes.push(format!("class {}: RT group bandwidth does not exist here (cgroup v2, or a kernel without RT_GROUP_SCHED); using the CFS equivalent {offer}", c.name));
                    cfs = Some(CfsBw { quota_us: quota.max(1000), period_us: cfs_period, burst_us: c.burst_us });
                } else {
                    refuse(
                        &mut plan,
                        Rule::NoRtGroupSched,
                        vec![c.name.clone()],
                        format!("class {}: RT group bandwidth does not exist here (cgroup v2, or a kernel without RT_GROUP_SCHED); the CFS equivalent is {offer} (set it, or enable the fallback)", c.name),
                    );
                }
            }
        }
        if let Some(quota) = c.quota_us {
            let period = c.period_us.unwrap_or(DEFAULT_CFS_PERIOD_US);
            if period < env.min_period_us {
                refuse(&mut plan, Rule::PeriodBelowMinimum, vec![c.name.clone()], format!("class {}: period_us = {period} µs is below the minimum {} µs", c.name, env.min_period_us));
            }
            if !(1000..=1_000_000).contains(&period) {
                refuse(&mut plan, Rule::BadConfig, vec![c.name.clone()], format!("class {}: period_us = {period} is outside the kernel's 1000..=1000000 µs", c.name));
            }
            if quota < 1000 {
                refuse(&mut plan, Rule::BadConfig, vec![c.name.clone()], format!("class {}: quota_us = {quota} is below the kernel's 1000 µs minimum", c.name));
            }
            cfs = Some(CfsBw { quota_us: quota, period_us: period, burst_us: c.burst_us });
        }
        if let (Some(w), true) = (c.weight, c.weight.is_some_and(|w| !(1..=10_000).contains(&w))) {
            refuse(&mut plan, Rule::BadConfig, vec![c.name.clone()], format!("class {}: weight = {w} is outside 1..=10000", c.name));
        }

        // Expected shares.
        let (kind, per_cpu) = if let Some(r) = rt {
            let ratio = r.runtime_us as f64 / r.period_us as f64;
            let each = if env.rt_borrowing { (ratio * ncpus as f64).min(1.0) } else { ratio };
            let how = if env.rt_borrowing {
                format!("min(1, {} / {} × {ncpus} CPUs, borrowing)", r.runtime_us, r.period_us)
            } else {
                format!("{} / {}", r.runtime_us, r.period_us)
            };
            plan.arithmetic.push(format!(
                "{}: RT {how} = {} of each of its CPUs ({}) → {} total (× {k} CPU(s))",
                c.name,
                pct(each),
                crate::cpulist::format(&cpus),
                pct(each * k as f64)
            ));
            (ShareKind::RtGuarantee, cpus.iter().map(|&x| (x, each * 100.0)).collect::<BTreeMap<_, _>>())
        } else if let Some(q) = cfs {
            let total = q.quota_us as f64 / q.period_us as f64;
            let each = (total / k as f64).min(1.0);
            plan.arithmetic.push(format!(
                "{}: CFS cap {} / {} = {} of one CPU over {k} CPU(s) → at most {} of each",
                c.name, q.quota_us, q.period_us, pct(total), pct(each)
            ));
            (ShareKind::CfsCap, cpus.iter().map(|&x| (x, each * 100.0)).collect())
        } else {
            (ShareKind::Relative, BTreeMap::new())
        };

        // A child cannot ask more than its parent.
        if let Some(p) = &parent_plan {
            let mine = rt.map(|r| r.runtime_us as f64 / r.period_us as f64);
            let theirs = p.rt.map(|r| r.runtime_us as f64 / r.period_us as f64);
            match (mine, theirs) {
                (Some(m), Some(t)) if m > t + 1e-12 => refuse(
                    &mut plan,
                    Rule::ChildExceedsParent,
                    vec![c.name.clone(), p.name.clone()],
                    format!("class {} asks RT {} but its parent {} has only {}", c.name, pct(m), p.name, pct(t)),
                ),
                (Some(m), None) => refuse(
                    &mut plan,
                    Rule::ChildExceedsParent,
                    vec![c.name.clone(), p.name.clone()],
                    format!("class {} asks RT {} but its parent {} has no RT runtime (0 %)", c.name, pct(m), p.name),
                ),
                _ => {}
            }
            if let (Some(m), Some(t)) = (cfs, p.cfs) {
                let (m, t) = (m.quota_us as f64 / m.period_us as f64, t.quota_us as f64 / t.period_us as f64);
                if m > t + 1e-12 {
                    refuse(
                        &mut plan,
                        Rule::ChildExceedsParent,
                        vec![c.name.clone(), p.name.clone()],
                        format!("class {} asks a CFS quota of {} of a CPU but its parent {} is capped at {}", c.name, pct(m), p.name, pct(t)),
                    );
                }
            }
        }

        let expected_pct = per_cpu.values().sum();
        plan.classes.push(ClassPlan {
            name: c.name.clone(),
            parent: c.parent.clone(),
            cpus,
            rt,
            cfs,
            weight: c.weight,
            kind,
            expected_pct_per_cpu: per_cpu,
            expected_pct,
        });
    }

    // Siblings' RT runtime against their parent: the cgroup v1 kernel rule (machine-wide).
    let mut groups: BTreeMap<Option<String>, Vec<(String, f64)>> = BTreeMap::new();
    for c in &plan.classes {
        if let Some(r) = c.rt {
            groups.entry(c.parent.clone()).or_default().push((c.name.clone(), r.runtime_us as f64 / r.period_us as f64));
        }
    }
    for (parent, kids) in &groups {
        let sum: f64 = kids.iter().map(|k| k.1).sum();
        let terms = kids.iter().map(|(n, r)| format!("{n} {r:.4}")).collect::<Vec<_>>().join(" + ");
        let (budget, what) = match parent {
            None => (
                global - env.others_rt_ratio,
                format!(
                    "the joule group's budget {:.4} (kernel.sched_rt_runtime_us/sched_rt_period_us = {}/{} = {global:.4}, minus {:.4} held by other groups)",
                    global - env.others_rt_ratio,
                    env.global_rt_runtime_us,
                    env.global_rt_period_us,
                    env.others_rt_ratio
                ),
            ),
            Some(p) => {
                let r = plan.class(p).and_then(|x| x.rt).map(|r| r.runtime_us as f64 / r.period_us as f64).unwrap_or(0.0);
                (r, format!("parent {p}'s {r:.4}"))
            }
        };
        plan.arithmetic.push(format!("RT runtime/period of {}: {terms} = {sum:.4} ≤ {budget:.4}?", parent.as_deref().map(|p| format!("children of {p}")).unwrap_or("top-level classes".into())));
        if sum > budget + 1e-9 && env.rt_group_sched {
            refuse(
                &mut plan,
                Rule::V1SiblingsExceedParent,
                kids.iter().map(|k| k.0.clone()).chain(parent.clone()).collect(),
                format!("RT runtime/period {terms} = {sum:.4} exceeds {what}; cgroup v1 checks this sum machine-wide, whatever the cpusets"),
            );
        }
    }

    // Per-core sums of top-level RT guarantees.
    for &cpu in &env.cpus {
        let members: Vec<(String, f64)> = plan
            .classes
            .iter()
            .filter(|c| c.parent.is_none() && c.kind == ShareKind::RtGuarantee)
            .filter_map(|c| c.expected_pct_per_cpu.get(&cpu).map(|p| (c.name.clone(), *p)))
            .collect();
        if members.is_empty() {
            continue;
        }
        let sum: f64 = members.iter().map(|m| m.1).sum();
        let terms = members.iter().map(|(n, p)| format!("{n} {p:.1}%")).collect::<Vec<_>>().join(" + ");
        plan.arithmetic.push(format!("core {cpu}: {terms} = {sum:.1}%"));
        let names: Vec<String> = members.iter().map(|m| m.0.clone()).collect();
        if sum > 100.0 + 1e-9 {
            refuse(
                &mut plan,
                Rule::CoreOver100,
                names,
                format!("core {cpu}: {terms} = {sum:.1}% > 100%: groups sharing a core must sum to ≤ 100% or the shares come out wrong (the seed's Table 2)"),
            );
        } else if sum > global * 100.0 + 1e-9 {
            refuse(
                &mut plan,
                Rule::CoreOverGlobalRt,
                names,
                format!(
                    "core {cpu}: {terms} = {sum:.1}% > {:.1}%, the kernel's global RT limit (sched_rt_runtime_us/sched_rt_period_us = {}/{})",
                    global * 100.0,
                    env.global_rt_runtime_us,
                    env.global_rt_period_us
                ),
            );
        }
        plan.cores.push(CoreSum { cpu, rt_members: members, rt_sum_pct: sum });
    }
    plan
}

/// Indices of `classes` with every parent before its children; an error on cycles.
fn topo_order(classes: &[ClassConfig]) -> Result<Vec<usize>, String> {
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
#[path = "admission_tests.rs"]
mod tests;
