//! Class membership kept from the kernel's process events (joule-bpf's process monitor), for
//! the agent with eBPF: one walk of /proc at start, then per period only the events since the
//! last one (`joule_core::membership::ProcessCache`). Events the ring buffer could not hold are
//! counted by the kernel; a loss costs one walk, at most one every [`MIN_RESYNC_GAP`] however
//! many events are lost (a user renaming a process in a loop floods the ring buffer: issue 33
//! measured 149 walks in 15 s), and the walks' count and time are reported (`process_events` in
//! the snapshot, `joule_membership_*` metrics).
//!
//! The process monitor filters in the kernel (docs/bpf.md): it sends only what can change a
//! class, and this source tells it, once a period, which processes it follows and how
//! (`follow.rs`). A walk turns the filter off while it reads /proc, so nothing is missed.

use anyhow::Context;
use joule_bpf::{Delivered, ProcEvent, ProcFilter, ProcMonitor, ProcMonitorOpts};
use joule_core::config::{ClassConfig, Config};
use joule_core::effects::RealEffects;
use joule_core::membership::{ClassPlace, PodTracker, ProcChange, ProcessCache};
use joule_core::snapshot::{ClassMembers, ProcessEvents};
use joule_core::{Origin, Snapshot};
use joule_telemetry::{Source, SourceError};
use std::os::fd::OwnedFd;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The least time between two walks of /proc after lost events: a walk costs in proportion to
/// the machine's processes, so a flood of events is paid for by at most one walk in this time;
/// in between the membership is kept from the events that arrived, staler by what was lost.
pub const MIN_RESYNC_GAP: Duration = Duration::from_secs(5);

/// The membership source, and with eBPF a descriptor `poll` reports readable while a
/// process event waits to be read: the loop's rest ends on it.
pub struct Reading {
    pub source: Box<dyn Source + Send>,
    pub ready: Option<OwnedFd>,
}

/// The agent's membership source, when the config has classes: kept from process events with
/// eBPF; else a walk of /proc every period when placement or the user-space scheduler follow a
/// class's threads, and once a second otherwise.
pub fn source(cfg: &Config, places: Vec<ClassPlace>, bpf: bool) -> anyhow::Result<Option<Reading>> {
    let t = &cfg.telemetry;
    if cfg.classes.is_empty() {
        return Ok(None);
    }
    if bpf {
        let creds = watch_creds(cfg);
        let m = EventMembership::new(&t.procfs_root, &cfg.classes, places, creds, pod_tracker(cfg))?;
        let ready = m.monitor.ready_fd().context("while opening the process monitor's events for the loop's wake")?;
        return Ok(Some(Reading { source: Box::new(m), ready: Some(ready) }));
    }
    let follow = cfg.energy.enabled && !cfg.energy.targets.is_empty() || cfg.elevate.enabled();
    let every = if follow { Duration::from_millis(cfg.agent.period_ms) } else { Duration::from_secs(1) };
    let walk = joule_telemetry::MembershipSource::new(&t.procfs_root, &cfg.classes, places, every).with_pods(pod_tracker(cfg));
    Ok(Some(Reading { source: Box::new(walk), ready: None }))
}

/// Where pods' names and labels come from: the node's container runtime over CRI, when a class
/// matches pods by anything but their QoS class; nothing otherwise. A socket missing at start
/// (a runtime that starts after joule) is said once and looked for again at each question;
/// until one answers, name rules match no pod and the capping pod classes hold the pods seen.
pub fn pod_tracker(cfg: &Config) -> PodTracker {
    if !cfg.classes.iter().any(|c| c.matches.pod.needs_runtime()) {
        return PodTracker::default();
    }
    let k = &cfg.kubernetes;
    let timeout = Duration::from_millis(k.cri_timeout_ms);
    let cri = match k.cri_socket.clone().or_else(|| joule_kube::Cri::find_socket(Path::new("/"))) {
        Some(socket) => joule_kube::Cri::new(&socket, timeout),
        None => {
            tracing::warn!(
                "classes match pods by name, namespace, labels or annotations, but no container runtime's CRI socket was found ({}): set kubernetes.cri_socket; until one answers they match no pod, and the capping pod classes hold every pod they could match",
                joule_kube::DEFAULT_SOCKETS.join(", ")
            );
            joule_kube::Cri::discovering("/", timeout)
        }
    };
    match cri {
        Ok(cri) => PodTracker::new(Some(Box::new(cri))),
        Err(e) => {
            tracing::warn!("{e}: classes that match pods by name or labels match no pod");
            PodTracker::default()
        }
    }
}

/// Whether membership needs to see uid changes: a class matches by uid, or a class grants (a
/// child that switches to another user must leave it, docs/security.md). The setuid hook
/// runs at every syscall's exit (tp_btf/sys_exit: fentry does not attach on the development
/// kernel), so a config whose classes only take away does without it.
pub fn watch_creds(cfg: &Config) -> bool {
    cfg.classes.iter().any(|c| !c.matches.uid.is_empty() || !cfg.grants(c).is_empty())
}

/// The process monitor's ring buffer size in bytes (a power of two, ≥ 4096), for tests that
/// force lost events; the default holds ~8,000 events.
pub const RINGBUF_ENV: &str = "JOULE_TEST_PROCMON_RINGBUF_BYTES";

pub struct EventMembership {
    cache: ProcessCache,
    monitor: ProcMonitor,
    classes: Vec<ClassConfig>,
    lost_seen: u64,
    stats: ProcessEvents,
    /// When /proc was last walked; a loss since then that is still waiting for its walk.
    walked_at: Instant,
    pending: bool,
    /// Children the filter never sent are to be found by a walk (after the same gap as a loss's,
    /// at the next period: unlike a loss it does not keep the loop from resting).
    discover: bool,
    following: super::follow::Following,
}

impl EventMembership {
    /// Loads the process monitor (its setuid hook when `creds`: see [`watch_creds`]), then walks
    /// /proc once: an event sent during the walk is applied after it, so none is missed.
    /// [`RINGBUF_ENV`] sizes the ring buffer (tests make it tiny to force losses).
    pub fn new(procfs: &Path, classes: &[ClassConfig], places: Vec<ClassPlace>, creds: bool, pods: PodTracker) -> anyhow::Result<EventMembership> {
        let ringbuf_bytes = std::env::var(RINGBUF_ENV).ok().and_then(|v| v.parse().ok());
        let filter = filter(procfs, classes);
        let opts = ProcMonitorOpts { creds, ringbuf_bytes, filter };
        let monitor = ProcMonitor::load(&opts).context("while loading the process monitor")?;
        let cache = ProcessCache::new(procfs, classes, places).with_pods(pods);
        let stats = ProcessEvents { source: Origin::Ebpf, ..Default::default() };
        let mut m = EventMembership {
            lost_seen: monitor.lost(),
            cache,
            monitor,
            classes: classes.to_vec(),
            stats,
            walked_at: Instant::now(),
            pending: false,
            discover: false,
            following: Default::default(),
        };
        m.walk();
        m.stats.processes = m.cache.processes();
        Ok(m)
    }

    /// Walks /proc and rebuilds the cache; with the filter, turned off meanwhile (every event is
    /// sent), then every process decided and the filter on again.
    fn walk(&mut self) {
        let filtering = self.monitor.filtering();
        let before = if filtering {
            self.monitor.set_filter_on(false);
            self.monitor.followed()
        } else {
            Vec::new()
        };
        self.cache.walk();
        self.walked_at = Instant::now();
        if !filtering {
            return;
        }
        self.following.walked(before, &self.cache);
        // What was sent while walking, so that the settlements below have seen it.
        match self.monitor.drain_delivered() {
            Ok(events) => self.apply(events),
            Err(e) => tracing::warn!("reading the process monitor after a walk: {e}"),
        }
        self.settle(&[]);
        self.monitor.set_filter_on(true);
    }

    /// Applies what the kernel sent (after noting what it says for the filter).
    fn apply(&mut self, events: Vec<Delivered>) {
        self.stats.events_total += events.len() as u64;
        let mut changes = Vec::with_capacity(events.len());
        for d in &events {
            tracing::trace!("process event {:?} (seq {}, adopted {}, children {})", d.event, d.seq, d.adopted, d.children);
            self.discover |= self.following.note(d, &self.cache);
            // A rename the filter kept in the kernel (a member's) shows in the next event's name:
            // the cache takes it first, so no decision is made on a stale one.
            let (pid, started) = (d.event.pid(), d.event.started());
            let renamed = matches!(d.event, ProcEvent::Cgroup { .. } | ProcEvent::Creds { .. })
                && self.cache.started_of(pid) == Some(started)
                && self.cache.comm_of(pid).is_some_and(|c| *c != d.comm);
            if renamed {
                changes.push(ProcEvent::Rename { pid, started, comm: d.comm.clone() });
            }
            changes.push(d.event.clone());
        }
        for e in rereads_once(changes) {
            self.cache.apply(&change(e));
        }
    }

    /// Tells the kernel what was decided about the processes touched since the last time.
    fn settle(&mut self, changed: &[i32]) {
        let (settlements, discover) = self.following.settle(&mut self.cache, changed);
        tracing::trace!("settled {settlements:?}");
        self.discover |= discover;
        if let Err(e) = self.monitor.settle(&settlements) {
            tracing::warn!("settling {} process(es) in the process monitor: {e}", settlements.len());
        }
    }
}

/// The filter for these classes: their rules and the cgroup hierarchies mounted here. None when
/// they do not fit in one (every event is then sent, as without a filter).
fn filter(procfs: &Path, classes: &[ClassConfig]) -> Option<ProcFilter> {
    let Some(rules) = joule_core::membership::prefilter::Prefilter::compile(classes) else {
        tracing::warn!("the classes' rules do not fit in the process monitor's filter (more than 64 classes, or more than 1,024 values of a kind): every process event is read");
        return None;
    };
    let mounts = joule_core::mountinfo::read(&procfs.join("self/mountinfo"));
    let cgroup_mounts = mounts.into_iter().filter(|m| m.fstype == "cgroup" || m.fstype == "cgroup2").map(|m| m.mount_point).collect();
    Some(ProcFilter { rules, cgroup_mounts, own_pid: std::process::id() })
}

/// `events` without the cgroup moves and setuids of a process that a later event of the same
/// kind repeats: each costs a read of the process's *current* state, so the last one alone
/// gives the same result (a move of a process in three v1 hierarchies is three events).
fn rereads_once(events: Vec<ProcEvent>) -> Vec<ProcEvent> {
    let mut seen = std::collections::HashSet::new();
    let mut keep: Vec<ProcEvent> = events
        .into_iter()
        .rev()
        .filter(|e| match e {
            ProcEvent::Cgroup { pid, started } => seen.insert((0u8, *pid, *started)),
            ProcEvent::Creds { pid, started } => seen.insert((1u8, *pid, *started)),
            _ => true,
        })
        .collect();
    keep.reverse();
    keep
}

fn change(e: ProcEvent) -> ProcChange {
    match e {
        ProcEvent::Fork { pid, ppid, started, comm } => ProcChange::Fork { pid, ppid, started, comm },
        ProcEvent::Exec { pid, started, comm } => ProcChange::Exec { pid, started, comm },
        ProcEvent::Exit { pid, started } => ProcChange::Exit { pid, started },
        ProcEvent::Rename { pid, started, comm } => ProcChange::Rename { pid, started, comm },
        ProcEvent::Cgroup { pid, started } => ProcChange::Cgroup { pid, started },
        ProcEvent::Creds { pid, started } => ProcChange::Creds { pid, started },
    }
}

impl Source for EventMembership {
    fn name(&self) -> &'static str {
        "membership"
    }

    fn sample(&mut self, snap: &mut Snapshot) -> Result<(), SourceError> {
        let events = self.monitor.drain_delivered().map_err(|e| SourceError::Other(e.to_string()))?;
        self.apply(events);
        let lost = self.monitor.lost();
        if lost > self.lost_seen {
            if !self.pending && self.walked_at.elapsed() < MIN_RESYNC_GAP {
                self.stats.resyncs_deferred_total += 1;
            }
            self.pending = true;
            self.stats.lost_total = lost;
            self.lost_seen = lost;
        }
        if (self.pending || self.discover) && self.walked_at.elapsed() >= MIN_RESYNC_GAP {
            let t0 = Instant::now();
            let discovery = !self.pending;
            self.walk();
            let took = self.walked_at.duration_since(t0).as_secs_f64();
            self.stats.resyncs_total += 1;
            self.stats.discoveries_total += u64::from(discovery);
            self.stats.resync_seconds_total += took;
            if discovery {
                tracing::debug!("walked /proc in {:.1} ms for children the filter had not sent", took * 1e3);
            } else {
                tracing::warn!(
                    "the process monitor lost events ({} since start): walked /proc again in {:.1} ms (at most one walk every {} s)",
                    lost,
                    took * 1e3,
                    MIN_RESYNC_GAP.as_secs()
                );
            }
            (self.pending, self.discover) = (false, false);
        }
        self.stats.resync_pending = self.pending;
        let m = self.cache.reading(&RealEffects);
        if self.monitor.filtering() {
            self.settle(if m.full { &[] } else { &m.changed });
            self.stats.dropped_total = self.monitor.dropped();
        }
        self.stats.processes = self.cache.processes();
        snap.classes = m
            .counts(&self.classes)
            .into_iter()
            .map(|(class, processes)| ClassMembers { cgroup2_id: m.cgroup2_id(&class), class, processes, source: Origin::Ebpf })
            .collect();
        snap.process_events = Some(self.stats.clone());
        if self.classes.iter().any(|c| c.matches.pod.needs_runtime()) {
            snap.pods = Some(self.cache.pod_stats().clone());
        }
        snap.membership = Arc::new(m);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_process_moved_in_three_hierarchies_is_read_once_after_its_last_move() {
        let ev = vec![
            ProcEvent::Cgroup { pid: 7, started: 1 },
            ProcEvent::Fork { pid: 8, ppid: 7, started: 2, comm: "x".into() },
            ProcEvent::Cgroup { pid: 7, started: 1 },
            ProcEvent::Creds { pid: 7, started: 1 },
            ProcEvent::Cgroup { pid: 7, started: 1 },
            ProcEvent::Cgroup { pid: 8, started: 2 },
        ];
        let kept = rereads_once(ev);
        assert_eq!(
            kept,
            [
                ProcEvent::Fork { pid: 8, ppid: 7, started: 2, comm: "x".into() },
                ProcEvent::Creds { pid: 7, started: 1 },
                ProcEvent::Cgroup { pid: 7, started: 1 },
                ProcEvent::Cgroup { pid: 8, started: 2 },
            ]
        );
    }
}
