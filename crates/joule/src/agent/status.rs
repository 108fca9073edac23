//! The agent's view of itself: its CPU time, and the one-line status it prints for humans.

use joule_core::policy::ThermalActions;
use joule_core::Snapshot;

/// CPU time (user + system) this process has used, in seconds.
pub fn cpu_seconds_self() -> f64 {
    let r = nix::sys::resource::getrusage(nix::sys::resource::UsageWho::RUSAGE_SELF);
    r.map(|r| {
        let tv = |t: nix::sys::time::TimeVal| t.tv_sec() as f64 + t.tv_usec() as f64 / 1e6;
        tv(r.user_time()) + tv(r.system_time())
    })
    .unwrap_or(0.0)
}

/// One line for humans on stderr.
pub fn status_line(s: &Snapshot, actions: Option<&ThermalActions>, addr: &std::net::SocketAddr) -> String {
    let cpus: Vec<String> = s.cpu.utilization.iter().map(|u| format!("{:.0}%", u * 100.0)).collect();
    let worst = s.runq_latency.iter().filter(|r| r.count > 0).max_by(|a, b| a.p99_us.total_cmp(&b.p99_us));
    let runq = match worst {
        Some(r) => format!("runq p99 {:.0} µs ({})", r.p99_us, r.cgroup),
        None if !s.bpf.enabled => format!("eBPF OFF ({})", s.bpf.off_reason),
        None => "runq n/a".into(),
    };
    let acting = actions.map(|a| format!(" {a}")).unwrap_or_default();
    let driver = match s.stage.driven_by {
        joule_core::snapshot::StageDriver::Power => " by power",
        joule_core::snapshot::StageDriver::Temperature => "",
    };
    let sx = &s.sched_ext;
    let sched_ext = if sx.ops.is_empty() { sx.state.clone() } else { format!("{} ({})", sx.state, sx.ops) };
    let stage = if s.stage.computed_by == joule_core::snapshot::StageEngine::None {
        // Nothing the stage may act on was read: say so rather than a 0 °C stage 0.
        let model = s.thermal.model.as_ref().map(|m| format!("; model {:.1} °C not acted on", m.temp_celsius)).unwrap_or_default();
        format!("no thermal action (no CPU temperature sensor{model})")
    } else {
        format!("stage {}{driver} ({:.1} °C {}, by {})", s.stage.value, s.stage.temp_celsius, s.stage.temp_source, s.stage.computed_by.as_str())
    };
    format!(
        "joule: {stage}{acting} | power {:.1} W ({}) | cpu {} | {} | sched_ext {} | http://{}/metrics",
        s.power.watts,
        s.power.source,
        cpus.join(" "),
        runq,
        sched_ext,
        addr
    )
}
