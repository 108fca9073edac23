//! The nap's transitions, shared by the control loop (which enters a nap) and the waiter
//! thread (which leaves it the moment the first packet arrives). One mutex orders them, so a
//! wake can never slip between "frozen" and "known to be frozen".
//!
//! Entering, in this order (the seed's race, closed): arm the trigger, run the last idle
//! check, then change the machine (machine-nap writes journalled first under [`SLEEP_OWNER`],
//! the lowest frequency asked of the cpufreq owner, then the freeze of the class's own cgroup
//! by the freezer owner, which journals it). The nap writes neither knob itself: the cpufreq
//! owner keeps every other mechanism's cap when the nap's request is dropped, and the freezer
//! freezes the cgroup the class mover keeps the class in. A request that arrives before the arm is seen by the check (a SYN in
//! the queue, a packet counted); one that arrives after it sends a wake that the waiter
//! delivers as soon as the entry releases the lock; one seen before the freeze undoes the
//! writes instead. Leaving: thaw first (the request is waiting), then the machine-nap writes
//! back from memory and the frequency request dropped; the control loop drops the finished
//! nap's journal records later (`compact`), so no journal fsync is on the request's path.

use crate::cpufreq::{FreqRequests, HeldLimit};
use crate::freezer::Freezing;
use joule_core::effects::Effects;
use joule_core::journal::{Journal, Undo};
use joule_core::nap::NapCounters;
use std::io;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Journal owner of the machine-nap writes of one nap (undone on every wake).
pub const SLEEP_OWNER: &str = "nap-sleep";

/// The fast-wake trigger (the eBPF program's one-shot `armed` flag; a fake in tests).
pub trait Trigger {
    fn arm(&self) -> io::Result<()>;
    fn disarm(&self) -> io::Result<()>;
    /// Whether a packet fired the armed trigger (its wake is on its way to the waiter).
    fn fired(&self) -> bool;
}

/// What the nap does, fixed at start.
pub struct NapActions {
    /// The class's freezer cgroup.
    pub freeze: Option<(Freezing, String)>,
    /// Machine-nap writes (path, value while napping): CPUs offline, devices' runtime PM.
    pub writes: Vec<(PathBuf, String)>,
    /// The lowest frequency while napping, asked of the cpufreq owner.
    pub cpufreq_min: Option<FreqRequests>,
}

/// The requester name of the nap's frequency request.
pub const FREQ_REQUESTER: &str = "nap";

// The nap's status is the view's type (`joule_core::view::nap`): what clients read is what
// the core keeps.
pub use joule_core::view::{NapStatus, WakeInfo};

struct State {
    status: NapStatus,
    napped_at: Option<Instant>,
    /// This nap's machine-nap writes and the values they replaced, in the order made.
    undo_writes: Vec<(PathBuf, String)>,
    /// A finished nap's records are still in the journal (dropped by `compact`).
    compact: bool,
    /// No nap before this, and why: an operator's job on a napped unit (`operator_wake`).
    held: Option<(Instant, String)>,
}

pub struct NapCore {
    fx: Arc<dyn Effects + Send + Sync>,
    journal: Journal,
    actions: NapActions,
    counters: Arc<NapCounters>,
    state: Mutex<State>,
}

fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
}

/// What an entry did.
#[derive(Debug, PartialEq)]
pub enum Entered {
    Napping,
    AlreadyNapping,
    /// The last check found activity: nothing was changed.
    Aborted(String),
    /// Held awake after an operator's job on the napped unit (`operator_wake`).
    Held(String),
}

impl NapCore {
    pub fn new(fx: Arc<dyn Effects + Send + Sync>, journal: Journal, actions: NapActions, counters: Arc<NapCounters>) -> Self {
        Self {
            fx,
            journal,
            actions,
            counters,
            state: Mutex::new(State { status: NapStatus::default(), napped_at: None, undo_writes: Vec::new(), compact: false, held: None }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn status(&self) -> NapStatus {
        let st = self.lock();
        let mut s = st.status.clone();
        if let Some(t) = st.napped_at {
            s.residency_seconds += t.elapsed().as_secs_f64();
        }
        s
    }

    /// Enters the nap: arm, last check (`Some(why)`: activity), then journal-first changes.
    pub fn enter(&self, trigger: &dyn Trigger, last_check: &mut dyn FnMut() -> io::Result<Option<String>>) -> anyhow::Result<Entered> {
        let mut st = self.lock();
        if st.napped_at.is_some() {
            return Ok(Entered::AlreadyNapping);
        }
        if let Some((until, why)) = &st.held {
            if Instant::now() < *until {
                return Ok(Entered::Held(why.clone()));
            }
            st.held = None;
        }
        let t0 = Instant::now();
        trigger.arm()?;
        if let Some(why) = last_check()? {
            trigger.disarm()?;
            st.status.aborted_total += 1;
            st.status.last_abort = Some(why.clone());
            return Ok(Entered::Aborted(why));
        }
        let mut undo_writes = Vec::new();
        let changed = self.change(trigger, &mut undo_writes);
        if let Ok(Some(why)) = &changed {
            // A packet arrived during the machine-nap writes: undo them and stay awake rather
            // than freeze the service the request is waiting for.
            self.undo_machine();
            st.status.aborted_total += 1;
            st.status.last_abort = Some(why.clone());
            return Ok(Entered::Aborted(why.clone()));
        }
        if let Err(e) = changed {
            // Undo whatever part was done; the trigger may stay armed (a stale wake is ignored).
            self.undo_machine();
            return Err(e);
        }
        st.undo_writes = undo_writes;
        st.napped_at = Some(Instant::now());
        st.status.napping = true;
        st.status.since_ms = now_ms();
        st.status.naps_total += 1;
        st.status.last_enter_us = t0.elapsed().as_micros() as u64;
        self.counters.napping.store(true, Ordering::Release);
        Ok(Entered::Napping)
    }

    /// The journalled changes; `Some(why)` when the trigger fired before the freeze.
    fn change(&self, trigger: &dyn Trigger, undo_writes: &mut Vec<(PathBuf, String)>) -> anyhow::Result<Option<String>> {
        for (path, value) in &self.actions.writes {
            let old = self.fx.read(path)?.trim().to_string();
            self.journal.record(SLEEP_OWNER, Undo::Write { path: path.clone(), old: old.clone() })?;
            self.fx.write(path, value)?;
            undo_writes.push((path.clone(), old));
        }
        if let Some(f) = &self.actions.cpufreq_min {
            f.hold(FREQ_REQUESTER, HeldLimit::Min, "napping")?;
        }
        if trigger.fired() {
            return Ok(Some("a packet arrived while entering (before the freeze)".into()));
        }
        if let Some((freezer, class)) = &self.actions.freeze {
            freezer.freeze(class)?;
        }
        Ok(None)
    }

    /// Undoes a partial entry: the machine-nap writes (through the journal) and the frequency
    /// request.
    fn undo_machine(&self) {
        let _ = self.journal.restore_owner(SLEEP_OWNER, self.fx.as_ref());
        if let Some(f) = &self.actions.cpufreq_min {
            if let Err(e) = f.drop_request(FREQ_REQUESTER) {
                tracing::warn!("nap: could not drop its frequency request: {e}");
            }
        }
    }

    /// Leaves the nap for `reason` (`tcp:80`, `activity`, `shutdown`); `since` is when the
    /// cause happened (the packet), for the leave time. False when not napping (a stale wake).
    pub fn wake(&self, reason: &str, since: Instant) -> io::Result<bool> {
        let mut st = self.lock();
        let Some(napped_at) = st.napped_at else { return Ok(false) };
        if let Some((freezer, class)) = &self.actions.freeze {
            freezer.thaw(class)?;
        }
        let leave_us = since.elapsed().as_micros() as u64;
        // The machine-nap writes back from memory: nothing on the wake path reads or rewrites
        // the journal (its fsync would compete with the thawed service); `compact` drops the
        // records later, and a crash before it replays them (idempotent).
        for (path, old) in std::mem::take(&mut st.undo_writes).iter().rev() {
            if let Err(e) = self.fx.write(path, old) {
                tracing::warn!("nap: could not put {} back to {old:?} on wake ({e}); the journal still holds it", path.display());
            }
        }
        // The frequency goes back to what the other mechanisms still ask for, not to the
        // value found before the nap.
        if let Some(f) = &self.actions.cpufreq_min {
            if let Err(e) = f.drop_request(FREQ_REQUESTER) {
                tracing::warn!("nap: could not drop its frequency request on wake: {e}");
            }
        }
        st.compact = true;
        st.napped_at = None;
        let s = &mut st.status;
        s.napping = false;
        s.residency_seconds += napped_at.elapsed().as_secs_f64();
        *s.wakes_total.entry(reason.to_string()).or_default() += 1;
        s.last_wake = Some(WakeInfo { reason: reason.into(), at_ms: now_ms(), leave_us });
        s.since_ms = now_ms();
        self.counters.woke();
        Ok(true)
    }
}

impl NapCore {
    /// An operator queued a systemd job (`what`) on the napped unit: thaw now and stay awake
    /// for `hold` (`nap.job_hold_ms`). True when it ended a nap.
    pub fn operator_wake(&self, what: &str, hold: Duration) -> io::Result<bool> {
        self.lock().held = Some((Instant::now() + hold, format!("{what}: awake for {} s", hold.as_secs_f64())));
        self.wake("operator", Instant::now())
    }

    /// Drops a finished nap's records from the journal (replaying them first: idempotent, and
    /// it retries what the wake could not put back). The control loop calls it, off the wake
    /// path.
    pub fn compact(&self) -> io::Result<()> {
        let mut st = self.lock();
        if !st.compact || st.napped_at.is_some() {
            return Ok(());
        }
        let r = self.journal.restore_owner(SLEEP_OWNER, self.fx.as_ref()).map_err(io::Error::other)?;
        if !r.failed.is_empty() {
            return Err(io::Error::other(format!("nap: could not undo {:?}; they stay in the journal", r.failed)));
        }
        st.compact = false;
        Ok(())
    }
}

/// How long a wake from the eBPF timestamp (CLOCK_MONOTONIC ns) has been pending: the Instant
/// the packet arrived, as well as std can express it.
pub fn instant_of_monotonic_ns(at_ns: u64) -> Instant {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes the timespec we pass.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    let now_ns = ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64;
    Instant::now().checked_sub(Duration::from_nanos(now_ns.saturating_sub(at_ns))).unwrap_or_else(Instant::now)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::freezer::{CgroupfsFreezer, FreezerActuator};
    use joule_core::cgroupfs::Hier;
    use joule_core::control::{ActCx, Actuator};
    use joule_core::effects::FakeEffects;
    use joule_core::journal;
    use joule_core::membership::ClassPlace;
    use std::cell::RefCell;
    use std::rc::Rc;

    struct FakeTrigger(Rc<RefCell<Vec<String>>>);
    impl Trigger for FakeTrigger {
        fn fired(&self) -> bool {
            self.0.borrow().iter().any(|e| e == "packet")
        }
        fn arm(&self) -> io::Result<()> {
            self.0.borrow_mut().push("arm".into());
            Ok(())
        }
        fn disarm(&self) -> io::Result<()> {
            self.0.borrow_mut().push("disarm".into());
            Ok(())
        }
    }

    /// A core that freezes class `web` (its cgroup /fz/web, through a started freezer
    /// actuator) and offlines CPU 1, journalling in `dir`.
    fn core(dir: &std::path::Path) -> (Arc<FakeEffects>, NapCore, FreezerActuator) {
        let fx = Arc::new(
            FakeEffects::default().with_dir("/fz/web").with_file("/fz/web/freezer.state", "THAWED\n").with_file("/sys/devices/system/cpu/cpu1/online", "1\n"),
        );
        let place = ClassPlace {
            class: "web".into(),
            dirs: vec![(Hier::Freezer, "/fz/web".into())],
            task_dirs: vec![(Hier::Freezer, "/fz/web".into())],
            cgroup2_id: None,
        };
        let mut freezer = FreezerActuator::new(Box::new(CgroupfsFreezer::new(fx.clone(), vec![place])), fx.clone(), vec!["web".into()]);
        let journal = Journal::open(dir).unwrap();
        let mut sink = |_: &str, _: serde_json::Value| {};
        freezer.init(&mut ActCx { journal: &journal, fx: fx.as_ref(), events: &mut sink }).unwrap();
        let actions = NapActions {
            freeze: Some((freezer.handle(), "web".into())),
            writes: vec![("/sys/devices/system/cpu/cpu1/online".into(), "0".into())],
            cpufreq_min: None,
        };
        let c = NapCore::new(fx.clone(), journal, actions, Arc::default());
        (fx, c, freezer)
    }

    /// Lets the freezer actuator run one period (it drops a thawed class's record).
    fn freezer_period(f: &mut FreezerActuator, fx: &FakeEffects, dir: &std::path::Path) {
        let journal = Journal::open(dir).unwrap();
        let mut sink = |_: &str, _: serde_json::Value| {};
        f.reconcile(&joule_core::control::Plan::default(), &mut ActCx { journal: &journal, fx, events: &mut sink }).unwrap();
    }

    /// Enters with a last check that logs `event` (a "packet" fires the fake trigger) and
    /// finds no activity; the entry's result and the trigger's log.
    fn enter_after(c: &NapCore, event: &str) -> (Entered, Vec<String>) {
        let order = Rc::new(RefCell::new(Vec::new()));
        let o2 = order.clone();
        let mut check = move || {
            o2.borrow_mut().push(event.to_string());
            Ok(None)
        };
        let entered = c.enter(&FakeTrigger(order.clone()), &mut check).unwrap();
        let log = order.borrow().clone();
        (entered, log)
    }

    #[test]
    fn the_trigger_is_armed_before_the_last_check_and_changes_are_journalled_before_they_happen() {
        let dir = tempfile::tempdir().unwrap();
        let (fx, c, mut freezer) = core(dir.path());
        let (entered, order) = enter_after(&c, "check");
        assert_eq!(entered, Entered::Napping);
        assert_eq!(order, vec!["arm", "check"]);
        assert_eq!(fx.calls(), vec!["write /sys/devices/system/cpu/cpu1/online 0", "write /fz/web/freezer.state FROZEN"]);
        let kinds: Vec<_> =
            journal::entries(dir.path()).unwrap().into_iter().map(|e| (e.owner, serde_json::to_value(e.undo).unwrap()["kind"].clone())).collect();
        assert_eq!(kinds.len(), 2, "{kinds:?}");
        assert_eq!((kinds[0].0.as_str(), kinds[1].0.as_str()), (SLEEP_OWNER, "freezer"), "the freeze is the freezer owner's record");
        assert!(c.status().napping);
        // The waiter's wake thaws first, then puts the writes back, without the journal.
        assert!(c.wake("tcp:80", Instant::now()).unwrap());
        assert_eq!(&fx.calls()[2..], ["write /fz/web/freezer.state THAWED", "write /sys/devices/system/cpu/cpu1/online 1"]);
        assert_eq!(journal::entries(dir.path()).unwrap().len(), 2, "the records stay until the loop compacts");
        c.compact().unwrap();
        freezer_period(&mut freezer, &fx, dir.path());
        // The machine-nap record is gone; the freezer's thaw stands (replaying it on a thawed
        // cgroup changes nothing), so the next entry does not wait for a journal write.
        let owners = || journal::entries(dir.path()).unwrap().into_iter().map(|e| e.owner).collect::<Vec<_>>();
        assert_eq!(owners(), vec!["freezer"]);
        let s = c.status();
        assert!(!s.napping && s.wakes_total["tcp:80"] == 1 && s.last_wake.unwrap().reason == "tcp:80");
        assert!(!c.wake("tcp:80", Instant::now()).unwrap(), "a second wake for the same nap is stale");
        let (entered, _) = enter_after(&c, "check");
        assert_eq!(entered, Entered::Napping);
        assert_eq!(owners(), vec!["freezer".to_string(), SLEEP_OWNER.to_string()], "the second freeze wrote no second thaw");
    }

    #[test]
    fn activity_seen_by_the_last_check_aborts_without_changing_anything() {
        let dir = tempfile::tempdir().unwrap();
        let (fx, c, _freezer) = core(dir.path());
        let order = Rc::new(RefCell::new(Vec::new()));
        let mut check = || Ok(Some("1 queued for accept on [80]".to_string()));
        assert!(matches!(c.enter(&FakeTrigger(order.clone()), &mut check).unwrap(), Entered::Aborted(_)));
        assert_eq!(*order.borrow(), vec!["arm", "disarm"]);
        assert!(fx.calls().is_empty() && journal::entries(dir.path()).unwrap().is_empty());
        assert!(!c.status().napping && c.status().aborted_total == 1);
    }

    /// A packet seen during the machine-nap writes (the trigger fired, its wake on the way):
    /// the writes are undone and nothing is frozen.
    #[test]
    fn a_trigger_fired_before_the_freeze_undoes_the_writes_and_freezes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let (fx, c, _freezer) = core(dir.path());
        // The packet arrives right after the check found nothing.
        assert!(matches!(enter_after(&c, "packet").0, Entered::Aborted(_)));
        assert_eq!(fx.calls(), vec!["write /sys/devices/system/cpu/cpu1/online 0", "write /sys/devices/system/cpu/cpu1/online 1"]);
        assert_eq!(fx.file("/fz/web/freezer.state").unwrap().trim(), "THAWED");
        assert!(journal::entries(dir.path()).unwrap().is_empty() && !c.status().napping);
    }

    /// A request arriving after the arm and before the freeze: the trigger fired during the
    /// entry; the waiter, blocked on the lock until the entry is done, wakes the nap at once.
    #[test]
    fn a_wake_that_fires_while_entering_thaws_right_after_the_freeze() {
        let dir = tempfile::tempdir().unwrap();
        let (fx, c, _freezer) = core(dir.path());
        let c = Arc::new(c);
        let (fired_tx, fired_rx) = std::sync::mpsc::channel::<()>();
        let waiter = {
            let c = c.clone();
            std::thread::spawn(move || {
                fired_rx.recv().unwrap(); // the ring buffer delivered the wake
                c.wake("tcp:80", Instant::now()).unwrap()
            })
        };
        let order = Rc::new(RefCell::new(Vec::new()));
        let mut check = || {
            fired_tx.send(()).unwrap(); // the SYN arrives now, during the last check
            std::thread::sleep(Duration::from_millis(20)); // the waiter is waiting for the lock
            Ok(None)
        };
        assert_eq!(c.enter(&FakeTrigger(order), &mut check).unwrap(), Entered::Napping);
        assert!(waiter.join().unwrap(), "the waiter woke the nap the entry made");
        assert!(!c.status().napping);
        assert_eq!(fx.file("/fz/web/freezer.state").unwrap().trim(), "THAWED");
        assert_eq!(fx.file("/sys/devices/system/cpu/cpu1/online").unwrap().trim(), "1");
    }

    #[test]
    fn an_operators_job_thaws_the_nap_and_holds_it_off() {
        let dir = tempfile::tempdir().unwrap();
        let (fx, c, _freezer) = core(dir.path());
        let t = FakeTrigger(Rc::default());
        assert_eq!(c.enter(&t, &mut || Ok(None)).unwrap(), Entered::Napping);
        assert!(c.operator_wake("a job on nginx.service", Duration::from_secs(60)).unwrap());
        assert_eq!(fx.file("/fz/web/freezer.state").unwrap().trim(), "THAWED");
        assert_eq!(c.status().wakes_total.get("operator"), Some(&1));
        match c.enter(&t, &mut || Ok(None)).unwrap() {
            Entered::Held(why) => assert!(why.contains("nginx.service") && why.contains("60 s"), "{why}"),
            other => panic!("napped again during the hold: {other:?}"),
        }
        assert!(!c.operator_wake("again", Duration::from_secs(60)).unwrap(), "no nap to end");
        // A short hold (nap.job_hold_ms) ends on its own.
        c.operator_wake("a job on nginx.service", Duration::from_millis(30)).unwrap();
        std::thread::sleep(Duration::from_millis(40));
        assert_eq!(c.enter(&t, &mut || Ok(None)).unwrap(), Entered::Napping, "the hold is over");
    }
}
