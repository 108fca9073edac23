//! The "nap" actuator (issue 10): holds the nap the policy asks for. It owns the nap's own
//! knobs (CPUs offline, devices' runtime PM), its fast-wake eBPF program and the waiter thread;
//! the shared knobs it acts through their owners: the class's own cgroup is frozen by the
//! freezer actuator (the class mover keeps the class's processes there: nap never moves one)
//! and the lowest frequency is a request held with the cpufreq owner. At start it works out the
//! machine-nap writes, refuses what the machine cannot do (system sleep without `freeze` in
//! /sys/power/state), loads the fast-wake program and starts the waiter. Entering and leaving a
//! nap are in `core.rs`; this file wires them to the plan and publishes the status `joule nap
//! status` reads from the agent's view (the actuator's state).

pub mod core;

use self::core::{Entered, NapActions, NapCore, Trigger, SLEEP_OWNER};
use crate::cpufreq::FreqRequests;
use crate::freezer::Freezing;
use joule_bpf::{NapProbe, NapProto};
use joule_core::config::{Config, NapConfig};
use joule_core::control::{owner, ActCx, ActError, Actuator, ActuatorState, Plan, Want};
use joule_core::effects::{Effects, RealEffects};
use joule_core::metric::{l, Family, MetricDef};
use joule_core::nap::NapCounters;
use joule_core::view::NapView;
use joule_telemetry::nap::{TcpPorts, UdpPorts};
use serde::Serialize;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How often the eBPF count of live TCP sockets is set again from a walk of /proc (a socket
/// older than the program that closes counts down once too often until then).
const RECOUNT_CONNS: Duration = Duration::from_secs(30);

/// The metric families this actuator reports.
pub const METRICS: &[MetricDef] = &[
    MetricDef::gauge("joule_nap_state", "1 while napping (the [nap] class frozen, the machine-nap changes held), 0 while awake."),
    MetricDef::counter("joule_nap_residency_seconds", "Time spent napping since the agent started."),
    MetricDef::counter(
        "joule_nap_wakes",
        "Naps ended, per reason: the first packet on a watched port (tcp:PORT, udp:PORT, seen by eBPF), a monitor's activity, an operator's systemd job on a napped unit (operator), shutdown.",
    ),
];

/// The actuator's state: the view's [`NapView`] (the nap's status, its class, whether the fast
/// wake is loaded, and notes), which `joule nap status` reads from the agent's socket.
#[derive(Debug, Clone, Default, Serialize)]
#[serde(transparent)]
pub struct NapState(pub NapView);

impl std::ops::Deref for NapState {
    type Target = NapView;
    fn deref(&self) -> &NapView {
        &self.0
    }
}

impl std::ops::DerefMut for NapState {
    fn deref_mut(&mut self) -> &mut NapView {
        &mut self.0
    }
}

impl ActuatorState for NapState {
    fn to_json(&self) -> serde_json::Value {
        serde_json::to_value(self).unwrap_or_default()
    }
    fn families(&self) -> Vec<Family> {
        let s = &self.status;
        vec![
            METRICS[0].with(vec![(vec![], f64::from(u8::from(s.napping)))]),
            METRICS[1].with(vec![(vec![], s.residency_seconds)]),
            METRICS[2].with(s.wakes_total.iter().map(|(reason, n)| (l(&[("reason", reason)]), *n as f64)).collect()),
        ]
    }
}

pub struct NapActuator {
    cfg: NapConfig,
    procfs: PathBuf,
    sysfs: PathBuf,
    bpf: bool,
    counters: Arc<NapCounters>,
    core: Option<Arc<NapCore>>,
    probe: Option<NapProbe>,
    /// The freezer owner's handle (with `[nap] class`).
    freezer: Option<Freezing>,
    /// The cpufreq owner's handle (with `nap.machine.cpufreq_min`).
    cpufreq: Option<FreqRequests>,
    /// When the eBPF count of live TCP sockets was last set from a walk of /proc.
    conns_counted_at: Option<Instant>,
    /// Ends the waiter thread (it sleeps until a wake or this, with no period).
    waiter_stop: Option<joule_bpf::RingStop>,
    waiter: Option<JoinHandle<()>>,
    notes: Vec<String>,
    /// The napped class's systemd units, whose jobs wake the nap (`with_unit_jobs`).
    unit_jobs: Option<Arc<crate::freezer::UnitJobs>>,
    /// Why the nap is held off now because a service of its slice is stopped (logged once).
    stopped_note: Option<String>,
    /// Tells the job watcher to stop acting (it ends at the next job after this).
    jobs_stop: Arc<std::sync::atomic::AtomicBool>,
}

struct ProbeTrigger<'a>(Option<&'a NapProbe>);

impl Trigger for ProbeTrigger<'_> {
    fn arm(&self) -> io::Result<()> {
        self.0.map_or(Ok(()), |p| p.arm().map_err(io::Error::other))
    }
    fn disarm(&self) -> io::Result<()> {
        self.0.map_or(Ok(()), |p| p.disarm().map_err(io::Error::other))
    }
    fn fired(&self) -> bool {
        self.0.is_some_and(|p| !p.armed())
    }
}

impl NapActuator {
    /// `bpf`: whether the agent may load eBPF (root, not turned off). Without it a nap is left
    /// at the next period, when the monitors see the queued connection. `freezer` and
    /// `cpufreq`: the owners' handles the nap acts through.
    pub fn new(cfg: &Config, bpf: bool, counters: Arc<NapCounters>, freezer: Option<Freezing>, cpufreq: FreqRequests) -> Self {
        let t = &cfg.telemetry;
        Self {
            cfg: cfg.nap.clone(),
            procfs: t.procfs_root.clone(),
            sysfs: t.sysfs_root.clone(),
            bpf,
            counters,
            core: None,
            probe: None,
            freezer,
            cpufreq: cfg.nap.machine.cpufreq_min.then_some(cpufreq),
            conns_counted_at: None,
            waiter_stop: None,
            waiter: None,
            notes: Vec::new(),
            unit_jobs: None,
            stopped_note: None,
            jobs_stop: Arc::default(),
        }
    }

    /// The napped class is systemd units (frozen by `FreezeUnit`): a job queued on one of
    /// them or on a service of a napped slice (an operator's restart, reload, stop) thaws the
    /// nap at once and holds it off for `nap.job_hold_ms`. A slice's services have gates, so
    /// the job runs; systemd refuses a job on a napped service itself once.
    pub fn with_unit_jobs(mut self, jobs: Arc<crate::freezer::UnitJobs>) -> Self {
        self.unit_jobs = Some(jobs);
        self
    }

    /// Starts the thread that wakes the nap on a job queued on one of its units.
    fn watch_unit_jobs(&mut self, core: &Arc<NapCore>) -> Result<(), ActError> {
        let Some(jobs) = self.unit_jobs.clone() else { return Ok(()) };
        let hold = Duration::from_millis(self.cfg.job_hold_ms);
        let (c, stop, watched) = (core.clone(), self.jobs_stop.clone(), jobs.clone());
        joule_core::effects::watch_jobs(move |event, id, unit| {
            if stop.load(Ordering::Acquire) {
                return false;
            }
            let Some((what, held)) = watched.on_job(event, id, unit, hold) else { return true };
            match c.operator_wake(&what, held) {
                Ok(true) => tracing::warn!(
                    "nap: a job was queued on napped {unit}: thawed, no nap until it ends and {:.0} s more (in a napped slice its gates let the job run; a napped service refuses it once: run it again)",
                    hold.as_secs_f64()
                ),
                Ok(false) => {}
                Err(e) => tracing::error!("nap: thawing {unit} for a job on it failed: {e}"),
            }
            true
        })
        .map_err(|e| format!("watching systemd jobs on {:?}: {e}", jobs.units()))?;
        self.notes.push(format!("a systemd job on {} thaws it and holds the nap off for {:.0} s", jobs.units().join(", "), hold.as_secs_f64()));
        Ok(())
    }

    /// The machine-nap writes, each checked against what this machine has.
    fn machine_writes(&self, fx: &dyn Effects) -> Result<Vec<(PathBuf, String)>, String> {
        let m = &self.cfg.machine;
        let cpu = self.sysfs.join("devices/system/cpu");
        let mut w = Vec::new();
        for n in &m.cpus_offline {
            let p = cpu.join(format!("cpu{n}/online"));
            if !fx.exists(&p) {
                return Err(format!("nap.machine.cpus_offline: {} does not exist (CPU {n} absent or not hot-pluggable)", p.display()));
            }
            w.push((p, "0".into()));
        }
        if m.cpufreq_min && !self.cpufreq.as_ref().is_some_and(FreqRequests::available) {
            self.note_later(format!("nap.machine.cpufreq_min: no cpufreq under {} (nothing to cap)", cpu.display()));
        }
        let nic = self.cfg.monitors.interface.as_ref().and_then(|i| std::fs::canonicalize(self.sysfs.join("class/net").join(i).join("device")).ok());
        for d in &m.devices {
            let dev = std::fs::canonicalize(d).unwrap_or_else(|_| PathBuf::from(d));
            if nic.as_ref().is_some_and(|n| n.starts_with(&dev)) {
                return Err(format!("nap.machine.devices: {d} is (or holds) the watched interface's device; it must stay awake to see the first request"));
            }
            let p = Path::new(d).join("power/control");
            if !fx.exists(&p) {
                return Err(format!("nap.machine.devices: {} does not exist (no runtime PM for {d})", p.display()));
            }
            w.push((p, "auto".into()));
        }
        Ok(w)
    }

    /// Sets the fast-wake program's count of live TCP sockets on the watched ports from one walk
    /// of /proc/net/tcp{,6} (sockets older than the program never counted up; the count then
    /// follows state changes, with no walk each period).
    fn count_conns(&mut self) -> Result<(), ActError> {
        let Some(p) = &self.probe else { return Ok(()) };
        if self.cfg.monitors.tcp_ports.is_empty() {
            return Ok(());
        }
        let tcp = TcpPorts { procfs: self.procfs.clone(), ports: self.cfg.monitors.tcp_ports.clone(), counters: None };
        let (conns, _) = tcp.count()?;
        p.set_conns(conns as i64)?;
        self.counters.set_tcp_conns(conns as i64);
        self.conns_counted_at = Some(Instant::now());
        Ok(())
    }

    fn note_later(&self, note: String) {
        tracing::info!("{note}");
    }

    fn nap_state(&self) -> NapState {
        NapState(NapView {
            status: self.core.as_ref().map(|c| c.status()).unwrap_or_default(),
            class: self.cfg.class.clone(),
            fast_wake: self.probe.is_some(),
            notes: self.notes.clone(),
        })
    }
}

/// The system-sleep check: suspend-to-idle needs `freeze` in /sys/power/state.
pub fn system_sleep_refusal(sysfs: &Path) -> Option<String> {
    let p = sysfs.join("power/state");
    match std::fs::read_to_string(&p) {
        Ok(s) if s.split_whitespace().any(|w| w == "freeze") => None,
        Ok(s) => Some(format!(
            "nap.system_sleep refused: {} offers {:?}, not `freeze` (suspend-to-idle); this kernel was built without CONFIG_SUSPEND. Use service nap and machine nap instead",
            p.display(),
            s.trim()
        )),
        Err(e) => Some(format!("nap.system_sleep refused: cannot read {}: {e}", p.display())),
    }
}

impl Actuator for NapActuator {
    fn name(&self) -> &'static str {
        owner::NAP
    }

    fn init(&mut self, cx: &mut ActCx<'_>) -> Result<(), ActError> {
        if self.cfg.system_sleep {
            if let Some(why) = system_sleep_refusal(&self.sysfs) {
                return Err(why.into());
            }
            return Err(
                "nap.system_sleep: suspend-to-idle is offered here, but joule does not enter it yet (not testable on the development machine); turn it off"
                    .into(),
            );
        }
        let writes = self.machine_writes(cx.fx)?;
        let freeze = match (&self.cfg.class, &self.freezer) {
            (Some(class), Some(f)) => Some((f.clone(), class.clone())),
            (Some(class), None) => {
                return Err(format!("nap.class = {class:?} needs the freezer actuator (the class's cgroups are made with agent.apply_classes = true)").into())
            }
            (None, _) => None,
        };
        let actions = NapActions { freeze, writes, cpufreq_min: self.cpufreq.clone() };
        let core = Arc::new(NapCore::new(Arc::new(RealEffects), cx.journal.clone(), actions, self.counters.clone()));
        let ports: Vec<(NapProto, u16)> =
            self.cfg.monitors.tcp_ports.iter().map(|p| (NapProto::Tcp, *p)).chain(self.cfg.monitors.udp_ports.iter().map(|p| (NapProto::Udp, *p))).collect();
        if self.bpf && !ports.is_empty() {
            let probe = NapProbe::load(&ports).map_err(|e| format!("loading the nap fast-wake program: {e}"))?;
            let waker = probe.waker()?;
            let stop = joule_bpf::RingStop::new().map_err(|e| e.to_string())?;
            self.waiter_stop = Some(stop.clone());
            let c = core.clone();
            self.waiter = Some(
                std::thread::Builder::new()
                    .name("joule-nap-wake".into())
                    .spawn(move || {
                        // The wake path is the request's latency: this thread should run the
                        // moment the ring buffer has a wake, ahead of the machine's ordinary
                        // work, without a real-time policy (nice -10; it dies with the agent).
                        // SAFETY: setpriority on this thread's own tid.
                        if unsafe { libc::setpriority(libc::PRIO_PROCESS, libc::gettid() as libc::id_t, -10) } != 0 {
                            tracing::warn!("nap: could not raise the waiter thread's priority: {}", io::Error::last_os_error());
                        }
                        let r = waker.run(&stop, |w| {
                            let reason = format!("{}:{}", if w.proto == NapProto::Udp { "udp" } else { "tcp" }, w.port);
                            // The thaw, and nothing else: the status file (a write and a
                            // rename, 0.3-0.4 ms on this machine's ext4, competing with the
                            // thawed service for a CPU: +0.48 -> +0.30 ms at p50, issue 19)
                            // and the journal's compaction are the loop's, which the wake
                            // ends the napping sleep of.
                            if let Err(e) = c.wake(&reason, self::core::instant_of_monotonic_ns(w.at_ns)) {
                                tracing::error!("nap: waking for {reason} failed: {e}");
                            }
                        });
                        if let Err(e) = r {
                            tracing::error!("nap: the waiter thread stopped: {e}");
                        }
                    })
                    .map_err(|e| format!("starting the nap waiter thread: {e}"))?,
            );
            self.probe = Some(probe);
            self.count_conns()?;
        } else if !ports.is_empty() {
            self.notes.push("eBPF off: a nap is left at the next period, when the monitors see the queued request (no fast wake)".into());
        }
        self.watch_unit_jobs(&core)?;
        self.core = Some(core);
        (cx.events)("nap_ready", serde_json::json!({ "class": self.cfg.class, "fast_wake": self.probe.is_some(), "idle_ms": self.cfg.idle_ms }));
        Ok(())
    }

    fn reconcile(&mut self, plan: &Plan, cx: &mut ActCx<'_>) -> Result<(), ActError> {
        let Some(core) = self.core.clone() else { return Ok(()) };
        let want = plan.for_actuator(owner::NAP).find_map(|d| match d.want {
            Want::Nap { nap, .. } => Some(nap),
            _ => None,
        });
        core.compact()?;
        let seen_hits = self.counters.port_hits_total();
        let napping = core.status().napping;
        // A stopped service of a napped slice keeps it awake (its start would be refused).
        let stopped = self.unit_jobs.as_ref().and_then(|j| j.stopped(cx.fx));
        if stopped != self.stopped_note {
            if let Some(why) = &stopped {
                tracing::warn!("nap: {why}");
                (cx.events)("nap_held", serde_json::json!({ "why": why }));
            }
            self.stopped_note = stopped.clone();
        }
        match want {
            Some(true) if !napping && stopped.is_none() => {
                let tcp = TcpPorts { procfs: self.procfs.clone(), ports: self.cfg.monitors.tcp_ports.clone(), counters: None };
                let udp = UdpPorts { procfs: self.procfs.clone(), ports: self.cfg.monitors.udp_ports.clone() };
                let probe = self.probe.as_ref();
                // With eBPF, its count of live sockets on the ports (a connection queued for
                // accept is one: it reached ESTABLISHED) and of packets since the decision: no
                // walk of /proc/net/tcp{,6} on the entry's path (4 ms of its 4.5 here, issue 19).
                let ebpf_conns = probe.and(self.counters.tcp_conns());
                let mut last_check = || -> io::Result<Option<String>> {
                    let hits = probe.map_or(seen_hits, |p| p.hits());
                    if hits != seen_hits {
                        return Ok(Some(format!("{} packet(s) on the watched ports since the decision (ebpf)", hits - seen_hits)));
                    }
                    if let (false, Some(c)) = (tcp.ports.is_empty(), ebpf_conns) {
                        if c > 0 {
                            return Ok(Some(format!("{c} connection(s) on {:?} (ebpf)", tcp.ports)));
                        }
                    } else if !tcp.ports.is_empty() {
                        let (c, q) = tcp.count()?;
                        if c + q as usize > 0 {
                            return Ok(Some(format!("{c} connection(s), {q} queued on {:?}", tcp.ports)));
                        }
                    }
                    if !udp.ports.is_empty() && udp.queued()? > 0 {
                        return Ok(Some(format!("datagrams queued on {:?}", udp.ports)));
                    }
                    Ok(None)
                };
                match core.enter(&ProbeTrigger(probe), &mut last_check)? {
                    Entered::Napping => (cx.events)("nap", serde_json::json!({ "enter_us": core.status().last_enter_us })),
                    Entered::Aborted(why) => (cx.events)("nap_aborted", serde_json::json!({ "why": why })),
                    Entered::AlreadyNapping | Entered::Held(_) => {}
                }
            }
            Some(false) if napping && core.wake("activity", Instant::now())? => {
                (cx.events)("wake", serde_json::json!({ "reason": "activity" }));
            }
            _ => {}
        }
        if self.conns_counted_at.is_some_and(|t| t.elapsed() >= RECOUNT_CONNS) {
            self.count_conns()?;
        }
        if let Some(p) = &self.probe {
            self.counters.set_tcp_conns(p.conns());
            self.counters.port_hits_total.store(p.hits(), Ordering::Release);
        }
        Ok(())
    }

    fn state(&self) -> Arc<dyn ActuatorState> {
        Arc::new(self.nap_state())
    }

    fn shutdown(&mut self, cx: &mut ActCx<'_>) -> Result<(), ActError> {
        self.jobs_stop.store(true, Ordering::Release);
        if let Some(s) = self.waiter_stop.take() {
            s.stop();
        }
        if let Some(core) = &self.core {
            core.wake("shutdown", Instant::now())?;
        }
        if let Some(w) = self.waiter.take() {
            let _ = w.join();
        }
        self.probe = None;
        let r = cx.journal.restore_owner(SLEEP_OWNER, cx.fx)?;
        if !r.failed.is_empty() {
            return Err(format!("nap: could not undo {:?}", r.failed).into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn system_sleep_is_refused_with_the_reason_unless_the_kernel_offers_freeze() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(d.path().join("power")).unwrap();
        std::fs::write(d.path().join("power/state"), "\n").unwrap();
        let why = system_sleep_refusal(d.path()).unwrap();
        assert!(why.contains("CONFIG_SUSPEND") && why.contains("freeze"), "{why}");
        std::fs::write(d.path().join("power/state"), "freeze mem disk\n").unwrap();
        assert_eq!(system_sleep_refusal(d.path()), None);
        std::fs::remove_file(d.path().join("power/state")).unwrap();
        assert!(system_sleep_refusal(d.path()).unwrap().contains("cannot read"));
    }
}
