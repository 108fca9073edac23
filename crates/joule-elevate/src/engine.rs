//! The engine: takes the targets (journalling and telling the guardian how to undo each change
//! *before* making it), binds them to one core at SCHED_FIFO LOW, then runs the hot loop — raise
//! the chosen slot LOW→MID, lower the previous one MID→LOW, wait one slice — and puts every
//! thread back on teardown (also on `Drop`).
//!
//! The hot loop goes through the `Sched` seam (`&dyn Effects`): one indirect call next to a
//! syscall of a microsecond or more; `joule-bench elevate` measures both (section `floor`,
//! `set_prio_seam_ns` vs `set_prio_direct_ns`) and the difference is inside the noise.

use crate::guardian::Guardian;
use crate::landing::SchedIns;
use crate::target::Target;
use crate::timing::{now_ns, WaitMethod, Waiter};
use crate::{gettid, ElevateError, Prio};
use joule_core::effects::{Effects, SchedAttr};
use joule_core::journal::{self, Journal, RestoreReport, Undo};
use serde::Serialize;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// Where the scheduler runs relative to its targets (seed section 2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Pattern {
    /// On the targets' core; gives the core away by sleeping for the slice.
    Shared,
    /// On a core of its own; spins on the clock, so switches are on time but it costs a core.
    Dedicated,
}

impl Pattern {
    pub fn name(self) -> &'static str {
        match self {
            Pattern::Shared => "shared",
            Pattern::Dedicated => "dedicated",
        }
    }
    /// The wait the measurements chose (docs/elevate.md).
    pub fn default_wait(self) -> WaitMethod {
        match self {
            Pattern::Shared => WaitMethod::Timerfd,
            Pattern::Dedicated => WaitMethod::Spin,
        }
    }
}

/// Which slot runs next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Schedule {
    /// Every slot in turn, one slice each.
    RoundRobin,
    /// Slot indices in order, one slice each, repeated (`A,B,A,C` → [0, 1, 0, 2]).
    Table(Vec<usize>),
}

#[derive(Debug, Clone)]
pub struct ElevateOpts {
    /// The targets' core.
    pub cpu: usize,
    /// The scheduler's core; `None`: the targets' core for shared, the lowest other online core
    /// for dedicated.
    pub sched_cpu: Option<usize>,
    pub slice_us: u64,
    pub pattern: Pattern,
    /// `None`: the pattern's default.
    pub wait: Option<WaitMethod>,
    pub schedule: Schedule,
    /// The undo journal every change is recorded in first (a handle to the caller's: the
    /// agent's, or `joule elevate`'s; `None`: no journal, e.g. unit tests).
    pub journal: Option<Journal>,
    /// Fork a guardian (off only in unit tests, which run on a fake system).
    pub guardian: bool,
    /// Dedicated pattern: start a target's slice when its switch has landed (its core switched
    /// to it, [`crate::landing`]) instead of when the switch was asked for. Ignored by the
    /// shared pattern, whose switch lands when the scheduler sleeps.
    pub confirm_landing: bool,
}

impl Default for ElevateOpts {
    fn default() -> Self {
        ElevateOpts {
            cpu: 0,
            sched_cpu: None,
            slice_us: 50,
            pattern: Pattern::Shared,
            wait: None,
            schedule: Schedule::RoundRobin,
            journal: None,
            guardian: true,
            confirm_landing: true,
        }
    }
}

/// What a run did.
#[derive(Debug, Clone, Default, Serialize)]
pub struct RunReport {
    pub start_ns: u64,
    pub end_ns: u64,
    pub slices: u64,
    pub switches: u64,
    /// Slices whose wait returned more than one slice late (the scheduler was held off, e.g.
    /// by RT throttling of its core).
    pub late_slices: u64,
    /// Dedicated pattern with `confirm_landing`: how long the switches took to land (call to
    /// the raised target's switch-in seen), µs — the first [`LANDING_SAMPLES`], so a run with
    /// no end (the agent's) keeps a bounded list — and the switches not seen to land within
    /// [`LANDING_WAIT_MAX_NS`] (a target asleep, or a thread that is not the slot's first).
    #[serde(skip)]
    pub landing_us: Vec<f64>,
    /// Their median (None when no switch was watched).
    pub landing_us_median: Option<f64>,
    pub unlanded: u64,
    /// Threads that exited during the run (dropped without error).
    pub exited: Vec<i32>,
    pub ended_by: &'static str,
}

/// How long the dedicated scheduler waits to see a switch land before it starts the slice
/// anyway.
pub const LANDING_WAIT_MAX_NS: u64 = 200_000;

/// How many landing times a run keeps (800 KB).
pub const LANDING_SAMPLES: usize = 100_000;

struct Managed {
    target: Target,
    alive: bool,
}

/// A running schedule. Build with [`Elevator::setup`], drive with [`Elevator::run`].
pub struct Elevator<'a> {
    fx: &'a dyn Effects,
    slots: Vec<Vec<Managed>>,
    opts: ElevateOpts,
    sched_cpu: usize,
    owner: String,
    journal: Option<Journal>,
    guardian: Option<Guardian>,
    undos: Vec<Undo>,
    torn_down: bool,
    /// The scheduler thread and its policy and affinity before setup.
    me: (i32, Option<(SchedAttr, Vec<usize>)>),
}

const fn fifo(priority: i32) -> SchedAttr {
    SchedAttr { policy: libc::SCHED_FIFO, priority }
}

impl<'a> Elevator<'a> {
    /// Takes every thread of every slot: records the undo, binds it to `opts.cpu`, sets it to
    /// SCHED_FIFO LOW. A thread that is gone by then is left out; no thread at all is an error.
    pub fn setup(fx: &'a dyn Effects, slots: Vec<Vec<Target>>, opts: ElevateOpts) -> Result<Elevator<'a>, ElevateError> {
        let sched_cpu = check_opts(&slots, &opts, &crate::online_cpus())?;
        let mut el = Elevator {
            fx,
            slots: Vec::new(),
            sched_cpu,
            owner: format!("elevate-{}", std::process::id()),
            journal: opts.journal.clone(),
            guardian: if opts.guardian { Some(Guardian::spawn(Prio::HIGH).map_err(ElevateError::Guardian)?) } else { None },
            opts,
            undos: Vec::new(),
            torn_down: false,
            me: (gettid(), None),
        };
        // The scheduler first: a thread that stayed SCHED_OTHER on the targets' core would
        // starve there behind the first target taken (until RT throttling let it run).
        el.become_scheduler()?;
        // Every undo is journalled (and synced) before the first target changes: a journal on
        // a slow disk must not hold a half-taken set of targets.
        for slot in slots {
            let mut managed = Vec::new();
            for t in slot {
                match el.record_originals(&t) {
                    Ok(()) => managed.push(Managed { target: t, alive: true }),
                    Err(ElevateError::Sched { source, .. }) if source.raw_os_error() == Some(libc::ESRCH) => {
                        tracing::info!("target {} exited before it was taken", t.label)
                    }
                    Err(e) => return Err(e),
                }
            }
            el.slots.push(managed);
        }
        let cpu = el.opts.cpu;
        for slot in 0..el.slots.len() {
            for k in 0..el.slots[slot].len() {
                let t = el.slots[slot][k].target.clone();
                match el.take(&t, cpu) {
                    Ok(()) => {}
                    Err(ElevateError::Sched { source, .. }) if source.raw_os_error() == Some(libc::ESRCH) => el.slots[slot][k].alive = false,
                    Err(e) => return Err(e),
                }
            }
        }
        if el.slots.iter().all(|s| s.iter().all(|m| !m.alive)) {
            return Err(ElevateError::Invalid("every target exited before it could be taken".into()));
        }
        Ok(el)
    }

    fn become_scheduler(&mut self) -> Result<(), ElevateError> {
        let me = self.me.0;
        let err = |what, source| ElevateError::Sched { what, tid: me, source };
        let old =
            (self.fx.get_sched(me).map_err(|e| err("reading the policy of", e))?, self.fx.get_affinity(me).map_err(|e| err("reading the affinity of", e))?);
        self.me.1 = Some(old);
        self.fx.set_affinity(me, &[self.sched_cpu]).map_err(|e| err("binding the scheduler", e))?;
        // RESET_ON_FORK: a command the caller starts later does not inherit SCHED_FIFO.
        self.fx
            .set_sched(me, SchedAttr { policy: libc::SCHED_FIFO | libc::SCHED_RESET_ON_FORK, priority: Prio::HIGH })
            .map_err(|e| err("setting SCHED_FIFO HIGH on the scheduler", e))
    }

    /// Records how to undo, then journals a change (journal, guardian, memory).
    pub fn record(&mut self, undo: Undo) -> Result<(), ElevateError> {
        let tid = match &undo {
            Undo::Sched { tid, .. } | Undo::Affinity { tid, .. } => *tid,
            _ => 0,
        };
        if let Some(j) = &self.journal {
            j.record(&self.owner, undo.clone()).map_err(|source| ElevateError::Journal { tid, source })?;
        }
        if let Some(g) = self.guardian.as_mut() {
            g.watch(&undo).map_err(ElevateError::Guardian)?;
        }
        self.undos.push(undo);
        Ok(())
    }

    fn record_originals(&mut self, t: &Target) -> Result<(), ElevateError> {
        let err = |what, source| ElevateError::Sched { what, tid: t.tid, source };
        let old = self.fx.get_sched(t.tid).map_err(|e| err("reading the policy of", e))?;
        let old_cpus = self.fx.get_affinity(t.tid).map_err(|e| err("reading the affinity of", e))?;
        self.record(Undo::sched(self.fx, t.tid, old))?;
        self.record(Undo::affinity(self.fx, t.tid, old_cpus))
    }

    fn take(&mut self, t: &Target, cpu: usize) -> Result<(), ElevateError> {
        let err = |what, source| ElevateError::Sched { what, tid: t.tid, source };
        self.fx.set_affinity(t.tid, &[cpu]).map_err(|e| err("binding", e))?;
        self.fx.set_sched(t.tid, fifo(Prio::LOW)).map_err(|e| err("setting SCHED_FIFO LOW on", e))?;
        Ok(())
    }

    /// The owner tag of this run's journal records (`elevate-<pid>`).
    pub fn owner(&self) -> &str {
        &self.owner
    }

    /// The scheduler's core.
    pub fn sched_cpu(&self) -> usize {
        self.sched_cpu
    }

    /// The managed threads, by slot.
    pub fn slot_tids(&self) -> Vec<Vec<i32>> {
        self.slots.iter().map(|s| s.iter().map(|m| m.target.tid).collect()).collect()
    }

    /// Sets every live thread of `slot` to `prio`; a thread that is gone is marked so.
    fn set_slot(&mut self, slot: usize, prio: i32, exited: &mut Vec<i32>) {
        for m in self.slots[slot].iter_mut().filter(|m| m.alive) {
            if let Err(e) = self.fx.set_sched(m.target.tid, fifo(prio)) {
                if e.raw_os_error() == Some(libc::ESRCH) {
                    m.alive = false;
                    exited.push(m.target.tid);
                } else {
                    tracing::warn!("setting priority {prio} on {}: {e}", m.target.label);
                }
            }
        }
    }

    fn slot_alive(&self, slot: usize) -> bool {
        self.slots[slot].iter().any(|m| m.alive)
    }

    /// Runs the schedule until `stop`, `duration`, or every target exited. Call it on the
    /// thread that called [`Elevator::setup`]: that thread is the scheduler.
    pub fn run(&mut self, stop: &AtomicBool, duration: Option<Duration>) -> Result<RunReport, ElevateError> {
        if gettid() != self.me.0 {
            return Err(ElevateError::Invalid(format!("run() on thread {} but thread {} is the scheduler (it called setup)", gettid(), self.me.0)));
        }
        self.hot_loop(stop, duration)
    }

    fn hot_loop(&mut self, stop: &AtomicBool, duration: Option<Duration>) -> Result<RunReport, ElevateError> {
        let waiter = Waiter::new(self.opts.wait.unwrap_or(self.opts.pattern.default_wait()))
            .map_err(|source| ElevateError::Io { what: "creating the scheduler's timer".into(), source })?;
        let order: Vec<usize> = match &self.opts.schedule {
            Schedule::RoundRobin => (0..self.slots.len()).collect(),
            Schedule::Table(t) => t.clone(),
        };
        let slice_ns = self.opts.slice_us * 1000;
        let shared = self.opts.pattern == Pattern::Shared;
        // Dedicated: each slot's first thread, to see its switches land.
        let mut watch: Vec<Option<SchedIns>> = self
            .slots
            .iter()
            .map(|s| if shared || !self.opts.confirm_landing { None } else { s.first().and_then(|m| SchedIns::open(m.target.tid).ok()) })
            .collect();
        let mut r = RunReport { start_ns: now_ns(), ..Default::default() };
        let end_ns = duration.map(|d| r.start_ns + d.as_nanos() as u64);
        let mut exited = Vec::new();
        let mut cur: Option<usize> = None;
        let mut deadline = r.start_ns;
        let mut i = 0usize;
        r.ended_by = loop {
            if stop.load(Ordering::Relaxed) {
                break "stopped";
            }
            if end_ns.is_some_and(|e| deadline >= e) {
                break "duration";
            }
            let next = order[i % order.len()];
            i += 1;
            if !self.slot_alive(next) {
                if (0..self.slots.len()).all(|s| !self.slot_alive(s)) {
                    break "targets_exited";
                }
                continue;
            }
            let mut landed_ns = None;
            if cur != Some(next) {
                let before = watch[next].as_mut().and_then(|w| w.count().ok());
                let asked_ns = now_ns();
                // Raise first: the two briefly share MID, and lowering the old one then
                // switches straight to the new one (lowering first could let a third run).
                self.set_slot(next, Prio::MID, &mut exited);
                if let Some(c) = cur {
                    self.set_slot(c, Prio::LOW, &mut exited);
                }
                cur = Some(next);
                r.switches += 1;
                if let (Some(b), Some(w)) = (before, watch[next].as_mut()) {
                    landed_ns = wait_landing(w, b, asked_ns);
                    match landed_ns {
                        Some(t) if r.landing_us.len() < LANDING_SAMPLES => r.landing_us.push((t - asked_ns) as f64 / 1000.0),
                        Some(_) => {}
                        None => r.unlanded += 1,
                    }
                }
            }
            r.slices += 1;
            // Dedicated: the slice runs from where the switch landed when that is watched (a
            // slice is time the target runs; the period stretches by the landing), else
            // absolute deadlines, so the period is exact. Shared: the slice starts after the
            // switch (the scheduler's own wake-up and switch would otherwise come out of the
            // target's slice; the seed's usleep did the same).
            deadline = match landed_ns {
                _ if shared => now_ns() + slice_ns,
                Some(t) => t + slice_ns,
                None => deadline + slice_ns,
            };
            waiter.wait_until(deadline);
            let now = now_ns();
            if now > deadline + slice_ns {
                r.late_slices += 1;
                deadline = now; // resynchronise instead of bursting through missed slices
            }
        };
        if let Some(c) = cur {
            self.set_slot(c, Prio::LOW, &mut exited);
        }
        r.end_ns = now_ns();
        r.exited = exited;
        if !r.landing_us.is_empty() {
            let mut v = r.landing_us.clone();
            v.sort_by(f64::total_cmp);
            r.landing_us_median = Some(v[v.len() / 2]);
        }
        Ok(r)
    }

    /// Puts every thread back (newest change first) and disarms the guardian. Threads that
    /// exited count as already gone.
    pub fn teardown(mut self) -> RestoreReport {
        self.restore()
    }

    fn restore(&mut self) -> RestoreReport {
        if self.torn_down {
            return RestoreReport::default();
        }
        self.torn_down = true;
        // With a journal its records are the undo list: one replay, which also drops them (and
        // keeps the failed ones for `joule restore`). Without one, the list in memory.
        let report = match &self.journal {
            Some(j) => j.restore_owner(&self.owner, self.fx).unwrap_or_else(|e| {
                tracing::warn!("replaying the journal: {e}; undoing from memory instead");
                journal::replay(&self.undos, self.fx)
            }),
            None => journal::replay(&self.undos, self.fx),
        };
        if report.failed.is_empty() {
            if let Some(g) = self.guardian.take() {
                g.disarm();
            }
        }
        if let (me, Some((attr, cpus))) = (self.me.0, self.me.1.take()) {
            let _ = self.fx.set_sched(me, attr);
            let _ = self.fx.set_affinity(me, &cpus);
        }
        report
    }
}

impl Drop for Elevator<'_> {
    fn drop(&mut self) {
        self.restore();
    }
}

/// Spins until the watched thread's switch-in count passes `before` (the switch landed);
/// `None` after [`LANDING_WAIT_MAX_NS`] or when the count cannot be read (the thread exited).
fn wait_landing(w: &mut SchedIns, before: u64, asked_ns: u64) -> Option<u64> {
    loop {
        match w.count() {
            Ok(c) if c > before => return Some(now_ns()),
            Ok(_) if now_ns() < asked_ns + LANDING_WAIT_MAX_NS => std::hint::spin_loop(),
            _ => return None,
        }
    }
}

/// Checks the options against the slots and the online CPUs; returns the scheduler's core.
pub fn check_opts(slots: &[Vec<Target>], opts: &ElevateOpts, online: &[usize]) -> Result<usize, ElevateError> {
    let bad = |m: String| Err(ElevateError::Invalid(m));
    if slots.is_empty() || slots.iter().all(|s| s.is_empty()) {
        return bad("no target to schedule".into());
    }
    if opts.slice_us == 0 || opts.slice_us > 1_000_000 {
        return bad(format!("slice {} µs: must be 1..=1000000", opts.slice_us));
    }
    if !online.contains(&opts.cpu) {
        return Err(ElevateError::CpuOffline { cpu: opts.cpu, online: online.to_vec() });
    }
    if let Schedule::Table(t) = &opts.schedule {
        if t.is_empty() {
            return bad("the table is empty".into());
        }
        if let Some(&i) = t.iter().find(|&&i| i >= slots.len()) {
            return bad(format!("table entry {i} names no slot (there are {})", slots.len()));
        }
    }
    let sched_cpu = match (opts.pattern, opts.sched_cpu) {
        (_, Some(c)) => c,
        (Pattern::Shared, None) => opts.cpu,
        (Pattern::Dedicated, None) => match online.iter().copied().find(|&c| c != opts.cpu) {
            Some(c) => c,
            None => return bad(format!("the dedicated pattern needs a second online CPU besides {}", opts.cpu)),
        },
    };
    if !online.contains(&sched_cpu) {
        return Err(ElevateError::CpuOffline { cpu: sched_cpu, online: online.to_vec() });
    }
    if opts.pattern == Pattern::Dedicated && sched_cpu == opts.cpu {
        return bad(format!("the dedicated pattern spins on its own CPU: the scheduler's CPU {sched_cpu} must differ from the targets' CPU"));
    }
    if opts.pattern == Pattern::Shared && opts.wait == Some(WaitMethod::Spin) {
        return bad("the shared pattern must give the core away: `spin` never does".into());
    }
    Ok(sched_cpu)
}

#[cfg(test)]
#[path = "engine_tests.rs"]
mod tests;
