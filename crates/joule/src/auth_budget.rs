//! Who may have a password checked now. Each wrong password costs the endpoint one bcrypt (tens
//! of ms of CPU, on its one blocking thread), so without a budget one client with a stream of
//! wrong passwords keeps that thread busy and queues everyone else's first login behind its own
//! (issue 33: 7,644 connections in 20 s put the agent at a whole core and failed a legitimate
//! first login during and after the flood).
//!
//! Clients are counted by group (client_group.rs: all of loopback, an IPv4 /24, an IPv6 /64), so
//! rotating the source address buys nothing. A group has one turn: one of its requests at a time
//! waits for a check, the others are told to come back later (HTTP 429) without a bcrypt. The
//! turn's holder has a check at once while the group's burst lasts, and otherwise waits for the
//! group's next token (at most half a second); a token is spent only when a bcrypt runs. The
//! turn is a [`Permit`] that gives itself back when dropped, whatever ends the request: its
//! answer, a connection closed by the client, by a full server or by its lifetime. The blocking
//! thread holds at most [`MAX_QUEUED`] checks, and one whose connection is gone is not run, so a
//! flood's backlog ends with the flood. A remembered good password needs no check at all
//! (`webconfig.rs`). The table of groups is bounded; a full one forgets the group it saw
//! longest ago (never one holding its turn), which costs nothing but that group's spent burst.

use crate::client_group::Group;
use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Checks a group may have back to back.
const BURST: f64 = 3.0;
/// Checks per second a group earns after its burst: a turn's holder waits at most `1 / PER_S`.
const PER_S: f64 = 2.0;
/// Groups remembered.
const MAX_GROUPS: usize = 4096;
/// Checks queued or running at once, all groups together: what a backlog can cost past its end
/// when its connections stay open (those that close are skipped).
pub const MAX_QUEUED: usize = 8;

#[derive(Debug)]
struct Entry {
    tokens: f64,
    at: Instant,
    /// Whether a request of the group holds its turn.
    turn: bool,
    /// Which entry of the group this is (a permit releases only the entry it took).
    id: u64,
    /// Its key in `Table::by_age`.
    seen: u64,
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

    /// Forgets the group that asked longest ago and holds no turn (the turns held are at most
    /// one per open connection, far fewer than the table holds).
    fn forget_oldest(&mut self) {
        let old = self.by_age.iter().find(|(_, g)| self.groups.get(g).is_some_and(|e| !e.turn)).map(|(&seen, &g)| (seen, g));
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
}

impl AuthBudget {
    /// The turn of `ip`'s group, or None when another request of the group holds it.
    pub fn take(self: &Arc<Self>, ip: IpAddr) -> Option<Permit> {
        self.take_at(ip, Instant::now())
    }

    fn take_at(self: &Arc<Self>, ip: IpAddr, now: Instant) -> Option<Permit> {
        let group = Group::of(ip);
        let mut t = self.lock();
        if !t.groups.contains_key(&group) && t.groups.len() >= MAX_GROUPS {
            t.forget_oldest();
        }
        let seen = t.tick();
        let fresh = Entry { tokens: BURST, at: now, turn: false, id: seen, seen };
        let old_seen = std::mem::replace(&mut t.groups.entry(group).or_insert(fresh).seen, seen);
        t.by_age.remove(&old_seen);
        t.by_age.insert(seen, group);
        let e = t.groups.get_mut(&group).expect("just inserted");
        if e.turn {
            return None;
        }
        e.tokens = refill(e, now);
        e.at = now;
        e.turn = true;
        let wait_s = ((1.0 - e.tokens) / PER_S).max(0.0);
        Some(Permit { budget: self.clone(), group, id: e.id, ready_at: now + Duration::from_secs_f64(wait_s), queued: false })
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
        let mut t = self.budget.lock();
        t.queued -= self.queued as usize;
        if let Some(e) = t.groups.get_mut(&self.group).filter(|e| e.id == self.id) {
            e.turn = false;
        }
    }
}

fn refill(e: &Entry, now: Instant) -> f64 {
    (e.tokens + now.saturating_duration_since(e.at).as_secs_f64() * PER_S).min(BURST)
}

#[cfg(test)]
#[path = "auth_budget_tests.rs"]
mod tests;
