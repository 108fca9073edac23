//! What the classes get: configured, expected and achieved share, throttling, tasks.

use super::{ClassStatus, QosController};
use crate::backend::Hier;
use joule_core::effects::Effects;
use joule_core::fsread::{keyed_u64, read_trimmed};
use std::path::Path;
use std::time::Instant;

impl QosController {
    /// Per class: configured, expected and achieved share (since the previous call),
    /// throttled time and task count.
    pub fn status(&self, fx: &dyn Effects) -> Vec<ClassStatus> {
        let now = Instant::now();
        let mut samples = self.samples.lock().unwrap();
        let mut out = Vec::new();
        for c in &self.plan.classes {
            let configured = [
                c.rt.map(|r| format!("rt {}/{} µs", r.runtime_us, r.period_us)),
                c.dl.map(|d| {
                    let held = self.reserved(&c.name).map_or(String::new(), |r| format!(", {} held, {} not", r.threads, r.unreserved));
                    format!("deadline {}/{} µs × {} thread(s){held}", d.runtime_us, d.period_us, d.threads)
                }),
                c.cfs.map(|q| format!("cfs {}/{} µs", q.quota_us, q.period_us)),
                c.weight.map(|w| format!("weight {w}")),
                Some(format!("cpus {}", crate::cpulist::format(&c.cpus))),
            ]
            .into_iter()
            .flatten()
            .collect::<Vec<_>>()
            .join(", ");
            let usage_ns = self.usage_ns(fx, &c.name);
            let achieved = usage_ns.and_then(|u| {
                let prev = samples.insert(c.name.clone(), (now, u));
                prev.map(|(t, p)| u.saturating_sub(p) as f64 / now.duration_since(t).as_nanos().max(1) as f64 * 100.0)
            });
            let (thr, nthr) = self.throttled(fx, &c.name);
            let first = self.layout.hiers.first().map(|(_, m)| self.task_dir(m, &c.name));
            let tasks = first.as_ref().and_then(|d| fx.read(&d.join("cgroup.procs")).ok()).map(|s| s.lines().count()).unwrap_or(0);
            out.push(ClassStatus {
                name: c.name.clone(),
                kind: c.kind,
                configured,
                expected_pct: c.expected_pct,
                achieved_pct: achieved,
                throttled_ms: thr,
                nr_throttled: nthr,
                tasks,
                present: first.is_some_and(|d| fx.exists(&d)),
            });
        }
        out
    }

    /// Cumulative CPU time of a class, ns (v1 cpuacct.usage, v2 cpu.stat usage_usec).
    pub fn usage_ns(&self, fx: &dyn Effects, class: &str) -> Option<u64> {
        for (h, _) in &self.layout.hiers {
            let Some(d) = self.class_dir(*h, class) else { continue };
            match h {
                Hier::Cpuacct | Hier::Cpu => {
                    if let Some(v) = read_trimmed(fx, &d.join("cpuacct.usage")).ok().and_then(|s| s.parse().ok()) {
                        return Some(v);
                    }
                }
                Hier::Unified => return stat_field(fx, &d.join("cpu.stat"), "usage_usec").map(|u| u * 1000),
                Hier::Cpuset | Hier::Freezer => {}
            }
        }
        None
    }

    fn throttled(&self, fx: &dyn Effects, class: &str) -> (Option<f64>, Option<u64>) {
        let Some(&(h, _)) = self.layout.hiers.first() else { return (None, None) };
        let Some(d) = self.class_dir(h, class) else { return (None, None) };
        let f = d.join("cpu.stat");
        match h {
            Hier::Unified => (stat_field(fx, &f, "throttled_usec").map(|u| u as f64 / 1e3), stat_field(fx, &f, "nr_throttled")),
            _ => (stat_field(fx, &f, "throttled_time").map(|n| n as f64 / 1e6), stat_field(fx, &f, "nr_throttled")),
        }
    }
}

/// One key of a `key value` file (`cpu.stat`).
fn stat_field(fx: &dyn Effects, f: &Path, key: &str) -> Option<u64> {
    keyed_u64(&fx.read(f).ok()?, key)
}
