//! Every metric joule exports, defined once: name (with its unit), help, type, and how to read
//! it from a Snapshot. Both text formats of `/metrics` (exposition.rs) render this one table;
//! tests check that each name carries a unit and every measured value a `source` label.

use joule_core::control::{ActuatorStatus, Plan};
pub use joule_core::metric::{l, Family, Histogram, Kind, Labels, MetricDef, Unit, Value};
use joule_core::{Origin, Snapshot};

/// The agent's counters are the view's (`joule_core::view`): the socket sends this type.
pub use joule_core::view::{AgentStats, Limits, Recovered};

/// The `source` label every measured or estimated value carries.
fn src(o: Origin) -> (&'static str, &'static str) {
    ("source", o.as_str())
}

macro_rules! def {
    ($name:literal, $kind:ident, $title:expr, $json:literal, $help:literal) => {
        MetricDef { name: $name, help: $help, kind: Kind::$kind, title: $title, json: $json }
    };
}

pub fn families(s: &Snapshot, a: &AgentStats) -> Vec<Family> {
    let mut out = Vec::new();
    let mut push = |def: MetricDef, samples: Vec<(Labels, Value)>| out.push(Family { def, samples });
    let num = |samples: Vec<(Labels, f64)>| samples.into_iter().map(|(l, v)| (l, Value::Number(v))).collect::<Vec<_>>();

    let cpu_src = src(s.cpu.source);
    push(
        def!(
            "joule_cpu_utilization_ratio",
            Gauge,
            Some("CPU"),
            "/cpu/utilization",
            "Busy fraction of each CPU over the last sampling interval (from /proc/stat)."
        ),
        num(s.cpu.utilization.iter().enumerate().map(|(i, u)| (l(&[("cpu", &i.to_string()), cpu_src]), *u)).collect()),
    );
    if let Some(psi) = &s.psi {
        let lines = [("cpu", &psi.cpu), ("io", &psi.io), ("memory", &psi.memory)];
        let per_resource = |f: fn(&joule_core::snapshot::PsiLine) -> f64| -> Vec<(Labels, f64)> {
            lines.iter().filter_map(|(r, p)| p.as_ref().map(|p| (l(&[("resource", r), src(psi.source)]), f(p)))).collect()
        };
        push(
            def!("joule_psi_some_avg10_ratio", Gauge, Some("PSI"), "/psi", "Share of the last 10 s in which some task stalled on the resource (PSI)."),
            num(per_resource(|p| p.some_avg10 / 100.0)),
        );
        push(
            def!("joule_psi_some_stall_seconds", Counter, None, "/psi", "Time some task stalled on the resource since boot (PSI)."),
            num(per_resource(|p| p.some_total_us as f64 / 1e6)),
        );
    }
    let per_cgroup = |f: fn(&joule_core::snapshot::CgroupCpu) -> u64| -> Vec<(Labels, f64)> {
        s.cgroups.iter().map(|c| (l(&[("cgroup", &c.path), ("hierarchy", &c.hierarchy), src(c.source)]), f(c) as f64 / 1e6)).collect()
    };
    push(
        def!("joule_cgroup_cpu_usage_seconds", Counter, None, "/cgroups", "CPU time used by the cgroup (cpuacct.usage or cpu.stat usage_usec)."),
        num(per_cgroup(|c| c.usage_us)),
    );
    push(
        def!("joule_cgroup_cpu_throttled_seconds", Counter, None, "/cgroups", "Time the cgroup was throttled by CPU bandwidth control."),
        num(per_cgroup(|c| c.throttled_us)),
    );
    push(
        def!(
            "joule_class_processes",
            Gauge,
            None,
            "/classes",
            "Processes of each [[class]] in the last membership reading (the one scan of /proc every mechanism acts on)."
        ),
        num(s.classes.iter().map(|c| (l(&[("class", &c.class), src(c.source)]), c.processes as f64)).collect()),
    );
    let pe: Vec<&joule_core::snapshot::ProcessEvents> = s.process_events.iter().collect();
    push(
        def!(
            "joule_membership_events",
            Counter,
            None,
            "/process_events",
            "Process events (fork, exec, exit, rename, cgroup move, setuid) the class membership was kept from since the agent started (eBPF)."
        ),
        num(pe.iter().map(|p| (l(&[src(p.source)]), p.events_total as f64)).collect()),
    );
    push(
        def!(
            "joule_membership_lost_events",
            Counter,
            None,
            "/process_events",
            "Process events the kernel could not hand over (the ring buffer was full); each loss costs a walk of /proc."
        ),
        num(pe.iter().map(|p| (l(&[src(p.source)]), p.lost_total as f64)).collect()),
    );
    push(
        def!("joule_membership_resyncs", Counter, None, "/process_events", "Walks of /proc after lost process events (the membership rebuilt from scratch)."),
        num(pe.iter().map(|p| (l(&[src(p.source)]), p.resyncs_total as f64)).collect()),
    );
    push(
        def!(
            "joule_membership_resync_seconds",
            Counter,
            Some("seconds"),
            "/process_events",
            "Time spent walking /proc after lost process events: what an event flood costs the agent (walks are at least 5 s apart)."
        ),
        num(pe.iter().map(|p| (l(&[src(p.source)]), p.resync_seconds_total)).collect()),
    );
    push(
        def!(
            "joule_membership_resyncs_deferred",
            Counter,
            None,
            "/process_events",
            "Losses of process events whose walk of /proc waited for the 5 s gap between walks (the membership was staler meanwhile)."
        ),
        num(pe.iter().map(|p| (l(&[src(p.source)]), p.resyncs_deferred_total as f64)).collect()),
    );
    pod_families(s, &mut push);
    push(
        def!(
            "joule_membership_dropped_events",
            Counter,
            None,
            "/process_events",
            "Process events the kernel's filter kept (they could change no class: a process nobody follows forking, exiting, or renamed, moved or setuid to what no class takes), summed over the CPUs; they never reach the agent."
        ),
        num(pe.iter().map(|p| (l(&[src(p.source)]), p.dropped_total as f64)).collect()),
    );
    push(
        def!(
            "joule_membership_discoveries",
            Counter,
            None,
            "/process_events",
            "Walks of /proc (among joule_membership_resyncs) to find children the kernel's filter had not sent: of a process that joined a class, or that a followed reaper took in."
        ),
        num(pe.iter().map(|p| (l(&[src(p.source)]), p.discoveries_total as f64)).collect()),
    );
    let iv = (s.interval_ms.max(1)) as f64 * 1000.0;
    push(
        def!(
            "joule_task_cpu_wait_ratio",
            Gauge,
            Some("WAIT"),
            "/task_wait",
            "Share of the last interval the thread waited runnable for a CPU, top threads only (source=ebpf: sched_switch accounting; kernel: schedstat)."
        ),
        num(s.task_wait.iter().map(|t| (l(&[("tid", &t.pid.to_string()), ("comm", &t.comm.text()), src(t.source)]), t.wait_us as f64 / iv)).collect()),
    );
    push(
        def!(
            "joule_power_watts",
            Gauge,
            Some("POWER"),
            "/power/watts",
            "Machine power. source=sensor is measured (RAPL/hwmon); source=model is an estimate from utilisation."
        ),
        num(vec![(l(&[src(s.power.source)]), s.power.watts)]),
    );
    push(
        def!("joule_power_domain_watts", Gauge, Some("POWER"), "/power/domains", "Power of one measured domain (RAPL zone, hwmon channel)."),
        num(s.power.domains.iter().map(|d| (l(&[("domain", &d.name), src(d.source)]), d.watts)).collect()),
    );
    push(
        def!(
            "joule_energy_joules",
            Counter,
            Some("ENERGY"),
            "/power/domains",
            "Energy of one power domain since joule started reading it (wrap-around handled); source=model domains are estimates."
        ),
        num(s.power.domains.iter().map(|d| (l(&[("domain", &d.name), src(d.source)]), d.energy_joules_total)).collect()),
    );
    push(
        def!("joule_thermal_zone_temperature_celsius", Gauge, Some("THERMAL"), "/thermal/zones", "Temperature of a thermal zone or hwmon sensor."),
        num(s.thermal.zones.iter().map(|z| (l(&[("zone", &z.name), ("type", &z.kind), src(z.source)]), z.temp_celsius)).collect()),
    );
    push(
        def!(
            "joule_model_temperature_celsius",
            Gauge,
            Some("THERMAL"),
            "/thermal/model",
            "Temperature estimated by the RC thermal model (an estimate, never a measurement)."
        ),
        num(s.thermal.model.iter().map(|m| (l(&[src(m.source)]), m.temp_celsius)).collect()),
    );
    let st = &s.stage;
    push(
        def!("joule_thermal_stage", Gauge, Some("STAGE"), "/stage/value", "Thermal stage (0 = cool); computed_by=ebpf when the in-kernel program computed it, temp_source is the origin of the temperature it was computed from."),
        num(vec![(l(&[("computed_by", st.computed_by.as_str()), ("temp_source", st.temp_source.as_str())]), st.value as f64)]),
    );
    push(
        def!(
            "joule_thermal_stage_temperature_celsius",
            Gauge,
            Some("STAGE"),
            "/stage/temp_celsius",
            "The temperature the current thermal stage was computed from (absent while no temperature the stage may act on was read)."
        ),
        num(if st.temp_source == Origin::Unknown { vec![] } else { vec![(l(&[src(st.temp_source)]), st.temp_celsius)] }),
    );
    push(
        def!("joule_cpu_frequency_hertz", Gauge, Some("FREQ"), "/frequency", "Current CPU frequency as the kernel reports it (cpufreq scaling_cur_freq)."),
        num(s.frequency.iter().map(|f| (l(&[("cpu", &f.cpu.to_string()), src(f.source)]), f.cur_khz as f64 * 1e3)).collect()),
    );
    push(
        def!("joule_runq_latency_seconds", Histogram, None, "/runq_latency",
            "Wake-up-to-run latency per cgroup since the eBPF program loaded (sched tracepoints). Buckets: powers of two of ns, 1.024 us to 1.07 s. _sum is an estimate (each wake-up at its kernel histogram slot's midpoint, within 6.25%); _count and buckets are exact."
        ),
        s.runq_latency.iter().map(|r| (l(&[("cgroup", &r.cgroup), src(r.source)]), Value::Histogram(Histogram::from_ns(&r.since_load)))).collect(),
    );
    let waking: Vec<&joule_core::snapshot::RunqLatency> = s.runq_latency.iter().filter(|r| r.count > 0).collect();
    push(
        def!(
            "joule_runq_latency_p50_seconds",
            Gauge,
            Some("RUNQ"),
            "/runq_latency",
            "Median wake-up-to-run latency per cgroup over the last interval, cgroups with wake-ups only (the histogram has the cumulative view)."
        ),
        num(waking.iter().map(|r| (l(&[("cgroup", &r.cgroup), src(r.source)]), r.p50_us / 1e6)).collect()),
    );
    push(
        def!(
            "joule_runq_latency_p99_seconds",
            Gauge,
            Some("RUNQ"),
            "/runq_latency",
            "99th percentile of wake-up-to-run latency per cgroup over the last interval, cgroups with wake-ups only."
        ),
        num(waking.iter().map(|r| (l(&[("cgroup", &r.cgroup), src(r.source)]), r.p99_us / 1e6)).collect()),
    );
    push(
        def!("joule_runq_wakeups", Gauge, Some("RUNQ"), "/runq_latency", "Wake-ups that reached a CPU over the last interval, per cgroup."),
        num(s.runq_latency.iter().map(|r| (l(&[("cgroup", &r.cgroup), src(r.source)]), r.count as f64)).collect()),
    );
    net_families(s, &mut push);
    push(def!("joule_agent_samples", Counter, None, "", "Control-loop iterations the agent has run."), num(vec![(vec![], a.samples_total as f64)]));
    push(def!("joule_agent_cpu_seconds", Counter, None, "", "CPU time (user + system) the agent process has used."), num(vec![(vec![], a.cpu_seconds_total)]));
    push(def!("joule_agent_loop_duration_seconds", Gauge, None, "", "Wall time of the last control-loop iteration."), num(vec![(vec![], a.last_loop_seconds)]));
    push(
        def!(
            "joule_agent_loop_duration_max_seconds",
            Gauge,
            None,
            "",
            "Wall time of the longest control-loop iteration since the agent started (a period should bound it)."
        ),
        num(vec![(vec![], a.max_loop_seconds)]),
    );
    push(
        def!("joule_agent_loop_overruns", Counter, None, "", "Control-loop iterations whose wall time exceeded the period (each also an `overrun` event)."),
        num(vec![(vec![], a.loop_overruns_total as f64)]),
    );
    push(
        def!("joule_agent_conflicts", Counter, None, "", "Conflicts between two wants for one knob, each counted when it first appeared in a plan."),
        num(vec![(vec![], a.conflicts_total as f64)]),
    );
    push(
        def!(
            "joule_agent_period_seconds",
            Gauge,
            None,
            "",
            "The sleep the control loop chose after its last iteration: agent.period_ms while something is in motion, agent.rest_period_ms when nothing is (less when an armed nap falls due sooner); `why` says which (rest, stage, near_threshold, busy, power_budget, class_change, resync_pending, plan_change, following_threads, nap_due)."
        ),
        num(vec![(l(&[("why", a.pace.why.as_str())]), a.pace.period_ms as f64 / 1e3)]),
    );
    push(
        def!(
            "joule_agent_reading_age_seconds",
            Gauge,
            None,
            "",
            "Age of the reading a scrape is served from: a resting loop publishes once per agent.rest_period_ms, and a scrape never waits for a new one (a reading older than half a rest asks for one, once per rest at most)."
        ),
        num(a.published_at.map(|t| (vec![], t.elapsed().as_secs_f64())).into_iter().collect()),
    );
    push(
        def!(
            "joule_agent_rests_ended",
            Counter,
            None,
            "",
            "Rests of the control loop that an event ended early (an in-kernel stage change, a process event, a signal)."
        ),
        num(vec![(vec![], a.rests_ended_total as f64)]),
    );
    limit_families(a, &mut push);
    push(
        def!("joule_bpf_enabled", Gauge, Some("eBPF"), "/bpf/enabled", "1 when joule's eBPF programs run; 0 with off_reason = flag (--no-bpf), config (telemetry.bpf = false), not_root, no_btf (the kernel has no BTF) or load_failed (the kernel refused a program): then there is no run-queue latency and the stage is computed in user space."),
        num(vec![(l(&[("off_reason", &s.bpf.off_reason)]), s.bpf.enabled as u8 as f64)]),
    );
    out
}

/// What the agent acts against and what its start found: settings and the journal's count, not
/// readings (no `source` label). For the fleet's headroom and restore alerts (docs/fleet.md).
fn limit_families(a: &AgentStats, push: &mut impl FnMut(MetricDef, Vec<(Labels, Value)>)) {
    let num = |samples: Vec<(Labels, f64)>| samples.into_iter().map(|(l, v)| (l, Value::Number(v))).collect::<Vec<_>>();
    let lim = a.limits.clone().unwrap_or_default();
    // `config`, `trip points`, `built-in` as label values: config, trip_points, built_in.
    let from = lim.thresholds_kind.replace([' ', '-'], "_");
    let per_stage =
        |values: &[f64], from: &str| num(values.iter().enumerate().map(|(i, v)| (l(&[("stage", &(i + 1).to_string()), ("from", from)]), *v)).collect());
    push(
        def!(
            "joule_thermal_stage_threshold_celsius",
            Gauge,
            None,
            "",
            "Temperature at which the thermal stage rises to `stage`; `from` says who set it (config, trip_points, firmware, built_in). Chosen at start."
        ),
        per_stage(&lim.stage_thresholds_celsius, &from),
    );
    push(
        def!(
            "joule_thermal_limit_celsius",
            Gauge,
            None,
            "",
            "The temperature the thermal stages keep the CPU under: the followed sensors' lowest passive trip point (from=passive_trip, where the kernel throttles), where the board's firmware starts throttling when that comes first (firmware: a Raspberry Pi's 80 °C, lower with config.txt's temp_limit), their critical trip less thermal.critical_margin_celsius (critical_trip), else the hottest threshold plus the smallest trip offset (thresholds). Chosen at start."
        ),
        num(lim.limit_celsius.map(|c| (l(&[("from", lim.limit_from.as_str())]), c)).into_iter().collect()),
    );
    push(
        def!(
            "joule_power_stage_threshold_watts",
            Gauge,
            None,
            "",
            "Power at which the thermal stage rises to `stage` (thermal.power_thresholds_watts), when a power budget is set."
        ),
        per_stage(&lim.power_thresholds_watts, "config"),
    );
    let r = a.recovered.clone().unwrap_or_default();
    push(
        def!(
            "joule_agent_recovered_changes",
            Gauge,
            None,
            "",
            "Changes a previous run left in the undo journal, found when this agent started, by outcome: undone, already_gone (what they changed no longer exists, as after a reboot) or failed (still in the journal: `joule restore` retries them and says why). Any at all: the previous agent and its guardian both ended without undoing them."
        ),
        num(vec![(l(&[("outcome", "undone")]), r.undone as f64), (l(&[("outcome", "already_gone")]), r.already_gone as f64), (l(&[("outcome", "failed")]), r.failed as f64)]),
    );
}

/// What the container runtime has said about the pods the agent saw, when a class matches pods
/// by name: the agent's own bookkeeping of its questions (no `source` label). A pod seen in the
/// kubelet's cgroups and not named is held by the capping pod classes; the stale age says how
/// long the oldest has waited, so a runtime that stopped answering is not silent.
fn pod_families(s: &Snapshot, push: &mut impl FnMut(MetricDef, Vec<(Labels, Value)>)) {
    let Some(p) = &s.pods else { return };
    let one = |v: f64| vec![(Vec::new(), Value::Number(v))];
    push(
        def!(
            "joule_pod_index_pods",
            Gauge,
            None,
            "",
            "Pods the container runtime has named (namespace, name, labels), asked about one at a time as their processes appear."
        ),
        one(p.pods as f64),
    );
    push(
        def!(
            "joule_pod_index_unnamed_pods",
            Gauge,
            None,
            "",
            "Pods seen in the kubelet's cgroups that the container runtime has not named (it did not answer, or does not list them yet): the capping pod classes whose rules could be theirs hold them at their cap."
        ),
        one(p.unnamed as f64),
    );
    let stale_s = p.stale_since_unix_ms.map_or(0.0, |t| s.taken_at_ms.saturating_sub(t) as f64 / 1e3);
    push(
        def!(
            "joule_pod_index_stale_seconds",
            Gauge,
            None,
            "",
            "How long the oldest pod seen and not named has waited for the container runtime's word (0: every pod seen is named)."
        ),
        one(stale_s),
    );
    push(
        def!("joule_pod_index_refreshes", Counter, None, "", "Rounds of questions to the container runtime about the pods waiting to be named."),
        one(p.refreshes_total as f64),
    );
    push(
        def!("joule_pod_index_errors", Counter, None, "", "Rounds of questions the container runtime did not answer (last_error in snapshot.json's pods)."),
        one(p.errors_total as f64),
    );
}

/// The flow monitor's families (issue 11). Flow labels are bounded: `[net] top_n` flows and
/// one `flow="other"` series.
fn net_families(s: &Snapshot, push: &mut impl FnMut(MetricDef, Vec<(Labels, Value)>)) {
    let Some(n) = &s.net else { return };
    let num = |samples: Vec<(Labels, f64)>| samples.into_iter().map(|(l, v)| (l, Value::Number(v))).collect::<Vec<_>>();
    let per_flow = |f: fn(&joule_core::snapshot::FlowSample) -> f64| -> Vec<(Labels, f64)> {
        n.flows
            .iter()
            .map(|x| (l(&[("flow", &x.flow), ("proto", &x.proto), ("direction", &x.direction), ("cgroup", &x.cgroup), src(x.source)]), f(x)))
            .collect()
    };
    push(
        def!(
            "joule_net_flow_rate_bytes_per_second",
            Gauge,
            Some("NET"),
            "/net/flows",
            "IP bytes per second of the top flows over the last interval (flow=\"other\" sums the rest), from cgroup_skb programs on the cgroup2 root."
        ),
        num(per_flow(|x| x.rate_bytes_per_second)),
    );
    push(
        def!(
            "joule_net_flow_mean_packet_bytes",
            Gauge,
            Some("NET"),
            "/net/flows",
            "Mean packet size of the top flows over the last interval (GSO segments counted as packets)."
        ),
        num(per_flow(|x| x.mean_packet_bytes)),
    );
    push(
        def!(
            "joule_net_flow_retransmits",
            Gauge,
            Some("NET"),
            "/net/flows",
            "TCP segments the top flows retransmitted over the last interval (tp_btf/tcp_retransmit_skb)."
        ),
        num(per_flow(|x| x.retransmits as f64)),
    );
    let per_cg = |f: fn(&joule_core::snapshot::CgroupNet) -> f64| -> Vec<(Labels, f64)> {
        n.cgroups.iter().map(|g| (l(&[("cgroup", &g.cgroup), ("direction", &g.direction), src(g.source)]), f(g))).collect()
    };
    push(
        def!("joule_net_cgroup_bytes", Counter, None, "/net/cgroups", "IP bytes of the cgroup2's sockets since the flow monitor loaded, per direction."),
        num(per_cg(|g| g.bytes_total as f64)),
    );
    push(
        def!("joule_net_cgroup_packets", Counter, None, "/net/cgroups", "Packets of the cgroup2's sockets since the flow monitor loaded, per direction."),
        num(per_cg(|g| g.packets_total as f64)),
    );
    push(
        def!(
            "joule_net_cgroup_rate_bytes_per_second",
            Gauge,
            Some("NET"),
            "/net/cgroups",
            "IP bytes per second of the cgroup2's sockets over the last interval, per direction."
        ),
        num(per_cg(|g| g.rate_bytes_per_second)),
    );
    let per_cpu = |rx: bool, f: fn(&joule_core::snapshot::CpuSoftirq, bool) -> f64| -> Vec<(Labels, f64)> {
        n.softirq.iter().map(|c| (l(&[("cpu", &c.cpu.to_string()), ("softirq", if rx { "net_rx" } else { "net_tx" }), src(c.source)]), f(c, rx))).collect()
    };
    let both =
        |f: fn(&joule_core::snapshot::CpuSoftirq, bool) -> f64| -> Vec<(Labels, f64)> { per_cpu(true, f).into_iter().chain(per_cpu(false, f)).collect() };
    push(
        def!(
            "joule_net_softirq_seconds",
            Counter,
            None,
            "/net/softirq",
            "Time each CPU spent in the NET_RX/NET_TX softirqs since the flow monitor loaded (tp_btf/softirq_entry+exit)."
        ),
        num(both(|c, rx| if rx { c.net_rx_seconds_total } else { c.net_tx_seconds_total })),
    );
    push(
        def!(
            "joule_net_softirq_ratio",
            Gauge,
            Some("NET"),
            "/net/softirq",
            "Share of the last interval each CPU spent in the NET_RX/NET_TX softirqs, which run above every thread."
        ),
        num(both(|c, rx| if rx { c.net_rx_ratio } else { c.net_tx_ratio })),
    );
}

/// Every family joule can publish, for `joule monitor --list-metrics` and the docs.
pub fn catalogue() -> Vec<MetricDef> {
    let s = Snapshot { psi: Some(Default::default()), net: Some(Default::default()), pods: Some(Default::default()), ..Default::default() };
    let mut f: Vec<MetricDef> = families(&s, &AgentStats::default()).into_iter().map(|f| f.def).collect();
    f.extend(control_families(&Plan::default(), &[]).into_iter().map(|f| f.def));
    f.extend(joule_act::metric_defs());
    f
}

/// The last plan (its decisions, the knobs they merged into, the conflicts) and each
/// actuator's own families from its typed state. Labels stay bounded: one series per (policy,
/// actuator, kind), per (actuator, knob kind), per conflict's (knob kind, winner, loser).
pub fn control_families(plan: &Plan, actuators: &[ActuatorStatus]) -> Vec<Family> {
    let mut per: std::collections::BTreeMap<(String, String, &str), f64> = Default::default();
    for d in &plan.decisions {
        *per.entry((d.policy.clone(), d.actuator.clone().unwrap_or_default(), d.want.kind())).or_default() += 1.0;
    }
    let mut knobs: std::collections::BTreeMap<(&str, &str), f64> = Default::default();
    for h in &plan.knobs {
        *knobs.entry((h.actuator.as_str(), h.knob.kind())).or_default() += 1.0;
    }
    let mut conflicts: std::collections::BTreeMap<(&str, &str, &str), f64> = Default::default();
    for c in &plan.conflicts {
        *conflicts.entry((c.knob.kind(), c.won.as_str(), c.lost.as_str())).or_default() += 1.0;
    }
    let mut out = vec![
        def!("joule_plan_decisions", Gauge, None, "", "Decisions in the last plan, per policy, the actuator they go to (empty: none acts on it yet) and their kind; /plan.json has each one's reason.")
            .with(per.into_iter().map(|((p, a, k), n)| (l(&[("policy", &p), ("actuator", &a), ("kind", k)]), n)).collect()),
        def!("joule_plan_knobs", Gauge, None, "", "Knobs the last plan's merge set, per owning actuator and knob kind; /plan.json has each one's setting and every request that shaped it.")
            .with(knobs.into_iter().map(|((a, k), n)| (l(&[("actuator", a), ("knob", k)]), n)).collect()),
        def!("joule_plan_conflicts", Gauge, None, "", "Wants for one knob that could not both hold in the last plan, per knob kind, the policy that won and the one that lost; the event log and /plan.json say why.")
            .with(conflicts.into_iter().map(|((k, w, lost), n)| (l(&[("knob", k), ("won", w), ("lost", lost)]), n)).collect()),
        def!("joule_actuator_up", Gauge, None, "", "1 when the actuator's last start or reconcile succeeded.")
            .with(actuators.iter().map(|a| (l(&[("actuator", &a.name)]), f64::from(u8::from(a.ok)))).collect()),
        def!("joule_actuator_errors", Counter, None, "", "Reconciles of the actuator that failed (each retried the next period).")
            .with(actuators.iter().map(|a| (l(&[("actuator", &a.name)]), a.errors_total as f64)).collect()),
    ];
    for a in actuators {
        out.extend(a.state.families());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use joule_core::snapshot::*;

    const UNITS: [&str; 8] = ["_ratio", "_seconds", "_watts", "_joules", "_celsius", "_hertz", "_bytes_per_second", "_bytes"];

    /// Families that carry no measured value, and why they have no `source` label.
    const NO_SOURCE: [(&str, &str); 20] = [
        ("joule_pod_index_pods", "the agent's own bookkeeping of the runtime's answers"),
        ("joule_pod_index_unnamed_pods", "the agent's own bookkeeping of the runtime's answers"),
        ("joule_pod_index_stale_seconds", "the agent's own bookkeeping of the runtime's answers"),
        ("joule_pod_index_refreshes", "the agent's own bookkeeping of the runtime's answers"),
        ("joule_pod_index_errors", "the agent's own bookkeeping of the runtime's answers"),
        ("joule_thermal_stage_threshold_celsius", "a setting chosen at start, not a reading"),
        ("joule_thermal_limit_celsius", "a setting chosen at start, not a reading"),
        ("joule_power_stage_threshold_watts", "a setting, not a reading"),
        ("joule_agent_recovered_changes", "the agent's own bookkeeping"),
        ("joule_thermal_stage", "a decision, not a reading: labelled computed_by and temp_source instead"),
        ("joule_agent_period_seconds", "the agent's own bookkeeping"),
        ("joule_agent_rests_ended", "the agent's own bookkeeping"),
        ("joule_agent_reading_age_seconds", "the agent's own bookkeeping"),
        ("joule_agent_samples", "the agent's own bookkeeping"),
        ("joule_agent_cpu_seconds", "the agent's own bookkeeping"),
        ("joule_agent_loop_duration_seconds", "the agent's own bookkeeping"),
        ("joule_agent_conflicts", "the agent's own bookkeeping"),
        ("joule_agent_loop_overruns", "the agent's own bookkeeping"),
        ("joule_agent_loop_duration_max_seconds", "the agent's own bookkeeping"),
        ("joule_bpf_enabled", "whether joule's own programs run, not a reading of the machine"),
    ];

    /// A snapshot in which every list has an entry, so every family has samples.
    fn full_snapshot() -> Snapshot {
        let psi_line = PsiLine { some_avg10: 1.5, some_total_us: 2_000_000, ..Default::default() };
        let mut s = Snapshot { interval_ms: 100, ..Default::default() };
        s.cpu = Cpu { utilization: vec![0.25, 0.5], total_utilization: 0.375, source: Origin::Kernel };
        s.psi = Some(Psi { cpu: Some(psi_line.clone()), io: Some(psi_line.clone()), memory: Some(psi_line), source: Origin::Kernel });
        s.cgroups = vec![CgroupCpu { path: "/app".into(), hierarchy: "v2".into(), usage_us: 5, source: Origin::Kernel, ..Default::default() }];
        s.task_wait = vec![TaskWait { pid: 7, comm: "w".into(), wait_us: 10, source: Origin::Ebpf }];
        s.classes = vec![ClassMembers { class: "web".into(), processes: 3, cgroup2_id: None, source: Origin::Kernel }];
        s.pods = Some(joule_core::membership::PodStats { pods: 3, unnamed: 1, stale_since_unix_ms: Some(1), ..Default::default() });
        s.process_events = Some(ProcessEvents {
            events_total: 5,
            lost_total: 1,
            resyncs_total: 1,
            resync_seconds_total: 0.02,
            resyncs_deferred_total: 2,
            resync_pending: false,
            dropped_total: 7,
            discoveries_total: 1,
            processes: 80,
            source: Origin::Ebpf,
        });
        s.power = Power {
            watts: 12.0,
            source: Origin::Model,
            domains: vec![PowerDomain { name: "model".into(), watts: 12.0, energy_joules_total: 3.0, source: Origin::Model, part_of_total: true }],
        };
        s.thermal.zones = vec![ThermalZone { name: "thermal_zone0".into(), kind: "acpitz".into(), temp_celsius: 40.0, trips: vec![], source: Origin::Sensor }];
        s.thermal.model = Some(ModelTemperature { temp_celsius: 40.0, source: Origin::Model });
        s.frequency = vec![CpuFreq { cpu: 0, cur_khz: 2_000_000, source: Origin::Kernel, ..Default::default() }];
        let since_load = LatencyBuckets { le_ns: vec![1024, 2048], counts: vec![1, 3], count: 4, estimated_sum_ns: 9000.0 };
        s.runq_latency = vec![RunqLatency { cgroup: "/app".into(), count: 2, since_load, source: Origin::Ebpf, ..Default::default() }];
        s.stage = Stage { value: 0, temp_celsius: 40.0, computed_by: StageEngine::Ebpf, temp_source: Origin::Sensor, ..Default::default() };
        s.net = Some(joule_core::snapshot::NetFlows {
            flows: vec![joule_core::snapshot::FlowSample {
                flow: "other".into(),
                proto: "mixed".into(),
                direction: "mixed".into(),
                cgroup: "mixed".into(),
                source: Origin::Ebpf,
                ..Default::default()
            }],
            cgroups: vec![joule_core::snapshot::CgroupNet { cgroup: "/".into(), direction: "egress".into(), source: Origin::Ebpf, ..Default::default() }],
            softirq: vec![joule_core::snapshot::CpuSoftirq { cpu: 0, source: Origin::Ebpf, ..Default::default() }],
            flows_tracked: 1,
            flows_interval_ms: 1000,
            source: Origin::Ebpf,
        });
        s
    }

    #[test]
    fn every_name_is_joule_prefixed_and_unit_suffixed_or_a_plain_count() {
        let plain = [
            "joule_thermal_stage",
            "joule_runq_wakeups",
            "joule_agent_samples",
            "joule_agent_conflicts",
            "joule_agent_loop_overruns",
            "joule_agent_rests_ended",
            "joule_agent_recovered_changes",
            "joule_bpf_enabled",
            "joule_net_flow_retransmits",
            "joule_net_cgroup_packets",
            "joule_class_processes",
            "joule_membership_events",
            "joule_membership_lost_events",
            "joule_membership_resyncs",
            "joule_membership_resyncs_deferred",
            "joule_membership_dropped_events",
            "joule_membership_discoveries",
            "joule_plan_decisions",
            "joule_plan_knobs",
            "joule_plan_conflicts",
            "joule_actuator_up",
            "joule_actuator_errors",
            "joule_class_moves",
            "joule_class_pods",
            "joule_pod_index_pods",
            "joule_pod_index_unnamed_pods",
            "joule_pod_index_refreshes",
            "joule_pod_index_errors",
            "joule_unit_drift",
            "joule_cpufreq_drift",
            "joule_cpufreq_yielded_cpus",
            "joule_knob_held_by_other",
            "joule_task_sched_pinned_threads",
            "joule_task_sched_sliced_threads",
            "joule_elevate_running",
            "joule_scx_running",
            "joule_scx_ejections",
            "joule_nap_state",
            "joule_nap_wakes",
        ];
        let defs = catalogue();
        for def in &defs {
            assert!(def.name.starts_with("joule_"), "{}", def.name);
            assert!(!def.name.ends_with("_total"), "{}: `_total` is added on the wire", def.name);
            assert!(UNITS.iter().any(|u| def.name.ends_with(u)) || plain.contains(&def.name), "{} has no unit", def.name);
            assert!(!def.help.is_empty());
            assert_eq!(defs.iter().filter(|d| d.name == def.name).count(), 1, "{} defined twice", def.name);
        }
        for p in plain {
            assert!(defs.iter().any(|d| d.name == p), "exemption for {p}, which does not exist");
        }
    }

    /// The table's JSON pointers are the snapshot's real fields, so the three views agree.
    #[test]
    fn every_json_pointer_names_a_field_of_the_snapshot() {
        let json = serde_json::to_value(full_snapshot()).unwrap();
        for def in catalogue() {
            if !def.json.is_empty() {
                assert!(json.pointer(def.json).is_some(), "{}: {} is not in the snapshot JSON", def.name, def.json);
            }
        }
        let in_snapshot = [
            "joule_agent_",
            "joule_thermal_stage_threshold_",
            "joule_thermal_limit_",
            "joule_power_stage_threshold_",
            "joule_plan_",
            "joule_actuator_",
            "joule_thermal_class_cap_",
            "joule_class_moves",
            "joule_class_pods",
            "joule_pod_index_",
            "joule_unit_drift",
            "joule_cpufreq_",
            "joule_knob_",
            "joule_task_sched_",
            "joule_elevate_",
            "joule_tc_",
            "joule_scx_",
            "joule_nap_",
        ];
        for def in catalogue() {
            assert_eq!(def.json.is_empty(), in_snapshot.iter().any(|p| def.name.starts_with(p)), "{}", def.name);
        }
    }

    fn status(name: &str, ok: bool, state: impl joule_core::control::ActuatorState + 'static) -> ActuatorStatus {
        ActuatorStatus { name: name.into(), ok, errors_total: u64::from(!ok) * 3, state: std::sync::Arc::new(state), ..Default::default() }
    }

    #[test]
    fn control_families_count_decisions_knobs_and_conflicts_and_report_each_actuator() {
        use joule_core::control::{merge, Facts, Want};
        let mut plan = Plan::default();
        plan.push(
            "thermal",
            None,
            Want::ThermalStage { stage: 1, path: joule_core::control::ThermalPath::Cgroup, actions: joule_core::config::StageActions::default_for(1) },
            "r",
        );
        plan.push("classes", Some("cgroup_cpu"), Want::HoldClasses { classes: vec!["a".into()] }, "r");
        plan.push("thermal", Some("cgroup_cpu"), Want::CapClass { class: "batch".into(), cpu_pct: 35.0 }, "r");
        plan.push("placement", Some("task_sched"), Want::Affinity { class: "lat".into(), cpus: vec![1] }, "r");
        plan.push("elevate", Some("task_sched"), Want::Elevate { class: "lat".into(), cpu: 0, slice_us: 50, pattern: "shared".into() }, "r");
        merge(&mut plan, &Facts::default());
        let cap = joule_qos::ClassCap { cpu_pct: 35.0, quota_us: Some(70_000), period_us: 100_000, ratio: 0.35, knob: "/cg/cpu.max".into() };
        let state = joule_act::cgroup_cpu::CgroupCpuState { caps: [("batch".to_string(), cap)].into_iter().collect(), ..Default::default() };
        let acts = [status("cgroup_cpu", false, state)];
        let fams = control_families(&plan, &acts);
        let get = |name: &str| fams.iter().find(|f| f.def.name == name).unwrap_or_else(|| panic!("no {name}"));
        let d = &get("joule_plan_decisions").samples;
        assert_eq!(d.len(), 5);
        assert!(d
            .iter()
            .any(|(l, v)| l.contains(&("kind".into(), "thermal_stage".into())) && l.contains(&("actuator".into(), String::new())) && *v == Value::Number(1.0)));
        assert!(get("joule_plan_knobs").samples.contains(&(l(&[("actuator", "task_sched"), ("knob", "class_affinity")]), Value::Number(1.0))));
        assert_eq!(
            get("joule_plan_conflicts").samples,
            vec![(l(&[("knob", "class_affinity"), ("won", "elevate"), ("lost", "placement")]), Value::Number(1.0))]
        );
        assert_eq!(get("joule_actuator_up").samples[0].1, Value::Number(0.0));
        assert_eq!(get("joule_actuator_errors").samples[0].1, Value::Number(3.0));
        assert_eq!(get("joule_thermal_class_cap_ratio").samples, vec![(l(&[("class", "batch")]), Value::Number(0.35))]);
        assert!(!fams.iter().any(|f| f.def.name == "joule_scx_running"), "no scx actuator, no scx family");
        for f in &fams {
            assert!(f.def.name.starts_with("joule_") && !f.def.name.ends_with("_total"), "{}", f.def.name);
        }
    }

    #[test]
    fn the_scx_actuators_state_becomes_running_and_ejections_per_kind() {
        let ejections_total = [("SYSRQ".to_string(), 1), ("ERROR_STALL".to_string(), 2)].into_iter().collect();
        let acts = [status("scx", true, joule_act::scx::ScxState { running: false, ejections_total, ..Default::default() })];
        let fams = control_families(&Plan::default(), &acts);
        let get = |name: &str| &fams.iter().find(|f| f.def.name == name).unwrap().samples;
        assert_eq!(get("joule_scx_running"), &vec![(vec![], Value::Number(0.0))]);
        let ej = get("joule_scx_ejections");
        assert_eq!(ej.len(), 2);
        assert!(ej.contains(&(l(&[("kind", "ERROR_STALL")]), Value::Number(2.0))), "{ej:?}");
    }

    #[test]
    fn the_nap_actuators_state_becomes_state_residency_and_wakes_per_reason() {
        let mut st = joule_act::nap::NapState::default();
        st.status.napping = true;
        st.status.residency_seconds = 2.5;
        st.status.wakes_total = [("tcp:80".to_string(), 3), ("activity".to_string(), 1)].into_iter().collect();
        let acts = [status("nap", true, st)];
        let fams = control_families(&Plan::default(), &acts);
        let get = |n: &str| &fams.iter().find(|f| f.def.name == n).unwrap().samples;
        assert_eq!(get("joule_nap_state"), &vec![(vec![], Value::Number(1.0))]);
        assert_eq!(get("joule_nap_residency_seconds"), &vec![(vec![], Value::Number(2.5))]);
        assert_eq!(get("joule_nap_wakes").len(), 2);
    }

    #[test]
    fn every_measured_value_says_where_it_came_from() {
        let fams = families(&full_snapshot(), &AgentStats::default());
        let origins = ["sensor", "kernel", "ebpf", "model"];
        for f in &fams {
            if NO_SOURCE.iter().any(|(n, _)| *n == f.def.name) {
                continue;
            }
            assert!(!f.samples.is_empty(), "{}: no sample, so nothing was checked", f.def.name);
            for (labels, _) in &f.samples {
                let source = labels.iter().find(|(k, _)| k == "source").map(|(_, v)| v.as_str());
                assert!(source.is_some_and(|v| origins.contains(&v)), "{} {labels:?} lacks a source label", f.def.name);
            }
        }
        for (name, _) in NO_SOURCE {
            assert!(fams.iter().any(|f| f.def.name == name), "exemption for {name}, which does not exist");
        }
    }

    #[test]
    fn samples_match_their_kind_and_use_no_reserved_label() {
        for f in families(&full_snapshot(), &AgentStats::default()) {
            for (labels, v) in &f.samples {
                assert_eq!(matches!(v, Value::Histogram(_)), f.def.kind == Kind::Histogram, "{}", f.def.name);
                // `le` belongs to histogram buckets, `quantile` to summaries: joule has none.
                assert!(!labels.iter().any(|(k, _)| k == "le" || k == "quantile"), "{} {labels:?}", f.def.name);
            }
        }
    }

    #[test]
    fn the_limit_thresholds_and_a_starts_leftovers_are_exported_with_where_they_came_from() {
        let a = AgentStats {
            limits: Some(Limits {
                stage_thresholds_celsius: vec![70.0, 75.0, 80.0],
                thresholds_kind: "trip points".into(),
                limit_celsius: Some(85.0),
                limit_from: joule_core::thermal_sensors::LimitFrom::PassiveTrip,
                power_thresholds_watts: vec![9.0, 10.0, 11.0],
            }),
            recovered: Some(Recovered { undone: 2, already_gone: 1, failed: 1 }),
            ..AgentStats::default()
        };
        let fams = families(&full_snapshot(), &a);
        let get = |name: &str| fams.iter().find(|f| f.def.name == name).unwrap_or_else(|| panic!("no {name}")).samples.clone();
        let lbl = |pairs: &[(&str, &str)]| pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect::<Labels>();
        assert_eq!(get("joule_thermal_limit_celsius"), vec![(lbl(&[("from", "passive_trip")]), Value::Number(85.0))]);
        let stages = get("joule_thermal_stage_threshold_celsius");
        assert_eq!(stages[2], (lbl(&[("stage", "3"), ("from", "trip_points")]), Value::Number(80.0)));
        assert_eq!(get("joule_power_stage_threshold_watts")[0], (lbl(&[("stage", "1"), ("from", "config")]), Value::Number(9.0)));
        let found = get("joule_agent_recovered_changes");
        assert!(found.contains(&(lbl(&[("outcome", "failed")]), Value::Number(1.0))) && found.len() == 3, "{found:?}");
        // A Pi: the firmware's limit, and stages that say so.
        let pi = AgentStats {
            limits: Some(Limits {
                stage_thresholds_celsius: vec![77.0, 79.0, 79.6],
                thresholds_kind: "firmware".into(),
                limit_celsius: Some(80.0),
                limit_from: joule_core::thermal_sensors::LimitFrom::Firmware,
                ..Limits::default()
            }),
            ..AgentStats::default()
        };
        let fams = families(&full_snapshot(), &pi);
        let get = |name: &str| fams.iter().find(|f| f.def.name == name).unwrap_or_else(|| panic!("no {name}")).samples.clone();
        assert_eq!(get("joule_thermal_limit_celsius"), vec![(lbl(&[("from", "firmware")]), Value::Number(80.0))]);
        assert_eq!(get("joule_thermal_stage_threshold_celsius")[0].0, lbl(&[("stage", "1"), ("from", "firmware")]));
        // An agent that chose no limit yet exports none (not a 0 °C limit).
        assert!(families(&full_snapshot(), &AgentStats::default()).iter().any(|f| f.def.name == "joule_thermal_limit_celsius" && f.samples.is_empty()));
    }

    #[test]
    fn runq_histogram_is_in_seconds_from_the_cumulative_buckets() {
        let fams = families(&full_snapshot(), &AgentStats::default());
        let f = fams.iter().find(|f| f.def.name == "joule_runq_latency_seconds").unwrap();
        assert_eq!(f.def.kind, Kind::Histogram);
        let Value::Histogram(h) = &f.samples[0].1 else { panic!("not a histogram") };
        assert_eq!(h, &Histogram { buckets: vec![(1.024e-6, 1), (2.048e-6, 3)], count: 4, sum: 9e-6 });
    }

    #[test]
    fn pods_not_named_are_counted_with_how_long_the_oldest_has_waited() {
        let pods = joule_core::membership::PodStats { pods: 4, unnamed: 2, stale_since_unix_ms: Some(1_000), errors_total: 3, ..Default::default() };
        let mut s = Snapshot { taken_at_ms: 41_000, pods: Some(pods), ..Default::default() };
        let get = |s: &Snapshot, name: &str| {
            families(s, &AgentStats::default()).into_iter().find(|f| f.def.name == name).map(|f| f.samples[0].1.clone()).unwrap_or_else(|| panic!("no {name}"))
        };
        assert_eq!(get(&s, "joule_pod_index_stale_seconds"), Value::Number(40.0));
        assert_eq!(get(&s, "joule_pod_index_unnamed_pods"), Value::Number(2.0));
        assert_eq!(get(&s, "joule_pod_index_errors"), Value::Number(3.0));
        s.pods.as_mut().unwrap().stale_since_unix_ms = None;
        assert_eq!(get(&s, "joule_pod_index_stale_seconds"), Value::Number(0.0), "every pod seen is named");
        s.pods = None;
        assert!(!families(&s, &AgentStats::default()).iter().any(|f| f.def.name.starts_with("joule_pod_index_")), "no pod class, no pod families");
    }
}
