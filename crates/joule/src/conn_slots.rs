//! Which connection the metrics server closes when it is full. Closing the oldest one let a
//! single client that opens connections faster than a password check takes (tens of ms) close
//! everybody else's, a legitimate login included (issue 33's flood, seen failing in CI); closing
//! the oldest of the address holding the most was beaten by rotating the address, each holding
//! one, so the oldest of all went again, a login in the middle of its bcrypt.
//!
//! Here clients are counted by group (client_group.rs), and a connection serving a request (a
//! login waiting for its check, a scrape waiting for a fresh reading) is closed only when every
//! connection is. Among the others, the group holding the most loses, on a tie the group whose
//! newest connection is the newest, and within the group its newest idle connection goes: the
//! latecomer, not the one that was there first. Inside loopback, where every local user is one
//! group, every connection is so its own client: a local flood of idle connections churns its
//! own newest ones and leaves an older connection (a scraper's kept-alive one) alone. So a group
//! can only ever push out its own connections while any other group holds fewer.

use crate::client_group::Group;
use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// Whether a connection is serving a request now: set while the request is in hand, cleared
/// when it is answered or dropped.
#[derive(Debug, Clone, Default)]
pub struct Busy(Arc<AtomicBool>);

impl Busy {
    /// Marks the connection busy until the returned guard is dropped.
    pub fn serving(&self) -> Serving {
        self.0.store(true, Ordering::Relaxed);
        Serving(self.0.clone())
    }

    fn is_busy(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }
}

/// A request in hand; its connection is idle again when this is dropped.
pub struct Serving(Arc<AtomicBool>);

impl Drop for Serving {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Relaxed);
    }
}

#[derive(Debug)]
struct Slot<T> {
    group: Group,
    busy: Busy,
    t: T,
}

/// Open connections, oldest first, each with its client's group, whether it is serving, and
/// what closes it when dropped.
#[derive(Debug)]
pub struct Slots<T> {
    open: VecDeque<Slot<T>>,
    max: usize,
}

impl<T> Slots<T> {
    pub fn new(max: usize) -> Self {
        Slots { open: VecDeque::new(), max: max.max(1) }
    }

    /// Forgets the connections for which `open` says false (they are over).
    pub fn retain_open(&mut self, mut open: impl FnMut(&T) -> bool) {
        self.open.retain(|s| open(&s.t));
    }

    /// Adds `peer`'s new connection, first closing (dropping) others, chosen as the module's
    /// header says, until there is room.
    pub fn push(&mut self, peer: IpAddr, busy: Busy, t: T) {
        while self.open.len() >= self.max {
            let Some(i) = self.victim() else { break };
            self.open.remove(i);
        }
        self.open.push_back(Slot { group: Group::of(peer), busy, t });
    }

    /// Closes one connection, chosen as [`push`](Self::push) would (the server is out of file
    /// descriptors for a moment).
    pub fn close_one(&mut self) {
        if let Some(i) = self.victim() {
            self.open.remove(i);
        }
    }

    fn victim(&self) -> Option<usize> {
        let idle = |s: &Slot<T>| !s.busy.is_busy();
        let candidate: &dyn Fn(&Slot<T>) -> bool = if self.open.iter().any(idle) { &idle } else { &|_| true };
        // Per group: (connections, its newest's index, its newest candidate's index).
        let mut groups: HashMap<Group, (usize, usize, Option<usize>)> = HashMap::new();
        for (i, s) in self.open.iter().enumerate() {
            let g = groups.entry(s.group).or_insert((0, i, None));
            g.0 += 1;
            g.1 = i;
            if candidate(s) {
                g.2 = Some(i);
            }
        }
        groups.values().filter_map(|&(n, newest, first)| Some((n, newest, first?))).max_by_key(|&(n, newest, _)| (n, newest)).map(|(_, _, i)| i)
    }

    #[cfg(test)]
    fn held(&self) -> Vec<&T> {
        self.open.iter().map(|s| &s.t).collect()
    }
}

#[cfg(test)]
#[path = "conn_slots_tests.rs"]
mod tests;
