//! What the nap actuator (and its waiter thread) tells the nap source each period: napping or
//! not, wakes so far, packets the eBPF program saw on the watched ports. Atomics, because the
//! waiter thread updates them the moment a packet wakes a nap, not at the next period.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

#[derive(Debug, Default)]
pub struct NapCounters {
    pub napping: AtomicBool,
    pub wakes_total: AtomicU64,
    pub port_hits_total: AtomicU64,
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
}
