//! Which connection a full server closes: by group, never one serving a request while another
//! is idle, the latecomer.

use super::*;

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

/// The `k`th address of 127/8 from 127.10.0.0, as the audit's floods rotated them.
fn rotating_lo(k: u32) -> IpAddr {
    IpAddr::from(std::net::Ipv4Addr::from(0x7f0a_0000 + k))
}

#[test]
fn a_flooding_group_pushes_out_only_its_own_newest_connections() {
    let mut s = Slots::new(4);
    s.push(ip("10.0.0.1"), Busy::default(), 0);
    for i in 1..100 {
        s.push(ip(&format!("10.0.1.{i}")), Busy::default(), i); // one /24, a new address each time
    }
    assert_eq!(s.held(), [&0, &1, &2, &99], "the other group's connection stays; the flood's newest went each time");
}

/// The third audit: every rotating address held one connection, so the globally oldest was
/// closed, a first login in the middle of its bcrypt.
#[test]
fn regression_an_idle_flood_from_rotating_loopback_addresses_closes_no_login_in_its_check() {
    let mut s = Slots::new(128);
    let login = Busy::default();
    let _checking = login.serving();
    s.push(ip("127.0.0.1"), login, "login");
    for k in 0..3000 {
        s.push(rotating_lo(k), Busy::default(), "idle");
    }
    assert_eq!(s.held().iter().filter(|t| ***t == "login").count(), 1, "the login in its check was closed");
    assert_eq!(s.held().len(), 128);
}

#[test]
fn a_tie_between_groups_closes_the_latecomer() {
    let mut s = Slots::new(3);
    for (i, a) in ["10.0.0.1", "10.0.1.1", "10.0.2.1"].into_iter().enumerate() {
        s.push(ip(a), Busy::default(), i);
    }
    s.push(ip("10.0.3.1"), Busy::default(), 3);
    assert_eq!(s.held(), [&0, &1, &3], "each group holds one: the newest of them went, not the oldest");
}

#[test]
fn a_busy_connection_goes_only_when_all_are_busy() {
    let mut s = Slots::new(2);
    let (a, b) = (Busy::default(), Busy::default());
    let (_a, _b) = (a.serving(), b.serving());
    s.push(ip("10.0.0.1"), a, 1);
    s.push(ip("10.0.0.2"), Busy::default(), 2);
    s.push(ip("10.0.0.3"), b, 3);
    assert_eq!(s.held(), [&1, &3], "the idle one went, though the busy one is older");
    s.push(ip("10.0.1.1"), Busy::default(), 4);
    assert_eq!(s.held(), [&1, &4], "all busy: the group holding the most lost its newest");
}

#[test]
fn a_request_answered_makes_its_connection_idle_again() {
    let mut s = Slots::new(3);
    let (a, b) = (Busy::default(), Busy::default());
    let (serving, _b) = (a.serving(), b.serving());
    s.push(ip("10.0.0.1"), a, 1);
    s.push(ip("10.0.0.2"), b, 2);
    s.push(ip("10.0.1.1"), Busy::default(), 3);
    s.close_one();
    assert_eq!(s.held(), [&1, &2], "the group holding the most serves on both: the other's idle one went");
    drop(serving);
    s.push(ip("10.0.1.2"), Busy::default(), 4);
    s.close_one();
    assert_eq!(s.held(), [&2, &4], "answered, the first is its group's one idle connection");
}
