//! Clocks and waits of the hot loop. The scheduler waits for the end of a slice in one of four
//! ways; `joule-bench elevate` measures each one's wake-up error here (section `floor`) and
//! docs/elevate.md records why the defaults are what they are: shared pattern → a timerfd
//! armed with an absolute deadline (the scheduler must give the core away; timerfd and
//! clock_nanosleep were within each other's noise here, and timerfd is the seed's choice), dedicated → spin on the vDSO clock (the
//! core is the scheduler's own).

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// CLOCK_MONOTONIC in ns (vDSO: no syscall with the TSC clocksource).
pub fn now_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes into the timespec we own.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

fn timespec(ns: u64) -> libc::timespec {
    libc::timespec { tv_sec: (ns / 1_000_000_000) as libc::time_t, tv_nsec: (ns % 1_000_000_000) as libc::c_long }
}

/// How the scheduler waits until a deadline.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WaitMethod {
    /// `clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME)`: sleeps, so the core runs the target.
    Nanosleep,
    /// `read` on a timerfd armed with an absolute deadline: sleeps likewise.
    Timerfd,
    /// Reads the clock until the deadline: never sleeps, the core is the scheduler's.
    Spin,
    /// Sleeps until `HYBRID_MARGIN_NS` before the deadline, then spins: fewer late wake-ups
    /// than a sleep, but it takes the core from the target for the margin.
    Hybrid,
}

impl WaitMethod {
    pub const ALL: [WaitMethod; 4] = [WaitMethod::Nanosleep, WaitMethod::Timerfd, WaitMethod::Spin, WaitMethod::Hybrid];
    pub fn name(self) -> &'static str {
        match self {
            WaitMethod::Nanosleep => "clock_nanosleep",
            WaitMethod::Timerfd => "timerfd",
            WaitMethod::Spin => "spin",
            WaitMethod::Hybrid => "hybrid",
        }
    }
}

/// How early the hybrid wait wakes before its deadline to spin the rest.
pub const HYBRID_MARGIN_NS: u64 = 20_000;

/// A waiter (the timerfd one owns its fd).
pub struct Waiter {
    method: WaitMethod,
    tfd: Option<OwnedFd>,
}

impl Waiter {
    pub fn new(method: WaitMethod) -> io::Result<Waiter> {
        let tfd = if method == WaitMethod::Timerfd { Some(timerfd()?) } else { None };
        Ok(Waiter { method, tfd })
    }

    pub fn method(&self) -> WaitMethod {
        self.method
    }

    /// Returns at (or after) `deadline_ns` on CLOCK_MONOTONIC.
    pub fn wait_until(&self, deadline_ns: u64) {
        match self.method {
            WaitMethod::Nanosleep => nanosleep_until(deadline_ns),
            WaitMethod::Timerfd => {
                let fd = self.tfd.as_ref().expect("timerfd waiter has its fd");
                arm_abs(fd, deadline_ns);
                let mut buf = [0u8; 8];
                // SAFETY: reading 8 bytes into a buffer we own; a timerfd read blocks until expiry.
                unsafe { libc::read(fd.as_raw_fd(), buf.as_mut_ptr().cast(), 8) };
            }
            WaitMethod::Spin => spin_until(deadline_ns),
            WaitMethod::Hybrid => {
                if deadline_ns > now_ns() + HYBRID_MARGIN_NS {
                    nanosleep_until(deadline_ns - HYBRID_MARGIN_NS);
                }
                spin_until(deadline_ns);
            }
        }
    }
}

pub fn spin_until(deadline_ns: u64) {
    while now_ns() < deadline_ns {
        std::hint::spin_loop();
    }
}

pub fn nanosleep_until(deadline_ns: u64) {
    let ts = timespec(deadline_ns);
    // SAFETY: an absolute sleep on a timespec we own; EINTR just returns early (we re-check).
    while unsafe { libc::clock_nanosleep(libc::CLOCK_MONOTONIC, libc::TIMER_ABSTIME, &ts, std::ptr::null_mut()) } == libc::EINTR {}
}

/// A CLOCK_MONOTONIC timerfd (close-on-exec).
pub fn timerfd() -> io::Result<OwnedFd> {
    // SAFETY: plain syscall; the fd is owned right away.
    let fd = unsafe { libc::timerfd_create(libc::CLOCK_MONOTONIC, libc::TFD_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fd is a fresh descriptor nobody else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Arms `fd` to expire once at absolute `deadline_ns`.
pub fn arm_abs(fd: &OwnedFd, deadline_ns: u64) {
    let spec = libc::itimerspec { it_interval: timespec(0), it_value: timespec(deadline_ns.max(1)) };
    // SAFETY: settime on our fd with a spec we own.
    unsafe { libc::timerfd_settime(fd.as_raw_fd(), libc::TFD_TIMER_ABSTIME, &spec, std::ptr::null_mut()) };
}

/// Arms `fd` to expire once `after_ns` from now (0 disarms).
pub fn arm_rel(fd: &OwnedFd, after_ns: u64) {
    let spec = libc::itimerspec { it_interval: timespec(0), it_value: timespec(after_ns) };
    // SAFETY: as above.
    unsafe { libc::timerfd_settime(fd.as_raw_fd(), 0, &spec, std::ptr::null_mut()) };
}

/// Wake-up error of `method` in ns: `n` waits of `interval_ns` each, how late each returned.
/// The caller chooses the thread's policy (the scheduler runs at SCHED_FIFO, where the
/// kernel's timer slack is 0).
pub fn wakeup_errors_ns(method: WaitMethod, interval_ns: u64, n: usize) -> io::Result<Vec<u64>> {
    let w = Waiter::new(method)?;
    let mut out = Vec::with_capacity(n);
    let mut deadline = now_ns() + interval_ns;
    for _ in 0..n {
        w.wait_until(deadline);
        let t = now_ns();
        out.push(t.saturating_sub(deadline));
        deadline = t + interval_ns;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_method_returns_no_earlier_than_its_deadline() {
        for m in WaitMethod::ALL {
            let w = Waiter::new(m).unwrap();
            let deadline = now_ns() + 200_000;
            w.wait_until(deadline);
            assert!(now_ns() >= deadline, "{}", m.name());
        }
    }
}
