//! Who may have a password checked now. Each wrong password costs the endpoint one bcrypt (tens
//! of ms of CPU, on its one blocking thread), so without a budget one client with a stream of
//! wrong passwords keeps that thread busy and queues everyone else's first login behind its own
//! (issue 33: 7,644 connections in 20 s put the agent at a whole core and failed a legitimate
//! first login during and after the flood).
//!
//! Clients are counted by group (client_group.rs: all of loopback, an IPv4 /24, an IPv6 /64), so
//! rotating the source address buys nothing. A group has one turn, handed to its requests in
//! the order they came: inside a group every connection gets its go in turn, and one whose
//! connection closes leaves the line. A request that does not get the turn within
//! [`MAX_TURN_WAIT`] is told to come back later (HTTP 429) without a bcrypt. The turn's holder
//! has a check at once while the group's burst lasts, and otherwise waits for the group's next
//! token (at most half a second); a token is spent only when a bcrypt runs. The turn is a
//! [`Permit`] that gives itself back when dropped, whatever ends the request: its answer, a
//! connection closed by the client, by a full server or by its lifetime. The blocking thread
//! holds at most [`MAX_QUEUED`] checks, and one whose connection is gone is not run, so a
//! flood's backlog ends with the flood. A remembered good password needs no check at all
//! (`webconfig.rs`). The table of groups is bounded; a full one forgets the group it saw
//! longest ago (never one whose turn is held or waited for), which costs nothing but that
//! group's spent burst.

use crate::client_group::Group;
use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Checks a group may have back to back.
const BURST: f64 = 3.0;
/// Checks per second a group earns after its burst: a turn's holder waits at most `1 / PER_S`.
const PER_S: f64 = 2.0;
/// Groups remembered.
const MAX_GROUPS: usize = 4096;
/// Checks queued or running at once, all groups together: what a backlog can cost past its end
/// when its connections stay open (those that close are skipped).
pub const MAX_QUEUED: usize = 8;
/// How long a request waits in its group's line for the turn.
pub const MAX_TURN_WAIT: Duration = Duration::from_secs(1);

#[derive(Debug)]
struct Entry {
    tokens: f64,
    at: Instant,
    /// The group's one turn; its line is the semaphore's (first come, first served).
    turn: Arc<Semaphore>,
    /// Which entry of the group this is (a permit spends only from the entry it took).
    id: u64,
    /// Its key in `Table::by_age`.
    seen: u64,
}

impl Entry {
    /// Whether a request holds the turn or waits for it (each holds a handle of it).
    fn in_use(&self) -> bool {
        Arc::strong_count(&self.turn) > 1
    }
}

#[derive(Debug, Default)]
struct Table {
    groups: HashMap<Group, Entry>,
    /// Groups by when they last asked, oldest first.
    by_age: BTreeMap<u64, Group>,
    clock: u64,
    queued: usize,
}

impl Table {
    fn tick(&mut self) -> u64 {
        self.clock += 1;
        self.clock
    }

    /// Forgets the group that asked longest ago and whose turn nobody holds or waits for (those
    /// are at most one per open connection, far fewer than the table holds).
    fn forget_oldest(&mut self) {
        let old = self.by_age.iter().find(|(_, g)| self.groups.get(g).is_some_and(|e| !e.in_use())).map(|(&seen, &g)| (seen, g));
        if let Some((seen, g)) = old {
            self.by_age.remove(&seen);
            self.groups.remove(&g);
        }
    }
}

/// The budget of every client group.
#[derive(Debug, Default)]
pub struct AuthBudget {
    table: Mutex<Table>,
}

/// A group's turn, given back when dropped. It moves with the check into the blocking job, so
/// the turn is held until the check ran or was skipped.
#[derive(Debug)]
pub struct Permit {
    budget: Arc<AuthBudget>,
    group: Group,
    id: u64,
    /// When the group has a token for this check.
    pub ready_at: Instant,
    queued: bool,
    _turn: OwnedSemaphorePermit,
}

/// A request's place in its group's line.
struct Place {
    group: Group,
    id: u64,
    turn: Arc<Semaphore>,
}

impl AuthBudget {
    /// The turn of `ip`'s group, once the requests before it in the group's line are done; None
    /// when that takes longer than `wait`. Dropping the future leaves the line.
    pub async fn take(self: &Arc<Self>, ip: IpAddr, wait: Duration) -> Option<Permit> {
        let place = self.enter(ip, Instant::now());
        let turn = tokio::time::timeout(wait, place.turn.clone().acquire_owned()).await.ok()?.ok()?;
        Some(self.permit(place, turn, Instant::now()))
    }

    /// The turn of `ip`'s group if it is free now.
    #[cfg(test)]
    fn try_take_at(self: &Arc<Self>, ip: IpAddr, now: Instant) -> Option<Permit> {
        let place = self.enter(ip, now);
        let turn = place.turn.clone().try_acquire_owned().ok()?;
        Some(self.permit(place, turn, now))
    }

    fn enter(&self, ip: IpAddr, now: Instant) -> Place {
        let group = Group::of(ip);
        let mut t = self.lock();
        if !t.groups.contains_key(&group) && t.groups.len() >= MAX_GROUPS {
            t.forget_oldest();
        }
        let seen = t.tick();
        let fresh = || Entry { tokens: BURST, at: now, turn: Arc::new(Semaphore::new(1)), id: seen, seen };
        let e = t.groups.entry(group).or_insert_with(fresh);
        let old_seen = std::mem::replace(&mut e.seen, seen);
        let place = Place { group, id: e.id, turn: e.turn.clone() };
        t.by_age.remove(&old_seen);
        t.by_age.insert(seen, group);
        place
    }

    fn permit(self: &Arc<Self>, place: Place, turn: OwnedSemaphorePermit, now: Instant) -> Permit {
        let mut t = self.lock();
        // The entry stays while its turn is held or waited for: `place` holds a handle of it.
        let tokens = t.groups.get_mut(&place.group).filter(|e| e.id == place.id).map_or(BURST, |e| {
            e.tokens = refill(e, now);
            e.at = now;
            e.tokens
        });
        let wait_s = ((1.0 - tokens) / PER_S).max(0.0);
        Permit { budget: self.clone(), group: place.group, id: place.id, ready_at: now + Duration::from_secs_f64(wait_s), queued: false, _turn: turn }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Permit {
    /// How long until the group has a token for this check.
    pub fn ready_in(&self) -> Duration {
        self.ready_at.saturating_duration_since(Instant::now())
    }

    /// Takes a place in the blocking thread's queue: false when [`MAX_QUEUED`] checks are
    /// already queued or running.
    pub fn queue(&mut self) -> bool {
        let mut t = self.budget.lock();
        if self.queued || t.queued < MAX_QUEUED {
            t.queued += !self.queued as usize;
            self.queued = true;
        }
        self.queued
    }

    /// The check runs now: the group spends a token.
    pub fn spend(&self) {
        self.spend_at(Instant::now())
    }

    fn spend_at(&self, now: Instant) {
        let mut t = self.budget.lock();
        if let Some(e) = t.groups.get_mut(&self.group).filter(|e| e.id == self.id) {
            e.tokens = refill(e, now) - 1.0;
            e.at = now;
        }
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        // The turn itself goes back with `_turn`, to the next in the group's line.
        self.budget.lock().queued -= self.queued as usize;
    }
}

fn refill(e: &Entry, now: Instant) -> f64 {
    (e.tokens + now.saturating_duration_since(e.at).as_secs_f64() * PER_S).min(BURST)
}

#[cfg(test)]
#[path = "auth_budget_tests.rs"]
mod tests;
