//! Which connection the metrics server closes when it is full. Closing the oldest one let a
//! single client that opens connections faster than a password check takes (tens of ms) close
//! everybody else's, a legitimate login included (issue 33's flood, seen failing in CI). Here the
//! client address holding the most connections loses its oldest one, so one address can only
//! ever push out its own connections while any other address holds fewer.

use std::collections::VecDeque;
use std::net::IpAddr;

/// Open connections, oldest first, each with its client's address and what closes it when
/// dropped.
#[derive(Debug)]
pub struct Slots<T> {
    open: VecDeque<(IpAddr, T)>,
    max: usize,
}

impl<T> Slots<T> {
    pub fn new(max: usize) -> Self {
        Slots { open: VecDeque::new(), max: max.max(1) }
    }

    /// Forgets the connections for which `open` says false (they are over).
    pub fn retain_open(&mut self, mut open: impl FnMut(&T) -> bool) {
        self.open.retain(|(_, t)| open(t));
    }

    /// Adds `peer`'s new connection, first closing (dropping) connections of the address that
    /// holds the most, oldest first, until there is room.
    pub fn push(&mut self, peer: IpAddr, t: T) {
        while self.open.len() >= self.max {
            let Some(i) = self.victim() else { break };
            self.open.remove(i);
        }
        self.open.push_back((peer, t));
    }

    /// The oldest connection of the address with the most (on a tie, the one whose oldest
    /// connection is older).
    fn victim(&self) -> Option<usize> {
        let mut counts: std::collections::HashMap<IpAddr, (usize, usize)> = std::collections::HashMap::new();
        for (i, (ip, _)) in self.open.iter().enumerate() {
            counts.entry(*ip).or_insert((0, i)).0 += 1;
        }
        counts.values().max_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(&a.1))).map(|&(_, first)| first)
    }

    /// Closes one connection, chosen as [`push`](Self::push) would (the server is out of file
    /// descriptors for a moment).
    pub fn pop_oldest_of_heaviest(&mut self) {
        if let Some(i) = self.victim() {
            self.open.remove(i);
        }
    }

    #[cfg(test)]
    fn peers(&self) -> Vec<IpAddr> {
        self.open.iter().map(|(ip, _)| *ip).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flooding_address_pushes_out_only_its_own_connections() {
        let (victim, flood): (IpAddr, IpAddr) = ("127.0.0.1".parse().unwrap(), "127.0.0.2".parse().unwrap());
        let mut s = Slots::new(4);
        s.push(victim, 0);
        for i in 1..100 {
            s.push(flood, i);
        }
        assert_eq!(s.peers(), [victim, flood, flood, flood], "the other client's connection stays");
        // Its oldest ones go first.
        assert_eq!(s.open.iter().map(|(_, t)| *t).collect::<Vec<_>>(), [0, 97, 98, 99]);
    }

    #[test]
    fn equal_holders_lose_their_oldest_and_closed_ones_make_room() {
        let (a, b): (IpAddr, IpAddr) = ("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap());
        let mut s = Slots::new(2);
        s.push(a, 1);
        s.push(b, 2);
        s.push(b, 3); // a and b hold one each: a's is older
        assert_eq!(s.peers(), [b, b]);
        s.retain_open(|t| *t != 2);
        s.push(a, 4);
        assert_eq!(s.peers(), [b, a], "a closed connection made room, nothing was pushed out");
        s.pop_oldest_of_heaviest();
        assert_eq!(s.peers(), [a]);
    }
}
