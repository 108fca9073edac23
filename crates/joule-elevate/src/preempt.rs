//! The preemption API for request-serving programs (seed section 3.4): on one core, workers run
//! requests, a dispatcher hands them out by raising an idle worker above itself, and a switcher
//! woken by a timerfd lowers a worker that has run one request past the threshold, so requests
//! behind it are not stuck behind a long one (head-of-line blocking).
//!
//! SCHED_FIFO priorities on the core: switcher 4 > running worker 3 > dispatcher 2 > worker
//! switched out 1. A worker arms the switcher's timerfd before each request and disarms it
//! after (two syscalls per request: the cost the seed's "fixed" rows show). A switched-out
//! worker runs again when the dispatcher has nothing to do (it blocks in its poll and the
//! core falls to priority 1), or when the dispatcher resumes it for one more threshold.
//! Differences from the seed: the dispatcher blocks in the kernel's poll instead of polling a
//! NIC, and an idle worker sleeps on a futex (an elevation alone cannot wake a sleeping
//! thread), so handing out a request is one raise plus one wake.
//!
//! Resuming a switched-out worker, the dispatcher first lifts itself to the worker's RUNNING
//! priority (so raising the worker does not preempt it), raises the worker, arms the
//! threshold, and only then lowers itself back, which lets the worker run. Were it to arm the
//! timer and then raise the worker, a timer firing between the two (the raise is a syscall; on
//! a VM it can take longer than the threshold) would be undone by the raise: the worker would
//! run at RUNNING priority with no timer armed, to the end of its request, every request
//! behind it blocked (seen: a short request waiting out a 300 ms one about once in ten runs).
//! In this order a tick before the dispatcher steps down lowers the worker for good.

use crate::gettid;
use crate::timing::{arm_abs, arm_rel, now_ns, timerfd};
use joule_core::effects::{RealEffects, Sched, SchedAttr};
use std::collections::VecDeque;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

pub const P_SWITCHED_OUT: i32 = 1;
pub const P_DISPATCHER: i32 = 2;
pub const P_RUNNING: i32 = 3;
pub const P_SWITCHER: i32 = 4;

const IDLE: u8 = 0;
const RUNNING: u8 = 1;
const PREEMPTED: u8 = 2;

pub type Job = Box<dyn FnOnce() + Send>;

/// A request: `work` runs under the switcher's timer and may be switched out; `done` (the
/// answer: a send, whose socket lock must not be held by a switched-out worker) runs after
/// the timer is disarmed.
pub struct Request {
    pub work: Job,
    pub done: Job,
}

struct Worker {
    tid: AtomicI32,
    state: AtomicU8,
    /// Futex word: bumped to wake the worker.
    gen: AtomicU32,
}

struct Shared {
    queue: Mutex<VecDeque<Request>>,
    workers: Vec<Worker>,
    /// The worker the switcher's timer is armed for (-1: none).
    current: AtomicI32,
    timer: Option<OwnedFd>,
    threshold_ns: u64,
    stop: AtomicBool,
    preemptions: AtomicU64,
    resumes: AtomicU64,
}

/// The counters of a run.
#[derive(Debug, Clone, Copy, Default, serde::Serialize)]
pub struct PreemptStats {
    pub preemptions: u64,
    pub resumes: u64,
}

/// Workers and (with a threshold) a switcher on one core; the thread that calls
/// [`Preempt::start`] becomes the dispatcher (its policy and affinity come back on drop).
pub struct Preempt {
    shared: Arc<Shared>,
    threads: Vec<JoinHandle<()>>,
    next_resume: usize,
    dispatcher_old: Option<(SchedAttr, Vec<usize>)>,
}

fn fifo(p: i32) -> SchedAttr {
    SchedAttr { policy: libc::SCHED_FIFO, priority: p }
}

fn enter(cpu: usize, prio: i32) -> io::Result<()> {
    let me = gettid();
    RealEffects.set_affinity(me, &[cpu])?;
    enter_prio(me, prio)
}

/// SCHED_FIFO `prio` for thread `tid`, with SCHED_RESET_ON_FORK: nothing these threads start
/// inherits an RT policy.
fn enter_prio(tid: i32, prio: i32) -> io::Result<()> {
    RealEffects.set_sched(tid, SchedAttr { policy: libc::SCHED_FIFO | libc::SCHED_RESET_ON_FORK, priority: prio })
}

fn futex_wait(word: &AtomicU32, expected: u32) {
    // SAFETY: FUTEX_WAIT on a word we own for the call; returns on wake, mismatch or signal.
    unsafe { libc::syscall(libc::SYS_futex, word.as_ptr(), libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG, expected, std::ptr::null::<libc::timespec>()) };
}

fn futex_wake(word: &AtomicU32) {
    // SAFETY: FUTEX_WAKE on a word we own.
    unsafe { libc::syscall(libc::SYS_futex, word.as_ptr(), libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG, 1) };
}

impl Preempt {
    /// Starts `workers` workers on `cpu` and, when `threshold` is given, the switcher; makes
    /// the caller the dispatcher. Needs CAP_SYS_NICE.
    pub fn start(cpu: usize, workers: usize, threshold: Option<Duration>) -> io::Result<Preempt> {
        let me = gettid();
        let dispatcher_old = Some((RealEffects.get_sched(me)?, RealEffects.get_affinity(me)?));
        let shared = Arc::new(Shared {
            queue: Mutex::new(VecDeque::new()),
            workers: (0..workers.max(1)).map(|_| Worker { tid: AtomicI32::new(0), state: AtomicU8::new(IDLE), gen: AtomicU32::new(0) }).collect(),
            current: AtomicI32::new(-1),
            timer: if threshold.is_some() { Some(timerfd()?) } else { None },
            threshold_ns: threshold.map_or(0, |t| t.as_nanos() as u64),
            stop: AtomicBool::new(false),
            preemptions: AtomicU64::new(0),
            resumes: AtomicU64::new(0),
        });
        let mut p = Preempt { shared: shared.clone(), threads: Vec::new(), next_resume: 0, dispatcher_old };
        enter(cpu, P_DISPATCHER)?;
        let (tx, rx) = std::sync::mpsc::channel::<io::Result<()>>();
        for i in 0..shared.workers.len() {
            let (s, tx) = (shared.clone(), tx.clone());
            p.threads.push(std::thread::Builder::new().name(format!("elev-worker{i}")).spawn(move || {
                let r = enter(cpu, P_RUNNING);
                s.workers[i].tid.store(gettid(), Ordering::SeqCst);
                let ok = r.is_ok();
                let _ = tx.send(r);
                drop(tx);
                if ok {
                    worker_loop(&s, i);
                }
            })?);
        }
        if threshold.is_some() {
            let (s, tx) = (shared.clone(), tx.clone());
            p.threads.push(std::thread::Builder::new().name("elev-switcher".into()).spawn(move || {
                let r = enter(cpu, P_SWITCHER);
                let ok = r.is_ok();
                let _ = tx.send(r);
                drop(tx);
                if ok {
                    switcher_loop(&s);
                }
            })?);
        }
        drop(tx);
        for _ in 0..p.threads.len() {
            rx.recv().map_err(|_| io::Error::other("a preemption thread died before it started"))??;
        }
        Ok(p)
    }

    /// Queues a request (dispatcher side); [`Preempt::kick`] hands it out.
    pub fn submit(&self, req: Request) {
        self.shared.queue.lock().unwrap().push_back(req);
    }

    /// Wakes an idle worker at RUNNING priority when requests wait; it preempts the dispatcher
    /// at once and serves the queue. False when none waits or no worker is idle.
    pub fn kick(&self) -> bool {
        if self.shared.queue.lock().unwrap().is_empty() {
            return false;
        }
        let Some(w) = self.shared.workers.iter().find(|w| w.state.load(Ordering::SeqCst) == IDLE) else { return false };
        w.state.store(RUNNING, Ordering::SeqCst);
        let _ = RealEffects.set_sched(w.tid.load(Ordering::SeqCst), fifo(P_RUNNING));
        w.gen.fetch_add(1, Ordering::SeqCst);
        futex_wake(&w.gen);
        true
    }

    /// Whether a worker was switched out in the middle of a request.
    pub fn has_preempted(&self) -> bool {
        self.shared.workers.iter().any(|w| w.state.load(Ordering::SeqCst) == PREEMPTED)
    }

    /// Whether requests wait for a worker.
    pub fn queued(&self) -> usize {
        self.shared.queue.lock().unwrap().len()
    }

    /// Lets one switched-out worker run one more threshold (round-robin); returns when it is
    /// switched out again or done. False when none is switched out.
    pub fn resume_one(&mut self) -> bool {
        let n = self.shared.workers.len();
        let Some(i) = (0..n).map(|k| (self.next_resume + k) % n).find(|&i| self.shared.workers[i].state.load(Ordering::SeqCst) == PREEMPTED) else {
            return false;
        };
        self.next_resume = (i + 1) % n;
        let w = &self.shared.workers[i];
        w.state.store(RUNNING, Ordering::SeqCst);
        self.shared.resumes.fetch_add(1, Ordering::Relaxed);
        // Raise the worker and arm its threshold while level with it, then step down (module
        // docs: why this order).
        let me = gettid();
        let _ = enter_prio(me, P_RUNNING);
        self.shared.current.store(i as i32, Ordering::SeqCst);
        let _ = RealEffects.set_sched(w.tid.load(Ordering::SeqCst), fifo(P_RUNNING));
        if let Some(t) = &self.shared.timer {
            arm_rel(t, self.shared.threshold_ns);
        }
        let _ = enter_prio(me, P_DISPATCHER);
        true
    }

    pub fn stats(&self) -> PreemptStats {
        PreemptStats { preemptions: self.shared.preemptions.load(Ordering::Relaxed), resumes: self.shared.resumes.load(Ordering::Relaxed) }
    }

    /// The worker threads' ids.
    pub fn worker_tids(&self) -> Vec<i32> {
        self.shared.workers.iter().map(|w| w.tid.load(Ordering::SeqCst)).collect()
    }
}

impl Drop for Preempt {
    fn drop(&mut self) {
        let s = &self.shared;
        s.stop.store(true, Ordering::SeqCst);
        // Give the dispatcher's core back first, so lowered workers can finish and exit.
        if let Some((attr, cpus)) = self.dispatcher_old.take() {
            let me = gettid();
            let _ = RealEffects.set_sched(me, attr);
            let _ = RealEffects.set_affinity(me, &cpus);
        }
        for w in &s.workers {
            let _ = RealEffects.set_sched(w.tid.load(Ordering::SeqCst), fifo(P_RUNNING));
            w.gen.fetch_add(1, Ordering::SeqCst);
            futex_wake(&w.gen);
        }
        if let Some(t) = &s.timer {
            arm_abs(t, now_ns());
        }
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

fn worker_loop(s: &Shared, i: usize) {
    let w = &s.workers[i];
    loop {
        let g = w.gen.load(Ordering::SeqCst);
        if s.stop.load(Ordering::SeqCst) {
            return;
        }
        loop {
            let job = s.queue.lock().unwrap().pop_front();
            let Some(req) = job else { break };
            if let Some(t) = &s.timer {
                s.current.store(i as i32, Ordering::SeqCst);
                arm_rel(t, s.threshold_ns);
            }
            (req.work)();
            if let Some(t) = &s.timer {
                arm_rel(t, 0);
                let _ = s.current.compare_exchange(i as i32, -1, Ordering::SeqCst, Ordering::SeqCst);
            }
            w.state.store(RUNNING, Ordering::SeqCst);
            (req.done)();
        }
        w.state.store(IDLE, Ordering::SeqCst);
        futex_wait(&w.gen, g);
    }
}

fn switcher_loop(s: &Shared) {
    let fd = s.timer.as_ref().expect("the switcher has a timer").as_raw_fd();
    let mut buf = [0u8; 8];
    loop {
        // SAFETY: a blocking 8-byte read of a timerfd we own, into our buffer.
        unsafe { libc::read(fd, buf.as_mut_ptr().cast(), 8) };
        if s.stop.load(Ordering::SeqCst) {
            return;
        }
        let c = s.current.swap(-1, Ordering::SeqCst);
        if c >= 0 {
            let w = &s.workers[c as usize];
            w.state.store(PREEMPTED, Ordering::SeqCst);
            let _ = RealEffects.set_sched(w.tid.load(Ordering::SeqCst), fifo(P_SWITCHED_OUT));
            s.preemptions.fetch_add(1, Ordering::Relaxed);
        }
    }
}
