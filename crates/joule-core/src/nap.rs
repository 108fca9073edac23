//! What the nap actuator (and its waiter thread) tells the nap source each period: napping or
//! not, wakes so far, packets the eBPF program saw on the watched ports. Atomics, because the
//! waiter thread updates them the moment a packet wakes a nap, not at the next period.

use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::Duration;

#[derive(Debug, Default)]
pub struct NapCounters {
    pub napping: AtomicBool,
    pub wakes_total: AtomicU64,
    pub port_hits_total: AtomicU64,
    /// Live TCP sockets on the watched ports as the eBPF program counts them; `None` (the TCP
    /// monitor walks /proc/net/tcp) until the nap actuator has set it.
    tcp_conns: AtomicI64,
    tcp_conns_known: AtomicBool,
    /// Bumped on every wake, so a control loop sleeping through a nap wakes with it.
    wakes: Mutex<u64>,
    woken: Condvar,
}

impl NapCounters {
    pub fn napping(&self) -> bool {
        self.napping.load(Ordering::Acquire)
    }
    pub fn wakes_total(&self) -> u64 {
        self.wakes_total.load(Ordering::Acquire)
    }
    pub fn port_hits_total(&self) -> u64 {
        self.port_hits_total.load(Ordering::Acquire)
    }
    /// Live TCP sockets on the watched ports, counted by eBPF, when known.
    pub fn tcp_conns(&self) -> Option<u64> {
        self.tcp_conns_known.load(Ordering::Acquire).then(|| self.tcp_conns.load(Ordering::Acquire).max(0) as u64)
    }
    pub fn set_tcp_conns(&self, n: i64) {
        self.tcp_conns.store(n, Ordering::Release);
        self.tcp_conns_known.store(true, Ordering::Release);
    }
    /// Records a wake (napping false, one more wake) and wakes a loop in [`Self::sleep_napping`].
    pub fn woke(&self) {
        self.napping.store(false, Ordering::Release);
        self.wakes_total.fetch_add(1, Ordering::AcqRel);
        *self.wakes.lock().unwrap_or_else(|e| e.into_inner()) += 1;
        self.woken.notify_all();
    }
    /// Ends a [`Self::sleep_napping`] without ending the nap: something the loop must act on
    /// happened (the in-kernel thermal stage changed).
    pub fn poke(&self) {
        *self.wakes.lock().unwrap_or_else(|e| e.into_inner()) += 1;
        self.woken.notify_all();
    }
    /// Sleeps up to `limit` while napping; returns at once when not napping or on a wake.
    /// True when it returned because the nap ended (a wake), false when `limit` passed (or
    /// there was no nap to sleep through).
    pub fn sleep_napping(&self, limit: Duration) -> bool {
        let g = self.wakes.lock().unwrap_or_else(|e| e.into_inner());
        let seen = *g;
        if !self.napping() {
            return false;
        }
        match self.woken.wait_timeout_while(g, limit, |w| *w == seen && self.napping()) {
            Ok((g, r)) => !r.timed_out() || *g != seen,
            Err(_) => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::Instant;

    #[test]
    fn a_loop_sleeping_through_a_nap_wakes_with_the_wake() {
        let c = Arc::new(NapCounters::default());
        let t0 = Instant::now();
        assert!(!c.sleep_napping(Duration::from_secs(5)), "not napping: no nap ended");
        assert!(t0.elapsed() < Duration::from_secs(1), "not napping: no sleep");
        c.napping.store(true, Ordering::Release);
        // A nap nobody wakes: the limit passes, and the nap goes on.
        assert!(!c.sleep_napping(Duration::from_millis(20)));
        assert!(c.napping());
        let c2 = c.clone();
        let waker = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            c2.woke();
        });
        let t0 = Instant::now();
        assert!(c.sleep_napping(Duration::from_secs(5)), "the wake ended the nap");
        assert!(t0.elapsed() < Duration::from_secs(2), "the wake ended the sleep");
        waker.join().unwrap();
        assert_eq!((c.napping(), c.wakes_total()), (false, 1));
    }

    #[test]
    fn a_poke_ends_the_sleep_but_not_the_nap() {
        let c = Arc::new(NapCounters::default());
        c.napping.store(true, Ordering::Release);
        let c2 = c.clone();
        let poker = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            c2.poke();
        });
        let t0 = Instant::now();
        assert!(c.sleep_napping(Duration::from_secs(5)));
        assert!(t0.elapsed() < Duration::from_secs(2), "the poke ended the sleep");
        poker.join().unwrap();
        assert_eq!((c.napping(), c.wakes_total()), (true, 0), "still napping, no wake counted");
    }
}
