//! The loads `joule-bench overhead` puts beside the agent: threads that sleep for the whole
//! scenario (many tasks, no scheduling activity) and threads that wake every period (few tasks,
//! thousands of context switches a second). Each load counts its own wake-ups from the
//! kernel's per-thread accounting, so the bench reports the rate it got rather than the rate
//! it asked for.

use joule_core::effects::RealEffects;
use joule_core::procfs::Status;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// What each load thread does until it is stopped.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Behaviour {
    /// Blocks once and stays blocked: the task exists but never runs.
    Sleep,
    /// Sleeps `period` in a loop (nanosleep, an hrtimer wake-up each time) and exits by itself
    /// at `deadline` even if nobody stops it.
    Wake { period: Duration, deadline: Instant },
}

pub struct LoadThreads {
    stop: Arc<AtomicBool>,
    tids: Vec<i32>,
    handles: Vec<JoinHandle<()>>,
}

impl LoadThreads {
    /// Starts `n` threads and returns once every one of them is running (its tid recorded).
    pub fn start(n: usize, behaviour: Behaviour) -> anyhow::Result<Self> {
        let stop = Arc::new(AtomicBool::new(false));
        let tids = Arc::new(Mutex::new(Vec::with_capacity(n)));
        let mut load = LoadThreads { stop: stop.clone(), tids: Vec::new(), handles: Vec::with_capacity(n) };
        for _ in 0..n {
            let (stop, tids) = (stop.clone(), tids.clone());
            let h = std::thread::Builder::new().name("joule-load".into()).stack_size(64 * 1024).spawn(move || {
                tids.lock().unwrap().push(nix::unistd::gettid().as_raw());
                match behaviour {
                    Behaviour::Sleep => {
                        while !stop.load(Ordering::Acquire) {
                            std::thread::park();
                        }
                    }
                    Behaviour::Wake { period, deadline } => {
                        while !stop.load(Ordering::Acquire) && Instant::now() < deadline {
                            std::thread::sleep(period);
                        }
                    }
                }
            })?;
            load.handles.push(h); // pushed one by one so Drop stops what did start on an error
        }
        while tids.lock().unwrap().len() < n {
            std::thread::sleep(Duration::from_millis(5));
        }
        load.tids = std::mem::take(&mut *tids.lock().unwrap());
        Ok(load)
    }

    /// Context switches the load's threads made so far: `voluntary` (each one a block that a
    /// wake-up ends) and `nonvoluntary` (preempted), summed over /proc/self/task/TID/status.
    pub fn switches(&self) -> Switches {
        let mut s = Switches::default();
        for &tid in &self.tids {
            if let Some(status) = Status::read(&RealEffects, Path::new("/proc/self/task"), tid) {
                s.add(&Switches::of(&status));
            }
        }
        s
    }
}

impl Drop for LoadThreads {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        for h in &self.handles {
            h.thread().unpark();
        }
        for h in self.handles.drain(..) {
            let _ = h.join();
        }
    }
}

#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Switches {
    pub voluntary: u64,
    pub nonvoluntary: u64,
}

impl Switches {
    /// The two context-switch counters of a thread's status file.
    fn of(status: &Status) -> Switches {
        let field = |key: &str| status.u64(key).unwrap_or(0);
        Switches { voluntary: field("voluntary_ctxt_switches"), nonvoluntary: field("nonvoluntary_ctxt_switches") }
    }

    fn add(&mut self, o: &Switches) {
        self.voluntary += o.voluntary;
        self.nonvoluntary += o.nonvoluntary;
    }
}

/// Context switches on the whole machine so far (`ctxt` in /proc/stat): what a sched_switch
/// program sees.
pub fn machine_ctxt() -> Option<u64> {
    joule_core::fsread::keyed_u64(&std::fs::read_to_string("/proc/stat").ok()?, "ctxt")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_counters_are_parsed() {
        let text = "Name:\tjoule-load\nvoluntary_ctxt_switches:\t1234\nnonvoluntary_ctxt_switches:\t5\n";
        assert_eq!(Switches::of(&Status::parse(text)), Switches { voluntary: 1234, nonvoluntary: 5 });
        assert_eq!(Switches::of(&Status::parse("Name:\tx\n")), Switches::default());
    }

    /// The waking load really wakes (its rate is measured, not assumed) and the sleeping one
    /// does not; both stop when dropped. No root needed.
    #[test]
    fn waking_threads_wake_and_sleeping_threads_do_not() {
        let deadline = Instant::now() + Duration::from_secs(30);
        let wakers = LoadThreads::start(2, Behaviour::Wake { period: Duration::from_millis(1), deadline }).unwrap();
        let sleepers = LoadThreads::start(3, Behaviour::Sleep).unwrap();
        let (w0, s0) = (wakers.switches(), sleepers.switches());
        std::thread::sleep(Duration::from_millis(300));
        let (w1, s1) = (wakers.switches(), sleepers.switches());
        // 2 threads × 300 ms / ~1.1 ms ≈ 540 wake-ups; a loaded machine gets fewer, not none.
        assert!(w1.voluntary - w0.voluntary > 100, "{w0:?} → {w1:?}");
        assert_eq!(s1.voluntary, s0.voluntary, "sleeping threads woke: {s0:?} → {s1:?}");
        let started = Instant::now();
        drop((wakers, sleepers));
        assert!(started.elapsed() < Duration::from_secs(1));
    }

    #[test]
    fn waking_threads_stop_by_themselves_at_the_deadline() {
        let deadline = Instant::now() + Duration::from_millis(50);
        let wakers = LoadThreads::start(2, Behaviour::Wake { period: Duration::from_millis(1), deadline }).unwrap();
        std::thread::sleep(Duration::from_millis(200));
        assert!(wakers.handles.iter().all(|h| h.is_finished()));
    }

    #[test]
    fn machine_context_switches_grow() {
        let a = machine_ctxt().expect("/proc/stat has ctxt");
        std::thread::sleep(Duration::from_millis(20));
        assert!(machine_ctxt().unwrap() > a);
    }
}
