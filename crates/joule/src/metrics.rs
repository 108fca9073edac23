//! Every metric joule exports, defined once: name (with its unit), help, type, and how to read
//! it from a Snapshot. The Prometheus endpoint renders this table; tests check that each name
//! carries a unit and every power/thermal value a `source` label.

use joule_core::Snapshot;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Gauge,
    Counter,
}

#[derive(Debug, Clone, Copy)]
pub struct MetricDef {
    /// Full name without the `_total` suffix a counter gets on the wire.
    pub name: &'static str,
    pub help: &'static str,
    pub kind: Kind,
}

pub type Labels = Vec<(String, String)>;

/// One metric family filled from a snapshot.
pub struct Family {
    pub def: MetricDef,
    pub samples: Vec<(Labels, f64)>,
}

/// Counters about the agent itself, kept next to the snapshot.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct AgentStats {
    pub samples_total: u64,
    pub cpu_seconds_total: f64,
    pub last_loop_seconds: f64,
    pub stage_transitions_total: u64,
}

fn l(pairs: &[(&str, &str)]) -> Labels {
    pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

macro_rules! def {
    ($name:literal, $kind:ident, $help:literal) => {
        MetricDef { name: $name, help: $help, kind: Kind::$kind }
    };
}

pub fn families(s: &Snapshot, a: &AgentStats) -> Vec<Family> {
    let mut out = Vec::new();
    let mut push = |def: MetricDef, samples: Vec<(Labels, f64)>| out.push(Family { def, samples });

    push(
        def!("joule_cpu_utilization_ratio", Gauge, "Busy fraction of each CPU over the last sampling interval (from /proc/stat)."),
        s.cpu.utilization.iter().enumerate().map(|(i, u)| (l(&[("cpu", &i.to_string())]), *u)).collect(),
    );
    if let Some(psi) = &s.psi {
        let lines = [("cpu", &psi.cpu), ("io", &psi.io), ("memory", &psi.memory)];
        push(
            def!("joule_psi_some_avg10_ratio", Gauge, "Share of the last 10 s in which some task stalled on the resource (PSI)."),
            lines.iter().filter_map(|(r, p)| p.as_ref().map(|p| (l(&[("resource", r)]), p.some_avg10 / 100.0))).collect(),
        );
        push(
            def!("joule_psi_some_stall_seconds", Counter, "Time some task stalled on the resource since boot (PSI)."),
            lines.iter().filter_map(|(r, p)| p.as_ref().map(|p| (l(&[("resource", r)]), p.some_total_us as f64 / 1e6))).collect(),
        );
    }
    push(
        def!("joule_cgroup_cpu_usage_seconds", Counter, "CPU time used by the cgroup (cpuacct.usage or cpu.stat usage_usec)."),
        s.cgroups.iter().map(|c| (l(&[("cgroup", &c.path), ("hierarchy", &c.hierarchy)]), c.usage_us as f64 / 1e6)).collect(),
    );
    push(
        def!("joule_cgroup_cpu_throttled_seconds", Counter, "Time the cgroup was throttled by CPU bandwidth control."),
        s.cgroups.iter().map(|c| (l(&[("cgroup", &c.path), ("hierarchy", &c.hierarchy)]), c.throttled_us as f64 / 1e6)).collect(),
    );
    let iv = (s.interval_ms.max(1)) as f64 * 1000.0;
    push(
        def!("joule_task_cpu_wait_ratio", Gauge, "Share of the last interval the thread waited runnable for a CPU, top threads only (source=ebpf: sched_switch accounting; kernel: schedstat)."),
        s.task_wait.iter().map(|t| (l(&[("tid", &t.pid.to_string()), ("comm", &t.comm), ("source", t.source.as_str())]), t.wait_us as f64 / iv)).collect(),
    );
    push(
        def!("joule_power_watts", Gauge, "Machine power. source=sensor is measured (RAPL/hwmon); source=model is an estimate from utilisation."),
        vec![(l(&[("source", s.power.source.as_str())]), s.power.watts)],
    );
    push(
        def!("joule_power_domain_watts", Gauge, "Power of one measured domain (RAPL zone, hwmon channel)."),
        s.power.domains.iter().map(|d| (l(&[("domain", &d.name), ("source", d.source.as_str())]), d.watts)).collect(),
    );
    push(
        def!("joule_energy_joules", Counter, "Energy of one power domain since joule started reading it (wrap-around handled); source=model domains are estimates."),
        s.power.domains.iter().map(|d| (l(&[("domain", &d.name), ("source", d.source.as_str())]), d.energy_joules_total)).collect(),
    );
    push(
        def!("joule_thermal_zone_temperature_celsius", Gauge, "Temperature of a thermal zone or hwmon sensor."),
        s.thermal.zones.iter().map(|z| (l(&[("zone", &z.name), ("type", &z.kind), ("source", z.source.as_str())]), z.temp_celsius)).collect(),
    );
    push(
        def!("joule_model_temperature_celsius", Gauge, "Temperature estimated by the RC thermal model (an estimate, never a measurement)."),
        s.thermal.model.iter().map(|m| (l(&[("source", m.source.as_str())]), m.temp_celsius)).collect(),
    );
    let st = &s.stage;
    push(
        def!("joule_thermal_stage", Gauge, "Thermal stage (0 = cool); computed_by=ebpf when the in-kernel program computed it."),
        vec![(l(&[("computed_by", st.computed_by.as_str()), ("temp_source", st.temp_source.as_str())]), st.value as f64)],
    );
    push(
        def!("joule_thermal_stage_temperature_celsius", Gauge, "The temperature the current thermal stage was computed from."),
        vec![(l(&[("source", st.temp_source.as_str())]), st.temp_celsius)],
    );
    push(
        def!("joule_cpu_frequency_hertz", Gauge, "Current CPU frequency (cpufreq scaling_cur_freq)."),
        s.frequency.iter().map(|f| (l(&[("cpu", &f.cpu.to_string()), ("source", f.source.as_str())]), f.cur_khz as f64 * 1e3)).collect(),
    );
    let q = |quantile: &str, f: fn(&joule_core::snapshot::RunqLatency) -> f64| -> Vec<(Labels, f64)> {
        s.runq_latency
            .iter()
            .map(|r| (l(&[("cgroup", &r.cgroup), ("quantile", quantile), ("source", r.source.as_str())]), f(r) / 1e6))
            .collect()
    };
    let mut rq = q("0.5", |r| r.p50_us);
    rq.extend(q("0.99", |r| r.p99_us));
    rq.extend(q("1", |r| r.max_us));
    push(def!("joule_runq_latency_seconds", Gauge, "Wake-up-to-run latency per cgroup over the last interval (eBPF sched tracepoints)."), rq);
    push(
        def!("joule_runq_wakeups", Gauge, "Wake-ups that reached a CPU over the last interval, per cgroup."),
        s.runq_latency.iter().map(|r| (l(&[("cgroup", &r.cgroup), ("source", r.source.as_str())]), r.count as f64)).collect(),
    );
    push(def!("joule_agent_samples", Counter, "Control-loop iterations the agent has run."), vec![(vec![], a.samples_total as f64)]);
    push(def!("joule_agent_cpu_seconds", Counter, "CPU time (user + system) the agent process has used."), vec![(vec![], a.cpu_seconds_total)]);
    push(def!("joule_agent_loop_duration_seconds", Gauge, "Wall time of the last control-loop iteration."), vec![(vec![], a.last_loop_seconds)]);
    push(
        def!("joule_bpf_enabled", Gauge, "1 when joule's eBPF programs run; 0 with off_reason = flag (--no-bpf), config (telemetry.bpf = false) or not_root: then there is no run-queue latency and the stage is computed in user space."),
        vec![(l(&[("off_reason", &s.bpf.off_reason)]), s.bpf.enabled as u8 as f64)],
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const UNITS: [&str; 6] = ["_ratio", "_seconds", "_watts", "_joules", "_celsius", "_hertz"];

    #[test]
    fn every_name_is_joule_prefixed_and_unit_suffixed_or_a_plain_count() {
        let plain = ["joule_thermal_stage", "joule_runq_wakeups", "joule_agent_samples", "joule_bpf_enabled"];
        for f in families(&Snapshot::default(), &AgentStats::default()) {
            assert!(f.def.name.starts_with("joule_"), "{}", f.def.name);
            assert!(UNITS.iter().any(|u| f.def.name.ends_with(u)) || plain.contains(&f.def.name), "{} has no unit", f.def.name);
            assert!(!f.def.help.is_empty());
        }
    }

    #[test]
    fn power_and_temperature_always_say_where_they_came_from() {
        let mut s = Snapshot::default();
        s.power.source = joule_core::Origin::Model;
        s.thermal.model = Some(joule_core::snapshot::ModelTemperature { temp_celsius: 40.0, source: joule_core::Origin::Model });
        for f in families(&s, &AgentStats::default()) {
            if f.def.name.contains("watts") || f.def.name.contains("celsius") || f.def.name.contains("joules") {
                for (labels, _) in &f.samples {
                    assert!(labels.iter().any(|(k, _)| k == "source"), "{} lacks a source label", f.def.name);
                }
            }
        }
    }
}
