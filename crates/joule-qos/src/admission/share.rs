//! What a class should get, in % of each of its CPUs: the seed's formula for RT bandwidth
//! (with or without borrowing between CPUs), a ceiling for a CFS quota, nothing for a weight.

use super::{pct, AdmissionEnv, CfsBw, DlBw, RtBw, ShareKind};
use std::collections::BTreeMap;

/// A class's expected share, and the arithmetic line that shows how it was computed.
pub(super) struct Share {
    pub kind: ShareKind,
    /// % of each CPU, keyed by CPU.
    pub per_cpu: BTreeMap<usize, f64>,
    pub arithmetic: Option<String>,
}

/// The share of class `name` on `cpus`. A class with RT bandwidth is reported by its RT
/// guarantee (a CFS quota beside it only caps its non-RT tasks); with deadline reservations by
/// them (spread over its CPUs: a reserved thread runs wherever a CPU is free); one with
/// neither is relative.
pub(super) fn expected(name: &str, rt: Option<RtBw>, cfs: Option<CfsBw>, dl: Option<DlBw>, cpus: &[usize], env: &AdmissionEnv) -> Share {
    let k = cpus.len();
    let on_each = |each: f64| cpus.iter().map(|&x| (x, each * 100.0)).collect();
    if let Some(d) = dl {
        let total = d.total().min(k as f64);
        let line = format!(
            "{name}: SCHED_DEADLINE {} / {} per thread × {} thread(s) = {} total, run on any of CPUs {}",
            d.runtime_us,
            d.period_us,
            d.threads,
            pct(total),
            crate::cpulist::format(cpus)
        );
        Share { kind: ShareKind::DeadlineReservation, per_cpu: on_each(total / k as f64), arithmetic: Some(line) }
    } else if let Some(r) = rt {
        let ncpus = env.cpus.len().max(1);
        let each = rt_fraction_per_cpu(r, env.rt_borrowing, ncpus);
        let how = if env.rt_borrowing {
            format!("min(1, {} / {} × {ncpus} CPUs, borrowing)", r.runtime_us, r.period_us)
        } else {
            format!("{} / {}", r.runtime_us, r.period_us)
        };
        let line =
            format!("{name}: RT {how} = {} of each of its CPUs ({}) → {} total (× {k} CPU(s))", pct(each), crate::cpulist::format(cpus), pct(each * k as f64));
        Share { kind: ShareKind::RtGuarantee, per_cpu: on_each(each), arithmetic: Some(line) }
    } else if let Some(q) = cfs {
        let total = q.ratio();
        let each = cfs_fraction_per_cpu(q, k);
        let line = format!("{name}: CFS cap {} / {} = {} of one CPU over {k} CPU(s) → at most {} of each", q.quota_us, q.period_us, pct(total), pct(each));
        Share { kind: ShareKind::CfsCap, per_cpu: on_each(each), arithmetic: Some(line) }
    } else {
        Share { kind: ShareKind::Relative, per_cpu: BTreeMap::new(), arithmetic: None }
    }
}

/// The fraction of each of its CPUs an RT group gets: runtime/period, the seed's formula
/// *CPU% ≈ runtime/period × 100 × ncores* adapted to kernels without borrowing (since 5.10
/// `RT_RUNTIME_SHARE` is off by default, so a group pinned to k CPUs gets runtime/period of
/// each of them; measured here by `joule-bench rt-share`, row S2). With `borrowing` (the
/// seed's kernel) a group's per-CPU run queue borrowed the unused runtime of the other
/// `ncpus - 1`, so one CPU could give it up to runtime/period × ncpus, at most all of it.
pub(super) fn rt_fraction_per_cpu(rt: RtBw, borrowing: bool, ncpus: usize) -> f64 {
    if borrowing {
        (rt.ratio() * ncpus as f64).min(1.0)
    } else {
        rt.ratio()
    }
}

/// The most a CFS quota lets a group use of each of its `k` CPUs: quota/period CPUs spread
/// evenly (the kernel's quota is for all the group's CPUs together), never more than one CPU.
pub(super) fn cfs_fraction_per_cpu(cfs: CfsBw, k: usize) -> f64 {
    (cfs.ratio() / k as f64).min(1.0)
}
