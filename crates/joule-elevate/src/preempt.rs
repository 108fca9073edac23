//! The preemption API for request-serving programs (seed section 3.4): on one core, workers run
//! requests and a dispatcher hands them out; a request that has run past the threshold while
//! another one waits is switched out (its worker lowered), so the requests behind it are not
//! stuck behind a long one (head-of-line blocking).
//!
//! SCHED_FIFO priorities on the core: dispatcher 3 > worker serving the queue 2 > worker
//! switched out 1. The decision is made per request, by the dispatcher, and costs nothing when
//! nothing waits:
//! - A worker stamps the start of each request in memory (a vDSO clock read, no syscall) and
//!   clears it at the end. Idle workers keep priority 2 and sleep on a futex, so handing out
//!   work is one wake.
//! - The dispatcher outranks the workers: every arrival wakes it at once. When it finds a
//!   request waiting behind a running one, it switches the running one out if it is past the
//!   threshold, and otherwise arms one timerfd for the moment it will be (the timer sits in
//!   the dispatcher's poll set). So the timer is armed only while a request waits behind a
//!   running one, and a request is only switched out when one waits behind it.
//! - A switched-out worker at priority 1 runs whenever the core has nothing else to do (the
//!   dispatcher blocked in its poll, no worker at 2): its long request finishes in the
//!   background and any arrival takes the core back at once, with no resume step. When its
//!   request ends it raises itself back to 2 before answering.
//!
//! Differences from the seed, and why: the seed's worker arms the switcher's timerfd before
//! every request and disarms it after. Each of those reprograms the CPU's timer (on a VM, a
//! trapped write), which is what the seed's "fixed" rows pay and what cut the fixed workload's
//! throughput here by 30 % in issue 19's runs; and its dispatcher resumed switched-out workers
//! one threshold at a time, which stretched long requests 4× and kept short ones waiting a
//! threshold behind each resumed slice. The seed's separate switcher thread is folded into the
//! dispatcher (it is the thread that learns a request waits). The dispatcher blocks in the
//! kernel's poll instead of polling a NIC, and a worker answers (`done`, a send) only at
//! priority 2, never while switched out holding the socket's lock.

use crate::gettid;
use crate::timing::{arm_abs, now_ns};
use joule_core::effects::{RealEffects, Sched, SchedAttr};
use std::collections::VecDeque;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

pub const P_SWITCHED_OUT: i32 = 1;
pub const P_SERVING: i32 = 2;
pub const P_DISPATCHER: i32 = 3;

const IDLE: u8 = 0;
/// Serving the queue at priority 2.
const SERVING: u8 = 1;
/// Switched out in the middle of a request, at priority 1.
const SWITCHED_OUT: u8 = 2;

pub type Job = Box<dyn FnOnce() + Send>;

/// A request: `work` may be switched out; `done` (the answer: a send, whose socket lock must
/// not be held by a switched-out worker) runs after it at the serving priority.
pub struct Request {
    pub work: Job,
    pub done: Job,
}

struct Worker {
    tid: AtomicI32,
    state: AtomicU8,
    /// CLOCK_MONOTONIC ns at which the worker's current request started; 0 between requests.
    started_ns: AtomicU64,
    /// Futex word: bumped to wake the worker.
    gen: AtomicU32,
}

struct Shared {
    queue: Mutex<VecDeque<Request>>,
    workers: Vec<Worker>,
    stop: AtomicBool,
    preemptions: AtomicU64,
}

/// The counters of a run.
#[derive(Debug, Clone, Copy, Default, serde::Serialize)]
pub struct PreemptStats {
    /// Requests switched out past the threshold.
    pub preemptions: u64,
    /// Times the dispatcher armed its timer (a request waited behind a running one that was
    /// not yet past the threshold): the cost of deciding per request.
    pub timer_arms: u64,
}

/// Workers on one core; the thread that calls [`Preempt::start`] becomes the dispatcher (its
/// policy and affinity come back on drop). Without a threshold it is the same server with no
/// preemption.
pub struct Preempt {
    shared: Arc<Shared>,
    threads: Vec<JoinHandle<()>>,
    timer: Option<OwnedFd>,
    threshold_ns: u64,
    /// The deadline the timer is armed for (0: not armed, or already past).
    armed_ns: u64,
    timer_arms: u64,
    dispatcher_old: Option<(SchedAttr, Vec<usize>)>,
}

fn fifo(p: i32) -> SchedAttr {
    SchedAttr { policy: libc::SCHED_FIFO, priority: p }
}

/// SCHED_FIFO `prio` for the calling thread on `cpu`, with SCHED_RESET_ON_FORK: nothing these
/// threads start inherits an RT policy.
fn enter(cpu: usize, prio: i32) -> io::Result<()> {
    let me = gettid();
    RealEffects.set_affinity(me, &[cpu])?;
    RealEffects.set_sched(me, SchedAttr { policy: libc::SCHED_FIFO | libc::SCHED_RESET_ON_FORK, priority: prio })
}

fn futex_wait(word: &AtomicU32, expected: u32) {
    // SAFETY: FUTEX_WAIT on a word we own for the call; returns on wake, mismatch or signal.
    unsafe { libc::syscall(libc::SYS_futex, word.as_ptr(), libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG, expected, std::ptr::null::<libc::timespec>()) };
}

fn futex_wake(word: &AtomicU32) {
    // SAFETY: FUTEX_WAKE on a word we own.
    unsafe { libc::syscall(libc::SYS_futex, word.as_ptr(), libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG, 1) };
}

/// A non-blocking CLOCK_MONOTONIC timerfd (close-on-exec), for a poll set.
fn poll_timer() -> io::Result<OwnedFd> {
    // SAFETY: plain syscall; the fd is owned right away.
    let fd = unsafe { libc::timerfd_create(libc::CLOCK_MONOTONIC, libc::TFD_CLOEXEC | libc::TFD_NONBLOCK) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fd is a fresh descriptor nobody else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// The earliest moment a serving request passes the threshold, or `Switch` for one that is
/// past it now; the pure half of [`Preempt::dispatch`].
#[derive(Debug, PartialEq, Eq)]
enum Verdict {
    Switch(usize),
    ArmAt(u64),
    Nothing,
}

/// `serving`: (worker index, request start ns) of every worker serving a request.
fn decide(serving: &[(usize, u64)], now_ns: u64, threshold_ns: u64) -> Verdict {
    if let Some(&(i, _)) = serving.iter().find(|&&(_, s)| now_ns.saturating_sub(s) >= threshold_ns) {
        return Verdict::Switch(i);
    }
    serving.iter().map(|&(_, s)| s + threshold_ns).min().map_or(Verdict::Nothing, Verdict::ArmAt)
}

impl Preempt {
    /// Starts `workers` workers on `cpu` and makes the caller the dispatcher; with a
    /// `threshold`, requests that run past it while another waits are switched out. Needs
    /// CAP_SYS_NICE.
    pub fn start(cpu: usize, workers: usize, threshold: Option<Duration>) -> io::Result<Preempt> {
        let me = gettid();
        let dispatcher_old = Some((RealEffects.get_sched(me)?, RealEffects.get_affinity(me)?));
        let shared = Arc::new(Shared {
            queue: Mutex::new(VecDeque::new()),
            workers: (0..workers.max(1))
                .map(|_| Worker { tid: AtomicI32::new(0), state: AtomicU8::new(IDLE), started_ns: AtomicU64::new(0), gen: AtomicU32::new(0) })
                .collect(),
            stop: AtomicBool::new(false),
            preemptions: AtomicU64::new(0),
        });
        let mut p = Preempt {
            shared: shared.clone(),
            threads: Vec::new(),
            timer: if threshold.is_some() { Some(poll_timer()?) } else { None },
            threshold_ns: threshold.map_or(0, |t| t.as_nanos() as u64),
            armed_ns: 0,
            timer_arms: 0,
            dispatcher_old,
        };
        enter(cpu, P_DISPATCHER)?;
        let (tx, rx) = std::sync::mpsc::channel::<io::Result<()>>();
        for i in 0..shared.workers.len() {
            let (s, tx) = (shared.clone(), tx.clone());
            p.threads.push(std::thread::Builder::new().name(format!("elev-worker{i}")).spawn(move || {
                let r = enter(cpu, P_SERVING);
                s.workers[i].tid.store(gettid(), Ordering::SeqCst);
                let ok = r.is_ok();
                let _ = tx.send(r);
                drop(tx);
                if ok {
                    worker_loop(&s, i);
                }
            })?);
        }
        drop(tx);
        for _ in 0..p.threads.len() {
            rx.recv().map_err(|_| io::Error::other("a worker died before it started"))??;
        }
        Ok(p)
    }

    /// The timer to put in the dispatcher's poll set (readable when a request waiting behind
    /// a running one should be looked at again); `None` without a threshold.
    pub fn timer_fd(&self) -> Option<RawFd> {
        self.timer.as_ref().map(|t| t.as_raw_fd())
    }

    /// Queues a request (dispatcher side); [`Preempt::dispatch`] hands it out.
    pub fn submit(&self, req: Request) {
        self.shared.queue.lock().unwrap().push_back(req);
    }

    /// Requests waiting for a worker.
    pub fn queued(&self) -> usize {
        self.shared.queue.lock().unwrap().len()
    }

    /// The dispatcher's decision, after each poll: when requests wait, switch out a request
    /// past the threshold (or arm the timer for when one will be), and wake an idle worker if
    /// none serves the queue. The woken worker runs when the dispatcher blocks in its poll.
    pub fn dispatch(&mut self) {
        let s = &self.shared;
        if self.armed_ns != 0 && now_ns() >= self.armed_ns {
            // Fired (or about to): consume the expiry so the poll set does not report it again.
            if let Some(t) = &self.timer {
                let mut buf = [0u8; 8];
                // SAFETY: a non-blocking 8-byte read of our timerfd into our buffer.
                unsafe { libc::read(t.as_raw_fd(), buf.as_mut_ptr().cast(), 8) };
            }
            self.armed_ns = 0;
        }
        if s.queue.lock().unwrap().is_empty() {
            return;
        }
        if let Some(timer) = &self.timer {
            loop {
                let serving: Vec<(usize, u64)> = s
                    .workers
                    .iter()
                    .enumerate()
                    .filter(|(_, w)| w.state.load(Ordering::SeqCst) == SERVING)
                    .map(|(i, w)| (i, w.started_ns.load(Ordering::SeqCst)))
                    .filter(|&(_, t)| t != 0)
                    .collect();
                match decide(&serving, now_ns(), self.threshold_ns) {
                    Verdict::Switch(i) => {
                        // The worker is not running now (the dispatcher is, on the same core).
                        let w = &s.workers[i];
                        w.state.store(SWITCHED_OUT, Ordering::SeqCst);
                        let _ = RealEffects.set_sched(w.tid.load(Ordering::SeqCst), fifo(P_SWITCHED_OUT));
                        s.preemptions.fetch_add(1, Ordering::Relaxed);
                    }
                    Verdict::ArmAt(at) => {
                        if self.armed_ns == 0 || at < self.armed_ns {
                            arm_abs(timer, at);
                            self.armed_ns = at;
                            self.timer_arms += 1;
                        }
                        break;
                    }
                    Verdict::Nothing => break,
                }
            }
        }
        if s.workers.iter().any(|w| w.state.load(Ordering::SeqCst) == SERVING) {
            return;
        }
        if let Some(w) = s.workers.iter().find(|w| w.state.compare_exchange(IDLE, SERVING, Ordering::SeqCst, Ordering::SeqCst).is_ok()) {
            w.gen.fetch_add(1, Ordering::SeqCst);
            futex_wake(&w.gen);
        }
    }

    pub fn stats(&self) -> PreemptStats {
        PreemptStats { preemptions: self.shared.preemptions.load(Ordering::Relaxed), timer_arms: self.timer_arms }
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
        // Give the dispatcher's core back first, so switched-out workers can finish and exit.
        if let Some((attr, cpus)) = self.dispatcher_old.take() {
            let me = gettid();
            let _ = RealEffects.set_sched(me, attr);
            let _ = RealEffects.set_affinity(me, &cpus);
        }
        for w in &s.workers {
            let _ = RealEffects.set_sched(w.tid.load(Ordering::SeqCst), fifo(P_SERVING));
            w.gen.fetch_add(1, Ordering::SeqCst);
            futex_wake(&w.gen);
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
        if w.state.load(Ordering::SeqCst) == SERVING {
            serve(s, w);
        }
        futex_wait(&w.gen, g);
    }
}

/// Serves the queue until it is empty, then leaves the worker IDLE (or SERVING again when a
/// request came in meanwhile: the dispatcher saw this worker serving and woke nobody).
fn serve(s: &Shared, w: &Worker) {
    loop {
        loop {
            // Its own statement: in a `while let` the queue's lock would be held through the
            // request.
            let next = s.queue.lock().unwrap().pop_front();
            let Some(req) = next else { break };
            w.started_ns.store(now_ns(), Ordering::SeqCst);
            (req.work)();
            w.started_ns.store(0, Ordering::SeqCst);
            if w.state.load(Ordering::SeqCst) == SWITCHED_OUT {
                // Back to the serving priority before answering and taking more work.
                let _ = RealEffects.set_sched(gettid(), fifo(P_SERVING));
                w.state.store(SERVING, Ordering::SeqCst);
            }
            (req.done)();
        }
        w.state.store(IDLE, Ordering::SeqCst);
        let more = !s.queue.lock().unwrap().is_empty();
        if !more || w.state.compare_exchange(IDLE, SERVING, Ordering::SeqCst, Ordering::SeqCst).is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_past_the_threshold_is_switched_out_and_an_earlier_one_sets_the_timer() {
        // Nothing serving: nothing to decide.
        assert_eq!(decide(&[], 1_000, 25), Verdict::Nothing);
        // One request 10 ns old at a 25 ns threshold: look again when it is 25 ns old.
        assert_eq!(decide(&[(3, 990)], 1_000, 25), Verdict::ArmAt(1_015));
        // Exactly at the threshold: switched out.
        assert_eq!(decide(&[(3, 975)], 1_000, 25), Verdict::Switch(3));
        // Two serving (one woke after the other was switched back in): the older one goes,
        // else the earliest deadline wins.
        assert_eq!(decide(&[(1, 990), (2, 900)], 1_000, 25), Verdict::Switch(2));
        assert_eq!(decide(&[(1, 990), (2, 980)], 1_000, 25), Verdict::ArmAt(1_005));
    }
}
