//! The plant's board firmware acting on the real machine (`joule-bench thermal --firmware`):
//! a Pi's firmware lowers the clock of every core when hot, which slows every task alike —
//! the labelled one, fio and the best-effort work — whatever the scheduler or joule decided.
//! This machine has no clock to lower (no cpufreq in the VM), so the slowdown is modelled as
//! stolen time: one SCHED_FIFO thread pinned to each CPU spins for `(1 − speed)` of every
//! millisecond and sleeps the rest, so every task on that CPU gets `speed` of it. The stolen
//! time is counted ([`Throttle::stolen_ns`]) so the plant takes it out of the busy time it
//! heats with: a slower clock is less power, not more work.
//!
//! What the model gets wrong, and which way: a real clock cut stretches each task's compute by
//! `1 / speed` and adds almost nothing to a wake-up; stolen time adds up to `(1 − speed)` ms
//! to a wake-up that lands in the stolen part of a millisecond. A mode the firmware throttles
//! (`none`) shows a labelled tail worse than a real board's would; fio and the best-effort
//! work see the same loss of CPU either way.

use anyhow::Context;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The firmware's slowdown is spread at this grain: short against the labelled task's 2 ms
/// period, long against a context switch.
const PERIOD: Duration = Duration::from_millis(1);

/// The stealing threads, one per CPU; stopped and joined when dropped.
pub struct Throttle {
    /// The speed to leave, f64 bits.
    speed: Arc<AtomicU64>,
    /// CPU time the threads have spun, ns, all CPUs.
    stolen: Vec<Arc<AtomicU64>>,
    stop: Arc<AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: a valid pointer to a timespec we own.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Pins the calling thread to `cpu` at SCHED_FIFO priority 1: over every normal task, under
/// the kernel's own RT threads.
fn pin_fifo(cpu: usize) -> std::io::Result<()> {
    // SAFETY: plain syscalls on the calling thread with structures we own.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        let p = libc::sched_param { sched_priority: 1 };
        if libc::sched_setscheduler(0, libc::SCHED_FIFO, &p) != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

impl Throttle {
    pub fn start() -> anyhow::Result<Throttle> {
        let ncpu = std::thread::available_parallelism().map_or(1, |n| n.get());
        let speed = Arc::new(AtomicU64::new(1f64.to_bits()));
        let stop = Arc::new(AtomicBool::new(false));
        let (tx, rx) = std::sync::mpsc::channel();
        let mut stolen = Vec::new();
        let mut threads = Vec::new();
        for cpu in 0..ncpu {
            let (sp, st, tx) = (speed.clone(), stop.clone(), tx.clone());
            let mine = Arc::new(AtomicU64::new(0));
            stolen.push(mine.clone());
            threads.push(std::thread::Builder::new().name(format!("bench-firmware{cpu}")).spawn(move || {
                let _ = tx.send(pin_fifo(cpu).map_err(|e| format!("CPU {cpu}: {e}")));
                let mut next = Instant::now();
                while !st.load(Ordering::Relaxed) {
                    next += PERIOD;
                    let s = f64::from_bits(sp.load(Ordering::Relaxed));
                    if s < 1.0 {
                        let spin = PERIOD.mul_f64(1.0 - s);
                        let t0 = Instant::now();
                        while t0.elapsed() < spin {
                            std::hint::spin_loop();
                        }
                    }
                    mine.store(thread_cpu_ns(), Ordering::Relaxed);
                    let now = Instant::now();
                    if next > now {
                        std::thread::sleep(next - now);
                    } else {
                        next = now;
                    }
                }
            })?);
        }
        let t = Throttle { speed, stolen, stop, threads };
        for _ in 0..ncpu {
            rx.recv_timeout(Duration::from_secs(5))
                .context("a firmware thread did not start")?
                .map_err(|e| anyhow::anyhow!("--firmware needs SCHED_FIFO threads pinned to each CPU (root, RT runtime available): {e}"))?;
        }
        Ok(t)
    }

    /// Sets the share of every CPU the tasks keep; returns it as set (clamped to 0.1..=1).
    pub fn set_speed(&self, speed: f64) -> f64 {
        let s = speed.clamp(0.1, 1.0);
        self.speed.store(s.to_bits(), Ordering::Relaxed);
        s
    }

    /// CPU time spent by the threads so far, ns (their sleeping wake-ups included: every
    /// cycle of theirs is time the work did not get).
    pub fn stolen_ns(&self) -> u64 {
        self.stolen.iter().map(|a| a.load(Ordering::Relaxed)).sum()
    }
}

impl Drop for Throttle {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}
