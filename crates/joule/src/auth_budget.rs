//! Who may have a password checked now. Each wrong password costs the endpoint one bcrypt (tens
//! of ms of CPU, on its one blocking thread), so without a budget one client with a stream of
//! wrong passwords keeps that thread busy and queues everyone else's first login behind its own
//! (issue 33: 7,644 connections in 20 s put the agent at a whole core and failed a legitimate
//! first login during and after the flood). Here each client address has a few checks at once,
//! then one a second, and never two waiting at the same time; past that it is told to come back
//! later (HTTP 429) without a bcrypt. A remembered good password needs no check at all
//! (`webconfig.rs`). What one address can cost is bounded, and so is its place in the queue: a
//! single client cannot make another client's requests fail.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::Instant;

/// Checks an address may have back to back.
const BURST: f64 = 3.0;
/// Checks per second an address earns after its burst.
const PER_S: f64 = 1.0;
/// Addresses remembered; past this, the ones with a full budget and nothing waiting are forgotten.
const MAX_CLIENTS: usize = 4096;

#[derive(Debug, Clone, Copy)]
struct Budget {
    tokens: f64,
    at: Instant,
    waiting: bool,
}

/// The budget of every client address.
#[derive(Debug, Default)]
pub struct AuthBudget {
    clients: Mutex<HashMap<IpAddr, Budget>>,
}

impl AuthBudget {
    /// Whether `ip` may have a password checked now; when it may, the check is its one waiting
    /// check until [`done`](Self::done).
    pub fn take(&self, ip: IpAddr) -> bool {
        self.take_at(ip, Instant::now())
    }

    fn take_at(&self, ip: IpAddr, now: Instant) -> bool {
        let mut clients = self.clients.lock().unwrap_or_else(|e| e.into_inner());
        if clients.len() >= MAX_CLIENTS && !clients.contains_key(&ip) {
            clients.retain(|_, b| b.waiting || refill(*b, now) < BURST);
            if clients.len() >= MAX_CLIENTS {
                return false;
            }
        }
        let b = clients.entry(ip).or_insert(Budget { tokens: BURST, at: now, waiting: false });
        b.tokens = refill(*b, now);
        b.at = now;
        if b.waiting || b.tokens < 1.0 {
            return false;
        }
        b.tokens -= 1.0;
        b.waiting = true;
        true
    }

    /// The check `ip` took is over.
    pub fn done(&self, ip: IpAddr) {
        if let Some(b) = self.clients.lock().unwrap_or_else(|e| e.into_inner()).get_mut(&ip) {
            b.waiting = false;
        }
    }
}

fn refill(b: Budget, now: Instant) -> f64 {
    (b.tokens + now.saturating_duration_since(b.at).as_secs_f64() * PER_S).min(BURST)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn an_address_gets_a_burst_then_one_a_second_and_never_two_waiting() {
        let b = AuthBudget::default();
        let (me, other) = ("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap());
        let t0 = Instant::now();
        assert!(b.take_at(me, t0));
        assert!(!b.take_at(me, t0), "a second check while the first waits");
        b.done(me);
        assert!(
            b.take_at(me, t0)
                && {
                    b.done(me);
                    true
                }
                && b.take_at(me, t0)
        );
        b.done(me);
        assert!(!b.take_at(me, t0), "the burst is spent");
        assert!(b.take_at(other, t0), "another address has its own budget");
        assert!(!b.take_at(me, t0 + Duration::from_millis(500)), "half a second earns half a check");
        assert!(b.take_at(me, t0 + Duration::from_millis(1000)), "a second earns one");
        b.done(me);
        assert!(
            b.take_at(me, t0 + Duration::from_secs(60)) && {
                b.done(me);
                true
            },
            "the budget refills"
        );
    }

    #[test]
    fn many_addresses_are_bounded_and_idle_ones_forgotten() {
        let b = AuthBudget::default();
        let t0 = Instant::now();
        for i in 0..MAX_CLIENTS as u32 {
            let ip = IpAddr::from(std::net::Ipv4Addr::from(0x0a00_0000 + i));
            assert!(b.take_at(ip, t0));
            b.done(ip);
        }
        let late: IpAddr = "192.168.0.1".parse().unwrap();
        assert!(!b.take_at(late, t0), "every address spent a check this instant: full");
        assert!(b.take_at(late, t0 + Duration::from_secs(10)), "ten seconds later the idle ones are forgotten");
        assert!(b.clients.lock().unwrap().len() < 10);
    }
}
